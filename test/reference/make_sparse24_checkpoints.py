#!/usr/bin/env python3
"""Tiny 2:4-sparse Llama checkpoints in the compressed-tensors layout, written
by the compressed-tensors package itself.

Writes test/models/sparse24-llama/<variant>/{config.json, model.safetensors}
for one random bf16 Llama (1 layer, hidden 64, 4 heads / 2 KV heads, ffn 128,
vocab 128, untied lm_head) whose seven linears are pruned to 2:4 by the
package's own magnitude mask (get_24_bytemasks); the lm_head is in `ignore`
and stays dense, as in RedHatAI's "2of4" checkpoints. Layer 0's q_proj gets
rows of exact zeros first, so some groups of four hold fewer than two
nonzeros and the bitmask marks a kept zero.
  bitmask24   format sparse-24-bitmask: <module>.compressed [out, in/2],
              .bitmask uint8 [out, ceil(in/8)], .shape int64 [2, 1]
  bitmask     format sparse-bitmask, sparsity_structure 2:4: .compressed
              flat [nnz], .bitmask, .shape int64 [2], .row_offsets [out];
              this compressor's mask marks the nonzeros whatever the
              structure, so q_proj keeps fewer than half its columns
  dense       format dense, sparsity_structure 2:4: the pruned weights
              as the package decompresses bitmask24 (the loader's expected
              output, bit for bit)
  layers      no model: one sparse-24-bitmask layer per other value dtype
              (f16 "half", f32 "full", [16, 64]) in model.safetensors and the
              package's decompression of each in dense.safetensors
config.json's quantization_config is the package's ModelCompressor.update_config.

Not run by CI (it needs torch); the fixtures it writes are committed.
compressed-tensors 0.13 and later dropped the sparse compressors, so pin it:
    pip install torch safetensors transformers compressed-tensors==0.12.2
    python3 test/reference/make_sparse24_checkpoints.py
"""
import json
import os

import torch
from compressed_tensors.compressors import BaseCompressor, ModelCompressor
from compressed_tensors.compressors.sparse_compressors.sparse_24_bitmask import get_24_bytemasks
from compressed_tensors.config import SparsityCompressionConfig
from safetensors.torch import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "models", "sparse24-llama")
SEED = 2424
HIDDEN, HEADS, KV_HEADS, FFN, VOCAB, LAYERS = 64, 4, 2, 128, 128, 1
HEAD_DIM = HIDDEN // HEADS
LINEARS = {"self_attn.q_proj": (HEADS * HEAD_DIM, HIDDEN),
           "self_attn.k_proj": (KV_HEADS * HEAD_DIM, HIDDEN),
           "self_attn.v_proj": (KV_HEADS * HEAD_DIM, HIDDEN),
           "self_attn.o_proj": (HIDDEN, HEADS * HEAD_DIM),
           "mlp.gate_proj": (FFN, HIDDEN), "mlp.up_proj": (FFN, HIDDEN),
           "mlp.down_proj": (HIDDEN, FFN)}


def pruned_model():
    """The dense state dict (bf16) and the module names of its 2:4 linears."""
    g = torch.Generator().manual_seed(SEED)

    def normal(*shape, scale=1.0):
        return (torch.randn(*shape, generator=g) * scale).to(torch.bfloat16)

    state = {"model.embed_tokens.weight": normal(VOCAB, HIDDEN),
             "model.norm.weight": 1.0 + normal(HIDDEN, scale=0.1),
             "lm_head.weight": normal(VOCAB, HIDDEN, scale=HIDDEN ** -0.5)}
    sparse = []
    for layer in range(LAYERS):
        p = f"model.layers.{layer}."
        state[p + "input_layernorm.weight"] = 1.0 + normal(HIDDEN, scale=0.1)
        state[p + "post_attention_layernorm.weight"] = 1.0 + normal(HIDDEN, scale=0.1)
        for lin, (out_f, in_f) in LINEARS.items():
            w = normal(out_f, in_f, scale=in_f ** -0.5)
            if layer == 0 and lin == "self_attn.q_proj":
                w[0, :] = 0            # every group all zeros
                w[1, 0::4] = 0         # every group one nonzero short of three
                w[1, 1::4] = 0
                w[1, 2::4] = 0
            state[p + lin + ".weight"] = w * get_24_bytemasks(w)
            sparse.append(p + lin)
    return state, sparse


def write(variant, sparsity_config, tensors):
    out_dir = os.path.join(OUT, variant)
    os.makedirs(out_dir, exist_ok=True)
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
              "hidden_size": HIDDEN, "intermediate_size": FFN, "num_hidden_layers": LAYERS,
              "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS,
              "vocab_size": VOCAB, "max_position_embeddings": 256, "rms_norm_eps": 1e-5,
              "rope_theta": 10000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    ModelCompressor(sparsity_config=sparsity_config).update_config(out_dir)
    save_file({k: v.contiguous() for k, v in tensors.items()},
              os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    return out_dir


def compressed(fmt, state, sparse):
    config = SparsityCompressionConfig.load_from_registry(
        fmt, targets=["Linear"], ignore=["lm_head"], sparsity_structure="2:4")
    compressor = BaseCompressor.load_from_registry(fmt, config=config)
    return config, compressor, compressor.compress(state, compression_targets=set(sparse))


def main():
    state, sparse = pruned_model()

    config, compressor, tensors = compressed("sparse-24-bitmask", state, sparse)
    out_dir = write("bitmask24", config, tensors)
    # The dense twin is what the package's decompressor makes of bitmask24.
    decompressed = dict(compressor.decompress(out_dir))
    assert decompressed.keys() == state.keys()
    for name, tensor in decompressed.items():
        assert tensor.dtype == state[name].dtype and torch.equal(tensor, state[name]), name

    config, compressor, tensors = compressed("sparse-bitmask", state, sparse)
    out_dir = write("bitmask", config, tensors)
    for name, tensor in compressor.decompress(out_dir):
        assert torch.equal(tensor, state[name]), name

    layers, dense_layers = {}, {}
    for name, dtype in (("half", torch.float16), ("full", torch.float32)):
        w = torch.randn(16, 64, generator=torch.Generator().manual_seed(SEED)).to(dtype)
        layers[name + ".weight"] = w * get_24_bytemasks(w)
    config, compressor, tensors = compressed("sparse-24-bitmask", layers, ["half", "full"])
    out_dir = os.path.join(OUT, "layers")
    os.makedirs(out_dir, exist_ok=True)
    save_file(tensors, os.path.join(out_dir, "model.safetensors"))
    for name, tensor in compressor.decompress(out_dir):
        assert tensor.dtype == layers[name].dtype and torch.equal(tensor, layers[name]), name
        dense_layers[name] = tensor
    save_file(dense_layers, os.path.join(out_dir, "dense.safetensors"))

    dense = SparsityCompressionConfig.load_from_registry(
        "dense", targets=["Linear"], ignore=["lm_head"], sparsity_structure="2:4")
    write("dense", dense, decompressed)


if __name__ == "__main__":
    main()
