#include "runtime/server/request_channel.h"

namespace kiln::server {

void RequestChannel::accept(int64_t first_id) {
  std::lock_guard lock(mutex_);
  first_id_ = first_id;
  accepted_ = true;
  unfinished_ = completions();
  changed_.notify_all();
}

void RequestChannel::refuse(ApiError error) {
  std::lock_guard lock(mutex_);
  pending_.error = std::move(error);
  pending_.done = true;
  changed_.notify_all();
}

void RequestChannel::appendLogprob(int64_t request_id, TokenLogprob logprob) {
  std::lock_guard lock(mutex_);
  unsent_[size_t(request_id - first_id_)].logprobs.push_back(std::move(logprob));
}

void RequestChannel::pushText(int index, std::string_view text) {
  Unsent& unsent = unsent_[size_t(index)];
  // Consecutive pieces of one completion travel as one.
  if (pending_.texts.empty() || pending_.texts.back().index != index) pending_.texts.push_back({index, {}, {}, {}});
  ChannelUpdate::Text& last = pending_.texts.back();
  last.text.append(text);
  last.token_ids.insert(last.token_ids.end(), unsent.token_ids.begin(), unsent.token_ids.end());
  last.logprobs.insert(last.logprobs.end(), std::make_move_iterator(unsent.logprobs.begin()),
                       std::make_move_iterator(unsent.logprobs.end()));
  unsent = {};
  changed_.notify_all();
}

void RequestChannel::appendText(int64_t request_id, int32_t token, std::string_view text) {
  std::lock_guard lock(mutex_);
  const int index = int(request_id - first_id_);
  if (token >= 0) unsent_[size_t(index)].token_ids.push_back(token);
  if (text.empty()) return;  // held back (partial UTF-8, a stop string's prefix)
  pushText(index, text);
}

void RequestChannel::finish(int index, const RequestStats& stats) {
  std::lock_guard lock(mutex_);
  if (finished_[size_t(index)]) return;
  if (!unsent_[size_t(index)].empty()) pushText(index, {});
  finished_[size_t(index)] = true;
  pending_.finishes.push_back({index, stats});
  if (--unfinished_ == 0) pending_.done = true;
  changed_.notify_all();
}

bool RequestChannel::finished(int index) const {
  std::lock_guard lock(mutex_);
  return finished_[size_t(index)];
}

int64_t RequestChannel::firstId() const {
  std::lock_guard lock(mutex_);
  return first_id_;
}

ChannelUpdate RequestChannel::waitForUpdate(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  auto somethingNew = [&] {
    return (accepted_ && !reported_accepted_) || !pending_.texts.empty() || !pending_.finishes.empty() ||
           pending_.error || pending_.done;
  };
  changed_.wait_for(lock, timeout, somethingNew);
  ChannelUpdate update = std::move(pending_);
  const bool done = update.done;
  pending_ = ChannelUpdate{};
  pending_.done = done;  // done stays done: a later call returns at once
  update.accepted = accepted_;
  reported_accepted_ = accepted_;
  return update;
}

}  // namespace kiln::server
