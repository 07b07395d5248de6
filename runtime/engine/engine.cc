#include "runtime/engine/engine.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/artifact/manifest.h"
#include "runtime/artifact/plan_options.h"
#include "runtime/backend/backend.h"
#include "runtime/backend/plan_kv_pool.h"
#include "runtime/cpu/executor/executor.h"
#ifdef KILN_HAVE_CUDA_EXECUTOR
#include "runtime/cuda/cuda_driver.h"
#include "runtime/cuda/executor/executor.h"
#endif
#include "runtime/engine/load_progress.h"
#include "runtime/engine/engine_impl.h"
#include "runtime/engine/scheduler.h"
#include "runtime/engine/sequence.h"
#include "runtime/kv/block_pool.h"
#include "runtime/sampling/sampler.h"
#include "runtime/sampling/stop_checker.h"
#include "runtime/support/thread_pool.h"
#include "runtime/tokenizer/gguf_vocab.h"
#include "runtime/tokenizer/tokenizer.h"
#include "runtime/tokenizer/tokenizer_json.h"
#include "runtime/weights/weight_store.h"

namespace kiln {

std::string_view finishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kRunning: return "running";
    case FinishReason::kLength: return "length";
    case FinishReason::kStop: return "stop";
    case FinishReason::kEos: return "eos";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
  }
  return "unknown";
}

Result<Tokenizer> loadTokenizer(const WeightStore& weights, const std::string& source) {
  if (const formats::GgufFile* gguf = weights.source().gguf()) {
    auto vocab = vocabFromGguf(*gguf);
    if (!vocab.ok()) return vocab.error();
    return Tokenizer::create(vocab.take());
  }
  auto vocab = vocabFromTokenizerJson(source + "/tokenizer.json");
  if (!vocab.ok()) return vocab.error();
  return Tokenizer::create(vocab.take());
}

namespace {

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// The chat template text: GGUF metadata or tokenizer_config.json.
std::optional<std::string> chatTemplateSource(const WeightStore& weights,
                                              const std::string& source) {
  if (const formats::GgufFile* gguf = weights.source().gguf()) {
    auto text = gguf->getString("tokenizer.chat_template");
    if (text.ok()) return text.take();
    return std::nullopt;
  }
  FILE* file = std::fopen((source + "/tokenizer_config.json").c_str(), "rb");
  if (!file) return std::nullopt;
  std::string text;
  char buffer[65536];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, file)) > 0) text.append(buffer, n);
  std::fclose(file);
  auto json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_object() && json.contains("chat_template") && json["chat_template"].is_string())
    return json["chat_template"].get<std::string>();
  return std::nullopt;
}

Result<std::unique_ptr<Backend>> createCpuBackend(const Manifest& m, const WeightStore& weights,
                                                  int64_t blocks, const EngineOptions& options) {
  auto ex = cpu::CpuExecutor::create(m, weights, kvPoolConfigFor(m, blocks), options.max_batch_tokens,
                                     /*state_slots=*/options.max_sequences);
  if (!ex.ok()) return ex.error();
  // The CPU's paged attention reads only each layer's window.
  return std::unique_ptr<Backend>(new ExecutorBackend<cpu::CpuExecutor>(ex.take(), "cpu", false, true));
}

Result<std::unique_ptr<Backend>> createCudaBackend(const Manifest& m, const WeightStore& weights,
                                                   int64_t blocks, const EngineOptions& options) {
#ifdef KILN_HAVE_CUDA_EXECUTOR
  cuda::CudaExecutorOptions copt;
  copt.progress = options.progress;
  copt.gpu_memory_fraction = options.gpu_memory_fraction;
  copt.tuning = options.cuda;
  copt.state_slots = options.max_sequences;  // state-space plans: a slot per sequence, as the CPU's
  auto ex = cuda::CudaExecutor::create(m, weights, kvPoolConfigFor(m, blocks),
                                       options.max_batch_tokens, copt);
  if (!ex.ok()) return ex.error();
  std::string name = "cuda " + (*ex)->deviceName();
  // Its attention kernels (paged prefill, both decode forms, their splits)
  // read no block wholly before the window of the first query they serve.
  return std::unique_ptr<Backend>(new ExecutorBackend<cuda::CudaExecutor>(
      ex.take(), name, options.cuda.device_argmax, /*honors_sliding_windows=*/true));
#else
  (void)m, (void)weights, (void)blocks, (void)options;
  return makeError("no CUDA backend: this kiln was built without the CUDA toolkit headers");
#endif
}

}  // namespace

Result<std::unique_ptr<Backend>> Engine::Impl::createDraftBackend(const Manifest& m, WeightStore& weights,
                                                                  int64_t blocks) {
  if (executor->name() == "cpu") {
    weights.materializeConcats();
    return createCpuBackend(m, weights, blocks, options);
  }
  EngineOptions draft = options;
  draft.gpu_memory_fraction = 0;  // the target sized its pool; the draft's is `blocks`
  return createCudaBackend(m, weights, blocks, draft);
}

