#!/usr/bin/env python3
"""Tiny random-weight Qwen3, Mistral (sliding window), Phi-3 and Gemma 3 checkpoints + float64 references.

Writes test/fixtures/<name>/{config.json, model.safetensors, reference.json}
with real random f32 weights and the logits of a NumPy forward written from
transformers' modeling_qwen3.py / modeling_mistral.py semantics (and modeling_phi3.py's,
modeling_gemma3.py's), in float64:

  tiny-qwen3        Qwen3ForCausalLM: 2 layers, hidden 64, 4 heads / 2 KV heads
                    of head_dim 64 (not hidden / heads: q is [256, 64]), per-head
                    RMSNorm of q and k (q_norm / k_norm over head_dim) before
                    RoPE, no biases, tied embeddings, rope theta 1e6, eps 1e-6;
                    use_sliding_window with max_window_layers 1: layer 0 full,
                    layer 1 sliding over 12 keys
  tiny-mistral-swa  MistralForCausalLM: 2 layers, hidden 128, 2 heads / 1 KV
                    head of 64, sliding_window 7 on every layer, untied head
  tiny-phi3         Phi3ForCausalLM: q/k/v stored as one qkv_proj and gate/up
                    as one gate_up_proj (gate rows first), 2 layers, hidden
                    128, 2 heads / 1 KV head of 64, sliding_window 9 on every
                    layer (Phi-3-mini's 2047, scaled down), untied head
  tiny-gemma3       Gemma3ForCausalLM (gemma3_text): 3 layers, hidden 96,
                    4 heads / 2 KV heads of head_dim 64, layer_types sliding,
                    sliding, full with sliding_window 10 (sliding_window_pattern
                    3 says the same to transformers before layer_types); GeGLU
                    (gelu_pytorch_tanh); RMSNorm scaling by (1 + w) in four
                    norms a layer (input, post_attention on the attention
                    output, pre_feedforward, post_feedforward on the MLP
                    output) and on q/k per head; embeddings times
                    f32(sqrt(96)); scores scaled by query_pre_attn_scalar 48
                    ^-1/2 (not head_dim's); sliding layers rotate with
                    rope_local_base_freq 1e4, the full layer with rope_theta
                    1e6 and linear rope_scaling 8; tied head

Semantics (transformers): q/k/v projections, view [T, heads, D]; Qwen3
normalizes each head of q and k (x / sqrt(mean(x^2) + eps) * w, w of D);
rotate_half RoPE with inv_freq = 1 / theta^(2i/D); GQA; scores q.k / sqrt(D)
masked to keys (p - W, p] on sliding layers (masking_utils'
sliding_window_overlay: kv_idx > q_idx - W) and to 0..p elsewhere; softmax;
o_proj; SiLU-gated MLP; final RMSNorm; lm_head (or the embedding, tied).

reference.json: for sequences "a" (40 tokens) and "b" (24), every
position's logits; and "greedy": prompts with their 24-token greedy
continuations in float64 and each step's top-1 minus top-2 margin (the
generator keeps only prompts whose margins stay above 1e-3, so f32 keeps
the same path). Sequences and continuations run well past the windows, so
blocks of 16 keys fall wholly outside them.

numpy only; deterministic (fixed seed). Run from anywhere:
    python3 test/reference/make_tiny_family_references.py
"""
import json
import os
import struct
import sys

import numpy as np

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures")
SEED = 4321

