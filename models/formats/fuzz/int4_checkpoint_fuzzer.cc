// libFuzzer entry for GPTQ and AWQ checkpoints: a config.json and a
// model.safetensors (parts separated by a "%%" line, test/fuzz/fuzz_input.h).
// The quantization config is read from the first; when it names a 4-bit
// method, the second is opened as that checkpoint, its packed layers are
// checked, converted and dequantized. Any input must give data or an Error,
// never a crash or an out-of-bounds read of the packed tensors.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

#include "models/formats/int4_checkpoint.h"
#include "models/formats/safetensors_file.h"
#include "test/fuzz/fuzz_input.h"

namespace fs = std::filesystem;
using namespace kiln::formats;

namespace {

// The checkpoint directory: SafetensorsCheckpoint reads files, so each input
// is written to one directory per process, removed at exit.
struct ScratchDir {
  fs::path path = fs::temp_directory_path() / ("kiln-int4-fuzz-" + std::to_string(getpid()));
  ScratchDir() { fs::create_directories(path); }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

const std::string& checkpointDir() {
  static const ScratchDir dir;
  static const std::string path = dir.path.string();
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto parts = kiln::fuzz::splitParts(data, size, 2);
  auto config = parseInt4QuantConfig(parts[0], "fuzz/config.json");
  if (!config.ok() || !config->has_value()) return 0;

  const std::string file = checkpointDir() + "/model.safetensors";
  std::ofstream(file, std::ios::binary | std::ios::trunc)
      .write(parts[1].data(), static_cast<std::streamsize>(parts[1].size()));
  auto checkpoint = SafetensorsCheckpoint::open(checkpointDir(), OpenMode::kWithData);
  if (!checkpoint.ok()) return 0;
  auto int4 = Int4Checkpoint::open(*checkpoint, **config);
  if (!int4.ok()) return 0;
  for (const TensorInfo& tensor : int4->tensors()) {
    auto bytes = int4->tensorData(tensor);
    if (bytes.ok() && bytes->size() != tensor.size_bytes) __builtin_trap();
    if (tensor.name.ends_with(".weight")) (void)int4->dequantized(tensor.name);
  }
  return 0;
}
