// libFuzzer entry for compressed-tensors sparse checkpoints: a config.json
// and a model.safetensors (parts separated by a "%%" line,
// test/fuzz/fuzz_input.h). The sparsity_config is read from the first; when
// there is one, the second is opened as that checkpoint with every 2-D
// <module>.weight taken for a linear, and every tensor's data is read
// (decompressed, checked 2:4). Any input must give data or an Error, never a
// crash or a read past the compressed tensors.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

#include "models/formats/safetensors_file.h"
#include "models/formats/sparse_checkpoint.h"
#include "test/fuzz/fuzz_input.h"

namespace fs = std::filesystem;
using namespace kiln::formats;

namespace {

// SafetensorsCheckpoint reads files: one directory per process, removed at exit.
struct ScratchDir {
  fs::path path = fs::temp_directory_path() / ("kiln-sparse-fuzz-" + std::to_string(getpid()));
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
  auto config = parseSparsityConfig(parts[0], "fuzz/config.json");
  if (!config.ok() || !config->has_value()) return 0;

  const std::string file = checkpointDir() + "/model.safetensors";
  std::ofstream(file, std::ios::binary | std::ios::trunc)
      .write(parts[1].data(), static_cast<std::streamsize>(parts[1].size()));
  auto checkpoint = SafetensorsCheckpoint::open(checkpointDir(), OpenMode::kWithData);
  if (!checkpoint.ok()) return 0;
  std::vector<std::string> linears;
  for (const TensorInfo& t : checkpoint->tensors())
    if (t.shape.size() == 2 && t.name.ends_with(".weight")) linears.push_back(t.name);
  auto sparse = SparseCheckpoint::open(*checkpoint, **config, linears);
  if (!sparse.ok()) return 0;
  for (const TensorInfo& tensor : sparse->tensors()) {
    auto bytes = sparse->tensorData(tensor);
    if (bytes.ok() && bytes->size() != tensor.size_bytes) __builtin_trap();
  }
  return 0;
}
