// The 2:4 sparse linears on the GPU against float64 over the dense pruned
// matrix (the kept values as stored, dequantized): the decode GEMV
// (sparse24_gemv.cuh) for bf16, q8_0 and q4_0 values at 1-8 rows, and the
// tensor-core GEMMs (sparse24_mma.cuh's mma.sp, sparse24_wgmma.cuh's sparse
// wgmma on sm_90) at 16-2048 rows, with y poisoned
// (NaN) before each launch and 64 poisoned bytes past it that must stay so.
// Tolerances as the dense and quantized skinny GEMMs' (kernels_gpu_test).
// ctest label `gpu`: needs an NVIDIA GPU and driver (scripts/gpu-check.sh).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "test/gpu/gpu_harness.h"
#include "test/gpu/sparse24_weights.h"

namespace kiln::gpu_test {
namespace {

using nlohmann::json;
namespace kk = kiln::kernels;

#define COMPILE(var, kind, params)                      \
  auto var##_r = compile(kind, params);                 \
  ASSERT_TRUE(var##_r.ok()) << var##_r.error().message; \
  Kernel var = var##_r.take()

// y = x · Wᵀ (+ bias) in float64, [rows, n].
std::vector<double> reference(const std::vector<float>& x, const Sparse24Weight& w, const std::vector<float>* bias,
                              int rows) {
  std::vector<double> y(size_t(rows) * w.n);
  for (int m = 0; m < rows; ++m)
    for (int64_t j = 0; j < w.n; ++j) {
      const float* wr = w.dense.data() + j * w.k;
      const float* xr = x.data() + size_t(m) * w.k;
      double s = bias ? (*bias)[size_t(j)] : 0.0;
      for (int64_t i = 0; i < w.k; ++i) s += double(xr[i]) * wr[i];
      y[size_t(m) * w.n + j] = s;
    }
  return y;
}

// The downloaded y as floats, its 64 poisoned bytes past the end checked.
std::vector<float> output(const DeviceBuffer& d_y, size_t elements, bool f32, const std::string& what) {
  std::vector<float> got = f32 ? d_y.download<float>() : bf16ToFloat(d_y.download<uint16_t>());
  for (size_t i = elements; i < got.size(); ++i) EXPECT_TRUE(std::isnan(got[i])) << what << ": wrote past y at " << i;
  got.resize(elements);
  return got;
}

class Sparse24Gpu : public ::testing::Test {
 protected:
  void SetUp() override {
    auto gpu = Gpu::get();
    ASSERT_TRUE(gpu.ok()) << "this test needs an NVIDIA GPU: " << gpu.error().message;
  }
  std::mt19937 rng{2424};
};

TEST_F(Sparse24Gpu, DecodeGemvMatchesFloat64) {
  struct Case { int rows, n, k, max_rows; bool bias; const char* out; };
  const Case cases[] = {{1, 4096, 4096, 1, false, "bf16"}, {4, 576, 576, 8, true, "bf16"},
                        {8, 4096, 1536, 8, false, "f32"},   {1, 1000, 4096, 1, true, "f32"},
                        {3, 2048, 14336, 8, false, "bf16"}, {4, 576, 2048, 1, false, "bf16"}};
  for (const char* values : {"bf16", "q8_0", "q4_0"})
    for (const Case& c : cases) {
      const bool f32 = std::string(c.out) == "f32";
      const std::string what = fmt::format("sparse24_gemv {} rows {} n {} k {} max_rows {}{} -> {}", values, c.rows,
                                           c.n, c.k, c.max_rows, c.bias ? " +bias" : "", c.out);
      const Sparse24Weight w = randomSparse24Weight(values, c.n, c.k, 0.05f, rng, true);
      std::vector<float> x, bias;
      auto xb = randomBf16(rng, size_t(c.rows) * c.k, 1.0f, &x);
      auto bb = randomBf16(rng, size_t(c.n), 1.0f, &bias);
      COMPILE(k, "sparse24_gemv", (json{{"n", c.n}, {"k", c.k}, {"values_type", values}, {"bias", c.bias},
                                        {"max_rows", c.max_rows}, {"out_type", c.out}}));
      const int rows_per_block = configConstant(k, "kRowsPerBlock");
      ASSERT_GT(rows_per_block, 0) << k.instance.name;
      auto d_x = DeviceBuffer::from(xb), d_w = DeviceBuffer::from(w.prepared), d_b = DeviceBuffer::from(bb);
      const size_t elements = size_t(c.rows) * c.n;
      DeviceBuffer d_y(elements * (f32 ? 4 : 2) + 64);
      kk::Sparse24Params p{d_x.get(), d_w.get(),
                           reinterpret_cast<const unsigned*>(d_w.as<uint8_t>() + w.metadata_offset),
                           c.bias ? d_b.get() : nullptr, d_y.get(), c.rows};
      KILN_GPU_OK(launch(k, unsigned((c.n + rows_per_block - 1) / rows_per_block), 1,
                         unsigned((c.rows + c.max_rows - 1) / c.max_rows), p));
      expectClose(output(d_y, elements, f32, what), reference(x, w, c.bias ? &bias : nullptr, c.rows), 5e-3,
                  1.0 / 64, what);
      if (HasFailure()) return;
    }
}

TEST_F(Sparse24Gpu, PrefillGemmMatchesFloat64) {
  struct Case { int rows, n, k; bool bias; const char* out; };
  // n 1000: a metadata tile and a block past the matrix; rows 300: a partial x tile.
  const Case cases[] = {{16, 4096, 4096, false, "bf16"}, {2048, 576, 576, true, "bf16"}, {256, 576, 1536, true, "bf16"},
                        {300, 1000, 1536, false, "f32"}, {128, 14336, 4096, true, "bf16"},
                        {2048, 256, 14336, false, "f32"}};
  int major = 0;
  (*Gpu::get())->d->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, (*Gpu::get())->device);
  if (major != 9) std::printf("  sparse24_gemm_wgmma: not run, it needs sm_90a (this GPU is sm_%d0)\n", major);
  for (const Case& c : cases) {
    const bool f32 = std::string(c.out) == "f32";
    const Sparse24Weight w = randomSparse24Weight("bf16", c.n, c.k, 0.05f, rng, true);
    std::vector<float> x, bias;
    auto xb = randomBf16(rng, size_t(c.rows) * c.k, 1.0f, &x);
    auto bb = randomBf16(rng, size_t(c.n), 1.0f, &bias);
    const std::vector<double> want = reference(x, w, c.bias ? &bias : nullptr, c.rows);
    auto d_x = DeviceBuffer::from(xb), d_w = DeviceBuffer::from(w.prepared), d_b = DeviceBuffer::from(bb);
    auto d_meta = DeviceBuffer::from(w.mma_metadata);
    for (const char* kind : {"sparse24_gemm", "sparse24_gemm_wgmma"}) {
      const bool wgmma = std::string(kind) == "sparse24_gemm_wgmma";
      if (wgmma && (major != 9 || c.k % 128 != 0)) continue;  // sm_90a; whole 128-column stages
      const std::string what = fmt::format("{} rows {} n {} k {}{} -> {}", kind, c.rows, c.n, c.k,
                                           c.bias ? " +bias" : "", c.out);
      COMPILE(k, kind, (json{{"n", c.n}, {"k", c.k}, {"bias", c.bias}, {"out_type", c.out}}));
      const int block_n = configConstant(k, "kBlockN"), block_m = configConstant(k, "kBlockM");
      ASSERT_GT(block_n, 0) << k.instance.name;
      const size_t elements = size_t(c.rows) * c.n;
      DeviceBuffer d_y(elements * (f32 ? 4 : 2) + 64);
      kk::Sparse24Params p{d_x.get(), d_w.get(), d_meta.as<unsigned>(), c.bias ? d_b.get() : nullptr, d_y.get(),
                           c.rows};
      KILN_GPU_OK(launch(k, unsigned((c.n + block_n - 1) / block_n), unsigned((c.rows + block_m - 1) / block_m), 1, p));
      expectClose(output(d_y, elements, f32, what), want, 5e-3, 1.0 / 64, what);
      if (HasFailure()) return;
    }
  }
}

}  // namespace
}  // namespace kiln::gpu_test
