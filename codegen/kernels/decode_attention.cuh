// Split-KV decode attention over the paged pool, built to stream K and V at
// HBM bandwidth: the decode-time counterpart of paged_attention's split mode,
// with the same params and the same partials, merged by attention_combine.
//
//   q            [N, H, D] bf16 (already roped)
//   k_pool/v_pool [num_blocks, page_size, Hkv, D] (Config::Kv: bf16, f32, or
//                KvInt8 / KvE4M3 codes, each row times its scale from
//                k_scales/v_scales [num_blocks, Hkv, page_size], kv_quant.cuh)
//   block_tables [B, max_blocks_per_seq] i32; key j of sequence b lives at
//                slot block_tables[b][j / page_size] * page_size + j % page_size
//   query_start  [B + 1] i32, kv_lens [B] i32: as paged_attention (causal:
//                query i of a sequence of q_len tokens sees keys
//                0..kv_len - q_len + i, or its last kWindow of them with a
//                sliding window (attention_window.cuh); decode batches have
//                q_len 1)
//   partial_out  [N, H, splits, D] f32: split z's attention over its key
//                range, normalized by its own sum (zeros for an empty range)
//   partial_lse  [N, H, splits] f32: m + log(l) of the range in natural-log
//                units of q·k·scale (-inf for an empty range)
//   split_arrivals: if set, the last split block of each (token, kv head)
//                also merges the partials into out (split_kv.cuh), in place
//                of an attention_combine launch
//
// Two forms with the same contract: decode_attention_mma (below) on tensor
// cores, for bf16 pools with pages a multiple of 16 keys, and
// decode_attention on CUDA cores for any pool. Over int8/fp8 pools each
// stream also copies its kKeys (4) keys' K and V scales, one 16-byte chunk
// each, into its ring stage beside the codes; a score is the codes' dot
// product times the key's scale, a probability weighs the codes of its
// value times the value's scale.
//
// Launch: grid [N, Hkv, splits] with params.num_splits == splits, block
// [decode::kThreads] = 128. decode_attention uses static shared memory only
// (decode::smem_bytes, at most 48 KiB); decode_attention_mma uses
// Config::kSmemBytes (decode::mma_smem_bytes: 96 KiB at head_dim 128 with 3
// stages) of dynamic shared memory, which past 48 KiB the launcher opts into
// (cuFuncSetAttribute MAX_DYNAMIC_SHARED_SIZE_BYTES). Which keys a split
// owns differs (the merge does not care): in the CUDA-core form split z
// owns keys [lo + z·per, lo + (z+1)·per) of the token's visible keys, per =
// ceil((visible - lo) / splits) rounded up to a whole tile (decode::tile_keys);
// in the tensor-core form it owns every splits-th 64-key tile from tile z, so
// its first pages are known before the context length. lo is 0, or with a
// sliding window the window's first key rounded down to a stream's keys
// (a 16-key sub-tile in the tensor-core form), so the keys read before the
// window lie on the window's first page and are masked; pages wholly before
// it are never read.
//
// Work split (CUDA-core form; the tensor-core form is described at its
// template). Each block serves one (token, kv head, key range) and the
// whole GQA group, so every K/V row is read from HBM once per group. A K or
// V row is read by a "stream" of lanes, each lane taking kChunks 16-byte
// chunks of it (lane i of the stream: chunks i, i + lanes, ...; so each
// 16-byte copy instruction of a stream covers contiguous bytes): at bf16
// head_dim 128 and kChunks 2, 8 lanes per row and 4 streams per warp. Each
// stream takes kKeys consecutive keys of a tile (one page, one block-table
// load). Each thread copies only the chunks it will itself read with
// cp.async into its own slots of a kStages-deep ring, so the pipeline needs
// no barrier: cp.async.wait_group alone orders a thread's copies before its
// reads, and (kStages - 1) · kKeys · kChunks · 32 bytes per thread are in
// flight without holding registers. Per tile, each stream:
//   (a) scores its keys against the group's heads: chunk · q slice in f32
//       (q pre-scaled by scale·log2 e, held in registers), then a butterfly
//       sum over the stream's lanes;
//   (b) folds them into its own running max m and sum l per head (base-2
//       online softmax); the output slice acc[head][d-slice] and l are
//       rescaled only when a score passes m by more than kRescaleSlack (the
//       probabilities stay below 2^kRescaleSlack, and the final o / l is the
//       same), which after the first tile is rare;
//   (c) acc += p · V with the same chunk layout.
// At the end the streams of a warp merge through shuffles and the warps
// through shared memory (max-rescaled sums), and the block writes the
// partials. Groups above 8 heads split the heads over two halves of the
// block (each half reads the keys; the second read hits L2), so no thread
// holds more than 8 heads of q and acc.
#pragma once

#include "tensor_core.cuh"  // and, on the device, common.cuh
#include "attention_window.cuh"
#include "kv_quant.cuh"
#include "split_kv.cuh"     // the fused combine

