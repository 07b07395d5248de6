#include "runtime/tokenizer/tokenizer.h"

#include <algorithm>
#include <queue>
#include <unordered_map>

#include "runtime/tokenizer/pre_tokenizer.h"
#include "runtime/tokenizer/utf8.h"

namespace kiln {

namespace {

// SentencePiece's visible space, U+2581.
constexpr std::string_view kSpmSpace = "\xE2\x96\x81";

uint64_t pairKey(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
         static_cast<uint32_t>(right);
}

struct MergeEntry {
  int32_t rank;
  int32_t result;  // id of left+right
};

// One symbol of a word being merged: a run of bytes [begin, begin + size)
// of the word, its token id (-1 if the run is not a token), and its
// neighbours in the linked list of live symbols.
struct Symbol {
  uint32_t begin;
  uint32_t size;
  int32_t id;
  int32_t prev;
  int32_t next;
};

// A candidate merge of symbols[left] and its right neighbour. `priority` is
// compared first (smaller merges first), then the left position, so ties
// merge leftmost first as in llama.cpp and HF tokenizers. `left_size` and
// `right_size` detect candidates made stale by an earlier merge.
struct Candidate {
  float priority;
  int32_t left;
  uint32_t left_size;
  uint32_t right_size;
  bool operator>(const Candidate& other) const {
    if (priority != other.priority) return priority > other.priority;
    return left > other.left;
  }
};
using CandidateQueue =
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>>;

std::vector<Symbol> splitCharacters(std::string_view word,
                                    const auto& lookup) {
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  uint32_t pos = 0;
  while (pos < word.size()) {
    uint32_t len = static_cast<uint32_t>(
        std::min<size_t>(word.size() - pos,
                         utf8::sequenceLength(
                             static_cast<unsigned char>(word[pos]))));
    int32_t index = static_cast<int32_t>(symbols.size());
    symbols.push_back(
        Symbol{pos, len, lookup(word.substr(pos, len)), index - 1, index + 1});
    pos += len;
  }
  if (!symbols.empty()) symbols.back().next = -1;
  return symbols;
}

}  // namespace

struct Tokenizer::Impl {
  TokenizerVocab vocab;
  std::unordered_map<std::string, int32_t> token_to_id;
  std::vector<TokenType> types;
  // Byte-level BPE and tokenizer.json SentencePiece: (left id, right id) ->
  // rank and result.
  std::unordered_map<uint64_t, MergeEntry> merges;
  // Longest first, as llama.cpp partitions text: (text, id).
  std::vector<std::pair<std::string, int32_t>> specials;
  std::array<int32_t, 256> byte_tokens;  // SentencePiece <0xNN>, or -1
  std::optional<PreTokenizer> pre;

  int32_t lookup(std::string_view text) const {
    auto it = token_to_id.find(std::string(text));
    return it == token_to_id.end() ? -1 : it->second;
  }

  void encodeByteLevelWord(std::string_view raw_word,
                           std::vector<int32_t>& out) const;
  void encodeSentencePiece(std::string_view text,
                           std::vector<int32_t>& out) const;
  void emitUnknownBytes(std::string_view text, std::vector<int32_t>& out,
                        bool byte_fallback) const;
  // Splits text around special tokens: (start, length, id) with id -1 for
  // raw text.
  struct Fragment {
    size_t begin;
    size_t size;
    int32_t id;
  };
  std::vector<Fragment> partition(std::string_view text,
                                  bool parse_special) const;
};

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Result<Tokenizer> Tokenizer::create(TokenizerVocab vocab) {
  auto impl = std::make_unique<Impl>();
  const size_t n = vocab.tokens.size();
  if (n == 0) return makeError("tokenizer: the vocabulary has no tokens");
  if (n > static_cast<size_t>(INT32_MAX)) {
    return makeError("tokenizer: {} tokens do not fit int32 ids", n);
  }
  if (!vocab.scores.empty() && vocab.scores.size() != n) {
    return makeError("tokenizer: {} scores for {} tokens", vocab.scores.size(),
                     n);
  }
  if (!vocab.token_types.empty() && vocab.token_types.size() != n) {
    return makeError("tokenizer: {} token types for {} tokens",
                     vocab.token_types.size(), n);
  }
  for (auto [name, id] : {std::pair<const char*, int32_t>{"bos", vocab.bos_id},
                          {"eos", vocab.eos_id},
                          {"unknown", vocab.unk_id},
                          {"padding", vocab.pad_id}}) {
    if (id < -1 || id >= static_cast<int64_t>(n)) {
      return makeError("tokenizer: {} token id {} is outside the vocabulary "
                       "of {} tokens",
                       name, id, n);
    }
  }
  if (vocab.add_bos && vocab.bos_id < 0) {
    return makeError("tokenizer: add_bos is set but there is no bos token");
  }
  if (vocab.add_eos && vocab.eos_id < 0) {
    return makeError("tokenizer: add_eos is set but there is no eos token");
  }

  impl->types = vocab.token_types;
  if (impl->types.empty()) impl->types.assign(n, TokenType::kNormal);
  impl->token_to_id.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    // Later duplicates win, as in llama.cpp.
    impl->token_to_id[vocab.tokens[i]] = static_cast<int32_t>(i);
  }

