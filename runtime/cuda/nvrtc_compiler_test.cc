// Every kernel kind, instantiated at SmolLM2 and Llama-3-8B shapes, compiles
// with NVRTC to an sm_90 CUBIN, and ptxas reports no spills for the attention
// and norm kernels; so do an f32 plan's kernels, for sm_90a. Runs without a GPU (NVRTC needs none). When the CUDA
// toolkit is installed (/usr/local/cuda) NVRTC must load and compile: a
// missing or broken NVRTC there fails the test rather than skipping it.
#include "runtime/cuda/nvrtc_compiler.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <vector>

#include "codegen/cuda/instance_source.h"
#include "codegen/cuda/kernel_selection.h"
#include "codegen/kernels/flash_attention.cuh"  // the host-visible layout helpers only
#include "codegen/kernels/flash_attention_wgmma.cuh"  // the same
#include "runtime/cuda/executor/bf16_fixture_plan.h"
#include "runtime/cuda/kernel_test_cases.h"
#include "test/source_root.h"

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

// Compiles one instance for `arch` (empty: the instance's own target, else
// NVRTC's default sm_90) and checks ptxas' report.
void expectCompilesWithoutSpills(const std::string& kind, const nlohmann::json& params, const std::string& name,
                                 const std::string& arch) {
  auto inst = cuda_codegen::instanceSource(kind, params, name);
  ASSERT_TRUE(inst.ok()) << inst.error().message;
  CompileOptions options;
  options.include_dirs = defaultKernelIncludeDirs();
  if (!arch.empty()) options.arch = arch;
  else if (!inst->arch.empty()) options.arch = inst->arch;  // the wgmma kernels: sm_90a
  auto compiled = compileKernel(name, inst->source, options);
  ASSERT_TRUE(compiled.ok()) << compiled.error().message;
  EXPECT_FALSE(compiled->cubin.empty());
  const ResourceUsage& u = compiled->resources;
  ASSERT_TRUE(u.found) << "no ptxas report for " << name << " in:\n" << compiled->log;
  std::printf("%-40s %-7s regs %3d smem %6d stack %4d spill st/ld %d/%d\n", kind.c_str(), options.arch.c_str(),
              u.registers, u.shared_bytes, u.stack_bytes, u.spill_stores, u.spill_loads);
  EXPECT_GT(u.registers, 0);
  EXPECT_LE(u.registers * inst->launch.block_threads, 65536) << "block does not fit the register file";
  // The hot kernels must not spill: a spill is a local-memory round trip per use.
  EXPECT_EQ(u.spill_stores, 0) << name << "\n" << compiled->log;
  EXPECT_EQ(u.spill_loads, 0) << name << "\n" << compiled->log;
  EXPECT_LE(u.shared_bytes, 48 * 1024) << "static shared memory above 48 KiB";
  // ptxas serializes the warpgroup multiplies (each waits for the one before)
  // when the accumulators do not stay put in registers, and says so.
  EXPECT_EQ(compiled->log.find("Potential Performance Loss"), std::string::npos) << name << "\n" << compiled->log;
  if (std::getenv("KILN_PRINT_PTXAS")) std::printf("%s\n", compiled->log.c_str());
}

class KernelCompile : public ::testing::TestWithParam<testing::KernelCase> {};

TEST_P(KernelCompile, CompilesToSm90CubinWithoutSpills) {
  KILN_REQUIRE_NVRTC();
  const testing::KernelCase& c = GetParam();
  expectCompilesWithoutSpills(c.kind, c.params, cuda_codegen::instanceName(c.kind, c.params), "");
}

// An f32 plan's kernels at SmolLM2 and Llama-3-8B shapes, for sm_90a: the
// executor compiles every instance for it on Hopper.
class F32PlanKernelCompile : public ::testing::TestWithParam<testing::KernelCase> {};

TEST_P(F32PlanKernelCompile, CompilesToSm90aCubinWithoutSpills) {
  KILN_REQUIRE_NVRTC();
  const testing::KernelCase& c = GetParam();
  expectCompilesWithoutSpills(c.kind, c.params, cuda_codegen::instanceName(c.kind, c.params), "sm_90a");
}

