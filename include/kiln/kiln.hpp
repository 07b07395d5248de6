// kiln's C++ API: header-only RAII classes over the C API (kiln/kiln.h), so
// the library's ABI stays the C one. Failures throw kiln::api::Error with
// the C status and message. Threading is the C API's: one Engine is used by
// one thread at a time, and step() is what drives it.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kiln/kiln.h"

namespace kiln::api {

class Error : public std::runtime_error {
 public:
  Error(kiln_status status, const std::string& message) : std::runtime_error(message), status_(status) {}
  kiln_status status() const { return status_; }

 private:
  kiln_status status_;
};

inline void check(kiln_status status) {
  if (status != KILN_OK) throw Error(status, kiln_last_error());
}

struct EngineOptions {
  std::string device = "auto";  // cpu, cuda or auto
  int threads = 0;              // 0 = every core
  int max_sequences = 16;
  int64_t max_batch_tokens = 512;
  int64_t kv_cache_tokens = 0;  // 0 = 8192
  int64_t max_context = 0;      // 0 = the model's
  bool prefix_cache = true;
  bool progress = false;
};

struct SamplingParams {
  float temperature = 0.0f;  // 0 = greedy
  int top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  uint64_t seed = 0;
  int max_tokens = 256;
  bool ignore_eos = false;
  std::vector<std::string> stop;
  int logprobs = -1;  // -1: none; 0 to 20: each token's logprob and that many alternatives
};

struct Message {
  std::string role;
  std::string content;
};

// Plain text, or chat: `messages`, or `text` as one user message when chat.
struct Prompt {
  std::string text;
  std::vector<Message> messages;
  bool chat = false;
};

// Output since the last poll.
// One token's log probability and its most likely alternatives (id, logprob).
struct TokenLogprobs {
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;
};

struct Chunk {
  std::string text;
  std::vector<int32_t> tokens;
  kiln_finish_reason finish = KILN_FINISH_RUNNING;
  std::vector<TokenLogprobs> logprobs;  // one per token, when SamplingParams::logprobs >= 0
  bool finished() const { return finish != KILN_FINISH_RUNNING; }
};

struct Completion {
  std::string text;
  std::vector<int32_t> tokens;
  std::vector<TokenLogprobs> logprobs;  // one per token, when SamplingParams::logprobs >= 0
  kiln_finish_reason finish = KILN_FINISH_RUNNING;
  kiln_request_stats stats{};  // stats.error is empty here (copied out as `error`)
  std::string error;
};

class Engine {
 public:
  explicit Engine(const std::string& model_path, const EngineOptions& options = {}) {
    kiln_engine_options o;
    kiln_engine_options_init(&o);
    o.device = options.device.c_str();
    o.threads = options.threads;
    o.max_sequences = options.max_sequences;
    o.max_batch_tokens = options.max_batch_tokens;
    o.kv_cache_tokens = options.kv_cache_tokens;
    o.max_context = options.max_context;
    o.prefix_cache = options.prefix_cache ? 1 : 0;
    o.progress = options.progress ? 1 : 0;
    engine_ = kiln_engine_create(model_path.c_str(), &o);
    if (engine_ == nullptr) throw Error(kiln_last_status(), kiln_last_error());
  }
  ~Engine() { kiln_engine_destroy(engine_); }
  Engine(Engine&& other) noexcept : engine_(std::exchange(other.engine_, nullptr)) {}
  Engine& operator=(Engine&& other) noexcept {
    if (this != &other) {
      kiln_engine_destroy(engine_);
      engine_ = std::exchange(other.engine_, nullptr);
    }
    return *this;
  }
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request; its output comes through poll() (and `callback`, if
  // given, inside step()).
  int64_t submit(const Prompt& prompt, const SamplingParams& params = {}, kiln_token_callback callback = nullptr,
                 void* user_data = nullptr) {
    std::vector<kiln_message> messages;
    for (const Message& m : prompt.messages) messages.push_back({m.role.c_str(), m.content.c_str()});
    kiln_prompt p;
    kiln_prompt_init(&p);
    p.text = prompt.text.c_str();
    p.messages = messages.data();
    p.num_messages = messages.size();
    p.chat = prompt.chat ? 1 : 0;
    std::vector<const char*> stop;
    for (const std::string& s : params.stop) stop.push_back(s.c_str());
    kiln_sampling_params s;
    kiln_sampling_params_init(&s);
    s.temperature = params.temperature;
    s.top_k = params.top_k;
    s.top_p = params.top_p;
    s.min_p = params.min_p;
    s.repetition_penalty = params.repetition_penalty;
    s.frequency_penalty = params.frequency_penalty;
    s.presence_penalty = params.presence_penalty;
    s.seed = params.seed;
    s.max_tokens = params.max_tokens;
    s.ignore_eos = params.ignore_eos ? 1 : 0;
    s.stop = stop.data();
    s.num_stop = stop.size();
    s.logprobs = params.logprobs;
    int64_t id = -1;
    check(kiln_submit(engine_, &p, &s, callback, user_data, &id));
    return id;
  }

  // One scheduler iteration; true when the engine is idle afterwards.
  bool step() {
    int idle = 0;
    check(kiln_step(engine_, &idle));
    return idle != 0;
  }
  void runUntilIdle() { check(kiln_run_until_idle(engine_)); }

  Chunk poll(int64_t id) {
    kiln_poll_result r{};
    r.struct_size = sizeof(r);
    check(kiln_poll(engine_, id, &r));
    Chunk chunk{std::string(r.text, r.text_len), std::vector<int32_t>(r.tokens, r.tokens + r.num_tokens), r.finish, {}};
    if (r.token_logprobs)
      for (size_t i = 0; i < r.num_tokens; ++i) {
        TokenLogprobs t{r.token_logprobs[i], {}};
        for (size_t j = 0; j < r.top_n; ++j)
          t.top.emplace_back(r.top_ids[i * r.top_n + j], r.top_logprobs[i * r.top_n + j]);
        chunk.logprobs.push_back(std::move(t));
      }
    return chunk;
  }
  void cancel(int64_t id) { check(kiln_cancel(engine_, id)); }
  void release(int64_t id) { check(kiln_release(engine_, id)); }

  kiln_request_stats stats(int64_t id, std::string* error = nullptr) {
    kiln_request_stats s{};
    s.struct_size = sizeof(s);
    check(kiln_request_stats_get(engine_, id, &s));
    if (error) *error = s.error ? s.error : "";
    s.error = "";
    return s;
  }
  kiln_engine_metrics metrics() {
    kiln_engine_metrics m{};
    m.struct_size = sizeof(m);
    check(kiln_engine_metrics_get(engine_, &m));
    return m;
  }
  int64_t contextLength() const { return kiln_context_length(engine_); }

  // Runs the prompts together (batched by the engine) to their ends and
  // releases them; the completions come back in the prompts' order. Other
  // requests in the engine step along and keep their output for poll().
  std::vector<Completion> generate(const std::vector<Prompt>& prompts, const SamplingParams& params = {}) {
    std::vector<int64_t> ids;
    std::vector<Completion> out(prompts.size());
    try {
      for (const Prompt& p : prompts) ids.push_back(submit(p, params));
      size_t running = ids.size();
      for (bool idle = false; running > 0;) {
        if (idle) throw Error(KILN_ERROR_INTERNAL, "the engine went idle with requests unfinished");
        idle = step();
        for (size_t i = 0; i < ids.size(); ++i) {
          if (out[i].finish != KILN_FINISH_RUNNING) continue;
          Chunk chunk = poll(ids[i]);
          out[i].text += chunk.text;
          out[i].tokens.insert(out[i].tokens.end(), chunk.tokens.begin(), chunk.tokens.end());
          out[i].logprobs.insert(out[i].logprobs.end(), chunk.logprobs.begin(), chunk.logprobs.end());
          out[i].finish = chunk.finish;
          if (chunk.finished()) --running;
        }
      }
      for (size_t i = 0; i < ids.size(); ++i) out[i].stats = stats(ids[i], &out[i].error);
    } catch (...) {
      for (int64_t id : ids) kiln_release(engine_, id);
      throw;
    }
    for (int64_t id : ids) release(id);
    return out;
  }

  kiln_engine* handle() { return engine_; }

 private:
  kiln_engine* engine_ = nullptr;
};

}  // namespace kiln::api
