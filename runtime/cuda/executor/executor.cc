#include "runtime/cuda/executor/executor.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <set>
#include <vector>

#include "codegen/kernels/kernel_params.cuh"
#include "runtime/backend/plan_kv_pool.h"
#include "runtime/backend/tree_verify.h"
#include "runtime/cuda/executor/attention.h"
#include "runtime/cuda/executor/bound_step.h"
#include "runtime/cuda/executor/device_context.h"
#include "runtime/cuda/executor/device_memory.h"
#include "runtime/cuda/executor/forward_timer.h"
#include "runtime/cuda/executor/gemm_dispatch.h"
#include "runtime/cuda/executor/gemm_planner.h"
#include "runtime/cuda/executor/gemm_step.h"
#include "runtime/cuda/executor/greedy_argmax.h"
#include "runtime/cuda/executor/kernel_set.h"
#include "runtime/cuda/executor/kiln_assign.h"
#include "runtime/cuda/executor/launch_shape.h"
#include "runtime/cuda/executor/launcher.h"
#include "runtime/cuda/executor/moe_step.h"
#include "runtime/cuda/executor/ssm_step.h"
#include "runtime/cuda/executor/weight_forms.h"
#include "runtime/numerics/quant.h"
#include "runtime/support/thread_pool.h"

namespace kiln::cuda {

namespace kk = kiln::kernels;

namespace {

// Decode batches and verify batches of up to this many sequences replay a
// captured CUDA graph.
constexpr int64_t kMaxGraphBatch = 256;
// Verify shapes seen once and not yet captured, kept at most this many (then
// forgotten all at once): a bound, not a cache.
constexpr size_t kMaxVerifyShapesSeen = 1024;

// The manifest's `forward` entry, once what the CUDA executor runs is
// checked (before anything touches the driver).
Result<const Entry*> forwardEntry(const Manifest& manifest, const KvPoolConfig& kv, int64_t max_tokens) {
  const std::string& mpath = manifest.path;
  const Entry* entry = manifest.findEntry("forward");
  if (!entry) return makeError("{}: entries: missing entry 'forward'", mpath);
  if (manifest.activation_type != "bf16" && manifest.activation_type != "f32")
    return makeError("{}: activation_type: the CUDA executor runs bf16 or f32 activations, got {}", mpath,
                     manifest.activation_type);
  if (manifest.world_size != 1)
    return makeError("{}: world_size: the CUDA executor runs world_size 1, got {} (a multi-rank plan needs the "
                     "MPI/NCCL launcher of issue #26, not built yet)",
                     mpath, manifest.world_size);
  const KvCacheConfig& mk = manifest.kv_cache;
  if (mk.type == "f16")
    return makeError("{}: kv_cache.type: the CUDA pools hold bf16, f32, int8 or fp8e4m3, got {}", mpath, mk.type);
  KILN_RETURN_IF_ERROR(checkPoolMatchesManifest(kv, manifest));
  if (max_tokens <= 0 || max_tokens > (int64_t(1) << 20))
    return makeError("token budget {} is out of range [1, {}]", max_tokens, int64_t(1) << 20);
  if (entry->outputs.size() != 1 || entry->outputs[0].name != "logits")
    return makeError("{}: entries.forward.outputs: expected one output named 'logits'", mpath);
  return entry;
}

// The plan's `verify` entry (kiln-compile --spec-tree), if it has one: its
// outputs as the CPU executor reads them, and its tree's nodes (the
// tree_mask step's row) and path width (the accepted output's row).
struct VerifyEntry {
  const Entry* entry = nullptr;
  int64_t tree_nodes = 0;
  int64_t path_width = 1;
};

Result<VerifyEntry> verifyEntry(const Manifest& manifest) {
  VerifyEntry v;
  v.entry = manifest.findEntry("verify");
  if (!v.entry) return v;
  const std::string where = manifest.path + ": entries.verify";
  const std::vector<EntryOutput>& outs = v.entry->outputs;
  if (outs.size() != 3 || outs[0].name != "logits" || outs[1].name != "accepted" || outs[2].name != "accepted_count")
    return makeError("{}.outputs: expected logits, accepted and accepted_count", where);
  const EntryValue* accepted = v.entry->findValue(outs[1].value);
  for (const Step& step : v.entry->steps)
    if (step.kind == StepKind::kTreeMask && step.results.size() == 1)
      if (const EntryValue* mask = v.entry->findValue(step.results[0])) v.tree_nodes = mask->row_bytes;
  if (!accepted || accepted->type != "i32" || v.tree_nodes <= 0)
    return makeError("{}: expected a tree_mask step and an i32 accepted output", where);
  v.path_width = accepted->row_bytes / 4;
  return v;
}

}  // namespace

// What the executor holds on the device. Members go in the reverse of their
// order here, once finish() has made the context current and drained the
// stream: the step and forward timers (printing the forward report), the
// verify and decode graphs, cuBLASLt's plans and handle, the modules,
// device and pinned memory, and last the stream and the context. The rest
// point into these.
struct CudaExecutor::Backend {
  explicit Backend(const CudaTuning& switches) : tuning(switches) {}
  ~Backend() { gpu.finish(); }

  const CudaTuning tuning;
  DeviceContext gpu;
  DeviceMemory memory{gpu};
  KernelSet kernels{gpu};
  KernelSet verify_kernels{gpu};
  GemmPlanner gemms{gpu, memory, tuning};
  GraphCache graphs{gpu};
  GraphCache verify_graphs{gpu};  // verify batches' own, so they never evict decode's
  ForwardTimer forward_timer{gpu};
  StepTimer step_timer{gpu};

  Launcher launch{gpu};
  ActivationArena arena;
  KvPools kv_pools;
  StatePools states;  // empty without state-space layers
  BatchInputBuffer inputs;
  std::vector<BoundStep> steps;
  SplitKvScratch split_kv;
  GreedyArgmax argmax;
  DeviceValue logits;
  void* logits_host = nullptr;  // pinned, [T_max, vocab] of the logits' type
  // The verify entry, if the plan has one: its steps bound to the same
  // arena (its own buffers for what its fusions move), replayed from a
  // graph of verify_graphs from a shape's second call on (the first runs
  // step by step: an engine's trees make many shapes that never recur);
  // its logits [N, vocab], a row per tree node.
  ActivationArena verify_arena;
  std::vector<BoundStep> verify_steps;
  DeviceValue verify_logits;
  int64_t tree_nodes = 0, path_width = 1;
  std::set<LaunchShape> verify_shapes_seen;  // run once, not captured
  // The LayerSkip draft entry (kiln-compile --spec-layerskip K), if any:
  // bound as verify's is, over the same arena and pools; its logits
  // [N, vocab], a row per tree node.
  KernelSet draft_kernels{gpu};
  ActivationArena draft_arena;
  std::vector<BoundStep> draft_steps;
  DeviceValue draft_logits;
  int64_t draft_layers = 0;
  // The LM head: forward's and verify's gemm steps writing their logits
  // (-1: none), and the rows the latest forward or verify left in the
  // input of one of them, copied back to `hidden_host` on demand.
  int head_step = -1, verify_head_step = -1;
  DeviceValue hidden;  // invalid: no forward or verify yet
  int64_t hidden_rows = 0;
  bool hidden_copied = false;
  std::vector<uint8_t> hidden_raw;
  std::vector<float> hidden_host;
  // Copies `hidden` back as f32 (once per forward or verify).
  Status copyHiddenBack();

