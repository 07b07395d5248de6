// Dumps every step result of the CPU executor for one prompt, to compare
// kiln's intermediate values with llama.cpp's
// (test/reference/dump_llamacpp_tensors.py, compare_llamacpp_tensors.py).
//
//   kiln_dump_cpu_steps ARTIFACT_DIR OUT_DIR PROMPT_IDS [DECODE_IDS]
//
// PROMPT_IDS and DECODE_IDS are comma-separated token ids. The prompt runs as
// one prefill batch, then each DECODE_IDS token alone. Files:
//   OUT_DIR/p/SSSS_KIND_rR_ROWSxWIDTH.f32   prefill, step SSSS, result R
//   OUT_DIR/dI/...                          decode step I
// each raw little-endian f32 [ROWS, WIDTH].
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/artifact/manifest.h"
#include "runtime/backend/plan_kv_pool.h"
#include "runtime/cpu/executor/executor.h"
#include "runtime/kv/block_pool.h"
#include "runtime/weights/weight_store.h"

namespace {

std::vector<int32_t> parseIds(const std::string& text) {
  std::vector<int32_t> ids;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) ids.push_back(std::stoi(item));
  return ids;
}

int fail(const std::string& message) {
  std::fprintf(stderr, "kiln_dump_cpu_steps: %s\n", message.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace kiln;
  if (argc < 4)
    return fail("usage: kiln_dump_cpu_steps ARTIFACT_DIR OUT_DIR PROMPT_IDS [DECODE_IDS]");
  const std::filesystem::path out_dir = argv[2];
  std::vector<int32_t> tokens = parseIds(argv[3]);
  const std::vector<int32_t> decode = argc > 4 ? parseIds(argv[4]) : std::vector<int32_t>{};

  auto manifest = Manifest::load(argv[1]);
  if (!manifest.ok()) return fail(manifest.error().message);
  auto weights = WeightStore::open(*manifest);
  if (!weights.ok()) return fail(weights.error().message);
  const int64_t budget = int64_t(tokens.size() + decode.size());
  auto executor =
      cpu::CpuExecutor::create(*manifest, *weights, kvPoolConfigFor(*manifest, 64), budget);
  if (!executor.ok()) return fail(executor.error().message);
  cpu::CpuExecutor& ex = **executor;

  std::filesystem::path dir;
  ex.setStepObserver([&](size_t step, StepKind kind, size_t result,
                                   std::span<const float> rows, int64_t width) {
    char name[96];
    std::snprintf(name, sizeof(name), "%04zu_%s_r%zu_%zdx%zd.f32", step,
                  std::string(stepKindName(kind)).c_str(), result,
                  ssize_t(int64_t(rows.size()) / width), ssize_t(width));
    std::ofstream(dir / name, std::ios::binary)
        .write(reinterpret_cast<const char*>(rows.data()), std::streamsize(rows.size_bytes()));
  });

  BlockTable table(manifest->kv_cache.page_size);
  std::vector<float> logits(size_t(ex.vocabSize()));
  auto feed = [&](int64_t begin, int64_t end, const std::string& label) -> bool {
    dir = out_dir / label;
    std::filesystem::create_directories(dir);
    if (!table.append(ex.blockPool(), end - table.numTokens()).ok()) return false;
    std::vector<int32_t> ids(tokens.begin() + begin, tokens.begin() + end);
    std::vector<int32_t> positions(size_t(end - begin)), slots(size_t(end - begin));
    std::iota(positions.begin(), positions.end(), int32_t(begin));
    if (!table.slots(begin, slots).ok()) return false;
    std::vector<int32_t> blocks(table.blocks().begin(), table.blocks().end());
    std::vector<int32_t> query_start = {0, int32_t(end - begin)}, kv_lens = {int32_t(end)};
    BatchInputs in{ids, positions, slots, blocks, int(blocks.size()), query_start, kv_lens};
    Status status = ex.forward(in, logits);
    if (!status.ok()) std::fprintf(stderr, "%s\n", status.error().message.c_str());
    return status.ok();
  };
  if (!feed(0, int64_t(tokens.size()), "p")) return fail("prefill failed");
  for (size_t i = 0; i < decode.size(); ++i) {
    tokens.push_back(decode[i]);
    if (!feed(int64_t(tokens.size()) - 1, int64_t(tokens.size()), "d" + std::to_string(i)))
      return fail("decode failed");
  }
  std::printf("wrote %s\n", out_dir.c_str());
  return 0;
}
