#!/usr/bin/env python3
"""Exact float64 reference logits for SmolLM2-135M-Instruct (Q4_1 GGUF).

A second outside reference beside llama.cpp: the GGUF's tensors dequantized
by gguf-py (`gguf.quants.dequantize`), then a plain NumPy float64 Llama
forward pass (interleaved RoPE as llama.cpp's converter lays out Q/K, GQA,
causal softmax, RMSNorm, SiLU MLP, tied head). No activation quantization,
so it shows how far llama.cpp's own arithmetic (Q8 activations) is from exact.

Writes test/fixtures/numpy/smollm2_logits.json with the logits at the same
prompts and positions as test/fixtures/llamacpp/logits.json, as f16,
zlib-compressed, base64 (the llama.cpp fixture's encoding).

Usage: make_smollm2_numpy_reference.py [--model GGUF] [--out DIR]
Needs numpy and gguf (pip install gguf numpy).
"""
import argparse
import base64
import json
import os
import zlib

import gguf
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def load_weights(path):
    reader = gguf.GGUFReader(path)
    weights = {}
    for t in reader.tensors:
        data = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float64)
        weights[t.name] = data.reshape([int(x) for x in reversed(t.shape)])
    fields = {k: f.contents() for k, f in reader.fields.items()
              if k.startswith("llama.")}
    return weights, fields


def forward(weights, cfg, ids):
    hidden = cfg["llama.embedding_length"]
    heads = cfg["llama.attention.head_count"]
    kv_heads = cfg["llama.attention.head_count_kv"]
    layers = cfg["llama.block_count"]
    eps = cfg["llama.attention.layer_norm_rms_epsilon"]
    base = cfg["llama.rope.freq_base"]
    d = hidden // heads
    s = len(ids)
    pos = np.arange(s, dtype=np.float64)

    def rms(x, w):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w

    def rope(x):  # [S, h, D], rotating adjacent pairs (2i, 2i+1)
        inv = base ** (-np.arange(0, d, 2) / d)
        ang = pos[:, None] * inv[None, :]
        c, sn = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        x0, x1 = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = x0 * c - x1 * sn
        out[..., 1::2] = x0 * sn + x1 * c
        return out

    x = weights["token_embd.weight"][ids]
    mask = np.triu(np.full((s, s), -np.inf), 1)[None]
    for layer in range(layers):
        p = f"blk.{layer}."
        h = rms(x, weights[p + "attn_norm.weight"])
        q = rope((h @ weights[p + "attn_q.weight"].T).reshape(s, heads, d))
        k = rope((h @ weights[p + "attn_k.weight"].T).reshape(s, kv_heads, d))
        v = (h @ weights[p + "attn_v.weight"].T).reshape(s, kv_heads, d)
        k = np.repeat(k, heads // kv_heads, axis=1)
        v = np.repeat(v, heads // kv_heads, axis=1)
        scores = np.einsum("shd,thd->hst", q, k) / np.sqrt(d) + mask
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        scores /= scores.sum(-1, keepdims=True)
        o = np.einsum("hst,thd->shd", scores, v).reshape(s, heads * d)
        x = x + o @ weights[p + "attn_output.weight"].T
        h = rms(x, weights[p + "ffn_norm.weight"])
        gate = h @ weights[p + "ffn_gate.weight"].T
        up = h @ weights[p + "ffn_up.weight"].T
        x = x + ((gate / (1 + np.exp(-gate))) * up) @ weights[p + "ffn_down.weight"].T
    head = weights.get("output.weight", weights["token_embd.weight"])
    return rms(x, weights["output_norm.weight"]) @ head.T


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default=os.path.expanduser(
        "~/.cache/kiln/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"))
    parser.add_argument("--out", default=os.path.join(ROOT, "test", "fixtures", "numpy"))
    args = parser.parse_args()
    weights, cfg = load_weights(args.model)
    cases = json.load(open(os.path.join(ROOT, "test", "fixtures", "llamacpp", "logits.json")))
    out = {"note": "float64 NumPy forward over gguf-py-dequantized weights; same prompts "
                   "and positions as ../llamacpp/logits.json",
           "gguf_py": getattr(gguf, "__version__", "unknown"),
           "numpy": np.__version__, "prompts": []}
    for case in cases["prompts"]:
        ids = case["prompt_ids"] + case["generated_ids"]
        logits = forward(weights, cfg, ids)
        entry = {"name": case["name"], "positions": []}
        for at in case["positions"]:
            row = logits[int(at["position"])].astype(np.float16)
            entry["positions"].append({
                "label": at["label"], "position": int(at["position"]),
                "top_ids": [int(i) for i in np.argsort(-logits[int(at["position"])])[:10]],
                "logits_f16_zlib_b64": base64.b64encode(zlib.compress(row.tobytes(), 9)).decode()})
        out["prompts"].append(entry)
        print(case["name"], "done")
    # Greedy continuations: exact logits along llama.cpp's greedy path (top
    # 10 per step), so a divergence between kiln and llama.cpp can be judged
    # against exact arithmetic.
    greedy = json.load(open(os.path.join(ROOT, "test", "fixtures", "llamacpp", "greedy.json")))
    out["greedy"] = []
    for case in greedy["prompts"]:
        ids = case["prompt_ids"] + case["generated_ids"]
        logits = forward(weights, cfg, ids)
        steps = []
        for i in range(len(case["generated_ids"])):
            row = logits[len(case["prompt_ids"]) - 1 + i]
            top = np.argsort(-row)[:10]
            steps.append({"top_ids": [int(t) for t in top],
                          "top_values": [float(row[t]) for t in top]})
        out["greedy"].append({"name": case["name"], "steps": steps})
        print(case["name"], "greedy done")
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "smollm2_logits.json")
    with open(path, "w") as f:
        json.dump(out, f)
    print("wrote", path)


if __name__ == "__main__":
    main()