bool cudaAvailable(std::string* why, std::string* target) {
#ifdef KILN_HAVE_CUDA_EXECUTOR
  auto driver = cuda::loadCudaDriver();
  if (!driver) {
    if (why) *why = driver.error().message;
    return false;
  }
  const cuda::CudaDriver& d = **driver;
  int count = 0;
  if (d.cuDeviceGetCount(&count) != CUDA_SUCCESS || count == 0) {
    if (why) *why = fmt::format("the CUDA driver at {} sees no GPU", d.library.path());
    return false;
  }
  CUdevice device = 0;
  int major = 0, minor = 0;
  if (d.cuDeviceGet(&device, 0) != CUDA_SUCCESS ||
      d.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device) != CUDA_SUCCESS ||
      d.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device) != CUDA_SUCCESS) {
    if (why) *why = fmt::format("the CUDA driver at {} gives no compute capability for GPU 0", d.library.path());
    return false;
  }
  const std::optional<std::string> compile_target = targetForDevice(major, minor);
  if (!compile_target) {
    if (why) *why = fmt::format("GPU 0 has compute capability {}.{}; kiln's CUDA kernels need 8.0 or later", major, minor);
    return false;
  }
  if (target) *target = *compile_target;
  return true;
#else
  (void)target;
  if (why) *why = "this kiln was built without the CUDA toolkit headers";
  return false;
#endif
}

void Engine::Impl::finish(Sequence& seq, FinishReason reason, std::string error) {
  if (seq.stats.finish != FinishReason::kRunning) return;
  seq.stats.finish = reason;
  seq.stats.error = std::move(error);
  seq.finished = true;
  auto now = Clock::now();
  if (seq.stats.generated_tokens > 0) seq.stats.decode_seconds = seconds(now - seq.first_token);
  // Text held back for a possible stop string is released at a normal end.
  if (reason == FinishReason::kLength || reason == FinishReason::kEos) {
    std::string rest = seq.detokenizer ? seq.detokenizer->finish() : std::string();
    if (seq.stop) {
      auto update = seq.stop->append(rest);
      rest = update.released + seq.stop->flush();
    }
    if (!rest.empty() && seq.on_token) seq.on_token(seq.id, -1, rest);
  }
}

void Engine::Impl::emitToken(Sequence& seq, int32_t token) {
  seq.tokens.push_back(token);
  seq.stats.generated_tokens = seq.generated();
  auto now = Clock::now();
  if (seq.stats.generated_tokens == 1) {
    seq.first_token = now;
    seq.stats.prefill_seconds = seconds(now - seq.started);
  }
  const sampling::SamplingParams& params = seq.sampler->params();
  if (params.isStopToken(token, eos_ids)) {
    if (seq.on_token) seq.on_token(seq.id, token, "");
    finish(seq, FinishReason::kEos);
    return;
  }
  std::string piece = seq.detokenizer->push(token);
  auto update = seq.stop->append(piece);
  if (seq.on_token) seq.on_token(seq.id, token, update.released);
  if (update.stopped) {
    finish(seq, FinishReason::kStop);
  } else if (seq.stats.generated_tokens >= params.max_tokens) {
    finish(seq, FinishReason::kLength);
  } else if (int64_t(seq.tokens.size()) >= context_length) {
    finish(seq, FinishReason::kLength);
  }
}

void Engine::Impl::startForks(Sequence& parent, std::span<float> row, int32_t greedy) {
  BlockPool& pool = executor->blockPool();
  std::vector<std::unique_ptr<Sequence>> forks = std::move(parent.forks);
  parent.forks.clear();
  for (auto& fork : forks) {
    if (fork->cancelled) {
      fork->stats.finish = FinishReason::kCancelled;
      finished[fork->id] = fork->stats;
      continue;
    }
    fork->tokens = parent.tokens;
    fork->tokens.resize(size_t(parent.computed));
    fork->computed = parent.computed;
    fork->table = parent.table.fork(pool);
    fork->cache_tail = parent.cache_tail;
    fork->cached_blocks = parent.cached_blocks;
    fork->ever_started = true;
    fork->started = parent.started;
    fork->stats.queue_seconds = parent.stats.queue_seconds;
    fork->stats.cached_prompt_tokens = parent.stats.cached_prompt_tokens;
    // The sampler works in place: each completion samples from its own copy.
    fork_row.assign(row.begin(), row.end());
    const int32_t token = row.empty() ? greedy : fork->sampler->sample(fork_row, fork->tokens);
    Sequence& started = *fork;
    scheduler->addRunning(std::move(fork));
    if (started.on_logprobs && !row.empty())
      started.on_logprobs(started.id, sampling::tokenLogprobs(row, token, started.sampler->params().logprobs));
    emitToken(started, token);
  }
}