  for (size_t rank = 0; rank < vocab.merges.size(); ++rank) {
    const auto& [left, right] = vocab.merges[rank];
    int32_t left_id = impl->lookup(left);
    int32_t right_id = impl->lookup(right);
    int32_t result_id = impl->lookup(left + right);
    const char* missing = left_id < 0    ? "left part"
                          : right_id < 0 ? "right part"
                          : result_id < 0 ? "merged token"
                                          : nullptr;
    if (missing != nullptr) {
      return makeError(
          "tokenizer: merge #{} '{} {}': the {} is not in the vocabulary",
          rank, left, right, missing);
    }
    // The first occurrence of a pair keeps its (lower) rank.
    impl->merges.try_emplace(pairKey(left_id, right_id),
                             MergeEntry{static_cast<int32_t>(rank), result_id});
  }

  for (size_t i = 0; i < n; ++i) {
    TokenType type = impl->types[i];
    if ((type == TokenType::kControl || type == TokenType::kUserDefined ||
         type == TokenType::kUnknown) &&
        !vocab.tokens[i].empty()) {
      impl->specials.emplace_back(vocab.tokens[i], static_cast<int32_t>(i));
    }
  }
  std::stable_sort(impl->specials.begin(), impl->specials.end(),
                   [](const auto& a, const auto& b) {
                     return a.first.size() > b.first.size();
                   });

  impl->byte_tokens.fill(-1);
  if (vocab.model == TokenizerModel::kSentencePiece) {
    for (int b = 0; b < 256; ++b) {
      impl->byte_tokens[b] = impl->lookup(fmt::format("<0x{:02X}>", b));
    }
  } else {
    if (vocab.pre != PreTokenizerKind::kCustom) {
      vocab.pre_regexes = preTokenizerRegexes(vocab.pre);
    }
    auto pre = PreTokenizer::create(vocab.pre_regexes);
    if (!pre.ok()) return makeError("tokenizer: {}", pre.error().message);
    impl->pre = pre.take();
  }
  impl->vocab = std::move(vocab);
  return Tokenizer(std::move(impl));
}

std::vector<Tokenizer::Impl::Fragment> Tokenizer::Impl::partition(
    std::string_view text, bool parse_special) const {
  std::vector<Fragment> fragments{{0, text.size(), -1}};
  for (const auto& [special, id] : specials) {
    TokenType type = types[id];
    if (!parse_special && type != TokenType::kUserDefined) continue;
    std::vector<Fragment> next;
    for (const Fragment& fragment : fragments) {
      if (fragment.id >= 0) {
        next.push_back(fragment);
        continue;
      }
      std::string_view raw = text.substr(fragment.begin, fragment.size);
      size_t start = 0;
      for (size_t hit = raw.find(special); hit != std::string_view::npos;
           hit = raw.find(special, start)) {
        if (hit > start) next.push_back({fragment.begin + start, hit - start, -1});
        next.push_back({fragment.begin + hit, special.size(), id});
        start = hit + special.size();
      }
      if (start < raw.size()) {
        next.push_back({fragment.begin + start, raw.size() - start, -1});
      }
    }
    fragments.swap(next);
  }
  return fragments;
}

void Tokenizer::Impl::emitUnknownBytes(std::string_view text,
                                       std::vector<int32_t>& out,
                                       bool byte_fallback) const {
  for (unsigned char c : text) {
    int32_t id = byte_fallback ? byte_tokens[c] : -1;
    if (id < 0) id = lookup(std::string_view(reinterpret_cast<char*>(&c), 1));
    if (id < 0) id = vocab.unk_id;
    if (id >= 0) out.push_back(id);
  }
}