// Every kernel instance among the tiny-llama fixture plan's variants (f32,
// kiln-compile's default, chosen for sm_90a), as the executor generates
// them (kernel_set.cc), and the greedy argmax over the f32 logits.
TEST(F32Plan, FixtureInstancesCompileForSm90aWithoutSpills) {
  KILN_REQUIRE_NVRTC();
  auto manifest = Manifest::load(checkoutPath("test/fixtures/tiny-llama/artifact"));
  ASSERT_TRUE(manifest.ok()) << manifest.error().message;
  ASSERT_EQ(manifest->activation_type, "f32");
  ASSERT_EQ(manifest->target, "sm_90a");
  std::set<std::string> names;
  std::vector<KernelVariant> instances;
  for (const Step& step : manifest->findEntry("forward")->steps)
    for (const KernelVariant& v : step.variants)
      if (!v.instance.empty() && names.insert(v.instance).second) instances.push_back(v);
  const cuda_codegen::GreedyInstance greedy = cuda_codegen::greedyInstance(128, "f32");
  instances.push_back({VariantRole::kStep, {}, {}, greedy.kind, greedy.params, greedy.name});
  // embedding, rms_norm, residual_rms_norm, rope_kv_append, paged_attention
  // (+ split and combine), silu_mul, add, gather_last_tokens, argmax; no gemm.
  EXPECT_EQ(instances.size(), 11u);
  for (const KernelVariant& inst : instances) {
    SCOPED_TRACE(inst.instance);
    EXPECT_NE(inst.kind, "gemm");
    expectCompilesWithoutSpills(inst.kind, inst.params, inst.instance, "sm_90a");
  }
}

// The same for the Qwen3 and sliding-window fixtures' plans: rope_kv_append
// with the per-head q/k norm, and windowed paged attention.
TEST(F32Plan, FamilyFixtureInstancesCompileForSm90aWithoutSpills) {
  KILN_REQUIRE_NVRTC();
  for (const char* fixture : {"tiny-qwen3", "tiny-mistral-swa", "tiny-phi3", "tiny-gemma3"}) {
    SCOPED_TRACE(fixture);
    const std::string name = fixture;
    auto manifest = Manifest::load(checkoutPath(std::string("test/fixtures/") + fixture + "/artifact"));
    ASSERT_TRUE(manifest.ok()) << manifest.error().message;
    std::set<std::string> names;
    int qk_norm = 0, windowed = 0, geglu = 0, scaled_embedding = 0;
    for (const Step& step : manifest->findEntry("forward")->steps)
      for (const KernelVariant& v : step.variants) {
        if (v.instance.empty() || !names.insert(v.instance).second) continue;
        qk_norm += v.params.value("qk_norm", false) ? 1 : 0;
        windowed += v.params.value("sliding_window", 0) > 0 ? 1 : 0;
        geglu += v.params.value("activation", "") == "gelu_tanh" ? 1 : 0;
        scaled_embedding += v.params.contains("scale") && v.kind == "embedding" ? 1 : 0;
        SCOPED_TRACE(v.instance);
        expectCompilesWithoutSpills(v.kind, v.params, v.instance, "sm_90a");
      }
    // Gemma 3: the local layers' rope instance and the global layer's.
    EXPECT_EQ(qk_norm, name == "tiny-qwen3" ? 1 : name == "tiny-gemma3" ? 2 : 0);
    EXPECT_EQ(geglu, name == "tiny-gemma3" ? 1 : 0);
    EXPECT_EQ(scaled_embedding, name == "tiny-gemma3" ? 1 : 0);
    EXPECT_GE(windowed, 2);  // paged_attention and its split form
  }
}

