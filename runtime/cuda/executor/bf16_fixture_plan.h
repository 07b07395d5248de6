// Test-only: a fixture's f32 plan with every activation and the KV cache in
// bf16 (rows half as wide in bytes, the planned offsets kept), or the KV
// cache in `kv_type` (int8, fp8e4m3: with their scales); weights stay f32. Its kernel variants are chosen again for bf16, as the compiler would
// (kernel_selection.h). The bf16 plan the executor tests run on the
// tiny-llama fixture, here and in test/gpu/cuda_vs_cpu_executor_test.cc.
// fixturePlan keeps the f32 activations and changes the KV cache only.
#pragma once

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>
#include <string>

#include "codegen/cuda/kernel_selection.h"
#include "runtime/artifact/manifest.h"
#include "runtime/support/error.h"

namespace kiln::cuda::testing {

// `fixture`: a folder with `folder`/manifest.json (artifact-spec: the plan
// with a verify entry); `activation_type` bf16 or f32.
inline Result<Manifest> fixturePlan(const std::string& fixture, const std::string& activation_type,
                                    const std::string& kv_type, const std::string& folder = "artifact") {
  const std::string path = fixture + "/" + folder + "/manifest.json";
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  auto j = nlohmann::json::parse(text.str(), nullptr, false);
  if (j.is_discarded()) return makeError("fixture manifest is not JSON");
  j["activation_type"] = activation_type;
  j["kv_cache"]["type"] = kv_type;
  if (kv_type == "int8" || kv_type == "fp8e4m3") j["kv_cache"]["scales"] = "token_head";
  for (auto& [name, entry] : j["entries"].items()) {
    for (auto& v : entry["values"]) {
      if (activation_type != "bf16" || v["type"] != "f32") continue;  // verify's i32 and i8 values stay
      v["type"] = "bf16";
      v["row_bytes"] = v["row_bytes"].get<int64_t>() / 2;
    }
    for (auto& step : entry["steps"])
      if (step["params"].contains("kv_type")) step["params"]["kv_type"] = kv_type;
  }
  auto manifest = Manifest::parse(j.dump(), path);
  if (!manifest.ok()) return manifest;
  for (auto& [name, entry] : manifest->entries) {
    auto variants = cuda_codegen::selectKernels(cuda_codegen::planEntryOf(entry, activation_type),
                                                {manifest->target, activation_type});
    if (!variants.ok()) return variants.error();
    for (size_t i = 0; i < entry.steps.size(); ++i) entry.steps[i].variants = (*variants)[i];
  }
  return manifest;
}

inline Result<Manifest> bf16Plan(const std::string& fixture, const std::string& kv_type = "bf16",
                                 const std::string& folder = "artifact") {
  return fixturePlan(fixture, "bf16", kv_type, folder);
}

}  // namespace kiln::cuda::testing
