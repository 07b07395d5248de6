// libFuzzer entry for the safetensors reader (both open modes).
#include <cstddef>
#include <cstdint>
#include <span>

#include "models/formats/safetensors_file.h"

using kiln::formats::OpenMode;
using kiln::formats::SafetensorsFile;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const uint8_t> bytes(data, size);
  (void)SafetensorsFile::openBuffer(bytes, "fuzz.safetensors", OpenMode::kHeaderOnly);
  auto file = SafetensorsFile::openBuffer(bytes, "fuzz.safetensors", OpenMode::kWithData);
  if (!file.ok()) return 0;
  volatile uint8_t sink = 0;
  for (const auto& tensor : file->tensors()) {
    auto t = file->tensorData(tensor);
    if (!t.ok() || t->size() != tensor.size_bytes) __builtin_trap();
    if (!t->empty()) sink = sink ^ t->front() ^ t->back();
  }
  return 0;
}
