// Floors under batch-1 decode attention's time, measured beside it by
// kiln_attention_bench: what no decode attention kernel over the same pool
// can beat, so a shortfall against an HBM target can be split into what the
// hardware costs and what the kernel adds.
//   1. decode_attention's own grid with no token to serve: launch, wait on
//      the launch before, exit.
//   2. kv_read_floor: a kernel that only reads the same K and V rows of one
//      sequence through the same paged layout (no math), from as many SMs
//      with more bytes in flight than decode_attention holds; then the same
//      read followed by the split-KV merge decode_attention ends with (each
//      block writes a partial, counts itself in, the last block of a kv head
//      sums them). Each standalone and as a programmatic dependent of the
//      launch before that reads everything before waiting on it.
#pragma once

#include <vector>

#include "test/gpu/chain_timing.h"

namespace kiln::gpu_test {

Result<std::vector<Record>> decodeFloors(int reps, int H, int Hkv, int D, double hbm_gbps);

}  // namespace kiln::gpu_test