// The state-space fixtures' plans (tiny-mamba, tiny-mamba2 and the
// tiny-hybrid Nemotron-H stack), f32 and bf16: every instance among their
// variants, the SSM kinds, kv_append and relu_squared among them, as the
// executor generates them.
TEST(StateSpacePlan, FixtureInstancesCompileForSm90aWithoutSpills) {
  KILN_REQUIRE_NVRTC();
  for (const char* fixture : {"tiny-mamba", "tiny-mamba2", "tiny-hybrid"})
    for (const char* folder : {"artifact", "artifact-bf16"}) {
      SCOPED_TRACE(std::string(fixture) + "/" + folder);
      auto manifest = Manifest::load(checkoutPath(std::string("test/fixtures/") + fixture + "/" + folder));
      ASSERT_TRUE(manifest.ok()) << manifest.error().message;
      std::set<std::string> names, kinds;
      for (const Step& step : manifest->findEntry("forward")->steps)
        for (const KernelVariant& v : step.variants) {
          if (v.instance.empty() || !names.insert(v.instance).second) continue;
          kinds.insert(v.kind);
          SCOPED_TRACE(v.instance);
          expectCompilesWithoutSpills(v.kind, v.params, v.instance, "sm_90a");
        }
      const std::string name = fixture;
      EXPECT_EQ(kinds.count("ssm_conv1d"), 1u);
      EXPECT_EQ(kinds.count(name == "tiny-mamba" ? "selective_scan" : "ssd_scan"), 1u);
      EXPECT_EQ(kinds.count("ssm_gated_norm"), name == "tiny-mamba" ? 0u : 1u);
      EXPECT_EQ(kinds.count("kv_append"), name == "tiny-hybrid" ? 1u : 0u);
      EXPECT_EQ(kinds.count("relu_squared"), name == "tiny-hybrid" ? 1u : 0u);
    }
}

// Every kernel instance of the tiny-llama spec fixture's plans (forward and
// verify: the tree-masked paged_attention among them), the f32 plan over
// f32, bf16, int8 and fp8 KV and the bf16 plan over bf16, int8 and fp8 KV,
// as the CUDA verify tests run them (test/gpu/cuda_verify_test.cc).
TEST(SpecPlan, VerifyInstancesCompileForSm90aWithoutSpills) {
  KILN_REQUIRE_NVRTC();
  const std::string fixture = checkoutPath("test/fixtures/tiny-llama");
  std::set<std::string> names;
  int trees = 0;
  for (auto [activation, kv_type] : {std::pair{"f32", "f32"}, std::pair{"f32", "bf16"}, std::pair{"f32", "int8"},
                                     std::pair{"f32", "fp8e4m3"}, std::pair{"bf16", "bf16"},
                                     std::pair{"bf16", "int8"}, std::pair{"bf16", "fp8e4m3"}}) {
    SCOPED_TRACE(std::string(activation) + " plan, " + kv_type + " KV");
    auto plan = cuda::testing::fixturePlan(fixture, activation, kv_type, "artifact-spec");
    ASSERT_TRUE(plan.ok()) << plan.error().message;
    const Entry* verify = plan->findEntry("verify");
    ASSERT_NE(verify, nullptr);
    for (const Entry* entry : {plan->findEntry("forward"), verify})
      for (const Step& step : entry->steps)
        for (const KernelVariant& v : step.variants) {
          // By params: fixturePlan keeps the plan's instance names.
          if (v.instance.empty() || !names.insert(v.kind + v.params.dump()).second) continue;
          trees += v.params.value("tree_mask", false) ? 1 : 0;
          SCOPED_TRACE(v.instance);
          expectCompilesWithoutSpills(v.kind, v.params, v.instance, "sm_90a");
        }
  }
  EXPECT_EQ(trees, 7);  // a tree-masked paged_attention a plan
}

// The LayerSkip draft entry's instances (kiln-compile --spec-layerskip 1 on
// the two-layer fixture: layer 0, the final norm and LM head, tree-masked),
// f32 and bf16 plans, as the CUDA executor binds them beside verify's.
TEST(SpecPlan, DraftInstancesCompileForSm90aWithoutSpills) {
  KILN_REQUIRE_NVRTC();
  const std::string fixture = checkoutPath("test/fixtures/tiny-llama");
  for (const char* activation : {"f32", "bf16"}) {
    SCOPED_TRACE(std::string(activation) + " plan");
    auto plan = cuda::testing::fixturePlan(fixture, activation, activation, "artifact-layerskip");
    ASSERT_TRUE(plan.ok()) << plan.error().message;
    const Entry* draft = plan->findEntry("draft");
    ASSERT_NE(draft, nullptr);
    int attentions = 0;
    std::set<std::string> names;
    for (const Step& step : draft->steps) {
      attentions += step.kind == StepKind::kPagedAttention ? 1 : 0;
      for (const KernelVariant& v : step.variants) {
        if (v.instance.empty() || !names.insert(v.kind + v.params.dump()).second) continue;
        SCOPED_TRACE(v.instance);
        expectCompilesWithoutSpills(v.kind, v.params, v.instance, "sm_90a");
      }
    }
    EXPECT_EQ(attentions, 1);  // layer 0's alone
  }
}

