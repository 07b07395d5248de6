#include "runtime/backend/plan_kv_pool.h"

namespace kiln {

KvPoolConfig kvPoolConfigFor(const Manifest& manifest, int64_t num_blocks) {
  return KvPoolConfig{.layers = manifest.kv_cache.layers,
                      .num_blocks = num_blocks,
                      .page_size = manifest.kv_cache.page_size,
                      .kv_heads = manifest.kv_cache.kv_heads,
                      .head_dim = manifest.kv_cache.head_dim,
                      .element = manifest.kv_cache.type == "f16"    ? KvElement::kF16
                                 : manifest.kv_cache.type == "bf16" ? KvElement::kBf16
                                                                    : KvElement::kF32};
}

Status checkPoolMatchesManifest(const KvPoolConfig& kv, const Manifest& manifest) {
  const KvCacheConfig& mk = manifest.kv_cache;
  if (kv.layers != mk.layers || kv.page_size != mk.page_size || kv.kv_heads != mk.kv_heads ||
      kv.head_dim != mk.head_dim)
    return makeError("kv pool config (layers {}, page_size {}, kv_heads {}, head_dim {}) does not "
                     "match {}: kv_cache (layers {}, page_size {}, kv_heads {}, head_dim {})",
                     kv.layers, kv.page_size, kv.kv_heads, kv.head_dim, manifest.path, mk.layers,
                     mk.page_size, mk.kv_heads, mk.head_dim);
  return Status::success();
}

}  // namespace kiln
