#!/usr/bin/env bash
# The part of a build folder the GPU machine runs, small enough to travel
# beside half of the trained model's GGUF (64 MiB a device call, the working
# tree included; ../shared/GPU.md): the binaries scripts/gpu-check.sh starts,
# stripped, share/kiln (the kernel templates and helper scripts they find
# beside bin/), the shared libraries they load that the GPU machine lacks,
# and the artifacts.
#
#   scripts/gpu-bundle.sh [BUILD_DIR]     (default: build-gpu)
#       configures BUILD_DIR when it has no build.ninja (an MLIR-free build:
#       the GPU machine has no LLVM/MLIR), builds the binaries, compiles the
#       artifacts with the MLIR build's kiln-compile (KILN_COMPILE, default
#       build/bin/kiln-compile; without it the artifacts already in
#       BUILD_DIR/artifacts are used), and writes BUILD_DIR/gpu-bundle/
#       {bin,lib,share,artifacts}, a build folder gpu-check.sh takes as it is,
#       and the same as BUILD_DIR/gpu-bundle.tar.gz (about 6 MiB) to carry:
#       there, `tar -xzf build-gpu/gpu-bundle.tar.gz -C /tmp/build-gpu` (in
#       /tmp, a later call finds it too).
#
# Libraries: every one the binaries load (ldd), except glibc's, libstdc++,
# libgcc_s (the GPU machine's are newer) and those KILN_GPU_HOST_LIBS names
# as present there. The CUDA libraries are dlopen'd, never linked, so ldd
# does not list them. gpu-check.sh first checks that every binary's
# libraries resolve there.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-$ROOT/build-gpu}"
KILN_COMPILE="${KILN_COMPILE:-$ROOT/build/bin/kiln-compile}"
# On the GPU machine (Ubuntu 24.04.3) ldconfig -p lists these.
HOST_LIBS="${KILN_GPU_HOST_LIBS:-libfmt.so.9 libopenblas.so.0 libgfortran.so.5 libquadmath.so.0 libpcre2-8.so.0 libz.so.1}"
binaries=(kernels_gpu_test kiln_cuda_test kiln_cuda_executor_test kiln_cuda_vs_cpu_executor_test kiln kiln-kernels
          kiln_attention_bench hf_logits_gpu_test kiln_gemv_sweep kiln_quant_sweep kiln_gemm_search kiln_swiglu_bench
          kiln_batch_invariance_test kiln_moe_bench moe_gpu_test ssm_gpu_test kiln_ssm_bench
          kiln_cuda_ssm_test kiln_sparse24_gpu_test kiln_sparse24_bench)

if [[ ! -f "$BUILD/build.ninja" ]]; then
  launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  cmake -G Ninja -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DKILN_ENABLE_COMPILER=OFF "${launcher[@]}"
fi
ninja -C "$BUILD" "${binaries[@]}" kiln_data

