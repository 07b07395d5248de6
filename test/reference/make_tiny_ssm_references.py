#!/usr/bin/env python3
"""Tiny random-weight Mamba and Mamba-2 checkpoints + float64 references.

Writes test/fixtures/<name>/{config.json, model.safetensors, reference.json}
with real random f32 weights and the logits of a NumPy forward written from
transformers' modeling_mamba.py (MambaMixer.slow_forward) and
modeling_mamba2.py (Mamba2Mixer.torch_forward) semantics, in float64:

  tiny-mamba   MambaForCausalLM: 2 layers, hidden 64, expand 2 (I = 128),
               state_size 8, conv_kernel 4 (with bias), time_step_rank
               "auto" (4), no in/out projection biases, tied head
  tiny-mamba2  Mamba2ForCausalLM: 2 layers, hidden 64, expand 2, 8 heads of
               16, n_groups 2 (heads 0-3 read B/C group 0, 4-7 group 1),
               state_size 16, conv_kernel 4, chunk_size 8 (prefills of 40
               tokens cross 5 chunks), time_step_limit [0, inf], untied head
  tiny-hybrid  NemotronHForCausalLM (modeling_nemotron_h.py), a hybrid
               stack: hybrid_override_pattern "M*M-" = Mamba-2 mixer
               (as tiny-mamba2's, its gated RMSNorm per group of I / G =
               64, Zamba2RMSNormGated), causal GQA attention without
               positions (4 heads / 2 KV heads of 16, scaled 16^-1/2), Mamba-2
               mixer, MLP down(relu(up(x))²) of 96; each block x +=
               mixer(rms_norm(x)); untied head

Semantics (transformers):
  Mamba layer: h = rms_norm(x); u, z = split(in_proj(h)); u =
  silu(conv1d(u) causal, depthwise, bias); dt, B, C = split(x_proj(u), [R, N,
  N]); dt = softplus(dt_proj(dt)); A = -exp(A_log) [I, N]; s_t = exp(dt_t A)
  s_{t-1} + dt_t u_t B_t; y_t = s_t C_t + D u_t; x += out_proj(y silu(z)).
  Mamba-2 layer: z, xBC, dt = split(in_proj(h), [I, I + 2GN, H]); xBC =
  silu(conv1d(xBC)); u, B, C = split(xBC, [I, GN, GN]); dt =
  clamp(softplus(dt + dt_bias), time_step_limit); A = -exp(A_log) [H];
  s_t[h] = exp(dt A[h]) s + dt u_t[h] B_t[g(h)]ᵀ; y = s C_t[g(h)] + D[h]
  u_t[h]; MambaRMSNormGated: n = y silu(z) / rms over all I · w; x +=
  out_proj(n). Both: embeddings, per-layer RMSNorm (eps 1e-5), norm_f, head.
  The recurrence is transformers' own decode path and equals its chunked
  prefill in exact arithmetic (float64 differences ~1e-13).

reference.json: sequences "a" (40 tokens) and "b" (24) with every
position's logits and the final conv/SSM state of each layer after "a";
"greedy": 10 prompts with 24-token greedy continuations and each step's
top-1 minus top-2 margin (prompts whose margins fall below 1e-3 are left
out so f32 keeps the same path).

numpy only; deterministic (fixed seed). Run from anywhere:
    python3 test/reference/make_tiny_ssm_references.py [tiny-mamba tiny-mamba2]
"""
import json
import os
import sys

import numpy as np

from tiny_checkpoint import rms_norm, write_safetensors

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures")
SEED = 2929
SEQUENCES = {"a": [(7 * i + 3) % 128 for i in range(40)], "b": [(11 * i + 5) % 128 for i in range(24)]}
GREEDY_NEW = 24
GREEDY_PROMPTS = [[1, 17, 42, 99, 5, 63, 127, 8, 77, 30], [2, 64, 11, 90, 33, 120, 7, 51],
                  [9, 3, 88, 14, 60, 101, 45, 27, 70, 5, 112, 36], [40, 41, 42, 43, 44, 45],
                  [100, 90, 80, 70, 60, 50, 40, 30, 20], [5, 6, 7, 8, 9, 10, 11], [127, 1, 126, 2, 125, 3],
                  [33, 66, 99, 12, 45, 78, 111], [3, 1, 4, 1, 5, 9, 2, 6, 5, 3], [70, 20, 90, 110, 15, 55, 85, 25]]
