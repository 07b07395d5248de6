#include "runtime/cuda/kernel_cache.h"

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/resource.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "codegen/cuda/instance_source.h"
#include "runtime/support/in_child_process.h"

namespace kiln::cuda {
namespace {

namespace fs = std::filesystem;

std::vector<KernelSource> twoKernels() {
  std::vector<KernelSource> out;
  for (auto [kind, params] : {std::pair<const char*, nlohmann::json>{"add", {{"width", 64}}},
                              {"rms_norm", {{"hidden", 64}, {"epsilon", 1e-6}}}}) {
    const std::string name = cuda_codegen::instanceName(kind, params);
    auto src = cuda_codegen::instanceSource(kind, params, name);
    EXPECT_TRUE(src.ok());
    out.push_back({name, src->source});
  }
  return out;
}

fs::path freshDir(const char* name) {
  fs::path dir = fs::temp_directory_path() / fmt::format("kiln_jit_test_{}_{}", name, ::getpid());
  fs::remove_all(dir);
  return dir;
}

TEST(KernelCache, SecondLoadHitsTheCache) {
  if (!loadNvrtc().ok()) {
    if (fs::exists("/usr/local/cuda")) FAIL() << loadNvrtc().error().message;
    GTEST_SKIP() << "no NVRTC";
  }
  KernelCacheOptions options;
  options.dir = freshDir("hit");
  options.progress = false;
  auto first = compileKernels(twoKernels(), options);
  ASSERT_TRUE(first.ok()) << first.error().message;
  EXPECT_EQ(first->compiled, 2);
  EXPECT_EQ(first->cached, 0);
  auto second = compileKernels(twoKernels(), options);
  ASSERT_TRUE(second.ok()) << second.error().message;
  EXPECT_EQ(second->cached, 2);
  ASSERT_EQ(second->kernels.size(), 2u);
  EXPECT_EQ(second->kernels[0].cubin, first->kernels[0].cubin);
  EXPECT_TRUE(second->kernels[1].resources.found);
  fs::remove_all(options.dir);
}

TEST(KernelCache, InstanceNamesLongerThanAFileNameAreCached) {
  if (!loadNvrtc().ok()) {
    if (fs::exists("/usr/local/cuda")) FAIL() << loadNvrtc().error().message;
    GTEST_SKIP() << "no NVRTC";
  }
  // 300 characters: the kernel symbol may be that long, a file name may not (255).
  const std::string name = "k_" + std::string(298, 'x');
  KernelSource kernel{name, "extern \"C\" __global__ void " + name + "() {}"};
  KernelCacheOptions options;
  options.dir = freshDir("long");
  options.progress = false;
  auto first = compileKernels({kernel}, options);
  ASSERT_TRUE(first.ok()) << first.error().message;
  auto second = compileKernels({kernel}, options);
  ASSERT_TRUE(second.ok()) << second.error().message;
  EXPECT_EQ(second->cached, 1);
  fs::remove_all(options.dir);
}

std::vector<fs::path> entries(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

std::string readBytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

#define SKIP_WITHOUT_NVRTC()                                                          \
  if (!loadNvrtc().ok()) {                                                            \
    if (fs::exists("/usr/local/cuda")) FAIL() << loadNvrtc().error().message;         \
    GTEST_SKIP() << "no NVRTC";                                                       \
  }

// A truncated entry and a corrupted one are reported, deleted and compiled
// again.
TEST(KernelCache, DamagedEntriesAreCompiledAgain) {
  SKIP_WITHOUT_NVRTC();
  KernelCacheOptions options;
  options.dir = freshDir("damaged");
  options.progress = false;
  auto first = compileKernels(twoKernels(), options);
  ASSERT_TRUE(first.ok()) << first.error().message;
  std::vector<fs::path> files = entries(options.dir);
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(files[0].extension(), ".kjit");
  const std::string whole = readBytes(files[0]);
  std::ofstream(files[0], std::ios::binary | std::ios::trunc) << whole.substr(0, whole.size() / 2);
  std::string corrupted = readBytes(files[1]);
  corrupted[corrupted.size() / 2] = char(corrupted[corrupted.size() / 2] ^ 0x01);
  std::ofstream(files[1], std::ios::binary | std::ios::trunc) << corrupted;

  ::testing::internal::CaptureStderr();
  auto second = compileKernels(twoKernels(), options);
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(second.ok()) << second.error().message;
  EXPECT_EQ(second->compiled, 2);
  EXPECT_EQ(second->cached, 0);
  EXPECT_NE(err.find(files[0].string() + ": truncated"), std::string::npos) << err;
  EXPECT_NE(err.find(files[1].string() + ": checksum mismatch"), std::string::npos) << err;
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_FALSE(second->kernels[i].cubin.empty());
    EXPECT_TRUE(second->kernels[i].resources.found);
  }
  auto third = compileKernels(twoKernels(), options);
  ASSERT_TRUE(third.ok()) << third.error().message;
  EXPECT_EQ(third->cached, 2);
  fs::remove_all(options.dir);
}

// One instance's entry copied over another's name holds the other's key.
TEST(KernelCache, AnEntryUnderAnotherKeysNameIsNotLoaded) {
  SKIP_WITHOUT_NVRTC();
  KernelCacheOptions options;
  options.dir = freshDir("wrongkey");
  options.progress = false;
  ASSERT_TRUE(compileKernels(twoKernels(), options).ok());
  std::vector<fs::path> files = entries(options.dir);
  ASSERT_EQ(files.size(), 2u);
  fs::copy_file(files[0], files[1], fs::copy_options::overwrite_existing);
  ::testing::internal::CaptureStderr();
  auto again = compileKernels(twoKernels(), options);
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(again.ok()) << again.error().message;
  EXPECT_EQ(again->cached, 1);
  EXPECT_EQ(again->compiled, 1);
  EXPECT_NE(err.find(files[1].string() + ": written for key"), std::string::npos) << err;
  fs::remove_all(options.dir);
}

// A cache folder that cannot exist (its parent is a file): a warning, the
// run goes on, and the kernels stay cached in memory for the process.
TEST(KernelCache, AnUnusableFolderWarnsAndKeepsKernelsInMemory) {
  SKIP_WITHOUT_NVRTC();
  KernelCacheOptions options;
  options.dir = "/dev/null/kiln-jit";
  options.progress = false;
  ::testing::internal::CaptureStderr();
  auto first = compileKernels(twoKernels(), options);
  auto second = compileKernels(twoKernels(), options);
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(first.ok()) << first.error().message;
  ASSERT_TRUE(second.ok()) << second.error().message;
  EXPECT_EQ(first->compiled, 2);
  EXPECT_EQ(second->cached, 2);
  EXPECT_TRUE(second->kernels[1].cubin == first->kernels[1].cubin);  // the same bytes, from memory
  EXPECT_NE(err.find("kiln jit: warning: cannot create the JIT cache folder /dev/null/kiln-jit"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("kept in memory"), std::string::npos) << err;
}

// A full disk, simulated by the file-size limit: the same warning, the
// kernels still come back, and no file is left in the folder.
TEST(KernelCache, AFullDiskWarnsAndTheRunGoesOn) {
  SKIP_WITHOUT_NVRTC();
  const fs::path dir = freshDir("full");
  fs::create_directories(dir);
  std::string message = process_testing::inChildProcess([&]() -> std::string {
    ::signal(SIGXFSZ, SIG_IGN);
    struct rlimit limit = {1024, 1024};
    if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) return "setrlimit failed";
    KernelCacheOptions options;
    options.dir = dir;
    options.progress = false;
    ::testing::internal::CaptureStderr();
    auto r = compileKernels(twoKernels(), options);
    const std::string err = ::testing::internal::GetCapturedStderr();
    if (!r.ok()) return "the compile failed: " + r.error().message;
    if (r->compiled != 2 || r->kernels[0].cubin.empty()) return "the kernels did not come back";
    if (err.find("File too large") == std::string::npos || err.find("kept in memory") == std::string::npos)
      return "no clear warning: " + err;
    return {};
  });
  EXPECT_EQ(message, "");
  EXPECT_TRUE(entries(dir).empty());
  fs::remove_all(dir);
}

TEST(KernelCache, KeyDependsOnSourceAndOptions) {
  KernelCacheOptions options;
  options.compile.include_dirs = {};
  KernelSource a{"k", "extern \"C\" __global__ void k() {}"};
  KernelSource b{"k", "extern \"C\" __global__ void k() { }"};
  EXPECT_NE(kernelCacheKey(a, options, "13.0"), kernelCacheKey(b, options, "13.0"));
  EXPECT_NE(kernelCacheKey(a, options, "13.0"), kernelCacheKey(a, options, "13.1"));
  KernelCacheOptions other = options;
  other.compile.arch = "sm_100";
  EXPECT_NE(kernelCacheKey(a, options, "13.0"), kernelCacheKey(a, other, "13.0"));
  EXPECT_EQ(kernelCacheKey(a, options, "13.0").size(), 32u);
}

TEST(KernelCache, FailureNamesEveryBrokenInstance) {
  if (!loadNvrtc().ok()) {
    if (fs::exists("/usr/local/cuda")) FAIL() << loadNvrtc().error().message;
    GTEST_SKIP() << "no NVRTC";
  }
  KernelCacheOptions options;
  options.dir = freshDir("fail");
  options.progress = false;
  auto r = compileKernels({{"bad_one", "extern \"C\" __global__ void bad_one() { nope(); }"},
                           {"good_one", "extern \"C\" __global__ void good_one() {}"}},
                          options);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("bad_one"), std::string::npos);
  EXPECT_NE(r.error().message.find("nope"), std::string::npos);
  EXPECT_EQ(r.error().message.find("good_one failed"), std::string::npos);
  fs::remove_all(options.dir);
}

}  // namespace
}  // namespace kiln::cuda
