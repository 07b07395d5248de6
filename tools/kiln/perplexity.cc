// kiln bench ppl MODEL --text FILE [--ctx N]: perplexity of a text, windowed
// as llama.cpp's perplexity tool windows it, so the two compare on the same
// GGUF and text: the text's tokens cut into windows of N, each window's
// first token replaced by BOS where the vocabulary has one, and the second
// half of each window scored (each token given every token before it in its
// window). The figure goes to stdout; progress to stderr.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/tokenizer/tokenizer.h"
#include "tools/kiln/commands.h"

namespace kiln {

int perplexityCommand(const CliArgs& args) {
  if (args.positionals().size() != 2) return fail("kiln bench ppl needs one MODEL and --text FILE");
  auto text_path = args.get("text");
  if (!text_path) return fail("kiln bench ppl: --text FILE names the text to score");
  std::ifstream file(*text_path, std::ios::binary);
  if (!file) return fail(fmt::format("{}: cannot read the text", *text_path));
  std::stringstream text;
  text << file.rdbuf();
  auto ctx = args.getInt("ctx", 512);
  if (!ctx.ok()) return fail(ctx.error().message);
  if (*ctx < 16 || *ctx > 32768) return fail(fmt::format("--ctx {}: expected 16 to 32768 tokens a window", *ctx));

  auto options = engineOptionsFrom(args);
  if (!options.ok()) return fail(options.error().message);
  options->max_batch_tokens = std::min<int64_t>(*ctx, 512);
  options->kv_cache_tokens = *ctx + 64;
  auto compile_flags = compileFlagsFrom(args);
  if (!compile_flags.ok()) return fail(compile_flags.error().message);
  auto engine = openEngine(args.positionals()[1], *options, *compile_flags);
  if (!engine.ok()) return fail(engine.error().message);
  Engine& e = **engine;
  if (*ctx > e.contextLength())
    return fail(fmt::format("--ctx {} exceeds the model's context length {}", *ctx, e.contextLength()));

  const std::vector<int32_t> tokens = e.tokenizer().encode(text.str(), EncodeOptions{.add_special = false});
  const int64_t windows = int64_t(tokens.size()) / *ctx;
  if (windows < 1)
    return fail(fmt::format("{}: {} tokens, fewer than one window of --ctx {}", *text_path, tokens.size(), *ctx));
  const int32_t bos = e.tokenizer().bos();
  const int64_t first = *ctx / 2;  // scored: predictions of tokens first + 1 .. ctx - 1
  double nll = 0.0, nll2 = 0.0;
  int64_t scored = 0;
  for (int64_t w = 0; w < windows; ++w) {
    std::vector<int32_t> window(tokens.begin() + w * *ctx, tokens.begin() + (w + 1) * *ctx);
    if (bos >= 0) window[0] = bos;
    auto logprobs = e.scoreTokens(window);  // [ctx - 1]: token j + 1 given 0..j
    if (!logprobs.ok()) return fail(logprobs.error().message);
    for (int64_t j = first; j < *ctx - 1; ++j) {
      const double x = -(*logprobs)[size_t(j)];
      nll += x;
      nll2 += x * x;
      ++scored;
    }
    std::fprintf(stderr, "\rkiln bench ppl: window %lld/%lld, perplexity so far %.4f", (long long)(w + 1),
                 (long long)windows, std::exp(nll / double(scored)));
  }
  std::fprintf(stderr, "\n");
  const double mean = nll / double(scored);
  // The perplexity's uncertainty from the per-token NLL's spread (as llama.cpp reports it).
  const double sd = std::sqrt(std::max(0.0, nll2 / double(scored) - mean * mean) / double(scored - 1));
  const double ppl = std::exp(mean);
  std::printf("kiln bench ppl: %s, %zu tokens of %s, %lld windows of %lld, %lld tokens scored, %s\n",
              args.positionals()[1].c_str(), tokens.size(), text_path->c_str(), (long long)windows, (long long)*ctx,
              (long long)scored, e.backendName().c_str());
  std::printf("perplexity %.4f +/- %.4f\n", ppl, ppl * sd);
  if (auto json_path = args.get("json")) {
    nlohmann::json j{{"model", args.positionals()[1]}, {"text", *text_path}, {"tokens", tokens.size()},
                     {"ctx", *ctx}, {"windows", windows}, {"scored", scored}, {"perplexity", ppl},
                     {"perplexity_error", ppl * sd}, {"backend", e.backendName()}};
    std::ofstream(*json_path) << j.dump(2) << "\n";
  }
  return 0;
}

}  // namespace kiln
