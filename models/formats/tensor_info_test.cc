#include "models/formats/tensor_info.h"

#include <gtest/gtest.h>

namespace kiln::formats {
namespace {

// (ggml id, name, block size, block bytes) as printed by the Python `gguf`
// package 0.19 (GGML_QUANT_SIZES), except Q8_1: ggml's C struct is 36 bytes.
struct Expected {
  uint32_t id;
  const char* name;
  int64_t block_size;
  int64_t block_bytes;
};
constexpr Expected kGgmlTypes[] = {
    {0, "F32", 1, 4},          {1, "F16", 1, 2},         {2, "Q4_0", 32, 18},
    {3, "Q4_1", 32, 20},       {6, "Q5_0", 32, 22},      {7, "Q5_1", 32, 24},
    {8, "Q8_0", 32, 34},       {9, "Q8_1", 32, 36},      {10, "Q2_K", 256, 84},
    {11, "Q3_K", 256, 110},    {12, "Q4_K", 256, 144},   {13, "Q5_K", 256, 176},
    {14, "Q6_K", 256, 210},    {15, "Q8_K", 256, 292},   {16, "IQ2_XXS", 256, 66},
    {17, "IQ2_XS", 256, 74},   {18, "IQ3_XXS", 256, 98}, {19, "IQ1_S", 256, 50},
    {20, "IQ4_NL", 32, 18},    {21, "IQ3_S", 256, 110},  {22, "IQ2_S", 256, 82},
    {23, "IQ4_XS", 256, 136},  {24, "I8", 1, 1},         {25, "I16", 1, 2},
    {26, "I32", 1, 4},         {27, "I64", 1, 8},        {28, "F64", 1, 8},
    {29, "IQ1_M", 256, 56},    {30, "BF16", 1, 2},       {34, "TQ1_0", 256, 54},
    {35, "TQ2_0", 256, 66},    {39, "MXFP4", 32, 17},    {40, "NVFP4", 64, 36},
    {41, "Q1_0", 128, 18},
};

TEST(TensorInfoTest, EveryGgmlTypeIdHasGgmlGeometry) {
  for (const Expected& e : kGgmlTypes) {
    SCOPED_TRACE(e.name);
    auto type = elementTypeFromGgmlId(e.id);
    ASSERT_TRUE(type.has_value());
    EXPECT_EQ(elementTypeName(*type), e.name);
    EXPECT_EQ(blockSize(*type), e.block_size);
    EXPECT_EQ(blockBytes(*type), e.block_bytes);
    EXPECT_EQ(ggmlIdFromElementType(*type), e.id);
    EXPECT_EQ(parseElementTypeName(e.name), type);
  }
}

TEST(TensorInfoTest, RemovedAndUnknownGgmlIdsAreRejected) {
  for (uint32_t id : {4u, 5u, 31u, 32u, 33u, 36u, 37u, 38u, 42u, 1000u, 0xffffffffu})
    EXPECT_FALSE(elementTypeFromGgmlId(id).has_value()) << id;
}

TEST(TensorInfoTest, SafetensorsDtypesParse) {
  for (const char* name : {"BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "F8_E8M0", "I16", "U16",
                           "F16", "BF16", "I32", "U32", "F32", "F64", "I64", "U64"}) {
    auto type = parseElementTypeName(name);
    ASSERT_TRUE(type.has_value()) << name;
    EXPECT_EQ(elementTypeName(*type), name);
    EXPECT_EQ(blockSize(*type), 1);
  }
  EXPECT_FALSE(parseElementTypeName("bf16").has_value());
  EXPECT_FALSE(parseElementTypeName("").has_value());
}

TEST(TensorInfoTest, BytesForElements) {
  EXPECT_EQ(*bytesForElements(ElementType::F32, 10), 40u);
  EXPECT_EQ(*bytesForElements(ElementType::BF16, 3), 6u);
  EXPECT_EQ(*bytesForElements(ElementType::Q4_0, 64), 36u);
  EXPECT_EQ(*bytesForElements(ElementType::Q4_K, 512), 288u);
  EXPECT_EQ(*bytesForElements(ElementType::Q8_0, 49152 * 576), 30081024u);  // SmolLM2 token_embd
  EXPECT_EQ(*bytesForElements(ElementType::F32, 0), 0u);

  auto partial = bytesForElements(ElementType::Q4_K, 100);
  ASSERT_FALSE(partial.ok());
  EXPECT_EQ(partial.error().message, "100 elements is not a multiple of the Q4_K block size 256");
  auto negative = bytesForElements(ElementType::F32, -1);
  ASSERT_FALSE(negative.ok());
  EXPECT_EQ(negative.error().message, "negative element count -1 for F32");
  auto huge = bytesForElements(ElementType::F64, int64_t{1} << 62);
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.error().message,
            "4611686018427387904 elements of F64 overflow a 64-bit byte count");
}

TEST(TensorInfoTest, NumElementsAndShapes) {
  EXPECT_EQ(numElements({}), 1);
  EXPECT_EQ(numElements({2, 3, 4}), 24);
  EXPECT_EQ(numElements({0, 5}), 0);
  EXPECT_FALSE(numElements({-1}).has_value());
  EXPECT_FALSE(numElements({int64_t{1} << 32, int64_t{1} << 32}).has_value());
  EXPECT_EQ(shapeToString({49152, 576}), "[49152, 576]");
  EXPECT_EQ(shapeToString({}), "[]");
}

}  // namespace
}  // namespace kiln::formats
