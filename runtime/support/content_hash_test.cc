#include "runtime/support/content_hash.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace kiln {
namespace {

namespace fs = std::filesystem;

TEST(Fnv1a64, KnownValues) {
  EXPECT_EQ(fnv1a64(""), 0xcbf29ce484222325ull);  // the offset basis
  EXPECT_EQ(fnv1a64("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(fnv1a64("foobar"), 0x85944171f73967e8ull);
  Fnv1a64 h;
  h.add("foo");
  h.add("bar");
  EXPECT_EQ(h.hex(), "85944171f73967e8");
}

class SampledHashTest : public ::testing::Test {
 protected:
  void SetUp() override { path_ = fs::temp_directory_path() / fmt::format("kiln_sampled_hash_{}", ::getpid()); }
  void TearDown() override { fs::remove(path_); }
  void write(uint64_t size) {
    std::ofstream out(path_, std::ios::binary | std::ios::trunc);
    for (uint64_t i = 0; i < size; ++i) out.put(char((i * 131) >> 7));
  }
  std::string hash() {
    auto h = sampledContentHash(path_.string());
    EXPECT_TRUE(h.ok()) << h.error().message;
    return h.ok() ? *h : "";
  }
  void flip(uint64_t offset) {
    std::fstream f(path_, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(std::streamoff(offset));
    char c = 0;
    f.read(&c, 1);
    f.seekp(std::streamoff(offset));
    c = char(c ^ 1);
    f.write(&c, 1);
  }
  fs::path path_;
};

TEST_F(SampledHashTest, ASmallFileIsHashedWhole) {
  write(100000);
  const std::string before = hash();
  EXPECT_EQ(before.size(), 16u);
  flip(54321);
  EXPECT_NE(hash(), before);
}

// Past kSampledWholeBytes: the edges and the sampled blocks count, the bytes
// between them do not (the documented price of reading ~6 MiB, not all).
TEST_F(SampledHashTest, ALargeFileIsSampled) {
  const uint64_t size = kSampledWholeBytes + (3ull << 20);
  write(size);
  const std::string original = hash();
  flip(10);  // in the first MiB
  EXPECT_NE(hash(), original);
  flip(10);
  EXPECT_EQ(hash(), original);
  flip(size - 10);  // in the last MiB
  EXPECT_NE(hash(), original);
  flip(size - 10);
  // Block 1 of the 64 starts at 1 MiB + (size - 2 MiB - 64 KiB) / 63.
  const uint64_t block1 = (1ull << 20) + (size - (2ull << 20) - (64ull << 10)) / 63;
  flip(block1 + 100);
  EXPECT_NE(hash(), original);
  flip(block1 + 100);
  flip(block1 - 100);  // between block 0 and block 1: not read
  EXPECT_EQ(hash(), original);
}

TEST_F(SampledHashTest, AMissingFileIsAnError) {
  auto h = sampledContentHash("/nonexistent/model.gguf");
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.error().message, "/nonexistent/model.gguf: cannot open: No such file or directory");
}

}  // namespace
}  // namespace kiln
