#!/usr/bin/env python3
"""transformers' Mixtral decode at Mixtral-8x7B's shape, random bf16 weights
made on the GPU (no checkpoint), the peer of kiln_moe_bench in gpu-check's
`moe` part.

Shape (MixtralConfig's defaults, Mixtral-8x7B-v0.1): hidden 4096, 32 heads /
8 KV heads, 8 experts of 14336 with 2 routed a token, vocab 32000, and
--layers of its 32 layers (all 32 are 46.7 B parameters, 93 GB in bf16:
they fit one 141 GB H200 with the KV cache of batch 32). For each batch of
--batches, a prompt of --prompt random tokens and --gen greedy tokens,
EOS ignored, eager (DynamicCache, a Python loop) and compiled (generate()
with a static cache, which torch.compiles the forward), as
scripts/hf_bench.py measures its peers. Prints one JSON object on stdout:

  {"shape": {...}, "parameters": N, "runs": [{"batch": B, "eager": {decode_tps, prefill_ms, ...},
                                             "compiled": {...} or {"error": ...}}, ...]}

  hf_moe_bench.py [--layers 32] [--batches 1,32] [--prompt 128] [--gen 128] [--modes eager,compiled]
"""
import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from hf_bench import bench_compiled, bench_eager, log  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--layers", type=int, default=32)
    p.add_argument("--batches", default="1,32")
    p.add_argument("--prompt", type=int, default=128)
    p.add_argument("--gen", type=int, default=128)
    p.add_argument("--modes", default="eager,compiled")
    args = p.parse_args()
    import transformers
    from transformers import MixtralConfig, MixtralForCausalLM

    config = MixtralConfig(num_hidden_layers=args.layers, max_position_embeddings=4096, sliding_window=None,
                           initializer_range=0.02)
    t0 = time.perf_counter()
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = MixtralForCausalLM._from_config(config, torch_dtype=torch.bfloat16).eval()
    parameters = sum(p.numel() for p in model.parameters())
    free, total = torch.cuda.mem_get_info()
    log(f"Mixtral {args.layers} layers, {parameters / 1e9:.1f} B parameters made on the GPU in "
        f"{time.perf_counter() - t0:.0f} s; memory free {free / 2**30:.0f} of {total / 2**30:.0f} GiB")
    out = {"card": torch.cuda.get_device_name(), "torch": torch.__version__, "transformers": transformers.__version__,
           "shape": {"hidden": config.hidden_size, "layers": args.layers, "heads": config.num_attention_heads,
                     "kv_heads": config.num_key_value_heads, "experts": config.num_local_experts,
                     "top_k": config.num_experts_per_tok, "ffn": config.intermediate_size,
                     "vocab": config.vocab_size},
           "parameters": parameters, "prompt": args.prompt, "gen": args.gen, "runs": []}
    gen = torch.Generator(device="cuda").manual_seed(1)
    for batch in [int(b) for b in args.batches.split(",")]:
        ids = torch.randint(3, config.vocab_size, (batch, args.prompt), device="cuda", generator=gen)
        run = {"batch": batch}
        for mode in args.modes.split(","):
            log(f"{mode} (batch {batch}, prompt {args.prompt}, generate {args.gen})...")
            try:
                run[mode] = bench_eager(model, ids, args.gen) if mode == "eager" else bench_compiled(model, ids, args.gen)
            except Exception as e:  # a peer that fails is reported, not fatal
                run[mode] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
            log(mode, json.dumps(run[mode]))
        out["runs"].append(run)
        print(json.dumps(out), flush=True)  # what finished, should a time limit stop the next batch
    return 0


if __name__ == "__main__":
    sys.exit(main())
