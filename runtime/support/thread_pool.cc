#include "runtime/support/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <memory>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace kiln {
namespace {

// Set while a thread executes a chunk, so nested parallelFor runs inline.
thread_local bool t_in_job = false;

constexpr int kSpinIterations = 2000;

inline void cpuRelax() {
#if defined(__x86_64__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

int defaultThreads() {
  if (const char* env = std::getenv("KILN_CPU_THREADS")) {
    int n = std::atoi(env);
    if (n > 0) return n;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace

ThreadPool::ThreadPool(int num_threads)
    : num_threads_(num_threads > 0 ? num_threads : defaultThreads()) {
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this, i] { workerLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& worker : workers_) worker.join();
}

void ThreadPool::runChunks() {
  t_in_job = true;
  for (;;) {
    int64_t chunk = next_chunk_.fetch_add(1, std::memory_order_relaxed);
    if (chunk >= job_chunks_) break;
    int64_t begin = chunk * job_chunk_;
    (*job_)(begin, std::min(job_n_, begin + job_chunk_));
  }
  t_in_job = false;
}

void ThreadPool::workerLoop(int index) {
  uint64_t seen = 0;
  for (;;) {
    for (int i = 0; i < kSpinIterations && generation_.load(std::memory_order_acquire) == seen &&
                    !stop_.load(std::memory_order_relaxed);
         ++i)
      cpuRelax();
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    runChunks();
    if (pending_workers_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      // Notify under the mutex so the caller cannot miss it between its
      // predicate check and its wait.
      std::lock_guard<std::mutex> lock(mutex_);
      done_.notify_one();
    }
  }
}

void ThreadPool::parallelFor(int64_t n, int64_t grain,
                             const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  // A few chunks per thread balance uneven rows without much atomic traffic.
  const int64_t max_chunks = int64_t(num_threads_) * 4;
  int64_t chunk = std::max(grain, (n + max_chunks - 1) / max_chunks);
  int64_t chunks = (n + chunk - 1) / chunk;
  if (num_threads_ == 1 || chunks == 1 || t_in_job) {
    fn(0, n);
    return;
  }
  std::unique_lock<std::mutex> submit(submit_mutex_, std::try_to_lock);
  if (!submit.owns_lock()) {  // another caller thread owns the pool
    fn(0, n);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job_ = &fn;
    job_n_ = n;
    job_chunk_ = chunk;
    job_chunks_ = chunks;
    next_chunk_.store(0, std::memory_order_relaxed);
    pending_workers_ = int(workers_.size());
    ++generation_;
  }
  wake_.notify_all();
  runChunks();
  for (int i = 0; i < kSpinIterations && pending_workers_.load(std::memory_order_acquire) != 0; ++i)
    cpuRelax();
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [&] { return pending_workers_.load(std::memory_order_acquire) == 0; });
  job_ = nullptr;
}

namespace {
std::unique_ptr<ThreadPool>& poolSlot() {
  static std::unique_ptr<ThreadPool> pool = std::make_unique<ThreadPool>(0);
  return pool;
}
}  // namespace

ThreadPool& kernelThreadPool() { return *poolSlot(); }

void setKernelThreads(int n) { poolSlot() = std::make_unique<ThreadPool>(n); }

int kernelThreads() { return kernelThreadPool().numThreads(); }

void parallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  kernelThreadPool().parallelFor(n, grain, fn);
}

}  // namespace kiln
