#include "runtime/cpu/kernels/paged_kv.h"

#include <cstring>

#include "runtime/kv/kv_quant.h"
#include "runtime/numerics/quant.h"

namespace kiln::cpu {

namespace {

// `count` f32 values stored at `dst` as `element`.
void storeRow(const float* src, int64_t count, KvElement element, uint8_t* dst) {
  if (element == KvElement::kF32) {
    std::memcpy(dst, src, size_t(count) * 4);
    return;
  }
  auto* half = reinterpret_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < count; ++i) half[i] = element == KvElement::kF16 ? f32ToF16(src[i]) : f32ToBf16(src[i]);
}

// One token's [kv_heads, head_dim] row quantized a head at a time, each
// head's scale to its place in `scales` (kvScaleIndex).
void storeScaledRow(const float* src, const KvPoolShape& pool, int64_t slot, uint8_t* dst, float* scales) {
  for (int h = 0; h < pool.kv_heads; ++h)
    scales[kvScaleIndex(slot, h, pool.page_size, pool.kv_heads)] = quantizeKvRow(src + int64_t(h) * pool.head_dim, pool.head_dim, pool.element,
                              dst + int64_t(h) * pool.head_dim);
}

}  // namespace

Status checkKvScales(const char* kernel, KvElement element, const void* k_scales, const void* v_scales) {
  const bool scaled = kvElementHasScales(element);
  if (scaled && (!k_scales || !v_scales))
    return makeError("{}: {} pools need their K and V scales ([num_blocks, kv_heads, page_size] f32)", kernel,
                     kvElementName(element));
  if (!scaled && (k_scales || v_scales))
    return makeError("{}: {} pools have no scales, but scales were given", kernel, kvElementName(element));
  return Status::success();
}

Status appendKvPaged(const float* k, const float* v, int64_t tokens, const int64_t* slot_mapping,
                     const KvPoolShape& pool, void* k_pool, void* v_pool, float* k_scales, float* v_scales) {
  if (tokens < 0 || pool.num_blocks <= 0 || pool.page_size <= 0 || pool.kv_heads <= 0 ||
      pool.head_dim <= 0)
    return makeError("append_kv_paged: shape tokens={} pool=[{}, {}, {}, {}] is invalid", tokens,
                     pool.num_blocks, pool.page_size, pool.kv_heads, pool.head_dim);
  for (int64_t t = 0; t < tokens; ++t)
    if (slot_mapping[t] >= pool.slots())
      return makeError("append_kv_paged: slot {} of token {} is out of range: the pool has {} "
                       "slots ({} blocks of {})",
                       slot_mapping[t], t, pool.slots(), pool.num_blocks, pool.page_size);
  KILN_RETURN_IF_ERROR(checkKvScales("append_kv_paged", pool.element, k_scales, v_scales));
  // A row copy per token: memory traffic is tiny next to the GEMMs.
  const int64_t elems = pool.slotElems(), bytes = elems * kvElementBytes(pool.element);
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t slot = slot_mapping[t];
    if (slot < 0) continue;
    if (kvElementHasScales(pool.element)) {
      storeScaledRow(k + t * elems, pool, slot, static_cast<uint8_t*>(k_pool) + slot * bytes, k_scales);
      storeScaledRow(v + t * elems, pool, slot, static_cast<uint8_t*>(v_pool) + slot * bytes, v_scales);
      continue;
    }
    storeRow(k + t * elems, elems, pool.element, static_cast<uint8_t*>(k_pool) + slot * bytes);
    storeRow(v + t * elems, elems, pool.element, static_cast<uint8_t*>(v_pool) + slot * bytes);
  }
  return Status::success();
}

}  // namespace kiln::cpu
