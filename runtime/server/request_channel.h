// One HTTP request's mailbox between the engine thread, which fills it from
// the token callback and the finished requests' stats, and the handler
// thread that waits on it to write the answer (at once or streamed).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "runtime/engine/engine.h"
#include "runtime/server/api_error.h"

namespace kiln::server {

// One generated token's log probabilities (GenerationRequest asked for
// them), with the tokens as the bytes they add to the text.
struct TokenLogprob {
  std::string bytes;
  float logprob = 0;
  std::vector<std::pair<std::string, float>> top;  // most likely first
};

// What the engine produced since the handler last looked.
struct ChannelUpdate {
  struct Text {
    int index;  // the completion (choice) index, 0 .. n-1
    std::string text;
    std::vector<int32_t> token_ids;      // the tokens this text came from
    std::vector<TokenLogprob> logprobs;  // theirs, when asked for
  };
  struct Finish {
    int index;
    RequestStats stats;
  };
  std::vector<Text> texts;        // in the order generated
  std::vector<Finish> finishes;   // completions that ended, after their last text
  std::optional<ApiError> error;  // the engine refused the request (submit failed)
  bool accepted = false;          // the engine took it (texts and finishes follow)
  bool done = false;              // every completion ended, or refused: nothing follows
};

class RequestChannel {
 public:
  explicit RequestChannel(int completions)
      : finished_(size_t(completions), false), unsent_(size_t(completions)) {}

  int completions() const { return int(finished_.size()); }

  // Engine thread.
  void accept(int64_t first_id);
  void refuse(ApiError error);
  // A token (and its log probabilities) travels with the next text of its
  // completion (the token's own text may be held back), or before its
  // finish. token -1: text with no token (the held-back rest at the end).
  void appendLogprob(int64_t request_id, TokenLogprob logprob);
  void appendText(int64_t request_id, int32_t token, std::string_view text);
  void finish(int index, const RequestStats& stats);
  bool finished(int index) const;
  int64_t firstId() const;

  // Handler thread: everything new since the last call, waiting up to
  // `timeout` for something to be new. An update with nothing in it means
  // the wait timed out.
  ChannelUpdate waitForUpdate(std::chrono::milliseconds timeout);

 private:
  void pushText(int index, std::string_view text);  // under mutex_

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  ChannelUpdate pending_;
  bool accepted_ = false;
  bool reported_accepted_ = false;
  int64_t first_id_ = -1;
  std::vector<bool> finished_;
  struct Unsent {
    std::vector<int32_t> token_ids;
    std::vector<TokenLogprob> logprobs;
    bool empty() const { return token_ids.empty() && logprobs.empty(); }
  };
  std::vector<Unsent> unsent_;  // per completion
  int unfinished_ = -1;  // -1 until accepted
};

}  // namespace kiln::server
