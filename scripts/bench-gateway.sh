#!/usr/bin/env bash
# Gateway benchmark: infergate-gateway against nginx (HTTP/1.1 keep-alive proxying) and HAProxy (HTTP/1.1 in,
# HTTP/2 to the upstream with `proto h2`), all in front of the same upstream (infergate-bench-upstream), all
# driven by the same load generator (h2load --h1), side by side in one run.
#   bench-gateway.sh RELEASE_BIN_DIR
# Every proxy runs once per entry of BENCH_WORKERS (default "1 2"): the gateway with that many data workers
# (`listeners.worker_threads`), nginx with that many worker processes, HAProxy with that many threads,
# so each row compares like with like. Prints a markdown table for docs/benchmarks.md (## gateway). Uses ports
# 30000-30099 and a temp dir; every process it starts is stopped on exit.
#
# Columns: max req/s (best-effort load, BENCH_CLIENTS keep-alive connections, median of BENCH_REPEAT runs taken
# in turn across the targets so background load hits them alike) and the proxy's CPU time per request meanwhile
# (user + system, all its processes, from /proc), and the upstream's (shared by all targets: how much of the
# machine each target's way of talking to it costs; for "direct", the upstream serving h2load itself); p99 latency at a fixed rate of half the best
# peer's max (same worker count) over 16 connections, and the proxy's CPU time per request at that rate
# (user + system, all its processes, from /proc); p50 latency at 200 req/s over one connection and what the
# proxy adds to it over going direct (both latencies: medians of BENCH_LAT_REPEAT rounds, default 3, taken in
# turn across the targets); RSS idle and peak (VmRSS / VmHWM summed over the proxy's processes).
#
# BENCH_BASELINE=DIR adds rows for the gateway binary in DIR (an earlier commit's release build), run next to
# this one with the same routes file, so a change is measured within the same rounds.
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
REPEAT="${BENCH_REPEAT:-3}"
LAT_REPEAT="${BENCH_LAT_REPEAT:-3}"
WORKERS="${BENCH_WORKERS:-1 2}"
BASELINE="${BENCH_BASELINE:-}"
[ -z "$BASELINE" ] || [ -x "$BASELINE/infergate-gateway" ] || { echo "bench-gateway: $BASELINE/infergate-gateway is missing" >&2; exit 1; }
UP=30001
TCK=$(getconf CLK_TCK)
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
tmp="$(mktemp -d)"
# The gateway watches its routes file's folder; h2load's per-request latency log goes elsewhere (in the same
# folder, every line it wrote woke the gateway's file watcher: ≈ 4.6 µs of gateway CPU per request, see
# docs/benchmarks.md, ## gateway, run 6).
mkdir "$tmp/conf"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT INT TERM

