#!/usr/bin/env bash
# What `make bench` runs: the scenarios of loadtests/cases/ through infergate-load (the fault drills excepted:
# `make drills` runs those in full), then every peer suite (scripts/bench-*.sh), each side by side with its peer.
# Every part's tables (its stdout) go to the terminal and into OUT_DIR/report.md, headed by the commit, the date,
# the machine and the load, and closed by the minutes each part took; docs/benchmarks.md records them. Progress
# and warnings (stderr) stay on the terminal, so infergate-load still draws its progress bar there.
# A part that fails is named at the end and the others still run.
#   bench.sh RELEASE_BIN_DIR OUT_DIR
set -uo pipefail
bin="${1:?usage: bench.sh RELEASE_BIN_DIR OUT_DIR}"
out="${2:?usage: bench.sh RELEASE_BIN_DIR OUT_DIR}"
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
mkdir -p "$out"
report="$out/report.md"
# The Triton suite reads the scenario's results from here rather than running it again.
export INFERGATE_LOADTESTS_OUT="$out"

{
  echo "# make bench"
  echo
  echo "commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$root" diff --quiet 2>/dev/null || echo ' (with uncommitted changes)'), $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo); load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$report"

scenarios=()
for dir in "$root"/loadtests/cases/*/; do
  case "$(basename "$dir")" in drill-*) ;; *) scenarios+=("${dir%/}") ;; esac
done

timings=() failed=()
part() { # name command...: runs one part, its tables to the terminal and the report, and times it
  local name=$1 start=$SECONDS; shift
  printf '\n## %s\n\n```\n' "$name" >>"$report"
  echo "==> $name"
  "$@" | tee -a "$report"
  local rc=${PIPESTATUS[0]}
  printf '```\n' >>"$report"
  timings+=("$name: $(( (SECONDS - start) / 60 )) min $(( (SECONDS - start) % 60 )) s")
  [ "$rc" = 0 ] || failed+=("$name (exit $rc)")
}

part "scenarios (infergate-load run)" "$bin/infergate-load" run "${scenarios[@]}" --bin-dir "$bin" --out "$out"
for suite in "$here"/bench-*.sh; do
  part "$(basename "$suite")" "$suite" "$bin"
done

{
  echo
  echo "## How long each part took"
  echo
  for t in "${timings[@]}"; do echo "- $t"; done
  echo "- in all: $(( SECONDS / 60 )) min $(( SECONDS % 60 )) s; load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee -a "$report"
echo "report: $report"
if [ ${#failed[@]} -gt 0 ]; then
  echo "failed: ${failed[*]}" | tee -a "$report" >&2
  exit 1
fi
