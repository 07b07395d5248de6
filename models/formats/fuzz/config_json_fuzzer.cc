// libFuzzer entry for config.json: the same text through every reader of it
// (the transformer config, the state-space config, the 4-bit quantization
// config). Each must give a config or one Error line, never a crash.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "models/formats/int4_checkpoint.h"
#include "models/formats/model_config.h"
#include "models/formats/ssm_config.h"

namespace {

void requireOneLine(const kiln::Error& error) {
  if (error.message.empty() || error.message.find('\n') != std::string::npos) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto model = kiln::formats::parseHfConfigText(text, "fuzz/config.json");
  if (!model.ok()) requireOneLine(model.error());
  auto ssm = kiln::formats::parseSsmConfigText(text, "fuzz/config.json");
  if (!ssm.ok()) requireOneLine(ssm.error());
  auto quant = kiln::formats::parseInt4QuantConfig(text, "fuzz/config.json");
  if (!quant.ok()) requireOneLine(quant.error());
  return 0;
}
