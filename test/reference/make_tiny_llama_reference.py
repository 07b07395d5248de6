#!/usr/bin/env python3
"""Tiny random-weight Llama checkpoint + reference logits for the CPU executor.

Writes test/fixtures/tiny-llama/{config.json, model.safetensors, reference.json}:
a 2-layer Llama (hidden 64, 4 heads, 2 KV heads, ffn 128, vocab 128, rope theta
10000, untied lm_head) with real random f32 weights, and the logits of a plain
numpy forward with Hugging Face LlamaForCausalLM semantics (rotate_half RoPE,
GQA, causal softmax attention, RMSNorm, SiLU-gated MLP) for fixed token
sequences, every position. The forward runs in float64 so the reference is
exact to well below the executor's f32 rounding.

numpy only; deterministic (fixed seed). Run from anywhere:
    python3 test/reference/make_tiny_llama_reference.py
"""
import json
import os
import struct

import numpy as np

HIDDEN, HEADS, KV_HEADS, FFN, VOCAB, LAYERS = 64, 4, 2, 128, 128, 2
HEAD_DIM = HIDDEN // HEADS
THETA, EPS = 10000.0, 1e-5
SEED = 1234
# Token sequences: A is prefilled (7) then decoded (3); B is the other
# sequence of the ragged-batch test.
SEQUENCES = {
    "a": [1, 17, 42, 99, 5, 63, 127, 8, 77, 30],
    "b": [2, 64, 11, 90, 33, 120, 7, 51],
}

OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "tiny-llama")


def make_weights(rng):
    def linear(out_f, in_f):
        # Scaled so activations and logits stay O(1) through the layers.
        return (rng.standard_normal((out_f, in_f)) / np.sqrt(in_f)).astype(np.float32)

    def norm(n):
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    w = {"model.embed_tokens.weight": rng.standard_normal((VOCAB, HIDDEN)).astype(np.float32)}
    for i in range(LAYERS):
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
    w["lm_head.weight"] = linear(VOCAB, HIDDEN)
    return w


def write_safetensors(path, tensors):
    header, offset, blobs = {}, 0, []
    for name in sorted(tensors):
        data = np.ascontiguousarray(tensors[name], dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header, separators=(",", ":"))
    text += " " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text.encode())
        for blob in blobs:
            f.write(blob)


def rms_norm(x, w):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + EPS) * w


def rotate_half(x):
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def rope(x, positions):
    # x: [T, heads, D]; HF: inv_freq = 1 / theta^(2i/D), emb = cat(freqs, freqs)
    inv_freq = 1.0 / (THETA ** (np.arange(0, HEAD_DIM, 2, dtype=np.float64) / HEAD_DIM))
    freqs = np.outer(np.asarray(positions, dtype=np.float64), inv_freq)
    emb = np.concatenate([freqs, freqs], axis=-1)[:, None, :]
    return x * np.cos(emb) + rotate_half(x) * np.sin(emb)


def forward(w, tokens):
    """Logits [T, VOCAB] for every position of one sequence (float64)."""
    w = {k: v.astype(np.float64) for k, v in w.items()}
    t = len(tokens)
    pos = np.arange(t)
    h = w["model.embed_tokens.weight"][tokens]
    mask = np.triu(np.full((t, t), -np.inf), k=1)
    group = HEADS // KV_HEADS
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        x = rms_norm(h, w[p + "input_layernorm.weight"])
        q = (x @ w[p + "self_attn.q_proj.weight"].T).reshape(t, HEADS, HEAD_DIM)
        k = (x @ w[p + "self_attn.k_proj.weight"].T).reshape(t, KV_HEADS, HEAD_DIM)
        v = (x @ w[p + "self_attn.v_proj.weight"].T).reshape(t, KV_HEADS, HEAD_DIM)
        q, k = rope(q, pos), rope(k, pos)
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
    return rms_norm(h, w["model.norm.weight"]) @ w["lm_head.weight"].T


def main():
    os.makedirs(OUT_DIR, exist_ok=True)
    weights = make_weights(np.random.default_rng(SEED))
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": HIDDEN,
        "intermediate_size": FFN,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "vocab_size": VOCAB,
        "max_position_embeddings": 256,
        "rms_norm_eps": EPS,
        "rope_theta": THETA,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
    }
    with open(os.path.join(OUT_DIR, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    write_safetensors(os.path.join(OUT_DIR, "model.safetensors"), weights)
    reference = {"generator": "test/reference/make_tiny_llama_reference.py", "seed": SEED,
                 "sequences": {}}
    for name, tokens in SEQUENCES.items():
        logits = forward(weights, tokens)
        reference["sequences"][name] = {
            "tokens": tokens,
            # [len(tokens), VOCAB]: row p is the logits after token p.
            "logits": [[float(f"{v:.7g}") for v in row] for row in logits],
        }
    with open(os.path.join(OUT_DIR, "reference.json"), "w") as f:
        json.dump(reference, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