VARIANTS = {
    "tiny-qwen3": dict(
        config={"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 64,
                "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
                "num_key_value_heads": 2, "head_dim": 64, "vocab_size": 128, "max_position_embeddings": 256,
                "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "tie_word_embeddings": True,
                "attention_bias": False, "use_sliding_window": True, "sliding_window": 12,
                "max_window_layers": 1, "hidden_act": "silu", "torch_dtype": "float32"},
        windows=[0, 12], qk_norm=True),
    "tiny-mistral-swa": dict(
        config={"architectures": ["MistralForCausalLM"], "model_type": "mistral", "hidden_size": 128,
                "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2,
                "num_key_value_heads": 1, "head_dim": 64, "vocab_size": 128, "max_position_embeddings": 256,
                "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "tie_word_embeddings": False,
                "sliding_window": 7, "hidden_act": "silu", "torch_dtype": "float32"},
        windows=[7, 7], qk_norm=False),
    "tiny-phi3": dict(
        config={"architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "hidden_size": 128,
                "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2,
                "num_key_value_heads": 1, "vocab_size": 128, "max_position_embeddings": 256,
                "original_max_position_embeddings": 256, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
                "rope_scaling": None, "partial_rotary_factor": 1.0, "tie_word_embeddings": False,
                "sliding_window": 9, "hidden_act": "silu", "attention_dropout": 0.0, "embd_pdrop": 0.0,
                "resid_pdrop": 0.0, "pad_token_id": None, "torch_dtype": "float32"},
        windows=[9, 9], qk_norm=False, fused=True),
    "tiny-gemma3": dict(
        config={"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "hidden_size": 96,
                "intermediate_size": 128, "num_hidden_layers": 3, "num_attention_heads": 4,
                "num_key_value_heads": 2, "head_dim": 64, "vocab_size": 128, "max_position_embeddings": 256,
                "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
                "rope_scaling": {"rope_type": "linear", "factor": 8.0}, "query_pre_attn_scalar": 48,
                "sliding_window": 10, "sliding_window_pattern": 3,
                "layer_types": ["sliding_attention", "sliding_attention", "full_attention"],
                "hidden_activation": "gelu_pytorch_tanh", "attn_logit_softcapping": None,
                "final_logit_softcapping": None, "attention_bias": False, "attention_dropout": 0.0,
                "tie_word_embeddings": True, "pad_token_id": 0, "bos_token_id": 2, "eos_token_id": 1,
                "torch_dtype": "float32"},
        windows=[10, 10, 0], qk_norm=True, gemma3=True),
}

SEQUENCES = {"a": [(7 * i + 3) % 128 for i in range(40)], "b": [(11 * i + 5) % 128 for i in range(24)]}
GREEDY_NEW = 24
GREEDY_PROMPTS = [[1, 17, 42, 99, 5, 63, 127, 8, 77, 30], [2, 64, 11, 90, 33, 120, 7, 51],
                  [9, 3, 88, 14, 60, 101, 45, 27, 70, 5, 112, 36], [40, 41, 42, 43, 44, 45],
                  [100, 90, 80, 70, 60, 50, 40, 30, 20]]
MIN_MARGIN = 1e-3


def head_dim(c):
    return c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]


