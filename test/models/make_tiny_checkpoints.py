#!/usr/bin/env python3
"""Writes tiny header-only Hugging Face checkpoints for the importer's lit tests.

  tiny-llama/    2 layers, hidden 64, 4 heads / 2 kv heads, ffn 128, vocab 128
  tiny-qwen2/    the same shape with q/k/v biases (Qwen2's attention_bias)
  tiny-mistral/  mistral model_type with a sliding window
  tiny-qwen3/    Qwen3: head_dim 64 (not hidden / heads), per-head q_norm and
                 k_norm, tied; layer 1 slides over 12 keys (the shapes of
                 test/fixtures/tiny-qwen3, make_tiny_family_references.py)
  tiny-mistral-swa/  Mistral with sliding_window 7, hidden 128, 2 heads / 1
                 KV head of 64 (test/fixtures/tiny-mistral-swa's shapes)
  tiny-phi3/     Phi-3: fused qkv_proj and gate_up_proj, sliding_window 9,
                 hidden 128, 2 heads / 1 KV head of 64 (test/fixtures/tiny-phi3's)
  tiny-gemma3/   Gemma 3 (gemma3_text): pre/post feed-forward norms beside the
                 attention's, q/k norm, layers 0, 1 sliding over 10, layer 2
                 global with linear RoPE scaling 8 (test/fixtures/tiny-gemma3's
                 shapes)

Only the tensor table is written (see make_header_only_checkpoint.py).
Usage: make_tiny_checkpoints.py [OUTPUT_DIR]   Standard library only.
"""
import os
import sys

from make_header_only_checkpoint import header_bytes, llama_tensors, write_config

BASE = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 128,
    "max_position_embeddings": 256,
    "rms_norm_eps": 1e-05,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}
QWEN2 = dict(BASE, architectures=["Qwen2ForCausalLM"], model_type="qwen2",
             tie_word_embeddings=True, rope_theta=1000000.0)
MISTRAL = dict(BASE, architectures=["MistralForCausalLM"], model_type="mistral",
               sliding_window=128)
QWEN3 = dict(BASE, architectures=["Qwen3ForCausalLM"], model_type="qwen3", head_dim=64,
             rms_norm_eps=1e-06, rope_theta=1000000.0, tie_word_embeddings=True, attention_bias=False,
             use_sliding_window=True, sliding_window=12, max_window_layers=1, hidden_act="silu")
PHI3 = dict(BASE, architectures=["Phi3ForCausalLM"], model_type="phi3", hidden_size=128,
            num_attention_heads=2, num_key_value_heads=1, sliding_window=9, original_max_position_embeddings=256,
            rope_scaling=None, partial_rotary_factor=1.0, hidden_act="silu",
            # Phi3Config's default pad_token_id 32000 is outside this vocabulary (its embedding's padding_idx).
            pad_token_id=None)
MISTRAL_SWA = dict(BASE, architectures=["MistralForCausalLM"], model_type="mistral", hidden_size=128,
                   num_attention_heads=2, num_key_value_heads=1, head_dim=64, sliding_window=7,
                   hidden_act="silu")

GEMMA3 = dict(BASE, architectures=["Gemma3ForCausalLM"], model_type="gemma3_text", hidden_size=96,
              num_hidden_layers=3, head_dim=64, rms_norm_eps=1e-06, rope_theta=1000000.0,
              rope_local_base_freq=10000.0, rope_scaling={"rope_type": "linear", "factor": 8.0},
              query_pre_attn_scalar=48, sliding_window=10, sliding_window_pattern=3,
              layer_types=["sliding_attention", "sliding_attention", "full_attention"],
              hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True, pad_token_id=0, bos_token_id=2,
              eos_token_id=1)


def fuse(tensors, cfg):
    """Phi-3's table: q/k/v as one qkv_proj, gate/up as one gate_up_proj."""
    h, f = cfg["hidden_size"], cfg["intermediate_size"]
    d = cfg.get("head_dim") or h // cfg["num_attention_heads"]
    qkv = (cfg["num_attention_heads"] + 2 * cfg["num_key_value_heads"]) * d
    out = []
    for name, shape in tensors:
        if name.endswith(("self_attn.k_proj.weight", "self_attn.v_proj.weight", "mlp.up_proj.weight")):
            continue
        if name.endswith("self_attn.q_proj.weight"):
            out.append((name.replace("q_proj", "qkv_proj"), [qkv, h]))
        elif name.endswith("mlp.gate_proj.weight"):
            out.append((name.replace("gate_proj", "gate_up_proj"), [2 * f, h]))
        else:
            out.append((name, shape))
    return out


def tensors(cfg, bias, qk_norm=False, fused=False):
    out = llama_tensors(cfg)
    if cfg["model_type"] == "gemma3_text":  # the MLP's own pre and post norms
        h = cfg["hidden_size"]
        for i in range(cfg["num_hidden_layers"]):
            p = f"model.layers.{i}."
            out += [(p + "pre_feedforward_layernorm.weight", [h]), (p + "post_feedforward_layernorm.weight", [h])]
    if fused:
        out = fuse(out, cfg)
    if qk_norm:
        d = cfg["head_dim"]
        for i in range(cfg["num_hidden_layers"]):
            p = f"model.layers.{i}.self_attn."
            out += [(p + "q_norm.weight", [d]), (p + "k_norm.weight", [d])]
    if not bias:
        return out
    d = cfg["hidden_size"] // cfg["num_attention_heads"]
    with_bias = []
    for name, shape in out:
        with_bias.append((name, shape))
        for proj in ("q_proj", "k_proj", "v_proj"):
            if name.endswith(f"self_attn.{proj}.weight"):
                with_bias.append((name.replace(".weight", ".bias"), [shape[0]]))
    return with_bias


def write(directory, cfg, bias=False, qk_norm=False, fused=False):
    os.makedirs(directory, exist_ok=True)
    write_config(directory, cfg)
    with open(os.path.join(directory, "model.safetensors"), "wb") as f:
        f.write(header_bytes(tensors(cfg, bias, qk_norm, fused)))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    write(os.path.join(out, "tiny-llama"), BASE)
    write(os.path.join(out, "tiny-qwen2"), QWEN2, bias=True)
    write(os.path.join(out, "tiny-mistral"), MISTRAL)
    write(os.path.join(out, "tiny-qwen3"), QWEN3, qk_norm=True)
    write(os.path.join(out, "tiny-mistral-swa"), MISTRAL_SWA)
    write(os.path.join(out, "tiny-phi3"), PHI3, fused=True)
    write(os.path.join(out, "tiny-gemma3"), GEMMA3, qk_norm=True)


if __name__ == "__main__":
    main()
