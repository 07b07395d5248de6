#include "runtime/weights/weight_store.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>

#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "models/formats/testing/gguf_writer.h"
#include "models/formats/testing/temp_dir.h"
#include "runtime/numerics/quant.h"

namespace kiln {
namespace {

using formats::ElementType;
using json = nlohmann::json;

std::vector<uint8_t> bytesOf(const std::vector<float>& v) {
  std::vector<uint8_t> out(v.size() * 4);
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

// q4_1 rows of 64 elements (2 blocks, 40 bytes per row) from a ramp.
std::vector<uint8_t> q41Rows(int rows, float start) {
  std::vector<uint8_t> out(size_t(rows) * 40);
  for (int r = 0; r < rows; ++r) {
    std::vector<float> row(64);
    for (int i = 0; i < 64; ++i) row[size_t(i)] = start + 0.01f * float(r * 64 + i);
    EXPECT_TRUE(quantizeRow(WeightType::Q4_1, row.data(), out.data() + r * 40, 64).ok());
  }
  return out;
}

class WeightStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    formats::testing::GgufWriter w;
    w.addString("general.architecture", "llama")
        .addUInt32("llama.block_count", 1)
        .addUInt32("llama.context_length", 64)
        .addUInt32("llama.embedding_length", 64)
        .addUInt32("llama.feed_forward_length", 64)
        .addUInt32("llama.attention.head_count", 4)
        .addUInt32("llama.attention.head_count_kv", 2)
        .addUInt32("llama.vocab_size", 8)
        .addFloat32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
    a_ = q41Rows(2, -0.3f);
    b_ = q41Rows(3, 0.2f);
    c_ = {1, 2, 3, 4, 5, 6, 7, 8};
    d_ = {9, 10, 11, 12};
    std::vector<uint8_t> norm(4 * 2);
    for (int i = 0; i < 4; ++i) {
      uint16_t bits = f32ToBf16(0.5f + float(i));
      std::memcpy(norm.data() + 2 * i, &bits, 2);
    }
    w.addTensor("a.weight", {2, 64}, ElementType::Q4_1, a_)
        .addTensor("b.weight", {3, 64}, ElementType::Q4_1, b_)
        .addTensor("c.weight", {2, 4}, ElementType::F32, bytesOf(c_))
        .addTensor("d.weight", {1, 4}, ElementType::F32, bytesOf(d_))
        .addTensor("norm.weight", {4}, ElementType::BF16, norm)
        .addTensorFilled("k.weight", {1, 256}, ElementType::Q4_K)
        .addTensorFilled("k3.weight", {1, 256}, ElementType::Q3_K);
    path_ = dir_.file("model.gguf");
    ASSERT_TRUE(w.writeFile(path_).ok());
    auto stamp = sourceStamp(path_);
    ASSERT_TRUE(stamp.ok()) << stamp.error().message;
    stamp_ = *stamp;
  }

  json manifest() const {
    json m = json::parse(R"({
      "format": "kiln-artifact", "version": 2,
      "model": {"source": "", "source_format": "gguf", "source_size": 0, "source_mtime": 0,
                "config": {"architecture": "llama", "hidden_size": 64, "num_layers": 1,
                           "vocab_size": 8}},
      "activation_type": "f32",
      "weights": [
        {"id": 0, "name": "a.weight", "type": "q4_1", "shape": [2, 64], "source": "a.weight"},
        {"id": 1, "name": "b.weight", "type": "q4_1", "shape": [3, 64], "source": "b.weight"},
        {"id": 2, "name": "a+b", "type": "q4_1", "shape": [5, 64],
         "prepare": {"op": "concat_rows", "inputs": [0, 1]}},
        {"id": 3, "name": "c.weight", "type": "f32", "shape": [2, 4], "source": "c.weight"},
        {"id": 4, "name": "d.weight", "type": "f32", "shape": [1, 4], "source": "d.weight"},
        {"id": 5, "name": "c+d", "type": "f32", "shape": [3, 4],
         "prepare": {"op": "concat_rows", "inputs": [3, 4]}},
        {"id": 6, "name": "norm.weight", "type": "bf16", "shape": [4], "source": "norm.weight"}
      ],
      "kv_cache": {"layers": 1, "page_size": 16, "kv_heads": 2, "head_dim": 16, "type": "f32"},
      "entries": {"forward": {
        "inputs": [{"name": "tokens", "type": "i32", "shape": [-1]}],
        "values": [
          {"id": 0, "type": "f32", "shape": [-1, 64], "rows": "tokens", "row_bytes": 256, "offset": 0},
          {"id": 1, "type": "f32", "shape": [-1, 5], "rows": "tokens", "row_bytes": 20, "offset": 256}
        ],
        "arena": {"bytes_per_token": 276},
        "steps": [
          {"kind": "gemm", "params": {"n": 5, "k": 64, "weight_type": "q4_1", "bias": false},
           "args": [{"value": 0}, {"weight": 2}], "results": [1]},
          {"kind": "gemm", "params": {"n": 3, "k": 4, "weight_type": "f32", "bias": false},
           "args": [{"value": 0}, {"weight": 5}], "results": [1]},
          {"kind": "rms_norm", "params": {"hidden": 4, "epsilon": 1e-5},
           "args": [{"value": 0}, {"weight": 6}], "results": [1]}
        ],
        "outputs": [{"name": "logits", "value": 1}]
      }}
    })");
    m["model"]["source"] = path_;
    m["model"]["source_size"] = stamp_.size;
    m["model"]["source_mtime"] = stamp_.mtime;
    for (const SourceFileStamp& f : stamp_.files)
      m["model"]["source_files"].push_back(
          {{"file", f.file}, {"size", f.size}, {"mtime", f.mtime}, {"sampled_hash", f.sampled_hash}});
    return m;
  }

