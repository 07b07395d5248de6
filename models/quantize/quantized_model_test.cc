// The written model's two file forms: a GGUF keeps every metadata entry
// and tensor of its source and holds the linears as q4_0/q4_1 blocks; a
// checkpoint becomes a GPTQ checkpoint the int4 loader reads back to the
// same values, with its tokenizer files beside it. A pruned model's linears
// are float: f32 in a GGUF, the source's float type in a plain checkpoint.
#include "models/quantize/quantized_model.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include <gtest/gtest.h>

#include "models/formats/gguf_file.h"
#include "models/formats/int4_checkpoint.h"
#include "models/formats/safetensors_file.h"
#include "models/formats/testing/gguf_writer.h"
#include "models/formats/testing/safetensors_writer.h"
#include "models/formats/testing/temp_dir.h"
#include "models/quantize/float_tensors.h"
#include "runtime/numerics/quant.h"

namespace kiln::quantize {
namespace {

using formats::ElementType;

std::vector<uint8_t> bytesOf(const std::vector<float>& v) {
  std::vector<uint8_t> out(v.size() * 4);
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

std::vector<float> ramp(size_t n, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * float(int(i * 37 % 101) - 50);
  return v;
}

// An int4 linear [rows, cols] rounded from ramp values.
formats::Int4Linear linear(int64_t rows, int64_t cols, const Int4Options& grid) {
  const std::vector<float> w = ramp(size_t(rows * cols), 0.01f);
  const std::vector<double> w64(w.begin(), w.end());
  return int4Rtn(w64.data(), rows, cols, grid);
}

TEST(QuantizedGguf, KeepsTheSourceAndHoldsLinearsAsBlocks) {
  formats::testing::TempDir dir;
  const std::vector<float> q = ramp(8 * 64, 0.01f), norm = ramp(64, 0.1f);
  formats::testing::GgufWriter w;
  w.addString("general.architecture", "llama")
      .addUInt32("llama.block_count", 1)
      .add("tokenizer.ggml.tokens", formats::testing::ggufStringArray({"a", "b"}))
      .addTensor("blk.0.attn_q.weight", {8, 64}, ElementType::F32, bytesOf(q))
      .addTensor("blk.0.attn_norm.weight", {64}, ElementType::F32, bytesOf(norm))
      .addTensorFilled("token_embd.weight", {2, 32}, ElementType::Q8_0);
  ASSERT_TRUE(w.writeFile(dir.file("in.gguf")).ok());
  auto source = formats::GgufFile::open(dir.file("in.gguf"));
  ASSERT_TRUE(source.ok()) << source.error().message;

  for (bool sym : {true, false}) {
    SCOPED_TRACE(sym ? "sym" : "asym");
    QuantizedModel model;
    model.method = "gptq";
    model.grid = {.group = 32, .sym = sym};
    model.linears["blk.0.attn_q.weight"] = linear(8, 64, model.grid);
    model.floats["blk.0.attn_norm.weight"] = std::vector<float>(64, 2.0f);
    ASSERT_TRUE(writeQuantizedGguf(*source, model, dir.file("out.gguf")).ok());
    auto out = formats::GgufFile::open(dir.file("out.gguf"));
    ASSERT_TRUE(out.ok()) << out.error().message;

    std::vector<std::string> keys = source->metadataKeys();
    keys.insert(keys.end(), {"kiln.quantization.method", "kiln.quantization.group_size",
                             "kiln.quantization.sym"});
    EXPECT_EQ(out->metadataKeys(), keys);
    EXPECT_EQ(*out->getStringArray("tokenizer.ggml.tokens"), (std::vector<std::string>{"a", "b"}));
    EXPECT_EQ(*out->getString("kiln.quantization.method"), "gptq");
    EXPECT_EQ(*out->getUInt("kiln.quantization.group_size"), 32u);
    EXPECT_EQ(*out->getBool("kiln.quantization.sym"), sym);

    ASSERT_EQ(out->tensors().size(), 3u);
    const formats::TensorInfo& wq = out->tensors()[0];
    EXPECT_EQ(wq.name, "blk.0.attn_q.weight");
    EXPECT_EQ(wq.type, sym ? ElementType::Q4_0 : ElementType::Q4_1);
    EXPECT_EQ(wq.shape, (std::vector<int64_t>{8, 64}));
    std::vector<float> values(8 * 64);
    ASSERT_TRUE(dequantizeRow(sym ? WeightType::Q4_0 : WeightType::Q4_1, out->tensorData(wq).data(),
                              values.data(), 8 * 64)
                    .ok());
    const formats::Int4Linear& want = model.linears["blk.0.attn_q.weight"];
    for (int64_t r = 0; r < 8; ++r)
      for (int64_t c = 0; c < 64; ++c)  // q4_1's minimum is an f16 (packInt4For)
        EXPECT_NEAR(values[size_t(r * 64 + c)], want.value(r, c), sym ? 0.0 : 2e-4) << r << " " << c;

    const formats::TensorInfo& n = out->tensors()[1];
    EXPECT_EQ(n.type, ElementType::F32);
    std::vector<float> norm_out(64);
    std::memcpy(norm_out.data(), out->tensorData(n).data(), 256);
    EXPECT_EQ(norm_out, std::vector<float>(64, 2.0f));

    const formats::TensorInfo& embd = out->tensors()[2];
    EXPECT_EQ(embd.type, ElementType::Q8_0);
    const auto a = out->tensorData(embd), b = source->tensorData(source->tensors()[2]);
    EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin(), b.end())) << "copied byte for byte";
  }
}

TEST(QuantizedCheckpoint, IsAGptqCheckpointThatLoadsToTheSameValues) {
  formats::testing::TempDir dir;
  std::filesystem::create_directories(dir.file("in"));
  formats::testing::SafetensorsWriter w;
  w.addTensor("model.layers.0.self_attn.q_proj.weight", ElementType::F32, {16, 64},
              bytesOf(ramp(16 * 64, 0.01f)))
      .addTensor("model.layers.0.input_layernorm.weight", ElementType::F32, {64}, bytesOf(ramp(64, 0.1f)))
      .addTensorFilled("model.embed_tokens.weight", ElementType::BF16, {4, 64});
  ASSERT_TRUE(w.writeFile(dir.file("in/model.safetensors")).ok());
  std::ofstream(dir.file("in/config.json")) << R"({"model_type": "llama", "hidden_size": 64})";
  std::ofstream(dir.file("in/tokenizer.json")) << R"({"model": {}})";
  auto source = formats::SafetensorsCheckpoint::open(dir.file("in"), formats::OpenMode::kWithData);
  ASSERT_TRUE(source.ok()) << source.error().message;

  QuantizedModel model;
  model.method = "awq";
  model.grid = {.group = 32, .sym = false};
  model.linears["model.layers.0.self_attn.q_proj.weight"] = linear(16, 64, model.grid);
  model.floats["model.layers.0.input_layernorm.weight"] = std::vector<float>(64, 0.5f);
  ASSERT_TRUE(writeCheckpoint(*source, model, dir.file("out")).ok());

  std::ifstream config_file(dir.file("out/config.json"));
  std::stringstream config;
  config << config_file.rdbuf();
  auto parsed = formats::parseInt4QuantConfig(config.str(), "config.json");
  ASSERT_TRUE(parsed.ok()) << parsed.error().message;
  ASSERT_TRUE(parsed->has_value());
  EXPECT_EQ((*parsed)->method, formats::Int4QuantConfig::Method::kGptq);
  EXPECT_EQ((*parsed)->group_size, 32);
  EXPECT_FALSE((*parsed)->sym);
  EXPECT_FALSE((*parsed)->zeros_minus_one);
  EXPECT_NE(config.str().find(R"("kiln_method": "awq")"), std::string::npos) << config.str();
  EXPECT_TRUE(std::filesystem::exists(dir.file("out/tokenizer.json")));

  auto out = formats::SafetensorsCheckpoint::open(dir.file("out"), formats::OpenMode::kWithData);
  ASSERT_TRUE(out.ok()) << out.error().message;
  auto int4 = formats::Int4Checkpoint::open(*out, **parsed);
  ASSERT_TRUE(int4.ok()) << int4.error().message;
  const formats::TensorInfo* q = int4->findTensor("model.layers.0.self_attn.q_proj.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->type, ElementType::Q4_1);
  auto values = int4->dequantized(q->name);
  ASSERT_TRUE(values.ok()) << values.error().message;
  const formats::Int4Linear& want = model.linears[q->name];
  for (int64_t r = 0; r < 16; ++r)
    for (int64_t c = 0; c < 64; ++c) EXPECT_EQ((*values)[size_t(r * 64 + c)], want.value(r, c));
  const formats::TensorInfo* norm = int4->findTensor("model.layers.0.input_layernorm.weight");
  ASSERT_NE(norm, nullptr);
  EXPECT_EQ(norm->type, ElementType::F32);
  const formats::TensorInfo* embed = int4->findTensor("model.embed_tokens.weight");
  ASSERT_NE(embed, nullptr);
  EXPECT_EQ(embed->type, ElementType::BF16);
}

// Every other value of `rows` x `cols` ramp values zeroed: a 2:4 pattern.
std::vector<float> pruned(int64_t rows, int64_t cols) {
  std::vector<float> v = ramp(size_t(rows * cols), 0.01f);
  for (size_t i = 1; i < v.size(); i += 2) v[i] = 0.0f;
  return v;
}

TEST(PrunedGguf, HoldsLinearsAsF32WithSparsityEntries) {
  formats::testing::TempDir dir;
  formats::testing::GgufWriter w;
  w.addString("general.architecture", "llama")
      .addTensorFilled("blk.0.attn_q.weight", {8, 64}, ElementType::Q4_1)
      .addTensorFilled("token_embd.weight", {2, 32}, ElementType::Q8_0);
  ASSERT_TRUE(w.writeFile(dir.file("in.gguf")).ok());
  auto source = formats::GgufFile::open(dir.file("in.gguf"));
  ASSERT_TRUE(source.ok()) << source.error().message;

  QuantizedModel model;
  model.method = "sparsegpt";
  model.floats["blk.0.attn_q.weight"] = pruned(8, 64);
  ASSERT_TRUE(writeQuantizedGguf(*source, model, dir.file("out.gguf")).ok());
  auto out = formats::GgufFile::open(dir.file("out.gguf"));
  ASSERT_TRUE(out.ok()) << out.error().message;
  std::vector<std::string> keys = source->metadataKeys();
  keys.insert(keys.end(), {"kiln.sparsity.method", "kiln.sparsity.pattern"});
  EXPECT_EQ(out->metadataKeys(), keys);
  EXPECT_EQ(*out->getString("kiln.sparsity.method"), "sparsegpt");
  EXPECT_EQ(*out->getString("kiln.sparsity.pattern"), "2:4");
  const formats::TensorInfo& wq = out->tensors()[0];
  EXPECT_EQ(wq.type, ElementType::F32);
  std::vector<float> values(8 * 64);
  std::memcpy(values.data(), out->tensorData(wq).data(), values.size() * 4);
  EXPECT_EQ(values, pruned(8, 64));
  EXPECT_EQ(out->tensors()[1].type, ElementType::Q8_0);

  auto again = writeQuantizedGguf(*out, model, dir.file("again.gguf"));
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.error().message.find("'kiln.sparsity.method' is already there: the model was pruned"),
            std::string::npos)
      << again.error().message;
}

TEST(PrunedCheckpoint, KeepsEachTensorsFloatTypeAndNoQuantizationConfig) {
  formats::testing::TempDir dir;
  std::filesystem::create_directories(dir.file("in"));
  formats::testing::SafetensorsWriter w;
  w.addTensorFilled("model.layers.0.self_attn.q_proj.weight", ElementType::BF16, {16, 64})
      .addTensorFilled("model.layers.0.mlp.down_proj.weight", ElementType::F32, {16, 64});
  ASSERT_TRUE(w.writeFile(dir.file("in/model.safetensors")).ok());
  std::ofstream(dir.file("in/config.json")) << R"({"model_type": "llama", "hidden_size": 64})";
  auto source = formats::SafetensorsCheckpoint::open(dir.file("in"), formats::OpenMode::kWithData);
  ASSERT_TRUE(source.ok()) << source.error().message;

  QuantizedModel model;
  model.method = "sparsegpt";
  model.floats["model.layers.0.self_attn.q_proj.weight"] = pruned(16, 64);
  model.floats["model.layers.0.mlp.down_proj.weight"] = pruned(16, 64);
  ASSERT_TRUE(writeCheckpoint(*source, model, dir.file("out")).ok());

  std::ifstream config_file(dir.file("out/config.json"));
  std::stringstream config;
  config << config_file.rdbuf();
  EXPECT_EQ(config.str().find("quantization_config"), std::string::npos) << config.str();
  auto out = formats::SafetensorsCheckpoint::open(dir.file("out"), formats::OpenMode::kWithData);
  ASSERT_TRUE(out.ok()) << out.error().message;
  for (const auto& [name, type] : {std::pair{"model.layers.0.self_attn.q_proj.weight", ElementType::BF16},
                                   {"model.layers.0.mlp.down_proj.weight", ElementType::F32}}) {
    const formats::TensorInfo* t = out->findTensor(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->type, type) << name;
    auto data = out->tensorData(*t);
    ASSERT_TRUE(data.ok()) << data.error().message;
    const BoundWeight bound{.name = name, .format_type = t->type, .shape = t->shape,
                            .data = data->data(), .size_bytes = data->size()};
    auto values = boundWeightF32(bound);
    ASSERT_TRUE(values.ok()) << values.error().message;
    const std::vector<float> want = pruned(16, 64);
    for (size_t i = 0; i < want.size(); ++i) {
      // bf16 keeps the zeros and rounds the kept values to 8 bits.
      EXPECT_EQ((*values)[i] == 0.0f, want[i] == 0.0f) << name << " " << i;
      EXPECT_NEAR((*values)[i], want[i], std::fabs(want[i]) / 128) << name << " " << i;
    }
  }
}

}  // namespace
}  // namespace kiln::quantize
