// kiln bench serve MODEL [--workload offline|poisson|prefix] [options]: many
// requests through the engine's scheduler, as a server would see them. The
// requests are drawn by serve_workload.h (random normal-token prompts;
// fixed or lognormal lengths; EOS ignored, so each request generates
// exactly its output length unless the context cuts it).
//
//   offline  every request submitted at once.
//   poisson  requests arrive at --rate R requests/s (exponential gaps) on the
//            wall clock: each is submitted when due while the engine keeps
//            stepping. A list of rates runs each; `sweep` first runs offline
//            and then 0.25, 0.5, 0.75 and 1.0 x its request rate. The highest
//            rate whose p99 TPOT stays under --tpot-slo-ms is reported.
//   prefix   C = requests / T conversations of T turns (--turns), run with the
//            prefix cache on and then off, each on a freshly opened engine.
//            Conversation c opens with system prompt c mod K (--system-prompts
//            K of --system-len S tokens each, shared by the conversations);
//            every turn appends a user message of --input-len tokens, and the
//            next turn's prompt is the previous prompt + its answer (the ids
//            the engine generated) + a new user message:
//              turn 0: [system][user 0]
//              turn 1: [system][user 0][answer 0][user 1]   ...
//            All conversations start at once; a turn is submitted when the
//            one before it finishes. A conversation whose next prompt would
//            not fit the context ends early (said on stderr).
//
// Per run: requests, output and total (prompt + output) tok/s over the run's
// wall time, TTFT (due -> first token) and TPOT ((last token - first token) /
// (generated - 1)) p50/p99 from timestamps taken in the token callback, peak
// KV pool use (blocks held by sequences, from metrics() after every step),
// preemptions, and the prefix-cache hit rate (metrics()' hit / queried
// tokens over the run). Before the measured runs a warm-up of
// min(requests, --max-sequences) short requests runs the shapes once.
// The table is printed last on stdout; --json writes the same figures.
//
// The defaults are sized for SmolLM2-135M on a CPU (16 requests, 64 in / 16
// out). The H200 runs (shared/BENCHMARKS.md "Workloads") set sizes
// through flags:
//   kiln bench serve DIR --device cuda --requests 1000 --input-len 1000 --output-len 1000
//       --max-sequences 256 --max-batch-tokens 8192 --peer hf --peer-requests 256
//   kiln bench serve DIR --device cuda --workload poisson --rate sweep --lengths lognormal
//       --requests 1000 --input-len 1000 --output-len 250 --max-sequences 256 --max-batch-tokens 8192
//   kiln bench serve DIR --device cuda --workload prefix --requests 1024 --turns 4
//       --system-prompts 4 --system-len 2048 --input-len 256 --output-len 256 --max-sequences 256
#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/artifact/manifest.h"
#include "runtime/engine/engine.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tools/kiln/commands.h"
#include "tools/kiln/request_progress.h"
#include "tools/kiln/serve_run.h"
#include "tools/kiln/serve_workload.h"

