// include/kiln/kiln.h over kiln::Engine: the caller's thread drives the
// engine (kiln_step); each request's output is buffered here for kiln_poll
// and forwarded to its callback. Nothing C++ crosses the boundary: every
// entry point catches, and reports through kiln_last_error.
#include "kiln/kiln.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/engine/engine.h"

namespace {

thread_local std::string t_last_error;
thread_local kiln_status t_last_status = KILN_OK;

kiln_status fail(kiln_status status, std::string message) {
  t_last_error = std::move(message);
  t_last_status = status;
  return status;
}

// Reads a caller's struct of `struct_size` bytes over `defaults`: fields
// past what the caller's header knew keep their default (ABI growth).
template <typename T>
bool readVersioned(const T* in, T& out) {
  if (in == nullptr) return true;
  if (in->struct_size < sizeof(uint32_t)) return false;
  std::memcpy(&out, in, std::min<size_t>(in->struct_size, sizeof(T)));
  out.struct_size = sizeof(T);
  return true;
}

// Writes `value` into the caller's struct, only the bytes it has room for.
template <typename T>
bool writeVersioned(const T& value, T* out) {
  if (out == nullptr || out->struct_size < sizeof(uint32_t)) return false;
  uint32_t size = out->struct_size;
  std::memcpy(out, &value, std::min<size_t>(size, sizeof(T)));
  out->struct_size = size;
  return true;
}

kiln_finish_reason finishReason(kiln::FinishReason reason) {
  switch (reason) {
    case kiln::FinishReason::kRunning: return KILN_FINISH_RUNNING;
    case kiln::FinishReason::kLength: return KILN_FINISH_LENGTH;
    case kiln::FinishReason::kStop: return KILN_FINISH_STOP;
    case kiln::FinishReason::kEos: return KILN_FINISH_EOS;
    case kiln::FinishReason::kCancelled: return KILN_FINISH_CANCELLED;
    case kiln::FinishReason::kError: return KILN_FINISH_ERROR;
  }
  return KILN_FINISH_ERROR;
}

// Marks the engine as stepping for the scope (an exception included).
class StepScope {
 public:
  explicit StepScope(bool& stepping) : stepping_(stepping) { stepping_ = true; }
  ~StepScope() { stepping_ = false; }
  StepScope(const StepScope&) = delete;
  StepScope& operator=(const StepScope&) = delete;

 private:
  bool& stepping_;
};

struct RequestRecord {
  kiln_token_callback callback = nullptr;
  void* user_data = nullptr;
  // Produced since the last poll, and what that poll handed out (kept alive
  // until the next call, as kiln_poll promises).
  std::string text;
  std::vector<int32_t> tokens;
  std::string polled_text;
  std::vector<int32_t> polled_tokens;
  // Logprobs (top_n >= 0): per token, and top_n alternatives per token.
  int top_n = -1;
  std::vector<float> logprobs, top_logprobs, polled_logprobs, polled_top_logprobs;
  std::vector<int32_t> top_ids, polled_top_ids;
  std::string error;  // the last kiln_request_stats_get's message
};

}  // namespace

struct kiln_engine {
  std::unique_ptr<kiln::Engine> engine;
  std::map<int64_t, RequestRecord> requests;
  // Released requests the engine has not retired yet: their stats are
  // dropped after the step that retires them.
  std::vector<int64_t> forget_after_step;
  // True while kiln_step runs, i.e. while token callbacks may be called:
  // the calls that would re-enter the engine are refused then.
  bool stepping = false;

  void onToken(int64_t id, int32_t token, std::string_view text) {
    auto it = requests.find(id);
    if (it == requests.end()) return;  // released while the engine still held it
    RequestRecord& record = it->second;
    if (token >= 0) record.tokens.push_back(token);
    record.text.append(text);
    if (record.callback) record.callback(id, token, text.data(), text.size(), record.user_data);
  }

  void onLogprobs(int64_t id, const kiln::sampling::TokenLogprobs& lp) {
    auto it = requests.find(id);
    if (it == requests.end()) return;
    RequestRecord& record = it->second;
    record.logprobs.push_back(lp.logprob);
    for (const auto& [token, logprob] : lp.top) {
      record.top_ids.push_back(token);
      record.top_logprobs.push_back(logprob);
    }
  }

