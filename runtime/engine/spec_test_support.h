// What the speculative-decoding engine tests share: the SmolLM2 artifact
// compiled with a verify entry (the ctest fixture), greedy requests that
// speculate with a given method, and running a batch to idle while
// collecting each request's tokens.
#pragma once

#include <cstdlib>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/engine/engine.h"

namespace kiln::spec_testing {

inline std::string artifactDir() {
  const char* dir = std::getenv("KILN_SMOLLM2_SPEC_ARTIFACT");
  return dir ? dir : "(KILN_SMOLLM2_SPEC_ARTIFACT unset: run this test through ctest)";
}

// Greedy, ignoring EOS; speculates with `method` when `widths` is non-empty.
inline GenerationRequest greedyRequest(const std::string& prompt, int max_tokens, SpecMethod method,
                                       std::vector<int64_t> widths) {
  GenerationRequest r;
  r.prompt = prompt;
  r.sampling.max_tokens = max_tokens;
  r.sampling.ignore_eos = true;
  if (!widths.empty()) {
    r.speculation.method = method;
    r.speculation.tree.widths = std::move(widths);
  }
  return r;
}

// Submits every request, appends their ids to `ids`, runs until idle and
// returns the tokens streamed for each id.
inline std::map<int64_t, std::vector<int32_t>> runAll(Engine& engine, const std::vector<GenerationRequest>& requests,
                                                      std::vector<int64_t>& ids) {
  std::map<int64_t, std::vector<int32_t>> tokens;
  for (const GenerationRequest& r : requests) {
    auto id = engine.submit(r, [&](int64_t id, int32_t token, std::string_view) {
      if (token >= 0) tokens[id].push_back(token);
    });
    EXPECT_TRUE(id.ok()) << (id.ok() ? "" : id.error().message);
    if (id.ok()) ids.push_back(*id);
  }
  Status status = engine.runUntilIdle();
  EXPECT_TRUE(status.ok()) << (status.ok() ? "" : status.error().message);
  return tokens;
}

}  // namespace kiln::spec_testing
