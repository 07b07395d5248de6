// The batch-input buffer's host side (device_memory.h): input names and the
// packing into pinned staging at fixed offsets, on host memory: no GPU needed.
#include "runtime/cuda/executor/device_memory.h"

#include <gtest/gtest.h>

#include <vector>

namespace kiln::cuda {
namespace {

TEST(BatchInputBuffer, NamesTheInputsTheExecutorProvides) {
  EXPECT_EQ(parseInput("slot_mapping"), kSlotMapping);
  EXPECT_EQ(parseInput("block_tables"), kBlockTables);
  EXPECT_FALSE(parseInput("tree_mask").has_value());
}

TEST(BatchInputBuffer, StagesBlockTablesAtAGraphsWiderStride) {
  // Offsets as allocate() lays them out for T_max = 4: five inputs of
  // T_max + 1 elements, then the block tables.
  BatchInputBuffer buffer;
  int64_t at = 0;
  for (int id : {kTokens, kPositions, kSlotMapping, kQueryStart, kKvLens}) {
    buffer.offset[id] = at;
    at += 5;
  }
  buffer.offset[kBlockTables] = at;  // 25
  std::vector<int32_t> staging(25 + 16, -1);
  buffer.staging = staging.data();
  const std::vector<int32_t> tokens{7, 8}, positions{3, 5}, slots{3, 5}, tables{1, 2, 4, 6}, starts{0, 1, 2},
      lens{4, 6};
  BatchInputs in{tokens, positions, slots, tables, 2, starts, lens};
  EXPECT_EQ(buffer.stage(in, 4), size_t(25 + 2 * 4) * 4);  // two rows of 4: [1 2 0 0] [4 6 0 0]
  EXPECT_EQ(staging[buffer.offset[kTokens] + 1], 8);
  EXPECT_EQ(staging[buffer.offset[kKvLens] + 1], 6);
  EXPECT_EQ(std::vector<int32_t>(staging.begin() + 25, staging.begin() + 33),
            (std::vector<int32_t>{1, 2, 0, 0, 4, 6, 0, 0}));
  EXPECT_EQ(buffer.stage(in, 2), size_t(25 + 2 * 2) * 4);  // the batch's own stride: copied as it is
  EXPECT_EQ(std::vector<int32_t>(staging.begin() + 25, staging.begin() + 29), tables);
}

}  // namespace
}  // namespace kiln::cuda
