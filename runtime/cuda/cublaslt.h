// cuBLASLt, loaded with dlopen from one X-macro table (the GEMMs the
// generated skinny-GEMM kernel does not cover: prefill-shaped batches; the
// algorithm-configuration calls are kiln_gemm_search's).
#pragma once

#include <cublasLt.h>

#include "runtime/cuda/dynamic_library.h"

namespace kiln::cuda {

#define KILN_CUBLASLT_FUNCTIONS(X)        \
  X(cublasLtGetVersion)                   \
  X(cublasLtCreate)                       \
  X(cublasLtDestroy)                      \
  X(cublasLtMatmul)                       \
  X(cublasLtMatmulDescCreate)             \
  X(cublasLtMatmulDescDestroy)            \
  X(cublasLtMatmulDescSetAttribute)       \
  X(cublasLtMatrixLayoutCreate)           \
  X(cublasLtMatrixLayoutDestroy)          \
  X(cublasLtMatmulPreferenceCreate)       \
  X(cublasLtMatmulPreferenceDestroy)      \
  X(cublasLtMatmulPreferenceSetAttribute) \
  X(cublasLtMatmulAlgoGetHeuristic)       \
  X(cublasLtMatmulAlgoCheck)              \
  X(cublasLtMatmulAlgoInit)               \
  X(cublasLtMatmulAlgoCapGetAttribute)    \
  X(cublasLtMatmulAlgoConfigSetAttribute) \
  X(cublasLtMatmulAlgoConfigGetAttribute)

struct CublasLt {
#define KILN_DECLARE(name) decltype(&::name) name = nullptr;
  KILN_CUBLASLT_FUNCTIONS(KILN_DECLARE)
#undef KILN_DECLARE
  DynamicLibrary library;
  size_t version = 0;
};

// Loads libcublasLt.so.13 once per process.
Result<const CublasLt*> loadCublasLt();

}  // namespace kiln::cuda
