#include "codegen/cuda/instance_source.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include "codegen/kernels/decode_attention.cuh"  // decode::smem_bytes (host-visible part)
#include "codegen/kernels/flash_attention.cuh"  // flash::smem_bytes (host-visible part)
#include "codegen/kernels/flash_attention_wgmma.cuh"  // flash_wgmma::smem_bytes (host-visible part)
#include "codegen/kernels/gemm_swiglu_wgmma.cuh"     // gemm_swiglu::smem_bytes (host-visible part)
#include "codegen/kernels/kernel_params.cuh"  // argmaxChunks, the gemv_stream layout, the moe grid
#include "codegen/kernels/moe_grouped_mma.cuh"  // moe_mma::smem_bytes (host-visible part)
#include "runtime/artifact/manifest.h"
#include "runtime/artifact/step_params_json.h"

namespace kiln::cuda_codegen {
namespace {

using nlohmann::json;

// Typed access to one step's params with errors that name kind and param.
class Params {
 public:
  Params(std::string_view kind, const json& params) : kind_(kind), params_(params) {}

  Result<int64_t> integer(const char* name) const {
    const json* v = find(name);
    if (!v) return missing(name);
    if (!v->is_number_integer() && !v->is_boolean())
      return makeError("{}: param '{}' is {}, expected an integer", kind_, name, v->dump());
    return v->is_boolean() ? int64_t(v->get<bool>()) : v->get<int64_t>();
  }
  Result<int64_t> positive(const char* name, int64_t multiple_of = 1) const {
    auto v = integer(name);
    if (!v) return v;
    if (*v <= 0 || *v % multiple_of != 0 || *v > (int64_t(1) << 30))
      return makeError("{}: param '{}' is {}, expected a positive multiple of {}", kind_, name, *v,
                       multiple_of);
    return v;
  }
  Result<double> number(const char* name) const {
    const json* v = find(name);
    if (!v) return missing(name);
    if (!v->is_number()) return makeError("{}: param '{}' is {}, expected a number", kind_, name, v->dump());
    const double d = v->get<double>();
    if (!std::isfinite(d) || std::fabs(d) > 3.0e38)
      return makeError("{}: param '{}' is {}, expected a finite f32 value", kind_, name, d);
    return d;
  }
  Result<bool> boolean(const char* name) const {
    const json* v = find(name);
    if (!v) return missing(name);
    if (v->is_boolean()) return v->get<bool>();
    if (v->is_number_integer() && (v->get<int64_t>() == 0 || v->get<int64_t>() == 1))
      return v->get<int64_t>() == 1;
    return makeError("{}: param '{}' is {}, expected a boolean", kind_, name, v->dump());
  }
  Result<std::string> text(const char* name) const {
    const json* v = find(name);
    if (!v) return missing(name);
    if (!v->is_string()) return makeError("{}: param '{}' is {}, expected a string", kind_, name, v->dump());
    return v->get<std::string>();
  }
  Result<std::string> textOr(const char* name, const char* fallback) const {
    return find(name) ? text(name) : Result<std::string>(std::string(fallback));
  }
  Result<int64_t> integerOr(const char* name, int64_t fallback) const {
    return find(name) ? integer(name) : Result<int64_t>(fallback);
  }
  bool has(const char* name) const { return find(name) != nullptr; }
  const std::string& kind() const { return kind_; }
  Error bad(const char* name, const std::string& value, const char* expected) const {
    return makeError("{}: param '{}' is '{}', expected {}", kind_, name, value, expected);
  }

