// Representative instances of every CUDA kernel kind, at the shapes kiln
// ships for: SmolLM2-135M (hidden 576, 9/3 heads, head_dim 64, ffn 1536,
// vocab 49152) and Llama-3-8B (hidden 4096, 32/8 heads, head_dim 128, ffn
// 14336, vocab 128256), page size 16, for bf16 plans and f32 ones. Shared
// by the NVRTC compile test and the GPU correctness test.
#pragma once

#include <nlohmann/json.hpp>

#include <cmath>
#include <ostream>

#include <string>
#include <tuple>
#include <vector>

namespace kiln::cuda::testing {

struct KernelCase {
  std::string kind;
  nlohmann::json params;
};

inline void PrintTo(const KernelCase& c, std::ostream* os) { *os << c.kind << " " << c.params.dump(); }

inline nlohmann::json ropeParams(int heads, int kv_heads, int head_dim, bool merged, const char* style,
                                 const char* scaling, double theta) {
  return {{"heads", heads}, {"kv_heads", kv_heads}, {"head_dim", head_dim}, {"page_size", 16},
          {"merged_qkv", merged}, {"kv_type", "bf16"}, {"rope_theta", theta}, {"rope_style", style},
          {"rope_scaling", scaling}, {"rope_factor", 8.0}, {"rope_low_freq_factor", 1.0},
          {"rope_high_freq_factor", 4.0}, {"rope_original_max_position", 8192}};
}

// The merged qkv projection with rope_kv_append as its epilogue (what
// skinnyFusions gives the skinny gemm before a merged rope_kv_append).
inline nlohmann::json ropeGemmParams(int heads, int kv_heads, int head_dim, int k, bool bias, const char* style,
                                     const char* scaling, double theta, const char* kv_type) {
  nlohmann::json p = ropeParams(heads, kv_heads, head_dim, true, style, scaling, theta);
  p.update({{"n", (heads + 2 * kv_heads) * head_dim}, {"k", k}, {"weight_type", "bf16"}, {"bias", bias},
            {"kv_type", kv_type}, {"rope_kv_append", true}});
  return p;
}

inline nlohmann::json attentionParams(int heads, int kv_heads, int head_dim, bool tree) {
  return {{"heads", heads}, {"kv_heads", kv_heads}, {"head_dim", head_dim}, {"page_size", 16},
          {"scale", 1.0 / std::sqrt(double(head_dim))}, {"kv_type", "bf16"}, {"tree_mask", tree}};
}

// An f32 plan's instances (--activation-type=f32, vLLM's --dtype float32):
// what codegen/cuda/kernel_selection.h gives its steps, with every activation
// type named f32 and the KV cache f32. Its GEMMs run in cuBLASLt.
inline std::vector<KernelCase> f32PlanKernelCases() {
  std::vector<KernelCase> cases;
  const nlohmann::json f32 = "f32";
  for (int hidden : {576, 4096}) {
    cases.push_back({"embedding", {{"hidden", hidden}, {"table_type", "bf16"}, {"out_type", f32}}});
    cases.push_back({"rms_norm", {{"hidden", hidden}, {"epsilon", 1e-5}, {"x_type", f32}, {"out_type", f32}}});
    cases.push_back({"residual_rms_norm", {{"hidden", hidden}, {"epsilon", 1e-5}, {"writes_sum", true},
                                           {"x_type", f32}, {"residual_type", f32}, {"sum_type", f32},
                                           {"out_type", f32}}});
    cases.push_back({"add", {{"width", hidden}, {"a_type", f32}, {"b_type", f32}, {"out_type", f32}}});
    cases.push_back({"gather_last_tokens", {{"hidden", hidden}, {"type", f32}}});
  }
  for (auto [H, Hkv, D, style, scaling, theta] :
       {std::tuple{9, 3, 64, "half", "none", 100000.0}, std::tuple{32, 8, 128, "half", "llama3", 500000.0},
        std::tuple{4, 2, 40, "half", "none", 10000.0}}) {
    nlohmann::json rope = ropeParams(H, Hkv, D, true, style, scaling, theta);
    rope.update({{"kv_type", f32}, {"x_type", f32}, {"out_type", f32}});
    cases.push_back({"rope_kv_append", rope});
  }
  // Llama-3.2-1B's 32/8 heads of 64 too: f32 rows spilled there when the
  // scoring loop unrolled as for bf16 ones (paged_attention.cuh kDimSteps).
  for (auto [H, Hkv, D] : {std::tuple{9, 3, 64}, std::tuple{32, 8, 64}, std::tuple{32, 8, 128}}) {
    nlohmann::json attention = attentionParams(H, Hkv, D, false);
    attention.update({{"kv_type", f32}, {"q_type", f32}, {"out_type", f32}});
    cases.push_back({"paged_attention", attention});
    cases.push_back({"paged_attention_split", attention});
    cases.push_back({"attention_combine", {{"heads", H}, {"head_dim", D}, {"out_type", f32}}});
  }
  // An f32 plan over int8/fp8 KV pools: f32 rows quantized at append, the
  // CUDA-core attention reading codes and scales into f32 q and out.
  for (const char* kv_type : {"int8", "fp8e4m3"}) {
    nlohmann::json rope = ropeParams(9, 3, 64, true, "half", "none", 100000.0);
    rope.update({{"kv_type", kv_type}, {"x_type", f32}, {"out_type", f32}});
    cases.push_back({"rope_kv_append", rope});
    nlohmann::json attention = attentionParams(32, 8, 64, false);
    attention.update({{"kv_type", kv_type}, {"q_type", f32}, {"out_type", f32}});
    cases.push_back({"paged_attention", attention});
    cases.push_back({"paged_attention_split", attention});
  }
  // Qwen3's per-head q/k norm in the append, and a sliding window
  // (Mistral's) on the CUDA-core attention an f32 plan runs.
  {
    nlohmann::json rope = ropeParams(16, 8, 128, true, "half", "none", 1000000.0);
    rope.update({{"kv_type", f32}, {"x_type", f32}, {"out_type", f32}, {"qk_norm", true}, {"qk_norm_epsilon", 1e-6}});
    cases.push_back({"rope_kv_append", rope});
    nlohmann::json attention = attentionParams(32, 8, 128, false);
    attention.update({{"kv_type", f32}, {"q_type", f32}, {"out_type", f32}, {"sliding_window", 4096}});
    cases.push_back({"paged_attention", attention});
    cases.push_back({"paged_attention_split", attention});
  }
  cases.push_back({"silu_mul", {{"ffn", 1536}, {"merged_gate_up", true}, {"x_type", f32}, {"out_type", f32}}});
  cases.push_back({"silu_mul", {{"ffn", 14336}, {"merged_gate_up", false}, {"x_type", f32}, {"out_type", f32}}});
  // Gemma 3 (1B: hidden 1152, ffn 6912): GeGLU, and the scaled embedding.
  cases.push_back({"silu_mul", {{"ffn", 6912}, {"merged_gate_up", true}, {"activation", "gelu_tanh"},
                                {"x_type", f32}, {"out_type", f32}}});
  cases.push_back({"embedding", {{"hidden", 1152}, {"table_type", "f32"}, {"scale", 33.941125496954285},
                                 {"out_type", f32}}});
  cases.push_back({"argmax", {{"vocab", 128256}, {"logits_type", f32}}});
  // Mixtral-8x7B's router and experts (hidden 4096, 8 experts of 14336, top 2).
  const nlohmann::json moe{{"hidden", 4096}, {"ffn", 14336}, {"experts", 8}, {"top_k", 2}, {"weight_type", "f32"},
                           {"x_type", f32}, {"out_type", f32}};
  cases.push_back({"moe_router", {{"hidden", 4096}, {"experts", 8}, {"top_k", 2}, {"normalize", true},
                                  {"weight_type", "f32"}, {"x_type", f32}, {"out_type", f32}}});
  for (const char* part : {"moe_gate_up", "moe_down", "moe_combine"}) cases.push_back({part, moe});
  return cases;
}

inline std::vector<KernelCase> representativeKernelCases() {
  using nlohmann::json;
  std::vector<KernelCase> cases;
  for (const char* table : {"f32", "bf16", "f16", "q8_0", "q4_0", "q4_1"})
    cases.push_back({"embedding", {{"hidden", 576}, {"table_type", table}}});
  cases.push_back({"embedding", {{"hidden", 4096}, {"table_type", "bf16"}}});
  // An f32 residual stream (kiln-compile's default with bf16 activations).
  cases.push_back({"embedding", {{"hidden", 2048}, {"table_type", "bf16"}, {"out_type", "f32"}}});
  for (int hidden : {576, 4096}) {
    cases.push_back({"rms_norm", {{"hidden", hidden}, {"epsilon", 1e-5}}});
    cases.push_back({"residual_rms_norm", {{"hidden", hidden}, {"epsilon", 1e-5}, {"writes_sum", true}}});
    cases.push_back({"residual_rms_norm", {{"hidden", hidden}, {"epsilon", 1e-6}, {"writes_sum", false}, {"weight_type", "bf16"}}});
  }
  for (int hidden : {2048, 4096}) {
    cases.push_back({"rms_norm", {{"hidden", hidden}, {"epsilon", 1e-5}, {"x_type", "f32"}}});
    cases.push_back({"residual_rms_norm", {{"hidden", hidden}, {"epsilon", 1e-5}, {"writes_sum", true},
                                           {"x_type", "f32"}, {"sum_type", "f32"}}});
  }
  // GEMMs over packed ggml blocks on the tensor cores (SmolLM2 Q4_1's
  // shapes, its q8_0 LM head, Llama-3-8B's gate/up in q4_0 and its down
  // projection in int8 per channel, and the K-quants of a Q4_K_M file), one
  // and two x tiles a block, and their expansion to bf16 for cuBLASLt.
  for (auto [type, n, k, group] : {std::tuple{"q4_1", 3072, 576, 32}, std::tuple{"q4_1", 576, 1536, 32},
                                   std::tuple{"q8_0", 49152, 576, 32}, std::tuple{"q4_0", 28672, 4096, 128},
                                   std::tuple{"q8_0", 4096, 14336, 14336}, std::tuple{"q4_k", 6144, 4096, 32},
                                   std::tuple{"q5_k", 28672, 4096, 32}, std::tuple{"q6_k", 4096, 14336, 16}}) {
    const json gemm{{"n", n}, {"k", k}, {"weight_type", type}, {"bias", false}, {"group", group}};
    cases.push_back({"gemm", gemm});
    json two_tiles = gemm;
    two_tiles["gemv_max_rows"] = 16;
    cases.push_back({"gemm", two_tiles});
    cases.push_back({"dequantize", {{"n", n}, {"k", k}, {"weight_type", type}, {"group", group}}});
  }
  cases.push_back({"rope_kv_append", ropeParams(9, 3, 64, true, "interleaved", "none", 100000.0)});
  cases.push_back({"rope_kv_append", ropeParams(9, 3, 64, false, "half", "linear", 10000.0)});
  cases.push_back({"rope_kv_append", ropeParams(32, 8, 128, true, "half", "llama3", 500000.0)});
  // head_dim 40: half pairs 20 apart, one pair a thread instead of 8 elements.
  cases.push_back({"rope_kv_append", ropeParams(4, 2, 40, true, "half", "none", 10000.0)});
  for (bool tree : {false, true}) {
    cases.push_back({"paged_attention", attentionParams(9, 3, 64, tree)});
    cases.push_back({"paged_attention", attentionParams(32, 8, 128, tree)});
  }
  cases.push_back({"paged_attention_split", attentionParams(9, 3, 64, false)});
  cases.push_back({"paged_attention_split", attentionParams(32, 8, 128, false)});
  // Tensor-core prefill: the default 4 warps x 64 rows, 8 warps x 128 rows,
  // and 4 warps x 128 rows (two m-tiles a warp, head_dim 64 only).
  cases.push_back({"flash_attention", attentionParams(9, 3, 64, false)});
  cases.push_back({"flash_attention", attentionParams(32, 8, 128, false)});
  for (auto [hd, warps, block_m] : {std::tuple{128, 8, 128}, std::tuple{64, 8, 128}, std::tuple{64, 4, 128}}) {
    nlohmann::json tuned = hd == 64 ? attentionParams(9, 3, 64, false) : attentionParams(32, 8, 128, false);
    tuned["warps"] = warps;
    tuned["block_m"] = block_m;
    cases.push_back({"flash_attention", tuned});
  }
  // The same on Hopper's warpgroup tensor cores (sm_90a), 128 rows a block.
  cases.push_back({"flash_attention_wgmma", attentionParams(9, 3, 64, false)});
  cases.push_back({"flash_attention_wgmma", attentionParams(32, 8, 128, false)});
  // The gate/up projection with SwiGLU in its epilogue (sm_90a, TMA):
  // Llama-3-8B's and Llama-3.2-1B's MLP shapes.
  cases.push_back({"gemm_swiglu", {{"hidden", 4096}, {"ffn", 14336}}});
  cases.push_back({"gemm_swiglu", {{"hidden", 2048}, {"ffn", 8192}}});
  // Bandwidth-bound split-KV decode (partials for attention_combine): the
  // tensor-core form (the default) and the CUDA-core form.
  cases.push_back({"decode_attention", attentionParams(9, 3, 64, false)});
  cases.push_back({"decode_attention", attentionParams(32, 8, 128, false)});
  for (auto [H, Hkv, D] : {std::tuple{9, 3, 64}, std::tuple{32, 8, 128}}) {
    nlohmann::json core = attentionParams(H, Hkv, D, false);
    core["mma"] = false;
    cases.push_back({"decode_attention", core});
  }
  // The tilings the bench sweeps, the largest group, an f32 pool (CUDA cores).
  for (int stages : {2, 4}) {
    nlohmann::json tuned = attentionParams(32, 8, 128, false);
    tuned["stages"] = stages;
    cases.push_back({"decode_attention", tuned});
  }
  for (auto [chunks, keys, stages] : {std::tuple{1, 4, 3}, std::tuple{2, 1, 6}, std::tuple{1, 2, 4}}) {
    nlohmann::json tuned = attentionParams(32, 8, 128, false);
    tuned["mma"] = false;
    tuned["chunks"] = chunks;
    tuned["keys"] = keys;
    tuned["stages"] = stages;
    cases.push_back({"decode_attention", tuned});
  }
  cases.push_back({"decode_attention", attentionParams(32, 2, 128, false)});
  {
    nlohmann::json core16 = attentionParams(32, 2, 128, false);
    core16["mma"] = false;
    cases.push_back({"decode_attention", core16});
  }
  {
    nlohmann::json f32 = attentionParams(32, 8, 128, false);
    f32["kv_type"] = "f32";
    cases.push_back({"decode_attention", f32});
  }
  // int8 and fp8 e4m3 pools with a scale per (token, kv head): the append
  // that quantizes, and the CUDA-core attention kernels that read them.
  for (const char* kv_type : {"int8", "fp8e4m3"}) {
    for (auto [H, Hkv, D] : {std::tuple{9, 3, 64}, std::tuple{32, 8, 128}}) {
      nlohmann::json attention = attentionParams(H, Hkv, D, false);
      attention["kv_type"] = kv_type;
      cases.push_back({"decode_attention", attention});
      cases.push_back({"paged_attention", attention});
      cases.push_back({"paged_attention_split", attention});
    }
    for (auto [H, Hkv, D] : {std::tuple{9, 3, 64}, std::tuple{32, 8, 128}}) {  // speculative verify's
      nlohmann::json tree = attentionParams(H, Hkv, D, true);
      tree["kv_type"] = kv_type;
      cases.push_back({"paged_attention", tree});
    }
    nlohmann::json group16 = attentionParams(32, 2, 128, false);  // decode_attention refuses it
    group16["kv_type"] = kv_type;
    cases.push_back({"paged_attention_split", group16});
    nlohmann::json rope = ropeParams(32, 8, 128, true, "half", "llama3", 500000.0);
    rope["kv_type"] = kv_type;
    cases.push_back({"rope_kv_append", rope});
    nlohmann::json interleaved = ropeParams(9, 3, 64, true, "interleaved", "none", 100000.0);
    interleaved["kv_type"] = kv_type;
    cases.push_back({"rope_kv_append", interleaved});
    nlohmann::json narrow = ropeParams(4, 2, 40, false, "half", "none", 10000.0);  // one pair a thread
    narrow["kv_type"] = kv_type;
    cases.push_back({"rope_kv_append", narrow});
  }
  // Qwen3 (Qwen3-8B's 32/8 heads of 128, Qwen3-0.6B's 16/8): q and k
  // normalized per head before the rotation, merged or not, into bf16 or
  // int8 pools.
  for (auto [H, Hkv, merged, kv_type] : {std::tuple{32, 8, true, "bf16"}, std::tuple{16, 8, false, "bf16"},
                                         std::tuple{16, 8, true, "int8"}}) {
    nlohmann::json rope = ropeParams(H, Hkv, 128, merged, "half", "none", 1000000.0);
    rope.update({{"kv_type", kv_type}, {"qk_norm", true}, {"qk_norm_epsilon", 1e-6}});
    cases.push_back({"rope_kv_append", rope});
  }
  {  // head_dim 40: the one-pair-a-thread path with the norm.
    nlohmann::json narrow = ropeParams(4, 2, 40, true, "half", "none", 10000.0);
    narrow.update({{"qk_norm", true}, {"qk_norm_epsilon", 1e-6}});
    cases.push_back({"rope_kv_append", narrow});
  }
  // Sliding-window attention (Mistral-7B's 32/8 heads of 128, window 4096)
  // in every attention kernel: CUDA-core, split, both decode forms, both
  // tensor-core prefills, and an int8 pool.
  {
    nlohmann::json windowed = attentionParams(32, 8, 128, false);
    windowed["sliding_window"] = 4096;
    for (const char* kind : {"paged_attention", "paged_attention_split", "decode_attention", "flash_attention",
                             "flash_attention_wgmma"})
      cases.push_back({kind, windowed});
    nlohmann::json core = windowed;
    core["mma"] = false;
    cases.push_back({"decode_attention", core});
    nlohmann::json narrow = attentionParams(9, 3, 64, false);  // a short window, head_dim 64
    narrow["sliding_window"] = 7;
    cases.push_back({"flash_attention", narrow});
    cases.push_back({"decode_attention", narrow});
    nlohmann::json scaled = windowed;
    scaled["kv_type"] = "int8";
    cases.push_back({"decode_attention", scaled});
    cases.push_back({"paged_attention_split", scaled});
  }
  cases.push_back({"attention_combine", {{"heads", 9}, {"head_dim", 64}}});
  cases.push_back({"attention_combine", {{"heads", 32}, {"head_dim", 128}}});
  cases.push_back({"silu_mul", {{"ffn", 1536}, {"merged_gate_up", true}}});
  cases.push_back({"silu_mul", {{"ffn", 14336}, {"merged_gate_up", false}}});
  cases.push_back({"silu_mul", {{"ffn", 6912}, {"merged_gate_up", false}, {"activation", "gelu_tanh"}}});
  cases.push_back({"embedding", {{"hidden", 1152}, {"table_type", "bf16"}, {"scale", 34.0}, {"out_type", "f32"}}});
  cases.push_back({"add", {{"width", 576}}});
  cases.push_back({"add", {{"width", 2048}, {"a_type", "f32"}, {"out_type", "f32"}}});
  cases.push_back({"mul", {{"width", 4096}}});
  cases.push_back({"silu", {{"width", 1536}}});
  cases.push_back({"gather_last_tokens", {{"hidden", 576}}});
  cases.push_back({"gather_last_tokens", {{"hidden", 4096}}});
  cases.push_back({"gather_last_tokens", {{"hidden", 2048}, {"type", "f32"}}});
  // Mixtral-8x7B (8 experts of 14336 over 4096, top 2, renormalized) and
  // Qwen3-30B-A3B (128 experts of 768 over 2048, top 8, norm_topk_prob).
  for (auto [hidden, ffn, experts, top_k] : {std::tuple{4096, 14336, 8, 2}, std::tuple{2048, 768, 128, 8}}) {
    cases.push_back({"moe_router", {{"hidden", hidden}, {"experts", experts}, {"top_k", top_k}, {"normalize", true},
                                    {"weight_type", "bf16"}}});
    for (const char* part : {"moe_gate_up", "moe_down", "moe_combine", "moe_gate_up_mma", "moe_down_mma"})
      cases.push_back({part, {{"hidden", hidden}, {"ffn", ffn}, {"experts", experts}, {"top_k", top_k},
                              {"weight_type", "bf16"}}});
  }
  // Mamba-2 2.7B's layer (hidden 2560, 80 heads of 64, 1 group, state 128,
  // conv over 5376 channels) and tiny-mamba2's (8 heads of 16, 2 groups, state 16).
  for (auto [heads, head_dim, groups, state] : {std::tuple{80, 64, 1, 128}, std::tuple{8, 16, 2, 16}}) {
    cases.push_back({"ssm_conv1d", {{"channels", heads * head_dim + 2 * groups * state}, {"width", 4}, {"silu", true},
                                    {"weight_type", "bf16"}}});
    cases.push_back({"ssd_scan", {{"heads", heads}, {"head_dim", head_dim}, {"groups", groups}, {"state", state}}});
    cases.push_back({"ssm_gated_norm", {{"features", heads * head_dim}, {"group_size", heads * head_dim},
                                        {"weight_type", "bf16"}}});
  }
  // Nemotron-H's rope-less attention appends its keys and values as they
  // are (8 KV heads of 128 into bf16 pools; tiny-hybrid's f32 plan: 2 of 16
  // into f32), and its MLP squares the ReLU.
  cases.push_back({"kv_append", {{"kv_heads", 8}, {"head_dim", 128}, {"page_size", 16}, {"kv_type", "bf16"}}});
  cases.push_back({"kv_append", {{"kv_heads", 2}, {"head_dim", 16}, {"page_size", 16}, {"kv_type", "f32"},
                                 {"x_type", "f32"}}});
  cases.push_back({"relu_squared", {{"width", 21504}}});
  cases.push_back({"relu_squared", {{"width", 96}, {"a_type", "f32"}, {"out_type", "f32"}}});
  // Mamba's selective scan: mamba-2.8b (5120 channels, state 16) and tiny-mamba (128, 8).
  cases.push_back({"selective_scan", {{"channels", 5120}, {"state", 16}}});
  cases.push_back({"selective_scan", {{"channels", 128}, {"state", 8}, {"x_type", "f32"}, {"out_type", "f32"}}});
  cases.push_back({"gemm", {{"n", 960}, {"k", 576}, {"weight_type", "bf16"}, {"bias", false}}});
  cases.push_back({"gemm", {{"n", 14336}, {"k", 4096}, {"weight_type", "bf16"}, {"bias", false}}});
  cases.push_back({"gemm", {{"n", 4096}, {"k", 14336}, {"weight_type", "bf16"}, {"bias", true}}});
  cases.push_back({"gemm", {{"n", 28672}, {"k", 4096}, {"weight_type", "bf16"}, {"bias", false}, {"silu_mul", true}}});
  cases.push_back({"gemm", {{"n", 64}, {"k", 16384}, {"weight_type", "bf16"}, {"bias", true}, {"silu_mul", true}}});
  // The single-row instances batch-1 decode runs (gemv_max_rows 1).
  cases.push_back({"gemm", {{"n", 4096}, {"k", 14336}, {"weight_type", "bf16"}, {"bias", false}, {"gemv_max_rows", 1}}});
  cases.push_back({"gemm", {{"n", 128256}, {"k", 4096}, {"weight_type", "bf16"}, {"bias", false}, {"gemv_max_rows", 1}}});
  cases.push_back({"gemm", {{"n", 28672}, {"k", 4096}, {"weight_type", "bf16"}, {"bias", false}, {"silu_mul", true},
                            {"gemv_max_rows", 1}}});
  cases.push_back({"gemm", ropeGemmParams(32, 8, 128, 4096, false, "half", "llama3", 500000.0, "bf16")});
  cases.push_back({"gemm", ropeGemmParams(9, 3, 64, 576, true, "interleaved", "none", 100000.0, "f32")});
  {
    nlohmann::json single = ropeGemmParams(32, 8, 128, 4096, false, "half", "llama3", 500000.0, "bf16");
    single["gemv_max_rows"] = 1;
    cases.push_back({"gemm", single});
  }
  // ... streaming W through the bulk-copy ring (gemv_stream.cuh) on sm_90:
  // o_proj, down with bias, gate/up with SwiGLU, qkv with rope; the LM head
  // (1 GB) and k 576 stay on gemv.cuh (their names say which: kernel_test).
  cases.push_back({"gemm", {{"n", 4096}, {"k", 4096}, {"weight_type", "bf16"}, {"bias", false}, {"gemv_max_rows", 1},
                            {"gemv_stream", true}}});
  cases.push_back({"gemm", {{"n", 4096}, {"k", 14336}, {"weight_type", "bf16"}, {"bias", true}, {"gemv_max_rows", 1},
                            {"gemv_stream", true}}});
  cases.push_back({"gemm", {{"n", 28672}, {"k", 4096}, {"weight_type", "bf16"}, {"bias", false}, {"silu_mul", true},
                            {"gemv_max_rows", 1}, {"gemv_stream", true}}});
  {
    nlohmann::json single = ropeGemmParams(32, 8, 128, 4096, false, "half", "llama3", 500000.0, "bf16");
    single["gemv_max_rows"] = 1;
    single["gemv_stream"] = true;
    cases.push_back({"gemm", single});
    // ... and both with the residual_rms_norm before them folded in.
    const nlohmann::json norm = {{"norm_epsilon", 1e-5}, {"norm_x_type", "f32"},      {"norm_residual_type", "bf16"},
                                 {"norm_sum_type", "f32"}, {"norm_weight_type", "f32"}, {"norm_writes_sum", true}};
    single.update(norm);
    cases.push_back({"gemm", single});
    nlohmann::json gate_up = {{"n", 28672}, {"k", 4096}, {"weight_type", "bf16"}, {"bias", false}, {"silu_mul", true},
                              {"gemv_max_rows", 1}, {"gemv_stream", true}};
    gate_up.update(norm);
    cases.push_back({"gemm", gate_up});
  }
  cases.push_back({"sample", {{"vocab", 49152}}});
  cases.push_back({"sample", {{"vocab", 128256}, {"logits_type", "f32"}}});
  cases.push_back({"argmax", {{"vocab", 128256}}});
  cases.push_back({"argmax", {{"vocab", 49152}, {"logits_type", "f32"}}});
  cases.push_back({"argmax", {{"vocab", 1001}}});  // not a multiple of 8: scalar loads, one chunk
  // The 2:4 sparse linears: the decode GEMV for every values type, 1 and 8
  // rows, bf16 and f32 out; the tensor-core GEMM at SmolLM2's and Llama's.
  for (const char* values : {"bf16", "q8_0", "q4_0"})
    for (int rows : {1, 8})
      for (const char* out : {"bf16", "f32"}) {
        cases.push_back({"sparse24_gemv", {{"n", 4096}, {"k", 14336}, {"values_type", values}, {"bias", false},
                                           {"max_rows", rows}, {"out_type", out}}});
        cases.push_back({"sparse24_gemv", {{"n", 576}, {"k", 576}, {"values_type", values}, {"bias", true},
                                           {"max_rows", rows}, {"out_type", out}}});
      }
  for (const char* out : {"bf16", "f32"}) {
    cases.push_back({"sparse24_gemm", {{"n", 14336}, {"k", 4096}, {"bias", false}, {"out_type", out}}});
    cases.push_back({"sparse24_gemm", {{"n", 576}, {"k", 1536}, {"bias", true}, {"out_type", out}}});
    cases.push_back({"sparse24_gemm_wgmma", {{"n", 14336}, {"k", 4096}, {"bias", false}, {"out_type", out}}});
    cases.push_back({"sparse24_gemm_wgmma", {{"n", 576}, {"k", 1536}, {"bias", true}, {"out_type", out}}});
  }
  return cases;
}

}  // namespace kiln::cuda::testing
