#!/usr/bin/env bash
# Runs the pod locally: the backend on deploy/local/models, then the gateway with deploy/local/routes.yaml
# in front of it. Ctrl-C, or `make stop` from another terminal, stops both: the gateway first (it drains),
# then the backend, as in the pod.
#   run-pod.sh BIN_DIR [PID_FILE]
# PID_FILE (default: $INFERGATE_RUN_PIDS, else ~/.cache/infergate/run-local.pids) lists "PID NAME" for this
# script and each process while they run; scripts/stop-local.sh reads it.
set -euo pipefail
bin="${1:?usage: run-pod.sh BIN_DIR [PID_FILE]}"
pid_file="${2:-${INFERGATE_RUN_PIDS:-$HOME/.cache/infergate/run-local.pids}}"
root="$(cd "$(dirname "$0")/.." && pwd)"
models="$root/deploy/local/models"
routes="$root/deploy/local/routes.yaml"

if [ -s "$pid_file" ]; then
  while read -r pid name; do
    if kill -0 "$pid" 2>/dev/null; then
      echo "make run: already running ($name, PID $pid, from $pid_file); \`make stop\` stops it." >&2
      exit 1
    fi
  done < "$pid_file"
fi
mkdir -p "$(dirname "$pid_file")"
echo "$$ run-pod.sh" > "$pid_file"

pids=()
stop() {
  trap - EXIT INT TERM
  # The gateway first, so it stops sending before the backend stops serving; then the backend.
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    kill -TERM "${pids[i]}" 2>/dev/null || true
    wait "${pids[i]}" 2>/dev/null || true
  done
  rm -f "$pid_file"
}
trap stop EXIT
trap 'exit 143' INT TERM

echo "==> checking $routes and $models"
"$bin/infergate-gateway" check "$routes"
"$bin/infergate-backend" check "$models"

echo "==> starting the backend (REST :8000, gRPC :8001, metrics :8002)"
"$bin/infergate-backend" --model-repository "$models" --http-port 8000 --grpc-port 8001 --metrics-port 8002 &
pids+=($!)
echo "$! infergate-backend" >> "$pid_file"
for _ in $(seq 1 100); do
  curl -fsS -o /dev/null http://127.0.0.1:8000/v2/health/ready 2>/dev/null && break
  kill -0 "${pids[0]}" 2>/dev/null || { echo "the backend exited; see its log above" >&2; exit 1; }
  sleep 0.1
done
curl -fsS -o /dev/null http://127.0.0.1:8000/v2/health/ready || { echo "the backend did not become ready in 10 s" >&2; exit 1; }

echo "==> starting the gateway (data :8080, admin :9901)"
"$bin/infergate-gateway" --config "$routes" &
pids+=($!)
echo "$! infergate-gateway" >> "$pid_file"
for _ in $(seq 1 50); do
  curl -fsS -o /dev/null http://127.0.0.1:9901/ready 2>/dev/null && break
  sleep 0.1
done

cat <<MSG

infergate is running.
  gateway   http://127.0.0.1:8080   (HTTP/1.1, h2c, gRPC)     admin  http://127.0.0.1:9901/config  /metrics  /canary
  backend   http://127.0.0.1:8000   gRPC 127.0.0.1:8001         metrics http://127.0.0.1:8002/metrics

Try a request through the gateway (model 'simple' is split 90/10 between versions 1 and 2):

  curl -s http://127.0.0.1:8080/v2/models/simple/infer -H 'x-caller-id: alice' \\
       -d '{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}'

Edit $routes and the gateway picks the change up live. Ctrl-C here, or \`make stop\` elsewhere, stops both.
MSG
wait -n "${pids[@]}"