namespace kiln {
namespace {

using Clock = std::chrono::steady_clock;

// The published figure printed where no peer runs (shared/BENCHMARKS.md).
constexpr const char* kPublishedPeer = "published: TensorRT-LLM, Llama-3.1-8B FP8, 1xH200, offline 1000 in / 1000 out";
constexpr double kPublishedOutputTps = 17744;
// Fractions of the offline request rate `--rate sweep` runs.
constexpr double kSweepFractions[] = {0.25, 0.5, 0.75, 1.0};

struct ServeConfig {
  std::string workload = "offline";
  int64_t requests = 16;
  int64_t input_len = 64, output_len = 16;
  bool lognormal = false;
  uint64_t seed = 0;
  std::vector<double> rates;  // poisson
  bool sweep = false;
  double tpot_slo_ms = 50;
  int64_t turns = 4, system_len = 256, system_prompts = 2;  // prefix
  int64_t conversations = 0;
  std::string peer;  // "hf" or "none"; empty: the default once the backend is known
  int64_t peer_batch = 64, peer_requests = 0;
};

// Reads and checks every serve flag before anything is loaded.
Result<ServeConfig> serveConfigFrom(const CliArgs& args) {
  ServeConfig c;
  c.workload = args.get("workload").value_or("offline");
  if (c.workload != "offline" && c.workload != "poisson" && c.workload != "prefix")
    return makeError("--workload '{}': expected offline, poisson or prefix", c.workload);
  auto positive = [&](const char* flag, int64_t fallback, int64_t& out) -> Status {
    auto v = args.getInt(flag, fallback);
    if (!v.ok()) return v.error();
    if (*v < 1) return makeError("--{} {} is invalid: expected >= 1", flag, *v);
    out = *v;
    return Status::success();
  };
  KILN_RETURN_IF_ERROR(positive("requests", 16, c.requests));
  KILN_RETURN_IF_ERROR(positive("input-len", 64, c.input_len));
  KILN_RETURN_IF_ERROR(positive("output-len", 16, c.output_len));
  KILN_RETURN_IF_ERROR(positive("turns", 4, c.turns));
  KILN_RETURN_IF_ERROR(positive("system-len", 256, c.system_len));
  KILN_RETURN_IF_ERROR(positive("system-prompts", 2, c.system_prompts));
  KILN_RETURN_IF_ERROR(positive("peer-batch", 64, c.peer_batch));
  KILN_RETURN_IF_ERROR(positive("peer-requests", c.requests, c.peer_requests));
  const std::string lengths = args.get("lengths").value_or("fixed");
  if (lengths != "fixed" && lengths != "lognormal")
    return makeError("--lengths '{}': expected fixed or lognormal", lengths);
  c.lognormal = lengths == "lognormal";
  auto seed = args.getInt("seed", 0);
  if (!seed.ok()) return seed.error();
  if (*seed < 0) return makeError("--seed {} is invalid: expected >= 0", *seed);
  c.seed = uint64_t(*seed);
  auto slo = args.getDouble("tpot-slo-ms", 50);
  if (!slo.ok()) return slo.error();
  if (!(*slo > 0)) return makeError("--tpot-slo-ms {} is invalid: expected > 0", *slo);
  c.tpot_slo_ms = *slo;

  // Flags of one workload are an error with another, rather than ignored.
  auto only = [&](std::initializer_list<const char*> flags, const char* workload) -> Status {
    for (const char* flag : flags)
      if (args.has(flag) && c.workload != workload)
        return makeError("--{} is for --workload {}, not {}", flag, workload, c.workload);
    return Status::success();
  };
  KILN_RETURN_IF_ERROR(only({"rate", "tpot-slo-ms"}, "poisson"));
  KILN_RETURN_IF_ERROR(only({"turns", "system-len", "system-prompts"}, "prefix"));
  for (const char* flag : {"peer-model", "peer-batch", "peer-requests"})
    if (args.has(flag) && args.get("peer").value_or("") != "hf")
      return makeError("--{} is for --peer hf", flag);

  if (c.workload == "poisson") {
    const std::string rates = args.get("rate").value_or("4");
    if (rates == "sweep") {
      c.sweep = true;
    } else {
      for (size_t at = 0; at <= rates.size();) {
        const size_t comma = std::min(rates.find(',', at), rates.size());
        const std::string item = rates.substr(at, comma - at);
        char* end = nullptr;
        const double r = std::strtod(item.c_str(), &end);
        if (item.empty() || *end || !(r > 0) || !std::isfinite(r))
          return makeError("--rate '{}': expected requests/s > 0, a comma-separated list of them, or sweep", rates);
        c.rates.push_back(r);
        at = comma + 1;
      }
    }
  }
  if (c.workload == "prefix") {
    c.conversations = c.requests / c.turns;
    if (c.conversations < 1)
      return makeError("--requests {} is fewer than --turns {}: expected at least one conversation", c.requests,
                       c.turns);
  }
  if (auto peer = args.get("peer")) {
    if (*peer != "hf" && *peer != "none") return makeError("--peer '{}': kiln bench serve's peers are hf and none", *peer);
    if (*peer == "hf" && c.workload != "offline")
      return makeError("--peer hf runs the offline workload only, not {}", c.workload);
    c.peer = *peer;
  }
  return c;
}

// A run on the engine itself: submits requests, steps the engine,
// timestamps every token in its callback and samples the KV pool after
// every step.
class EngineRun : public ServeRun {
 public:
  EngineRun(Engine& engine, size_t capacity, bool progress, const std::string& name)
      : ServeRun(capacity, progress, name), engine_(engine), before_(engine.metrics()) {}

  Status submit(size_t index, std::vector<int32_t> prompt, int64_t output_len, double due, bool keep_tokens) override {
    GenerationRequest request;
    request.prompt_tokens = std::move(prompt);
    request.sampling.max_tokens = int(output_len);
    request.sampling.ignore_eos = true;
    Trace& t = traces_[index];
    t.due = due;
    t.output_len = output_len;
    auto id = engine_.submit(std::move(request), [this, index, keep_tokens](int64_t, int32_t token, std::string_view) {
      if (token < 0) return;  // text released at the end, no token
      Trace& t = traces_[index];
      const double at = now();
      if (t.generated == 0) t.first_token = at;
      t.last_token = at;
      ++t.generated;
      ++output_tokens_;
      if (keep_tokens) t.tokens.push_back(token);
    });
    if (!id.ok()) return makeError("request {}: {}", index, id.error().message);
    t.engine_id = *id;
    in_flight_.push_back(index);
    submitted_.push_back(index);
    return Status::success();
  }

