// The GEMMs cuBLASLt runs (gemm_dispatch.h says which): its handle and
// workspace, and one plan per shape (GemmPlanKey), made on first use:
// matmul descriptor, layouts and algorithm. Decode-sized shapes
// (kAutotuneMaxRows) time cuBLASLt's candidate algorithms on the step's own
// buffers and keep the fastest (CudaTuning::gemm_autotune); others keep its
// first heuristic choice. Row-major y[rows, n] = x[rows, k] · W[n, k]ᵀ runs
// as column-major y' = W'ᵀ · x'. bf16 plans take bf16 A, B and C with f32
// accumulation; f32 plans f32 throughout (CUBLAS_COMPUTE_32F: true f32
// products, no TF32).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

#include "runtime/cuda/cublaslt.h"
#include "runtime/cuda/cuda_tuning.h"
#include "runtime/cuda/executor/bound_step.h"
#include "runtime/cuda/executor/device_memory.h"
#include "runtime/cuda/executor/launch_shape.h"

namespace kiln::cuda {

constexpr size_t kCublasWorkspace = size_t(32) << 20;

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

class GemmPlanner {
 public:
  GemmPlanner(const DeviceContext& gpu, DeviceMemory& memory, const CudaTuning& tuning)
      : gpu_(gpu), memory_(memory), tuning_(tuning) {}
  ~GemmPlanner();  // the plans, then the handle
  GemmPlanner(const GemmPlanner&) = delete;
  GemmPlanner& operator=(const GemmPlanner&) = delete;

  // Loads cuBLASLt and creates its handle. `f32`: an f32 plan's GEMMs.
  // `verbose`: each autotuned shape's timing on stderr (as with
  // CudaTuning::profile_steps).
  Status open(bool f32, bool verbose);
  Status allocateWorkspace();
  const CublasLt& lt() const { return *lt_; }

  // The plan of gemm step `s` at `rows` rows. Autotuning never runs while
  // a graph captures (`capturing`; prepare runs before).
  Result<GemmPlan*> plan(const std::vector<BoundStep>& steps, const BoundStep& s, int64_t rows);
  // y = x·Wᵀ (+ bias), or with plan.adds_residual the norm after it's sum
  // = its x + x·Wᵀ, with `algo`, on the stream.
  Status run(const std::vector<BoundStep>& steps, const BoundStep& s, GemmPlan& plan,
             const cublasLtMatmulAlgo_t& algo);
  // The plans a forward of this shape needs, made before a graph capture.
  Status prepare(const std::vector<BoundStep>& steps, const LaunchShape& shape);
  size_t plans() const { return plans_.size(); }

  bool capturing = false;

 private:
  // The batch-invariant algorithm of the plan's shape: cuBLASLt's first
  // candidate without split-K at kInvariantRows rows (each output element
  // then comes from one CTA's MMA chain over k in order, whatever the row
  // count), checked to run at `rows`.
  Result<cublasLtMatmulAlgo_t> invariantAlgo(const GemmPlan& plan, const GemmPlanKey& key);
  // The fastest of `count` candidates for `s` at `rows` rows, each timed
  // with the weights out of L2.
  Result<cublasLtMatmulAlgo_t> fastestAlgo(const std::vector<BoundStep>& steps, const BoundStep& s, GemmPlan& plan,
                                           int64_t rows, const cublasLtMatmulHeuristicResult_t* candidates,
                                           int count);

  const DeviceContext& gpu_;
  DeviceMemory& memory_;
  const CudaTuning& tuning_;
  const CublasLt* lt_ = nullptr;
  cublasLtHandle_t handle_ = nullptr;
  cudaDataType_t type_ = CUDA_R_16BF;  // A, B and C: bf16, or f32 for f32 plans
  bool verbose_ = false;
  CUdeviceptr workspace_ = 0;
  std::map<GemmPlanKey, GemmPlan> plans_;
  // CudaTuning::batch_invariant: the one algorithm of each shape (the key
  // at kInvariantRows), used at every row count.
  std::map<GemmPlanKey, cublasLtMatmulAlgo_t> invariant_algos_;
  CUdeviceptr l2_flush_ = 0;  // fastestAlgo's, allocated on first use
  int64_t l2_flush_bytes_ = 0;
};

}  // namespace kiln::cuda
