#include "runtime/cuda/executor/gemm_planner.h"

#include <fmt/format.h>

#include <algorithm>

#include "runtime/cuda/executor/gemm_dispatch.h"
#include "runtime/cuda/executor/kiln_assign.h"

namespace kiln::cuda {

namespace {

constexpr int kGemmCandidates = 16;  // autotuned shapes time up to this many
// The row count a batch-invariant shape's algorithm is chosen at: a prefill
// chunk's, where the GEMMs are compute-bound and the tile choice matters.
constexpr int64_t kInvariantRows = 2048;

}  // namespace

GemmPlanner::~GemmPlanner() {
  for (auto& [key, plan] : plans_) {
    lt_->cublasLtMatrixLayoutDestroy(plan.a);
    lt_->cublasLtMatrixLayoutDestroy(plan.b);
    lt_->cublasLtMatrixLayoutDestroy(plan.c);
    lt_->cublasLtMatmulDescDestroy(plan.desc);
  }
  if (handle_) lt_->cublasLtDestroy(handle_);
}

Status GemmPlanner::open(bool f32, bool verbose) {
  type_ = f32 ? CUDA_R_32F : CUDA_R_16BF;
  verbose_ = verbose;
  auto lt = loadCublasLt();
  if (!lt) return makeError("no CUDA backend: {}", lt.error().message);
  lt_ = *lt;
  if (lt_->cublasLtCreate(&handle_) != CUBLAS_STATUS_SUCCESS)
    return makeError("cublasLtCreate failed on {}", gpu_.name);
  return {};
}

Status GemmPlanner::allocateWorkspace() {
  KILN_ASSIGN(workspace, memory_.alloc(int64_t(kCublasWorkspace), "the cuBLASLt workspace"));
  workspace_ = workspace;
  return {};
}

Result<GemmPlan*> GemmPlanner::plan(const std::vector<BoundStep>& steps, const BoundStep& s, int64_t rows) {
  const int64_t n = s.width, k = s.k;
  const bool bias = hasBias(s);
  const bool adds_residual = addsResidual(s, rows);
  GemmPlanKey key{n, k, rows, bias, adds_residual};
  if (auto it = plans_.find(key); it != plans_.end()) return &it->second;
  // Row-major y[rows, n] = x[rows, k] · W[n, k]ᵀ is column-major
  // y'[n, rows] = W'ᵀ · x' with W' = [k, n] (ld k) and x' = [k, rows] (ld k).
  GemmPlan plan;
  plan.adds_residual = adds_residual;
  auto check = [&](cublasStatus_t st, const char* what) -> Status {
    if (st == CUBLAS_STATUS_SUCCESS) return {};
    return makeError("cuBLASLt {} failed (status {}) for a GEMM n {} k {} rows {}", what, int(st), n, k, rows);
  };
  KILN_RETURN_IF_ERROR(check(lt_->cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
                             "cublasLtMatmulDescCreate"));
  cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  lt_->cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
  lt_->cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
  if (bias) {
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    lt_->cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
  }
  KILN_RETURN_IF_ERROR(
      check(lt_->cublasLtMatrixLayoutCreate(&plan.a, type_, uint64_t(k), uint64_t(n), k), "layout W"));
  KILN_RETURN_IF_ERROR(
      check(lt_->cublasLtMatrixLayoutCreate(&plan.b, type_, uint64_t(k), uint64_t(rows), k), "layout x"));
  // bf16 x and W with f32 C and D: one of cuBLASLt's supported type sets.
  KILN_RETURN_IF_ERROR(check(lt_->cublasLtMatrixLayoutCreate(&plan.c, adds_residual ? CUDA_R_32F : type_,
                                                             uint64_t(n), uint64_t(rows), n),
                             "layout y"));
  if (tuning_.batch_invariant) {
    KILN_ASSIGN(algo, invariantAlgo(plan, key));
    plan.algo = algo;
    return &plans_.emplace(key, plan).first->second;
  }
  cublasLtMatmulPreference_t pref = nullptr;
  KILN_RETURN_IF_ERROR(check(lt_->cublasLtMatmulPreferenceCreate(&pref), "preference"));
  size_t ws = kCublasWorkspace;
  lt_->cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  cublasLtMatmulHeuristicResult_t results[kGemmCandidates] = {};
  const bool autotune = tuning_.gemm_autotune && rows <= kAutotuneMaxRows && !capturing;
  int found = 0;
  cublasStatus_t st = lt_->cublasLtMatmulAlgoGetHeuristic(handle_, plan.desc, plan.a, plan.b, plan.c, plan.c, pref,
                                                          autotune ? kGemmCandidates : 1, results, &found);
  lt_->cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || found == 0)
    return makeError("cuBLASLt found no algorithm for a {} GEMM n {} k {} rows {} (status {})",
                     type_ == CUDA_R_32F ? "f32" : "bf16", n, k, rows, int(st));
  plan.algo = results[0].algo;
  if (autotune && found > 1) {
    KILN_ASSIGN(fastest, fastestAlgo(steps, s, plan, rows, results, found));
    plan.algo = fastest;
  }
  return &plans_.emplace(key, plan).first->second;
}

