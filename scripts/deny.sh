#!/usr/bin/env bash
# Supply-chain checks of the lock file against deny.toml: licences, banned and duplicate crates, and
# sources always; RustSec advisories when the advisory database can be fetched (it lives on GitHub) or
# is already on disk from an earlier fetch. Without it the run says so loudly instead of passing quietly:
# set DENY_REQUIRE_ADVISORIES=1 (CI with network) to make that an error.
set -euo pipefail
cd "$(dirname "$0")/.."
version=0.20.2
if ! cargo deny --version >/dev/null 2>&1; then
  echo "==> installing cargo-deny $version (crates.io)"
  cargo install --locked "cargo-deny@$version"
fi

echo "==> cargo deny check licenses bans sources"
cargo deny --log-level warn check licenses bans sources

echo "==> cargo deny check advisories"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
if timeout 120 cargo deny --log-level warn check advisories >"$log" 2>&1; then
  cat "$log"
  exit 0
fi
if grep -qE '(error|warning)\[(vulnerability|unmaintained|unsound|yanked|notice|advisory)' "$log"; then
  cat "$log" >&2   # the database was read and an advisory matched: that is a failure
  exit 1
fi
db="${CARGO_HOME:-$HOME/.cargo}/advisory-dbs"
if compgen -G "$db/*/crates" >/dev/null && cargo deny --offline --log-level warn check advisories; then
  echo "    advisories checked against the database on disk ($db), not a fresh fetch"
  exit 0
fi
echo "WARNING: RustSec advisories NOT checked: the advisory database could not be fetched and none is on disk" >&2
echo "         (needs https://github.com/rustsec/advisory-db; run scripts/deny.sh where GitHub is reachable)" >&2
tail -n 5 "$log" >&2
[ "${DENY_REQUIRE_ADVISORIES:-0}" = 1 ] && exit 1
exit 0
