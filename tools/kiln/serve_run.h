// One measured run of `kiln bench serve` (serve_bench.cc): the workloads
// submit requests to a ServeRun and step it until they finish; a run feeds
// them either to the engine in this thread (EngineRun, serve_bench.cc) or
// through an in-process `kiln serve` on loopback with streaming HTTP
// clients (HttpRun, serve_http_run.cc), and both report the same figures.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/engine/engine.h"
#include "tools/kiln/request_progress.h"

namespace kiln {

// One request of a run as the clock saw it; times in seconds from the run's start.
struct Trace {
  double due = 0;  // when it arrived (offline: 0; poisson: its arrival; prefix: when submitted)
  double first_token = -1, last_token = -1;
  int64_t generated = 0;
  int64_t engine_id = -1;
  int64_t output_len = 0;
  std::vector<int32_t> tokens;  // what it generated (prefix: the next turn's prompt)
  // HTTP: what the answer said (the engine's stats otherwise).
  int64_t prompt_tokens = 0, cached_prompt_tokens = 0;
  bool completed = false;
  std::string error;
};

struct RunFigures {
  std::string name;
  std::string transport = "in-process";  // or "http"
  double rate = 0;  // poisson: requests/s offered
  bool prefix_cache = true;
  int64_t requests = 0, completed = 0, prompt_tokens = 0, output_tokens = 0, cached_prompt_tokens = 0;
  double seconds = 0;
  double ttft_p50 = 0, ttft_p99 = 0, tpot_p50 = 0, tpot_p99 = 0;  // ms
  int64_t peak_kv_blocks = -1, kv_blocks_total = 0, preemptions = 0, steps = 0;  // peak -1: not seen (HTTP)
  int64_t prefix_hit_tokens = 0, prefix_queried_tokens = 0;

  double outputTps() const { return seconds > 0 ? double(output_tokens) / seconds : 0; }
  double totalTps() const { return seconds > 0 ? double(prompt_tokens + output_tokens) / seconds : 0; }
  double requestRate() const { return seconds > 0 ? double(completed) / seconds : 0; }
  double hitRate() const {
    return prefix_queried_tokens > 0 ? double(prefix_hit_tokens) / double(prefix_queried_tokens) : 0;
  }
  double peakKvUse() const { return kv_blocks_total > 0 ? double(peak_kv_blocks) / double(kv_blocks_total) : 0; }
  nlohmann::json toJson() const;
};

class ServeRun {
 public:
  using Clock = std::chrono::steady_clock;
  ServeRun(size_t capacity, bool progress, const std::string& name);
  virtual ~ServeRun() = default;

  double now() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }
  Trace& trace(size_t index) { return traces_[index]; }
  bool busy() const { return !in_flight_.empty(); }

  // Request `index`: `prompt` then exactly `output_len` tokens (EOS ignored),
  // due at `due`; `keep_tokens`: its trace keeps the generated ids.
  virtual Status submit(size_t index, std::vector<int32_t> prompt, int64_t output_len, double due,
                        bool keep_tokens) = 0;
  // Makes progress (one engine step, or a short wait for the server);
  // returns the requests that finished.
  virtual Result<std::vector<size_t>> step() = 0;
  virtual RunFigures figures(const std::string& name) = 0;

 protected:
  // TTFT and TPOT percentiles and the token counts of the traces.
  void traceFigures(RunFigures& f);

  std::vector<Trace> traces_;
  Clock::time_point start_;
  RequestProgress progress_;
  std::vector<size_t> in_flight_, submitted_;
  int64_t done_ = 0, output_tokens_ = 0;
};

// Where a workload's runs go: a fresh ServeRun for each.
class ServeTarget {
 public:
  virtual ~ServeTarget() = default;
  virtual std::unique_ptr<ServeRun> newRun(size_t capacity, bool progress, const std::string& name) = 0;
  virtual std::string transport() const = 0;
};

// Serves `engine` with an in-process `kiln serve` on a free loopback port;
// its runs are streaming HTTP clients, one thread a request. `max_requests`:
// the most requests in flight at once (queue and connection threads are
// sized for them). Without cpp-httplib: an error.
Result<std::unique_ptr<ServeTarget>> startHttpTarget(std::unique_ptr<Engine> engine, int64_t max_requests);

}  // namespace kiln
