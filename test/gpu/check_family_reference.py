#!/usr/bin/env python3
"""Are the float64 NumPy references of the Qwen3 and sliding-window fixtures
transformers' own forward?

test/reference/make_tiny_family_references.py writes test/fixtures/<name>/
{config.json, model.safetensors (f32), reference.json} from a NumPy forward
written from transformers' modeling_qwen3.py / modeling_mistral.py
semantics, and the CPU executor's tests check kiln against that reference.
This loads each checkpoint into transformers itself (its family's
*ForCausalLM from config.json, float64, eager and sdpa attention), runs
every reference sequence and the greedy prompts, and compares: the logits
at every position (max |diff| must stay below 1e-6, both being float64 of
the same weights) and the greedy continuations (identical). Needs torch and
transformers only (the GPU machine; runs on its CPU too):

  python3 test/gpu/check_family_reference.py test/fixtures/tiny-qwen3 test/fixtures/tiny-mistral-swa \
      test/fixtures/tiny-phi3 test/fixtures/tiny-gemma3 test/fixtures/tiny-mixtral test/fixtures/tiny-qwen3-moe

The mixtures of experts store one tensor per expert, as the Hub's Mixtral
and Qwen3-MoE checkpoints do (newer transformers fuse them when loading);
transformers
takes the routing softmax in float32 even in a float64 model, well inside
the 1e-5 bound (the fixtures keep every token's router choices 1e-4 apart).
Their experts run transformers' "eager" experts implementation (a loop over
the chosen experts): its default, grouped_mm, has no float64 kernel.

Prints one JSON line per fixture and attention implementation; exits 1 if
any differs.
"""
import json
import os
import sys

import torch
from transformers import AutoModelForCausalLM


def is_moe(path):
    with open(os.path.join(path, "config.json")) as f:
        config = json.load(f)
    return any(config.get(k) for k in ("num_local_experts", "num_experts"))


def load(path, attn):
    kwargs = {"attn_implementation": attn}
    if is_moe(path):
        # transformers 5 picks the experts' kernels by `experts_implementation`;
        # earlier versions loop over the experts already and take no such argument.
        import transformers
        if int(transformers.__version__.split(".")[0]) >= 5:
            kwargs["experts_implementation"] = "eager"
    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float64, **kwargs)
    except TypeError:  # transformers before `dtype`
        model = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float64, **kwargs)
    return model.eval()


def greedy(model, prompt, new_tokens):
    tokens = list(prompt)
    with torch.no_grad():
        for _ in range(new_tokens):
            logits = model(torch.tensor([tokens])).logits[0, -1]
            tokens.append(int(torch.argmax(logits)))
    return tokens[len(prompt):]


def main():
    failed = False
    for path in sys.argv[1:]:
        with open(os.path.join(path, "reference.json")) as f:
            ref = json.load(f)
        for attn in ("eager", "sdpa"):
            model = load(path, attn)
            worst = 0.0
            for name, seq in ref["sequences"].items():
                with torch.no_grad():
                    hf = model(torch.tensor([seq["tokens"]])).logits[0]
                want = torch.tensor(seq["logits"], dtype=torch.float64)
                worst = max(worst, float((hf - want).abs().max()))
            same = sum(greedy(model, g["prompt"], len(g["tokens"])) == g["tokens"] for g in ref["greedy"])
            ok = worst < 1e-5 and same == len(ref["greedy"])
            failed |= not ok
            print(json.dumps({"fixture": path, "attn_implementation": attn,
                              "experts_implementation": getattr(model.config, "_experts_implementation", None),
                              "max_abs_logit_diff": worst,
                              "greedy_identical": f"{same}/{len(ref['greedy'])}", "ok": ok}), flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
