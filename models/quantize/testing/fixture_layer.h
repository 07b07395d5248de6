// The random linear layer of test/fixtures/quant/gptq-awq
// (test/reference/make_gptq_awq_fixtures.py: correlated inputs with a few
// loud channels) that the GPTQ, AWQ and SparseGPT tests run on: its weight
// and the statistics of its inputs, as a gtest fixture.
#pragma once

#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "models/quantize/input_statistics.h"
#include "test/source_root.h"

namespace kiln::quantize::testing {

// `count` little-endian values of a binary fixture file.
template <typename T>
std::vector<T> readBinary(const std::string& path, size_t count) {
  std::vector<T> v(count);
  std::ifstream in(path, std::ios::binary);
  in.read(reinterpret_cast<char*>(v.data()), std::streamsize(count * sizeof(T)));
  EXPECT_TRUE(in.good()) << path;
  return v;
}

class FixtureLayerTest : public ::testing::Test {
 protected:
  // `expected`: a fixture's expected.json, which gives the layer's rows,
  // cols and tokens beside what the test checks (doc_).
  explicit FixtureLayerTest(std::string expected) : expected_(std::move(expected)) {}

  void SetUp() override {
    const std::string layer = checkoutPath("test/fixtures/quant/gptq-awq");
    std::ifstream in(expected_);
    ASSERT_TRUE(in.good()) << expected_;
    doc_ = nlohmann::json::parse(in);
    rows_ = doc_["rows"];
    cols_ = doc_["cols"];
    tokens_ = doc_["tokens"];
    w_ = readBinary<float>(layer + "/w.f32.bin", size_t(rows_ * cols_));
    w64_.assign(w_.begin(), w_.end());
    const std::vector<float> x = readBinary<float>(layer + "/x.f32.bin", size_t(tokens_ * cols_));
    InputStatistics stats(cols_);
    stats.add(x.data(), tokens_ / 2);  // in two calls, as layers see batches
    stats.add(x.data() + tokens_ / 2 * cols_, tokens_ - tokens_ / 2);
    h_ = stats.hessian();
    x_mean_ = stats.meanAbs();
  }

  std::string expected_;
  nlohmann::json doc_;
  int64_t rows_ = 0, cols_ = 0, tokens_ = 0;
  std::vector<float> w_;                 // [rows, cols]
  std::vector<double> w64_, h_, x_mean_;  // h: InputStatistics::hessian
};

}  // namespace kiln::quantize::testing