void Tokenizer::Impl::encodeByteLevelWord(std::string_view raw_word,
                                          std::vector<int32_t>& out) const {
  const std::string word = utf8::byteLevelEncode(raw_word);
  if (vocab.ignore_merges) {
    if (int32_t id = lookup(word); id >= 0) {
      out.push_back(id);
      return;
    }
  }
  std::vector<Symbol> symbols =
      splitCharacters(word, [&](std::string_view s) { return lookup(s); });
  CandidateQueue queue;
  auto consider = [&](int32_t left) {
    if (left < 0) return;
    int32_t right = symbols[left].next;
    if (right < 0 || symbols[left].id < 0 || symbols[right].id < 0) return;
    auto it = merges.find(pairKey(symbols[left].id, symbols[right].id));
    if (it == merges.end()) return;
    queue.push(Candidate{static_cast<float>(it->second.rank), left,
                         symbols[left].size, symbols[right].size});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) {
    consider(i);
  }
  while (!queue.empty()) {
    Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.left];
    if (left.size != top.left_size || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    if (right.size != top.right_size || right.size == 0) continue;
    auto it = merges.find(pairKey(left.id, right.id));
    if (it == merges.end()) continue;
    left.id = it->second.result;
    left.size += right.size;
    right.size = 0;
    left.next = right.next;
    if (left.next >= 0) symbols[left.next].prev = top.left;
    consider(left.prev);
    consider(top.left);
  }
  for (const Symbol& symbol : symbols) {
    if (symbol.size == 0) continue;
    if (symbol.id >= 0) {
      out.push_back(symbol.id);
    } else {
      emitUnknownBytes(std::string_view(word).substr(symbol.begin, symbol.size),
                       out, /*byte_fallback=*/false);
    }
  }
}

