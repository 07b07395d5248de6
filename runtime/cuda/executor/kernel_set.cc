#include "runtime/cuda/executor/kernel_set.h"

#include <algorithm>
#include <variant>

#include "codegen/cuda/instance_source.h"
#include "runtime/cuda/kernel_cache.h"

namespace kiln::cuda {

namespace cg = cuda_codegen;

KernelSet::~KernelSet() {
  for (CUmodule m : modules_) gpu_.d->cuModuleUnload(m);
}

void KernelSet::configure(const CudaTuning& tuning, const std::string& activation_type) {
  tuning_ = tuning;
  // Hopper (9.0) compiles every instance for sm_90a, the arch-specific
  // target, so the wgmma attention kernel can run there (instance_source).
  const bool hopper = cg::warpgroupMmaTarget(gpu_.arch);
  arch_ = hopper ? "sm_90a" : gpu_.arch;
  options_.flash_attention = tuning.flash_attention;
  options_.wgmma = hopper;
  options_.fused_prefill = tuning.fused_swiglu;
  const int smem_optin = gpu_.attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
  options_.stream_gemv = tuning.stream_gemv && cg::bulkCopyTarget(gpu_.arch) &&
                         smem_optin >= cg::gemvStreamSharedBytes();
  fold_norms_ = tuning.fold_norms && options_.stream_gemv;
  options_.activation_type = activation_type;
}

Status KernelSet::load(const Manifest& manifest, const Entry& entry, const std::vector<cg::SkinnyFusion>& fusions,
                       const std::string& logits_path, int64_t vocab, const char* logits_type, bool progress) {
  std::vector<KernelSource> sources;
  step_instance_.assign(entry.steps.size(), "");
  auto add = [&](const std::string& name, const std::string& kind, const cg::Instance& generated) {
    Kernel k;
    k.name = name;
    k.kind = kind;
    k.block = unsigned(generated.launch.block_threads);
    k.smem = unsigned(cg::configConstant(generated.source, "kSmemBytes", 0));
    k.rows_per_block = std::max(1, cg::configConstant(generated.source, "kRowsPerBlock", 1));
    k.tiles = cg::configConstant(generated.source, "kTiles", 0);
    k.block_m = cg::configConstant(generated.source, "kBlockM", 0);
    index_[name] = kernels_.size();
    kernels_.push_back(std::move(k));
    sources.push_back({name, generated.source});
  };
  for (size_t i = 0; i < entry.steps.size(); ++i) {
    const Step& step = entry.steps[i];
    if (step.kind == StepKind::kSplit) continue;  // a strided copy, no kernel
    cg::StepInstanceOptions options = options_;
    options.skinny_fusion = fusions[i].gemm_params;
    options.single_row_fusion = fold_norms_ ? fusions[i].single_row_params : nlohmann::json();
    options.norm_of_sum = tuning_.residual_epilogue ? fusions[i].norm_of_sum_params : nlohmann::json();
    auto instances = cg::stepInstances(step, options);
    if (!instances) return makeError("{} ({}): {}", step.path, stepKindName(step.kind), instances.error().message);
    for (const cg::StepInstance& inst : *instances) {
      if (inst.role == cg::InstanceRole::kStep) step_instance_[i] = inst.name;
      else extra_instances_[i][inst.role] = inst.name;
      if (index_.count(inst.name)) continue;
      auto generated = cg::instanceSource(inst.kind, inst.params, inst.name);
      if (!generated)
        return makeError("{} ({}): instance {}: {}", step.path, inst.kind, inst.name, generated.error().message);
      add(inst.name, inst.kind, *generated);
    }
  }
  const cg::StepInstance greedy = cg::greedyInstance(vocab, logits_type);
  auto generated = cg::instanceSource(greedy.kind, greedy.params, greedy.name);
  if (!generated) return makeError("{}: instance {}: {}", logits_path, greedy.name, generated.error().message);
  add(greedy.name, greedy.kind, *generated);

  KernelCacheOptions cache;
  cache.compile.arch = arch_;
  cache.progress = progress;
  auto compiled = compileKernels(sources, cache);
  if (!compiled)
    return makeError("JIT of {}'s kernels for {} failed: {}", manifest.path, arch_, compiled.error().message);
  compiled_ = compiled->compiled;
  cached_ = compiled->cached;
  const CudaDriver* d = gpu_.d;
  for (size_t i = 0; i < sources.size(); ++i) {
    const CompiledKernel& k = compiled->kernels[i];
    CUmodule module = nullptr;
    Status s = d->check(d->cuModuleLoadData(&module, k.cubin.data()), "cuModuleLoadData");
    if (!s.ok()) return makeError("instance {}: {}\n{}", k.name, s.error().message, k.log);
    modules_.push_back(module);
    KILN_RETURN_IF_ERROR(d->check(d->cuModuleGetFunction(&kernels_[i].fn, module, k.name.c_str()),
                                  "cuModuleGetFunction"));
  }
  return {};
}

const Kernel* KernelSet::stepKernel(size_t i) const {
  return step_instance_[i].empty() ? nullptr : &kernel(step_instance_[i]);
}

const std::map<cg::InstanceRole, std::string>* KernelSet::extraInstances(size_t i) const {
  auto it = extra_instances_.find(i);
  return it == extra_instances_.end() ? nullptr : &it->second;
}

Status KernelSet::optInSharedMemory(const Kernel& k) const {
  if (k.smem == 0) return {};
  return gpu_.d->check(gpu_.d->cuFuncSetAttribute(k.fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, int(k.smem)),
                       "cuFuncSetAttribute (dynamic shared memory)");
}

}  // namespace kiln::cuda