wait_port() { for _ in $(seq 1 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done; echo "port $1 did not open" >&2; exit 1; }
# A process and its children (nginx's workers).
tree() { echo "$1"; pgrep -P "$1" || true; }
sum_status() { local k=0; for p in $(tree "$1"); do k=$((k + $(awk -v f="$2:" '$1 == f {print $2}' "/proc/$p/status"))); done; echo "$k"; }
cpu_ticks() { local t=0; for p in $(tree "$1"); do t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done; echo "$t"; }

"$bin/infergate-bench-upstream" "127.0.0.1:$UP" & UPSTREAM=$!; pids+=($!); wait_port $UP

declare -A PORT=([direct]=$UP) PID LABEL=([direct]="direct to upstream")
TARGETS=(direct)
for w in $WORKERS; do
  gw=$((30010 + 2 * w)) ngx=$((30040 + w)) hap=$((30070 + w))
  cat > "$tmp/conf/routes-$w.yaml" <<YAML
listeners:
  data: { address: "127.0.0.1:$gw" }
  admin: { address: "127.0.0.1:$((gw + 1))" }
  worker_threads: $w
upstreams:
  - name: up
    endpoints: ["127.0.0.1:$UP"]
    protocol: h2c
routes:
  - name: all
    destinations: [{ upstream: up }]
YAML
  INFERGATE_LOG=warn "$bin/infergate-gateway" --config "$tmp/conf/routes-$w.yaml" & PID[gw$w]=$!; pids+=($!)
  if [ -n "$BASELINE" ]; then
    sed -e "s/127.0.0.1:$gw\"/127.0.0.1:$((30090 + 2 * w))\"/" -e "s/127.0.0.1:$((gw + 1))\"/127.0.0.1:$((30091 + 2 * w))\"/" \
      "$tmp/conf/routes-$w.yaml" > "$tmp/conf/routes-base-$w.yaml"
    INFERGATE_LOG=warn "$BASELINE/infergate-gateway" --config "$tmp/conf/routes-base-$w.yaml" & PID[base$w]=$!; pids+=($!)
  fi

  mkdir -p "$tmp/nginx-$w"
  cat > "$tmp/nginx-$w.conf" <<NGINX
worker_processes $w;
pid $tmp/nginx-$w/nginx.pid;
error_log $tmp/nginx-$w/error.log warn;
daemon off;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $tmp/nginx-$w; proxy_temp_path $tmp/nginx-$w; fastcgi_temp_path $tmp/nginx-$w;
  uwsgi_temp_path $tmp/nginx-$w; scgi_temp_path $tmp/nginx-$w;
  upstream up { server 127.0.0.1:$UP; keepalive 128; }
  server {
    listen 127.0.0.1:$ngx;
    keepalive_requests 1000000;
    location / { proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection ""; }
  }
}
NGINX
  nginx -c "$tmp/nginx-$w.conf" -p "$tmp/nginx-$w" & PID[nginx$w]=$!; pids+=($!)

  # HTTP/2 has no reason phrase, and HAProxy writes "HTTP/1.1 200 " without one; h2load 1.52 then cannot read
  # the status and counts every response as failed. The rule puts "OK" back (one status check per response).
  cat > "$tmp/haproxy-$w.cfg" <<HAP
global
  nbthread $w
defaults
  mode http
  timeout connect 5s
  timeout client 60s
  timeout server 60s
frontend fe
  bind 127.0.0.1:$hap
  default_backend be
backend be
  http-response set-status 200 reason OK if { status 200 }
  server s1 127.0.0.1:$UP proto h2
HAP
  haproxy -f "$tmp/haproxy-$w.cfg" -db & PID[haproxy$w]=$!; pids+=($!)

  PORT[gw$w]=$gw PORT[nginx$w]=$ngx PORT[haproxy$w]=$hap
  LABEL[gw$w]="infergate-gateway, $w thread(s)" LABEL[nginx$w]="nginx, $w worker(s)" LABEL[haproxy$w]="HAProxy (h2 upstream), $w thread(s)"
  TARGETS+=(gw$w nginx$w haproxy$w)
  if [ -n "$BASELINE" ]; then
    PORT[base$w]=$((30090 + 2 * w)) LABEL[base$w]="infergate-gateway baseline ($BASELINE), $w thread(s)"; TARGETS+=(base$w)
  fi
done
for t in "${TARGETS[@]}"; do wait_port "${PORT[$t]}"; done
sleep 1
declare -A IDLE
for t in "${TARGETS[@]}"; do [ "$t" = direct ] || IDLE[$t]=$(sum_status "${PID[$t]}" VmRSS); done

# Runs h2load and prints "succeeded_requests seconds"; warns when some requests did not succeed.
load() { # label h2load-args...
  local label=$1; shift
  local out; out=$(h2load --h1 "$@" 2>/dev/null)
  local ok failed secs
  ok=$(awk '/^requests:/ {print $8}' <<<"$out")
  failed=$(awk '/^requests:/ {print $10 + $12 + $14}' <<<"$out")
  secs=$(awk '/^finished in/ {v=$3; sub(",", "", v); if (v ~ /ms$/) {sub("ms", "", v); v /= 1000} else sub("s", "", v); print v}' <<<"$out")
  [ "${failed:-0}" = 0 ] || echo "bench-gateway: $label: $failed requests did not succeed" >&2
  echo "${ok:-0} ${secs:-1}"
}

