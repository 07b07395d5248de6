#include "models/formats/safetensors_file.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "models/formats/testing/gguf_writer.h"
#include "models/formats/testing/safetensors_writer.h"
#include "models/formats/testing/temp_dir.h"

namespace kiln::formats {
namespace {

using testing::rawSafetensors;
using testing::SafetensorsWriter;

std::string openError(const std::vector<uint8_t>& bytes, OpenMode mode = OpenMode::kWithData) {
  auto f = SafetensorsFile::openBuffer(bytes, "t.safetensors", mode);
  if (f.ok()) return "<opened>";
  EXPECT_EQ(f.error().message.find('\n'), std::string::npos) << f.error().message;
  return f.error().message;
}

std::vector<uint8_t> rawHeader(const std::string& json) {
  return rawSafetensors(json.size(), json);
}

void writeText(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

TEST(SafetensorsFileTest, ReadsTensorsMetadataAndData) {
  SafetensorsWriter w;
  w.addMetadata("format", "pt");
  w.addTensor("a", ElementType::F32, {2}, {0, 0, 0x80, 0x3f, 0, 0, 0, 0x40});  // 1.0, 2.0
  w.addTensorFilled("b", ElementType::BF16, {3, 4});
  w.addTensorFilled("mask", ElementType::BOOL, {5});
  w.addTensorFilled("scale", ElementType::F8_E4M3, {2, 2});
  w.addTensorFilled("empty", ElementType::I64, {0, 7});
  std::vector<uint8_t> bytes = w.serialize();
  auto f = SafetensorsFile::openBuffer(bytes, "t.safetensors", OpenMode::kWithData);
  ASSERT_TRUE(f.ok()) << f.error().message;
  EXPECT_EQ(f->metadata().at("format"), "pt");
  EXPECT_EQ(f->dataOffset(), 8 + w.headerJson().size());
  EXPECT_EQ(f->dataOffset() % 8, 0u);
  ASSERT_EQ(f->tensors().size(), 5u);
  const TensorInfo* a = f->findTensor("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->type, ElementType::F32);
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2}));
  EXPECT_EQ(a->offset, f->dataOffset());
  auto data = f->tensorData(*a);
  ASSERT_TRUE(data.ok());
  float v[2];
  std::memcpy(v, data->data(), 8);
  EXPECT_EQ(v[1], 2.f);
  const TensorInfo* b = f->findTensor("b");
  EXPECT_EQ(b->shape, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(b->size_bytes, 24u);
  EXPECT_EQ(b->offset, f->dataOffset() + 8);
  EXPECT_EQ(f->findTensor("mask")->type, ElementType::BOOL);
  EXPECT_EQ(f->findTensor("scale")->type, ElementType::F8_E4M3);
  EXPECT_EQ(f->findTensor("empty")->size_bytes, 0u);
  EXPECT_EQ(f->findTensor("zzz"), nullptr);
}

TEST(SafetensorsFileTest, HeaderOnlyFile) {
  testing::TempDir dir;
  SafetensorsWriter w;
  w.addTensorFilled("w", ElementType::BF16, {4096, 4096});
  std::string path = dir.file("h.safetensors");
  ASSERT_TRUE(w.writeFile(path, /*header_only=*/true).ok());
  EXPECT_EQ(std::filesystem::file_size(path), 8 + w.headerJson().size());

  auto header_only = SafetensorsFile::open(path, OpenMode::kHeaderOnly);
  ASSERT_TRUE(header_only.ok()) << header_only.error().message;
  const TensorInfo* t = header_only->findTensor("w");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->size_bytes, 4096u * 4096 * 2);
  EXPECT_EQ(t->file, path);
  EXPECT_EQ(header_only->tensorData(*t).error().message,
            path + ": tensor 'w': data requested from a file opened header-only");

