// GPTQ/AWQ checkpoints: the committed fixtures (packed by GPTQModel and
// AutoAWQ, test/reference/make_int4_checkpoints.py) unpack to exactly the
// packages' dequantized weights, appear as q4_0/q4_1/f32 weights, and bad
// configs and tensors are refused with errors naming the field or tensor.
#include <cmath>
#include <cstring>
#include <functional>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "models/formats/model_source.h"
#include "models/formats/testing/safetensors_writer.h"
#include "models/formats/testing/temp_dir.h"
#include "runtime/numerics/quant.h"
#include "test/source_root.h"

namespace kiln::formats {
namespace {

namespace fs = std::filesystem;

std::string fixture(const std::string& variant) {
  return checkoutPath("test/fixtures/int4-llama/" + variant);
}

std::string readText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

struct Variant {
  const char* name;
  ElementType type;
};

class Int4Fixture : public ::testing::TestWithParam<Variant> {};

TEST_P(Int4Fixture, UnpacksToThePackagesDequantizedWeights) {
  auto source = ModelSource::open(fixture(GetParam().name), OpenMode::kWithData);
  ASSERT_TRUE(source.ok()) << source.error().message;
  ASSERT_NE(source->int4(), nullptr);
  EXPECT_TRUE(source->checkWeights().ok());
  auto expected = SafetensorsFile::open(fixture(GetParam().name) + "/dequant.safetensors",
                                        OpenMode::kWithData);
  ASSERT_TRUE(expected.ok()) << expected.error().message;
  ASSERT_EQ(expected->tensors().size(), 7u);
  for (const TensorInfo& want : expected->tensors()) {
    SCOPED_TRACE(want.name);
    const TensorInfo* weight = source->findTensor(want.name);
    ASSERT_NE(weight, nullptr);
    EXPECT_EQ(weight->type, GetParam().type);
    EXPECT_EQ(weight->shape, want.shape);
    auto bytes = expected->tensorData(want);
    ASSERT_TRUE(bytes.ok());
    std::vector<float> reference(bytes->size() / 4);
    std::memcpy(reference.data(), bytes->data(), bytes->size());

    auto exact = source->int4()->dequantized(want.name);
    ASSERT_TRUE(exact.ok()) << exact.error().message;
    EXPECT_EQ(*exact, reference);  // bit for bit

    // What the backends read: q4_0 and f32 exact, q4_1 within its f16 minimum's rounding.
    auto data = source->tensorData(*weight);
    ASSERT_TRUE(data.ok()) << data.error().message;
    std::vector<float> bound(reference.size());
    WeightType kernel = weight->type == ElementType::Q4_0   ? WeightType::Q4_0
                        : weight->type == ElementType::Q4_1 ? WeightType::Q4_1
                                                            : WeightType::F32;
    ASSERT_TRUE(dequantizeRow(kernel, data->data(), bound.data(), int64_t(bound.size())).ok());
    double worst = 0;
    for (size_t i = 0; i < bound.size(); ++i)
      worst = std::max(worst, double(std::fabs(bound[i] - reference[i])));
    if (weight->type == ElementType::Q4_1)
      EXPECT_LE(worst, 15 * 0.0375 * std::ldexp(1.0, -11));  // scales <= 1.5 / (5 * sqrt(64))
    else
      EXPECT_EQ(worst, 0.0);
  }
  // The packed parts are hidden behind <prefix>.weight.
  EXPECT_EQ(source->findTensor("model.layers.0.self_attn.q_proj.qweight"), nullptr);
}

INSTANTIATE_TEST_SUITE_P(
    Packers, Int4Fixture,
    ::testing::Values(Variant{"gptq", ElementType::Q4_0},
                      Variant{"gptq-actorder", ElementType::F32},
                      Variant{"awq", ElementType::Q4_1}),
    [](const auto& info) {
      std::string name = info.param.name;
      for (char& c : name)
        if (c == '-') c = '_';
      return name;
    });

// Packing a layer unpacked from GPTQModel's own checkpoint gives back its
// bytes: qweight, scales and g_idx as they are, qzeros without v1's minus one.
TEST(Int4Pack, GptqTensorsRoundTripThroughThePackagesLayout) {
  for (const char* variant : {"gptq", "gptq-actorder"}) {
    SCOPED_TRACE(variant);
    auto ckpt = SafetensorsCheckpoint::open(fixture(variant), OpenMode::kWithData);
    ASSERT_TRUE(ckpt.ok()) << ckpt.error().message;
    const std::string prefix = "model.layers.0.mlp.down_proj";
    auto bytes = [&](const char* suffix) {
      auto data = ckpt->tensorData(*ckpt->findTensor(prefix + suffix));
      EXPECT_TRUE(data.ok());
      return std::vector<uint8_t>(data->begin(), data->end());
    };
    const std::vector<uint8_t> qweight = bytes(".qweight"), qzeros = bytes(".qzeros"),
                               scales = bytes(".scales"), g_idx = bytes(".g_idx");
    const int64_t in = int64_t(g_idx.size() / 4), out = int64_t(scales.size() / 2) / (in / 32);
    PackedInt4Tensors packed{prefix, qweight, qzeros, scales, g_idx};
    auto layer = unpackGptq(packed, in, out, in / 32, /*zeros_minus_one=*/true);
    ASSERT_TRUE(layer.ok()) << layer.error().message;
    const GptqTensors again = packGptq(*layer);
    EXPECT_EQ(again.qweight, qweight);
    EXPECT_EQ(again.scales, scales);
    EXPECT_EQ(again.g_idx, g_idx);
    PackedInt4Tensors v2{prefix, again.qweight, again.qzeros, again.scales, again.g_idx};
    auto back = unpackGptq(v2, in, out, in / 32, /*zeros_minus_one=*/false);
    ASSERT_TRUE(back.ok()) << back.error().message;
    EXPECT_EQ(back->codes, layer->codes);
    EXPECT_EQ(back->zeros, layer->zeros);
    EXPECT_EQ(back->group_of_column, layer->group_of_column);
  }
}

// A copy of a fixture whose config.json has `from` replaced by `to`.
std::string openWithConfigEdit(const std::string& variant, const std::string& from,
                               const std::string& to, testing::TempDir& dir) {
  std::string config = readText(fixture(variant) + "/config.json");
  size_t at = config.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  config.replace(at, from.size(), to);
  std::ofstream(dir.file("config.json")) << config;
  fs::copy_file(fixture(variant) + "/model.safetensors", dir.file("model.safetensors"));
  auto source = ModelSource::open(dir.path(), OpenMode::kHeaderOnly);
  return source.ok() ? "" : source.error().message;
}

TEST(Int4Config, RefusesWhatKilnDoesNotRead) {
  struct Case {
    const char* variant;
    const char* from;
    const char* to;
    const char* error;
  } cases[] = {
      {"gptq", "\"bits\": 4", "\"bits\": 8", "quantization_config.bits: 8 is not supported"},
      {"gptq", "\"quant_method\": \"gptq\"", "\"quant_method\": \"bitsandbytes\"",
       "quant_method: 'bitsandbytes' is not supported"},
      {"gptq", "\"checkpoint_format\": \"gptq\"", "\"checkpoint_format\": \"marlin\"",
       "checkpoint_format: 'marlin' is not supported"},
      {"awq", "\"version\": \"gemm\"", "\"version\": \"gemv\"",
       "version: 'gemv' is not supported"},
      {"awq", "\"zero_point\": true", "\"zero_point\": false", "zero_point: false"},
      {"gptq", "\"group_size\": 32", "\"group_size\": 48",
       "tensor 'model.layers.0.mlp.down_proj.qweight': group_size 48 does not divide "
       "in_features 128"},
  };
  for (const Case& c : cases) {
    testing::TempDir dir;
    std::string error = openWithConfigEdit(c.variant, c.from, c.to, dir);
    EXPECT_NE(error.find(c.error), std::string::npos) << c.to << " gave: " << error;
  }
}

// A one-layer GPTQ checkpoint (group 32, hidden 64) with one packed tensor
// changed by `edit`.
std::string openGptqWith(const std::function<void(std::map<std::string, std::pair<ElementType,
                                                  std::vector<int64_t>>>&)>& edit) {
  testing::TempDir dir;
  std::string config = readText(fixture("gptq") + "/config.json");
  config.replace(config.find("\"num_hidden_layers\": 2"), 22, "\"num_hidden_layers\": 1");
  std::ofstream(dir.file("config.json")) << config;
  std::map<std::string, std::pair<ElementType, std::vector<int64_t>>> tensors = {
      {"model.layers.0.self_attn.q_proj.qweight", {ElementType::I32, {8, 64}}},
      {"model.layers.0.self_attn.q_proj.qzeros", {ElementType::I32, {2, 8}}},
      {"model.layers.0.self_attn.q_proj.scales", {ElementType::F16, {2, 64}}},
      {"model.layers.0.self_attn.q_proj.g_idx", {ElementType::I32, {64}}},
  };
  edit(tensors);
  testing::SafetensorsWriter writer;
  for (auto& [name, spec] : tensors) writer.addTensorFilled(name, spec.first, spec.second);
  EXPECT_TRUE(writer.writeFile(dir.file("model.safetensors")).ok());
  auto source = ModelSource::open(dir.path(), OpenMode::kHeaderOnly);
  return source.ok() ? "" : source.error().message;
}

TEST(Int4Tensors, RefusesMissingOrMisShapedPartsNamingTheTensor) {
  const std::string q = "model.layers.0.self_attn.q_proj";
  EXPECT_EQ(openGptqWith([](auto&) {}), "");
  for (const char* part : {".qweight", ".qzeros", ".scales", ".g_idx"}) {
    std::string error = openGptqWith([&](auto& t) { t.erase(q + part); });
    EXPECT_NE(error.find("tensor '" + q + part + "' is missing"), std::string::npos) << error;
  }
  std::string error = openGptqWith([&](auto& t) { t[q + ".qweight"].second = {16, 64}; });
  EXPECT_NE(error.find("tensor '" + q + ".qweight' has shape [16, 64], expected [8, 64]"),
            std::string::npos)
      << error;
  error = openGptqWith([&](auto& t) { t[q + ".qzeros"].second = {2, 64}; });
  EXPECT_NE(error.find("tensor '" + q + ".qzeros' has shape [2, 64], expected [2, 8]"),
            std::string::npos)
      << error;
  error = openGptqWith([&](auto& t) { t[q + ".scales"].second = {1, 64}; });
  EXPECT_NE(error.find("tensor '" + q + ".scales' has shape [1, 64], expected [2, 64]"),
            std::string::npos)
      << error;
  error = openGptqWith([&](auto& t) { t[q + ".g_idx"].second = {60}; });
  EXPECT_NE(error.find("layer '" + q + "' has in_features 60"), std::string::npos) << error;
  error = openGptqWith([&](auto& t) { t[q + ".scales"].first = ElementType::F32; });
  EXPECT_NE(error.find("tensor '" + q + ".scales' is F32 [2, 64], expected a F16 matrix"),
            std::string::npos)
      << error;
}

TEST(Int4Tensors, RefusesAGroupIndexOutOfRangeAtLoad) {
  testing::TempDir dir;
  fs::copy_file(fixture("gptq-actorder") + "/config.json", dir.file("config.json"));
  auto original = SafetensorsFile::open(fixture("gptq-actorder") + "/model.safetensors",
                                        OpenMode::kWithData);
  ASSERT_TRUE(original.ok());
  testing::SafetensorsWriter writer;
  for (const TensorInfo& t : original->tensors()) {
    auto bytes = original->tensorData(t);
    std::vector<uint8_t> data(bytes->begin(), bytes->end());
    if (t.name == "model.layers.1.mlp.up_proj.g_idx") {
      const int32_t bad = 7;
      std::memcpy(data.data() + 4 * 5, &bad, 4);
    }
    writer.addTensor(t.name, t.type, t.shape, std::move(data));
  }
  ASSERT_TRUE(writer.writeFile(dir.file("model.safetensors")).ok());
  auto source = ModelSource::open(dir.path(), OpenMode::kWithData);
  ASSERT_TRUE(source.ok()) << source.error().message;
  auto data = source->tensorData(*source->findTensor("model.layers.1.mlp.up_proj.weight"));
  ASSERT_FALSE(data.ok());
  EXPECT_NE(data.error().message.find(
                "tensor 'model.layers.1.mlp.up_proj.g_idx': entry 5 is 7, expected a group in "
                "[0, 2)"),
            std::string::npos)
      << data.error().message;
}

}  // namespace
}  // namespace kiln::formats
