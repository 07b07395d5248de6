// libFuzzer entry for the GGUF reader: any byte string must yield a GgufFile
// or one Error line, never a crash, an out-of-bounds read or a huge
// allocation. On success it also drives what consumers do next (typed
// getters, config derivation, touching every tensor's bytes) so those paths
// are fuzzed too.
#include <cstddef>
#include <cstdint>
#include <span>

#include "models/formats/gguf_file.h"
#include "models/formats/model_config.h"

using kiln::formats::GgufFile;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = GgufFile::openBuffer(std::span<const uint8_t>(data, size), "fuzz.gguf");
  if (!file.ok()) {
    // Errors are one line.
    for (char c : file.error().message)
      if (c == '\n') __builtin_trap();
    return 0;
  }
  for (const std::string& key : file->metadataKeys()) {
    (void)file->getUInt(key);
    (void)file->getInt(key);
    (void)file->getFloat(key);
    (void)file->getBool(key);
    (void)file->getString(key);
    (void)file->getStringArray(key);
    (void)file->getFloatArray(key);
    (void)file->getIntArray(key);
    (void)file->find(key)->typeName();
  }
  (void)kiln::formats::configFromGguf(*file);
  volatile uint8_t sink = 0;
  for (const auto& tensor : file->tensors()) {
    std::span<const uint8_t> bytes = file->tensorData(tensor);
    if (bytes.size() != tensor.size_bytes) __builtin_trap();
    if (!bytes.empty()) sink = sink ^ bytes.front() ^ bytes.back();
  }
  return 0;
}