// Shape helpers, host-visible: the instance generator checks the shared
// memory of a configuration with smem_bytes.
namespace kiln {
namespace kernels {
namespace decode {

constexpr int kWarps = 4, kThreads = 32 * kWarps;

// Halves of the block that split a GQA group (1 up to 8 heads, 2 up to 16),
// and the heads each thread serves.
KILN_HOST_DEVICE constexpr int head_splits(int group) { return group > 8 ? 2 : 1; }
KILN_HOST_DEVICE constexpr int heads_per_thread(int group) {
  return (group + head_splits(group) - 1) / head_splits(group);
}
// The default tiling: 2 chunks per lane (half the lanes per row, so the
// score reduction and the softmax cost half as many instructions per key)
// while q and acc fit, i.e. up to 4 heads per thread; 128 bytes per thread
// and stage either way.
KILN_HOST_DEVICE constexpr int default_chunks(int group) { return heads_per_thread(group) <= 4 ? 2 : 1; }
KILN_HOST_DEVICE constexpr int default_keys(int group) { return 4 / default_chunks(group); }
constexpr int kDefaultStages = 3;
// Lanes of one stream (a K/V row of head_dim elements of kv_bytes each).
KILN_HOST_DEVICE constexpr int row_lanes(int head_dim, int kv_bytes, int chunks) {
  return head_dim * kv_bytes / 16 / chunks;
}
// Keys of one tile: every stream of a head split takes `keys` of them.
KILN_HOST_DEVICE constexpr int tile_keys(int group, int head_dim, int kv_bytes, int chunks, int keys) {
  return kWarps / head_splits(group) * (32 / row_lanes(head_dim, kv_bytes, chunks)) * keys;
}
// The cp.async ring: per thread and stage, keys x chunks K and as many V
// 16-byte chunks, and for int8/fp8 pools (`scaled`) a chunk of K and one of
// V scales.
KILN_HOST_DEVICE constexpr int pipeline_bytes(int stages, int keys, int chunks, bool scaled = false) {
  return stages * (keys * chunks * 2 + (scaled ? 2 : 0)) * 16 * kThreads;
}
// The cross-warp merge (reusing the ring): acc [kWarps][heads][D] and (m, l) [kWarps][heads][2], f32.
KILN_HOST_DEVICE constexpr int merge_bytes(int group, int head_dim) {
  return kWarps * heads_per_thread(group) * (head_dim + 2) * 4;
}
KILN_HOST_DEVICE constexpr int smem_bytes(int group, int head_dim, int stages, int keys, int chunks,
                                          bool scaled = false) {
  return pipeline_bytes(stages, keys, chunks, scaled) > merge_bytes(group, head_dim)
             ? pipeline_bytes(stages, keys, chunks, scaled)
             : merge_bytes(group, head_dim);
}
// int8/fp8 pools: a scale chunk holds the scales of 4 keys of a stream.
constexpr int kScaledKeys = 4;

// decode_attention_mma (bf16 pools, page sizes a multiple of 16): each warp
// takes 16-key sub-tiles, a tile is kWarps of them; its ring holds `stages`
// sub-tiles of K and V per warp in dynamic shared memory, later reused for
// the merge of [kWarps][16 heads][D + 2] f32.
constexpr int kMmaKeys = 16, kMmaTileKeys = kWarps * kMmaKeys, kMmaDefaultStages = 3;
KILN_HOST_DEVICE constexpr int mma_smem_bytes(int head_dim, int stages) {
  return kWarps * stages * 2 * kMmaKeys * head_dim * 2 > kWarps * 16 * (head_dim + 2) * 4
             ? kWarps * stages * 2 * kMmaKeys * head_dim * 2
             : kWarps * 16 * (head_dim + 2) * 4;
}

}  // namespace decode
}  // namespace kernels
}  // namespace kiln

// The kernel body. It also compiles on the host under KILN_CUDA_EMULATION,
// where test/gpu/cuda_emulation.h supplies the intrinsics and runs each CUDA
// thread as a fiber (test/gpu/decode_attention_emulation_test.cc).
#if defined(__CUDACC__) || defined(__CUDACC_RTC__) || defined(KILN_CUDA_EMULATION)

