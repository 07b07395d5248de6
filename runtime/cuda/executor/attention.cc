#include "runtime/cuda/executor/attention.h"

#include <algorithm>

#include "codegen/kernels/kernel_params.cuh"
#include "runtime/cuda/executor/kiln_assign.h"

namespace kiln::cuda {

namespace kk = kiln::kernels;

const char* attentionPath(const BoundStep& s, const LaunchShape& shape) {
  if (s.flash_fn && s.flash_rows.contains(shape.max_q_len)) return kFlashPath;
  if (shape.splits < 1 || !s.split_fn) return kPagedPath;
  return s.split_merges_itself ? kMergingSplitPath : kSplitPath;
}

Result<int64_t> SplitKvScratch::allocate(DeviceMemory& memory, const std::vector<BoundStep>& steps,
                                         int64_t max_tokens) {
  int64_t max_heads_dim = 0, max_heads = 0, max_kv_heads = 0;  // largest of the attention steps
  for (const BoundStep& s : steps) {
    if (s.kind != StepKind::kPagedAttention) continue;
    max_heads_dim = std::max<int64_t>(max_heads_dim, int64_t(s.heads) * s.head_dim);
    max_heads = std::max<int64_t>(max_heads, s.heads);
    max_kv_heads = std::max<int64_t>(max_kv_heads, s.kv_heads);
  }
  if (max_heads_dim == 0) return int64_t(0);
  rows = std::min(max_tokens * kMaxSplits, kSplitRows);
  KILN_ASSIGN(out, memory.alloc(rows * max_heads_dim * 4, "the split-KV attention partials"));
  KILN_ASSIGN(lse, memory.alloc(rows * max_heads * 4, "the split-KV attention lse"));
  KILN_ASSIGN(counters, memory.allocZeroed(max_tokens * max_kv_heads * 4, "the split-KV arrival counters"));
  partial_out = out;
  partial_lse = lse;
  arrivals = counters;
  return rows * (max_heads_dim + max_heads) * 4 + max_tokens * max_kv_heads * 4;
}

Status enqueueAttention(const Launcher& launch, const BatchInputBuffer& inputs, const SplitKvScratch& scratch,
                        const BoundStep& s, const LaunchShape& shape) {
  kk::PagedAttentionParams p{};
  p.q = reinterpret_cast<const void*>(s.args[0].ptr);
  p.k_pool = reinterpret_cast<const void*>(s.pools[1]);
  p.v_pool = reinterpret_cast<const void*>(s.pools[2]);
  p.k_scales = reinterpret_cast<const float*>(s.pool_scales[1]);
  p.v_scales = reinterpret_cast<const float*>(s.pool_scales[2]);
  p.block_tables = inputs.at(s.inputs[3]);
  p.query_start = inputs.at(s.inputs[4]);
  p.kv_lens = inputs.at(s.inputs[5]);
  if (s.inputs.size() > 6 && s.inputs[6] == kTreeMask) {  // verify's, staged with the inputs
    p.tree_mask = reinterpret_cast<const unsigned char*>(inputs.at(kTreeMask));
    p.tree_stride = int(inputs.tree_nodes);
  }
  p.out = reinterpret_cast<void*>(s.results[0].ptr);
  p.num_tokens = int(shape.n);
  p.num_seqs = int(shape.b);
  p.max_blocks_per_seq = shape.max_blocks;
  p.num_splits = 1;
  const char* path = attentionPath(s, shape);
  if (path == kFlashPath) {
    const unsigned tiles = unsigned((shape.max_q_len + s.flash_block_m - 1) / s.flash_block_m);
    return launch(s.flash_fn, s.flash_block, unsigned(s.heads), tiles, unsigned(shape.b), &p, s.flash_smem);
  }
  if (path == kPagedPath) return launch(s.fn, s.block, unsigned(shape.n), unsigned(s.kv_heads), 1, &p);
  p.num_splits = shape.splits;
  p.partial_out = reinterpret_cast<float*>(scratch.partial_out);
  p.partial_lse = reinterpret_cast<float*>(scratch.partial_lse);
  if (path == kMergingSplitPath) p.split_arrivals = reinterpret_cast<unsigned*>(scratch.arrivals);
  KILN_RETURN_IF_ERROR(launch(s.split_fn, s.split_block, unsigned(shape.n), unsigned(s.kv_heads),
                              unsigned(shape.splits), &p, s.split_smem));
  if (path == kMergingSplitPath) return {};
  kk::AttentionCombineParams c{p.partial_out, p.partial_lse, p.out, int(shape.n), shape.splits};
  return launch(s.combine_fn, s.combine_block, unsigned(shape.n), unsigned(s.heads), 1, &c);
}

}  // namespace kiln::cuda
