#include "runtime/cuda/executor/executor.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <thread>
#include <tuple>
#include <vector>

#include "codegen/cuda/activation_types.h"
#include "codegen/cuda/instance_source.h"
#include "codegen/cuda/skinny_fusion.h"
#include "codegen/cuda/step_instances.h"
#include "codegen/kernels/gemm_swiglu_wgmma.cuh"  // gemm_swiglu's tiles and grid (host-visible part)
#include "codegen/kernels/kernel_params.cuh"
#include "runtime/artifact/step_params_json.h"
#include "runtime/cpu/kernels/quant.h"
#include "runtime/cpu/kernels/thread_pool.h"
#include "runtime/cuda/cublaslt.h"
#include "runtime/cuda/cuda_driver.h"
#include "runtime/cuda/executor/driver_extras.h"
#include "runtime/cuda/executor/launch_shape.h"
#include "runtime/cuda/executor/step_profile.h"
#include "runtime/cuda/executor/weight_upload.h"
#include "runtime/cuda/kernel_cache.h"
#include "runtime/cuda/tensor_map.h"

namespace kiln::cuda {

namespace kk = kiln::kernels;

namespace {

enum InputId { kTokens, kPositions, kSlotMapping, kBlockTables, kQueryStart, kKvLens, kNumInputs };

std::optional<InputId> parseInput(std::string_view name) {
  if (name == "tokens") return kTokens;
  if (name == "positions") return kPositions;
  if (name == "slot_mapping") return kSlotMapping;
  if (name == "block_tables") return kBlockTables;
  if (name == "query_start") return kQueryStart;
  if (name == "kv_lens") return kKvLens;
  return std::nullopt;
}


constexpr int64_t kAlign = 256;
int64_t alignUp(int64_t v) { return (v + kAlign - 1) / kAlign * kAlign; }
constexpr int kGemvMaxRows = 8;

// Decode batches of up to this many sequences replay a captured CUDA graph.
constexpr int64_t kMaxGraphBatch = 256;
constexpr size_t kMaxGraphs = 128;
constexpr size_t kCublasWorkspace = size_t(32) << 20;
// cuBLASLt GEMMs of at most this many rows (decode batches: shapes that
// recur) are autotuned over up to kGemmCandidates heuristic candidates.
// Prefill shapes are not: timing cuBLASLt's candidates once per
// power-of-two bucket of rows made each GEMM faster alone (gate/up at 2048
// rows 599 -> 587 us) but not the prefill, which runs at the card's power
// limit (700 W, SM clock ~1.6 GHz): 47.16 against 47.15 ms a forward on
// the GPU (three benches of 7 forwards each, alternated, 2026-11-29), for
// ~0.3 s of timing per bucket. Adding the configurations next to the
// heuristic's (test/gpu/gemm_search.cc finds gate/up 5% faster back to
// back) made it slower: 49.55 ms.
constexpr int64_t kAutotuneMaxRows = 512;
constexpr int kGemmCandidates = 16;

// A value in the arena: rows of `width` elements of `elem` bytes.
struct DeviceValue {
  CUdeviceptr ptr = 0;
  int64_t width = 0;
  int elem = 2;
  bool per_sequence = false;
  bool valid = false;
};

// A skinny GEMM instance a gemm step runs for batches of <= kGemvMaxRows rows.
struct GemvKernel {
  CUfunction fn = nullptr;
  std::string instance;    // its name (StepProfile's rows)
  unsigned block = 0;
  int rows_per_block = 1;  // weight rows; a fused variant's come in pairs (gate/up, or rope's columns)
  // gemv_stream.cuh's persistent blocks: the matrix's tiles (grid: one
  // block per SM, at most one per tile) and the ring's dynamic shared memory.
  int tiles = 0;
  unsigned smem = 0;
};

// One step with every pointer resolved; forward() fills only the row counts.
struct BoundStep {
  StepKind kind = StepKind::kGemm;
  std::string path;
  std::string instance;  // the kernel instance's name (StepProfile's rows)
  CUfunction fn = nullptr;
  unsigned block = 0;
  std::vector<DeviceValue> args;  // value operands by arg index (invalid for non-values)
  std::vector<DeviceValue> results;
  std::vector<CUdeviceptr> weights;  // by arg index (0 for non-weights)
  std::vector<int> inputs;           // by arg index (-1 for non-inputs)
  std::vector<CUdeviceptr> pools;    // by arg index (0 for non-pools)
  int64_t width = 0, k = 0;
  int heads = 0, kv_heads = 0, head_dim = 0;
  bool merged = false, writes_sum = false;
  // paged_attention: the split-KV instance and its combine, for decode batches.
  // decode_attention merges its own partials (split_arrivals), so the
  // combine runs only after the CUDA-core paged_attention_split.
  bool split_merges_itself = false;
  CUfunction split_fn = nullptr, combine_fn = nullptr;
  unsigned split_block = 0, combine_block = 0;
  unsigned split_smem = 0;
  // ... and the tensor-core flash_attention instance for prefill batches.
  CUfunction flash_fn = nullptr;
  unsigned flash_block = 0, flash_smem = 0, flash_block_m = 0;  // flash_block_m: query rows per block
  std::string flash_kind;  // flash_attention_wgmma on Hopper, else flash_attention
  std::vector<int64_t> sizes;   // split
  int64_t vocab = 0;            // embedding table rows
  // gemm, skinny batches (skinnyKernel picks): the step's own instance
  // (gemv), and for batches of one row its single-row instance (gemv_single,
  // gemv_max_rows 1: more blocks per SM, more loads in flight) ...
  GemvKernel gemv, gemv_single;
  // ... or, with the silu_mul after it folded in (codegen/cuda/skinny_fusion.h),
  // the fused skinny GEMM and its single-row instance, which write the
  // silu_mul's result (fused_y); the silu_mul step is then skipped (marked
  // `absorbed`) ...
  GemvKernel fused, fused_single;
  CUdeviceptr fused_y = 0;
  // ... or with the rope_kv_append after it folded in: that step's index,
  // whose q (fused_y, storage of its own), inputs and pools it writes.
  int fused_rope = -1;
  bool absorbed = false;
  // ... and, SwiGLU folded in on Hopper, for batches of at least
  // kFusedSwiGluMinRows rows: gemm_swiglu_wgmma (one launch for the gate/up
  // projection and silu_mul, writing fused_y) and its weight's tensor map.
  CUfunction swiglu_fn = nullptr;
  unsigned swiglu_smem = 0;
  kk::TensorMap swiglu_w_map{};
  // gemm: the residual_rms_norm step before it that its single-row
  // (streamed) instance folds in, whose inputs it reads and whose sum it
  // writes; that step is then skipped in batches of one row.
  int folded_norm = -1;
  bool absorbed_single_row = false;  // residual_rms_norm
  // gemm, batches cuBLASLt runs: the residual_rms_norm step after it whose
  // sum its epilogue writes (the norm's x + this product, beta 1); its own
  // output is then not written. That norm runs norm_of_sum_fn over the sum.
  int sum_norm = -1;
  bool sum_from_gemm = false;  // residual_rms_norm
  CUfunction norm_of_sum_fn = nullptr;
  unsigned norm_of_sum_block = 0;
};

// The skinny GEMM a gemm step runs for `rows` <= kGemvMaxRows rows: its
// fused variant where it has one, for one row the single-row instance. No
// fn: the step has none (an f32 plan's gemm), cuBLASLt runs it.
const GemvKernel& skinnyKernel(const BoundStep& s, int64_t rows) {
  if (s.fused.fn) return rows == 1 && s.fused_single.fn ? s.fused_single : s.fused;
  return rows == 1 && s.gemv_single.fn ? s.gemv_single : s.gemv;
}

// Batches of at least this many rows run a gemm with SwiGLU folded in as
// gemm_swiglu_wgmma where the step has it, not cuBLASLt and silu_mul.
// Llama-3-8B's MLP on the H200 at the power limit, fused / (cuBLASLt's
// first choice + silu_mul), each timed back to back after a second of heat
// (kiln_swiglu_bench, 2026-11-30): 512 rows 1.101, 1024 0.985, 2048
// 0.957-0.978, 4096 1.011; Llama-3.2-1B's (K 2048, F 8192): 1024 rows
// 0.947, 2048 0.964, 4096 0.932. Its logits are closer to float (gate/up is
// never rounded to bf16): 5.7e-3 against 6.7e-3 of the CPU executor's f32
// (CudaExecutor.FusedSwiGluPrefillMatchesTheCpuExecutor). A whole 2048-token
// prefill did not get faster: 47.31, 47.01, 47.20 ms on the GPU against
// 47.36, 47.25, 47.01 without it, alternated; the card is at its power limit
// there (docs/performance.md, twelfth and thirteenth sessions).
constexpr int64_t kFusedSwiGluMinRows = 1024;
bool fusedSwiGlu(const BoundStep& s, int64_t rows) { return s.swiglu_fn && rows >= kFusedSwiGluMinRows; }

// Whether cuBLASLt runs gemm step `s` at `rows` rows (else a skinny kernel).
bool onCublas(const BoundStep& s, int64_t rows) { return rows > kGemvMaxRows || !skinnyKernel(s, rows).fn; }

// Whether gemm step `s` at `rows` rows also adds the residual of the norm
// after it (BoundStep::sum_norm): only in the decode-sized batches whose
// cuBLASLt algorithm is measured (kAutotuneMaxRows). Llama-3-8B on the H200
// (2026-11-29, medians of 7 runs, two runs each): batch-32 decode 4.909 /
// 4.884 -> 4.812 / 4.863 ms per step on the GPU, but a 2048-token prefill
// 48.1 / 47.9 -> 48.1 / 48.5 ms and batch 32's 4096-token prefill 84.0 /
// 84.4 -> 86.9 / 86.1 ms: with f32 C and D, cuBLASLt's first heuristic
// choice ran o_proj at 2048 rows in 120.9 us (94 with bf16 out), and down
// in 336.6 (308), more than the norms saved (28.5 -> 15.2 us a launch).
// With algorithms timed at 2048 rows too it still lost: o_proj 100.9 ->
// 119.5 us, down 323.7 -> 354.8, the prefill 47.1 / 46.9 -> 47.4 / 47.4 ms.
bool addsResidual(const BoundStep& s, int64_t rows) {
  return s.sum_norm >= 0 && rows <= kAutotuneMaxRows && onCublas(s, rows);
}

// Rows of `v` in a batch of this shape: one per sequence or one per token.
int64_t rowsOf(const DeviceValue& v, const LaunchShape& shape) { return v.per_sequence ? shape.b : shape.n; }


// A gemm step's optional bias (weight arg 2).
bool hasBias(const BoundStep& s) { return s.weights.size() > 2 && s.weights[2] != 0; }

#define KILN_ASSIGN(var, expr)                         \
  auto var##_result = (expr);                          \
  if (!var##_result.ok()) return var##_result.error(); \
  auto var = var##_result.take()

const char* elemName(int elem) { return elem == 4 ? "f32" : "bf16"; }

// The instance's element type for each value operand and result, against
// the manifest's value types. `typed` are the step's params with the plan's
// activation types named (activation_types.h): a `*_type` param types its
// operand, an absent one is bf16 (the templates' default). A gemm's x and y
// are the plan's activation type (`gemm_elem`), in which cuBLASLt runs it.
Status checkValueTypes(const Step& step, const nlohmann::json& typed, int gemm_elem,
                       const std::vector<DeviceValue>& args, const std::vector<DeviceValue>& results) {
  if (step.kind == StepKind::kSplit) return {};  // a copy: results take x's type
  auto named = [&](const char* param) -> Result<int> {
    if (!param || !typed.contains(param)) return 2;
    const nlohmann::json& type = typed[param];
    if (type != "bf16" && type != "f32")
      return makeError("{}: param '{}' is {}, expected bf16 or f32", step.path, param, type.dump());
    return type == "f32" ? 4 : 2;
  };
  const bool gemm = step.kind == StepKind::kGemm;
  const cuda_codegen::ActivationTypeParams& params = cuda_codegen::activationTypeParams(stepKindName(step.kind));
  for (size_t a = 0; a < args.size(); ++a) {
    if (!args[a].valid) continue;
    const char* param = a < params.args.size() ? params.args[a] : nullptr;
    KILN_ASSIGN(elem, named(param));
    if (gemm) elem = gemm_elem;
    if (args[a].elem != elem)
      return makeError("{}: args[{}] is {} but the {} reads {}{}", step.path, a, elemName(args[a].elem),
                       gemm ? "GEMM" : "instance", elemName(elem), param ? fmt::format(" ({})", param) : "");
  }
  for (size_t r = 0; r < results.size(); ++r) {
    const size_t from_last = results.size() - 1 - r;
    const char* param = from_last < params.results_from_last.size() ? params.results_from_last[from_last] : nullptr;
    KILN_ASSIGN(elem, named(param));
    if (gemm) elem = gemm_elem;
    if (results[r].elem != elem)
      return makeError("{}: results[{}] is {} but the {} writes {}{}", step.path, r, elemName(results[r].elem),
                       gemm ? "GEMM" : "instance", elemName(elem), param ? fmt::format(" ({})", param) : "");
  }
  return {};
}

struct GemmPlanKey {
  int64_t n, k, rows;
  bool bias;
  bool adds_residual;  // C and D are the f32 stream and sum, beta 1 (BoundStep::sum_norm)
  bool operator<(const GemmPlanKey& o) const {
    return std::tie(n, k, rows, bias, adds_residual) < std::tie(o.n, o.k, o.rows, o.bias, o.adds_residual);
  }
};
struct GemmPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool adds_residual = false;  // GemmPlanKey's
};

}  // namespace

struct CudaExecutor::State {
  const CudaDriver* d = nullptr;
  DriverExtras x;
  const CublasLt* lt = nullptr;
  cublasLtHandle_t lt_handle = nullptr;
  CUdevice device = 0;
  CUcontext context = nullptr;
  CUstream stream = nullptr;
  std::vector<CUmodule> modules;
  std::vector<CUdeviceptr> allocations;
  std::vector<void*> host_allocations;
  CUdeviceptr workspace = 0;
  // Inputs on the device, at fixed offsets (in i32 elements) of one buffer.
  CUdeviceptr inputs = 0;
  int64_t input_offset[kNumInputs] = {};
  int64_t block_table_capacity = 0;  // i32 elements
  int32_t* staging = nullptr;        // pinned, mirrors the input buffer
  void* logits_host = nullptr;       // pinned, [T_max, vocab] of the logits' type
  DeviceValue logits;
  std::vector<BoundStep> steps;
  std::map<GemmPlanKey, GemmPlan> gemm_plans;
  // The GEMMs' A, B and C type: bf16, or f32 for f32 plans, whose GEMMs all
  // run here (no skinny kernel) with CUBLAS_COMPUTE_32F: true f32 products,
  // no TF32 (that needs CUBLAS_COMPUTE_32F_FAST_TF32).
  cudaDataType_t gemm_type = CUDA_R_16BF;
  int64_t num_slots = 0;  // KV pool slots (rope_kv_append's bound)
  int sms = 1;            // streaming multiprocessors
  // Split-KV partials: [kSplitRows (token, split) rows, heads, head_dim] f32 and the lse;
  // [T_max, kv_heads] arrival counters of decode_attention's fused combine.
  CUdeviceptr partial_out = 0, partial_lse = 0, split_arrivals = 0;
  int64_t split_rows = 0;  // (token, split) rows the partials hold
  bool use_graphs = true;
  bool programmatic_launch = false;  // CudaExecutorOptions::programmatic_launch, where supported
  bool verbose = false;              // CudaExecutorOptions::verbose or profile_steps
  bool gemm_autotune = true;         // CudaExecutorOptions::gemm_autotune
  std::map<LaunchShape, CUgraphExec> graphs;
  int64_t graph_captures = 0;
  // CudaExecutorOptions::profile_steps: an event before each step and one
  // after the last.
  bool profile = false;
  std::vector<CUevent> step_events;
  StepProfile step_profile;
  // CudaExecutorOptions::report_forward_gpu_time: events around each decode
  // forward (its input copy .. its output copy) and their sum. Only graph
  // replays count: a forward that captures its graph also spends host time
  // (capture, cuBLASLt autotuning) between the two events.
  // The same for forwards launched step by step (prefill and mixed
  // batches), by token count, beside the wall time the engine reports: what
  // the host and the gaps between launches add. Only forwards that made no
  // new GEMM plan count (autotuning runs between the two events).
  CUevent forward_begin = nullptr, forward_end = nullptr;
  bool forward_replayed = false, forward_timed_eager = false;
  int64_t forward_tokens = 0;
  double decode_gpu_ms = 0;
  int64_t decode_forwards = 0;
  std::map<int64_t, std::pair<double, int64_t>> eager_gpu_ms;  // tokens -> (sum of ms, forwards)
  // Records the end of a forward launched by launchForward; after the
  // stream's synchronize, adds its GPU time.
  Status recordForwardEnd() {
    if (!forward_end) return {};
    return d->check(d->cuEventRecord(forward_end, stream), "cuEventRecord (forward end)");
  }
  void addForwardTime() {
    if (!forward_end || !(forward_replayed || forward_timed_eager)) return;
    float ms = 0;
    if (d->cuEventElapsedTime_v2(&ms, forward_begin, forward_end) != CUDA_SUCCESS) return;
    if (forward_replayed) {
      decode_gpu_ms += ms;
      ++decode_forwards;
    } else {
      auto& [sum, count] = eager_gpu_ms[forward_tokens];
      sum += ms;
      ++count;
    }
  }
  // Greedy batches: the argmax instance, its scratch ([T_max, chunks]
  // partials, [T_max] arrival counters kept zero between launches) and the
  // tokens, on the device and pinned on the host.
  CUfunction argmax_fn = nullptr;
  unsigned argmax_block = 0;
  int argmax_chunks = 1;
  CUdeviceptr argmax_values = 0, argmax_ids = 0, argmax_arrivals = 0, tokens = 0;
  int32_t* tokens_host = nullptr;

