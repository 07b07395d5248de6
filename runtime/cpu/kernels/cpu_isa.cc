#include "runtime/cpu/kernels/cpu_isa.h"

#include <cstring>

namespace kiln::cpu {

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

bool cpuHasIsa(const char* isa) {
  __builtin_cpu_init();
  if (std::strcmp(isa, "scalar") == 0) return true;
  // Every SIMD variant is built on AVX2 + FMA.
  if (!(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))) return false;
  if (std::strcmp(isa, "avx2") == 0) return true;
  if (std::strcmp(isa, "avx512") == 0)
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vl");
  if (std::strcmp(isa, "avx512vnni") == 0)
    return __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512bw");
#if defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 12)
  // Older GCC does not know the name.
  if (std::strcmp(isa, "avxvnni") == 0) return __builtin_cpu_supports("avxvnni");
#endif
  return false;
}

#else
bool cpuHasIsa(const char* isa) { return std::strcmp(isa, "scalar") == 0; }
#endif

}  // namespace kiln::cpu
