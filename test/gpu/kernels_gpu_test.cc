// GPU correctness of every kernel kind: the NVRTC-compiled instance runs
// through the dlopen'd driver on random inputs, outputs poisoned with NaN
// beforehand, and is compared with a float64 CPU reference written here.
// ctest label `gpu`: needs an NVIDIA GPU and driver (scripts/gpu-check.sh).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "codegen/kernels/kernel_params.cuh"
#include "codegen/kernels/philox.cuh"
#include "runtime/cuda/kernel_test_cases.h"
#include "runtime/numerics/packed_blocks.h"
#include "runtime/numerics/quant.h"
#include "test/gpu/attention_reference.h"
#include "test/gpu/gemm_swiglu_params.h"
#include "test/gpu/gpu_harness.h"
#include "test/gpu/rope_reference.h"

namespace kiln::gpu_test {
namespace {

using nlohmann::json;
namespace kk = kiln::kernels;

class KernelsGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    auto gpu = Gpu::get();
    ASSERT_TRUE(gpu.ok()) << "this test needs an NVIDIA GPU: " << gpu.error().message;
    static bool printed = false;
    if (!printed) {
      std::printf("GPU: %s, driver %d, %s\n", (*gpu)->name.c_str(), (*gpu)->d->version,
                  (*gpu)->d->library.path().c_str());
      printed = true;
    }
  }
  std::mt19937 rng{1234};
};