MIN_MARGIN = 1e-3

VARIANTS = {
    "tiny-mamba": {"architectures": ["MambaForCausalLM"], "model_type": "mamba", "hidden_size": 64,
                   "num_hidden_layers": 2, "vocab_size": 128, "state_size": 8, "expand": 2, "conv_kernel": 4,
                   "use_bias": False, "use_conv_bias": True, "hidden_act": "silu", "time_step_rank": "auto",
                   "layer_norm_epsilon": 1e-05, "residual_in_fp32": True, "use_mambapy": False,
                   "tie_word_embeddings": True, "pad_token_id": 0, "bos_token_id": 0, "eos_token_id": 0,
                   "torch_dtype": "float32"},
    "tiny-mamba2": {"architectures": ["Mamba2ForCausalLM"], "model_type": "mamba2", "hidden_size": 64,
                    "num_hidden_layers": 2, "vocab_size": 128, "state_size": 16, "expand": 2, "conv_kernel": 4,
                    "num_heads": 8, "head_dim": 16, "n_groups": 2, "chunk_size": 8, "use_bias": False,
                    "use_conv_bias": True, "hidden_act": "silu", "layer_norm_epsilon": 1e-05,
                    "residual_in_fp32": True, "rms_norm": True, "time_step_limit": [0.0, float("inf")],
                    "time_step_rank": "auto", "tie_word_embeddings": False, "pad_token_id": 0, "bos_token_id": 0,
                    "eos_token_id": 0, "torch_dtype": "float32"},
    "tiny-hybrid": {"architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h", "hidden_size": 64,
                    "num_hidden_layers": 4, "hybrid_override_pattern": "M*M-", "vocab_size": 128,
                    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "attention_bias": False,
                    "mlp_bias": False, "mlp_hidden_act": "relu2", "intermediate_size": 96, "mamba_num_heads": 8,
                    "mamba_head_dim": 16, "n_groups": 2, "mamba_n_groups": 2, "ssm_state_size": 16,
                    "conv_kernel": 4, "expand": 2, "chunk_size": 8, "use_conv_bias": True, "use_bias": False,
                    "mamba_hidden_act": "silu", "time_step_limit": [0.0, float("inf")], "layer_norm_epsilon": 1e-05,
                    "residual_in_fp32": False, "use_mamba_kernels": False, "num_nextn_predict_layers": 0,
                    "tie_word_embeddings": False, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
                    "torch_dtype": "float32"},
}


def layer_kinds(c):
    if c["model_type"] != "nemotron_h":
        return ["mamba"] * c["num_hidden_layers"]
    return [{"M": "mamba", "*": "attention", "-": "mlp"}[ch] for ch in c["hybrid_override_pattern"]]


def m2_sizes(c):
    """(I, N, heads, head_dim, groups) of a Mamba-2 mixer: Mamba2Config's or NemotronHConfig's names."""
    if c["model_type"] == "nemotron_h":
        return (c["mamba_num_heads"] * c["mamba_head_dim"], c["ssm_state_size"], c["mamba_num_heads"],
                c["mamba_head_dim"], c["n_groups"])
    inter, n, _ = sizes(c)
    return inter, n, c["num_heads"], c["head_dim"], c["n_groups"]


