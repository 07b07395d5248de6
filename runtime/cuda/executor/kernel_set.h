// The kernel instances a forward runs, generated, compiled and loaded: for
// each step, per role, the first of the plan's variants (kernel_variant.h,
// chosen by the compiler for the plan's target) whose features this device
// and the user's CudaTuning switch on, and the greedy argmax over the
// logits. Each instance is generated once, compiled through the JIT cache
// (kernel_cache.h) for the device (sm_90a on Hopper, for the wgmma kernels)
// and loaded as a module of its own, which the set unloads when it goes.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "runtime/artifact/manifest.h"
#include "runtime/cuda/cuda_tuning.h"
#include "runtime/cuda/executor/device_context.h"

namespace kiln::cuda {

// A variant the backend runs for a step: its role and rows, and its
// instance's name where it has one ("" for cuBLASLt and work done by a
// neighbouring step).
struct ChosenVariant {
  VariantRole role = VariantRole::kStep;
  RowRange rows;
  std::string instance;
  bool own_storage = false;
};

// A loaded instance and the launch constants of its generated Config.
struct Kernel {
  std::string name;
  std::string kind;        // its template ("decode_attention", ...)
  CUfunction fn = nullptr;
  unsigned block = 0;      // threads a block
  unsigned smem = 0;       // kSmemBytes: dynamic shared memory (0: none)
  int rows_per_block = 1;  // kRowsPerBlock: a skinny gemm block's weight rows
  int max_rows = 8;        // kMaxRows: a skinny gemm block's rows of x
  int tiles = 0;           // kTiles: gemv_stream's weight tiles (0: not streamed)
  int block_m = 0;         // kBlockM: flash attention's query rows a block (the sparse GEMM's rows of x)
  int block_n = 0;         // kBlockN: the sparse GEMM's weight rows a block
};

// The roles a batch-invariant backend keeps (CudaTuning::batch_invariant):
// those whose kernel runs at every row count.
bool batchInvariantRole(VariantRole role);

class KernelSet {
 public:
  explicit KernelSet(const DeviceContext& gpu) : gpu_(gpu) {}
  ~KernelSet();
  KernelSet(const KernelSet&) = delete;
  KernelSet& operator=(const KernelSet&) = delete;

  // Checks the plan's target runs on this device and sets the JIT target
  // and the features the variants may need: `tuning`'s switches, where the
  // device has them (sm_90's bulk copies and enough shared memory a block
  // for the streamed gemms).
  Status configure(const CudaTuning& tuning, const std::string& target);
  const KernelFeatures& features() const { return features_; }

  // Chooses every step's variants, and with the argmax over `logits_path`'s
  // [rows, vocab] logits of `logits_type` generates, compiles (`progress`:
  // a bar on stderr) and loads their instances. Errors name the step (or
  // the logits) and instance.
  Status load(const Manifest& manifest, const Entry& entry, const std::string& logits_path, int64_t vocab,
              const char* logits_type, bool progress);

  // Step i's chosen variants, in the plan's order.
  const std::vector<ChosenVariant>& chosen(size_t i) const { return chosen_[i]; }
  const Kernel& kernel(const std::string& name) const { return kernels_[index_.at(name)]; }
  const Kernel& greedy() const { return kernels_.back(); }
  // Lets `k` use its dynamic shared memory above the 48 KiB default (a
  // no-op without any); needed before its first launch.
  Status optInSharedMemory(const Kernel& k) const;

  size_t size() const { return kernels_.size(); }
  int compiled() const { return compiled_; }  // fresh compiles
  int cached() const { return cached_; }      // JIT cache hits

 private:
  const DeviceContext& gpu_;
  std::string arch_;  // the JIT target
  KernelFeatures features_;
  bool batch_invariant_ = false;  // CudaTuning's: only the row-count-independent roles
  std::vector<Kernel> kernels_;          // in compile order, the argmax last
  std::map<std::string, size_t> index_;  // name -> kernels_
  std::vector<std::vector<ChosenVariant>> chosen_;  // per step
  std::vector<CUmodule> modules_;
  int compiled_ = 0, cached_ = 0;
};

}  // namespace kiln::cuda
