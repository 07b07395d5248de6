#!/usr/bin/env python3
"""Does transformers' Llama forward equal the plain Llama semantics kiln
implements (and test/reference/make_tiny_llama_reference.py encodes)?

Builds a random LlamaForCausalLM from a config.json, runs it in float64, and
runs an independent float64 forward written from the formulas (rotate_half
RoPE with HF's llama3 frequency scaling, GQA, causal softmax, RMSNorm, SiLU
MLP) on the same weights; prints the relative L2 error of the last-token
logits per prompt length. Runs on the GPU machine (torch + transformers).
"""
import json
import math
import sys

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def inv_freq(cfg, head_dim):
    rope = getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {}
    theta = rope.get("rope_theta") or getattr(cfg, "rope_theta", 10000.0)
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    if rope.get("rope_type") == "llama3":
        f, lo, hi = rope["factor"], rope["low_freq_factor"], rope["high_freq_factor"]
        old = rope["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > old / lo, inv / f, inv)
        smooth = (old / wavelen - lo) / (hi - lo)
        smoothed = (1 - smooth) * scaled / f + smooth * scaled
        medium = (wavelen >= old / hi) & (wavelen <= old / lo)
        inv = torch.where(medium, smoothed, scaled)
    return inv


def manual_forward(model, cfg, ids):
    sd = {k: v.double() for k, v in model.state_dict().items()}
    h_dim, heads, kv = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads
    d = getattr(cfg, "head_dim", None) or h_dim // heads
    t = len(ids)
    pos = torch.arange(t, dtype=torch.float64)
    freqs = torch.outer(pos, inv_freq(cfg, d))
    emb = torch.cat([freqs, freqs], -1)[:, None, :]
    cos, sin = emb.cos(), emb.sin()

    def rot(x):
        return torch.cat([-x[..., d // 2:], x[..., :d // 2]], -1)

    def rms(x, w):
        return x / torch.sqrt((x * x).mean(-1, keepdim=True) + cfg.rms_norm_eps) * w

    x = sd["model.embed_tokens.weight"][ids]
    mask = torch.triu(torch.full((t, t), float("-inf"), dtype=torch.float64), 1)
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        hn = rms(x, sd[p + "input_layernorm.weight"])
        q = (hn @ sd[p + "self_attn.q_proj.weight"].T).view(t, heads, d)
        k = (hn @ sd[p + "self_attn.k_proj.weight"].T).view(t, kv, d)
        v = (hn @ sd[p + "self_attn.v_proj.weight"].T).view(t, kv, d)
        q, k = q * cos + rot(q) * sin, k * cos + rot(k) * sin
        k = k.repeat_interleave(heads // kv, 1)
        v = v.repeat_interleave(heads // kv, 1)
        s = torch.einsum("shd,thd->hst", q, k) / math.sqrt(d) + mask
        o = torch.einsum("hst,thd->shd", s.softmax(-1), v).reshape(t, heads * d)
        x = x + o @ sd[p + "self_attn.o_proj.weight"].T
        hn = rms(x, sd[p + "post_attention_layernorm.weight"])
        g = hn @ sd[p + "mlp.gate_proj.weight"].T
        u = hn @ sd[p + "mlp.up_proj.weight"].T
        x = x + (torch.nn.functional.silu(g) * u) @ sd[p + "mlp.down_proj.weight"].T
    head = sd.get("lm_head.weight", sd["model.embed_tokens.weight"])
    return rms(x, sd["model.norm.weight"]) @ head.T


def main():
    for path in sys.argv[1:]:
        cfg = LlamaConfig.from_pretrained(path)
        torch.manual_seed(0)
        model = LlamaForCausalLM(cfg).double().eval()
        for length in (4, 12, 25, 40):
            ids = torch.randint(0, cfg.vocab_size, (length,)).tolist()
            with torch.no_grad():
                hf = model(torch.tensor([ids])).logits[0, -1]
                mine = manual_forward(model, cfg, ids)[-1]
            err = ((hf - mine).norm() / hf.norm()).item()
            print(json.dumps({"config": path, "length": length, "rel_l2": err,
                              "attn": model.config._attn_implementation}), flush=True)


if __name__ == "__main__":
    main()