  ~State() {
    if (!d) return;
    d->cuCtxSetCurrent(context);
    if (stream) x.streamSynchronize(stream);
    for (CUevent e : step_events) d->cuEventDestroy_v2(e);
    if (decode_forwards > 0)
      fmt::print(stderr, "cuda: {} decode forwards replayed from graphs, {:.3f} ms each on the GPU (input copy to output copy)\n",
                 decode_forwards, decode_gpu_ms / double(decode_forwards));
    for (const auto& [tokens, time] : eager_gpu_ms)
      fmt::print(stderr, "cuda: {} forwards of {} tokens launched step by step, {:.3f} ms each on the GPU (input copy to output copy)\n",
                 time.second, tokens, time.first / double(time.second));
    for (CUevent e : {forward_begin, forward_end})
      if (e) d->cuEventDestroy_v2(e);
    for (auto& [shape, exec] : graphs) x.graphExecDestroy(exec);
    for (auto& [key, plan] : gemm_plans) {
      lt->cublasLtMatrixLayoutDestroy(plan.a);
      lt->cublasLtMatrixLayoutDestroy(plan.b);
      lt->cublasLtMatrixLayoutDestroy(plan.c);
      lt->cublasLtMatmulDescDestroy(plan.desc);
    }
    if (lt_handle) lt->cublasLtDestroy(lt_handle);
    for (CUmodule m : modules) d->cuModuleUnload(m);
    for (CUdeviceptr p : allocations) d->cuMemFree_v2(p);
    for (void* p : host_allocations) x.memFreeHost(p);
    if (stream) x.streamDestroy(stream);
    if (context) d->cuDevicePrimaryCtxRelease_v2(device);
  }

