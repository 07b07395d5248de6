// The device images of a bound 2:4 sparse weight, built on the host: the
// gemv's (kept values as the kernel reads them, canonical metadata from a
// 16-byte boundary), the GEMM's mma-order metadata and bf16 values, and the
// dense matrix the fallback uploads; for sp24, int8sp24 and int4sp24.
#include "runtime/cuda/executor/sparse24_image.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "runtime/cuda/executor/sparse24_layout.h"
#include "runtime/cuda/executor/weight_forms.h"
#include "runtime/numerics/quant.h"
#include "runtime/weights/sparse24.h"

namespace kiln::cuda {
namespace {

// A random [n, k] matrix, 2:4 compressed and packed as the weight store binds it.
struct SparseFixture {
  Sparse24Matrix matrix;
  PackedSparse24 packed;
  BoundWeight bound;
};

SparseFixture makeSparse(const char* scheme, int64_t n, int64_t k, int64_t group) {
  std::mt19937 rng(7);
  std::normal_distribution<float> dist;
  std::vector<float> w(size_t(n * k));
  for (float& v : w) v = dist(rng);
  SparseFixture f;
  auto m = compressSparse24(w.data(), n, k, "magnitude", "w");
  EXPECT_TRUE(m.ok());
  f.matrix = m.take();
  auto packed = packSparse24(f.matrix, scheme, group);
  EXPECT_TRUE(packed.ok()) << packed.error().message;
  f.packed = packed.take();
  BoundWeight& b = f.bound;
  b.id = 3;
  b.name = "w";
  b.format_type = f.packed.values_type;
  b.type = std::string(scheme) == "int8sp24"   ? WeightType::Q8_0
           : std::string(scheme) == "int4sp24" ? WeightType::Q4_0
                                               : WeightType::F32;
  b.kernel_ready = true;
  b.shape = {n, k};
  b.data = f.packed.data.get();
  b.size_bytes = f.packed.bytes;
  b.sparse24 = true;
  b.sparse_meta_offset = f.packed.meta_offset;
  return f;
}

std::vector<float> asFloats(WeightType type, const std::vector<uint8_t>& bytes, int64_t count) {
  std::vector<float> out(static_cast<size_t>(count));
  EXPECT_TRUE(dequantizeRow(type, bytes.data(), out.data(), count).ok());
  return out;
}

std::vector<uint8_t> image(const BoundWeight& w, WeightForm form) {
  std::vector<uint8_t> out;
  Status s = weightImage(w, form, 0, out);
  EXPECT_TRUE(s.ok()) << s.error().message;
  return out;
}

TEST(Sparse24Image, GemvImageHoldsKernelValuesThenAlignedCanonicalMetadata) {
  // n 5: the values plane ends off a 16-byte boundary for q8_0 and q4_0.
  const int64_t n = 5, k = 128;
  for (const char* scheme : {"sp24", "int8sp24", "int4sp24"}) {
    SCOPED_TRACE(scheme);
    SparseFixture f = makeSparse(scheme, n, k, 64);
    const BoundWeight& w = f.bound;
    const std::vector<uint8_t> gemv = image(w, WeightForm::kSparse24);
    const int64_t row_bytes = sparse24GemvRowBytes(w);
    EXPECT_EQ(row_bytes, std::string(scheme) == "sp24" ? k : std::string(scheme) == "int8sp24" ? 2 * 34 : 2 * 18);
    const int64_t meta_at = sparse24MetadataOffset(n, row_bytes);
    EXPECT_EQ(meta_at % 16, 0);
    ASSERT_EQ(int64_t(gemv.size()), meta_at + n * k / 32 * 4);
    EXPECT_EQ(int64_t(gemv.size()), sparse24GemvImageBytes(w));
    if (w.type == WeightType::F32) {
      const std::vector<float> values = asFloats(WeightType::BF16, gemv, n * k / 2);
      for (size_t i = 0; i < values.size(); ++i)
        ASSERT_NEAR(values[i], f.matrix.values[i], std::abs(f.matrix.values[i]) / 128) << i;
    } else {
      EXPECT_EQ(std::memcmp(gemv.data(), w.data, size_t(n * row_bytes)), 0) << "the blocks as they are";
    }
    EXPECT_EQ(std::memcmp(gemv.data() + meta_at, f.matrix.meta.data(), f.matrix.meta.size() * 4), 0);
  }
}

TEST(Sparse24Image, GemmPlanesAreMmaOrderMetadataAndBf16Values) {
  const int64_t n = 40, k = 192;
  SparseFixture f = makeSparse("int4sp24", n, k, 64);
  const std::vector<uint8_t> mma = image(f.bound, WeightForm::kSparse24Mma);
  const std::vector<uint32_t> want = sparse24MmaMetadata(f.matrix.meta.data(), n, k);
  ASSERT_EQ(mma.size(), want.size() * 4);
  EXPECT_EQ(std::memcmp(mma.data(), want.data(), mma.size()), 0);

  const std::vector<uint8_t> bf16 = image(f.bound, WeightForm::kSparse24Bf16Values);
  ASSERT_EQ(int64_t(bf16.size()), n * k);
  auto kept = sparse24KeptValues(f.bound);
  ASSERT_TRUE(kept.ok());
  const std::vector<float> values = asFloats(WeightType::BF16, bf16, n * k / 2);
  for (size_t i = 0; i < values.size(); ++i) ASSERT_NEAR(values[i], (*kept)[i], std::abs((*kept)[i]) / 128) << i;
}

TEST(Sparse24Image, DenseFormsExpandTheKeptValues) {
  const int64_t n = 8, k = 64;
  for (const char* scheme : {"sp24", "int8sp24", "int4sp24"}) {
    SCOPED_TRACE(scheme);
    SparseFixture f = makeSparse(scheme, n, k, 64);
    auto kept = sparse24KeptValues(f.bound);
    ASSERT_TRUE(kept.ok());
    // The kept values (dequantized for the block schemes) put back in place.
    Sparse24Matrix dequantized = f.matrix;
    dequantized.values = *kept;
    const std::vector<float> want = expandSparse24(dequantized);
    const std::vector<float> f32 = asFloats(WeightType::F32, image(f.bound, WeightForm::kF32), n * k);
    EXPECT_EQ(f32, want);
    const std::vector<float> bf16 = asFloats(WeightType::BF16, image(f.bound, WeightForm::kBf16), n * k);
    for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(bf16[i], want[i], std::abs(want[i]) / 128) << i;
    if (std::string(scheme) == "sp24") EXPECT_EQ(f32, expandSparse24(f.matrix)) << "exactly the matrix";
  }
}

TEST(Sparse24Image, RefusesSparseFormsOfDenseWeightsAndRawFormsOfSparseOnes) {
  SparseFixture f = makeSparse("sp24", 8, 64, 0);
  std::vector<uint8_t> out;
  EXPECT_FALSE(weightImage(f.bound, WeightForm::kRaw, 0, out).ok());
  BoundWeight dense = f.bound;
  dense.sparse24 = false;
  EXPECT_FALSE(weightImage(dense, WeightForm::kSparse24, 0, out).ok());
}

}  // namespace
}  // namespace kiln::cuda
