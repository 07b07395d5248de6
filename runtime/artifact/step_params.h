// A plan step's params as one typed struct per step kind, parsed and checked
// in one place (parseStepParams) for every reader: the manifest loader, and
// through it both executors, codegen/cuda, kiln-kernels and kiln bench; and
// the compiler's ArtifactWriter, which writes every step through this
// schema (stepParamsMap) so a plan it writes is one the runtime reads.
//
// Element type params (`x_type`, `out_type`, ...) name an activation's type
// only where it differs from the plan's activation_type; empty means absent
// (docs/design/artifact.md, "Kernel kinds").
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "runtime/support/error.h"

namespace kiln {

enum class StepKind {
  kEmbedding,
  kRmsNorm,
  kResidualRmsNorm,
  kGemm,
  kRopeKvAppend,
  kPagedAttention,
  kSiluMul,
  kAdd,
  kMul,
  kSilu,
  kSplit,
  kGatherLastTokens,
  // Mixture of experts: routing (softmax, top-k) and the routed SwiGLU experts.
  kMoeRouter,
  kMoeFfn,
  // Speculative verify (xfmr-expand-spec-verify): host-side index work and
  // the acceptance walk, run by the executors beside the kernels.
  kTreePositions,
  kTreeMask,
  kAccept,
  // State-space (Mamba) layers: the conv and the scans read and write each
  // sequence's slot of the layer's state pools (docs/design/state-space.md).
  kSsmConv1d,
  kSelectiveScan,
  kSsdScan,
  kSsmGatedNorm,
  // Hybrid stacks (Nemotron-H): attention without positional encoding
  // appends its keys and values as they are; the MLP's squared ReLU.
  kKvAppend,
  kReluSquared,
  // Tensor and pipeline parallelism (docs/design/parallelism.md): no
  // backend runs them yet; the executors refuse a plan of world_size > 1.
  kAllReduce,
  kSend,
  kRecv,
};

// "embedding", "gemm", ... (the manifest spelling).
std::string_view stepKindName(StepKind kind);
std::optional<StepKind> parseStepKind(std::string_view name);
// "embedding, rms_norm, ..." for error messages.
std::string supportedStepKinds();

struct EmbeddingParams {
  int64_t hidden = 0;
  std::string table_type;  // the table's element type, GGUF blocks included
  double scale = 1.0;      // rows are multiplied by it (gemma3: sqrt(hidden))
  std::string out_type;
};

struct RmsNormParams {
  int64_t hidden = 0;
  double epsilon = 0;
  std::string weight_type;  // empty: f32
  std::string x_type, out_type;
};

// rmsnorm(x + r)·w, and x + r itself when writes_sum.
struct ResidualRmsNormParams {
  int64_t hidden = 0;
  double epsilon = 0;
  bool writes_sum = false;
  std::string weight_type;  // empty: f32
  std::string x_type, residual_type, sum_type, out_type;
};

// y [rows, n] = x [rows, k] · W [n, k]ᵀ (+ bias [n]).
struct GemmParams {
  int64_t n = 0, k = 0;
  std::string weight_type;
  bool bias = false;
  bool scales = false;  // kiln's own quantized schemes pass their scales
  int64_t group = 0;    // ... and their weight columns per scale (k: one a row); 0 for other weights
  std::string role;     // "logits" for the LM head, else empty
};

// The heads of an attention layer and its KV pool's layout; the plan checks
// them against kv_cache (Manifest::parse).
struct AttentionHeads {
  int64_t heads = 0, kv_heads = 0, head_dim = 0, page_size = 0;
  std::string kv_type;
};

struct RopeKvAppendParams {
  AttentionHeads attn;
  bool merged_qkv = false;
  double rope_theta = 0;
  std::string rope_style;    // "half" | "interleaved"
  std::string rope_scaling;  // "none" | "linear" | "llama3"
  double rope_factor = 0, rope_low_freq_factor = 0, rope_high_freq_factor = 0;
  int64_t rope_original_max_position = 0;
  // Qwen3: q and k are RMS-normalized per head (weights [head_dim], args
  // after the pools) before the rotation.
  bool qk_norm = false;
  double qk_norm_epsilon = 0;
  std::string x_type, out_type;
};

struct PagedAttentionParams {
  AttentionHeads attn;
  double scale = 0;
  bool tree_mask = false;
  // W > 0: the query at position p sees keys (p - W, p] only; 0: all of 0..p.
  int64_t sliding_window = 0;
  std::string q_type, out_type;
};

// act(gate) · up; act is SiLU, or with activation "gelu_tanh" PyTorch's
// tanh-approximated GELU (gemma3's GeGLU).
struct SiluMulParams {
  int64_t ffn = 0;
  bool merged_gate_up = false;
  std::string activation;  // empty: silu | "gelu_tanh"
  std::string x_type, out_type;
};

// add, mul, silu.
struct ElementwiseParams {
  int64_t width = 0;
  std::string a_type, b_type, out_type;
};

struct SplitParams {
  int64_t axis = 0;
  std::vector<int64_t> sizes;
};

struct GatherLastTokensParams {
  int64_t hidden = 0;
  std::string type;
};

// moe_router: (h [rows, hidden], Wrouter [experts, hidden]) or, when hidden
// is 0, (router logits [rows, experts]) -> weights [rows, top_k] and expert
// ids [rows, top_k] i32: each row's softmax over the experts (in f32), its
// top_k largest, largest first, divided by their sum when `normalize`.
struct MoeRouterParams {
  int64_t experts = 0, top_k = 0;
  bool normalize = false;
  int64_t hidden = 0;       // > 0: the router GEMM runs inside the step
  std::string weight_type;  // Wrouter's element type when hidden > 0
};

// moe_ffn: (x [rows, hidden], weights, expert ids [rows, top_k], gate, up
// [experts, ffn, hidden], down [experts, hidden, ffn]) -> y [rows, hidden]
// = Σ_k weights[t, k] · down[e] (silu(gate[e] x[t]) ⊙ up[e] x[t]), e = ids[t, k].
struct MoeFfnParams {
  int64_t hidden = 0, ffn = 0, experts = 0, top_k = 0;
  std::string weight_type;
};

// tree_positions: positions [N] i32 = base_positions[b] + depth(node), from
// parents [N] (local node indices, -1 for each tree's root), base_positions
// [B] and query_start [B+1]. tree_mask: [N, nodes] i8, row i marks node i
// and its ancestors among its tree's nodes. Neither takes params; the
// mask's width is its value's.
struct TreePositionsParams {};
struct TreeMaskParams {};

// accept: logits [N, vocab], tokens, parents, query_start (, draft_probs)
// -> accepted [B, depth + 1] i32 (local node indices of the accepted path
// from the root, -1 padded), count [B] i32 (accepted draft tokens).
struct AcceptParams {
  std::string mode;  // "greedy" | "rejection"
};

// ssm_conv1d: (x [N, channels], conv state pool [slots, width - 1,
// channels], weight [channels, 1, width], query_start, state_slots
// (, bias [channels])) -> y [N, channels] = act(causal depthwise conv over
// each sequence's carried inputs and rows); the pool then holds each
// sequence's last width - 1 inputs. act is SiLU when `silu`.
struct SsmConv1dParams {
  int64_t channels = 0, width = 0;
  bool silu = false;
  bool bias = false;
};

// selective_scan (Mamba): (x, dt [N, channels], a_log [channels, state],
// b, c [N, state], d [channels], ssm state pool [slots, channels, state]
// f32, query_start, state_slots) -> y [N, channels].
struct SelectiveScanParams {
  int64_t channels = 0, state = 0;
};

// ssd_scan (Mamba-2): (x [N, heads · head_dim], dt [N, heads], dt_bias,
// a_log [heads], b, c [N, groups · state], d [heads], ssm state pool
// [slots, heads, head_dim, state] f32, query_start, state_slots) -> y
// [N, heads · head_dim]; δ = clamp(softplus(dt + dt_bias), dt_min, dt_max),
// prefill in chunks of chunk_size. dt_max absent: no upper limit.
struct SsdScanParams {
  int64_t heads = 0, head_dim = 0, groups = 0, state = 0, chunk_size = 0;
  double dt_min = 0;
  double dt_max = std::numeric_limits<double>::infinity();
};

// ssm_gated_norm: (x, gate [N, features], weight [features]) -> weight · u /
// rms(u) over each group_size run of u = x · silu(gate).
struct SsmGatedNormParams {
  int64_t features = 0, group_size = 0;
  double epsilon = 0;
};

// kv_append: (k, v [N, kv_heads · head_dim], slot_mapping, k_pool, v_pool),
// no result: each token's keys and values into its slot, unrotated (an
// attention layer without positional encoding). The pools are kv_cache's.
struct KvAppendParams {
  int64_t kv_heads = 0, head_dim = 0, page_size = 0;
  std::string kv_type;
};

// all_reduce: x [N, hidden] -> the elementwise sum of every tensor-parallel
// rank's x (group_size ranks).
struct AllReduceParams {
  int64_t hidden = 0, group_size = 0;
  std::string type;
};

// send: x [N, hidden] to pipeline stage `peer`, no result; recv: ()
// -> [N, hidden] from stage `peer`.
struct HandoverParams {
  int64_t hidden = 0, peer = 0;
  std::string type;
};

using StepParams = std::variant<EmbeddingParams, RmsNormParams, ResidualRmsNormParams, GemmParams,
                                RopeKvAppendParams, PagedAttentionParams, SiluMulParams,
                                ElementwiseParams, SplitParams, GatherLastTokensParams,
                                MoeRouterParams, MoeFfnParams, TreePositionsParams, TreeMaskParams, AcceptParams,
                                SsmConv1dParams, SelectiveScanParams, SsdScanParams, SsmGatedNormParams,
                                KvAppendParams, AllReduceParams, HandoverParams>;

// A param as the manifest and the IR carry it: integers, numbers, booleans,
// strings and integer lists (split sizes).
using ParamValue = std::variant<int64_t, double, bool, std::string, std::vector<int64_t>>;
using ParamMap = std::map<std::string, ParamValue, std::less<>>;

// The kind's params from `values`: every required param present with its
// type (an integer is taken for a number), none the kind does not take,
// and every value in range (positive sizes, heads a multiple of kv_heads,
// known rope styles and element types, ...). Errors name the param:
//   "manifest.json: entries.forward.steps[3].params.epsilon: expected a number, got a string"
// `path` is the params' location ("manifest.json: entries.forward.steps[3].params").
Result<StepParams> parseStepParams(StepKind kind, const ParamMap& values, const std::string& path);

// The params as the manifest writes them: required ones always, optional
// ones when set (an empty type, a false flag that defaults to false).
ParamMap stepParamsMap(const StepParams& params);

// The attention heads of a rope_kv_append or paged_attention step's params,
// else null.
const AttentionHeads* attentionHeads(const StepParams& params);

}  // namespace kiln