  Result<WeightStore> open(const json& m, const WeightStoreOptions& options = {}) {
    auto parsed = Manifest::parse(m.dump(), "manifest.json");
    if (!parsed.ok()) return parsed.error();
    manifest_ = std::make_unique<Manifest>(parsed.take());
    return WeightStore::open(*manifest_, options);
  }

  formats::testing::TempDir dir_;
  std::string path_;
  SourceStamp stamp_;
  std::vector<uint8_t> a_, b_;
  std::vector<float> c_, d_;
  std::unique_ptr<Manifest> manifest_;
};

TEST_F(WeightStoreTest, ConcatRowsJoinsQuantizedAndPlainRows) {
  auto store = open(manifest());
  ASSERT_TRUE(store.ok()) << store.error().message;
  const BoundWeight* ab = store->find(2);
  ASSERT_NE(ab, nullptr);
  ASSERT_TRUE(ab->kernel_ready);
  EXPECT_EQ(ab->type, WeightType::Q4_1);
  EXPECT_EQ(ab->shape, (std::vector<int64_t>{5, 64}));
  ASSERT_EQ(ab->size_bytes, a_.size() + b_.size());
  EXPECT_EQ(std::memcmp(ab->data, a_.data(), a_.size()), 0);
  EXPECT_EQ(std::memcmp(ab->data + a_.size(), b_.data(), b_.size()), 0);

  const BoundWeight* cd = store->find(5);
  ASSERT_NE(cd, nullptr);
  EXPECT_EQ(cd->type, WeightType::F32);
  std::vector<float> got(12);
  ASSERT_EQ(cd->size_bytes, 48u);
  std::memcpy(got.data(), cd->data, 48);
  EXPECT_EQ(got, (std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}));

  // Inputs of preparations that no step reads keep their mapped bytes and
  // are not converted.
  EXPECT_FALSE(store->find(0)->kernel_ready);
  EXPECT_EQ(store->find(99), nullptr);
}

TEST_F(WeightStoreTest, DeferredConcatKeepsThePartsUntilMaterialized) {
  WeightStoreOptions options;
  options.defer_concat = true;
  auto store = open(manifest(), options);
  ASSERT_TRUE(store.ok()) << store.error().message;
  const BoundWeight* ab = store->find(2);
  ASSERT_NE(ab, nullptr);
  EXPECT_TRUE(ab->kernel_ready);
  EXPECT_EQ(ab->data, nullptr);
  ASSERT_EQ(ab->parts.size(), 2u);
  EXPECT_EQ(ab->size_bytes, a_.size() + b_.size());
  // The parts are the mapped inputs themselves, in order: nothing copied.
  ASSERT_EQ(ab->parts[0].size(), a_.size());
  EXPECT_EQ(std::memcmp(ab->parts[0].data(), a_.data(), a_.size()), 0);
  EXPECT_EQ(ab->parts[0].data(), store->find(0)->data);
  EXPECT_EQ(std::memcmp(ab->parts[1].data(), b_.data(), b_.size()), 0);

  store->materializeConcats();
  ab = store->find(2);
  ASSERT_NE(ab->data, nullptr);
  EXPECT_TRUE(ab->parts.empty());
  EXPECT_EQ(std::memcmp(ab->data, a_.data(), a_.size()), 0);
  EXPECT_EQ(std::memcmp(ab->data + a_.size(), b_.data(), b_.size()), 0);
  std::vector<float> got(12);
  std::memcpy(got.data(), store->find(5)->data, 48);
  EXPECT_EQ(got, (std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}));
}

