// Every kernel kind, instantiated at SmolLM2 and Llama-3-8B shapes, compiles
// with NVRTC to an sm_90 CUBIN, and ptxas reports no spills for the attention
// and norm kernels. Runs without a GPU (NVRTC needs none). When the CUDA
// toolkit is installed (/usr/local/cuda) NVRTC must load and compile: a
// missing or broken NVRTC there fails the test rather than skipping it.
#include "runtime/cuda/nvrtc_compiler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "codegen/cuda/instance_source.h"
#include "runtime/cuda/kernel_test_cases.h"

namespace kiln::cuda {
namespace {

bool toolkitInstalled() { return std::filesystem::exists("/usr/local/cuda"); }

// Skips when no toolkit is installed; fails when one is but NVRTC cannot load.
#define KILN_REQUIRE_NVRTC()                                                            \
  do {                                                                                  \
    auto nvrtc_ = loadNvrtc();                                                          \
    if (!nvrtc_.ok()) {                                                                 \
      if (toolkitInstalled()) FAIL() << "CUDA is installed but " << nvrtc_.error().message; \
      GTEST_SKIP() << "no CUDA toolkit here: " << nvrtc_.error().message;                \
    }                                                                                   \
  } while (0)

TEST(ResourceUsage, ParsesPtxasReport) {
  const std::string log =
      "ptxas info    : 0 bytes gmem\n"
      "ptxas info    : Compiling entry function 'other' for 'sm_90'\n"
      "ptxas info    : Used 10 registers, used 0 barriers, 0 bytes smem\n"
      "ptxas info    : Compiling entry function 'attn' for 'sm_90'\n"
      "ptxas info    : Function properties for attn\n"
      "    8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads\n"
      "ptxas info    : Used 72 registers, used 1 barriers, 9344 bytes smem, 400 bytes cmem[0]\n";
  ResourceUsage u = parseResourceUsage(log, "attn");
  ASSERT_TRUE(u.found);
  EXPECT_EQ(u.registers, 72);
  EXPECT_EQ(u.barriers, 1);
  EXPECT_EQ(u.shared_bytes, 9344);
  EXPECT_EQ(u.constant_bytes, 400);
  EXPECT_EQ(u.stack_bytes, 8);
  EXPECT_EQ(u.spill_stores, 4);
  EXPECT_EQ(u.spill_loads, 12);
  EXPECT_FALSE(parseResourceUsage(log, "missing").found);
}

TEST(Nvrtc, LoadsAndReportsWhereFrom) {
  KILN_REQUIRE_NVRTC();
  const Nvrtc* nvrtc = *loadNvrtc();
  EXPECT_GE(nvrtc->major, 12);
  std::printf("NVRTC %s from %s\n", nvrtc->versionText().c_str(), nvrtc->library.path().c_str());
  EXPECT_FALSE(nvrtc->library.path().empty());
}

TEST(Nvrtc, FailedCompileNamesInstanceAndLog) {
  KILN_REQUIRE_NVRTC();
  CompileOptions options;
  options.include_dirs = defaultKernelIncludeDirs();
  auto r = compileKernel("broken_instance", "extern \"C\" __global__ void broken_instance() { undeclared_thing(); }",
                         options);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("broken_instance"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("undeclared_thing"), std::string::npos) << r.error().message;
}

class KernelCompile : public ::testing::TestWithParam<testing::KernelCase> {};

TEST_P(KernelCompile, CompilesToSm90CubinWithoutSpills) {
  KILN_REQUIRE_NVRTC();
  const testing::KernelCase& c = GetParam();
  const std::string name = cuda_codegen::instanceName(c.kind, c.params);
  auto inst = cuda_codegen::instanceSource(c.kind, c.params, name);
  ASSERT_TRUE(inst.ok()) << inst.error().message;
  CompileOptions options;
  options.include_dirs = defaultKernelIncludeDirs();
  auto compiled = compileKernel(name, inst->source, options);
  ASSERT_TRUE(compiled.ok()) << compiled.error().message;
  EXPECT_FALSE(compiled->cubin.empty());
  const ResourceUsage& u = compiled->resources;
  ASSERT_TRUE(u.found) << "no ptxas report for " << name << " in:\n" << compiled->log;
  std::printf("%-40s regs %3d smem %6d stack %4d spill st/ld %d/%d\n", c.kind.c_str(), u.registers,
              u.shared_bytes, u.stack_bytes, u.spill_stores, u.spill_loads);
  EXPECT_GT(u.registers, 0);
  EXPECT_LE(u.registers * inst->launch.block_threads, 65536) << "block does not fit the register file";
  // The hot kernels must not spill: a spill is a local-memory round trip per use.
  EXPECT_EQ(u.spill_stores, 0) << name << "\n" << compiled->log;
  EXPECT_EQ(u.spill_loads, 0) << name << "\n" << compiled->log;
  EXPECT_LE(u.shared_bytes, 48 * 1024) << "static shared memory above 48 KiB";
}

std::string caseName(const ::testing::TestParamInfo<testing::KernelCase>& info) {
  return std::to_string(info.index) + "_" + info.param.kind;
}

INSTANTIATE_TEST_SUITE_P(AllKinds, KernelCompile,
                         ::testing::ValuesIn(testing::representativeKernelCases()), caseName);

}  // namespace
}  // namespace kiln::cuda