  auto with_data = SafetensorsFile::open(path, OpenMode::kWithData);
  ASSERT_FALSE(with_data.ok());
  EXPECT_EQ(with_data.error().message,
            path + ": tensor 'w': data [0, 33554432) extends past end of file (0 data bytes "
                   "after the header)");
}

TEST(SafetensorsFileTest, WithDataFromDisk) {
  testing::TempDir dir;
  SafetensorsWriter w;
  w.addTensorFilled("x", ElementType::F16, {3, 5});
  std::string path = dir.file("m.safetensors");
  ASSERT_TRUE(w.writeFile(path).ok());
  auto f = SafetensorsFile::open(path, OpenMode::kWithData);
  ASSERT_TRUE(f.ok()) << f.error().message;
  SafetensorsFile moved = f.take();
  auto data = moved.tensorData(*moved.findTensor("x"));
  ASSERT_TRUE(data.ok());
  EXPECT_EQ(data->size(), 30u);
  EXPECT_EQ((*data)[1], static_cast<uint8_t>(11 + 7));  // the writer's fill pattern
}

TEST(SafetensorsFileBadInputTest, HeaderLength) {
  EXPECT_EQ(openError({1, 2, 3}),
            "t.safetensors: file is 3 bytes, too short for the 8-byte header length");
  EXPECT_EQ(openError(rawSafetensors(1000, "{}")),
            "t.safetensors: header length 1000 exceeds the 2 bytes after the 8-byte length field");
  EXPECT_EQ(openError(rawSafetensors(~0ull, "{}")),
            "t.safetensors: header length 18446744073709551615 exceeds the 100000000-byte limit");
  EXPECT_EQ(openError(rawSafetensors(0, "")),
            "t.safetensors: header length 0 is too short for a JSON object");
}

TEST(SafetensorsFileBadInputTest, EveryTruncationFailsWithData) {
  SafetensorsWriter w;
  w.addTensorFilled("a", ElementType::F32, {3});
  w.addTensorFilled("b", ElementType::I8, {5});
  std::vector<uint8_t> full = w.serialize();
  ASSERT_EQ(openError(full), "<opened>");
  for (size_t n = 0; n < full.size(); ++n) {
    std::string error = openError({full.begin(), full.begin() + n});
    ASSERT_EQ(error.rfind("t.safetensors: ", 0), 0u) << n << ": " << error;
  }
}

TEST(SafetensorsFileBadInputTest, BadJson) {
  EXPECT_EQ(openError(rawHeader("{\"a\": 1,}")),
            "t.safetensors: header is not valid JSON: [json.exception.parse_error.101] parse "
            "error at line 1, column 9: syntax error while parsing object key - unexpected '}'; "
            "expected string literal");
  EXPECT_EQ(openError(rawHeader("[1, 2]")),
            "t.safetensors: header is a JSON array, expected an object");
  EXPECT_EQ(openError(rawHeader("{\"w\": 3}")),
            "t.safetensors: tensor 'w' is integer, expected an object with dtype, shape, "
            "data_offsets");
  EXPECT_EQ(openError(rawHeader("{\"w\": {\"dtype\": \"F32\", \"shape\": [1]}}")),
            "t.safetensors: tensor 'w': missing field 'data_offsets'");
  EXPECT_EQ(openError(rawHeader(
                "{\"w\": {\"dtype\": \"F32\", \"shape\": [-1], \"data_offsets\": [0, 4]}}")),
            "t.safetensors: tensor 'w': shape[0] is integer -1, expected a non-negative integer");
  EXPECT_EQ(openError(rawHeader(
                "{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0]}}")),
            "t.safetensors: tensor 'w': data_offsets is [0], expected [begin, end]");
  EXPECT_EQ(openError(rawHeader("{\"__metadata__\": {\"n\": 1}}")),
            "t.safetensors: __metadata__ 'n' is integer, expected a string");
}

TEST(SafetensorsFileBadInputTest, UnknownDtype) {
  SafetensorsWriter w;
  w.addRawEntry("w", "F7", {2}, 0, 4);
  EXPECT_EQ(openError(w.serialize()),
            "t.safetensors: tensor 'w': unknown dtype 'F7', expected one of BOOL, U8, I8, "
            "F8_E5M2, F8_E4M3, F8_E8M0, I16, U16, F16, BF16, I32, U32, F32, F64, I64, U64");
  // ggml-only types are not safetensors dtypes.
  SafetensorsWriter q;
  q.addRawEntry("w", "Q4_0", {32}, 0, 18);
  EXPECT_EQ(openError(q.serialize()).rfind("t.safetensors: tensor 'w': unknown dtype 'Q4_0'", 0),
            0u);
}

TEST(SafetensorsFileBadInputTest, OffsetsAndSizes) {
  auto one = [](std::vector<int64_t> shape, uint64_t begin, uint64_t end,
                OpenMode mode = OpenMode::kWithData) {
    SafetensorsWriter w;
    w.addRawEntry("w", "F32", std::move(shape), begin, end);
    return openError(w.serialize(), mode);
  };
  EXPECT_EQ(one({2, 3}, 0, 20),
            "t.safetensors: tensor 'w': data_offsets [0, 20) hold 20 bytes, but shape [2, 3] of "
            "F32 needs 24");
  EXPECT_EQ(one({4}, 16, 0), "t.safetensors: tensor 'w': data_offsets [16, 0) end before they begin");
  EXPECT_EQ(one({4}, 0, 16),
            "t.safetensors: tensor 'w': data [0, 16) extends past end of file (0 data bytes after "
            "the header)");
  EXPECT_EQ(one({4}, 0, 16, OpenMode::kHeaderOnly), "<opened>");
  EXPECT_EQ(one({int64_t{1} << 62}, 0, 16),
            "t.safetensors: tensor 'w': 4611686018427387904 elements of F32 overflow a 64-bit "
            "byte count");
  EXPECT_EQ(one({int64_t{1} << 40, int64_t{1} << 40}, 0, 16),
            "t.safetensors: tensor 'w': element count of shape [1099511627776, 1099511627776] "
            "overflows int64");

  SafetensorsWriter w;
  w.addRawEntry("a", "F32", {4}, 0, 16).addRawEntry("b", "F32", {4}, 8, 24);
  EXPECT_EQ(openError(w.serialize(), OpenMode::kHeaderOnly),
            "t.safetensors: tensors 'a' [0, 16) and 'b' [8, 24) overlap");
}

//===----------------------------------------------------------------------===//
// Checkpoint directories
//===----------------------------------------------------------------------===//

TEST(SafetensorsCheckpointTest, SingleFile) {
  testing::TempDir dir;
  SafetensorsWriter w;
  w.addTensorFilled("model.norm.weight", ElementType::BF16, {8});
  ASSERT_TRUE(w.writeFile(dir.file("model.safetensors")).ok());
  auto ckpt = SafetensorsCheckpoint::open(dir.path(), OpenMode::kWithData);
  ASSERT_TRUE(ckpt.ok()) << ckpt.error().message;
  ASSERT_EQ(ckpt->tensors().size(), 1u);
  const TensorInfo* t = ckpt->findTensor("model.norm.weight");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->file, dir.file("model.safetensors"));
  EXPECT_EQ(ckpt->tensorData(*t)->size(), 16u);
}

