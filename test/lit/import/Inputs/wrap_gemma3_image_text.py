"""Wraps a header-only gemma3_text checkpoint as Gemma3ForConditionalGeneration:
    wrap_gemma3_image_text.py SOURCE_DIR OUT_DIR DECODER_PREFIX LM_HEAD_NAME
The text config becomes text_config; the "model." tensors move under
DECODER_PREFIX; a vision tower and projector tensor are added; where
LM_HEAD_NAME is not "lm_head.weight" (transformers < 4.52) the head is
stored under it, untied."""
import json
import math
import os
import struct
import sys

source, out, decoder, head = sys.argv[1:5]
text = json.load(open(os.path.join(source, "config.json")))
dtype = text.pop("torch_dtype")
text.pop("architectures")
blob = open(os.path.join(source, "model.safetensors"), "rb").read()
n = struct.unpack("<Q", blob[:8])[0]
header = json.loads(blob[8:8 + n])
renamed = {}
for name, entry in header.items():
    renamed[decoder + name[len("model."):] if name.startswith("model.") else name] = entry
vision = "model." if decoder.startswith("model.") else ""
end = max(e["data_offsets"][1] for name, e in header.items() if name != "__metadata__")


def append(name, shape):  # a bf16 tensor after the others (the file holds headers only)
    global end
    size = 2 * math.prod(shape)
    renamed[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [end, end + size]}
    end += size


if head != "lm_head.weight":
    append(head, header["model.embed_tokens.weight"]["shape"])
    text["tie_word_embeddings"] = False
for name, shape in (("vision_tower.vision_model.post_layernorm.weight", [16]),
                    ("vision_tower.vision_model.encoder.layers.0.self_attn.q_proj.weight", [16, 16]),
                    ("multi_modal_projector.mm_input_projection_weight", [16, 96])):
    append(vision + name, shape)
config = {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3", "text_config": text,
          "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 16}, "torch_dtype": dtype}
json.dump(config, open(os.path.join(out, "config.json"), "w"))
encoded = json.dumps(renamed).encode()
encoded += b" " * (-len(encoded) % 8)
open(os.path.join(out, "model.safetensors"), "wb").write(struct.pack("<Q", len(encoded)) + encoded + blob[8 + n:])
