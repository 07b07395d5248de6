// Writes the seed corpus for the format fuzzers: small valid GGUF and
// safetensors files covering every metadata kind and several tensor types,
// and one-layer GPTQ and AWQ checkpoints (config.json, a "%%" line, the
// safetensors bytes: int4_checkpoint_fuzzer.cc).
// Usage: make_corpus OUTPUT_DIR
//   (writes OUTPUT_DIR/gguf/*, OUTPUT_DIR/safetensors/*, OUTPUT_DIR/int4_checkpoint/*)
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "models/formats/testing/gguf_writer.h"
#include "models/formats/testing/safetensors_writer.h"

using namespace kiln::formats;
using namespace kiln::formats::testing;

namespace {

bool write(const std::string& path, const kiln::Status& status) {
  if (!status.ok()) std::fprintf(stderr, "%s\n", status.error().message.c_str());
  return status.ok();
}

GgufWriter llamaMetadata() {
  GgufWriter w;
  w.addString("general.architecture", "llama")
      .addUInt32("llama.block_count", 1)
      .addUInt32("llama.context_length", 64)
      .addUInt32("llama.embedding_length", 32)
      .addUInt32("llama.feed_forward_length", 64)
      .addUInt32("llama.attention.head_count", 2)
      .addUInt32("llama.attention.head_count_kv", 1)
      .addFloat32("llama.rope.freq_base", 10000.f)
      .addFloat32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  return w;
}

// config.json, the part separator, then the checkpoint's bytes.
bool writeInt4Seed(const std::string& path, const std::string& config,
                   const SafetensorsWriter& checkpoint) {
  std::vector<uint8_t> bytes = checkpoint.serialize();
  std::ofstream out(path, std::ios::binary);
  out << config << "\n%%\n";
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  return static_cast<bool>(out);
}

// One packed linear layer, in_features 32, out_features 8, one group of 32.
SafetensorsWriter int4Layer(bool gptq) {
  const std::string p = "model.layers.0.mlp.down_proj";
  SafetensorsWriter w;
  w.addTensorFilled(p + ".qweight", ElementType::I32, gptq ? std::vector<int64_t>{4, 8}
                                                           : std::vector<int64_t>{32, 1});
  w.addTensorFilled(p + ".qzeros", ElementType::I32, {1, 1});
  w.addTensorFilled(p + ".scales", ElementType::F16, {1, 8});
  if (gptq) w.addTensor(p + ".g_idx", ElementType::I32, {32}, std::vector<uint8_t>(4 * 32, 0));
  w.addTensorFilled("model.norm.weight", ElementType::F32, {8});
  return w;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTPUT_DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  std::filesystem::create_directories(dir + "/gguf");
  std::filesystem::create_directories(dir + "/safetensors");
  std::filesystem::create_directories(dir + "/int4_checkpoint");
  bool ok = true;

  // Every metadata value kind, no tensors.
  GgufWriter meta;
  meta.add("u8", ggufUInt8(1)).add("i8", ggufInt8(-1)).add("u16", ggufUInt16(2))
      .add("i16", ggufInt16(-2)).addUInt32("u32", 3).addInt32("i32", -3).addUInt64("u64", 4)
      .add("i64", ggufInt64(-4)).addFloat32("f32", 0.5f).add("f64", ggufFloat64(0.25))
      .addBool("b", true).addString("s", "text")
      .add("tokens", ggufStringArray({"a", "b"}))
      .add("scores", ggufFloat32Array({0.f, 1.f}))
      .add("types", ggufInt32Array({1, 2}))
      .add("nested", ggufArrayOfArrays({ggufInt32Array({1}), ggufStringArray({"x"})}));
  ok &= write(dir, meta.writeFile(dir + "/gguf/metadata.gguf"));

  // A one-layer llama with mixed tensor types and a custom alignment.
  GgufWriter llama = llamaMetadata();
  llama.setAlignment(16);
  llama.addTensorFilled("token_embd.weight", {2, 32}, ElementType::Q8_0);
  llama.addTensorFilled("blk.0.attn_norm.weight", {32}, ElementType::F32);
  llama.addTensorFilled("blk.0.attn_q.weight", {4, 32}, ElementType::Q4_0);
  llama.addTensorFilled("blk.0.attn_k.weight", {2, 32}, ElementType::Q4_1);
  llama.addTensorFilled("blk.0.attn_v.weight", {2, 32}, ElementType::F16);
  llama.addTensorFilled("blk.0.attn_output.weight", {2, 32}, ElementType::BF16);
  llama.addTensorFilled("blk.0.ffn_norm.weight", {32}, ElementType::F32);
  llama.addTensorFilled("blk.0.ffn_gate.weight", {1, 256}, ElementType::Q4_K);
  llama.addTensorFilled("output_norm.weight", {32}, ElementType::F32);
  ok &= write(dir, llama.writeFile(dir + "/gguf/llama.gguf"));

  // Version 2, a 4-d tensor and a K-quant.
  GgufWriter v2;
  v2.setVersion(2).addString("general.architecture", "qwen2");
  v2.addTensorFilled("t", {2, 1, 1, 256}, ElementType::Q6_K);
  ok &= write(dir, v2.writeFile(dir + "/gguf/v2.gguf"));

  SafetensorsWriter st;
  st.addMetadata("format", "pt");
  st.addTensorFilled("a", ElementType::BF16, {2, 3});
  st.addTensorFilled("b", ElementType::F32, {4});
  st.addTensorFilled("c", ElementType::BOOL, {0});
  ok &= write(dir, st.writeFile(dir + "/safetensors/small.safetensors"));

  ok &= writeInt4Seed(dir + "/int4_checkpoint/gptq",
                      R"({"quantization_config": {"quant_method": "gptq", "bits": 4, )"
                      R"("group_size": 32, "desc_act": false, "sym": true, )"
                      R"("checkpoint_format": "gptq"}})",
                      int4Layer(true));
  ok &= writeInt4Seed(dir + "/int4_checkpoint/gptq-actorder-v2",
                      R"({"quantization_config": {"quant_method": "gptq", "bits": 4, )"
                      R"("group_size": -1, "desc_act": true, "sym": false, "format": "gptq_v2"}})",
                      int4Layer(true));
  ok &= writeInt4Seed(dir + "/int4_checkpoint/awq",
                      R"({"quantization_config": {"quant_method": "awq", "w_bit": 4, )"
                      R"("q_group_size": 32, "zero_point": true, "version": "gemm"}})",
                      int4Layer(false));
  return ok ? 0 : 1;
}
