// Which instruction sets this CPU runs, by the names of the kernels' run-time
// variants (ggml_vec, quant_dot), read with __builtin_cpu_supports. One place
// for both, so a name means the same CPU features wherever it is chosen.
// Internal to the kernels library.
#pragma once

namespace kiln::cpu {

// "scalar": always.
// "avx2": AVX2 + FMA.
// "avx512": AVX2 + FMA + AVX-512 F, DQ, VL (ggml_vec's 16-lane variant).
// "avx512vnni": AVX2 + FMA + AVX-512 VNNI, VL, BW (quant_dot's dpbusd).
// "avxvnni": AVX2 + FMA + AVX-VNNI (VEX dpbusd; GCC >= 12 or clang).
// Any other name, or any but "scalar" off x86: false.
bool cpuHasIsa(const char* isa);

}  // namespace kiln::cpu
