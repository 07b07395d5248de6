#!/usr/bin/env python3
"""Are the float64 NumPy references of the state-space fixtures transformers' own forward?

test/reference/make_tiny_ssm_references.py writes test/fixtures/tiny-mamba,
tiny-mamba2 and tiny-hybrid ({config.json, model.safetensors (f32),
reference.json}) from a NumPy forward written from transformers'
MambaMixer.slow_forward, Mamba2Mixer.torch_forward and modeling_nemotron_h.py.
This loads each checkpoint into transformers itself (MambaForCausalLM /
Mamba2ForCausalLM / NemotronHForCausalLM from config.json, float64, on
the CPU so the torch paths run, not mamba_ssm's kernels), and compares:
every position's logits of the reference sequences (one prefill: Mamba-2's
chunked SSD form, chunk_size 8 over 40 tokens), the greedy continuations by
full recompute, and the same continuations through generate() (transformers'
cache: one prefill, then single-token recurrent steps). Needs torch and
transformers only (the GPU machine):

  python3 test/gpu/check_ssm_reference.py test/fixtures/tiny-mamba test/fixtures/tiny-mamba2 test/fixtures/tiny-hybrid

Prints one JSON line per fixture; exits 1 if any differs (logits by more
than 1e-6, or any greedy continuation).
"""
import json
import os
import sys

import torch
from transformers import AutoModelForCausalLM


def load(path):
    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float64)
    except TypeError:  # transformers before `dtype`
        model = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float64)
    return model.eval()


def greedy_recompute(model, prompt, new_tokens):
    tokens = list(prompt)
    with torch.no_grad():
        for _ in range(new_tokens):
            logits = model(torch.tensor([tokens]), use_cache=False).logits[0, -1]
            tokens.append(int(torch.argmax(logits)))
    return tokens[len(prompt):]


def greedy_cached(model, prompt, new_tokens):
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                             do_sample=False, use_cache=True)
    return [int(t) for t in out[0, len(prompt):]]


def main():
    failed = False
    for path in sys.argv[1:]:
        with open(os.path.join(path, "reference.json")) as f:
            ref = json.load(f)
        model = load(path)
        worst = 0.0
        for seq in ref["sequences"].values():
            with torch.no_grad():
                hf = model(torch.tensor([seq["tokens"]]), use_cache=False).logits[0]
            worst = max(worst, float((hf - torch.tensor(seq["logits"], dtype=torch.float64)).abs().max()))
        same = sum(greedy_recompute(model, g["prompt"], len(g["tokens"])) == g["tokens"] for g in ref["greedy"])
        cached = sum(greedy_cached(model, g["prompt"], len(g["tokens"])) == g["tokens"] for g in ref["greedy"])
        n = len(ref["greedy"])
        ok = worst < 1e-6 and same == n and cached == n
        failed |= not ok
        print(json.dumps({"fixture": path, "max_abs_logit_diff": worst, "greedy_identical": f"{same}/{n}",
                          "greedy_generate_identical": f"{cached}/{n}", "ok": ok}), flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
