#!/usr/bin/env python3
"""The Hugging Face peers and the card's ceilings for `kiln bench` on a GPU.

Same checkpoint directory, same prompt token ids, same batch and lengths as
kiln's own run. Prints one JSON object on stdout (progress on stderr):

  ceilings  hbm_gbps    HBM read bandwidth: the higher of torch's sum over 4 GiB
                        of bf16 (hbm_torch_sum_gbps) and, where the caller
                        measured it in the same device session and passes it as
                        KILN_READ_PROBE_GBPS, kiln's own single-row GEMV over
                        4 GB of weights (hbm_kiln_gemv_gbps; kiln_gemv_sweep
                        --read-probe), which reads faster than the sum on the
                        H200: a ceiling a kernel beats is no ceiling
            gemm_tflops bf16 GEMM 8192^3 through cuBLAS (torch.matmul), the
                        median of 20 runs: the ceiling the roofline uses
            gemm_sustained_tflops the same GEMM after a second of it back to
                        back, 100 runs timed as one: what the card holds at its
                        power limit, where a long prefill runs (reported beside
                        the ceiling, not used by the roofline)
  roofline  decode_tps  batch / (bytes one decode step must read / hbm_gbps):
                        every weight but the embedding table (its B rows are
                        negligible; a tied table is read whole as the LM head)
                        plus the KV cache at the mean context of the run
            prefill_tps prompt tokens / max(prefill FLOPs / gemm_tflops, weight
                        bytes / hbm_gbps): FLOPs of every linear layer on every
                        prompt token, causal attention, the LM head on the last
                        token only (as kiln computes)
  eager     transformers, bf16, default attention, DynamicCache, Python loop
  compiled  transformers, bf16, generate() with a static cache, which
            compiles the forward (torch.compile, reduce-overhead) itself: the
            setup transformers documents for fast decode
  each:     prefill_ms, prefill_tps, decode_tps (greedy, EOS ignored)

  hf_bench.py --model DIR --prompt-ids FILE --gen G --batch B [--modes eager,compiled]
"""
import argparse
import json
import math
import os
import sys
import time

import torch


def log(*a):
    print("hf_bench:", *a, file=sys.stderr, flush=True)


def timed(fn, reps):
    times = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2]


def hbm_read_gbps():
    """HBM read bandwidth: torch sum over 4 GiB of bf16 (also test/gpu/sdpa_bench.py's ceiling)."""
    x = torch.ones(2 << 30, dtype=torch.bfloat16, device="cuda")  # 2^31 elements: 4 GiB
    x.sum()
    t = timed(lambda: x.sum(), 20)
    return x.numel() * 2 / t / 1e9


def kiln_read_probe_gbps():
    """kiln_gemv_sweep --read-probe's figure from this device session (0: not measured)."""
    text = os.environ.get("KILN_READ_PROBE_GBPS", "")
    try:
        return float(text) if text else 0.0
    except ValueError:
        # Falling back to the lower probe would flatter every ratio: refuse.
        sys.exit(f"hf_bench.py: KILN_READ_PROBE_GBPS is '{text}', expected GB/s as a number")


def sustained_tflops(fn, flops, seconds=1.0, reps=100):
    """fn's rate once the card has run it back to back for `seconds`: a long
    prefill runs at the card's power cap, while a short burst of runs may
    still see boost clocks (docs/performance.md)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(10):
            fn()
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    torch.cuda.synchronize()
    return flops * reps / (time.perf_counter() - t0) / 1e12


def ceilings(sustained=True):
    """The ceilings as the JSON's "ceilings" names them (the module docstring);
    gemm_sustained_tflops only with `sustained` (it takes over a second)."""
    torch_sum, kiln = hbm_read_gbps(), kiln_read_probe_gbps()
    a = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
    a @ b
    t = timed(lambda: a @ b, 20)
    out = {"hbm_gbps": max(torch_sum, kiln), "hbm_torch_sum_gbps": torch_sum, "hbm_kiln_gemv_gbps": kiln,
           "gemm_tflops": 2 * 8192 ** 3 / t / 1e12}
    if sustained:
        out["gemm_sustained_tflops"] = sustained_tflops(lambda: a @ b, 2 * 8192 ** 3)
    return out


class Tensor:
    """A checkpoint tensor's size, from the safetensors header only."""
    SIZES = {"BF16": 2, "F16": 2, "F32": 4, "F8_E4M3": 1, "I8": 1}

    def __init__(self, dtype, shape):
        self.shape, self.size = shape, self.SIZES[dtype]

    def numel(self):
        return math.prod(self.shape)

    def element_size(self):
        return self.size

    def dim(self):
        return len(self.shape)


