// cuBLASLt algorithm configurations: the settings of one algorithm, an
// algorithm made from settings (checked against the problem), and the
// configurations next to a heuristic's candidates. cuBLASLt's heuristic
// lists few of them (8 for Llama-3-8B's prefill GEMMs on the H200), and one
// setting away from its sixth the gate/up GEMM at 2048 rows ran 0.949 of the
// time of its first at the card's power limit (kiln_gemm_search,
// 2026-11-29): the executor's prefill autotuner times these neighbours too.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "runtime/cuda/cublaslt.h"

namespace kiln::cuda {

struct GemmAlgoConfig {
  int32_t id = 0;
  uint32_t tile = 0, stages = 0;  // CUBLASLT_ALGO_CONFIG_TILE_ID, _STAGES_ID
  int32_t splitk = 1;
  uint32_t reduction = 0, swizzle = 0, custom = 0;  // _REDUCTION_SCHEME, _CTA_SWIZZLING, _CUSTOM_OPTION
  uint16_t inner = 0, cluster = 0;                  // _INNER_SHAPE_ID, _CLUSTER_SHAPE_ID
  bool operator==(const GemmAlgoConfig&) const = default;
  std::string str() const;
};

// One matmul as cuBLASLt describes it: what an algorithm is checked against.
struct GemmProblem {
  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
  cudaDataType_t ab_type = CUDA_R_16BF, cd_type = CUDA_R_16BF;  // compute and scale: f32
  size_t workspace_bytes = 0;
};

GemmAlgoConfig gemmAlgoConfig(const CublasLt& lt, const cublasLtMatmulAlgo_t& algo);

// The algorithm of `config`, if cuBLASLt accepts it for `problem` within its workspace.
std::optional<cublasLtMatmulAlgo_t> gemmAlgo(const CublasLt& lt, const GemmProblem& problem,
                                             const GemmAlgoConfig& config);

// The accepted configurations one setting away from each of `seeds`, none
// of them a seed or repeated: CTA swizzle and cluster shape; with `wide`,
// also every tile and stage count the algorithm offers and split-K 2-4.
std::vector<cublasLtMatmulAlgo_t> gemmAlgoNeighbours(const CublasLt& lt, const GemmProblem& problem,
                                                     std::span<const cublasLtMatmulAlgo_t> seeds, bool wide);

}  // namespace kiln::cuda
