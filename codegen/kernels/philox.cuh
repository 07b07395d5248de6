// Philox-4x32-10 counter-based RNG (Salmon et al., "Parallel random numbers:
// as easy as 1, 2, 3", SC'11): a bijection of a 128-bit counter under a 64-bit
// key, so draw number c of a request with seed s is philox(c, s) on any
// device, in any batch, in any order. Host- and device-compilable (the CPU
// sampler and tests use the same function as the sampling kernel).
#pragma once

// Its own macro: tensor_core.cuh's KILN_HOST_DEVICE is not inline on the
// host, and a file may include both.
#if defined(__CUDACC__)
#define KILN_PHILOX_FN __host__ __device__ __forceinline__
#else
#define KILN_PHILOX_FN inline
#endif

namespace kiln {
namespace kernels {

struct Philox4 {
  unsigned int x[4];
};

KILN_PHILOX_FN unsigned int philox_mulhilo(unsigned int a, unsigned int b, unsigned int* hi) {
  const unsigned long long product = (unsigned long long)a * b;
  *hi = (unsigned int)(product >> 32);
  return (unsigned int)product;
}

// counter = {c0, c1, c2, c3}, key = {k0, k1}.
KILN_PHILOX_FN Philox4 philox4x32_10(Philox4 c, unsigned int k0, unsigned int k1) {
  for (int round = 0; round < 10; ++round) {
    unsigned int hi0, hi1;
    const unsigned int lo0 = philox_mulhilo(0xD2511F53u, c.x[0], &hi0);
    const unsigned int lo1 = philox_mulhilo(0xCD9E8D57u, c.x[2], &hi1);
    Philox4 next;
    next.x[0] = hi1 ^ c.x[1] ^ k0;
    next.x[1] = lo1;
    next.x[2] = hi0 ^ c.x[3] ^ k1;
    next.x[3] = lo0;
    c = next;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return c;
}

// Uniform in [0, 1) with 24 random bits, from (seed, counter, stream).
KILN_PHILOX_FN float philox_uniform(unsigned long long seed, unsigned long long counter,
                                      unsigned int stream) {
  Philox4 c;
  c.x[0] = (unsigned int)counter;
  c.x[1] = (unsigned int)(counter >> 32);
  c.x[2] = stream;
  c.x[3] = 0;
  const Philox4 r = philox4x32_10(c, (unsigned int)seed, (unsigned int)(seed >> 32));
  return (float)(r.x[0] >> 8) * (1.0f / 16777216.0f);
}

}  // namespace kernels
}  // namespace kiln
