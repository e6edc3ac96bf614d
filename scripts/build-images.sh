#!/usr/bin/env bash
# Builds infergate's container images with Docker, tagged with the workspace version:
#   infergate-gateway, infergate-backend, infergate-backend-mesa (deploy/docker/Dockerfile, one target each)
#   infergate-models (deploy/docker/models.Dockerfile, from the example repository deploy/local/models)
#   build-images.sh [REGISTRY_PREFIX]        e.g. build-images.sh registry.example.com/ml/
# Where there is no Docker engine, says so and exits 0: the images are for machines that have one.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
prefix="${1:-}"
if ! command -v docker >/dev/null 2>&1; then
  echo "make image: no docker command on this machine; nothing built (install Docker, or build" \
       "deploy/docker/Dockerfile with another OCI builder)."
  exit 0
fi
if ! docker info >/dev/null 2>&1; then
  echo "make image: docker cannot reach a Docker engine here (is the daemon running, may this user use it?);" \
       "nothing built."
  exit 0
fi
version="$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/Cargo.toml" | head -1)"
for target in gateway backend backend-mesa; do
  echo "==> ${prefix}infergate-$target:$version"
  docker build -f "$root/deploy/docker/Dockerfile" --target "$target" -t "${prefix}infergate-$target:$version" "$root"
done
echo "==> ${prefix}infergate-models:$version (deploy/local/models)"
docker build -f "$root/deploy/docker/models.Dockerfile" -t "${prefix}infergate-models:$version" \
  "$root/deploy/local/models"
docker image ls --filter "reference=${prefix}infergate-*:$version"
