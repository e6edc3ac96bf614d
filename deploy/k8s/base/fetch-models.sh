#!/bin/sh
# The `fetch-models` init container: copies a Triton model repository from the models image into the
# pod's models volume (its own claim, or the shared claim of components/shared-models), adding what it lacks.
#   fetch-models.sh SOURCE DEST
# Version folders (<model>/<n>/) are immutable, as Triton treats them: one that exists in DEST is left alone,
# a new one is copied into a hidden staging folder of DEST (the backend ignores it; one per pod, so replicas
# sharing the volume do not collide) and renamed into place, so a backend polling the volume never loads a
# half-copied version. Each model's config.pbtxt is replaced the
# same way. Nothing in DEST is deleted: retire a version with the model's version_policy.
set -eu
src="${1:?usage: fetch-models.sh SOURCE DEST}"
dest="${2:?usage: fetch-models.sh SOURCE DEST}"
[ -d "$src" ] || { echo "fetch-models: no model repository at $src (is the models image built from one?)" >&2; exit 1; }
staging="$dest/.incoming-$(hostname)"
rm -rf "$staging"
mkdir -p "$staging"
added=0
for model_dir in "$src"/*/; do
  [ -d "$model_dir" ] || continue
  model="$(basename "$model_dir")"
  mkdir -p "$dest/$model"
  for version_dir in "$model_dir"*/; do
    version="$(basename "$version_dir")"
    case "$version" in *[!0-9]*) continue ;; esac   # only numeric folders are versions
    [ -d "$dest/$model/$version" ] && continue
    cp -R "$version_dir" "$staging/$model-$version"
    mv "$staging/$model-$version" "$dest/$model/$version"
    echo "fetch-models: added $model/$version"
    added=$((added + 1))
  done
  if [ -f "$model_dir/config.pbtxt" ] && ! cmp -s "$model_dir/config.pbtxt" "$dest/$model/config.pbtxt"; then
    cp "$model_dir/config.pbtxt" "$staging/$model.config.pbtxt"
    mv "$staging/$model.config.pbtxt" "$dest/$model/config.pbtxt"
    echo "fetch-models: updated $model/config.pbtxt"
  fi
done
rmdir "$staging"
echo "fetch-models: $added version(s) added; $(ls "$dest" | wc -l) model(s) in $dest"
