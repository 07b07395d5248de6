#!/usr/bin/env python3
"""Tiny random-weight Qwen3, Mistral (sliding window), Phi-3, Gemma 3, Mixtral and Qwen3-MoE checkpoints + float64 references.

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
  tiny-mixtral      MixtralForCausalLM: 2 layers, hidden 128, 2 heads / 1 KV
                    head of 64, sliding_window 11, every layer a mixture of 4
                    SwiGLU experts of 64 (block_sparse_moe.experts.{e}.w1/w3/w2)
                    with 2 routed per token, the kept softmax weights
                    renormalized to sum 1; untied head
  tiny-qwen3-moe    Qwen3MoeForCausalLM: 3 layers, hidden 64, 4 heads / 2 KV
                    heads of 64 with q/k norm (as tiny-qwen3); 8 experts of 32
                    (mlp.experts.{e}.gate_proj/up_proj/down_proj), 3 routed per
                    token, norm_topk_prob false (softmax probabilities as they
                    are); mlp_only_layers [1]: layer 1 is a dense MLP of 128;
                    tied head

MoE (MixtralSparseMoeBlock, Qwen3MoeSparseMoeBlock): router logits x·Wgᵀ
[T, E], softmax over experts in float, top-k (largest first), divided by
their sum when renormalizing, and y = Σ_k w_k · down_e(silu(gate_e x) ·
up_e x). The generator checks every token's k-th and (k+1)-th router
probabilities stay apart (MIN_ROUTER_GAP), so f32 picks the same experts.

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
import sys

import numpy as np

from tiny_checkpoint import rms_norm, write_safetensors

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures")
SEED = 4321

SEQUENCES = {"a": [(7 * i + 3) % 128 for i in range(40)], "b": [(11 * i + 5) % 128 for i in range(24)]}
GREEDY_NEW = 24
GREEDY_PROMPTS = [[1, 17, 42, 99, 5, 63, 127, 8, 77, 30], [2, 64, 11, 90, 33, 120, 7, 51],
                  [9, 3, 88, 14, 60, 101, 45, 27, 70, 5, 112, 36], [40, 41, 42, 43, 44, 45],
                  [100, 90, 80, 70, 60, 50, 40, 30, 20]]
# The MoE fixtures' greedy prompts: the five above and five more (issue 25 asks for 9 of 10 identical).
MOE_GREEDY_PROMPTS = GREEDY_PROMPTS + [[5, 6, 7, 8, 9, 10, 11], [127, 1, 126, 2, 125, 3], [33, 66, 99, 12, 45, 78, 111],
                                       [3, 1, 4, 1, 5, 9, 2, 6, 5, 3], [70, 20, 90, 110, 15, 55, 85, 25]]

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
    "tiny-mixtral": dict(
        config={"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": 128,
                "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
                "num_key_value_heads": 1, "head_dim": 64, "vocab_size": 128, "max_position_embeddings": 256,
                "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "tie_word_embeddings": False,
                "sliding_window": 11, "hidden_act": "silu", "num_local_experts": 4, "num_experts_per_tok": 2,
                "router_jitter_noise": 0.0, "output_router_logits": False, "router_aux_loss_coef": 0.02,
                "attention_dropout": 0.0, "torch_dtype": "float32"},
        # seeds whose routers keep every token's k-th and (k+1)-th experts apart (MIN_ROUTER_GAP)
        seed=4327, greedy_prompts=MOE_GREEDY_PROMPTS, windows=[11, 11], qk_norm=False, moe=dict(experts=4, top_k=2, ffn=64, normalize=True, layers=[0, 1])),
    "tiny-qwen3-moe": dict(
        config={"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 64,
                "intermediate_size": 128, "moe_intermediate_size": 32, "num_hidden_layers": 3,
                "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64, "vocab_size": 128,
                "max_position_embeddings": 256, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
                "tie_word_embeddings": True, "attention_bias": False, "use_sliding_window": False,
                "sliding_window": None, "max_window_layers": 3, "hidden_act": "silu", "num_experts": 8,
                "num_experts_per_tok": 3, "norm_topk_prob": False, "decoder_sparse_step": 1,
                "mlp_only_layers": [1], "output_router_logits": False, "router_aux_loss_coef": 0.001,
                "attention_dropout": 0.0, "torch_dtype": "float32"},
        seed=4326, greedy_prompts=MOE_GREEDY_PROMPTS, windows=[0, 0, 0], qk_norm=True, moe=dict(experts=8, top_k=3, ffn=32, normalize=False, layers=[0, 2])),
}

MIN_MARGIN = 1e-3
MIN_ROUTER_GAP = 1e-4  # between each token's k-th and (k+1)-th router probability


def head_dim(c):
    return c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]


def expert_names(cfg, layer, e):
    """(gate, up, down) tensor names of expert e: Mixtral's w1/w3/w2, Qwen3-MoE's projections."""
    if cfg["model_type"] == "mixtral":
        p = f"model.layers.{layer}.block_sparse_moe."
        return p + f"experts.{e}.w1.weight", p + f"experts.{e}.w3.weight", p + f"experts.{e}.w2.weight"
    p = f"model.layers.{layer}.mlp.experts.{e}."
    return p + "gate_proj.weight", p + "up_proj.weight", p + "down_proj.weight"


def router_name(cfg, layer):
    block = "block_sparse_moe" if cfg["model_type"] == "mixtral" else "mlp"
    return f"model.layers.{layer}.{block}.gate.weight"


def make_weights(rng, c, qk_norm, fused=False, gemma3=False, moe=None):
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
        if moe and i in moe["layers"]:  # the dense MLP's place: a router and the experts
            for name in ("gate_proj", "up_proj", "down_proj"):
                del w[p + f"mlp.{name}.weight"]
            w[router_name(c, i)] = linear(moe["experts"], hidden)
            for e in range(moe["experts"]):
                gate, up, down = expert_names(c, i, e)
                w[gate] = linear(moe["ffn"], hidden)
                w[up] = linear(moe["ffn"], hidden)
                w[down] = linear(hidden, moe["ffn"])
        if fused:  # phi3's checkpoint: q | k | v rows in one qkv_proj, gate | up in one gate_up_proj
            w[p + "self_attn.qkv_proj.weight"] = np.concatenate(
                [w.pop(p + f"self_attn.{x}_proj.weight") for x in "qkv"], axis=0)
            w[p + "mlp.gate_up_proj.weight"] = np.concatenate(
                [w.pop(p + "mlp.gate_proj.weight"), w.pop(p + "mlp.up_proj.weight")], axis=0)
    w["model.norm.weight"] = norm(hidden)
    if not c["tie_word_embeddings"]:
        w["lm_head.weight"] = linear(vocab, hidden)
    return w


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


def moe_block(w, x, c, layer, moe, gaps):
    """MixtralSparseMoeBlock / Qwen3MoeSparseMoeBlock on x [T, H]; appends each
    token's gap between its k-th and (k+1)-th router probability to `gaps`."""
    logits = x @ w[router_name(c, layer)].T
    probs = np.exp(logits - logits.max(axis=-1, keepdims=True))
    probs /= probs.sum(axis=-1, keepdims=True)
    k = moe["top_k"]
    order = np.argsort(-probs, axis=-1, kind="stable")
    out = np.zeros_like(x)
    for t in range(x.shape[0]):
        chosen = order[t, :k]
        weights = probs[t, chosen]
        if k < probs.shape[1]:
            gaps.append(float(probs[t, order[t, k - 1]] - probs[t, order[t, k]]))
        if moe["normalize"]:
            weights = weights / weights.sum()
        for e, weight in zip(chosen, weights):
            gate_n, up_n, down_n = expert_names(c, layer, int(e))
            gate, up = w[gate_n] @ x[t], w[up_n] @ x[t]
            out[t] += weight * (w[down_n] @ (gate / (1.0 + np.exp(-gate)) * up))
    return out


