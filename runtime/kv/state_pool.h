// The recurrent-state cache of state-space (Mamba) layers: one slot per
// running sequence, holding every SSM layer's carried conv inputs and SSM
// state. A slot's size does not depend on the sequence's length (the O(1)
// state), so there are no blocks and no tables: a sequence holds exactly
// one slot while it runs, and admission needs a free one.
//
// Layout, one pool per SSM layer l:
//   conv [slots, conv_rows, conv_channels]  activation type (conv_bytes per element)
//   ssm  [slots, ssm_elements]              f32
// The pool knows slots and a free list, nothing about requests; a slot is
// zeroed when it is handed out, so a new sequence never reads an old one's
// state (the backends zero the device copy on the same signal).
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/support/error.h"

namespace kiln {

struct StateLayerShape {
  int64_t conv_rows = 0;      // K - 1
  int64_t conv_channels = 0;  // I (mamba), I + 2 G N (mamba2)
  int64_t ssm_elements = 0;   // I·N (mamba), H·P·N (mamba2)
};

struct StatePoolConfig {
  std::vector<StateLayerShape> layers;  // the SSM layers, in order
  int64_t num_slots = 0;
  int64_t conv_element_bytes = 4;  // the activation type's
  // Bytes one slot takes over all layers (conv inputs + f32 SSM state).
  int64_t slotBytes() const;
};

// How many slots of `config`'s layers fit in `bytes`.
int64_t stateSlotsInBytes(const StatePoolConfig& config, int64_t bytes);

class StatePool {
 public:
  // Host-side storage is allocated only when `host_storage` (the CPU
  // backend's pools); the CUDA backend keeps its own device copy and uses
  // this object for the slot bookkeeping alone.
  static Result<StatePool> create(const StatePoolConfig& config, bool host_storage);

  const StatePoolConfig& config() const { return config_; }
  int64_t numSlots() const { return config_.num_slots; }
  int64_t numFree() const { return int64_t(free_.size()); }
  // Bytes of all slots (what memory accounting counts).
  int64_t bytes() const { return config_.slotBytes() * config_.num_slots; }

  // A free slot, zeroed; an error when every slot is held.
  Result<int32_t> acquire();
  // Returns a held slot; an error for a slot not held.
  Status release(int32_t slot);
  bool held(int32_t slot) const;

  // Host storage of `layer`'s conv inputs / SSM state for `slot` (nullptr
  // without host storage). The conv rows are f32 on the host.
  float* conv(int64_t layer, int32_t slot);
  float* ssm(int64_t layer, int32_t slot);

 private:
  StatePoolConfig config_;
  std::vector<int32_t> free_;  // a stack: the most recently released slot is reused first
  std::vector<bool> held_;
  std::vector<std::vector<float>> conv_, ssm_;  // per layer, [slots, ...]
};

}  // namespace kiln
