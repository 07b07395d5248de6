#include "runtime/server/prometheus_metrics.h"

#include <gtest/gtest.h>

namespace kiln::server {
namespace {

bool contains(const std::string& text, const std::string& line) { return text.find(line) != std::string::npos; }

TEST(PrometheusMetricsTest, GaugesCountersAndHistograms) {
  PrometheusMetrics metrics;
  EngineSnapshot snapshot;
  snapshot.engine.waiting = 2;
  snapshot.queued_submissions = 1;
  snapshot.requests_in_flight = 5;
  snapshot.engine.kv_blocks_total = 512;
  snapshot.engine.kv_blocks_free = 500;
  snapshot.engine.kv_blocks_cached = 12;
  snapshot.engine.prefix_queried_tokens = 100;
  snapshot.engine.prefix_hit_tokens = 25;
  metrics.setSnapshot(snapshot);
  RequestStats stats;
  stats.prompt_tokens = 10;
  stats.generated_tokens = 11;
  stats.queue_seconds = 0.01;
  stats.prefill_seconds = 0.02;  // TTFT 0.03 s: the 0.05 bucket
  stats.decode_seconds = 0.2;    // TPOT 0.02 s
  stats.finish = FinishReason::kLength;
  metrics.recordFinish(stats);
  metrics.recordRejected("queue_full");

  const std::string text = metrics.render();
  EXPECT_TRUE(contains(text, "# TYPE kiln_queue_depth gauge\nkiln_queue_depth 3\n")) << text;
  EXPECT_TRUE(contains(text, "kiln_requests_running 5\n"));
  EXPECT_TRUE(contains(text, "kiln_kv_blocks_total 512\n"));
  EXPECT_TRUE(contains(text, "kiln_kv_blocks_free 500\n"));
  EXPECT_TRUE(contains(text, "kiln_kv_blocks_cached 12\n"));
  EXPECT_TRUE(contains(text, "kiln_kv_blocks_used 0\n"));
  EXPECT_TRUE(contains(text, "kiln_prefix_cache_hit_rate 0.25\n"));
  EXPECT_TRUE(contains(text, "kiln_generated_tokens_total 11\n"));
  EXPECT_TRUE(contains(text, "kiln_requests_finished_total{finish_reason=\"length\"} 1\n"));
  EXPECT_TRUE(contains(text, "kiln_requests_finished_total{finish_reason=\"stop\"} 0\n"));
  EXPECT_TRUE(contains(text, "kiln_requests_rejected_total{reason=\"queue_full\"} 1\n"));
  EXPECT_TRUE(contains(text, "kiln_time_to_first_token_seconds_bucket{le=\"0.025\"} 0\n"));
  EXPECT_TRUE(contains(text, "kiln_time_to_first_token_seconds_bucket{le=\"0.05\"} 1\n"));
  EXPECT_TRUE(contains(text, "kiln_time_to_first_token_seconds_bucket{le=\"+Inf\"} 1\n"));
  EXPECT_TRUE(contains(text, "kiln_time_to_first_token_seconds_count 1\n"));
  EXPECT_TRUE(contains(text, "kiln_time_per_output_token_seconds_bucket{le=\"0.025\"} 1\n"));
  EXPECT_TRUE(contains(text, "kiln_time_per_output_token_seconds_bucket{le=\"0.01\"} 0\n"));
}

}  // namespace
}  // namespace kiln::server
