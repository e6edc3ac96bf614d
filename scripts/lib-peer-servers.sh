# Sourced by the benchmarks that start infergate's backend beside a peer server (not a benchmark itself: the
# name keeps it out of bench.sh's `bench-*.sh`). Needs `$py`, the venv's Python.

# A TCP port free on loopback now.
free_port() { "$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Waits until `url` answers 200 (at most 180 s); otherwise prints the tail of `log` and exits.
wait_ready() {  # url name log
  for _ in $(seq 900); do
    curl -sf "$1" >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  echo "$2 did not become ready; its log:" >&2; tail -30 "$3" >&2; exit 1
}