  // Every step of `list` (`steps` or `verify_steps`) on the stream, for a
  // batch of this shape whose inputs are already in `inputs`; a greedy
  // shape ends in the argmax over `out`'s rows.
  Status enqueueSteps(const std::vector<BoundStep>& list, const DeviceValue& out, const LaunchShape& shape);
  // A verify or draft batch's inputs, its tree positions and mask with
  // them, staged and copied into `inputs` on the stream (tables in rows of
  // `max_blocks`).
  Status uploadTreeBatch(const BatchInputs& in, int max_blocks);
  // The graph in `cache` of `list` at `shape`, captured from enqueueSteps
  // (ending in `out`'s argmax when shape.greedy) on first use.
  Result<CUgraphExec> graphOf(GraphCache& cache, const std::vector<BoundStep>& list, const DeviceValue& out,
                              const LaunchShape& shape);
  // After a forward's launch: copies `bytes` of `from` back to `to`, waits
  // for the stream and adds the forward's times.
  Status copyBackAndWait(void* to, CUdeviceptr from, size_t bytes, const char* what, const LaunchShape& shape);
};

namespace {
// The gemm step of `steps` that writes `logits` (the LM head), or -1: the
// last one writing there, since the arena gives the logits' rows to earlier
// values whose lifetimes ended before.
int lmHeadStep(const std::vector<BoundStep>& steps, const DeviceValue& logits) {
  for (size_t i = steps.size(); i-- > 0;) {
    const BoundStep& s = steps[i];
    if (s.kind == StepKind::kGemm && !s.results.empty() && s.results[0].ptr == logits.ptr && !s.args.empty() &&
        s.args[0].valid)
      return int(i);
  }
  return -1;
}
}  // namespace

CudaExecutor::~CudaExecutor() {
  if (backend_ && !backend_->step_timer.profile().empty())
    fmt::print(stderr, "{}", backend_->step_timer.profile().report());
}

int64_t CudaExecutor::graphCaptures() const {
  return backend_->graphs.captures() + backend_->verify_graphs.captures();
}

Result<std::unique_ptr<CudaExecutor>> CudaExecutor::create(const Manifest& manifest,
                                                           const WeightStore& weights,
                                                           const KvPoolConfig& kv_requested,
                                                           int64_t max_tokens,
                                                           const CudaExecutorOptions& options) {
  KvPoolConfig kv = kv_requested;  // num_blocks may come from gpu_memory_fraction
  KILN_ASSIGN(entry, forwardEntry(manifest, kv_requested, max_tokens));
  const bool state_plan = !manifest.state_cache.layers.empty();
  if (state_plan) {
    if (options.state_slots <= 0)
      return makeError("{}: state_cache: the plan has state-space layers; expected state slots > 0 (one per "
                       "sequence run at once), got {}",
                       manifest.path, options.state_slots);
    if (manifest.state_cache.conv_type != manifest.activation_type)
      return makeError("{}: state_cache.conv_type: the CUDA executor keeps the carried conv inputs in the "
                       "activation type ({}), got {}",
                       manifest.path, manifest.activation_type, manifest.state_cache.conv_type);
  }
  KILN_ASSIGN(verify, verifyEntry(manifest));
  // An f32 plan runs as vLLM's --dtype float32: activations, KV cache and
  // logits as the manifest types them, GEMM weights f32 and cuBLASLt in true
  // f32 (no TF32), so its logits follow the CPU executor's and transformers'
  // fp32 ones. A bf16 plan's GEMMs take bf16 weights.
  const bool f32_plan = manifest.activation_type == "f32";
  const CudaTuning& tuning = options.tuning;

  // Driver, device, context, libraries.
  auto driver = loadCudaDriver();
  if (!driver) return makeError("no CUDA backend: {}", driver.error().message);
  std::unique_ptr<CudaExecutor> ex(new CudaExecutor());
  ex->backend_ = std::make_unique<Backend>(tuning);
  Backend& backend = *ex->backend_;
  const DeviceContext& gpu = backend.gpu;
  KILN_RETURN_IF_ERROR(backend.gpu.open(**driver, options.device));
  KILN_RETURN_IF_ERROR(backend.kernels.configure(tuning, manifest.target));  // before the weights' upload
  backend.launch.programmatic = tuning.programmatic_launch && gpu.major >= 9 && gpu.x.launchKernelEx;
  if (tuning.report_forward_gpu_time && !tuning.profile_steps)
    KILN_RETURN_IF_ERROR(backend.forward_timer.createEvents());
  ex->device_name_ = gpu.name;
  KILN_RETURN_IF_ERROR(backend.gemms.open(f32_plan, options.verbose));
  if (options.verbose)
    fmt::print(stderr, "cuda: {} driver {} ({}), cuBLASLt {} ({})\n", ex->device_name_, gpu.d->version,
               gpu.d->library.path(), backend.gemms.lt().version, backend.gemms.lt().library.path());
  ex->max_tokens_ = max_tokens;

  // 1. The weights, each in the form its steps take, uploaded.
  const Entry* draft = verify.entry ? manifest.findEntry("draft") : nullptr;
  KILN_ASSIGN(weight_layout,
              layoutWeights({entry, verify.entry, draft}, weights, f32_plan ? WeightForm::kF32 : WeightForm::kBf16));
  // Correct, not fast: said once, whatever the verbosity.
  if (const std::string notice = sparse24DenseNotice(manifest, *entry); !notice.empty())
    fmt::print(stderr, "{}\n", notice);
  ex->weight_bytes_ = weight_layout.bytes();
  KILN_RETURN_IF_ERROR(weight_layout.upload(gpu, backend.memory, weights, options.progress));

  // 2. Arena, KV pools, inputs, cuBLASLt workspace, pinned staging.
  const int64_t bytes_per_token =
      std::max({entry->bytes_per_token, verify.entry ? verify.entry->bytes_per_token : int64_t(0),
                draft ? draft->bytes_per_token : int64_t(0)});
  KILN_RETURN_IF_ERROR(backend.arena.allocate(backend.memory, bytes_per_token, max_tokens));
  if (options.gpu_memory_fraction > 0) {
    // The reserve: the scratch allocated below, cuBLASLt's and the graphs'.
    const int64_t reserve = int64_t(kCublasWorkspace) + (int64_t(512) << 20);
    KILN_ASSIGN(blocks, kvBlocksForMemoryFraction(gpu, options.gpu_memory_fraction, kv, max_tokens,
                                                  reserve, options.verbose || options.progress));
    kv.num_blocks = blocks;
  }
  // The K/V live on the GPU: the host pool keeps only the block bookkeeping.
  auto pool = BlockPool::create(kv, KvStorage::kElsewhere);
  if (!pool.ok()) return pool.error();
  ex->pool_ = std::make_unique<BlockPool>(pool.take());
  KILN_RETURN_IF_ERROR(backend.kv_pools.allocate(backend.memory, kv));
  // The state slots: bookkeeping on the host (the engine's scheduler hands
  // them out), the conv and SSM states on the GPU.
  if (state_plan) {
    auto states = StatePool::create(statePoolConfigFor(manifest, options.state_slots), /*host_storage=*/false);
    if (!states.ok()) return states.error();
    ex->state_pool_ = std::make_unique<StatePool>(states.take());
    KILN_RETURN_IF_ERROR(backend.states.allocate(backend.memory, ex->state_pool_->config()));
  }
  KILN_RETURN_IF_ERROR(backend.inputs.allocate(backend.memory, max_tokens, kv.num_blocks, verify.tree_nodes));
  KILN_RETURN_IF_ERROR(backend.gemms.allocateWorkspace());
  KILN_RETURN_IF_ERROR(backend.inputs.allocateStaging(backend.memory));
  ex->device_bytes_ = weight_layout.bytes() + backend.arena.bytes + backend.kv_pools.bytes() + backend.states.bytes() +
                      backend.inputs.bytes() + int64_t(kCublasWorkspace);

  // 3. The logits, in the arena.
  const EntryPlacement placement{*entry, max_tokens, backend.arena, weight_layout, backend.kv_pools,
                                 state_plan ? &backend.states : nullptr};
  const std::string logits_path = manifest.path + ": entries.forward.outputs[0]";
  KILN_ASSIGN(logits, placement.value(logits_path, entry->outputs[0].value, "value"));
  backend.logits = logits;

  // 4. The kernel variants chosen and their instances loaded; the values
  //    they keep apart from the arena moved.
  KILN_RETURN_IF_ERROR(backend.kernels.load(manifest, *entry, logits_path, logits.width,
                                            logits.elem == 4 ? "f32" : "bf16", options.progress));
  KILN_ASSIGN(moved_bytes, moveFusedValues(backend.memory, backend.arena, *entry, max_tokens, backend.kernels));
  ex->device_bytes_ += moved_bytes;
  if (options.verbose)
    fmt::print(stderr, "cuda: {} kernel instances ({} compiled, {} from the cache), {:.1f} MiB of "
               "weights, {:.1f} MiB on the device in all\n",
               backend.kernels.size(), backend.kernels.compiled(), backend.kernels.cached(),
               double(weight_layout.bytes()) / (1 << 20), double(ex->device_bytes_) / (1 << 20));

  // 5. Every step bound, its fusions marked.
  KILN_ASSIGN(steps, bindSteps(manifest, placement, weights, kv, backend.kernels, *gpu.d));
  backend.steps = std::move(steps);
  backend.head_step = lmHeadStep(backend.steps, logits);

  // 5b. The verify entry likewise: its instances (mostly the forward's, from
  //     the JIT cache), its moved values and steps.
  if (verify.entry) {
    KILN_RETURN_IF_ERROR(backend.verify_kernels.configure(tuning, manifest.target));
    const std::string verify_logits_path = manifest.path + ": entries.verify.outputs[0]";
    backend.verify_arena.base = backend.arena.base;
    backend.verify_arena.bytes = backend.arena.bytes;
    const EntryPlacement verify_placement{*verify.entry, max_tokens, backend.verify_arena, weight_layout,
                                          backend.kv_pools};
    KILN_ASSIGN(verify_logits, verify_placement.value(verify_logits_path, verify.entry->outputs[0].value, "value"));
    if (verify_logits.per_sequence || verify_logits.width != logits.width || verify_logits.elem != logits.elem)
      return makeError("{}: logits must be [N, {}] {} (a row per tree node, as forward's)", verify_logits_path,
                       logits.width, logits.elem == 4 ? "f32" : "bf16");
    KILN_RETURN_IF_ERROR(backend.verify_kernels.load(manifest, *verify.entry, verify_logits_path, logits.width,
                                                     logits.elem == 4 ? "f32" : "bf16", options.progress));
    KILN_ASSIGN(verify_moved, moveFusedValues(backend.memory, backend.verify_arena, *verify.entry, max_tokens,
                                              backend.verify_kernels));
    ex->device_bytes_ += verify_moved;
    KILN_ASSIGN(verify_steps, bindSteps(manifest, verify_placement, weights, kv, backend.verify_kernels, *gpu.d));
    backend.verify_steps = std::move(verify_steps);
    backend.verify_logits = verify_logits;
    backend.verify_head_step = lmHeadStep(backend.verify_steps, verify_logits);
    backend.tree_nodes = verify.tree_nodes;
    backend.path_width = verify.path_width;
  }

  // 5c. The draft entry the same way.
  if (draft) {
    const std::string draft_logits_path = manifest.path + ": entries.draft.outputs[0]";
    if (draft->outputs.size() != 1 || draft->outputs[0].name != "logits")
      return makeError("{}: entries.draft.outputs: expected one output named 'logits'", manifest.path);
    auto layers = manifest.options.find("spec_layerskip");
    backend.draft_layers = layers == manifest.options.end() ? 0 : std::atoll(layers->second.c_str());
    if (backend.draft_layers <= 0 || backend.draft_layers >= manifest.model.num_layers)
      return makeError("{}: options.spec_layerskip is '{}', expected 1 to {} (the draft entry's layers)",
                       manifest.path, layers == manifest.options.end() ? "" : layers->second,
                       manifest.model.num_layers - 1);
    KILN_RETURN_IF_ERROR(backend.draft_kernels.configure(tuning, manifest.target));
    backend.draft_arena.base = backend.arena.base;
    backend.draft_arena.bytes = backend.arena.bytes;
    const EntryPlacement draft_placement{*draft, max_tokens, backend.draft_arena, weight_layout, backend.kv_pools};
    KILN_ASSIGN(draft_logits, draft_placement.value(draft_logits_path, draft->outputs[0].value, "value"));
    if (draft_logits.per_sequence || draft_logits.width != logits.width || draft_logits.elem != logits.elem)
      return makeError("{}: logits must be [N, {}] {} (a row per tree node, as forward's)", draft_logits_path,
                       logits.width, logits.elem == 4 ? "f32" : "bf16");
    KILN_RETURN_IF_ERROR(backend.draft_kernels.load(manifest, *draft, draft_logits_path, logits.width,
                                                    logits.elem == 4 ? "f32" : "bf16", options.progress));
    KILN_ASSIGN(draft_moved,
                moveFusedValues(backend.memory, backend.draft_arena, *draft, max_tokens, backend.draft_kernels));
    ex->device_bytes_ += draft_moved;
    KILN_ASSIGN(draft_steps, bindSteps(manifest, draft_placement, weights, kv, backend.draft_kernels, *gpu.d));
    backend.draft_steps = std::move(draft_steps);
    backend.draft_logits = draft_logits;
  }

  // 6. Greedy batches' argmax, the step profile's events, the split-KV
  //    scratch and the logits' pinned copy.
  KILN_ASSIGN(argmax_bytes, backend.argmax.allocate(backend.memory, backend.kernels.greedy(), logits.width, max_tokens));
  ex->device_bytes_ += argmax_bytes;
  if (options.verbose)
    fmt::print(stderr, "cuda: programmatic launch {}, gemm autotune {}\n", backend.launch.programmatic ? "on" : "off",
               tuning.gemm_autotune ? "on" : "off");
  if (tuning.profile_steps) KILN_RETURN_IF_ERROR(backend.step_timer.createEvents(backend.steps.size()));
  KILN_ASSIGN(split_bytes, backend.split_kv.allocate(backend.memory, backend.steps, max_tokens));
  KILN_ASSIGN(expanded_bytes, allocateExpandedWeights(backend.memory,
                                                      {&backend.steps, &backend.verify_steps, &backend.draft_steps}));
  ex->device_bytes_ += expanded_bytes;
  KILN_ASSIGN(moe_bytes, allocateMoeScratch(backend.memory,
                                            {&backend.steps, &backend.verify_steps, &backend.draft_steps}, max_tokens));
  ex->device_bytes_ += moe_bytes;
  ex->device_bytes_ += split_bytes;
  ex->vocab_ = logits.width;
  ex->logits_per_sequence_ = logits.per_sequence;
  KILN_ASSIGN(logits_host, backend.memory.allocHost(max_tokens * logits.width * logits.elem, "the logits"));
  backend.logits_host = logits_host;
  return ex;
}

Status CudaExecutor::checkBatch(const BatchInputs& in, size_t out_values) const {
  const KvPoolConfig& pool = pool_->config();
  KILN_RETURN_IF_ERROR(checkBatchInputs(in,
                                        {max_tokens_, vocab_, pool.num_blocks, pool.page_size, logits_per_sequence_,
                                         state_pool_ ? state_pool_->numSlots() : 0},
                                        out_values));
  if (int64_t(in.block_tables.size()) > backend_->inputs.block_table_capacity)
    return makeError("forward: block_tables has {} entries; the CUDA executor's buffer holds {}",
                     in.block_tables.size(), backend_->inputs.block_table_capacity);
  return {};
}

Status CudaExecutor::Backend::enqueueSteps(const std::vector<BoundStep>& list, const DeviceValue& out,
                                           const LaunchShape& shape) {
  const int64_t n = shape.n, b = shape.b;
  auto ptr = [](CUdeviceptr p) { return reinterpret_cast<void*>(p); };
  auto input = [&](const BoundStep& s, size_t a) { return inputs.at(s.inputs[a]); };
  auto launchStep = [&](const BoundStep& s, unsigned gx, unsigned gy, unsigned gz, void* params) {
    return launch(s.fn, s.block, gx, gy, gz, params);
  };
  const bool profile = tuning.profile_steps && &list == &steps;  // the step timer's events are forward's
  for (size_t i = 0; i < list.size(); ++i) {
    const BoundStep& s = list[i];
    auto rows = [&](const DeviceValue& v) { return rowsOf(v, shape); };
    Status status;
    if (profile) KILN_RETURN_IF_ERROR(step_timer.record(i));
    switch (s.kind) {
      case StepKind::kAllReduce:
      case StepKind::kSend:
      case StepKind::kRecv:
        return makeError("{}: {} exchanges activations between ranks; no backend runs it yet (issue #26)", s.path,
                         stepKindName(s.kind));
      case StepKind::kEmbedding: {
        kk::EmbeddingParams p{input(s, 0), ptr(s.weights[1]), ptr(s.results[0].ptr), int(n), int(s.vocab)};
        status = launchStep(s, unsigned(n), 1, 1, &p);
        break;
      }
      case StepKind::kRmsNorm: {
        const int64_t r = rows(s.args[0]);
        kk::RmsNormParams p{ptr(s.args[0].ptr), nullptr, ptr(s.weights[1]), nullptr,
                            ptr(s.results[0].ptr), int(r)};
        status = launchStep(s, unsigned(r), 1, 1, &p);
        break;
      }
      case StepKind::kResidualRmsNorm: {
        const int64_t r = rows(s.args[0]);
        if (doneByGemmAfter(s, r)) break;  // the streamed gemm after it does it
        if (sumFromGemmBefore(list, i, r)) {  // the gemm before it wrote the sum
          kk::RmsNormParams p{ptr(s.results[0].ptr), nullptr, ptr(s.weights[2]), nullptr, ptr(s.results[1].ptr), int(r)};
          status = launch(s.norm_of_sum_fn, s.norm_of_sum_block, unsigned(r), 1, 1, &p);
          break;
        }
        // No persisting-L2 window on the sum for the next norm: it did not
        // make a prefill faster (docs/performance.md).
        kk::RmsNormParams p{ptr(s.args[0].ptr), ptr(s.args[1].ptr), ptr(s.weights[2]),
                            s.writes_sum ? ptr(s.results[0].ptr) : nullptr,
                            ptr(s.results.back().ptr), int(r)};
        status = launchStep(s, unsigned(r), 1, 1, &p);
        break;
      }
      case StepKind::kGemm:
        status = enqueueGemm(launch, gemms, inputs, kv_pools.num_slots, list, s, rows(s.args[0]));
        break;
      case StepKind::kRopeKvAppend: {
        if (doneByGemmBefore(list, i, n)) break;
        const size_t pos = s.merged ? 1 : 3;
        kk::RopeKvAppendParams p{};
        if (s.merged) p.qkv = ptr(s.args[0].ptr);
        else {
          p.q = ptr(s.args[0].ptr);
          p.k = ptr(s.args[1].ptr);
          p.v = ptr(s.args[2].ptr);
        }
        p.positions = input(s, pos);
        p.slot_mapping = input(s, pos + 1);
        p.k_pool = ptr(s.pools[pos + 2]);
        p.v_pool = ptr(s.pools[pos + 3]);
        p.k_scales = reinterpret_cast<float*>(s.pool_scales[pos + 2]);
        p.v_scales = reinterpret_cast<float*>(s.pool_scales[pos + 3]);
        p.q_out = ptr(s.results[0].ptr);
        if (s.qk_norm) {  // the per-head norm weights, f32, after the pools
          p.q_norm = reinterpret_cast<const float*>(s.weights[pos + 4]);
          p.k_norm = reinterpret_cast<const float*>(s.weights[pos + 5]);
        }
        p.num_tokens = int(n);
        p.num_slots = kv_pools.num_slots;
        status = launchStep(s, unsigned(n), unsigned(kk::ropeKvAppendHeadGroups(s.heads, s.kv_heads)), 1, &p);
        break;
      }
      case StepKind::kPagedAttention: status = enqueueAttention(launch, inputs, split_kv, s, shape); break;
      case StepKind::kSiluMul:
      case StepKind::kAdd:
      case StepKind::kMul:
      case StepKind::kSilu:
      case StepKind::kReluSquared: {
        const int64_t r = rows(s.args[0]);
        if (doneByGemmBefore(list, i, r)) break;
        const void* second = s.args.size() > 1 && s.args[1].valid ? ptr(s.args[1].ptr) : nullptr;
        kk::ElementwiseParams p{ptr(s.args[0].ptr), second, ptr(s.results[0].ptr), int(r)};
        const int64_t blocks = std::min<int64_t>((r * s.width / 8 + 255) / 256, 65535);
        status = launchStep(s, unsigned(std::max<int64_t>(blocks, 1)), 1, 1, &p);
        break;
      }
      case StepKind::kSplit: {
        const int64_t r = rows(s.args[0]);
        const int elem = s.args[0].elem;
        int64_t column = 0;
        for (size_t i = 0; i < s.results.size() && status.ok(); ++i) {
          CUDA_MEMCPY2D c{};
          c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
          c.srcDevice = s.args[0].ptr + CUdeviceptr(column * elem);
          c.srcPitch = size_t(s.args[0].width * elem);
          c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
          c.dstDevice = s.results[i].ptr;
          c.dstPitch = size_t(s.sizes[i] * elem);
          c.WidthInBytes = size_t(s.sizes[i] * elem);
          c.Height = size_t(r);
          status = gpu.d->check(gpu.x.memcpy2DAsync(&c, gpu.stream), "cuMemcpy2DAsync (split)");
          column += s.sizes[i];
        }
        break;
      }
      case StepKind::kGatherLastTokens: {
        kk::GatherLastTokensParams p{ptr(s.args[0].ptr), input(s, 1), ptr(s.results[0].ptr), int(b)};
        status = launchStep(s, unsigned(b), 1, 1, &p);
        break;
      }
      case StepKind::kMoeRouter: {
        kk::MoeRouteParams p{ptr(s.args[0].ptr), ptr(s.weights[1]), ptr(s.results[0].ptr),
                             reinterpret_cast<int*>(s.results[1].ptr), int(rows(s.args[0]))};
        status = launchStep(s, unsigned(rows(s.args[0])), 1, 1, &p);
        break;
      }
      case StepKind::kMoeFfn: status = enqueueMoeExperts(launch, s, rows(s.args[0])); break;
      case StepKind::kTreePositions:
      case StepKind::kTreeMask:  // staged with the inputs (verify)
      case StepKind::kAccept:    // on the host, over the argmax of each node's logits (verify)
        break;
      case StepKind::kKvAppend: {
        kk::KvAppendParams p{ptr(s.args[0].ptr), ptr(s.args[1].ptr), input(s, 2), ptr(s.pools[3]), ptr(s.pools[4]),
                             int(n), kv_pools.num_slots};
        status = launchStep(s, unsigned(n), 1, 1, &p);
        break;
      }
      case StepKind::kSsmConv1d:
      case StepKind::kSelectiveScan:
      case StepKind::kSsdScan:
      case StepKind::kSsmGatedNorm: status = enqueueSsmStep(launch, inputs, s, shape); break;
    }
    if (!status.ok())
      return makeError("{} ({}): {}", s.path, stepKindName(s.kind), status.error().message);
  }
  if (profile) KILN_RETURN_IF_ERROR(step_timer.record(list.size()));
  if (shape.greedy) return argmax.enqueue(launch, out, shape);
  return {};
}

Result<CUgraphExec> CudaExecutor::Backend::graphOf(GraphCache& cache, const std::vector<BoundStep>& list,
                                                   const DeviceValue& out, const LaunchShape& shape) {
  if (CUgraphExec exec = cache.find(shape)) return exec;
  auto prepare = [&] { return gemms.prepare(list, shape); };
  auto enqueue = [&] {
    gemms.capturing = true;
    Status enqueued = enqueueSteps(list, out, shape);
    gemms.capturing = false;
    return enqueued;
  };
  return cache.capture(shape, prepare, enqueue);
}

Result<LaunchShape> CudaExecutor::launchForward(const BatchInputs& in, bool greedy) {
  Backend& backend = *backend_;
  const DeviceContext& gpu = backend.gpu;
  const CudaDriver* d = gpu.d;
  KILN_RETURN_IF_ERROR(d->check(d->cuCtxSetCurrent(gpu.context), "cuCtxSetCurrent"));
  const int64_t n = int64_t(in.tokens.size());
  const int64_t b = int64_t(in.kv_lens.size());

  // A decode batch (one token per sequence) splits attention over the keys
  // and replays a graph captured for its shape; anything else is launched
  // step by step.
  LaunchShape shape{n, b, in.max_blocks, 0, 1};
  shape.greedy = greedy;
  for (int64_t i = 0; i < b; ++i)
    shape.max_q_len = std::max(shape.max_q_len, in.query_start[size_t(i + 1)] - in.query_start[size_t(i)]);
  const bool decode = n == b;  // checkBatch: every sequence has >= 1 token
  const int64_t num_blocks = pool_->config().num_blocks;
  if (decode && b <= kSplitRows) {
    const int max_kv = *std::max_element(in.kv_lens.begin(), in.kv_lens.end());
    shape.splits = decodeSplits(b, int(pool_->config().kv_heads), max_kv, gpu.sms);
    while (shape.splits > 1 && b * shape.splits > backend.split_kv.rows) shape.splits /= 2;
    if (b * shape.splits > backend.split_kv.rows) shape.splits = 0;
  }
  bool graph = backend.tuning.graphs && !backend.tuning.profile_steps && decode && b <= kMaxGraphBatch;
  if (graph) {
    shape.max_blocks = graphStride(in.max_blocks, num_blocks);
    if (b * shape.max_blocks > backend.inputs.block_table_capacity) {
      graph = false;
      shape.max_blocks = in.max_blocks;
    }
  }

  // Inputs: pack into pinned staging at the fixed offsets, one copy. Block
  // tables go in rows of shape.max_blocks (a graph's fixed stride).
  const size_t input_bytes = backend.inputs.stage(in, shape.max_blocks);
  KILN_RETURN_IF_ERROR(backend.forward_timer.recordBegin());
  KILN_RETURN_IF_ERROR(d->check(gpu.x.memcpyHtoDAsync(backend.inputs.device, backend.inputs.staging, input_bytes,
                                                      gpu.stream),
                                "cuMemcpyHtoDAsync (batch inputs)"));
  // A sequence whose rows start at position 0 starts from the zero state
  // (the CPU executor's rule, at the same point): its slot is cleared on
  // the stream ahead of the steps, outside any graph.
  if (state_pool_)
    for (int64_t i = 0; i < b; ++i)
      if (in.positions[size_t(in.query_start[size_t(i)])] == 0)
        KILN_RETURN_IF_ERROR(backend.states.zeroSlot(gpu, in.state_slots[size_t(i)]));
  const int64_t captures_before = backend.graphs.captures();
  const size_t plans_before = backend.gemms.plans();
  if (graph) {
    KILN_ASSIGN(exec, backend.graphOf(backend.graphs, backend.steps, backend.logits, shape));
    KILN_RETURN_IF_ERROR(d->check(gpu.x.graphLaunch(exec, gpu.stream), "cuGraphLaunch"));
  } else {
    KILN_RETURN_IF_ERROR(backend.enqueueSteps(backend.steps, backend.logits, shape));
  }
  backend.forward_timer.launched(graph && backend.graphs.captures() == captures_before,
                                 !graph && backend.gemms.plans() == plans_before, n);
  backend.hidden = backend.head_step < 0 ? DeviceValue{} : backend.steps[size_t(backend.head_step)].args[0];
  backend.hidden_rows = rowsOf(backend.hidden, shape);
  backend.hidden_copied = false;
  return shape;
}

Status CudaExecutor::Backend::copyBackAndWait(void* to, CUdeviceptr from, size_t bytes, const char* what,
                                              const LaunchShape& shape) {
  KILN_RETURN_IF_ERROR(gpu.d->check(gpu.x.memcpyDtoHAsync(to, from, bytes, gpu.stream), what));
  KILN_RETURN_IF_ERROR(forward_timer.recordEnd());
  KILN_RETURN_IF_ERROR(gpu.d->check(gpu.x.streamSynchronize(gpu.stream), "forward (kernel execution)"));
  forward_timer.addTime();
  if (tuning.profile_steps) step_timer.addForward(steps, shape);
  return {};
}

Status CudaExecutor::copyBlocks(std::span<const BlockCopy> copies) {
  Backend& b = *backend_;
  const KvPools& kv = b.kv_pools;
  const KvPoolConfig& config = pool_->config();
  const int64_t block_bytes = config.poolBytes() / config.num_blocks;
  const int64_t scale_block_bytes = config.scaleBytes() / config.num_blocks;
  // One 2D copy a block: a row per pool (2 x layers), the pools a fixed
  // stride apart; the scales likewise.
  auto copyRows = [&](CUdeviceptr first_pool, int64_t offset_from, int64_t offset_to, int64_t bytes) {
    CUDA_MEMCPY2D c{};
    c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    c.srcDevice = first_pool + CUdeviceptr(offset_from);
    c.srcPitch = size_t(kv.pool_bytes + kv.scale_bytes);
    c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    c.dstDevice = first_pool + CUdeviceptr(offset_to);
    c.dstPitch = c.srcPitch;
    c.WidthInBytes = size_t(bytes);
    c.Height = size_t(2 * kv.layers);
    return b.gpu.d->check(b.gpu.x.memcpy2DAsync(&c, b.gpu.stream), "cuMemcpy2DAsync (kv block copy)");
  };
  for (const BlockCopy& c : copies) {
    if (c.from < 0 || c.from >= config.num_blocks || c.to < 0 || c.to >= config.num_blocks)
      return makeError("kv pool: copy of block {} to {} is out of range [0, {})", c.from, c.to, config.num_blocks);
    KILN_RETURN_IF_ERROR(copyRows(kv.pool(0, PoolRole::kKey), c.from * block_bytes, c.to * block_bytes, block_bytes));
    if (kv.scale_bytes)
      KILN_RETURN_IF_ERROR(copyRows(kv.scales(0, PoolRole::kKey), c.from * scale_block_bytes,
                                    c.to * scale_block_bytes, scale_block_bytes));
  }
  return {};
}

Status CudaExecutor::copySlots(std::span<const SlotCopy> copies) {
  Backend& b = *backend_;
  const KvPools& kv = b.kv_pools;
  const KvPoolConfig& config = pool_->config();
  const int64_t slots = config.num_blocks * config.page_size;
  const int64_t slot_bytes = config.poolBytes() / slots;
  const CudaDriver* d = b.gpu.d;
  // A slot's values: one row a pool (2 x layers rows, the pools a fixed
  // stride apart), one 2D copy. Its scales ([num_blocks, Hkv, page_size]
  // f32 a pool) are Hkv floats page_size apart: a 2D copy a pool.
  auto copy2d = [&](CUdeviceptr from, CUdeviceptr to, size_t pitch, size_t width, size_t height) {
    CUDA_MEMCPY2D c{};
    c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    c.srcDevice = from;
    c.srcPitch = pitch;
    c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    c.dstDevice = to;
    c.dstPitch = pitch;
    c.WidthInBytes = width;
    c.Height = height;
    return d->check(b.gpu.x.memcpy2DAsync(&c, b.gpu.stream), "cuMemcpy2DAsync (kv slot copy)");
  };
  if (!copies.empty()) KILN_RETURN_IF_ERROR(d->check(d->cuCtxSetCurrent(b.gpu.context), "cuCtxSetCurrent"));
  for (const SlotCopy& c : copies) {
    if (c.from < 0 || c.from >= slots || c.to < 0 || c.to >= slots)
      return makeError("kv pool: copy of slot {} to {} is out of range [0, {})", c.from, c.to, slots);
    const CUdeviceptr first = kv.pool(0, PoolRole::kKey);
    KILN_RETURN_IF_ERROR(copy2d(first + CUdeviceptr(c.from * slot_bytes), first + CUdeviceptr(c.to * slot_bytes),
                                size_t(kv.pool_bytes + kv.scale_bytes), size_t(slot_bytes), size_t(2 * kv.layers)));
    if (!kv.scale_bytes) continue;
    auto scale_at = [&](int64_t slot) {
      return int64_t(4) * ((slot / config.page_size) * config.kv_heads * config.page_size + slot % config.page_size);
    };
    for (int layer = 0; layer < kv.layers; ++layer)
      for (PoolRole role : {PoolRole::kKey, PoolRole::kValue}) {
        const CUdeviceptr scales = kv.scales(layer, role);
        KILN_RETURN_IF_ERROR(copy2d(scales + CUdeviceptr(scale_at(c.from)), scales + CUdeviceptr(scale_at(c.to)),
                                    size_t(config.page_size) * 4, 4, size_t(config.kv_heads)));
      }
  }
  return {};
}

int64_t CudaExecutor::treeNodes() const { return backend_->tree_nodes; }
int64_t CudaExecutor::treeDepth() const { return backend_->path_width - 1; }

Status CudaExecutor::checkVerify(const BatchInputs& in, size_t logits_values, size_t accepted, size_t counts) const {
  const Backend& backend = *backend_;
  if (backend.tree_nodes == 0)
    return makeError("verify: the artifact has no verify entry (compile it with kiln-compile --spec-tree)");
  const KvPoolConfig& pool = pool_->config();
  KILN_RETURN_IF_ERROR(checkBatchInputs(in, {max_tokens_, vocab_, pool.num_blocks, pool.page_size,
                                             /*logits_per_sequence=*/false},
                                        logits_values));
  if (int64_t(in.block_tables.size()) > backend.inputs.block_table_capacity)
    return makeError("verify: block_tables has {} entries; the CUDA executor's buffer holds {}",
                     in.block_tables.size(), backend.inputs.block_table_capacity);
  const int64_t b = int64_t(in.kv_lens.size());
  if (int64_t(in.base_positions.size()) != b)
    return makeError("verify: base_positions has {} entries; expected one per sequence ({})",
                     in.base_positions.size(), b);
  KILN_RETURN_IF_ERROR(checkTreeParents(in.parents, in.query_start, backend.tree_nodes));
  if (int64_t(accepted) < b * backend.path_width || int64_t(counts) < b)
    return makeError("verify: accepted holds {} and count {} entries; expected {} x {} and {}", accepted, counts, b,
                     backend.path_width, b);
  return {};
}

Status CudaExecutor::Backend::uploadTreeBatch(const BatchInputs& in, int max_blocks) {
  const CudaDriver* d = gpu.d;
  const size_t input_bytes = inputs.stage(in, max_blocks);
  const size_t tree_bytes = inputs.stageTree(in);
  const size_t tree_offset = size_t(inputs.offset[kTreePositions]) * 4;
  KILN_RETURN_IF_ERROR(d->check(gpu.x.memcpyHtoDAsync(inputs.device, inputs.staging, input_bytes, gpu.stream),
                                "cuMemcpyHtoDAsync (batch inputs)"));
  return d->check(gpu.x.memcpyHtoDAsync(inputs.device + CUdeviceptr(tree_offset),
                                        reinterpret_cast<const uint8_t*>(inputs.staging) + tree_offset, tree_bytes,
                                        gpu.stream),
                  "cuMemcpyHtoDAsync (tree positions and mask)");
}

namespace {
// `count` logits copied back to `host` (f32, or bf16 when elem is 2) as f32.
void widenLogits(const void* host, int64_t elem, int64_t count, std::span<float> out) {
  if (elem == 4) {
    std::memcpy(out.data(), host, size_t(count) * 4);
    return;
  }
  const uint16_t* h = static_cast<const uint16_t*>(host);
  parallelFor(count, 1 << 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) out[size_t(i)] = bf16ToF32(h[i]);
  });
}
}  // namespace

