#!/usr/bin/env bash
# scripts/split-for-device.sh, which carries the trained model's GGUF to the
# GPU machine in halves: a file split here and joined there comes back byte
# for byte; a missing part, a corrupted part and sizes that do not fit are
# refused with a message naming what is wrong, and nothing is joined.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
SPLIT="$ROOT/scripts/split-for-device.sh"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export KILN_XFER_DIR="$work/xfer"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
expect_output() {  # expect_output WHAT PATTERN COMMAND...: exit 1 or 2 and PATTERN on stderr
  local what="$1" pattern="$2"; shift 2
  local err rc
  err="$("$@" 2>&1 >/dev/null)"; rc=$?
  [[ $rc -ne 0 ]] || fail "$what: exit 0, expected a refusal"
  grep -q -- "$pattern" <<<"$err" || fail "$what: expected '$pattern' in: $err"
}

head -c $((3 * 1024 * 1024 + 12345)) /dev/urandom >"$work/model.gguf"
"$SPLIT" "$work/model.gguf" 1 1 >/dev/null || fail "split into 1 + 1 + the rest"
[[ -f "$KILN_XFER_DIR/3/model.gguf.part3" ]] || fail "no third part"
[[ "$(stat -c %s "$KILN_XFER_DIR/1/model.gguf.part1")" == $((1024 * 1024)) ]] || fail "part 1 is not 1 MiB"

# There: each call copies its part folder into one directory, then the last joins.
there="$work/there"
carry() { rm -rf "$there" && mkdir -p "$there" && for k in "$@"; do cp "$KILN_XFER_DIR/$k"/* "$there/"; done; }
carry 1 2 3
"$SPLIT" --join "$there" >/dev/null || fail "join of intact parts"
cmp -s "$work/model.gguf" "$there/model.gguf" || fail "the joined file differs from the original"

# A part the machine lost between calls.
carry 1 3
expect_output "missing part" "missing model.gguf.part2" "$SPLIT" --join "$there"
[[ ! -f "$there/model.gguf" ]] || fail "a file was joined from missing parts"

# A part whose bytes changed on the way.
carry 1 2 3
printf 'x' | dd of="$there/model.gguf.part2" bs=1 seek=100 conv=notrunc status=none
expect_output "corrupted part" "checksum is wrong" "$SPLIT" --join "$there"
[[ ! -f "$there/model.gguf" ]] || fail "a file was joined from a corrupted part"

# Sizes that do not fit.
expect_output "last part too big" "over KILN_XFER_LAST_MIB" env KILN_XFER_LAST_MIB=1 "$SPLIT" "$work/model.gguf" 1
expect_output "parts past the end" "fits in fewer parts" "$SPLIT" "$work/model.gguf" 2 2
expect_output "bad size" "not a whole number of MiB" "$SPLIT" "$work/model.gguf" 1.5

if [[ $failures -gt 0 ]]; then echo "$failures check(s) failed"; exit 1; fi
echo "split-for-device: split, join, and four refusals checked"