  Result<std::vector<size_t>> step() override {
    KILN_RETURN_IF_ERROR(engine_.step());
    const EngineMetrics m = engine_.metrics();
    peak_kv_blocks_ = std::max(peak_kv_blocks_, m.kv_blocks_total - m.kv_blocks_free - m.kv_blocks_cached);
    std::vector<size_t> finished;
    std::erase_if(in_flight_, [&](size_t index) {
      const RequestStats* stats = engine_.stats(traces_[index].engine_id);
      if (stats && stats->finish == FinishReason::kRunning) return false;
      finished.push_back(index);
      return true;
    });
    done_ += int64_t(finished.size());
    progress_.update(done_, output_tokens_);
    if (!in_flight_.empty() && engine_.idle())
      return makeError("the engine is idle with {} requests unfinished", in_flight_.size());
    return finished;
  }

  RunFigures figures(const std::string& name) override {
    for (size_t index : submitted_) {
      Trace& t = traces_[index];
      const RequestStats* stats = engine_.stats(t.engine_id);
      if (!stats) continue;
      t.prompt_tokens = stats->prompt_tokens;
      t.cached_prompt_tokens = stats->cached_prompt_tokens;
      preemptions_ += stats->preemptions;
      const FinishReason r = stats->finish;
      t.completed = r == FinishReason::kLength || r == FinishReason::kStop || r == FinishReason::kEos;
    }
    RunFigures f;
    f.name = name;
    traceFigures(f);
    f.preemptions = preemptions_;
    const EngineMetrics after = engine_.metrics();
    f.kv_blocks_total = after.kv_blocks_total;
    f.peak_kv_blocks = peak_kv_blocks_;
    f.prefix_hit_tokens = after.prefix_hit_tokens - before_.prefix_hit_tokens;
    f.prefix_queried_tokens = after.prefix_queried_tokens - before_.prefix_queried_tokens;
    f.steps = after.steps - before_.steps;
    return f;
  }

 private:
  Engine& engine_;
  EngineMetrics before_;
  int64_t peak_kv_blocks_ = 0, preemptions_ = 0;
};

class EngineTarget : public ServeTarget {
 public:
  explicit EngineTarget(Engine& engine) : engine_(engine) {}
  std::unique_ptr<ServeRun> newRun(size_t capacity, bool progress, const std::string& name) override {
    return std::make_unique<EngineRun>(engine_, capacity, progress, name);
  }
  std::string transport() const override { return "in-process"; }

