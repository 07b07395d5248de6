#!/usr/bin/env bash
# The part of a build folder the GPU machine runs, small enough to travel
# beside half of the trained model's GGUF (64 MiB a device call, the working
# tree included; ../shared/GPU.md): the binaries scripts/gpu-check.sh starts,
# stripped, the shared libraries they load (libfmt) and the artifacts.
#
#   scripts/gpu-bundle.sh [BUILD_DIR]     (default: build-gpu)
#       writes BUILD_DIR/gpu-bundle/{bin,lib,artifacts}, a build folder
#       gpu-check.sh takes as it is (carry it, or copy it to /tmp there so
#       that a later call finds it too).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-$ROOT/build-gpu}"
out="$BUILD/gpu-bundle"
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
for b in kernels_gpu_test kiln_cuda_test kiln_cuda_executor_test kiln_cuda_vs_cpu_executor_test kiln \
         kiln-kernels kiln_attention_bench hf_logits_gpu_test kiln_gemv_sweep kiln_gemm_search kiln_swiglu_bench; do
  [[ -x "$BUILD/bin/$b" ]] || { echo "missing $BUILD/bin/$b (build it: ninja -C $BUILD $b)" >&2; exit 1; }
  strip -o "$out/bin/$b" "$BUILD/bin/$b"
done
shopt -s nullglob
libs=("$BUILD"/lib/*.so*)
[[ ${#libs[@]} -gt 0 ]] && cp -L "${libs[@]}" "$out/lib/"
[[ -d "$BUILD/artifacts" ]] || { echo "missing $BUILD/artifacts (see scripts/gpu-check.sh: kiln-compile)" >&2; exit 1; }
cp -r "$BUILD/artifacts" "$out/"
echo "$out: $(du -sh "$out" | cut -f1)"
