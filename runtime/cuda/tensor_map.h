// TMA tensor maps (CUtensorMap) for the kernels that copy through the
// Hopper TMA unit (gemm_swiglu_wgmma): a row-major bf16 matrix in device
// memory, boxes of [box_rows, box_columns] laid out in shared memory with
// the 128-byte swizzle wgmma.cuh's tiles use, zeros past the matrix.
#pragma once

#include <cstdint>
#include <string>

#include "codegen/kernels/kernel_params.cuh"
#include "runtime/cuda/cuda_driver.h"
#include "runtime/support/error.h"

namespace kiln::cuda {

struct Bf16MatrixBoxes {
  CUdeviceptr base = 0;
  int64_t rows = 0, columns = 0;  // row-major, rows `columns` elements apart
  int box_rows = 0, box_columns = 0;
};

// What the TMA unit would refuse in `m` (the limits of
// cuTensorMapEncodeTiled with the 128-byte swizzle), or "" when nothing.
std::string tensorMapProblem(const Bf16MatrixBoxes& m);

// The tensor map of `m`, encoded by the driver's cuTensorMapEncodeTiled
// (CUDA 12.0+; an error names what is missing or refused).
Result<kernels::TensorMap> encodeTensorMap(const CudaDriver& d, const Bf16MatrixBoxes& m);

// The two maps gemm_swiglu_wgmma reads, in its tiles' boxes
// (codegen/kernels/gemm_swiglu_wgmma.cuh): x [rows, hidden], and the merged
// gate/up weight [2 ffn, hidden].
Result<kernels::TensorMap> gemmSwiGluXMap(const CudaDriver& d, CUdeviceptr x, int64_t rows, int64_t hidden);
Result<kernels::TensorMap> gemmSwiGluWMap(const CudaDriver& d, CUdeviceptr w, int64_t ffn, int64_t hidden);

}  // namespace kiln::cuda
