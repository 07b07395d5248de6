"""transformers' side of test/gpu/hf_logits_gpu_test (GPU machine).

Shared by make_random_llama.py (random weights) and make_gguf_reference.py
(a trained model from its GGUF): the checkpoint check against the
header-only one the artifacts were compiled from, greedy continuations with
the KV cache, transformers' own bf16 numbers, and the reference JSON the
test reads:

  {"model": NAME, "attn_implementation": "sdpa",
   "rope": {"inv_freq": [head_dim / 2], "attention_scaling": 1.0, "config": "..."},
   "cases": [{"prompt": [ids], "greedy": [NEW ids, fp32], "hf_bf16_greedy": [NEW ids],
              "greedy_margins": [NEW] (fp32 top-1 minus top-2 logit at each step),
              the first LOGIT_CASES also: "logits": [vocab] (prompt's last token),
              "next": greedy[0], "decode_logits": [vocab] (after prompt + [next]),
              "hf_bf16_rel_l2": bf16 vs fp32 on "logits"}, ...]}

Greedy runs NEW steps with no stop at EOS, as the test's side does.
Progress on stderr.
"""
import json
import os
import sys
import time

import torch
from transformers import AutoModelForCausalLM

# The peer script's checkpoint-header reader (scripts/hf_bench.py).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from hf_bench import safetensors_tables  # noqa: E402


def log(*parts):
    print(*parts, file=sys.stderr, flush=True)


def configure_torch():
    """fp32 that is fp32 (no TF32), and an SDPA backend fit for greedy decode."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    # cuDNN's SDPA builds a new plan for every key length: the bf16 greedy runs would crawl.
    torch.backends.cuda.enable_cudnn_sdp(False)


def load_llama(path, dtype, device):
    """The checkpoint at `path` in its own family's class (config.json's
    architectures: Llama, Mistral, Qwen2, Qwen3, Phi3)."""
    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    except TypeError:  # transformers before `dtype`
        model = AutoModelForCausalLM.from_pretrained(path, torch_dtype=dtype)
    return model.to(device).eval()


def check_tables(written_path, header):
    """Exit 3 unless the written checkpoint's tensor names, dtypes and shapes
    are the header-only checkpoint's (what kiln's artifact binds by name)."""
    written = safetensors_tables(written_path)
    expected = safetensors_tables(header)
    if written != expected:
        only_w = sorted(set(written) - set(expected))[:5]
        only_e = sorted(set(expected) - set(written))[:5]
        diff = [k for k in written if k in expected and written[k] != expected[k]][:5]
        log(f"tensor tables differ: only written {only_w}, only expected {only_e}, differing {diff}")
        sys.exit(3)
    log(f"{written_path}: {len(written)} tensors, names/dtypes/shapes match {header}")


def rounded(t):
    return [float("%.7g" % v) for v in t.float().cpu().tolist()]


def greedy(model, prompt, new_tokens, device):
    """Greedy continuation with the KV cache; also the first two steps'
    logits and each step's top-1 minus top-2 logit (how near a tie it was)."""
    gen, logits, margins = [], [], []
    with torch.no_grad():
        out = model(input_ids=torch.tensor([prompt], device=device), use_cache=True)
        for _ in range(new_tokens):
            row = out.logits[0, -1].float()
            if len(logits) < 2:
                logits.append(row)
            top = torch.topk(row, 2).values
            margins.append(float(top[0] - top[1]))
            gen.append(int(torch.argmax(row)))
            if len(gen) == new_tokens:
                break
            out = model(input_ids=torch.tensor([[gen[-1]]], device=device), past_key_values=out.past_key_values,
                        use_cache=True)
    return gen, logits, margins


def bf16_control(model, prompts, logit_cases, new_tokens, device):
    """transformers' own bf16 numbers, the scale kiln's bf16 is read against:
    the last prompt token's logits of the first `logit_cases` prompts, and
    every prompt's greedy continuation."""
    logits = []
    with torch.no_grad():
        for prompt in prompts[:logit_cases]:
            out = model(input_ids=torch.tensor([prompt], device=device))
            logits.append(out.logits[0, -1].float().cpu())
    continuations = [greedy(model, prompt, new_tokens, device)[0] for prompt in prompts]
    return logits, continuations


def write_reference(path, name, model, prompts, control, logit_cases, new_tokens, device, extras=None):
    """Runs the fp32 `model` over `prompts` and writes the reference JSON.

    control: bf16_control's result. extras: per prompt, fields added to its
    case (the test ignores them). Returns the cases."""
    bf16_logits, bf16_greedy = control
    cases = []
    t0 = time.time()
    for i, prompt in enumerate(prompts):
        toks, logits, margins = greedy(model, prompt, new_tokens, device)
        case = {"prompt": prompt, "greedy": toks, "greedy_margins": [float("%.4g" % m) for m in margins]}
        if i < logit_cases:
            case["logits"] = rounded(logits[0])
            ref = logits[0].cpu()
            case["hf_bf16_rel_l2"] = float((bf16_logits[i] - ref).norm() / ref.norm())
            case["next"] = toks[0]
            case["decode_logits"] = rounded(logits[1])
        case["hf_bf16_greedy"] = bf16_greedy[i]
        if extras:
            case.update(extras[i])
        cases.append(case)
    same = sum(c["hf_bf16_greedy"] == c["greedy"] for c in cases)
    # transformers' RoPE inverse frequencies and scaling, to tell a RoPE
    # difference from activation rounding when logits drift with position.
    config = model.config
    rope = {}
    rotary = getattr(model.model, "rotary_emb", None)
    if rotary is not None and hasattr(rotary, "inv_freq"):
        rope["inv_freq"] = [float(v) for v in rotary.inv_freq.float().cpu().tolist()]
        rope["attention_scaling"] = float(getattr(rotary, "attention_scaling", 1.0))
    rope["config"] = str(getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None))
    with open(path, "w") as f:
        json.dump({"model": name, "rope": rope,
                   "attn_implementation": getattr(config, "_attn_implementation", "?"),
                   "cases": cases}, f)
    log(f"{path}: {len(cases)} prompts, fp32 greedy {new_tokens} tokens ({time.time() - t0:.1f} s)")
    log("transformers bf16 vs fp32, last prompt token logits, relative L2: " +
        " ".join(f"{c['hf_bf16_rel_l2']:.2e}" for c in cases if "hf_bf16_rel_l2" in c))
    log(f"transformers bf16 vs fp32, greedy {new_tokens} tokens identical: {same}/{len(cases)}")
    log("fp32 greedy, smallest top-2 logit margin per prompt: " +
        " ".join(f"{min(c['greedy_margins']):.3g}" for c in cases))
    return cases