def make_weights(rng, c, qk_norm, fused=False, gemma3=False):
    hidden, heads, kv_heads, d = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], head_dim(c)
    ffn, vocab = c["intermediate_size"], c["vocab_size"]

    def linear(out_f, in_f):
        # Scaled so activations and logits stay O(1) through the layers.
        return (rng.standard_normal((out_f, in_f)) / np.sqrt(in_f)).astype(np.float32)

    def norm(n):
        # Gemma stores w of (1 + w), near 0; the others w itself, near 1.
        return ((0.0 if gemma3 else 1.0) + 0.1 * rng.standard_normal(n)).astype(np.float32)

    w = {"model.embed_tokens.weight": rng.standard_normal((vocab, hidden)).astype(np.float32)}
    if gemma3:  # its tied head reads rows of norm sqrt(hidden); a quarter keeps the logits O(1) (std ~3)
        w["model.embed_tokens.weight"] *= np.float32(0.25)
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = norm(hidden)
        w[p + "self_attn.q_proj.weight"] = linear(heads * d, hidden)
        w[p + "self_attn.k_proj.weight"] = linear(kv_heads * d, hidden)
        w[p + "self_attn.v_proj.weight"] = linear(kv_heads * d, hidden)
        if qk_norm:
            w[p + "self_attn.q_norm.weight"] = norm(d)
            w[p + "self_attn.k_norm.weight"] = norm(d)
        w[p + "self_attn.o_proj.weight"] = linear(hidden, heads * d)
        w[p + "post_attention_layernorm.weight"] = norm(hidden)
        w[p + "mlp.gate_proj.weight"] = linear(ffn, hidden)
        w[p + "mlp.up_proj.weight"] = linear(ffn, hidden)
        w[p + "mlp.down_proj.weight"] = linear(hidden, ffn)
        if gemma3:  # post_attention_layernorm above is the attention output's norm
            w[p + "pre_feedforward_layernorm.weight"] = norm(hidden)
            w[p + "post_feedforward_layernorm.weight"] = norm(hidden)
        if fused:  # phi3's checkpoint: q | k | v rows in one qkv_proj, gate | up in one gate_up_proj
            w[p + "self_attn.qkv_proj.weight"] = np.concatenate(
                [w.pop(p + f"self_attn.{x}_proj.weight") for x in "qkv"], axis=0)
            w[p + "mlp.gate_up_proj.weight"] = np.concatenate(
                [w.pop(p + "mlp.gate_proj.weight"), w.pop(p + "mlp.up_proj.weight")], axis=0)
    w["model.norm.weight"] = norm(hidden)
    if not c["tie_word_embeddings"]:
        w["lm_head.weight"] = linear(vocab, hidden)
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


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rotate_half(x):
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def rope(x, positions, theta):
    d = x.shape[-1]
    inv = 1.0 / (theta ** (np.arange(0, d, 2, dtype=np.float64) / d))
    freqs = np.outer(np.asarray(positions, dtype=np.float64), inv)
    emb = np.concatenate([freqs, freqs], axis=-1)[:, None, :]
    return x * np.cos(emb) + rotate_half(x) * np.sin(emb)


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def forward_gemma3(w, tokens, v):
    """Gemma3ForCausalLM: Gemma3RMSNorm's x / rms · (1 + w) everywhere,
    Gemma3TextScaledWordEmbedding (embed_scale a float32 tensor), the
    sandwich norms of Gemma3DecoderLayer, scaling query_pre_attn_scalar^-0.5,
    position_embeddings_local on sliding layers."""
    c = v["config"]
    heads, kv_heads, d = c["num_attention_heads"], c["num_key_value_heads"], head_dim(c)
    eps = c["rms_norm_eps"]
    w = {k: a.astype(np.float64) for k, a in w.items()}
    t = len(tokens)
    pos = np.arange(t)
    group = heads // kv_heads

    def norm(x, name):
        return rms_norm(x, 1.0 + w[name], eps)

    h = w["model.embed_tokens.weight"][tokens] * float(np.float32(c["hidden_size"] ** 0.5))
    scaling = c["query_pre_attn_scalar"] ** -0.5
    factor = c["rope_scaling"]["factor"]
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        window = v["windows"][i]
        q_idx, k_idx = pos[:, None], pos[None, :]
        visible = k_idx <= q_idx
        if window:
            visible &= k_idx > q_idx - window
        mask = np.where(visible, 0.0, -np.inf)
        x = norm(h, p + "input_layernorm.weight")
        q = (x @ w[p + "self_attn.q_proj.weight"].T).reshape(t, heads, d)
        k = (x @ w[p + "self_attn.k_proj.weight"].T).reshape(t, kv_heads, d)
        val = (x @ w[p + "self_attn.v_proj.weight"].T).reshape(t, kv_heads, d)
        q = norm(q, p + "self_attn.q_norm.weight")
        k = norm(k, p + "self_attn.k_norm.weight")
        # Linear scaling divides inv_freq by the factor: positions / factor.
        if window:
            theta, rope_pos = c["rope_local_base_freq"], pos
        else:
            theta, rope_pos = c["rope_theta"], pos / factor
        q, k = rope(q, rope_pos, theta), rope(k, rope_pos, theta)
        out = np.empty_like(q)
        for head in range(heads):
            kv = head // group
            scores = q[:, head, :] @ k[:, kv, :].T * scaling + mask
            scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
            scores /= scores.sum(axis=-1, keepdims=True)
            out[:, head, :] = scores @ val[:, kv, :]
        attn = out.reshape(t, heads * d) @ w[p + "self_attn.o_proj.weight"].T
        h = h + norm(attn, p + "post_attention_layernorm.weight")
        x = norm(h, p + "pre_feedforward_layernorm.weight")
        gate = x @ w[p + "mlp.gate_proj.weight"].T
        up = x @ w[p + "mlp.up_proj.weight"].T
        mlp = (gelu_tanh(gate) * up) @ w[p + "mlp.down_proj.weight"].T
        h = h + norm(mlp, p + "post_feedforward_layernorm.weight")
    return norm(h, "model.norm.weight") @ w["model.embed_tokens.weight"].T


