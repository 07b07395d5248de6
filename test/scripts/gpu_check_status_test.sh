#!/usr/bin/env bash
# scripts/gpu-check.sh's exit status: 0 only when every part it ran passed.
# Runs its `kernels` part on a build folder of stand-in binaries (shell
# scripts, so no GPU is needed) and checks that each kind of failure (a
# test binary, kiln-kernels, a missing binary, an unknown part) makes it
# exit 1 and is named in the summary.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# stand_in NAME EXIT: bin/NAME prints a line and exits with EXIT.
stand_in() { printf '#!/bin/sh\necho "%s $*"\nexit %s\n' "$1" "$2" >"$work/build/bin/$1"; chmod +x "$work/build/bin/$1"; }
setup() {
  rm -rf "$work/build" "$work/out" && mkdir -p "$work/build/bin"
  for t in kernels_gpu_test kiln_cuda_test kiln_cuda_executor_test kiln_cuda_vs_cpu_executor_test; do stand_in "$t" 0; done
  printf '#!/bin/sh\n[ "$2" = list ] && { echo header; echo inst paged_attention; exit 0; }\nexit %s\n' "${1:-0}" \
    >"$work/build/bin/kiln-kernels"
  chmod +x "$work/build/bin/kiln-kernels"
}
# check WHAT EXPECTED_RC [PATTERN]: run the kernels part; its exit status and summary.
check() {
  local what="$1" expected="$2" pattern="${3:-}"
  OUT="$work/out" KILN_GPU_PARTS="${PARTS:-kernels}" "$ROOT/scripts/gpu-check.sh" "$work/build" >"$work/log" 2>&1
  local rc=$?
  [[ $rc == "$expected" ]] || fail "$what: exit $rc, expected $expected ($(tail -5 "$work/log" | tr '\n' '|'))"
  [[ -z "$pattern" ]] || grep -q -- "$pattern" "$work/out/summary.txt" ||
    fail "$what: no '$pattern' in the summary: $(tr '\n' '|' <"$work/out/summary.txt")"
}

setup; check "every part passes" 0 "kiln_cuda_test  *PASS"
setup; stand_in kiln_cuda_test 3; check "a failing test binary" 1 "kiln_cuda_test  *FAIL (rc 3)"
setup; rm "$work/build/bin/kiln_cuda_executor_test"; check "a missing test binary" 1 "kiln_cuda_executor_test  *MISSING"
setup 2; check "kiln-kernels failing" 1 "kiln_kernels  *FAIL (rc 2)"
setup; PARTS="kernels bogus" check "an unknown part" 1 "part_bogus  *unknown part"

[[ $failures == 0 ]] && echo "gpu-check.sh exit status: all checks passed"
exit $((failures > 0))
