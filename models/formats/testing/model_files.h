// Where tests find real model files, and the rule for when one is missing:
// with KILN_REQUIRE_MODELS=1 (CI with the model cache) the test fails;
// otherwise it is skipped with the reason. Never silently passes.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace kiln::formats::testing {

// $KILN_MODEL_DIR, else ~/.cache/kiln/models.
inline std::string modelCacheDir() {
  if (const char* dir = std::getenv("KILN_MODEL_DIR"); dir != nullptr && *dir != '\0')
    return dir;
  const char* home = std::getenv("HOME");
  return std::string(home != nullptr ? home : "") + "/.cache/kiln/models";
}

inline std::string smollm2GgufPath() {
  return modelCacheDir() + "/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
}

inline bool modelsRequired() {
  const char* v = std::getenv("KILN_REQUIRE_MODELS");
  return v != nullptr && std::string(v) == "1";
}

}  // namespace kiln::formats::testing

// Use at the top of a TEST body.
#define KILN_REQUIRE_MODEL_FILE(path)                                                        \
  do {                                                                                      \
    if (!std::filesystem::exists(path)) {                                                   \
      if (::kiln::formats::testing::modelsRequired()) {                                     \
        FAIL() << "model file " << (path) << " is missing and KILN_REQUIRE_MODELS=1";       \
      } else {                                                                              \
        GTEST_SKIP() << "model file " << (path)                                             \
                     << " is missing (fetch it with the setup script; set "                 \
                        "KILN_REQUIRE_MODELS=1 to make this a failure)";                    \
      }                                                                                     \
    }                                                                                       \
  } while (0)