Status CudaExecutor::verify(const BatchInputs& in, std::span<float> logits_out, std::span<int32_t> accepted_out,
                            std::span<int32_t> count_out) {
  const int64_t n = int64_t(in.tokens.size());
  const int64_t b = int64_t(in.kv_lens.size());
  // Logits kept on the device: checked as if a full buffer were given.
  const size_t logits_values = logits_out.empty() ? size_t(n * vocab_) : logits_out.size();
  KILN_RETURN_IF_ERROR(checkVerify(in, logits_values, accepted_out.size(), count_out.size()));
  Backend& backend = *backend_;
  const DeviceContext& gpu = backend.gpu;
  const CudaDriver* d = gpu.d;
  KILN_RETURN_IF_ERROR(d->check(d->cuCtxSetCurrent(gpu.context), "cuCtxSetCurrent"));
  LaunchShape shape{n, b, in.max_blocks, /*splits=*/0, 1};
  shape.greedy = true;  // each node's argmax, for the acceptance
  for (int64_t i = 0; i < b; ++i)
    shape.max_q_len = std::max(shape.max_q_len, in.query_start[size_t(i + 1)] - in.query_start[size_t(i)]);
  // A graph reads every input at its fixed place in `inputs` (the tree's
  // positions and mask too) and the block tables at the shape's stride, as
  // decode's does; captured at a shape's second call (the first is
  // remembered), replayed from its third.
  bool graph = backend.tuning.graphs && !backend.tuning.profile_steps && b <= kMaxGraphBatch;
  if (graph) {
    shape.max_blocks = graphStride(in.max_blocks, pool_->config().num_blocks);
    if (b * shape.max_blocks > backend.inputs.block_table_capacity) {
      graph = false;
      shape.max_blocks = in.max_blocks;
    }
  }
  if (graph && !backend.verify_graphs.find(shape)) {
    std::set<LaunchShape>& seen = backend.verify_shapes_seen;
    if (seen.erase(shape) == 0) {
      if (seen.size() >= kMaxVerifyShapesSeen) seen.clear();
      seen.insert(shape);
      graph = false;
    }
  }

  KILN_RETURN_IF_ERROR(backend.uploadTreeBatch(in, shape.max_blocks));
  if (graph) {
    KILN_ASSIGN(exec, backend.graphOf(backend.verify_graphs, backend.verify_steps, backend.verify_logits, shape));
    KILN_RETURN_IF_ERROR(d->check(gpu.x.graphLaunch(exec, gpu.stream), "cuGraphLaunch (verify)"));
  } else {
    KILN_RETURN_IF_ERROR(backend.enqueueSteps(backend.verify_steps, backend.verify_logits, shape));
  }
  KILN_RETURN_IF_ERROR(d->check(gpu.x.memcpyDtoHAsync(backend.argmax.tokens_host, backend.argmax.tokens,
                                                      size_t(n) * 4, gpu.stream),
                                "cuMemcpyDtoHAsync (tree nodes' argmax)"));
  const DeviceValue& logits = backend.verify_logits;
  const size_t logits_bytes = size_t(n * vocab_ * logits.elem);
  if (!logits_out.empty())
    KILN_RETURN_IF_ERROR(d->check(gpu.x.memcpyDtoHAsync(backend.logits_host, logits.ptr, logits_bytes, gpu.stream),
                                  "cuMemcpyDtoHAsync (verify logits)"));
  KILN_RETURN_IF_ERROR(d->check(gpu.x.streamSynchronize(gpu.stream), "verify (kernel execution)"));
  backend.hidden =
      backend.verify_head_step < 0 ? DeviceValue{} : backend.verify_steps[size_t(backend.verify_head_step)].args[0];
  backend.hidden_rows = n;
  backend.hidden_copied = false;
  acceptGreedyTargets({backend.argmax.tokens_host, size_t(n)}, in.tokens, in.parents, in.query_start,
                      backend.path_width, accepted_out.data(), count_out.data());
  if (logits_out.empty()) return {};
  widenLogits(backend.logits_host, logits.elem, n * vocab_, logits_out);
  return {};
}