// The tiny Llama's 2:4 sparse bf16 plans (kiln-compile --sparsity=2:4
// --activation-type=bf16, and with --quant-weights=int4 --quant-group-size=64;
// the ctest fixture sparse24_plans writes them to $KILN_SPARSE24_PLANS, as
// gpu-bundle.sh to its artifacts):
// every instance, sparse24_gemv over bf16 and q4_0 kept values and the
// sparse GEMM among them, as the executor generates them.
TEST(SparsePlan, FixtureInstancesCompileForSm90aWithoutSpills) {
  KILN_REQUIRE_NVRTC();
  const char* plans = std::getenv("KILN_SPARSE24_PLANS");
  if (!plans)
    GTEST_SKIP() << "KILN_SPARSE24_PLANS is not set: run under ctest (fixture sparse24_plans), or kiln-compile "
                    "test/fixtures/tiny-llama --sparsity=2:4 --activation-type=bf16 -o DIR/tiny-llama-sparse-bf16 (and "
                    "with --quant-weights=int4 --quant-group-size=64 -o DIR/tiny-llama-sparse-int4-bf16) and set it "
                    "to DIR";
  for (const auto& [folder, values] :
       {std::pair{"tiny-llama-sparse-bf16", "bf16"}, std::pair{"tiny-llama-sparse-int4-bf16", "q4_0"}}) {
    SCOPED_TRACE(folder);
    auto manifest = Manifest::load(std::string(plans) + "/" + folder);
    ASSERT_TRUE(manifest.ok()) << manifest.error().message;
    ASSERT_EQ(manifest->activation_type, "bf16");
    std::set<std::string> names, kinds, gemv_values;
    for (const Step& step : manifest->findEntry("forward")->steps)
      for (const KernelVariant& v : step.variants) {
        if (v.instance.empty() || !names.insert(v.instance).second) continue;
        kinds.insert(v.kind);
        if (v.kind == "sparse24_gemv") gemv_values.insert(v.params["values_type"].get<std::string>());
        SCOPED_TRACE(v.instance);
        expectCompilesWithoutSpills(v.kind, v.params, v.instance, "sm_90a");
      }
    EXPECT_EQ(kinds.count("sparse24_gemv"), 1u);
    // k 64 (q, k, v, o, gate/up): mma.sp; the down projection's k 128: sparse wgmma.
    EXPECT_EQ(kinds.count("sparse24_gemm"), 1u);
    EXPECT_EQ(kinds.count("sparse24_gemm_wgmma"), 1u);
    EXPECT_EQ(gemv_values, std::set<std::string>{values});
    EXPECT_EQ(kinds.count("gemm"), 1u) << "the LM head stays dense";
  }
}

// flash_attention's dynamic shared memory must fit an sm_90 block (227 KiB)
// and leave room for two blocks per SM (228 KiB per SM).
TEST(FlashAttentionInstance, DynamicSharedMemoryFits) {
  for (const testing::KernelCase& c : testing::representativeKernelCases()) {
    if (c.kind != "flash_attention") continue;
    auto inst = cuda_codegen::instanceSource(c.kind, c.params, cuda_codegen::instanceName(c.kind, c.params));
    ASSERT_TRUE(inst.ok()) << inst.error().message;
    const int smem = cuda_codegen::configConstant(inst->source, "kSmemBytes", -1);
    ASSERT_GT(smem, 0) << inst->source;
    EXPECT_EQ(smem, kernels::flash::smem_bytes(c.params["head_dim"].get<int>()));
    EXPECT_LE(2 * smem, 228 * 1024) << c.params.dump();
  }
  auto tree = cuda_codegen::instanceSource("flash_attention", testing::attentionParams(32, 8, 128, true));
  ASSERT_FALSE(tree.ok());
  EXPECT_NE(tree.error().message.find("tree_mask"), std::string::npos);
  auto hd96 = cuda_codegen::instanceSource("flash_attention", testing::attentionParams(32, 8, 96, false));
  ASSERT_FALSE(hd96.ok());
  EXPECT_NE(hd96.error().message.find("head_dim"), std::string::npos);
}