namespace kiln {
namespace kernels {
namespace decode {

constexpr float kLn2 = 0.6931471805599453f;
constexpr float kNoScore = -3.402823466e38f;  // finite: (kNoScore - kNoScore) is 0, never NaN

// The end of both forms: the running (m, l) and output of one head, kept by
// kCount warps at slots first, first + stride, ... of merge_ml ([slot][m, l],
// log2 units) and merge_acc ([slot][head_dim]), merged and written as this
// split's partial: dimension d of partial_out row `row`, and its lse. With
// split_arrivals set and one split, the partial is the output: it goes to
// out in bf16 (row is then the (token, head) row), with no merge after it.
template <int kCount>
__device__ __forceinline__ void write_split_partial(const PagedAttentionParams& p, const float* merge_ml,
                                                    const float* merge_acc, int first, int stride, int head_dim,
                                                    int d, long long row) {
  float mx = kNoScore;
#pragma unroll
  for (int i = 0; i < kCount; ++i) mx = fmaxf(mx, merge_ml[(first + i * stride) * 2]);
  float sum = 0.0f, o = 0.0f;
#pragma unroll
  for (int i = 0; i < kCount; ++i) {
    const int slot = first + i * stride;
    const float c = exp2_approx(merge_ml[slot * 2] - mx);
    sum += merge_ml[slot * 2 + 1] * c;
    o += merge_acc[slot * head_dim + d] * c;
  }
  const float out = sum > 0.0f ? o / sum : 0.0f;
  if (p.split_arrivals && p.num_splits == 1) {  // the only split: it is the output, no merge
    static_cast<bf16*>(p.out)[row * head_dim + d] = from_float<bf16>(out);
    return;
  }
  p.partial_out[row * head_dim + d] = out;
  if (d == 0) p.partial_lse[row] = sum > 0.0f ? (mx + log2f(sum)) * kLn2 : neg_inf();
}

// Index of the sequence owning token t: the b with query_start[b] <= t < query_start[b+1].
// Decode batches (one token per sequence) settle it with two independent loads.
__device__ __forceinline__ int sequence_of(const int* query_start, int num_seqs, int t) {
  if (t < num_seqs && query_start[t] == t && query_start[t + 1] == t + 1) return t;
  int lo = 0, hi = num_seqs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (query_start[mid] <= t) lo = mid; else hi = mid - 1;
  }
  return lo;
}

// The keys token t sees (causal), and its sequence b; fresh is the first
// key this step appends (the kernel before writes it: rope_kv_append or the
// qkv gemm's epilogue). kv_lens[t] is requested beside query_start's
// entries: in a decode batch, where b == t, the three loads are one round
// trip to L2 rather than two in a row. All of them are batch inputs, copied
// in before the step's first kernel, so they may be read before waiting on
// the previous kernel.
__device__ __forceinline__ int visible_keys(const PagedAttentionParams& p, int t, int& b, int& fresh) {
  const int guess_b = min(t, p.num_seqs - 1);
  const int guess_len = p.kv_lens[guess_b];
  b = sequence_of(p.query_start, p.num_seqs, t);
  const int q_begin = p.query_start[b], q_len = p.query_start[b + 1] - q_begin;
  const int kv_len = b == guess_b ? guess_len : p.kv_lens[b];
  fresh = kv_len - q_len;
  return max(0, kv_len - q_len + (t - q_begin) + 1);
}

// The kVec elements of one 16-byte chunk of Kv (bf16 or f32; the codes of
// int8/fp8) as f32.
template <class Kv>
__device__ __forceinline__ void unpack(const uint4& raw, float* out) {
  const unsigned w[4] = {raw.x, raw.y, raw.z, raw.w};
  if constexpr (KvScaled<Kv>::value) {
    kv_unpack16<Kv>(raw, out);
  } else if constexpr (sizeof(Kv) == 4) {
#pragma unroll
    for (int i = 0; i < 4; ++i) out[i] = __uint_as_float(w[i]);
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      out[2 * i] = __uint_as_float(w[i] << 16);
      out[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
  }
}

// kVec consecutive bf16 (32, 16 or 8 bytes, aligned) as f32 times `scale`.
template <int kVec>
__device__ __forceinline__ void load_q(const unsigned short* q, float scale, float* out) {
  if constexpr (kVec == 16) {  // the q of a 16-byte chunk of int8/fp8 codes
    load_q<8>(q, scale, out);
    load_q<8>(q + 8, scale, out + 8);
  } else {
    unsigned w[kVec / 2];
    if constexpr (kVec == 8) {
      const uint4 raw = *reinterpret_cast<const uint4*>(q);
      w[0] = raw.x, w[1] = raw.y, w[2] = raw.z, w[3] = raw.w;
    } else {
      const uint2 raw = *reinterpret_cast<const uint2*>(q);
      w[0] = raw.x, w[1] = raw.y;
    }
#pragma unroll
    for (int i = 0; i < kVec / 2; ++i) {
      out[2 * i] = __uint_as_float(w[i] << 16) * scale;
      out[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u) * scale;
    }
  }
}

}  // namespace decode

// Config: using Kv; static constexpr int kHeads, kKvHeads, kHeadDim, kPageSize,
//         kStages (cp.async ring depth, >= 2), kKeys (keys per stream per tile),
//         kChunks (16-byte chunks per lane and row); static constexpr float kScale;
//         optionally static constexpr int kWindow.
template <class Config>
__device__ __forceinline__ void decode_attention(const PagedAttentionParams& p) {
  using namespace decode;
  using Kv = typename Config::Kv;
  constexpr int D = Config::kHeadDim, H = Config::kHeads, Hkv = Config::kKvHeads, kPage = Config::kPageSize;
  constexpr int G = H / Hkv;
  constexpr int kVec = 16 / int(sizeof(Kv));                          // elements per 16-byte chunk
  constexpr int kChunks = Config::kChunks, kElems = kChunks * kVec;   // chunks, elements per lane and row
  constexpr int kRowLanes = row_lanes(D, int(sizeof(Kv)), kChunks);   // lanes of one stream
  constexpr int kRowsPerWarp = 32 / kRowLanes;                        // streams per warp
  constexpr int kHeadSplits = head_splits(G), kHeadsPer = heads_per_thread(G);
  constexpr int kWarpsPerSplit = kWarps / kHeadSplits;
  constexpr int kStreams = kWarpsPerSplit * kRowsPerWarp;             // streams of one head split
  constexpr int kKeys = Config::kKeys, kStages = Config::kStages;
  constexpr int kTileKeys = kStreams * kKeys;
  constexpr bool kScaled = KvScaled<Kv>::value;
  constexpr int kScaleChunk = kKeys * kChunks * 2;                    // a stage's K scales, then V scales
  constexpr int kStageChunks = (kScaleChunk + (kScaled ? 2 : 0)) * kThreads;  // 16-byte chunks per ring stage
  constexpr int kSmemBytes = smem_bytes(G, D, kStages, kKeys, kChunks, kScaled);
  constexpr float kScaleLog2 = Config::kScale * 1.4426950408889634f;
  constexpr float kRescaleSlack = 8.0f;         // log2 units: probabilities stay below 256
  constexpr int kWindow = AttentionWindow<Config>::value;
  static_assert(H % Hkv == 0 && G <= 16, "GQA group of at most 16 heads");
  static_assert(sizeof(Kv) == 2 || sizeof(Kv) == 4 || kScaled, "bf16, f32, int8 or fp8 pools");
  static_assert(!kScaled || kKeys == kScaledKeys, "a scale chunk is 4 keys of a stream");
  static_assert((kChunks == 1 || kChunks == 2) && kRowLanes * kElems == D, "a row is whole chunks per lane");
  static_assert(kRowLanes >= 1 && kRowLanes <= 32 && (kRowLanes & (kRowLanes - 1)) == 0,
                "a power-of-two number of lanes per row, at most 32");
  static_assert(kStages >= 2 && kKeys >= 1 && kPage % kKeys == 0, "pipeline: a stream's keys share a page");
  static_assert(kTileKeys == tile_keys(G, D, int(sizeof(Kv)), kChunks, kKeys), "tile");
  static_assert(kSmemBytes <= 48 * 1024, "static shared memory");
  static_assert(combine_scratch_floats(G, D, kMaxMergedSplits, kThreads) * 4 <= kSmemBytes, "the fused merge's scratch");

#if defined(KILN_CUDA_EMULATION)
  unsigned char* const smem = emulated_shared_memory(kSmemBytes);
#else
  __shared__ __align__(16) unsigned char smem[kSmemBytes];
#endif
  // The ring: [kStages][kKeys][K, V][kChunks][kThreads] 16-byte chunks, each
  // thread using only its own column, so a warp's 32 chunks of one slot are
  // 512 contiguous bytes (no bank conflicts).
  uint4* const ring = reinterpret_cast<uint4*>(smem);

  // Launched as a programmatic dependent (common.cuh): this form waits
  // first thing (the tensor-core form starts its older keys' copies first).
  wait_for_previous_kernel();
  allow_next_kernel();
  const int t = blockIdx.x, kvh = blockIdx.y, split = blockIdx.z;
  if (t >= p.num_tokens) return;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int half = warp / kWarpsPerSplit;                                      // head split
  const int stream = warp % kWarpsPerSplit * kRowsPerWarp + lane / kRowLanes;  // 0..kStreams-1
  const int d0 = lane % kRowLanes * kVec;  // chunk c of this lane's slice is at d0 + c·kRowLanes·kVec
  const int r0 = half * kHeadsPer;         // first head of the group this thread serves

  // q slices of this thread's heads, issued first: nothing depends on them until tile 0.
  float q[kHeadsPer][kElems];
  {
    const unsigned short* qh = static_cast<const unsigned short*>(p.q) + ((long long)t * H + kvh * G + r0) * D + d0;
#pragma unroll
    for (int r = 0; r < kHeadsPer; ++r)
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        float* qc = &q[r][c * kVec];
        if (r0 + r < G) {
          load_q<kVec>(qh + r * D + c * kRowLanes * kVec, kScaleLog2, qc);
        } else {
#pragma unroll
          for (int e = 0; e < kVec; ++e) qc[e] = 0.0f;
        }
      }
  }

