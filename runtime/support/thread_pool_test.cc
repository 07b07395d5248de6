#include "runtime/support/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace kiln {
namespace {

TEST(ThreadPoolTest, CoversEveryIndexOnce) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.numThreads(), threads);
    for (int64_t n : {0, 1, 7, 64, 1001}) {
      for (int64_t grain : {1, 5, 100}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        pool.parallelFor(n, grain, [&](int64_t begin, int64_t end) {
          ASSERT_LE(0, begin);
          ASSERT_LT(begin, end);
          ASSERT_LE(end, n);
          for (int64_t i = begin; i < end; ++i) hits[size_t(i)]++;
        });
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[size_t(i)].load(), 1) << n << " " << i;
      }
    }
  }
}

TEST(ThreadPoolTest, NestedCallsRunInline) {
  ThreadPool pool(4);
  std::atomic<int64_t> total{0};
  pool.parallelFor(16, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      pool.parallelFor(10, 1, [&](int64_t b2, int64_t e2) { total += e2 - b2; });
  });
  EXPECT_EQ(total.load(), 160);
}

TEST(ThreadPoolTest, KernelThreadsAreSettable) {
  const int before = kernelThreads();
  EXPECT_GE(before, 1);
  setKernelThreads(3);
  EXPECT_EQ(kernelThreads(), 3);
  setKernelThreads(0);
  EXPECT_GE(kernelThreads(), 1);
  setKernelThreads(before);
}

}  // namespace
}  // namespace kiln
