// The tensor-map checks that run before the driver is asked (no GPU needed):
// each refusal names the matrix, its boxes and what was expected.
#include "runtime/cuda/tensor_map.h"

#include <gtest/gtest.h>

namespace kiln::cuda {
namespace {

TEST(TensorMap, AcceptsLlamaShapes) {
  EXPECT_EQ(tensorMapProblem({0x10000, 2048, 4096, 128, 64}), "");
  EXPECT_EQ(tensorMapProblem({0x10000, 28672, 4096, 128, 64}), "");
  EXPECT_EQ(tensorMapProblem({0x10010, 1, 8, 1, 64}), "");  // smaller than one box: the rest is zero fill
}

TEST(TensorMap, RefusalsNameTheProblem) {
  EXPECT_EQ(tensorMapProblem({0x10000, 2048, 4096, 128, 32}),
            "a [2048, 4096] bf16 matrix in boxes of [128, 32]: expected boxes 64 columns wide (the 128-byte swizzle "
            "span)");
  EXPECT_EQ(tensorMapProblem({0x10000, 2048, 4096, 512, 64}),
            "a [2048, 4096] bf16 matrix in boxes of [512, 64]: expected 1-256 box rows");
  EXPECT_EQ(tensorMapProblem({0x10008, 2048, 4096, 128, 64}),
            "a [2048, 4096] bf16 matrix in boxes of [128, 64] at 0x10008: expected a 16-byte aligned address");
  EXPECT_EQ(tensorMapProblem({0x10000, 16, 100, 128, 64}),
            "a [16, 100] bf16 matrix in boxes of [128, 64]: expected rows a multiple of 16 bytes (8 columns) apart");
  EXPECT_EQ(tensorMapProblem({0x10000, 0, 64, 128, 64}),
            "a [0, 64] bf16 matrix in boxes of [128, 64]: expected a matrix of at least one element");
}

}  // namespace
}  // namespace kiln::cuda