  int b, fresh;
  const int visible = visible_keys(p, t, b, fresh);
  // The window's first key, and lo, the first this block's split scheme
  // reads: the window's stream of keys (one page), whose keys before it are masked.
  const int window_lo = window_begin(kWindow, visible - 1);
  const int lo = window_lo / kKeys * kKeys;
  const int per_split = ((visible - lo + p.num_splits - 1) / p.num_splits + kTileKeys - 1) / kTileKeys * kTileKeys;
  const int begin = min(visible, lo + split * per_split), end = min(visible, begin + per_split);
  const int num_tiles = (end - begin + kTileKeys - 1) / kTileKeys;
  const int* table = p.block_tables + (long long)b * p.max_blocks_per_seq;
  const Kv* k_pool = static_cast<const Kv*>(p.k_pool);
  const Kv* v_pool = static_cast<const Kv*>(p.v_pool);

  // This stream's keys of tile `tile` are first_key(tile) + u, u < kKeys: one
  // page (kKeys divides the page size and every tile starts on a multiple of
  // kKeys), consecutive rows Hkv·D elements apart.
  auto first_key = [&](int tile) { return begin + tile * kTileKeys + stream * kKeys; };
  auto page_of = [&](int tile) {
    const int j = first_key(tile);
    return j < end ? table[unsigned(j) / kPage] : -1;
  };
  // Copies this thread's chunks of tile `tile` (its keys on page `page`) into ring stage `stage`.
  auto issue = [&](int tile, int page, int stage) {
    uint4* dst = ring + stage * kStageChunks + tid;
    const int j = first_key(tile);
    const long long at = page < 0 ? 0 : (((long long)page * kPage + unsigned(j) % kPage) * Hkv + kvh) * D + d0;
#pragma unroll
    for (int u = 0; u < kKeys; ++u) {
      const bool valid = page >= 0 && j + u < end;
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        const long long e = valid ? at + (long long)u * Hkv * D + c * kRowLanes * kVec : 0;
        cp_async_16(dst + ((2 * u) * kChunks + c) * kThreads, k_pool + e, valid ? 16 : 0);
        cp_async_16(dst + ((2 * u + 1) * kChunks + c) * kThreads, v_pool + e, valid ? 16 : 0);
      }
    }
    if constexpr (kScaled) {  // the 4 keys' scales: contiguous on the page, 16-byte aligned
      const long long at_scale = page < 0 ? 0 : ((long long)page * Hkv + kvh) * kPage + unsigned(j) % kPage;
      cp_async_16(dst + kScaleChunk * kThreads, p.k_scales + at_scale, page < 0 ? 0 : 16);
      cp_async_16(dst + (kScaleChunk + 1) * kThreads, p.v_scales + at_scale, page < 0 ? 0 : 16);
    }
  };

