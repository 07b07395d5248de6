#!/usr/bin/env python3
"""tiny-qwen3 as llama.cpp's converter writes a Qwen3 GGUF, with its float64 reference.

Writes, into --out (a build folder the ctest fixture names):
  tiny-qwen3/model.gguf      the weights of test/fixtures/tiny-qwen3 (the same
                             seed, f32) under general.architecture "qwen3":
                             blk.N.attn_q/k/v/output, attn_q_norm / attn_k_norm
                             [head_dim], attn_norm, ffn_norm, ffn_gate/up/down,
                             token_embd, output_norm (tied: no output.weight);
                             qwen3.* metadata with attention.key_length 64 (not
                             hidden / heads); Q/K rows not permuted (Qwen
                             rotates neox halves, as llama.cpp's qwen3 graph).
  tiny-qwen3/reference.json  make_tiny_family_references.py's format: the
                             float64 logits at every position and greedy
                             continuations, with llama.cpp's qwen3 semantics,
                             which have no sliding window (GGUF carries none
                             for qwen3), so every layer attends fully.

numpy and gguf only; deterministic.
    python3 test/reference/make_family_ggufs.py --out DIR
"""
import argparse
import json
import os
import sys

import numpy as np
from gguf import GGUFWriter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_tiny_family_references as family  # noqa: E402

HF_TO_GGUF = {"input_layernorm.weight": "attn_norm.weight", "self_attn.q_proj.weight": "attn_q.weight",
              "self_attn.k_proj.weight": "attn_k.weight", "self_attn.v_proj.weight": "attn_v.weight",
              "self_attn.o_proj.weight": "attn_output.weight", "self_attn.q_norm.weight": "attn_q_norm.weight",
              "self_attn.k_norm.weight": "attn_k_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
              "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
              "mlp.down_proj.weight": "ffn_down.weight"}


def gguf_name(hf):
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf == "model.norm.weight":
        return "output_norm.weight"
    if hf == "lm_head.weight":
        return "output.weight"
    _, _, layer, rest = hf.split(".", 3)
    return f"blk.{layer}.{HF_TO_GGUF[rest]}"


def write_qwen3(out_dir):
    v = dict(family.VARIANTS["tiny-qwen3"])
    c = v["config"]
    weights = family.make_weights(np.random.default_rng(family.SEED), c, v["qk_norm"])
    os.makedirs(out_dir, exist_ok=True)
    writer = GGUFWriter(os.path.join(out_dir, "model.gguf"), "qwen3")
    writer.add_block_count(c["num_hidden_layers"])
    writer.add_context_length(c["max_position_embeddings"])
    writer.add_embedding_length(c["hidden_size"])
    writer.add_feed_forward_length(c["intermediate_size"])
    writer.add_head_count(c["num_attention_heads"])
    writer.add_head_count_kv(c["num_key_value_heads"])
    writer.add_key_length(c["head_dim"])
    writer.add_value_length(c["head_dim"])
    writer.add_layer_norm_rms_eps(c["rms_norm_eps"])
    writer.add_rope_freq_base(c["rope_theta"])
    for name in sorted(weights):
        writer.add_tensor(gguf_name(name), weights[name])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()

    full = dict(v, windows=[0] * c["num_hidden_layers"])  # llama.cpp's qwen3: no window
    reference = {"generator": "test/reference/make_family_ggufs.py", "seed": family.SEED, "windows": full["windows"],
                 "sequences": {}, "greedy": []}
    for name, tokens in family.SEQUENCES.items():
        logits = family.forward(weights, tokens, full)
        reference["sequences"][name] = {"tokens": tokens, "logits": [family.rounded(r) for r in logits]}
    for prompt in family.GREEDY_PROMPTS:
        continuation, margins = family.greedy(weights, prompt, full)
        if min(margins) >= family.MIN_MARGIN:
            reference["greedy"].append({"prompt": prompt, "tokens": continuation,
                                        "margins": [float(f"{m:.4g}") for m in margins]})
    assert len(reference["greedy"]) >= 3, "too few prompts with clear greedy margins"
    with open(os.path.join(out_dir, "reference.json"), "w") as f:
        json.dump(reference, f, separators=(",", ":"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    write_qwen3(os.path.join(args.out, "tiny-qwen3"))


if __name__ == "__main__":
    main()
