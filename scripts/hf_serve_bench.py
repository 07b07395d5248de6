#!/usr/bin/env python3
"""The Hugging Face transformers peer of `kiln bench serve --workload offline`.

The same checkpoint directory, the same prompt token ids and output lengths as
kiln's offline run (kiln writes them to the --requests file), run the way a
user without a serving engine would: transformers' generate() over static
batches of --batch requests in input order, each batch's prompts left-padded to
its longest, greedy, EOS ignored, every request of a batch generating the
batch's longest output length (a static batch cannot retire its short
requests early). bf16, default attention (SDPA), DynamicCache.

Prints one JSON object on stdout (progress on stderr):
  output_tps     the requests' own output tokens (their lengths, not the padding
                 or the tokens generated past a request's length) / wall time of
                 all batches, prefill included
  total_tps      (prompt + output tokens) / the same time
  requests, batches, seconds, output_tokens, prompt_tokens, card, torch,
  transformers

  hf_serve_bench.py --model DIR --requests FILE [--batch B]
  FILE: {"prompts": [[ids...], ...], "output_lens": [n, ...]}
"""
import argparse
import json
import sys
import time

import torch


def log(*a):
    print("hf_serve_bench:", *a, file=sys.stderr, flush=True)


def run_batch(model, prompts, gen, pad_id):
    """One static batch: prompts left-padded to the longest, `gen` tokens each."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, p in enumerate(prompts):
        ids[row, width - len(p):] = torch.tensor(p)
        mask[row, width - len(p):] = 1
    ids, mask = ids.cuda(), mask.cuda()
    model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=gen, min_new_tokens=gen, do_sample=False,
                   pad_token_id=pad_id)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--requests", required=True, help="JSON file: prompts (token ids) and output_lens")
    p.add_argument("--batch", type=int, default=64)
    args = p.parse_args()
    from transformers import AutoModelForCausalLM
    import transformers

    spec = json.load(open(args.requests))
    prompts, lens = spec["prompts"], spec["output_lens"]
    if len(prompts) != len(lens) or not prompts:
        sys.exit("hf_serve_bench.py: expected as many output_lens as prompts, at least one")
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.bfloat16).cuda().eval()
    pad_id = model.config.pad_token_id if model.config.pad_token_id is not None else 0
    torch.backends.cuda.enable_cudnn_sdp(False)  # hf_bench.py: cuDNN SDPA re-plans every new key length
    batches = [(prompts[i:i + args.batch], lens[i:i + args.batch]) for i in range(0, len(prompts), args.batch)]
    with torch.no_grad():
        log(f"warm-up: batch of {len(batches[0][0])}, 2 tokens")
        run_batch(model, batches[0][0], 2, pad_id)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for n, (batch_prompts, batch_lens) in enumerate(batches):
            run_batch(model, batch_prompts, max(batch_lens), pad_id)
            torch.cuda.synchronize()
            log(f"batch {n + 1}/{len(batches)} done at {time.perf_counter() - t0:.1f} s")
        seconds = time.perf_counter() - t0
    output_tokens, prompt_tokens = sum(lens), sum(len(p) for p in prompts)
    print(json.dumps({"output_tps": output_tokens / seconds, "total_tps": (output_tokens + prompt_tokens) / seconds,
                      "requests": len(prompts), "batches": len(batches), "batch": args.batch, "seconds": seconds,
                      "output_tokens": output_tokens, "prompt_tokens": prompt_tokens,
                      "card": torch.cuda.get_device_name(), "torch": torch.__version__,
                      "transformers": transformers.__version__}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