// ------------------------------------------------------------------------
// flash_attention_wgmma's shared-memory tiles against its wgmma descriptors:
// each element the kernel's copies store (wgmma::tile_offset) must be the
// one the hardware reads through the descriptor, taken here from the
// canonical 128-byte-swizzle layouts (PTX ISA "Shared Memory Matrix Layout";
// in CuTe's notation, K-major ((8,m),(T,2k)):((8T,SBO),(1,T)) and MN-major
// ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO)), T = 8 bf16) followed by the swizzle
// of address bits 4-6 by bits 7-9.

struct DecodedDescriptor {
  unsigned start, leading, stride, layout;
};
DecodedDescriptor decode(unsigned long long d) {
  return {unsigned(d & 0x3FFF) << 4, unsigned((d >> 16) & 0x3FFF) << 4, unsigned((d >> 32) & 0x3FFF) << 4,
          unsigned(d >> 62)};
}
unsigned swizzle128(unsigned addr) { return addr ^ (((addr >> 7) & 7) << 4); }

TEST(FlashAttentionWgmma, TileLayoutMatchesDescriptors) {
  namespace wg = kernels::wgmma;
  const unsigned base = 4096;  // any 1024-byte-aligned tile address
  for (int D : {64, 128}) {
    const int rows = 128;
    // S = Q Kᵀ: Q (A, rows = query rows) and K (B, rows = keys), K-major, k16 step ks:
    // element (row m, column k of the step) is dim 16 ks + k.
    for (int ks = 0; ks < D / 16; ++ks) {
      const DecodedDescriptor d = decode(wg::k_major(base, rows, ks));
      ASSERT_EQ(d.layout, 1u);
      for (int m = 0; m < rows; ++m)
        for (int k = 0; k < 16; ++k) {
          const unsigned logical = d.start + (m % 8) * 128 + (m / 8) * d.stride + k * 2;
          const int dim = 16 * ks + k;
          const unsigned stored = base + wg::tile_offset(m, dim / 8, rows) + (dim % 8) * 2;
          ASSERT_EQ(swizzle128(logical), stored) << "K-major D " << D << " step " << ks << " row " << m << " k " << k;
        }
    }
    // A warpgroup's 64 rows of Q start 64 rows into each panel.
    EXPECT_EQ(decode(wg::k_major(base + 64 * 128, rows, 1)).start, base + 64 * 128 + 32);
    // O = P V: V (B, N = head_dim, k = keys), MN-major, k16 step kk over keys.
    for (int kk = 0; kk < rows / 16; ++kk) {
      const DecodedDescriptor d = decode(wg::mn_major(base, rows, kk));
      ASSERT_EQ(d.layout, 1u);
      for (int n = 0; n < D; ++n)
        for (int k = 0; k < 16; ++k) {
          const unsigned logical =
              d.start + (n % 64) * 2 + (n / 64) * d.leading + (k % 8) * 128 + (k / 8) * d.stride;
          const int key = 16 * kk + k;
          const unsigned stored = base + wg::tile_offset(key, n / 8, rows) + (n % 8) * 2;
          ASSERT_EQ(swizzle128(logical), stored) << "MN-major D " << D << " step " << kk << " dim " << n << " key " << k;
        }
    }
  }
  // Every panel of the kernel's tiles starts 1024-byte aligned past the aligned base.
  for (int D : {64, 128}) {
    EXPECT_EQ(kernels::flash_wgmma::kBlockM * 128 % 1024, 0);
    EXPECT_EQ(kernels::flash_wgmma::kBlockN * D * 2 % 1024, 0);
    EXPECT_LE(kernels::flash_wgmma::smem_bytes(D), 227 * 1024);
  }
}

// ------------------------------------------------------------------------
// flash_attention's fragment layouts, checked on the host: ldmatrix and
// mma.m16n8k16 are emulated from the PTX ISA's tables ("Matrix Fragments for
// mma.m16n8k16 with floating point type", "Warp-level matrix load
// instruction: ldmatrix"), and one warp's share of S = Q Kᵀ, O = P V and the
// output staging is computed with the kernel's own address helpers.

