// The executor's device and pinned host memory, and what lives at fixed
// places in it. DeviceMemory owns every allocation and frees it when it goes
// (device memory, then pinned host memory); the structs below only point
// into it:
//   - ActivationArena: every value of the entry at its planned offset
//     (bytes_per_token x T_max, zeroed), and the buffers of the values a
//     fusion moves out of it;
//   - KvPools: the paged K and V pools of every layer, zeroed;
//   - StatePools: the state-space layers' conv and SSM state slots, zeroed;
//   - BatchInputBuffer: the batch inputs at fixed offsets of one i32 buffer
//     and its pinned mirror, so a forward stages them with one copy.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string_view>
#include <vector>

#include "runtime/artifact/manifest.h"
#include "runtime/backend/batch.h"
#include "runtime/cuda/executor/device_context.h"
#include "runtime/kv/block_pool.h"
#include "runtime/kv/state_pool.h"
#include "runtime/support/error.h"

namespace kiln::cuda {

// Offsets in the weight allocation and buffer sizes are multiples of this.
constexpr int64_t kAlign = 256;
inline int64_t alignUp(int64_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

class DeviceMemory {
 public:
  explicit DeviceMemory(const DeviceContext& gpu) : gpu_(gpu) {}
  ~DeviceMemory();
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  // Out of memory: an error naming `what`, the MiB asked and free.
  Result<CUdeviceptr> alloc(int64_t bytes, const char* what);
  // alloc, then every byte set to zero.
  Result<CUdeviceptr> allocZeroed(int64_t bytes, const char* what);
  Result<void*> allocHost(int64_t bytes, const char* what);  // pinned

 private:
  const DeviceContext& gpu_;
  std::vector<CUdeviceptr> allocations_;
  std::vector<void*> host_allocations_;
};

struct ActivationArena {
  CUdeviceptr base = 0;
  int64_t bytes = 0;
  // Storage value id -> the buffer of its own a fusion gave it.
  std::map<int64_t, CUdeviceptr> own_storage;

  // bytes_per_token x T_max: the largest entry's (forward and verify share
  // the arena; they never run at once).
  Status allocate(DeviceMemory& memory, int64_t bytes_per_token, int64_t max_tokens);
  // One buffer for all of `values` (their lives must not overlap), as large
  // as the largest one's T_max rows. Returns its bytes (0: none of them is
  // a value of `entry`, nothing is allocated).
  Result<int64_t> shareOwnBuffer(DeviceMemory& memory, const Entry& entry, int64_t max_tokens,
                                 const std::vector<int64_t>& values, const char* what);
};

// The KV blocks that CudaExecutorOptions::gpu_memory_fraction leaves once
// weights and arena are allocated, less `reserve` bytes (for the scratch
// allocated after them); each block also costs its share of the
// block-table buffer. Too few (under 16): an error saying how much is left.
// `report`: the blocks on stderr.
// A block costs KvPoolConfig::blockBytes (the scales of int8/fp8 pools included).
Result<int64_t> kvBlocksForMemoryFraction(const DeviceContext& gpu, double fraction, const KvPoolConfig& kv,
                                          int64_t max_tokens, int64_t reserve, bool report);

// [2 x layers] pools of [num_blocks, page_size, kv_heads, head_dim] of
// the pool's element, one allocation: each layer's K pool, then its V pool;
// for int8/fp8 pools each followed by its scales, [num_blocks, Hkv,
// page_size] f32 (kv_quant.cuh).
struct KvPools {
  CUdeviceptr base = 0;
  int64_t pool_bytes = 0;   // one pool's values, aligned
  int64_t scale_bytes = 0;  // one pool's scales, aligned; 0 for bf16/f32 pools
  int layers = 0;
  int64_t num_slots = 0;  // num_blocks x page_size (rope_kv_append's bound)

  Status allocate(DeviceMemory& memory, const KvPoolConfig& kv);
  int64_t bytes() const { return (pool_bytes + scale_bytes) * 2 * layers; }
  CUdeviceptr pool(int layer, PoolRole role) const {
    return base + CUdeviceptr((pool_bytes + scale_bytes) * (2 * layer + (role == PoolRole::kKey ? 0 : 1)));
  }
  // The pool's scales; 0 for bf16/f32 pools.
  CUdeviceptr scales(int layer, PoolRole role) const {
    return scale_bytes ? pool(layer, role) + CUdeviceptr(pool_bytes) : 0;
  }
};

// Per state-space layer (runtime/kv/state_pool.h's layout, on the device):
// the carried conv inputs [slots, K-1, C] of the activation type and the SSM
// state [slots, I, N] | [slots, H, P, N] f32, each pool at an aligned
// offset of one allocation, zeroed. A slot is zeroed again, on the stream,
// whenever a sequence starts in it (zeroSlot).
struct StatePools {
  CUdeviceptr base = 0;
  struct Layer {
    int64_t conv_offset = 0, ssm_offset = 0;          // bytes from base
    int64_t conv_slot_bytes = 0, ssm_slot_bytes = 0;  // one slot's
  };
  std::vector<Layer> layers;
  int64_t total_bytes = 0;

  // Nothing allocated for a config without layers. A slot's bytes must be
  // whole 4-byte words (the zeroing's memset).
  Status allocate(DeviceMemory& memory, const StatePoolConfig& config);
  int64_t bytes() const { return total_bytes; }
  CUdeviceptr pool(int layer, StateRole role) const {
    const Layer& l = layers[size_t(layer)];
    return base + CUdeviceptr(role == StateRole::kConv ? l.conv_offset : l.ssm_offset);
  }
  // Enqueues the zeroing of `slot` in every layer's pools on the stream.
  Status zeroSlot(const DeviceContext& gpu, int32_t slot) const;
};

// kTreePositions and kTreeMask are speculative verify's tree_positions and
// tree_mask results, computed on the host (tree_verify.h) and staged like
// inputs; no entry names them as inputs.
enum InputId {
  kTokens, kPositions, kSlotMapping, kBlockTables, kQueryStart, kKvLens, kStateSlots, kTreePositions, kTreeMask,
  kNumInputs
};
// An entry input's name ("tokens", "slot_mapping", ...); nullopt for one
// the executor does not provide.
std::optional<InputId> parseInput(std::string_view name);

// Every input (state_slots too: its B entries, the state-space layers'
// slot of each sequence) has T_max + 1 elements, block tables the capacity of
// min(T_max, 256) rows of num_blocks; after them, for a plan with a verify
// entry, the tree positions (T_max + 1 i32) and the tree mask ([T_max,
// tree_nodes] u8, packed into i32 elements), staged only by verify.
struct BatchInputBuffer {
  CUdeviceptr device = 0;
  int32_t* staging = nullptr;  // pinned, mirrors `device`
  int64_t offset[kNumInputs] = {};  // i32 elements
  int64_t block_table_capacity = 0;  // i32 elements
  int64_t elems = 0;

  int64_t tree_nodes = 0;  // the tree mask's row bytes (0: no verify entry)

  // `device`; `tree_nodes`: the verify entry's tree (0: none).
  Status allocate(DeviceMemory& memory, int64_t max_tokens, int64_t num_blocks, int64_t tree_nodes = 0);
  // Lays out the offsets allocate() allocates (no memory touched).
  void layOut(int64_t max_tokens, int64_t num_blocks, int64_t tree_nodes);
  Status allocateStaging(DeviceMemory& memory);
  int64_t bytes() const { return elems * 4; }
  const int* at(int id) const { return reinterpret_cast<const int*>(device + CUdeviceptr(offset[id] * 4)); }
  // Packs `in` into `staging` at the fixed offsets, block tables in rows of
  // `max_blocks` (a graph's fixed stride, at least in.max_blocks; the rest
  // of each row zero). Returns the bytes to copy to `device`.
  size_t stage(const BatchInputs& in, int max_blocks);
  // A verify batch's tree positions and ancestor mask, computed from
  // in.parents and in.base_positions into `staging` (checked by
  // checkTreeParents first). Returns the bytes to copy from the tree
  // positions' offset on.
  size_t stageTree(const BatchInputs& in);
};

}  // namespace kiln::cuda
