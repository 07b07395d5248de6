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
    {"quiet", "", kEngine, "no loading progress on stderr"},
};

// How a model (not an artifact) is compiled: kiln-compile's own flags (compileFlagsFrom).
constexpr const char* kCompile = "compiling a model";
constexpr CliFlag kCompileFlags[] = {
    {"quant-weights", "none|int8|int4|fp8", kCompile, "quantize the weights at load (default none)"},
    {"quant-group-size", "G", kCompile, "int4 group size, a multiple of 32 (default 128)"},
    {"quant-kv", "none|f16|bf16|int8|fp8", kCompile, "the KV cache's type (default none: the activations')"},
};

// A subcommand's table: the general flags, its own, then the engine's and
// the compile options'.
std::vector<CliFlag> tableOf(std::initializer_list<CliFlag> own) {
  std::vector<CliFlag> flags(std::begin(kGeneralFlags), std::end(kGeneralFlags));
  flags.insert(flags.end(), own);
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
      })};
  return command;
}

const CliCommand& benchCli() {
  constexpr const char* kWorkload = "workload and peer";
  constexpr const char* kCuda = "CUDA A/B switches (each turns one optimization off, to compare in one session)";
  static const CliCommand command{
      "bench",
      "kiln bench decode|prefill|ppl MODEL [options]",
      "Measures kiln and, in the same run, its peer: llama.cpp on the same GGUF, prompt and threads, or\n"
      "for a checkpoint directory on the GPU Hugging Face transformers (eager, and static cache +\n"
      "torch.compile) beside the roofline from the card's HBM and GEMM ceilings measured in that run.\n"
      "decode: prefill and decode tok/s. prefill: time to first token and TFLOP/s by the plan's FLOPs.\n"
      "The figures are those of the run with the median time to first token of --runs.\n"
      "ppl: the perplexity of --text FILE in windows of --ctx tokens, each window's second half\n"
      "scored, as llama.cpp's perplexity tool windows it.",
      tableOf({
          {"prompt-tokens", "P", kWorkload, "prompt length in tokens (default 128; prefill 2048)"},
          {"gen-tokens", "G", kWorkload, "tokens to generate per request, >= 2 (default 64; prefill 2)"},
          {"batch", "B", kWorkload, "concurrent requests (default 1)"},
          {"runs", "N", kWorkload, "measured runs after a warm-up, 1 to 100 (default 1; prefill 5)"},
          {"peer", "llama.cpp|hf|hf-eager|none", kWorkload,
           "default: llama.cpp for a GGUF; hf for a checkpoint directory (hf-eager for prefill)"},
          {"peer-model", "DIR", kWorkload,
           "the checkpoint the Hugging Face peers load (default: the model; for a GGUF, its dequantized "
           "checkpoint)"},
          {"json", "FILE", kWorkload, "also write the figures as JSON to FILE"},
          {"text", "FILE", kWorkload, "ppl: the text to score"},
          {"ctx", "N", kWorkload, "ppl: tokens a window (default 512)"},
          {"no-cuda-graphs", "", kCuda, "decode steps launched one by one, not replayed from CUDA graphs",
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
      })};
  return command;
}

Result<EngineOptions> engineOptionsFrom(const CliArgs& args) {
  EngineOptions options;
  auto device = args.get("device").value_or("auto");
  if (device != "auto" && device != "cpu" && device != "cuda")
    return makeError("--device '{}': expected cpu, cuda or auto", device);
  options.device = device;
  options.model_source = args.get("model-source").value_or("");
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
