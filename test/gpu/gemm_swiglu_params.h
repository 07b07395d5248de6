// gemm_swiglu_wgmma's params for the GPU test and bench: TMA tensor maps
// of x and the merged gate/up weight, encoded by the driver as the executor
// encodes them. Not for the emulation tests, which include the kernel
// header after the emulation's.
#pragma once

#include "codegen/kernels/gemm_swiglu_wgmma.cuh"  // gemm_swiglu's tiles (host-visible part)
#include "runtime/cuda/tensor_map.h"
#include "test/gpu/gpu_harness.h"

namespace kiln::gpu_test {

// gemm_swiglu_wgmma's params over x [rows, hidden] and the merged gate/up
// weight w [2 ffn, hidden] (both bf16 in device memory) into out [rows, ffn].
inline Result<kiln::kernels::GemmSwiGluParams> gemmSwiGluParams(const void* x, const void* w, void* out, int rows,
                                                                int hidden, int ffn) {
  const cuda::CudaDriver* d = (*Gpu::get())->d;
  kiln::kernels::GemmSwiGluParams p{};
  auto x_map = cuda::gemmSwiGluXMap(*d, CUdeviceptr(x), rows, hidden);
  if (!x_map) return x_map.error();
  auto w_map = cuda::gemmSwiGluWMap(*d, CUdeviceptr(w), ffn, hidden);
  if (!w_map) return w_map.error();
  p.x_map = *x_map;
  p.w_map = *w_map;
  p.out = out;
  p.rows = rows;
  return p;
}

}  // namespace kiln::gpu_test
