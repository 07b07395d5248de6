#!/usr/bin/env python3
"""Tiny random-weight Llama checkpoints + reference logits for the CPU executor.

Writes test/fixtures/<name>/{config.json, model.safetensors, reference.json}
for two variants, with real random f32 weights and the logits of a plain
numpy forward with Hugging Face LlamaForCausalLM semantics (rotate_half RoPE,
GQA, causal softmax attention, RMSNorm, SiLU-gated MLP) for fixed token
sequences, every position. The forward runs in float64 so the reference is
exact to well below the executor's f32 rounding.
  tiny-llama    2 layers, hidden 64, 4 heads / 2 KV heads, ffn 128, vocab 128,
                rope theta 10000, untied lm_head; sequences of 10 and 8 tokens
  tiny-llama3   Llama-3.x traits: 3 layers, hidden 128, 8 heads / 2 KV heads
                (GQA 4), rope theta 500000 with llama3 frequency scaling,
                tied embeddings; sequences of 40 and 24 tokens, so KV pages
                of 16 fill and spill over

numpy only; deterministic (fixed seed). Run from anywhere:
    python3 test/reference/make_tiny_llama_reference.py
"""
import json
import os

import numpy as np

from tiny_checkpoint import write_safetensors

VARIANTS = {
    "tiny-llama": dict(hidden=64, heads=4, kv_heads=2, ffn=128, vocab=128, layers=2,
                       theta=10000.0, rope_scaling=None, tied=False,
                       # A is prefilled (7) then decoded (3); B is the other
                       # sequence of the ragged-batch test.
                       sequences={"a": [1, 17, 42, 99, 5, 63, 127, 8, 77, 30],
                                  "b": [2, 64, 11, 90, 33, 120, 7, 51]}),
    "tiny-llama3": dict(hidden=128, heads=8, kv_heads=2, ffn=256, vocab=160, layers=3,
                        theta=500000.0, tied=True,
                        rope_scaling={"rope_type": "llama3", "factor": 32.0,
                                      "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                      "original_max_position_embeddings": 64},
                        sequences={"a": [(7 * i + 3) % 160 for i in range(40)],
                                   "b": [(11 * i + 5) % 160 for i in range(24)]}),
}
EPS = 1e-5
SEED = 1234

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures")


def make_weights(rng, v):
    HIDDEN, HEADS, KV_HEADS, FFN, VOCAB = v["hidden"], v["heads"], v["kv_heads"], v["ffn"], v["vocab"]
    HEAD_DIM = HIDDEN // HEADS

    def linear(out_f, in_f):
        # Scaled so activations and logits stay O(1) through the layers.
        return (rng.standard_normal((out_f, in_f)) / np.sqrt(in_f)).astype(np.float32)

    def norm(n):
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    w = {"model.embed_tokens.weight": rng.standard_normal((VOCAB, HIDDEN)).astype(np.float32)}
    for i in range(v["layers"]):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = norm(HIDDEN)
        w[p + "self_attn.q_proj.weight"] = linear(HEADS * HEAD_DIM, HIDDEN)
        w[p + "self_attn.k_proj.weight"] = linear(KV_HEADS * HEAD_DIM, HIDDEN)
        w[p + "self_attn.v_proj.weight"] = linear(KV_HEADS * HEAD_DIM, HIDDEN)
        w[p + "self_attn.o_proj.weight"] = linear(HIDDEN, HEADS * HEAD_DIM)
        w[p + "post_attention_layernorm.weight"] = norm(HIDDEN)
        w[p + "mlp.gate_proj.weight"] = linear(FFN, HIDDEN)
        w[p + "mlp.up_proj.weight"] = linear(FFN, HIDDEN)
        w[p + "mlp.down_proj.weight"] = linear(HIDDEN, FFN)
    w["model.norm.weight"] = norm(HIDDEN)
    if not v["tied"]:
        w["lm_head.weight"] = linear(VOCAB, HIDDEN)
    return w


def rms_norm(x, w):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + EPS) * w