def forward(w, tokens, v, gaps=None):
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
        if v.get("moe") and i in v["moe"]["layers"]:
            h = h + moe_block(w, x, c, i, v["moe"], gaps if gaps is not None else [])
            continue
        if v.get("fused"):
            gate, up = np.split(x @ w[p + "mlp.gate_up_proj.weight"].T, 2, axis=-1)
        else:
            gate = x @ w[p + "mlp.gate_proj.weight"].T
            up = x @ w[p + "mlp.up_proj.weight"].T
        h = h + (gate / (1.0 + np.exp(-gate)) * up) @ w[p + "mlp.down_proj.weight"].T
    head = w["model.embed_tokens.weight"] if c["tie_word_embeddings"] else w["lm_head.weight"]
    return rms_norm(h, w["model.norm.weight"], eps) @ head.T


def greedy(w, prompt, v, gaps=None):
    tokens, margins = list(prompt), []
    for _ in range(GREEDY_NEW):
        row = forward(w, tokens, v, gaps)[-1]
        top = np.sort(row)[-2:]
        margins.append(float(top[1] - top[0]))
        tokens.append(int(np.argmax(row)))
    return tokens[len(prompt):], margins


def rounded(row):
    return [float(f"{x:.9g}") for x in row]


def write_variant(name, v):
    out_dir = os.path.join(FIXTURES, name)
    os.makedirs(out_dir, exist_ok=True)
    seed = v.get("seed", SEED)
    weights = make_weights(np.random.default_rng(seed), v["config"], v["qk_norm"], v.get("fused", False),
                           v.get("gemma3", False), v.get("moe"))
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(v["config"], f, indent=2)
        f.write("\n")
    write_safetensors(os.path.join(out_dir, "model.safetensors"), weights)
    reference = {"generator": "test/reference/make_tiny_family_references.py", "seed": seed,
                 "windows": v["windows"], "sequences": {}, "greedy": []}
    gaps = []
    for seq_name, tokens in SEQUENCES.items():
        logits = forward(weights, tokens, v, gaps)
        # [len(tokens), vocab]: row p is the logits after token p.
        reference["sequences"][seq_name] = {"tokens": tokens, "logits": [rounded(r) for r in logits]}
    for prompt in v.get("greedy_prompts", GREEDY_PROMPTS):
        prompt_gaps = []
        continuation, margins = greedy(weights, prompt, v, prompt_gaps)
        if min(margins) < MIN_MARGIN:
            print(f"{name}: prompt {prompt} left out, a greedy step's margin is {min(margins):.2g}")
            continue
        if prompt_gaps and min(prompt_gaps) < MIN_ROUTER_GAP:
            print(f"{name}: prompt {prompt} left out, a token's router gap is {min(prompt_gaps):.2g}")
            continue
        reference["greedy"].append({"prompt": prompt, "tokens": continuation,
                                    "margins": [float(f"{m:.4g}") for m in margins]})
    assert len(reference["greedy"]) >= 3, f"{name}: too few prompts with clear greedy margins"
    if v.get("moe"):
        reference["min_router_gap"] = float(f"{min(gaps):.4g}")
        assert min(gaps) > MIN_ROUTER_GAP, f"{name}: a token's router probabilities nearly tie ({min(gaps):.2g})"
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
