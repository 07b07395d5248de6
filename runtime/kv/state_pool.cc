#include "runtime/kv/state_pool.h"

#include <algorithm>

namespace kiln {

int64_t StatePoolConfig::slotBytes() const {
  int64_t bytes = 0;
  for (const StateLayerShape& l : layers) bytes += l.conv_rows * l.conv_channels * conv_element_bytes + l.ssm_elements * 4;
  return bytes;
}

int64_t stateSlotsInBytes(const StatePoolConfig& config, int64_t bytes) {
  const int64_t slot = config.slotBytes();
  return slot > 0 && bytes > 0 ? bytes / slot : 0;
}

Result<StatePool> StatePool::create(const StatePoolConfig& config, bool host_storage) {
  if (config.num_slots <= 0 || config.num_slots > (int64_t{1} << 24))
    return makeError("state pool: {} slots, expected 1 to 2^24", config.num_slots);
  for (size_t l = 0; l < config.layers.size(); ++l) {
    const StateLayerShape& s = config.layers[l];
    if (s.conv_rows < 0 || s.conv_channels <= 0 || s.ssm_elements <= 0)
      return makeError("state pool: layer {} has conv [{}, {}] and {} state elements, expected positive sizes", l,
                       s.conv_rows, s.conv_channels, s.ssm_elements);
  }
  StatePool pool;
  pool.config_ = config;
  pool.held_.assign(size_t(config.num_slots), false);
  for (int64_t s = config.num_slots - 1; s >= 0; --s) pool.free_.push_back(int32_t(s));
  if (host_storage) {
    for (const StateLayerShape& s : config.layers) {
      pool.conv_.emplace_back(size_t(config.num_slots * s.conv_rows * s.conv_channels), 0.0f);
      pool.ssm_.emplace_back(size_t(config.num_slots * s.ssm_elements), 0.0f);
    }
  }
  return pool;
}

Result<int32_t> StatePool::acquire() {
  if (free_.empty()) return makeError("state pool: all {} slots are held", config_.num_slots);
  const int32_t slot = free_.back();
  free_.pop_back();
  held_[size_t(slot)] = true;
  for (size_t l = 0; l < conv_.size(); ++l) {
    const StateLayerShape& s = config_.layers[l];
    std::fill_n(conv(int64_t(l), slot), s.conv_rows * s.conv_channels, 0.0f);
    std::fill_n(ssm(int64_t(l), slot), s.ssm_elements, 0.0f);
  }
  return slot;
}

Status StatePool::release(int32_t slot) {
  if (!held(slot)) return makeError("state pool: slot {} is not held", slot);
  held_[size_t(slot)] = false;
  free_.push_back(slot);
  return Status::success();
}

bool StatePool::held(int32_t slot) const { return slot >= 0 && slot < config_.num_slots && held_[size_t(slot)]; }

float* StatePool::conv(int64_t layer, int32_t slot) {
  if (conv_.empty()) return nullptr;
  const StateLayerShape& s = config_.layers[size_t(layer)];
  return conv_[size_t(layer)].data() + int64_t(slot) * s.conv_rows * s.conv_channels;
}

float* StatePool::ssm(int64_t layer, int32_t slot) {
  if (ssm_.empty()) return nullptr;
  return ssm_[size_t(layer)].data() + int64_t(slot) * config_.layers[size_t(layer)].ssm_elements;
}

}  // namespace kiln
