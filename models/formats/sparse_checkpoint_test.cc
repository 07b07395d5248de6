// compressed-tensors sparse checkpoints: the committed fixtures (compressed
// by the package, test/reference/make_sparse24_checkpoints.py) decompress to
// the package's own dense output bit for bit; weights that break the 2:4 the
// config claims, and truncated or inconsistent compressed tensors, are
// refused with errors naming the tensor.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include <gtest/gtest.h>

#include "models/formats/model_source.h"
#include "models/formats/sparsity_config.h"
#include "models/formats/testing/safetensors_writer.h"
#include "models/formats/testing/temp_dir.h"
#include "test/source_root.h"

namespace kiln::formats {
namespace {

namespace fs = std::filesystem;
using testing::SafetensorsWriter;
using testing::TempDir;

const std::string kQ = "model.layers.0.self_attn.q_proj";
const std::string kUp = "model.layers.0.mlp.up_proj";

std::string fixture(const std::string& variant) {
  return checkoutPath("test/models/sparse24-llama/" + variant);
}

std::string readText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void writeText(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

// A tensor as the edit callback sees it; erase it by clearing `keep`.
struct Edit {
  std::string name;
  ElementType type;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
  bool keep = true;
};

// Copies a fixture into `dir`, passing every tensor through `edit`.
void copyFixture(const std::string& variant, const std::string& dir,
                 const std::function<void(Edit&)>& edit) {
  fs::copy_file(fixture(variant) + "/config.json", dir + "/config.json");
  auto ckpt = SafetensorsCheckpoint::open(fixture(variant), OpenMode::kWithData);
  ASSERT_TRUE(ckpt.ok()) << ckpt.error().message;
  SafetensorsWriter writer;
  for (const TensorInfo& t : ckpt->tensors()) {
    auto data = ckpt->tensorData(t);
    ASSERT_TRUE(data.ok());
    Edit e{t.name, t.type, t.shape, std::vector<uint8_t>(data->begin(), data->end())};
    edit(e);
    if (e.keep) writer.addTensor(e.name, e.type, e.shape, std::move(e.bytes));
  }
  ASSERT_TRUE(writer.writeFile(dir + "/model.safetensors").ok());
}

// The error reading `weight` from the checkpoint in `dir` (empty if none).
std::string readError(const std::string& dir, const std::string& weight) {
  auto source = ModelSource::open(dir, OpenMode::kWithData);
  if (!source.ok()) return source.error().message;
  const TensorInfo* t = source->findTensor(weight);
  if (t == nullptr) return "no tensor " + weight;
  auto data = source->tensorData(*t);
  return data.ok() ? "" : data.error().message;
}

class SparseFixture : public ::testing::TestWithParam<const char*> {};

TEST_P(SparseFixture, DecompressesToThePackagesDenseWeights) {
  auto source = ModelSource::open(fixture(GetParam()), OpenMode::kWithData);
  ASSERT_TRUE(source.ok()) << source.error().message;
  ASSERT_NE(source->sparse(), nullptr);
  EXPECT_TRUE(source->checkWeights().ok()) << source->checkWeights().error().message;
  // The package's decompression of the sparse-24-bitmask checkpoint.
  auto dense = SafetensorsCheckpoint::open(fixture("dense"), OpenMode::kWithData);
  ASSERT_TRUE(dense.ok()) << dense.error().message;
  ASSERT_EQ(source->tensors().size(), dense->tensors().size());
  for (const TensorInfo& want : dense->tensors()) {
    SCOPED_TRACE(want.name);
    const TensorInfo* got = source->findTensor(want.name);
    ASSERT_NE(got, nullptr);
    EXPECT_EQ(got->type, ElementType::BF16);
    EXPECT_EQ(got->type, want.type);
    EXPECT_EQ(got->shape, want.shape);
    auto got_bytes = source->tensorData(*got);
    ASSERT_TRUE(got_bytes.ok()) << got_bytes.error().message;
    auto want_bytes = dense->tensorData(want);
    ASSERT_TRUE(want_bytes.ok());
    ASSERT_EQ(got_bytes->size(), want_bytes->size());
    EXPECT_EQ(std::memcmp(got_bytes->data(), want_bytes->data(), want_bytes->size()), 0);
  }
  EXPECT_EQ(source->findTensor(kQ + ".compressed"), nullptr);
  EXPECT_EQ(source->findTensor(kQ + ".bitmask"), nullptr);
}

TEST_P(SparseFixture, SaysWhichLinearsAre24) {
  auto source = ModelSource::open(fixture(GetParam()), OpenMode::kHeaderOnly);
  ASSERT_TRUE(source.ok()) << source.error().message;
  ASSERT_NE(source->sparse(), nullptr);
  EXPECT_EQ(source->sparse()->config().structure, "2:4");
  const auto& weights = source->sparse()->weights24();
  EXPECT_EQ(weights.size(), 7u);
  EXPECT_TRUE(weights.count(kQ + ".weight"));
  EXPECT_TRUE(weights.count("model.layers.0.mlp.down_proj.weight"));
  EXPECT_FALSE(weights.count("lm_head.weight"));  // in `ignore`
  EXPECT_TRUE(source->decoderLinearsAre24());
  // Header-only, the compiler sees the dense weight already.
  const TensorInfo* q = source->findTensor(kQ + ".weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->shape, (std::vector<int64_t>{64, 64}));
  EXPECT_EQ(q->type, ElementType::BF16);
  EXPECT_TRUE(source->checkWeights().ok());
}

INSTANTIATE_TEST_SUITE_P(Formats, SparseFixture,
                         ::testing::Values("bitmask24", "bitmask", "dense"));

TEST(SparseCheckpoint, DecompressesF16AndF32Values) {
  auto ckpt = SafetensorsCheckpoint::open(fixture("layers"), OpenMode::kWithData);
  ASSERT_TRUE(ckpt.ok()) << ckpt.error().message;
  SparsityConfig config;
  config.format = SparsityConfig::Format::kSparse24Bitmask;
  auto sparse = SparseCheckpoint::open(*ckpt, config, {});
  ASSERT_TRUE(sparse.ok()) << sparse.error().message;
  auto dense = SafetensorsFile::open(fixture("layers") + "/dense.safetensors", OpenMode::kWithData);
  ASSERT_TRUE(dense.ok()) << dense.error().message;
  ASSERT_EQ(dense->tensors().size(), 2u);
  for (const TensorInfo& want : dense->tensors()) {
    SCOPED_TRACE(want.name);
    const TensorInfo* got = sparse->findTensor(want.name);
    ASSERT_NE(got, nullptr);
    EXPECT_EQ(got->type, want.name == "half.weight" ? ElementType::F16 : ElementType::F32);
    EXPECT_EQ(got->type, want.type);
    EXPECT_EQ(got->shape, want.shape);
    auto got_bytes = sparse->tensorData(*got);
    ASSERT_TRUE(got_bytes.ok()) << got_bytes.error().message;
    auto want_bytes = dense->tensorData(want);
    ASSERT_TRUE(want_bytes.ok());
    ASSERT_EQ(got_bytes->size(), want_bytes->size());
    EXPECT_EQ(std::memcmp(got_bytes->data(), want_bytes->data(), want_bytes->size()), 0);
  }
  EXPECT_EQ(sparse->weights24().size(), 2u);
}

TEST(SparseCheckpoint, AFloatCheckpointHasNone) {
  auto source = ModelSource::open(checkoutPath("test/models/tiny-llama"), OpenMode::kHeaderOnly);
  ASSERT_TRUE(source.ok()) << source.error().message;
  EXPECT_EQ(source->sparse(), nullptr);
  EXPECT_FALSE(source->decoderLinearsAre24());
}

// Makes row 17's columns 40..43 of `weight_name` 1, 1, 1, 0 (bf16).
void breakUpRow17(const std::string& weight_name, Edit& e) {
  if (e.name != weight_name) return;
  const int64_t columns = e.shape[1];
  const uint16_t values[4] = {0x3f80, 0x3f80, 0x3f80, 0};
  std::memcpy(e.bytes.data() + (17 * columns + 40) * 2, values, sizeof(values));
}

TEST(SparseCheckpoint, DenseWeightBreaking24IsRefusedByName) {
  TempDir dir;
  copyFixture("dense", dir.path(), [](Edit& e) { breakUpRow17(kUp + ".weight", e); });
  EXPECT_EQ(readError(dir.path(), kUp + ".weight"),
            dir.path() + ": " + kUp +
                ".weight: row 17, columns 40..43 hold 3 nonzeros, but " + dir.path() +
                "/config.json: quantization_config.sparsity_config says 2:4");
  // The others still read.
  EXPECT_EQ(readError(dir.path(), kQ + ".weight"), "");
}

TEST(SparseCheckpoint, CompressedWeightBreaking24IsRefusedByName) {
  // Mark a third column of row 17's group 40..43 and give it a value: the
  // mask and the values still agree, the 2:4 does not.
  auto original = SafetensorsCheckpoint::open(fixture("bitmask"), OpenMode::kWithData);
  ASSERT_TRUE(original.ok()) << original.error().message;
  const TensorInfo* mask_info = original->findTensor(kUp + ".bitmask");
  ASSERT_NE(mask_info, nullptr);
  auto mask_data = original->tensorData(*mask_info);
  ASSERT_TRUE(mask_data.ok());
  std::vector<uint8_t> mask(mask_data->begin(), mask_data->end());
  const int64_t rows = mask_info->shape[0], bytes = mask_info->shape[1];
  const uint8_t nibble = mask[17 * bytes + 40 / 8] & 0x0f;  // columns 40..43
  ASSERT_EQ(__builtin_popcount(nibble), 2);
  const int64_t column = 40 + ((nibble & 1) == 0 ? 0 : (nibble & 2) == 0 ? 1 : 2);
  // The new value goes after every kept value before it in row-major order.
  int64_t inserted_at = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < 8 * bytes; ++c)
      if ((r < 17 || (r == 17 && c < column)) && ((mask[r * bytes + c / 8] >> (c % 8)) & 1))
        ++inserted_at;
  mask[17 * bytes + column / 8] |= uint8_t(1 << (column % 8));

  TempDir dir;
  copyFixture("bitmask", dir.path(), [&](Edit& e) {
    if (e.name == kUp + ".bitmask") e.bytes = mask;
    if (e.name == kUp + ".compressed") {
      const uint8_t one[2] = {0x80, 0x3f};  // bf16 1.0
      e.bytes.insert(e.bytes.begin() + inserted_at * 2, one, one + 2);
      e.shape[0] += 1;
    }
  });
  const std::string error = readError(dir.path(), kUp + ".weight");
  EXPECT_NE(error.find(kUp + ".weight: row 17, columns 40..43 hold 3 nonzeros, but "),
            std::string::npos)
      << error;
}

TEST(SparseCheckpoint, TruncatedBitmaskIsRefused) {
  TempDir dir;
  copyFixture("bitmask24", dir.path(), [](Edit& e) {
    if (e.name != kUp + ".bitmask") return;
    e.shape[1] -= 1;  // one byte of columns short in every row
    e.bytes.resize(size_t(e.shape[0] * e.shape[1]));
  });
  auto source = ModelSource::open(dir.path(), OpenMode::kHeaderOnly);
  ASSERT_FALSE(source.ok());
  EXPECT_NE(source.error().message.find("tensor '" + kUp + ".bitmask' has shape [128, 7], "
                                        "expected [128, 8]"),
            std::string::npos)
      << source.error().message;
}

TEST(SparseCheckpoint, MissingShapeIsRefused) {
  TempDir dir;
  copyFixture("bitmask24", dir.path(), [](Edit& e) { e.keep = e.name != kQ + ".shape"; });
  auto source = ModelSource::open(dir.path(), OpenMode::kHeaderOnly);
  ASSERT_FALSE(source.ok());
  EXPECT_NE(source.error().message.find("tensor '" + kQ + ".shape' is missing"),
            std::string::npos)
      << source.error().message;
}

TEST(SparseCheckpoint, ShapeThatDisagreesIsRefusedWhenRead) {
  TempDir dir;
  copyFixture("bitmask24", dir.path(), [](Edit& e) {
    if (e.name != kQ + ".shape") return;
    const int64_t wrong = 60;
    std::memcpy(e.bytes.data() + 8, &wrong, 8);
  });
  const std::string error = readError(dir.path(), kQ + ".weight");
  EXPECT_NE(error.find("tensor '" + kQ + ".shape' says [64, 60], but"), std::string::npos)
      << error;
}

TEST(SparseCheckpoint, BitmaskThatMarksTooFewIsRefused) {
  TempDir dir;
  copyFixture("bitmask24", dir.path(), [](Edit& e) {
    if (e.name != kQ + ".bitmask") return;
    e.bytes[100] &= uint8_t(e.bytes[100] - 1);  // clear the lowest set bit
  });
  const std::string error = readError(dir.path(), kQ + ".weight");
  EXPECT_NE(error.find("tensor '" + kQ + ".bitmask' marks 2047 kept weights, but '" + kQ +
                       ".compressed' holds 2048 values"),
            std::string::npos)
      << error;
}

TEST(SparseCheckpoint, QuantizedValuesAreRefused) {
  TempDir dir;
  copyFixture("bitmask24", dir.path(), [](Edit& e) {
    if (e.name != kQ + ".compressed") return;
    e.type = ElementType::I8;
    e.bytes.resize(e.bytes.size() / 2);
  });
  auto source = ModelSource::open(dir.path(), OpenMode::kHeaderOnly);
  ASSERT_FALSE(source.ok());
  EXPECT_NE(source.error().message.find("tensor '" + kQ + ".compressed' is I8 [64, 32], "
                                        "expected F16, BF16 or F32 values"),
            std::string::npos)
      << source.error().message;
}

// --- config.json ---

std::string withSparsity(const std::string& sparsity_json) {
  return R"({"model_type": "llama", "quantization_config": {"quant_method": "compressed-tensors",
            "sparsity_config": )" +
         sparsity_json + "}}";
}

TEST(SparsityConfig, ReadsThePackagesSpots) {
  const std::string body = R"({"format": "sparse-24-bitmask", "targets": ["Linear"],
                               "ignore": ["lm_head", "re:.*mlp.gate$"]})";
  for (const std::string& text :
       {withSparsity(body), R"({"compression_config": {"sparsity_config": )" + body + "}}",
        R"({"sparsity_config": )" + body + "}"}) {
    SCOPED_TRACE(text);
    auto config = parseSparsityConfig(text, "config.json");
    ASSERT_TRUE(config.ok()) << config.error().message;
    ASSERT_TRUE(config->has_value());
    EXPECT_EQ((*config)->format, SparsityConfig::Format::kSparse24Bitmask);
    EXPECT_EQ((*config)->structure, "2:4");  // the format's default
    EXPECT_TRUE(*(*config)->covers("model.layers.0.mlp.up_proj", true));
    EXPECT_FALSE(*(*config)->covers("lm_head", true));
    EXPECT_FALSE(*(*config)->covers("model.layers.0.mlp.gate", true));
    EXPECT_TRUE(*(*config)->covers("model.layers.0.mlp.gate_proj", true));
    EXPECT_FALSE(*(*config)->covers("model.embed_tokens", false));
  }
  for (const char* none : {R"({"model_type": "llama"})", R"({"sparsity_config": {}})",
                           R"({"quantization_config": {"quant_method": "compressed-tensors",
                                                       "sparsity_config": null}})"}) {
    auto config = parseSparsityConfig(none, "config.json");
    ASSERT_TRUE(config.ok()) << config.error().message;
    EXPECT_FALSE(config->has_value()) << none;
  }
}