TEST_F(WeightStoreTest, WritableDataIsACopyTheStoreKeeps) {
  auto store = open(manifest());
  ASSERT_TRUE(store.ok()) << store.error().message;
  const uint8_t* mapped = store->find(3)->data;
  auto bytes = store->writableData(3);
  ASSERT_TRUE(bytes.ok()) << bytes.error().message;
  ASSERT_EQ(bytes->size(), c_.size() * 4);
  EXPECT_NE(bytes->data(), mapped) << "the model's mapping is read-only";
  EXPECT_EQ(store->find(3)->data, bytes->data());
  float seven = 7.0f;
  std::memcpy(bytes->data(), &seven, 4);
  EXPECT_EQ(reinterpret_cast<const float*>(store->find(3)->data)[0], 7.0f);
  EXPECT_EQ(reinterpret_cast<const float*>(mapped)[0], c_[0]);
  auto again = store->writableData(3);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->data(), bytes->data()) << "copied once";
  EXPECT_FALSE(store->writableData(99).ok());
}

TEST_F(WeightStoreTest, OneDimensionalBf16BecomesF32) {
  auto store = open(manifest());
  ASSERT_TRUE(store.ok()) << store.error().message;
  const BoundWeight* norm = store->find(6);
  EXPECT_EQ(norm->type, WeightType::F32);
  const float* v = reinterpret_cast<const float*>(norm->data);
  EXPECT_EQ(std::vector<float>(v, v + 4), (std::vector<float>{0.5f, 1.5f, 2.5f, 3.5f}));
}

TEST_F(WeightStoreTest, ChangedModelIsRejected) {
  json m = manifest();
  m["model"]["source_size"] = stamp_.size + 1;
  auto store = open(m);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.error().message,
            fmt::format("manifest.json: model.source {} changed since the artifact was compiled "
                        "(size {} bytes, mtime {}; the manifest expects size {} bytes, mtime {}): "
                        "recompile it with kiln-compile",
                        path_, stamp_.size, stamp_.mtime, stamp_.size + 1, stamp_.mtime));
}

// A model file rewritten in place with its size and mtime kept (a copy
// with preserved timestamps, a restore from a backup): only the content
// hash tells, and the error names the file and both hashes.
TEST_F(WeightStoreTest, AModelChangedUnderTheSameSizeAndMtimeIsRejected) {
  ASSERT_EQ(stamp_.files.size(), 1u);
  EXPECT_EQ(stamp_.files[0].file, "model.gguf");
  struct stat before{};
  ASSERT_EQ(::stat(path_.c_str(), &before), 0);
  {
    std::fstream f(path_, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(std::streamoff(before.st_size - 1));
    char last = 0;
    f.read(&last, 1);
    f.seekp(std::streamoff(before.st_size - 1));
    last = char(last ^ 0x5a);
    f.write(&last, 1);
  }
  const struct timespec times[2] = {before.st_atim, before.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, path_.c_str(), times, 0), 0);
  auto now = sourceStamp(path_);
  ASSERT_TRUE(now.ok());
  EXPECT_EQ(now->size, stamp_.size);
  EXPECT_EQ(now->mtime, stamp_.mtime);
  ASSERT_NE(now->files[0].sampled_hash, stamp_.files[0].sampled_hash);

  auto store = open(manifest());
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.error().message,
            fmt::format("manifest.json: model.source file {} changed since the artifact was compiled: its "
                        "sampled content hash is {} (size {} bytes, mtime {}), the manifest records {} (size {} "
                        "bytes, mtime {}): recompile it with kiln-compile",
                        path_, now->files[0].sampled_hash, stamp_.size, stamp_.mtime,
                        stamp_.files[0].sampled_hash, stamp_.size, stamp_.mtime));
}

TEST_F(WeightStoreTest, AManifestWithoutSourceFilesChecksSizeAndMtimeOnly) {
  json m = manifest();
  m["model"].erase("source_files");
  EXPECT_TRUE(open(m).ok());
}

