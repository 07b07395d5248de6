// The KV pool a plan asks for: its manifest's kv_cache shape (layers, page
// size, KV heads, head dim) and element (with its scales for int8/fp8) with
// as many blocks as the caller can afford.
#pragma once

#include <cstdint>

#include "runtime/artifact/manifest.h"
#include "runtime/kv/block_pool.h"
#include "runtime/kv/state_pool.h"
#include "runtime/support/error.h"

namespace kiln {

// The pool shape an artifact's kv_cache asks for, with `num_blocks` blocks.
// A type Manifest::parse would refuse maps to f32, which
// checkPoolMatchesManifest then refuses.
KvPoolConfig kvPoolConfigFor(const Manifest& manifest, int64_t num_blocks);

// How many blocks of `kv`'s shape fit in `bytes` of K and V pools, their
// scales included (KvPoolConfig::blockBytes).
int64_t kvBlocksInBytes(const KvPoolConfig& kv, int64_t bytes);

// A pool must have the artifact's kv_cache shape (layers, page, heads, dim)
// and type, and hold scales exactly where kv_cache.scales says.
Status checkPoolMatchesManifest(const KvPoolConfig& kv, const Manifest& manifest);

// The state pool an artifact's state_cache asks for, with `num_slots` slots
// (no layers for an attention-only plan).
StatePoolConfig statePoolConfigFor(const Manifest& manifest, int64_t num_slots);

}  // namespace kiln
