#!/usr/bin/env bash
# Stops what `make run` started (scripts/run-pod.sh), in the pod's order: the gateway (it drains in-flight
# requests), then the backend, then run-pod.sh itself.
#   stop-local.sh [PID_FILE]       default: $INFERGATE_RUN_PIDS, else ~/.cache/infergate/run-local.pids
# A PID is signalled only while it still runs the program the file names, so a PID the system has since given to
# another process is left alone.
set -euo pipefail
pid_file="${1:-${INFERGATE_RUN_PIDS:-$HOME/.cache/infergate/run-local.pids}}"
if [ ! -s "$pid_file" ]; then
  echo "make stop: nothing to stop (no $pid_file: \`make run\` is not running)."
  exit 0
fi

# Runs PID the program NAME? (its command line's first or second word ends in NAME: bash scripts show as
# "bash .../run-pod.sh").
runs() {
  local pid="$1" name="$2" argv
  # The process may exit between any two reads: a vanished /proc entry means it does not run.
  argv="$( { tr '\0' '\n' < "/proc/$pid/cmdline"; } 2>/dev/null | head -2)" || return 1
  grep -q -- "$name\$" <<< "$argv"
}

stop_one() {
  local pid="$1" name="$2"
  runs "$pid" "$name" || return 0
  stopped=$((stopped + 1))
  echo "==> stopping $name (PID $pid)"
  kill -TERM "$pid" 2>/dev/null || return 0
  # The gateway drains for up to its drain_timeout (30 s by default); the backend for its exit timeout.
  for _ in $(seq 1 450); do
    runs "$pid" "$name" || return 0
    sleep 0.1
  done
  echo "make stop: $name (PID $pid) still runs after 45 s; sending SIGKILL" >&2
  kill -KILL "$pid" 2>/dev/null || true
}

stopped=0
declare -A pid_of
while read -r pid name; do pid_of[$name]="$pid"; done < "$pid_file"
for name in infergate-gateway infergate-backend run-pod.sh; do
  [ -n "${pid_of[$name]:-}" ] && stop_one "${pid_of[$name]}" "$name"
done
rm -f "$pid_file"
if [ "$stopped" -eq 0 ]; then
  echo "make stop: nothing was running (stale $pid_file removed)."
else
  echo "==> stopped"
fi