 private:
  const json* find(const char* name) const {
    if (!params_.is_object()) return nullptr;
    auto it = params_.find(name);
    return it == params_.end() ? nullptr : &*it;
  }
  Error missing(const char* name) const {
    if (!params_.is_object())
      return makeError("{}: params are {}, expected an object", kind_, params_.dump());
    return makeError("{}: param '{}' is missing", kind_, name);
  }
  std::string kind_;
  const json& params_;
};

#define KILN_TRY(var, expr)            \
  auto var##_result = (expr);          \
  if (!var##_result) return var##_result.error(); \
  auto var = var##_result.take()

// A C++ float literal that round-trips the f32 value.
std::string floatLiteral(double value) {
  std::string s = fmt::format("{:.9g}", static_cast<float>(value));
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s + "f";
}

const char* boolLiteral(bool b) { return b ? "true" : "false"; }

// C++ element type of an activation-side storage type.
Result<std::string> elementType(const Params& p, const char* name, const std::string& type,
                                bool allow_quant) {
  if (type == "f32") return std::string("float");
  if (type == "bf16") return std::string("kiln::kernels::bf16");
  if (type == "f16") return std::string("kiln::kernels::f16");
  if (allow_quant) {
    if (type == "q8_0") return std::string("kiln::kernels::TableQ8_0");
    if (type == "q4_0") return std::string("kiln::kernels::TableQ4_0");
    if (type == "q4_1") return std::string("kiln::kernels::TableQ4_1");
  }
  return p.bad(name, type, allow_quant ? "one of f32, bf16, f16, q8_0, q4_0, q4_1"
                                       : "one of f32, bf16, f16");
}

// C++ type of an activation operand or result named by a `*_type` param;
// absent, it is bf16 (the activation type of CUDA artifacts).
Result<std::string> activationType(const Params& p, const char* name) {
  auto type = p.textOr(name, "bf16");
  if (!type) return type.error();
  if (*type != "bf16" && *type != "f32") return p.bad(name, *type, "bf16 or f32");
  return elementType(p, name, *type, false);
}

int roundUp32(int64_t n) { return int((n + 31) / 32 * 32); }

// How the GPU tiles hold each block-quantized GEMM weight type
// (quant_blocks.cuh, packed_blocks.h): the kernels' packed type, bits a
// quant, the columns a scale covers (the type's sub-block) and the
// elements of a block, which a row must be whole of.
struct TileFormat {
  std::string_view weight_type;
  const char* packed;
  int bits;
  int64_t sub_group, block;
};
constexpr TileFormat kTileFormats[] = {
    {"q4_0", "kiln::kernels::PackedQ4_0", 4, 32, 32},
    {"q4_1", "kiln::kernels::PackedQ4_1", 4, 32, 32},
    {"q8_0", "kiln::kernels::PackedQ8_0", 8, 32, 32},
    {"q4_k", "kiln::kernels::PackedQ4_1", 4, 32, 256},  // d·q + m, 4-bit
    {"q5_k", "kiln::kernels::PackedQ5_K", 8, 32, 256},
    {"q6_k", "kiln::kernels::PackedQ8_0", 8, 16, 256},  // (q - 32) stored
};

// The tile format of `type`, or null for a plain element type.
const TileFormat* tileFormat(std::string_view type) {
  for (const TileFormat& f : kTileFormats)
    if (f.weight_type == type) return &f;
  return nullptr;
}

struct Body {
  std::string header;      // .cuh file
  std::string config;      // members of struct Config
  std::string function;    // kiln::kernels::<template>
  LaunchShape launch;
  // The template calls wait_for_previous_kernel itself (after reads that do
  // not depend on earlier kernels); otherwise the entry waits first thing.
  bool waits_itself = false;
  std::string arch = "";  // Instance::arch
  // __launch_bounds__' minimum blocks per SM (0: none given); 1 caps the
  // registers at 65536 / threads, which setmaxnreg needs.
  int min_blocks = 0;
  // The params are a __grid_constant__ parameter: the kernel takes the
  // address of a TMA tensor map in it, which must stay in parameter space.
  bool grid_constant = false;
};

Result<Body> embedding(const Params& p) {
  KILN_TRY(hidden, p.positive("hidden"));
  KILN_TRY(table, p.text("table_type"));
  KILN_TRY(type, elementType(p, "table_type", table, true));
  KILN_TRY(out, activationType(p, "out_type"));
  if (table[0] == 'q' && hidden % 32 != 0)
    return makeError("embedding: param 'hidden' is {}, expected a multiple of 32 for {} tables", hidden, table);
  Body b{"embedding.cuh", "", "embedding", {128, "[N]", "EmbeddingParams"}};
  b.config = fmt::format("  using Table = {};\n  using Out = {};\n  static constexpr int kHidden = {};\n"
                         "  static constexpr int kThreads = 128;\n",
                         type, out, hidden);
  if (p.has("scale")) {  // gemma3's sqrt(hidden)
    KILN_TRY(scale, p.number("scale"));
    if (!(scale > 0)) return makeError("embedding: param 'scale' is {}, expected > 0", scale);
    b.config += fmt::format("  static constexpr float kScale = {};\n", floatLiteral(scale));
  }
  return b;
}

Result<Body> rmsNorm(const Params& p, bool residual) {
  KILN_TRY(hidden, p.positive("hidden", 8));
  KILN_TRY(epsilon, p.number("epsilon"));
  if (!(epsilon > 0)) return makeError("{}: param 'epsilon' is {}, expected > 0", residual ? "residual_rms_norm" : "rms_norm", epsilon);
  KILN_TRY(weight_name, p.textOr("weight_type", "f32"));
  KILN_TRY(weight, elementType(p, "weight_type", weight_name, false));
  bool writes_sum = false;
  KILN_TRY(x, activationType(p, "x_type"));
  KILN_TRY(out, activationType(p, "out_type"));
  std::string residual_type = x, sum = x;
  if (residual) {
    KILN_TRY(ws, p.boolean("writes_sum"));
    writes_sum = ws;
    KILN_TRY(r, activationType(p, "residual_type"));
    KILN_TRY(s, activationType(p, "sum_type"));
    residual_type = r;
    sum = s;
  }
  const int threads = std::min(1024, roundUp32(hidden / 8));
  Body b{"rms_norm.cuh", "", "rms_norm", {threads, "[rows]", "RmsNormParams"}};
  b.waits_itself = true;
  b.config = fmt::format(
      "  using X = {};\n  using Residual = {};\n  using Sum = {};\n  using Out = {};\n"
      "  using Weight = {};\n  static constexpr int kHidden = {};\n  static constexpr int kThreads = {};\n"
      "  static constexpr float kEpsilon = {};\n  static constexpr bool kResidual = {};\n"
      "  static constexpr bool kWritesSum = {};\n",
      x, residual_type, sum, out, weight, hidden, threads, floatLiteral(epsilon), boolLiteral(residual),
      boolLiteral(writes_sum));
  return b;
}

// How the skinny GEMM tiles a weight of n rows of k. The tables are
// kiln_gemv_sweep's choice (test/gpu/gemv_sweep.cc): the fastest of 32
// tilings at one row of x for the decode shapes of Llama-3-8B and
// Llama-3.2-1B, timed over copies of W that together exceed L2 several
// times, so W comes from HBM as in a forward pass (docs/performance.md,
// "Skinny GEMM tilings", has the rates). Other shapes take the rule the table mostly follows: long rows
// split K over warps so a block's warps finish together, short ones keep 4
// loads in flight per lane.
struct GemvTiling {
  int split = 1, rows_per_warp = 1, unroll = 4;
};
struct MeasuredTiling {
  int64_t n, k;
  GemvTiling tiling;
};
// The rule the tables mostly follow, for shapes they lack.
GemvTiling ruleTiling(int64_t k) {
  const int split = int(std::clamp<int64_t>(k / 2048, 1, 8));
  const int split_pow2 = split >= 8 ? 8 : split >= 4 ? 4 : split >= 2 ? 2 : 1;
  return {split_pow2, 1, 4};
}
// `max_rows` 1: the single-row instances' table. Holding one row's
// accumulators and x, a thread needs fewer registers (5 blocks per SM
// instead of 4), and the fastest tilings split K over all 8 warps.
GemvTiling gemvTiling(int64_t n, int64_t k, int64_t max_rows) {
  static constexpr MeasuredTiling kSingleRow[] = {
      {6144, 4096, {8, 1, 4}},     {4096, 4096, {8, 1, 4}},  {28672, 4096, {8, 1, 4}},
      {4096, 14336, {8, 1, 8}},    {128256, 4096, {8, 1, 8}}, {3072, 2048, {2, 1, 2}},
      {2048, 2048, {2, 1, 2}},     {16384, 2048, {4, 1, 8}}, {2048, 8192, {2, 1, 4}},
      {128256, 2048, {4, 1, 8}},
  };
  static constexpr MeasuredTiling kMeasured[] = {
      {6144, 4096, {4, 1, 4}},
      {4096, 4096, {4, 1, 4}},
      {28672, 4096, {4, 1, 4}},
      {4096, 14336, {8, 1, 8}},
      {128256, 4096, {4, 1, 4}},
      {3072, 2048, {1, 1, 4}},
      {2048, 2048, {2, 1, 4}},
      {16384, 2048, {2, 1, 4}},
      {2048, 8192, {8, 1, 4}},
      {128256, 2048, {2, 1, 4}},
  };
  if (max_rows == 1) {
    for (const MeasuredTiling& m : kSingleRow)
      if (m.n == n && m.k == k) return m.tiling;
    return ruleTiling(k);
  }
  for (const MeasuredTiling& m : kMeasured)
    if (m.n == n && m.k == k) return m.tiling;
  return ruleTiling(k);
}

// A KV pool's element type: bf16 or f32 values, or the int8 / fp8 e4m3
// codes whose rows carry scales (kv_quant.cuh).
Result<std::string> kvPoolType(const Params& p, const char* kind, const std::string& kv_name) {
  if (kv_name == "int8") return std::string("kiln::kernels::KvInt8");
  if (kv_name == "fp8e4m3") return std::string("kiln::kernels::KvE4M3");
  if (kv_name != "bf16" && kv_name != "f32")
    return makeError("{}: kv_type '{}' has no CUDA kernel (bf16, f32, int8 or fp8e4m3 pools)", kind, kv_name);
  return elementType(p, "kv_type", kv_name, false);
}

bool scaledKv(const std::string& kv_name) { return kv_name == "int8" || kv_name == "fp8e4m3"; }

// rope_kv_append's params as Config members, for its own kernel and for the
// gemm that takes it as its epilogue (gemv.cuh's kRope).
struct RopeStep {
  int64_t heads = 0, kv_heads = 0, head_dim = 0;
  bool merged = false;
  std::string config;
  bool scaled_kv = false;  // int8/fp8 pools
  bool qk_norm = false;    // Qwen3's per-head q/k RMSNorm (the standalone kernel only)
};

Result<RopeStep> ropeStep(const Params& p) {
  KILN_TRY(heads, p.positive("heads"));
  KILN_TRY(kv_heads, p.positive("kv_heads"));
  KILN_TRY(head_dim, p.positive("head_dim", 8));
  KILN_TRY(page_size, p.positive("page_size"));
  KILN_TRY(merged, p.boolean("merged_qkv"));
  KILN_TRY(kv_name, p.text("kv_type"));
  KILN_TRY(kv, kvPoolType(p, "rope_kv_append", kv_name));
  KILN_TRY(theta, p.number("rope_theta"));
  KILN_TRY(style, p.text("rope_style"));
  if (style != "half" && style != "interleaved") return p.bad("rope_style", style, "'half' or 'interleaved'");
  KILN_TRY(scaling, p.text("rope_scaling"));
  int scaling_kind = 0;
  if (scaling == "linear") scaling_kind = 1;
  else if (scaling == "llama3") scaling_kind = 2;
  else if (scaling != "none") return p.bad("rope_scaling", scaling, "'none', 'linear' or 'llama3'");
  KILN_TRY(factor, p.number("rope_factor"));
  KILN_TRY(low, p.number("rope_low_freq_factor"));
  KILN_TRY(high, p.number("rope_high_freq_factor"));
  KILN_TRY(original, p.integer("rope_original_max_position"));
  if (!(theta > 0)) return makeError("rope_kv_append: param 'rope_theta' is {}, expected > 0", theta);
  if (scaling_kind != 0 && !(factor > 0))
    return makeError("rope_kv_append: param 'rope_factor' is {}, expected > 0", factor);
  if (scaling_kind == 2 && (!(low > 0) || !(high > low) || original <= 0))
    return makeError("rope_kv_append: llama3 scaling low_freq_factor {} high_freq_factor {} "
                     "original_max_position {}: expected 0 < low < high and a positive position",
                     low, high, original);
  bool qk_norm = false;
  double qk_norm_epsilon = 0;
  if (p.has("qk_norm")) {
    KILN_TRY(norm, p.boolean("qk_norm"));
    qk_norm = norm;
  }
  if (qk_norm) {
    KILN_TRY(eps, p.number("qk_norm_epsilon"));
    if (!(eps > 0)) return makeError("rope_kv_append: param 'qk_norm_epsilon' is {}, expected > 0", eps);
    qk_norm_epsilon = eps;
  }
  RopeStep r{heads, kv_heads, head_dim, merged, "", scaledKv(kv_name), qk_norm};
  r.config = fmt::format(
      "  using Kv = {};\n  static constexpr int kHeads = {};\n  static constexpr int kKvHeads = {};\n"
      "  static constexpr int kHeadDim = {};\n  static constexpr int kPageSize = {};\n"
      "  static constexpr bool kMergedQkv = {};\n"
      "  static constexpr bool kInterleaved = {};\n  static constexpr float kTheta = {};\n"
      "  static constexpr int kScaling = {};  // 0 none, 1 linear, 2 llama3\n"
      "  static constexpr float kFactor = {};\n  static constexpr float kLowFreqFactor = {};\n"
      "  static constexpr float kHighFreqFactor = {};\n  static constexpr int kOriginalMaxPosition = {};\n",
      kv, heads, kv_heads, head_dim, page_size, boolLiteral(merged), boolLiteral(style == "interleaved"),
      floatLiteral(theta), scaling_kind, floatLiteral(factor), floatLiteral(low), floatLiteral(high), original);
  if (qk_norm)
    r.config += fmt::format("  static constexpr bool kQkNorm = true;  // per-head RMSNorm of q and k first\n"
                            "  static constexpr float kQkNormEpsilon = {};\n",
                            floatLiteral(qk_norm_epsilon));
  return r;
}

// gemv_stream.cuh's instance for one row of x (its chunk and shared memory:
// kernel_params.cuh).
using kernels::kGemvStreamChunk;
constexpr int64_t kGemvStreamMaxWeightBytes = int64_t(256) << 20;
// 4 rows a tile, 8 stages (128 KiB a block): the fastest of the ring shapes
// measured in a Llama-3-8B layer's chain (docs/performance.md).
constexpr int kGemvStreamRows = 4, kGemvStreamStages = 8;

}  // namespace

bool streamsSingleRowGemm(int64_t n, int64_t k) {
  return k % kGemvStreamChunk == 0 && n * k * 2 <= kGemvStreamMaxWeightBytes;
}

int configConstant(const std::string& source, std::string_view name, int fallback) {
  const std::string key = std::string(name) + " = ";
  const size_t at = source.find(key);
  return at == std::string::npos ? fallback : std::atoi(source.c_str() + at + key.size());
}

int64_t gemvStreamSharedBytes() { return kernels::gemvStreamSmemBytes(kGemvStreamRows, kGemvStreamStages); }

namespace {

// `extra_config`: rope_kv_append's Config members and the norm fold's.
Body gemvStream(int64_t n, int64_t k, bool bias, bool silu_mul, bool rope, const std::string& extra_config) {
  const bool paired = silu_mul || rope;
  const int64_t tiles = paired ? (n / 2 + kGemvStreamRows / 2 - 1) / (kGemvStreamRows / 2)
                               : (n + kGemvStreamRows - 1) / kGemvStreamRows;
  const int64_t smem = gemvStreamSharedBytes();
  Body b{"gemv_stream.cuh", "", "gemv_stream",
         {288, fmt::format("[min(tiles={}, SMs), 1, 1], dynamic smem {} bytes", tiles, smem),
          rope ? "GemvRopeParams" : "GemvParams"}};
  b.waits_itself = true;
  b.config = fmt::format(
      "  using Weight = kiln::kernels::bf16;\n  static constexpr int kN = {};\n  static constexpr int kK = {};\n"
      "  static constexpr int kMaxRows = 1;\n  static constexpr int kRowsPerBlock = {};\n"
      "  static constexpr int kStages = {};\n  static constexpr int kTiles = {};\n"
      "  static constexpr int kSmemBytes = {};\n"
      "  static constexpr bool kBias = {};\n  static constexpr bool kSiluMul = {};\n"
      "  static constexpr bool kRope = {};\n{}",
      n, k, kGemvStreamRows, kGemvStreamStages, tiles, smem, boolLiteral(bias), boolLiteral(silu_mul),
      boolLiteral(rope), extra_config);
  return b;
}

// The quant group of a packed weight's params: its scales' columns, the
// type's sub-block unless the params name a larger one; gemm_quant.cuh
// takes the sub-block or a multiple of 64 dividing k. An error too for a k
// that is not whole blocks.
Result<int64_t> quantGroup(const Params& p, int64_t k, const TileFormat& format) {
  if (k % format.block != 0)
    return makeError("{}: param 'k' is {} with {} weights, expected a multiple of {} (whole blocks a row)", p.kind(), k,
                     format.weight_type, format.block);
  int64_t group = format.sub_group;
  if (p.has("group")) {
    KILN_TRY(named, p.positive("group"));
    group = named;
  }
  if (group != format.sub_group && (group % 64 != 0 || k % group != 0))
    return p.bad("group", std::to_string(group), "the type's sub-block or a multiple of 64 dividing k");
  return group;
}

// A gemm of packed block-quantized weights: gemm_quant.cuh on the tensor
// cores, up to gemv_max_rows (8 or 16) rows of x a block. The split of K
// over a block's warps gives the grid about 16 warps an SM of an H200
// (132 SMs) at least; each warp keeps up to kUnroll tiles in flight.
Result<Body> gemmQuant(const Params& p, int64_t n, int64_t k, const TileFormat& format) {
  const std::string_view weight_name = format.weight_type;
  for (const char* epilogue : {"silu_mul", "rope_kv_append", "gemv_stream", "norm_epsilon"})
    if (p.has(epilogue))
      if (auto set = p.boolean(epilogue); !set.ok() || *set)
        return makeError("gemm: {} weights take the plain epilogue only (param '{}' is set)", weight_name, epilogue);
  KILN_TRY(bias, p.boolean("bias"));
  KILN_TRY(group, quantGroup(p, k, format));
  int64_t max_rows = 8;
  if (p.has("gemv_max_rows")) {
    KILN_TRY(rows, p.positive("gemv_max_rows"));
    if (rows != 8 && rows != 16) return p.bad("gemv_max_rows", std::to_string(rows), "8 or 16 with packed weights");
    max_rows = rows;
  }
  const int bits = format.bits;
  const int64_t row_tiles = (n + 15) / 16, k_tiles = (k + 63) / 64;
  constexpr int64_t kWantedWarps = 132 * 16;
  int split = 1;
  while (split < 8 && row_tiles * split < kWantedWarps && split * 2 <= k_tiles) split *= 2;
  const int64_t tiles_per_warp = (k_tiles + split - 1) / split;
  int unroll = int(std::min<int64_t>(tiles_per_warp, bits == 8 || max_rows == 16 ? 2 : 4));
  if (p.has("quant_split")) {
    KILN_TRY(wanted_split, p.positive("quant_split"));
    KILN_TRY(wanted_unroll, p.positive("quant_unroll"));
    if (8 % wanted_split != 0 || wanted_unroll > 8)
      return makeError("gemm: quant tiling split {} unroll {}: expected split in {{1, 2, 4, 8}}, unroll <= 8",
                       wanted_split, wanted_unroll);
    split = int(wanted_split);
    unroll = int(wanted_unroll);
  }
  const int rows_per_block = 8 / split * 16;
  Body b{"gemm_quant.cuh", "", "gemm_quant",
         {32 * 8, fmt::format("[ceil(n={} / {}), 1, ceil(rows / {})]", n, rows_per_block, max_rows), "GemvParams"}};
  b.waits_itself = true;
  b.config = fmt::format(
      "  using Weight = {};\n  static constexpr int kN = {};\n  static constexpr int kK = {};\n"
      "  static constexpr int kGroup = {};\n  static constexpr int kMaxRows = {};\n"
      "  static constexpr int kRowsPerBlock = {};\n  static constexpr int kSplitK = {};\n"
      "  static constexpr int kUnroll = {};\n  static constexpr bool kBias = {};\n"
      "  static constexpr bool kSiluMul = false;\n  static constexpr bool kRope = false;\n",
      format.packed, n, k, group, max_rows, rows_per_block, split, unroll, boolLiteral(bias));
  return b;
}

Result<Body> gemm(const Params& p) {
  KILN_TRY(n, p.positive("n"));
  KILN_TRY(k, p.positive("k", 8));
  KILN_TRY(weight_name, p.text("weight_type"));
  if (const TileFormat* format = tileFormat(weight_name)) return gemmQuant(p, n, k, *format);
  if (weight_name != "f32" && weight_name != "bf16" && weight_name != "f16")
    return makeError("gemm: weight_type '{}' has no CUDA kernel yet (f32, bf16, f16, q4_0, q4_1, q8_0, q4_k, q5_k, q6_k weights)",
                     weight_name);
  KILN_TRY(weight, elementType(p, "weight_type", weight_name, false));
  KILN_TRY(bias, p.boolean("bias"));
  if (auto scales = p.boolean("scales"); scales.ok() && *scales)
    return makeError("gemm: weights with scales (quantized by xfmr-insert-quantization) have no CUDA kernel yet");
  // The tiling (split of K over warps, rows per warp, loads in flight): the
  // measured choice for this shape (gemvTiling), unless the params pin one
  // (the bandwidth sweep in test/gpu compiles every candidate that way).
  // Rows of x one block takes (grid.z walks further groups): 8, or 1 for
  // the single-row instance batch-1 decode runs.
  int64_t max_rows = 8;
  if (p.has("gemv_max_rows")) {
    KILN_TRY(rows, p.positive("gemv_max_rows"));
    if (rows != 1 && rows != 8) return makeError("gemm: param 'gemv_max_rows' is {}, expected 1 or 8", rows);
    max_rows = rows;
  }
  GemvTiling t = gemvTiling(n, k, max_rows);
  if (p.has("gemv_split")) {
    KILN_TRY(split, p.positive("gemv_split"));
    KILN_TRY(rows_per_warp, p.positive("gemv_rows_per_warp"));
    KILN_TRY(unroll, p.positive("gemv_unroll"));
    if (8 % split != 0 || rows_per_warp > 8 || unroll > 16)
      return makeError("gemm: gemv tiling split {} rows_per_warp {} unroll {}: expected split in "
                       "{{1, 2, 4, 8}}, rows_per_warp <= 8, unroll <= 16",
                       split, rows_per_warp, unroll);
    t = {int(split), int(rows_per_warp), int(unroll)};
  }
  // silu_mul: the gate/up projection with SwiGLU in its epilogue (y has n /
  // 2 columns); a block pairs gate and up rows, so it needs an even count.
  bool silu_mul = false;
  if (p.has("silu_mul")) {
    KILN_TRY(fused, p.boolean("silu_mul"));
    silu_mul = fused;
  }
  if (silu_mul && n % 2 != 0)
    return makeError("gemm: param 'n' is {} with silu_mul, expected an even count (gate and up rows)", n);
  // rope_kv_append: the merged qkv projection with rope and the KV append in
  // its epilogue; the params then also hold rope_kv_append's.
  bool rope = false;
  std::string rope_config;
  if (p.has("rope_kv_append")) {
    KILN_TRY(fused, p.boolean("rope_kv_append"));
    rope = fused;
  }
  if (rope) {
    if (silu_mul) return makeError("gemm: params 'silu_mul' and 'rope_kv_append' both set, expected one epilogue");
    KILN_TRY(step, ropeStep(p));
    if (step.qk_norm)
      return makeError("gemm: the rope_kv_append epilogue does not normalize q and k per head (qk_norm); "
                       "rope_kv_append's own kernel does");
    if (step.scaled_kv)
      return makeError("gemm: the rope_kv_append epilogue writes bf16 or f32 pools; int8/fp8 pools take "
                       "rope_kv_append's own kernel, which quantizes each row with its scale");
    if (!step.merged || n != (step.heads + 2 * step.kv_heads) * step.head_dim)
      return makeError("gemm: param 'n' is {} with rope_kv_append (merged_qkv {}), expected the merged qkv "
                       "projection's (heads {} + 2 x kv_heads {}) x head_dim {}",
                       n, step.merged, step.heads, step.kv_heads, step.head_dim);
    rope_config = step.config;
  }
  const bool paired = silu_mul || rope;  // a block holds row pairs (gate/up, or rope's columns)
  // gemv_stream: the single-row instance streams W through a bulk-copy ring
  // (gemv_stream.cuh, sm_90) where W is bf16, its rows whole stage chunks,
  // and not much larger than L2; the LM head's 1 GB stays on gemv.cuh,
  // which reads it at the HBM ceiling already.
  bool stream = false;
  if (p.has("gemv_stream")) {
    KILN_TRY(wanted, p.boolean("gemv_stream"));
    stream = wanted && max_rows == 1 && weight_name == "bf16" && streamsSingleRowGemm(n, k) && !p.has("gemv_split");
  }
  // norm_epsilon (and norm_*_type, norm_writes_sum): the residual_rms_norm
  // before the gemm folded into the streamed instance (skinny_fusion.h).
  std::string norm_config = "  static constexpr bool kNormFold = false;\n";
  if (p.has("norm_epsilon")) {
    KILN_TRY(epsilon, p.number("norm_epsilon"));
    if (!(epsilon > 0)) return makeError("gemm: param 'norm_epsilon' is {}, expected > 0", epsilon);
    if (!stream)
      return makeError("gemm: a folded residual_rms_norm (param 'norm_epsilon') needs the streamed single-row "
                       "instance: gemv_stream true, gemv_max_rows 1, bf16 weights, k a multiple of {} (k is {})",
                       kGemvStreamChunk, k);
    KILN_TRY(norm_x, activationType(p, "norm_x_type"));
    KILN_TRY(norm_residual, activationType(p, "norm_residual_type"));
    KILN_TRY(norm_sum, activationType(p, "norm_sum_type"));
    KILN_TRY(norm_weight_name, p.textOr("norm_weight_type", "f32"));
    KILN_TRY(norm_weight, elementType(p, "norm_weight_type", norm_weight_name, false));
    KILN_TRY(writes_sum, p.boolean("norm_writes_sum"));
    norm_config = fmt::format(
        "  static constexpr bool kNormFold = true;\n  using NormX = {};\n  using NormResidual = {};\n"
        "  using NormSum = {};\n  using NormWeight = {};\n  static constexpr float kNormEpsilon = {};\n"
        "  static constexpr bool kNormWritesSum = {};\n",
        norm_x, norm_residual, norm_sum, norm_weight, floatLiteral(epsilon), boolLiteral(writes_sum));
  }
  if (stream) return gemvStream(n, k, bias, silu_mul, rope, rope_config + norm_config);
  // A single-row pair of rows takes K split over 4 warps, not 8, which
  // would double the rows a warp holds (slower: docs/performance.md).
  if (paired && max_rows == 1 && !p.has("gemv_split") && t.split == 8) t = {4, 1, 4};
  if (paired && (8 / t.split * t.rows_per_warp) % 2 != 0) t.rows_per_warp *= 2;
  const int rows_per_block = 8 / t.split * t.rows_per_warp;
  const std::string grid = paired ? fmt::format("[ceil(n={} / 2 / {}), 1, ceil(rows / {})]", n, rows_per_block / 2, max_rows)
                                  : fmt::format("[ceil(n={} / {}), 1, ceil(rows / {})]", n, rows_per_block, max_rows);
  Body b{"gemv.cuh", "", "gemv", {32 * 8, grid, rope ? "GemvRopeParams" : "GemvParams"}};
  b.waits_itself = true;
  b.config = fmt::format(
      "  using Weight = {};\n  static constexpr int kN = {};\n  static constexpr int kK = {};\n"
      "  static constexpr int kMaxRows = {};\n  static constexpr int kRowsPerWarp = {};\n"
      "  static constexpr int kRowsPerBlock = {};\n"
      "  static constexpr int kSplitK = {};\n  static constexpr int kUnroll = {};\n"
      "  static constexpr bool kBias = {};\n  static constexpr bool kSiluMul = {};\n"
      "  static constexpr bool kRope = {};\n{}",
      weight, n, k, max_rows, t.rows_per_warp, rows_per_block, t.split, t.unroll, boolLiteral(bias), boolLiteral(silu_mul),
      boolLiteral(rope), rope_config);
  return b;
}

// The gemm that takes rope as its epilogue reads x itself: only the
// standalone kernel's Config names the qkv and q_out types.
Result<Body> ropeKvAppend(const Params& p) {
  KILN_TRY(rope, ropeStep(p));
  KILN_TRY(x, activationType(p, "x_type"));
  KILN_TRY(out, activationType(p, "out_type"));
  Body b{"rope_kv_append.cuh", "", "rope_kv_append",
         {128, "[N, ropeKvAppendHeadGroups(heads, kv_heads)]", "RopeKvAppendParams"}};
  b.config = rope.config + fmt::format("  using X = {};\n  using QOut = {};\n  static constexpr int kThreads = 128;\n",
                                       x, out);
  return b;
}

// The params of the paged-attention kinds: q [N, heads, head_dim] over K/V
// pools [num_blocks, page_size, kv_heads, head_dim] of kv_type.
struct AttentionStep {
  int64_t heads = 0, kv_heads = 0, head_dim = 0, page_size = 0;
  double scale = 0;
  std::string kv_type;
  bool tree_mask = false;
  int64_t window = 0;  // sliding_window: the query at p sees keys (p - window, p]; 0: all
};

// The Config line of a windowed instance (attention_window.cuh); none for
// full attention, whose instances stay as they were.
std::string windowConfig(int64_t window) {
  return window > 0 ? fmt::format("  static constexpr int kWindow = {};  // sliding window: keys (p - W, p]\n", window)
                    : std::string();
}

// Reads them, head_dim a multiple of `head_dim_multiple`, heads whole GQA groups.
Result<AttentionStep> attentionStep(const Params& p, const char* kind, int64_t head_dim_multiple) {
  KILN_TRY(heads, p.positive("heads"));
  KILN_TRY(kv_heads, p.positive("kv_heads"));
  KILN_TRY(head_dim, p.positive("head_dim", head_dim_multiple));
  KILN_TRY(page_size, p.positive("page_size"));
  KILN_TRY(scale, p.number("scale"));
  KILN_TRY(kv_type, p.text("kv_type"));
  KILN_TRY(tree_mask, p.boolean("tree_mask"));
  KILN_TRY(window, p.integerOr("sliding_window", 0));
  if (heads % kv_heads != 0)
    return makeError("{}: heads {} is not a multiple of kv_heads {}", kind, heads, kv_heads);
  if (window < 0 || window > (int64_t(1) << 30) || (window > 0 && tree_mask))
    return makeError("{}: param 'sliding_window' is {}{}, expected a positive number of keys (0: none)", kind, window,
                     tree_mask ? " with a tree mask" : "");
  return AttentionStep{heads, kv_heads, head_dim, page_size, scale, kv_type, tree_mask, window};
}

// flash_attention's and decode_attention's, with the limits both kinds'
// templates share: GQA groups of at most 16 heads, head_dim 64 or 128.
Result<AttentionStep> tiledAttentionStep(const Params& p, const char* kind) {
  KILN_TRY(step, attentionStep(p, kind, 1));
  if (step.heads / step.kv_heads > 16)
    return makeError("{}: GQA group {} (heads {} / kv_heads {}) is above 16", kind, step.heads / step.kv_heads,
                     step.heads, step.kv_heads);
  if (step.head_dim != 64 && step.head_dim != 128)
    return makeError("{}: param 'head_dim' is {}, expected 64 or 128", kind, step.head_dim);
  for (const char* name : {"q_type", "out_type"}) {
    KILN_TRY(type, p.textOr(name, "bf16"));
    if (type != "bf16")
      return makeError("{}: param '{}' is '{}'; the kernel takes bf16 q and out (paged_attention takes f32)", kind,
                       name, type);
  }
  return step;
}

Result<Body> pagedAttention(const Params& p, bool split) {
  const char* kind = split ? "paged_attention_split" : "paged_attention";
  KILN_TRY(step, attentionStep(p, kind, 8));
  const auto& [heads, kv_heads, head_dim, page_size, scale, kv_name, tree, window] = step;
  if (heads / kv_heads > 16)
    return makeError("{}: GQA group {} (heads {} / kv_heads {}) is above 16, the largest the template serves", kind, heads / kv_heads, heads, kv_heads);
  if (head_dim > 256) return makeError("{}: param 'head_dim' is {}, expected <= 256", kind, head_dim);
  KILN_TRY(kv, kvPoolType(p, kind, kv_name));
  KILN_TRY(q, activationType(p, "q_type"));
  KILN_TRY(out, activationType(p, "out_type"));
  Body b{"paged_attention.cuh", "", "paged_attention",
         {128, fmt::format("[N, kv_heads={}, {}]", kv_heads, split ? "splits" : "1"), "PagedAttentionParams"}};
  b.config = fmt::format(
      "  using Kv = {};\n  using Q = {};\n  using Out = {};\n"
      "  static constexpr int kHeads = {};\n  static constexpr int kKvHeads = {};\n"
      "  static constexpr int kHeadDim = {};\n  static constexpr int kPageSize = {};\n"
      "  static constexpr int kThreads = 128;\n  static constexpr float kScale = {};\n"
      "  static constexpr bool kTreeMask = {};\n  static constexpr bool kSplit = {};\n{}",
      kv, q, out, heads, kv_heads, head_dim, page_size, floatLiteral(scale), boolLiteral(tree), boolLiteral(split),
      windowConfig(window));
  return b;
}

// Tensor-core causal prefill over the paged pool (flash_attention.cuh).
// Optional 'warps' (4 or 8) and 'block_m' (query rows per block) are for
// tuning: 4 warps take 64 rows (or 128, two m16 tiles a warp, at head_dim 64
// only: at 128 they spill), 8 warps take 128.
Result<Body> flashAttention(const Params& p) {
  KILN_TRY(step, tiledAttentionStep(p, "flash_attention"));
  const auto& [heads, kv_heads, head_dim, page_size, scale, kv_name, tree, window] = step;
  KILN_TRY(warps, p.integerOr("warps", 4));
  KILN_TRY(block_m, p.integerOr("block_m", 16 * warps));
  if (kv_name != "bf16")
    return makeError("flash_attention: kv_type '{}' has no tensor-core kernel (bf16 pools only)", kv_name);
  if (tree)
    return makeError("flash_attention: tree_mask is true; the tensor-core kernel is causal only (use paged_attention)");
  if (!(scale > 0)) return makeError("flash_attention: param 'scale' is {}, expected > 0", scale);
  if (warps != 4 && warps != 8) return makeError("flash_attention: param 'warps' is {}, expected 4 or 8", warps);
  if (block_m != 16 * warps && !(block_m == 32 * warps && head_dim == 64))
    return makeError("flash_attention: param 'block_m' is {} with {} warps, expected {} (or {} with head_dim 64)",
                     block_m, warps, 16 * warps, 32 * warps);
  const int smem = kernels::flash::smem_bytes(int(head_dim), int(block_m));
  Body b{"flash_attention.cuh", "", "flash_attention",
         {int(32 * warps),
          fmt::format("[heads={}, ceil(max_q_len / {}), B], dynamic smem {} bytes", heads, block_m, smem),
          "PagedAttentionParams"}};
  b.config = fmt::format(
      "  static constexpr int kHeads = {};\n  static constexpr int kKvHeads = {};\n"
      "  static constexpr int kHeadDim = {};\n  static constexpr int kPageSize = {};\n"
      "  static constexpr float kScale = {};\n  static constexpr int kWarps = {};\n"
      "  static constexpr int kBlockM = {};\n"
      "  static constexpr int kSmemBytes = {};  // dynamic shared memory per block\n{}",
      heads, kv_heads, head_dim, page_size, floatLiteral(scale), warps, block_m, smem, windowConfig(window));
  return b;
}

// flash_attention on Hopper's warpgroup tensor cores
// (flash_attention_wgmma.cuh): same params and semantics, 128 query rows and
// 384 threads (a producer and two consumer warpgroups) a block, compiled
// for sm_90a.
Result<Body> flashAttentionWgmma(const Params& p) {
  KILN_TRY(step, tiledAttentionStep(p, "flash_attention_wgmma"));
  const auto& [heads, kv_heads, head_dim, page_size, scale, kv_name, tree, window] = step;
  if (kv_name != "bf16")
    return makeError("flash_attention_wgmma: kv_type '{}' has no tensor-core kernel (bf16 pools only)", kv_name);
  if (tree)
    return makeError(
        "flash_attention_wgmma: tree_mask is true; the tensor-core kernel is causal only (use paged_attention)");
  if (!(scale > 0)) return makeError("flash_attention_wgmma: param 'scale' is {}, expected > 0", scale);
  namespace fw = kernels::flash_wgmma;
  const int smem = fw::smem_bytes(int(head_dim));
  Body b{"flash_attention_wgmma.cuh", "", "flash_attention_wgmma",
         {fw::kThreads,
          fmt::format("[heads={}, ceil(max_q_len / {}), B], dynamic smem {} bytes", heads, fw::kBlockM, smem),
          "PagedAttentionParams"}};
  b.arch = "sm_90a";
  b.min_blocks = 1;
  b.config = fmt::format(
      "  static constexpr int kHeads = {};\n  static constexpr int kKvHeads = {};\n"
      "  static constexpr int kHeadDim = {};\n  static constexpr int kPageSize = {};\n"
      "  static constexpr float kScale = {};\n  static constexpr int kBlockM = {};\n"
      "  static constexpr int kSmemBytes = {};  // dynamic shared memory per block\n{}",
      heads, kv_heads, head_dim, page_size, floatLiteral(scale), fw::kBlockM, smem, windowConfig(window));
  return b;
}

// Bandwidth-bound split-KV decode attention (decode_attention.cuh): same
// params as paged_attention (causal only), partials for attention_combine.
// Optional 'mma' picks the form: tensor cores (decode_attention_mma, the
// default where it serves: bf16 pools, pages a multiple of 16 keys) or CUDA
// cores (decode_attention). For tuning, 'stages' (cp.async ring depth) for
// both, and 'chunks' (16-byte chunks per lane and K/V row) and 'keys' (keys
// per stream and tile) for the CUDA-core form, whose threads have
// (stages - 1) * keys * chunks * 32 bytes in flight.
Result<Body> decodeAttention(const Params& p) {
  namespace dk = kernels::decode;
  KILN_TRY(step, tiledAttentionStep(p, "decode_attention"));
  const auto& [heads, kv_heads, head_dim, page_size, scale, kv_name, tree, window] = step;
  const int group = int(heads / kv_heads);
  KILN_TRY(kv, kvPoolType(p, "decode_attention", kv_name));
  const bool scaled = scaledKv(kv_name);
  if (tree)
    return makeError("decode_attention: tree_mask is true; the decode kernel is causal only (use paged_attention)");
  const bool mma_serves = kv_name == "bf16" && page_size % dk::kMmaKeys == 0;
  bool mma = mma_serves;
  if (p.has("mma")) {
    KILN_TRY(m, p.boolean("mma"));
    mma = m;
  }
  if (mma && !mma_serves)
    return makeError("decode_attention: mma needs bf16 pools and a page size that is a multiple of {}, not {} "
                     "and {}", dk::kMmaKeys, kv_name, page_size);
  if (mma) {
    if (p.has("chunks") || p.has("keys"))
      return makeError("decode_attention: params 'chunks' and 'keys' tune the CUDA-core form (mma false)");
    KILN_TRY(stages, p.integerOr("stages", dk::kMmaDefaultStages));
    if (stages < 2 || stages > 8) return makeError("decode_attention: param 'stages' is {}, expected 2..8", stages);
    const int smem = dk::mma_smem_bytes(int(head_dim), int(stages));
    if (smem > 227 * 1024)
      return makeError("decode_attention: stages {} need {} bytes of shared memory, above 227 KiB", stages, smem);
    Body b{"decode_attention.cuh", "", "decode_attention_mma",
           {dk::kThreads,
            fmt::format("[N, kv_heads={}, splits=num_splits], dynamic smem {} bytes (kSmemBytes), {} keys per tile",
                        kv_heads, smem, dk::kMmaTileKeys),
            "PagedAttentionParams"}};
    b.config = fmt::format(
        "  static constexpr int kHeads = {};\n  static constexpr int kKvHeads = {};\n"
        "  static constexpr int kHeadDim = {};\n  static constexpr int kPageSize = {};\n"
        "  static constexpr float kScale = {};\n  static constexpr int kStages = {};\n"
        "  static constexpr int kSmemBytes = {};  // dynamic shared memory per block\n"
        "  static constexpr int kTileKeys = {};  // split ranges are whole tiles\n{}",
        heads, kv_heads, head_dim, page_size, floatLiteral(scale), stages, smem, dk::kMmaTileKeys,
        windowConfig(window));
    b.waits_itself = true;  // copies of keys older than this step's start before the wait
    return b;
  }
  // int8/fp8 rows: one chunk a lane (a chunk is 16 codes, as many as two
  // bf16 chunks hold), the 4 keys a scale chunk serves, and 2 stages, so the
  // ring and its scale chunks stay within 48 KiB.
  KILN_TRY(chunks, p.integerOr("chunks", scaled ? 1 : dk::default_chunks(group)));
  KILN_TRY(keys, p.integerOr("keys", scaled ? dk::kScaledKeys : 4 / chunks));
  KILN_TRY(stages, p.integerOr("stages", scaled ? 2 : dk::kDefaultStages));
  if (scaled && keys != dk::kScaledKeys)
    return makeError("decode_attention: param 'keys' is {}; {} pools take {} (a scale chunk's keys)", keys, kv_name,
                     dk::kScaledKeys);
  // A lane's chunk of codes is 16 elements of q and of the output for each
  // of its heads: past 4 heads a thread that spills (paged_attention_split
  // serves such groups).
  if (scaled && dk::heads_per_thread(group) > 4)
    return makeError("decode_attention: GQA group {} over {} pools puts {} heads on a thread, above the 4 whose "
                     "16-code chunks fit in registers", group, kv_name, dk::heads_per_thread(group));
  if (chunks != 1 && chunks != 2)
    return makeError("decode_attention: param 'chunks' is {}, expected 1 or 2", chunks);
  if ((keys != 1 && keys != 2 && keys != 4) || page_size % keys != 0)
    return makeError("decode_attention: param 'keys' is {} with page_size {}, expected 1, 2 or 4 dividing the "
                     "page size", keys, page_size);
  if (stages < 2 || stages > 8) return makeError("decode_attention: param 'stages' is {}, expected 2..8", stages);
  const int kv_bytes = kv_name == "f32" ? 4 : scaled ? 1 : 2;
  if (dk::row_lanes(int(head_dim), kv_bytes, int(chunks)) > 32)
    return makeError("decode_attention: head_dim {} of {} needs chunks 2", head_dim, kv_name);
  const int smem = dk::smem_bytes(group, int(head_dim), int(stages), int(keys), int(chunks), scaled);
  if (smem > 48 * 1024)
    return makeError("decode_attention: stages {} x keys {} x chunks {} need {} bytes of shared memory, above "
                     "48 KiB", stages, keys, chunks, smem);
  const int tile = dk::tile_keys(group, int(head_dim), kv_bytes, int(chunks), int(keys));
  Body b{"decode_attention.cuh", "", "decode_attention",
         {dk::kThreads,
          fmt::format("[N, kv_heads={}, splits=num_splits], static smem {} bytes, {} keys per tile", kv_heads,
                      smem, tile),
          "PagedAttentionParams"}};
  b.config = fmt::format(
      "  using Kv = {};\n  static constexpr int kHeads = {};\n  static constexpr int kKvHeads = {};\n"
      "  static constexpr int kHeadDim = {};\n  static constexpr int kPageSize = {};\n"
      "  static constexpr float kScale = {};\n  static constexpr int kChunks = {};\n"
      "  static constexpr int kKeys = {};\n  static constexpr int kStages = {};\n"
      "  static constexpr int kTileKeys = {};  // split ranges are whole tiles\n{}",
      kv, heads, kv_heads, head_dim, page_size, floatLiteral(scale), chunks, keys, stages, tile, windowConfig(window));
  b.waits_itself = true;  // first thing (decode_attention.cuh)
  return b;
}

Result<Body> attentionCombine(const Params& p) {
  KILN_TRY(heads, p.positive("heads"));
  KILN_TRY(head_dim, p.positive("head_dim"));
  KILN_TRY(out, activationType(p, "out_type"));
  const int threads = std::min(256, roundUp32(head_dim));
  Body b{"paged_attention.cuh", "", "attention_combine",
         {threads, fmt::format("[N, heads={}]", heads), "AttentionCombineParams"}};
  b.config = fmt::format("  using Out = {};\n  static constexpr int kHeads = {};\n  static constexpr int kHeadDim = {};\n"
                         "  static constexpr int kThreads = {};\n", out, heads, head_dim, threads);
  return b;
}

Result<Body> siluMul(const Params& p) {
  KILN_TRY(ffn, p.positive("ffn", 8));
  KILN_TRY(merged, p.boolean("merged_gate_up"));
  KILN_TRY(x, activationType(p, "x_type"));
  KILN_TRY(out, activationType(p, "out_type"));
  KILN_TRY(activation, p.textOr("activation", "silu"));
  if (activation != "silu" && activation != "gelu_tanh") return p.bad("activation", activation, "silu or gelu_tanh");
  Body b{"elementwise.cuh", "", activation == "silu" ? "silu_mul" : "gelu_tanh_mul",
         {256, "[min(ceil(rows * ffn / 8 / 256), 65535)]", "ElementwiseParams"}};
  b.config = fmt::format("  using X = {};\n  using Out = {};\n  static constexpr int kFfn = {};\n"
                         "  static constexpr int kThreads = 256;\n  static constexpr bool kMerged = {};\n",
                         x, out, ffn, boolLiteral(merged));
  return b;
}

Result<Body> elementwise(const Params& p, const char* op) {
  KILN_TRY(width, p.positive("width", 8));
  KILN_TRY(a, activationType(p, "a_type"));
  KILN_TRY(b_type, activationType(p, "b_type"));
  KILN_TRY(out, activationType(p, "out_type"));
  Body b{"elementwise.cuh", "", "elementwise",
         {256, "[min(ceil(rows * width / 8 / 256), 65535)]", "ElementwiseParams"}};
  b.config = fmt::format("  using Op = kiln::kernels::{};\n  using A = {};\n  using B = {};\n  using Out = {};\n"
                         "  static constexpr int kWidth = {};\n  static constexpr int kThreads = 256;\n",
                         op, a, b_type, out, width);
  return b;
}

// kv_append (kv_append.cuh): a token a block, 128 threads over its Hkv · D
// keys and values.
Result<Body> kvAppend(const Params& p) {
  KILN_TRY(kv_heads, p.positive("kv_heads"));
  KILN_TRY(head_dim, p.positive("head_dim"));
  KILN_TRY(page_size, p.positive("page_size"));
  KILN_TRY(kv_name, p.text("kv_type"));
  KILN_TRY(x, activationType(p, "x_type"));
  if (kv_name != "bf16" && kv_name != "f32")
    return p.bad("kv_type", kv_name, "bf16 or f32 (kv_append writes float pools; int8/fp8 pools take rope_kv_append)");
  KILN_TRY(kv, kvPoolType(p, "kv_append", kv_name));
  (void)page_size;  // the slot mapping holds block · page_size + offset
  Body b{"kv_append.cuh", "", "kv_append", {128, "[N]", "KvAppendParams"}};
  b.config = fmt::format("  using X = {};\n  using Kv = {};\n  static constexpr int kRow = {};\n"
                         "  static constexpr int kThreads = 128;\n",
                         x, kv, kv_heads * head_dim);
  return b;
}

Result<Body> gatherLastTokens(const Params& p) {
  KILN_TRY(hidden, p.positive("hidden", 8));
  KILN_TRY(type, activationType(p, "type"));
  Body b{"elementwise.cuh", "", "gather_last_tokens", {128, "[B]", "GatherLastTokensParams"}};
  b.config = fmt::format("  using T = {};\n  static constexpr int kHidden = {};\n  static constexpr int kThreads = 128;\n",
                         type, hidden);
  return b;
}

// moe_router: one block of 4 warps a token (grid [N]).
Result<Body> moeRouter(const Params& p) {
  KILN_TRY(experts, p.positive("experts"));
  KILN_TRY(top_k, p.positive("top_k"));
  KILN_TRY(normalize, p.boolean("normalize"));
  KILN_TRY(hidden, p.positive("hidden"));
  KILN_TRY(weight_name, p.text("weight_type"));
  KILN_TRY(weight, elementType(p, "weight_type", weight_name, false));
  KILN_TRY(x, activationType(p, "x_type"));
  KILN_TRY(out, activationType(p, "out_type"));
  if (top_k > experts || experts > 1024)
    return makeError("moe_router: top_k {} of {} experts, expected top_k <= experts <= 1024", top_k, experts);
  Body b{"moe.cuh", "", "moe_router", {128, "[N]", "MoeRouteParams"}};
  b.waits_itself = true;
  b.config = fmt::format("  using X = {};\n  using W = {};\n  using Out = {};\n  static constexpr int kHidden = {};\n"
                         "  static constexpr int kExperts = {};\n  static constexpr int kTopK = {};\n"
                         "  static constexpr bool kNormalize = {};\n  static constexpr int kThreads = 128;\n",
                         x, weight, out, hidden, experts, top_k, boolLiteral(normalize));
  return b;
}

// moe_ffn's three kernels (the runtime's kinds moe_gate_up, moe_down,
// moe_combine, from the step's params): 8 warps, two columns each, up to
// kMoeRowsPerPass routed rows a pass over an expert's weights.
Result<Body> moeExperts(const Params& p, std::string_view part) {
  KILN_TRY(hidden, p.positive("hidden", 8));  // 8-element weight loads
  KILN_TRY(ffn, p.positive("ffn", 8));
  KILN_TRY(experts, p.positive("experts"));
  KILN_TRY(top_k, p.positive("top_k"));
  KILN_TRY(weight_name, p.text("weight_type"));
  KILN_TRY(weight, elementType(p, "weight_type", weight_name, false));
  KILN_TRY(x, activationType(p, "x_type"));
  KILN_TRY(out, activationType(p, "out_type"));
  if (top_k > experts || experts > 1024)
    return makeError("{}: top_k {} of {} experts, expected top_k <= experts <= 1024", part, top_k, experts);
  constexpr int kThreads = 256, kRowsPerPass = kiln::kernels::kMoeRowsPerPass;
  const auto expertGrid = [&](std::string_view columns, int64_t n) {
    return fmt::format("[ceil({}={} / {}), min(experts={}, N * top_k={}), ceil(N / {})]", columns, n,
                       kiln::kernels::kMoeColumnsPerBlock, experts, top_k, kRowsPerPass);
  };
  const std::string grid = part == "moe_gate_up" ? expertGrid("ffn", ffn)
                           : part == "moe_down"  ? expertGrid("hidden", hidden)
                                                 : std::string("[N]");
  Body b{"moe.cuh", "", std::string(part), {part == "moe_combine" ? 128 : kThreads, grid, "MoeExpertsParams"}};
  b.waits_itself = true;
  b.config = fmt::format("  using X = {};\n  using W = {};\n  using Out = {};\n  static constexpr int kHidden = {};\n"
                         "  static constexpr int kFfn = {};\n  static constexpr int kExperts = {};\n"
                         "  static constexpr int kTopK = {};\n  static constexpr int kRowsPerPass = {};\n"
                         "  static constexpr int kThreads = {};\n",
                         x, weight, out, hidden, ffn, experts, top_k, kRowsPerPass,
                         part == "moe_combine" ? 128 : kThreads);
  return b;
}

// The grouped tensor-core experts (moe_grouped_mma.cuh): moe_gate_up_mma
// and moe_down_mma, bf16 activations and weights, 8 warps, the tile width
// chosen at launch by the average slots an expert.
Result<Body> moeExpertsMma(const Params& p, std::string_view part) {
  namespace mm = kernels::moe_mma;
  KILN_TRY(hidden, p.positive("hidden", mm::kBlockK));
  KILN_TRY(ffn, p.positive("ffn", mm::kBlockK));
  KILN_TRY(experts, p.positive("experts"));
  KILN_TRY(top_k, p.positive("top_k"));
  KILN_TRY(weight_name, p.text("weight_type"));
  KILN_TRY(x_name, p.textOr("x_type", "bf16"));
  KILN_TRY(out, activationType(p, "out_type"));
  if (weight_name != "bf16") return p.bad("weight_type", weight_name, "bf16 (the tensor cores' operand type)");
  if (x_name != "bf16") return p.bad("x_type", x_name, "bf16 (the tensor cores' operand type)");
  if (top_k > experts || experts > 1024)
    return makeError("{}: top_k {} of {} experts, expected top_k <= experts <= 1024", part, top_k, experts);
  const int smem = mm::smem_bytes(int(experts));
  Body b{"moe_grouped_mma.cuh", "", std::string(part),
         {mm::kThreads,
          fmt::format("moe_mma::grid({}, N, top_k={}, experts={}, hidden={}, ffn={}), dynamic smem {} bytes",
                      part == "moe_gate_up_mma" ? "gate/up" : "down", top_k, experts, hidden, ffn, smem),
          "MoeExpertsParams"}};
  b.waits_itself = true;
  b.min_blocks = 2;  // two blocks an SM: 128 registers a thread, and half the shared memory each
  b.config = fmt::format("  using X = kiln::kernels::bf16;\n  using W = kiln::kernels::bf16;\n  using Out = {};\n"
                         "  static constexpr int kHidden = {};\n  static constexpr int kFfn = {};\n"
                         "  static constexpr int kExperts = {};\n  static constexpr int kTopK = {};\n"
                         "  static constexpr int kSmemBytes = {};  // dynamic shared memory per block\n",
                         out, hidden, ffn, experts, top_k, smem);
  return b;
}

// State-space (Mamba-2) kernels, ssm.cuh.
Result<Body> ssmConv1d(const Params& p) {
  KILN_TRY(channels, p.positive("channels"));
  KILN_TRY(width, p.positive("width"));
  KILN_TRY(act, p.boolean("silu"));
  KILN_TRY(weight_name, p.textOr("weight_type", "f32"));
  KILN_TRY(weight, elementType(p, "weight_type", weight_name, false));
  KILN_TRY(x, activationType(p, "x_type"));
  KILN_TRY(out, activationType(p, "out_type"));
  if (width < 2 || width > 8) return makeError("ssm_conv1d: width {}, expected 2 to 8", width);
  Body b{"ssm.cuh", "", "ssm_conv1d", {128, fmt::format("[ceil(channels={} / 128), B]", channels), "SsmConvParams"}};
  b.waits_itself = true;
  b.config = fmt::format("  using X = {};\n  using W = {};\n  using Out = {};\n  static constexpr int kChannels = {};\n"
                         "  static constexpr int kWidth = {};\n  static constexpr bool kSilu = {};\n"
                         "  static constexpr int kThreads = 128;\n",
                         x, weight, out, channels, width, boolLiteral(act));
  return b;
}

Result<Body> ssdScan(const Params& p) {
  KILN_TRY(heads, p.positive("heads"));
  KILN_TRY(head_dim, p.positive("head_dim"));
  KILN_TRY(groups, p.positive("groups"));
  KILN_TRY(state, p.positive("state"));
  KILN_TRY(param_name, p.textOr("param_type", "f32"));
  KILN_TRY(param, elementType(p, "param_type", param_name, false));
  KILN_TRY(x, activationType(p, "x_type"));
  KILN_TRY(out, activationType(p, "out_type"));
  if (heads % groups != 0) return makeError("ssd_scan: {} groups do not divide {} heads", groups, heads);
  // The longest chunk (a power of two, 8 to 64) whose δ, Λ, b, c, x and c·b fit 46 KiB of shared memory.
  int64_t chunk = 64;
  while (chunk > 8 && 4 * (2 * chunk + 2 * chunk * state + chunk * head_dim + chunk * chunk) > 46 * 1024) chunk /= 2;
  if (4 * (2 * chunk + 2 * chunk * state + chunk * head_dim + chunk * chunk) > 46 * 1024)
    return makeError("ssd_scan: state {} x head_dim {} leave no chunk of 8 rows in shared memory", state, head_dim);
  Body b{"ssm.cuh", "", "ssd_scan", {256, fmt::format("[heads={}, B]", heads), "SsdScanParams"}};
  b.waits_itself = true;
  b.config = fmt::format("  using X = {};\n  using P = {};\n  using Out = {};\n  static constexpr int kHeads = {};\n"
                         "  static constexpr int kHeadDim = {};\n  static constexpr int kGroups = {};\n"
                         "  static constexpr int kState = {};\n  static constexpr int kChunk = {};\n"
                         "  static constexpr int kThreads = 256;\n",
                         x, param, out, heads, head_dim, groups, state, chunk);
  return b;
}

// Mamba's selective scan: kState lanes a channel, 128 threads a block.
Result<Body> selectiveScan(const Params& p) {
  KILN_TRY(channels, p.positive("channels"));
  KILN_TRY(state, p.positive("state"));
  KILN_TRY(param_name, p.textOr("param_type", "f32"));
  KILN_TRY(param, elementType(p, "param_type", param_name, false));
  KILN_TRY(x, activationType(p, "x_type"));
  KILN_TRY(out, activationType(p, "out_type"));
  if (state > 32 || (state & (state - 1)) != 0 || (channels * state) % 32 != 0)
    return makeError("selective_scan: state {} over {} channels, expected a power of two up to 32 filling whole warps",
                     state, channels);
  Body b{"ssm.cuh", "", "selective_scan",
         {128, fmt::format("[ceil(channels={} * state={} / 128), B]", channels, state), "SelectiveScanParams"}};
  b.waits_itself = true;
  b.config = fmt::format("  using X = {};\n  using P = {};\n  using Out = {};\n  static constexpr int kChannels = {};\n"
                         "  static constexpr int kState = {};\n  static constexpr int kThreads = 128;\n",
                         x, param, out, channels, state);
  return b;
}

Result<Body> ssmGatedNorm(const Params& p) {
  KILN_TRY(features, p.positive("features"));
  KILN_TRY(group, p.positive("group_size"));
  KILN_TRY(weight_name, p.textOr("weight_type", "f32"));
  KILN_TRY(weight, elementType(p, "weight_type", weight_name, false));
  KILN_TRY(x, activationType(p, "x_type"));
  KILN_TRY(out, activationType(p, "out_type"));
  if (features % group != 0) return makeError("ssm_gated_norm: group {} does not divide {}", group, features);
  Body b{"ssm.cuh", "", "ssm_gated_norm", {256, "[rows]", "SsmGatedNormParams"}};
  b.waits_itself = true;
  b.config = fmt::format("  using X = {};\n  using W = {};\n  using Out = {};\n  static constexpr int kFeatures = {};\n"
                         "  static constexpr int kGroup = {};\n  static constexpr int kThreads = 256;\n",
                         x, weight, out, features, group);
  return b;
}

Result<Body> sample(const Params& p) {
  KILN_TRY(vocab, p.positive("vocab"));
  KILN_TRY(logits_name, p.textOr("logits_type", "bf16"));
  KILN_TRY(logits, elementType(p, "logits_type", logits_name, false));
  Body b{"sampling.cuh", "", "sample", {1024, "[rows]", "SampleParams"}};
  b.config = fmt::format("  using Logit = {};\n  static constexpr int kVocab = {};\n"
                         "  static constexpr int kThreads = 1024;\n", logits, vocab);
  return b;
}

// Greedy argmax: 256 threads, chunks of about 8192 logits per block (four
// 16-byte loads per thread), so a 128K vocabulary spreads over 16 SMs.
Result<Body> argmax(const Params& p) {
  KILN_TRY(vocab, p.positive("vocab"));
  KILN_TRY(logits_name, p.textOr("logits_type", "bf16"));
  KILN_TRY(logits, elementType(p, "logits_type", logits_name, false));
  const int64_t chunks = kiln::kernels::argmaxChunks(vocab);
  Body b{"argmax.cuh", "", "argmax", {256, fmt::format("[rows, {}]", chunks), "ArgmaxParams"}};
  b.config = fmt::format("  using Logit = {};\n  static constexpr int kVocab = {};\n"
                         "  static constexpr int kThreads = 256;\n  static constexpr int kChunks = {};\n",
                         logits, vocab, chunks);
  return b;
}

// The gate/up projection with SwiGLU in its epilogue on Hopper's warpgroup
// tensor cores (gemm_swiglu_wgmma.cuh): x [rows, hidden] times the merged
// [2 ffn, hidden] weight into [rows, ffn], bf16, compiled for sm_90a.
Result<Body> gemmSwiGlu(const Params& p) {
  namespace gs = kernels::gemm_swiglu;
  KILN_TRY(hidden, p.positive("hidden", gs::kBlockK));
  KILN_TRY(ffn, p.positive("ffn", gs::kBlockN));
  Body b{"gemm_swiglu_wgmma.cuh", "", "gemm_swiglu_wgmma",
         {gs::kThreads,
          fmt::format("[min(ceil(rows / {}) * {}, SMs)] (persistent), dynamic smem {} bytes", gs::kBlockM,
                      ffn / gs::kBlockN, gs::smem_bytes()),
          "GemmSwiGluParams"}};
  b.arch = "sm_90a";
  b.min_blocks = 1;
  b.grid_constant = true;
  b.config = fmt::format(
      "  static constexpr int kHidden = {};\n  static constexpr int kIntermediate = {};\n"
      "  static constexpr int kSmemBytes = {};  // dynamic shared memory per block\n",
      hidden, ffn, gs::smem_bytes());
  return b;
}

// A packed block-quantized weight expanded to bf16 for cuBLASLt (dequantize.cuh).
Result<Body> dequantize(const Params& p) {
  KILN_TRY(n, p.positive("n"));
  KILN_TRY(k, p.positive("k", 32));
  KILN_TRY(weight_name, p.text("weight_type"));
  const TileFormat* format = tileFormat(weight_name);
  if (!format) return p.bad("weight_type", weight_name, "one of q4_0, q4_1, q8_0, q4_k, q5_k, q6_k");
  KILN_TRY(group, quantGroup(p, k, *format));
  constexpr int kThreads = 256;
  Body b{"dequantize.cuh", "", "dequantize",
         {kThreads, fmt::format("[ceil(ceil(n={} / 16) * ceil(k={} / 64) * 128 / {})]", n, k, kThreads),
          "DequantizeParams"}};
  b.waits_itself = true;
  b.config = fmt::format("  using Weight = {};\n  static constexpr int kN = {};\n  static constexpr int kK = {};\n"
                         "  static constexpr int kGroup = {};\n  static constexpr int kThreads = {};\n",
                         format->packed, n, k, group, kThreads);
  return b;
}

// The 2:4 sparse linears (sparse24_gemv.cuh, sparse24_mma.cuh,
// sparse24_wgmma.cuh): W's kept values as values_type (bf16, q8_0, q4_0;
// the GEMMs take bf16), y as out_type.
Result<Body> sparse24(const Params& p, bool gemm, bool wgmma) {
  KILN_TRY(n, p.positive("n"));
  KILN_TRY(k, p.positive("k", 64));
  KILN_TRY(values_name, p.textOr("values_type", "bf16"));
  KILN_TRY(bias, p.boolean("bias"));
  KILN_TRY(out, activationType(p, "out_type"));
  const char* values = values_name == "bf16"   ? "kiln::kernels::Sparse24Bf16"
                       : values_name == "q8_0" ? "kiln::kernels::Sparse24Q8_0"
                       : values_name == "q4_0" ? "kiln::kernels::Sparse24Q4_0"
                                               : nullptr;
  if (!values || (gemm && values_name != "bf16"))
    return p.bad("values_type", values_name, gemm ? "bf16" : "one of bf16, q8_0, q4_0");
  if (gemm && wgmma) {
    // Hopper's sparse warpgroup multiply (sparse24_wgmma.cuh): 128-column stages.
    if (k % 128 != 0) return makeError("sparse24_gemm_wgmma: param 'k' is {}, expected a multiple of 128", k);
    KILN_TRY(stages, p.integerOr("sparse_stages", 3));
    if (stages < 2 || stages > 4)
      return makeError("sparse24_gemm_wgmma: param 'sparse_stages' is {}, expected 2..4", stages);
    const int64_t smem = stages * (128 * 128 + 128 * 256 + 8 * 256) + 1024;  // + room to align to 1024
    Body b{"sparse24_wgmma.cuh", "", "sparse24_gemm_wgmma",
           {256, fmt::format("[ceil(n={} / 128), ceil(rows / 128)]", n), "Sparse24Params"}};
    b.arch = "sm_90a";
    b.config = fmt::format(
        "  using Y = {};\n  static constexpr int kN = {};\n  static constexpr int kK = {};\n"
        "  static constexpr int kStages = {};\n  static constexpr int kSmemBytes = {};\n"
        "  static constexpr int kBlockN = 128;\n  static constexpr int kBlockM = 128;\n"
        "  static constexpr bool kBias = {};\n",
        out, n, k, stages, smem, boolLiteral(bias));
    return b;
  }
  if (gemm) {
    constexpr int kWarpsN = 2, kWarpsM = 2;
    constexpr int kBlockN = 64 * kWarpsN, kBlockM = 64 * kWarpsM;
    // Stages of cp.async in flight (the bench's sweep pins others).
    KILN_TRY(stages, p.integerOr("sparse_stages", 3));
    if (stages < 2 || stages > 4) return makeError("sparse24_gemm: param 'sparse_stages' is {}, expected 2..4", stages);
    const int64_t smem = stages * (kBlockN * 64 + kBlockN / 16 * 128 + kBlockM * 128);
    Body b{"sparse24_mma.cuh", "", "sparse24_gemm",
           {32 * kWarpsN * kWarpsM, fmt::format("[ceil(n={} / {}), ceil(rows / {})]", n, kBlockN, kBlockM),
            "Sparse24Params"}};
    b.config = fmt::format(
        "  using Y = {};\n  static constexpr int kN = {};\n  static constexpr int kK = {};\n"
        "  static constexpr int kWarpsN = {};\n  static constexpr int kWarpsM = {};\n"
        "  static constexpr int kBlockN = {};\n  static constexpr int kBlockM = {};\n"
        "  static constexpr int kStages = {};\n  static constexpr int kSmemBytes = {};\n"
        "  static constexpr bool kBias = {};\n",
        out, n, k, kWarpsN, kWarpsM, kBlockN, kBlockM, stages, smem, boolLiteral(bias));
    return b;
  }
  KILN_TRY(max_rows, p.integerOr("max_rows", 8));
  if (max_rows < 1 || max_rows > 8) return makeError("sparse24_gemv: param 'max_rows' is {}, expected 1..8", max_rows);
  // A lane's loads in flight: 16-byte bf16 units, 34-byte q8_0 blocks
  // (9 words each), 18-byte q4_0 blocks; split k over warps until the grid
  // has about two blocks an SM, while each lane keeps two steps of work.
  const int64_t block_columns = values_name == "bf16" ? 16 : 64, units = k / block_columns;
  int rows_per_warp = 2, unroll = values_name == "q8_0" ? 2 : 4, split = 1;
  auto blocks = [&](int s) { return (n + 8 / s * rows_per_warp - 1) / (8 / s * rows_per_warp); };
  while (split < 8 && blocks(split) < 264 && units >= 32 * split * 2 * 2) split *= 2;
  if (p.has("sparse_split")) {
    KILN_TRY(s, p.positive("sparse_split"));
    KILN_TRY(r, p.positive("sparse_rows_per_warp"));
    KILN_TRY(u, p.positive("sparse_unroll"));
    if (8 % s != 0 || r > 8 || u > 8)
      return makeError("sparse24_gemv: tiling split {} rows_per_warp {} unroll {}: expected split in "
                       "{{1, 2, 4, 8}}, rows_per_warp <= 8, unroll <= 8", s, r, u);
    split = int(s);
    rows_per_warp = int(r);
    unroll = int(u);
  }
  const int rows_per_block = 8 / split * rows_per_warp;
  Body b{"sparse24_gemv.cuh", "", "sparse24_gemv",
         {256, fmt::format("[ceil(n={} / {}), 1, ceil(rows / {})]", n, rows_per_block, max_rows), "Sparse24Params"}};
  b.waits_itself = true;
  b.config = fmt::format(
      "  using Values = {};\n  using Y = {};\n  static constexpr int kN = {};\n  static constexpr int kK = {};\n"
      "  static constexpr int kMaxRows = {};\n  static constexpr int kRowsPerWarp = {};\n"
      "  static constexpr int kSplitK = {};\n  static constexpr int kUnroll = {};\n"
      "  static constexpr int kRowsPerBlock = {};\n  static constexpr bool kBias = {};\n",
      values, out, n, k, max_rows, rows_per_warp, split, unroll, rows_per_block, boolLiteral(bias));
  return b;
}

Result<Body> body(std::string_view kind, const Params& p) {
  if (kind == "embedding") return embedding(p);
  if (kind == "rms_norm") return rmsNorm(p, false);
  if (kind == "residual_rms_norm") return rmsNorm(p, true);
  if (kind == "gemm") return gemm(p);
  if (kind == "rope_kv_append") return ropeKvAppend(p);
  if (kind == "paged_attention") return pagedAttention(p, false);
  if (kind == "paged_attention_split") return pagedAttention(p, true);
  if (kind == "attention_combine") return attentionCombine(p);
  if (kind == "flash_attention") return flashAttention(p);
  if (kind == "flash_attention_wgmma") return flashAttentionWgmma(p);
  if (kind == "decode_attention") return decodeAttention(p);
  if (kind == "silu_mul") return siluMul(p);
  if (kind == "gemm_swiglu") return gemmSwiGlu(p);
  if (kind == "dequantize") return dequantize(p);
  if (kind == "add") return elementwise(p, "OpAdd");
  if (kind == "mul") return elementwise(p, "OpMul");
  if (kind == "silu") return elementwise(p, "OpSilu");
  if (kind == "relu_squared") return elementwise(p, "OpReluSquared");
  if (kind == "kv_append") return kvAppend(p);
  if (kind == "gather_last_tokens") return gatherLastTokens(p);
  if (kind == "moe_router") return moeRouter(p);
  if (kind == "moe_gate_up" || kind == "moe_down" || kind == "moe_combine") return moeExperts(p, kind);
  if (kind == "moe_gate_up_mma" || kind == "moe_down_mma") return moeExpertsMma(p, kind);
  if (kind == "ssm_conv1d") return ssmConv1d(p);
  if (kind == "ssd_scan") return ssdScan(p);
  if (kind == "ssm_gated_norm") return ssmGatedNorm(p);
  if (kind == "selective_scan") return selectiveScan(p);
  if (kind == "sample") return sample(p);
  if (kind == "argmax") return argmax(p);
  if (kind == "sparse24_gemv" || kind == "sparse24_gemm" || kind == "sparse24_gemm_wgmma")
    return sparse24(p, kind != "sparse24_gemv", kind == "sparse24_gemm_wgmma");
  std::string known;
  for (std::string_view k : cudaKernelKinds()) known += (known.empty() ? "" : ", ") + std::string(k);
  return makeError("kernel kind '{}' has no CUDA template; known kinds: {}", kind, known);
}

bool validIdentifier(std::string_view name) {
  if (name.empty() || name.size() > 1000 || std::isdigit(static_cast<unsigned char>(name[0]))) return false;
  for (char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  return true;
}

}  // namespace

const std::vector<std::string_view>& cudaKernelKinds() {
  static const std::vector<std::string_view> kinds = {
      "embedding", "rms_norm", "residual_rms_norm", "gemm", "rope_kv_append", "paged_attention",
      "paged_attention_split", "attention_combine", "flash_attention", "flash_attention_wgmma", "decode_attention",
      "silu_mul", "gemm_swiglu", "dequantize", "add",
      "mul", "silu", "relu_squared", "kv_append", "gather_last_tokens", "moe_router", "moe_gate_up", "moe_down", "moe_combine", "moe_gate_up_mma",
      "moe_down_mma", "ssm_conv1d", "ssd_scan",
      "ssm_gated_norm", "selective_scan", "sample",
      "argmax", "sparse24_gemv", "sparse24_gemm", "sparse24_gemm_wgmma"};
  return kinds;
}

std::string instanceName(std::string_view kind, const nlohmann::json& params) {
  std::string name(kind);
  if (params.is_object()) {
    for (auto it = params.begin(); it != params.end(); ++it) {
      name += "_" + it.key();
      const json& v = it.value();
      if (v.is_boolean()) name += v.get<bool>() ? "1" : "0";
      else if (v.is_string()) name += v.get<std::string>();
      else if (v.is_number_integer()) name += std::to_string(v.get<int64_t>());
      else if (v.is_number()) name += fmt::format("{}", v.get<double>());
      else name += "x";
    }
  }
  for (char& c : name) {
    if (c == '.') c = 'p';
    else if (c == '-') c = 'm';
    else if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') c = '_';
  }
  return name;
}

Result<Instance> instanceSource(std::string_view kind, const nlohmann::json& params,
                                std::string_view name) {
  if (!validIdentifier(name))
    return makeError("{}: instance name '{}' is not a C identifier", kind, name);
  auto b = body(kind, Params(kind, params));
  if (!b) return b.error();
  Instance inst;
  inst.name = std::string(name);
  inst.kind = std::string(kind);
  inst.launch = b->launch;
  inst.arch = b->arch;
  inst.source = fmt::format(
      "// Generated by kiln (codegen/cuda) from one manifest step; do not edit.\n"
      "// kind: {}\n"
      "// params: {}\n"
      "// launch: grid {}, block [{}], argument kiln::kernels::{}\n"
      "#include \"{}\"\n"
      "\n"
      "namespace {{\n"
      "struct Config {{\n"
      "{}"
      "}};\n"
      "}}  // namespace\n"
      "\n"
      "extern \"C\" __global__ void __launch_bounds__({}) {}(const {}kiln::kernels::{} p) {{\n"
      "{}"
      "  kiln::kernels::{}<Config>(p);\n"
      "}}\n",
      kind, params.dump(), b->launch.grid, b->launch.block_threads, b->launch.params_struct,
      b->header, b->config,
      b->min_blocks > 0 ? fmt::format("{}, {}", b->launch.block_threads, b->min_blocks)
                        : std::to_string(b->launch.block_threads),
      name, b->grid_constant ? "__grid_constant__ " : "", b->launch.params_struct,
      b->waits_itself ? ""
                      : "  // Launched as a programmatic dependent (common.cuh): wait for the\n"
                        "  // previous kernel's writes, then let the next kernel launch.\n"
                        "  kiln::kernels::wait_for_previous_kernel();\n"
                        "  kiln::kernels::allow_next_kernel();\n",
      b->function);
  return inst;
}

Result<std::string> instanceSource(std::string_view kind, const nlohmann::json& params) {
  auto inst = instanceSource(kind, params, instanceName(kind, params));
  if (!inst) return inst.error();
  return std::move(inst->source);
}

Result<WrittenSources> writeInstanceSources(const std::filesystem::path& dir) {
  auto manifest = Manifest::load(dir.string());
  if (!manifest.ok()) return manifest.error();
  WrittenSources out;
  std::set<std::string> seen;
  const std::filesystem::path kernels = dir / "kernels";
  std::error_code ec;
  std::filesystem::create_directories(kernels, ec);
  if (ec) return makeError("{}: cannot create: {}", kernels.string(), ec.message());
  auto write = [&](const KernelVariant& variant) -> Status {
    const std::string& name = variant.instance;
    if (name.empty() || !seen.insert(name).second) return {};
    auto inst = instanceSource(variant.kind, variant.params, name);
    if (!inst) {
      out.unsupported.push_back(fmt::format("{} ({}): {}", name, variant.kind, inst.error().message));
      return {};
    }
    const std::filesystem::path file = kernels / (name + ".cu");
    std::ifstream existing(file, std::ios::binary);
    if (existing) {
      std::stringstream ss;
      ss << existing.rdbuf();
      if (ss.str() == inst->source) {
        out.unchanged.push_back(name);
        return {};
      }
    }
    std::ofstream os(file, std::ios::binary | std::ios::trunc);
    os << inst->source;
    if (!os) return makeError("{}: cannot write", file.string());
    out.written.push_back(name);
    return {};
  };
  for (const auto& [entry_name, entry] : manifest->entries)
    for (const Step& step : entry.steps)
      for (const KernelVariant& variant : step.variants) KILN_RETURN_IF_ERROR(write(variant));
  return out;
}

}  // namespace kiln::cuda_codegen
