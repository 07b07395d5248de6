// The engine's host time a step at a serving scale (Google Benchmark): 256
// sequences of 1000-token prompts generating 1000 tokens, 16-token blocks,
// a pool of 32528 blocks (the H200 offline run's), the prefix cache on and
// full, so that most steps evict. The backend does no work (it only writes
// one-hot logits), so the time is the scheduler's, the prefix cache's, the
// batch flattening and the sampling: what the GPU waits for between two
// forward calls unless it is overlapped.
#include <benchmark/benchmark.h>

#include <memory>
#include <random>

#include "runtime/backend/backend.h"
#include "runtime/engine/engine.h"
#include "runtime/tokenizer/tokenizer.h"

namespace kiln {
namespace {

constexpr int kVocab = 256;

class NullBackend final : public Backend {
 public:
  NullBackend(int64_t blocks, int page_size, int64_t max_tokens)
      : pool_(BlockPool::create({.layers = 1, .num_blocks = blocks, .page_size = page_size, .kv_heads = 1,
                                 .head_dim = 1},
                                KvStorage::kElsewhere)
                  .take()),
        max_tokens_(max_tokens) {}
  Status forward(const BatchInputs& in, std::span<float> logits) override {
    for (size_t b = 0; b + 1 < in.query_start.size(); ++b) {
      std::fill_n(logits.begin() + int64_t(b) * kVocab, kVocab, 0.0f);
      logits[b * kVocab + size_t(1 + in.kv_lens[b] % (kVocab - 1))] = 1.0f;
    }
    return {};
  }
  Status copyBlocks(std::span<const BlockCopy>) override { return {}; }
  BlockPool& blockPool() override { return pool_; }
  int64_t vocabSize() const override { return kVocab; }
  int64_t maxTokens() const override { return max_tokens_; }
  std::string name() const override { return "null"; }

 private:
  BlockPool pool_;
  int64_t max_tokens_;
};

Tokenizer byteTokenizer() {
  TokenizerVocab v;
  v.model = TokenizerModel::kByteLevelBpe;
  v.pre = PreTokenizerKind::kGpt2;
  for (int i = 0; i < kVocab; ++i) v.tokens.push_back("t" + std::to_string(i));
  v.token_types.assign(v.tokens.size(), TokenType::kNormal);
  return Tokenizer::create(std::move(v)).take();
}

void BM_ServingStep(benchmark::State& state) {
  const bool prefix_cache = state.range(0) != 0;
  EngineOptions options;
  options.max_sequences = 256;
  options.prefix_cache = prefix_cache;
  auto engine =
      Engine::fromBackend(std::make_unique<NullBackend>(32528, 16, 8192), byteTokenizer(), 8192, options).take();
  std::mt19937 rng(1);
  auto submit = [&] {
    GenerationRequest r;
    for (int i = 0; i < 1000; ++i) r.prompt_tokens.push_back(int32_t(1 + rng() % (kVocab - 1)));
    r.sampling.max_tokens = 1000;
    r.sampling.ignore_eos = true;
    (void)engine->submit(std::move(r), {});
  };
  // Keep the queue fed; run past the first wave, so that the pool is full
  // of cached blocks and admissions evict.
  auto feed = [&] {
    while (engine->metrics().waiting < 64) submit();
  };
  for (int i = 0; i < 1500; ++i) {
    feed();
    (void)engine->step();
  }
  for (auto _ : state) {
    feed();
    if (!engine->step().ok()) state.SkipWithError("step failed");
  }
  const EngineMetrics m = engine->metrics();
  state.counters["running"] = double(m.running);
  state.counters["cached_blocks"] = double(m.kv_blocks_cached);
  state.counters["free_blocks"] = double(m.kv_blocks_free);
}
BENCHMARK(BM_ServingStep)->Arg(1)->Arg(0)->ArgName("prefix_cache")->Unit(benchmark::kMillisecond)->Iterations(500);

}  // namespace
}  // namespace kiln

BENCHMARK_MAIN();
