// Every flag of every kiln subcommand, once: the parser (CliArgs) accepts
// exactly these and --help lists them (test/lit/cli/kiln-help.test checks
// both). The flags run and bench share are spelled once, in kGeneralFlags
// and kEngineFlags.
#include <algorithm>
#include <cstdlib>

#include "runtime/artifact/plan_options.h"

#include "tools/kiln/commands.h"

namespace kiln {
namespace {

using cuda::CudaTuning;

constexpr CliFlag kGeneralFlags[] = {
    {"help", "", "general", "print this help and exit (also -h)"},
    {"list-flags", "", "general", "print every accepted flag one a line (--name or --name=VALUE) and exit"},
};

// The engine: which backend, with what memory and threads (engineOptionsFrom).
constexpr const char* kEngine = "engine";
constexpr CliFlag kEngineFlags[] = {
    {"device", "cpu|cuda|auto", kEngine, "the backend (default auto: CUDA when it loads, else CPU)"},
    {"dtype", "bf16|f32", kEngine, "CUDA activations (default bf16; f32 for transformers-fp32 numerics, far slower)"},
    {"gpu-memory-fraction", "F", kEngine, "CUDA: size the KV cache to this fraction (0, 1] of the GPU's memory"},
    {"threads", "N", kEngine, "CPU threads (default: every core)"},
    {"model-source", "PATH", kEngine, "weights and tokenizer from this copy of the checkpoint (no stamp check)"},
    {"draft-source", "PATH", kEngine, "--spec=draft:ARTIFACT's weights and tokenizer from this copy (as --model-source)"},
    {"quiet", "", kEngine, "no progress on stderr (loading; generate's and bench serve's request bar)"},
    {"batch-invariant", "", kEngine,
     "a request's tokens the same alone and in any batch (CUDA: one kernel a step for every batch, slower; "
     "the CPU always is)"},
};

// How a model (not an artifact) is compiled: kiln-compile's own flags (compileFlagsFrom).
constexpr const char* kCompile = "compiling a model";
constexpr CliFlag kCompileFlags[] = {
    {"quant-weights", "none|int8|int4|fp8", kCompile, "quantize the weights at load (default none)"},
    {"quant-group-size", "G", kCompile, "int4 group size, a multiple of 32 (default 128)"},
    {"quant-kv", "none|f16|bf16|int8|fp8", kCompile, "the KV cache's type (default none: the activations')"},
};

// How many requests the engine batches and how much KV it keeps
// (batchingOptionsFrom): for the commands that run many requests at once.
constexpr const char* kBatching = "batching (generate, serve, bench serve)";
constexpr CliFlag kBatchingFlags[] = {
    {"max-sequences", "N", kBatching, "sequences decoding at once (default 16; bench serve: every request, at most 256)"},
    {"max-batch-tokens", "T", kBatching,
     "tokens one forward call takes, prefill chunks included (default 512; bench serve 2048)"},
    {"kv-cache-tokens", "N", kBatching,
     "the KV pool in tokens (default 8192; bench serve: what its longest requests need); on CUDA "
     "--gpu-memory-fraction sizes it instead"},
    {"no-prefix-cache", "", kBatching,
     "recompute every prompt, keeping no KV of earlier ones (bench serve's prefix workload runs both)"},
};

// Speculative decoding (speculationFrom, tools/kiln/speculation_flags.h).
constexpr const char* kSpec = "speculative decoding";
constexpr CliFlag kSpecFlags[] = {
    {"spec", "ngram|draft:PATH|layerskip:K|head:PATH", kSpec,
     "draft tokens by n-gram prompt lookup, greedily with the draft model PATH (a model, compiled as the target "
     "is, or an artifact; the target's vocabulary), greedily with the target's own first K layers (an artifact "
     "needs kiln-compile --spec-layerskip K), or with the Medusa draft head PATH over the target's hidden states, "
     "and verify them in one forward (greedy: the same tokens; "
     "sampled: speculative sampling); a model is compiled with a verify entry for the tree, an artifact must have "
     "one"},
    {"spec-k", "K", kSpec, "draft a chain of K tokens a step (default 4)"},
    {"spec-tree", "W1,W2,...", kSpec, "draft a tree instead: W1 children of the last token, W2 of each, ..."},
};

// A subcommand's table: the general flags, its own, the batching flags for
// the commands that take them, then the engine's and the compile options'.
std::vector<CliFlag> tableOf(std::initializer_list<CliFlag> own, bool batching = false) {
  std::vector<CliFlag> flags(std::begin(kGeneralFlags), std::end(kGeneralFlags));
  flags.insert(flags.end(), own);
  if (batching) flags.insert(flags.end(), std::begin(kBatchingFlags), std::end(kBatchingFlags));
  flags.insert(flags.end(), std::begin(kEngineFlags), std::end(kEngineFlags));
  flags.insert(flags.end(), std::begin(kCompileFlags), std::end(kCompileFlags));
  return flags;
}

}  // namespace

const CliCommand& runCli() {
  static const CliCommand command{
      "run",
      "kiln run MODEL [PROMPT] [options]",
      "Generates text. MODEL: a .gguf, a Hugging Face checkpoint directory, a compiled artifact, or a\n"
      "cached name such as smollm2; compiled on first use into $KILN_HOME/artifacts/. The prompt is\n"
      "read from stdin when PROMPT is left out. The answer streams to stdout; progress and a tokens/s\n"
      "summary go to stderr. Ctrl-C stops generation (exit 130).",
      tableOf({
          {"chat", "", "generation", "wrap the prompt in the model's chat template"},
          {"system", "TEXT", "generation", "a system message before the prompt (with --chat)"},
          {"max-tokens", "N", "generation", "tokens to generate at most (default 256)"},
          {"temperature", "T", "generation", "sampling temperature (default 0: greedy)"},
          {"top-p", "P", "generation", "nucleus sampling: keep the top tokens up to mass P in (0, 1] (default 1)"},
          {"top-k", "K", "generation", "keep the K most likely tokens (default 0: all)"},
          {"min-p", "P", "generation", "drop tokens below P times the top probability (default 0)"},
          {"repetition-penalty", "R", "generation", "divide repeated tokens' logits by R (default 1)"},
          {"seed", "S", "generation", "the request's sampling seed (default 0)"},
          {"stop", "TEXT", "generation", "stop when the answer contains TEXT"},
          {"ignore-eos", "", "generation", "keep generating past the end-of-sequence token"},
          {"max-context", "N", "generation", "limit the context to N tokens (default: the model's)"},
          {"truncate", "", "generation", "keep a too-long prompt's last tokens instead of failing"},
          kSpecFlags[0], kSpecFlags[1], kSpecFlags[2],
      })};
  return command;
}

const CliCommand& generateCli() {
  constexpr const char* kFiles = "requests and answers";
  static const CliCommand command{
      "generate",
      "kiln generate MODEL --input FILE [--output FILE] [options]",
      "Offline batch generation: every request of --input (JSON lines) is submitted at once and the\n"
      "engine batches them. A line is one object: \"prompt\" (text, or a list of token ids) or\n"
      "\"messages\" ([{role, content}], chat template), an optional \"id\" echoed back, and the sampling\n"
      "fields max_tokens, temperature, top_p, top_k, min_p, seed, stop, stop_token_ids, n, priority,\n"
      "ignore_eos, presence_penalty, frequency_penalty, repetition_penalty, logprobs (0 to 20\n"
      "alternatives), speculation ({\"method\": \"ngram\", \"k\": 4}, over --spec), tools; the same\n"
      "table as kiln serve's (runtime/request/generation_fields.h); blank lines are skipped.\n"
      "The answers are written in input order, one JSON line per request line:\n"
      "  {\"index\": i, \"id\": ..., \"prompt_tokens\": P, \"choices\": [{\"index\": j, \"text\": ...,\n"
      "   \"finish_reason\": \"length\"|\"stop\"|\"eos\"|\"cancelled\"|\"error\", \"completion_tokens\": C}]}\n"
      "with logprobs, each choice has \"logprobs\": [{\"token\", \"logprob\", \"top_logprobs\": [{\"token\",\n"
      "\"logprob\"}]}] per generated token: log-softmax of the raw logits (before temperature etc.).\n"
      "A line that cannot run (bad JSON, a bad field, a prompt submit refuses) is written as\n"
      "{\"index\": i, \"error\": \"line N: ...\"} and named on stderr; the others still run.\n"
      "Exit status: 0 when every line ran; 2 when some failed (everything else written); 1 when\n"
      "nothing could run (bad options, unreadable input, model not loaded); 130 on Ctrl-C (the\n"
      "answers so far written, the rest cancelled). Progress goes to stderr.",
      tableOf(
          {
              {"input", "FILE", kFiles, "the requests, one JSON object a line (- for stdin)"},
              {"output", "FILE", kFiles, "the answers, one JSON line per request (default -: stdout)"},
              {"max-context", "N", kFiles, "limit the context to N tokens (default: the model's)"},
              kSpecFlags[0], kSpecFlags[1], kSpecFlags[2],
          },
          /*batching=*/true)};
  return command;
}

const CliCommand& serveCli() {
  constexpr const char* kHttp = "HTTP";
  static const CliCommand command{
      "serve",
      "kiln serve MODEL [--host H] [--port P] [options]",
      "An OpenAI-compatible HTTP server: POST /v1/completions and /v1/chat/completions (streamed as\n"
      "server-sent events with \"stream\": true; logprobs, tools), GET /v1/models, /health and /metrics\n"
      "(Prometheus), vLLM's POST /tokenize and /detokenize.\n"
      "Requests name the model by --model-name (default: MODEL's file or folder name without .gguf).\n"
      "A request that finds --max-queue requests waiting gets 429 with Retry-After. One line a request\n"
      "is logged on stderr. SIGINT/SIGTERM: new requests get 503, running ones finish within\n"
      "--shutdown-grace-seconds and are cancelled after; exit 0. docs/design/server.md has the details.",
      tableOf(
          {
              {"host", "ADDR", kHttp, "the address to listen on (default 127.0.0.1)"},
              {"port", "P", kHttp, "the port (default 8000; 0: any free port, printed when ready)"},
              {"api-key", "KEY", kHttp, "require `Authorization: Bearer KEY` on /v1 (default: none)"},
              {"model-name", "ID", kHttp, "the model id clients send (default: MODEL's name)"},
              {"max-queue", "N", kHttp, "waiting requests beyond which new ones get 429 (default 128)"},
              {"max-messages", "N", kHttp, "chat messages a request may carry (default 1024)"},
              {"shutdown-grace-seconds", "S", kHttp,
               "on SIGTERM/SIGINT, how long running requests may finish before they are cancelled (default 10)"},
              {"max-context", "N", kHttp, "limit the context to N tokens (default: the model's)"},
              {"chat-template", "FILE", kHttp,
               "render chat requests with this Jinja template instead of the model's (vLLM's --chat-template)"},
          },
          /*batching=*/true)};
  return command;
}

const CliCommand& benchCli() {
  constexpr const char* kWorkload = "workload and peer";
  constexpr const char* kServe = "serve workload (kiln bench serve)";
  constexpr const char* kCuda = "CUDA A/B switches (each turns one optimization off, to compare in one session)";
  static const CliCommand command{
      "bench",
      "kiln bench decode|prefill|ppl|serve|spec MODEL [options]",
      "Measures kiln and, in the same run, its peer: llama.cpp on the same GGUF, prompt and threads, or\n"
      "for a checkpoint directory on the GPU Hugging Face transformers (eager, and static cache +\n"
      "torch.compile) beside the roofline from the card's HBM and GEMM ceilings measured in that run.\n"
      "decode: prefill and decode tok/s. prefill: time to first token and TFLOP/s by the plan's FLOPs.\n"
      "The figures are those of the run with the median time to first token of --runs.\n"
      "ppl: the perplexity of --text FILE in windows of --ctx tokens, each window's second half\n"
      "scored, as llama.cpp's perplexity tool windows it.\n"
      "serve: many requests through the engine's scheduler (tools/kiln/serve_bench.cc says how they\n"
      "are drawn): output and total tok/s, TTFT and TPOT p50/p99, peak KV pool use, preemptions and\n"
      "prefix-cache hits, per run; --workload offline submits all at once, poisson at --rate, prefix\n"
      "runs multi-turn conversations with the prefix cache on and off.\n"
      "spec: the shipped prompts (chat, summarising a passage, code editing) decoded greedily, plain and\n"
      "with --spec, at each --batch size (e.g. --batch 1,16): tok/s of both, the speedup, acceptance and\n"
      "mean accepted length (per prompt kind too); the two runs' tokens must be identical.",
      tableOf({
          {"prompt-tokens", "P", kWorkload, "prompt length in tokens (default 128; prefill 2048)"},
          {"gen-tokens", "G", kWorkload, "tokens to generate per request, >= 2 (default 64; prefill 2)"},
          {"batch", "B", kWorkload, "concurrent requests (default 1); spec: a list, B1,B2,..."},
          {"prompts", "FILE", kWorkload,
           "spec: JSON lines {\"kind\", \"prompt\"} (default share/kiln/bench/spec_prompts.jsonl)"},
          kSpecFlags[0], kSpecFlags[1], kSpecFlags[2],
          {"runs", "N", kWorkload, "measured runs after a warm-up, 1 to 100 (default 1; prefill 5)"},
          {"verify", "", kWorkload,
           "decode: time one verify step of the artifact's --spec-tree beside one plain decode step (--batch "
           "sequences after --prompt-tokens), no peer"},
          {"peer", "llama.cpp|hf|hf-eager|none", kWorkload,
           "default: llama.cpp for a GGUF; hf for a checkpoint directory (hf-eager for prefill); serve: "
           "hf for a checkpoint directory on CUDA (offline only), else none"},
          {"peer-model", "DIR", kWorkload,
           "the checkpoint the Hugging Face peers load (default: the model; for a GGUF, its dequantized "
           "checkpoint)"},
          {"json", "FILE", kWorkload, "also write the figures as JSON to FILE"},
          {"text", "FILE", kWorkload, "ppl: the text to score"},
          {"ctx", "N", kWorkload, "ppl: tokens a window (default 512)"},
          {"workload", "offline|poisson|prefix", kServe, "how requests arrive (default offline)"},
          {"requests", "N", kServe, "requests in a run (default 16); prefix: conversations x --turns"},
          {"rate", "R[,R...]|sweep", kServe,
           "poisson: requests/s, or a list, or sweep (fractions of the offline rate; default 4)"},
          {"tpot-slo-ms", "MS", kServe, "poisson: the p99 TPOT the highest rate reported must keep (default 50)"},
          {"input-len", "L", kServe, "prompt tokens (default 64); prefix: each user message's"},
          {"output-len", "L", kServe, "generated tokens, EOS ignored (default 16)"},
          {"lengths", "fixed|lognormal", kServe, "lengths exactly L, or lognormal with mean L, sigma 0.5 (default fixed)"},
          {"seed", "S", kServe, "the generator of prompts, lengths and arrivals (default 0)"},
          {"turns", "T", kServe, "prefix: turns a conversation (default 4)"},
          {"system-len", "S", kServe, "prefix: tokens of each shared system prompt (default 256)"},
          {"system-prompts", "K", kServe, "prefix: distinct system prompts the conversations share (default 2)"},
          {"peer-batch", "B", kServe, "serve --peer hf: requests a static padded batch (default 64)"},
          {"peer-requests", "N", kServe, "serve --peer hf: run the first N requests only (default all)"},
          {"http", "", kServe,
           "serve: also run the workload through an in-process kiln serve on loopback (streaming HTTP clients) "
           "and print HTTP / in-process"},
          {"no-cuda-graphs", "", kCuda, "decode and verify steps launched one by one, not from CUDA graphs",
           &CudaTuning::graphs, false},
          {"no-flash-attention", "", kCuda, "prefill attention on the CUDA-core paged_attention kernel",
           &CudaTuning::flash_attention, false},
          {"no-programmatic-launch", "", kCuda, "no programmatic dependent launch between kernels",
           &CudaTuning::programmatic_launch, false},
          {"no-gemm-autotune", "", kCuda, "cuBLASLt's first heuristic choice, not the fastest timed candidate",
           &CudaTuning::gemm_autotune, false},
          {"no-stream-gemv", "", kCuda, "batch 1's GEMVs on gemv.cuh's register loads, not the bulk-copy ring",
           &CudaTuning::stream_gemv, false},
          {"no-norm-folding", "", kCuda, "batch 1's residual_rms_norms as their own launches",
           &CudaTuning::fold_norms, false},
          {"no-residual-epilogue", "", kCuda,
           "decode batches of 9-512 rows add the residual in the norm, not in cuBLASLt",
           &CudaTuning::residual_epilogue, false},
          {"no-fused-swiglu", "", kCuda, "prefill's gate/up on cuBLASLt and silu_mul, not gemm_swiglu_wgmma",
           &CudaTuning::fused_swiglu, false},
          {"host-sampling", "", kCuda, "greedy tokens from logits copied back, not the GPU argmax",
           &CudaTuning::device_argmax, false},
          {"profile-steps", "", "CUDA profiling",
           "print each kernel instance's GPU time per forward (steps one by one: not speed figures)",
           &CudaTuning::profile_steps, true},
      },
              /*batching=*/true)};
  return command;
}

Result<EngineOptions> engineOptionsFrom(const CliArgs& args) {
  EngineOptions options;
  auto device = args.get("device").value_or("auto");
  if (device != "auto" && device != "cpu" && device != "cuda")
    return makeError("--device '{}': expected cpu, cuda or auto", device);
  options.device = device;
  options.model_source = args.get("model-source").value_or("");
  options.draft_model_source = args.get("draft-source").value_or("");
  options.cuda.batch_invariant = args.has("batch-invariant");
  auto threads = args.getInt("threads", 0);
  if (!threads.ok()) return threads.error();
  if (*threads < 0) return makeError("--threads {} is invalid: expected >= 0", *threads);
  options.threads = int(*threads);
  if (auto fraction = args.get("gpu-memory-fraction")) {
    char* end = nullptr;
    const double f = std::strtod(fraction->c_str(), &end);
    if (end == fraction->c_str() || *end != '\0' || !(f > 0.0 && f <= 1.0))
      return makeError("--gpu-memory-fraction '{}' is invalid: expected a number in (0, 1]", *fraction);
    options.gpu_memory_fraction = f;
  }
  // The CUDA executor's switches mean nothing to the CPU backend: an error
  // rather than figures that look like an A/B and are not.
  for (const CliFlag* flag : args.cudaSwitchesGiven()) {
    if (options.device == "cpu") return makeError("--{} is for the CUDA backend; --device cpu was asked for", flag->name);
    options.cuda.*flag->cuda_field = flag->cuda_value;
  }
  options.cuda_dtype = args.get("dtype").value_or("bf16");
  if (options.cuda_dtype != "bf16" && options.cuda_dtype != "f32")
    return makeError("--dtype '{}': expected bf16 or f32 (the CUDA activations)", options.cuda_dtype);
  return options;
}

Status batchingOptionsFrom(const CliArgs& args, EngineOptions& options) {
  for (const CliFlag& flag : kBatchingFlags) {
    if (!flag.takesValue()) {
      if (flag.name == "no-prefix-cache" && args.has(flag.name)) options.prefix_cache = false;
      continue;
    }
    auto value = args.getInt(flag.name, 0);
    if (!value.ok()) return value.error();
    if (!args.has(flag.name)) continue;
    if (*value < 1 || *value > (int64_t(1) << 30))
      return makeError("--{} {} is invalid: expected 1 to {}", flag.name, *value, int64_t(1) << 30);
    if (flag.name == "max-sequences") options.max_sequences = int(*value);
    else if (flag.name == "max-batch-tokens") options.max_batch_tokens = *value;
    else options.kv_cache_tokens = *value;
  }
  return Status::success();
}

std::optional<std::string> batchingFlagGiven(const CliArgs& args) {
  for (const CliFlag& flag : kBatchingFlags)
    if (args.has(flag.name)) return std::string(flag.name);
  return std::nullopt;
}

Result<std::vector<std::string>> compileFlagsFrom(const CliArgs& args) {
  PlanOptions plan;  // validated as kiln-compile validates them
  std::vector<std::string> flags;
  if (auto v = args.get("quant-weights")) {
    plan.quant_weights = *v;
    flags.push_back("--quant-weights=" + *v);
  }
  if (auto v = args.get("quant-group-size")) {
    auto group = args.getInt("quant-group-size", 0);
    if (!group.ok()) return group.error();
    plan.quant_group_size = unsigned(std::clamp<int64_t>(*group, 0, 1 << 20));
    flags.push_back("--quant-group-size=" + *v);
  }
  if (auto v = args.get("quant-kv")) {
    plan.quant_kv = *v;
    flags.push_back("--quant-kv=" + *v);
  }
  KILN_RETURN_IF_ERROR(validatePlanOptions(plan));
  return flags;
}

}  // namespace kiln
