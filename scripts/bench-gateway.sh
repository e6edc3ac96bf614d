#!/usr/bin/env bash
# Gateway benchmark: infergate-gateway against nginx (HTTP/1.1 keep-alive proxying) and HAProxy (HTTP/1.1 in,
# HTTP/2 to the upstream with `proto h2`), all in front of the same upstream (infergate-bench-upstream), all
# driven by the same load generator (h2load --h1), side by side in one run. The gateway runs twice: with an
# h2c upstream (its default, what HAProxy does here) and with an HTTP/1.1 keep-alive upstream (what nginx does).
#   bench-gateway.sh RELEASE_BIN_DIR
# Every proxy runs once per entry of BENCH_WORKERS (default "1 2"): the gateway with that many data workers
# (`listeners.worker_threads`), nginx with that many worker processes, HAProxy with that many threads,
# so each row compares like with like. Each peer also runs a second time doing the gateway's header work (an
# x-request-id generated, sent upstream and echoed, x-forwarded-for appended: the "+ request id and XFF" rows),
# so the comparison can be made on the same work as well as against the peer's plain config. Prints a markdown
# table for docs/benchmarks.md (## gateway). Uses ports 30000-30099 and a temp dir; every process it starts is
# stopped on exit.
#
# Columns: max req/s (best-effort load, BENCH_CLIENTS keep-alive connections, median of BENCH_REPEAT runs taken
# in turn across the targets so background load hits them alike) and the proxy's CPU time per request meanwhile
# (user + system, all its processes, from /proc), and the upstream's (shared by all targets: how much of the
# machine each target's way of talking to it costs; for "direct", the upstream serving h2load itself); p99
# latency at a fixed rate of half the best plain peer's max (same worker count) over 16 connections, and the
# proxy's CPU time per request at that rate; p50 latency at 200 and at 1,000 req/s over one connection and what
# the proxy adds to it over going direct (on this VM the 200 req/s figure is mostly what the hops that land on the
# other, idle vCPU cost, and a proxy adds two hops: docs/benchmarks-history.md, gateway, *a quiet host, and light load on one CPU*). The latencies are
# medians of BENCH_LAT_REPEAT rounds (default 3) taken in turn across the targets. The same p50 at 200 req/s
# with h2load, the target and the upstream all held on CPU 0 (taskset, every thread; put back afterwards): no
# hop then lands on the other vCPU, so "added" is the proxy's own share of the round trip . RSS idle
# and peak: VmRSS / VmHWM summed over the proxy's processes. Last column (one-worker targets): max
# req/s again with the proxy alone on CPU 0 and the upstream and h2load on CPU 1, as a sidecar with a dedicated
# core runs, so the scheduler's placement of woken threads does not decide the figure.
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

# The defaults keep `make bench` to minutes (about 8 for this suite on 2 cores): 3-second throughput windows and
# 2-second latency windows (at the rates below even the one-connection p50 at 200 req/s rests on 400 requests).
DURATION="${BENCH_DURATION:-3s}"
LAT_DURATION="${BENCH_LAT_DURATION:-2s}"
CLIENTS="${BENCH_CLIENTS:-64}"
THREADS="${BENCH_THREADS:-1}"
REPEAT="${BENCH_REPEAT:-3}"
LAT_REPEAT="${BENCH_LAT_REPEAT:-3}"
WORKERS="${BENCH_WORKERS:-1 2}"
FIRST_WORKERS=${WORKERS%% *}
BASELINE="${BENCH_BASELINE:-}"
[ -z "$BASELINE" ] || [ -x "$BASELINE/infergate-gateway" ] || { echo "bench-gateway: $BASELINE/infergate-gateway is missing" >&2; exit 1; }
UP=30001
ALL_CPUS="0-$(( $(nproc) - 1 ))"
TCK=$(getconf CLK_TCK)
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
tmp="$(mktemp -d)"
# The gateway watches its routes file's folder; h2load's per-request latency log goes elsewhere (in the same
# folder, every line it wrote woke the gateway's file watcher: ≈ 4.6 µs of gateway CPU per request, see
# docs/benchmarks-history.md, gateway, *the file watcher off the request path*).
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