TEST_F(WeightStoreTest, TypeShapeAndConcatMismatches) {
  json m = manifest();
  m["weights"][0]["type"] = "q4_0";
  m["weights"][2]["type"] = "q4_0";
  m["entries"]["forward"]["steps"][0]["params"]["weight_type"] = "q4_0";
  EXPECT_EQ(open(m).error().message,
            "manifest.json: weight 0 'a.weight': tensor 'a.weight' has type q4_1 in the model, "
            "the manifest expects q4_0");
  m = manifest();
  m["weights"][3]["shape"] = json::parse("[4, 2]");
  EXPECT_EQ(open(m).error().message,
            "manifest.json: weight 3 'c.weight': tensor 'c.weight' has shape [2, 4] in the model, "
            "the manifest expects [4, 2]");
  m = manifest();
  m["weights"][5]["shape"] = json::parse("[4, 4]");
  EXPECT_EQ(open(m).error().message,
            "manifest.json: weight 5 'c+d': concat_rows inputs have 3 rows in all, the result "
            "has 4");
  m = manifest();
  m["weights"][5]["prepare"]["inputs"] = json::parse("[3, 0]");
  EXPECT_EQ(open(m).error().message,
            "manifest.json: weight 5 'c+d': concat_rows input 0 'a.weight' has type q4_1, "
            "expected f32");
  m = manifest();
  m["weights"][0]["source"] = "missing.weight";
  EXPECT_EQ(open(m).error().message,
            fmt::format("manifest.json: weight 0 'a.weight': tensor 'missing.weight' is not in {}",
                        path_));
}

TEST_F(WeightStoreTest, KQuantTensorsBindAsTheirKernelType) {
  json m = manifest();
  m["weights"].push_back(json::parse(
      R"({"id": 7, "name": "k.weight", "type": "q4_k", "shape": [1, 256], "source": "k.weight"})"));
  m["entries"]["forward"]["steps"][1]["args"][1]["weight"] = 7;
  auto store = open(m);
  ASSERT_TRUE(store.ok()) << store.error().message;
  const BoundWeight* k = store->find(7);
  ASSERT_NE(k, nullptr);
  EXPECT_TRUE(k->kernel_ready);
  EXPECT_EQ(k->type, WeightType::Q4_K);
  EXPECT_EQ(k->size_bytes, 144u);
}

TEST_F(WeightStoreTest, UnsupportedTypesAndPreparationsNameTheTensor) {
  json m = manifest();
  m["weights"].push_back(json::parse(
      R"({"id": 7, "name": "k3.weight", "type": "q3_k", "shape": [1, 256], "source": "k3.weight"})"));
  m["entries"]["forward"]["steps"][1]["args"][1]["weight"] = 7;
  EXPECT_EQ(open(m).error().message,
            "manifest.json: weight 7 'k3.weight': type q3_k is not supported by the CPU backend "
            "(supported: f32, f16, bf16, q4_0, q4_1, q8_0, q4_k, q5_k, q6_k)");
  // A quantize preparation whose rows are not whole 32-element blocks.
  m = manifest();
  m["weights"][5]["prepare"] = json::parse(R"({"op": "quantize", "inputs": [3], "scheme": "int8"})");
  EXPECT_EQ(open(m).error().message,
            "manifest.json: weight 5 'c+d': quantize: int8 rows of 4 elements: expected a "
            "multiple of 32");
  m = manifest();
  m["weights"][5]["prepare"] = json::parse(R"({"op": "transpose", "inputs": [3]})");
  EXPECT_EQ(open(m).error().message,
            "manifest.json: weights[5].prepare.op: unknown prepare op 'transpose' (expected "
            "concat_rows, quantize, offset, sparsify or slice)");
}

