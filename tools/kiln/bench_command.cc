// kiln bench decode|prefill MODEL [options]; the options are in benchCli()'s
// table (cli_flags.cc). Measures prefill and decode on kiln and, in the same
// run, on the peer (llama.cpp through llama-cpp-python on the same GGUF,
// prompt and threads; or Hugging Face transformers, eager and static cache +
// torch.compile, with the card's HBM and GEMM ceilings: scripts/hf_bench.py),
// and prints one table with the ratio last.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/artifact/manifest.h"
#include "runtime/engine/engine.h"
#include "runtime/support/data_dir.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tools/kiln/cli_args.h"
#include "tools/kiln/commands.h"
#include "tools/kiln/compile_cache.h"

namespace kiln {
namespace {

struct Figures {
  double prefill_tps = 0, decode_tps = 0, ttft_ms = 0;
};

// The same deterministic prompt for kiln and the peer: English text,
// tokenized by kiln, cut to exactly `count` ids.
std::vector<int32_t> benchPrompt(const Tokenizer& tokenizer, int64_t count) {
  std::string text;
  std::vector<int32_t> ids;
  while (int64_t(ids.size()) < count) {
    text += "The quick brown fox jumps over the lazy dog while the compiler lowers every "
            "attention block into one fused kernel, and the runtime pages the cache. ";
    ids = tokenizer.encode(text, EncodeOptions{.add_special = false});
  }
  ids.resize(count);
  return ids;
}

// One measured run: `batch` requests of `prompt`, `gen` tokens each.
Result<Figures> benchKilnOnce(Engine& engine, const std::vector<int32_t>& prompt, int64_t gen, int64_t batch) {
  std::vector<int64_t> ids;
  for (int64_t b = 0; b < batch; ++b) {
    GenerationRequest r;
    r.prompt_tokens = prompt;
    r.sampling.max_tokens = int(gen);
    r.sampling.ignore_eos = true;
    auto rid = engine.submit(r, {});
    if (!rid.ok()) return rid.error();
    ids.push_back(*rid);
  }
  KILN_RETURN_IF_ERROR(engine.runUntilIdle());
  Figures f;
  double prefill = 0, decode = 0;
  int64_t decoded = 0;
  for (int64_t rid : ids) {
    const RequestStats* s = engine.stats(rid);
    if (s->finish == FinishReason::kError) return makeError("bench request failed: {}", s->error);
    prefill = std::max(prefill, s->queue_seconds + s->prefill_seconds);
    decode = std::max(decode, s->decode_seconds);
    decoded += s->generated_tokens - 1;
  }
  f.prefill_tps = prefill > 0 ? double(prompt.size() * batch) / prefill : 0;
  f.ttft_ms = prefill * 1e3;
  f.decode_tps = decode > 0 ? double(decoded) / decode : 0;
  return f;
}

// A warm-up, then `runs` measured runs; the figures are those of the run
// with the median time to first token (a 2048-token prefill of Llama-3-8B
// takes ~45 ms on an H200, where single runs spread over a few percent).
// `ttft_runs_ms` gets every run's, in order.
Result<Figures> benchKiln(Engine& engine, const std::vector<int32_t>& prompt, int64_t gen, int64_t batch,
                          int runs, std::vector<double>& ttft_runs_ms) {
  // Warm-up: the measured run's shapes once (the same batch of prompts, two
  // tokens each), so first-use costs (page faults, GEMM plans, graph
  // captures, lazily loaded library kernels) stay out of the figures.
  for (int64_t b = 0; b < batch; ++b) {
    GenerationRequest warm;
    warm.prompt_tokens = prompt;
    warm.sampling.max_tokens = 2;
    warm.sampling.ignore_eos = true;
    auto id = engine.submit(warm, {});
    if (!id.ok()) return id.error();
  }
  KILN_RETURN_IF_ERROR(engine.runUntilIdle());
  std::vector<Figures> measured;
  for (int run = 0; run < runs; ++run) {
    auto f = benchKilnOnce(engine, prompt, gen, batch);
    if (!f.ok()) return f.error();
    measured.push_back(*f);
    ttft_runs_ms.push_back(f->ttft_ms);
  }
  std::sort(measured.begin(), measured.end(), [](const Figures& a, const Figures& b) { return a.ttft_ms < b.ttft_ms; });
  return measured[measured.size() / 2];
}

}  // namespace

Result<nlohmann::json> runPeerScript(const char* name, const char* input_flag, const nlohmann::json& input,
                                     const std::string& args, const char* required, const char* needs) {
  auto script = helperScript(name);
  if (!script.ok()) return script.error();
  const std::string ids_path = fmt::format("/tmp/kiln-bench-prompt-{}.json", getpid());
  std::ofstream(ids_path) << input.dump();
  const std::string command = fmt::format("python3 '{}' {} {} {}", script->string(), input_flag, ids_path, args);
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) {
    std::remove(ids_path.c_str());
    return makeError("cannot run {}", command);
  }
  std::string output;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) output.append(buffer, n);
  const int status = pclose(pipe);
  std::remove(ids_path.c_str());
  if (status != 0) return makeError("the peer {} failed (exit {}): {}", name, status, needs);
  auto json = nlohmann::json::parse(output, nullptr, false);
  if (!json.is_object() || !json.contains(required))
    return makeError("the peer {} printed no figures: {}", name, output);
  return json;
}

