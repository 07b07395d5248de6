// StreamingDetokenizer (declared in tokenizer.h).
#include "runtime/tokenizer/tokenizer.h"
#include "runtime/tokenizer/utf8.h"

namespace kiln {

StreamingDetokenizer::StreamingDetokenizer(const Tokenizer& tokenizer,
                                           DecodeOptions options)
    : tokenizer_(&tokenizer), options_(options) {}

std::string StreamingDetokenizer::push(int32_t id) {
  std::string piece = tokenizer_->tokenBytes(id, first_, options_);
  if (!piece.empty()) first_ = false;  // as in Tokenizer::decode
  pending_ += piece;
  std::string out;
  size_t pos = 0;
  while (pos < pending_.size()) {
    size_t len = utf8::validSequenceAt(pending_, pos);
    if (len > 0) {
      out.append(pending_, pos, len);
      pos += len;
    } else if (utf8::isIncompleteSequence(pending_, pos)) {
      break;  // wait for the rest of this character
    } else {
      out += "\xEF\xBF\xBD";  // can never become valid
      ++pos;
    }
  }
  pending_.erase(0, pos);
  return out;
}

std::string StreamingDetokenizer::finish() {
  std::string out = utf8::sanitize(pending_);
  pending_.clear();
  first_ = true;
  return out;
}

}  // namespace kiln
