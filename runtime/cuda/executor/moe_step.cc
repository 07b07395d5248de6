#include "runtime/cuda/executor/moe_step.h"

#include "codegen/kernels/kernel_params.cuh"
#include "codegen/kernels/moe_grouped_mma.cuh"  // moe_mma::grid (host-visible part)

namespace kiln::cuda {

namespace kk = kiln::kernels;

namespace {
bool grouped(const BoundStep& s, int64_t rows) { return s.moe_grouped_gate_up_fn && covers(s.moe_grouped_rows, rows); }
void* ptr(CUdeviceptr p) { return reinterpret_cast<void*>(p); }
}  // namespace

const char* moePath(const BoundStep& s, int64_t rows) { return grouped(s, rows) ? kMoeGroupedPath : kMoeGemvPath; }

Status enqueueMoeExperts(const Launcher& launch, const BoundStep& s, int64_t rows) {
  const int r = int(rows), e = int(s.experts), k = int(s.k);
  kk::MoeExpertsParams p{ptr(s.args[0].ptr), ptr(s.args[1].ptr), reinterpret_cast<const int*>(s.args[2].ptr),
                         ptr(s.weights[3]), ptr(s.weights[4]), ptr(s.weights[5]),
                         reinterpret_cast<float*>(s.moe_act), reinterpret_cast<float*>(s.moe_partial),
                         ptr(s.results[0].ptr), r};
  if (grouped(s, rows)) {
    const int h = int(s.width), f = int(s.ffn);
    const kk::moe_mma::Grid gate_up = kk::moe_mma::grid(true, r, k, e, h, f), down = kk::moe_mma::grid(false, r, k, e, h, f);
    KILN_RETURN_IF_ERROR(launch(s.moe_grouped_gate_up_fn, s.moe_grouped_block, gate_up.x, gate_up.y, 1, &p,
                                s.moe_grouped_smem));
    KILN_RETURN_IF_ERROR(
        launch(s.moe_grouped_down_fn, s.moe_grouped_block, down.x, down.y, 1, &p, s.moe_grouped_smem));
  } else {
    const unsigned groups = unsigned(kk::moeExpertGroups(e, r, k)), passes = unsigned(kk::moeRowGroups(r));
    constexpr int64_t kColumns = kk::kMoeColumnsPerBlock;
    KILN_RETURN_IF_ERROR(launch(s.fn, s.block, unsigned((s.ffn + kColumns - 1) / kColumns), groups, passes, &p));
    KILN_RETURN_IF_ERROR(
        launch(s.moe_down_fn, s.moe_down_block, unsigned((s.width + kColumns - 1) / kColumns), groups, passes, &p));
  }
  return launch(s.combine_fn, s.combine_block, unsigned(r), 1, 1, &p);
}

}  // namespace kiln::cuda
