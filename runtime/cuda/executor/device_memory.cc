#include "runtime/cuda/executor/device_memory.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <span>
#include <utility>

#include "runtime/backend/tree_verify.h"
#include "runtime/cuda/executor/kiln_assign.h"

namespace kiln::cuda {

DeviceMemory::~DeviceMemory() {
  for (CUdeviceptr p : allocations_) gpu_.d->cuMemFree_v2(p);
  for (void* p : host_allocations_) gpu_.x.memFreeHost(p);
}

Result<CUdeviceptr> DeviceMemory::alloc(int64_t bytes, const char* what) {
  const CudaDriver* d = gpu_.d;
  CUdeviceptr p = 0;
  CUresult r = d->cuMemAlloc_v2(&p, size_t(std::max<int64_t>(bytes, 1)));
  if (r != CUDA_SUCCESS) {
    size_t free_bytes = 0, total = 0;
    gpu_.x.memGetInfo(&free_bytes, &total);
    return makeError("cannot allocate {} on the GPU: asked {:.1f} MiB, {:.1f} MiB free of {:.1f} "
                     "MiB ({})",
                     what, double(bytes) / (1 << 20), double(free_bytes) / (1 << 20),
                     double(total) / (1 << 20), d->describe(r));
  }
  allocations_.push_back(p);
  return p;
}

Result<CUdeviceptr> DeviceMemory::allocZeroed(int64_t bytes, const char* what) {
  KILN_ASSIGN(p, alloc(bytes, what));
  KILN_RETURN_IF_ERROR(gpu_.d->check(gpu_.d->cuMemsetD8_v2(p, 0, size_t(bytes)), "cuMemsetD8"));
  return p;
}

Result<void*> DeviceMemory::allocHost(int64_t bytes, const char* what) {
  void* p = nullptr;
  CUresult r = gpu_.x.memAllocHost(&p, size_t(std::max<int64_t>(bytes, 1)));
  if (r != CUDA_SUCCESS)
    return makeError("cannot allocate {} bytes of pinned host memory for {}: {}", bytes, what,
                     gpu_.d->describe(r));
  host_allocations_.push_back(p);
  return p;
}

Status ActivationArena::allocate(DeviceMemory& memory, int64_t bytes_per_token, int64_t max_tokens) {
  bytes = alignUp(bytes_per_token * max_tokens);
  KILN_ASSIGN(arena, memory.allocZeroed(bytes, "the activation arena"));
  base = arena;
  return {};
}

Result<int64_t> ActivationArena::shareOwnBuffer(DeviceMemory& memory, const Entry& entry, int64_t max_tokens,
                                                const std::vector<int64_t>& values, const char* what) {
  int64_t largest = 0;
  for (int64_t id : values)
    if (const EntryValue* v = entry.findValue(id)) largest = std::max(largest, v->row_bytes * max_tokens);
  if (largest == 0) return int64_t(0);
  KILN_ASSIGN(buffer, memory.alloc(alignUp(largest), what));
  for (int64_t id : values) own_storage[id] = buffer;
  return alignUp(largest);
}

Result<int64_t> kvBlocksForMemoryFraction(const DeviceContext& gpu, double fraction, const KvPoolConfig& kv,
                                          int64_t max_tokens, int64_t reserve, bool report) {
  size_t free_bytes = 0, total_bytes = 0;
  KILN_RETURN_IF_ERROR(gpu.d->check(gpu.x.memGetInfo(&free_bytes, &total_bytes), "cuMemGetInfo"));
  const int64_t budget = int64_t(fraction * double(total_bytes)) - int64_t(total_bytes - free_bytes) - reserve;
  const int64_t per_block = kv.blockBytes() + std::min<int64_t>(max_tokens, 256) * 4;
  if (budget < 16 * per_block)
    return makeError("--gpu-memory-fraction {}: {:.1f} GiB of {:.1f} GiB would leave {:.1f} MiB for "
                     "the KV cache after weights and activations ({:.1f} GiB in use); at least "
                     "{:.1f} MiB (16 blocks) is needed",
                     fraction, fraction * double(total_bytes) / (1 << 30), double(total_bytes) / (1 << 30),
                     double(std::max<int64_t>(budget, 0)) / (1 << 20), double(total_bytes - free_bytes) / (1 << 30),
                     double(16 * per_block) / (1 << 20));
  const int64_t num_blocks = budget / per_block;
  if (report)
    fmt::print(stderr, "cuda: KV cache of {} blocks ({} tokens, {:.1f} GiB) from --gpu-memory-fraction {}\n",
               num_blocks, num_blocks * kv.page_size, double(num_blocks * per_block) / (1 << 30), fraction);
  return num_blocks;
}

Status KvPools::allocate(DeviceMemory& memory, const KvPoolConfig& kv) {
  pool_bytes = alignUp(kv.poolBytes());
  scale_bytes = kv.scaleBytes() ? alignUp(kv.scaleBytes()) : 0;
  layers = kv.layers;
  KILN_ASSIGN(pools, memory.allocZeroed(bytes(), "the KV cache pools"));
  base = pools;
  num_slots = kv.num_blocks * kv.page_size;
  return {};
}

Status StatePools::allocate(DeviceMemory& memory, const StatePoolConfig& config) {
  layers.clear();
  total_bytes = 0;
  for (size_t l = 0; l < config.layers.size(); ++l) {
    const StateLayerShape& shape = config.layers[l];
    Layer layer;
    layer.conv_slot_bytes = shape.conv_rows * shape.conv_channels * config.conv_element_bytes;
    layer.ssm_slot_bytes = shape.ssm_elements * 4;
    if (layer.conv_slot_bytes % 4 != 0)
      return makeError("state pool layer {}: a conv slot of {} x {} takes {} bytes, expected whole 4-byte words", l,
                       shape.conv_rows, shape.conv_channels, layer.conv_slot_bytes);
    layer.conv_offset = total_bytes;
    total_bytes += alignUp(layer.conv_slot_bytes * config.num_slots);
    layer.ssm_offset = total_bytes;
    total_bytes += alignUp(layer.ssm_slot_bytes * config.num_slots);
    layers.push_back(layer);
  }
  if (layers.empty()) return {};
  KILN_ASSIGN(pools, memory.allocZeroed(total_bytes, "the state-space layers' state pools"));
  base = pools;
  return {};
}

Status StatePools::zeroSlot(const DeviceContext& gpu, int32_t slot) const {
  for (const Layer& l : layers)
    for (auto [offset, bytes] : {std::pair{l.conv_offset, l.conv_slot_bytes}, std::pair{l.ssm_offset, l.ssm_slot_bytes}})
      KILN_RETURN_IF_ERROR(gpu.d->check(gpu.x.memsetD32Async(base + CUdeviceptr(offset + slot * bytes), 0,
                                                             size_t(bytes / 4), gpu.stream),
                                        "cuMemsetD32Async (a fresh sequence's state slot)"));
  return {};
}

std::optional<InputId> parseInput(std::string_view name) {
  if (name == "tokens") return kTokens;
  if (name == "positions") return kPositions;
  if (name == "slot_mapping") return kSlotMapping;
  if (name == "block_tables") return kBlockTables;
  if (name == "query_start") return kQueryStart;
  if (name == "kv_lens") return kKvLens;
  if (name == "state_slots") return kStateSlots;
  return std::nullopt;
}

void BatchInputBuffer::layOut(int64_t max_tokens, int64_t num_blocks, int64_t nodes) {
  int64_t at = 0;
  for (int id : {kTokens, kPositions, kSlotMapping, kQueryStart, kKvLens, kStateSlots}) {
    offset[id] = at;
    at += max_tokens + 1;
  }
  offset[kBlockTables] = at;
  block_table_capacity = std::max<int64_t>(num_blocks, 1) * std::min<int64_t>(max_tokens, 256);
  at += block_table_capacity;
  tree_nodes = nodes;
  offset[kTreePositions] = at;
  if (nodes > 0) at += max_tokens + 1;
  offset[kTreeMask] = at;
  if (nodes > 0) at += (max_tokens * nodes + 3) / 4;
  elems = at;
}

Status BatchInputBuffer::allocate(DeviceMemory& memory, int64_t max_tokens, int64_t num_blocks, int64_t nodes) {
  layOut(max_tokens, num_blocks, nodes);
  KILN_ASSIGN(inputs, memory.alloc(bytes(), "the batch inputs"));
  device = inputs;
  return {};
}

Status BatchInputBuffer::allocateStaging(DeviceMemory& memory) {
  KILN_ASSIGN(pinned, memory.allocHost(bytes(), "the batch inputs"));
  staging = static_cast<int32_t*>(pinned);
  return {};
}

size_t BatchInputBuffer::stage(const BatchInputs& in, int max_blocks) {
  const int64_t b = int64_t(in.kv_lens.size());
  auto put = [&](InputId id, std::span<const int32_t> v) {
    std::memcpy(staging + offset[id], v.data(), v.size() * 4);
  };
  put(kTokens, in.tokens);
  put(kPositions, in.positions);
  put(kSlotMapping, in.slot_mapping);
  put(kQueryStart, in.query_start);
  put(kKvLens, in.kv_lens);
  put(kStateSlots, in.state_slots);  // empty for a plan without state-space layers
  int32_t* tables = staging + offset[kBlockTables];
  if (max_blocks == in.max_blocks) {
    put(kBlockTables, in.block_tables);
  } else {
    for (int64_t r = 0; r < b; ++r) {
      std::memcpy(tables + r * max_blocks, in.block_tables.data() + r * in.max_blocks,
                  size_t(in.max_blocks) * 4);
      std::fill(tables + r * max_blocks + in.max_blocks, tables + (r + 1) * max_blocks, 0);
    }
  }
  return size_t(offset[kBlockTables] + b * max_blocks) * 4;
}

size_t BatchInputBuffer::stageTree(const BatchInputs& in) {
  treePositions(in.parents, in.base_positions, in.query_start, staging + offset[kTreePositions]);
  treeAncestorMask(in.parents, in.query_start, tree_nodes, reinterpret_cast<uint8_t*>(staging + offset[kTreeMask]));
  return size_t(offset[kTreeMask] - offset[kTreePositions]) * 4 + in.tokens.size() * size_t(tree_nodes);
}

}  // namespace kiln::cuda
