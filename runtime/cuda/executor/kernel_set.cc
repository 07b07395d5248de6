#include "runtime/cuda/executor/kernel_set.h"

#include <algorithm>
#include <variant>

#include "codegen/cuda/instance_source.h"
#include "codegen/cuda/kernel_selection.h"
#include "runtime/artifact/plan_options.h"
#include "runtime/cuda/kernel_cache.h"

namespace kiln::cuda {

namespace cg = cuda_codegen;

bool batchInvariantRole(VariantRole role) {
  return role == VariantRole::kStep || role == VariantRole::kCublasLt || role == VariantRole::kDequantize;
}

KernelSet::~KernelSet() {
  for (CUmodule m : modules_) gpu_.d->cuModuleUnload(m);
}

Status KernelSet::configure(const CudaTuning& tuning, const std::string& target) {
  // A plan's variants run on its target's architecture and later ones,
  // except sm_90a's (Hopper's wgmma), which runs on 9.0 only.
  const int device = cg::archVersion(gpu_.arch), wanted = cg::archVersion(target);
  const bool runs = wanted > 0 && (target == "sm_90a" ? device == 90 : device >= wanted);
  if (!runs)
    return makeError("the plan's kernels were chosen for target {}, which does not run on this {} ({}); compile it "
                     "with --target {}",
                     target, gpu_.name, gpu_.arch, targetForDevice(gpu_.major, gpu_.minor).value_or("cpu"));
  // Hopper (9.0) compiles every instance for sm_90a, the arch-specific
  // target, so the wgmma kernels can run there (instance_source).
  arch_ = cg::warpgroupMmaTarget(gpu_.arch) ? "sm_90a" : gpu_.arch;
  const int smem_optin = gpu_.attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
  features_.stream_gemv =
      tuning.stream_gemv && cg::bulkCopyTarget(gpu_.arch) && smem_optin >= cg::gemvStreamSharedBytes();
  features_.fold_norms = tuning.fold_norms;
  features_.residual_epilogue = tuning.residual_epilogue;
  features_.fused_swiglu = tuning.fused_swiglu;
  features_.flash_attention = tuning.flash_attention;
  batch_invariant_ = tuning.batch_invariant;
  return {};
}

Status KernelSet::load(const Manifest& manifest, const Entry& entry, const std::string& logits_path, int64_t vocab,
                       const char* logits_type, bool progress) {
  std::vector<KernelSource> sources;
  chosen_.assign(entry.steps.size(), {});
  auto add = [&](const std::string& name, const std::string& kind, const cg::Instance& generated) {
    Kernel k;
    k.name = name;
    k.kind = kind;
    k.block = unsigned(generated.launch.block_threads);
    k.smem = unsigned(cg::configConstant(generated.source, "kSmemBytes", 0));
    k.rows_per_block = std::max(1, cg::configConstant(generated.source, "kRowsPerBlock", 1));
    k.max_rows = std::max(1, cg::configConstant(generated.source, "kMaxRows", 8));
    k.tiles = cg::configConstant(generated.source, "kTiles", 0);
    k.block_m = cg::configConstant(generated.source, "kBlockM", 0);
    k.block_n = cg::configConstant(generated.source, "kBlockN", 0);
    index_[name] = kernels_.size();
    kernels_.push_back(std::move(k));
    sources.push_back({name, generated.source});
  };
  for (size_t i = 0; i < entry.steps.size(); ++i) {
    const Step& step = entry.steps[i];
    // A split is a strided copy; verify's index steps run on the host.
    if (step.variants.empty() && step.kind != StepKind::kSplit && !cg::runsOnHost(step.kind))
      return makeError("{} ({}): the plan lists no kernel variants for it", step.path, stepKindName(step.kind));
    for (const KernelVariant* v : chooseVariants(step.variants, features_)) {
      ChosenVariant chosen{v->role, v->rows, v->instance, v->own_storage};
      if (batch_invariant_) {
        // One kernel for every row count: the step's own, or cuBLASLt
        // (after expanding a quantized weight); the rest are chosen by
        // row count and would give a row other rounding in another batch.
        if (!batchInvariantRole(v->role)) continue;
        chosen.rows = RowRange{};
      }
      chosen_[i].push_back(chosen);
      if (v->instance.empty() || index_.count(v->instance)) continue;
      auto generated = cg::instanceSource(v->kind, v->params, v->instance);
      if (!generated)
        return makeError("{} ({}): instance {}: {}", step.path, v->kind, v->instance, generated.error().message);
      add(v->instance, v->kind, *generated);
    }
  }
  const cg::GreedyInstance greedy = cg::greedyInstance(vocab, logits_type);
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

Status KernelSet::optInSharedMemory(const Kernel& k) const {
  if (k.smem == 0) return {};
  return gpu_.d->check(gpu_.d->cuFuncSetAttribute(k.fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, int(k.smem)),
                       "cuFuncSetAttribute (dynamic shared memory)");
}

}  // namespace kiln::cuda