TEST(SafetensorsCheckpointTest, Sharded) {
  testing::TempDir dir;
  SafetensorsWriter s1, s2;
  s1.addTensorFilled("a", ElementType::F32, {2});
  s1.addTensorFilled("unindexed", ElementType::F32, {2});
  s2.addTensorFilled("b", ElementType::F16, {3});
  ASSERT_TRUE(s1.writeFile(dir.file("model-00001-of-00002.safetensors")).ok());
  ASSERT_TRUE(s2.writeFile(dir.file("model-00002-of-00002.safetensors")).ok());
  writeText(dir.file("model.safetensors.index.json"),
            R"({"metadata": {"total_size": 14}, "weight_map": {
                  "b": "model-00002-of-00002.safetensors",
                  "a": "model-00001-of-00002.safetensors"}})");
  auto ckpt = SafetensorsCheckpoint::open(dir.path(), OpenMode::kWithData);
  ASSERT_TRUE(ckpt.ok()) << ckpt.error().message;
  EXPECT_EQ(ckpt->shards().size(), 2u);
  ASSERT_EQ(ckpt->tensors().size(), 2u);  // the index is authoritative
  EXPECT_EQ(ckpt->findTensor("unindexed"), nullptr);
  const TensorInfo* b = ckpt->findTensor("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->file, dir.file("model-00002-of-00002.safetensors"));
  EXPECT_EQ(ckpt->tensorData(*b)->size(), 6u);
  EXPECT_EQ(ckpt->tensorData(*ckpt->findTensor("a"))->size(), 8u);
}