  Result<CUdeviceptr> alloc(int64_t bytes, const char* what) {
    CUdeviceptr p = 0;
    CUresult r = d->cuMemAlloc_v2(&p, size_t(std::max<int64_t>(bytes, 1)));
    if (r != CUDA_SUCCESS) {
      size_t free_bytes = 0, total = 0;
      x.memGetInfo(&free_bytes, &total);
      return makeError("cannot allocate {} on the GPU: asked {:.1f} MiB, {:.1f} MiB free of {:.1f} "
                       "MiB ({})",
                       what, double(bytes) / (1 << 20), double(free_bytes) / (1 << 20),
                       double(total) / (1 << 20), d->describe(r));
    }
    allocations.push_back(p);
    return p;
  }
  Result<void*> allocHost(int64_t bytes, const char* what) {
    void* p = nullptr;
    CUresult r = x.memAllocHost(&p, size_t(std::max<int64_t>(bytes, 1)));
    if (r != CUDA_SUCCESS)
      return makeError("cannot allocate {} bytes of pinned host memory for {}: {}", bytes, what,
                       d->describe(r));
    host_allocations.push_back(p);
    return p;
  }
  Status launch(CUfunction fn, unsigned block, unsigned gx, unsigned gy, unsigned gz, void* params,
                unsigned smem = 0) {
    void* args[] = {params};
    if (programmatic_launch)
      return d->check(launchProgrammatic(x, fn, gx, gy, gz, block, smem, stream, args), "cuLaunchKernelEx");
    return d->check(d->cuLaunchKernel(fn, gx, gy, gz, block, 1, 1, smem, stream, args, nullptr),
                    "cuLaunchKernel");
  }
  Status launch(const BoundStep& s, unsigned gx, unsigned gy, unsigned gz, void* params) {
    return launch(s.fn, s.block, gx, gy, gz, params);
  }
  // The cuBLASLt plan of step `s`'s GEMM at `rows` rows. Decode-sized
  // shapes (rows <= kAutotuneMaxRows) time cuBLASLt's candidate algorithms
  // on the step's own buffers and keep the fastest: at 32 rows its first
  // heuristic choice ran o_proj (4096 x 4096) at 1 TB/s of weights
  // (2026-11-29). Never while capturing a graph (prepareGemms runs first).
  Result<GemmPlan*> gemmPlan(const BoundStep& s, int64_t rows);
  Result<cublasLtMatmulAlgo_t> fastestAlgo(const BoundStep& s, GemmPlan& plan, int64_t rows,
                                           const cublasLtMatmulHeuristicResult_t* candidates, int count);
  Status runGemm(const BoundStep& s, GemmPlan& plan, const cublasLtMatmulAlgo_t& algo);
  // The plans a forward of this shape needs, made before a graph capture.
  Status prepareGemms(const LaunchShape& shape);
  bool capturing = false;
  CUdeviceptr l2_flush = 0;  // fastestAlgo's, allocated on first use
  int64_t l2_flush_bytes = 0;
  Status gemm(const BoundStep& s, int64_t rows);
  // Every step of `forward` on `stream`, for a batch of this shape whose
  // inputs are already in `inputs`.
  Status enqueueSteps(const LaunchShape& shape);
  Status attention(const BoundStep& s, const LaunchShape& shape);
  // Whether step i, folded into the gemm before it (BoundStep::absorbed:
  // silu_mul, rope_kv_append), was done there at `rows` rows: by the
  // skinny fused variant, or by gemm_swiglu_wgmma. Nothing of its own runs.
  bool doneByGemmBefore(size_t i, int64_t rows) const {
    return steps[i].absorbed && (rows <= kGemvMaxRows || fusedSwiGlu(steps[i - 1], rows));
  }
  // Whether residual_rms_norm step i gets its sum from the gemm before it
  // at `rows` rows (BoundStep::sum_from_gemm) and only normalizes it.
  bool sumFromGemmBefore(size_t i, int64_t rows) const {
    return steps[i].sum_from_gemm && addsResidual(steps[i - 1], rows);
  }
  // Each logits row's argmax into `tokens` (a greedy shape's last launch).
  Status argmaxLogits(const LaunchShape& shape);
  // Which attention kernels a batch of this shape runs.
  const char* attentionPath(const BoundStep& s, const LaunchShape& shape) const;
  // With `profile`: the step times of the forward just synchronized.
  void addStepTimes(const LaunchShape& shape);
  // The graph of `shape`, captured from enqueueSteps on first use.
  Result<CUgraphExec> decodeGraph(const LaunchShape& shape);
  const int* input(const BoundStep& s, size_t a) const {
    return reinterpret_cast<const int*>(inputs + CUdeviceptr(input_offset[s.inputs[a]] * 4));
  }
};

Result<GemmPlan*> CudaExecutor::State::gemmPlan(const BoundStep& s, int64_t rows) {
  const int64_t n = s.width, k = s.k;
  const bool bias = hasBias(s);
  const bool adds_residual = addsResidual(s, rows);
  GemmPlanKey key{n, k, rows, bias, adds_residual};
  if (auto it = gemm_plans.find(key); it != gemm_plans.end()) return &it->second;
  // Row-major y[rows, n] = x[rows, k] · W[n, k]ᵀ is column-major
  // y'[n, rows] = W'ᵀ · x' with W' = [k, n] (ld k) and x' = [k, rows] (ld k).
  GemmPlan plan;
  plan.adds_residual = adds_residual;
  auto check = [&](cublasStatus_t st, const char* what) -> Status {
    if (st == CUBLAS_STATUS_SUCCESS) return {};
    return makeError("cuBLASLt {} failed (status {}) for a GEMM n {} k {} rows {}", what, int(st),
                     n, k, rows);
  };
  KILN_RETURN_IF_ERROR(check(lt->cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
                             "cublasLtMatmulDescCreate"));
  cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  lt->cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
  lt->cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
  if (bias) {
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    lt->cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
  }
  KILN_RETURN_IF_ERROR(check(lt->cublasLtMatrixLayoutCreate(&plan.a, gemm_type, uint64_t(k), uint64_t(n), k),
                             "layout W"));
  KILN_RETURN_IF_ERROR(check(lt->cublasLtMatrixLayoutCreate(&plan.b, gemm_type, uint64_t(k), uint64_t(rows), k),
                             "layout x"));
  // bf16 x and W with f32 C and D: one of cuBLASLt's supported type sets.
  KILN_RETURN_IF_ERROR(check(lt->cublasLtMatrixLayoutCreate(&plan.c, adds_residual ? CUDA_R_32F : gemm_type,
                                                            uint64_t(n), uint64_t(rows), n),
                             "layout y"));
  cublasLtMatmulPreference_t pref = nullptr;
  KILN_RETURN_IF_ERROR(check(lt->cublasLtMatmulPreferenceCreate(&pref), "preference"));
  size_t ws = kCublasWorkspace;
  lt->cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  cublasLtMatmulHeuristicResult_t results[kGemmCandidates] = {};
  const bool autotune = gemm_autotune && rows <= kAutotuneMaxRows && !capturing;
  int found = 0;
  cublasStatus_t st = lt->cublasLtMatmulAlgoGetHeuristic(lt_handle, plan.desc, plan.a, plan.b, plan.c, plan.c,
                                                         pref, autotune ? kGemmCandidates : 1, results, &found);
  lt->cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || found == 0)
    return makeError("cuBLASLt found no algorithm for a {} GEMM n {} k {} rows {} (status {})",
                     gemm_type == CUDA_R_32F ? "f32" : "bf16", n, k, rows, int(st));
  plan.algo = results[0].algo;
  if (autotune && found > 1) {
    KILN_ASSIGN(fastest, fastestAlgo(s, plan, rows, results, found));
    plan.algo = fastest;
  }
  return &gemm_plans.emplace(key, plan).first->second;
}

Status CudaExecutor::State::runGemm(const BoundStep& s, GemmPlan& plan, const cublasLtMatmulAlgo_t& algo) {
  if (hasBias(s)) {
    void* ptr = reinterpret_cast<void*>(s.weights[2]);
    lt->cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &ptr, sizeof ptr);
  }
  // y = x·Wᵀ, or with the norm after it: its sum = its x + x·Wᵀ.
  CUdeviceptr c = s.results[0].ptr, y = s.results[0].ptr;
  if (plan.adds_residual) {
    const BoundStep& norm = steps[size_t(s.sum_norm)];
    c = norm.args[0].ptr;
    y = norm.results[0].ptr;
  }
  const float alpha = 1.0f, beta = plan.adds_residual ? 1.0f : 0.0f;
  cublasStatus_t st = lt->cublasLtMatmul(
      lt_handle, plan.desc, &alpha, reinterpret_cast<const void*>(s.weights[1]), plan.a,
      reinterpret_cast<const void*>(s.args[0].ptr), plan.b, &beta, reinterpret_cast<const void*>(c), plan.c,
      reinterpret_cast<void*>(y), plan.c, &algo,
      reinterpret_cast<void*>(workspace), kCublasWorkspace, stream);
  if (st != CUBLAS_STATUS_SUCCESS)
    return makeError("cublasLtMatmul failed (status {}) for n {} k {}", int(st), s.width, s.k);
  return {};
}

Result<cublasLtMatmulAlgo_t> CudaExecutor::State::fastestAlgo(
    const BoundStep& s, GemmPlan& plan, int64_t rows, const cublasLtMatmulHeuristicResult_t* candidates,
    int count) {
  // On the step's own buffers: y is written again by the real launch after
  // this. Each timed run starts with the weights out of L2 (a write over a
  // buffer twice its size), as in a forward pass, where every weight is read
  // once: repeated back to back, a 30-50 MB matrix stays in the 50 MB L2 and
  // the ranking favours algorithms that are slower from HBM (measured
  // 2026-11-29: the qkv GEMM at 32 rows went 23.5 -> 50.9 us).
  if (!l2_flush) {
    int l2_bytes = 0;
    d->cuDeviceGetAttribute(&l2_bytes, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, device);
    l2_flush_bytes = 2 * std::max<int64_t>(l2_bytes, 64 << 20);
    KILN_ASSIGN(buffer, alloc(l2_flush_bytes, "the L2 flush buffer of the GEMM autotuner"));
    l2_flush = buffer;
  }
  CUevent start = nullptr, stop = nullptr;
  KILN_RETURN_IF_ERROR(d->check(d->cuEventCreate(&start, CU_EVENT_DEFAULT), "cuEventCreate (gemm autotune)"));
  Status status = d->check(d->cuEventCreate(&stop, CU_EVENT_DEFAULT), "cuEventCreate (gemm autotune)");
  constexpr int kReps = 3;
  float best_ms = 0, first_ms = 0;
  int best = 0;
  for (int i = 0; i < count && status.ok(); ++i) {
    status = runGemm(s, plan, candidates[i].algo);  // warm-up (the first run also loads the kernel)
    float total = 0;
    for (int r = 0; r < kReps && status.ok(); ++r) {
      status = d->check(x.memsetD32Async(l2_flush, unsigned(r), size_t(l2_flush_bytes / 4), stream),
                        "cuMemsetD32Async (L2 flush)");
      if (status.ok()) status = d->check(d->cuEventRecord(start, stream), "cuEventRecord");
      if (status.ok()) status = runGemm(s, plan, candidates[i].algo);
      if (status.ok()) status = d->check(d->cuEventRecord(stop, stream), "cuEventRecord");
      if (status.ok()) status = d->check(d->cuEventSynchronize(stop), "gemm autotune");
      float ms = 0;
      if (status.ok()) status = d->check(d->cuEventElapsedTime_v2(&ms, start, stop), "cuEventElapsedTime");
      total += ms;
    }
    if (!status.ok()) break;
    if (i == 0) first_ms = total;
    if (i == 0 || total < best_ms) best_ms = total, best = i;
  }
  d->cuEventDestroy_v2(start);
  if (stop) d->cuEventDestroy_v2(stop);
  KILN_RETURN_IF_ERROR(status);
  if (verbose)
    fmt::print(stderr, "cuda: gemm n {} k {} rows {}: fastest of {} cuBLASLt algorithms {:.1f} us "
               "(heuristic's first {:.1f} us)\n", s.width, s.k, rows, count, 1e3 * best_ms / kReps,
               1e3 * first_ms / kReps);
  return candidates[best].algo;
}

Status CudaExecutor::State::prepareGemms(const LaunchShape& shape) {
  for (const BoundStep& s : steps) {
    if (s.kind != StepKind::kGemm) continue;
    const int64_t rows = rowsOf(s.args[0], shape);
    if (rows <= kGemvMaxRows && s.fn) continue;  // the skinny kernel's
    if (auto plan = gemmPlan(s, rows); !plan.ok()) return plan.error();
  }
  return {};
}

Status CudaExecutor::State::gemm(const BoundStep& s, int64_t rows) {
  const bool bias = hasBias(s);
  // An f32 plan's gemm has no skinny kernel: cuBLASLt at every row count.
  if (const GemvKernel& kernel = skinnyKernel(s, rows); rows <= kGemvMaxRows && kernel.fn) {
    auto ptr = [](CUdeviceptr p) { return reinterpret_cast<void*>(p); };
    const bool fused = s.fused.fn != nullptr;
    kk::GemvParams p{ptr(s.args[0].ptr), ptr(s.weights[1]), bias ? ptr(s.weights[2]) : nullptr,
                     fused ? ptr(s.fused_y) : ptr(s.results[0].ptr), int(rows)};
    const unsigned gz = unsigned((rows + kGemvMaxRows - 1) / kGemvMaxRows);  // 1 for the single-row instances
    if (kernel.tiles > 0) {
      if (s.folded_norm >= 0) {  // the norm's inputs in, its sum out (p.x is not read)
        const BoundStep& norm = steps[size_t(s.folded_norm)];
        p.norm_x = ptr(norm.args[0].ptr);
        p.norm_residual = ptr(norm.args[1].ptr);
        p.norm_weight = ptr(norm.weights[2]);
        p.norm_sum = norm.writes_sum ? ptr(norm.results[0].ptr) : nullptr;
      }
      const unsigned blocks = unsigned(std::min<int64_t>(kernel.tiles, sms));
      if (s.fused_rope < 0) return launch(kernel.fn, kernel.block, blocks, 1, 1, &p, kernel.smem);
      const BoundStep& rope = steps[size_t(s.fused_rope)];
      kk::GemvRopeParams r{p, input(rope, 1), input(rope, 2), ptr(rope.pools[3]), ptr(rope.pools[4]), num_slots};
      return launch(kernel.fn, kernel.block, blocks, 1, 1, &r, kernel.smem);
    }
    if (!fused)
      return launch(kernel.fn, kernel.block, unsigned((s.width + kernel.rows_per_block - 1) / kernel.rows_per_block),
                    1, gz, &p);
    const int64_t pairs = kernel.rows_per_block / 2;  // a block holds row pairs (gate/up, or rope's)
    const unsigned gx = unsigned((s.width / 2 + pairs - 1) / pairs);
    if (s.fused_rope < 0) return launch(kernel.fn, kernel.block, gx, 1, gz, &p);
    const BoundStep& rope = steps[size_t(s.fused_rope)];  // merged: qkv, positions, slot_mapping, k, v pools
    kk::GemvRopeParams r{p, input(rope, 1), input(rope, 2), ptr(rope.pools[3]), ptr(rope.pools[4]), num_slots};
    return launch(kernel.fn, kernel.block, gx, 1, gz, &r);
  }
  if (fusedSwiGlu(s, rows)) {  // x's map is per batch: its rows are the batch's
    namespace gs = kk::gemm_swiglu;
    KILN_ASSIGN(x_map, gemmSwiGluXMap(*d, s.args[0].ptr, rows, s.k));
    kk::GemmSwiGluParams p{x_map, s.swiglu_w_map, reinterpret_cast<void*>(s.fused_y), int(rows)};
    return launch(s.swiglu_fn, unsigned(gs::kThreads), unsigned(gs::grid_blocks(rows, s.width / 2, sms)), 1, 1, &p,
                  s.swiglu_smem);
  }
  KILN_ASSIGN(plan, gemmPlan(s, rows));
  return runGemm(s, *plan, plan->algo);
}

