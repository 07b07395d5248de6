#include "runtime/cuda/tensor_map.h"

#include <fmt/format.h>

#include <cstring>

#include "codegen/kernels/gemm_swiglu_wgmma.cuh"  // gemm_swiglu's tiles (host-visible part)

namespace kiln::cuda {

std::string tensorMapProblem(const Bf16MatrixBoxes& m) {
  const std::string what = fmt::format("a [{}, {}] bf16 matrix in boxes of [{}, {}]", m.rows, m.columns, m.box_rows,
                                       m.box_columns);
  if (m.rows <= 0 || m.columns <= 0) return what + ": expected a matrix of at least one element";
  // The 128-byte swizzle spans one box row: it must be exactly 128 bytes.
  if (m.box_columns * 2 != 128) return what + ": expected boxes 64 columns wide (the 128-byte swizzle span)";
  if (m.box_rows <= 0 || m.box_rows > 256) return what + ": expected 1-256 box rows";
  if (m.base % 16) return fmt::format("{} at {:#x}: expected a 16-byte aligned address", what, m.base);
  const int64_t row_bytes = m.columns * 2;
  if (row_bytes % 16) return what + ": expected rows a multiple of 16 bytes (8 columns) apart";
  if (row_bytes >= (int64_t(1) << 40)) return what + ": rows too far apart for a tensor map (2^40 bytes)";
  if (m.rows > (int64_t(1) << 32) || m.columns > (int64_t(1) << 32)) return what + ": expected sides below 2^32";
  return "";
}

Result<kernels::TensorMap> encodeTensorMap(const CudaDriver& d, const Bf16MatrixBoxes& m) {
  if (std::string problem = tensorMapProblem(m); !problem.empty()) return makeError("tensor map of {}", problem);
  static_assert(sizeof(kernels::TensorMap) == sizeof(CUtensorMap) && alignof(kernels::TensorMap) == alignof(CUtensorMap),
                "kernels::TensorMap is a CUtensorMap's bytes");
  using Encode = decltype(&::cuTensorMapEncodeTiled);
  auto encode = reinterpret_cast<Encode>(d.library.symbol("cuTensorMapEncodeTiled"));
  if (!encode)
    return makeError("the CUDA driver at {} lacks cuTensorMapEncodeTiled (CUDA 12.0 or later), which the TMA kernels need",
                     d.library.path());
  CUtensorMap map;
  const cuuint64_t dims[2] = {cuuint64_t(m.columns), cuuint64_t(m.rows)};
  const cuuint64_t strides[1] = {cuuint64_t(m.columns * 2)};  // bytes between rows
  const cuuint32_t box[2] = {cuuint32_t(m.box_columns), cuuint32_t(m.box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult r = encode(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, reinterpret_cast<void*>(m.base), dims, strides, box,
                            element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    return makeError("cuTensorMapEncodeTiled refused a [{}, {}] bf16 matrix at {:#x} in boxes of [{}, {}]: {}", m.rows,
                     m.columns, m.base, m.box_rows, m.box_columns, d.describe(r));
  kernels::TensorMap out;
  std::memcpy(&out, &map, sizeof out);
  return out;
}

Result<kernels::TensorMap> gemmSwiGluXMap(const CudaDriver& d, CUdeviceptr x, int64_t rows, int64_t hidden) {
  namespace gs = kernels::gemm_swiglu;
  return encodeTensorMap(d, {x, rows, hidden, gs::kBlockM, gs::kBlockK});
}

Result<kernels::TensorMap> gemmSwiGluWMap(const CudaDriver& d, CUdeviceptr w, int64_t ffn, int64_t hidden) {
  namespace gs = kernels::gemm_swiglu;
  return encodeTensorMap(d, {w, 2 * ffn, hidden, gs::kBlockN, gs::kBlockK});
}

}  // namespace kiln::cuda