# The peers, each with $w workers (set by the loop below). start_nginx TARGET PORT HTTP_EXTRA LOCATION_EXTRA: nginx
# proxying HTTP/1.1 keep-alive to the upstream. start_haproxy TARGET PORT FRONTEND_EXTRA: HAProxy taking HTTP/1.1
# and speaking h2 to the upstream.
start_nginx() {
  local t=$1 port=$2 http_extra=$3 location_extra=$4 d="$tmp/$1"
  mkdir -p "$d"
  cat > "$d.conf" <<NGINX
worker_processes $w;
pid $d/nginx.pid;
error_log $d/error.log warn;
daemon off;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $d; proxy_temp_path $d; fastcgi_temp_path $d; uwsgi_temp_path $d; scgi_temp_path $d;
  upstream up { server 127.0.0.1:$UP; keepalive 128; }
  $http_extra
  server {
    listen 127.0.0.1:$port;
    keepalive_requests 1000000;
    location / { proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection ""; $location_extra }
  }
}
NGINX
  nginx -c "$d.conf" -p "$d" & PID[$t]=$!; pids+=($!)
}
# HTTP/2 has no reason phrase, and HAProxy writes "HTTP/1.1 200 " without one; h2load 1.52 then cannot read
# the status and counts every response as failed. The rule puts "OK" back (one status check per response).
start_haproxy() {
  local t=$1 port=$2 frontend_extra=$3
  cat > "$tmp/$t.cfg" <<HAP
global
  nbthread $w
defaults
  mode http
  timeout connect 5s
  timeout client 60s
  timeout server 60s
frontend fe
  bind 127.0.0.1:$port
$frontend_extra
  default_backend be
backend be
  http-response set-status 200 reason OK if { status 200 }
  server s1 127.0.0.1:$UP proto h2
HAP
  haproxy -f "$tmp/$t.cfg" -db & PID[$t]=$!; pids+=($!)
}
# "Same work": the headers the gateway adds to every request, done by the peer too — an x-request-id (the
# caller's, or a generated one) sent upstream and echoed in the response, and x-forwarded-for appended — as Envoy
# does by default. (The gateway also counts every request in Prometheus metrics; the peers count nothing.)
NGINX_SAME_WORK_HTTP='map $http_x_request_id $rid { "" $request_id; default $http_x_request_id; }'
NGINX_SAME_WORK_LOCATION='proxy_set_header X-Request-ID $rid; proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for; add_header X-Request-ID $rid always;'
HAPROXY_SAME_WORK='  option forwardfor
  http-request set-var(txn.rid) req.hdr(x-request-id)
  http-request set-var(txn.rid) uuid() unless { var(txn.rid) -m found }
  http-request set-header X-Request-ID %[var(txn.rid)]
  http-response set-header X-Request-ID %[var(txn.rid)]'