TEST(SafetensorsCheckpointBadInputTest, MissingShardAndTensor) {
  testing::TempDir dir;
  SafetensorsWriter s1;
  s1.addTensorFilled("a", ElementType::F32, {2});
  ASSERT_TRUE(s1.writeFile(dir.file("model-00001-of-00002.safetensors")).ok());
  const std::string index = dir.file("model.safetensors.index.json");
  writeText(index, R"({"weight_map": {"a": "model-00001-of-00002.safetensors",
                                      "b": "model-00002-of-00002.safetensors",
                                      "c": "model-00002-of-00002.safetensors"}})");
  auto missing = SafetensorsCheckpoint::open(dir.path(), OpenMode::kHeaderOnly);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().message,
            index + ": shard 'model-00002-of-00002.safetensors' (holding 'b' and 1 more tensors) "
                    "is missing");

  writeText(index, R"({"weight_map": {"a": "model-00001-of-00002.safetensors",
                                      "z": "model-00001-of-00002.safetensors"}})");
  auto absent = SafetensorsCheckpoint::open(dir.path(), OpenMode::kHeaderOnly);
  ASSERT_FALSE(absent.ok());
  EXPECT_EQ(absent.error().message,
            index + ": tensor 'z' is mapped to 'model-00001-of-00002.safetensors', but that shard "
                    "has no such tensor");

  writeText(index, R"({"weight_map": {"a": "../model-00001-of-00002.safetensors"}})");
  EXPECT_EQ(SafetensorsCheckpoint::open(dir.path(), OpenMode::kHeaderOnly).error().message,
            index + ": weight_map 'a' names '../model-00001-of-00002.safetensors', expected a "
                    "file name in the same directory");
  writeText(index, R"({"weight_map": {"a": 7}})");
  EXPECT_EQ(SafetensorsCheckpoint::open(dir.path(), OpenMode::kHeaderOnly).error().message,
            index + ": weight_map 'a' is integer, expected a shard file name");
  writeText(index, R"({"metadata": {}})");
  EXPECT_EQ(SafetensorsCheckpoint::open(dir.path(), OpenMode::kHeaderOnly).error().message,
            index + ": missing 'weight_map' object");
  writeText(index, "{");
  EXPECT_EQ(SafetensorsCheckpoint::open(dir.path(), OpenMode::kHeaderOnly).error().message,
            index + ": not valid JSON: [json.exception.parse_error.101] parse error at line 1, "
                    "column 2: syntax error while parsing object key - unexpected end of input; "
                    "expected string literal");
}

TEST(SafetensorsCheckpointBadInputTest, EmptyDirectory) {
  testing::TempDir dir;
  auto ckpt = SafetensorsCheckpoint::open(dir.path(), OpenMode::kHeaderOnly);
  ASSERT_FALSE(ckpt.ok());
  EXPECT_EQ(ckpt.error().message,
            dir.path() + ": no model.safetensors or model.safetensors.index.json");
}

}  // namespace
}  // namespace kiln::formats
