#!/usr/bin/env python3
"""tiny-qwen3, a Qwen3-MoE, tiny-mixtral and tiny-gemma3 as llama.cpp's converter writes their GGUFs, with float64 references.

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
  tiny-qwen3-moe/model.gguf  tiny-qwen3-moe's shapes under "qwen3moe", every
                             layer a mixture (llama.cpp's qwen3moe has no dense
                             layers): blk.N.ffn_gate_inp [E, H] and the experts
                             stacked, ffn_gate_exps / ffn_up_exps [E, F, H],
                             ffn_down_exps [E, H, F]; qwen3moe.expert_count 8,
                             expert_used_count 3, expert_feed_forward_length 32.
                             Its own seed (router choices 1e-4 apart); top-k
                             weights renormalized, as llama.cpp's qwen3moe graph.
  tiny-qwen3-moe/reference.json  likewise.
  tiny-mixtral/model.gguf    tiny-mixtral's weights (its seed) as llama.cpp writes
                             Mixtral: general.architecture "llama" with
                             llama.expert_count 4 and expert_used_count 2,
                             ffn_gate_inp and the stacked ffn_*_exps, and each
                             head's Q/K rows permuted into adjacent rotary pairs
                             (the converter's permutation; kiln rotates them
                             interleaved); no sliding window (llama.cpp's llama
                             graph has none), so the reference attends fully.
  tiny-mixtral/reference.json  likewise.
  tiny-gemma3/model.gguf     tiny-gemma3's weights (its seed, f32) as llama.cpp's
                             converter writes Gemma 3 (Gemma3Model): names from
                             gguf-py's gemma3 tensor map (attn_norm,
                             post_attention_norm, ffn_norm = pre_feedforward,
                             post_ffw_norm, attn_q_norm / attn_k_norm, ...),
                             every *norm.weight with the 1 of Gemma3RMSNorm's
                             (1 + w) added in f32, Q/K not permuted, tied;
                             gemma3.* metadata: key_length 64, rope.freq_base
                             1e6 with linear scaling 8, attention.sliding_window
                             10 and sliding_window_pattern 3 (layers 0, 1 slide,
                             at llama.cpp's default local base 1e4).
  tiny-gemma3/hf/            the same model as a Hugging Face checkpoint
                             (gemma3_text): tiny-gemma3's config with
                             query_pre_attn_scalar 64, since a GGUF has no such
                             key and llama.cpp scales q by key_length^-1/2.
  tiny-gemma3/reference.json  likewise, for that model.

numpy and gguf only; deterministic.
    python3 test/reference/make_family_ggufs.py --out DIR [--only tiny-gemma3 ...] [--no-reference]
"""
import argparse
import json
import os
import sys

import gguf
import numpy as np
from gguf import GGUFWriter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_tiny_family_references as family  # noqa: E402
from tiny_checkpoint import write_safetensors  # noqa: E402

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


QWEN3_MOE_SEED = 4323


def moe_gguf_tensors(weights, c, moe):
    """HF per-expert tensors -> llama.cpp's stacked ffn_*_exps and ffn_gate_inp."""
    out = {}
    for name, w in weights.items():
        if ".mlp." not in name and ".block_sparse_moe." not in name:
            out[gguf_name(name)] = w
    for layer in moe["layers"]:
        out[f"blk.{layer}.ffn_gate_inp.weight"] = weights[family.router_name(c, layer)]
        for i, role in enumerate(("gate", "up", "down")):
            out[f"blk.{layer}.ffn_{role}_exps.weight"] = np.stack(
                [weights[family.expert_names(c, layer, e)[i]] for e in range(moe["experts"])])
    return out


def write_qwen3(out_dir, variant="tiny-qwen3", reference=True):
    v = dict(family.VARIANTS[variant])
    c = v["config"]
    moe = None
    seed = family.SEED
    if variant == "tiny-qwen3-moe":  # llama.cpp's qwen3moe: every layer MoE, renormalized
        moe = dict(v["moe"], layers=list(range(c["num_hidden_layers"])), normalize=True)
        v["moe"] = moe
        seed = QWEN3_MOE_SEED
    weights = family.make_weights(np.random.default_rng(seed), c, v["qk_norm"], moe=moe)
    if moe:
        tensors = sorted(moe_gguf_tensors(weights, c, moe).items())
    else:  # in the order of the HF names, as before the MoE variant
        tensors = [(gguf_name(n), weights[n]) for n in sorted(weights)]
    os.makedirs(out_dir, exist_ok=True)
    writer = GGUFWriter(os.path.join(out_dir, "model.gguf"), "qwen3moe" if moe else "qwen3")
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
    if moe:
        writer.add_expert_count(moe["experts"])
        writer.add_expert_used_count(moe["top_k"])
        writer.add_expert_feed_forward_length(moe["ffn"])
    for name, tensor in tensors:
        writer.add_tensor(name, tensor)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()

    # llama.cpp's qwen3: no window
    if reference:
        write_reference(out_dir, weights, dict(v, windows=[0] * c["num_hidden_layers"]), seed, variant)