int64_t CudaExecutor::draftLayers() const { return backend_->draft_layers; }

Status CudaExecutor::draft(const BatchInputs& in, std::span<float> logits_out) {
  Backend& backend = *backend_;
  if (backend.draft_layers == 0)
    return makeError("draft: the artifact has no draft entry (compile it with kiln-compile --spec-layerskip K)");
  const int64_t n = int64_t(in.tokens.size());
  const int64_t b = int64_t(in.kv_lens.size());
  // verify's batch checks (the same inputs; no accepted path comes back).
  KILN_RETURN_IF_ERROR(checkVerify(in, logits_out.size(), size_t(b * backend.path_width), size_t(b)));
  const DeviceContext& gpu = backend.gpu;
  const CudaDriver* d = gpu.d;
  KILN_RETURN_IF_ERROR(d->check(d->cuCtxSetCurrent(gpu.context), "cuCtxSetCurrent"));
  LaunchShape shape{n, b, in.max_blocks, /*splits=*/0, 1};
  for (int64_t i = 0; i < b; ++i)
    shape.max_q_len = std::max(shape.max_q_len, in.query_start[size_t(i + 1)] - in.query_start[size_t(i)]);
  KILN_RETURN_IF_ERROR(backend.uploadTreeBatch(in, in.max_blocks));
  KILN_RETURN_IF_ERROR(backend.enqueueSteps(backend.draft_steps, backend.draft_logits, shape));
  const DeviceValue& logits = backend.draft_logits;
  const size_t logits_bytes = size_t(n * vocab_ * logits.elem);
  KILN_RETURN_IF_ERROR(d->check(gpu.x.memcpyDtoHAsync(backend.logits_host, logits.ptr, logits_bytes, gpu.stream),
                                "cuMemcpyDtoHAsync (draft logits)"));
  KILN_RETURN_IF_ERROR(d->check(gpu.x.streamSynchronize(gpu.stream), "draft (kernel execution)"));
  widenLogits(backend.logits_host, logits.elem, n * vocab_, logits_out);
  return {};
}