def safetensors_tables(path):
    """{name: (dtype, shape)} of a .safetensors file or a directory's files, from the headers only."""
    import struct
    files = [path]
    if os.path.isdir(path):
        files = [os.path.join(path, f) for f in sorted(os.listdir(path)) if f.endswith(".safetensors")]
    out = {}
    for f in files:
        with open(f, "rb") as fh:
            header = json.loads(fh.read(struct.unpack("<Q", fh.read(8))[0]))
        out.update({k: (v["dtype"], tuple(v["shape"])) for k, v in header.items() if k != "__metadata__"})
    return out


def tensor_table(directory):
    return {name: Tensor(dtype, shape) for name, (dtype, shape) in safetensors_tables(directory).items()}


def roofline(config, weights, prompt, gen, batch, hbm_gbps, gemm_tflops, gemm_sustained_tflops):
    h, layers = config.hidden_size, config.num_hidden_layers
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    d = getattr(config, "head_dim", None) or h // heads
    vocab = config.vocab_size
    total = sum(p.numel() * p.element_size() for p in weights.values())
    embed = weights["model.embed_tokens.weight"]
    tied = "lm_head.weight" not in weights
    per_step = total - (0 if tied else embed.numel() * embed.element_size())
    mean_context = prompt + gen / 2
    kv_bytes = batch * mean_context * layers * 2 * kv_heads * d * 2
    decode_tps = batch / ((per_step + kv_bytes) / (hbm_gbps * 1e9))
    linear = sum(p.numel() for n, p in weights.items()
                 if p.dim() == 2 and "embed_tokens" not in n and "lm_head" not in n)
    flops = 2 * linear * prompt * batch
    flops += batch * layers * heads * 4 * d * prompt * prompt / 2  # QK^T and PV, causal half
    flops += batch * 2 * h * vocab  # LM head on the last token
    # A short prompt is bound by reading the weights once, not by FLOPs.
    prefill_seconds = max(flops / (gemm_tflops * 1e12), per_step / (hbm_gbps * 1e9))
    prefill_tps = prompt * batch / prefill_seconds
    # The same bound at the sustained GEMM rate: reported beside, never instead.
    sustained_seconds = max(flops / (gemm_sustained_tflops * 1e12), per_step / (hbm_gbps * 1e9))
    return {"decode_tps": decode_tps, "prefill_tps": prefill_tps, "decode_bytes_per_step": per_step + kv_bytes,
            "prefill_flops": flops, "prefill_tps_at_sustained_gemm": prompt * batch / sustained_seconds}


