#!/usr/bin/env bash
# Runs every benchmark suite (scripts/bench-*.sh), each side by side with its peer, and prints where the
# figures go. Each suite writes its own table; docs/benchmarks.md records them with machine and command.
#   bench.sh RELEASE_BIN_DIR
set -euo pipefail
bin="${1:?usage: bench.sh RELEASE_BIN_DIR}"
here="$(cd "$(dirname "$0")" && pwd)"
shopt -s nullglob
suites=("$here"/bench-*.sh)
[ ${#suites[@]} -gt 0 ] || { echo "no benchmark suites yet" >&2; exit 1; }
for suite in "${suites[@]}"; do
  echo "==> $(basename "$suite")"
  "$suite" "$bin"
done
