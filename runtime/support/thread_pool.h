// A small persistent thread pool for host loops. The CPU kernels split their
// outer loop (output columns, (sequence, head) pairs, rows) with parallelFor,
// the engine its per-sequence sampling and the CUDA executor its logits
// conversion to f32. Workers park on a condition variable between calls so a
// decode step does not pay thread creation. One job runs at a time; a
// parallelFor issued from inside a job (or from a second thread while one
// runs) executes inline, so nested calls are safe and never deadlock.
// Waiting threads spin for a few tens of microseconds before blocking: a
// decode step issues kernels back to back, and a condition-variable wake-up
// costs about as much as a small GEMV.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kiln {

class ThreadPool {
 public:
  // num_threads counts the calling thread; 0 means hardware cores.
  explicit ThreadPool(int num_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int numThreads() const { return num_threads_; }

  // Calls fn(begin, end) over disjoint chunks covering [0, n), each chunk at
  // least `grain` long (except the last). Returns when all chunks are done.
  void parallelFor(int64_t n, int64_t grain,
                   const std::function<void(int64_t, int64_t)>& fn);

 private:
  void workerLoop(int index);
  void runChunks();

  int num_threads_;
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  std::mutex submit_mutex_;  // serializes jobs from different caller threads
  // The current job, guarded by mutex_ for publication.
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0, job_chunk_ = 0, job_chunks_ = 0;
  std::atomic<int64_t> next_chunk_{0};
  // Atomics so a waiting thread can spin on them briefly before sleeping.
  std::atomic<int> pending_workers_{0};
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> stop_{false};
};

// The process-wide pool parallelFor uses. Its size starts at the hardware core
// count (std::thread::hardware_concurrency) or KILN_CPU_THREADS if set.
ThreadPool& kernelThreadPool();
// Rebuilds the process-wide pool with n threads (0 = hardware cores). Not safe
// while kernels are running.
void setKernelThreads(int n);
int kernelThreads();

// Shorthand for kernelThreadPool().parallelFor(...).
void parallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace kiln