def rotary_pairs_adjacent(w, heads):
    """[heads · D, H] rows of q or k: each head's rotary pairs (i, i + D/2) made
    adjacent rows (2i, 2i + 1), as llama.cpp's converter stores llama's Q and K."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_mixtral(out_dir, reference=True):
    v = dict(family.VARIANTS["tiny-mixtral"])
    c, moe, seed = v["config"], v["moe"], v["seed"]
    weights = family.make_weights(np.random.default_rng(seed), c, v["qk_norm"], moe=moe)
    tensors = moe_gguf_tensors(weights, c, moe)
    for layer in range(c["num_hidden_layers"]):
        for role, heads in (("q", c["num_attention_heads"]), ("k", c["num_key_value_heads"])):
            name = f"blk.{layer}.attn_{role}.weight"
            tensors[name] = rotary_pairs_adjacent(tensors[name], heads)
    os.makedirs(out_dir, exist_ok=True)
    writer = GGUFWriter(os.path.join(out_dir, "model.gguf"), "llama")
    writer.add_block_count(c["num_hidden_layers"])
    writer.add_context_length(c["max_position_embeddings"])
    writer.add_embedding_length(c["hidden_size"])
    writer.add_feed_forward_length(c["intermediate_size"])
    writer.add_head_count(c["num_attention_heads"])
    writer.add_head_count_kv(c["num_key_value_heads"])
    writer.add_layer_norm_rms_eps(c["rms_norm_eps"])
    writer.add_rope_freq_base(c["rope_theta"])
    writer.add_expert_count(moe["experts"])
    writer.add_expert_used_count(moe["top_k"])
    for name, tensor in sorted(tensors.items()):
        writer.add_tensor(name, tensor)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    # llama.cpp's llama graph has no sliding window
    if reference:
        write_reference(out_dir, weights, dict(v, windows=[0] * c["num_hidden_layers"]), seed, "tiny-mixtral")


def write_gemma3(out_dir, reference=True):
    v = dict(family.VARIANTS["tiny-gemma3"])
    # llama.cpp's gemma3 scales q by key_length^-1/2 (no query_pre_attn_scalar in a GGUF)
    c = dict(v["config"], query_pre_attn_scalar=family.head_dim(v["config"]))
    v["config"] = c
    weights = family.make_weights(np.random.default_rng(family.SEED), c, v["qk_norm"], gemma3=True)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.GEMMA3, c["num_hidden_layers"])
    tensors = {}
    for name, w in weights.items():
        if name.endswith("norm.weight"):  # the converter's norm_shift: Gemma3RMSNorm's 1 + w, stored
            w = w + np.float32(1.0)
        tensors[names.get_name(name, try_suffixes=(".weight",))] = w
    os.makedirs(out_dir, exist_ok=True)
    writer = GGUFWriter(os.path.join(out_dir, "model.gguf"), "gemma3")
    writer.add_context_length(c["max_position_embeddings"])
    writer.add_embedding_length(c["hidden_size"])
    writer.add_block_count(c["num_hidden_layers"])
    writer.add_feed_forward_length(c["intermediate_size"])
    writer.add_head_count(c["num_attention_heads"])
    writer.add_layer_norm_rms_eps(c["rms_norm_eps"])
    writer.add_key_length(c["head_dim"])
    writer.add_value_length(c["head_dim"])
    writer.add_rope_freq_base(c["rope_theta"])
    writer.add_sliding_window(c["sliding_window"])
    writer.add_sliding_window_pattern(c["sliding_window_pattern"])
    writer.add_head_count_kv(c["num_key_value_heads"])
    writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
    writer.add_rope_scaling_factor(c["rope_scaling"]["factor"])
    for name, tensor in sorted(tensors.items()):
        writer.add_tensor(name, tensor)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()

    hf_dir = os.path.join(out_dir, "hf")
    os.makedirs(hf_dir, exist_ok=True)
    with open(os.path.join(hf_dir, "config.json"), "w") as f:
        json.dump(c, f, indent=2)
    write_safetensors(os.path.join(hf_dir, "model.safetensors"), weights)
    if reference:
        write_reference(out_dir, weights, v, family.SEED, "tiny-gemma3")


def write_reference(out_dir, weights, v, seed, variant):
    """make_tiny_family_references.py's reference.json for `weights` under `v`."""
    reference = {"generator": "test/reference/make_family_ggufs.py", "seed": seed, "windows": v["windows"],
                 "sequences": {}, "greedy": []}
    gaps = []
    for name, tokens in family.SEQUENCES.items():
        logits = family.forward(weights, tokens, v, gaps)
        reference["sequences"][name] = {"tokens": tokens, "logits": [family.rounded(r) for r in logits]}
    assert not gaps or min(gaps) > family.MIN_ROUTER_GAP, f"{variant}: router probabilities nearly tie"
    for prompt in family.GREEDY_PROMPTS:
        prompt_gaps = []
        continuation, margins = family.greedy(weights, prompt, v, prompt_gaps)
        if min(margins) >= family.MIN_MARGIN and (not prompt_gaps or min(prompt_gaps) > family.MIN_ROUTER_GAP):
            reference["greedy"].append({"prompt": prompt, "tokens": continuation,
                                        "margins": [float(f"{m:.4g}") for m in margins]})
    assert len(reference["greedy"]) >= 3, "too few prompts with clear greedy margins"
    with open(os.path.join(out_dir, "reference.json"), "w") as f:
        json.dump(reference, f, separators=(",", ":"))


WRITERS = {"tiny-qwen3": write_qwen3, "tiny-qwen3-moe": lambda out, reference: write_qwen3(out, "tiny-qwen3-moe", reference),
           "tiny-mixtral": write_mixtral, "tiny-gemma3": write_gemma3}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--only", action="append", choices=sorted(WRITERS), help="write these models only")
    parser.add_argument("--no-reference", action="store_true", help="write the models, not their references")
    args = parser.parse_args()
    for name in args.only or WRITERS:
        WRITERS[name](os.path.join(args.out, name), reference=not args.no_reference)


if __name__ == "__main__":
    main()