Status CudaExecutor::forward(const BatchInputs& in, std::span<float> logits_out) {
  KILN_RETURN_IF_ERROR(checkBatch(in, logits_out.size()));
  KILN_ASSIGN(shape, launchForward(in, /*greedy=*/false));
  Backend& backend = *backend_;
  const DeviceValue& logits = backend.logits;
  const int64_t out_rows = rowsOf(logits, shape);
  const size_t bytes = size_t(out_rows * vocab_ * logits.elem);
  KILN_RETURN_IF_ERROR(
      backend.copyBackAndWait(backend.logits_host, logits.ptr, bytes, "cuMemcpyDtoHAsync (logits)", shape));
  widenLogits(backend.logits_host, logits.elem, out_rows * vocab_, logits_out);
  return {};
}

Status CudaExecutor::forwardGreedy(const BatchInputs& in, std::span<int32_t> tokens_out) {
  const int64_t out_rows = int64_t(logits_per_sequence_ ? in.kv_lens.size() : in.tokens.size());
  if (int64_t(tokens_out.size()) < out_rows)
    return makeError("forward: tokens_out holds {} ids; expected one per logits row ({})", tokens_out.size(),
                     out_rows);
  // The logits stay on the device: checked as if a full buffer were given.
  KILN_RETURN_IF_ERROR(checkBatch(in, size_t(out_rows * vocab_)));
  KILN_ASSIGN(shape, launchForward(in, /*greedy=*/true));
  Backend& backend = *backend_;
  KILN_RETURN_IF_ERROR(backend.copyBackAndWait(backend.argmax.tokens_host, backend.argmax.tokens,
                                               size_t(out_rows) * 4, "cuMemcpyDtoHAsync (tokens)", shape));
  std::memcpy(tokens_out.data(), backend.argmax.tokens_host, size_t(out_rows) * 4);
  return {};
}