namespace {

// How a weight is wanted on the device: converted to one element type, or
// its bound bytes as they are (block-quantized embedding tables).
enum class Form { kF32, kBf16, kF16, kRaw };

const char* formName(Form f) {
  switch (f) {
    case Form::kF32: return "f32";
    case Form::kBf16: return "bf16";
    case Form::kF16: return "f16";
    case Form::kRaw: return "raw";
  }
  return "?";
}

Result<Form> formOf(const std::string& type) {
  if (type == "f32") return Form::kF32;
  if (type == "bf16") return Form::kBf16;
  if (type == "f16") return Form::kF16;
  if (type == "q8_0" || type == "q4_0" || type == "q4_1") return Form::kRaw;
  return makeError("element type '{}' has no CUDA kernel", type);
}

int64_t elements(const BoundWeight& w) {
  int64_t n = 1;
  for (int64_t d : w.shape) n *= d;
  return n;
}

// True when the device form is the bound bytes themselves (no conversion).
bool uploadsAsBound(const BoundWeight& w, Form form) {
  return form == Form::kRaw || (form == Form::kF32 && w.type == cpu::WeightType::F32) ||
         (form == Form::kBf16 && w.type == cpu::WeightType::BF16) ||
         (form == Form::kF16 && w.type == cpu::WeightType::F16);
}

// The bytes of `w` in `form`, for a form that is not its bound bytes
// (uploadsAsBound is false): float weights are converted through f32.
Status convertWeight(const BoundWeight& w, Form form, std::vector<uint8_t>& out) {
  const int64_t n = elements(w);
  if (w.type != cpu::WeightType::F32 && w.type != cpu::WeightType::BF16 && w.type != cpu::WeightType::F16)
    return makeError("weight {} '{}' is {}: GGUF block types are not supported by the CUDA "
                     "executor yet for this use (compile from a f32/f16/bf16 checkpoint)",
                     w.id, w.name, weightTypeName(w.type));
  std::vector<float> f(static_cast<size_t>(n));
  KILN_RETURN_IF_ERROR(cpu::dequantizeRow(w.type, w.data, f.data(), n));
  const cpu::WeightType to = form == Form::kF32    ? cpu::WeightType::F32
                            : form == Form::kBf16 ? cpu::WeightType::BF16
                                                  : cpu::WeightType::F16;
  out.resize(size_t(n) * (form == Form::kF32 ? 4 : 2));
  return cpu::quantizeRow(to, f.data(), out.data(), n);
}

int64_t formBytes(const BoundWeight& w, Form form) {
  switch (form) {
    case Form::kF32: return elements(w) * 4;
    case Form::kBf16:
    case Form::kF16: return elements(w) * 2;
    case Form::kRaw: return int64_t(w.size_bytes);
  }
  return 0;
}

// A norm step's weight type: the plan's, f32 where it names none.
std::string normWeightType(const Step& step) {
  const std::string& type = step.kind == StepKind::kRmsNorm ? step.as<RmsNormParams>().weight_type
                                                            : step.as<ResidualRmsNormParams>().weight_type;
  return type.empty() ? "f32" : type;
}

int parseRowsPerBlock(const std::string& source) {
  return std::max(1, cuda_codegen::configConstant(source, "kRowsPerBlock", 1));
}

}  // namespace

CudaExecutor::~CudaExecutor() {
  if (state_ && !state_->step_profile.empty())
    fmt::print(stderr, "{}", state_->step_profile.report());
}

int64_t CudaExecutor::graphCaptures() const { return state_->graph_captures; }