namespace flash = kernels::flash;
using Reg = std::array<float, 2>;  // a .b32 register of two 16-bit elements, low half first
using Warp4 = std::array<std::array<Reg, 4>, 32>;

// A shared-memory image of bf16 values (kept as float), indexed by byte offset / 2.
struct Smem {
  std::vector<float> v;
  explicit Smem(int bytes) : v(bytes / 2, NAN) {}
  float at(int byte) const { return v.at(byte / 2); }
  float& at(int byte) { return v.at(byte / 2); }
};

// ldmatrix.sync.aligned.m8n8.x4{.trans}.b16: lanes 8m..8m+7 give the row
// addresses of matrix m; lane l receives in register m the elements (row l/4,
// columns 2(l%4), 2(l%4)+1), or with .trans (rows 2(l%4), 2(l%4)+1, column l/4).
Warp4 ldmatrixX4(const Smem& smem, const std::array<int, 32>& addr, bool trans) {
  Warp4 out;
  for (int l = 0; l < 32; ++l)
    for (int m = 0; m < 4; ++m)
      for (int e = 0; e < 2; ++e) {
        const int row = trans ? 2 * (l % 4) + e : l / 4, col = trans ? l / 4 : 2 * (l % 4) + e;
        out[l][m][e] = smem.at(addr[8 * m + row] + 2 * col);
      }
  return out;
}

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32: d = a · b + d, with
// a_i (i < 8) at row g + 8 [i in {2,3,6,7}], column 2t + (i & 1) + 8 [i >= 4];
// b_i (i < 4) at row 2t + (i & 1) + 8 [i >= 2], column g; c_i at row g + 8 [i >= 2],
// column 2t + (i & 1); g = lane / 4, t = lane % 4; register r holds elements 2r, 2r+1.
void mma(std::array<std::array<float, 4>, 32>& d, const std::array<std::array<Reg, 4>, 32>& a,
         const std::array<std::array<Reg, 2>, 32>& b) {
  float A[16][16], B[16][8];
  for (int l = 0; l < 32; ++l) {
    const int g = l / 4, t = l % 4;
    for (int i = 0; i < 8; ++i) {
      const int row = g + ((i == 2 || i == 3 || i == 6 || i == 7) ? 8 : 0), col = 2 * t + (i & 1) + (i >= 4 ? 8 : 0);
      A[row][col] = a[l][i / 2][i % 2];
    }
    for (int i = 0; i < 4; ++i) B[2 * t + (i & 1) + (i >= 2 ? 8 : 0)][g] = b[l][i / 2][i % 2];
  }
  for (int l = 0; l < 32; ++l)
    for (int i = 0; i < 4; ++i) {
      const int row = l / 4 + (i >= 2 ? 8 : 0), col = 2 * (l % 4) + (i & 1);
      float sum = d[l][i];
      for (int k = 0; k < 16; ++k) sum += A[row][k] * B[k][col];
      d[l][i] = sum;
    }
}

// Small integers: every product and sum below is exact in f32.
float value(int a, int b, int salt) { return float((a * 7 + b * 3 + salt) % 5 - 2); }