Result<cublasLtMatmulAlgo_t> GemmPlanner::invariantAlgo(const GemmPlan& plan, const GemmPlanKey& key) {
  GemmPlanKey shape = key;
  shape.rows = kInvariantRows;
  auto it = invariant_algos_.find(shape);
  if (it == invariant_algos_.end()) {
    // Layouts of x and y at kInvariantRows, for the heuristic.
    cublasLtMatrixLayout_t x = nullptr, y = nullptr;
    cublasLtMatmulPreference_t pref = nullptr;
    const cudaDataType_t y_type = key.adds_residual ? CUDA_R_32F : type_;
    cublasStatus_t st = lt_->cublasLtMatrixLayoutCreate(&x, type_, uint64_t(key.k), uint64_t(shape.rows), key.k);
    if (st == CUBLAS_STATUS_SUCCESS)
      st = lt_->cublasLtMatrixLayoutCreate(&y, y_type, uint64_t(key.n), uint64_t(shape.rows), key.n);
    if (st == CUBLAS_STATUS_SUCCESS) st = lt_->cublasLtMatmulPreferenceCreate(&pref);
    cublasLtMatmulHeuristicResult_t results[kGemmCandidates] = {};
    int found = 0;
    if (st == CUBLAS_STATUS_SUCCESS) {
      size_t ws = kCublasWorkspace;
      lt_->cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
      st = lt_->cublasLtMatmulAlgoGetHeuristic(handle_, plan.desc, plan.a, x, y, y, pref, kGemmCandidates, results,
                                               &found);
    }
    if (pref) lt_->cublasLtMatmulPreferenceDestroy(pref);
    if (x) lt_->cublasLtMatrixLayoutDestroy(x);
    if (y) lt_->cublasLtMatrixLayoutDestroy(y);
    if (st != CUBLAS_STATUS_SUCCESS)
      return makeError("cuBLASLt heuristic failed (status {}) for a batch-invariant GEMM n {} k {}", int(st), key.n,
                       key.k);
    const cublasLtMatmulAlgo_t* chosen = nullptr;
    for (int i = 0; i < found && !chosen; ++i) {
      int32_t splits = 1;
      uint32_t reduction = CUBLASLT_REDUCTION_SCHEME_NONE;
      size_t written = 0;
      lt_->cublasLtMatmulAlgoConfigGetAttribute(&results[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits,
                                                sizeof splits, &written);
      lt_->cublasLtMatmulAlgoConfigGetAttribute(&results[i].algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &reduction,
                                                sizeof reduction, &written);
      if (splits <= 1 && reduction == CUBLASLT_REDUCTION_SCHEME_NONE) chosen = &results[i].algo;
    }
    if (!chosen)
      return makeError("cuBLASLt offers no algorithm without split-K for a batch-invariant GEMM n {} k {} "
                       "({} candidates)",
                       key.n, key.k, found);
    it = invariant_algos_.emplace(shape, *chosen).first;
  }
  cublasLtMatmulHeuristicResult_t checked{};
  const cublasStatus_t st =
      lt_->cublasLtMatmulAlgoCheck(handle_, plan.desc, plan.a, plan.b, plan.c, plan.c, &it->second, &checked);
  if (st != CUBLAS_STATUS_SUCCESS || checked.workspaceSize > kCublasWorkspace)
    return makeError("the batch-invariant cuBLASLt algorithm of GEMM n {} k {} does not run at {} rows (status {})",
                     key.n, key.k, key.rows, int(st));
  return it->second;
}

Status GemmPlanner::run(const std::vector<BoundStep>& steps, const BoundStep& s, GemmPlan& plan,
                        const cublasLtMatmulAlgo_t& algo) {
  if (hasBias(s)) {
    void* ptr = reinterpret_cast<void*>(gemmBias(s));
    lt_->cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &ptr, sizeof ptr);
  }
  // y = x·Wᵀ, or with the norm after it: its sum = its x + x·Wᵀ.
  CUdeviceptr c = s.results[0].ptr, y = s.results[0].ptr;
  if (plan.adds_residual) {
    const BoundStep& norm = steps[size_t(s.sum_norm)];
    c = norm.args[0].ptr;
    y = norm.results[0].ptr;
  }
  const float alpha = 1.0f, beta = plan.adds_residual ? 1.0f : 0.0f;
  cublasStatus_t st = lt_->cublasLtMatmul(
      handle_, plan.desc, &alpha, reinterpret_cast<const void*>(s.dequantized ? s.dequantized : s.weights[1]), plan.a,
      reinterpret_cast<const void*>(s.args[0].ptr), plan.b, &beta, reinterpret_cast<const void*>(c), plan.c,
      reinterpret_cast<void*>(y), plan.c, &algo, reinterpret_cast<void*>(workspace_), kCublasWorkspace, gpu_.stream);
  if (st != CUBLAS_STATUS_SUCCESS)
    return makeError("cublasLtMatmul failed (status {}) for n {} k {}", int(st), s.width, s.k);
  return {};
}

