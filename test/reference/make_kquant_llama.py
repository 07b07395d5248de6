#!/usr/bin/env python3
"""A tiny random-weight Llama GGUF with K-quant linear weights, and the
logits of an exact numpy forward pass over gguf-py's decoding of it.

Writes, into --out (default: a temporary build folder the ctest fixture
names):
  model.gguf      2 layers, hidden 256, 4 heads / 2 KV heads (head dim 64),
                  ffn 512, vocab 160, untied output. Every matrix is a K-quant:
                    token_embd Q4_K, output Q6_K;
                    layer 0: attn_q/k/v Q4_K (one merged QKV GEMM in kiln),
                             attn_output Q5_K, ffn_gate/up Q4_K, ffn_down Q6_K;
                    layer 1: attn_q/k Q5_K, attn_v Q6_K (mixed, as in the
                             published Q4_K_M files), attn_output Q4_K,
                             ffn_gate/up Q5_K, ffn_down Q4_K;
                  norms F32.
  reference.json  per sequence: its tokens and the float64 logits at every
                  position, from the weights as gguf.quants.dequantize
                  decodes the file's blocks (the outside reference), with
                  llama.cpp's Llama semantics for a GGUF: RoPE on adjacent
                  pairs (the converter permuted Q/K rows), GQA, causal
                  softmax attention, RMSNorm, SiLU-gated MLP.
  reject-q3_k.gguf  the same model with blk.1.ffn_down.weight as Q3_K (a
                  type kiln does not run), for the importer's error.

gguf-py has no K-quant quantizers, so this script carries straightforward
ones (one pass, no search for the best scales like ggml's). Each is checked
against gguf-py's dequantizer: the decoded values must lie within the
format's step of the input.

numpy and gguf only; deterministic (fixed seed).
    python3 test/reference/make_kquant_llama.py --out DIR
"""
import argparse
import json
import os

import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import GGUFWriter, quants

QK_K = 256
HIDDEN, HEADS, KV_HEADS, FFN, VOCAB, LAYERS = 256, 4, 2, 512, 160, 2
HEAD_DIM = HIDDEN // HEADS
EPS = 1e-5
THETA = 10000.0
CONTEXT = 256
SEED = 4321
# A is the long sequence (prefill, then decode in the test); B is short.
SEQUENCES = {"a": [(13 * i + 7) % VOCAB for i in range(21)],
             "b": [3, 150, 42, 77, 9, 101, 64, 18]}

LAYER_TYPES = [
    {"attn_q": Q.Q4_K, "attn_k": Q.Q4_K, "attn_v": Q.Q4_K, "attn_output": Q.Q5_K,
     "ffn_gate": Q.Q4_K, "ffn_up": Q.Q4_K, "ffn_down": Q.Q6_K},
    {"attn_q": Q.Q5_K, "attn_k": Q.Q5_K, "attn_v": Q.Q6_K, "attn_output": Q.Q4_K,
     "ffn_gate": Q.Q5_K, "ffn_up": Q.Q5_K, "ffn_down": Q.Q4_K},
]


# --- K-quant quantizers (rows of whole 256-element super-blocks) -----------

def f16(x):
    return np.asarray(x, dtype=np.float32).astype(np.float16)


def pack_scales_mins(sc, m):
    """[n, 8] 6-bit scales and mins -> [n, 12] bytes (ggml's get_scale_min_k4 layout)."""
    sc = sc.astype(np.uint8)
    m = m.astype(np.uint8)
    out = np.zeros((sc.shape[0], 12), dtype=np.uint8)
    out[:, 0:4] = (sc[:, 0:4] & 63) | ((sc[:, 4:8] >> 4) << 6)
    out[:, 4:8] = (m[:, 0:4] & 63) | ((m[:, 4:8] >> 4) << 6)
    out[:, 8:12] = (sc[:, 4:8] & 15) | ((m[:, 4:8] & 15) << 4)
    return out


