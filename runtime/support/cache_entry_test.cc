#include "runtime/support/cache_entry.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "runtime/support/in_child_process.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

fs::path freshDir(const char* name) {
  fs::path dir = fs::temp_directory_path() / fmt::format("kiln_cache_entry_test_{}_{}", name, ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string readBytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void writeBytes(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

std::vector<fs::path> listDir(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path());
  return out;
}

TEST(CacheEntry, RoundTrip) {
  fs::path dir = freshDir("roundtrip");
  ASSERT_TRUE(writeCacheEntry(dir / "e", "key-1", std::string("pay\0load", 8)).ok());
  CacheLookup hit = readCacheEntry(dir / "e", "key-1");
  EXPECT_EQ(hit.state, CacheLookup::State::kHit);
  EXPECT_EQ(hit.payload, std::string("pay\0load", 8));
  EXPECT_EQ(readBytes(dir / "e").size(), kCacheEntryHeaderBytes + 5 + 8);
  EXPECT_EQ(readCacheEntry(dir / "absent", "key-1").state, CacheLookup::State::kMissing);
  EXPECT_EQ(listDir(dir).size(), 1u);  // no temporary file left
  fs::remove_all(dir);
}

// `bytes` with bits `mask` of byte `at` flipped.
std::string flipped(std::string bytes, size_t at, int mask) {
  if (at < bytes.size()) bytes[at] = char(bytes[at] ^ mask);
  return bytes;
}

struct BadEntry {
  const char* what;
  std::function<std::string(std::string)> damage;
  const char* expected;  // a phrase of the reported problem
};

TEST(CacheEntry, DamagedEntriesAreReportedDeletedAndNeverLoaded) {
  const std::vector<BadEntry> cases = {
      {"empty", [](std::string) { return std::string(); }, "truncated: 0 bytes"},
      {"cut in the header", [](std::string b) { return b.substr(0, 20); }, "shorter than the 32-byte header"},
      {"cut in the key", [](std::string b) { return b.substr(0, 34); }, "truncated: the header promises"},
      {"cut in the payload", [](std::string b) { return b.substr(0, b.size() - 1); },
       "truncated: the header promises"},
      {"bytes appended", [](std::string b) { return b + "xx"; }, "2 bytes past"},
      {"payload byte flipped", [](std::string b) { return flipped(b, b.size() - 3, 0x10); }, "checksum mismatch"},
      {"checksum byte flipped", [](std::string b) { return flipped(b, 24, 1); }, "checksum mismatch"},
      {"not an entry", [](std::string b) { return flipped(b, 0, 0x20); }, "not a kiln cache entry"},
      {"other format version", [](std::string b) { return flipped(b, 8, 3); }, "format version 2, expected 1"},
  };
  fs::path dir = freshDir("damaged");
  const std::string payload(1000, 'p');
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].what);
    const fs::path path = dir / fmt::format("entry{}", i);
    ASSERT_TRUE(writeCacheEntry(path, "the-key", payload).ok());
    writeBytes(path, cases[i].damage(readBytes(path)));
    testing::internal::CaptureStderr();
    CacheLookup r = readCacheEntry(path, "the-key");
    CacheLookup again = readCacheEntry(path, "the-key");
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(r.state, CacheLookup::State::kRejected);
    EXPECT_TRUE(r.payload.empty());
    EXPECT_NE(r.problem.find(cases[i].expected), std::string::npos) << r.problem;
    EXPECT_NE(err.find(path.string()), std::string::npos) << err;
    EXPECT_NE(err.find(cases[i].expected), std::string::npos) << err;
    EXPECT_FALSE(fs::exists(path));  // deleted: the next lookup is a miss
    EXPECT_EQ(again.state, CacheLookup::State::kMissing);
    // Rebuilt in place, it loads.
    ASSERT_TRUE(writeCacheEntry(path, "the-key", payload).ok());
    EXPECT_EQ(readCacheEntry(path, "the-key").state, CacheLookup::State::kHit);
  }
  fs::remove_all(dir);
}

TEST(CacheEntry, AnEntryOfAnotherKeyIsRejected) {
  fs::path dir = freshDir("key");
  ASSERT_TRUE(writeCacheEntry(dir / "e", "key-a", "payload").ok());
  testing::internal::CaptureStderr();
  CacheLookup r = readCacheEntry(dir / "e", "key-b");
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(r.state, CacheLookup::State::kRejected);
  EXPECT_EQ(r.problem, "written for key \"key-a\", expected \"key-b\"");
  EXPECT_NE(err.find("deleted, rebuilding it"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(dir / "e"));
  fs::remove_all(dir);
}

TEST(CacheEntry, AProblemIsReportedOncePerFile) {
  fs::path dir = freshDir("once");
  testing::internal::CaptureStderr();
  for (int i = 0; i < 3; ++i) {
    writeBytes(dir / "e", "garbage");
    EXPECT_EQ(readCacheEntry(dir / "e", "k").state, CacheLookup::State::kRejected);
  }
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  fs::remove_all(dir);
}

// Two processes rewrite one entry as fast as they can, each with a payload
// of its own byte; a third reads it throughout. Every read is a miss (before
// the first rename) or one writer's payload whole.
TEST(CacheEntry, TwoProcessesWritingOneEntryNeverTearIt) {
  fs::path dir = freshDir("race");
  const fs::path path = dir / "shared";
  constexpr int kWrites = 150;
  constexpr size_t kBytes = 256 << 10;
  std::vector<pid_t> writers;
  for (char fill : {'a', 'b'}) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      const std::string payload(kBytes, fill);
      for (int i = 0; i < kWrites; ++i)
        if (!writeCacheEntry(path, "shared-key", payload).ok()) ::_exit(1);
      ::_exit(0);
    }
    writers.push_back(pid);
  }
  int hits = 0, rejected = 0, torn = 0;
  for (int done = 0; done < 2;) {
    CacheLookup r = readCacheEntry(path, "shared-key");
    if (r.state == CacheLookup::State::kRejected) ++rejected;
    if (r.state == CacheLookup::State::kHit) {
      ++hits;
      const char first = r.payload.empty() ? 0 : r.payload[0];
      if (r.payload.size() != kBytes || (first != 'a' && first != 'b') ||
          r.payload.find_first_not_of(first) != std::string::npos)
        ++torn;
    }
    done = 0;
    for (pid_t& w : writers) {
      int status = 0;
      if (w > 0 && ::waitpid(w, &status, WNOHANG) == w) {
        EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "a writer failed";
        w = 0;
      }
      done += w == 0;
    }
  }
  EXPECT_EQ(rejected, 0);
  EXPECT_EQ(torn, 0);
  EXPECT_GT(hits, 0);
  EXPECT_EQ(readCacheEntry(path, "shared-key").state, CacheLookup::State::kHit);
  EXPECT_EQ(listDir(dir).size(), 1u);  // both writers' temporaries renamed away
  fs::remove_all(dir);
}