declare -A PORT=([direct]=$UP) PID LABEL=([direct]="direct to upstream") WORKERS_OF=([direct]=$FIRST_WORKERS)
TARGETS=(direct)
for w in $WORKERS; do
  gw=$((30010 + 2 * w)) ngx=$((30040 + w)) ngxh=$((30050 + w)) hap=$((30070 + w)) haph=$((30080 + w))
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
  # The same gateway speaking HTTP/1.1 keep-alive to the upstream, as nginx does.
  gwh1=$((30020 + 2 * w))
  sed -e "s/127.0.0.1:$gw\"/127.0.0.1:$gwh1\"/" -e "s/127.0.0.1:$((gw + 1))\"/127.0.0.1:$((gwh1 + 1))\"/" \
    -e "s/protocol: h2c/protocol: http1/" "$tmp/conf/routes-$w.yaml" > "$tmp/conf/routes-h1-$w.yaml"
  INFERGATE_LOG=warn "$bin/infergate-gateway" --config "$tmp/conf/routes-h1-$w.yaml" & PID[gwh1$w]=$!; pids+=($!)
  if [ -n "$BASELINE" ]; then
    sed -e "s/127.0.0.1:$gw\"/127.0.0.1:$((30090 + 2 * w))\"/" -e "s/127.0.0.1:$((gw + 1))\"/127.0.0.1:$((30091 + 2 * w))\"/" \
      "$tmp/conf/routes-$w.yaml" > "$tmp/conf/routes-base-$w.yaml"
    INFERGATE_LOG=warn "$BASELINE/infergate-gateway" --config "$tmp/conf/routes-base-$w.yaml" & PID[base$w]=$!; pids+=($!)
  fi

  start_nginx "nginx$w" "$ngx" "" ""
  start_nginx "nginxh$w" "$ngxh" "$NGINX_SAME_WORK_HTTP" "$NGINX_SAME_WORK_LOCATION"
  start_haproxy "haproxy$w" "$hap" ""
  start_haproxy "haproxyh$w" "$haph" "$HAPROXY_SAME_WORK"

  PORT[gw$w]=$gw PORT[gwh1$w]=$gwh1 PORT[nginx$w]=$ngx PORT[haproxy$w]=$hap PORT[nginxh$w]=$ngxh PORT[haproxyh$w]=$haph
  LABEL[gw$w]="infergate-gateway (h2 upstream), $w thread(s)" LABEL[gwh1$w]="infergate-gateway (HTTP/1.1 upstream), $w thread(s)" LABEL[nginx$w]="nginx, $w worker(s)" LABEL[haproxy$w]="HAProxy (h2 upstream), $w thread(s)"
  LABEL[nginxh$w]="nginx + request id and XFF, $w worker(s)" LABEL[haproxyh$w]="HAProxy (h2 upstream) + request id and XFF, $w thread(s)"
  TARGETS+=(gw$w gwh1$w nginx$w nginxh$w haproxy$w haproxyh$w)
  if [ -n "$BASELINE" ]; then
    PORT[base$w]=$((30090 + 2 * w)) LABEL[base$w]="infergate-gateway baseline ($BASELINE), $w thread(s)"; TARGETS+=(base$w)
  fi
done
for t in "${TARGETS[@]}"; do wait_port "${PORT[$t]}"; done
sleep 1
declare -A IDLE
for t in "${TARGETS[@]}"; do [ "$t" = direct ] || IDLE[$t]=$(sum_status "${PID[$t]}" VmRSS); done

# Runs h2load and prints "succeeded_requests seconds", the seconds h2load measured (its "finished in" counts
# the warm-up too: WARM_UP seconds with requests running and none counted); warns when some did not succeed.
WARM_UP=1
load() { # label warm-up-seconds h2load-args... (h2load runs on CPUs $ON_CPUS when set, else on all)
  local label=$1 warm=$2; shift 2
  local out; out=$(taskset -c "${ON_CPUS:-$ALL_CPUS}" h2load --h1 "$@" 2>/dev/null)
  local ok failed secs
  ok=$(awk '/^requests:/ {print $8}' <<<"$out")
  failed=$(awk '/^requests:/ {print $10 + $12 + $14}' <<<"$out")
  secs=$(awk -v w="$warm" '/^finished in/ {v=$3; sub(",", "", v); if (v ~ /ms$/) {sub("ms", "", v); v /= 1000} else sub("s", "", v); print v - w}' <<<"$out")
  [ "${failed:-0}" = 0 ] || echo "bench-gateway: $label: $failed requests did not succeed" >&2
  echo "${ok:-0} ${secs:-1}"
}

