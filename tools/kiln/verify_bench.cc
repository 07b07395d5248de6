// kiln bench decode ARTIFACT --verify: the time of one verify step (the
// plan's verify entry over a full tree of the artifact's --spec-tree a
// sequence) beside one plain decode step (one token a sequence, as the
// engine runs it: a CUDA graph, each row's argmax on the device), on the
// same KV cache and context, in the same run; the ratio is what a tree
// costs over a decode step, whatever drafts it holds. The steps go straight
// to the engine's backend (no scheduler, no drafter): a warm-up, then the
// median of --runs x 20 steps of each, interleaved. Kernels are compiled
// when the engine opens; what a shape's first calls add (cuBLASLt's plans
// and their autotuning, the verify graph captured at a shape's second
// call, the decode graph at its first) falls in the warm-up.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/artifact/manifest.h"
#include "runtime/backend/backend.h"
#include "runtime/spec/drafter.h"
#include "tools/kiln/commands.h"

namespace kiln {
namespace {

// The full tree of `shape` in the verify layout: level by level, node i of
// level d (d >= 1) the child of node i / widths[d-1] of level d - 1.
std::vector<int32_t> fullTreeParents(const spec::TreeShape& shape) {
  std::vector<int32_t> parents{-1};
  int32_t level_begin = 0, level_size = 1;
  for (int64_t width : shape.widths) {
    const int32_t next_begin = int32_t(parents.size());
    for (int32_t i = 0; i < level_size * int32_t(width); ++i) parents.push_back(level_begin + i / int32_t(width));
    level_begin = next_begin;
    level_size *= int32_t(width);
  }
  return parents;
}

double medianOf(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

Result<VerifyTiming> benchVerifySteps(Engine& engine, const std::vector<int32_t>& prompt, int64_t batch, int runs) {
  Backend& backend = engine.backend();
  const Manifest& manifest = engine.manifest();
  auto tree_text = manifest.options.find("spec_tree");
  if (backend.verifyTreeNodes() == 0 || tree_text == manifest.options.end() || tree_text->second == "none")
    return makeError("{}: no verify entry to time; compile the model with kiln-compile --spec-tree=...",
                     manifest.path);
  auto shape = spec::parseTreeShape(tree_text->second);
  if (!shape.ok()) return makeError("{}: options.spec_tree: {}", manifest.path, shape.error().message);
  const std::vector<int32_t> tree_parents = fullTreeParents(*shape);
  const int64_t nodes = int64_t(tree_parents.size()), plen = int64_t(prompt.size());
  if (nodes * batch > backend.maxTokens() || plen * batch > backend.maxTokens())
    return makeError("a batch of {} trees of {} nodes (or prompts of {}) is past the token budget {}", batch, nodes,
                     plen, backend.maxTokens());

  // Each sequence: the prompt, then room for the tree (a decode step writes
  // the tree's first slot).
  BlockPool& pool = backend.blockPool();
  std::vector<BlockTable> tables(size_t(batch), BlockTable(pool.config().page_size));
  int max_blocks = 0;
  for (BlockTable& t : tables) {
    KILN_RETURN_IF_ERROR(t.append(pool, plen + nodes));
    max_blocks = std::max(max_blocks, int(t.blocks().size()));
  }
  std::vector<int32_t> block_tables(size_t(batch * max_blocks), 0);
  for (int64_t b = 0; b < batch; ++b)
    std::copy(tables[size_t(b)].blocks().begin(), tables[size_t(b)].blocks().end(),
              block_tables.begin() + b * max_blocks);
  auto release = [&] {
    for (BlockTable& t : tables) t.release(pool);
  };

  // Prefill: every prompt but its last token, in one forward.
  std::vector<int32_t> tokens, positions, slots, query_start{0}, kv_lens;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i + 1 < plen; ++i) {
      tokens.push_back(prompt[size_t(i)]);
      positions.push_back(int32_t(i));
      slots.push_back(int32_t(*tables[size_t(b)].slot(i)));
    }
    query_start.push_back(int32_t(tokens.size()));
    kv_lens.push_back(int32_t(plen - 1));
  }
  std::vector<float> logits(size_t(std::max(batch, nodes * batch) * backend.vocabSize()));
  if (plen > 1) {
    Status s = backend.forward({tokens, positions, slots, block_tables, max_blocks, query_start, kv_lens}, logits);
    if (!s.ok()) {
      release();
      return s.error();
    }
  }

