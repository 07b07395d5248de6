#include "runtime/sampling/stop_checker.h"

#include <algorithm>

namespace kiln::sampling {
namespace {

// Length of an incomplete UTF-8 sequence at the end of text (0 if the text
// ends on a character boundary), so multi-byte characters are never split
// across released chunks.
size_t incompleteUtf8Tail(std::string_view text) {
  const size_t n = text.size();
  for (size_t back = 1; back <= std::min<size_t>(3, n); ++back) {
    const unsigned char c = static_cast<unsigned char>(text[n - back]);
    if ((c & 0xc0) == 0x80) continue;  // continuation byte: keep looking for the lead
    const size_t needed = (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 1;
    return needed > back ? back : 0;
  }
  return 0;  // only continuation bytes (or empty): nothing sensible to wait for
}

}  // namespace

StopChecker::StopChecker(std::vector<std::string> stop_strings)
    : stop_strings_(std::move(stop_strings)) {
  // An empty stop string would match everywhere; SamplingParams::validate
  // rejects it, and here it is simply ignored.
  std::erase_if(stop_strings_, [](const std::string& s) { return s.empty(); });
}

size_t StopChecker::holdBack() const {
  size_t hold = incompleteUtf8Tail(pending_);
  for (const std::string& stop : stop_strings_) {
    // Longest k < |stop| with pending_ ending in stop[0, k).
    for (size_t k = std::min(stop.size() - 1, pending_.size()); k > hold; --k) {
      if (std::string_view(pending_).substr(pending_.size() - k) == std::string_view(stop).substr(0, k)) {
        hold = k;
        break;
      }
    }
  }
  return hold;
}

StopUpdate StopChecker::append(std::string_view piece) {
  StopUpdate update;
  if (stopped_) {
    update.stopped = true;
    return update;
  }
  pending_.append(piece);
  // Everything before pending_ was released only when no stop string could
  // start there, so any match lies entirely inside pending_.
  size_t best = std::string::npos;
  for (size_t i = 0; i < stop_strings_.size(); ++i) {
    const size_t at = pending_.find(stop_strings_[i]);
    if (at < best) {
      best = at;
      update.stop_index = int(i);
    }
  }
  if (best != std::string::npos) {
    stopped_ = true;
    update.stopped = true;
    update.released = pending_.substr(0, best);
    pending_.clear();
    return update;
  }
  const size_t keep = holdBack();
  update.released = pending_.substr(0, pending_.size() - keep);
  pending_.erase(0, pending_.size() - keep);
  return update;
}

std::string StopChecker::flush() {
  std::string rest = stopped_ ? std::string() : std::move(pending_);
  pending_.clear();
  return rest;
}

}  // namespace kiln::sampling
