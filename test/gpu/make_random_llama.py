#!/usr/bin/env python3
"""Random-weight Llama checkpoint + fp32 transformers reference (GPU machine).

Writes DIR/{config.json, model.safetensors} with transformers
(LlamaForCausalLM(config), seeded, saved in bf16) and a reference JSON for
test/gpu/hf_logits_gpu_test: for PROMPTS random prompts (token ids, no
tokenizer), the greedy continuation of NEW tokens with the model in fp32
(weights exactly the saved bf16 values), and for the first LOGIT_CASES
prompts the last-token logits of the prompt and of one decode step after it.

  make_random_llama.py --config test/models/tiny-llama/config.json \
      --header test/models/tiny-llama/model.safetensors --out /tmp/hf/tiny \
      --reference /tmp/hf/tiny.json [--bench OUT.json]

--header: the header-only checkpoint the artifact was compiled from; the
tensor names and shapes written here must match it (exit 3 if not).
--bench: also time batch-1 greedy decode with transformers (bf16, eager
attention) and the HBM read and bf16 GEMM probes of scripts/hf_bench.py, same process.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

# The peer script's checkpoint-header reader and card ceilings (scripts/hf_bench.py).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from hf_bench import ceilings, safetensors_tables  # noqa: E402


def rounded(t):
    return [float("%.7g" % v) for v in t.float().cpu().tolist()]


def greedy(model, prompt, new_tokens, device):
    """Greedy continuation with the KV cache; also the first two steps' logits."""
    with torch.no_grad():
        out = model(input_ids=torch.tensor([prompt], device=device), use_cache=True)
        past = out.past_key_values
        logits = [out.logits[0, -1].float()]
        tok = int(torch.argmax(logits[0]))
        gen = [tok]
        for _ in range(new_tokens - 1):
            out = model(input_ids=torch.tensor([[tok]], device=device), past_key_values=past, use_cache=True)
            past = out.past_key_values
            if len(logits) < 2:
                logits.append(out.logits[0, -1].float())
            tok = int(torch.argmax(out.logits[0, -1]))
            gen.append(tok)
    return gen, logits


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--header", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--reference", help="the transformers fp32 reference to write (omit: checkpoint only)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--prompts", type=int, default=10)
    ap.add_argument("--logit-cases", type=int, default=4)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--bench")
    args = ap.parse_args()
    device = "cuda"
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    # cuDNN's SDPA builds a new plan for every key length (0.47 s per decode
    # step measured on the H200): the bf16 greedy runs below would crawl.
    torch.backends.cuda.enable_cudnn_sdp(False)

    t0 = time.time()
    config = LlamaConfig.from_json_file(args.config)
    torch.manual_seed(args.seed)
    with torch.device(device):
        model = LlamaForCausalLM(config)
    model = model.to(torch.bfloat16).eval()
    os.makedirs(args.out, exist_ok=True)
    try:
        model.save_pretrained(args.out, safe_serialization=True)
    except TypeError:  # newer transformers always write safetensors
        model.save_pretrained(args.out)
    written = safetensors_tables(args.out)
    expected = safetensors_tables(args.header)
    if written != expected:
        only_w = sorted(set(written) - set(expected))[:5]
        only_e = sorted(set(expected) - set(written))[:5]
        diff = [k for k in written if k in expected and written[k] != expected[k]][:5]
        print(f"tensor tables differ: only written {only_w}, only expected {only_e}, differing {diff}")
        sys.exit(3)
    print(f"{args.out}: {len(written)} tensors, names/dtypes/shapes match {args.header} "
          f"({time.time() - t0:.1f} s)", flush=True)
    # A byte-level tokenizer, so `kiln run` / `kiln bench` can open the checkpoint.
    subprocess.run([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                 "write_byte_tokenizer.py"), args.out], check=True)
    if not args.reference:  # checkpoint only (kiln bench needs no reference)
        return

    gen = torch.Generator().manual_seed(args.seed + 1)
    vocab = config.vocab_size
    prompts = []
    for i in range(args.prompts):
        length = 4 + (i * 7) % 37
        prompts.append(torch.randint(0, vocab, (length,), generator=gen).tolist())

    # transformers' own bf16 logits of the checked prompts' last tokens: how far
    # a bf16 forward lands from the fp32 one is the scale kiln's bf16 error is
    # read against.
    bf16_logits = []
    with torch.no_grad():
        for prompt in prompts[:args.logit_cases]:
            out = model(input_ids=torch.tensor([prompt], device=device))
            bf16_logits.append(out.logits[0, -1].float().cpu())
    # transformers' own bf16 greedy continuations: how often a bf16 forward
    # keeps the fp32 one's tokens is the scale kiln's greedy agreement (also
    # bf16) is read against; random weights leave many near-ties.
    bf16_greedy = [greedy(model, prompt, args.new, device)[0] for prompt in prompts]

    bench = {}
    if args.bench:
        # transformers bf16 eager, batch-1 decode, 16-token prompt then 128 steps.
        try:
            model.set_attn_implementation("eager")
        except Exception:
            model.config._attn_implementation = "eager"
        steps = 128
        with torch.no_grad():
            ids = torch.tensor([prompts[0][:16] * 1], device=device)
            for attempt in range(2):  # the first pass warms up
                out = model(input_ids=ids, use_cache=True)
                past = out.past_key_values
                tok = torch.argmax(out.logits[0, -1]).view(1, 1)
                torch.cuda.synchronize()
                t = time.time()
                for _ in range(steps if attempt else 8):
                    out = model(input_ids=tok, past_key_values=past, use_cache=True)
                    past = out.past_key_values
                    tok = torch.argmax(out.logits[0, -1]).view(1, 1)
                torch.cuda.synchronize()
                dt = time.time() - t
        bench["hf_eager_bf16_decode_b1_tok_s"] = steps / dt
        bench["hf_eager_bf16_decode_b1_ms"] = 1e3 * dt / steps
        # HBM read and bf16 GEMM probes, as kiln bench's peer measures them.
        bench["hbm_read_probe_GBps"], bench["gemm_probe_TFLOPs"] = ceilings()
        bench["weight_bytes"] = sum(p.numel() * p.element_size() for p in model.parameters())
        bench["torch"] = torch.__version__
        import transformers
        bench["transformers"] = transformers.__version__
        bench["card"] = torch.cuda.get_device_name(0)
        print("bench:", json.dumps(bench), flush=True)
        with open(args.bench, "w") as f:
            json.dump(bench, f, indent=2)

    # The fp32 reference is loaded back from the saved checkpoint: its weights
    # are the saved bf16 values exactly, and its buffers (RoPE inv_freq) are
    # computed afresh in fp32. `model.float()` would keep the inv_freq that
    # `.to(torch.bfloat16)` rounded to bf16, a position-dependent error.
    del model
    try:
        model = LlamaForCausalLM.from_pretrained(args.out, dtype=torch.float32)
    except TypeError:
        model = LlamaForCausalLM.from_pretrained(args.out, torch_dtype=torch.float32)
    model = model.to(device).eval()
    cases = []
    t0 = time.time()
    for i, prompt in enumerate(prompts):
        toks, logits = greedy(model, prompt, args.new, device)
        case = {"prompt": prompt, "greedy": toks}
        if i < args.logit_cases:
            case["logits"] = rounded(logits[0])
            ref = logits[0].cpu()
            case["hf_bf16_rel_l2"] = float((bf16_logits[i] - ref).norm() / ref.norm())
            case["next"] = toks[0]
            case["decode_logits"] = rounded(logits[1])
        case["hf_bf16_greedy"] = bf16_greedy[i]
        cases.append(case)
    same = sum(c["hf_bf16_greedy"] == c["greedy"] for c in cases)
    # transformers' RoPE inverse frequencies and scaling, to tell a RoPE
    # difference from activation rounding when logits drift with position.
    rope = {}
    rotary = getattr(model.model, "rotary_emb", None)
    if rotary is not None and hasattr(rotary, "inv_freq"):
        rope["inv_freq"] = [float(v) for v in rotary.inv_freq.float().cpu().tolist()]
        rope["attention_scaling"] = float(getattr(rotary, "attention_scaling", 1.0))
    rope["config"] = str(getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None))
    with open(args.reference, "w") as f:
        json.dump({"model": os.path.basename(os.path.normpath(args.out)), "rope": rope,
                   "attn_implementation": getattr(model.config, "_attn_implementation", "?"),
                   "cases": cases}, f)
    print(f"{args.reference}: {len(cases)} prompts, fp32 greedy {args.new} tokens "
          f"({time.time() - t0:.1f} s)", flush=True)
    print("transformers bf16 vs fp32, last prompt token logits, relative L2: " +
          " ".join(f"{c['hf_bf16_rel_l2']:.2e}" for c in cases if "hf_bf16_rel_l2" in c), flush=True)
    print(f"transformers bf16 vs fp32, greedy {args.new} tokens identical: {same}/{len(cases)}", flush=True)


if __name__ == "__main__":
    main()