#define COMPILE(var, kind, params)                                   \
  auto var##_r = compile(kind, params);                              \
  ASSERT_TRUE(var##_r.ok()) << var##_r.error().message;              \
  Kernel var = var##_r.take()

// ---------------------------------------------------------------- embedding

TEST_F(KernelsGpu, Embedding) {
  const int hidden = 576, vocab = 50;
  const std::vector<int> tokens = {3, 0, 49, 17, 3, 50, -1};  // the last two are out of range: zero rows
  for (const char* type : {"f32", "bf16", "f16", "q8_0", "q4_0", "q4_1"}) {
    std::string t = type;
    std::vector<uint8_t> table;
    std::vector<double> dequant(size_t(vocab) * hidden);
    std::uniform_real_distribution<float> val(-2, 2), scale(0.01f, 0.1f);
    std::uniform_int_distribution<int> byte(0, 255);
    for (int r = 0; r < vocab; ++r) {
      for (int i = 0; i < hidden; ++i) {
        if (t == "f32") {
          float f = val(rng);
          uint8_t b[4];
          std::memcpy(b, &f, 4);
          table.insert(table.end(), b, b + 4);
          dequant[size_t(r) * hidden + i] = f;
        } else if (t == "bf16" || t == "f16") {
          uint16_t h = t == "bf16" ? toBf16(val(rng)) : toF16(val(rng));
          table.push_back(uint8_t(h));
          table.push_back(uint8_t(h >> 8));
          dequant[size_t(r) * hidden + i] = t == "bf16" ? fromBf16(h) : fromF16(h);
        }
      }
      if (t[0] == 'q') {
        for (int blk = 0; blk < hidden / 32; ++blk) {
          const uint16_t d = toF16(scale(rng)), m = toF16(-val(rng) * 0.1f);
          table.push_back(uint8_t(d));
          table.push_back(uint8_t(d >> 8));
          if (t == "q4_1") {
            table.push_back(uint8_t(m));
            table.push_back(uint8_t(m >> 8));
          }
          const int n = t == "q8_0" ? 32 : 16;
          std::vector<uint8_t> qs(n);
          for (auto& q : qs) q = uint8_t(byte(rng));
          table.insert(table.end(), qs.begin(), qs.end());
          for (int j = 0; j < 32; ++j) {
            double v;
            if (t == "q8_0") v = fromF16(d) * double(int8_t(qs[j]));
            else {
              const int q = j < 16 ? (qs[j] & 15) : (qs[j - 16] >> 4);
              v = t == "q4_0" ? fromF16(d) * (q - 8) : fromF16(d) * q + fromF16(m);
            }
            dequant[size_t(r) * hidden + blk * 32 + j] = v;
          }
        }
      }
    }
    COMPILE(k, "embedding", (json{{"hidden", hidden}, {"table_type", t}}));
    auto d_tokens = DeviceBuffer::from(tokens);
    auto d_table = DeviceBuffer::from(table);
    DeviceBuffer d_out(tokens.size() * hidden * 2);
    kk::EmbeddingParams p{d_tokens.as<int>(), d_table.get(), d_out.get(), int(tokens.size()), vocab};
    KILN_GPU_OK(launch(k, unsigned(tokens.size()), 1, 1, p));
    std::vector<double> ref(tokens.size() * hidden, 0.0);
    for (size_t i = 0; i < tokens.size(); ++i)
      if (tokens[i] >= 0 && tokens[i] < vocab)
        for (int j = 0; j < hidden; ++j) ref[i * hidden + j] = dequant[size_t(tokens[i]) * hidden + j];
    expectClose(bf16ToFloat(d_out.download<uint16_t>()), ref, 1e-6, 1.0 / 128, "embedding " + t);
  }
}

// ---------------------------------------------------------------- rms norm

TEST_F(KernelsGpu, RmsNormAndResidual) {
  const int rows = 5;
  for (int hidden : {576, 4096}) {
    for (int variant = 0; variant < 3; ++variant) {  // plain, residual+sum, residual only
      const bool residual = variant > 0, writes_sum = variant == 1;
      const double eps = 1e-5;
      std::vector<float> x, r, w(hidden);
      auto xb = randomBf16(rng, size_t(rows) * hidden, 3.0f, &x);
      auto rb = randomBf16(rng, size_t(rows) * hidden, 3.0f, &r);
      std::uniform_real_distribution<float> wd(0.5f, 1.5f);
      for (auto& v : w) v = wd(rng);
      json params = {{"hidden", hidden}, {"epsilon", eps}};
      if (residual) params["writes_sum"] = writes_sum;
      COMPILE(k, residual ? "residual_rms_norm" : "rms_norm", params);
      auto d_x = DeviceBuffer::from(xb), d_r = DeviceBuffer::from(rb), d_w = DeviceBuffer::from(w);
      DeviceBuffer d_sum(xb.size() * 2), d_out(xb.size() * 2);
      kk::RmsNormParams p{d_x.get(), residual ? d_r.get() : nullptr, d_w.get(), d_sum.get(), d_out.get(), rows};
      KILN_GPU_OK(launch(k, rows, 1, 1, p));
      std::vector<double> ref(xb.size()), sum(xb.size());
      for (int i = 0; i < rows; ++i) {
        double ss = 0;
        for (int j = 0; j < hidden; ++j) {
          const size_t e = size_t(i) * hidden + j;
          sum[e] = residual ? double(roundBf16(x[e] + r[e])) : x[e];
          ss += sum[e] * sum[e];
        }
        const double inv = 1.0 / std::sqrt(ss / hidden + eps);
        for (int j = 0; j < hidden; ++j) ref[size_t(i) * hidden + j] = sum[size_t(i) * hidden + j] * inv * w[j];
      }
      const std::string what = fmt::format("{} hidden {}{}", residual ? "residual_rms_norm" : "rms_norm", hidden,
                                           writes_sum ? " (sum)" : "");
      expectClose(bf16ToFloat(d_out.download<uint16_t>()), ref, 1e-3, 1.0 / 64, what);
      if (writes_sum) expectClose(bf16ToFloat(d_sum.download<uint16_t>()), sum, 0, 0, what + " sum");
    }
  }
}

// An f32 residual stream with bf16 branch outputs (kiln-compile's default
// with bf16 activations): the embedding writes f32, residual_rms_norm and add
// keep the sum in f32 (no bf16 rounding), the norms write the bf16 GEMM input.
TEST_F(KernelsGpu, F32ResidualStream) {
  const int rows = 5, hidden = 2048, vocab = 7;
  const double eps = 1e-5;
  std::vector<float> x(size_t(rows) * hidden), r, w(hidden), table;
  std::uniform_real_distribution<float> xd(-3.0f, 3.0f), wd(0.5f, 1.5f);
  for (auto& v : x) v = xd(rng);  // not bf16-representable: f32 must survive
  for (auto& v : w) v = wd(rng);
  auto rb = randomBf16(rng, x.size(), 3.0f, &r);
  auto d_x = DeviceBuffer::from(x), d_r = DeviceBuffer::from(rb), d_w = DeviceBuffer::from(w);
  std::vector<double> sum(x.size()), normed(x.size());
  for (int i = 0; i < rows; ++i) {
    double ss = 0;
    for (int j = 0; j < hidden; ++j) {
      const size_t e = size_t(i) * hidden + j;
      sum[e] = double(float(x[e] + r[e]));
      ss += sum[e] * sum[e];
    }
    const double inv = 1.0 / std::sqrt(ss / hidden + eps);
    for (int j = 0; j < hidden; ++j) normed[size_t(i) * hidden + j] = sum[size_t(i) * hidden + j] * inv * w[j];
  }
  {
    COMPILE(k, "residual_rms_norm", (json{{"hidden", hidden}, {"epsilon", eps}, {"writes_sum", true},
                                          {"x_type", "f32"}, {"sum_type", "f32"}}));
    DeviceBuffer d_sum(x.size() * 4), d_out(x.size() * 2);
    kk::RmsNormParams p{d_x.get(), d_r.get(), d_w.get(), d_sum.get(), d_out.get(), rows};
    KILN_GPU_OK(launch(k, rows, 1, 1, p));
    expectClose(bf16ToFloat(d_out.download<uint16_t>()), normed, 1e-3, 1.0 / 64, "residual_rms_norm f32 sum");
    expectClose(d_sum.download<float>(), sum, 0, 0, "residual_rms_norm f32 sum (sum)");
  }
  {
    COMPILE(k, "add", (json{{"width", hidden}, {"a_type", "f32"}, {"out_type", "f32"}}));
    DeviceBuffer d_out(x.size() * 4);
    KILN_GPU_OK(launch(k, 8, 1, 1, kk::ElementwiseParams{d_x.get(), d_r.get(), d_out.get(), rows}));
    expectClose(d_out.download<float>(), sum, 0, 0, "add f32 + bf16 -> f32");
  }
  {
    auto d_sum = DeviceBuffer::from(std::vector<float>(sum.begin(), sum.end()));
    COMPILE(k, "rms_norm", (json{{"hidden", hidden}, {"epsilon", eps}, {"x_type", "f32"}}));
    DeviceBuffer d_out(x.size() * 2);
    kk::RmsNormParams p{d_sum.get(), nullptr, d_w.get(), nullptr, d_out.get(), rows};
    KILN_GPU_OK(launch(k, rows, 1, 1, p));
    expectClose(bf16ToFloat(d_out.download<uint16_t>()), normed, 1e-3, 1.0 / 64, "rms_norm f32 -> bf16");
  }
  {
    const std::vector<int> qs = {0, 2, 5};
    COMPILE(k, "gather_last_tokens", (json{{"hidden", hidden}, {"type", "f32"}}));
    auto d_qs = DeviceBuffer::from(qs);
    DeviceBuffer d_out(size_t(2) * hidden * 4);
    KILN_GPU_OK(launch(k, 2, 1, 1, kk::GatherLastTokensParams{d_x.get(), d_qs.as<int>(), d_out.get(), 2}));
    std::vector<double> ref;
    for (int b = 0; b < 2; ++b)
      for (int i = 0; i < hidden; ++i) ref.push_back(x[size_t(qs[b + 1] - 1) * hidden + i]);
    expectClose(d_out.download<float>(), ref, 0, 0, "gather_last_tokens f32");
  }
  {
    const std::vector<int> tokens = {3, 0, 6, 9};
    auto tb = randomBf16(rng, size_t(vocab) * hidden, 1.0f, &table);
    COMPILE(k, "embedding", (json{{"hidden", hidden}, {"table_type", "bf16"}, {"out_type", "f32"}}));
    auto d_tokens = DeviceBuffer::from(tokens), d_table = DeviceBuffer::from(tb);
    DeviceBuffer d_out(tokens.size() * hidden * 4);
    kk::EmbeddingParams p{d_tokens.as<int>(), d_table.get(), d_out.get(), int(tokens.size()), vocab};
    KILN_GPU_OK(launch(k, unsigned(tokens.size()), 1, 1, p));
    std::vector<double> ref(tokens.size() * hidden, 0.0);
    for (size_t i = 0; i < tokens.size(); ++i)
      if (tokens[i] < vocab)
        for (int j = 0; j < hidden; ++j) ref[i * hidden + j] = table[size_t(tokens[i]) * hidden + j];
    expectClose(d_out.download<float>(), ref, 0, 0, "embedding bf16 -> f32");
  }
}

// ---------------------------------------------------------------- rope + kv append

// One rope_kv_append case against float64: six tokens (one with no slot),
// merged qkv or separate q/k/v rows, everything in bf16, or with f32
// activations and pools (an f32 plan's instance).
void checkRopeKvAppend(std::mt19937& rng, const RopeCase& c, bool f32) {
  const int N = 6, page = 16, blocks = 8, H = c.heads, Hkv = c.kv_heads, D = c.head_dim;
  const std::vector<int> positions = {0, 1, 7, 130, 2047, 4999};
  const std::vector<int> slots = {5, 17, -1, 100, 127, 64};
  const int width = (H + 2 * Hkv) * D;
  std::vector<float> qkv;
  auto qkvb = randomBf16(rng, size_t(N) * width, 2.0f, &qkv);
  // Separate q/k/v copies for the unmerged form, in the activation type.
  auto upload = [&](int begin, int end) {
    std::vector<float> f;
    std::vector<uint16_t> b;
    for (int t = 0; t < N; ++t) {
      f.insert(f.end(), &qkv[size_t(t) * width + begin], &qkv[size_t(t) * width + end]);
      b.insert(b.end(), &qkvb[size_t(t) * width + begin], &qkvb[size_t(t) * width + end]);
    }
    return f32 ? DeviceBuffer::from(f) : DeviceBuffer::from(b);
  };
  json params = ropeCaseParams(c, f32 ? "f32" : "bf16");
  if (f32) params.update({{"x_type", "f32"}, {"out_type", "f32"}});
  COMPILE(k, "rope_kv_append", params);
  auto d_qkv = f32 ? DeviceBuffer::from(qkv) : DeviceBuffer::from(qkvb);
  auto d_q = upload(0, H * D), d_k = upload(H * D, (H + Hkv) * D), d_v = upload((H + Hkv) * D, width);
  auto d_pos = DeviceBuffer::from(positions), d_slots = DeviceBuffer::from(slots);
  const size_t pool_elems = size_t(blocks) * page * Hkv * D, elem = f32 ? 4 : 2;
  DeviceBuffer d_kpool(pool_elems * elem), d_vpool(pool_elems * elem), d_qout(size_t(N) * H * D * elem);
  kk::RopeKvAppendParams p{d_qkv.get(), d_q.get(), d_k.get(), d_v.get(), d_pos.as<int>(), d_slots.as<int>(),
                           d_kpool.get(), d_vpool.get(), d_qout.get(), N, (long long)blocks * page};
  KILN_GPU_OK(launch(k, N, kk::ropeKvAppendHeadGroups(H, Hkv), 1, p));
  auto values = [&](const DeviceBuffer& d) { return f32 ? d.download<float>() : bf16ToFloat(d.download<uint16_t>()); };
  const std::vector<double> qkv_d(qkv.begin(), qkv.end());
  const std::string what = fmt::format("rope_kv_append{} {}/{}/{} {} {} {}", f32 ? " f32" : "", H, Hkv, D,
                                       c.merged ? "merged" : "q/k/v", c.interleaved ? "interleaved" : "half",
                                       c.scaling);
  // f32: the angle is position · inv_freq in f32, as transformers computes
  // it, so at position 4999 it is off the float64 reference's by up to
  // ~3e-4 rad: the bound is that, not f32 rounding of the products.
  const double atol = f32 ? 2e-3 : 2e-2, rtol = f32 ? 1e-4 : 1.0 / 64;
  checkRope(c, ropeReference(c, qkv_d, positions, slots, pool_elems), values(d_qout), values(d_kpool),
            values(d_vpool), what, atol, rtol);
}

TEST_F(KernelsGpu, RopeKvAppend) {
  for (const RopeCase& c : {RopeCase{9, 3, 64, true, true, "none", 100000.0},
                            RopeCase{9, 3, 64, false, false, "linear", 10000.0},
                            RopeCase{32, 8, 128, true, false, "llama3", 500000.0},
                            // half pairs not a multiple of 8 apart: the one-pair-a-thread path
                            RopeCase{4, 2, 40, true, false, "none", 10000.0}})
    checkRopeKvAppend(rng, c, false);
}

// An f32 plan's rope_kv_append: qkv, q_out and the pools in f32.
TEST_F(KernelsGpu, RopeKvAppendF32) {
  for (const RopeCase& c : {RopeCase{9, 3, 64, true, false, "none", 100000.0},
                            RopeCase{32, 8, 128, false, false, "llama3", 500000.0}})
    checkRopeKvAppend(rng, c, true);
}

// ---------------------------------------------------------------- paged attention

TEST_F(KernelsGpu, PagedAttention) {
  // A prefill chunk after a cached prefix, a long decode, a fresh prompt, a one-token sequence.
  const Batch batch{{5, 1, 3, 1}, {40, 300, 3, 1}};
  for (auto [H, Hkv, D] : {std::tuple{9, 3, 64}, std::tuple{32, 8, 128}}) {
    for (int mode = 0; mode < 3; ++mode) {  // causal, tree mask, split-KV (4 splits) + combine
      const bool tree = mode == 1, split = mode == 2;
      const double scale = 1.0 / std::sqrt(double(D));
      AttentionData a = makeAttention(rng, H, Hkv, D, batch, tree);
      json params = {{"heads", H}, {"kv_heads", Hkv}, {"head_dim", D}, {"page_size", a.page},
                     {"scale", scale}, {"kv_type", "bf16"}, {"tree_mask", tree}};
      COMPILE(k, split ? "paged_attention_split" : "paged_attention", params);
      auto d_q = DeviceBuffer::from(a.qb), d_k = DeviceBuffer::from(a.kb), d_v = DeviceBuffer::from(a.vb),
           d_bt = DeviceBuffer::from(a.block_tables), d_qs = DeviceBuffer::from(a.query_start),
           d_kl = DeviceBuffer::from(a.kv_lens), d_tree = DeviceBuffer::from(a.tree);
      DeviceBuffer d_out(size_t(a.N) * H * D * 2);
      const int splits = split ? 4 : 1;
      DeviceBuffer d_po(size_t(a.N) * H * splits * D * 4), d_plse(size_t(a.N) * H * splits * 4);
      kk::PagedAttentionParams p{d_q.get(), d_k.get(), d_v.get(), d_bt.as<int>(), d_qs.as<int>(), d_kl.as<int>(),
                                 tree ? d_tree.as<unsigned char>() : nullptr, d_out.get(), d_po.as<float>(),
                                 d_plse.as<float>(), a.N, int(a.kv_lens.size()), a.max_blocks, a.tree_stride, splits, nullptr};
      KILN_GPU_OK(launch(k, a.N, Hkv, splits, p));
      if (split) {
        COMPILE(combine, "attention_combine", (json{{"heads", H}, {"head_dim", D}}));
        kk::AttentionCombineParams c{d_po.as<float>(), d_plse.as<float>(), d_out.get(), a.N, splits};
        KILN_GPU_OK(launch(combine, a.N, H, 1, c));
      }
      const std::string what = fmt::format("paged_attention {}/{}/{} {}", H, Hkv, D,
                                           tree ? "tree" : split ? "split-KV x4 + combine" : "causal");
      expectClose(bf16ToFloat(d_out.download<uint16_t>()), attentionReference(a, scale, tree), 4e-3, 1.0 / 64, what);
      std::printf("    (regs %d, smem %d, spills %d/%d)\n", k.resources.registers, k.resources.shared_bytes,
                  k.resources.spill_stores, k.resources.spill_loads);
    }
  }
}

// An f32 plan's attention (--activation-type=f32): q, pools and out in f32
// (Config::Q and Config::Out), causal and split-KV x4 + attention_combine,
// against the same float64 reference to f32 rounding.
TEST_F(KernelsGpu, PagedAttentionF32) {
  const Batch batch{{5, 1, 3, 1}, {40, 300, 3, 1}};
  for (auto [H, Hkv, D] : {std::tuple{9, 3, 64}, std::tuple{32, 8, 128}}) {
    for (bool split : {false, true}) {
      const double scale = 1.0 / std::sqrt(double(D));
      AttentionData a = makeAttention(rng, H, Hkv, D, batch, false);
      json params = {{"heads", H}, {"kv_heads", Hkv}, {"head_dim", D}, {"page_size", a.page},
                     {"scale", scale}, {"kv_type", "f32"}, {"tree_mask", false},
                     {"q_type", "f32"}, {"out_type", "f32"}};
      COMPILE(k, split ? "paged_attention_split" : "paged_attention", params);
      auto d_q = DeviceBuffer::from(a.q), d_k = DeviceBuffer::from(a.kpool), d_v = DeviceBuffer::from(a.vpool),
           d_bt = DeviceBuffer::from(a.block_tables), d_qs = DeviceBuffer::from(a.query_start),
           d_kl = DeviceBuffer::from(a.kv_lens);
      DeviceBuffer d_out(size_t(a.N) * H * D * 4);
      const int splits = split ? 4 : 1;
      DeviceBuffer d_po(size_t(a.N) * H * splits * D * 4), d_plse(size_t(a.N) * H * splits * 4);
      kk::PagedAttentionParams p{d_q.get(), d_k.get(), d_v.get(), d_bt.as<int>(), d_qs.as<int>(), d_kl.as<int>(),
                                 nullptr, d_out.get(), d_po.as<float>(), d_plse.as<float>(), a.N,
                                 int(a.kv_lens.size()), a.max_blocks, 0, splits, nullptr};
      KILN_GPU_OK(launch(k, a.N, Hkv, splits, p));
      if (split) {
        COMPILE(combine, "attention_combine", (json{{"heads", H}, {"head_dim", D}, {"out_type", "f32"}}));
        kk::AttentionCombineParams c{d_po.as<float>(), d_plse.as<float>(), d_out.get(), a.N, splits};
        KILN_GPU_OK(launch(combine, a.N, H, 1, c));
      }
      const std::string what = fmt::format("paged_attention f32 {}/{}/{} {}", H, Hkv, D,
                                           split ? "split-KV x4 + combine" : "causal");
      expectClose(d_out.download<float>(), attentionReference(a, scale, false), 2e-5, 1e-4, what);
    }
  }
}

// ---------------------------------------------------------------- decode attention

// decode_attention + attention_combine against the float64 reference: decode
// batches (one token per sequence) of 1, 5 and 32 sequences with contexts on
// and off the page and tile boundaries (1, 15, 16, 17, ~1000, 8192) behind
// shuffled block tables, split 1, 7, 32 and 64 ways (empty splits
// included), and a batch with causal q_len > 1; partials and output
// poisoned with NaN. The default (tensor-core) instance runs every case,
// the other forms and tunings the bench sweeps run 7 and 64 splits.
//
// decode_attention's launch: grid [N, Hkv, splits], block [128], the
// Config's kSmemBytes of dynamic shared memory where it has one (the
// tensor-core form; opted into past 48 KiB).
Status launchDecode(const Kernel& k, int N, int Hkv, int splits, kk::PagedAttentionParams p) {
  const cuda::CudaDriver* d = (*Gpu::get())->d;
  auto smem = optIntoDynamicSmem(k);
  if (!smem) return smem.error();
  void* args[] = {&p};
  KILN_RETURN_IF_ERROR(d->check(d->cuLaunchKernel(k.function, unsigned(N), unsigned(Hkv), unsigned(splits),
                                                  k.instance.launch.block_threads, 1, 1, unsigned(*smem), nullptr, args,
                                                  nullptr),
                                "cuLaunchKernel"));
  return d->check(d->cuCtxSynchronize(), "cuCtxSynchronize (kernel execution)");
}

TEST_F(KernelsGpu, DecodeAttention) {
  std::vector<std::pair<std::string, Batch>> batches = {
      {"B=1 ctx 8192", Batch{{1}, {8192}}},
      {"B=1 ctx 1", Batch{{1}, {1}}},
      {"B=5", Batch{{1, 1, 1, 1, 1}, {1, 15, 16, 17, 1000}}},
      {"causal q_len>1", Batch{{5, 1, 3, 1}, {40, 300, 3, 1}}}};
  {
    Batch b32;
    std::uniform_int_distribution<int> len(1, 1100);
    for (int i = 0; i < 32; ++i) {
      b32.q_len.push_back(1);
      b32.kv_len.push_back(i < 4 ? std::vector<int>{1, 15, 16, 17}[i] : len(rng));
    }
    batches.push_back({"B=32", b32});
  }
  const std::vector<json>& tilings = decodeAttentionTilings();
  for (auto [H, Hkv, D] : {std::tuple{32, 8, 128}, std::tuple{9, 3, 64}}) {
    const double scale = 1.0 / std::sqrt(double(D));
    COMPILE(combine, "attention_combine", (json{{"heads", H}, {"head_dim", D}}));
    std::vector<Kernel> kernels;
    for (const json& tl : tilings) {
      json params = cuda::testing::attentionParams(H, Hkv, D, false);
      params.update(tl);
      COMPILE(k, "decode_attention", params);
      std::printf("  decode_attention %d/%d/%d %s: regs %d, smem %d, spills %d/%d\n", H, Hkv, D,
                  k.instance.name.c_str(), k.resources.registers, k.resources.shared_bytes,
                  k.resources.spill_stores, k.resources.spill_loads);
      kernels.push_back(std::move(k));
    }
    for (const auto& [batch_name, batch] : batches) {
      AttentionData a = makeAttention(rng, H, Hkv, D, batch, false);
      const std::vector<double> ref = attentionReference(a, scale, false);
      auto d_q = DeviceBuffer::from(a.qb), d_k = DeviceBuffer::from(a.kb), d_v = DeviceBuffer::from(a.vb),
           d_bt = DeviceBuffer::from(a.block_tables), d_qs = DeviceBuffer::from(a.query_start),
           d_kl = DeviceBuffer::from(a.kv_lens);
      for (size_t ti = 0; ti < kernels.size(); ++ti) {
        for (int splits : {1, 7, 32, 64}) {
          if (ti > 0 && splits != 7 && splits != 64) continue;
          DeviceBuffer d_out(size_t(a.N) * H * D * 2);  // NaN-poisoned, as are the partials
          DeviceBuffer d_po(size_t(a.N) * H * splits * D * 4), d_plse(size_t(a.N) * H * splits * 4);
          kk::PagedAttentionParams p{d_q.get(), d_k.get(), d_v.get(), d_bt.as<int>(), d_qs.as<int>(),
                                     d_kl.as<int>(), nullptr, nullptr, d_po.as<float>(), d_plse.as<float>(),
                                     a.N, int(a.kv_lens.size()), a.max_blocks, 0, splits, nullptr};
          KILN_GPU_OK(launchDecode(kernels[ti], a.N, Hkv, splits, p));
          kk::AttentionCombineParams c{d_po.as<float>(), d_plse.as<float>(), d_out.get(), a.N, splits};
          KILN_GPU_OK(launch(combine, a.N, H, 1, c));
          const std::string what = fmt::format("decode_attention {}/{}/{} {} splits {} {}", H, Hkv, D, batch_name,
                                               splits, tilings[ti].dump());
          expectClose(bf16ToFloat(d_out.download<uint16_t>()), ref, 4e-3, 1.0 / 64, what);
          // The fused combine (split_arrivals): no combine launch, the same
          // tolerance against float64, twice (the counters reset).
          auto d_arrivals = DeviceBuffer::from(std::vector<unsigned>(size_t(a.N) * Hkv, 0u));
          for (int run = 0; run < 2; ++run) {
            DeviceBuffer d_fused(size_t(a.N) * H * D * 2);
            p.out = d_fused.get();
            p.split_arrivals = d_arrivals.as<unsigned>();
            KILN_GPU_OK(launchDecode(kernels[ti], a.N, Hkv, splits, p));
            expectClose(bf16ToFloat(d_fused.download<uint16_t>()), ref, 4e-3, 1.0 / 64,
                        what + fmt::format(", fused combine run {}", run));
            EXPECT_EQ(d_arrivals.download<unsigned>(), std::vector<unsigned>(size_t(a.N) * Hkv, 0u)) << what;
          }
        }
      }
    }
  }
}

// ---------------------------------------------------------------- flash attention

// flash_attention's launch: grid [H, ceil(max_q_len / kBlockM), B], block
// [32 kWarps], kSmemBytes of dynamic shared memory (opted into past 48 KiB).
Status launchFlash(const Kernel& k, int H, int max_q_len, int B, kk::PagedAttentionParams p) {
  const cuda::CudaDriver* d = (*Gpu::get())->d;
  const int block_m = configConstant(k, "kBlockM");
  if (block_m <= 0 || configConstant(k, "kSmemBytes") <= 0)
    return makeError("{}: no kBlockM / kSmemBytes in its Config", k.instance.name);
  auto smem = optIntoDynamicSmem(k);
  if (!smem) return smem.error();
  void* args[] = {&p};
  const unsigned tiles = unsigned((max_q_len + block_m - 1) / block_m);
  KILN_RETURN_IF_ERROR(d->check(d->cuLaunchKernel(k.function, unsigned(H), tiles, unsigned(B),
                                                  k.instance.launch.block_threads, 1, 1, unsigned(*smem), nullptr,
                                                  args, nullptr),
                                "cuLaunchKernel"));
  return d->check(d->cuCtxSynchronize(), "cuCtxSynchronize (kernel execution)");
}

// Ragged prefill batches against the float64 reference: fresh prompts and
// chunks after cached prefixes (prefix and q_len off the 16-key pages and the
// 64-row tiles), one-token sequences, query tiles whose last key opens a new
// key tile, prefixes over many pages of a shuffled block table, and random
// lengths; once more with queries scaled x8 so the
// softmax is peaked and the running max moves between key tiles.
struct FlashShape { int H, Hkv, D, warps, block_m; };  // warps 0: flash_attention_wgmma

// Each shape's kernel on `batch`, queries as drawn and scaled x8, against
// the float64 reference with NaN-poisoned output.
void checkFlash(std::mt19937& rng, const Batch& fixed, std::initializer_list<FlashShape> shapes) {
  for (const FlashShape& sh : shapes) {
    const bool wgmma = sh.warps == 0;
    const char* kind = wgmma ? "flash_attention_wgmma" : "flash_attention";
    for (float q_scale : {1.0f, 8.0f}) {
      const double scale = 1.0 / std::sqrt(double(sh.D));
      AttentionData a = makeAttention(rng, sh.H, sh.Hkv, sh.D, fixed, false);
      for (size_t i = 0; i < a.q.size(); ++i) {  // x8 is exact in bf16
        a.q[i] *= q_scale;
        a.qb[i] = toBf16(a.q[i]);
      }
      json params = {{"heads", sh.H}, {"kv_heads", sh.Hkv}, {"head_dim", sh.D}, {"page_size", a.page},
                     {"scale", scale}, {"kv_type", "bf16"}, {"tree_mask", false}};
      if (!wgmma && (sh.warps != 4 || sh.block_m != 64)) {
        params["warps"] = sh.warps;
        params["block_m"] = sh.block_m;
      }
      COMPILE(k, kind, params);
      auto d_q = DeviceBuffer::from(a.qb), d_k = DeviceBuffer::from(a.kb), d_v = DeviceBuffer::from(a.vb),
           d_bt = DeviceBuffer::from(a.block_tables), d_qs = DeviceBuffer::from(a.query_start),
           d_kl = DeviceBuffer::from(a.kv_lens);
      DeviceBuffer d_out(size_t(a.N) * sh.H * sh.D * 2);  // NaN-poisoned
      kk::PagedAttentionParams p{d_q.get(), d_k.get(), d_v.get(), d_bt.as<int>(), d_qs.as<int>(), d_kl.as<int>(),
                                 nullptr, d_out.get(), nullptr, nullptr, a.N, int(a.kv_lens.size()), a.max_blocks,
                                 0, 1, nullptr};
      const int max_q_len = *std::max_element(fixed.q_len.begin(), fixed.q_len.end());
      KILN_GPU_OK(launchFlash(k, sh.H, max_q_len, int(a.kv_lens.size()), p));
      const std::string what = fmt::format("{} {}/{}/{} {} warps x {} rows, q x{}", kind, sh.H, sh.Hkv, sh.D,
                                           wgmma ? 12 : sh.warps, sh.block_m, q_scale);
      expectClose(bf16ToFloat(d_out.download<uint16_t>()), attentionReference(a, scale, false), 4e-3, 1.0 / 64, what);
      std::printf("    (regs %d, dynamic smem %d, spills %d/%d)\n", k.resources.registers,
                  configConstant(k, "kSmemBytes"), k.resources.spill_stores, k.resources.spill_loads);
    }
  }
}

TEST_F(KernelsGpu, FlashAttention) {
  Batch fixed{{200, 77, 64, 1, 130, 64, 65, 1}, {200, 77 + 333, 128, 501, 147, 64 + 1000, 65, 129}};
  std::uniform_int_distribution<int> q_len(1, 300), prefix(0, 700);
  for (int i = 0; i < 3; ++i) {
    fixed.q_len.push_back(q_len(rng));
    fixed.kv_len.push_back(fixed.q_len.back() + prefix(rng));
  }
  checkFlash(rng, fixed,
             {FlashShape{32, 8, 128, 4, 64}, FlashShape{32, 8, 128, 8, 128}, FlashShape{9, 3, 64, 4, 64},
              FlashShape{9, 3, 64, 4, 128}, FlashShape{9, 3, 64, 8, 128}, FlashShape{32, 8, 128, 0, 128},
              FlashShape{9, 3, 64, 0, 128}});
}

// The warp-specialized kernel on a small batch (a fresh prompt, a chunk
// after a prefix that opens more than three key tiles, so the producer
// reuses its stages, and a one-token query): small enough for
// compute-sanitizer's memcheck and racecheck (scripts/gpu-check.sh).
TEST_F(KernelsGpu, FlashAttentionWgmmaSmall) {
  checkFlash(rng, Batch{{150, 40, 1}, {150, 40 + 600, 77}}, {FlashShape{8, 2, 128, 0, 128}, FlashShape{4, 4, 64, 0, 128}});
}

// ---------------------------------------------------------------- gemm_swiglu

// The fused gate/up projection against the float64 SwiGLU reference, output
// NaN-poisoned, on `blocks` persistent blocks; `checked_rows` (empty: all)
// are compared, and no element may be left unwritten.
void checkGemmSwiGlu(std::mt19937& rng, int rows, int hidden, int ffn, unsigned blocks, std::vector<int> checked_rows) {
  COMPILE(k, "gemm_swiglu", (json{{"hidden", hidden}, {"ffn", ffn}}));
  std::vector<float> x, w;
  const auto xb = randomBf16(rng, size_t(rows) * hidden, 1.0f, &x);
  const auto wb = randomBf16(rng, size_t(2) * ffn * hidden, 0.05f, &w);
  auto d_x = DeviceBuffer::from(xb), d_w = DeviceBuffer::from(wb);
  DeviceBuffer d_out(size_t(rows) * ffn * 2);  // NaN-poisoned
  auto p = gemmSwiGluParams(d_x.get(), d_w.get(), d_out.get(), rows, hidden, ffn);
  ASSERT_TRUE(p.ok()) << p.error().message;
  blocks = unsigned(std::min<long long>(blocks, kk::gemm_swiglu::tiles(rows, ffn)));
  KILN_GPU_OK(launch(k, blocks, 1, 1, *p));
  const std::vector<float> out = bf16ToFloat(d_out.download<uint16_t>());
  EXPECT_EQ(std::count_if(out.begin(), out.end(), [](float v) { return std::isnan(v); }), 0) << "unwritten outputs";
  if (checked_rows.empty())
    for (int r = 0; r < rows; ++r) checked_rows.push_back(r);
  std::vector<float> x_rows, got;
  for (int r : checked_rows) {
    x_rows.insert(x_rows.end(), x.begin() + size_t(r) * hidden, x.begin() + size_t(r + 1) * hidden);
    got.insert(got.end(), out.begin() + size_t(r) * ffn, out.begin() + size_t(r + 1) * ffn);
  }
  const auto ref = skinnyGemmReference(x_rows, w, nullptr, int(checked_rows.size()), 2 * ffn, hidden, /*silu_mul=*/true);
  expectClose(got, ref, 2e-3, 1.0 / 64,
              fmt::format("gemm_swiglu rows {} hidden {} ffn {} on {} blocks", rows, hidden, ffn, blocks));
  std::printf("    (regs %d, dynamic smem %d, spills %d/%d)\n", k.resources.registers, configConstant(k, "kSmemBytes"),
              k.resources.spill_stores, k.resources.spill_loads);
}

// Blocks that each walk several tiles, the last row tile partial: small
// enough for compute-sanitizer (scripts/gpu-check.sh), every row checked.
TEST_F(KernelsGpu, GemmSwiGluSmall) { checkGemmSwiGlu(rng, 300, 512, 384, 4, {}); }

// Llama-3-8B's MLP at a 2048-token prefill on every SM, checked on 12 rows
// spread over the row tiles (the float64 reference of all 2048 would take minutes).
TEST_F(KernelsGpu, GemmSwiGluLlama3) {
  checkGemmSwiGlu(rng, 2048, 4096, 14336, unsigned(multiprocessors()),
                  {0, 1, 127, 128, 640, 1023, 1500, 1791, 1920, 2000, 2046, 2047});
}

// ---------------------------------------------------------------- elementwise

TEST_F(KernelsGpu, SiluMulAddMulSiluGather) {
  const int rows = 7;
  auto silu = [](double x) { return x / (1 + std::exp(-x)); };
  for (bool merged : {true, false}) {
    const int F = 1536;
    std::vector<float> a, b;
    auto ab = randomBf16(rng, size_t(rows) * (merged ? 2 * F : F), 4.0f, &a);
    auto bb = randomBf16(rng, size_t(rows) * F, 4.0f, &b);
    COMPILE(k, "silu_mul", (json{{"ffn", F}, {"merged_gate_up", merged}}));
    auto d_a = DeviceBuffer::from(ab), d_b = DeviceBuffer::from(bb);
    DeviceBuffer d_out(size_t(rows) * F * 2);
    KILN_GPU_OK(launch(k, 4, 1, 1, kk::ElementwiseParams{d_a.get(), d_b.get(), d_out.get(), rows}));
    std::vector<double> ref(size_t(rows) * F);
    for (int r = 0; r < rows; ++r)
      for (int i = 0; i < F; ++i) {
        const double g = merged ? a[size_t(r) * 2 * F + i] : a[size_t(r) * F + i];
        const double u = merged ? a[size_t(r) * 2 * F + F + i] : b[size_t(r) * F + i];
        ref[size_t(r) * F + i] = silu(g) * u;
      }
    expectClose(bf16ToFloat(d_out.download<uint16_t>()), ref, 1e-3, 1.0 / 128,
                merged ? "silu_mul merged" : "silu_mul separate");
  }
  {  // an f32 plan's: gate/up and the result in f32, to f32 rounding
    const int F = 1536;
    std::vector<float> a;
    randomBf16(rng, size_t(rows) * 2 * F, 4.0f, &a);
    COMPILE(k, "silu_mul", (json{{"ffn", F}, {"merged_gate_up", true}, {"x_type", "f32"}, {"out_type", "f32"}}));
    auto d_a = DeviceBuffer::from(a);
    DeviceBuffer d_out(size_t(rows) * F * 4);
    KILN_GPU_OK(launch(k, 4, 1, 1, kk::ElementwiseParams{d_a.get(), nullptr, d_out.get(), rows}));
    std::vector<double> ref(size_t(rows) * F);
    for (int r = 0; r < rows; ++r)
      for (int i = 0; i < F; ++i) ref[size_t(r) * F + i] = silu(a[size_t(r) * 2 * F + i]) * a[size_t(r) * 2 * F + F + i];
    expectClose(d_out.download<float>(), ref, 1e-5, 1e-5, "silu_mul f32");
  }
  for (const char* op : {"add", "mul", "silu"}) {
    const int W = 576;
    std::vector<float> a, b;
    auto ab = randomBf16(rng, size_t(rows) * W, 4.0f, &a);
    auto bb = randomBf16(rng, size_t(rows) * W, 4.0f, &b);
    COMPILE(k, op, (json{{"width", W}}));
    auto d_a = DeviceBuffer::from(ab), d_b = DeviceBuffer::from(bb);
    DeviceBuffer d_out(size_t(rows) * W * 2);
    KILN_GPU_OK(launch(k, 2, 1, 1, kk::ElementwiseParams{d_a.get(), d_b.get(), d_out.get(), rows}));
    std::vector<double> ref(a.size());
    for (size_t i = 0; i < a.size(); ++i)
      ref[i] = std::string(op) == "add" ? double(a[i]) + b[i] : std::string(op) == "mul" ? double(a[i]) * b[i] : silu(a[i]);
    expectClose(bf16ToFloat(d_out.download<uint16_t>()), ref, 1e-3, 1.0 / 128, op);
  }
  {
    const int hidden = 576;
    const std::vector<int> qs = {0, 5, 6, 9};
    std::vector<float> h;
    auto hb = randomBf16(rng, size_t(9) * hidden, 1.0f, &h);
    COMPILE(k, "gather_last_tokens", (json{{"hidden", hidden}}));
    auto d_h = DeviceBuffer::from(hb), d_qs = DeviceBuffer::from(qs);
    DeviceBuffer d_out(size_t(3) * hidden * 2);
    KILN_GPU_OK(launch(k, 3, 1, 1, kk::GatherLastTokensParams{d_h.get(), d_qs.as<int>(), d_out.get(), 3}));
    std::vector<double> ref;
    for (int b = 0; b < 3; ++b)
      for (int i = 0; i < hidden; ++i) ref.push_back(h[size_t(qs[b + 1] - 1) * hidden + i]);
    expectClose(bf16ToFloat(d_out.download<uint16_t>()), ref, 0, 0, "gather_last_tokens");
  }
}

// ---------------------------------------------------------------- skinny gemm

TEST_F(KernelsGpu, SkinnyGemm) {
  // max_rows 1: the single-row instances (gemv_max_rows), 8 warps over K;
  // stream: gemv_stream.cuh's (n 4098: the last tile's rows past the matrix).
  struct Case { int n, k, rows; bool bias; int max_rows = 8; bool stream = false; };
  for (const Case& c : {Case{960, 576, 3, false}, Case{4096, 14336, 9, true}, Case{14336, 4096, 1, false},
                        Case{4096, 14336, 1, true, 1}, Case{6144, 4096, 1, false, 1}, Case{960, 576, 1, false, 1},
                        Case{4096, 14336, 1, true, 1, true}, Case{4098, 4096, 1, false, 1, true},
                        Case{6144, 2048, 1, false, 1, true}, Case{10, 2048, 1, true, 1, true}}) {
    if (skipUnderSanitizer(c.stream, int64_t(c.n) * c.k, fmt::format("gemm n {} k {}, streamed", c.n, c.k))) continue;
    std::vector<float> x, w, bias;
    auto xb = randomBf16(rng, size_t(c.rows) * c.k, 1.0f, &x);
    auto wb = randomBf16(rng, size_t(c.n) * c.k, 0.05f, &w);
    auto bb = randomBf16(rng, size_t(c.n), 1.0f, &bias);
    COMPILE(k, "gemm", (json{{"n", c.n}, {"k", c.k}, {"weight_type", "bf16"}, {"bias", c.bias}, {"role", "test"},
                             {"gemv_max_rows", c.max_rows}, {"gemv_stream", c.stream}}));
    ASSERT_EQ(configConstant(k, "kTiles") > 0, c.stream) << k.instance.name;
    auto d_x = DeviceBuffer::from(xb), d_w = DeviceBuffer::from(wb), d_b = DeviceBuffer::from(bb);
    DeviceBuffer d_y(size_t(c.rows) * c.n * 2);
    const int rows_per_block = configConstant(k, "kRowsPerBlock");
    ASSERT_GT(rows_per_block, 0) << k.instance.name;
    kk::GemvParams p{d_x.get(), d_w.get(), c.bias ? d_b.get() : nullptr, d_y.get(), c.rows};
    KILN_GPU_OK(launch(k, skinnyGrid(k, unsigned((c.n + rows_per_block - 1) / rows_per_block)), 1,
                       unsigned((c.rows + c.max_rows - 1) / c.max_rows), p));
    const std::vector<double> ref = skinnyGemmReference(x, w, c.bias ? &bias : nullptr, c.rows, c.n, c.k, false);
    expectClose(bf16ToFloat(d_y.download<uint16_t>()), ref, 5e-3, 1.0 / 64,
                fmt::format("gemm rows {} n {} k {}{}, max_rows {}{}", c.rows, c.n, c.k, c.bias ? " +bias" : "",
                            c.max_rows, c.stream ? ", streamed" : ""));
  }
}

// Block-quantized weights on the tensor cores (gemm_quant.cuh) at the
// shapes they run at (Llama-3-8B's q/o projection in q4_0 groups of 128, its
// down projection in int8 per channel, SmolLM2's q4_1 MLP), one and two x
// tiles a block, against float64 over the blocks' dequantized values; and
// dequantize.cuh's expansion of the same tiles, exactly.
TEST_F(KernelsGpu, QuantGemm) {
  struct Case { WeightType type; int n, k, group, rows, max_rows; bool bias; };
  for (const Case& c : {Case{WeightType::Q4_0, 4096, 4096, 128, 1, 8, false}, Case{WeightType::Q8_0, 4096, 14336, 14336, 7, 8, false},
                        Case{WeightType::Q4_1, 1536, 576, 32, 16, 16, true}, Case{WeightType::Q4_0, 1024, 4096, 32, 37, 16, false}}) {
    const std::string type(weightTypeName(c.type));
    std::vector<float> x, bias, w(size_t(c.n) * c.k);
    auto xb = randomBf16(rng, size_t(c.rows) * c.k, 1.0f, &x);
    auto bb = randomBf16(rng, size_t(c.n), 1.0f, &bias);
    std::normal_distribution<float> normal(0.0f, 0.05f);
    for (float& v : w) v = normal(rng);
    const int64_t block_bytes = rowBytes(c.type, 32);
    std::vector<uint8_t> blocks(size_t(c.n * rowBytes(c.type, c.k)));
    ASSERT_TRUE(quantizeRow(c.type, w.data(), blocks.data(), int64_t(c.n) * c.k).ok());
    for (int64_t b = 0; b < int64_t(c.n) * c.k / 32; ++b)  // a group shares its first block's scale
      if (b % (c.k / 32) % (c.group / 32) != 0)
        std::memcpy(blocks.data() + b * block_bytes, blocks.data() + (b - b % (c.group / 32)) * block_bytes, 2);
    ASSERT_TRUE(dequantizeRow(c.type, blocks.data(), w.data(), int64_t(c.n) * c.k).ok());
    std::vector<uint8_t> tiles;
    ASSERT_TRUE(packBlocks(c.type, blocks.data(), c.n, c.k, c.group, tiles).ok());
    COMPILE(k, "gemm", (json{{"n", c.n}, {"k", c.k}, {"weight_type", type}, {"bias", c.bias}, {"group", c.group},
                             {"gemv_max_rows", c.max_rows}}));
    auto d_x = DeviceBuffer::from(xb), d_w = DeviceBuffer::from(tiles), d_b = DeviceBuffer::from(bb);
    DeviceBuffer d_y(size_t(c.rows) * c.n * 2 + 64);  // 64 poisoned bytes past the end stay NaN
    const int rows_per_block = configConstant(k, "kRowsPerBlock");
    ASSERT_GT(rows_per_block, 0) << k.instance.name;
    kk::GemvParams p{d_x.get(), d_w.get(), c.bias ? d_b.get() : nullptr, d_y.get(), c.rows};
    KILN_GPU_OK(launch(k, unsigned((c.n + rows_per_block - 1) / rows_per_block), 1,
                       unsigned((c.rows + c.max_rows - 1) / c.max_rows), p));
    const std::vector<double> ref = skinnyGemmReference(x, w, c.bias ? &bias : nullptr, c.rows, c.n, c.k, false);
    std::vector<float> got = bf16ToFloat(d_y.download<uint16_t>());
    for (size_t i = ref.size(); i < got.size(); ++i) EXPECT_TRUE(std::isnan(got[i])) << "wrote past y at " << i;
    got.resize(ref.size());
    const std::string what = fmt::format("{} gemm rows {} n {} k {} group {}, max_rows {}", type, c.rows, c.n, c.k,
                                         c.group, c.max_rows);
    expectClose(got, ref, 5e-3, 1.0 / 64, what);

    COMPILE(dq, "dequantize", (json{{"n", c.n}, {"k", c.k}, {"weight_type", type}, {"group", c.group}}));
    DeviceBuffer d_out(size_t(c.n) * c.k * 2);
    const int64_t items = (c.n + 15) / 16 * ((c.k + 63) / 64) * 128;
    KILN_GPU_OK(launch(dq, unsigned((items + 255) / 256), 1, 1, kk::DequantizeParams{d_w.get(), d_out.get()}));
    const std::vector<float> expanded = bf16ToFloat(d_out.download<uint16_t>());
    for (size_t i = 0; i < w.size(); ++i)
      ASSERT_LE(std::fabs(expanded[i] - w[i]), std::fabs(w[i]) / 128 + 1e-30) << what << ": dequantized element " << i;
  }
}

// The gate/up GEMM with SwiGLU in its epilogue: y = silu(x·gateᵀ)·(x·upᵀ)
// over W = [gate; up], against float64. 28672 x 4096 is Llama-3-8B's; at
// k 16384 the tiling splits K over all 8 warps (one row per block), which the
// generator doubles to a gate/up pair; n 2 leaves most of a block's pairs
// past the matrix.
TEST_F(KernelsGpu, SkinnyGemmSiluMul) {
  struct Case { int n, k, rows; bool bias; int max_rows = 8; bool stream = false; };
  for (const Case& c : {Case{960, 576, 3, false}, Case{28672, 4096, 1, false}, Case{64, 16384, 8, true},
                        Case{2, 64, 5, false}, Case{28672, 4096, 1, false, 1}, Case{2, 64, 1, true, 1},
                        Case{28672, 4096, 1, false, 1, true}, Case{6, 2048, 1, true, 1, true}}) {
    if (skipUnderSanitizer(c.stream, int64_t(c.n) * c.k, fmt::format("gemm+silu_mul n {} k {}, streamed", c.n, c.k)))
      continue;
    const int F = c.n / 2;
    std::vector<float> x, w, bias;
    auto xb = randomBf16(rng, size_t(c.rows) * c.k, 1.0f, &x);
    auto wb = randomBf16(rng, size_t(c.n) * c.k, 0.05f, &w);
    auto bb = randomBf16(rng, size_t(c.n), 1.0f, &bias);
    COMPILE(k, "gemm", (json{{"n", c.n}, {"k", c.k}, {"weight_type", "bf16"}, {"bias", c.bias}, {"silu_mul", true},
                             {"gemv_max_rows", c.max_rows}, {"gemv_stream", c.stream}}));
    ASSERT_EQ(configConstant(k, "kTiles") > 0, c.stream) << k.instance.name;
    const int rows_per_block = configConstant(k, "kRowsPerBlock");
    ASSERT_GT(rows_per_block, 0) << k.instance.name;
    ASSERT_EQ(rows_per_block % 2, 0) << "gate and up rows pair up in a block";
    auto d_x = DeviceBuffer::from(xb), d_w = DeviceBuffer::from(wb), d_b = DeviceBuffer::from(bb);
    DeviceBuffer d_y(size_t(c.rows) * F * 2 + 64);  // 64 poisoned bytes past the end stay NaN
    kk::GemvParams p{d_x.get(), d_w.get(), c.bias ? d_b.get() : nullptr, d_y.get(), c.rows};
    const int pairs = rows_per_block / 2;
    KILN_GPU_OK(launch(k, skinnyGrid(k, unsigned((F + pairs - 1) / pairs)), 1,
                       unsigned((c.rows + c.max_rows - 1) / c.max_rows), p));
    const std::vector<double> ref = skinnyGemmReference(x, w, c.bias ? &bias : nullptr, c.rows, c.n, c.k, true);
    std::vector<float> got = bf16ToFloat(d_y.download<uint16_t>());
    for (size_t i = ref.size(); i < got.size(); ++i) EXPECT_TRUE(std::isnan(got[i])) << "wrote past y at " << i;
    got.resize(ref.size());
    expectClose(got, ref, 5e-3, 1.0 / 64, fmt::format("gemm+silu_mul rows {} n {} k {}{}, max_rows {}{}", c.rows, c.n,
                                                      c.k, c.bias ? " +bias" : "", c.max_rows,
                                                      c.stream ? ", streamed" : ""));
  }
}

// The streamed single-row gemm with the residual_rms_norm before it folded
// in (gemv_stream.cuh, kNormFold): it reads the norm's f32 stream, bf16
// branch and f32 weight instead of x, against float64 of the unfused pair
// (the sum in f32, the normalized row rounded to bf16 as the norm writes
// it). 13 blocks: block 0 alone writes the sum, which must be all of it.
TEST_F(KernelsGpu, SkinnyGemmNormFold) {
  struct Case { int n, k; bool silu; };
  for (const Case& c : {Case{6144, 4096, false}, Case{1024, 4096, true}, Case{4096, 14336, false},
                        Case{8, 2048, true}}) {
    if (skipUnderSanitizer(true, int64_t(c.n) * c.k, fmt::format("folded norm, gemm n {} k {}", c.n, c.k))) continue;
    const double eps = 1e-5;
    std::vector<float> w, residual, g(size_t(c.k)), stream(size_t(c.k));
    std::normal_distribution<float> big(0.0f, 3.0f), near_one(1.0f, 0.2f);
    for (float& v : stream) v = big(rng);
    for (float& v : g) v = near_one(rng);
    auto rb = randomBf16(rng, size_t(c.k), 2.0f, &residual);
    auto wb = randomBf16(rng, size_t(c.n) * c.k, 0.05f, &w);
    json params{{"n", c.n}, {"k", c.k}, {"weight_type", "bf16"}, {"bias", false}, {"silu_mul", c.silu},
                {"gemv_max_rows", 1}, {"gemv_stream", true}, {"norm_epsilon", eps}, {"norm_x_type", "f32"},
                {"norm_residual_type", "bf16"}, {"norm_sum_type", "f32"}, {"norm_weight_type", "f32"},
                {"norm_writes_sum", true}};
    COMPILE(k, "gemm", params);
    ASSERT_GT(configConstant(k, "kTiles"), 0) << k.instance.name;
    const int out_cols = c.silu ? c.n / 2 : c.n;
    auto d_stream = DeviceBuffer::from(stream), d_res = DeviceBuffer::from(rb), d_g = DeviceBuffer::from(g),
         d_w = DeviceBuffer::from(wb);
    DeviceBuffer d_y(size_t(out_cols) * 2);
    auto d_sum = DeviceBuffer::from(std::vector<float>(size_t(c.k), NAN));  // every element must be written
    kk::GemvParams p{nullptr, d_w.get(), nullptr, d_y.get(), 1};
    p.norm_x = d_stream.get();
    p.norm_residual = d_res.get();
    p.norm_weight = d_g.get();
    p.norm_sum = d_sum.get();
    const unsigned tiles = unsigned(configConstant(k, "kTiles"));
    KILN_GPU_OK(launch(k, skinnyGrid(k, tiles), 1, 1, p));
    const FoldedNormReference norm = foldedNormReference(stream, residual, g, eps);
    const std::vector<double> want = skinnyGemmReference(norm.normed, w, nullptr, 1, c.n, c.k, c.silu);
    const std::string what = fmt::format("gemm{} n {} k {} after a folded residual_rms_norm", c.silu ? "+silu_mul" : "",
                                         c.n, c.k);
    expectClose(d_sum.download<float>(), norm.sum, 0, 0, what + ", sum");
    expectClose(bf16ToFloat(d_y.download<uint16_t>()), want, 5e-3, 1.0 / 64, what);
  }
}

// The merged qkv projection with rope_kv_append as its epilogue
// (GemvRopeParams): x·Wᵀ (+ bias) rotated and appended in float64 as
// RopeKvAppend checks it; q and the pools poisoned, one token with no slot.
// Llama-3-8B's shape with llama3 scaling into a bf16 pool, and SmolLM2's
// (interleaved pairs, bias) into an f32 pool.
TEST_F(KernelsGpu, SkinnyGemmRope) {
  struct Case {
    RopeCase rope;
    int k, rows;
    bool bias;
    const char* kv_type;
    int max_rows = 8;
    bool stream = false;
  };
  for (const Case& c : {Case{{32, 8, 128, true, false, "llama3", 500000.0}, 4096, 1, false, "bf16"},
                        Case{{9, 3, 64, true, true, "none", 100000.0}, 576, 6, true, "f32"},
                        Case{{32, 8, 128, true, false, "llama3", 500000.0}, 4096, 1, false, "bf16", 1},
                        Case{{9, 3, 64, true, true, "none", 100000.0}, 576, 1, true, "f32", 1},
                        Case{{32, 8, 128, true, false, "llama3", 500000.0}, 4096, 1, false, "bf16", 1, true},
                        Case{{4, 2, 64, true, true, "none", 100000.0}, 2048, 1, true, "f32", 1, true}}) {
    const int H = c.rope.heads, Hkv = c.rope.kv_heads, D = c.rope.head_dim, n = (H + 2 * Hkv) * D;
    if (skipUnderSanitizer(c.stream, int64_t(n) * c.k, fmt::format("gemm+rope n {} k {}, streamed", n, c.k))) continue;
    const int page = 16, blocks = 8;
    const std::vector<int> all_positions = {4999, 0, 1, 7, 130, 2047}, all_slots = {64, 5, 17, -1, 100, 127};
    const std::vector<int> positions(all_positions.begin(), all_positions.begin() + c.rows);
    const std::vector<int> slots(all_slots.begin(), all_slots.begin() + c.rows);
    std::vector<float> x, w, bias;
    auto xb = randomBf16(rng, size_t(c.rows) * c.k, 1.0f, &x);
    auto wb = randomBf16(rng, size_t(n) * c.k, 0.05f, &w);
    auto bb = randomBf16(rng, size_t(n), 1.0f, &bias);
    json params = cuda::testing::ropeGemmParams(H, Hkv, D, c.k, c.bias, c.rope.interleaved ? "interleaved" : "half",
                                                c.rope.scaling, c.rope.theta, c.kv_type);
    params["gemv_max_rows"] = c.max_rows;
    params["gemv_stream"] = c.stream;
    COMPILE(k, "gemm", params);
    ASSERT_EQ(configConstant(k, "kTiles") > 0, c.stream) << k.instance.name;
    const int rows_per_block = configConstant(k, "kRowsPerBlock");
    ASSERT_GT(rows_per_block, 0) << k.instance.name;
    ASSERT_EQ(rows_per_block % 2, 0) << "rope's column pairs share a block";
    const bool f32 = std::string(c.kv_type) == "f32";
    const size_t pool_elems = size_t(blocks) * page * Hkv * D, kv_bytes = f32 ? 4 : 2;
    auto d_x = DeviceBuffer::from(xb), d_w = DeviceBuffer::from(wb), d_b = DeviceBuffer::from(bb),
         d_pos = DeviceBuffer::from(positions), d_slots = DeviceBuffer::from(slots);
    DeviceBuffer d_q(size_t(c.rows) * H * D * 2), d_kpool(pool_elems * kv_bytes), d_vpool(pool_elems * kv_bytes);
    kk::GemvRopeParams p{{d_x.get(), d_w.get(), c.bias ? d_b.get() : nullptr, d_q.get(), c.rows},
                         d_pos.as<int>(), d_slots.as<int>(), d_kpool.get(), d_vpool.get(), (long long)blocks * page};
    const int pairs = rows_per_block / 2;
    KILN_GPU_OK(launch(k, skinnyGrid(k, unsigned((n / 2 + pairs - 1) / pairs)), 1,
                       unsigned((c.rows + c.max_rows - 1) / c.max_rows), p));
    std::vector<double> qkv(size_t(c.rows) * n);
    for (int m = 0; m < c.rows; ++m)
      for (int j = 0; j < n; ++j) {
        double sum = c.bias ? bias[j] : 0.0;
        for (int i = 0; i < c.k; ++i) sum += double(x[size_t(m) * c.k + i]) * w[size_t(j) * c.k + i];
        qkv[size_t(m) * n + j] = sum;
      }
    auto pool = [&](const DeviceBuffer& b) {
      return f32 ? b.download<float>() : bf16ToFloat(b.download<uint16_t>());
    };
    checkRope(c.rope, ropeReference(c.rope, qkv, positions, slots, pool_elems), bf16ToFloat(d_q.download<uint16_t>()),
              pool(d_kpool), pool(d_vpool),
              fmt::format("gemm+rope {}/{}/{} rows {} k {} {} pool{}, max_rows {}{}", H, Hkv, D, c.rows, c.k,
                          c.kv_type, c.bias ? " +bias" : "", c.max_rows, c.stream ? ", streamed" : ""));
  }
}

// Not a pass/fail check: the decode-shaped GEMM's achieved weight bandwidth
// (BENCHMARKS.md: cuBLAS reaches 2.44 TB/s, 58% of HBM, on 1x4096 . 4096x14336).
TEST_F(KernelsGpu, SkinnyGemmBandwidth) {
  const cuda::CudaDriver* d = (*Gpu::get())->d;
  for (auto [n, kdim, rows] : {std::tuple{14336, 4096, 1}, std::tuple{4096, 14336, 1}, std::tuple{14336, 4096, 8}}) {
    COMPILE(k, "gemm", (json{{"n", n}, {"k", kdim}, {"weight_type", "bf16"}, {"bias", false}}));
    std::vector<uint16_t> xb = randomBf16(rng, size_t(rows) * kdim, 1.0f);
    auto d_x = DeviceBuffer::from(xb);
    DeviceBuffer d_w(size_t(n) * kdim * 2), d_y(size_t(rows) * n * 2);
    d->cuMemsetD8_v2(reinterpret_cast<CUdeviceptr>(d_w.get()), 0x11, size_t(n) * kdim * 2);
    const int rows_per_block = configConstant(k, "kRowsPerBlock");
    ASSERT_GT(rows_per_block, 0) << k.instance.name;
    kk::GemvParams p{d_x.get(), d_w.get(), nullptr, d_y.get(), rows};
    KILN_GPU_OK(launch(k, unsigned(n / rows_per_block), 1, 1, p));
    CUevent start, stop;
    d->cuEventCreate(&start, 0);
    d->cuEventCreate(&stop, 0);
    const int iters = 50;
    void* args[] = {&p};
    d->cuEventRecord(start, nullptr);
    for (int i = 0; i < iters; ++i)
      d->cuLaunchKernel(k.function, unsigned(n / rows_per_block), 1, 1, k.instance.launch.block_threads, 1, 1, 0,
                        nullptr, args, nullptr);
    d->cuEventRecord(stop, nullptr);
    d->cuEventSynchronize(stop);
    float ms = 0;
    d->cuEventElapsedTime_v2(&ms, start, stop);
    const double seconds = ms / 1e3 / iters, bytes = double(n) * kdim * 2;
    std::printf("  gemm bench rows %d n %d k %d: %.1f us, %.2f TB/s of weights\n", rows, n, kdim, seconds * 1e6,
                bytes / seconds / 1e12);
    d->cuEventDestroy_v2(start);
    d->cuEventDestroy_v2(stop);
  }
}

// ---------------------------------------------------------------- sampling

TEST_F(KernelsGpu, Sampling) {
  const int V = 49152, rows = 6;
  std::vector<float> logits;
  auto lb = randomBf16(rng, size_t(rows) * V, 6.0f, &logits);
  const std::vector<float> temperature = {0.0f, 0.7f, 0.8f, 1.0f, 1.3f, 0.5f};
  const std::vector<int> top_k = {0, 1, 50, 0, 0, 1000};
  const std::vector<float> top_p = {1.0f, 1.0f, 0.9f, 1.0f, 0.5f, 0.95f};
  const std::vector<unsigned long long> seed = {1, 2, 3, 4, 5, 0xdeadbeefcafeull};
  const std::vector<unsigned long long> counter = {0, 7, 11, 1ull << 40, 3, 99};
  COMPILE(k, "sample", (json{{"vocab", V}}));
  auto d_l = DeviceBuffer::from(lb), d_t = DeviceBuffer::from(temperature), d_k = DeviceBuffer::from(top_k),
       d_p = DeviceBuffer::from(top_p), d_s = DeviceBuffer::from(seed), d_c = DeviceBuffer::from(counter);
  DeviceBuffer d_tok(rows * 4), d_u(rows * 4);
  kk::SampleParams p{d_l.get(), d_t.as<float>(), d_k.as<int>(), d_p.as<float>(), d_s.as<unsigned long long>(),
                     d_c.as<unsigned long long>(), d_tok.as<int>(), d_u.as<float>(), rows};
  KILN_GPU_OK(launch(k, rows, 1, 1, p));
  const auto tokens = d_tok.download<int>();
  const auto us = d_u.download<float>();
  KILN_GPU_OK(launch(k, rows, 1, 1, p));
  EXPECT_EQ(d_tok.download<int>(), tokens) << "sampling is not deterministic";
  for (int r = 0; r < rows; ++r) {
    const float* x = &logits[size_t(r) * V];
    const int argmax = int(std::max_element(x, x + V) - x);
    if (temperature[r] <= 0) {  // greedy: the lowest id among the maxima
      EXPECT_EQ(tokens[r], argmax) << "row " << r;
      continue;
    }
    if (top_k[r] == 1) {  // ties with the maximum are kept (bf16 logits tie often)
      EXPECT_EQ(x[tokens[r]], x[argmax]) << "row " << r;
      continue;
    }
    EXPECT_EQ(us[r], kk::philox_uniform(seed[r], counter[r], 0)) << "row " << r << ": Philox differs from the host";
    // Kept set in float64: top-k by value (ties kept), then the smallest top set reaching top_p.
    std::vector<int> order(V);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return x[a] > x[b]; });
    const double m = x[argmax];
    std::vector<double> w(V);
    for (int i = 0; i < V; ++i) w[i] = std::exp((double(x[i]) - m) / temperature[r]);
    float cut = -INFINITY;
    if (top_k[r] > 0 && top_k[r] < V) cut = x[order[top_k[r] - 1]];
    double mass = 0;
    for (int i = 0; i < V; ++i) if (x[i] >= cut) mass += w[i];
    if (top_p[r] < 1) {
      double run = 0;
      for (int i : order) {
        if (x[i] < cut) break;
        run += w[i];
        if (run >= top_p[r] * mass) { cut = x[i]; break; }
      }
    }
    double total = 0, before = 0;
    for (int i = 0; i < V; ++i) if (x[i] >= cut) total += w[i];
    for (int i = 0; i < tokens[r]; ++i) if (x[i] >= cut) before += w[i];
    const int t = tokens[r];
    ASSERT_TRUE(t >= 0 && t < V) << "row " << r;
    EXPECT_GE(x[t], cut) << "row " << r << ": token " << t << " is outside the top-k/top-p set";
    const double target = double(us[r]) * total, slack = 1e-3 * total;
    EXPECT_LE(before, target + slack) << "row " << r;
    EXPECT_GE(before + w[t], target - slack) << "row " << r;
    std::printf("  sample row %d: T %.1f top_k %d top_p %.2f u %.4f -> token %d\n", r, temperature[r], top_k[r],
                top_p[r], us[r], t);
  }
}