namespace {

Result<Figures> benchLlamaCpp(const std::string& gguf, const std::vector<int32_t>& prompt,
                              int64_t gen, int threads) {
  auto json = runPeerScript("llamacpp_bench.py", "--prompt-ids", prompt,
                            fmt::format("--model '{}' --gen {} --threads {}", gguf, gen, threads), "decode_tps",
                            "is llama-cpp-python installed? (pip install llama-cpp-python)");
  if (!json.ok()) return json.error();
  Figures f;
  f.prefill_tps = (*json)["prefill_tps"].get<double>();
  f.decode_tps = (*json)["decode_tps"].get<double>();
  f.ttft_ms = (*json)["prefill_ms"].get<double>();
  return f;
}

// The Hugging Face peers and the card's ceilings (scripts/hf_bench.py) on
// the same checkpoint, prompt ids, batch and lengths, as parsed JSON.
Result<nlohmann::json> benchHf(const std::string& checkpoint, const std::vector<int32_t>& prompt,
                               int64_t gen, int64_t batch, const char* modes) {
  return runPeerScript("hf_bench.py", "--prompt-ids", prompt,
                       fmt::format("--model '{}' --gen {} --batch {} --modes {}", checkpoint, gen, batch, modes),
                       "roofline", "it needs python3 with torch, transformers and a GPU");
}

// kiln beside HF eager, HF compiled and the roofline, one row per metric.
void printHfTable(const Figures& mine, const nlohmann::json& hf, bool prefill_only) {
  auto figure = [&](const char* mode, const char* key) -> double {
    if (!hf.contains(mode) || !hf[mode].contains(key)) return 0;
    return hf[mode][key].get<double>();
  };
  auto cell = [](double v) { return v > 0 ? fmt::format("{:.1f}", v) : std::string("-"); };
  auto ratio = [](double a, double b) { return b > 0 ? fmt::format("{:.2f}", a / b) : std::string("-"); };
  std::printf("| metric | kiln | HF eager | HF compiled | kiln / HF compiled | roofline | kiln / roofline |\n"
              "|---|---|---|---|---|---|---|\n");
  for (auto [name, key, kiln_value] : {std::tuple{"prefill tok/s", "prefill_tps", mine.prefill_tps},
                                       std::tuple{"decode tok/s", "decode_tps", mine.decode_tps}}) {
    if (prefill_only && std::string_view(key) == "decode_tps") continue;
    const double compiled = figure("compiled", key), roof = hf["roofline"][key].get<double>();
    std::printf("| %s | %.1f | %s | %s | %s | %.1f | %s |\n", name, kiln_value,
                cell(figure("eager", key)).c_str(), cell(compiled).c_str(),
                ratio(kiln_value, compiled).c_str(), roof, ratio(kiln_value, roof).c_str());
  }
  for (const char* mode : {"eager", "compiled"})
    if (hf.contains(mode) && hf[mode].contains("error"))
      std::printf("HF %s failed: %s\n", mode, hf[mode]["error"].get<std::string>().c_str());
  const auto& c = hf["ceilings"];
  if (prefill_only && mine.prefill_tps > 0) {
    std::printf("kiln prefill time / roofline time: %.2f\n",
                hf["roofline"]["prefill_tps"].get<double>() / mine.prefill_tps);
    // Beside it, not instead: the same roofline at the GEMM rate the card
    // holds at its power limit (scripts/hf_bench.py), where a long prefill runs.
    const double burst = c["gemm_tflops"].get<double>(), sustained = c.value("gemm_sustained_tflops", 0.0);
    const double sustained_roof = hf["roofline"].value("prefill_tps_at_sustained_gemm", 0.0);
    if (sustained > 0 && sustained_roof > 0)
      std::printf("kiln prefill time / roofline time at the sustained GEMM rate (%.0f TFLOP/s, %.0f%% of the "
                  "ceiling's): %.2f\n",
                  sustained, 100.0 * sustained / burst, sustained_roof / mine.prefill_tps);
  }
  // The HBM ceiling is the higher of torch's sum and kiln's own GEMV read
  // (scripts/hf_bench.py), which names both when it had the second.
  const double kiln_read = c.value("hbm_kiln_gemv_gbps", 0.0);
  const std::string sources =
      kiln_read > 0 ? fmt::format(" (the higher of torch's sum {:.0f} and kiln's GEMV read {:.0f})",
                                  c.value("hbm_torch_sum_gbps", 0.0), kiln_read)
                    : std::string(" (torch's sum)");
  std::printf("ceilings measured in this run: HBM read %.0f GB/s%s, bf16 GEMM %.0f TFLOP/s (%s, torch %s)\n",
              c["hbm_gbps"].get<double>(), sources.c_str(), c["gemm_tflops"].get<double>(),
              hf.value("card", "?").c_str(), hf.value("torch", "?").c_str());
}

// The FLOPs of one prefill of `batch` prompts of `tokens` tokens, counted
// from the plan itself: every GEMM step on the rows it runs on (per token,
// or per sequence after gather_last_tokens), and causal attention
// (QKᵀ and PV, half of the square).
double planPrefillFlops(const Manifest& manifest, int64_t tokens, int64_t batch) {
  const Entry* entry = manifest.findEntry("forward");
  if (!entry) return 0;
  double flops = 0;
  for (const Step& step : entry->steps) {
    if (step.kind == StepKind::kGemm) {
      const EntryValue* x = step.args.empty() ? nullptr : entry->findValue(step.args[0].id);
      const double rows = x && x->rows == ValueRows::kSequences ? double(batch) : double(tokens * batch);
      flops += 2.0 * rows * double(step.as<GemmParams>().n) * double(step.as<GemmParams>().k);
    } else if (step.kind == StepKind::kPagedAttention) {
      const AttentionHeads& a = step.as<PagedAttentionParams>().attn;
      flops += double(batch) * 4.0 * double(a.heads) * double(a.head_dim) * double(tokens) * double(tokens + 1) / 2.0;
    }
  }
  return flops;
}

}  // namespace