# Throughput: as fast as each target goes with $CLIENTS keep-alive connections, the targets taken in turn; also
# the target's and the upstream's CPU time per request while saturated, read after h2load's warm-up so that
# they cover the measured window (before commit "fix(bench): throughput over h2load's measured window…" both
# req/s and CPU counted the warm-up second: req/s read 3/4 of the true rate, CPU per request 4/3 of it).
declare -A RUNS SATCPU UPCPU
per_req() { awk -v d="$1" -v n="$2" -v tck="$TCK" 'BEGIN {printf "%.1f", d * 1e6 / tck / n}'; }
rate() { awk -v n="$1" -v s="$2" 'BEGIN {printf "%d", n / s}'; } # requests seconds: req/s
for _ in $(seq 1 "$REPEAT"); do
  for t in "${TARGETS[@]}"; do
    load "$t" "$WARM_UP" -c "$CLIENTS" -t "$THREADS" -D "$DURATION" --warm-up-time="${WARM_UP}s" \
      "http://127.0.0.1:${PORT[$t]}/v2/models/simple/infer" > "$tmp/load.out" &
    h2=$!
    sleep "$WARM_UP"
    before=0; [ "$t" = direct ] || before=$(cpu_ticks "${PID[$t]}")
    up_before=$(cpu_ticks "$UPSTREAM")
    wait "$h2"
    up_after=$(cpu_ticks "$UPSTREAM")
    after=0; [ "$t" = direct ] || after=$(cpu_ticks "${PID[$t]}")
    read -r ok secs < "$tmp/load.out"
    RUNS[$t]+="$(rate "$ok" "$secs") "
    if [ "$ok" -gt 0 ]; then
      UPCPU[$t]+="$(per_req $(( up_after - up_before )) "$ok") "
      [ "$t" = direct ] || SATCPU[$t]+="$(per_req $(( after - before )) "$ok") "
    fi
  done
done
median() { tr ' ' '\n' <<<"$1" | awk 'NF' | sort -g | awk '{a[NR]=$1} END {if (NR) print a[int((NR + 1) / 2)]; else print "-"}'; }

# Holds every thread of the upstream and of target $2's processes on CPUs $1 (the target's own runtime threads,
# nginx's workers, HAProxy's threads alike).
pin() { # cpus target
  local p; for p in $UPSTREAM $( [ "$2" = direct ] || tree "${PID[$2]}" ); do taskset -a -p -c "$1" "$p" >/dev/null; done
}
pin_apart() { # target: the target on CPU 0, the upstream on CPU 1
  local p; taskset -a -p -c 1 "$UPSTREAM" >/dev/null
  for p in $(tree "${PID[$1]}"); do taskset -a -p -c 0 "$p" >/dev/null; done
}
# Throughput again with the proxy on a CPU of its own (one-worker targets only): the proxy held on CPU 0, the
# upstream and h2load on CPU 1, the targets taken in turn as above. Unpinned, the scheduler puts a thread woken by
# a socket write on the writer's CPU whenever the other CPU is busy at that moment, so the load generator or the
# upstream often waits behind the proxy while the other CPU idles; how much depends on how the three happen to
# interleave, not only on the proxy's work (docs/benchmarks-history.md, gateway, *where the idle time goes*). Pinned, each proxy is
# measured as a sidecar with a dedicated core would run.
declare -A PRUNS
PTARGETS=()
if [[ " $WORKERS " == *" 1 "* ]] && [ "$(nproc)" -ge 2 ]; then
  for t in gw1 gwh11 nginx1 nginxh1 haproxy1 haproxyh1 base1; do [ -z "${PORT[$t]:-}" ] || PTARGETS+=("$t"); done
  for _ in $(seq 1 "$REPEAT"); do
    for t in "${PTARGETS[@]}"; do
      pin_apart "$t"
      ON_CPUS=1 load "$t" "$WARM_UP" -c "$CLIENTS" -t "$THREADS" -D "$DURATION" --warm-up-time="${WARM_UP}s" \
        "http://127.0.0.1:${PORT[$t]}/v2/models/simple/infer" > "$tmp/load.out"
      pin "$ALL_CPUS" "$t"
      read -r ok secs < "$tmp/load.out"
      PRUNS[$t]+="$(rate "$ok" "$secs") "
    done
  done
