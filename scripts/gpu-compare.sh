#!/usr/bin/env bash
# Two builds of kiln on the same GPU in one device call, for a change that
# must keep speed: `kiln bench` on the same random checkpoint, the same
# artifact and the same workloads, the two builds alternated run by run so
# that the card's heat and clocks fall on both alike. kiln alone (no peer):
# the question is whether the second build is as fast as the first.
#
#   scripts/gpu-compare.sh BEFORE_BUILD AFTER_BUILD
#
# Each build folder is a gpu-bundle (scripts/gpu-bundle.sh): bin/, lib/ and
# the kernel templates, in share/kiln/kernels or, for builds from before
# share/ existed, in kernels/ (passed as KILN_KERNELS_DIR). Each build runs
# its own artifact (artifacts/MODEL-bf16, KILN_BENCH_MODEL, default
# llama3-8b) where it has one, so that a change of the plan's format can be
# compared, else AFTER_BUILD's; the checkpoint is made as gpu-check.sh's
# bench part makes it. KILN_COMPARE_RUNS (default
# "b1 b32 prefill") and KILN_COMPARE_ROUNDS (default 2) pick the workloads
# and how often each pair repeats. Results: $OUT/compare.txt, one line a run
# (tok/s, time to first token, and the forwards' GPU time from stderr).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BEFORE="${1:?usage: gpu-compare.sh BEFORE_BUILD AFTER_BUILD}"
AFTER="${2:?usage: gpu-compare.sh BEFORE_BUILD AFTER_BUILD}"
OUT="${OUT:-$ROOT/gpu-check-out}"
mkdir -p "$OUT"
model="${KILN_BENCH_MODEL:-llama3-8b}"
ckpt="${KILN_HF_DIR:-/tmp/kiln-hf}/$model"
status=0

if [[ ! -f "$ckpt/tokenizer.json" ]]; then
  header="$ROOT/test/models/$model"
  [[ -f "$header/model.safetensors" ]] && header="$header/model.safetensors"
  PYTHONUNBUFFERED=1 python3 "$ROOT/test/gpu/make_random_llama.py" --config "$ROOT/test/models/$model/config.json" \
    --header "$header" --out "$ckpt" >"$OUT/compare_checkpoint.log" 2>&1 ||
    { echo "checkpoint $ckpt: failed (see compare_checkpoint.log)"; tail -5 "$OUT/compare_checkpoint.log"; exit 1; }
fi

# One build's `kiln bench` in its own environment: its libraries, its kernel
# templates and its own JIT cache (the first run of each build compiles).
bench() {
  local build="$1" label="$2" run="$3" flags=() workload=decode
  case $run in
    b1) flags=(--batch 1 --prompt-tokens 128 --gen-tokens 128) ;;
    b32) flags=(--batch 32 --prompt-tokens 128 --gen-tokens 128) ;;
    prefill) flags=(--prompt-tokens 2048); workload=prefill ;;
    *) echo "unknown run '$run' (expected b1, b32 or prefill)"; return 1 ;;
  esac
  local kernels="$build/share/kiln/kernels"
  [[ -d "$kernels" ]] || kernels="$build/kernels"
  local art="$build/artifacts/$model-bf16"
  [[ -f "$art/manifest.json" ]] || art="$AFTER/artifacts/$model-bf16"
  local log="$OUT/compare_${label}_$run"
  LD_LIBRARY_PATH="$build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" KILN_KERNELS_DIR="$kernels" \
    KILN_HOME="/tmp/kiln-home-$label" CUDA_CACHE_DISABLE=1 \
    timeout 240 "$build/bin/kiln" bench "$workload" "$art" --model-source "$ckpt" --device cuda --peer none \
    "${flags[@]}" >"$log.txt" 2>"$log.err"
  local rc=$?
  local line
  line="$(grep -E "^kiln: time to first token|^\| decode tok/s" "$log.txt" | tr '\n' ' ')"
  local gpu
  gpu="$(grep -E "decode forwards replayed|launched step by step" "$log.err" | sed 's/^cuda: //' | tr '\n' ' ')"
  printf '%-7s %-8s rc %s  %s| %s\n' "$label" "$run" "$rc" "$line" "$gpu" | tee -a "$OUT/compare.txt"
  [[ $rc == 0 ]] || { tail -3 "$log.err"; return 1; }
}

: >"$OUT/compare.txt"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$OUT/compare.txt"
for round in $(seq "${KILN_COMPARE_ROUNDS:-2}"); do
  for run in ${KILN_COMPARE_RUNS:-b1 b32 prefill}; do
    # Alternate which build goes first, so neither always runs on a cooler card.
    if (( round % 2 )); then order=(before after); else order=(after before); fi
    for label in "${order[@]}"; do
      build="$BEFORE"; [[ $label == after ]] && build="$AFTER"
      bench "$build" "$label" "$run" || status=1
    done
  done
done
exit $status