void Engine::Impl::retire() {
  for (auto& seq : scheduler->retire()) {
    if (seq->stats.finish == FinishReason::kRunning) seq->stats.finish = FinishReason::kCancelled;
    finished[seq->id] = seq->stats;
    for (auto& fork : seq->forks) {
      fork->stats.finish = seq->stats.finish;
      fork->stats.error = seq->stats.error;
      finished[fork->id] = fork->stats;
    }
  }
  retainDraftKv();
}

Status Engine::Impl::step() {
  in_step = true;
  struct StepEnd {
    bool& flag;
    ~StepEnd() { flag = false; }
  } step_end{in_step};
  retire();
  ScheduledStep plan = scheduler->schedule();
  for (Sequence* seq : plan.unschedulable)
    finish(*seq, FinishReason::kError,
           fmt::format("KV cache exhausted: request {} needs {} tokens of KV and the pool holds {} ({} blocks of {})",
                       seq->id, seq->tokens.size(), executor->blockPool().numBlocks() * page_size,
                       executor->blockPool().numBlocks(), page_size));
  const std::vector<ScheduledSlice>& batch = plan.slices;
  if (batch.empty()) return Status::success();
  ++steps;
  // Drafts grow their tables first: their copies join the step's.
  const bool drafted = proposeDrafts(plan);
  if (!plan.copies.empty()) {
    if (Status copied = executor->copyBlocks(plan.copies); !copied.ok()) {
      for (const ScheduledSlice& s : batch) finish(*s.seq, FinishReason::kError, copied.error().message);
      return Status::success();
    }
  }
  if (!drafted) return runForward(plan);
  // Decode rows go through verify (drafts or none: a row without drafts is a
  // tree of its root alone), the rest (prefill chunks) through forward.
  ScheduledStep prefill, decode;
  std::vector<const spec::DraftTree*> trees;
  for (size_t b = 0; b < batch.size(); ++b) {
    if (drafts[b].size() > 0) {
      decode.slices.push_back(batch[b]);
      trees.push_back(&drafts[b]);
    } else {
      prefill.slices.push_back(batch[b]);
    }
  }
  if (!prefill.slices.empty()) KILN_RETURN_IF_ERROR(runForward(prefill));
  return runVerify(decode, trees);
}

Status Engine::Impl::flatten(const std::vector<ScheduledSlice>& slices,
                             const std::vector<const spec::DraftTree*>* trees, BatchInputs& in) {
  size_t max_blocks = 0;
  for (const ScheduledSlice& s : slices) max_blocks = std::max(max_blocks, s.seq->table.blocks().size());
  batch_tokens.clear();
  batch_positions.clear();
  batch_slots.clear();
  batch_query_start.assign(1, 0);
  batch_kv_lens.clear();
  batch_state_slots.clear();
  batch_tables.assign(slices.size() * max_blocks, 0);
  verify_parents.clear();
  verify_base.clear();
  for (size_t b = 0; b < slices.size(); ++b) {
    Sequence& seq = *slices[b].seq;
    const int64_t begin = slices[b].begin;
    int64_t count = slices[b].count;
    if (trees) {
      // Node i at table position begin + i; its position is its depth's.
      const spec::DraftTree& tree = *(*trees)[b];
      count = tree.size();
      const size_t first = batch_positions.size();
      for (int64_t i = 0; i < count; ++i) {
        const int32_t parent = tree.parents[size_t(i)];
        batch_tokens.push_back(tree.tokens[size_t(i)]);
        verify_parents.push_back(parent);
        batch_positions.push_back(parent < 0 ? int32_t(begin) : batch_positions[first + size_t(parent)] + 1);
      }
      verify_base.push_back(int32_t(begin));
    } else {
      for (int64_t i = 0; i < count; ++i) {
        batch_tokens.push_back(seq.tokens[size_t(begin + i)]);
        batch_positions.push_back(int32_t(begin + i));
      }
    }
    size_t slot_base = batch_slots.size();
    batch_slots.resize(slot_base + size_t(count));
    KILN_RETURN_IF_ERROR(seq.table.slots(begin, std::span(batch_slots).subspan(slot_base, size_t(count))));
    std::span<const int32_t> blocks = seq.table.blocks();
    std::copy(blocks.begin(), blocks.end(), batch_tables.begin() + int64_t(b * max_blocks));
    batch_query_start.push_back(int32_t(batch_tokens.size()));
    batch_kv_lens.push_back(int32_t(begin + count));
    if (executor->statePool()) batch_state_slots.push_back(scheduler->stateSlot(seq.id));
  }
  in = BatchInputs{};
  in.tokens = batch_tokens;
  in.positions = batch_positions;
  in.slot_mapping = batch_slots;
  in.block_tables = batch_tables;
  in.max_blocks = int(max_blocks);
  in.query_start = batch_query_start;
  in.kv_lens = batch_kv_lens;
  in.state_slots = batch_state_slots;
  if (trees) {
    in.parents = verify_parents;
    in.base_positions = verify_base;
  }
  return {};
}