 private:
  Engine& engine_;
};

// The offline and poisson workloads' requests: prompts and output lengths.
struct RequestSet {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int64_t> output_lens;
};

// Lengths for `count` requests from `rng`, clamped to `context` (a prompt
// and its output fit together); `clamped` counts those cut.
void drawLengths(ServeRng& rng, const ServeConfig& c, int64_t count, int64_t context, std::vector<int64_t>& inputs,
                 std::vector<int64_t>& outputs, int64_t& clamped) {
  for (int64_t i = 0; i < count; ++i) {
    const int64_t in = drawLength(rng, c.input_len, c.lognormal, INT64_MAX);
    const int64_t out = drawLength(rng, c.output_len, c.lognormal, INT64_MAX);
    const int64_t fit_in = std::min(in, context - 1), fit_out = std::min(out, context - fit_in);
    clamped += fit_in != in || fit_out != out;
    inputs.push_back(fit_in);
    outputs.push_back(fit_out);
  }
}

RequestSet drawRequests(ServeRng rng, const ServeConfig& c, std::span<const int32_t> vocabulary, int64_t context,
                        int64_t& clamped) {
  std::vector<int64_t> inputs;
  RequestSet set;
  drawLengths(rng, c, c.requests, context, inputs, set.output_lens, clamped);
  for (int64_t in : inputs) set.prompts.push_back(drawTokens(rng, vocabulary, in));
  return set;
}

// Steps until every submitted request is done (offline, and the tail of the others).
Status drain(ServeRun& run) {
  while (run.busy()) {
    auto finished = run.step();
    if (!finished.ok()) return finished.error();
  }
  return Status::success();
}

Result<RunFigures> runOffline(ServeTarget& target, const RequestSet& set, bool progress, const std::string& name) {
  auto owned = target.newRun(set.prompts.size(), progress, name);
  ServeRun& run = *owned;
  for (size_t i = 0; i < set.prompts.size(); ++i)
    KILN_RETURN_IF_ERROR(run.submit(i, set.prompts[i], set.output_lens[i], 0.0, false));
  KILN_RETURN_IF_ERROR(drain(run));
  return run.figures(name);
}

Result<RunFigures> runPoisson(ServeTarget& target, const RequestSet& set, double rate, ServeRng rng, bool progress) {
  const std::string name = fmt::format("poisson {:.4g} req/s", rate);
  const std::vector<double> arrivals = poissonArrivals(rng, int64_t(set.prompts.size()), rate);
  auto owned = target.newRun(set.prompts.size(), progress, name);
  ServeRun& run = *owned;
  for (size_t next = 0; next < arrivals.size() || run.busy();) {
    const double now = run.now();
    for (; next < arrivals.size() && arrivals[next] <= now; ++next)
      KILN_RETURN_IF_ERROR(run.submit(next, set.prompts[next], set.output_lens[next], arrivals[next], false));
    if (run.busy()) {
      auto finished = run.step();
      if (!finished.ok()) return finished.error();
    } else if (next < arrivals.size()) {
      std::this_thread::sleep_for(std::chrono::duration<double>(arrivals[next] - now));
    }
  }
  RunFigures f = run.figures(name);
  f.rate = rate;
  return f;
}

// The prefix workload's fixed parts: system prompts, user messages and
// output lengths, drawn before the run (the answers come from the engine).
struct Conversations {
  std::vector<std::vector<int32_t>> system_prompts;      // [K]
  std::vector<std::vector<std::vector<int32_t>>> users;  // [C][T]
  std::vector<std::vector<int64_t>> output_lens;         // [C][T]
};

Conversations drawConversations(ServeRng rng, const ServeConfig& c, std::span<const int32_t> vocabulary,
                                int64_t context, int64_t& clamped) {
  Conversations conv;
  for (int64_t k = 0; k < c.system_prompts; ++k)
    conv.system_prompts.push_back(drawTokens(rng, vocabulary, std::min(c.system_len, context - 1)));
  for (int64_t i = 0; i < c.conversations; ++i) {
    std::vector<int64_t> inputs, outputs;
    drawLengths(rng, c, c.turns, context, inputs, outputs, clamped);
    conv.users.emplace_back();
    for (int64_t in : inputs) conv.users.back().push_back(drawTokens(rng, vocabulary, in));
    conv.output_lens.push_back(std::move(outputs));
  }
  return conv;
}

Result<RunFigures> runPrefix(ServeTarget& target, int64_t context, const ServeConfig& c, const Conversations& conv,
                             bool progress, int64_t& ended_early) {
  const std::string name = "prefix";
  const int64_t turns = c.turns;
  auto owned = target.newRun(size_t(c.conversations * turns), progress, name);
  ServeRun& run = *owned;
  std::vector<std::vector<int32_t>> history(size_t(c.conversations));  // the last prompt of each
  auto submitTurn = [&](int64_t i, int64_t t) -> Status {
    std::vector<int32_t>& h = history[size_t(i)];
    if (t == 0) h = conv.system_prompts[size_t(i % c.system_prompts)];
    const auto& user = conv.users[size_t(i)][size_t(t)];
    h.insert(h.end(), user.begin(), user.end());
    const int64_t out = conv.output_lens[size_t(i)][size_t(t)];
    if (int64_t(h.size()) + out > context) {
      ++ended_early;
      return Status::success();
    }
    return run.submit(size_t(i * turns + t), h, out, run.now(), true);
  };
  for (int64_t i = 0; i < c.conversations; ++i) KILN_RETURN_IF_ERROR(submitTurn(i, 0));
  while (run.busy()) {
    auto finished = run.step();
    if (!finished.ok()) return finished.error();
    for (size_t index : *finished) {
      const int64_t i = int64_t(index) / turns, t = int64_t(index) % turns;
      if (t + 1 >= turns) continue;
      const std::vector<int32_t>& answer = run.trace(index).tokens;
      history[size_t(i)].insert(history[size_t(i)].end(), answer.begin(), answer.end());
      KILN_RETURN_IF_ERROR(submitTurn(i, t + 1));
    }
  }
  return run.figures(name);
}

// A warm-up of the run's shapes (the first prompts' lengths, a few tokens
// each, other token ids) so first-use costs (page faults, GEMM plans, graph
// captures) stay out of the figures.
Status warmUp(Engine& engine, ServeRng rng, std::span<const int32_t> vocabulary, int64_t count, int64_t input_len) {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < count; ++i) {
    GenerationRequest r;
    r.prompt_tokens = drawTokens(rng, vocabulary, std::min(input_len, engine.contextLength() - 8));
    r.sampling.max_tokens = 4;
    r.sampling.ignore_eos = true;
    auto id = engine.submit(std::move(r), {});
    if (!id.ok()) return makeError("warm-up: {}", id.error().message);
  }
  return engine.runUntilIdle();
}

std::vector<int32_t> normalTokens(const Tokenizer& tokenizer) {
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < tokenizer.vocabSize(); ++id)
    if (tokenizer.tokenType(id) == TokenType::kNormal) ids.push_back(id);
  return ids;
}

