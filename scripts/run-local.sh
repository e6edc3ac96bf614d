#!/usr/bin/env bash
# Starts the pod's two processes on the example in deploy/local/: the backend, then the gateway in front of it.
#   run-local.sh BIN_DIR [PID_FILE]        (PID_FILE: see run-pod.sh; `make stop` reads it)
set -euo pipefail
bin="${1:?usage: run-local.sh BIN_DIR [PID_FILE]}"
missing=()
[ -x "$bin/infergate-backend" ] || missing+=("infergate-backend (issue: backend)")
[ -x "$bin/infergate-gateway" ] || missing+=("infergate-gateway (issue: gateway)")
if [ ${#missing[@]} -ne 0 ]; then
  echo "make run: not built yet: ${missing[*]}." >&2
  echo "The config crate and its checks exist; the processes arrive with their issues (see README)." >&2
  exit 1
fi
exec "$(dirname "$0")/run-pod.sh" "$bin" "${2:-}"