  void forgetRetired() {
    std::erase_if(forget_after_step, [&](int64_t id) {
      engine->forgetStats(id);
      return engine->stats(id) == nullptr;
    });
  }
};

// What a token callback may not call (anything but kiln_cancel).
#define KILN_REFUSE_IN_CALLBACK(engine, name)                                                    \
  if ((engine)->stepping)                                                                       \
    return fail(KILN_ERROR_INVALID_ARGUMENT, name ": called from a token callback (only kiln_cancel may be)")

#define KILN_GUARD_BEGIN try {
#define KILN_GUARD_END                                        \
  }                                                           \
  catch (const std::exception& e) {                           \
    return fail(KILN_ERROR_INTERNAL, e.what());               \
  }                                                           \
  catch (...) {                                               \
    return fail(KILN_ERROR_INTERNAL, "unknown C++ exception"); \
  }

extern "C" {

const char* kiln_last_error(void) { return t_last_error.c_str(); }

kiln_status kiln_last_status(void) { return t_last_status; }

const char* kiln_status_name(kiln_status status) {
  switch (status) {
    case KILN_OK: return "ok";
    case KILN_ERROR_INVALID_ARGUMENT: return "invalid argument";
    case KILN_ERROR_INVALID_PARAMS: return "invalid sampling parameters";
    case KILN_ERROR_LOAD_FAILED: return "load failed";
    case KILN_ERROR_REJECTED: return "request rejected";
    case KILN_ERROR_NOT_FOUND: return "no such request";
    case KILN_ERROR_RUNTIME: return "runtime error";
    case KILN_ERROR_INTERNAL: return "internal error";
  }
  return "unknown status";
}

int kiln_api_version(void) { return KILN_API_VERSION; }

void kiln_engine_options_init(kiln_engine_options* options) {
  if (options == nullptr) return;
  kiln::EngineOptions defaults;
  *options = kiln_engine_options{};
  options->struct_size = sizeof(kiln_engine_options);
  options->device = nullptr;
  options->threads = defaults.threads;
  options->max_sequences = defaults.max_sequences;
  options->max_batch_tokens = defaults.max_batch_tokens;
  options->kv_cache_tokens = defaults.kv_cache_tokens;
  options->max_context = defaults.max_context;
  options->prefix_cache = defaults.prefix_cache ? 1 : 0;
  options->progress = 0;
}

kiln_engine* kiln_engine_create(const char* model_path, const kiln_engine_options* options) {
  try {
    if (model_path == nullptr) {
      fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_engine_create: model_path is NULL");
      return nullptr;
    }
    kiln_engine_options in;
    kiln_engine_options_init(&in);
    if (!readVersioned(options, in)) {
      fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_engine_create: options->struct_size is not set (kiln_engine_options_init)");
      return nullptr;
    }
    kiln::EngineOptions engine_options;
    engine_options.device = in.device ? in.device : "auto";
    engine_options.threads = in.threads;
    engine_options.max_sequences = in.max_sequences;
    engine_options.max_batch_tokens = in.max_batch_tokens;
    engine_options.kv_cache_tokens = in.kv_cache_tokens;
    engine_options.max_context = in.max_context;
    engine_options.prefix_cache = in.prefix_cache != 0;
    engine_options.progress = in.progress != 0;
    if (engine_options.device != "cpu" && engine_options.device != "cuda" && engine_options.device != "auto") {
      fail(KILN_ERROR_INVALID_ARGUMENT,
           "device '" + engine_options.device + "' is invalid: expected cpu, cuda or auto");
      return nullptr;
    }
    if (in.threads < 0 || in.max_sequences < 1 || in.max_batch_tokens < 1 || in.kv_cache_tokens < 0 ||
        in.max_context < 0) {
      fail(KILN_ERROR_INVALID_ARGUMENT,
           "kiln_engine_options: threads, kv_cache_tokens and max_context must be >= 0, max_sequences and "
           "max_batch_tokens >= 1");
      return nullptr;
    }
    std::filesystem::path path(model_path);
    if (path.filename() == "manifest.json") path = path.parent_path();
    auto engine = kiln::Engine::open(path.string(), engine_options);
    if (!engine.ok()) {
      fail(KILN_ERROR_LOAD_FAILED, engine.error().message);
      return nullptr;
    }
    auto handle = std::make_unique<kiln_engine>();
    handle->engine = engine.take();
    t_last_error.clear();
    t_last_status = KILN_OK;
    return handle.release();
  } catch (const std::exception& e) {
    fail(KILN_ERROR_INTERNAL, e.what());
    return nullptr;
  } catch (...) {
    fail(KILN_ERROR_INTERNAL, "unknown C++ exception");
    return nullptr;
  }
}

void kiln_engine_destroy(kiln_engine* engine) {
  if (engine == nullptr) return;
  try {
    for (const auto& [id, record] : engine->requests) engine->engine->cancel(id);
    // The engine goes first: anything it does on the way out still finds
    // the request records.
    engine->engine.reset();
  } catch (...) {
    // Destroy has no status to report; what is left is freed below.
  }
  delete engine;
}

void kiln_sampling_params_init(kiln_sampling_params* params) {
  if (params == nullptr) return;
  kiln::sampling::SamplingParams defaults;
  *params = kiln_sampling_params{};
  params->struct_size = sizeof(kiln_sampling_params);
  params->temperature = defaults.temperature;
  params->top_k = defaults.top_k;
  params->top_p = defaults.top_p;
  params->min_p = defaults.min_p;
  params->repetition_penalty = defaults.repetition_penalty;
  params->frequency_penalty = defaults.frequency_penalty;
  params->presence_penalty = defaults.presence_penalty;
  params->seed = defaults.seed;
  params->max_tokens = defaults.max_tokens;
  params->ignore_eos = defaults.ignore_eos ? 1 : 0;
  params->logprobs = defaults.logprobs;
}

void kiln_prompt_init(kiln_prompt* prompt) {
  if (prompt == nullptr) return;
  *prompt = kiln_prompt{};
  prompt->struct_size = sizeof(kiln_prompt);
}

kiln_status kiln_submit(kiln_engine* engine, const kiln_prompt* prompt, const kiln_sampling_params* params,
                        kiln_token_callback callback, void* user_data, int64_t* request_id) {
  KILN_GUARD_BEGIN
  if (engine == nullptr || prompt == nullptr || request_id == nullptr)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_submit: engine, prompt and request_id must not be NULL");
  KILN_REFUSE_IN_CALLBACK(engine, "kiln_submit");
  kiln_prompt p;
  kiln_prompt_init(&p);
  if (!readVersioned(prompt, p))
    return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_submit: prompt->struct_size is not set (kiln_prompt_init)");
  kiln_sampling_params s;
  kiln_sampling_params_init(&s);
  if (!readVersioned(params, s))
    return fail(KILN_ERROR_INVALID_ARGUMENT,
                "kiln_submit: params->struct_size is not set (kiln_sampling_params_init)");

  kiln::GenerationRequest request;
  if (p.num_messages > 0) {
    if (p.messages == nullptr) return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_submit: prompt->messages is NULL");
    request.chat = true;
    for (size_t i = 0; i < p.num_messages; ++i) {
      const kiln_message& m = p.messages[i];
      if (m.role == nullptr || m.content == nullptr)
        return fail(KILN_ERROR_INVALID_ARGUMENT,
                    "kiln_submit: message " + std::to_string(i) + " has a NULL role or content");
      request.messages.emplace_back(m.role, m.content);
    }
  } else {
    if (p.text == nullptr) return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_submit: the prompt has no text and no messages");
    request.prompt = p.text;
    request.chat = p.chat != 0;
  }

  kiln::sampling::SamplingParams& sampling = request.sampling;
  sampling.temperature = s.temperature;
  sampling.top_k = s.top_k;
  sampling.top_p = s.top_p;
  sampling.min_p = s.min_p;
  sampling.repetition_penalty = s.repetition_penalty;
  sampling.frequency_penalty = s.frequency_penalty;
  sampling.presence_penalty = s.presence_penalty;
  sampling.seed = s.seed;
  sampling.max_tokens = s.max_tokens;
  sampling.ignore_eos = s.ignore_eos != 0;
  sampling.logprobs = s.logprobs;
  if (s.num_stop > 0 && s.stop == nullptr) return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_submit: params->stop is NULL");
  for (size_t i = 0; i < s.num_stop; ++i) {
    if (s.stop[i] == nullptr) return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_submit: params->stop has a NULL string");
    sampling.stop_strings.emplace_back(s.stop[i]);
  }
  if (kiln::Status valid = sampling.validate(); !valid.ok())
    return fail(KILN_ERROR_INVALID_PARAMS, valid.error().message);

  kiln_engine* self = engine;
  auto id = engine->engine->submit(
      std::move(request), [self](int64_t id, int32_t token, std::string_view text) { self->onToken(id, token, text); },
      [self](int64_t id, const kiln::sampling::TokenLogprobs& lp) { self->onLogprobs(id, lp); });
  if (!id.ok()) return fail(KILN_ERROR_REJECTED, id.error().message);
  RequestRecord& record = engine->requests[*id];
  record.top_n = s.logprobs;
  record.callback = callback;
  record.user_data = user_data;
  *request_id = *id;
  return KILN_OK;
  KILN_GUARD_END
}

kiln_status kiln_step(kiln_engine* engine, int* idle) {
  KILN_GUARD_BEGIN
  if (engine == nullptr) return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_step: engine is NULL");
  KILN_REFUSE_IN_CALLBACK(engine, "kiln_step");
  kiln::Status status = [&] {
    StepScope scope(engine->stepping);
    return engine->engine->step();
  }();
  engine->forgetRetired();
  if (idle) *idle = engine->engine->idle() ? 1 : 0;
  if (!status.ok()) return fail(KILN_ERROR_RUNTIME, status.error().message);
  return KILN_OK;
  KILN_GUARD_END
}

kiln_status kiln_run_until_idle(kiln_engine* engine) {
  KILN_GUARD_BEGIN
  if (engine == nullptr) return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_run_until_idle: engine is NULL");
  KILN_REFUSE_IN_CALLBACK(engine, "kiln_run_until_idle");
  while (!engine->engine->idle()) {
    if (kiln_status status = kiln_step(engine, nullptr); status != KILN_OK) return status;
  }
  return KILN_OK;
  KILN_GUARD_END
}

kiln_status kiln_poll(kiln_engine* engine, int64_t request_id, kiln_poll_result* result) {
  KILN_GUARD_BEGIN
  if (engine == nullptr || result == nullptr)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_poll: engine and result must not be NULL");
  KILN_REFUSE_IN_CALLBACK(engine, "kiln_poll");
  auto it = engine->requests.find(request_id);
  if (it == engine->requests.end())
    return fail(KILN_ERROR_NOT_FOUND, "kiln_poll: no request " + std::to_string(request_id));
  RequestRecord& record = it->second;
  record.polled_text.swap(record.text);
  record.polled_tokens.swap(record.tokens);
  record.text.clear();
  record.tokens.clear();
  for (auto [from, to] : {std::pair{&record.logprobs, &record.polled_logprobs},
                          std::pair{&record.top_logprobs, &record.polled_top_logprobs}}) {
    to->swap(*from);
    from->clear();
  }
  record.polled_top_ids.swap(record.top_ids);
  record.top_ids.clear();
  const kiln::RequestStats* stats = engine->engine->stats(request_id);
  kiln_poll_result out{};
  out.struct_size = sizeof(kiln_poll_result);
  out.text = record.polled_text.data();
  out.text_len = record.polled_text.size();
  out.tokens = record.polled_tokens.data();
  out.num_tokens = record.polled_tokens.size();
  if (record.top_n >= 0) {
    out.token_logprobs = record.polled_logprobs.data();
    out.top_ids = record.polled_top_ids.data();
    out.top_logprobs = record.polled_top_logprobs.data();
    out.top_n = size_t(record.top_n);
  }
  out.finish = stats ? finishReason(stats->finish) : KILN_FINISH_RUNNING;
  if (!writeVersioned(out, result))
    return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_poll: result->struct_size is not set");
  return KILN_OK;
  KILN_GUARD_END
}

kiln_status kiln_cancel(kiln_engine* engine, int64_t request_id) {
  KILN_GUARD_BEGIN
  if (engine == nullptr) return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_cancel: engine is NULL");
  if (!engine->requests.contains(request_id))
    return fail(KILN_ERROR_NOT_FOUND, "kiln_cancel: no request " + std::to_string(request_id));
  engine->engine->cancel(request_id);
  return KILN_OK;
  KILN_GUARD_END
}

kiln_status kiln_release(kiln_engine* engine, int64_t request_id) {
  KILN_GUARD_BEGIN
  if (engine == nullptr) return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_release: engine is NULL");
  KILN_REFUSE_IN_CALLBACK(engine, "kiln_release");
  auto it = engine->requests.find(request_id);
  if (it == engine->requests.end())
    return fail(KILN_ERROR_NOT_FOUND, "kiln_release: no request " + std::to_string(request_id));
  engine->engine->cancel(request_id);
  engine->requests.erase(it);
  engine->forget_after_step.push_back(request_id);
  engine->forgetRetired();
  return KILN_OK;
  KILN_GUARD_END
}

kiln_status kiln_request_stats_get(kiln_engine* engine, int64_t request_id, kiln_request_stats* stats) {
  KILN_GUARD_BEGIN
  if (engine == nullptr || stats == nullptr)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_request_stats_get: engine and stats must not be NULL");
  auto it = engine->requests.find(request_id);
  const kiln::RequestStats* s = it != engine->requests.end() ? engine->engine->stats(request_id) : nullptr;
  if (s == nullptr)
    return fail(KILN_ERROR_NOT_FOUND, "kiln_request_stats_get: no request " + std::to_string(request_id));
  kiln_request_stats out{};
  out.struct_size = sizeof(kiln_request_stats);
  out.prompt_tokens = s->prompt_tokens;
  out.generated_tokens = s->generated_tokens;
  out.cached_prompt_tokens = s->cached_prompt_tokens;
  out.preemptions = s->preemptions;
  out.queue_seconds = s->queue_seconds;
  out.prefill_seconds = s->prefill_seconds;
  out.decode_seconds = s->decode_seconds;
  out.finish = finishReason(s->finish);
  // A running request's stats move when it retires: the message is copied.
  it->second.error = s->error;
  out.error = it->second.error.c_str();
  if (!writeVersioned(out, stats))
    return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_request_stats_get: stats->struct_size is not set");
  return KILN_OK;
  KILN_GUARD_END
}

kiln_status kiln_engine_metrics_get(kiln_engine* engine, kiln_engine_metrics* metrics) {
  KILN_GUARD_BEGIN
  if (engine == nullptr || metrics == nullptr)
    return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_engine_metrics_get: engine and metrics must not be NULL");
  kiln::EngineMetrics m = engine->engine->metrics();
  kiln_engine_metrics out{};
  out.struct_size = sizeof(kiln_engine_metrics);
  out.waiting = m.waiting;
  out.running = m.running;
  out.kv_blocks_total = m.kv_blocks_total;
  out.kv_blocks_free = m.kv_blocks_free;
  out.kv_blocks_cached = m.kv_blocks_cached;
  out.prefix_hit_tokens = m.prefix_hit_tokens;
  out.preemptions = m.preemptions;
  out.steps = m.steps;
  out.requests = static_cast<int64_t>(engine->requests.size());
  if (!writeVersioned(out, metrics))
    return fail(KILN_ERROR_INVALID_ARGUMENT, "kiln_engine_metrics_get: metrics->struct_size is not set");
  return KILN_OK;
  KILN_GUARD_END
}

int64_t kiln_context_length(const kiln_engine* engine) {
  return engine ? engine->engine->contextLength() : 0;
}

}  // extern "C"
