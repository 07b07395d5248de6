#!/usr/bin/env python3
"""A trained model's fp32 checkpoint and transformers reference, from its GGUF (GPU machine).

transformers loads the GGUF itself, in fp32: gguf-py dequantizes the blocks
(Q4_1, Q8_0), its llama loader undoes llama.cpp's Q/K row permutation, and
no output.weight means tied embeddings. It saves that model to OUT as
safetensors, which kiln's artifacts (compiled from the header-only
test/models/smollm2-135m, F32) bind with --model-source, and writes the
reference JSON for test/gpu/hf_logits_gpu_test as make_random_llama.py does
(test/gpu/hf_reference.py): PROMPTS fixed chat prompts, formatted with the
GGUF's chat template and tokenized by its tokenizer, greedy NEW tokens in
fp32 with no stop at EOS, the first LOGIT_CASES prompts' logits, and
transformers' own bf16 (the checkpoint loaded in bf16) as the control.

  make_gguf_reference.py --gguf /tmp/kiln-xfer/SmolLM2-135M-Instruct.Q4_1.gguf \\
      --out /tmp/kiln-hf/smollm2-135m --reference /tmp/kiln-hf/smollm2-135m.ref.json

--header DIR (default test/models/smollm2-135m): config.json and the
header-only model.safetensors the artifacts were compiled from. The GGUF's
metadata, transformers' config of it and the saved tensor table must agree
with them (exit 3 if not).
--check-config: only compare the GGUF's metadata with DIR/config.json (needs
gguf-py alone, no torch: runs on the dev machine).
Needs the `gguf` package (transformers reads GGUF files through it).
Progress on stderr.
"""
import argparse
import json
import math
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Varied requests for long answers, so most of the 64 greedy tokens are the
# model's confident text rather than what it makes up after <|im_end|>. No
# digits: transformers' GGUF tokenizer groups them unlike SmolLM2's own.
PROMPTS = [
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "Explain how photosynthesis works, step by step.",
    "What were the main causes of the French Revolution?",
    "Give me some tips for staying productive when working from home.",
    "Describe the water cycle to a child.",
    "Write a Python function that checks whether a number is prime, and explain how it works.",
    "Compare travelling across Europe by train and by plane.",
    "Write a polite email asking my manager for a day off next Friday.",
    "Why is the sky blue? Explain the physics behind it.",
    "Plan a weekend trip to Kyoto, with things to see each day.",
]

# The HF config fields that decide the forward pass; the GGUF key each comes
# from (after "<arch>."), as transformers' GGUF loader maps them.
FORWARD_FIELDS = {
    "hidden_size": "embedding_length",
    "intermediate_size": "feed_forward_length",
    "num_hidden_layers": "block_count",
    "num_attention_heads": "attention.head_count",
    "num_key_value_heads": "attention.head_count_kv",
    "head_dim": "rope.dimension_count",
    "vocab_size": "vocab_size",
    "rms_norm_eps": "attention.layer_norm_rms_epsilon",
    "rope_theta": "rope.freq_base",
}


def log(*parts):
    print(*parts, file=sys.stderr, flush=True)


def gguf_config(path):
    """The HF config fields the GGUF's metadata gives (gguf-py's reader)."""
    import gguf

    reader = gguf.GGUFReader(path)
    meta = {k: f.contents() for k, f in reader.fields.items()
            if not k.startswith("tokenizer.ggml.") or k.endswith("_token_id")}
    arch = meta["general.architecture"]
    config = {"model_type": arch}
    for field, key in FORWARD_FIELDS.items():
        if f"{arch}.{key}" in meta:
            config[field] = meta[f"{arch}.{key}"]
    config["max_position_embeddings"] = meta.get(f"{arch}.context_length")
    config["tie_word_embeddings"] = all(t.name != "output.weight" for t in reader.tensors)
    config["bos_token_id"] = meta.get("tokenizer.ggml.bos_token_id")
    config["eos_token_id"] = meta.get("tokenizer.ggml.eos_token_id")
    return config


def mismatches(expected, actual, fields):
    """`field: expected X, got Y` for each field that differs."""
    out = []
    for field in fields:
        want, got = expected.get(field), actual.get(field)
        same = (math.isclose(want, got, rel_tol=1e-7)
                if isinstance(want, float) and isinstance(got, (int, float)) else want == got)
        if not same:
            out.append(f"{field}: expected {want!r}, got {got!r}")
    return out


def check_config(what, expected, actual, fields):
    bad = mismatches(expected, actual, fields)
    if bad:
        log(f"{what} differs from the artifacts' config.json: " + "; ".join(bad))
        sys.exit(3)
    log(f"{what}: {len(fields)} fields match config.json")