Result<std::unique_ptr<CudaExecutor>> CudaExecutor::create(const Manifest& manifest,
                                                           const WeightStore& weights,
                                                           const KvPoolConfig& kv_requested,
                                                           int64_t max_tokens,
                                                           const CudaExecutorOptions& options) {
  KvPoolConfig kv = kv_requested;  // num_blocks may come from gpu_memory_fraction
  const std::string& mpath = manifest.path;
  const Entry* entry = manifest.findEntry("forward");
  if (!entry) return makeError("{}: entries: missing entry 'forward'", mpath);
  if (manifest.activation_type != "bf16" && manifest.activation_type != "f32")
    return makeError("{}: activation_type: the CUDA executor runs bf16 or f32 activations, got {}", mpath,
                     manifest.activation_type);
  // An f32 plan runs as vLLM's --dtype float32: activations, KV cache and
  // logits as the manifest types them, GEMM weights f32 and cuBLASLt in true
  // f32 (no TF32), so its logits follow the CPU executor's and transformers'
  // fp32 ones. A bf16 plan's GEMMs take bf16 weights.
  const bool f32_plan = manifest.activation_type == "f32";
  const Form gemm_form = f32_plan ? Form::kF32 : Form::kBf16;
  if (manifest.world_size != 1)
    return makeError("{}: world_size: the CUDA executor runs world_size 1, got {}", mpath,
                     manifest.world_size);
  const KvCacheConfig& mk = manifest.kv_cache;
  if (mk.type != "bf16" && mk.type != "f32")
    return makeError("{}: kv_cache.type: the CUDA pools hold bf16 or f32, got {}", mpath, mk.type);
  KILN_RETURN_IF_ERROR(cpu::checkPoolMatchesManifest(kv_requested, manifest));
  if (max_tokens <= 0 || max_tokens > (int64_t(1) << 20))
    return makeError("token budget {} is out of range [1, {}]", max_tokens, int64_t(1) << 20);
  if (entry->outputs.size() != 1 || entry->outputs[0].name != "logits")
    return makeError("{}: entries.forward.outputs: expected one output named 'logits'", mpath);

  // Driver, device, context, libraries.
  auto driver = loadCudaDriver();
  if (!driver) return makeError("no CUDA backend: {}", driver.error().message);
  std::unique_ptr<CudaExecutor> ex(new CudaExecutor());
  ex->state_ = std::make_unique<State>();
  State& st = *ex->state_;
  const CudaDriver* d = *driver;
  KILN_ASSIGN(extras, loadExtras(*d));
  int count = 0;
  KILN_RETURN_IF_ERROR(d->check(d->cuDeviceGetCount(&count), "cuDeviceGetCount"));
  if (count <= options.device)
    return makeError("no CUDA backend: the driver at {} sees {} GPU(s), device {} was asked for",
                     d->library.path(), count, options.device);
  st.x = extras;
  KILN_RETURN_IF_ERROR(d->check(d->cuDeviceGet(&st.device, options.device), "cuDeviceGet"));
  KILN_RETURN_IF_ERROR(d->check(d->cuDevicePrimaryCtxRetain(&st.context, st.device),
                                "cuDevicePrimaryCtxRetain"));
  st.d = d;
  KILN_RETURN_IF_ERROR(d->check(d->cuCtxSetCurrent(st.context), "cuCtxSetCurrent"));
  KILN_RETURN_IF_ERROR(d->check(extras.streamCreate(&st.stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate"));
  int major = 0, minor = 0;
  d->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, st.device);
  d->cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, st.device);
  char name[256] = {0};
  d->cuDeviceGetName(name, sizeof name, st.device);
  const std::string device_arch = fmt::format("sm_{}{}", major, minor);
  // Hopper (9.0) compiles every instance for sm_90a, the arch-specific
  // target, so the wgmma attention kernel can run there (instance_source).
  const bool hopper = cuda_codegen::warpgroupMmaTarget(device_arch);
  const std::string arch = hopper ? "sm_90a" : device_arch;
  d->cuDeviceGetAttribute(&st.sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, st.device);
  st.use_graphs = options.tuning.graphs;
  st.programmatic_launch = options.tuning.programmatic_launch && major >= 9 && extras.launchKernelEx;
  st.profile = options.tuning.profile_steps;
  if (options.tuning.report_forward_gpu_time && !options.tuning.profile_steps) {
    KILN_RETURN_IF_ERROR(d->check(d->cuEventCreate(&st.forward_begin, CU_EVENT_DEFAULT), "cuEventCreate"));
    KILN_RETURN_IF_ERROR(d->check(d->cuEventCreate(&st.forward_end, CU_EVENT_DEFAULT), "cuEventCreate"));
  }
  st.verbose = options.verbose || options.tuning.profile_steps;
  st.gemm_autotune = options.tuning.gemm_autotune;
  st.gemm_type = f32_plan ? CUDA_R_32F : CUDA_R_16BF;
  ex->device_name_ = fmt::format("{} ({})", name, device_arch);
  auto lt = loadCublasLt();
  if (!lt) return makeError("no CUDA backend: {}", lt.error().message);
  st.lt = *lt;
  if (st.lt->cublasLtCreate(&st.lt_handle) != CUBLAS_STATUS_SUCCESS)
    return makeError("cublasLtCreate failed on {}", ex->device_name_);
  if (options.verbose)
    fmt::print(stderr, "cuda: {} driver {} ({}), cuBLASLt {} ({})\n", ex->device_name_,
               d->version, d->library.path(), st.lt->version, st.lt->library.path());

  ex->max_tokens_ = max_tokens;

  // 1. Which weights in which form: GEMM matrices and biases gemm_form, norm
  //    weights in the instance's weight type (f32 unless it says), tables as
  //    the embedding instance names them.
  std::map<std::pair<int64_t, Form>, int64_t> weight_offset;  // -> byte offset
  int64_t weight_total = 0;
  auto want = [&](const Step& step, size_t arg, Form form) -> Status {
    const StepArg& a = step.args[arg];
    const BoundWeight* w = weights.find(a.id);
    if (!w || !w->kernel_ready)
      return makeError("{} ({}): args[{}]: weight {} is not bound by the weight store", step.path,
                       stepKindName(step.kind), arg, a.id);
    auto key = std::make_pair(a.id, form);
    if (!weight_offset.count(key)) {
      weight_offset[key] = weight_total;
      weight_total = alignUp(weight_total + formBytes(*w, form));
    }
    return {};
  };
  for (const Step& step : entry->steps) {
    for (size_t i = 0; i < step.args.size(); ++i) {
      if (step.args[i].kind != StepArg::Kind::kWeight) continue;
      Form form = gemm_form;
      if (step.kind == StepKind::kEmbedding) {
        const std::string& t = step.as<EmbeddingParams>().table_type;
        auto f = formOf(t);
        if (!f) return makeError("{} (embedding): table_type: {}", step.path, f.error().message);
        form = *f;
      } else if (step.kind == StepKind::kRmsNorm || step.kind == StepKind::kResidualRmsNorm) {
        std::string t = normWeightType(step);
        auto f = formOf(t);
        if (!f || *f == Form::kRaw)
          return makeError("{}: norm weight_type {} has no CUDA kernel", step.path, t);
        form = *f;
      } else if (step.kind != StepKind::kGemm) {
        return makeError("{} ({}): args[{}] is a weight, which this kind does not take", step.path,
                         stepKindName(step.kind), i);
      }
      KILN_RETURN_IF_ERROR(want(step, i, form));
    }
  }
  KILN_ASSIGN(weight_base, st.alloc(weight_total, "the weights"));
  ex->weight_bytes_ = weight_total;
  {
    // Weights already in the wanted form go from the mapped checkpoint (or
    // their deferred concat_rows parts) straight to their offsets; the rest
    // are converted here first.
    std::vector<HostToDeviceCopy> copies;
    std::vector<std::vector<uint8_t>> converted;
    for (const auto& [key, offset] : weight_offset) {
      const BoundWeight& w = *weights.find(key.first);
      const CUdeviceptr dst = weight_base + CUdeviceptr(offset);
      if (uploadsAsBound(w, key.second)) {
        if (w.data) {
          copies.push_back({w.data, w.size_bytes, dst});
          continue;
        }
        uint64_t at = 0;
        for (std::span<const uint8_t> part : w.parts) {
          copies.push_back({part.data(), part.size(), dst + CUdeviceptr(at)});
          at += part.size();
        }
        continue;
      }
      BoundWeight whole = w;
      std::vector<uint8_t> joined;
      if (!w.data) {  // conversion reads one buffer
        for (std::span<const uint8_t> part : w.parts) joined.insert(joined.end(), part.begin(), part.end());
        whole.data = joined.data();
        whole.parts.clear();
      }
      converted.emplace_back();
      Status s = convertWeight(whole, key.second, converted.back());
      if (!s.ok()) return s.error();
      copies.push_back({converted.back().data(), converted.back().size(), dst});
    }
    UploadOptions upload;
    upload.progress = options.progress;
    upload.threads = int(std::clamp(std::thread::hardware_concurrency(), 1u, 8u));
    KILN_RETURN_IF_ERROR(uploadToDevice(*d, st.x, st.context, copies, upload));
    KILN_RETURN_IF_ERROR(d->check(d->cuCtxSetCurrent(st.context), "cuCtxSetCurrent"));
  }
  auto weightPtr = [&](int64_t id, Form form) -> CUdeviceptr {
    auto it = weight_offset.find({id, form});
    return it == weight_offset.end() ? 0 : weight_base + it->second;
  };

  // 2. Arena, KV pools, inputs, cuBLASLt workspace, pinned staging.
  const int64_t arena_bytes = alignUp(entry->bytes_per_token * max_tokens);
  KILN_ASSIGN(arena, st.alloc(arena_bytes, "the activation arena"));
  KILN_RETURN_IF_ERROR(d->check(d->cuMemsetD8_v2(arena, 0, size_t(arena_bytes)), "cuMemsetD8"));
  const int kv_elem = mk.type == "bf16" ? 2 : 4;
  if (options.gpu_memory_fraction > 0) {
    // What the fraction leaves once weights and arena are in, less a reserve
    // for the scratch allocated below, cuBLASLt and graphs; each block also
    // costs its share of the block-table buffer.
    size_t free_bytes = 0, total_bytes = 0;
    KILN_RETURN_IF_ERROR(d->check(st.x.memGetInfo(&free_bytes, &total_bytes), "cuMemGetInfo"));
    const int64_t reserve = int64_t(kCublasWorkspace) + (int64_t(512) << 20);
    const int64_t budget = int64_t(options.gpu_memory_fraction * double(total_bytes)) -
                           int64_t(total_bytes - free_bytes) - reserve;
    const int64_t per_block = 2 * kv.layers * kv.page_size * kv.kv_heads * kv.head_dim * kv_elem +
                              std::min<int64_t>(max_tokens, 256) * 4;
    if (budget < 16 * per_block)
      return makeError("--gpu-memory-fraction {}: {:.1f} GiB of {:.1f} GiB would leave {:.1f} MiB for "
                       "the KV cache after weights and activations ({:.1f} GiB in use); at least "
                       "{:.1f} MiB (16 blocks) is needed",
                       options.gpu_memory_fraction, options.gpu_memory_fraction * double(total_bytes) / (1 << 30),
                       double(total_bytes) / (1 << 30), double(std::max<int64_t>(budget, 0)) / (1 << 20),
                       double(total_bytes - free_bytes) / (1 << 30), double(16 * per_block) / (1 << 20));
    kv.num_blocks = budget / per_block;
    if (options.verbose || options.progress)
      fmt::print(stderr, "cuda: KV cache of {} blocks ({} tokens, {:.1f} GiB) from --gpu-memory-fraction {}\n",
                 kv.num_blocks, kv.num_blocks * kv.page_size,
                 double(kv.num_blocks * per_block) / (1 << 30), options.gpu_memory_fraction);
  }
  // The K/V live on the GPU: the host pool keeps only the block bookkeeping.
  auto pool = BlockPool::create(kv, KvStorage::kElsewhere);
  if (!pool.ok()) return pool.error();
  ex->pool_ = std::make_unique<BlockPool>(pool.take());
  const int64_t pool_bytes = alignUp(kv.poolElems() * kv_elem);
  KILN_ASSIGN(pools, st.alloc(pool_bytes * 2 * kv.layers, "the KV cache pools"));
  st.num_slots = kv.num_blocks * kv.page_size;
  KILN_RETURN_IF_ERROR(d->check(d->cuMemsetD8_v2(pools, 0, size_t(pool_bytes * 2 * kv.layers)), "cuMemsetD8"));
  int64_t at = 0;
  for (int id : {kTokens, kPositions, kSlotMapping, kQueryStart, kKvLens}) {
    st.input_offset[id] = at;
    at += max_tokens + 1;
  }
  st.input_offset[kBlockTables] = at;
  st.block_table_capacity = std::max<int64_t>(kv.num_blocks, 1) * std::min<int64_t>(max_tokens, 256);
  const int64_t input_elems = at + st.block_table_capacity;
  KILN_ASSIGN(inputs, st.alloc(input_elems * 4, "the batch inputs"));
  st.inputs = inputs;
  KILN_ASSIGN(workspace, st.alloc(int64_t(kCublasWorkspace), "the cuBLASLt workspace"));
  st.workspace = workspace;
  KILN_ASSIGN(staging, st.allocHost(input_elems * 4, "the batch inputs"));
  st.staging = static_cast<int32_t*>(staging);
  ex->device_bytes_ = weight_total + arena_bytes + pool_bytes * 2 * kv.layers + input_elems * 4 +
                      int64_t(kCublasWorkspace);

  // 3. Values: in the arena, except those a fusion gives storage of their
  //    own (filled in at 4, once the fusions are known).
  std::map<int64_t, CUdeviceptr> own_storage;
  auto value = [&](const Step& step, int64_t id, const std::string& where) -> Result<DeviceValue> {
    const EntryValue* v = entry->findValue(id);
    const EntryValue* storage = v;
    while (storage && storage->view_of) storage = entry->findValue(*storage->view_of);
    if (!v || !storage) return makeError("{}: {}: unknown value id {}", step.path, where, id);
    if (v->type != "bf16" && v->type != "f32")
      return makeError("{}: {}: value {} has type {}; the CUDA executor holds bf16 or f32 values",
                       step.path, where, id, v->type);
    if (v->rows == ValueRows::kFixed)
      return makeError("{}: {}: value {} has fixed rows; the CUDA executor plans batch rows only",
                       step.path, where, id);
    DeviceValue dv;
    dv.elem = v->type == "bf16" ? 2 : 4;
    dv.ptr = arena + CUdeviceptr(storage->offset * max_tokens);
    dv.width = v->row_bytes / dv.elem;
    dv.per_sequence = v->rows == ValueRows::kSequences;
    dv.valid = true;
    if (auto own = own_storage.find(storage->id); own != own_storage.end()) {
      dv.ptr = own->second;
      return dv;
    }
    if (storage->offset * max_tokens + storage->row_bytes * max_tokens > arena_bytes)
      return makeError("{}: {}: value {} lies past the arena", step.path, where, id);
    return dv;
  };

  Step output_step;
  output_step.path = mpath + ": entries.forward.outputs[0]";
  KILN_ASSIGN(logits, value(output_step, entry->outputs[0].value, "value"));
  st.logits = logits;

  // 4. Kernel instances: for each step the list codegen/cuda/step_instances.h
  //    gives (kiln-kernels shows the same list), and the logits' greedy
  //    argmax, each compiled once.
  std::vector<KernelSource> sources;
  std::map<std::string, size_t> source_index;
  std::vector<std::string> step_instance(entry->steps.size());
  std::map<std::string, int> rows_per_block;
  std::map<std::string, unsigned> block_threads;
  std::map<std::string, std::string> instance_kind;
  using Role = cuda_codegen::InstanceRole;
  std::map<size_t, std::map<Role, std::string>> extra_instances;  // step -> the instances beside its own, by role
  std::map<std::string, unsigned> dynamic_smem;                // instance -> kSmemBytes
  cuda_codegen::StepInstanceOptions instance_options;
  instance_options.flash_attention = options.tuning.flash_attention;
  instance_options.wgmma = hopper;
  instance_options.fused_prefill = options.tuning.fused_swiglu;
  int smem_optin = 0;  // a block's dynamic shared memory ceiling
  d->cuDeviceGetAttribute(&smem_optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, st.device);
  instance_options.stream_gemv = options.tuning.stream_gemv && cuda_codegen::bulkCopyTarget(device_arch) &&
                                 smem_optin >= cuda_codegen::gemvStreamSharedBytes();
  const bool fold_norms = options.tuning.fold_norms && instance_options.stream_gemv;
  instance_options.activation_type = manifest.activation_type;
  const std::vector<cuda_codegen::SkinnyFusion> fusions = cuda_codegen::skinnyFusions(cuda_codegen::planEntryOf(*entry, manifest.activation_type));
  {
    // Values a fusion moves out of the arena, each set into one buffer:
    // every fused rope's q (each layer's is read by its attention before the
    // next layer's gemm writes), and every sum the planner put where
    // cuBLASLt could not write it beside its inputs (skinnyFusions moves
    // only sums whose lives do not overlap).
    auto shareOneBuffer = [&](const std::vector<int64_t>& values, const char* what) -> Status {
      int64_t bytes = 0;
      for (int64_t id : values)
        if (const EntryValue* v = entry->findValue(id)) bytes = std::max(bytes, v->row_bytes * max_tokens);
      if (bytes == 0) return {};
      KILN_ASSIGN(buffer, st.alloc(alignUp(bytes), what));
      for (int64_t id : values) own_storage[id] = buffer;
      ex->device_bytes_ += alignUp(bytes);
      return {};
    };
    std::vector<int64_t> fused_q, moved_sums;
    for (size_t i = 0; i < fusions.size(); ++i) {
      const std::vector<int64_t>& results = entry->steps[i].results;
      if (fusions[i].own_storage) fused_q.insert(fused_q.end(), results.begin(), results.end());
      if (options.tuning.residual_epilogue && fusions[i].sum_own_storage) moved_sums.push_back(results[0]);
    }
    KILN_RETURN_IF_ERROR(shareOneBuffer(fused_q, "the fused qkv projections' q"));
    KILN_RETURN_IF_ERROR(shareOneBuffer(moved_sums, "the residual sums the gemm epilogues write"));
  }
  for (size_t i = 0; i < entry->steps.size(); ++i) {
    const Step& step = entry->steps[i];
    if (step.kind == StepKind::kSplit) continue;  // a strided copy, no kernel
    instance_options.skinny_fusion = fusions[i].gemm_params;
    instance_options.single_row_fusion = fold_norms ? fusions[i].single_row_params : nlohmann::json();
    instance_options.norm_of_sum = options.tuning.residual_epilogue ? fusions[i].norm_of_sum_params : nlohmann::json();
    auto instances = cuda_codegen::stepInstances(step, instance_options);
    if (!instances) return makeError("{} ({}): {}", step.path, stepKindName(step.kind), instances.error().message);
    for (const cuda_codegen::StepInstance& inst : *instances) {
      if (inst.role == Role::kStep) step_instance[i] = inst.name;
      else extra_instances[i][inst.role] = inst.name;
      if (source_index.count(inst.name)) continue;
      auto generated = cuda_codegen::instanceSource(inst.kind, inst.params, inst.name);
      if (!generated)
        return makeError("{} ({}): instance {}: {}", step.path, inst.kind, inst.name, generated.error().message);
      rows_per_block[inst.name] = parseRowsPerBlock(generated->source);
      block_threads[inst.name] = unsigned(generated->launch.block_threads);
      instance_kind[inst.name] = inst.kind;
      dynamic_smem[inst.name] = unsigned(cuda_codegen::configConstant(generated->source, "kSmemBytes", 0));
      source_index[inst.name] = sources.size();
      sources.push_back({inst.name, generated->source});
    }
  }
  const cuda_codegen::StepInstance greedy =
      cuda_codegen::greedyInstance(logits.width, logits.elem == 4 ? "f32" : "bf16");
  {
    auto generated = cuda_codegen::instanceSource(greedy.kind, greedy.params, greedy.name);
    if (!generated) return makeError("{}: instance {}: {}", output_step.path, greedy.name, generated.error().message);
    block_threads[greedy.name] = unsigned(generated->launch.block_threads);
    source_index[greedy.name] = sources.size();
    sources.push_back({greedy.name, generated->source});
  }
  KernelCacheOptions cache;
  cache.compile.arch = arch;
  cache.progress = options.progress;
  auto compiled = compileKernels(sources, cache);
  if (!compiled) return makeError("JIT of {}'s kernels for {} failed: {}", mpath, arch, compiled.error().message);
  std::vector<CUfunction> functions(sources.size());
  for (size_t i = 0; i < sources.size(); ++i) {
    const CompiledKernel& k = compiled->kernels[i];
    CUmodule module = nullptr;
    Status s = d->check(d->cuModuleLoadData(&module, k.cubin.data()), "cuModuleLoadData");
    if (!s.ok()) return makeError("instance {}: {}\n{}", k.name, s.error().message, k.log);
    st.modules.push_back(module);
    KILN_RETURN_IF_ERROR(d->check(d->cuModuleGetFunction(&functions[i], module, k.name.c_str()),
                                  "cuModuleGetFunction"));
  }
  if (options.verbose)
    fmt::print(stderr, "cuda: {} kernel instances ({} compiled, {} from the cache), {:.1f} MiB of "
               "weights, {:.1f} MiB on the device in all\n",
               sources.size(), compiled->compiled, compiled->cached,
               double(weight_total) / (1 << 20), double(ex->device_bytes_) / (1 << 20));

  // 5. Bind every step.
  int64_t max_heads_dim = 0, max_heads = 0, max_kv_heads = 0;  // largest of the attention steps
  for (size_t i = 0; i < entry->steps.size(); ++i) {
    const Step& step = entry->steps[i];
    BoundStep s;
    s.kind = step.kind;
    s.path = step.path;
    // Steps without an instance: split (a copy) and an f32 plan's gemm (cuBLASLt).
    if (!step_instance[i].empty()) {
      const std::string& inst = step_instance[i];
      s.instance = inst;
      s.fn = functions[source_index[inst]];
      s.block = block_threads[inst];
      // The attention kernels with dynamic shared memory above the 48 KiB
      // default must say so before their first launch.
      auto bindExtra = [&](const std::string& name, CUfunction& fn, unsigned& block, unsigned& smem) -> Status {
        fn = functions[source_index[name]];
        block = block_threads[name];
        smem = dynamic_smem[name];
        if (smem == 0) return {};
        return d->check(d->cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, int(smem)),
                        "cuFuncSetAttribute (dynamic shared memory)");
      };
      auto gemvKernel = [&](const std::string& name, GemvKernel& kernel) -> Status {
        kernel = GemvKernel{functions[source_index[name]], name, block_threads[name], rows_per_block[name]};
        kernel.tiles = cuda_codegen::configConstant(sources[source_index[name]].source, "kTiles", 0);
        if (kernel.tiles == 0) return {};
        unsigned block = 0;
        return bindExtra(name, kernel.fn, block, kernel.smem);
      };
      if (step.kind == StepKind::kGemm) KILN_RETURN_IF_ERROR(gemvKernel(inst, s.gemv));
      if (auto it = extra_instances.find(i); it != extra_instances.end() && step.kind == StepKind::kGemm) {
        for (auto [role, name] : it->second) {
          if (role == Role::kSingleRow) KILN_RETURN_IF_ERROR(gemvKernel(name, s.gemv_single));  // an unfused gemm's
          if (role == Role::kFused) KILN_RETURN_IF_ERROR(gemvKernel(name, s.fused));
          if (role == Role::kFusedSingleRow) KILN_RETURN_IF_ERROR(gemvKernel(name, s.fused_single));
          unsigned block = 0;
          if (role == Role::kFusedPrefill) KILN_RETURN_IF_ERROR(bindExtra(name, s.swiglu_fn, block, s.swiglu_smem));
        }
      } else if (it != extra_instances.end() && step.kind == StepKind::kResidualRmsNorm) {
        const std::string& name = it->second.at(Role::kNormOfSum);
        s.norm_of_sum_fn = functions[source_index[name]];
        s.norm_of_sum_block = block_threads[name];
      } else if (it != extra_instances.end()) {
        std::map<Role, std::string>& by_role = it->second;
        unsigned combine_smem = 0;
        KILN_RETURN_IF_ERROR(bindExtra(by_role[Role::kDecode], s.split_fn, s.split_block, s.split_smem));
        s.split_merges_itself = instance_kind[by_role[Role::kDecode]] == "decode_attention";
        KILN_RETURN_IF_ERROR(bindExtra(by_role[Role::kCombine], s.combine_fn, s.combine_block, combine_smem));
        if (by_role.count(Role::kPrefill)) {
          const std::string& flash = by_role[Role::kPrefill];
          KILN_RETURN_IF_ERROR(bindExtra(flash, s.flash_fn, s.flash_block, s.flash_smem));
          s.flash_block_m = unsigned(cuda_codegen::configConstant(sources[source_index[flash]].source, "kBlockM", 0));
          s.flash_kind = instance_kind[flash];
          if (s.flash_block_m == 0) return makeError("instance {}: no kBlockM in its Config", flash);
        }
      }
    }
    const size_t na = step.args.size();
    s.args.resize(na);
    s.weights.assign(na, 0);
    s.inputs.assign(na, -1);
    s.pools.assign(na, 0);
    for (size_t a = 0; a < na; ++a) {
      const StepArg& arg = step.args[a];
      switch (arg.kind) {
        case StepArg::Kind::kValue: {
          KILN_ASSIGN(v, value(step, arg.id, fmt::format("args[{}]", a)));
          s.args[a] = v;
          break;
        }
        case StepArg::Kind::kWeight: {
          Form form = gemm_form;
          if (step.kind == StepKind::kEmbedding) form = *formOf(step.as<EmbeddingParams>().table_type);
          else if (step.kind != StepKind::kGemm)
            form = *formOf(normWeightType(step));
          s.weights[a] = weightPtr(arg.id, form);
          break;
        }
        case StepArg::Kind::kInput: {
          auto id = parseInput(arg.input);
          if (!id)
            return makeError("{}: args[{}]: input '{}' is not one the CUDA executor provides",
                             step.path, a, arg.input);
          s.inputs[a] = *id;
          break;
        }
        case StepArg::Kind::kPool: {
          if (arg.layer < 0 || arg.layer >= kv.layers)
            return makeError("{}: args[{}]: pool layer {} is outside the pool's {} layers",
                             step.path, a, arg.layer, kv.layers);
          s.pools[a] = pools + CUdeviceptr(pool_bytes * (2 * arg.layer + (arg.role == PoolRole::kKey ? 0 : 1)));
          break;
        }
      }
    }
    for (size_t r = 0; r < step.results.size(); ++r) {
      KILN_ASSIGN(v, value(step, step.results[r], fmt::format("results[{}]", r)));
      s.results.push_back(v);
    }
    if (s.results.empty()) return makeError("{}: no results", step.path);
    KILN_RETURN_IF_ERROR(checkValueTypes(
        step, cuda_codegen::withActivationTypes(stepKindName(step.kind), toJson(step.params), manifest.activation_type),
        f32_plan ? 4 : 2, s.args, s.results));
    auto needValue = [&](size_t a) -> Status {
      if (a >= na || !s.args[a].valid)
        return makeError("{} ({}): args[{}] must be a value", step.path, stepKindName(step.kind), a);
      return {};
    };
    switch (step.kind) {
      case StepKind::kEmbedding: {
        const BoundWeight* table = weights.find(step.args[1].id);
        s.vocab = table->shape.empty() ? 0 : table->shape[0];
        break;
      }
      case StepKind::kRmsNorm:
      case StepKind::kResidualRmsNorm: {
        KILN_RETURN_IF_ERROR(needValue(0));
        if (step.kind == StepKind::kResidualRmsNorm) {
          KILN_RETURN_IF_ERROR(needValue(1));
          const bool ws = step.as<ResidualRmsNormParams>().writes_sum;
          s.writes_sum = ws;
          if (s.results.size() != (ws ? 2u : 1u))
            return makeError("{}: writes_sum is {} but the step has {} results", step.path, ws,
                             s.results.size());
        }
        break;
      }
      case StepKind::kGemm: {
        KILN_RETURN_IF_ERROR(needValue(0));
        const int64_t n = step.as<GemmParams>().n, k = step.as<GemmParams>().k;
        s.width = n;
        s.k = k;
        if (s.args[0].width != k || s.results[0].width != n)
          return makeError("{}: x has rows of {}, y of {}; expected k {} and n {}", step.path,
                           s.args[0].width, s.results[0].width, k, n);
        const BoundWeight* w = weights.find(step.args[1].id);
        if (w->shape != std::vector<int64_t>{n, k})
          return makeError("{}: weight {} '{}' has shape {}, expected [{}, {}]", step.path, w->id,
                           w->name, formats::shapeToString(w->shape), n, k);
        break;
      }
      case StepKind::kRopeKvAppend: {
        const AttentionHeads& shape = step.as<RopeKvAppendParams>().attn;
        const bool merged = step.as<RopeKvAppendParams>().merged_qkv;
        if (shape.kv_type != mk.type)
          return makeError("{}: kv_type {} is not the pools' {}", step.path, shape.kv_type, mk.type);
        s.heads = int(shape.heads);
        s.kv_heads = int(shape.kv_heads);
        s.head_dim = int(shape.head_dim);
        s.merged = merged;
        if (merged != (na == 5))
          return makeError("{}: merged_qkv is {} but the step has {} args", step.path, merged, na);
        KILN_RETURN_IF_ERROR(needValue(0));
        break;
      }
      case StepKind::kPagedAttention: {
        const AttentionHeads& shape = step.as<PagedAttentionParams>().attn;
        if (step.as<PagedAttentionParams>().tree_mask)
          return makeError("{}: tree masks are not supported by the CUDA executor yet", step.path);
        if (shape.kv_type != mk.type)
          return makeError("{}: kv_type {} is not the pools' {}", step.path, shape.kv_type, mk.type);
        s.heads = int(shape.heads);
        s.kv_heads = int(shape.kv_heads);
        s.head_dim = int(shape.head_dim);
        max_heads_dim = std::max<int64_t>(max_heads_dim, shape.heads * shape.head_dim);
        max_heads = std::max<int64_t>(max_heads, shape.heads);
        max_kv_heads = std::max<int64_t>(max_kv_heads, shape.kv_heads);
        KILN_RETURN_IF_ERROR(needValue(0));
        break;
      }
      case StepKind::kSiluMul: {
        const int64_t ffn = step.as<SiluMulParams>().ffn;
        const bool merged = step.as<SiluMulParams>().merged_gate_up;
        s.width = ffn;
        s.merged = merged;
        KILN_RETURN_IF_ERROR(needValue(0));
        break;
      }
      case StepKind::kAdd:
      case StepKind::kMul:
      case StepKind::kSilu: {
        const int64_t width = step.as<ElementwiseParams>().width;
        s.width = width;
        KILN_RETURN_IF_ERROR(needValue(0));
        break;
      }
      case StepKind::kSplit: {
        const std::vector<int64_t>& sizes = step.as<SplitParams>().sizes;
        KILN_RETURN_IF_ERROR(needValue(0));
        if (sizes.size() != s.results.size())
          return makeError("{}: {} sizes for {} results", step.path, sizes.size(), s.results.size());
        int64_t total = 0;
        for (size_t r = 0; r < sizes.size(); ++r) {
          if (s.results[r].width != sizes[r] || s.results[r].elem != s.args[0].elem)
            return makeError("{}: results[{}] has rows of {}, expected {}", step.path, r,
                             s.results[r].width, sizes[r]);
          total += sizes[r];
        }
        if (total != s.args[0].width)
          return makeError("{}: sizes add up to {}, x has rows of {} (the CUDA executor splits "
                           "the last axis only)",
                           step.path, total, s.args[0].width);
        s.sizes = sizes;
        break;
      }
      case StepKind::kGatherLastTokens: {
        const int64_t hidden = step.as<GatherLastTokensParams>().hidden;
        s.width = hidden;
        KILN_RETURN_IF_ERROR(needValue(0));
        break;
      }
    }
    st.steps.push_back(std::move(s));
  }
  // 6. The fused skinny gemms (and gemm_swiglu) write their silu_mul's
  //    result, or their rope_kv_append's q (in storage of its own) and pools.
  for (size_t i = 0; i < st.steps.size(); ++i) {
    st.steps[i].absorbed = fusions[i].absorbed;
    if (fold_norms && fusions[i].absorbed_single_row) {
      const BoundStep& gemm = st.steps[i + 1];
      const GemvKernel& single = skinnyKernel(gemm, 1);
      if (single.tiles == 0)  // skinny_fusion and instance_source disagree on what streams
        return makeError("{}: its residual_rms_norm is folded into the next gemm, whose single-row instance {} "
                         "is not the streamed kernel (gemv_stream.cuh) that computes it",
                         gemm.path, single.instance);
      st.steps[i].absorbed_single_row = true;
      st.steps[i + 1].folded_norm = int(i);
    }
    if (fusions[i].writes_norm_sum && st.steps[i + 1].norm_of_sum_fn) {  // cuBLASLt's epilogue adds the residual
      st.steps[i].sum_norm = int(i + 1);
      st.steps[i + 1].sum_from_gemm = true;
    }
    if (!st.steps[i].fused.fn) continue;
    st.steps[i].fused_y = st.steps[i + 1].results[0].ptr;
    if (BoundStep& g = st.steps[i]; g.swiglu_fn) {  // the merged [2F, K] bf16 weight, encoded once
      KILN_ASSIGN(w_map, gemmSwiGluWMap(*d, g.weights[1], g.width / 2, g.k));
      g.swiglu_w_map = w_map;
    }
    if (st.steps[i + 1].kind == StepKind::kRopeKvAppend) st.steps[i].fused_rope = int(i + 1);
  }
  // 7. Greedy batches' argmax and its scratch.
  st.argmax_fn = functions[source_index[greedy.name]];
  st.argmax_block = block_threads[greedy.name];
  st.argmax_chunks = kk::argmaxChunks(logits.width);
  {
    const int64_t partials = max_tokens * st.argmax_chunks;
    KILN_ASSIGN(values, st.alloc(partials * 4, "the greedy argmax partials"));
    KILN_ASSIGN(ids, st.alloc(partials * 4, "the greedy argmax partials"));
    KILN_ASSIGN(arrivals, st.alloc(max_tokens * 4, "the greedy argmax counters"));
    KILN_ASSIGN(tokens, st.alloc(max_tokens * 4, "the greedy tokens"));
    KILN_RETURN_IF_ERROR(d->check(d->cuMemsetD8_v2(arrivals, 0, size_t(max_tokens * 4)), "cuMemsetD8"));
    KILN_ASSIGN(tokens_host, st.allocHost(max_tokens * 4, "the greedy tokens"));
    st.argmax_values = values;
    st.argmax_ids = ids;
    st.argmax_arrivals = arrivals;
    st.tokens = tokens;
    st.tokens_host = static_cast<int32_t*>(tokens_host);
    ex->device_bytes_ += 2 * partials * 4 + 2 * max_tokens * 4;
  }
  if (options.verbose)
    fmt::print(stderr, "cuda: programmatic launch {}, gemm autotune {}\n", st.programmatic_launch ? "on" : "off",
               st.gemm_autotune ? "on" : "off");
  if (st.profile) {
    st.step_events.resize(st.steps.size() + 1);
    for (CUevent& e : st.step_events)
      KILN_RETURN_IF_ERROR(d->check(d->cuEventCreate(&e, CU_EVENT_DEFAULT), "cuEventCreate (step profile)"));
  }
  if (max_heads_dim > 0) {
    const int64_t rows = std::min(max_tokens * kMaxSplits, kSplitRows);
    KILN_ASSIGN(partial_out, st.alloc(rows * max_heads_dim * 4, "the split-KV attention partials"));
    KILN_ASSIGN(partial_lse, st.alloc(rows * max_heads * 4, "the split-KV attention lse"));
    st.partial_out = partial_out;
    st.split_rows = rows;
    KILN_ASSIGN(arrivals, st.alloc(max_tokens * max_kv_heads * 4, "the split-KV arrival counters"));
    KILN_RETURN_IF_ERROR(d->check(d->cuMemsetD8_v2(arrivals, 0, size_t(max_tokens * max_kv_heads * 4)), "cuMemsetD8"));
    st.split_arrivals = arrivals;
    st.partial_lse = partial_lse;
    ex->device_bytes_ += rows * (max_heads_dim + max_heads) * 4 + max_tokens * max_kv_heads * 4;
  }
  ex->vocab_ = logits.width;
  ex->logits_per_sequence_ = logits.per_sequence;
  KILN_ASSIGN(logits_host, st.allocHost(max_tokens * logits.width * logits.elem, "the logits"));
  st.logits_host = logits_host;
  return ex;
}