// The KV tokens the `max_sequences` longest requests need at once (what a
// default pool must hold so that nothing is preempted for want of it), with
// a block's slack each.
int64_t kvTokensFor(std::vector<int64_t> request_tokens, int64_t max_sequences) {
  std::sort(request_tokens.rbegin(), request_tokens.rend());
  int64_t total = 0;
  for (size_t i = 0; i < request_tokens.size() && int64_t(i) < max_sequences; ++i) total += request_tokens[i] + 32;
  return total + 256;
}

// The default KV pool: what the workload's longest `max_sequences` requests
// (prefix: conversations at their last turn, and the system prompts) need
// at once, from the same draws the runs make, before the context clamps them
// (it only shortens them).
int64_t defaultKvTokens(const ServeConfig& c, int64_t max_sequences) {
  constexpr int64_t kUnbounded = int64_t(1) << 40;
  const ServeRng root(c.seed);
  const int32_t any_token[] = {0};  // the draws consume the generator alike for any vocabulary
  int64_t unused = 0;
  std::vector<int64_t> totals;
  if (c.workload == "prefix") {
    const Conversations conv = drawConversations(root.fork(0), c, any_token, kUnbounded, unused);
    for (size_t i = 0; i < conv.users.size(); ++i) {
      int64_t total = c.system_len;
      for (size_t t = 0; t < conv.users[i].size(); ++t)
        total += int64_t(conv.users[i][t].size()) + conv.output_lens[i][t];
      totals.push_back(total);
    }
    return kvTokensFor(totals, max_sequences) + c.system_prompts * c.system_len;
  }
  // offline: fork 0; poisson: fork r + 1 for rate r (a sweep's offline run is fork 0).
  const size_t forks = 1 + (c.sweep ? std::size(kSweepFractions) : c.rates.size());
  int64_t most = 0;
  for (size_t f = 0; f < forks; ++f) {
    const RequestSet set = drawRequests(root.fork(f), c, any_token, kUnbounded, unused);
    totals.clear();
    for (size_t i = 0; i < set.prompts.size(); ++i) totals.push_back(int64_t(set.prompts[i].size()) + set.output_lens[i]);
    most = std::max(most, kvTokensFor(totals, max_sequences));
  }
  return most;
}

std::string cell(double v, const char* format = "{:.1f}") { return v > 0 ? fmt::format(fmt::runtime(format), v) : "-"; }

void printRow(const RunFigures& f) {
  const std::string kv = f.peak_kv_blocks < 0 ? std::string("-")
                                              : fmt::format("{}/{} ({:.0f}%)", f.peak_kv_blocks, f.kv_blocks_total,
                                                            100 * f.peakKvUse());
  std::printf("| %s | %lld/%lld | %.1f | %.1f | %.1f | %.1f | %s | %s | %s | %lld | %.1f%% |\n", f.name.c_str(),
              (long long)f.completed, (long long)f.requests, f.outputTps(), f.totalTps(), f.ttft_p50, f.ttft_p99,
              cell(f.tpot_p50, "{:.2f}").c_str(), cell(f.tpot_p99, "{:.2f}").c_str(), kv.c_str(),
              (long long)f.preemptions, 100 * f.hitRate());
}

// --http: each HTTP run against the in-process run of the same name.
struct HttpOverhead {
  std::string run;
  double output_tps_ratio = 0;  // http / in-process
  double ttft_p50_added_ms = 0, tpot_p50_added_ms = 0;
  nlohmann::json toJson() const {
    return {{"run", run},
            {"output_tps_ratio", output_tps_ratio},
            {"overhead", 1 - output_tps_ratio},
            {"ttft_p50_added_ms", ttft_p50_added_ms},
            {"tpot_p50_added_ms", tpot_p50_added_ms}};
  }
};

std::vector<HttpOverhead> httpOverheads(const std::vector<RunFigures>& runs) {
  std::vector<HttpOverhead> out;
  for (const RunFigures& h : runs) {
    if (h.transport != "http") continue;
    const std::string base = h.name.substr(0, h.name.size() - std::string_view(" http").size());
    for (const RunFigures& r : runs)
      if (r.transport != "http" && r.name == base && r.outputTps() > 0)
        out.push_back({base, h.outputTps() / r.outputTps(), h.ttft_p50 - r.ttft_p50, h.tpot_p50 - r.tpot_p50});
  }
  return out;
}

}  // namespace

