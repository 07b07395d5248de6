#include "runtime/cuda/kernel_cache.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "codegen/cuda/instance_source.h"

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