Status CudaExecutor::checkBatch(const cpu::BatchInputs& in, size_t out_values) const {
  const KvPoolConfig& pool = pool_->config();
  KILN_RETURN_IF_ERROR(cpu::checkBatchInputs(
      in, {max_tokens_, vocab_, pool.num_blocks, pool.page_size, logits_per_sequence_}, out_values));
  if (int64_t(in.block_tables.size()) > state_->block_table_capacity)
    return makeError("forward: block_tables has {} entries; the CUDA executor's buffer holds {}",
                     in.block_tables.size(), state_->block_table_capacity);
  return {};
}

constexpr const char* kFlashPath = "flash_attention";
constexpr const char* kSplitPath = "paged_attention_split + attention_combine";
constexpr const char* kMergingSplitPath = "decode_attention (merging its splits)";
constexpr const char* kPagedPath = "paged_attention";

const char* CudaExecutor::State::attentionPath(const BoundStep& s, const LaunchShape& shape) const {
  if (s.flash_fn && shape.max_q_len >= kFlashMinQuery) return kFlashPath;
  if (shape.splits < 1 || !s.split_fn) return kPagedPath;
  return s.split_merges_itself ? kMergingSplitPath : kSplitPath;
}

void CudaExecutor::State::addStepTimes(const LaunchShape& shape) {
  const std::string phase = shape.n == shape.b ? fmt::format("decode, batch {}", shape.b)
                                               : fmt::format("prefill, {} tokens", shape.n);
  if (!step_profile.beginForward(phase)) return;  // a shape's first pass is not counted
  for (size_t i = 0; i < steps.size(); ++i) {
    const BoundStep& s = steps[i];
    float ms = 0;
    d->cuEventElapsedTime_v2(&ms, step_events[i], step_events[i + 1]);
    const bool skinny = !s.args.empty() && s.args[0].valid && rowsOf(s.args[0], shape) <= kGemvMaxRows;
    const int64_t rows = s.args.empty() ? 0 : rowsOf(s.args[0], shape);
    if (doneByGemmBefore(i, rows)) continue;  // done by the gemm before it: nothing ran
    if (s.absorbed_single_row && rowsOf(s.args[0], shape) == 1) continue;  // ... or by the gemm after it
    std::string name = s.kind == StepKind::kSplit ? "split (copies)" : s.instance;
    if (s.kind == StepKind::kGemm && !s.fn) {
      name = fmt::format("cuBLASLt f32 gemm n {} k {}", s.width, s.k);
    } else if (s.kind == StepKind::kGemm && skinny) {
      name = skinnyKernel(s, rowsOf(s.args[0], shape)).instance;
    }
    if (s.kind == StepKind::kGemm && fusedSwiGlu(s, rows)) name = "gemm_swiglu_wgmma (gate/up + silu_mul)";
    if (s.kind == StepKind::kGemm && addsResidual(s, rows)) name += " (+ residual, f32 out)";
    if (sumFromGemmBefore(i, rows)) name += " (the sum from the gemm: rms_norm)";
    if (s.kind == StepKind::kPagedAttention) {
      const char* path = attentionPath(s, shape);
      name = fmt::format("{} (heads {}/{}, head_dim {})", path == kFlashPath ? s.flash_kind.c_str() : path, s.heads,
                         s.kv_heads, s.head_dim);
    }
    step_profile.addStep(phase, name, ms);
  }
}