  // Prologue: tiles 0..kStages-2 in flight (one commit group each, empty past
  // the range), and the page of tile kStages-1.
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < num_tiles) issue(s, page_of(s), s);
    cp_async_commit();
  }
  int page = page_of(kStages - 1);

  float m[kHeadsPer], l[kHeadsPer], acc[kHeadsPer][kElems];
#pragma unroll
  for (int r = 0; r < kHeadsPer; ++r) {
    m[r] = kNoScore;
    l[r] = 0.0f;
#pragma unroll
    for (int e = 0; e < kElems; ++e) acc[r][e] = 0.0f;
  }

  int read_stage = 0, write_stage = kStages - 1;
  for (int tile = 0; tile < num_tiles; ++tile) {
    cp_async_wait<kStages - 2>();  // this thread's copies of `tile` have landed
    const uint4* slot = ring + read_stage * kStageChunks + tid;
    uint4 kraw[kKeys][kChunks];
#pragma unroll
    for (int u = 0; u < kKeys; ++u)
#pragma unroll
      for (int c = 0; c < kChunks; ++c) kraw[u][c] = slot[((2 * u) * kChunks + c) * kThreads];
    float k_scale[kKeys], v_scale[kKeys];  // scaled pools: this stream's keys' scales
    if constexpr (kScaled) {
      const uint4 ks = slot[kScaleChunk * kThreads], vs = slot[(kScaleChunk + 1) * kThreads];
      const unsigned kw[4] = {ks.x, ks.y, ks.z, ks.w}, vw[4] = {vs.x, vs.y, vs.z, vs.w};
#pragma unroll
      for (int u = 0; u < kKeys; ++u) {
        k_scale[u] = __uint_as_float(kw[u]);
        v_scale[u] = __uint_as_float(vw[u]);
      }
    }
    // Refill the stage this thread finished reading in the previous tile, and
    // fetch the table entry of the refill after it.
    const int ahead = tile + kStages - 1;
    if (ahead < num_tiles) issue(ahead, page, write_stage);
    cp_async_commit();
    page = page_of(ahead + 1);
    write_stage = read_stage;
    read_stage = read_stage + 1 == kStages ? 0 : read_stage + 1;

    // (a) base-2 scores of this stream's keys: slice dot products, then the sum over the stream's lanes.
    float s[kKeys][kHeadsPer];
#pragma unroll
    for (int u = 0; u < kKeys; ++u) {
      float kf[kElems];
#pragma unroll
      for (int c = 0; c < kChunks; ++c) unpack<Kv>(kraw[u][c], &kf[c * kVec]);
#pragma unroll
      for (int r = 0; r < kHeadsPer; ++r) {
        float x = 0.0f;
#pragma unroll
        for (int e = 0; e < kElems; ++e) x += q[r][e] * kf[e];
        s[u][r] = x;
      }
    }
#pragma unroll
    for (int o = kRowLanes / 2; o > 0; o /= 2)
#pragma unroll
      for (int u = 0; u < kKeys; ++u)
#pragma unroll
        for (int r = 0; r < kHeadsPer; ++r) s[u][r] += __shfl_xor_sync(0xffffffffu, s[u][r], o);
    if constexpr (kScaled)
#pragma unroll
      for (int u = 0; u < kKeys; ++u)
#pragma unroll
        for (int r = 0; r < kHeadsPer; ++r) s[u][r] *= k_scale[u];
    // Only the last tile has keys past the range, only the first (of the
    // window's split) keys before the window.
    if (tile == num_tiles - 1 || (kWindow > 0 && tile == 0)) {
      const int j = first_key(tile);
#pragma unroll
      for (int u = 0; u < kKeys; ++u) {
        const bool outside = j + u >= end || (kWindow > 0 && j + u < window_lo);
#pragma unroll
        for (int r = 0; r < kHeadsPer; ++r)
          if (outside) s[u][r] = neg_inf();
        // A slot outside the range may hold any scale: its zero probability
        // must not meet it.
        if (kScaled && outside) v_scale[u] = 0.0f;
      }
    }

    // (b) online softmax per head, rescaling only past the slack; s becomes the probabilities.
#pragma unroll
    for (int r = 0; r < kHeadsPer; ++r) {
      float mx = s[0][r];
#pragma unroll
      for (int u = 1; u < kKeys; ++u) mx = fmaxf(mx, s[u][r]);
      if (mx > m[r] + kRescaleSlack) {  // always on a stream's first scores (m is kNoScore)
        const float alpha = exp2_approx(m[r] - mx);
        m[r] = mx;
        l[r] *= alpha;
#pragma unroll
        for (int e = 0; e < kElems; ++e) acc[r][e] *= alpha;
      }
#pragma unroll
      for (int u = 0; u < kKeys; ++u) {
        s[u][r] = exp2_approx(s[u][r] - m[r]);
        l[r] += s[u][r];
      }
    }

    // (c) acc += p · V (keys past the range were copied as zeros and have p = 0).
#pragma unroll
    for (int u = 0; u < kKeys; ++u) {
      float vf[kElems];
#pragma unroll
      for (int c = 0; c < kChunks; ++c)
        unpack<Kv>(slot[((2 * u + 1) * kChunks + c) * kThreads], &vf[c * kVec]);
#pragma unroll
      for (int r = 0; r < kHeadsPer; ++r) {
        const float pv = kScaled ? s[u][r] * v_scale[u] : s[u][r];
#pragma unroll
        for (int e = 0; e < kElems; ++e) acc[r][e] += pv * vf[e];
      }
    }
  }
  cp_async_wait<0>();  // only empty groups remain; the ring is free after the barrier below

  // Merge the streams of each warp: (m, l, acc) of lane ^ o into lane's.
