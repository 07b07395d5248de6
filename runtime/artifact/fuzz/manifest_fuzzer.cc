// libFuzzer entry for the compiled artifact's manifest.json (the plan the
// runtime loads): any text must give a validated Manifest or one Error
// line, never a crash.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "runtime/artifact/manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto manifest = kiln::Manifest::parse(text, "fuzz/manifest.json");
  if (!manifest.ok()) {
    if (manifest.error().message.find('\n') != std::string::npos) __builtin_trap();
    return 0;
  }
  for (const auto& weight : manifest->weights)
    if (manifest->findWeight(weight.id) == nullptr) __builtin_trap();
  for (const auto& [name, entry] : manifest->entries)
    if (manifest->findEntry(name) == nullptr) __builtin_trap();
  return 0;
}