// run_command.cc: compiles MODEL for the backend --device picks and opens it.

int benchCommand(int argc, char** argv) {
  CliArgs args;
  if (auto done = parseCommandLine(argc, argv, 2, benchCli(), args)) return *done;
  const std::string workload = args.positionals().empty() ? "" : args.positionals()[0];
  if (workload == "serve") return serveBenchCommand(args);
  if (workload == "spec") return specBenchCommand(args);
  if (workload != "decode" && workload != "prefill" && workload != "ppl")
    return fail("usage: kiln bench decode|prefill|ppl|serve|spec MODEL [options]; `kiln bench --help` lists them");
  // The serve workload's flags mean nothing to the others: an error rather
  // than a run that silently ignores them.
  if (auto flag = batchingFlagGiven(args))
    return fail(fmt::format("--{} is for kiln bench serve; {} sizes its engine itself", *flag, workload));
  for (const char* flag : {"workload", "requests", "rate", "tpot-slo-ms", "input-len", "output-len", "lengths", "seed",
                           "turns", "system-len", "system-prompts", "peer-batch", "peer-requests"})
    if (args.has(flag)) return fail(fmt::format("--{} is for kiln bench serve, not {}", flag, workload));
  const bool verify = args.has("verify");
  if (verify && workload != "decode") return fail("--verify is for kiln bench decode, not " + workload);
  if (workload == "ppl") return perplexityCommand(args);
  const bool prefill_only = workload == "prefill";
  if (args.positionals().size() != 2) return fail("kiln bench " + workload + " needs one MODEL");
  auto options = engineOptionsFrom(args);
  if (!options.ok()) return fail(options.error().message);
  const std::vector<const CliFlag*> cuda_switches = args.cudaSwitchesGiven();
  // Checked before loading anything: a mistyped peer must not cost a whole kiln run.
  if (auto peer = args.get("peer"); peer && *peer != "llama.cpp" && *peer != "hf" && *peer != "hf-eager" &&
                                     *peer != "none")
    return fail("--peer '" + *peer + "': expected llama.cpp, hf, hf-eager or none");
  auto prompt_tokens = args.getInt("prompt-tokens", prefill_only ? 2048 : 128);
  auto gen_tokens = args.getInt("gen-tokens", prefill_only ? 2 : 64);
  auto batch = args.getInt("batch", 1);
  auto runs = args.getInt("runs", prefill_only ? 5 : 1);
  if (!runs.ok()) return fail(runs.error().message);
  if (*runs < 1 || *runs > 100) return fail(fmt::format("--runs {}: expected 1 to 100 measured runs", *runs));
  if (!prompt_tokens.ok()) return fail(prompt_tokens.error().message);
  if (!gen_tokens.ok()) return fail(gen_tokens.error().message);
  if (!batch.ok()) return fail(batch.error().message);
  if (*prompt_tokens < 1 || *gen_tokens < 2 || *batch < 1)
    return fail("expected --prompt-tokens >= 1, --gen-tokens >= 2, --batch >= 1");
  int threads = options->threads > 0 ? options->threads
                                     : int(std::max(1u, std::thread::hardware_concurrency()));
  options->threads = threads;
  options->max_batch_tokens = std::max<int64_t>(512, *prompt_tokens * *batch);
  options->max_sequences = int(*batch);
  options->kv_cache_tokens = (*prompt_tokens + *gen_tokens + 16) * *batch + 64;
  if (verify) {  // a verify step of up to 128 nodes a sequence
    options->max_batch_tokens = std::max<int64_t>(512, std::max<int64_t>(*prompt_tokens, 128) * *batch);
    options->kv_cache_tokens = (*prompt_tokens + 128 + 16) * *batch + 64;
  }

  // The forwards' GPU time beside their wall time (on stderr when the
  // engine closes): what the host adds between and around them.
  options->cuda.report_forward_gpu_time = true;
  auto compile_flags = compileFlagsFrom(args);
  if (!compile_flags.ok()) return fail(compile_flags.error().message);
  auto engine = openEngine(args.positionals()[1], *options, *compile_flags);
  if (!engine.ok()) return fail(engine.error().message);
  const std::string backend = (*engine)->backendName();
  const bool on_cuda = backend.rfind("cuda", 0) == 0;
  if (!cuda_switches.empty() && !on_cuda)
    return fail(fmt::format("--{} is for the CUDA backend; this run got {}", cuda_switches.back()->name, backend));
  std::vector<int32_t> prompt = benchPrompt((*engine)->tokenizer(), *prompt_tokens);
  if (verify) {
    std::fprintf(stderr, "kiln bench: verify and plain decode steps (%s)...\n", backend.c_str());
    auto timing = benchVerifySteps(**engine, prompt, *batch, int(*runs));
    if (!timing.ok()) return fail(timing.error().message);
    printVerifyTiming(*timing);
    if (auto path = args.get("json")) {
      nlohmann::json out = verifyTimingJson(*timing);
      out["model"] = (*engine)->manifest().path;
      out["device"] = backend;
      std::ofstream(*path) << out.dump(2) << "\n";
    }
    return 0;
  }

  std::fprintf(stderr, "kiln bench: kiln (%s, %d threads)...\n", backend.c_str(),
               threads);
  std::vector<double> ttft_runs_ms;
  auto mine = benchKiln(**engine, prompt, *gen_tokens, *batch, int(*runs), ttft_runs_ms);
  if (!mine.ok()) return fail(mine.error().message);
  // kiln's own figures first, so a peer that fails or hangs cannot lose them.
  std::fprintf(stderr, "kiln bench: kiln prefill %.1f tok/s (time to first token %.1f ms), decode %.1f tok/s\n",
               mine->prefill_tps, mine->ttft_ms, mine->decode_tps);

  // The engine is closed before the peer runs: its weights, KV pool and
  // threads would otherwise sit on the same card and cores as the peer's.
  const Manifest manifest = (*engine)->manifest();
  engine->reset();
  // The peer a user of this model would otherwise run: llama.cpp for a
  // GGUF, Hugging Face transformers for a checkpoint directory.
  std::string peer = args.get("peer").value_or(
      manifest.model.source_format == "gguf" ? "llama.cpp" : prefill_only ? "hf-eager" : "hf");
  std::optional<Figures> theirs;
  std::optional<nlohmann::json> hf;
  std::string peer_note;
  if (peer == "hf" || peer == "hf-eager") {
    std::string checkpoint = options->model_source.empty() ? manifest.model.source : options->model_source;
    if (auto peer_model = args.get("peer-model")) checkpoint = *peer_model;
    std::fprintf(stderr, "kiln bench: Hugging Face transformers peers on %s...\n", checkpoint.c_str());
    auto figures = benchHf(checkpoint, prompt, *gen_tokens, *batch,
                           peer == "hf" ? "eager,compiled" : "eager");
    if (!figures.ok()) return fail(figures.error().message);
    hf = *figures;
  } else if (peer == "llama.cpp") {
    if (manifest.model.source_format != "gguf" || *batch != 1) {
      peer_note = "llama.cpp peer needs a GGUF model and --batch 1";
    } else {
      std::fprintf(stderr, "kiln bench: llama.cpp (%d threads)...\n", threads);
      auto figures = benchLlamaCpp(manifest.model.source, prompt, *gen_tokens, threads);
      if (!figures.ok()) return fail(figures.error().message);
      theirs = *figures;
    }
  }

  const std::string cuda_options =
      !on_cuda ? ""
               : fmt::format(" (cuda graphs {}, programmatic launch {}, gemm autotune {}, streamed gemv {}, norm folding {}, "
                             "residual in the gemm epilogue {}, fused swiglu {}, greedy argmax on {}{})",
                             options->cuda.graphs ? "on" : "off", options->cuda.programmatic_launch ? "on" : "off",
                             options->cuda.gemm_autotune ? "on" : "off",
                             options->cuda.stream_gemv ? "on" : "off",
                             options->cuda.fold_norms && options->cuda.stream_gemv ? "on" : "off",
                             options->cuda.residual_epilogue ? "on" : "off",
                             options->cuda.fused_swiglu ? "on" : "off",
                             options->cuda.device_argmax ? "the GPU" : "the host",
                             options->cuda.profile_steps ? "; steps timed one by one: not speed figures" : "");
  std::printf("\nkiln bench %s: %s, %s weights, prompt %lld, generate %lld, batch %lld, "
              "%d threads, device %s%s\n",
              workload.c_str(), manifest.model.source.c_str(), manifest.weights.empty() ? "?" : "GGUF/stored",
              (long long)*prompt_tokens, (long long)*gen_tokens, (long long)*batch, threads,
              backend.c_str(), cuda_options.c_str());
  const double flops = planPrefillFlops(manifest, *prompt_tokens, *batch);
  std::printf("kiln: time to first token %.1f ms (%.3g TFLOP/s by the plan's %.3g FLOPs), decode %.3f ms/step\n",
              mine->ttft_ms, mine->ttft_ms > 0 ? flops / (mine->ttft_ms * 1e-3) / 1e12 : 0.0, flops,
              mine->decode_tps > 0 ? 1e3 * double(*batch) / mine->decode_tps : 0.0);
  if (ttft_runs_ms.size() > 1) {
    std::string each;
    for (double ms : ttft_runs_ms) each += fmt::format("{}{:.1f}", each.empty() ? "" : ", ", ms);
    std::printf("kiln: the run with the median time to first token of %zu (ms: %s)\n", ttft_runs_ms.size(),
                each.c_str());
  }
  if (hf) printHfTable(*mine, *hf, prefill_only);
  else std::printf("| metric | kiln | llama.cpp | kiln / llama.cpp |\n|---|---|---|---|\n");
  auto row = [&](const char* name, double a, std::optional<double> b) {
    if (b && *b > 0)
      std::printf("| %s | %.1f | %.1f | %.2f |\n", name, a, *b, a / *b);
    else
      std::printf("| %s | %.1f | %s | - |\n", name, a, peer_note.empty() ? "-" : peer_note.c_str());
  };
  if (!hf) {
    row("prefill tok/s", mine->prefill_tps, theirs ? std::optional(theirs->prefill_tps) : std::nullopt);
    if (!prefill_only)
      row("decode tok/s", mine->decode_tps, theirs ? std::optional(theirs->decode_tps) : std::nullopt);
  }

  if (auto path = args.get("json")) {
    nlohmann::json out = {{"model", manifest.model.source}, {"prompt_tokens", *prompt_tokens},
                          {"gen_tokens", *gen_tokens}, {"batch", *batch}, {"threads", threads},
                          {"kiln", {{"prefill_tps", mine->prefill_tps},
                                    {"decode_tps", mine->decode_tps},
                                    {"ttft_ms", mine->ttft_ms},
                                    {"ttft_runs_ms", ttft_runs_ms}}},
                          {"workload", workload}, {"plan_prefill_flops", flops}};
    if (theirs)
      out["llama_cpp"] = {{"prefill_tps", theirs->prefill_tps},
                          {"decode_tps", theirs->decode_tps}, {"ttft_ms", theirs->ttft_ms}};
    if (hf) out["hf"] = *hf;
    out["device"] = backend;
    std::ofstream(*path) << out.dump(2) << "\n";
  }
  return 0;
}

}  // namespace kiln
