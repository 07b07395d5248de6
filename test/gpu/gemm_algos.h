// cuBLASLt for kiln_gemm_search and kiln_swiglu_bench: the executor's GEMM
// layout as a problem and its heuristic candidates, the settings of one
// algorithm, an algorithm made from settings (checked against the problem),
// and the configurations next to a heuristic's candidates, of which
// cuBLASLt lists few (8 for Llama-3-8B's prefill GEMMs on the H200).
#pragma once

#include <algorithm>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "runtime/cuda/cublaslt.h"

namespace kiln::gpu_test {

using cuda::CublasLt;

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

// The executor's cuBLASLt layout of a row-major y[rows, n] = x[rows, k] ·
// W[n, k]ᵀ, bf16 in and out with f32 accumulation: column-major
// y'[n, rows] = W'ᵀ · x' (runtime/cuda/executor/gemm_planner.cc's GemmPlanner::plan).
inline GemmProblem makeGemmProblem(const CublasLt& lt, cublasLtHandle_t handle, int n, int k, int rows,
                                   size_t workspace_bytes) {
  GemmProblem p;
  p.handle = handle;
  p.workspace_bytes = workspace_bytes;
  lt.cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  lt.cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
  lt.cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
  lt.cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16BF, uint64_t(k), uint64_t(n), k);
  lt.cublasLtMatrixLayoutCreate(&p.b, CUDA_R_16BF, uint64_t(k), uint64_t(rows), k);
  lt.cublasLtMatrixLayoutCreate(&p.c, CUDA_R_16BF, uint64_t(n), uint64_t(rows), n);
  p.d = p.c;
  return p;
}
inline void destroyGemmProblem(const CublasLt& lt, GemmProblem& p) {
  lt.cublasLtMatrixLayoutDestroy(p.a);
  lt.cublasLtMatrixLayoutDestroy(p.b);
  lt.cublasLtMatrixLayoutDestroy(p.c);
  lt.cublasLtMatmulDescDestroy(p.desc);
  p = GemmProblem{};
}
// cuBLASLt's heuristic candidates for `p` (up to `max`), best first.
inline std::vector<cublasLtMatmulHeuristicResult_t> heuristicCandidates(const CublasLt& lt, const GemmProblem& p,
                                                                        int max) {
  cublasLtMatmulPreference_t pref = nullptr;
  lt.cublasLtMatmulPreferenceCreate(&pref);
  size_t ws = p.workspace_bytes;
  lt.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<size_t>(max));
  int found = 0;
  lt.cublasLtMatmulAlgoGetHeuristic(p.handle, p.desc, p.a, p.b, p.c, p.d, pref, max, results.data(), &found);
  lt.cublasLtMatmulPreferenceDestroy(pref);
  results.resize(size_t(found));
  return results;
}

inline std::string GemmAlgoConfig::str() const {
  return fmt::format("id {} tile {} stages {} cluster {} inner {} splitk {} reduction {} swizzle {} custom {}", id,
                     tile, stages, cluster, inner, splitk, reduction, swizzle, custom);
}

namespace detail {

// Each setting with its attribute, for reading and writing them alike.
template <class Fn>
inline void eachSetting(GemmAlgoConfig& c, Fn fn) {
  fn(CUBLASLT_ALGO_CONFIG_TILE_ID, &c.tile, sizeof c.tile);
  fn(CUBLASLT_ALGO_CONFIG_STAGES_ID, &c.stages, sizeof c.stages);
  fn(CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &c.splitk, sizeof c.splitk);
  fn(CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &c.reduction, sizeof c.reduction);
  fn(CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &c.swizzle, sizeof c.swizzle);
  fn(CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, &c.custom, sizeof c.custom);
  fn(CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, &c.inner, sizeof c.inner);
  fn(CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &c.cluster, sizeof c.cluster);
}

inline std::vector<uint32_t> capIds(const CublasLt& lt, const cublasLtMatmulAlgo_t& algo,
                             cublasLtMatmulAlgoCapAttributes_t cap) {
  size_t bytes = 0;
  lt.cublasLtMatmulAlgoCapGetAttribute(&algo, cap, nullptr, 0, &bytes);
  std::vector<uint32_t> ids(bytes / sizeof(uint32_t));
  if (!ids.empty()) lt.cublasLtMatmulAlgoCapGetAttribute(&algo, cap, ids.data(), bytes, &bytes);
  return ids;
}

}  // namespace detail