#pragma unroll
  for (int o = kRowLanes; o < 32; o *= 2) {
#pragma unroll
    for (int r = 0; r < kHeadsPer; ++r) {
      const float m_o = __shfl_xor_sync(0xffffffffu, m[r], o), l_o = __shfl_xor_sync(0xffffffffu, l[r], o);
      const float mx = fmaxf(m[r], m_o);
      const float a = exp2_approx(m[r] - mx), c = exp2_approx(m_o - mx);
      m[r] = mx;
      l[r] = l[r] * a + l_o * c;
#pragma unroll
      for (int e = 0; e < kElems; ++e) acc[r][e] = acc[r][e] * a + __shfl_xor_sync(0xffffffffu, acc[r][e], o) * c;
    }
  }

  // Merge the warps of each head split through shared memory, then write the partials.
  float* const merge_acc = reinterpret_cast<float*>(smem);     // [kWarps][kHeadsPer][D]
  float* const merge_ml = merge_acc + kWarps * kHeadsPer * D;  // [kWarps][kHeadsPer][2]
  __syncthreads();  // every thread is done reading its ring slots
  if (lane < kRowLanes) {
#pragma unroll
    for (int r = 0; r < kHeadsPer; ++r) {
#pragma unroll
      for (int c = 0; c < kChunks; ++c)
#pragma unroll
        for (int e = 0; e < kVec; ++e)
          merge_acc[(warp * kHeadsPer + r) * D + d0 + c * kRowLanes * kVec + e] = acc[r][c * kVec + e];
      if (lane == 0) {
        merge_ml[(warp * kHeadsPer + r) * 2] = m[r];
        merge_ml[(warp * kHeadsPer + r) * 2 + 1] = l[r];
      }
    }
  }
  __syncthreads();
  for (int i = tid; i < G * D; i += kThreads) {
    const int r = i / D, d = i % D;  // head of the group, dimension
    const int w0 = r / kHeadsPer * kWarpsPerSplit, rr = r % kHeadsPer;  // the head's warps and slot in them
    write_split_partial<kWarpsPerSplit>(p, merge_ml, merge_acc, w0 * kHeadsPer + rr, kHeadsPer, D, d,
                                        ((long long)t * H + kvh * G + r) * p.num_splits + split);
  }
  if (p.split_arrivals && p.num_splits > 1)
    combine_if_last_split<G, D, kThreads>(p, t, kvh, Hkv, reinterpret_cast<float*>(smem));
}