# Throughput: as fast as each target goes with $CLIENTS keep-alive connections, the targets taken in turn; also
# the target's and the upstream's CPU time per request while saturated (they include the warm-up second, so they
# are approximate).
declare -A RUNS SATCPU UPCPU
per_req() { awk -v d="$1" -v n="$2" -v tck="$TCK" 'BEGIN {printf "%.1f", d * 1e6 / tck / n}'; }
for _ in $(seq 1 "$REPEAT"); do
  for t in "${TARGETS[@]}"; do
    before=0; [ "$t" = direct ] || before=$(cpu_ticks "${PID[$t]}")
    up_before=$(cpu_ticks "$UPSTREAM")
    read -r ok secs < <(load "$t" -c "$CLIENTS" -t "$THREADS" -D "$DURATION" --warm-up-time=1s "http://127.0.0.1:${PORT[$t]}/v2/models/simple/infer")
    up_after=$(cpu_ticks "$UPSTREAM")
    RUNS[$t]+="$(awk -v n="$ok" -v s="$secs" 'BEGIN {printf "%d", n / s}') "
    if [ "$ok" -gt 0 ]; then
      UPCPU[$t]+="$(per_req $(( up_after - up_before )) "$ok") "
      [ "$t" = direct ] || SATCPU[$t]+="$(per_req $(( $(cpu_ticks "${PID[$t]}") - before )) "$ok") "
    fi
  done
done
median() { tr ' ' '\n' <<<"$1" | awk 'NF' | sort -g | awk '{a[NR]=$1} END {if (NR) print a[int((NR + 1) / 2)]; else print "-"}'; }
declare -A RPS SAT UPSAT
for t in "${TARGETS[@]}"; do
  RPS[$t]=$(median "${RUNS[$t]}"); SAT[$t]=$(median "${SATCPU[$t]:-}"); UPSAT[$t]=$(median "${UPCPU[$t]:-}")
done

# Latency percentile (µs) at a fixed total rate; h2load's per-request log has the duration in µs in column 3.
# Prints "percentile cpu_µs_per_request" (the target's CPU time per request at that rate; "-" for direct).
# h2load appends to an existing log file, so each run starts from an empty one: otherwise a percentile would
# be taken over every earlier run of every target (before commit "fix(bench): …log per latency run" it was).
pct_at_rate() { # target rate clients percentile
  local t=$1 per=$(( $2 / $3 )) cpu="-"; [ "$per" -ge 1 ] || per=1
  local before=0; [ "$t" = direct ] || before=$(cpu_ticks "${PID[$t]}")
  rm -f "$tmp/lat.log"
  read -r ok _ < <(load "$t" -c "$3" -t 1 --rps "$per" -D "$DURATION" --log-file "$tmp/lat.log" "http://127.0.0.1:${PORT[$t]}/v2/models/simple/infer")
  if [ "$t" != direct ] && [ "$ok" -gt 0 ]; then
    cpu=$(awk -v d=$(( $(cpu_ticks "${PID[$t]}") - before )) -v n="$ok" -v tck="$TCK" 'BEGIN {printf "%.1f", d * 1e6 / tck / n}')
  fi
  echo "$(sort -n -k3 "$tmp/lat.log" | awk -v p="$4" '{a[NR]=$3} END {i=int(NR*p/100); if (i<1) i=1; print a[i]}') $cpu"
}

declare -A P99 P50 HALF CPU
for w in $WORKERS; do
  best=$(( RPS[nginx$w] > RPS[haproxy$w] ? RPS[nginx$w] : RPS[haproxy$w] ))
  HALF[gw$w]=$(( best / 2 )) HALF[nginx$w]=$(( best / 2 )) HALF[haproxy$w]=$(( best / 2 )) HALF[base$w]=$(( best / 2 ))
