// The one thread that owns the Engine (which is not thread-safe): it takes
// submissions and cancels from a mutex-protected queue, steps the engine
// while it has work, and fills each request's RequestChannel from the token
// callback and the stats of completions that ended. HTTP handler threads
// only touch the queue and their channels.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/engine/engine.h"
#include "runtime/server/prometheus_metrics.h"
#include "runtime/server/request_channel.h"

namespace kiln::server {

class EngineLoop {
 public:
  // `max_queue`: waiting requests (here and in the engine) beyond which
  // submit() refuses new ones.
  EngineLoop(std::unique_ptr<Engine> engine, int64_t max_queue, PrometheusMetrics& metrics);
  ~EngineLoop();  // cancels what runs and joins the thread

  // Queues a request; the channel says when the engine took or refused it.
  // Nullptr when the queue is full (the caller answers 429).
  std::shared_ptr<RequestChannel> submit(GenerationRequest request);
  // Ends the request's completions (a client that went away). Any thread.
  void cancel(const std::shared_ptr<RequestChannel>& channel);
  // Lets in-flight requests finish for up to `grace`, then cancels the rest
  // and waits for their channels to close. New submissions are refused from
  // the call on.
  void drain(std::chrono::milliseconds grace);

  const Engine& engine() const { return *engine_; }  // immutable facts only (tokenizer, context)

 private:
  struct Submission {
    GenerationRequest request;
    std::shared_ptr<RequestChannel> channel;
  };
  void run();
  void takeSubmission(Submission submission);
  void collectFinished();
  void failAll(const std::string& message);
  void publish();

  std::unique_ptr<Engine> engine_;
  const int64_t max_queue_;
  PrometheusMetrics& metrics_;

  std::mutex mutex_;  // guards the fields below up to the thread
  std::condition_variable work_;
  std::deque<Submission> submissions_;
  std::vector<std::shared_ptr<RequestChannel>> cancels_;
  int64_t engine_waiting_ = 0;  // the engine's waiting count after the last step
  int64_t in_flight_ = 0;       // channels the engine thread holds
  bool draining_ = false;
  bool stopping_ = false;
  std::condition_variable drained_;

  // Engine thread only.
  std::vector<std::shared_ptr<RequestChannel>> active_;
  bool needs_retire_step_ = false;
  std::vector<int64_t> forget_after_step_;  // ended completions whose stats were read

  std::thread thread_;
};

}  // namespace kiln::server
