#include "runtime/cpu/kernels/paged_kv.h"

#include <cstring>

namespace kiln::cpu {

Status appendKvPaged(const float* k, const float* v, int64_t tokens, const int64_t* slot_mapping,
                     const KvPoolShape& pool, float* k_pool, float* v_pool) {
  if (tokens < 0 || pool.num_blocks <= 0 || pool.page_size <= 0 || pool.kv_heads <= 0 ||
      pool.head_dim <= 0)
    return makeError("append_kv_paged: shape tokens={} pool=[{}, {}, {}, {}] is invalid", tokens,
                     pool.num_blocks, pool.page_size, pool.kv_heads, pool.head_dim);
  for (int64_t t = 0; t < tokens; ++t)
    if (slot_mapping[t] >= pool.slots())
      return makeError("append_kv_paged: slot {} of token {} is out of range: the pool has {} "
                       "slots ({} blocks of {})",
                       slot_mapping[t], t, pool.slots(), pool.num_blocks, pool.page_size);
  // A row copy per token: memory traffic is tiny next to the GEMMs.
  const int64_t elems = pool.slotElems();
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t slot = slot_mapping[t];
    if (slot < 0) continue;
    std::memcpy(k_pool + slot * elems, k + t * elems, size_t(elems) * 4);
    std::memcpy(v_pool + slot * elems, v + t * elems, size_t(elems) * 4);
  }
  return Status::success();
}

}  // namespace kiln::cpu