def quantize_with_mins(x, bits):
    """Q4_K (bits 4) / Q5_K (bits 5): value = d*sc*q - dmin*m per 32."""
    top = (1 << bits) - 1
    blocks = x.reshape(-1, 8, 32).astype(np.float32)
    lo = np.minimum(blocks.min(axis=-1), 0.0)          # [n, 8], <= 0
    hi = blocks.max(axis=-1)
    sub_scale = (hi - lo) / top
    sub_min = -lo
    d = f16(sub_scale.max(axis=-1) / 63.0)
    dmin = f16(sub_min.max(axis=-1) / 63.0)
    d32, dmin32 = d.astype(np.float32), dmin.astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.where(d32[:, None] > 0, np.rint(sub_scale / d32[:, None]), 0)
        m = np.where(dmin32[:, None] > 0, np.rint(sub_min / dmin32[:, None]), 0)
    sc = np.clip(sc, 0, 63)
    m = np.clip(m, 0, 63)
    scale = (d32[:, None] * sc.astype(np.float32))[..., None]
    offset = (dmin32[:, None] * m.astype(np.float32))[..., None]
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(scale > 0, np.rint((blocks + offset) / scale), 0)
    q = np.clip(q, 0, top).astype(np.uint8)             # [n, 8, 32]
    n = blocks.shape[0]
    # Sub-blocks 2i and 2i+1 share bytes qs[32i:32i+32] as low/high nibbles.
    low = q & 15
    qs = (low[:, 0::2, :] | (low[:, 1::2, :] << 4)).reshape(n, 128)
    parts = [d.view(np.uint8).reshape(n, 2), dmin.view(np.uint8).reshape(n, 2),
             pack_scales_mins(sc, m)]
    if bits == 5:
        high = (q >> 4) & 1                              # bit j of qh[l]
        qh = np.zeros((n, 32), dtype=np.uint8)
        for j in range(8):
            qh |= (high[:, j, :] << j).astype(np.uint8)
        parts.append(qh)
    parts.append(qs)
    return np.concatenate(parts, axis=1)


def quantize_q6_k(x):
    """Q6_K: value = d * sc[e/16] * (q - 32), q in [0, 64)."""
    blocks = x.reshape(-1, 16, 16).astype(np.float32)
    n = blocks.shape[0]
    sub_scale = np.abs(blocks).max(axis=-1) / 31.0      # [n, 16]
    d = f16(sub_scale.max(axis=-1) / 127.0)
    d32 = d.astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.where(d32[:, None] > 0, np.rint(sub_scale / d32[:, None]), 0)
    sc = np.clip(sc, -128, 127).astype(np.int8)
    scale = (d32[:, None] * sc.astype(np.float32))[..., None]
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(scale != 0, np.rint(blocks / scale), 0)
    q = (np.clip(q, -32, 31) + 32).astype(np.uint8).reshape(n, 256)
    ql = np.zeros((n, 128), dtype=np.uint8)
    qh = np.zeros((n, 64), dtype=np.uint8)
    for h in range(2):
        for k in range(4):
            vals = q[:, 128 * h + 32 * k: 128 * h + 32 * k + 32]
            at = 64 * h + 32 * (k & 1)
            ql[:, at:at + 32] |= (vals & 15) << (4 * (k >> 1))
            qh[:, 32 * h: 32 * h + 32] |= (vals >> 4) << (2 * k)
    return np.concatenate([ql, qh, sc.view(np.uint8), d.view(np.uint8).reshape(n, 2)], axis=1)


def quantize(x, qtype):
    rows, cols = x.shape
    assert cols % QK_K == 0, (x.shape, qtype)
    flat = x.reshape(-1, QK_K)
    if qtype == Q.Q4_K:
        blocks = quantize_with_mins(flat, 4)
    elif qtype == Q.Q5_K:
        blocks = quantize_with_mins(flat, 5)
    elif qtype == Q.Q6_K:
        blocks = quantize_q6_k(flat)
    else:
        raise ValueError(qtype)
    raw = blocks.reshape(rows, -1)
    # The round trip through gguf-py's decoder: every value within the
    # format's step (plus the f16 rounding of the super-block scales).
    back = quants.dequantize(raw, qtype)
    per = 16 if qtype == Q.Q6_K else 32
    levels = {Q.Q4_K: 15, Q.Q5_K: 31, Q.Q6_K: 62}[qtype]
    groups = x.reshape(-1, per)
    span = groups.max(axis=1) - np.minimum(groups.min(axis=1), 0)
    if qtype == Q.Q6_K:
        span = 2 * np.abs(groups).max(axis=1)
    step = np.repeat(span / levels, per).reshape(x.shape)
    err = np.abs(back - x)
    limit = 0.75 * step + 0.02 * np.abs(x).max()
    assert (err <= limit).all(), f"{qtype.name}: round trip error {err.max()} over {limit.min()}"
    return raw, back.astype(np.float64)


# --- the model ----------------------------------------------------------

def make_model(rng):
    def linear(out_f, in_f):
        return (rng.standard_normal((out_f, in_f)) / np.sqrt(in_f)).astype(np.float32)

    def norm(n):
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    tensors = {"token_embd.weight": (rng.standard_normal((VOCAB, HIDDEN)).astype(np.float32), Q.Q4_K)}
    shapes = {"attn_q": (HEADS * HEAD_DIM, HIDDEN), "attn_k": (KV_HEADS * HEAD_DIM, HIDDEN),
              "attn_v": (KV_HEADS * HEAD_DIM, HIDDEN), "attn_output": (HIDDEN, HEADS * HEAD_DIM),
              "ffn_gate": (FFN, HIDDEN), "ffn_up": (FFN, HIDDEN), "ffn_down": (HIDDEN, FFN)}
    for i in range(LAYERS):
        tensors[f"blk.{i}.attn_norm.weight"] = (norm(HIDDEN), Q.F32)
        tensors[f"blk.{i}.ffn_norm.weight"] = (norm(HIDDEN), Q.F32)
        for role, shape in shapes.items():
            tensors[f"blk.{i}.{role}.weight"] = (linear(*shape), LAYER_TYPES[i][role])
    tensors["output_norm.weight"] = (norm(HIDDEN), Q.F32)
    tensors["output.weight"] = (linear(VOCAB, HIDDEN), Q.Q6_K)
    return tensors