  // A decode step: each sequence's last prompt token.
  std::vector<int32_t> d_tokens, d_positions, d_slots, d_query_start{0}, d_kv_lens;
  for (int64_t b = 0; b < batch; ++b) {
    d_tokens.push_back(prompt.back());
    d_positions.push_back(int32_t(plen - 1));
    d_slots.push_back(int32_t(*tables[size_t(b)].slot(plen - 1)));
    d_query_start.push_back(int32_t(b + 1));
    d_kv_lens.push_back(int32_t(plen));
  }
  const BatchInputs decode{d_tokens, d_positions, d_slots, block_tables, max_blocks, d_query_start, d_kv_lens};
  // A verify step: that token as the root of a full tree (drafts of any
  // ids: the cost does not depend on them).
  std::vector<int32_t> v_tokens, v_positions, v_slots, v_parents, v_query_start{0}, v_kv_lens, v_base;
  for (int64_t b = 0; b < batch; ++b) {
    const size_t first = v_tokens.size();
    for (int64_t i = 0; i < nodes; ++i) {
      const int32_t parent = tree_parents[size_t(i)];
      v_tokens.push_back(i == 0 ? prompt.back() : int32_t((i * 131 + b * 17) % backend.vocabSize()));
      v_parents.push_back(parent);
      v_positions.push_back(parent < 0 ? int32_t(plen - 1) : v_positions[first + size_t(parent)] + 1);
      v_slots.push_back(int32_t(*tables[size_t(b)].slot(plen - 1 + i)));
    }
    v_query_start.push_back(int32_t(v_tokens.size()));
    v_kv_lens.push_back(int32_t(plen - 1 + nodes));
    v_base.push_back(int32_t(plen - 1));
  }
  BatchInputs verify{v_tokens, v_positions, v_slots, block_tables, max_blocks, v_query_start, v_kv_lens};
  verify.parents = v_parents;
  verify.base_positions = v_base;
  std::vector<int32_t> accepted(static_cast<size_t>(batch * (backend.verifyTreeDepth() + 1)));
  std::vector<int32_t> counts(static_cast<size_t>(batch)), greedy(static_cast<size_t>(batch));
  // The CUDA backend can keep the logits on the device and walk the greedy
  // path over its argmax (ids back); the engine today copies them back.
  const bool device_logits = backend.name().rfind("cuda", 0) == 0;

  using Clock = std::chrono::steady_clock;
  auto timed = [&](auto&& step) -> Result<double> {
    const auto t0 = Clock::now();
    Status s = step();
    if (!s.ok()) return s.error();
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  };
  auto decodeStep = [&] {
    return backend.greedyOnDevice() ? backend.forwardGreedy(decode, greedy)
                                    : backend.forward(decode, {logits.data(), size_t(batch * backend.vocabSize())});
  };
  auto verifyIds = [&] {
    return backend.verify(verify, device_logits ? std::span<float>() : std::span<float>(logits), accepted, counts);
  };
  auto verifyLogits = [&] { return backend.verify(verify, logits, accepted, counts); };
  std::vector<double> plain_ms, verify_ms, logits_ms;
  const int steps = 20 * std::max(runs, 1);
  // Three warm-up rounds: verify's shape runs twice a round (ids, then
  // logits back), so its graph is captured in the first and replayed after.
  for (int i = -3; i < steps; ++i) {
    auto p = timed(decodeStep);
    auto v = timed(verifyIds);
    auto l = timed(verifyLogits);
    if (!p.ok() || !v.ok() || !l.ok()) {
      release();
      return makeError("kiln bench --verify: {}", !p.ok() ? p.error().message
                                                          : !v.ok() ? v.error().message : l.error().message);
    }
    if (i < 0) continue;
    plain_ms.push_back(*p);
    verify_ms.push_back(*v);
    logits_ms.push_back(*l);
  }
  release();
  VerifyTiming t;
  t.tree = shape->text();
  t.nodes = nodes;
  t.batch = batch;
  t.context = plen;
  t.plain_ms = medianOf(plain_ms);
  t.verify_ms = medianOf(verify_ms);
  t.verify_logits_ms = medianOf(logits_ms);
  return t;
}

void printVerifyTiming(const VerifyTiming& t) {
  std::printf("\nkiln bench decode --verify: tree %s (%lld nodes), batch %lld, context %lld\n", t.tree.c_str(),
              (long long)t.nodes, (long long)t.batch, (long long)t.context);
  std::printf("| step | rows | ms | / plain decode |\n|---|---|---|---|\n");
  std::printf("| plain decode | %lld | %.3f | 1.00 |\n", (long long)t.batch, t.plain_ms);
  std::printf("| verify, the accepted paths back | %lld | %.3f | %.2f |\n", (long long)(t.batch * t.nodes),
              t.verify_ms, t.verify_ms / t.plain_ms);
  std::printf("| verify, every node's logits back too | %lld | %.3f | %.2f |\n", (long long)(t.batch * t.nodes),
              t.verify_logits_ms, t.verify_logits_ms / t.plain_ms);
  // One line for scripts (scripts/gpu-check.sh's spec part).
  std::printf("verify-ratio nodes=%lld batch=%lld plain_ms=%.4f verify_ms=%.4f verify_logits_ms=%.4f ratio=%.3f "
              "logits_ratio=%.3f\n",
              (long long)t.nodes, (long long)t.batch, t.plain_ms, t.verify_ms, t.verify_logits_ms,
              t.verify_ms / t.plain_ms, t.verify_logits_ms / t.plain_ms);
}

nlohmann::json verifyTimingJson(const VerifyTiming& t) {
  return {{"tree", t.tree},         {"nodes", t.nodes},           {"batch", t.batch},
          {"context", t.context},   {"plain_ms", t.plain_ms},     {"verify_ms", t.verify_ms},
          {"verify_logits_ms", t.verify_logits_ms}, {"ratio", t.verify_ms / t.plain_ms}};
}

}  // namespace kiln
