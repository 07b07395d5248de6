#!/usr/bin/env python3
"""tiny-gemma3 wrapped as Gemma 3's image-text model (Gemma3ForConditionalGeneration).

Writes, into --out, two checkpoint folders of the same language model as
test/fixtures/tiny-gemma3 (its seed, f32; make_tiny_family_references.py's
weights) with a small random SigLIP vision tower and projector beside it:

  tiny-gemma3-image-text/         config.json: model_type "gemma3",
                                  architectures Gemma3ForConditionalGeneration,
                                  tiny-gemma3's config as text_config (without
                                  its dtype, which the outer config gives),
                                  a vision_config; tensors as transformers
                                  >= 4.52 saves them: model.language_model.*,
                                  model.vision_tower.vision_model.*,
                                  model.multi_modal_projector.*; tied head.
  tiny-gemma3-image-text-legacy/  the same as transformers < 4.52 (and the
                                  Gemma 3 checkpoints on the Hub) save it:
                                  language_model.model.*, vision_tower.*,
                                  multi_modal_projector.*, and the head
                                  stored as language_model.lm_head.weight (a
                                  copy of the embedding, text_config
                                  tie_word_embeddings false): the same logits.

The text model's logits are tiny-gemma3's; its reference.json holds them.

numpy only; deterministic.
    python3 test/reference/make_gemma3_image_text.py --out DIR
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_tiny_family_references as family  # noqa: E402
from tiny_checkpoint import write_safetensors  # noqa: E402

VISION_SEED = 4330
VISION_CONFIG = {"model_type": "siglip_vision_model", "hidden_size": 16, "intermediate_size": 32,
                 "num_hidden_layers": 1, "num_attention_heads": 2, "image_size": 32, "patch_size": 16,
                 "num_channels": 3, "layer_norm_eps": 1e-6, "vision_use_head": False}


def vision_tensors(prefix_tower, prefix_projector, text_hidden):
    """A one-layer SigLIP encoder and Gemma3MultiModalProjector's two tensors, random."""
    rng = np.random.default_rng(VISION_SEED)
    h, f = VISION_CONFIG["hidden_size"], VISION_CONFIG["intermediate_size"]
    p = VISION_CONFIG["patch_size"]
    patches = (VISION_CONFIG["image_size"] // p) ** 2
    shapes = {"embeddings.patch_embedding.weight": (h, 3, p, p), "embeddings.patch_embedding.bias": (h,),
              "embeddings.position_embedding.weight": (patches, h), "post_layernorm.weight": (h,),
              "post_layernorm.bias": (h,)}
    layer = "encoder.layers.0."
    for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
        shapes[layer + f"self_attn.{name}.weight"] = (h, h)
        shapes[layer + f"self_attn.{name}.bias"] = (h,)
    for norm in ("layer_norm1", "layer_norm2"):
        shapes[layer + f"{norm}.weight"] = (h,)
        shapes[layer + f"{norm}.bias"] = (h,)
    shapes[layer + "mlp.fc1.weight"], shapes[layer + "mlp.fc1.bias"] = (f, h), (f,)
    shapes[layer + "mlp.fc2.weight"], shapes[layer + "mlp.fc2.bias"] = (h, f), (h,)
    out = {prefix_tower + "vision_model." + n: (0.1 * rng.standard_normal(s)).astype(np.float32)
           for n, s in shapes.items()}
    out[prefix_projector + "mm_input_projection_weight"] = (0.1 * rng.standard_normal((h, text_hidden))).astype(
        np.float32)
    out[prefix_projector + "mm_soft_emb_norm.weight"] = (0.1 * rng.standard_normal(h)).astype(np.float32)
    return out


def write(out_dir, legacy):
    text = dict(family.VARIANTS["tiny-gemma3"]["config"])
    weights = family.make_weights(np.random.default_rng(family.SEED), text, qk_norm=True, gemma3=True)
    dtype = text.pop("torch_dtype")
    del text["architectures"]
    if legacy:  # language_model.model.*, an explicit head
        tensors = {"language_model." + name: w for name, w in weights.items()}
        tensors["language_model.lm_head.weight"] = weights["model.embed_tokens.weight"].copy()
        text["tie_word_embeddings"] = False
        tensors.update(vision_tensors("vision_tower.", "multi_modal_projector.", text["hidden_size"]))
    else:  # model.language_model.*, tied
        tensors = {"model.language_model." + name[len("model."):]: w for name, w in weights.items()}
        tensors.update(vision_tensors("model.vision_tower.", "model.multi_modal_projector.", text["hidden_size"]))
    config = {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3", "text_config": text,
              "vision_config": VISION_CONFIG, "mm_tokens_per_image": 4, "boi_token_index": 125,
              "eoi_token_index": 126, "image_token_index": 127, "initializer_range": 0.02, "torch_dtype": dtype}
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    write_safetensors(os.path.join(out_dir, "model.safetensors"), tensors)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    write(os.path.join(args.out, "tiny-gemma3-image-text"), legacy=False)
    write(os.path.join(args.out, "tiny-gemma3-image-text-legacy"), legacy=True)


if __name__ == "__main__":
    main()