def forward(w, tokens, v):
    """Logits [T, vocab] for every position of one sequence (float64)."""
    if v.get("gemma3"):
        return forward_gemma3(w, tokens, v)
    c = v["config"]
    heads, kv_heads, d = c["num_attention_heads"], c["num_key_value_heads"], head_dim(c)
    eps, theta = c["rms_norm_eps"], c["rope_theta"]
    w = {k: a.astype(np.float64) for k, a in w.items()}
    t = len(tokens)
    pos = np.arange(t)
    h = w["model.embed_tokens.weight"][tokens]
    group = heads // kv_heads
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        window = v["windows"][i]
        # Causal, and on sliding layers keys (q - W, q] only.
        q_idx, k_idx = pos[:, None], pos[None, :]
        visible = k_idx <= q_idx
        if window:
            visible &= k_idx > q_idx - window
        mask = np.where(visible, 0.0, -np.inf)
        x = rms_norm(h, w[p + "input_layernorm.weight"], eps)
        if v.get("fused"):
            qkv = x @ w[p + "self_attn.qkv_proj.weight"].T
            q = qkv[:, :heads * d].reshape(t, heads, d)
            k = qkv[:, heads * d:(heads + kv_heads) * d].reshape(t, kv_heads, d)
            val = qkv[:, (heads + kv_heads) * d:].reshape(t, kv_heads, d)
        else:
            q = (x @ w[p + "self_attn.q_proj.weight"].T).reshape(t, heads, d)
            k = (x @ w[p + "self_attn.k_proj.weight"].T).reshape(t, kv_heads, d)
            val = (x @ w[p + "self_attn.v_proj.weight"].T).reshape(t, kv_heads, d)
        if v["qk_norm"]:
            q = rms_norm(q, w[p + "self_attn.q_norm.weight"], eps)
            k = rms_norm(k, w[p + "self_attn.k_norm.weight"], eps)
        q, k = rope(q, pos, theta), rope(k, pos, theta)
        out = np.empty_like(q)
        for head in range(heads):
            kv = head // group
            scores = q[:, head, :] @ k[:, kv, :].T / np.sqrt(d) + mask
            scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
            scores /= scores.sum(axis=-1, keepdims=True)
            out[:, head, :] = scores @ val[:, kv, :]
        h = h + out.reshape(t, heads * d) @ w[p + "self_attn.o_proj.weight"].T
        x = rms_norm(h, w[p + "post_attention_layernorm.weight"], eps)
        if v.get("fused"):
            gate, up = np.split(x @ w[p + "mlp.gate_up_proj.weight"].T, 2, axis=-1)
        else:
            gate = x @ w[p + "mlp.gate_proj.weight"].T
            up = x @ w[p + "mlp.up_proj.weight"].T
        h = h + (gate / (1.0 + np.exp(-gate)) * up) @ w[p + "mlp.down_proj.weight"].T
    head = w["model.embed_tokens.weight"] if c["tie_word_embeddings"] else w["lm_head.weight"]
    return rms_norm(h, w["model.norm.weight"], eps) @ head.T


def greedy(w, prompt, v):
    tokens, margins = list(prompt), []
    for _ in range(GREEDY_NEW):
        row = forward(w, tokens, v)[-1]
        top = np.sort(row)[-2:]
        margins.append(float(top[1] - top[0]))
        tokens.append(int(np.argmax(row)))
    return tokens[len(prompt):], margins


def rounded(row):
    return [float(f"{x:.9g}") for x in row]


def write_variant(name, v):
    out_dir = os.path.join(FIXTURES, name)
    os.makedirs(out_dir, exist_ok=True)
    weights = make_weights(np.random.default_rng(SEED), v["config"], v["qk_norm"], v.get("fused", False),
                           v.get("gemma3", False))
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(v["config"], f, indent=2)
        f.write("\n")
    write_safetensors(os.path.join(out_dir, "model.safetensors"), weights)
    reference = {"generator": "test/reference/make_tiny_family_references.py", "seed": SEED,
                 "windows": v["windows"], "sequences": {}, "greedy": []}
    for seq_name, tokens in SEQUENCES.items():
        logits = forward(weights, tokens, v)
        # [len(tokens), vocab]: row p is the logits after token p.
        reference["sequences"][seq_name] = {"tokens": tokens, "logits": [rounded(r) for r in logits]}
    for prompt in GREEDY_PROMPTS:
        continuation, margins = greedy(weights, prompt, v)
        if min(margins) < MIN_MARGIN:
            print(f"{name}: prompt {prompt} left out, a greedy step's margin is {min(margins):.2g}")
            continue
        reference["greedy"].append({"prompt": prompt, "tokens": continuation,
                                    "margins": [float(f"{m:.4g}") for m in margins]})
    assert len(reference["greedy"]) >= 3, f"{name}: too few prompts with clear greedy margins"
    with open(os.path.join(out_dir, "reference.json"), "w") as f:
        json.dump(reference, f, separators=(",", ":"))
        f.write("\n")
    print(f"{name}: {len(reference['greedy'])} greedy prompts")


def main():
    # Names on the command line write those fixtures only (the others stay byte-identical anyway).
    names = sys.argv[1:] or list(VARIANTS)
    for name in names:
        write_variant(name, VARIANTS[name])


if __name__ == "__main__":
    main()