void checkWarpTile(int D, int block_m, int kMTiles, int warp) {
  const int BN = flash::kBlockN, warp_row0 = warp * 16 * kMTiles;
  Smem q(block_m * D * 2), k(BN * D * 2), v(BN * D * 2), staged(block_m * D * 2);
  std::set<int> seen;
  for (int r = 0; r < block_m; ++r)
    for (int c = 0; c < D / 8; ++c) {
      const int off = flash::tile_offset(r, c, D);
      ASSERT_TRUE(seen.insert(off).second) << "tile_offset is not one-to-one at row " << r << " chunk " << c;
      ASSERT_TRUE(off >= 0 && off + 16 <= block_m * D * 2 && off % 16 == 0);
      for (int e = 0; e < 8; ++e) {
        q.at(off + 2 * e) = value(r, c * 8 + e, 1);
        if (r < BN) k.at(off + 2 * e) = value(r, c * 8 + e, 2), v.at(off + 2 * e) = value(r, c * 8 + e, 3);
      }
    }
  for (int mt = 0; mt < kMTiles; ++mt) {
    // S = Q Kᵀ for rows warp_row0 + 16 mt .. +15 and the tile's 64 keys.
    std::vector<std::array<std::array<float, 4>, 32>> s(BN / 8);
    for (auto& blk : s)
      for (auto& lane : blk) lane.fill(0.0f);
    for (int ks = 0; ks < D / 16; ++ks) {
      std::array<int, 32> qa, ka;
      for (int l = 0; l < 32; ++l)
        qa[l] = flash::chunk_step(flash::tile_offset(warp_row0 + flash::ldsm_a_row(l), flash::ldsm_a_chunk(l), D), ks) +
                mt * 16 * D * 2;
      const Warp4 a = ldmatrixX4(q, qa, false);
      for (int nb = 0; nb < BN / 8; nb += 2) {
        for (int l = 0; l < 32; ++l)
          ka[l] = flash::chunk_step(flash::tile_offset(flash::ldsm_k_row(l), flash::ldsm_k_chunk(l), D), ks) +
                  nb * 8 * D * 2;
        const Warp4 kf = ldmatrixX4(k, ka, false);
        std::array<std::array<Reg, 2>, 32> b0, b1;
        for (int l = 0; l < 32; ++l) b0[l] = {kf[l][0], kf[l][1]}, b1[l] = {kf[l][2], kf[l][3]};
        mma(s[nb], a, b0);
        mma(s[nb + 1], a, b1);
      }
    }
    for (int nb = 0; nb < BN / 8; ++nb)
      for (int l = 0; l < 32; ++l)
        for (int i = 0; i < 4; ++i) {
          const int row = warp_row0 + mt * 16 + flash::acc_row(l, i), key = nb * 8 + flash::acc_col(l, i);
          float want = 0;
          for (int d = 0; d < D; ++d) want += value(row, d, 1) * value(key, d, 2);
          ASSERT_EQ(s[nb][l][i], want) << "S row " << row << " key " << key << " (D " << D << ", warp " << warp << ")";
        }

    // O = P V with P(row, key) laid in the S accumulators and re-packed as the kernel does.
    auto P = [](int row, int key) { return float((row * 5 + key) % 4); };
    for (int nb = 0; nb < BN / 8; ++nb)
      for (int l = 0; l < 32; ++l)
        for (int i = 0; i < 4; ++i)
          s[nb][l][i] = P(warp_row0 + mt * 16 + flash::acc_row(l, i), nb * 8 + flash::acc_col(l, i));
    std::vector<std::array<std::array<float, 4>, 32>> o(D / 8);
    for (auto& blk : o)
      for (auto& lane : blk) lane.fill(0.0f);
    for (int kk = 0; kk < BN / 16; ++kk) {
      std::array<std::array<Reg, 4>, 32> pa;
      for (int l = 0; l < 32; ++l)
        pa[l] = {Reg{s[2 * kk][l][0], s[2 * kk][l][1]}, Reg{s[2 * kk][l][2], s[2 * kk][l][3]},
                 Reg{s[2 * kk + 1][l][0], s[2 * kk + 1][l][1]}, Reg{s[2 * kk + 1][l][2], s[2 * kk + 1][l][3]}};
      for (int db = 0; db < D / 8; db += 2) {
        std::array<int, 32> va;
        for (int l = 0; l < 32; ++l)
          va[l] = flash::chunk_step(flash::tile_offset(flash::ldsm_a_row(l), flash::ldsm_a_chunk(l), D), db / 2) +
                  kk * 16 * D * 2;
        const Warp4 vf = ldmatrixX4(v, va, true);
        std::array<std::array<Reg, 2>, 32> b0, b1;
        for (int l = 0; l < 32; ++l) b0[l] = {vf[l][0], vf[l][1]}, b1[l] = {vf[l][2], vf[l][3]};
        mma(o[db], pa, b0);
        mma(o[db + 1], pa, b1);
      }
    }
    for (int db = 0; db < D / 8; ++db)
      for (int l = 0; l < 32; ++l)
        for (int i = 0; i < 4; ++i) {
          const int row = warp_row0 + mt * 16 + flash::acc_row(l, i), col = db * 8 + flash::acc_col(l, i);
          float want = 0;
          for (int key = 0; key < BN; ++key) want += P(row, key) * value(key, col, 3);
          ASSERT_EQ(o[db][l][i], want) << "O row " << row << " dim " << col << " (D " << D << ", warp " << warp << ")";
          // The kernel stages (row, col pair) at tile_offset(row, db) + acc_col(lane, 0) * 2.
          staged.at(flash::tile_offset(row, db, D) + flash::acc_col(l, 0) * 2 + 2 * (i & 1)) = o[db][l][i];
        }
  }
  // Read back as the kernel's stores do: chunk c of row r at tile_offset(r, c).
  for (int r = warp_row0; r < warp_row0 + 16 * kMTiles; ++r)
    for (int c = 0; c < D / 8; ++c)
      for (int e = 0; e < 8; ++e) {
        float want = 0;
        for (int key = 0; key < BN; ++key) want += float((r * 5 + key) % 4) * value(key, c * 8 + e, 3);
        ASSERT_EQ(staged.at(flash::tile_offset(r, c, D) + 2 * e), want) << "staged row " << r << " dim " << c * 8 + e;
      }
}

