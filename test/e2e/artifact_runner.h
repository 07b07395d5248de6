// A compiled artifact on the CPU executor for the end-to-end tests: loads
// the manifest, its weights and an executor with a paged KV pool, and runs
// ragged batches of (sequence, token count) chunks, returning each chunk's
// last logits.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/artifact/manifest.h"
#include "runtime/backend/plan_kv_pool.h"
#include "runtime/cpu/executor/executor.h"
#include "runtime/weights/weight_store.h"

namespace kiln::e2e {

struct Sequence {
  std::vector<int32_t> tokens;
  BlockTable table{16};
  int64_t done = 0;  // tokens already run
};

class ArtifactRunner {
 public:
  // `source` overrides the manifest's model source (a committed fixture's
  // artifact, compiled elsewhere); empty: the manifest's own.
  static Result<ArtifactRunner> load(const std::string& artifact, const std::string& source = "") {
    ArtifactRunner r;
    auto manifest = Manifest::load(artifact);
    if (!manifest.ok()) return manifest.error();
    r.manifest_ = std::make_unique<Manifest>(manifest.take());
    WeightStoreOptions options;
    if (!source.empty()) options = {.source_path = source, .check_source_stamp = false};
    auto weights = WeightStore::open(*r.manifest_, options);
    if (!weights.ok()) return weights.error();
    r.weights_ = std::make_unique<WeightStore>(weights.take());
    auto executor = cpu::CpuExecutor::create(*r.manifest_, *r.weights_, kvPoolConfigFor(*r.manifest_, 16), 24);
    if (!executor.ok()) return executor.error();
    r.executor_ = executor.take();
    return r;
  }

  const Manifest& manifest() const { return *manifest_; }
  cpu::CpuExecutor& executor() { return *executor_; }

  Sequence sequence(std::vector<int32_t> tokens) const {
    return Sequence{std::move(tokens), BlockTable(manifest_->kv_cache.page_size)};
  }

  // One forward over the chunks, each `count` more tokens of its sequence.
  std::vector<std::vector<float>> run(const std::vector<std::pair<Sequence*, int64_t>>& chunks) {
    std::vector<int32_t> tokens, positions, slots, query_start{0}, kv_lens, tables;
    int max_blocks = 0;
    for (auto [s, count] : chunks) {
      Status grown = s->table.append(executor_->blockPool(), count);
      EXPECT_TRUE(grown.ok()) << grown.error().message;
      max_blocks = std::max(max_blocks, int(s->table.blocks().size()));
    }
    for (auto [s, count] : chunks) {
      for (int64_t p = s->done; p < s->done + count; ++p) {
        tokens.push_back(s->tokens[size_t(p)]);
        positions.push_back(int32_t(p));
        slots.push_back(int32_t(*s->table.slot(p)));
      }
      s->done += count;
      query_start.push_back(int32_t(tokens.size()));
      kv_lens.push_back(int32_t(s->done));
      auto blocks = s->table.blocks();
      tables.insert(tables.end(), blocks.begin(), blocks.end());
      tables.resize(tables.size() + size_t(max_blocks) - blocks.size(), 0);
    }
    const int64_t vocab = executor_->vocabSize();
    std::vector<float> logits(chunks.size() * size_t(vocab));
    Status status = executor_->forward({tokens, positions, slots, tables, max_blocks, query_start, kv_lens}, logits);
    EXPECT_TRUE(status.ok()) << status.error().message;
    std::vector<std::vector<float>> out;
    for (size_t b = 0; b < chunks.size(); ++b)
      out.emplace_back(logits.begin() + b * vocab, logits.begin() + (b + 1) * vocab);
    return out;
  }

 private:
  std::unique_ptr<Manifest> manifest_;
  std::unique_ptr<WeightStore> weights_;
  std::unique_ptr<cpu::CpuExecutor> executor_;
};

}  // namespace kiln::e2e