TEST(SparsityConfig, RefusesWhatKilnCannotRead) {
  const std::pair<std::string, std::string> cases[] = {
      {R"({"format": "marlin-24", "sparsity_structure": "2:4"})",
       "config.json: quantization_config.sparsity_config.format: 'marlin-24' is not supported "
       "(kiln reads sparse-24-bitmask, sparse-bitmask and dense)"},
      {R"({"format": "sparse-24-bitmask", "sparsity_structure": "unstructured"})",
       "config.json: quantization_config.sparsity_config.sparsity_structure: 'unstructured' is "
       "not supported with format sparse-24-bitmask (kiln reads 2:4)"},
      {R"({"format": "dense", "sparsity_structure": "8:16"})",
       "config.json: quantization_config.sparsity_config.sparsity_structure: '8:16' is not "
       "supported with format dense (kiln reads 2:4 and unstructured)"},
      {R"({"sparsity_structure": "2:4"})",
       "config.json: quantization_config.sparsity_config.format: absent, expected "
       "sparse-24-bitmask, sparse-bitmask or dense"},
      {R"({"format": "dense", "sparsity_structure": "2:4", "targets": ["re:(("]})",
       "config.json: quantization_config.sparsity_config.targets: pattern 're:((' is not a "
       "regular expression kiln can read"},
  };
  for (const auto& [body, message] : cases) {
    auto config = parseSparsityConfig(withSparsity(body), "config.json");
    ASSERT_FALSE(config.ok()) << body;
    EXPECT_EQ(config.error().message.substr(0, message.size()), message);
  }
}

TEST(SparsityConfig, UnstructuredDenseLoadsAsAnOrdinaryCheckpoint) {
  TempDir dir;
  copyFixture("dense", dir.path(), [](Edit& e) { breakUpRow17(kUp + ".weight", e); });
  std::string text = readText(dir.file("config.json"));
  const std::string from = "\"sparsity_structure\": \"2:4\"";
  text.replace(text.find(from), from.size(), "\"sparsity_structure\": \"unstructured\"");
  writeText(dir.file("config.json"), text);
  auto source = ModelSource::open(dir.path(), OpenMode::kWithData);
  ASSERT_TRUE(source.ok()) << source.error().message;
  EXPECT_TRUE(source->sparse()->weights24().empty());
  EXPECT_FALSE(source->decoderLinearsAre24());
  EXPECT_EQ(readError(dir.path(), kUp + ".weight"), "");
}

TEST(SparsityConfig, CompressedTensorsQuantizationIsRefused) {
  TempDir dir;
  copyFixture("bitmask24", dir.path(), [](Edit&) {});
  std::string text = readText(dir.file("config.json"));
  const std::string from = "\"quant_method\": \"compressed-tensors\",";
  text.replace(text.find(from), from.size(),
               from + R"( "config_groups": {"group_0": {"targets": ["Linear"]}},)");
  writeText(dir.file("config.json"), text);
  auto source = ModelSource::open(dir.path(), OpenMode::kHeaderOnly);
  ASSERT_FALSE(source.ok());
  EXPECT_NE(source.error().message.find("quantization_config.config_groups: compressed-tensors "
                                        "quantized weights are not supported"),
            std::string::npos)
      << source.error().message;
}

}  // namespace
}  // namespace kiln::formats
