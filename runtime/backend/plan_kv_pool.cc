#include "runtime/backend/plan_kv_pool.h"

namespace kiln {

KvPoolConfig kvPoolConfigFor(const Manifest& manifest, int64_t num_blocks) {
  return KvPoolConfig{.layers = manifest.kv_cache.layers,
                      .num_blocks = num_blocks,
                      .page_size = manifest.kv_cache.page_size,
                      .kv_heads = manifest.kv_cache.kv_heads,
                      .head_dim = manifest.kv_cache.head_dim,
                      .element = parseKvElement(manifest.kv_cache.type).value_or(KvElement::kF32)};
}

int64_t kvBlocksInBytes(const KvPoolConfig& kv, int64_t bytes) {
  const int64_t block = kv.blockBytes();
  return block > 0 && bytes > 0 ? bytes / block : 0;
}

Status checkPoolMatchesManifest(const KvPoolConfig& kv, const Manifest& manifest) {
  const KvCacheConfig& mk = manifest.kv_cache;
  if (kv.layers != mk.layers || kv.page_size != mk.page_size || kv.kv_heads != mk.kv_heads ||
      kv.head_dim != mk.head_dim)
    return makeError("kv pool config (layers {}, page_size {}, kv_heads {}, head_dim {}) does not "
                     "match {}: kv_cache (layers {}, page_size {}, kv_heads {}, head_dim {})",
                     kv.layers, kv.page_size, kv.kv_heads, kv.head_dim, manifest.path, mk.layers,
                     mk.page_size, mk.kv_heads, mk.head_dim);
  if (kvElementName(kv.element) != mk.type)
    return makeError("kv pool type {} does not match {}: kv_cache.type {}", kvElementName(kv.element),
                     manifest.path, mk.type);
  if (kvElementHasScales(kv.element) != (mk.scales == "token_head"))
    return makeError("kv pool type {} {} scales, but {}: kv_cache.scales is '{}'", kvElementName(kv.element),
                     kvElementHasScales(kv.element) ? "has" : "has no", manifest.path, mk.scales);
  return Status::success();
}

StatePoolConfig statePoolConfigFor(const Manifest& manifest, int64_t num_slots) {
  StatePoolConfig config;
  const StateCacheConfig& state = manifest.state_cache;
  for (const StateCacheLayer& layer : state.layers) {
    int64_t ssm = 1;
    for (int64_t e : layer.ssm) ssm *= e;
    config.layers.push_back({.conv_rows = layer.conv[0], .conv_channels = layer.conv[1], .ssm_elements = ssm});
  }
  config.num_slots = num_slots;
  config.conv_element_bytes = state.conv_type == "f32" ? 4 : 2;
  return config;
}

}  // namespace kiln