Status Engine::Impl::runForward(const ScheduledStep& part) {
  const std::vector<ScheduledSlice>& batch = part.slices;
  BatchInputs in;
  KILN_RETURN_IF_ERROR(flatten(batch, nullptr, in));
  logits.resize(batch.size() * size_t(vocab));
  // Rows that sample a token this step (their pending tokens are done).
  // When every one of them is plain greedy and the backend can, the greedy
  // tokens are computed where the logits are and only ids come back.
  auto samples = [](const ScheduledSlice& s) { return s.begin + s.count >= int64_t(s.seq->tokens.size()); };
  // A row that reports logprobs needs its logits on the host.
  const bool greedy = executor->greedyOnDevice() && std::all_of(batch.begin(), batch.end(), [&](const ScheduledSlice& s) {
    return !samples(s) || (s.seq->sampler->params().isPlainGreedy() && s.seq->sampler->params().logprobs < 0);
  });
  greedy_tokens.resize(batch.size());
  Status forwarded = greedy ? executor->forwardGreedy(in, greedy_tokens) : executor->forward(in, logits);
  if (!forwarded.ok()) {
    // A failed forward leaves the pool as it was; fail the batch's requests
    // rather than the engine.
    for (const ScheduledSlice& s : batch) finish(*s.seq, FinishReason::kError, forwarded.error().message);
    return Status::success();
  }
  if (draft_head) keepHidden(batch, nullptr);
  scheduler->commit(part);
  if (greedy) {
    for (size_t b = 0; b < batch.size(); ++b) {
      Sequence& seq = *batch[b].seq;
      if (!samples(batch[b])) continue;
      if (!seq.forks.empty()) startForks(seq, {}, greedy_tokens[b]);
      emitToken(seq, greedy_tokens[b]);
    }
    return Status::success();
  }

  // Sample every finished row in parallel (each sequence has its own
  // sampler and generator, so the result is the same as one by one: a
  // batch of 32 over a 128k vocabulary is milliseconds of host work on one
  // core), then emit in batch order. Forks sample from copies of the row
  // before the parent's sampler changes it in place.
  for (size_t b = 0; b < batch.size(); ++b)
    if (samples(batch[b]) && !batch[b].seq->forks.empty())
      startForks(*batch[b].seq, std::span<float>(logits.data() + b * size_t(vocab), size_t(vocab)), -1);
  sampled.assign(batch.size(), -1);
  row_logprobs.resize(batch.size());
  parallelFor(int64_t(batch.size()), 1, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const ScheduledSlice& s = batch[size_t(b)];
      if (!samples(s)) continue;  // prompt not done yet
      std::span<float> row(logits.data() + b * vocab, size_t(vocab));
      const int top_n = s.seq->sampler->params().logprobs;
      if (top_n < 0) {
        sampled[size_t(b)] = s.seq->sampler->sample(row, s.seq->tokens);
        continue;
      }
      // The raw row, before the sampler changes it in place.
      std::vector<float> raw(row.begin(), row.end());
      sampled[size_t(b)] = s.seq->sampler->sample(row, s.seq->tokens);
      row_logprobs[size_t(b)] = sampling::tokenLogprobs(raw, sampled[size_t(b)], top_n);
    }
  });
  for (size_t b = 0; b < batch.size(); ++b) {
    if (sampled[b] < 0) continue;
    Sequence& seq = *batch[b].seq;
    if (seq.on_logprobs) seq.on_logprobs(seq.id, row_logprobs[b]);
    emitToken(seq, sampled[b]);
  }
  return Status::success();
}


