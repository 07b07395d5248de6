// The speculative half of an engine step: drafts proposed for the decode
// rows that speculate, one verify forward over their trees, acceptance
// (greedy in the plan, speculative sampling on the host), and rollback of
// the rejected nodes' KV.
#include <algorithm>

#include <fmt/format.h>

#include "runtime/engine/engine_impl.h"
#include "runtime/sampling/sampler.h"

namespace kiln {

Status Engine::Impl::checkDraftModel(const SpeculationParams& speculation) {
  if (speculation.method != SpecMethod::kDraftModel) return {};
  if (!draft_model)
    return makeError("speculation by a draft model: this engine has none (EngineOptions::draft_model; kiln: "
                     "--spec=draft:PATH)");
  Backend& draft = draft_model->backend();
  const spec::TreeShape& tree = speculation.tree;
  if (!tree.isChain() && (tree.nodes() > draft.verifyTreeNodes() || tree.depth() > draft.verifyTreeDepth()))
    return makeError("the draft tree {} has {} nodes and depth {}; the draft model drafts a tree through its own "
                     "verify entry, which holds {} nodes and depth {}: compile the draft with kiln-compile "
                     "--spec-tree={}",
                     tree.text(), tree.nodes(), tree.depth(), draft.verifyTreeNodes(), draft.verifyTreeDepth(),
                     tree.text());
  return {};
}

Status Engine::Impl::checkLayerSkip(const SpeculationParams& speculation) {
  if (speculation.method != SpecMethod::kLayerSkip) return {};
  const int64_t k = speculation.layerskip, layers = manifest.model.num_layers;
  if (k <= 0 || k >= layers)
    return makeError("--spec=layerskip:{}: K must be 1 to {} (the model has {} layers; the draft runs fewer)", k,
                     layers - 1, layers);
  const int64_t compiled = executor->draftLayers();
  if (compiled == 0)
    return makeError("--spec=layerskip:{}: the artifact has no draft entry on the {} backend: compile it with "
                     "kiln-compile --spec-layerskip {} --spec-tree=...",
                     k, executor->name(), k);
  if (compiled != k)
    return makeError("--spec=layerskip:{}: the artifact's draft entry runs {} layers: compile it with kiln-compile "
                     "--spec-layerskip {}",
                     k, compiled, k);
  return {};
}

void Engine::Impl::keepHidden(const std::vector<ScheduledSlice>& rows, const std::vector<int32_t>* last) {
  std::span<const float> hidden = executor->lastHidden();
  const int64_t h = executor->hiddenSize();
  for (size_t b = 0; b < rows.size(); ++b) {
    Sequence& seq = *rows[b].seq;
    if (!seq.spec || seq.spec->drafter != draft_head.get()) continue;
    const int64_t row = last ? batch_query_start[b] + (*last)[b] : int64_t(b);
    if ((row + 1) * h > int64_t(hidden.size())) {
      seq.spec->hidden.clear();
      continue;
    }
    seq.spec->hidden.assign(hidden.begin() + row * h, hidden.begin() + (row + 1) * h);
  }
}

bool Engine::Impl::proposeDrafts(ScheduledStep& plan) {
  drafts.resize(plan.slices.size());
  for (spec::DraftTree& tree : drafts) tree.tokens.clear(), tree.parents.clear();
  if (executor->verifyTreeNodes() == 0) return false;
  retainDraftKv();
  BlockPool& pool = executor->blockPool();
  int64_t batch_tokens_now = 0;
  for (const ScheduledSlice& s : plan.slices) batch_tokens_now += s.count;
  // Each decode row that speculates asks its drafter for a tree within its
  // room: the request's max_tokens and context (a bonus token follows the
  // accepted drafts); the forward's token budget is shared, so a row's
  // tree is cut to what is left of it after the drafts.
  ngram_rows.clear();
  draft_rows.clear();
  model_slices.clear();
  skip_rows.clear();
  skip_slices.clear();
  head_rows.clear();
  head_slices.clear();
  for (size_t b = 0; b < plan.slices.size(); ++b) {
    const ScheduledSlice& s = plan.slices[b];
    Sequence& seq = *s.seq;
    // A decode row: the sequence's last token alone (a parallel-sampling
    // request's forks start from a forward row's logits).
    if (!seq.spec || s.count != 1 || s.begin + 1 != int64_t(seq.tokens.size()) || !seq.forks.empty()) continue;
    drafts[b].reset(seq.tokens.back());
    if (!seq.spec->drafting(seq.generated()) || !seq.spec->drafter) continue;
    const int64_t room = std::min({seq.sampler->params().max_tokens - seq.generated() - 1,
                                   context_length - int64_t(seq.tokens.size()) - 1,
                                   executor->maxTokens() - batch_tokens_now});
    if (room <= 0) continue;
    spec::DraftRequest row{seq.id, seq.tokens, seq.spec->tree, &drafts[b]};
    if (row.shape.depth() > room) row.shape.widths.resize(size_t(room));
    if (seq.spec->drafter == draft_model.get()) {
      draft_rows.push_back(std::move(row));
      model_slices.push_back(b);
    } else if (draft_head && seq.spec->drafter == draft_head.get()) {
      row.hidden = seq.spec->hidden;
      head_rows.push_back(std::move(row));
      head_slices.push_back(b);
    } else if (layer_skip && seq.spec->drafter == layer_skip.get()) {
      // The self-draft writes its nodes' KV into the target's own slots:
      // the table grows for the whole shape first (free or evictable
      // blocks, never preempting), and back to the root after, the drafted
      // nodes' slots then taken as for any drafter.
      const int64_t extra = row.shape.nodes() - 1;
      if (!plan.copies.empty() || !scheduler->makeFree(seq.table.blocksNeeded(pool, extra)) ||
          !seq.table.append(pool, extra).ok())
        continue;
      row.table = &seq.table;
      skip_rows.push_back(std::move(row));
      skip_slices.push_back(b);
    } else {
      ngram_rows.push_back(std::move(row));
    }
  }
  if (!ngram_rows.empty()) (void)ngram.propose(ngram_rows);
  if (!head_rows.empty() && !draft_head->propose(head_rows).ok())
    for (size_t b : head_slices) drafts[b].reset(plan.slices[b].seq->tokens.back());
  if (!skip_rows.empty()) {
    (void)layer_skip->propose(skip_rows);
    for (size_t b : skip_slices) {
      Sequence& seq = *plan.slices[b].seq;
      (void)seq.table.truncate(pool, int64_t(seq.tokens.size()));
    }
  }
  if (!draft_rows.empty() && !draft_model->propose(draft_rows).ok())
    for (size_t b : model_slices) drafts[b].reset(plan.slices[b].seq->tokens.back());

  bool any = false;
  for (size_t b = 0; b < plan.slices.size(); ++b) {
    Sequence& seq = *plan.slices[b].seq;
    spec::DraftTree& tree = drafts[b];
    if (tree.size() <= 1) continue;
    const int64_t room = std::min({seq.sampler->params().max_tokens - seq.generated() - 1,
                                   context_length - int64_t(seq.tokens.size()) - 1,
                                   executor->maxTokens() - batch_tokens_now});
    // Later nodes only have earlier parents: cutting the tail keeps a tree.
    if (tree.size() - 1 > std::max<int64_t>(room, 0)) {
      tree.tokens.resize(size_t(std::max<int64_t>(room, 0) + 1));
      tree.parents.resize(tree.tokens.size());
    }
    const int64_t extra = tree.size() - 1;
    if (extra == 0) continue;
    // Draft slots come from free or evictable blocks, never by preempting.
    if (!scheduler->makeFree(seq.table.blocksNeeded(pool, extra)) ||
        !seq.table.append(pool, extra, &plan.copies).ok()) {
      tree.reset(seq.tokens.back());
      continue;
    }
    batch_tokens_now += extra;
    any = true;
  }
  return any;
}

void Engine::Impl::retainDraftKv() {
  if (!draft_model) return;
  draft_live.clear();
  for (const auto& seq : scheduler->running())
    if (!seq->finished && seq->spec && seq->spec->drafter == draft_model.get()) draft_live.push_back(seq->id);
  draft_model->retain(draft_live);
}

Status Engine::Impl::openSelfDrafters(const std::string& head_dir) {
  if (executor->draftLayers() > 0) layer_skip = std::make_unique<spec::LayerSkipDrafter>(*executor);
  if (head_dir.empty()) return {};
  if (executor->hiddenSize() == 0)
    return makeError("draft head {}: the {} backend shows no hidden states (its plan's logits come from no LM head "
                     "gemm)",
                     head_dir, executor->name());
  auto head = spec::loadDraftHead(head_dir, executor->hiddenSize());
  if (!head.ok()) return head.error();
  draft_head = std::make_unique<spec::DraftHeadDrafter>(head.take(), *executor);
  return {};
}

Status Engine::Impl::openDraftModel(const std::string& artifact_dir, int64_t kv_tokens) {
  auto manifest = Manifest::load(artifact_dir);
  if (!manifest.ok()) return makeError("draft model: {}", manifest.error().message);
  draft_manifest = manifest.take();
  const Manifest& m = draft_manifest;
  if (!m.findEntry("forward")) return makeError("draft model {}: no 'forward' entry, expected one", m.path);
  WeightStoreOptions weight_options;
  weight_options.defer_concat = executor->name() != "cpu";
  if (!options.draft_model_source.empty()) {
    weight_options.source_path = options.draft_model_source;
    weight_options.check_source_stamp = false;
  }
  const std::string source = options.draft_model_source.empty() ? m.model.source : options.draft_model_source;
  auto weights = WeightStore::open(m, weight_options);
  if (!weights.ok()) return makeError("draft model: {}", weights.error().message);
  draft_weights.emplace(weights.take());
  const int64_t blocks = (kv_tokens + m.kv_cache.page_size - 1) / m.kv_cache.page_size;
  auto backend = createDraftBackend(m, *draft_weights, blocks);
  if (!backend.ok()) return makeError("draft model {}: {}", artifact_dir, backend.error().message);
  // Drafts are target token ids: the vocabularies must be one.
  if ((*backend)->vocabSize() != vocab)
    return makeError("draft model {}: its vocabulary has {} tokens, the target's {}: a draft model must share the "
                     "target's vocabulary",
                     artifact_dir, (*backend)->vocabSize(), vocab);
  auto draft_tokenizer = loadTokenizer(*draft_weights, source);
  if (!draft_tokenizer.ok()) return makeError("draft model {}: {}", artifact_dir, draft_tokenizer.error().message);
  const Tokenizer& target = *tokenizer;
  const Tokenizer& draft = *draft_tokenizer;
  if (draft.vocabSize() != target.vocabSize())
    return makeError("draft model {}: its tokenizer has {} tokens, the target's {}: a draft model must share the "
                     "target's vocabulary",
                     artifact_dir, draft.vocabSize(), target.vocabSize());
  for (int32_t id = 0; id < target.vocabSize(); ++id)
    if (draft.tokenText(id) != target.tokenText(id))
      return makeError("draft model {}: token {} is '{}' in its tokenizer and '{}' in the target's: a draft model "
                       "must share the target's vocabulary",
                       artifact_dir, id, draft.tokenText(id), target.tokenText(id));
  draft_model = std::make_unique<spec::DraftModelDrafter>(backend.take());
  return {};
}

void Engine::Impl::sampleTreePath(Sequence& seq, const spec::DraftTree& tree, size_t b, int64_t width) {
  int32_t* path = verify_accepted.data() + b * size_t(width);
  std::fill(path, path + width, -1);
  path[0] = 0;
  spec_history.assign(seq.tokens.begin(), seq.tokens.end());
  int32_t node = 0, depth = 0;
  while (true) {
    spec_children.clear();
    spec_child_tokens.clear();
    for (int32_t c = node + 1; c < int32_t(tree.size()); ++c)
      if (tree.parents[size_t(c)] == node) {
        spec_children.push_back(c);
        spec_child_tokens.push_back(tree.tokens[size_t(c)]);
      }
    const float* row = logits.data() + int64_t(batch_query_start[b] + node) * vocab;
    fork_row.assign(row, row + vocab);
    int32_t token = -1;
    const int child = seq.sampler->speculate(fork_row, spec_history, spec_child_tokens, token);
    if (child < 0 || depth + 1 >= width) {
      verify_next[b] = token;
      break;
    }
    node = spec_children[size_t(child)];
    path[++depth] = node;
    spec_history.push_back(tree.tokens[size_t(node)]);
  }
  verify_counts[b] = depth;
}

Status Engine::Impl::runVerify(ScheduledStep& part, const std::vector<const spec::DraftTree*>& trees) {
  std::vector<ScheduledSlice>& rows = part.slices;
  BatchInputs in;
  KILN_RETURN_IF_ERROR(flatten(rows, &trees, in));
  const int64_t width = executor->verifyTreeDepth() + 1;
  logits.resize(in.tokens.size() * size_t(vocab));
  verify_accepted.resize(rows.size() * size_t(width));
  verify_counts.resize(rows.size());
  BlockPool& pool = executor->blockPool();
  Status verified = executor->verify(in, logits, verify_accepted, verify_counts);
  // The plan's acceptance is greedy; a sampled request walks its tree with
  // speculative sampling instead, which also draws its next token.
  verify_next.assign(rows.size(), -1);
  for (size_t b = 0; b < rows.size() && verified.ok(); ++b)
    if (!rows[b].seq->sampler->params().isPlainGreedy()) sampleTreePath(*rows[b].seq, *trees[b], b, width);
  // Accepted tree nodes move to the slots of their depths (a chain's are
  // there already); they go in path order, and a node's index is at least
  // its depth, so no move reads a slot an earlier one wrote.
  slot_moves.clear();
  for (size_t b = 0; b < rows.size() && verified.ok(); ++b) {
    const int32_t* path = verify_accepted.data() + b * size_t(width);
    for (int32_t d = 1; d <= verify_counts[b]; ++d)
      if (path[d] != d) {
        auto from = rows[b].seq->table.slot(rows[b].begin + path[d]);
        auto to = rows[b].seq->table.slot(rows[b].begin + d);
        if (!from.ok() || !to.ok()) return makeError("verify: an accepted node has no slot");
        slot_moves.push_back({*from, *to});
      }
  }
  if (verified.ok()) verified = executor->copySlots(slot_moves);
  if (!verified.ok()) {
    for (const ScheduledSlice& s : rows) {
      (void)s.seq->table.truncate(pool, s.begin + s.count);
      finish(*s.seq, FinishReason::kError, verified.error().message);
    }
    return Status::success();
  }
  if (draft_head) {
    verify_last.resize(rows.size());
    for (size_t b = 0; b < rows.size(); ++b) verify_last[b] = verify_accepted[b * size_t(width) + verify_counts[b]];
    keepHidden(rows, &verify_last);
  }
  for (size_t b = 0; b < rows.size(); ++b) {
    ScheduledSlice& s = rows[b];
    Sequence& seq = *s.seq;
    const spec::DraftTree& tree = *trees[b];
    const int32_t* path = verify_accepted.data() + b * size_t(width);
    const int32_t accepted = verify_counts[b];
    int32_t last = 0;  // the deepest node whose token is emitted
    for (int32_t d = 1; d <= accepted && !seq.finished; ++d) {
      emitToken(seq, tree.tokens[size_t(path[d])]);
      last = path[d];
    }
    if (!seq.finished) {
      std::span<float> row(logits.data() + int64_t(batch_query_start[b] + last) * vocab, size_t(vocab));
      emitToken(seq, verify_next[b] >= 0 ? verify_next[b] : seq.sampler->sample(row, seq.tokens));
    }
    // The root and the emitted drafts have their keys and values in place;
    // the rejected nodes' slots are dropped, and blocks wholly past them freed.
    const int64_t kept = std::min<int64_t>(1 + accepted, int64_t(seq.tokens.size()) - s.begin);
    s.count = kept;
    KILN_RETURN_IF_ERROR(seq.table.truncate(pool, s.begin + kept));
    if (tree.size() > 1) {
      ++seq.stats.spec_rows;
      seq.stats.spec_drafted_tokens += tree.size() - 1;
      seq.stats.spec_accepted_tokens += kept - 1;
      ++spec_rows;
      spec_drafted += tree.size() - 1;
      spec_accepted += kept - 1;
      seq.spec->record(tree.size() - 1, kept - 1, seq.generated());
    }
  }
  scheduler->commit(part);
  return Status::success();
}

Status Engine::checkSpeculation(const SpeculationParams& speculation) const {
  if (!speculation.enabled()) return {};
  const spec::TreeShape& tree = speculation.tree;
  if (tree.depth() == 0) return makeError("speculative decoding needs at least one draft token (k >= 1)");
  KILN_RETURN_IF_ERROR(impl_->checkDraftModel(speculation));
  KILN_RETURN_IF_ERROR(impl_->checkLayerSkip(speculation));
  if (speculation.method == SpecMethod::kDraftHead && !impl_->draft_head)
    return makeError("speculation by a draft head: this engine has none (EngineOptions::draft_head; kiln: "
                     "--spec=head:PATH)");
  const int64_t nodes = impl_->executor->verifyTreeNodes(), depth = impl_->executor->verifyTreeDepth();
  if (nodes == 0)
    return makeError("speculative decoding needs an artifact with a verify entry on the {} backend: compile it with "
                     "kiln-compile --spec-tree={}",
                     impl_->executor->name(), tree.text());
  if (tree.nodes() > nodes || tree.depth() > depth)
    return makeError("the draft tree {} has {} nodes and depth {}, more than the artifact's verify entry holds ({} "
                     "nodes, depth {}): compile with kiln-compile --spec-tree={} or draft less",
                     tree.text(), tree.nodes(), tree.depth(), nodes, depth, tree.text());
  return {};
}

}  // namespace kiln