TEST(FlashAttentionLayout, WarpTilesMatchPtxFragmentTables) {
  for (int D : {64, 128})
    for (int m_tiles : {1, 2})
      for (int warps : {4, 8})
        for (int warp = 0; warp < warps; ++warp) checkWarpTile(D, 16 * warps * m_tiles, m_tiles, warp);
}

// Shared memory serves a 128-byte wavefront without conflicts when its eight
// 16-byte pieces fall in eight distinct 16-byte bank groups (address / 16 mod 8).
void expectConflictFree(const std::vector<int>& byte_addresses, const std::string& what) {
  std::set<int> groups;
  for (int a : byte_addresses) groups.insert((a / 16) % 8);
  EXPECT_EQ(groups.size(), byte_addresses.size()) << what;
}

TEST(FlashAttentionLayout, SharedMemoryAccessesAreConflictFree) {
  for (int D : {64, 128}) {
    // ldmatrix: each 8x8 matrix (8 lanes' rows) is one wavefront.
    for (int step = 0; step < D / 16; ++step)
      for (int m = 0; m < 4; ++m) {
        std::vector<int> a, k;
        for (int l = 8 * m; l < 8 * m + 8; ++l) {
          a.push_back(flash::chunk_step(flash::tile_offset(16 + flash::ldsm_a_row(l), flash::ldsm_a_chunk(l), D), step));
          k.push_back(flash::chunk_step(flash::tile_offset(flash::ldsm_k_row(l), flash::ldsm_k_chunk(l), D), step));
        }
        expectConflictFree(a, "ldmatrix Q/V, D " + std::to_string(D));
        expectConflictFree(k, "ldmatrix K, D " + std::to_string(D));
      }
    // cp.async and the output loads: thread i of the block moves chunk i % (D/8) of row i / (D/8);
    // eight consecutive threads make one wavefront.
    const int chunks = D / 8;
    for (int first = 0; first < 256; first += 8) {
      std::vector<int> a;
      for (int i = first; i < first + 8; ++i) a.push_back(flash::tile_offset(i / chunks, i % chunks, D));
      expectConflictFree(a, "16-byte copies, D " + std::to_string(D));
    }
    // Output staging: 32 lanes store 4 bytes each into 32 distinct banks.
    for (int db = 0; db < D / 8; ++db) {
      std::set<int> banks;
      for (int l = 0; l < 32; ++l)
        banks.insert((flash::tile_offset(flash::acc_row(l, 0), db, D) + flash::acc_col(l, 0) * 2) / 4 % 32);
      EXPECT_EQ(banks.size(), 32u) << "output staging, D " << D << " d-block " << db;
    }
  }
}

std::string caseName(const ::testing::TestParamInfo<testing::KernelCase>& info) {
  return std::to_string(info.index) + "_" + info.param.kind;
}

INSTANTIATE_TEST_SUITE_P(AllKinds, KernelCompile,
                         ::testing::ValuesIn(testing::representativeKernelCases()), caseName);
INSTANTIATE_TEST_SUITE_P(F32Plan, F32PlanKernelCompile, ::testing::ValuesIn(testing::f32PlanKernelCases()),
                         caseName);

}  // namespace
}  // namespace kiln::cuda
