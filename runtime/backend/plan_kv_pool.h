// The KV pool a plan asks for: its manifest's kv_cache shape (layers, page
// size, KV heads, head dim) with as many blocks as the caller can afford.
#pragma once

#include <cstdint>

#include "runtime/artifact/manifest.h"
#include "runtime/kv/block_pool.h"
#include "runtime/support/error.h"

namespace kiln {

// The pool shape an artifact's kv_cache asks for, with `num_blocks` blocks.
KvPoolConfig kvPoolConfigFor(const Manifest& manifest, int64_t num_blocks);

// A pool must have the artifact's kv_cache shape (layers, page, heads, dim).
Status checkPoolMatchesManifest(const KvPoolConfig& kv, const Manifest& manifest);

}  // namespace kiln
