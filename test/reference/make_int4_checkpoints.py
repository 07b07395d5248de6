#!/usr/bin/env python3
"""Tiny GPTQ and AWQ Llama checkpoints packed by the tools' own code, with the
dequantized weights those tools compute and float64 numpy reference logits.

Writes test/fixtures/int4-llama/<variant>/{config.json, model.safetensors,
dequant.safetensors, reference.json} for the tiny-llama shape of
make_tiny_llama_reference.py (2 layers, hidden 64, 4 heads / 2 KV heads,
ffn 128, vocab 128), every q/k/v/o/gate/up/down projection packed to 4 bits
with group_size 32 from known random integers (codes, zero points, f16
scales); embedding, norms and lm_head stay f16:
  gptq            GPTQModel's TorchLinear.pack_original, sym (zero 8),
                  desc_act false, then GPTQModel's v2 -> v1 conversion
                  (qzeros minus 0x11111111, checkpoint_format "gptq")
  gptq-actorder   the same with desc_act true: g_idx is a random column
                  permutation's groups, zero points asymmetric and include 0
                  (whose v1 "minus one" borrows from the next nibble)
  awq             AutoAWQ's WQLinear_GEMM.from_linear (version gemm, zero
                  points in [0, 15])
dequant.safetensors holds layer 0's weights as the package dequantizes them
(its own unpack code, scales widened to f32 so nothing rounds), [out, in].
reference.json holds logits of make_tiny_llama_reference.forward over those
dequantized weights, every position of two sequences.

Not run by CI (it needs torch); the fixtures it writes are committed. Needs
torch, numpy, safetensors and the two packages, whose top-level __init__
(model loaders) is skipped: only their packing modules are imported.
    pip install torch numpy safetensors transformers accelerate \
        gptqmodel==7.7.0 autoawq==0.2.9
    python3 test/reference/make_int4_checkpoints.py
"""
import importlib.metadata
import json
import os
import sys

import numpy as np
import torch
from safetensors.numpy import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from make_tiny_llama_reference import VARIANTS, forward  # noqa: E402

OUT = os.path.join(HERE, "..", "fixtures", "int4-llama")
GROUP = 32
SEED = 4321
SHAPE = VARIANTS["tiny-llama"]
LINEARS = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
           "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]


def linear_shapes(v):
    hidden, head_dim = v["hidden"], v["hidden"] // v["heads"]
    return {"self_attn.q_proj": (v["heads"] * head_dim, hidden),
            "self_attn.k_proj": (v["kv_heads"] * head_dim, hidden),
            "self_attn.v_proj": (v["kv_heads"] * head_dim, hidden),
            "self_attn.o_proj": (hidden, v["heads"] * head_dim),
            "mlp.gate_proj": (v["ffn"], hidden), "mlp.up_proj": (v["ffn"], hidden),
            "mlp.down_proj": (hidden, v["ffn"])}


def known_integers(rng, out_f, in_f, sym, act_order):
    """codes [out, in], zeros and f16-exact scales [groups, out], g_idx [in]."""
    groups = in_f // GROUP
    codes = rng.integers(0, 16, size=(out_f, in_f))
    zeros = np.full((groups, out_f), 8) if sym else rng.integers(0, 16, size=(groups, out_f))
    if not sym:
        zeros[0, :8] = 0  # a whole word of zero points 0: the v1 borrow case
    scales = (rng.uniform(0.5, 1.5, size=(groups, out_f)) / (5 * np.sqrt(in_f)))
    scales = scales.astype(np.float16).astype(np.float32)
    g_idx = np.arange(in_f) // GROUP
    if act_order:
        g_idx = g_idx[rng.permutation(in_f)]
    return codes, zeros, scales, g_idx


def float_weight(codes, zeros, scales, g_idx):
    # Exact in f32: an f16 scale times an integer in [-15, 15].
    return scales[g_idx].T * (codes - zeros[g_idx].T)


def gptq_module(codes, zeros, scales, g_idx, sym, act_order):
    from gptqmodel.nn_modules.qlinear.torch import TorchLinear
    from gptqmodel.quantization.config import QuantizeConfig
    from gptqmodel.utils.model import convert_gptq_v2_to_v1_format_module

    out_f, in_f = codes.shape
    linear = torch.nn.Linear(in_f, out_f, bias=False)
    linear.weight.data = torch.from_numpy(float_weight(codes, zeros, scales, g_idx).astype(np.float32))
    module = TorchLinear(bits=4, group_size=GROUP, sym=sym, desc_act=act_order,
                              in_features=in_f, out_features=out_f, bias=False,
                              pack_dtype=torch.int32, register_buffers=True)
    module.pack_original(linear, torch.from_numpy(scales.T.copy()),
                         torch.from_numpy(zeros.T.astype(np.int32).copy()),
                         torch.from_numpy(g_idx.astype(np.int32)))
    module.post_init()
    # The package's dequantization, while qzeros are still v2 (as stored);
    # f32 scales so the product is not rounded to f16.
    f16_scales = module.scales
    module.scales = f16_scales.float()
    expected = module.dequantize_weight().T.contiguous().numpy()
    module.scales = f16_scales
    convert_gptq_v2_to_v1_format_module(module, QuantizeConfig(bits=4, group_size=GROUP,
                                                               sym=sym, desc_act=act_order))
    packed = {"qweight": module.qweight.numpy(), "qzeros": module.qzeros.numpy(),
              "scales": module.scales.numpy(), "g_idx": module.g_idx.numpy().astype(np.int32)}
    return packed, expected


