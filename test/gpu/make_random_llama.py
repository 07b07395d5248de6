#!/usr/bin/env python3
"""Random-weight checkpoint + fp32 transformers reference (GPU machine).

Writes DIR/{config.json, model.safetensors} with transformers (the config's
family: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM,
Qwen3ForCausalLM, Phi3ForCausalLM or Gemma3ForCausalLM (config), seeded, saved in bf16) and a reference JSON for
test/gpu/hf_logits_gpu_test: for PROMPTS random prompts (token ids, no
tokenizer), the greedy continuation of NEW tokens with the model in fp32
(weights exactly the saved bf16 values), and for the first LOGIT_CASES
prompts the last-token logits of the prompt and of one decode step after it.

  make_random_llama.py --config test/models/tiny-llama/config.json \
      --header test/models/tiny-llama/model.safetensors --out /tmp/hf/tiny \
      --reference /tmp/hf/tiny.json [--bench OUT.json]

--header: the header-only checkpoint the artifact was compiled from; the
tensor names and shapes written here must match it (exit 3 if not).
--norm-noise S: every RMSNorm weight (input/post-attention/final, and
Qwen3's q_norm/k_norm) becomes 1 + S * N(0, 1) after the random init, which
leaves them all 1; default 0.1 for the families beyond Llama (whose q/k norm
weights would otherwise go untested), 0 for Llama. Gemma 3 stores w of its
(1 + w) norms: they become S * N(0, 1) instead.
The reference's format and the runs behind it: test/gpu/hf_reference.py.
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
import transformers

from hf_reference import bf16_control, check_tables, configure_torch, load_llama, write_reference

# config.json's model_type -> the transformers classes of its family.
FAMILIES = {"llama": ("LlamaConfig", "LlamaForCausalLM"), "mistral": ("MistralConfig", "MistralForCausalLM"),
            "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"), "qwen3": ("Qwen3Config", "Qwen3ForCausalLM"),
            "phi3": ("Phi3Config", "Phi3ForCausalLM"), "gemma3_text": ("Gemma3TextConfig", "Gemma3ForCausalLM")}


def family_classes(config_path):
    with open(config_path) as f:
        model_type = json.load(f).get("model_type", "llama")
    if model_type not in FAMILIES:
        sys.exit(f"{config_path}: model_type '{model_type}' has no family here ({', '.join(FAMILIES)})")
    config_cls, model_cls = FAMILIES[model_type]
    return model_type, getattr(transformers, config_cls), getattr(transformers, model_cls)

# The peer script's card ceilings (scripts/hf_bench.py).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from hf_bench import ceilings  # noqa: E402


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
    ap.add_argument("--norm-noise", type=float, help="RMSNorm weights 1 + S N(0,1) (default: 0.1, Llama 0)")
    args = ap.parse_args()
    device = "cuda"
    configure_torch()

    t0 = time.time()
    model_type, config_cls, model_cls = family_classes(args.config)
    config = config_cls.from_json_file(args.config)
    torch.manual_seed(args.seed)
    with torch.device(device):
        model = model_cls(config)
    noise = args.norm_noise if args.norm_noise is not None else (0.0 if model_type == "llama" else 0.1)
    if noise:
        gen_norm = torch.Generator().manual_seed(args.seed + 2)
        with torch.no_grad():
            for name, param in model.named_parameters():
                if name.endswith("norm.weight"):
                    base = 0.0 if model_type == "gemma3_text" else 1.0
                    param.copy_(base + noise * torch.randn(param.shape, generator=gen_norm))
    model = model.to(torch.bfloat16).eval()
    os.makedirs(args.out, exist_ok=True)
    try:
        model.save_pretrained(args.out, safe_serialization=True)
    except TypeError:  # newer transformers always write safetensors
        model.save_pretrained(args.out)
    check_tables(args.out, args.header)
    print(f"{args.out}: written ({time.time() - t0:.1f} s)", flush=True)
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

    # transformers' own bf16 logits and greedy continuations (random weights
    # leave many near-ties, so bf16 alone changes some continuations).
    control = bf16_control(model, prompts, args.logit_cases, args.new, device)

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
        c = ceilings(sustained=False)
        bench["hbm_read_probe_GBps"], bench["gemm_probe_TFLOPs"] = c["hbm_gbps"], c["gemm_tflops"]
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
    model = load_llama(args.out, torch.float32, device)
    write_reference(args.reference, os.path.basename(os.path.normpath(args.out)), model, prompts,
                    control, args.logit_cases, args.new, device)


if __name__ == "__main__":
    main()
