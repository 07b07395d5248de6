// The server's /metrics in the Prometheus text exposition format (0.0.4):
// the engine's gauges (queue, running sequences, KV blocks, prefix-cache
// hits) sampled by the engine thread, and counters and latency histograms
// of the requests that finished. Names are listed in docs/design/server.md.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/engine/engine.h"

namespace kiln::server {

// A cumulative histogram with fixed upper bounds, in seconds.
class LatencyHistogram {
 public:
  explicit LatencyHistogram(std::vector<double> upper_bounds);
  void observe(double seconds);
  // `name`_bucket{le=...}, `name`_sum and `name`_count lines.
  void render(std::string& out, const std::string& name, const std::string& help) const;

 private:
  std::vector<double> upper_bounds_;
  std::vector<int64_t> counts_;  // per bucket, not cumulative; the last is +Inf
  double sum_ = 0;
  int64_t count_ = 0;
};

// What the engine thread publishes after each step.
struct EngineSnapshot {
  EngineMetrics engine;
  int64_t queued_submissions = 0;  // accepted by HTTP, not yet handed to the engine
  int64_t requests_in_flight = 0;  // handed to the engine, not yet finished
};

class PrometheusMetrics {
 public:
  PrometheusMetrics();

  void setSnapshot(const EngineSnapshot& snapshot);
  EngineSnapshot snapshot() const;
  // One completion ended (engine thread).
  void recordFinish(const RequestStats& stats);
  // A request refused before it reached the engine: "queue_full",
  // "invalid_request", "unauthorized", "shutting_down".
  void recordRejected(const std::string& reason);

  std::string render() const;

 private:
  mutable std::mutex mutex_;
  EngineSnapshot snapshot_;
  int64_t prompt_tokens_ = 0;
  int64_t generated_tokens_ = 0;
  std::map<std::string, int64_t> finished_by_reason_;
  std::map<std::string, int64_t> rejected_by_reason_;
  LatencyHistogram time_to_first_token_;
  LatencyHistogram time_per_output_token_;
  LatencyHistogram request_latency_;
};

}  // namespace kiln::server
