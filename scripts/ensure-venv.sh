#!/usr/bin/env bash
# Creates (or refreshes) the Python virtualenv used by the client tests and the ONNX reference.
#   ensure-venv.sh VENV_DIR
# Re-installs only when scripts/requirements.txt changed since the last install.
set -euo pipefail
venv="${1:?usage: ensure-venv.sh VENV_DIR}"
here="$(cd "$(dirname "$0")" && pwd)"
req="$here/requirements.txt"
stamp="$venv/.infergate-requirements.sha256"
want="$(sha256sum "$req" | cut -d' ' -f1)"
if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
echo "==> preparing Python venv at $venv (tritonclient, kserve, onnx, onnxruntime)"
python3 -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check --upgrade pip
"$venv/bin/pip" install -q --disable-pip-version-check -r "$req"
echo "$want" > "$stamp"