// A writer SIGKILLed with half its payload written leaves a temporary file
// that no reader opens, and that removeStaleCacheTemps deletes.
TEST(CacheEntry, AWriterKilledMidWriteLeavesNothingLoadable) {
  fs::path dir = freshDir("kill");
  const fs::path path = dir / "entry";
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    setCacheWriteHookForTesting([&](const fs::path&) {
      (void)!::write(ready[1], "h", 1);
      for (;;) ::pause();
    });
    (void)writeCacheEntry(path, "k", std::string(1 << 20, 'x'));
    ::_exit(3);  // not reached
  }
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  std::vector<fs::path> during = listDir(dir);
  ASSERT_EQ(during.size(), 1u);
  pid_t temp_pid = 0;
  EXPECT_TRUE(parseCacheTempName(during[0].filename().string(), &temp_pid));
  EXPECT_EQ(temp_pid, pid);
  EXPECT_EQ(removeStaleCacheTemps(dir), 0);  // its writer is alive: kept
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  ::close(ready[0]);
  ::close(ready[1]);

  EXPECT_FALSE(fs::exists(path));
  EXPECT_EQ(readCacheEntry(path, "k").state, CacheLookup::State::kMissing);
  EXPECT_GT(fs::file_size(during[0]), kCacheEntryHeaderBytes);  // half written, never loaded
  EXPECT_EQ(removeStaleCacheTemps(dir), 1);
  EXPECT_TRUE(listDir(dir).empty());
  fs::remove_all(dir);
}

// A full disk, simulated by the file-size limit (writes past it fail with
// EFBIG, as they would with ENOSPC): a clear error, nothing left behind.
TEST(CacheEntry, AFailedWriteIsAnErrorAndLeavesNoFile) {
  fs::path dir = freshDir("full");
  std::string message = process_testing::inChildProcess([&]() -> std::string {
    ::signal(SIGXFSZ, SIG_IGN);
    struct rlimit limit = {64 << 10, 64 << 10};
    if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) return "setrlimit failed";
    Status s = writeCacheEntry(dir / "big", "k", std::string(1 << 20, 'x'));
    if (s.ok()) return "the write past the limit succeeded";
    if (s.error().message.find("cannot write the cache file: File too large") == std::string::npos)
      return "unexpected error: " + s.error().message;
    return {};
  });
  EXPECT_EQ(message, "");
  EXPECT_TRUE(listDir(dir).empty());
  fs::remove_all(dir);
}

TEST(CacheEntry, AnUnwritableFolderIsAnError) {
  fs::path dir = freshDir("readonly");
  const bool root = ::geteuid() == 0;
  const uid_t nobody = 65534;
  if (root && ::chown(dir.c_str(), nobody, nobody) != 0) GTEST_SKIP() << "running as root; cannot chown to nobody";
  fs::permissions(dir, fs::perms::owner_read | fs::perms::owner_exec);  // 0500
  std::string message = process_testing::inChildProcess([&]() -> std::string {
    // Root writes anywhere: drop to the folder's owner first.
    if (root && (::setgid(nobody) != 0 || ::setuid(nobody) != 0)) return "SKIP: cannot drop root";
    Status s = writeCacheEntry(dir / "e", "k", "payload");
    if (s.ok()) return "the write into a 0500 folder succeeded";
    if (s.error().message.find("cannot create a cache file: Permission denied") == std::string::npos)
      return "unexpected error: " + s.error().message;
    return {};
  });
  fs::permissions(dir, fs::perms::owner_all);
  fs::remove_all(dir);
  if (message.rfind("SKIP", 0) == 0) GTEST_SKIP() << message;
  EXPECT_EQ(message, "");
}

TEST(CacheEntry, TempNames) {
  pid_t pid = 0;
  const fs::path temp = cacheTempPath("/x/entry.kjit");
  EXPECT_TRUE(parseCacheTempName(temp.filename().string(), &pid));
  EXPECT_EQ(pid, ::getpid());
  EXPECT_NE(cacheTempPath("/x/e"), cacheTempPath("/x/e"));
  EXPECT_FALSE(parseCacheTempName("entry.kjit", &pid));
  EXPECT_FALSE(parseCacheTempName("entry.tmp-12", &pid));
  EXPECT_FALSE(parseCacheTempName("entry.tmp-1x-2", &pid));
  EXPECT_FALSE(parseCacheTempName("entry.tmp--2", &pid));
}

}  // namespace
}  // namespace kiln