def write_gguf(path, tensors, override=None):
    """tensors: name -> (f32 values, type); returns name -> decoded f64 values."""
    writer = GGUFWriter(path, "llama")
    writer.add_block_count(LAYERS)
    writer.add_context_length(CONTEXT)
    writer.add_embedding_length(HIDDEN)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_layer_norm_rms_eps(EPS)
    writer.add_rope_freq_base(THETA)
    writer.add_vocab_size(VOCAB)
    decoded = {}
    for name, (values, qtype) in tensors.items():
        if override and name in override:
            writer.add_tensor(name, override[name][0], raw_dtype=override[name][1])
            continue
        if qtype == Q.F32:
            writer.add_tensor(name, values)
            decoded[name] = values.astype(np.float64)
        else:
            raw, back = quantize(values, qtype)
            writer.add_tensor(name, raw, raw_dtype=qtype)
            decoded[name] = back
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return decoded


def rms_norm(x, w):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + EPS) * w


def rope_adjacent(x, positions):
    """x: [T, heads, D]; rotates pairs (2i, 2i+1) by pos * theta^(-2i/D)."""
    half = HEAD_DIM // 2
    inv = THETA ** (-np.arange(half, dtype=np.float64) * 2.0 / HEAD_DIM)
    ang = positions[:, None].astype(np.float64) * inv[None, :]     # [T, half]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    x0, x1 = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = x0 * cos - x1 * sin
    out[..., 1::2] = x0 * sin + x1 * cos
    return out


def forward(w, tokens):
    """float64 logits [T, VOCAB] of one sequence, every position."""
    T = len(tokens)
    pos = np.arange(T)
    x = w["token_embd.weight"][tokens]
    mask = np.triu(np.full((T, T), -np.inf), 1)
    group = HEADS // KV_HEADS
    for i in range(LAYERS):
        p = f"blk.{i}."
        h = rms_norm(x, w[p + "attn_norm.weight"])
        q = (h @ w[p + "attn_q.weight"].T).reshape(T, HEADS, HEAD_DIM)
        k = (h @ w[p + "attn_k.weight"].T).reshape(T, KV_HEADS, HEAD_DIM)
        v = (h @ w[p + "attn_v.weight"].T).reshape(T, KV_HEADS, HEAD_DIM)
        q, k = rope_adjacent(q, pos), rope_adjacent(k, pos)
        out = np.empty((T, HEADS, HEAD_DIM))
        for head in range(HEADS):
            kv = head // group
            s = q[:, head, :] @ k[:, kv, :].T / np.sqrt(HEAD_DIM) + mask
            s = np.exp(s - s.max(axis=-1, keepdims=True))
            s /= s.sum(axis=-1, keepdims=True)
            out[:, head, :] = s @ v[:, kv, :]
        x = x + out.reshape(T, HIDDEN) @ w[p + "attn_output.weight"].T
        h = rms_norm(x, w[p + "ffn_norm.weight"])
        gate = h @ w[p + "ffn_gate.weight"].T
        up = h @ w[p + "ffn_up.weight"].T
        x = x + (gate / (1.0 + np.exp(-gate)) * up) @ w[p + "ffn_down.weight"].T
    x = rms_norm(x, w["output_norm.weight"])
    return x @ w["output.weight"].T


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rng = np.random.default_rng(SEED)
    tensors = make_model(rng)
    decoded = write_gguf(os.path.join(args.out, "model.gguf"), tensors)
    reference = {
        "generator": "test/reference/make_kquant_llama.py",
        "types": {name: qtype.name for name, (_, qtype) in tensors.items()},
        "sequences": {},
    }
    for name, tokens in SEQUENCES.items():
        logits = forward(decoded, np.array(tokens))
        reference["sequences"][name] = {"tokens": tokens,
                                        "logits": [[float(v) for v in row] for row in logits]}
    with open(os.path.join(args.out, "reference.json"), "w") as f:
        json.dump(reference, f)

    # A type kiln does not run: ffn_down of layer 1 as Q3_K (110-byte blocks;
    # the bytes are never decoded, the importer stops at the type).
    q3 = np.zeros((HIDDEN, FFN // QK_K * 110), dtype=np.uint8)
    write_gguf(os.path.join(args.out, "reject-q3_k.gguf"), tensors,
               override={"blk.1.ffn_down.weight": (q3, Q.Q3_K)})


if __name__ == "__main__":
    main()