Result<cublasLtMatmulAlgo_t> GemmPlanner::fastestAlgo(const std::vector<BoundStep>& steps, const BoundStep& s,
                                                      GemmPlan& plan, int64_t rows,
                                                      const cublasLtMatmulHeuristicResult_t* candidates, int count) {
  // On the step's own buffers: y is written again by the real launch after
  // this. Each timed run starts with the weights out of L2 (a write over a
  // buffer twice its size), as in a forward pass, where every weight is read
  // once: repeated back to back, a matrix that fits in L2 stays there and
  // the ranking favours algorithms that are slower from HBM.
  const CudaDriver* d = gpu_.d;
  if (!l2_flush_) {
    const int l2_bytes = gpu_.attribute(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
    l2_flush_bytes_ = 2 * std::max<int64_t>(l2_bytes, 64 << 20);
    KILN_ASSIGN(buffer, memory_.alloc(l2_flush_bytes_, "the L2 flush buffer of the GEMM autotuner"));
    l2_flush_ = buffer;
  }
  CUevent start = nullptr, stop = nullptr;
  KILN_RETURN_IF_ERROR(d->check(d->cuEventCreate(&start, CU_EVENT_DEFAULT), "cuEventCreate (gemm autotune)"));
  Status status = d->check(d->cuEventCreate(&stop, CU_EVENT_DEFAULT), "cuEventCreate (gemm autotune)");
  constexpr int kReps = 3;
  float best_ms = 0, first_ms = 0;
  int best = 0;
  for (int i = 0; i < count && status.ok(); ++i) {
    status = run(steps, s, plan, candidates[i].algo);  // warm-up (the first run also loads the kernel)
    float total = 0;
    for (int r = 0; r < kReps && status.ok(); ++r) {
      status = d->check(gpu_.x.memsetD32Async(l2_flush_, unsigned(r), size_t(l2_flush_bytes_ / 4), gpu_.stream),
                        "cuMemsetD32Async (L2 flush)");
      if (status.ok()) status = d->check(d->cuEventRecord(start, gpu_.stream), "cuEventRecord");
      if (status.ok()) status = run(steps, s, plan, candidates[i].algo);
      if (status.ok()) status = d->check(d->cuEventRecord(stop, gpu_.stream), "cuEventRecord");
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
  if (verbose_ || tuning_.profile_steps)
    fmt::print(stderr, "cuda: gemm n {} k {} rows {}: fastest of {} cuBLASLt algorithms {:.1f} us "
               "(heuristic's first {:.1f} us)\n", s.width, s.k, rows, count, 1e3 * best_ms / kReps,
               1e3 * first_ms / kReps);
  return candidates[best].algo;
}

Status GemmPlanner::prepare(const std::vector<BoundStep>& steps, const LaunchShape& shape) {
  for (const BoundStep& s : steps) {
    if (s.kind != StepKind::kGemm) continue;
    const int64_t rows = rowsOf(s.args[0], shape);
    if (!onCublas(s, rows)) continue;  // a kernel of kiln's
    if (auto p = plan(steps, s, rows); !p.ok()) return p.error();
  }
  return {};
}

}  // namespace kiln::cuda