def sizes(c):
    if c["model_type"] == "nemotron_h":
        return c["mamba_num_heads"] * c["mamba_head_dim"], c["ssm_state_size"], 0
    inter = int(c["expand"] * c["hidden_size"])
    rank = -(-c["hidden_size"] // 16) if c.get("time_step_rank", "auto") == "auto" else c["time_step_rank"]
    return inter, c["state_size"], rank


def make_weights(rng, c):
    hidden, vocab, k = c["hidden_size"], c["vocab_size"], c["conv_kernel"]
    inter, n, rank = sizes(c)
    m2 = c["model_type"] in ("mamba2", "nemotron_h")
    kinds = layer_kinds(c)

    def linear(out_f, in_f):
        return (rng.standard_normal((out_f, in_f)) / np.sqrt(in_f)).astype(np.float32)

    def inv_softplus(dt):  # transformers' dt init: dt in [dt_min, dt_max], stored as softplus^-1
        return dt + np.log(-np.expm1(-dt))

    w = {"backbone.embeddings.weight": rng.standard_normal((vocab, hidden)).astype(np.float32)}
    if c["tie_word_embeddings"]:  # the tied head reads rows of norm sqrt(hidden); a quarter keeps logits O(10)
        w["backbone.embeddings.weight"] *= np.float32(0.25)
    for i in range(c["num_hidden_layers"]):
        p = f"backbone.layers.{i}."
        w[p + "norm.weight"] = (1.0 + 0.1 * rng.standard_normal(hidden)).astype(np.float32)
        m = p + "mixer."
        if kinds[i] == "attention":
            q, kv = c["num_attention_heads"] * c["head_dim"], c["num_key_value_heads"] * c["head_dim"]
            w[m + "q_proj.weight"] = linear(q, hidden)
            w[m + "k_proj.weight"] = linear(kv, hidden)
            w[m + "v_proj.weight"] = linear(kv, hidden)
            w[m + "o_proj.weight"] = linear(hidden, q)
            continue
        if kinds[i] == "mlp":
            w[m + "up_proj.weight"] = linear(c["intermediate_size"], hidden)
            w[m + "down_proj.weight"] = linear(hidden, c["intermediate_size"])
            continue
        if m2:
            inter, n, heads, _, g = m2_sizes(c)
            channels = inter + 2 * g * n
            w[m + "in_proj.weight"] = linear(inter + channels + heads, hidden)
            w[m + "conv1d.weight"] = (0.5 * rng.standard_normal((channels, 1, k))).astype(np.float32)
            w[m + "conv1d.bias"] = (0.1 * rng.standard_normal(channels)).astype(np.float32)
            # A in [1, 8): decays exp(-dt A) from ~0.99 to ~0.05 per token
            w[m + "A_log"] = np.log(rng.uniform(1.0, 8.0, heads)).astype(np.float32)
            w[m + "dt_bias"] = inv_softplus(np.exp(rng.uniform(np.log(0.01), np.log(0.3), heads))).astype(np.float32)
            w[m + "D"] = (1.0 + 0.2 * rng.standard_normal(heads)).astype(np.float32)
            w[m + "norm.weight"] = (1.0 + 0.1 * rng.standard_normal(inter)).astype(np.float32)
        else:
            w[m + "in_proj.weight"] = linear(2 * inter, hidden)
            w[m + "conv1d.weight"] = (0.5 * rng.standard_normal((inter, 1, k))).astype(np.float32)
            w[m + "conv1d.bias"] = (0.1 * rng.standard_normal(inter)).astype(np.float32)
            w[m + "x_proj.weight"] = linear(rank + 2 * n, inter)
            w[m + "dt_proj.weight"] = linear(inter, rank)
            w[m + "dt_proj.bias"] = inv_softplus(np.exp(rng.uniform(np.log(0.01), np.log(0.3), inter))).astype(
                np.float32)
            # S4D-real A = -(1..N) per channel, perturbed so channels differ
            a = np.tile(np.arange(1, n + 1, dtype=np.float64), (inter, 1)) * rng.uniform(0.5, 1.5, (inter, 1))
            w[m + "A_log"] = np.log(a).astype(np.float32)
            w[m + "D"] = (1.0 + 0.2 * rng.standard_normal(inter)).astype(np.float32)
        w[m + "out_proj.weight"] = linear(hidden, inter)
    w["backbone.norm_f.weight"] = (1.0 + 0.1 * rng.standard_normal(hidden)).astype(np.float32)
    if not c["tie_word_embeddings"]:
        w["lm_head.weight"] = linear(vocab, hidden)
    return w


def silu(x):
    return x / (1.0 + np.exp(-x))


def softplus(x):
    return np.where(x > 20, x, np.log1p(np.exp(np.minimum(x, 20))))  # torch's threshold 20


def causal_conv(u, weight, bias, past):
    """nn.Conv1d(groups=C, padding=K-1)[..., :T] over u [T, C] after `past` [K-1, C]."""
    k = weight.shape[-1]
    full = np.concatenate([past, u], axis=0)
    out = np.zeros_like(u)
    for j in range(k):
        out += full[j:j + len(u)] * weight[:, 0, j]
    return out + bias, full[-(k - 1):]


def mamba_mixer(w, m, x, c, state):
    inter, n, rank = sizes(c)
    u, z = np.split(x @ w[m + "in_proj.weight"].T, 2, axis=-1)
    u, conv_state = causal_conv(u, w[m + "conv1d.weight"], w[m + "conv1d.bias"], state["conv"])
    u = silu(u)
    dbc = u @ w[m + "x_proj.weight"].T
    dt, b, cc = dbc[:, :rank], dbc[:, rank:rank + n], dbc[:, rank + n:]
    dt = softplus(dt @ w[m + "dt_proj.weight"].T + w[m + "dt_proj.bias"])
    a = -np.exp(w[m + "A_log"])
    s = state["ssm"].copy()
    y = np.zeros_like(u)
    for t in range(len(u)):
        s = np.exp(dt[t][:, None] * a) * s + (dt[t] * u[t])[:, None] * b[t][None, :]
        y[t] = s @ cc[t] + w[m + "D"] * u[t]
    return (y * silu(z)) @ w[m + "out_proj.weight"].T, {"conv": conv_state, "ssm": s}


def mamba2_mixer(w, m, x, c, state):
    inter, n, heads, hd, g = m2_sizes(c)
    channels = inter + 2 * g * n
    proj = x @ w[m + "in_proj.weight"].T
    z, xbc, dt = proj[:, :inter], proj[:, inter:inter + channels], proj[:, inter + channels:]
    xbc, conv_state = causal_conv(xbc, w[m + "conv1d.weight"], w[m + "conv1d.bias"], state["conv"])
    xbc = silu(xbc)
    u = xbc[:, :inter].reshape(-1, heads, hd)
    b = xbc[:, inter:inter + g * n].reshape(-1, g, n)
    cc = xbc[:, inter + g * n:].reshape(-1, g, n)
    lo, hi = c["time_step_limit"]
    dt = np.clip(softplus(dt + w[m + "dt_bias"]), lo, hi)
    a = -np.exp(w[m + "A_log"])
    group = np.arange(heads) // (heads // g)
    s = state["ssm"].copy()
    y = np.zeros_like(u)
    for t in range(len(u)):
        for h in range(heads):
            s[h] = np.exp(dt[t, h] * a[h]) * s[h] + dt[t, h] * np.outer(u[t, h], b[t, group[h]])
            y[t, h] = s[h] @ cc[t, group[h]] + w[m + "D"][h] * u[t, h]
    y = y.reshape(-1, inter) * silu(z)
    # MambaRMSNormGated normalizes the whole row; Nemotron-H's Zamba2RMSNormGated each group of I / G.
    group = inter // g if c["model_type"] == "nemotron_h" else inter
    y = y.reshape(len(y), -1, group)
    y = y / np.sqrt(np.mean(y * y, axis=-1, keepdims=True) + c["layer_norm_epsilon"])
    y = y.reshape(len(y), inter) * w[m + "norm.weight"]
    return y @ w[m + "out_proj.weight"].T, {"conv": conv_state, "ssm": s}


def attention_mixer(w, m, x, c, state):
    """NemotronHAttention: causal GQA over the cached and new keys, no positional encoding."""
    heads, kv_heads, d = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    t = len(x)
    q = (x @ w[m + "q_proj.weight"].T).reshape(t, heads, d)
    k = np.concatenate([state["k"], (x @ w[m + "k_proj.weight"].T).reshape(t, kv_heads, d)])
    v = np.concatenate([state["v"], (x @ w[m + "v_proj.weight"].T).reshape(t, kv_heads, d)])
    past = len(state["k"])
    visible = np.arange(past + t)[None, :] <= past + np.arange(t)[:, None]
    out = np.empty_like(q)
    for h in range(heads):
        kv = h // (heads // kv_heads)
        scores = np.where(visible, q[:, h] @ k[:, kv].T * d ** -0.5, -np.inf)
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        out[:, h] = (scores / scores.sum(axis=-1, keepdims=True)) @ v[:, kv]
    return out.reshape(t, heads * d) @ w[m + "o_proj.weight"].T, {"k": k, "v": v}


def mlp_mixer(w, m, x, c, state):
    up = np.maximum(x @ w[m + "up_proj.weight"].T, 0.0)
    return (up * up) @ w[m + "down_proj.weight"].T, state


def empty_state(c, kind="mamba"):
    if kind == "attention":
        shape = (0, c["num_key_value_heads"], c["head_dim"])
        return {"k": np.zeros(shape), "v": np.zeros(shape)}
    if kind == "mlp":
        return {}
    k = c["conv_kernel"]
    if c["model_type"] in ("mamba2", "nemotron_h"):
        inter, n, heads, hd, g = m2_sizes(c)
        return {"conv": np.zeros((k - 1, inter + 2 * g * n)), "ssm": np.zeros((heads, hd, n))}
    inter, n, _ = sizes(c)
    return {"conv": np.zeros((k - 1, inter)), "ssm": np.zeros((inter, n))}


def forward(w, tokens, c, states=None):
    """Logits [T, vocab] of `tokens` after `states` (None: a fresh sequence), and the states after them."""
    w = {k: a.astype(np.float64) for k, a in w.items()}
    eps = c["layer_norm_epsilon"]
    kinds = layer_kinds(c)
    mamba = mamba2_mixer if c["model_type"] in ("mamba2", "nemotron_h") else mamba_mixer
    mixers = {"mamba": mamba, "attention": attention_mixer, "mlp": mlp_mixer}
    states = states or [empty_state(c, kind) for kind in kinds]
    h = w["backbone.embeddings.weight"][tokens]
    out_states = []
    for i in range(c["num_hidden_layers"]):
        p = f"backbone.layers.{i}."
        out, st = mixers[kinds[i]](w, p + "mixer.", rms_norm(h, w[p + "norm.weight"], eps), c, states[i])
        h = h + out
        out_states.append(st)
    head = w["backbone.embeddings.weight"] if c["tie_word_embeddings"] else w["lm_head.weight"]
    return rms_norm(h, w["backbone.norm_f.weight"], eps) @ head.T, out_states


def greedy(w, prompt, c):
    """Prefill the prompt, then decode one token at a time from the carried state."""
    logits, states = forward(w, prompt, c)
    row, tokens, margins = logits[-1], [], []
    for _ in range(GREEDY_NEW):
        top = np.sort(row)[-2:]
        margins.append(float(top[1] - top[0]))
        tokens.append(int(np.argmax(row)))
        logits, states = forward(w, [tokens[-1]], c, states)
        row = logits[-1]
    return tokens, margins


def rounded(values):
    return [float(f"{x:.9g}") for x in np.ravel(values)]


def write_variant(name, c):
    out_dir = os.path.join(FIXTURES, name)
    os.makedirs(out_dir, exist_ok=True)
    weights = make_weights(np.random.default_rng(SEED), c)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(c, f, indent=2)  # float("inf") is written as Infinity, as transformers' save_pretrained does
        f.write("\n")
    write_safetensors(os.path.join(out_dir, "model.safetensors"), weights)
    reference = {"generator": "test/reference/make_tiny_ssm_references.py", "seed": SEED, "sequences": {},
                 "greedy": []}
    for seq_name, tokens in SEQUENCES.items():
        logits, states = forward(weights, tokens, c)
        entry = {"tokens": tokens, "logits": [rounded(r) for r in logits]}
        if seq_name == "a":  # [mamba layer] -> flattened conv [K-1, C] and SSM state
            entry["conv_states"] = [rounded(s["conv"]) for s in states if "conv" in s]
            entry["ssm_states"] = [rounded(s["ssm"]) for s in states if "ssm" in s]
        reference["sequences"][seq_name] = entry
    # The recurrence split at any point gives the same logits (what chunked prefill and decode rely on).
    tokens = SEQUENCES["a"]
    whole, _ = forward(weights, tokens, c)
    first, st = forward(weights, tokens[:13], c)
    rest, _ = forward(weights, tokens[13:], c, st)
    assert np.abs(np.concatenate([first, rest]) - whole).max() < 1e-9
    for prompt in GREEDY_PROMPTS:
        continuation, margins = greedy(weights, prompt, c)
        if min(margins) < MIN_MARGIN:
            print(f"{name}: prompt {prompt} left out, a greedy step's margin is {min(margins):.2g}")
            continue
        reference["greedy"].append({"prompt": prompt, "tokens": continuation,
                                    "margins": [float(f"{m:.4g}") for m in margins]})
    assert len(reference["greedy"]) >= 5, f"{name}: too few prompts with clear greedy margins"
    with open(os.path.join(out_dir, "reference.json"), "w") as f:
        json.dump(reference, f, separators=(",", ":"))
        f.write("\n")
    print(f"{name}: {len(reference['greedy'])} greedy prompts, logits up to "
          f"{max(max(abs(x) for x in r) for r in reference['sequences']['a']['logits']):.3g}")


def main():
    for name in sys.argv[1:] or list(VARIANTS):
        write_variant(name, VARIANTS[name])


if __name__ == "__main__":
    main()
