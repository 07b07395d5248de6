// A one-line progress bar on stderr over many requests, as
// runtime/engine/load_progress.h draws model loading:
//   [##########..............] 40/100 requests, 1234.5 output tok/s
// Redrawn at most ten times a second; drawn only when stderr is a terminal
// (a log file gets no carriage returns) and the command is not --quiet.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace kiln {

class RequestProgress {
 public:
  RequestProgress(bool enabled, int64_t total, std::string label)
      : enabled_(enabled && isatty(STDERR_FILENO)), total_(total), label_(std::move(label)),
        start_(Clock::now()), drawn_(start_) {}

  // `done` of the total requests have finished, `output_tokens` generated so far.
  void update(int64_t done, int64_t output_tokens) {
    if (!enabled_) return;
    const Clock::time_point now = Clock::now();
    if (now - drawn_ < std::chrono::milliseconds(100) && done < total_) return;
    drawn_ = now;
    draw(done, output_tokens, now);
  }
  // The last state, then a newline: what follows starts on a line of its own.
  void finish(int64_t done, int64_t output_tokens) {
    if (!enabled_) return;
    draw(done, output_tokens, Clock::now());
    std::fputc('\n', stderr);
  }

 private:
  using Clock = std::chrono::steady_clock;

  void draw(int64_t done, int64_t output_tokens, Clock::time_point now) const {
    constexpr int64_t kWidth = 24;
    const int64_t filled = total_ > 0 ? done * kWidth / total_ : kWidth;
    const double seconds = std::chrono::duration<double>(now - start_).count();
    std::fprintf(stderr, "\r%s[%s%s] %lld/%lld requests, %.1f output tok/s%8s", label_.c_str(),
                 std::string(size_t(filled), '#').c_str(), std::string(size_t(kWidth - filled), '.').c_str(),
                 (long long)done, (long long)total_, seconds > 0 ? double(output_tokens) / seconds : 0.0, "");
    std::fflush(stderr);
  }

  bool enabled_;
  int64_t total_;
  std::string label_;
  Clock::time_point start_, drawn_;
};

}  // namespace kiln