// The tensor-core form, for bf16 pools with pages a multiple of 16 keys:
// the group's heads are the 16 rows of m16n8k16 tiles (rows past the group
// are zero), so S^T = Q·Kᵀ and O += P·V are mma.sync with K and V read by
// ldmatrix, and the C fragments of S^T are the A fragments of P (as in
// flash_attention); per key that is a few instructions where the CUDA-core
// form needs ~60. Warp w takes the 16-key sub-tiles w, w + kWarps, ... of
// the block's range (kMmaTileKeys keys per tile), copying each with
// cp.async into its own kStages-deep ring in dynamic shared memory (row r's
// 16-byte chunk c at chunk c ^ (r % 8), so ldmatrix phases are free of bank
// conflicts), and keeps its own online softmax; the warps merge at the end
// as in decode_attention.
// Config: static constexpr int kHeads, kKvHeads, kHeadDim, kPageSize, kStages,
//         kSmemBytes (dynamic shared memory, mma_smem_bytes); static constexpr float kScale;
//         optionally static constexpr int kWindow (its instances fetch no pages before
//         the context length is known: where the keys start depends on it).
template <class Config>
__device__ __forceinline__ void decode_attention_mma(const PagedAttentionParams& p) {
  using namespace decode;
  constexpr int D = Config::kHeadDim, H = Config::kHeads, Hkv = Config::kKvHeads, kPage = Config::kPageSize;
  constexpr int G = H / Hkv;
  constexpr int kStages = Config::kStages;
  constexpr int kChunks = D / 8;                      // 16-byte chunks per row
  constexpr int kKSteps = D / 16;                     // k16 steps of Q·Kᵀ
  constexpr int kDBlocks = D / 8;                     // n8 blocks of O
  constexpr int kSubBytes = kMmaKeys * D * 2;         // one 16-key K (or V) sub-tile
  constexpr int kWarpRing = kStages * 2 * kSubBytes;  // one warp's ring
  constexpr int kRowsPerCopy = 32 / kChunks;          // rows one copy instruction of a warp covers
  constexpr float kScaleLog2 = Config::kScale * 1.4426950408889634f;
  constexpr float kRescaleSlack = 8.0f;
  constexpr int kWindow = AttentionWindow<Config>::value;
  static_assert(H % Hkv == 0 && G <= 16, "GQA group of at most 16 heads (the rows of one m16 tile)");
  static_assert(D == 64 || D == 128, "head_dim 64 or 128");
  static_assert(kStages >= 2 && kPage % kMmaKeys == 0, "pipeline: a sub-tile is one page");
  static_assert(Config::kSmemBytes == mma_smem_bytes(D, kStages), "dynamic shared memory size");
  static_assert(combine_scratch_floats(G, D, kMaxMergedSplits, kThreads) * 4 <= Config::kSmemBytes,
                "the fused merge's scratch");

#if defined(KILN_CUDA_EMULATION)
  unsigned char* const smem = emulated_shared_memory(Config::kSmemBytes);
#else
  extern __shared__ __align__(128) unsigned char smem[];
#endif

  const int t = blockIdx.x, kvh = blockIdx.y, split = blockIdx.z;
  if (t >= p.num_tokens) {
    wait_for_previous_kernel();  // a kernel never completes before its predecessor (common.cuh)
    return;
  }
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, quad = lane % 4;  // fragment row group and column pair

  // The splits take the visible keys' kMmaTileKeys-key tiles in turn: split
  // z tiles z, z + splits, z + 2 splits, ..., and warp w the w-th 16-key
  // sub-tile of each. So where a split's keys start does not depend on the
  // context length, and in a decode batch (sequence b == token t) the pages
  // of this warp's first kStages sub-tiles are fetched beside kv_lens, not
  // one round trip after it.
  // With a sliding window the tiles start at base, the window's first
  // 16-key sub-tile (on the window's first page), instead of key 0.
  int base = 0;
  auto first_key = [&](int it) { return base + (split + it * p.num_splits) * kMmaTileKeys + warp * kMmaKeys; };
  const int guess_b = min(t, p.num_seqs - 1);
  int early_page[kStages];
#pragma unroll
  for (int it = 0; it < kStages; ++it) early_page[it] = -1;
  if constexpr (kWindow == 0) {
    const int* guess_table = p.block_tables + (long long)guess_b * p.max_blocks_per_seq;
#pragma unroll
    for (int it = 0; it < kStages; ++it) {
      const int entry = first_key(it) / kPage;
      early_page[it] = entry < p.max_blocks_per_seq ? guess_table[entry] : -1;
    }
  }
  int b, fresh;
  const int visible = visible_keys(p, t, b, fresh);
  const int window_lo = window_begin(kWindow, visible - 1);
  if constexpr (kWindow > 0) base = window_lo / kMmaKeys * kMmaKeys;
  const bool early = kWindow == 0 && b == guess_b;
  const int end = visible;
  // This warp's sub-tiles: those that start before the end.
  const int my_subs = first_key(0) < end ? (end - 1 - first_key(0)) / (p.num_splits * kMmaTileKeys) + 1 : 0;
  const int* table = p.block_tables + (long long)b * p.max_blocks_per_seq;
  const unsigned short* k_pool = static_cast<const unsigned short*>(p.k_pool);
  const unsigned short* v_pool = static_cast<const unsigned short*>(p.v_pool);
  unsigned char* const ring = smem + warp * kWarpRing;

  // This warp's sub-tile `it`: keys first_key(it) .. + 15, on one page.
  auto page_of = [&](int it) { return it < my_subs ? table[unsigned(first_key(it)) / kPage] : -1; };
  const int copy_chunk = lane % kChunks, copy_row = lane / kChunks;
  auto issue = [&](int it, int page, int stage) {
    unsigned char* const k_dst = ring + stage * 2 * kSubBytes;
    unsigned char* const v_dst = k_dst + kSubBytes;
    const int j0 = first_key(it);
    const long long base =
        (((long long)page * kPage + unsigned(j0) % kPage + copy_row) * Hkv + kvh) * D + copy_chunk * 8;
    const unsigned short* k_src = k_pool + base;
    const unsigned short* v_src = v_pool + base;
    if (j0 + kMmaKeys <= end) {  // a whole sub-tile: constant offsets from one address
#pragma unroll
      for (int i = 0; i < kMmaKeys / kRowsPerCopy; ++i) {
        const int r = copy_row + i * kRowsPerCopy;
        cp_async_16(k_dst + tile_offset(r, copy_chunk, D), k_src + i * kRowsPerCopy * Hkv * D, 16);
        cp_async_16(v_dst + tile_offset(r, copy_chunk, D), v_src + i * kRowsPerCopy * Hkv * D, 16);
      }
    } else {  // the range's last keys: rows at or past `end` become zeros
#pragma unroll
      for (int i = 0; i < kMmaKeys / kRowsPerCopy; ++i) {
        const int r = copy_row + i * kRowsPerCopy;
        const bool valid = j0 + r < end;
        cp_async_16(k_dst + tile_offset(r, copy_chunk, D), valid ? k_src + i * kRowsPerCopy * Hkv * D : k_pool,
                    valid ? 16 : 0);
        cp_async_16(v_dst + tile_offset(r, copy_chunk, D), valid ? v_src + i * kRowsPerCopy * Hkv * D : v_pool,
                    valid ? 16 : 0);
      }
    }
  };

  // The prologue's sub-tiles of keys older than this step are copied before
  // waiting on the previous kernel (launched as a programmatic dependent,
  // common.cuh): only the kernel before writes the pool, at keys from
  // `fresh` on. So under the qkv projection's tail this block already
  // streams its context; the fresh keys' sub-tile and q follow the wait.
  int issued = 0;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s >= my_subs || first_key(s) + kMmaKeys > fresh) break;
    issue(s, early ? early_page[s] : page_of(s), s);
    cp_async_commit();
    ++issued;
  }
  // No L2 prefetch of the warp's older keys here: it measured slower (docs/performance.md).
  wait_for_previous_kernel();
  allow_next_kernel();
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < issued) continue;
    if (s < my_subs) issue(s, early ? early_page[s] : page_of(s), s);
    cp_async_commit();
  }
  int page = early ? (kStages - 1 < my_subs ? early_page[kStages - 1] : -1) : page_of(kStages - 1);

  // Q's A fragments for every k-step (heads as rows, rows past the group zero), unscaled bf16.
  unsigned qa[kKSteps][4];
  {
    const unsigned short* qg = static_cast<const unsigned short*>(p.q) + ((long long)t * H + kvh * G) * D;
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int row = g + (i & 1) * 8, col = ks * 16 + quad * 2 + (i & 2) * 4;
        qa[ks][i] = row < G ? *reinterpret_cast<const unsigned*>(qg + row * D + col) : 0u;
      }
  }

  // ldmatrix lane offsets at k-step / d-block pair 0: K as the B operand of
  // S^T, V under .trans as the B operand of O.
  const int k_lane = tile_offset(ldsm_k_row(lane), ldsm_k_chunk(lane), D);
  const int v_lane = tile_offset(ldsm_a_row(lane), ldsm_a_chunk(lane), D);

  float o[kDBlocks][4];
