#include "models/formats/gguf_file.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "models/formats/testing/gguf_writer.h"
#include "models/formats/testing/model_files.h"
#include "models/formats/testing/temp_dir.h"
#include "test/source_root.h"

namespace kiln::formats {
namespace {

using testing::GgufWriter;

constexpr uint64_t kHeaderBytes = 24;  // magic, version, tensor_count, kv_count

std::vector<uint8_t> bytesOf(const std::vector<float>& v) {
  std::vector<uint8_t> out(v.size() * 4);
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

// The one-line error from parsing `bytes` as "t.gguf".
std::string openError(const std::vector<uint8_t>& bytes) {
  auto f = GgufFile::openBuffer(bytes, "t.gguf");
  if (f.ok()) return "<opened>";
  EXPECT_EQ(f.error().message.find('\n'), std::string::npos) << f.error().message;
  return f.error().message;
}

void patchU64(std::vector<uint8_t>& bytes, size_t at, uint64_t v) {
  std::memcpy(bytes.data() + at, &v, 8);
}
void patchU32(std::vector<uint8_t>& bytes, size_t at, uint32_t v) {
  std::memcpy(bytes.data() + at, &v, 4);
}

uint64_t alignUp(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

// A small valid file with one of each metadata kind and a few tensors.
GgufWriter smallModel() {
  GgufWriter w;
  w.addString("general.architecture", "llama")
      .add("u8", testing::ggufUInt8(200))
      .add("i8", testing::ggufInt8(-100))
      .add("u16", testing::ggufUInt16(60000))
      .add("i16", testing::ggufInt16(-30000))
      .addUInt32("u32", 4000000000u)
      .addInt32("i32", -2000000000)
      .addUInt64("u64", 18000000000000000000ull)
      .add("i64", testing::ggufInt64(-9000000000000000000ll))
      .addFloat32("f32", 0.25f)
      .add("f64", testing::ggufFloat64(1e-300))
      .addBool("yes", true)
      .addBool("no", false)
      .addString("empty", "")
      .add("tokens", testing::ggufStringArray({"<s>", "", "hello world"}))
      .add("scores", testing::ggufFloat32Array({-1.5f, 0.f, 2.25f}))
      .add("types", testing::ggufInt32Array({1, -2, 3}))
      .add("nested", testing::ggufArrayOfArrays({testing::ggufStringArray({"a", "b"}),
                                                 testing::ggufStringArray({})}));
  w.addTensor("blk.0.attn_norm.weight", {4}, ElementType::F32, bytesOf({1, 2, 3, 4}));
  w.addTensorFilled("blk.0.attn_q.weight", {2, 64}, ElementType::Q4_0);
  w.addTensorFilled("blk.0.ffn_up.weight", {3, 256}, ElementType::Q4_K);
  w.addTensorFilled("token_embd.weight", {5, 32}, ElementType::Q8_0);
  w.addTensorFilled("half", {3, 1, 2, 7}, ElementType::F16);
  return w;
}

TEST(GgufFileTest, RoundTripsEveryValueTypeAndTensor) {
  std::vector<uint8_t> bytes = smallModel().serialize();
  auto f = GgufFile::openBuffer(bytes, "t.gguf");
  ASSERT_TRUE(f.ok()) << f.error().message;
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->alignment(), 32u);
  EXPECT_EQ(f->metadataKeys().size(), 18u);
  EXPECT_EQ(f->metadataKeys().front(), "general.architecture");
  EXPECT_EQ(*f->getString("general.architecture"), "llama");
  EXPECT_EQ(*f->getUInt("u8"), 200u);
  EXPECT_EQ(*f->getInt("i8"), -100);
  EXPECT_EQ(*f->getUInt("u16"), 60000u);
  EXPECT_EQ(*f->getInt("i16"), -30000);
  EXPECT_EQ(*f->getUInt("u32"), 4000000000u);
  EXPECT_EQ(*f->getInt("u32"), 4000000000);
  EXPECT_EQ(*f->getInt("i32"), -2000000000);
  EXPECT_EQ(*f->getUInt("u64"), 18000000000000000000ull);
  EXPECT_EQ(*f->getInt("i64"), -9000000000000000000ll);
  EXPECT_EQ(*f->getFloat("f32"), 0.25);
  EXPECT_EQ(*f->getFloat("f64"), 1e-300);
  EXPECT_TRUE(*f->getBool("yes"));
  EXPECT_FALSE(*f->getBool("no"));
  EXPECT_EQ(*f->getString("empty"), "");
  EXPECT_EQ(*f->getStringArray("tokens"), (std::vector<std::string>{"<s>", "", "hello world"}));
  EXPECT_EQ(*f->getFloatArray("scores"), (std::vector<float>{-1.5f, 0.f, 2.25f}));
  EXPECT_EQ(*f->getIntArray("types"), (std::vector<int32_t>{1, -2, 3}));
  const GgufValue* nested = f->find("nested");
  ASSERT_NE(nested, nullptr);
  EXPECT_EQ(nested->typeName(), "array[array[string]]");
  ASSERT_EQ(nested->array_values.size(), 2u);
  EXPECT_EQ(nested->array_values[0].array_strings, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(nested->array_values[1].array_strings.empty());
  EXPECT_EQ(f->find("absent"), nullptr);

  ASSERT_EQ(f->tensors().size(), 5u);
  const TensorInfo* norm = f->findTensor("blk.0.attn_norm.weight");
  ASSERT_NE(norm, nullptr);
  EXPECT_EQ(norm->type, ElementType::F32);
  EXPECT_EQ(norm->shape, (std::vector<int64_t>{4}));
  EXPECT_EQ(norm->offset, f->dataOffset());
  EXPECT_EQ(f->dataOffset() % 32, 0u);
  EXPECT_EQ(f->tensorData(*norm).size(), 16u);
  float values[4];
  std::memcpy(values, f->tensorData(*norm).data(), 16);
  EXPECT_EQ(values[3], 4.f);
  // Shapes come back outermost-first, as written.
  EXPECT_EQ(f->findTensor("blk.0.attn_q.weight")->shape, (std::vector<int64_t>{2, 64}));
  EXPECT_EQ(f->findTensor("blk.0.attn_q.weight")->size_bytes, 2u * 2 * 18);
  EXPECT_EQ(f->findTensor("blk.0.ffn_up.weight")->size_bytes, 3u * 144);
  EXPECT_EQ(f->findTensor("token_embd.weight")->size_bytes, 5u * 34);
  EXPECT_EQ(f->findTensor("half")->shape, (std::vector<int64_t>{3, 1, 2, 7}));
  for (const TensorInfo& t : f->tensors()) {
    EXPECT_EQ(t.offset % 32, 0u) << t.name;
    EXPECT_EQ(f->tensorData(t).size(), t.size_bytes) << t.name;
  }
  EXPECT_EQ(f->findTensor("nope"), nullptr);
}

TEST(GgufFileTest, MetadataBytesAreTheEntriesAsWritten) {
  GgufWriter w;
  w.addString("general.architecture", "llama").addUInt32("llama.block_count", 3);
  const std::vector<uint8_t> with_tensor =
      GgufWriter(w).addTensor("t", {2}, ElementType::F32, bytesOf({1, 2})).serialize();
  const std::vector<uint8_t> bare = w.serialize();
  auto f = GgufFile::openBuffer(with_tensor, "t.gguf");
  ASSERT_TRUE(f.ok()) << f.error().message;
  // A file without tensors is the header, then the entries (then padding).
  std::span<const uint8_t> entries = f->metadataBytes();
  ASSERT_GE(bare.size(), kHeaderBytes + entries.size());
  EXPECT_TRUE(std::equal(entries.begin(), entries.end(), bare.begin() + kHeaderBytes));
  EXPECT_EQ(entries.size(), (8 + 20 + 4 + 8 + 5) + (8 + 17 + 4 + 4));
}

TEST(GgufFileTest, VersionTwoAndCustomAlignment) {
  GgufWriter w;
  w.setVersion(2).setAlignment(64);
  w.addTensorFilled("a", {3}, ElementType::F32);
  w.addTensorFilled("b", {5}, ElementType::F32);
  std::vector<uint8_t> bytes = w.serialize();
  auto f = GgufFile::openBuffer(bytes, "t.gguf");
  ASSERT_TRUE(f.ok()) << f.error().message;
  EXPECT_EQ(f->version(), 2u);
  EXPECT_EQ(f->alignment(), 64u);
  EXPECT_EQ(f->dataOffset() % 64, 0u);
  EXPECT_EQ(f->findTensor("b")->offset, f->dataOffset() + 64);
}

TEST(GgufFileTest, NoTensorsNoMetadata) {
  std::vector<uint8_t> bytes = GgufWriter().serialize();
  EXPECT_EQ(bytes.size(), kHeaderBytes);
  auto f = GgufFile::openBuffer(bytes, "t.gguf");
  ASSERT_TRUE(f.ok()) << f.error().message;
  EXPECT_TRUE(f->tensors().empty());
  EXPECT_TRUE(f->metadataKeys().empty());
}

TEST(GgufFileTest, OpenFromDiskAndMoveKeepsMapping) {
  testing::TempDir dir;
  std::string path = dir.file("m.gguf");
  ASSERT_TRUE(smallModel().writeFile(path).ok());
  auto f = GgufFile::open(path);
  ASSERT_TRUE(f.ok()) << f.error().message;
  GgufFile moved = f.take();
  EXPECT_EQ(moved.path(), path);
  const TensorInfo* norm = moved.findTensor("blk.0.attn_norm.weight");
  ASSERT_NE(norm, nullptr);
  float first;
  std::memcpy(&first, moved.tensorData(*norm).data(), 4);
  EXPECT_EQ(first, 1.f);
  EXPECT_EQ(norm->file, path);
}

TEST(GgufFileTest, MissingFile) {
  auto f = GgufFile::open("/nonexistent/x.gguf");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.error().message, "/nonexistent/x.gguf: cannot open: No such file or directory");
}

TEST(GgufFileTest, GetterErrorsNameKeyAndTypes) {
  GgufWriter w;
  w.addInt32("neg", -3)
      .addUInt64("huge", ~0ull)
      .addUInt32("n", 7)
      .addString("s", "x")
      .add("ints", testing::ggufInt32Array({1}))
      .add("big", testing::ggufUInt32Array({1, 4000000000u}))
      .add("f64s", testing::ggufScalarArray(GgufValueType::kFloat64, 1,
                                            {0, 0, 0, 0, 0, 0, 0xf0, 0x3f}));  // 1.0
  std::vector<uint8_t> bytes = w.serialize();
  auto f = GgufFile::openBuffer(bytes, "t.gguf");
  ASSERT_TRUE(f.ok()) << f.error().message;
  EXPECT_EQ(f->getString("nope").error().message, "t.gguf: metadata 'nope' not found");
  EXPECT_EQ(f->getUInt("neg").error().message,
            "t.gguf: metadata 'neg' is -3 (int32), expected a non-negative integer");
  EXPECT_EQ(*f->getInt("neg"), -3);
  EXPECT_EQ(f->getInt("huge").error().message,
            "t.gguf: metadata 'huge' is 18446744073709551615 (uint64), expected a value that "
            "fits int64");
  EXPECT_EQ(f->getFloat("n").error().message,
            "t.gguf: metadata 'n' is uint32, expected float32 or float64");
  EXPECT_EQ(f->getBool("n").error().message, "t.gguf: metadata 'n' is uint32, expected bool");
  EXPECT_EQ(f->getString("n").error().message, "t.gguf: metadata 'n' is uint32, expected string");
  EXPECT_EQ(f->getUInt("s").error().message,
            "t.gguf: metadata 's' is string, expected an unsigned integer");
  EXPECT_EQ(f->getStringArray("ints").error().message,
            "t.gguf: metadata 'ints' is array[int32], expected array[string]");
  EXPECT_EQ(f->getFloatArray("ints").error().message,
            "t.gguf: metadata 'ints' is array[int32], expected array[float32] or array[float64]");
  EXPECT_EQ(f->getIntArray("s").error().message,
            "t.gguf: metadata 's' is string, expected an integer array");
  EXPECT_EQ(f->getIntArray("big").error().message,
            "t.gguf: metadata 'big' element 1 is 4000000000, expected a value that fits int32");
  EXPECT_EQ(*f->getFloatArray("f64s"), (std::vector<float>{1.f}));
}

//===----------------------------------------------------------------------===//
// Bad input: each case asserts the whole one-line message.
//===----------------------------------------------------------------------===//

TEST(GgufFileBadInputTest, EveryTruncationFails) {
  std::vector<uint8_t> full = smallModel().serialize();
  ASSERT_TRUE(GgufFile::openBuffer(full, "t.gguf").ok());
  for (size_t n = 0; n < full.size(); ++n) {
    std::vector<uint8_t> prefix(full.begin(), full.begin() + n);
    std::string error = openError(prefix);
    ASSERT_EQ(error.rfind("t.gguf: ", 0), 0u) << "prefix " << n << ": " << error;
  }
  EXPECT_EQ(openError({}), "t.gguf: magic at offset 0 needs 4 bytes, but the file ends at 0");
  EXPECT_EQ(openError({full.begin(), full.begin() + 2}),
            "t.gguf: magic at offset 0 needs 4 bytes, but the file ends at 2");
  EXPECT_EQ(openError({full.begin(), full.begin() + 6}),
            "t.gguf: version at offset 4 needs 4 bytes, but the file ends at 6");
  EXPECT_EQ(openError({full.begin(), full.begin() + 10}),
            "t.gguf: tensor_count at offset 8 needs 8 bytes, but the file ends at 10");
  // A truncated file cannot hold the tensor infos the header promises.
  EXPECT_EQ(openError({full.begin(), full.begin() + 40}),
            "t.gguf: tensor_count 5 is impossible: 16 bytes left in the file hold at most 0 "
            "tensor infos");
  // Without tensors, cuts inside metadata name the field being read.
  std::vector<uint8_t> meta = GgufWriter().addString("general.architecture", "llama").serialize();
  EXPECT_EQ(openError({meta.begin(), meta.begin() + 27}),
            "t.gguf: kv_count 1 is impossible: 3 bytes left in the file hold at most 0 metadata "
            "entries");
  // Inside the key "general.architecture" (20 bytes at offset 32).
  EXPECT_EQ(openError({meta.begin(), meta.begin() + 40}),
            "t.gguf: metadata #0 key at offset 24 has length 20, but only 8 bytes are left in "
            "the file");
  EXPECT_EQ(openError({meta.begin(), meta.begin() + 54}),
            "t.gguf: metadata 'general.architecture' value type at offset 52 needs 4 bytes, but "
            "the file ends at 54");
  EXPECT_EQ(openError({meta.begin(), meta.begin() + 60}),
            "t.gguf: metadata 'general.architecture' string value at offset 56 needs 8 bytes, "
            "but the file ends at 60");
  EXPECT_EQ(openError({meta.begin(), meta.end() - 1}),
            "t.gguf: metadata 'general.architecture' string value at offset 56 has length 5, but "
            "only 4 bytes are left in the file");
  // The last byte of the last tensor's data.
  auto f = GgufFile::openBuffer(full, "t.gguf");
  const TensorInfo* last = f->findTensor("half");
  EXPECT_EQ(openError({full.begin(), full.end() - 1}),
            fmt::format("t.gguf: tensor 'half': data [{}, {}) extends past end of file ({} bytes)",
                        last->offset, last->offset + 84, full.size() - 1));
}

TEST(GgufFileBadInputTest, TruncatedFileOnDisk) {
  testing::TempDir dir;
  GgufWriter w;
  w.addString("general.architecture", "llama");
  w.addTensorFilled("blk.0.attn_q.weight", {8, 4}, ElementType::F32);
  std::vector<uint8_t> full = w.serialize();
  uint64_t data_start = full.size() - 128;
  std::vector<uint8_t> cut(full.begin(), full.end() - 16);
  std::string path = dir.file("model.gguf");
  ASSERT_TRUE(testing::writeBytes(path, cut).ok());
  auto f = GgufFile::open(path);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.error().message,
            fmt::format("{}: tensor 'blk.0.attn_q.weight': data [{}, {}) extends past end of "
                        "file ({} bytes)",
                        path, data_start, data_start + 128, full.size() - 16));
}

TEST(GgufFileBadInputTest, WrongMagic) {
  EXPECT_EQ(openError(GgufWriter().setMagic(0x12345678).serialize()),
            "t.gguf: bad magic 0x12345678, expected 'GGUF' (0x46554747)");
  // "GGML", the pre-GGUF format.
  EXPECT_EQ(openError(GgufWriter().setMagic(0x4c4d4747).serialize()),
            "t.gguf: bad magic 0x4c4d4747, expected 'GGUF' (0x46554747)");
}

TEST(GgufFileBadInputTest, UnsupportedVersion) {
  EXPECT_EQ(openError(GgufWriter().setVersion(1).serialize()),
            "t.gguf: unsupported GGUF version 1, expected 2 or 3");
  EXPECT_EQ(openError(GgufWriter().setVersion(4).serialize()),
            "t.gguf: unsupported GGUF version 4, expected 2 or 3");
  EXPECT_EQ(openError(GgufWriter().setVersion(0x03000000).serialize()),
            "t.gguf: unsupported GGUF version 50331648, expected 2 or 3 (this looks like a "
            "big-endian file)");
}

TEST(GgufFileBadInputTest, HugeCounts) {
  EXPECT_EQ(openError(GgufWriter().overrideTensorCount(uint64_t{1} << 62).serialize()),
            "t.gguf: tensor_count 4611686018427387904 is impossible: 0 bytes left in the file "
            "hold at most 0 tensor infos");
  EXPECT_EQ(openError(GgufWriter().addUInt32("a", 1).overrideKvCount(~0ull).serialize()),
            "t.gguf: kv_count 18446744073709551615 is impossible: 17 bytes left in the file "
            "hold at most 1 metadata entries");
  // Array count: header, key "a" (8 + 1), value type (4), element type (4), count at 41.
  std::vector<uint8_t> bytes = GgufWriter().add("a", testing::ggufInt32Array({1, 2})).serialize();
  patchU64(bytes, 41, uint64_t{1} << 40);
  EXPECT_EQ(openError(bytes),
            "t.gguf: metadata 'a' array count 1099511627776 at offset 41 needs at least 4 bytes "
            "per int32 element, but only 8 bytes are left in the file");
  bytes = GgufWriter().add("a", testing::ggufStringArray({"x"})).serialize();
  patchU64(bytes, 41, ~0ull);
  EXPECT_EQ(openError(bytes),
            "t.gguf: metadata 'a' array count 18446744073709551615 at offset 41 needs at least "
            "8 bytes per string element, but only 9 bytes are left in the file");
}

TEST(GgufFileBadInputTest, StringLengthPastEnd) {
  // Header, key "k" (8 + 1), type (4): the value's length is at 37.
  std::vector<uint8_t> bytes = GgufWriter().addString("k", "v").serialize();
  patchU64(bytes, 37, 1000);
  EXPECT_EQ(openError(bytes),
            "t.gguf: metadata 'k' string value at offset 37 has length 1000, but only 1 bytes "
            "are left in the file");
  patchU64(bytes, 37, ~0ull);
  EXPECT_EQ(openError(bytes),
            "t.gguf: metadata 'k' string value at offset 37 has length 18446744073709551615, "
            "but only 1 bytes are left in the file");
  bytes = GgufWriter().addString("k", "v").serialize();
  patchU64(bytes, 24, 5000);  // the key's own length
  EXPECT_EQ(openError(bytes),
            "t.gguf: metadata #0 key at offset 24 has length 5000, but only 14 bytes are left in "
            "the file");
}

TEST(GgufFileBadInputTest, UnknownValueType) {
  std::vector<uint8_t> bytes = GgufWriter().addString("k", "v").serialize();
  patchU32(bytes, 33, 13);
  EXPECT_EQ(openError(bytes),
            "t.gguf: metadata 'k' value type is 13, expected a GGUF value type id 0..12");
  bytes = GgufWriter().add("a", testing::ggufInt32Array({1})).serialize();
  patchU32(bytes, 37, 99);
  EXPECT_EQ(openError(bytes),
            "t.gguf: metadata 'a' array element type is 99, expected a GGUF value type id 0..12");
}

TEST(GgufFileBadInputTest, DeepNesting) {
  GgufValue v = testing::ggufInt32Array({1});
  for (int i = 0; i < 7; ++i) v = testing::ggufArrayOfArrays({v});
  EXPECT_EQ(openError(GgufWriter().add("deep", v).serialize()), "<opened>");  // 8 levels
  v = testing::ggufArrayOfArrays({v});
  EXPECT_EQ(openError(GgufWriter().add("deep", v).serialize()),
            "t.gguf: metadata 'deep[0][0][0][0][0][0][0][0]': arrays nested deeper than 8 levels");
}

TEST(GgufFileBadInputTest, DuplicateNames) {
  EXPECT_EQ(openError(GgufWriter().addUInt32("k", 1).addUInt32("k", 2).serialize()),
            "t.gguf: metadata key 'k' appears twice");
  GgufWriter w;
  w.addTensorFilled("w", {8}, ElementType::F32).addTensorFilled("w", {8}, ElementType::F32);
  EXPECT_EQ(openError(w.serialize()), "t.gguf: tensor name 'w' appears twice");
}

TEST(GgufFileBadInputTest, BadAlignment) {
  EXPECT_EQ(openError(GgufWriter().setAlignment(48).serialize()),
            "t.gguf: general.alignment is 48, expected a power of two no larger than 2^30");
  EXPECT_EQ(openError(GgufWriter().addUInt32("general.alignment", 0).serialize()),
            "t.gguf: general.alignment is 0, expected a power of two no larger than 2^30");
  EXPECT_EQ(openError(GgufWriter().addString("general.alignment", "32").serialize()),
            "t.gguf: metadata 'general.alignment' is string, expected an unsigned integer");
}

TEST(GgufFileBadInputTest, BadTensorInfos) {
  auto one = [](std::vector<uint64_t> ne, uint32_t type, uint64_t offset) {
    return openError(GgufWriter().addRawTensorInfo("w", std::move(ne), type, offset).serialize());
  };
  EXPECT_EQ(one({32}, 4, 0), "t.gguf: tensor 'w': unknown ggml type id 4");
  EXPECT_EQ(one({32}, 1000, 0), "t.gguf: tensor 'w': unknown ggml type id 1000");
  EXPECT_EQ(one({1, 2, 3, 4, 5}, 0, 0), "t.gguf: tensor 'w': n_dims is 5, expected at most 4");
  EXPECT_EQ(one({8, 0}, 0, 0), "t.gguf: tensor 'w': ne[1] is 0, expected a positive size");
  EXPECT_EQ(one({~0ull}, 0, 0),
            "t.gguf: tensor 'w': ne[0] is 18446744073709551615, expected a positive size");
  EXPECT_EQ(one({uint64_t{1} << 32, uint64_t{1} << 32}, 0, 0),
            "t.gguf: tensor 'w': element count of shape [4294967296, 4294967296] overflows int64");
  EXPECT_EQ(one({uint64_t{1} << 62}, 0, 0),
            "t.gguf: tensor 'w': 4611686018427387904 elements of F32 overflow a 64-bit byte "
            "count");
  EXPECT_EQ(one({33, 2}, 2, 0),
            "t.gguf: tensor 'w': innermost dimension 33 is not a multiple of the Q4_0 block size "
            "32");
  // K-quant rows are whole 256-element super-blocks, even when the tensor's
  // element count is (2 rows of 128 would be 256 elements).
  EXPECT_EQ(one({128, 2}, 12, 0),
            "t.gguf: tensor 'w': innermost dimension 128 is not a multiple of the Q4_K block size "
            "256");
  EXPECT_EQ(one({384, 2}, 14, 0),
            "t.gguf: tensor 'w': innermost dimension 384 is not a multiple of the Q6_K block size "
            "256");
  EXPECT_EQ(one({8}, 0, 4), "t.gguf: tensor 'w': offset 4 is not a multiple of the alignment 32");

  // Offset past the end, including one whose end overflows 64 bits.
  std::vector<uint8_t> bytes = GgufWriter().addRawTensorInfo("w", {8}, 0, 1024).serialize();
  uint64_t data_start = alignUp(bytes.size(), 32);
  EXPECT_EQ(openError(bytes),
            fmt::format("t.gguf: tensor 'w': data [{}, {}) extends past end of file ({} bytes)",
                        data_start + 1024, data_start + 1024 + 32, bytes.size()));
  uint64_t far = ~0ull - 31;  // aligned, and data_start + far wraps
  bytes = GgufWriter().addRawTensorInfo("w", {8}, 0, far).serialize();
  EXPECT_EQ(openError(bytes),
            fmt::format("t.gguf: tensor 'w': data [{}, {}) extends past end of file ({} bytes)",
                        static_cast<unsigned __int128>(data_start) + far,
                        static_cast<unsigned __int128>(data_start) + far + 32, bytes.size()));
}

TEST(GgufFileBadInputTest, OverlappingTensors) {
  GgufWriter w;
  w.addTensorFilled("a", {16}, ElementType::F32);  // 64 bytes at data offset 0
  w.addRawTensorInfo("b", {8}, 0, 32);
  std::vector<uint8_t> bytes = w.serialize();
  uint64_t ds = bytes.size() - 64;
  EXPECT_EQ(openError(bytes), fmt::format("t.gguf: tensors 'a' [{}, {}) and 'b' [{}, {}) overlap",
                                          ds, ds + 64, ds + 32, ds + 64));
}

TEST(GgufFileBadInputTest, NamesInMessagesAreEscaped) {
  // Fuzzer finding: a key holding a newline split the "one line" error.
  std::vector<uint8_t> bytes = GgufWriter().addString("a\nb", "v").serialize();
  patchU32(bytes, 35, 77);  // the value type, after the 3-byte key
  EXPECT_EQ(openError(bytes),
            "t.gguf: metadata 'a\\x0ab' value type is 77, expected a GGUF value type id 0..12");
  std::string long_name(300, 'n');
  GgufWriter w;
  w.addRawTensorInfo(long_name, {8}, 4, 0);
  EXPECT_EQ(openError(w.serialize()),
            "t.gguf: tensor '" + std::string(100, 'n') + "...(300 bytes)': unknown ggml type id 4");
}

// Inputs the fuzzer found (test/bad-input/formats/gguf/): each must fail with
// one line that names the file.
TEST(GgufFileBadInputTest, FuzzerRegressions) {
  const std::filesystem::path dir =
      std::filesystem::path(checkoutPath("test/bad-input/formats/gguf"));
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    SCOPED_TRACE(entry.path().string());
    auto f = GgufFile::open(entry.path().string());
    ASSERT_FALSE(f.ok());
    EXPECT_EQ(f.error().message.rfind(entry.path().string() + ": ", 0), 0u) << f.error().message;
    EXPECT_EQ(f.error().message.find('\n'), std::string::npos) << f.error().message;
    ++count;
  }
  EXPECT_GT(count, 0);
}

//===----------------------------------------------------------------------===//
// The real SmolLM2 file. Expected values are the Python `gguf` package's view
// of it (GGUFReader), not this reader's.
//===----------------------------------------------------------------------===//

TEST(GgufFileRealModelTest, SmolLM2) {
  const std::string path = testing::smollm2GgufPath();
  KILN_REQUIRE_MODEL_FILE(path);
  auto f = GgufFile::open(path);
  ASSERT_TRUE(f.ok()) << f.error().message;
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->fileSize(), 98362432u);
  EXPECT_EQ(f->metadataKeys().size(), 33u);
  EXPECT_EQ(f->tensors().size(), 272u);
  EXPECT_EQ(f->dataOffset(), 1785664u);
  EXPECT_EQ(*f->getString("general.architecture"), "llama");
  EXPECT_EQ(*f->getUInt("llama.block_count"), 30u);
  EXPECT_EQ(*f->getUInt("llama.context_length"), 8192u);
  EXPECT_EQ(*f->getUInt("llama.embedding_length"), 576u);
  EXPECT_EQ(*f->getUInt("llama.feed_forward_length"), 1536u);
  EXPECT_EQ(*f->getUInt("llama.attention.head_count"), 9u);
  EXPECT_EQ(*f->getUInt("llama.attention.head_count_kv"), 3u);
  EXPECT_EQ(*f->getFloat("llama.rope.freq_base"), 100000.0);
  EXPECT_FLOAT_EQ(*f->getFloat("llama.attention.layer_norm_rms_epsilon"), 1e-5f);
  EXPECT_EQ(*f->getString("tokenizer.ggml.model"), "gpt2");
  EXPECT_FALSE(*f->getBool("tokenizer.ggml.add_bos_token"));
  EXPECT_EQ(*f->getUInt("tokenizer.ggml.eos_token_id"), 2u);
  auto tokens = f->getStringArray("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens.ok());
  ASSERT_EQ(tokens->size(), 49152u);
  EXPECT_EQ((*tokens)[0], "<|endoftext|>");
  EXPECT_EQ((*tokens)[2], "<|im_end|>");
  auto merges = f->getStringArray("tokenizer.ggml.merges");
  ASSERT_EQ(merges->size(), 48900u);
  EXPECT_EQ((*merges)[0], "\xC4\xA0 t");  // "Ġ t"
  auto token_type = f->getIntArray("tokenizer.ggml.token_type");
  ASSERT_EQ(token_type->size(), 49152u);
  EXPECT_EQ((*token_type)[0], 3);
  EXPECT_EQ((*token_type)[17], 1);
  EXPECT_EQ(f->find("general.languages")->typeName(), "array[string]");

  int q4_1 = 0, f32 = 0, q8_0 = 0;
  for (const TensorInfo& t : f->tensors()) {
    q4_1 += t.type == ElementType::Q4_1;
    f32 += t.type == ElementType::F32;
    q8_0 += t.type == ElementType::Q8_0;
  }
  EXPECT_EQ(q4_1, 210);
  EXPECT_EQ(f32, 61);
  EXPECT_EQ(q8_0, 1);

  const TensorInfo* embd = f->findTensor("token_embd.weight");
  ASSERT_NE(embd, nullptr);
  EXPECT_EQ(embd->type, ElementType::Q8_0);
  EXPECT_EQ(embd->shape, (std::vector<int64_t>{49152, 576}));
  EXPECT_EQ(embd->offset, 1785664u);
  EXPECT_EQ(embd->size_bytes, 30081024u);
  auto data = f->tensorData(*embd);
  const uint8_t expected_head[] = {0x32, 0x19, 0xd6, 0x0d, 0x13, 0xf7, 0xe5, 0xee};
  ASSERT_EQ(data.size(), 30081024u);
  EXPECT_EQ(std::memcmp(data.data(), expected_head, 8), 0);

  const TensorInfo* down = f->findTensor("blk.29.ffn_down.weight");
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(down->type, ElementType::Q4_1);
  EXPECT_EQ(down->shape, (std::vector<int64_t>{576, 1536}));
  EXPECT_EQ(down->offset, 80630848u);
  EXPECT_EQ(down->size_bytes, 552960u);
  const uint8_t down_head[] = {0xe2, 0x29, 0xd8, 0xb5, 0xf2, 0x9c, 0x4c, 0xd9};
  EXPECT_EQ(std::memcmp(f->tensorData(*down).data(), down_head, 8), 0);

  const TensorInfo* out_norm = f->findTensor("output_norm.weight");
  ASSERT_NE(out_norm, nullptr);
  EXPECT_EQ(out_norm->offset + out_norm->size_bytes, f->fileSize());
  EXPECT_EQ(f->findTensor("output.weight"), nullptr);
}

}  // namespace
}  // namespace kiln::formats