def bench_eager(model, ids, gen, profile=False):
    batch, prompt = ids.shape
    # torch 2.11 picks cuDNN's SDPA on the H200, which builds a new execution
    # plan for every key length it has not seen, so each decode step paid one.
    # Flash and memory-efficient SDPA have no such cost.
    torch.backends.cuda.enable_cudnn_sdp(False)

    # The model makes its own cache, as test/gpu/make_random_llama.py's
    # eager loop does: a bare DynamicCache() passed in ran ~15x slower, not yet explained.
    def prefill():
        return model(input_ids=ids, use_cache=True, logits_to_keep=1)

    with torch.no_grad():
        prefill()
        t_prefill = timed(prefill, 3)

        def decode(steps):
            out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
            past, tok = out.past_key_values, out.logits[:, -1:].argmax(-1)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(steps):
                out = model(input_ids=tok, past_key_values=past, use_cache=True)
                past, tok = out.past_key_values, out.logits[:, -1:].argmax(-1)
            torch.cuda.synchronize()
            return time.perf_counter() - t0

        decode(4)
        t = decode(gen - 1)
        if profile:
            # Where one eager decode step's time goes, to stderr: a peer
            # figure far from the card's ceiling must be explained before
            # it is reported.
            from torch.profiler import ProfilerActivity, profile as torch_profile
            with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                decode(3)
            print(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=12), file=sys.stderr)
            print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=8), file=sys.stderr)
    return {"prefill_ms": t_prefill * 1e3, "prefill_tps": batch * prompt / t_prefill,
            "decode_tps": batch * (gen - 1) / t}


def bench_compiled(model, ids, gen):
    batch, prompt = ids.shape
    # generate() compiles the forward itself when the cache is static
    # (generation_config.compile_config, reduce-overhead CUDA graphs) and
    # initializes the cache buffers before capture. Wrapping model.forward in
    # torch.compile by hand failed on transformers 5.17 ("accessing tensor
    # output of CUDAGraphs that has been overwritten", the cache's
    # cumulative_length updated inside the captured graph).
    model.generation_config.cache_implementation = "static"
    mask = torch.ones_like(ids)

    def generate(n):
        return model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n,
                              do_sample=False, pad_token_id=0)

    with torch.no_grad():
        t0 = time.perf_counter()
        for _ in range(3):  # compile the prefill and decode graphs, then replay them
            generate(gen)
        log(f"compiled: warm-up {time.perf_counter() - t0:.1f} s")
        t_one = timed(lambda: generate(1), 3)
        t_all = timed(lambda: generate(gen), 3)
    return {"prefill_ms": t_one * 1e3, "prefill_tps": batch * prompt / t_one,
            "decode_tps": batch * (gen - 1) / max(t_all - t_one, 1e-9)}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--prompt-ids", required=True, help="JSON file with the prompt token ids")
    p.add_argument("--gen", type=int, required=True)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--modes", default="eager,compiled")
    p.add_argument("--profile", action="store_true", help="torch profiler tables of eager decode steps on stderr")
    args = p.parse_args()
    from transformers import AutoConfig, LlamaForCausalLM

    prompt = json.load(open(args.prompt_ids))
    config = AutoConfig.from_pretrained(args.model)
    weights = tensor_table(args.model)
    out = {"card": torch.cuda.get_device_name(), "torch": torch.__version__}
    import transformers
    out["transformers"] = transformers.__version__
    log("ceilings (HBM read, bf16 GEMM)...")
    c = out["ceilings"] = ceilings()
    out["roofline"] = roofline(config, weights, len(prompt), args.gen, args.batch, c["hbm_gbps"], c["gemm_tflops"],
                               c["gemm_sustained_tflops"])
    del weights
    model = LlamaForCausalLM.from_pretrained(args.model, dtype=torch.bfloat16).cuda().eval()
    devices = sorted({f"{p.device}/{p.dtype}" for p in model.parameters()})
    free, total = torch.cuda.mem_get_info()
    log(f"model parameters on {devices}; GPU memory free {free / 2**30:.1f} of {total / 2**30:.1f} GiB; "
        f"attention {model.config._attn_implementation}")
    ids = torch.tensor([prompt] * args.batch, device="cuda")
    for mode in args.modes.split(","):
        log(f"{mode} (batch {args.batch}, prompt {len(prompt)}, generate {args.gen})...")
        try:
            out[mode] = bench_eager(model, ids, args.gen, args.profile) if mode == "eager" else bench_compiled(model, ids, args.gen)
        except Exception as e:  # a peer that fails is reported, not fatal to kiln's figures
            out[mode] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
        log(mode, json.dumps(out[mode]))
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