fi
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
  read -r ok _ < <(load "$t" 0 -c "$3" -t 1 --rps "$per" -D "$LAT_DURATION" --log-file "$tmp/lat.log" "http://127.0.0.1:${PORT[$t]}/v2/models/simple/infer")
  if [ "$t" != direct ] && [ "$ok" -gt 0 ]; then
    cpu=$(awk -v d=$(( $(cpu_ticks "${PID[$t]}") - before )) -v n="$ok" -v tck="$TCK" 'BEGIN {printf "%.1f", d * 1e6 / tck / n}')
  fi
  echo "$(sort -n -k3 "$tmp/lat.log" | awk -v p="$4" '{a[NR]=$3} END {i=int(NR*p/100); if (i<1) i=1; print a[i]}') $cpu"
}

p50_one_cpu() { # target: p50 µs at 200 req/s over one connection, everything on CPU 0
  pin 0 "$1"
  local p; read -r p _ < <(ON_CPUS=0 pct_at_rate "$1" 200 1 50)
  pin "$ALL_CPUS" "$1"
  echo "$p"
}
declare -A P99 P50 P50_1K HALF CPU P50P
for w in $WORKERS; do
  best=$(( RPS[nginx$w] > RPS[haproxy$w] ? RPS[nginx$w] : RPS[haproxy$w] ))
  for t in gw gwh1 nginx nginxh haproxy haproxyh base; do HALF[$t$w]=$(( best / 2 )) WORKERS_OF[$t$w]=$w; done
done
HALF[direct]=${HALF[gw$FIRST_WORKERS]}
# Latency rounds taken in turn over the targets, as for throughput; the table gives the medians. The
# one-connection p50s are taken at the first worker count only: one connection is served by one worker, so the
# other counts would repeat them ("-" in their rows).
declare -A P99S P50S P50K CPUS P50PS
one_conn() { [ "${WORKERS_OF[$1]}" = "$FIRST_WORKERS" ]; }
for _ in $(seq 1 "$LAT_REPEAT"); do
  for t in "${TARGETS[@]}"; do
    read -r p c < <(pct_at_rate "$t" "${HALF[$t]}" 16 99); P99S[$t]+="$p "; [ "$c" = - ] || CPUS[$t]+="$c "
    one_conn "$t" || continue
    read -r p _ < <(pct_at_rate "$t" 200 1 50); P50S[$t]+="$p "
    read -r p _ < <(pct_at_rate "$t" 1000 1 50); P50K[$t]+="$p "
    P50PS[$t]+="$(p50_one_cpu "$t") "
  done
done
for t in "${TARGETS[@]}"; do
  P99[$t]=$(median "${P99S[$t]}"); P50[$t]=$(median "${P50S[$t]:-}"); P50_1K[$t]=$(median "${P50K[$t]:-}")
  CPU[$t]=$(median "${CPUS[$t]:-}"); P50P[$t]=$(median "${P50PS[$t]:-}")
done
declare -A HWM
for t in "${TARGETS[@]}"; do [ "$t" = direct ] || HWM[$t]=$(sum_status "${PID[$t]}" VmHWM); done

