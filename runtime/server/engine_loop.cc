#include "runtime/server/engine_loop.h"

#include <algorithm>

#include "runtime/tokenizer/tokenizer.h"

namespace kiln::server {

EngineLoop::EngineLoop(std::unique_ptr<Engine> engine, int64_t max_queue, PrometheusMetrics& metrics)
    : engine_(std::move(engine)), max_queue_(max_queue), metrics_(metrics) {
  publish();
  thread_ = std::thread([this] { run(); });
}

EngineLoop::~EngineLoop() {
  drain(std::chrono::milliseconds(0));
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_.notify_all();
  thread_.join();
}

std::shared_ptr<RequestChannel> EngineLoop::submit(GenerationRequest request) {
  auto channel = std::make_shared<RequestChannel>(request.sampling.n);
  {
    std::lock_guard lock(mutex_);
    if (draining_) {
      channel->refuse(ApiError{503, "the server is shutting down", "server_error", {}, "shutting_down"});
      return channel;
    }
    if (int64_t(submissions_.size()) + engine_waiting_ >= max_queue_) return nullptr;
    submissions_.push_back({std::move(request), channel});
  }
  work_.notify_all();
  return channel;
}

void EngineLoop::cancel(const std::shared_ptr<RequestChannel>& channel) {
  {
    std::lock_guard lock(mutex_);
    cancels_.push_back(channel);
  }
  work_.notify_all();
}

void EngineLoop::drain(std::chrono::milliseconds grace) {
  std::unique_lock lock(mutex_);
  draining_ = true;
  const auto deadline = std::chrono::steady_clock::now() + grace;
  auto empty = [&] { return submissions_.empty() && in_flight_ == 0; };
  if (drained_.wait_until(lock, deadline, empty)) return;
  // Out of time: cancel what is left (queued submissions are refused by the thread).
  cancels_.push_back(nullptr);  // nullptr: every request
  work_.notify_all();
  drained_.wait(lock, empty);
}

void EngineLoop::run() {
  for (;;) {
    std::deque<Submission> submissions;
    std::vector<std::shared_ptr<RequestChannel>> cancels;
    {
      std::unique_lock lock(mutex_);
      work_.wait(lock, [&] {
        return stopping_ || !submissions_.empty() || !cancels_.empty() || !active_.empty() || needs_retire_step_ ||
               !forget_after_step_.empty();
      });
      if (stopping_ && active_.empty()) return;
      submissions.swap(submissions_);
      cancels.swap(cancels_);
      in_flight_ += int64_t(submissions.size());  // so drain() never sees them in neither place
    }
    const bool cancel_all = std::find(cancels.begin(), cancels.end(), nullptr) != cancels.end();
    for (Submission& s : submissions) {
      if (cancel_all) {
        s.channel->refuse(ApiError{503, "the server is shutting down", "server_error", {}, "shutting_down"});
        std::lock_guard lock(mutex_);
        --in_flight_;
      } else {
        takeSubmission(std::move(s));
      }
    }
    if (cancel_all) cancels.assign(active_.begin(), active_.end());
    for (const auto& channel : cancels)
      if (channel && channel->firstId() >= 0) engine_->cancel(channel->firstId());
    if (!submissions.empty()) publish();  // the queue limit counts them at once, not after the step

    // Completions collected last time have been retired by now (by the step
    // since, or at once when cancelled): the engine may drop their stats.
    std::vector<int64_t> forget_now;
    forget_now.swap(forget_after_step_);
    if (!engine_->idle() || needs_retire_step_) {
      // Once the engine goes idle, one more step returns the last finished
      // sequences' blocks to the pool (as Engine::runUntilIdle does).
      const bool was_busy = !engine_->idle();
      if (Status stepped = engine_->step(); !stepped.ok()) failAll(stepped.error().message);
      needs_retire_step_ = was_busy && engine_->idle();
    }
    for (int64_t id : forget_now) engine_->forgetStats(id);
    collectFinished();
    publish();
  }
}

void EngineLoop::takeSubmission(Submission submission) {
  std::shared_ptr<RequestChannel> channel = submission.channel;
  // The callback runs on this thread during step(), after accept() set the first id.
  LogprobsCallback on_logprobs;
  if (submission.request.sampling.logprobs >= 0) {
    // Token ids become their bytes here, where the tokenizer lives.
    on_logprobs = [channel, &tokenizer = engine_->tokenizer()](int64_t request_id,
                                                                const sampling::TokenLogprobs& logprobs) {
      TokenLogprob out{tokenizer.tokenBytes(logprobs.token), logprobs.logprob, {}};
      for (const auto& [id, logprob] : logprobs.top) out.top.emplace_back(tokenizer.tokenBytes(id), logprob);
      channel->appendLogprob(request_id, std::move(out));
    };
  }
  auto first_id = engine_->submit(
      std::move(submission.request),
      [channel](int64_t request_id, int32_t token, std::string_view text) {
        channel->appendText(request_id, token, text);
      },
      std::move(on_logprobs));
  if (!first_id.ok()) {
    channel->refuse(invalidRequest(first_id.error().message));
    metrics_.recordRejected("invalid_request");
    std::lock_guard lock(mutex_);
    --in_flight_;
    return;
  }
  channel->accept(*first_id);
  active_.push_back(channel);
}

void EngineLoop::collectFinished() {
  size_t kept = 0;
  for (auto& channel : active_) {
    const int64_t first = channel->firstId();
    bool all_done = true;
    for (int i = 0; i < channel->completions(); ++i) {
      if (channel->finished(i)) continue;
      const RequestStats* stats = engine_->stats(first + i);
      if (stats && stats->finish != FinishReason::kRunning) {
        metrics_.recordFinish(*stats);
        channel->finish(i, *stats);
        forget_after_step_.push_back(first + i);
      } else {
        all_done = false;
      }
    }
    if (!all_done) active_[kept++] = std::move(channel);
  }
  const int64_t ended = int64_t(active_.size() - kept);
  active_.resize(kept);
  if (ended > 0) {
    std::lock_guard lock(mutex_);
    in_flight_ -= ended;
  }
}

void EngineLoop::failAll(const std::string& message) {
  // A failed forward leaves the batch's state unknown: every running request
  // ends with the error rather than with text that may be wrong.
  for (auto& channel : active_) {
    engine_->cancel(channel->firstId());
    for (int i = 0; i < channel->completions(); ++i) {
      RequestStats stats;
      if (const RequestStats* s = engine_->stats(channel->firstId() + i)) stats = *s;
      stats.finish = FinishReason::kError;
      stats.error = message;
      if (!channel->finished(i)) {
        metrics_.recordFinish(stats);
        channel->finish(i, stats);
      }
    }
  }
  std::lock_guard lock(mutex_);
  in_flight_ -= int64_t(active_.size());
  active_.clear();
}

void EngineLoop::publish() {
  EngineSnapshot snapshot;
  snapshot.engine = engine_->metrics();
  {
    std::lock_guard lock(mutex_);
    engine_waiting_ = snapshot.engine.waiting;
    snapshot.queued_submissions = int64_t(submissions_.size());
    snapshot.requests_in_flight = in_flight_;
    if (submissions_.empty() && in_flight_ == 0) drained_.notify_all();
  }
  metrics_.setSnapshot(snapshot);
}

}  // namespace kiln::server