// The settings of `algo`.
inline GemmAlgoConfig gemmAlgoConfig(const CublasLt& lt, const cublasLtMatmulAlgo_t& algo) {
  GemmAlgoConfig c;
  size_t written = 0;
  lt.cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_ID, &c.id, sizeof c.id, &written);
  detail::eachSetting(c, [&](cublasLtMatmulAlgoConfigAttributes_t attr, void* value, size_t size) {
    lt.cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, value, size, &written);
  });
  return c;
}

// The algorithm of `config`, if cuBLASLt accepts it for `problem` within its workspace.
inline std::optional<cublasLtMatmulAlgo_t> gemmAlgo(const CublasLt& lt, const GemmProblem& problem,
                                                    const GemmAlgoConfig& config) {
  cublasLtMatmulAlgo_t algo;
  if (lt.cublasLtMatmulAlgoInit(problem.handle, CUBLAS_COMPUTE_32F, CUDA_R_32F, problem.ab_type, problem.ab_type,
                                problem.cd_type, problem.cd_type, config.id, &algo) != CUBLAS_STATUS_SUCCESS)
    return std::nullopt;
  GemmAlgoConfig settings = config;
  bool set = true;
  detail::eachSetting(settings, [&](cublasLtMatmulAlgoConfigAttributes_t attr, void* value, size_t size) {
    set = set && lt.cublasLtMatmulAlgoConfigSetAttribute(&algo, attr, value, size) == CUBLAS_STATUS_SUCCESS;
  });
  cublasLtMatmulHeuristicResult_t checked = {};
  if (!set || lt.cublasLtMatmulAlgoCheck(problem.handle, problem.desc, problem.a, problem.b, problem.c, problem.d,
                                         &algo, &checked) != CUBLAS_STATUS_SUCCESS ||
      checked.workspaceSize > problem.workspace_bytes)
    return std::nullopt;
  return algo;
}

// The accepted configurations one setting away from each of `seeds`, none
// of them a seed or repeated: CTA swizzle and cluster shape; with `wide`,
// also every tile and stage count the algorithm offers and split-K 2-4.
inline std::vector<cublasLtMatmulAlgo_t> gemmAlgoNeighbours(const CublasLt& lt, const GemmProblem& problem,
                                                            std::span<const cublasLtMatmulAlgo_t> seeds, bool wide) {
  std::vector<GemmAlgoConfig> seen;
  for (const cublasLtMatmulAlgo_t& seed : seeds) seen.push_back(gemmAlgoConfig(lt, seed));
  std::vector<cublasLtMatmulAlgo_t> out;
  for (size_t i = 0; i < seeds.size(); ++i) {
    const GemmAlgoConfig base = seen[i];
    std::vector<GemmAlgoConfig> around;
    auto vary = [&](auto member, auto value) {
      GemmAlgoConfig c = base;
      c.*member = value;
      around.push_back(c);
    };
    for (uint32_t swizzle : {0u, 1u, 2u, 3u}) vary(&GemmAlgoConfig::swizzle, swizzle);
    for (uint16_t cluster : {CUBLASLT_CLUSTER_SHAPE_AUTO, CUBLASLT_CLUSTER_SHAPE_1x1x1, CUBLASLT_CLUSTER_SHAPE_2x1x1,
                             CUBLASLT_CLUSTER_SHAPE_1x2x1})
      vary(&GemmAlgoConfig::cluster, cluster);
    if (wide) {
      for (uint32_t tile : detail::capIds(lt, seeds[i], CUBLASLT_ALGO_CAP_TILE_IDS)) vary(&GemmAlgoConfig::tile, tile);
      for (uint32_t stages : detail::capIds(lt, seeds[i], CUBLASLT_ALGO_CAP_STAGES_IDS)) vary(&GemmAlgoConfig::stages, stages);
      for (int32_t splitk : {2, 3, 4})
        for (uint32_t scheme : {CUBLASLT_REDUCTION_SCHEME_INPLACE, CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE,
                                CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE}) {
          GemmAlgoConfig c = base;
          c.splitk = splitk;
          c.reduction = scheme;
          around.push_back(c);
        }
    }
    for (const GemmAlgoConfig& c : around) {
      if (std::find(seen.begin(), seen.end(), c) != seen.end()) continue;
      seen.push_back(c);
      if (auto algo = gemmAlgo(lt, problem, c)) out.push_back(*algo);
    }
  }
  return out;
}

}  // namespace kiln::gpu_test
