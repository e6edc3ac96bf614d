#!/usr/bin/env bash
# Runs every cargo-fuzz target of every `fuzz/` folder in the repository for a while, starting from its
# committed seeds (`<crate>/fuzz/seeds/<target>/`). A crash fails the run and names the input that
# caused it (`<crate>/fuzz/artifacts/<target>/`).
#
#   scripts/fuzz.sh                 # each target for FUZZ_SECONDS (default 4 s): what `make test` runs
#   FUZZ_SECONDS=600 scripts/fuzz.sh   # `make fuzz`: long runs
#   FUZZ_ONLY=grpc_infer_request scripts/fuzz.sh   # targets whose name contains this
#
# Environment: FUZZ_SECONDS, FUZZ_ONLY, FUZZ_SANITIZER (default none: our crates forbid unsafe code, so
# the fuzzers look for panics, overflows, hangs and runaway memory; set address for ASan),
# FUZZ_TARGET_DIR (shared build folder of every fuzz crate), FUZZ_REPORT (a file to append one line per
# target to: target, seconds, executions, result).
# cargo-fuzz needs nightly compiler flags; RUSTC_BOOTSTRAP=1 lets the pinned stable toolchain accept them.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
seconds="${FUZZ_SECONDS:-4}"
only="${FUZZ_ONLY:-}"
sanitizer="${FUZZ_SANITIZER:-none}"
target_dir="${FUZZ_TARGET_DIR:-${CARGO_TARGET_DIR:-$root/target}/fuzz}"
report="${FUZZ_REPORT:-}"
export RUSTC_BOOTSTRAP=1

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "==> installing cargo-fuzz (crates.io)"
  cargo install --locked cargo-fuzz@0.13.2
fi

mapfile -t dirs < <(cd "$root" && find . -path ./target -prune -o -path '*/fuzz/target' -prune -o \
  -type f -path '*/fuzz/Cargo.toml' -print | sort | xargs grep -l 'cargo-fuzz = true' | xargs -n1 dirname)
if [ ${#dirs[@]} -eq 0 ]; then
  echo "fuzz.sh: no fuzz/ folders found under $root" >&2
  exit 1
fi

failed=()
for fuzz in "${dirs[@]}"; do
  crate="$(dirname "$fuzz")"
  cd "$root/$crate"
  mapfile -t targets < <(cargo fuzz list)
  for t in "${targets[@]}"; do
    [[ -n "$only" && "$t" != *"$only"* ]] && continue
    seeds="fuzz/seeds/$t"
    if [ ! -d "$seeds" ] || [ -z "$(ls -A "$seeds")" ]; then
      echo "fuzz.sh: $crate/$seeds is missing or empty: commit a few valid inputs for target $t" >&2
      failed+=("$crate:$t (no seeds)")
      continue
    fi
    mkdir -p "fuzz/corpus/$t" "fuzz/artifacts/$t"
    log="$(mktemp)"
    echo "==> fuzz $crate $t for ${seconds}s"
    # New inputs go to the ignored corpus folder (first), the seeds stay as committed (second).
    if cargo fuzz run --release --debug-assertions --sanitizer "$sanitizer" --target-dir "$target_dir" \
        "$t" "fuzz/corpus/$t" "$seeds" -- \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=1048576 \
        -print_final_stats=1 -artifact_prefix="fuzz/artifacts/$t/" >"$log" 2>&1; then
      result=ok
    else
      result=CRASH
      failed+=("$crate:$t")
      tail -n 40 "$log" >&2
    fi
    execs="$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)"
    echo "    $t: $result, $execs executions in ${seconds}s"
    [ -n "$report" ] && echo "$crate $t ${seconds}s $execs $result" >>"$report"
    rm -f "$log"
  done
done

if [ ${#failed[@]} -ne 0 ]; then
  echo "fuzz.sh: failed: ${failed[*]} (reproduce: cd <crate> && RUSTC_BOOTSTRAP=1 cargo fuzz run <target> fuzz/artifacts/<target>/<file>)" >&2
  exit 1
fi
echo "==> every fuzz target ran ${seconds}s without a crash"
