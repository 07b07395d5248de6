// kiln_ssm_bench: the state-space kernels of one Mamba-2 layer (ssm_conv1d,
// ssd_scan, ssm_gated_norm; bf16 activations, f32 state) at
// state-spaces/mamba2-2.7b's shape (80 heads of 64, one group, state 128,
// conv over 5376 channels), the GEMMs excluded: what kiln's SSM kernels
// cost beside the projections, until the executor runs whole models
// (docs/design/state-space.md). Each chain is timed `reps` runs back to
// back after a second of heat, best of three rounds. GPU only:
//
//   kiln_ssm_bench [--batches 1,64] [--contexts 1024,...,32768] [--prefill 8192,32768] [--layers 64] [--reps N]
//
// decode: one token for each of B sequences (their states in B slots).
// decode_after: one token of a sequence whose state a prefill of L tokens
//   filled (the state is O(1): the time must not grow with L).
// prefill: one sequence of L tokens, chunked scan.
// The per-model figures multiply by --layers.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "codegen/kernels/ssm_params.cuh"
#include "test/gpu/gpu_harness.h"

namespace kiln::gpu_test {
namespace {

namespace kk = kiln::kernels;

constexpr int kHeads = 80, kHeadDim = 64, kGroups = 1, kState = 128, kWidth = 4;
constexpr int kInner = kHeads * kHeadDim, kGN = kGroups * kState, kChannels = kInner + 2 * kGN;
constexpr int kProj = kInner + kChannels + kHeads;

struct Options {
  std::vector<int> batches = {1, 64}, contexts = {1024, 2048, 4096, 8192, 16384, 32768}, prefill = {8192, 32768};
  int layers = 64, reps = 50;
};

std::vector<int> parseList(const char* text) {
  std::vector<int> out;
  std::stringstream list(text);
  for (std::string r; std::getline(list, r, ',');) out.push_back(std::atoi(r.c_str()));
  return out;
}

int run(const Options& o) {
  auto gpu = Gpu::get();
  if (!gpu.ok()) {
    std::fprintf(stderr, "kiln_ssm_bench needs an NVIDIA GPU: %s\n", gpu.error().message.c_str());
    return 1;
  }
  const cuda::CudaDriver* d = (*gpu)->d;
  auto conv = compile("ssm_conv1d", {{"channels", kChannels}, {"width", kWidth}, {"silu", true}, {"weight_type", "bf16"}});
  auto scan = compile("ssd_scan", {{"heads", kHeads}, {"head_dim", kHeadDim}, {"groups", kGroups}, {"state", kState}});
  auto norm = compile("ssm_gated_norm", {{"features", kInner}, {"group_size", kInner}, {"weight_type", "bf16"}});
  if (!conv.ok() || !scan.ok() || !norm.ok()) {
    std::fprintf(stderr, "kiln_ssm_bench: an instance did not compile\n");
    return 1;
  }
  std::mt19937 rng(7);
  int max_rows = 1;
  for (int v : o.batches) max_rows = std::max(max_rows, v);
  for (int v : o.contexts) max_rows = std::max(max_rows, v);
  for (int v : o.prefill) max_rows = std::max(max_rows, v);
  const int slots = std::max(64, *std::max_element(o.batches.begin(), o.batches.end()));
  auto d_proj = DeviceBuffer::from(randomBf16(rng, size_t(max_rows) * kProj, 1.0f));
  auto d_conv_w = DeviceBuffer::from(randomBf16(rng, size_t(kChannels) * kWidth, 0.5f));
  auto d_conv_b = DeviceBuffer::from(randomBf16(rng, kChannels, 0.1f));
  auto d_norm_w = DeviceBuffer::from(randomBf16(rng, kInner, 1.0f));
  std::vector<float> heads(3 * kHeads);
  for (int h = 0; h < kHeads; ++h) heads[size_t(h)] = -2.0f, heads[size_t(kHeads + h)] = 1.0f, heads[size_t(2 * kHeads + h)] = 1.0f;
  auto d_heads = DeviceBuffer::from(heads);
  DeviceBuffer d_conv_out(size_t(max_rows) * kChannels * 2), d_y(size_t(max_rows) * kInner * 2),
      d_out(size_t(max_rows) * kInner * 2);
  DeviceBuffer d_conv_pool(size_t(slots) * (kWidth - 1) * kChannels * 2), d_ssm_pool(size_t(slots) * kInner * kState * 4);
  std::vector<int> slot_ids(static_cast<size_t>(slots));
  for (int i = 0; i < slots; ++i) slot_ids[size_t(i)] = i;
  auto d_slots = DeviceBuffer::from(slot_ids);
  auto at = [](const DeviceBuffer& b, size_t bytes) { return static_cast<const void*>(static_cast<const char*>(b.get()) + bytes); };

  // The chain over `batch` sequences of `rows_each` rows.
  auto timeChain = [&](int batch, int rows_each, int reps) -> double {
    std::vector<int> qs(size_t(batch) + 1);
    for (int b = 0; b <= batch; ++b) qs[size_t(b)] = b * rows_each;
    auto d_qs = DeviceBuffer::from(qs);
    const int rows = batch * rows_each;
    kk::SsmConvParams cp{at(d_proj, size_t(kInner) * 2), d_conv_w.get(), d_conv_b.get(), d_conv_out.get(),
                         d_conv_pool.get(), d_qs.as<int>(), d_slots.as<int>(), kProj, batch};
    kk::SsdScanParams sp{d_conv_out.get(), at(d_conv_out, size_t(kInner) * 2), at(d_conv_out, size_t(kInner + kGN) * 2),
                         at(d_proj, size_t(kInner + kChannels) * 2), d_heads.get(), at(d_heads, size_t(kHeads) * 4),
                         at(d_heads, size_t(2 * kHeads) * 4), d_y.get(), d_ssm_pool.as<float>(), d_qs.as<int>(),
                         d_slots.as<int>(), kChannels, kChannels, kProj, batch, 0.0f, 1e30f};
    kk::SsmGatedNormParams np{d_y.get(), d_proj.get(), d_norm_w.get(), d_out.get(), kProj, rows, 1e-5f};
    auto chain = [&] {
      void* ca[] = {&cp};
      void* sa[] = {&sp};
      void* na[] = {&np};
      return d->cuLaunchKernel(conv->function, unsigned((kChannels + 127) / 128), unsigned(batch), 1, 128, 1, 1, 0,
                               nullptr, ca, nullptr) == CUDA_SUCCESS &&
             d->cuLaunchKernel(scan->function, unsigned(kHeads), unsigned(batch), 1, 256, 1, 1, 0, nullptr, sa,
                               nullptr) == CUDA_SUCCESS &&
             d->cuLaunchKernel(norm->function, unsigned(rows), 1, 1, 256, 1, 1, 0, nullptr, na, nullptr) ==
                 CUDA_SUCCESS;
    };
    if (!chain() || !d->check(d->cuCtxSynchronize(), "the first run").ok()) return -1;
    double best = 1e30;
    for (int round = 0; round < 3; ++round) {
      heatFor(chain, 1.0);
      best = std::min(best, backToBackUs(chain, reps));
    }
    return best;
  };

  for (int batch : o.batches) {
    const double us = timeChain(batch, 1, o.reps);
    if (us < 0) return 1;
    std::printf("{\"what\": \"decode\", \"batch\": %d, \"us_per_layer\": %.2f, \"ssm_kernels_of_%d_layers_tok_per_s\": %.0f}\n",
                batch, us, o.layers, batch / (o.layers * us * 1e-6));
  }
  for (int ctx : o.contexts) {
    if (timeChain(1, ctx, 1) < 0) return 1;  // the prefill fills slot 0's state
    const double us = timeChain(1, 1, o.reps);
    std::printf("{\"what\": \"decode_after\", \"context\": %d, \"us_per_layer\": %.2f, \"ms_per_token_%d_layers\": %.4f}\n",
                ctx, us, o.layers, o.layers * us * 1e-3);
  }
  for (int n : o.prefill) {
    const double us = timeChain(1, n, 3);
    if (us < 0) return 1;
    std::printf("{\"what\": \"prefill\", \"tokens\": %d, \"us_per_layer\": %.1f, \"ssm_kernels_of_%d_layers_tok_per_s\": %.0f}\n",
                n, us, o.layers, n / (o.layers * us * 1e-6));
  }
  return 0;
}

}  // namespace
}  // namespace kiln::gpu_test

int main(int argc, char** argv) {
  kiln::gpu_test::Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--batches") == 0) o.batches = kiln::gpu_test::parseList(argv[i + 1]);
    else if (std::strcmp(argv[i], "--contexts") == 0) o.contexts = kiln::gpu_test::parseList(argv[i + 1]);
    else if (std::strcmp(argv[i], "--prefill") == 0) o.prefill = kiln::gpu_test::parseList(argv[i + 1]);
    else if (std::strcmp(argv[i], "--layers") == 0) o.layers = std::atoi(argv[i + 1]);
    else if (std::strcmp(argv[i], "--reps") == 0) o.reps = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: kiln_ssm_bench [--batches 1,64] [--contexts 1024,...] [--prefill 8192,32768] "
                           "[--layers 64] [--reps N]\n");
      return 2;
    }
  }
  return kiln::gpu_test::run(o);
}