def transformers_config(config):
    """The same fields from a transformers config (rope_theta moved into
    rope_parameters in transformers 5)."""
    out = {field: getattr(config, field, None) for field in FORWARD_FIELDS}
    if out["rope_theta"] is None:
        out["rope_theta"] = (getattr(config, "rope_parameters", None) or {}).get("rope_theta")
    out["tie_word_embeddings"] = getattr(config, "tie_word_embeddings", None)
    return out


def load_gguf(path):
    """The GGUF's model in fp32 and its tokenizer, as transformers loads them."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    directory, name = os.path.split(os.path.abspath(path))
    # dequantize=True: for architectures its packed-GGUF path does not cover
    # (llama), transformers otherwise keeps the GGUF quantizer on the model,
    # and save_pretrained refuses a quantized model.
    model = AutoModelForCausalLM.from_pretrained(directory, gguf_file=name, dtype=torch.float32,
                                                 quantization_config=GgufConfig(dequantize=True))
    tokenizer = AutoTokenizer.from_pretrained(directory, gguf_file=name)
    return model, tokenizer


def chat_prompts(tokenizer):
    """PROMPTS as token ids: one user turn each, the chat template's default
    system turn, then the assistant's header."""
    ids = []
    for text in PROMPTS:
        rendered = tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                                 add_generation_prompt=True)
        ids.append(tokenizer.encode(rendered, add_special_tokens=False))
    # llama.cpp's ids for a prompt of the same template (a kiln fixture): the
    # default system turn and the user header, 24 ids, are common to all.
    fixture = os.path.join(ROOT, "test", "fixtures", "llamacpp", "greedy.json")
    if os.path.exists(fixture):
        with open(fixture) as f:
            theirs = next(p["prompt_ids"] for p in json.load(f)["prompts"] if p["name"] == "chat_capital")
        same = 0
        while same < 24 and theirs[same] == ids[0][same]:
            same += 1
        log(f"tokenizer: system turn and user header, {same} of 24 ids as llama.cpp tokenizes them")
    log(f"prompt 0 ({len(ids[0])} tokens): {tokenizer.decode(ids[0])!r}")
    return ids


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--header", default=os.path.join(ROOT, "test", "models", "smollm2-135m"))
    ap.add_argument("--out", help="the fp32 checkpoint to write")
    ap.add_argument("--reference", help="the transformers fp32 reference to write")
    ap.add_argument("--check-config", action="store_true")
    ap.add_argument("--logit-cases", type=int, default=4)
    ap.add_argument("--new", type=int, default=64)
    args = ap.parse_args()
    with open(os.path.join(args.header, "config.json")) as f:
        expected = json.load(f)
    fields = list(FORWARD_FIELDS) + ["tie_word_embeddings", "max_position_embeddings", "model_type",
                                     "bos_token_id", "eos_token_id"]
    check_config(f"{args.gguf} metadata", expected, gguf_config(args.gguf), fields)
    if args.check_config:
        return
    if not args.out or not args.reference:
        ap.error("--out and --reference are needed unless --check-config")

    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the GPU machine has no network
    import torch

    from hf_reference import bf16_control, check_tables, configure_torch, load_llama, write_reference

    device = "cuda"
    configure_torch()
    t0 = time.time()
    model, tokenizer = load_gguf(args.gguf)
    check_config("transformers' config of the GGUF", expected, transformers_config(model.config),
                 list(FORWARD_FIELDS) + ["tie_word_embeddings"])
    os.makedirs(args.out, exist_ok=True)
    model.save_pretrained(args.out)
    del model
    try:  # for `kiln run` on OUT; the test itself needs no tokenizer
        tokenizer.save_pretrained(args.out)
    except Exception as e:  # noqa: BLE001
        log(f"tokenizer not saved ({e})")
    check_tables(args.out, os.path.join(args.header, "model.safetensors"))
    log(f"{args.out}: loaded from the GGUF and saved in fp32 ({time.time() - t0:.1f} s)")

    prompts = chat_prompts(tokenizer)
    # Both runs load what kiln binds: the saved checkpoint, in bf16 for the
    # control and in fp32 for the reference.
    model = load_llama(args.out, torch.bfloat16, device)
    control = bf16_control(model, prompts, args.logit_cases, args.new, device)
    del model
    model = load_llama(args.out, torch.float32, device)
    extras = [{"text": text} for text in PROMPTS]
    cases = write_reference(args.reference, os.path.basename(os.path.normpath(args.out)), model, prompts,
                            control, args.logit_cases, args.new, device, extras)
    # <|im_end|>, from the GGUF's metadata (transformers' GGUF tokenizer
    # names the wrong token as its EOS).
    eos = expected["eos_token_id"]
    for i, case in enumerate(cases):
        end = case["greedy"].index(eos) if eos in case["greedy"] else None
        log(f"fp32 greedy text {i}{'' if end is None else f' (EOS at {end})'}: "
            f"{tokenizer.decode(case['greedy'])[:160]!r}")


if __name__ == "__main__":
    main()
