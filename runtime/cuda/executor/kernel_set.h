// The kernel instances a forward runs, generated, compiled and loaded: for
// each step those codegen/cuda/step_instances.h lists (the step's own and,
// by role, those run beside it or in its place, with the neighbours
// skinny_fusion.h folds into skinny gemms; kiln-kernels shows the same
// list), and the greedy argmax over the logits. Each instance is generated
// once, compiled through the JIT cache (kernel_cache.h) for the device
// (sm_90a on Hopper, for the wgmma kernels) and loaded as a module of its
// own, which the set unloads when it goes. Besides instance_source.h's
// generator, this is the one place that reads the steps' params to choose
// kernels.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "codegen/cuda/skinny_fusion.h"
#include "codegen/cuda/step_instances.h"
#include "runtime/artifact/manifest.h"
#include "runtime/cuda/cuda_tuning.h"
#include "runtime/cuda/executor/device_context.h"

namespace kiln::cuda {

// A loaded instance and the launch constants of its generated Config.
struct Kernel {
  std::string name;
  std::string kind;        // its template ("decode_attention", ...)
  CUfunction fn = nullptr;
  unsigned block = 0;      // threads a block
  unsigned smem = 0;       // kSmemBytes: dynamic shared memory (0: none)
  int rows_per_block = 1;  // kRowsPerBlock: a skinny gemm block's weight rows
  int tiles = 0;           // kTiles: gemv_stream's weight tiles (0: not streamed)
  int block_m = 0;         // kBlockM: flash attention's query rows a block
};

class KernelSet {
 public:
  explicit KernelSet(const DeviceContext& gpu) : gpu_(gpu) {}
  ~KernelSet();
  KernelSet(const KernelSet&) = delete;
  KernelSet& operator=(const KernelSet&) = delete;

  // Which instances this device and `tuning` take: the JIT target, the
  // tensor-core prefill kernels, the streamed single-row gemms (sm_90's
  // bulk copies and enough shared memory a block) and the folds.
  void configure(const CudaTuning& tuning, const std::string& activation_type);
  // The residual_rms_norm before a gemm is folded into its streamed
  // single-row instance (CudaTuning::fold_norms, where gemms stream).
  bool foldsNorms() const { return fold_norms_; }

  // Gathers every step's instances and the argmax over `logits_path`'s
  // [rows, vocab] logits of `logits_type`, generates, compiles (`progress`:
  // a bar on stderr) and loads them. Errors name the step (or the logits)
  // and instance.
  Status load(const Manifest& manifest, const Entry& entry, const std::vector<cuda_codegen::SkinnyFusion>& fusions,
              const std::string& logits_path, int64_t vocab, const char* logits_type, bool progress);

  // Step i's own instance; null for a step without one (split, a copy; an
  // f32 plan's gemm, cuBLASLt's).
  const Kernel* stepKernel(size_t i) const;
  // The instances step i runs beside its own or in its place, by role.
  const std::map<cuda_codegen::InstanceRole, std::string>* extraInstances(size_t i) const;
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
  cuda_codegen::StepInstanceOptions options_;
  CudaTuning tuning_;
  bool fold_norms_ = false;
  std::vector<Kernel> kernels_;            // in compile order, the argmax last
  std::map<std::string, size_t> index_;    // name -> kernels_
  std::vector<std::string> step_instance_;  // per step; "" for none
  std::map<size_t, std::map<cuda_codegen::InstanceRole, std::string>> extra_instances_;  // by step
  std::vector<CUmodule> modules_;
  int compiled_ = 0, cached_ = 0;
};

}  // namespace kiln::cuda
