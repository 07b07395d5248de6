#include "tools/kiln/serve_run.h"

#include <fmt/format.h>

#include "tools/kiln/serve_workload.h"

namespace kiln {

nlohmann::json RunFigures::toJson() const {
  nlohmann::json j = {{"name", name},
                      {"transport", transport},
                      {"prefix_cache", prefix_cache},
                      {"requests", requests},
                      {"completed", completed},
                      {"failed", requests - completed},
                      {"prompt_tokens", prompt_tokens},
                      {"output_tokens", output_tokens},
                      {"cached_prompt_tokens", cached_prompt_tokens},
                      {"seconds", seconds},
                      {"request_rate", requestRate()},
                      {"output_tps", outputTps()},
                      {"total_tps", totalTps()},
                      {"ttft_ms", {{"p50", ttft_p50}, {"p99", ttft_p99}}},
                      {"tpot_ms", {{"p50", tpot_p50}, {"p99", tpot_p99}}},
                      {"peak_kv_blocks", peak_kv_blocks >= 0 ? nlohmann::json(peak_kv_blocks) : nlohmann::json()},
                      {"kv_blocks_total", kv_blocks_total},
                      {"peak_kv_use", peak_kv_blocks >= 0 ? nlohmann::json(peakKvUse()) : nlohmann::json()},
                      {"preemptions", preemptions},
                      {"prefix_hit_tokens", prefix_hit_tokens},
                      {"prefix_queried_tokens", prefix_queried_tokens},
                      {"prefix_hit_rate", hitRate()},
                      {"steps", steps}};
  if (rate > 0) j["rate"] = rate;
  return j;
}

ServeRun::ServeRun(size_t capacity, bool progress, const std::string& name)
    : traces_(capacity), start_(Clock::now()),
      progress_(progress, int64_t(capacity), fmt::format("kiln bench serve: {} ", name)) {}

void ServeRun::traceFigures(RunFigures& f) {
  progress_.finish(done_, output_tokens_);
  f.seconds = now();
  std::vector<double> ttft, tpot;
  for (size_t index : submitted_) {
    const Trace& t = traces_[index];
    ++f.requests;
    f.prompt_tokens += t.prompt_tokens;
    f.cached_prompt_tokens += t.cached_prompt_tokens;
    f.output_tokens += t.generated;
    if (!t.completed) continue;
    ++f.completed;
    if (t.generated > 0) ttft.push_back((t.first_token - t.due) * 1e3);
    if (t.generated > 1) tpot.push_back((t.last_token - t.first_token) * 1e3 / double(t.generated - 1));
  }
  f.ttft_p50 = percentile(ttft, 50);
  f.ttft_p99 = percentile(ttft, 99);
  f.tpot_p50 = percentile(tpot, 50);
  f.tpot_p99 = percentile(tpot, 99);
}

#ifndef KILN_HAVE_SERVER
Result<std::unique_ptr<ServeTarget>> startHttpTarget(std::unique_ptr<Engine>, int64_t) {
  return makeError("--http needs kiln serve, which this kiln was built without (cpp-httplib was not found)");
}
#endif

}  // namespace kiln
