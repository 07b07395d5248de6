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
  EXPECT_EQ(parseInput("state_slots"), kStateSlots);
  EXPECT_FALSE(parseInput("tree_mask").has_value());
}

TEST(BatchInputBuffer, StagesBlockTablesAtAGraphsWiderStride) {
  // Offsets as allocate() lays them out for T_max = 4: six inputs of
  // T_max + 1 elements, then the block tables.
  BatchInputBuffer buffer;
  buffer.layOut(/*max_tokens=*/4, /*num_blocks=*/4, /*tree_nodes=*/0);
  ASSERT_EQ(buffer.offset[kBlockTables], 30);
  std::vector<int32_t> staging(size_t(buffer.elems), -1);
  buffer.staging = staging.data();
  const std::vector<int32_t> tokens{7, 8}, positions{3, 5}, slots{3, 5}, tables{1, 2, 4, 6}, starts{0, 1, 2},
      lens{4, 6}, state_slots{2, 0};
  BatchInputs in{tokens, positions, slots, tables, 2, starts, lens};
  in.state_slots = state_slots;
  EXPECT_EQ(buffer.stage(in, 4), size_t(30 + 2 * 4) * 4);  // two rows of 4: [1 2 0 0] [4 6 0 0]
  EXPECT_EQ(staging[buffer.offset[kTokens] + 1], 8);
  EXPECT_EQ(staging[buffer.offset[kKvLens] + 1], 6);
  // The state-space layers' slots, inside the one copy a forward makes.
  EXPECT_EQ(staging[buffer.offset[kStateSlots]], 2);
  EXPECT_EQ(staging[buffer.offset[kStateSlots] + 1], 0);
  EXPECT_LT(buffer.offset[kStateSlots] + 2, buffer.offset[kBlockTables]);
  EXPECT_EQ(std::vector<int32_t>(staging.begin() + 30, staging.begin() + 38),
            (std::vector<int32_t>{1, 2, 0, 0, 4, 6, 0, 0}));
  EXPECT_EQ(buffer.stage(in, 2), size_t(30 + 2 * 2) * 4);  // the batch's own stride: copied as it is
  EXPECT_EQ(std::vector<int32_t>(staging.begin() + 30, staging.begin() + 34), tables);
}

// A verify batch: the tree positions and ancestor mask staged after the
// block tables (where a plain forward's copy does not reach), one copy of
// the positions' region and the batch's mask rows.
TEST(BatchInputBuffer, StagesTheTreePositionsAndMaskAfterTheTables) {
  BatchInputBuffer buffer;
  buffer.layOut(/*max_tokens=*/8, /*num_blocks=*/2, /*tree_nodes=*/4);
  EXPECT_EQ(buffer.offset[kBlockTables], 6 * 9);
  EXPECT_EQ(buffer.offset[kTreePositions], 6 * 9 + 16);
  EXPECT_EQ(buffer.offset[kTreeMask], 6 * 9 + 16 + 9);
  EXPECT_EQ(buffer.elems, 6 * 9 + 16 + 9 + 8);  // 8 rows of 4 mask bytes
  std::vector<int32_t> staging(size_t(buffer.elems), -1);
  buffer.staging = staging.data();
  // Sequence 0: a root and two children; sequence 1: a chain of two.
  const std::vector<int32_t> tokens{5, 6, 7, 8, 9}, positions{10, 11, 11, 3, 4}, slots{10, 11, 12, 19, 20},
      tables{0, 1}, starts{0, 3, 5}, lens{13, 5}, parents{-1, 0, 0, -1, 0}, base{10, 3};
  BatchInputs in{tokens, positions, slots, tables, 1, starts, lens};
  in.parents = parents;
  in.base_positions = base;
  EXPECT_EQ(buffer.stageTree(in), size_t(9 * 4 + 5 * 4));
  EXPECT_EQ(std::vector<int32_t>(staging.begin() + buffer.offset[kTreePositions],
                                 staging.begin() + buffer.offset[kTreePositions] + 5),
            (std::vector<int32_t>{10, 11, 11, 3, 4}));
  const auto* mask = reinterpret_cast<const uint8_t*>(staging.data() + buffer.offset[kTreeMask]);
  EXPECT_EQ(std::vector<uint8_t>(mask, mask + 20), (std::vector<uint8_t>{1, 0, 0, 0, 1, 1, 0, 0, 1, 0, 1, 0,
                                                                          1, 0, 0, 0, 1, 1, 0, 0}));
  BatchInputBuffer plain;
  plain.layOut(8, 2, 0);  // no verify entry: nothing after the tables
  EXPECT_EQ(plain.elems, 6 * 9 + 16);
}

}  // namespace
}  // namespace kiln::cuda
