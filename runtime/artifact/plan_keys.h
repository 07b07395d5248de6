// The names of a step's params in manifest.json, spelled once: the compiler
// (compiler/LowerToKernels.cpp) writes params under these names and the
// plan library (step_params.h) reads and writes them. A new param is added
// here, to its kind's struct and field table, and nowhere else.
#pragma once

namespace kiln::plan_key {

// Shapes.
inline constexpr char kHidden[] = "hidden";
inline constexpr char kWidth[] = "width";
inline constexpr char kN[] = "n";
inline constexpr char kK[] = "k";
inline constexpr char kFfn[] = "ffn";
inline constexpr char kHeads[] = "heads";
inline constexpr char kKvHeads[] = "kv_heads";
inline constexpr char kHeadDim[] = "head_dim";
inline constexpr char kPageSize[] = "page_size";
inline constexpr char kAxis[] = "axis";
inline constexpr char kSizes[] = "sizes";
inline constexpr char kMode[] = "mode";

// Numerics and structure.
inline constexpr char kEpsilon[] = "epsilon";
inline constexpr char kScale[] = "scale";
inline constexpr char kWritesSum[] = "writes_sum";
inline constexpr char kBias[] = "bias";
inline constexpr char kScales[] = "scales";
inline constexpr char kGroup[] = "group";
inline constexpr char kRole[] = "role";
inline constexpr char kMergedQkv[] = "merged_qkv";
inline constexpr char kMergedGateUp[] = "merged_gate_up";
inline constexpr char kTreeMask[] = "tree_mask";
inline constexpr char kSlidingWindow[] = "sliding_window";
inline constexpr char kQkNorm[] = "qk_norm";
inline constexpr char kQkNormEpsilon[] = "qk_norm_epsilon";
inline constexpr char kActivation[] = "activation";
inline constexpr char kExperts[] = "experts";
inline constexpr char kTopK[] = "top_k";
inline constexpr char kNormalize[] = "normalize";

// State-space layers.
inline constexpr char kChannels[] = "channels";
inline constexpr char kState[] = "state";
inline constexpr char kGroups[] = "groups";
inline constexpr char kChunkSize[] = "chunk_size";
inline constexpr char kDtMin[] = "dt_min";
inline constexpr char kDtMax[] = "dt_max";
inline constexpr char kSilu[] = "silu";
inline constexpr char kFeatures[] = "features";
inline constexpr char kGroupSize[] = "group_size";

// Tensor and pipeline parallelism: the all-reduce's group_size, and the
// stage a send or recv talks to.
inline constexpr char kPeer[] = "peer";

// Rotary embedding.
inline constexpr char kRopeTheta[] = "rope_theta";
inline constexpr char kRopeStyle[] = "rope_style";
inline constexpr char kRopeScaling[] = "rope_scaling";
inline constexpr char kRopeFactor[] = "rope_factor";
inline constexpr char kRopeLowFreqFactor[] = "rope_low_freq_factor";
inline constexpr char kRopeHighFreqFactor[] = "rope_high_freq_factor";
inline constexpr char kRopeOriginalMaxPosition[] = "rope_original_max_position";

// Element types: of weights and pools, and of the activation operands and
// results whose type differs from the plan's activation_type (absent: it).
inline constexpr char kTableType[] = "table_type";
inline constexpr char kWeightType[] = "weight_type";
inline constexpr char kKvType[] = "kv_type";
inline constexpr char kXType[] = "x_type";
inline constexpr char kResidualType[] = "residual_type";
inline constexpr char kSumType[] = "sum_type";
inline constexpr char kOutType[] = "out_type";
inline constexpr char kQType[] = "q_type";
inline constexpr char kAType[] = "a_type";
inline constexpr char kBType[] = "b_type";
inline constexpr char kType[] = "type";

}  // namespace kiln::plan_key
