// What GPTQ and AWQ need to know of one linear layer's inputs, gathered over
// the calibration tokens: the Gram matrix X^T X and each channel's mean |x|.
// With it the layer's output error for any weight change dW [rows, k] is
// exact without the tokens:  ||X dW^T||^2 = sum over rows of dW_r H dW_r^T,
// H = X^T X (here divided by the token count).
#pragma once

#include <cstdint>
#include <vector>

namespace kiln::quantize {

class InputStatistics {
 public:
  explicit InputStatistics(int64_t k);

  // x: [rows, k] f32, row-major. Sums in double (products of f32 values are
  // exact in double; OpenBLAS dsyrk over blocks of rows).
  void add(const float* x, int64_t rows);

  int64_t channels() const { return k_; }
  int64_t tokens() const { return tokens_; }
  // H = X^T X / tokens, [k, k], both triangles.
  std::vector<double> hessian() const;
  // mean |x| of each channel, [k].
  std::vector<double> meanAbs() const;

 private:
  int64_t k_ = 0;
  int64_t tokens_ = 0;
  std::vector<double> gram_;     // [k, k], upper triangle (row-major) filled
  std::vector<double> abs_sum_;  // [k]
};

}  // namespace kiln::quantize

namespace kiln::quantize {

// sum over rows of (a_r - b_r) H (a_r - b_r)^T for a, b: [rows, k] and h:
// [k, k] from InputStatistics::hessian: the mean over the calibration tokens
// of ||a x - b x||^2, the output error of weights b standing in for a.
double outputError(const double* a, const double* b, int64_t rows, int64_t k, const double* h);

}  // namespace kiln::quantize
