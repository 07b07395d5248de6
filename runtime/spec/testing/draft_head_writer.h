// Writes Medusa draft-head checkpoints (runtime/spec/draft_head.h's layout)
// of random weights for the tests of both backends.
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "models/formats/testing/safetensors_writer.h"

namespace kiln::spec::testing {

// A head checkpoint of `heads` blocks at `hidden` in the temporary
// directory kiln-draft-head-NAME, weights uniform in [-scale, scale] from
// `seed`; `config` replaces the config.json written (for malformed ones).
// Returns the directory, empty if the weights could not be written.
inline std::string writeDraftHead(const std::string& name, int64_t hidden, int64_t heads, float scale,
                                  unsigned seed, const std::string& config = "") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("kiln-draft-head-" + name);
  fs::create_directories(dir);
  std::ofstream(dir / "config.json")
      << (config.empty() ? "{\"kind\": \"medusa\", \"hidden_size\": " + std::to_string(hidden) +
                               ", \"heads\": " + std::to_string(heads) + "}"
                         : config);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  auto bytes = [&](int64_t count) {
    std::vector<uint8_t> out(size_t(count) * 4);
    for (int64_t i = 0; i < count; ++i) {
      const float v = u(rng);
      std::memcpy(out.data() + 4 * i, &v, 4);
    }
    return out;
  };
  formats::testing::SafetensorsWriter writer;
  for (int64_t i = 0; i < heads; ++i) {
    writer.addTensor("heads." + std::to_string(i) + ".weight", formats::ElementType::F32, {hidden, hidden},
                     bytes(hidden * hidden));
    writer.addTensor("heads." + std::to_string(i) + ".bias", formats::ElementType::F32, {hidden}, bytes(hidden));
  }
  if (!writer.writeFile((dir / "model.safetensors").string()).ok()) return {};
  return dir.string();
}

}  // namespace kiln::spec::testing
