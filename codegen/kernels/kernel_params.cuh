// Parameter structs of every CUDA kernel kind: the one definition both the
// kernels (NVRTC) and the host launchers include, so their layouts cannot
// drift apart. Plain C types only (pointers, int, float, long long, and
// TensorMap's opaque bytes): no host or CUDA headers, no templates. Each
// kernel takes its struct by value as the only argument; activation
// pointers are `void*` because the element type is a template parameter of
// the instance (bf16 on the GPU, f32 for the residual stream where the
// instance's params say so: the `*_type` params).
#pragma once

namespace kiln {
namespace kernels {

// embedding: out[t, :] = dequant(table[tokens[t], :]); an id outside
// [0, vocab) yields a zero row.
struct EmbeddingParams {
  const int* tokens;      // [num_tokens] i32
  const void* table;      // [vocab, hidden] in the instance's table type
  void* out;              // [num_tokens, hidden] out_type (bf16 unless named)
  int num_tokens;
  int vocab;
};

// dequantize: out = the packed block-quantized [n, k] weight w
// (quant_blocks.cuh) as bf16, for the cuBLASLt GEMM of batches the skinny
// kernels do not take.
struct DequantizeParams {
  const void* w;  // packed planes of the instance's weight type
  void* out;      // [n, k] bf16
};

// rms_norm / residual_rms_norm (one row per block).
struct RmsNormParams {
  const void* x;          // [rows, hidden] x_type
  const void* residual;   // [rows, hidden] residual_type (residual_rms_norm only)
  const void* weight;     // [hidden] in the instance's weight type
  void* sum_out;          // [rows, hidden] sum_type, x + residual (writes_sum only; may alias
                          // x or residual when of the same type)
  void* out;              // [rows, hidden] out_type (may alias x when of the same type)
  int rows;
};

// rope_kv_append: grid [N, ropeKvAppendHeadGroups(H, Hkv)], a block per
// token and group of kRopeHeadsPerBlock heads (q heads, then k, then v).
// At 8 elements a thread, 16 heads are one step for 128 threads, and a
// token's sines are computed 3 times (Llama-3-8B's 48 heads), not 12.
constexpr int kRopeHeadsPerBlock = 16;
inline constexpr int ropeKvAppendHeadGroups(int heads, int kv_heads) {
  return (heads + 2 * kv_heads + kRopeHeadsPerBlock - 1) / kRopeHeadsPerBlock;
}
struct RopeKvAppendParams {
  const void* qkv;        // [N, (H + 2 Hkv) D] bf16 when merged_qkv
  const void* q;          // [N, H D] bf16 otherwise
  const void* k;          // [N, Hkv D] bf16
  const void* v;          // [N, Hkv D] bf16
  const int* positions;   // [N] i32
  const int* slot_mapping;  // [N] i32, slot = block * page_size + offset; < 0 skips the token
  void* k_pool;           // [num_blocks, page_size, Hkv, D] kv type
  void* v_pool;           // [num_blocks, page_size, Hkv, D] kv type
  void* q_out;            // [N, H, D] bf16, roped q
  int num_tokens;
  long long num_slots;    // num_blocks * page_size; slots past it are skipped
  // int8/fp8 pools (kv_quant.cuh): each appended (token, kv head) row's
  // scale, [num_blocks, Hkv, page_size] f32; null for bf16/f32 pools.
  float* k_scales;
  float* v_scales;
  // qk_norm instances (Qwen3): the per-head RMSNorm weights of q and k,
  // [D] f32 each, applied before the rotation; null otherwise.
  const float* q_norm = nullptr;
  const float* k_norm = nullptr;
};

// A TMA tensor map (CUtensorMap: 128 opaque bytes, aligned as cuda.h does) the
// host encodes (runtime/cuda/tensor_map.h) and a kernel reads in place from
// its __grid_constant__ parameter.
struct alignas(128) TensorMap {
  unsigned long long opaque[16];
};

// gemm_swiglu_wgmma: out = silu(x · gateᵀ) · (x · upᵀ), the SwiGLU of a
// merged gate/up projection in its GEMM's epilogue. Grid: persistent, at
// most one block per SM (gemm_swiglu::grid_blocks).
struct GemmSwiGluParams {
  TensorMap x_map;        // x [rows, hidden] bf16, box [128 rows, 64 columns], 128-byte swizzle
  TensorMap w_map;        // [2 F, hidden] bf16, gate rows then up rows, box [128 rows, 64 columns], swizzled
  void* out;              // [rows, F] bf16
  int rows;
};

// paged_attention and its split-KV form (grid [N, Hkv, splits]).
struct PagedAttentionParams {
  const void* q;            // [N, H, D] bf16
  const void* k_pool;       // [num_blocks, page_size, Hkv, D] kv type
  const void* v_pool;       // [num_blocks, page_size, Hkv, D] kv type
  const int* block_tables;  // [B, max_blocks_per_seq] i32
  const int* query_start;   // [B + 1] i32
  const int* kv_lens;       // [B] i32, context length including this step's tokens
  const unsigned char* tree_mask;  // [N, tree_stride] u8 (tree_mask instances only), see paged_attention.cuh
  void* out;                // [N, H, D] bf16 (unsplit instances)
  float* partial_out;       // [N, H, splits, D] f32 (split instances)
  float* partial_lse;       // [N, H, splits] f32 (split instances)
  int num_tokens;
  int num_seqs;
  int max_blocks_per_seq;
  int tree_stride;
  int num_splits;           // == gridDim.z for split instances
  // decode_attention: null, or [N, Hkv] counters, zero between launches:
  // the last split block of each (token, kv head) then merges the partials
  // into out itself (split_kv.cuh) and no attention_combine is launched.
  unsigned* split_arrivals;
  // int8/fp8 pools (kv_quant.cuh): the scale of each (slot, kv head) row,
  // [num_blocks, Hkv, page_size] f32; null for bf16/f32 pools.
  const float* k_scales = nullptr;
  const float* v_scales = nullptr;
};

// attention_combine: merges split-KV partials (grid [N, H]).
struct AttentionCombineParams {
  const float* partial_out;  // [N, H, splits, D] f32
  const float* partial_lse;  // [N, H, splits] f32
  void* out;                 // [N, H, D] bf16
  int num_tokens;
  int num_splits;
};

// kv_append (kv_append.cuh): keys and values into the paged pools, unrotated.
struct KvAppendParams {
  const void* k;            // [N, Hkv D] x type
  const void* v;            // [N, Hkv D] x type
  const int* slot_mapping;  // [N] i32; < 0 or >= num_slots skips the token
  void* k_pool;             // [num_blocks, page_size, Hkv, D] kv type
  void* v_pool;
  int num_tokens;
  long long num_slots;  // num_blocks * page_size
};

// silu_mul, add, mul, silu, relu_squared: row-wise elementwise over `rows` rows.
struct ElementwiseParams {
  const void* a;   // silu_mul: gate_up [rows, 2F] or gate [rows, F]; add/mul/silu/relu_squared: [rows, width] a_type
  const void* b;   // silu_mul: up [rows, F] (unmerged); add/mul: [rows, width] b_type
  void* out;       // [rows, F or width] bf16 (add: out_type)
  int rows;
};

// moe_router (moe.cuh): each token's router logits x · Wrᵀ, softmax, top-k.
struct MoeRouteParams {
  const void* x;     // [rows, hidden] X
  const void* w;     // [experts, hidden] W (the router)
  void* weights;     // [rows, top_k] Out: the kept probabilities (renormalized if kNormalize)
  int* ids;          // [rows, top_k] i32 expert ids, largest probability first
  int rows;
};

// moe_gate_up, moe_down, moe_combine (moe.cuh): the routed SwiGLU experts.
// A (token, k) pair is a slot s = token · top_k + k.
struct MoeExpertsParams {
  const void* x;        // [rows, hidden] X
  const void* weights;  // [rows, top_k] Out (moe_router's)
  const int* ids;       // [rows, top_k] i32
  const void* gate;     // [experts, ffn, hidden] W
  const void* up;       // [experts, ffn, hidden] W
  const void* down;     // [experts, hidden, ffn] W
  float* act;           // [rows · top_k, ffn] f32 scratch: silu(gate x) · up x of each slot
  float* partial;       // [rows · top_k, hidden] f32 scratch: weight · down act of each slot
  void* out;            // [rows, hidden] Out
  int rows;
};
// moe_gate_up and moe_down run a grid [ceil(columns / kMoeColumnsPerBlock),
// min(experts, rows · top_k), ceil(rows / kMoeRowsPerPass)]: column tiles,
// the chosen experts in id order (blocks past the count of distinct chosen
// experts exit), and groups of the rows routed to one expert (an expert
// holds at most `rows` slots, each token choosing it once).
constexpr int kMoeColumnsPerBlock = 16;
constexpr int kMoeRowsPerPass = 32;
// Both at least 1, so an empty batch still launches a valid grid.
inline constexpr int moeExpertGroups(int experts, int rows, int top_k) {
  return rows * top_k < 1 ? 1 : experts < rows * top_k ? experts : rows * top_k;
}
inline constexpr int moeRowGroups(int rows) { return rows < 1 ? 1 : (rows + kMoeRowsPerPass - 1) / kMoeRowsPerPass; }

// gather_last_tokens: out[b] = h[query_start[b + 1] - 1].
struct GatherLastTokensParams {
  const void* h;            // [N, hidden] type
  const int* query_start;   // [B + 1] i32
  void* out;                // [B, hidden] type
  int num_seqs;
};

// gemv_stream (gemv_stream.cuh): the columns of a weight row one stage
// holds, and the dynamic shared memory of a block of `rows_per_block` rows
// and `stages` stages: the ring, the stages' full and empty barriers, two
// tiles' partials of the 8 consumer warps, and the folded norm's 8 warp sums
// (GemvStreamLayout lays them out in this order).
constexpr int kGemvStreamChunk = 2048;
inline constexpr int gemvStreamSmemBytes(int rows_per_block, int stages) {
  return stages * rows_per_block * kGemvStreamChunk * 2 + 2 * 8 * stages + 2 * rows_per_block * 8 * 4 + 8 * 4;
}

// gemm (skinny, decode-shaped): y = x · Wᵀ (+ bias), grid [n / rows_per_block, 1, ceil(rows / max_rows)].
struct GemvParams {
  const void* x;      // [rows, k] bf16
  const void* w;      // [n, k] weight type
  const void* bias;   // [n] weight type, or null
  void* y;            // [rows, n] bf16
  int rows;
  // gemv_stream with a residual_rms_norm folded in front (kNormFold, one
  // row): x is not read; the kernel takes the norm's inputs and computes
  // x = bf16(norm_x + norm_residual normalized, times norm_weight) itself,
  // and block 0 writes the sum (norm_x + norm_residual) to norm_sum.
  const void* norm_x = nullptr;         // [hidden] Config::NormX (the residual stream)
  const void* norm_residual = nullptr;  // [hidden] Config::NormResidual (the branch output)
  const void* norm_weight = nullptr;    // [hidden] Config::NormWeight
  void* norm_sum = nullptr;             // [hidden] Config::NormSum (kNormWritesSum)
};

// gemm with the rope_kv_append epilogue (qkv projection of a merged-QKV
// model, decode-shaped): gemv.y is the roped q [rows, H, D] bf16, and the
// roped k and the v of each row go to the pools at slot_mapping[row] as
// rope_kv_append would put them (same grid as gemm with SwiGLU: row pairs).
struct GemvRopeParams {
  GemvParams gemv;
  const int* positions;     // [rows] i32
  const int* slot_mapping;  // [rows] i32, slot < 0 or >= num_slots: no KV write
  void* k_pool;             // [num_blocks, page_size, Hkv, D] kv type
  void* v_pool;
  long long num_slots;
};

// argmax (greedy decoding): grid [rows, chunks]; the partials hold
// rows * chunks entries and `arrivals` rows counters, zero before the first
// launch (each launch leaves them zero).
inline constexpr int argmaxChunks(long long vocab) {
  const long long chunks = (vocab + 8191) / 8192;
  return chunks < 1 ? 1 : chunks > 64 ? 64 : int(chunks);
}

struct ArgmaxParams {
  const void* logits;     // [rows, vocab] logits type
  float* partial_value;   // [rows, chunks] scratch
  int* partial_id;        // [rows, chunks] scratch
  unsigned* arrivals;     // [rows]
  int* out_tokens;        // [rows]
  int rows;
};

// sample: one token per row of logits (grid [rows]).
struct SampleParams {
  const void* logits;                 // [rows, vocab] logits type
  const float* temperature;           // [rows]; <= 0 means greedy (argmax, lowest id on ties)
  const int* top_k;                   // [rows]; <= 0 or >= vocab disables
  const float* top_p;                 // [rows]; >= 1 disables
  const unsigned long long* seed;     // [rows] Philox key
  const unsigned long long* counter;  // [rows] Philox counter (the request's step)
  int* out_tokens;                    // [rows]
  float* out_uniform;                 // [rows] the uniform drawn (for tests and replay), or null
  int rows;
};

}  // namespace kernels
}  // namespace kiln
