#include "runtime/cuda/executor/gemm_step.h"

#include <algorithm>

#include "codegen/kernels/gemm_swiglu_wgmma.cuh"  // gemm_swiglu's tiles and grid (host-visible part)
#include "codegen/kernels/kernel_params.cuh"
#include "codegen/kernels/quant_blocks.cuh"  // the tiles dequantize.cuh walks
#include "codegen/kernels/sparse24_params.cuh"
#include "runtime/cuda/executor/gemm_dispatch.h"
#include "runtime/cuda/executor/kiln_assign.h"
#include "runtime/cuda/tensor_map.h"

namespace kiln::cuda {

namespace kk = kiln::kernels;

namespace {

// dequantize.cuh's threads for an [n, k] weight: one per lane and step of
// each 16 x 64 tile.
int64_t dequantizeThreads(int64_t n, int64_t k) {
  return (n + kk::kQuantTileRows - 1) / kk::kQuantTileRows * ((k + kk::kQuantTileCols - 1) / kk::kQuantTileCols) * 128;
}

// y = x · Wᵀ (+ bias) for a 2:4 sparse W: sparse24_gemv over [ceil(n /
// rows_per_block), 1, ceil(rows / max_rows)] blocks, or the sparse GEMM
// over [ceil(n / kBlockN), ceil(rows / kBlockM)] tiles.
Status enqueueSparse24(const Launcher& launch, const BoundStep& s, const GemvKernel& kernel, int64_t rows) {
  auto ptr = [](CUdeviceptr p) { return reinterpret_cast<void*>(p); };
  const bool gemv = &kernel == &s.sparse_gemv;
  kk::Sparse24Params p{ptr(s.args[0].ptr), ptr(gemv ? s.weights[1] : s.sparse_gemm_values),
                       reinterpret_cast<const unsigned*>(gemv ? s.sparse_metadata : s.sparse_gemm_metadata),
                       hasBias(s) ? ptr(gemmBias(s)) : nullptr, ptr(s.results[0].ptr), int(rows)};
  const unsigned weight_blocks = unsigned((s.width + kernel.rows_per_block - 1) / kernel.rows_per_block);
  const unsigned row_blocks = unsigned((rows + kernel.max_rows - 1) / kernel.max_rows);
  if (gemv) return launch(kernel.fn, kernel.block, weight_blocks, 1, row_blocks, &p, kernel.smem);
  return launch(kernel.fn, kernel.block, weight_blocks, row_blocks, 1, &p, kernel.smem);
}

}  // namespace

Status enqueueGemm(const Launcher& launch, GemmPlanner& cublas, const BatchInputBuffer& inputs, int64_t num_slots,
                   const std::vector<BoundStep>& steps, const BoundStep& s, int64_t rows) {
  if (const GemvKernel* sparse = sparse24Kernel(s, rows)) return enqueueSparse24(launch, s, *sparse, rows);
  const int sms = launch.gpu.sms;
  const bool bias = hasBias(s);
  // An f32 plan's gemm has no skinny kernel: cuBLASLt at every row count.
  if (const GemvKernel* skinny = skinnyKernel(s, rows)) {
    const GemvKernel& kernel = *skinny;
    auto ptr = [](CUdeviceptr p) { return reinterpret_cast<void*>(p); };
    const bool fused = s.fused;
    kk::GemvParams p{ptr(s.args[0].ptr), ptr(s.weights[1]), bias ? ptr(gemmBias(s)) : nullptr,
                     fused ? ptr(s.fused_y) : ptr(s.results[0].ptr), int(rows)};
    // A block takes up to the instance's kMaxRows rows; grid.z walks further groups.
    const unsigned gz = unsigned((rows + kernel.max_rows - 1) / kernel.max_rows);
    if (kernel.tiles > 0) {
      if (s.folded_norm >= 0) {  // the norm's inputs in, its sum out (p.x is not read)
        const BoundStep& norm = steps[size_t(s.folded_norm)];
        p.norm_x = ptr(norm.args[0].ptr);
        p.norm_residual = ptr(norm.args[1].ptr);
        p.norm_weight = ptr(norm.weights[2]);
        p.norm_sum = norm.writes_sum ? ptr(norm.results[0].ptr) : nullptr;
      }
      const unsigned blocks = unsigned(std::min<int64_t>(kernel.tiles, sms));
      if (s.fused_rope < 0) return launch(kernel.fn, kernel.block, blocks, 1, 1, &p, kernel.smem);
      const BoundStep& rope = steps[size_t(s.fused_rope)];
      kk::GemvRopeParams r{p, inputs.at(rope.inputs[1]), inputs.at(rope.inputs[2]), ptr(rope.pools[3]),
                           ptr(rope.pools[4]), num_slots};
      return launch(kernel.fn, kernel.block, blocks, 1, 1, &r, kernel.smem);
    }
    if (!fused)
      return launch(kernel.fn, kernel.block, unsigned((s.width + kernel.rows_per_block - 1) / kernel.rows_per_block),
                    1, gz, &p, kernel.smem);
    const int64_t pairs = kernel.rows_per_block / 2;  // a block holds row pairs (gate/up, or rope's)
    const unsigned gx = unsigned((s.width / 2 + pairs - 1) / pairs);
    if (s.fused_rope < 0) return launch(kernel.fn, kernel.block, gx, 1, gz, &p);
    const BoundStep& rope = steps[size_t(s.fused_rope)];  // merged: qkv, positions, slot_mapping, k, v pools
    kk::GemvRopeParams r{p, inputs.at(rope.inputs[1]), inputs.at(rope.inputs[2]), ptr(rope.pools[3]),
                         ptr(rope.pools[4]), num_slots};
    return launch(kernel.fn, kernel.block, gx, 1, gz, &r);
  }
  if (fusedSwiGlu(s, rows)) {  // x's map is per batch: its rows are the batch's
    namespace gs = kk::gemm_swiglu;
    KILN_ASSIGN(x_map, gemmSwiGluXMap(*launch.gpu.d, s.args[0].ptr, rows, s.k));
    kk::GemmSwiGluParams p{x_map, s.swiglu_w_map, reinterpret_cast<void*>(s.fused_y), int(rows)};
    return launch(s.swiglu_fn, unsigned(gs::kThreads), unsigned(gs::grid_blocks(rows, s.width / 2, sms)), 1, 1, &p,
                  s.swiglu_smem);
  }
  if (expandsWeight(s, rows)) {
    kk::DequantizeParams p{reinterpret_cast<const void*>(s.weights[1]), reinterpret_cast<void*>(s.dequantized)};
    const int64_t items = dequantizeThreads(s.width, s.k);
    KILN_RETURN_IF_ERROR(launch(s.dequantize_fn, s.dequantize_block,
                                unsigned((items + s.dequantize_block - 1) / s.dequantize_block), 1, 1, &p));
  }
  KILN_ASSIGN(plan, cublas.plan(steps, s, rows));
  return cublas.run(steps, s, *plan, plan->algo);
}

}  // namespace kiln::cuda