int serveBenchCommand(const CliArgs& args) {
  if (args.positionals().size() != 2) return fail("kiln bench serve needs one MODEL");
  auto config = serveConfigFrom(args);
  if (!config.ok()) return fail(config.error().message);
  ServeConfig& c = *config;
  auto options = engineOptionsFrom(args);
  if (!options.ok()) return fail(options.error().message);
  const bool progress = !args.has("quiet");
  options->progress = progress;
  options->threads = options->threads > 0 ? options->threads : int(std::max(1u, std::thread::hardware_concurrency()));
  const int64_t concurrent = c.workload == "prefix" ? c.conversations : c.requests;
  options->max_sequences = int(std::min<int64_t>(concurrent, 256));
  options->max_batch_tokens = 2048;
  options->kv_cache_tokens = defaultKvTokens(c, options->max_sequences);
  if (Status batching = batchingOptionsFrom(args, *options); !batching.ok()) return fail(batching.error().message);
  auto compile_flags = compileFlagsFrom(args);
  if (!compile_flags.ok()) return fail(compile_flags.error().message);

  // prefix: the cache on, then off, each on its own engine; the others as
  // --no-prefix-cache says.
  std::vector<bool> cache_modes =
      c.workload == "prefix" ? std::vector<bool>{true, false} : std::vector<bool>{options->prefix_cache};
  std::vector<RunFigures> runs;
  std::optional<Manifest> manifest;
  std::string backend;
  int64_t context = 0, clamped = 0, ended_early = 0, page_size = 0;
  std::optional<double> max_rate_under_slo;
  RequestSet offline_set;  // the peer's requests
  // --http: each engine's runs once in this thread and once through an
  // in-process kiln serve, each on a freshly opened engine (the same
  // requests: a second run on one engine would hit its prefix cache).
  const std::vector<bool> transports = args.has("http") ? std::vector<bool>{false, true} : std::vector<bool>{false};
  if (args.has("http")) std::signal(SIGPIPE, SIG_IGN);  // a failed write is the server's error, not a dead process
  std::vector<double> sweep_rates;  // a sweep's rates, from the first offline run
  for (bool cache : cache_modes) {
    for (bool http : transports) {
      EngineOptions opts = *options;
      opts.prefix_cache = cache;
      auto engine_or = openEngine(args.positionals()[1], opts, *compile_flags);
      if (!engine_or.ok()) return fail(engine_or.error().message);
      std::unique_ptr<Engine> engine_owned = engine_or.take();
      Engine& engine = *engine_owned;
      backend = engine.backendName();
      manifest = engine.manifest();
      context = engine.contextLength();
      page_size = manifest->kv_cache.page_size;
      const std::vector<int32_t> vocabulary = normalTokens(engine.tokenizer());
      if (vocabulary.empty()) return fail("the vocabulary has no normal tokens to draw prompts from");
      if (!c.lognormal && c.workload != "prefix" && c.input_len + c.output_len > context)
        return fail(fmt::format("--input-len {} + --output-len {} exceed the context of {} tokens", c.input_len,
                                c.output_len, context));
      std::fprintf(stderr,
                   "kiln bench serve: %s on %s (%d threads), %d sequences, %lld batch tokens, KV pool %lld tokens%s%s\n",
                   c.workload.c_str(), backend.c_str(), opts.threads, opts.max_sequences,
                   (long long)opts.max_batch_tokens, (long long)opts.kv_cache_tokens,
                   c.workload == "prefix" ? (cache ? ", prefix cache on" : ", prefix cache off") : "",
                   http ? ", through HTTP" : "");
      const ServeRng root(c.seed);
      if (Status warm = warmUp(engine, root.fork(1000), vocabulary, std::min<int64_t>(concurrent, opts.max_sequences),
                               c.workload == "prefix" ? c.system_len + c.input_len : c.input_len);
          !warm.ok())
        return fail(warm.error().message);
      std::unique_ptr<ServeTarget> target;
      if (http) {
        auto started = startHttpTarget(std::move(engine_owned), concurrent);
        if (!started.ok()) return fail(started.error().message);
        target = started.take();
      } else {
        target = std::make_unique<EngineTarget>(engine);
      }
      const std::string suffix = http ? " http" : "";

      if (c.workload == "prefix") {
        clamped = 0;
        const Conversations conv = drawConversations(root.fork(0), c, vocabulary, context, clamped);
        ended_early = 0;
        auto f = runPrefix(*target, context, c, conv, progress, ended_early);
        if (!f.ok()) return fail(f.error().message);
        f->name = (cache ? "prefix cache on" : "prefix cache off") + suffix;
        f->prefix_cache = cache;
        runs.push_back(*f);
        continue;
      }
      // offline, and the offline run a poisson sweep scales its rates from.
      std::vector<double> rates = c.rates;
      if (c.workload == "offline" || c.sweep) {
        clamped = 0;
        offline_set = drawRequests(root.fork(0), c, vocabulary, context, clamped);
        auto f = runOffline(*target, offline_set, progress, "offline" + suffix);
        if (!f.ok()) return fail(f.error().message);
        runs.push_back(*f);
        if (c.sweep && sweep_rates.empty())
          for (double fraction : kSweepFractions) sweep_rates.push_back(fraction * f->requestRate());
        if (c.sweep) rates = sweep_rates;
      }
      // Each rate its own requests (fork r + 1): a rerun of the same prompts would hit the prefix cache.
      for (size_t r = 0; r < rates.size(); ++r) {
        const RequestSet set = drawRequests(root.fork(r + 1), c, vocabulary, context, clamped);
        auto f = runPoisson(*target, set, rates[r], root.fork(2000 + r), progress);
        if (!f.ok()) return fail(f.error().message);
        f->name += suffix;
        runs.push_back(*f);
        if (!http && f->completed == f->requests && f->tpot_p99 <= c.tpot_slo_ms)
          max_rate_under_slo = std::max(max_rate_under_slo.value_or(0.0), rates[r]);
      }
    }
  }
  if (clamped > 0) std::fprintf(stderr, "kiln bench serve: %lld requests' lengths cut to the context of %lld tokens\n",
                                (long long)clamped, (long long)context);
  if (ended_early > 0)
    std::fprintf(stderr, "kiln bench serve: %lld conversations ended early: their next turn would not fit the context\n",
                 (long long)ended_early);

  // The peer, after kiln's engine is closed (its weights and KV pool would share the card).
  const bool on_cuda = backend.rfind("cuda", 0) == 0;
  if (c.peer.empty())
    c.peer = on_cuda && c.workload == "offline" && manifest->model.source_format != "gguf" ? "hf" : "none";
  std::optional<nlohmann::json> peer;
  if (c.peer == "hf") {
    std::string checkpoint = options->model_source.empty() ? manifest->model.source : options->model_source;
    if (auto peer_model = args.get("peer-model")) checkpoint = *peer_model;
    const size_t n = size_t(std::min<int64_t>(c.peer_requests, int64_t(offline_set.prompts.size())));
    nlohmann::json input = {
        {"prompts", std::vector<std::vector<int32_t>>(offline_set.prompts.begin(), offline_set.prompts.begin() + n)},
        {"output_lens", std::vector<int64_t>(offline_set.output_lens.begin(), offline_set.output_lens.begin() + n)}};
    std::fprintf(stderr, "kiln bench serve: Hugging Face transformers on %s, %zu requests in static batches of %lld...\n",
                 checkpoint.c_str(), n, (long long)c.peer_batch);
    auto figures = runPeerScript("hf_serve_bench.py", "--requests", input,
                                 fmt::format("--model '{}' --batch {}", checkpoint, c.peer_batch), "output_tps",
                                 "it needs python3 with torch, transformers and a GPU");
    if (!figures.ok()) return fail(figures.error().message);
    peer = *figures;
  }

  // The report: what ran, then the table last.
  const std::string lengths =
      fmt::format("{} {} in / {} out", c.lognormal ? "lognormal (sigma 0.5) lengths around" : "fixed lengths",
                  c.input_len, c.output_len);
  const std::string shape =
      c.workload == "prefix"
          ? fmt::format("{} conversations of {} turns over {} system prompts of {} tokens, each turn a user message "
                        "and an answer of {}",
                        c.conversations, c.turns, c.system_prompts, c.system_len, lengths)
          : fmt::format("{} requests, {}", c.requests, lengths);
  std::printf("\nkiln bench serve %s: %s, device %s, %d threads; %s; prompts of random normal-token ids, seed %llu; "
              "%d sequences, %lld batch tokens, KV pool %lld blocks of %lld tokens\n",
              c.workload.c_str(), manifest->model.source.c_str(), backend.c_str(), options->threads, shape.c_str(),
              (unsigned long long)c.seed, options->max_sequences, (long long)options->max_batch_tokens,
              (long long)runs.front().kv_blocks_total, (long long)page_size);
  std::optional<double> prefix_speedup;
  // In-process runs: [on, off], or with --http [on, on http, off, off http].
  const size_t off = runs.size() == 4 ? 2 : 1;
  if (c.workload == "prefix" && runs.size() > off && runs[off].outputTps() > 0) {
    prefix_speedup = runs[0].outputTps() / runs[off].outputTps();
    std::printf("prefix cache: %.2fx the output tok/s with it on (hit rate %.1f%% on, %.1f%% off)\n", *prefix_speedup,
                100 * runs[0].hitRate(), 100 * runs[off].hitRate());
  }
  if (c.workload == "poisson") {
    if (max_rate_under_slo)
      std::printf("highest rate with p99 TPOT under %g ms: %.4g req/s\n", c.tpot_slo_ms, *max_rate_under_slo);
    else
      std::printf("no rate kept p99 TPOT under %g ms\n", c.tpot_slo_ms);
  }
  std::printf("| run | requests | output tok/s | total tok/s | TTFT p50 ms | TTFT p99 ms | TPOT p50 ms | TPOT p99 ms | "
              "peak KV blocks | preemptions | prefix hit |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const RunFigures& f : runs) printRow(f);
  const std::vector<HttpOverhead> overheads = httpOverheads(runs);
  for (const HttpOverhead& o : overheads)
    std::printf("| HTTP / in-process, %s | | %.3f | | %+.1f | | %+.2f | | | | |\n", o.run.c_str(), o.output_tps_ratio,
                o.ttft_p50_added_ms, o.tpot_p50_added_ms);
  for (const HttpOverhead& o : overheads)
    std::fprintf(stderr, "kiln bench serve: HTTP overhead, %s: %.1f%% of the output tok/s\n", o.run.c_str(),
                 100 * (1 - o.output_tps_ratio));
  if (peer) {
    const double theirs = (*peer)["output_tps"].get<double>();
    std::printf("| HF transformers, static batches of %lld (%s) | %lld | %.1f | %.1f | - | - | - | - | - | - | - |\n",
                (long long)c.peer_batch, peer->value("card", std::string("?")).c_str(),
                (long long)peer->value("requests", int64_t(0)), theirs, peer->value("total_tps", 0.0));
    if (theirs > 0) std::printf("| kiln / HF | | %.2f | | | | | | | | |\n", runs.front().outputTps() / theirs);
  } else {
    std::printf("| %s (BENCHMARKS.md) | 1000 | %.0f | - | - | - | - | - | - | - | - |\n", kPublishedPeer,
                kPublishedOutputTps);
  }

  if (auto path = args.get("json")) {
    nlohmann::json out = {{"workload", c.workload},
                          {"model", manifest->model.source},
                          {"device", backend},
                          {"threads", options->threads},
                          {"prompts", "random ids of the vocabulary's normal tokens"},
                          {"lengths", c.lognormal ? "lognormal" : "fixed"},
                          {"lognormal_sigma", kLognormalSigma},
                          {"input_len", c.input_len},
                          {"output_len", c.output_len},
                          {"requests", c.requests},
                          {"seed", c.seed},
                          {"context", context},
                          {"clamped_requests", clamped},
                          {"engine",
                           {{"max_sequences", options->max_sequences},
                            {"max_batch_tokens", options->max_batch_tokens},
                            {"kv_cache_tokens", options->kv_cache_tokens},
                            {"gpu_memory_fraction", options->gpu_memory_fraction},
                            {"page_size", page_size}}}};
    nlohmann::json list = nlohmann::json::array();
    for (const RunFigures& f : runs) list.push_back(f.toJson());
    out["runs"] = std::move(list);
    if (args.has("http")) {
      nlohmann::json http = nlohmann::json::array();
      for (const HttpOverhead& o : overheads) http.push_back(o.toJson());
      out["http_overhead"] = std::move(http);
    }
    if (c.workload == "poisson") {
      out["tpot_slo_ms"] = c.tpot_slo_ms;
      out["max_rate_under_slo"] = max_rate_under_slo ? nlohmann::json(*max_rate_under_slo) : nlohmann::json();
    }
    if (c.workload == "prefix") {
      out["prefix"] = {{"conversations", c.conversations},  {"turns", c.turns},
                       {"system_prompts", c.system_prompts}, {"system_len", c.system_len},
                       {"ended_early", ended_early},
                       {"speedup", prefix_speedup ? nlohmann::json(*prefix_speedup) : nlohmann::json()}};
    }
    if (peer) out["peer"] = {{"name", "hf"}, {"batch", c.peer_batch}, {"figures", *peer}};
    else
      out["published"] = {{"source", "BENCHMARKS.md"}, {"label", kPublishedPeer}, {"output_tps", kPublishedOutputTps}};
    std::ofstream(*path) << out.dump(2) << "\n";
  }
  return 0;
}

}  // namespace kiln