# The artifacts gpu-check.sh runs: model-bf16 for the CUDA executor, model-f32
# for the CPU executor and the f32 CUDA check; Llama-3-8B for the bench part.
if [[ -x "$KILN_COMPILE" ]]; then
  # tiny-qwen3, tiny-mistral-swa, tiny-phi3, tiny-gemma3: Qwen3's q/k norm, sliding windows, Phi-3's fused
  # projections, Gemma 3's GeGLU and sandwich norms (KILN_HF_MODELS).
  for m in tiny-llama llama3.2-1b smollm2-135m llama3-8b tiny-qwen3 tiny-mistral-swa tiny-phi3 tiny-gemma3; do
    "$KILN_COMPILE" "$ROOT/test/models/$m" -o "$BUILD/artifacts/$m-bf16" --activation-type=bf16
    [[ $m == llama3-8b ]] || "$KILN_COMPILE" "$ROOT/test/models/$m" -o "$BUILD/artifacts/$m-f32"
  done
  # Mixtral-8x7B with 8 of its 32 layers: the moe part's whole-model decode.
  "$KILN_COMPILE" "$ROOT/test/models/mixtral-8x7b-8l" -o "$BUILD/artifacts/mixtral-8x7b-8l-bf16" --activation-type=bf16
  # The state-space benchmark's whole model (gpu-check.sh mambabench).
  "$KILN_COMPILE" "$ROOT/test/models/mamba2-2.7b" -o "$BUILD/artifacts/mamba2-2.7b-bf16" --activation-type=bf16
  # kiln's own int8 (per channel) and int4 (groups of 128) weights, quantized at load.
  for m in llama3.2-1b llama3-8b; do
    "$KILN_COMPILE" "$ROOT/test/models/$m" -o "$BUILD/artifacts/$m-int8-bf16" --activation-type=bf16 --quant-weights=int8
    "$KILN_COMPILE" "$ROOT/test/models/$m" -o "$BUILD/artifacts/$m-int4-bf16" --activation-type=bf16 \
      --quant-weights=int4 --quant-group-size=128
  done
  # The fp8 e4m3 KV cache (a scale per token and KV head) of the serving runs.
  "$KILN_COMPILE" "$ROOT/test/models/llama3-8b" -o "$BUILD/artifacts/llama3-8b-fp8kv-bf16" --activation-type=bf16 \
    --quant-kv=fp8
  # The CPU executor's int4 plan of the same weights, beside the GPU's (hf_logits_gpu_test --cpu-artifact).
  "$KILN_COMPILE" "$ROOT/test/models/llama3.2-1b" -o "$BUILD/artifacts/llama3.2-1b-int4-f32" \
    --quant-weights=int4 --quant-group-size=128
  # SmolLM2's Q4_1 GGUF itself, its blocks run by the GPU's quantized
  # kernels (gpu-check.sh's trained part brings the GGUF over).
  gguf="${KILN_HOME:-$HOME/.cache/kiln}/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
  [[ -f "$gguf" ]] && "$KILN_COMPILE" "$gguf" -o "$BUILD/artifacts/smollm2-q4_1-bf16" --activation-type=bf16
  # Speculative verify (gpu-check.sh's spec part): Llama-3-8B with a tree of
  # 4, 16 and 64 nodes, and the GGUF with room for --spec=ngram's chain of 4
  # and a 2,2,1 tree, and a LayerSkip draft entry of its first
  # KILN_SPECBENCH_LAYERSKIP (default 24) layers for --spec=layerskip:K.
  for tree in 4:chain:3 16:widths:3,2,1 64:widths:3,4,4; do
    "$KILN_COMPILE" "$ROOT/test/models/llama3-8b" -o "$BUILD/artifacts/llama3-8b-spec${tree%%:*}-bf16" \
      --activation-type=bf16 --spec-tree="${tree#*:}"
  done
  [[ -f "$gguf" ]] && "$KILN_COMPILE" "$gguf" -o "$BUILD/artifacts/smollm2-q4_1-spec-bf16" --activation-type=bf16 \
    --spec-tree=widths:2,2,1,1 --spec-layerskip="${KILN_SPECBENCH_LAYERSKIP:-24}"
  # 2:4 sparse plans (gpu-check.sh's sparse part): the tiny Llama fixture's
  # bf16 ones run the sparse kernels, the f32 ones expand the weights to
  # dense at load (and are the CPU references); Llama-3-8B for the decode bench.
  for v in "bf16|--activation-type=bf16" "f32|" \
           "int4-bf16|--activation-type=bf16 --quant-weights=int4 --quant-group-size=64" \
           "int4-f32|--quant-weights=int4 --quant-group-size=64"; do
    # shellcheck disable=SC2086  # the flags are words
    "$KILN_COMPILE" "$ROOT/test/fixtures/tiny-llama" -o "$BUILD/artifacts/tiny-llama-sparse-${v%%|*}" \
      --sparsity=2:4 ${v#*|}
  done
  "$KILN_COMPILE" "$ROOT/test/models/llama3-8b" -o "$BUILD/artifacts/llama3-8b-sparse-bf16" --activation-type=bf16 \
    --sparsity=2:4
  # The distilled draft model's shape (scripts/distill_draft.py's defaults,
  # header-only), for the specbench part: its weights come at run time from
  # the checkpoint the distill part trains (--draft-source).
  "$KILN_COMPILE" "${KILN_DRAFT_CHECKPOINT:-$ROOT/test/models/smollm2-draft}" \
    -o "$BUILD/artifacts/smollm2-draft-bf16" --activation-type=bf16 --spec-tree=widths:2,2,1,1
fi
[[ -d "$BUILD/artifacts" ]] ||
  { echo "no $BUILD/artifacts and no $KILN_COMPILE to make them (build it: ninja -C build kiln-compile)" >&2; exit 1; }

out="$BUILD/gpu-bundle"
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
for b in "${binaries[@]}"; do strip -o "$out/bin/$b" "$BUILD/bin/$b"; done
cp -r "$BUILD/share" "$BUILD/artifacts" "$out/"

declare -A carried
for b in "${binaries[@]}"; do
  while read -r name arrow path _; do
    [[ "$arrow" == "=>" ]] || continue
    [[ "$path" == "not" ]] && { echo "$b: $name not found here (ldd)" >&2; exit 1; }
    case "$name" in
      libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|ld-linux*|libstdc++.so.*|libgcc_s.so.*) continue ;;
    esac
    [[ " $HOST_LIBS " == *" $name "* || -n "${carried[$name]:-}" ]] && continue
    cp -L "$path" "$out/lib/$name"
    carried[$name]=1
  done < <(ldd "$BUILD/bin/$b")
done
tar -C "$out" -czf "$out.tar.gz" .
libs="none (all are on the GPU machine)"
((${#carried[@]})) && libs="${!carried[*]}"
echo "$out.tar.gz: $(du -sh "$out.tar.gz" | cut -f1) ($(du -sh "$out" | cut -f1) unpacked); libraries carried: $libs"