done
HALF[direct]=${HALF[gw${WORKERS%% *}]}
# Latency rounds taken in turn over the targets, as for throughput; the table gives the medians.
declare -A P99S P50S CPUS
for _ in $(seq 1 "$LAT_REPEAT"); do
  for t in "${TARGETS[@]}"; do
    read -r p c < <(pct_at_rate "$t" "${HALF[$t]}" 16 99); P99S[$t]+="$p "; [ "$c" = - ] || CPUS[$t]+="$c "
    read -r p _ < <(pct_at_rate "$t" 200 1 50); P50S[$t]+="$p "
  done
done
for t in "${TARGETS[@]}"; do
  P99[$t]=$(median "${P99S[$t]}"); P50[$t]=$(median "${P50S[$t]}"); CPU[$t]=$(median "${CPUS[$t]:-}")
done
declare -A HWM
for t in "${TARGETS[@]}"; do [ "$t" = direct ] || HWM[$t]=$(sum_status "${PID[$t]}" VmHWM); done

echo
echo "| target | max req/s ($CLIENTS conns, median of $REPEAT runs) | CPU µs/req saturated | upstream CPU µs/req meanwhile | p99 µs at ½ best peer (rate; median of $LAT_REPEAT) | CPU µs/req at that rate | p50 µs at 200 req/s, 1 conn (median of $LAT_REPEAT) | added p50 µs | RSS idle MB | RSS peak MB |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for t in "${TARGETS[@]}"; do
  added=$(( P50[$t] - P50[direct] ))
  if [ "$t" = direct ]; then idle="-"; peak="-"; added="-"; else
    idle=$(awk -v k="${IDLE[$t]}" 'BEGIN {printf "%.1f", k/1024}'); peak=$(awk -v k="${HWM[$t]}" 'BEGIN {printf "%.1f", k/1024}'); fi
  echo "| ${LABEL[$t]} | ${RPS[$t]} (${RUNS[$t]% }) | ${SAT[$t]} | ${UPSAT[$t]} | ${P99[$t]} (${HALF[$t]}/s) | ${CPU[$t]} | ${P50[$t]} | $added | $idle | $peak |"
done
# Background load moves between rounds far more than the targets differ, so also compare within each round:
# the gateway's req/s over the better peer's at the same worker count, run next to each other.
for w in $WORKERS; do
  read -r -a g <<<"${RUNS[gw$w]}"; read -r -a n <<<"${RUNS[nginx$w]}"; read -r -a h <<<"${RUNS[haproxy$w]}"
  ratios=""
  for i in "${!g[@]}"; do
    ratios+="$(awk -v a="${g[$i]}" -v b="${n[$i]}" -v c="${h[$i]}" 'BEGIN {m = b > c ? b : c; if (m > 0) printf "%.2f", a / m; else printf "-"}') "
  done
  echo
  echo "infergate-gateway, $w thread(s), req/s over the better peer's in the same round: median $(median "$ratios") (${ratios% })"
  if [ -n "$BASELINE" ]; then
    read -r -a o <<<"${RUNS[base$w]}"
    ratios=""
    for i in "${!g[@]}"; do ratios+="$(awk -v a="${g[$i]}" -v b="${o[$i]}" 'BEGIN {if (b > 0) printf "%.2f", a / b; else printf "-"}') "; done
    echo
    echo "infergate-gateway, $w thread(s), req/s over the baseline's in the same round: median $(median "$ratios") (${ratios% })"
  fi
done
echo
echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo); load average before the run: $LOAD_BEFORE; after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "$(nginx -v 2>&1 | sed 's/.*: //'); $(haproxy -v | head -1 | awk '{print "HAProxy " $3}'); $(h2load --version | head -1); window $DURATION"