def rotate_half(x):
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def inv_freq(v):
    """HF's rotary inverse frequencies, with _compute_llama3_parameters."""
    head_dim = v["hidden"] // v["heads"]
    inv = 1.0 / (v["theta"] ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
    scaling = v["rope_scaling"]
    if scaling:
        factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
        old = scaling["original_max_position_embeddings"]
        wavelen = 2 * np.pi / inv
        scaled = np.where(wavelen > old / low, inv / factor, inv)
        smooth = (old / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = (wavelen >= old / high) & (wavelen <= old / low)
        inv = np.where(medium, smoothed, scaled)
    return inv


def rope(x, positions, v):
    # x: [T, heads, D]; emb = cat(freqs, freqs)
    freqs = np.outer(np.asarray(positions, dtype=np.float64), inv_freq(v))
    emb = np.concatenate([freqs, freqs], axis=-1)[:, None, :]
    return x * np.cos(emb) + rotate_half(x) * np.sin(emb)


def forward(w, tokens, cfg):
    """Logits [T, VOCAB] for every position of one sequence (float64)."""
    HIDDEN, HEADS, KV_HEADS = cfg["hidden"], cfg["heads"], cfg["kv_heads"]
    HEAD_DIM = HIDDEN // HEADS
    w = {k: a.astype(np.float64) for k, a in w.items()}
    t = len(tokens)
    pos = np.arange(t)
    h = w["model.embed_tokens.weight"][tokens]
    mask = np.triu(np.full((t, t), -np.inf), k=1)
    group = HEADS // KV_HEADS
    for i in range(cfg["layers"]):
        p = f"model.layers.{i}."
        x = rms_norm(h, w[p + "input_layernorm.weight"])
        q = (x @ w[p + "self_attn.q_proj.weight"].T).reshape(t, HEADS, HEAD_DIM)
        k = (x @ w[p + "self_attn.k_proj.weight"].T).reshape(t, KV_HEADS, HEAD_DIM)
        v = (x @ w[p + "self_attn.v_proj.weight"].T).reshape(t, KV_HEADS, HEAD_DIM)
        q, k = rope(q, pos, cfg), rope(k, pos, cfg)
        out = np.empty_like(q)
        for head in range(HEADS):
            kv = head // group
            scores = q[:, head, :] @ k[:, kv, :].T / np.sqrt(HEAD_DIM) + mask
            scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
            scores /= scores.sum(axis=-1, keepdims=True)
            out[:, head, :] = scores @ v[:, kv, :]
        h = h + out.reshape(t, HIDDEN) @ w[p + "self_attn.o_proj.weight"].T
        x = rms_norm(h, w[p + "post_attention_layernorm.weight"])
        gate = x @ w[p + "mlp.gate_proj.weight"].T
        up = x @ w[p + "mlp.up_proj.weight"].T
        h = h + (gate / (1.0 + np.exp(-gate)) * up) @ w[p + "mlp.down_proj.weight"].T
    head = w["model.embed_tokens.weight"] if cfg["tied"] else w["lm_head.weight"]
    return rms_norm(h, w["model.norm.weight"]) @ head.T


def write_variant(name, v):
    out_dir = os.path.join(FIXTURES, name)
    os.makedirs(out_dir, exist_ok=True)
    weights = make_weights(np.random.default_rng(SEED), v)
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": v["hidden"],
        "intermediate_size": v["ffn"],
        "num_hidden_layers": v["layers"],
        "num_attention_heads": v["heads"],
        "num_key_value_heads": v["kv_heads"],
        "vocab_size": v["vocab"],
        "max_position_embeddings": 256,
        "rms_norm_eps": EPS,
        "rope_theta": v["theta"],
        "tie_word_embeddings": v["tied"],
        "torch_dtype": "float32",
    }
    if v["rope_scaling"]:
        config["rope_scaling"] = v["rope_scaling"]
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    write_safetensors(os.path.join(out_dir, "model.safetensors"), weights)
    reference = {"generator": "test/reference/make_tiny_llama_reference.py", "seed": SEED,
                 "sequences": {}}
    for seq_name, tokens in v["sequences"].items():
        logits = forward(weights, tokens, v)
        reference["sequences"][seq_name] = {
            "tokens": tokens,
            # [len(tokens), VOCAB]: row p is the logits after token p.
            "logits": [[float(f"{x:.7g}") for x in row] for row in logits],
        }
    with open(os.path.join(out_dir, "reference.json"), "w") as f:
        json.dump(reference, f, separators=(",", ":"))
        f.write("\n")


def main():
    for name, variant in VARIANTS.items():
        write_variant(name, variant)


if __name__ == "__main__":
    main()