def awq_module(codes, zeros, scales, g_idx):
    from awq.modules.linear.gemm import WQLinear_GEMM
    from awq.utils.packing_utils import dequantize_gemm

    out_f, in_f = codes.shape
    linear = torch.nn.Linear(in_f, out_f, bias=False)
    linear.weight.data = torch.from_numpy(float_weight(codes, zeros, scales, g_idx).astype(np.float32))
    module = WQLinear_GEMM.from_linear(linear, 4, GROUP, scales=torch.from_numpy(scales),
                                       zeros=torch.from_numpy(zeros.astype(np.int32)))
    expected = dequantize_gemm(module.qweight, module.qzeros, module.scales.float(), 4,
                               GROUP).T.contiguous().numpy()
    packed = {"qweight": module.qweight.numpy(), "qzeros": module.qzeros.numpy(),
              "scales": module.scales.numpy()}
    return packed, expected


def skip_package_init(name):
    """Imports `name`'s submodules without running its __init__ (model loaders)."""
    import importlib.util
    import types
    spec = importlib.util.find_spec(name)
    package = types.ModuleType(name)
    package.__path__ = list(spec.submodule_search_locations)
    sys.modules[name] = package


def write_variant(name, method, sym, act_order):
    rng = np.random.default_rng(SEED + len(name))
    v = SHAPE
    tensors, weights, dequant = {}, {}, {}

    def plain(key, array):
        half = array.astype(np.float16)
        tensors[key] = half
        weights[key] = half.astype(np.float32)

    plain("model.embed_tokens.weight", rng.standard_normal((v["vocab"], v["hidden"])))
    plain("lm_head.weight", rng.standard_normal((v["vocab"], v["hidden"])) / np.sqrt(v["hidden"]))
    plain("model.norm.weight", 1.0 + 0.1 * rng.standard_normal(v["hidden"]))
    for layer in range(v["layers"]):
        p = f"model.layers.{layer}."
        plain(p + "input_layernorm.weight", 1.0 + 0.1 * rng.standard_normal(v["hidden"]))
        plain(p + "post_attention_layernorm.weight", 1.0 + 0.1 * rng.standard_normal(v["hidden"]))
        for lin, (out_f, in_f) in linear_shapes(v).items():
            ints = known_integers(rng, out_f, in_f, sym, act_order)
            if method == "gptq":
                packed, expected = gptq_module(*ints, sym, act_order)
            else:
                packed, expected = awq_module(*ints)
            assert np.array_equal(expected, float_weight(*ints)), (name, p + lin)
            for part, array in packed.items():
                tensors[f"{p}{lin}.{part}"] = np.ascontiguousarray(array)
            weights[f"{p}{lin}.weight"] = expected
            if layer == 0:
                dequant[f"{p}{lin}.weight"] = expected.astype(np.float32)

    out_dir = os.path.join(OUT, name)
    os.makedirs(out_dir, exist_ok=True)
    if method == "gptq":
        quant = {"quant_method": "gptq", "bits": 4, "group_size": GROUP, "desc_act": act_order,
                 "sym": sym, "checkpoint_format": "gptq", "pack_dtype": "int32"}
        tool = "gptqmodel"
    else:
        quant = {"quant_method": "awq", "bits": 4, "group_size": GROUP, "zero_point": True,
                 "version": "gemm", "modules_to_not_convert": None}
        tool = "autoawq"
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
              "hidden_size": v["hidden"], "intermediate_size": v["ffn"],
              "num_hidden_layers": v["layers"], "num_attention_heads": v["heads"],
              "num_key_value_heads": v["kv_heads"], "vocab_size": v["vocab"],
              "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": v["theta"],
              "tie_word_embeddings": False, "torch_dtype": "float16",
              "quantization_config": quant}
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    save_file(tensors, os.path.join(out_dir, "model.safetensors"))
    save_file(dequant, os.path.join(out_dir, "dequant.safetensors"))
    reference = {"generator": "test/reference/make_int4_checkpoints.py", "seed": SEED,
                 "packer": f"{tool} {importlib.metadata.version(tool)}",
                 "torch": torch.__version__, "sequences": {}}
    for seq_name, tokens in v["sequences"].items():
        logits = forward(weights, tokens, v)
        reference["sequences"][seq_name] = {
            "tokens": tokens,
            "logits": [[float(f"{x:.7g}") for x in row] for row in logits]}
    with open(os.path.join(out_dir, "reference.json"), "w") as f:
        json.dump(reference, f, separators=(",", ":"))
        f.write("\n")


def main():
    skip_package_init("awq")
    write_variant("gptq", "gptq", sym=True, act_order=False)
    write_variant("gptq-actorder", "gptq", sym=False, act_order=True)
    write_variant("awq", "awq", sym=False, act_order=False)


if __name__ == "__main__":
    main()
