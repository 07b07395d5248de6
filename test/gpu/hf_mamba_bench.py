#!/usr/bin/env python3
"""transformers' Mamba-2 at a ~2.7B shape, random bf16 weights made on the
GPU (no checkpoint): the transformers column of issue 29's performance
table (kiln's column needs the executor path, docs/design/state-space.md).

Shape (state-spaces/mamba2-2.7b's): hidden 2560, 64 layers, 80 heads of 64
(expand 2), one group, state 128, conv 4, chunk 256, vocab 50288. Whether
transformers runs mamba_ssm's kernels (the fast path) or its torch path
is printed: install mamba-ssm and causal-conv1d for the fair comparison.

Prints one JSON line per measurement:
  {"what": "decode", "batch": B, "tok_per_s": ...}                 greedy generate(), --gen tokens after --prompt
  {"what": "decode_per_token", "context": L, "ms_per_token": ...}  (generate L+33 − generate L+1) / 32, batch 1
  {"what": "prefill", "tokens": L, "tok_per_s": ...}               one forward over L tokens, batch 1

  hf_mamba_bench.py [--layers 64] [--batches 1,64] [--contexts 1024,2048,4096,8192,16384,32768]
                    [--prefill 8192,32768] [--prompt 16] [--gen 128]
"""
import argparse
import json
import time

import torch


def timed(fn, repeats=1):
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / repeats


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--layers", type=int, default=64)
    p.add_argument("--batches", default="1,64")
    p.add_argument("--contexts", default="1024,2048,4096,8192,16384,32768")
    p.add_argument("--prefill", default="8192,32768")
    p.add_argument("--prompt", type=int, default=16)
    p.add_argument("--gen", type=int, default=128)
    args = p.parse_args()
    import transformers
    from transformers import Mamba2Config, Mamba2ForCausalLM

    config = Mamba2Config(hidden_size=2560, num_hidden_layers=args.layers, num_heads=80, head_dim=64, expand=2,
                          n_groups=1, state_size=128, conv_kernel=4, chunk_size=256, vocab_size=50288,
                          tie_word_embeddings=True)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = Mamba2ForCausalLM(config).to(torch.bfloat16).eval()
    from transformers.models.mamba2 import modeling_mamba2
    print(json.dumps({"transformers": transformers.__version__, "torch": torch.__version__,
                      "parameters": sum(t.numel() for t in model.parameters()),
                      "fast_path": bool(getattr(modeling_mamba2, "is_fast_path_available", False)),
                      "gpu": torch.cuda.get_device_name()}), flush=True)
    vocab = config.vocab_size

    def generate(batch, prompt, new):
        ids = torch.randint(0, vocab, (batch, prompt), device="cuda")
        with torch.no_grad():
            model.generate(ids, max_new_tokens=new, min_new_tokens=new, do_sample=False, use_cache=True,
                           pad_token_id=0)

    generate(1, args.prompt, 4)  # warm-up
    for batch in (int(b) for b in args.batches.split(",")):
        try:
            t = timed(lambda: generate(batch, args.prompt, args.gen))
            print(json.dumps({"what": "decode", "batch": batch, "prompt": args.prompt, "gen": args.gen,
                              "tok_per_s": batch * args.gen / t}), flush=True)
        except Exception as e:  # noqa: BLE001 (report and go on: OOM at one batch leaves the others)
            print(json.dumps({"what": "decode", "batch": batch, "error": str(e)[:200]}), flush=True)
    for ctx in (int(c) for c in args.contexts.split(",")):
        try:
            one = timed(lambda: generate(1, ctx, 1))
            more = timed(lambda: generate(1, ctx, 33))
            print(json.dumps({"what": "decode_per_token", "context": ctx,
                              "ms_per_token": (more - one) / 32 * 1e3}), flush=True)
        except Exception as e:  # noqa: BLE001
            print(json.dumps({"what": "decode_per_token", "context": ctx, "error": str(e)[:200]}), flush=True)
    for n in (int(c) for c in args.prefill.split(",")):
        ids = torch.randint(0, vocab, (1, n), device="cuda")
        try:
            with torch.no_grad():
                t = timed(lambda: model(ids, use_cache=False, logits_to_keep=1))
            print(json.dumps({"what": "prefill", "tokens": n, "tok_per_s": n / t}), flush=True)
        except Exception as e:  # noqa: BLE001
            print(json.dumps({"what": "prefill", "tokens": n, "error": str(e)[:200]}), flush=True)


if __name__ == "__main__":
    main()