Status CudaExecutor::State::attention(const BoundStep& s, const LaunchShape& shape) {
  kk::PagedAttentionParams p{};
  p.q = reinterpret_cast<const void*>(s.args[0].ptr);
  p.k_pool = reinterpret_cast<const void*>(s.pools[1]);
  p.v_pool = reinterpret_cast<const void*>(s.pools[2]);
  p.block_tables = input(s, 3);
  p.query_start = input(s, 4);
  p.kv_lens = input(s, 5);
  p.out = reinterpret_cast<void*>(s.results[0].ptr);
  p.num_tokens = int(shape.n);
  p.num_seqs = int(shape.b);
  p.max_blocks_per_seq = shape.max_blocks;
  p.num_splits = 1;
  const char* path = attentionPath(s, shape);
  if (path == kFlashPath) {
    const unsigned tiles = unsigned((shape.max_q_len + s.flash_block_m - 1) / s.flash_block_m);
    return launch(s.flash_fn, s.flash_block, unsigned(s.heads), tiles, unsigned(shape.b), &p, s.flash_smem);
  }
  if (path == kPagedPath) return launch(s, unsigned(shape.n), unsigned(s.kv_heads), 1, &p);
  p.num_splits = shape.splits;
  p.partial_out = reinterpret_cast<float*>(partial_out);
  p.partial_lse = reinterpret_cast<float*>(partial_lse);
  if (path == kMergingSplitPath) p.split_arrivals = reinterpret_cast<unsigned*>(split_arrivals);
  KILN_RETURN_IF_ERROR(launch(s.split_fn, s.split_block, unsigned(shape.n), unsigned(s.kv_heads),
                              unsigned(shape.splits), &p, s.split_smem));
  if (path == kMergingSplitPath) return {};
  kk::AttentionCombineParams c{p.partial_out, p.partial_lse, p.out, int(shape.n), shape.splits};
  return launch(s.combine_fn, s.combine_block, unsigned(shape.n), unsigned(s.heads), 1, &c);
}