Status CudaExecutor::Backend::copyHiddenBack() {
  if (hidden_copied || !hidden.valid) return {};
  const size_t count = size_t(hidden_rows * hidden.width);
  hidden_raw.resize(count * size_t(hidden.elem));
  KILN_RETURN_IF_ERROR(gpu.d->check(gpu.d->cuCtxSetCurrent(gpu.context), "cuCtxSetCurrent"));
  KILN_RETURN_IF_ERROR(gpu.d->check(gpu.x.memcpyDtoHAsync(hidden_raw.data(), hidden.ptr, hidden_raw.size(),
                                                          gpu.stream),
                                    "cuMemcpyDtoHAsync (the LM head's input)"));
  KILN_RETURN_IF_ERROR(gpu.d->check(gpu.x.streamSynchronize(gpu.stream), "the LM head's input"));
  hidden_host.resize(count);
  widenLogits(hidden_raw.data(), hidden.elem, int64_t(count), hidden_host);
  hidden_copied = true;
  return {};
}

std::span<const float> CudaExecutor::lastHidden() const {
  Backend& backend = *backend_;
  if (Status s = backend.copyHiddenBack(); !s.ok()) {
    fmt::print(stderr, "cuda: the target's hidden state: {}\n", s.error().message);
    return {};
  }
  if (!backend.hidden.valid) return {};
  return backend.hidden_host;
}

