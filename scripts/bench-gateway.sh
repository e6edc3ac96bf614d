#!/usr/bin/env bash
# Gateway benchmark: infergate-gateway against nginx (HTTP/1.1 keep-alive proxying) and HAProxy (HTTP/1.1 in,
# HTTP/2 to the upstream with `proto h2`), all in front of the same upstream (infergate-bench-upstream), all
# driven by the same load generator (h2load --h1), side by side in one run.
#   bench-gateway.sh RELEASE_BIN_DIR
# Prints a markdown table for docs/benchmarks.md (## gateway). Uses ports 30000-30099 and a temp dir; every
# process it starts is stopped on exit.
set -euo pipefail
bin="${1:?usage: bench-gateway.sh RELEASE_BIN_DIR}"
for tool in h2load nginx haproxy; do
  command -v "$tool" >/dev/null || { echo "bench-gateway: '$tool' is missing (apt-get install nghttp2-client nginx-light haproxy)" >&2; exit 1; }
done
for exe in infergate-gateway infergate-bench-upstream; do
  [ -x "$bin/$exe" ] || { echo "bench-gateway: $bin/$exe is missing: run 'make build-release'" >&2; exit 1; }
done

DURATION="${BENCH_DURATION:-10s}"
CLIENTS="${BENCH_CLIENTS:-64}"
THREADS="${BENCH_THREADS:-1}"
UP=30001 GW=30010 GW_ADMIN=30011 NGINX=30020 HAPROXY=30030
tmp="$(mktemp -d)"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT INT TERM

wait_port() { for _ in $(seq 1 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done; echo "port $1 did not open" >&2; exit 1; }
rss_kb() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }
hwm_kb() { awk '/^VmHWM/ {print $2}' "/proc/$1/status"; }

"$bin/infergate-bench-upstream" "127.0.0.1:$UP" & pids+=($!); wait_port $UP

cat > "$tmp/routes.yaml" <<YAML
listeners:
  data: { address: "127.0.0.1:$GW" }
  admin: { address: "127.0.0.1:$GW_ADMIN" }
upstreams:
  - name: up
    endpoints: ["127.0.0.1:$UP"]
    protocol: h2c
routes:
  - name: all
    destinations: [{ upstream: up }]
YAML
INFERGATE_LOG=warn "$bin/infergate-gateway" --config "$tmp/routes.yaml" & gw_pid=$!; pids+=($gw_pid); wait_port $GW

mkdir -p "$tmp/nginx"
cat > "$tmp/nginx.conf" <<NGINX
worker_processes 1;
pid $tmp/nginx/nginx.pid;
error_log $tmp/nginx/error.log warn;
daemon off;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $tmp/nginx; proxy_temp_path $tmp/nginx; fastcgi_temp_path $tmp/nginx;
  uwsgi_temp_path $tmp/nginx; scgi_temp_path $tmp/nginx;
  upstream up { server 127.0.0.1:$UP; keepalive 128; }
  server {
    listen 127.0.0.1:$NGINX;
    keepalive_requests 1000000;
    location / { proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection ""; }
  }
}
NGINX
nginx -c "$tmp/nginx.conf" -p "$tmp/nginx" & nginx_pid=$!; pids+=($nginx_pid); wait_port $NGINX

cat > "$tmp/haproxy.cfg" <<HAP
global
  nbthread 1
defaults
  mode http
  timeout connect 5s
  timeout client 60s
  timeout server 60s
frontend fe
  bind 127.0.0.1:$HAPROXY
  default_backend be
backend be
  server s1 127.0.0.1:$UP proto h2
HAP
haproxy -f "$tmp/haproxy.cfg" -db & hap_pid=$!; pids+=($hap_pid); wait_port $HAPROXY

declare -A PORT=([direct]=$UP [infergate]=$GW [nginx]=$NGINX [haproxy]=$HAPROXY)
declare -A PID=([infergate]=$gw_pid [nginx]=$nginx_pid [haproxy]=$hap_pid)
declare -A IDLE
for t in infergate nginx haproxy; do IDLE[$t]=$(rss_kb "${PID[$t]}"); done

# Throughput: as fast as the target goes with $CLIENTS keep-alive connections.
max_rps() {
  h2load --h1 -c "$CLIENTS" -t "$THREADS" -D "$DURATION" --warm-up-time=1s "http://127.0.0.1:$1/v2/models/simple/infer" 2>/dev/null \
    | awk '/^finished in/ {gsub(",", "", $4); print int($4)}'
}
# Latency percentile (µs) at a fixed total rate: h2load's per-request log, column 3 is the duration in µs.
pct_at_rate() { # port rate clients percentile
  local per=$(( $2 / $3 )); [ "$per" -ge 1 ] || per=1
  h2load --h1 -c "$3" -t 1 --rps "$per" -D "$DURATION" --log-file "$tmp/lat.log" "http://127.0.0.1:$1/v2/models/simple/infer" >/dev/null 2>&1
  sort -n -k3 "$tmp/lat.log" | awk -v p="$4" '{a[NR]=$3} END {i=int(NR*p/100); if (i<1) i=1; print a[i]}'
}

declare -A RPS P99 P50
for t in direct infergate nginx haproxy; do
  RPS[$t]=$(max_rps "${PORT[$t]}")
done
best_peer=$(( RPS[nginx] > RPS[haproxy] ? RPS[nginx] : RPS[haproxy] ))
half=$(( best_peer / 2 ))
for t in direct infergate nginx haproxy; do
  P99[$t]=$(pct_at_rate "${PORT[$t]}" "$half" 16 99)
  P50[$t]=$(pct_at_rate "${PORT[$t]}" 200 1 50)
done
declare -A HWM
for t in infergate nginx haproxy; do HWM[$t]=$(hwm_kb "${PID[$t]}"); done

echo
echo "| target | max req/s ($CLIENTS conns) | p99 µs at $half req/s | p50 µs at 200 req/s, 1 conn | added p50 µs | RSS idle MB | RSS peak MB |"
echo "|---|---|---|---|---|---|---|"
for t in direct infergate nginx haproxy; do
  added=$(( P50[$t] - P50[direct] ))
  if [ "$t" = direct ]; then idle="-"; peak="-"; added="-"; else
    idle=$(awk -v k="${IDLE[$t]}" 'BEGIN {printf "%.1f", k/1024}'); peak=$(awk -v k="${HWM[$t]}" 'BEGIN {printf "%.1f", k/1024}'); fi
  echo "| $t | ${RPS[$t]} | ${P99[$t]} | ${P50[$t]} | $added | $idle | $peak |"
done
echo
echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo); $(nginx -v 2>&1 | sed 's/.*: //'); $(haproxy -v | head -1 | awk '{print "HAProxy " $3}'); $(h2load --version | head -1)"