Status CudaExecutor::State::enqueueSteps(const LaunchShape& shape) {
  const int64_t n = shape.n, b = shape.b;
  auto ptr = [](CUdeviceptr p) { return reinterpret_cast<void*>(p); };
  for (size_t i = 0; i < steps.size(); ++i) {
    const BoundStep& s = steps[i];
    auto rows = [&](const DeviceValue& v) { return rowsOf(v, shape); };
    Status status;
    if (profile) KILN_RETURN_IF_ERROR(d->check(d->cuEventRecord(step_events[i], stream), "cuEventRecord"));
    switch (s.kind) {
      case StepKind::kEmbedding: {
        kk::EmbeddingParams p{input(s, 0), ptr(s.weights[1]), ptr(s.results[0].ptr), int(n), int(s.vocab)};
        status = launch(s, unsigned(n), 1, 1, &p);
        break;
      }
      case StepKind::kRmsNorm: {
        const int64_t r = rows(s.args[0]);
        kk::RmsNormParams p{ptr(s.args[0].ptr), nullptr, ptr(s.weights[1]), nullptr,
                            ptr(s.results[0].ptr), int(r)};
        status = launch(s, unsigned(r), 1, 1, &p);
        break;
      }
      case StepKind::kResidualRmsNorm: {
        const int64_t r = rows(s.args[0]);
        if (s.absorbed_single_row && r == 1) break;  // the streamed gemm after it does it
        if (sumFromGemmBefore(i, r)) {  // the gemm before it wrote the sum
          kk::RmsNormParams p{ptr(s.results[0].ptr), nullptr, ptr(s.weights[2]), nullptr, ptr(s.results[1].ptr), int(r)};
          status = launch(s.norm_of_sum_fn, s.norm_of_sum_block, unsigned(r), 1, 1, &p);
          break;
        }
        // Measured and not kept (H200, 2026-11-30): the f32 sum this writes
        // marked persisting in L2 (an access policy window on the launch,
        // 16 or 30 MiB set aside) for the next norm to read: a 2048-token
        // prefill took 47.45 / 47.29 and 47.92 / 48.09 ms on the GPU
        // against 47.50 / 47.45 without.
        kk::RmsNormParams p{ptr(s.args[0].ptr), ptr(s.args[1].ptr), ptr(s.weights[2]),
                            s.writes_sum ? ptr(s.results[0].ptr) : nullptr,
                            ptr(s.results.back().ptr), int(r)};
        status = launch(s, unsigned(r), 1, 1, &p);
        break;
      }
      case StepKind::kGemm: status = gemm(s, rows(s.args[0])); break;
      case StepKind::kRopeKvAppend: {
        if (doneByGemmBefore(i, n)) break;
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
        p.q_out = ptr(s.results[0].ptr);
        p.num_tokens = int(n);
        p.num_slots = num_slots;
        status = launch(s, unsigned(n), unsigned(kk::ropeKvAppendHeadGroups(s.heads, s.kv_heads)), 1, &p);
        break;
      }
      case StepKind::kPagedAttention: status = attention(s, shape); break;
      case StepKind::kSiluMul:
      case StepKind::kAdd:
      case StepKind::kMul:
      case StepKind::kSilu: {
        const int64_t r = rows(s.args[0]);
        if (doneByGemmBefore(i, r)) break;
        const void* second = s.args.size() > 1 && s.args[1].valid ? ptr(s.args[1].ptr) : nullptr;
        kk::ElementwiseParams p{ptr(s.args[0].ptr), second, ptr(s.results[0].ptr), int(r)};
        const int64_t blocks = std::min<int64_t>((r * s.width / 8 + 255) / 256, 65535);
        status = launch(s, unsigned(std::max<int64_t>(blocks, 1)), 1, 1, &p);
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
          status = d->check(x.memcpy2DAsync(&c, stream), "cuMemcpy2DAsync (split)");
          column += s.sizes[i];
        }
        break;
      }
      case StepKind::kGatherLastTokens: {
        kk::GatherLastTokensParams p{ptr(s.args[0].ptr), input(s, 1), ptr(s.results[0].ptr), int(b)};
        status = launch(s, unsigned(b), 1, 1, &p);
        break;
      }
    }
    if (!status.ok())
      return makeError("{} ({}): {}", s.path, stepKindName(s.kind), status.error().message);
  }
  if (profile) KILN_RETURN_IF_ERROR(d->check(d->cuEventRecord(step_events.back(), stream), "cuEventRecord"));
  if (shape.greedy) return argmaxLogits(shape);
  return {};
}

Status CudaExecutor::State::argmaxLogits(const LaunchShape& shape) {
  const int64_t rows = rowsOf(logits, shape);
  kk::ArgmaxParams p{reinterpret_cast<const void*>(logits.ptr), reinterpret_cast<float*>(argmax_values),
                     reinterpret_cast<int*>(argmax_ids), reinterpret_cast<unsigned*>(argmax_arrivals),
                     reinterpret_cast<int*>(tokens), int(rows)};
  Status status = launch(argmax_fn, argmax_block, unsigned(rows), unsigned(argmax_chunks), 1, &p);
  if (!status.ok()) return makeError("greedy argmax over the logits: {}", status.error().message);
  return {};
}

Result<CUgraphExec> CudaExecutor::State::decodeGraph(const LaunchShape& shape) {
  if (auto it = graphs.find(shape); it != graphs.end()) return it->second;
  if (graphs.size() >= kMaxGraphs) {  // a long-running server: start over rather than grow
    for (auto& [key, exec] : graphs) x.graphExecDestroy(exec);
    graphs.clear();
  }
  KILN_RETURN_IF_ERROR(prepareGemms(shape));
  KILN_RETURN_IF_ERROR(d->check(x.streamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
                                "cuStreamBeginCapture"));
  capturing = true;
  Status enqueued = enqueueSteps(shape);
  capturing = false;
  CUgraph graph = nullptr;
  CUresult ended = x.streamEndCapture(stream, &graph);
  if (!enqueued.ok()) {
    if (graph) x.graphDestroy(graph);
    return enqueued.error();
  }
  KILN_RETURN_IF_ERROR(d->check(ended, "cuStreamEndCapture"));
  CUgraphExec exec = nullptr;
  CUresult made = x.graphInstantiate(&exec, graph, 0);
  x.graphDestroy(graph);
  KILN_RETURN_IF_ERROR(d->check(made, "cuGraphInstantiate"));
  ++graph_captures;
  graphs.emplace(shape, exec);
  return exec;
}

Result<LaunchShape> CudaExecutor::launchForward(const cpu::BatchInputs& in, bool greedy) {
  State& st = *state_;
  const CudaDriver* d = st.d;
  KILN_RETURN_IF_ERROR(d->check(d->cuCtxSetCurrent(st.context), "cuCtxSetCurrent"));
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
    shape.splits = decodeSplits(b, int(pool_->config().kv_heads), max_kv, st.sms);
    while (shape.splits > 1 && b * shape.splits > st.split_rows) shape.splits /= 2;
    if (b * shape.splits > st.split_rows) shape.splits = 0;
  }
  bool graph = st.use_graphs && !st.profile && decode && b <= kMaxGraphBatch;
  if (graph) {
    shape.max_blocks = graphStride(in.max_blocks, num_blocks);
    if (b * shape.max_blocks > st.block_table_capacity) {
      graph = false;
      shape.max_blocks = in.max_blocks;
    }
  }

  // Inputs: pack into pinned staging at the fixed offsets, one copy. Block
  // tables go in rows of shape.max_blocks (a graph's fixed stride).
  auto put = [&](InputId id, std::span<const int32_t> v) {
    std::memcpy(st.staging + st.input_offset[id], v.data(), v.size() * 4);
  };
  put(kTokens, in.tokens);
  put(kPositions, in.positions);
  put(kSlotMapping, in.slot_mapping);
  put(kQueryStart, in.query_start);
  put(kKvLens, in.kv_lens);
  int32_t* tables = st.staging + st.input_offset[kBlockTables];
  if (shape.max_blocks == in.max_blocks) {
    put(kBlockTables, in.block_tables);
  } else {
    for (int64_t r = 0; r < b; ++r) {
      std::memcpy(tables + r * shape.max_blocks, in.block_tables.data() + r * in.max_blocks,
                  size_t(in.max_blocks) * 4);
      std::fill(tables + r * shape.max_blocks + in.max_blocks, tables + (r + 1) * shape.max_blocks, 0);
    }
  }
  const size_t input_bytes = size_t(st.input_offset[kBlockTables] + b * shape.max_blocks) * 4;
  if (st.forward_begin)
    KILN_RETURN_IF_ERROR(d->check(d->cuEventRecord(st.forward_begin, st.stream), "cuEventRecord (forward begin)"));
  KILN_RETURN_IF_ERROR(d->check(st.x.memcpyHtoDAsync(st.inputs, st.staging, input_bytes, st.stream),
                                "cuMemcpyHtoDAsync (batch inputs)"));
  const int64_t captures_before = st.graph_captures;
  const size_t plans_before = st.gemm_plans.size();
  if (graph) {
    KILN_ASSIGN(exec, st.decodeGraph(shape));
    KILN_RETURN_IF_ERROR(d->check(st.x.graphLaunch(exec, st.stream), "cuGraphLaunch"));
  } else {
    KILN_RETURN_IF_ERROR(st.enqueueSteps(shape));
  }
  st.forward_replayed = graph && st.graph_captures == captures_before;
  st.forward_timed_eager = !graph && st.gemm_plans.size() == plans_before;
  st.forward_tokens = n;
  return shape;
}

Status CudaExecutor::forward(const cpu::BatchInputs& in, std::span<float> logits_out) {
  KILN_RETURN_IF_ERROR(checkBatch(in, logits_out.size()));
  KILN_ASSIGN(shape, launchForward(in, /*greedy=*/false));
  State& st = *state_;
  const CudaDriver* d = st.d;
  const int64_t out_rows = rowsOf(st.logits, shape);
  const size_t bytes = size_t(out_rows * vocab_ * st.logits.elem);
  KILN_RETURN_IF_ERROR(d->check(st.x.memcpyDtoHAsync(st.logits_host, st.logits.ptr, bytes, st.stream),
                                "cuMemcpyDtoHAsync (logits)"));
  KILN_RETURN_IF_ERROR(st.recordForwardEnd());
  KILN_RETURN_IF_ERROR(d->check(st.x.streamSynchronize(st.stream), "forward (kernel execution)"));
  st.addForwardTime();
  if (st.profile) st.addStepTimes(shape);
  if (st.logits.elem == 4) {
    std::memcpy(logits_out.data(), st.logits_host, bytes);
  } else {
    const uint16_t* h = static_cast<const uint16_t*>(st.logits_host);
    cpu::parallelFor(out_rows * vocab_, 1 << 16, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) logits_out[size_t(i)] = cpu::bf16ToF32(h[i]);
    });
  }
  return {};
}

Status CudaExecutor::forwardGreedy(const cpu::BatchInputs& in, std::span<int32_t> tokens_out) {
  const int64_t out_rows = int64_t(logits_per_sequence_ ? in.kv_lens.size() : in.tokens.size());
  if (int64_t(tokens_out.size()) < out_rows)
    return makeError("forward: tokens_out holds {} ids; expected one per logits row ({})", tokens_out.size(),
                     out_rows);
  // The logits stay on the device: checked as if a full buffer were given.
  KILN_RETURN_IF_ERROR(checkBatch(in, size_t(out_rows * vocab_)));
  KILN_ASSIGN(shape, launchForward(in, /*greedy=*/true));
  State& st = *state_;
  const CudaDriver* d = st.d;
  KILN_RETURN_IF_ERROR(d->check(st.x.memcpyDtoHAsync(st.tokens_host, st.tokens, size_t(out_rows) * 4, st.stream),
                                "cuMemcpyDtoHAsync (tokens)"));
  KILN_RETURN_IF_ERROR(st.recordForwardEnd());
  KILN_RETURN_IF_ERROR(d->check(st.x.streamSynchronize(st.stream), "forward (kernel execution)"));
  st.addForwardTime();
  if (st.profile) st.addStepTimes(shape);
  std::memcpy(tokens_out.data(), st.tokens_host, size_t(out_rows) * 4);
  return {};
}

}  // namespace kiln::cuda