echo
echo "| target | max req/s ($CLIENTS conns, median of $REPEAT runs) | CPU µs/req saturated | upstream CPU µs/req meanwhile | p99 µs at ½ best peer (rate; median of $LAT_REPEAT) | CPU µs/req at that rate | p50 µs at 200 req/s, 1 conn (median of $LAT_REPEAT) | added p50 µs | p50 µs at 1,000 req/s, 1 conn | added p50 µs | p50 µs at 200 req/s, all on one CPU | added p50 µs | RSS idle MB | RSS peak MB | max req/s, proxy alone on CPU 0 (1 worker; median of $REPEAT runs) |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
for t in "${TARGETS[@]}"; do
  added="-" added_1k="-" added_p="-"
  if [ "${P50[$t]}" != - ]; then
    added=$(( P50[$t] - P50[direct] )) added_1k=$(( P50_1K[$t] - P50_1K[direct] )) added_p=$(( P50P[$t] - P50P[direct] ))
  fi
  pinned="-"; [ -z "${PRUNS[$t]:-}" ] || pinned="$(median "${PRUNS[$t]}") (${PRUNS[$t]% })"
  if [ "$t" = direct ]; then idle="-"; peak="-"; added="-"; added_1k="-"; added_p="-"; else
    idle=$(awk -v k="${IDLE[$t]}" 'BEGIN {printf "%.1f", k/1024}'); peak=$(awk -v k="${HWM[$t]}" 'BEGIN {printf "%.1f", k/1024}'); fi
  echo "| ${LABEL[$t]} | ${RPS[$t]} (${RUNS[$t]% }) | ${SAT[$t]} | ${UPSAT[$t]} | ${P99[$t]} (${HALF[$t]}/s) | ${CPU[$t]} | ${P50[$t]} | $added | ${P50_1K[$t]} | $added_1k | ${P50P[$t]} | $added_p | $idle | $peak | $pinned |"
done
# Background load moves between rounds far more than the targets differ, so also compare within each round:
# the gateway's req/s over the better peer's at the same worker count, run next to each other.
within_round() { # label target peer-a peer-b [runs]: the gateway's req/s over the better of two peers, per round
  local -n runs=${5:-RUNS}
  local -a g a b; read -r -a g <<<"${runs[$2]}"; read -r -a a <<<"${runs[$3]}"; read -r -a b <<<"${runs[$4]}"
  local ratios="" i
  for i in "${!g[@]}"; do
    ratios+="$(awk -v x="${g[$i]}" -v p="${a[$i]}" -v q="${b[$i]}" 'BEGIN {m = p > q ? p : q; if (m > 0) printf "%.2f", x / m; else printf "-"}') "
  done
  echo
  echo "$1: median $(median "$ratios") (${ratios% })"
}
for w in $WORKERS; do
  within_round "infergate-gateway (h2 upstream), $w thread(s), req/s over the better peer's in the same round" gw$w nginx$w haproxy$w
  within_round "infergate-gateway (h2 upstream), $w thread(s), req/s over the better peer's doing the same header work, same round" gw$w nginxh$w haproxyh$w
  within_round "infergate-gateway (HTTP/1.1 upstream), $w thread(s), req/s over the better peer's in the same round" gwh1$w nginx$w haproxy$w
  within_round "infergate-gateway (HTTP/1.1 upstream), $w thread(s), req/s over the better peer's doing the same header work, same round" gwh1$w nginxh$w haproxyh$w
  [ -z "$BASELINE" ] || within_round "infergate-gateway, $w thread(s), req/s over the baseline's in the same round" gw$w base$w base$w
done
if [ "${#PTARGETS[@]}" -gt 0 ]; then
  within_round "proxy alone on CPU 0: infergate-gateway (h2 upstream), 1 thread, req/s over the better peer's in the same round" gw1 nginx1 haproxy1 PRUNS
  within_round "proxy alone on CPU 0: infergate-gateway (h2 upstream), 1 thread, req/s over the better peer's doing the same header work, same round" gw1 nginxh1 haproxyh1 PRUNS
  within_round "proxy alone on CPU 0: infergate-gateway (HTTP/1.1 upstream), 1 thread, req/s over the better peer's in the same round" gwh11 nginx1 haproxy1 PRUNS
fi
echo
echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo); load average before the run: $LOAD_BEFORE; after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "$(nginx -v 2>&1 | sed 's/.*: //'); $(haproxy -v | head -1 | awk '{print "HAProxy " $3}'); $(h2load --version | head -1); windows $DURATION (throughput), $LAT_DURATION (latency)"
