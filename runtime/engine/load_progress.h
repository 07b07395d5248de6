// A one-line progress bar on stderr for model loading: `[####....] weights`.
#pragma once

#include <chrono>
#include <cstdio>
#include <string>

namespace kiln {

class LoadProgress {
 public:
  LoadProgress(bool enabled, int stages)
      : enabled_(enabled), stages_(stages), start_(std::chrono::steady_clock::now()) {}

  void stage(const std::string& name) {
    draw(name);
    ++done_;
  }
  void done() {
    if (!enabled_) return;
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    std::fprintf(stderr, "\r[%s] loaded in %.2f s%20s\n", bar(stages_).c_str(), s, "");
  }

 private:
  std::string bar(int filled) const {
    constexpr int kWidth = 24;
    int n = stages_ > 0 ? filled * kWidth / stages_ : kWidth;
    return std::string(n, '#') + std::string(kWidth - n, '.');
  }
  void draw(const std::string& name) const {
    if (!enabled_) return;
    std::fprintf(stderr, "\r[%s] loading %s...%10s", bar(done_).c_str(), name.c_str(), "");
    std::fflush(stderr);
  }

  bool enabled_;
  int stages_;
  int done_ = 0;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace kiln