int64_t CudaExecutor::hiddenSize() const {
  const Backend& backend = *backend_;
  return backend.head_step < 0 ? 0 : backend.steps[size_t(backend.head_step)].k;
}

Status CudaExecutor::lmHead(std::span<const float> hidden, int64_t rows, std::span<float> logits_out) {
  Backend& backend = *backend_;
  if (backend.head_step < 0) return makeError("lm head: the forward entry's logits come from no gemm step");
  const BoundStep& head = backend.steps[size_t(backend.head_step)];
  const int64_t h = head.k;
  if (rows < 0 || rows > max_tokens_)
    return makeError("lm head: {} rows; expected 0 to {} (the executor's max tokens)", rows, max_tokens_);
  if (int64_t(hidden.size()) < rows * h || int64_t(logits_out.size()) < rows * vocab_)
    return makeError("lm head: {} hidden and {} logits values for {} rows; expected {} x {} and {} x {}",
                     hidden.size(), logits_out.size(), rows, rows, h, rows, vocab_);
  if (rows == 0) return {};
  // The input buffer is the latest call's hidden state: keep it first.
  KILN_RETURN_IF_ERROR(backend.copyHiddenBack());
  const DeviceContext& gpu = backend.gpu;
  const CudaDriver* d = gpu.d;
  KILN_RETURN_IF_ERROR(d->check(d->cuCtxSetCurrent(gpu.context), "cuCtxSetCurrent"));
  // The rows in the activation type, through the logits' pinned buffer
  // (at least max_tokens x vocab elements of that type; hidden < vocab).
  const DeviceValue& in = head.args[0];
  const size_t in_bytes = size_t(rows * h * in.elem);
  if (in.elem == 4) {
    std::memcpy(backend.logits_host, hidden.data(), in_bytes);
  } else {
    uint16_t* staged = static_cast<uint16_t*>(backend.logits_host);
    for (int64_t i = 0; i < rows * h; ++i) staged[i] = f32ToBf16(hidden[size_t(i)]);
  }
  KILN_RETURN_IF_ERROR(d->check(gpu.x.memcpyHtoDAsync(in.ptr, backend.logits_host, in_bytes, gpu.stream),
                                "cuMemcpyHtoDAsync (lm head rows)"));
  // The head step alone: no neighbour folded in, rows as given.
  BoundStep alone = head;
  alone.folded_norm = -1;
  alone.folded_rows.reset();
  alone.sum_norm = -1;
  alone.residual_rows.reset();
  alone.fused = false;
  alone.absorbed_rows.reset();
  alone.absorbed_prefill_rows.reset();
  KILN_RETURN_IF_ERROR(enqueueGemm(backend.launch, backend.gemms, backend.inputs, backend.kv_pools.num_slots,
                                   backend.steps, alone, rows));
  const DeviceValue& logits = backend.logits;
  KILN_RETURN_IF_ERROR(d->check(gpu.x.memcpyDtoHAsync(backend.logits_host, logits.ptr,
                                                      size_t(rows * vocab_ * logits.elem), gpu.stream),
                                "cuMemcpyDtoHAsync (lm head logits)"));
  KILN_RETURN_IF_ERROR(d->check(gpu.x.streamSynchronize(gpu.stream), "lm head (kernel execution)"));
  widenLogits(backend.logits_host, logits.elem, rows * vocab_, logits_out);
  return {};
}

}  // namespace kiln::cuda