// Gemma's (1 + w) norm weights: f32(w) + 1 made once at load, from bf16 or f32.
TEST_F(WeightStoreTest, OffsetAddsInF32) {
  json m = manifest();
  m["weights"].push_back(json::parse(
      R"({"id": 7, "name": "norm.weight.offset", "type": "f32", "shape": [4],
          "prepare": {"op": "offset", "inputs": [6], "value": 1.0}})"));
  m["entries"]["forward"]["steps"][2]["args"][1]["weight"] = 7;
  auto store = open(m);
  ASSERT_TRUE(store.ok()) << store.error().message;
  const BoundWeight* norm = store->find(7);
  EXPECT_EQ(norm->type, WeightType::F32);
  const float* v = reinterpret_cast<const float*>(norm->data);
  EXPECT_EQ(std::vector<float>(v, v + 4), (std::vector<float>{1.5f, 2.5f, 3.5f, 4.5f}));

  m["weights"][7]["prepare"]["inputs"][0] = 0;  // a q4_1 matrix
  m["weights"][7]["shape"] = json::array({2, 64});
  EXPECT_EQ(open(m).error().message,
            "manifest.json: weight 7 'norm.weight.offset': offset makes f32 from an f32, f16 or bf16 weight; "
            "input 0 'a.weight' is q4_1, the result f32");
  m = manifest();
  m["weights"].push_back(json::parse(
      R"({"id": 7, "name": "n", "type": "f32", "shape": [4], "prepare": {"op": "offset", "inputs": [6]}})"));
  EXPECT_EQ(open(m).error().message, "manifest.json: weights[7].prepare.value: expected a number (what offset adds)");
}

TEST_F(WeightStoreTest, SourceOverrideAndMissingModel) {
  json m = manifest();
  m["model"]["source"] = "/nonexistent/model.gguf";
  auto parsed = Manifest::parse(m.dump(), "manifest.json");
  ASSERT_TRUE(parsed.ok());
  auto missing = WeightStore::open(*parsed);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().message,
            "manifest.json: model.source: /nonexistent/model.gguf: cannot stat: No such file or "
            "directory");
  auto moved = WeightStore::open(*parsed, WeightStoreOptions{.source_path = path_});
  EXPECT_TRUE(moved.ok()) << moved.error().message;
}


// A tensor-parallel rank's share of a weight: rows are a view of the
// source, columns are gathered; each run must be whole blocks.
TEST_F(WeightStoreTest, SliceBindsARanksRowsOrColumns) {
  json m = manifest();
  m["weights"].push_back(json::parse(R"({"id": 7, "name": "c.rows", "type": "f32", "shape": [1, 4],
      "prepare": {"op": "slice", "inputs": [3], "axis": 0, "offset": 1, "size": 1}})"));
  m["weights"].push_back(json::parse(R"({"id": 8, "name": "c.cols", "type": "f32", "shape": [2, 2],
      "prepare": {"op": "slice", "inputs": [3], "axis": 1, "offset": 1, "size": 2}})"));
  m["weights"].push_back(json::parse(R"({"id": 9, "name": "a.cols", "type": "q4_1", "shape": [2, 32],
      "prepare": {"op": "slice", "inputs": [0], "axis": 1, "offset": 32, "size": 32}})"));
  auto store = open(m);
  ASSERT_TRUE(store.ok()) << store.error().message;

  const BoundWeight* rows = store->find(7);
  ASSERT_EQ(rows->size_bytes, 16u);
  std::vector<float> got(4);
  std::memcpy(got.data(), rows->data, 16);
  EXPECT_EQ(got, (std::vector<float>{c_[4], c_[5], c_[6], c_[7]}));
  EXPECT_EQ(rows->data, store->find(3)->data + 16) << "rows are a view of the source";

  const BoundWeight* cols = store->find(8);
  ASSERT_EQ(cols->size_bytes, 16u);
  std::memcpy(got.data(), cols->data, 16);
  EXPECT_EQ(got, (std::vector<float>{c_[1], c_[2], c_[5], c_[6]}));

  // q4_1: 20-byte blocks of 32; each row's second block.
  const BoundWeight* blocks = store->find(9);
  ASSERT_EQ(blocks->size_bytes, 40u);
  EXPECT_EQ(std::memcmp(blocks->data, a_.data() + 20, 20), 0);
  EXPECT_EQ(std::memcmp(blocks->data + 20, a_.data() + 60, 20), 0);

  m["weights"][9]["prepare"]["offset"] = 16;
  EXPECT_EQ(open(m).error().message,
            "manifest.json: weight 9 'a.cols': slice of entries 16 .. 48 along axis 1 is not whole "
            "32-element blocks of q4_1");
  m["weights"][9]["prepare"]["offset"] = 48;
  EXPECT_EQ(open(m).error().message,
            "manifest.json: weight 9 'a.cols': slice of entries 48 .. 80 along axis 1 of input 0 of shape "
            "[2, 64]");
}
}  // namespace
}  // namespace kiln