Result<std::vector<double>> Engine::scoreTokens(std::span<const int32_t> tokens) {
  Impl& im = *impl_;
  if (!idle()) return makeError("scoreTokens: the engine has requests running; score when it is idle");
  const int64_t n = int64_t(tokens.size());
  if (n < 2) return makeError("scoreTokens: {} token(s); scoring needs at least 2", n);
  if (im.executor->statePool())
    return makeError("scoreTokens: not supported for models with state-space layers (it scores each position as "
                     "its own sequence over the KV cache, which those layers do not keep)");
  if (n > im.context_length)
    return makeError("scoreTokens: {} tokens exceed the context length {}", n, im.context_length);
  for (int64_t i = 0; i < n; ++i)
    if (tokens[size_t(i)] < 0 || tokens[size_t(i)] >= im.vocab)
      return makeError("scoreTokens: token {} at index {} is outside the vocabulary [0, {})", tokens[size_t(i)], i,
                       im.vocab);
  BlockPool& pool = im.executor->blockPool();
  BlockTable table(im.page_size);
  im.scheduler->makeFree((n + im.page_size - 1) / im.page_size);
  KILN_RETURN_IF_ERROR(table.append(pool, n));
  std::vector<double> logprobs;
  // Positions [begin, end) per forward, as many as the token budget takes:
  // sequence i is token begin + i alone, over the first begin + i + 1 keys,
  // all of which are in the blocks once this forward has appended its own.
  const std::span<const int32_t> blocks = table.blocks();
  const int64_t budget = im.executor->maxTokens();
  std::vector<int32_t> positions, slots, query_start, kv_lens, tables;
  std::vector<float> logits;
  Status status;
  for (int64_t begin = 0; begin + 1 < n && status.ok(); begin += budget) {
    const int64_t end = std::min(n - 1, begin + budget), count = end - begin;
    positions.resize(size_t(count));
    slots.resize(size_t(count));
    query_start.resize(size_t(count) + 1);
    kv_lens.resize(size_t(count));
    tables.resize(size_t(count) * blocks.size());
    for (int64_t i = 0; i < count; ++i) {
      positions[size_t(i)] = int32_t(begin + i);
      query_start[size_t(i)] = int32_t(i);
      kv_lens[size_t(i)] = int32_t(begin + i + 1);
      std::copy(blocks.begin(), blocks.end(), tables.begin() + i * int64_t(blocks.size()));
    }
    query_start[size_t(count)] = int32_t(count);
    status = table.slots(begin, slots);
    if (!status.ok()) break;
    BatchInputs in{tokens.subspan(size_t(begin), size_t(count)), positions, slots, tables, int(blocks.size()),
                   query_start, kv_lens};
    logits.resize(size_t(count * im.vocab));
    status = im.executor->forward(in, logits);
    if (!status.ok()) break;
    for (int64_t i = 0; i < count; ++i) {
      const float* row = logits.data() + i * im.vocab;
      double max = -INFINITY, sum = 0.0;
      for (int64_t v = 0; v < im.vocab; ++v) max = std::max(max, double(row[v]));
      for (int64_t v = 0; v < im.vocab; ++v) sum += std::exp(double(row[v]) - max);
      logprobs.push_back(double(row[tokens[size_t(begin + i + 1)]]) - max - std::log(sum));
    }
  }
  table.release(pool);
  if (!status.ok()) return status.error();
  return logprobs;
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

namespace {

// The context a model holds: its config's max_position_embeddings where it
// has one. A state-space model without attention layers keeps a fixed-size
// recurrent state and nothing per token, so nothing in the model bounds its
// context (Mamba configs name no limit): kStateSpaceContext tokens, far past
// any prompt a step plans. Other models without the field get 2048.
constexpr int64_t kStateSpaceContext = int64_t(1) << 20;

int64_t modelContextLength(const Manifest& m, const nlohmann::json& config) {
  if (config.is_object() && config.contains("max_position_embeddings") &&
      config["max_position_embeddings"].is_number_integer())
    return config["max_position_embeddings"].get<int64_t>();
  if (m.kv_cache.layers == 0 && !m.state_cache.layers.empty()) return kStateSpaceContext;
  return 2048;
}

}  // namespace

Result<std::unique_ptr<Engine>> Engine::open(const std::string& artifact_dir,
                                             const EngineOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  LoadProgress progress(options.progress, 4);

  progress.stage("manifest");
  auto manifest = Manifest::load(artifact_dir);
  if (!manifest.ok()) return manifest.error();
  impl->manifest = manifest.take();
  const Manifest& m = impl->manifest;
  if (!m.findEntry("forward"))
    return makeError("{}: no 'forward' entry, expected one", m.path);
  auto config = nlohmann::json::parse(m.model.config_json, nullptr, false);
  impl->context_length = modelContextLength(m, config);
  if (options.max_context < 0)
    return makeError("max_context {} is invalid: expected 0 (the model's limit) or a positive "
                     "token count",
                     options.max_context);
  if (options.max_context > 0)
    impl->context_length = std::min(impl->context_length, options.max_context);

  progress.stage("weights");
  if (options.threads > 0) setKernelThreads(options.threads);
  if (options.device != "auto" && options.device != "cpu" && options.device != "cuda")
    return makeError("device '{}': expected cpu, cuda or auto", options.device);
  WeightStoreOptions weight_options;
  // A GPU backend uploads concat_rows parts to their offsets; the CPU joins
  // them in host memory (materializeConcats below) only if it runs.
  weight_options.defer_concat = options.device != "cpu";
  if (!options.model_source.empty()) {
    weight_options.source_path = options.model_source;
    weight_options.check_source_stamp = false;
  }
  const std::string source = options.model_source.empty() ? m.model.source : options.model_source;
  auto weights = WeightStore::open(m, weight_options);
  if (!weights.ok()) return weights.error();
  impl->weights.emplace(weights.take());

  progress.stage("tokenizer");
  auto tokenizer = loadTokenizer(*impl->weights, source);
  if (!tokenizer.ok()) return tokenizer.error();
  impl->tokenizer.emplace(tokenizer.take());
  if (impl->tokenizer->eos() >= 0) impl->eos_ids.push_back(impl->tokenizer->eos());
  std::optional<std::string> chat_source = options.chat_template.empty()
                                               ? chatTemplateSource(*impl->weights, source)
                                               : std::optional<std::string>(options.chat_template);
  if (chat_source) {
    const Tokenizer& tok = *impl->tokenizer;
    auto chat = ChatTemplate::fromTemplateString(
        *chat_source, tok.bos() >= 0 ? tok.tokenText(tok.bos()) : "",
        tok.eos() >= 0 ? tok.tokenText(tok.eos()) : "");
    if (chat.ok())
      impl->chat_template.emplace(chat.take());
    else
      impl->chat_template_error = chat.error().message;
  } else {
    impl->chat_template_error = "the model has no chat template";
  }

  progress.stage("kv cache");
  int64_t kv_tokens = options.kv_cache_tokens > 0 ? options.kv_cache_tokens : 8192;
  impl->page_size = m.kv_cache.page_size;
  int64_t blocks = (kv_tokens + m.kv_cache.page_size - 1) / m.kv_cache.page_size;
  Result<std::unique_ptr<Backend>> executor = makeError("no backend");
  if (options.device == "cpu") {
    impl->weights->materializeConcats();
    executor = createCpuBackend(m, *impl->weights, blocks, options);
  } else {
    executor = createCudaBackend(m, *impl->weights, blocks, options);
    if (!executor.ok() && options.device == "auto") {
      if (options.progress)
        fmt::print(stderr, "\nkiln: CUDA backend unavailable ({}); running on the CPU\n",
                   executor.error().message.substr(0, executor.error().message.find('\n')));
      impl->weights->materializeConcats();
      executor = createCpuBackend(m, *impl->weights, blocks, options);
    }
  }
  if (!executor.ok()) return executor.error();
  impl->executor = executor.take();
  impl->vocab = impl->executor->vocabSize();
  // Blocks before a window are freed only when every layer slides.
  int64_t window = 0;
  for (int layer = 0; layer < m.kv_cache.layers; ++layer) {
    const int64_t w = m.kv_cache.slidingWindow(layer);
    if (w <= 0) {
      window = 0;
      break;
    }
    window = window == 0 ? w : std::min(window, w);
  }
  impl->startScheduler(window);
  if (!options.draft_model.empty()) KILN_RETURN_IF_ERROR(impl->openDraftModel(options.draft_model, kv_tokens));
  KILN_RETURN_IF_ERROR(impl->openSelfDrafters(options.draft_head));
  progress.done();
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

Result<std::unique_ptr<Engine>> Engine::fromBackend(std::unique_ptr<Backend> backend, Tokenizer tokenizer,
                                                    int64_t context_length, const EngineOptions& options,
                                                    int64_t sliding_window) {
  if (!backend) return makeError("fromBackend: no backend");
  if (context_length <= 1) return makeError("fromBackend: context length {} is invalid: expected > 1", context_length);
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->context_length = context_length;
  impl->executor = std::move(backend);
  impl->vocab = impl->executor->vocabSize();
  impl->page_size = impl->executor->blockPool().config().page_size;
  impl->tokenizer.emplace(std::move(tokenizer));
  if (impl->tokenizer->eos() >= 0) impl->eos_ids.push_back(impl->tokenizer->eos());
  impl->chat_template_error = "the backend was given without a chat template";
  impl->startScheduler(sliding_window);
  KILN_RETURN_IF_ERROR(impl->openSelfDrafters(options.draft_head));
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

Result<std::vector<int32_t>> Engine::promptTokens(const GenerationRequest& request) const {
  const Impl& e = *impl_;
  std::string text = request.prompt;
  bool parse_special = false;
  bool template_wrote_bos = false;
  if (request.chat) {
    if (!e.chat_template)
      return makeError("chat request: {}; send a plain prompt instead", e.chat_template_error);
    std::vector<ChatMessage> messages = request.messages;
    if (messages.empty()) messages.push_back({"user", request.prompt});
    ChatOptions chat_options;
    chat_options.tools = request.tools;
    chat_options.extra_variables_json = request.chat_template_kwargs;
    auto rendered = e.chat_template->apply(messages, chat_options);
    if (!rendered.ok()) return rendered.error();
    text = rendered.take();
    parse_special = true;  // the template's role markers are special tokens
    // Templates that write bos_token (Llama-3, Mistral, Gemma) hold the BOS
    // already; like transformers, the tokenizer then adds none of its own.
    const std::string& bos = e.chat_template->bosText();
    template_wrote_bos = !bos.empty() && text.compare(0, bos.size(), bos) == 0;
  }
  EncodeOptions encode;
  encode.parse_special = parse_special;
  encode.add_special = !template_wrote_bos;
  std::vector<int32_t> tokens = request.prompt_tokens.empty()
                                    ? e.tokenizer->encode(text, encode)
                                    : request.prompt_tokens;
  for (int32_t t : tokens)
    if (t < 0 || t >= e.tokenizer->vocabSize())
      return makeError("prompt token id {} is out of range: expected 0 <= id < {}", t,
                       e.tokenizer->vocabSize());
  if (tokens.empty()) return makeError("the prompt is empty: expected at least one token");
  return tokens;
}

Result<int64_t> Engine::submit(GenerationRequest request, TokenCallback on_token, LogprobsCallback on_logprobs) {
  Impl& e = *impl_;
  if (Status valid = request.sampling.validate(); !valid.ok()) return valid.error();
  if (request.sampling.logprobs >= 0 && request.speculation.enabled())
    return makeError("logprobs with speculative decoding is not supported yet: ask for one of them");
  auto prompt = promptTokens(request);
  if (!prompt.ok()) return prompt.error();
  std::vector<int32_t> tokens = prompt.take();
  // Leave room for at least one generated token.
  int64_t limit = e.context_length - 1;
  if (int64_t(tokens.size()) > limit) {
    if (!request.truncate_prompt)
      return makeError("the prompt has {} tokens but the context holds {} (model limit {}): "
                       "shorten it, or ask for truncation (--truncate)",
                       tokens.size(), limit, e.context_length);
    tokens.erase(tokens.begin(), tokens.end() - limit);
  }
  const sampling::SamplingParams& params = request.sampling;
  if (e.executor->statePool() && request.speculation.enabled())
    return makeError("speculative decoding is not supported for models with state-space layers: their verify "
                     "step would advance the recurrent state past rejected drafts; ask without speculation");
  if (e.executor->statePool() && request.sampling.n > 1)
    return makeError("n {} > 1 is not supported for models with state-space layers (a completion's fork would "
                     "need a copy of the parent's recurrent state); ask for n = 1 and submit the prompt again",
                     request.sampling.n);
  if (request.speculation.enabled()) KILN_RETURN_IF_ERROR(checkSpeculation(request.speculation));
  if (params.n > e.options.max_sequences)
    return makeError("n {} is more completions than the engine runs at once ({} sequences): expected n <= {}",
                     params.n, e.options.max_sequences, e.options.max_sequences);
  // The longest this request can grow; its KV must fit in the pool alone:
  // all of it, or under a sliding window the window, a forward's tokens
  // and a partly filled block.
  const BlockPool& pool = e.executor->blockPool();
  const int64_t longest = std::min<int64_t>(int64_t(tokens.size()) + params.max_tokens, e.context_length);
  const int64_t window = e.scheduler->slidingWindow();
  const int64_t held = window > 0 ? std::min(longest, window + e.executor->maxTokens() + e.page_size) : longest;
  const int64_t blocks = (held + e.page_size - 1) / e.page_size + (window > 0 ? 1 : 0);
  if (blocks > pool.numBlocks())
    return makeError("the request needs up to {} tokens of KV ({} prompt + {} max_tokens) but the whole KV pool "
                     "holds {} ({} blocks of {}): lower max_tokens or enlarge the pool (--kv-cache-tokens)",
                     longest, tokens.size(), params.max_tokens, pool.numBlocks() * e.page_size, pool.numBlocks(),
                     e.page_size);

  auto makeSequence = [&](int completion) -> Result<std::unique_ptr<Sequence>> {
    sampling::SamplingParams own = params;
    own.seed = params.seed + uint64_t(completion);
    auto sampler = sampling::Sampler::create(own);
    if (!sampler.ok()) return sampler.error();
    auto seq = std::make_unique<Sequence>(e.page_size);
    seq->id = e.next_id + completion;
    seq->priority = request.priority;
    seq->arrival = e.next_arrival;
    seq->prompt_len = int64_t(tokens.size());
    seq->stats.prompt_tokens = seq->prompt_len;
    seq->sampler.emplace(sampler.take());
    seq->detokenizer.emplace(*e.tokenizer);
    seq->stop.emplace(params.stop_strings);
    seq->on_token = on_token;
    if (params.logprobs >= 0) seq->on_logprobs = on_logprobs;
    seq->submitted = Clock::now();
    if (request.speculation.enabled()) {
      seq->spec.emplace();
      seq->spec->drafter = request.speculation.method == SpecMethod::kNgram ? static_cast<spec::Drafter*>(&e.ngram)
                           : request.speculation.method == SpecMethod::kLayerSkip
                               ? static_cast<spec::Drafter*>(e.layer_skip.get())
                           : request.speculation.method == SpecMethod::kDraftHead
                               ? static_cast<spec::Drafter*>(e.draft_head.get())
                               : e.draft_model.get();
      seq->spec->tree = request.speculation.tree;
    }
    return seq;
  };
  auto first = makeSequence(0);
  if (!first.ok()) return first.error();
  std::unique_ptr<Sequence> seq = first.take();
  for (int c = 1; c < params.n; ++c) {
    auto fork = makeSequence(c);
    if (!fork.ok()) return fork.error();
    seq->forks.push_back(fork.take());
  }
  seq->tokens = std::move(tokens);
  seq->completions = params.n;
  const int64_t id = e.next_id;
  e.next_id += params.n;
  ++e.next_arrival;
  e.scheduler->enqueue(std::move(seq));
  return id;
}

void Engine::cancel(int64_t request_id) {
  Sequence* seq = impl_->scheduler->find(request_id);
  if (!seq) return;
  // The first completion's id stands for the whole request.
  for (int c = 0; c < seq->completions; ++c)
    if (Sequence* each = impl_->scheduler->find(request_id + c); each && !each->finished) each->cancelled = true;
  // Outside a step the blocks go back now; inside one (a token callback),
  // at the start of the next.
  if (!impl_->in_step) impl_->retire();
}

Status Engine::step() { return impl_->step(); }

bool Engine::idle() const {
  const Scheduler& s = *impl_->scheduler;
  if (s.numWaiting() > 0) return false;
  return std::all_of(s.running().begin(), s.running().end(),
                     [](const auto& seq) { return seq->finished && seq->forks.empty(); });
}

Status Engine::runUntilIdle(const std::function<bool()>& should_stop) {
  while (!idle()) {
    if (should_stop && should_stop()) return Status::success();
    KILN_RETURN_IF_ERROR(step());
  }
  return step();  // retire what finished in the last step
}

void Engine::forgetStats(int64_t request_id) { impl_->finished.erase(request_id); }

const RequestStats* Engine::stats(int64_t request_id) const {
  if (auto it = impl_->finished.find(request_id); it != impl_->finished.end())
    return &it->second;
  if (Sequence* seq = impl_->scheduler->find(request_id)) return &seq->stats;
  return nullptr;
}

EngineMetrics Engine::metrics() const {
  EngineMetrics m;
  const Scheduler& s = *impl_->scheduler;
  m.waiting = s.numWaiting();
  m.running = s.numRunning();
  const BlockPool& pool = impl_->executor->blockPool();
  m.kv_blocks_total = pool.numBlocks();
  m.kv_blocks_free = pool.numFree();
  m.kv_blocks_cached = pool.numCachedOnly();
  m.kv_blocks_used = impl_->held_blocks.count(s, pool.numBlocks());
  if (const PrefixCache* cache = s.prefixCache()) {
    m.prefix_cache_blocks = cache->cachedBlocks();
    m.prefix_queried_tokens = cache->queriedTokens();
    m.prefix_hit_tokens = cache->hitTokens();
  }
  m.preemptions = s.preemptions();
  m.steps = impl_->steps;
  m.spec_rows = impl_->spec_rows;
  m.spec_drafted_tokens = impl_->spec_drafted;
  m.spec_accepted_tokens = impl_->spec_accepted;
  if (spec::DraftModelDrafter* draft = impl_->draft_model.get()) {
    const BlockPool& draft_pool = draft->backend().blockPool();
    m.draft_kv_blocks_total = draft_pool.numBlocks();
    m.draft_kv_blocks_free = draft_pool.numFree();
    m.draft_sequences = draft->sequences();
  }
  if (const StatePool* states = impl_->executor->statePool()) {
    m.state_slots_total = states->numSlots();
    m.state_slots_free = states->numFree();
    m.state_bytes = states->bytes();
  }
  return m;
}


const Tokenizer& Engine::tokenizer() const { return *impl_->tokenizer; }
const ChatTemplate* Engine::chatTemplate() const {
  return impl_->chat_template ? &*impl_->chat_template : nullptr;
}
const Manifest& Engine::manifest() const { return impl_->manifest; }
int64_t Engine::contextLength() const { return impl_->context_length; }
std::string Engine::backendName() const { return impl_->executor->name(); }
Backend& Engine::backend() { return *impl_->executor; }

}  // namespace kiln