// ---------------------------------------------------------------- greedy argmax

TEST_F(KernelsGpu, Argmax) {
  struct Case {
    int vocab;
    const char* type;
  };
  for (const Case& c : {Case{128256, "bf16"}, Case{49152, "f32"}, Case{1001, "bf16"}, Case{8, "f32"}}) {
    const int V = c.vocab, rows = 7;
    const bool f32 = std::string(c.type) == "f32";
    // Rounded to bf16 either way, so the maxima tie often; row 1 ties its
    // maximum at three ids, row 2 has NaNs (ignored) including at its
    // maximum's place, row 3 is all -inf (id 0), row 4 all NaN (id 0), row 5
    // has its maximum in the last id, row 6 in the first.
    std::vector<float> x;
    auto bits = randomBf16(rng, size_t(rows) * V, 4.0f, &x);
    auto at = [&](int r, int i) -> float& { return x[size_t(r) * V + i]; };
    at(1, V / 3) = at(1, V / 2) = at(1, V - 1) = 100.0f;
    at(2, 0) = at(2, V / 2) = NAN;
    at(2, V - 2) = 50.0f;
    at(2, V / 4) = NAN;
    for (int i = 0; i < V; ++i) at(3, i) = -INFINITY, at(4, i) = NAN;
    at(5, V - 1) = 60.0f;
    at(6, 0) = 60.0f;
    for (size_t i = 0; i < x.size(); ++i) bits[i] = toBf16(x[i]), x[i] = fromBf16(bits[i]);
    // The reference: largest non-NaN value, lowest id on ties, 0 if none.
    std::vector<int> expected(rows, 0);
    for (int r = 0; r < rows; ++r) {
      int best = -1;
      for (int i = 0; i < V; ++i)
        if (!std::isnan(at(r, i)) && (best < 0 || at(r, i) > at(r, best))) best = i;
      expected[r] = std::max(best, 0);
    }
    EXPECT_EQ(expected[1], V / 3);
    EXPECT_EQ(expected[2], V - 2);
    COMPILE(k, "argmax", (json{{"vocab", V}, {"logits_type", c.type}}));
    const int chunks = kk::argmaxChunks(V);
    auto d_logits = f32 ? DeviceBuffer::from(x) : DeviceBuffer::from(bits);
    DeviceBuffer d_values(size_t(rows) * chunks * 4), d_ids(size_t(rows) * chunks * 4);
    auto d_arrivals = DeviceBuffer::from(std::vector<unsigned>(rows, 0));
    for (int launch_index = 0; launch_index < 3; ++launch_index) {  // the counters reset themselves
      DeviceBuffer d_tokens(rows * 4);  // poisoned: -1
      kk::ArgmaxParams p{d_logits.get(), d_values.as<float>(), d_ids.as<int>(), d_arrivals.as<unsigned>(),
                         d_tokens.as<int>(), rows};
      KILN_GPU_OK(launch(k, rows, chunks, 1, p));
      EXPECT_EQ(d_tokens.download<int>(), expected) << "vocab " << V << " " << c.type << ", launch " << launch_index;
      EXPECT_EQ(d_arrivals.download<unsigned>(), std::vector<unsigned>(rows, 0));
    }
    std::printf("  argmax vocab %d %s: %d chunks, rows agree with the reference\n", V, c.type, chunks);
  }
}

}  // namespace
}  // namespace kiln::gpu_test