// SentencePiece BPE: start from characters and repeatedly merge the
// adjacent pair whose concatenation is the highest-scoring token (GGUF
// scores), or whose pair has the lowest merge rank (tokenizer.json merges).
// Characters that are not tokens fall back to <0xNN> byte tokens.
void Tokenizer::Impl::encodeSentencePiece(std::string_view text,
                                          std::vector<int32_t>& out) const {
  auto lookupText = [&](std::string_view s) { return lookup(s); };
  std::vector<Symbol> symbols = splitCharacters(text, lookupText);
  const bool by_rank = !merges.empty();
  CandidateQueue queue;
  auto consider = [&](int32_t left) {
    if (left < 0) return;
    int32_t right = symbols[left].next;
    if (right < 0) return;
    float priority;
    if (by_rank) {
      if (symbols[left].id < 0 || symbols[right].id < 0) return;
      auto it = merges.find(pairKey(symbols[left].id, symbols[right].id));
      if (it == merges.end()) return;
      priority = static_cast<float>(it->second.rank);
    } else {
      int32_t id = lookup(text.substr(symbols[left].begin,
                                      symbols[left].size + symbols[right].size));
      if (id < 0) return;
      priority = vocab.scores.empty() ? 0.0f : -vocab.scores[id];
    }
    queue.push(Candidate{priority, left, symbols[left].size,
                         symbols[right].size});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) {
    consider(i);
  }
  while (!queue.empty()) {
    Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.left];
    if (left.size != top.left_size || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    if (right.size != top.right_size || right.size == 0) continue;
    left.size += right.size;
    right.size = 0;
    left.id = lookup(text.substr(left.begin, left.size));
    left.next = right.next;
    if (left.next >= 0) symbols[left.next].prev = top.left;
    consider(left.prev);
    consider(top.left);
  }
  // Merged runs are always tokens (a pair merges only into a token); a
  // single character that is not a token falls back to its bytes.
  for (const Symbol& symbol : symbols) {
    if (symbol.size == 0) continue;
    if (symbol.id >= 0) {
      out.push_back(symbol.id);
    } else {
      emitUnknownBytes(text.substr(symbol.begin, symbol.size), out,
                       /*byte_fallback=*/true);
    }
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view input,
                                       const EncodeOptions& options) const {
  const Impl& impl = *impl_;
  const TokenizerVocab& vocab = impl.vocab;
  std::vector<int32_t> out;
  out.reserve(input.size() / 3 + 4);
  if (options.add_special && vocab.add_bos) out.push_back(vocab.bos_id);

  const std::string text = utf8::sanitize(input);
  bool after_special = true;  // SentencePiece prefixes a space here
  for (const auto& fragment : impl.partition(text, options.parse_special)) {
    if (fragment.id >= 0) {
      out.push_back(fragment.id);
      after_special = true;
      continue;
    }
    std::string_view raw =
        std::string_view(text).substr(fragment.begin, fragment.size);
    if (vocab.model == TokenizerModel::kByteLevelBpe) {
      for (std::string_view word : impl.pre->split(raw)) {
        impl.encodeByteLevelWord(word, out);
      }
    } else {
      std::string escaped;
      escaped.reserve(raw.size() + 8);
      if (vocab.add_space_prefix && after_special) escaped += kSpmSpace;
      for (char c : raw) {
        if (c == ' ') {
          escaped += kSpmSpace;
        } else {
          escaped.push_back(c);
        }
      }
      impl.encodeSentencePiece(escaped, out);
    }
    after_special = false;
  }
  if (options.add_special && vocab.add_eos) out.push_back(vocab.eos_id);
  return out;
}

std::string Tokenizer::tokenBytes(int32_t id, bool first,
                                  const DecodeOptions& options) const {
  const Impl& impl = *impl_;
  if (id < 0 || id >= vocabSize()) return "\xEF\xBF\xBD";
  const std::string& text = impl.vocab.tokens[id];
  switch (impl.types[id]) {
    case TokenType::kControl:
      return options.skip_special ? std::string() : text;
    case TokenType::kUserDefined:
    case TokenType::kUnknown:
      return text;
    case TokenType::kUnused:
      return std::string();
    case TokenType::kByte:
      if (impl.vocab.model == TokenizerModel::kSentencePiece) {
        for (int b = 0; b < 256; ++b) {
          if (impl.byte_tokens[b] == id) return std::string(1, static_cast<char>(b));
        }
      }
      break;
    default:
      break;
  }
  if (impl.vocab.model == TokenizerModel::kByteLevelBpe) {
    return utf8::byteLevelDecode(text);
  }
  std::string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    if (text.compare(pos, kSpmSpace.size(), kSpmSpace) == 0) {
      out.push_back(' ');
      pos += kSpmSpace.size();
    } else {
      out.push_back(text[pos++]);
    }
  }
  // The space add_space_prefix put in front of the text is not content.
  if (first && impl.vocab.add_space_prefix && !out.empty() && out[0] == ' ') {
    out.erase(0, 1);
  }
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids,
                              const DecodeOptions& options) const {
  std::string out;
  for (int32_t id : ids) {
    // The first token that produces text is the one add_space_prefix
    // affected (a skipped BOS before it does not count).
    out += tokenBytes(id, /*first=*/out.empty(), options);
  }
  return out;
}

const std::string& Tokenizer::tokenText(int32_t id) const {
  static const std::string kEmpty;
  if (id < 0 || id >= vocabSize()) return kEmpty;
  return impl_->vocab.tokens[id];
}

TokenType Tokenizer::tokenType(int32_t id) const {
  if (id < 0 || id >= vocabSize()) return TokenType::kUndefined;
  return impl_->types[id];
}

bool Tokenizer::isControl(int32_t id) const {
  return tokenType(id) == TokenType::kControl;
}

std::optional<int32_t> Tokenizer::findToken(std::string_view text) const {
  int32_t id = impl_->lookup(text);
  if (id < 0) return std::nullopt;
  return id;
}

std::optional<int32_t> Tokenizer::findSpecialToken(
    std::string_view text) const {
  for (const auto& [special, id] : impl_->specials) {
    if (special == text) return id;
  }
  return std::nullopt;
}

int32_t Tokenizer::bos() const { return impl_->vocab.bos_id; }
int32_t Tokenizer::eos() const { return impl_->vocab.eos_id; }
int32_t Tokenizer::unk() const { return impl_->vocab.unk_id; }
int32_t Tokenizer::vocabSize() const {
  return static_cast<int32_t>(impl_->vocab.tokens.size());
}
const TokenizerVocab& Tokenizer::vocab() const { return impl_->vocab; }

}  // namespace kiln