#pragma unroll
  for (int nd = 0; nd < kDBlocks; ++nd) o[nd][0] = o[nd][1] = o[nd][2] = o[nd][3] = 0.0f;
  float m[2] = {kNoScore, kNoScore}, l[2] = {0.0f, 0.0f};  // rows g and g + 8; l summed over the quad at the end

  int read_stage = 0, write_stage = kStages - 1;
  for (int it = 0; it < my_subs; ++it) {
    cp_async_wait<kStages - 2>();
    __syncwarp();  // every lane's copies of sub-tile `it` have landed; the refilled stage is read
    const unsigned char* const kt = ring + read_stage * 2 * kSubBytes;
    const unsigned char* const vt = kt + kSubBytes;
    const int j0 = first_key(it);
    const int ahead = it + kStages - 1;
    if (ahead < my_subs) issue(ahead, page, write_stage);
    cp_async_commit();
    page = page_of(ahead + 1);
    write_stage = read_stage;
    read_stage = read_stage + 1 == kStages ? 0 : read_stage + 1;

    // S^T = Q·Kᵀ for the 16 keys (two n8 blocks), then base-2 scores.
    float sc[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
    for (int ks = 0; ks < kKSteps; ++ks) {
      unsigned kb[4];
      ldsm_x4(kt + chunk_step(k_lane, ks), kb);
      mma_bf16(sc[0], qa[ks], kb[0], kb[1]);
      mma_bf16(sc[1], qa[ks], kb[2], kb[3]);
    }
    const bool partial = j0 + kMmaKeys > end || (kWindow > 0 && j0 < window_lo);
#pragma unroll
    for (int nb = 0; nb < 2; ++nb)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        sc[nb][i] *= kScaleLog2;
        const int key = j0 + nb * 8 + quad * 2 + (i & 1);
        if (partial && (key >= end || (kWindow > 0 && key < window_lo))) sc[nb][i] = neg_inf();
      }

    // Online softmax of rows g (elements 0, 1) and g + 8 (elements 2, 3), rescaling past the slack.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = fmaxf(fmaxf(sc[0][2 * h], sc[0][2 * h + 1]), fmaxf(sc[1][2 * h], sc[1][2 * h + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      if (mx > m[h] + kRescaleSlack) {
        const float alpha = exp2_approx(m[h] - mx);
        m[h] = mx;
        l[h] *= alpha;
#pragma unroll
        for (int nd = 0; nd < kDBlocks; ++nd) {
          o[nd][2 * h] *= alpha;
          o[nd][2 * h + 1] *= alpha;
        }
      }
#pragma unroll
      for (int nb = 0; nb < 2; ++nb)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          sc[nb][2 * h + e] = exp2_approx(sc[nb][2 * h + e] - m[h]);
          l[h] += sc[nb][2 * h + e];
        }
    }

    // O += P·V: P's A fragment is S^T's C fragments of the two key blocks.
    const unsigned pa[4] = {pack_bf16x2(sc[0][0], sc[0][1]), pack_bf16x2(sc[0][2], sc[0][3]),
                            pack_bf16x2(sc[1][0], sc[1][1]), pack_bf16x2(sc[1][2], sc[1][3])};
#pragma unroll
    for (int j = 0; j < kDBlocks / 2; ++j) {
      unsigned vb[4];
      ldsm_x4_trans(vt + chunk_step(v_lane, j), vb);
      mma_bf16(o[2 * j], pa, vb[0], vb[1]);
      mma_bf16(o[2 * j + 1], pa, vb[2], vb[3]);
    }
  }
  cp_async_wait<0>();

#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
  }

  // Merge the warps through shared memory (the rings are free after the barrier), then write the partials.
  float* const merge_acc = reinterpret_cast<float*>(smem);  // [kWarps][16][D]
  float* const merge_ml = merge_acc + kWarps * 16 * D;      // [kWarps][16][2]
  __syncthreads();
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = g + 8 * h;
    if (row < G) {
#pragma unroll
      for (int nd = 0; nd < kDBlocks; ++nd) {
        merge_acc[(warp * 16 + row) * D + nd * 8 + quad * 2] = o[nd][2 * h];
        merge_acc[(warp * 16 + row) * D + nd * 8 + quad * 2 + 1] = o[nd][2 * h + 1];
      }
      if (quad == 0) {
        merge_ml[(warp * 16 + row) * 2] = m[h];
        merge_ml[(warp * 16 + row) * 2 + 1] = l[h];
      }
    }
  }
  __syncthreads();
  for (int i = tid; i < G * D; i += kThreads) {
    const int r = i / D, d = i % D;  // head of the group, dimension
    write_split_partial<kWarps>(p, merge_ml, merge_acc, r, 16, D, d,
                                ((long long)t * H + kvh * G + r) * p.num_splits + split);
  }
  if (p.split_arrivals && p.num_splits > 1)
    combine_if_last_split<G, D, kThreads>(p, t, kvh, Hkv, reinterpret_cast<float*>(smem));
}

}  // namespace kernels
}  // namespace kiln

#endif  // __CUDACC__ || __CUDACC_RTC__ || KILN_CUDA_EMULATION
