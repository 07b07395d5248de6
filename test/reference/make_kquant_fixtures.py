#!/usr/bin/env python3
"""Writes test/fixtures/quant/kquant/: random but valid Q4_K / Q5_K / Q6_K
super-blocks and their values as gguf-py decodes them (gguf.quants.dequantize,
the numpy reference llama.cpp's tooling uses), so kiln's dequantizers and its
K-quant GEMMs can be checked against an outside decoder.

Per type T (q4_k, q5_k, q6_k), ROWS rows of K elements:
  T.blocks.bin       [ROWS, K / 256] raw ggml super-blocks
  T.dequant.f32.bin  [ROWS, K] little-endian f32, gguf.quants.dequantize(blocks)
and kquant_fixtures.json listing them with the shape and the gguf version.

Every byte is random except the f16 super-block scales, which are drawn as
finite halves (random exponent bits could make inf/NaN) and include the edge
cases: zero, negative, subnormal and large.

Run: python3 test/reference/make_kquant_fixtures.py  (needs numpy and gguf)
"""
import importlib.metadata
import json
import pathlib

import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import quants

OUT = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "quant" / "kquant"
QK_K = 256
ROWS, K = 4, 512  # 8 super-blocks per type

# (name, ggml type, bytes per super-block, byte offsets of its f16 scales)
TYPES = (
    ("q4_k", Q.Q4_K, 144, (0, 2)),    # d, dmin first
    ("q5_k", Q.Q5_K, 176, (0, 2)),
    ("q6_k", Q.Q6_K, 210, (208,)),    # d last
)


def super_scales(rng: np.random.Generator, count: int) -> np.ndarray:
    """f16 scales: typical magnitudes plus zero, negative, subnormal, large."""
    values = rng.uniform(-0.05, 0.05, count).astype(np.float16)
    edge = np.array([0.0, -0.03, 3e-6, 2.5, -1e-5, 0.5], dtype=np.float16)
    values[: min(count, edge.size)] = edge[:count]
    rng.shuffle(values)
    return values


def random_blocks(rng: np.random.Generator, block_bytes: int, scale_offsets) -> np.ndarray:
    count = ROWS * K // QK_K
    blocks = rng.integers(0, 256, size=(count, block_bytes), dtype=np.uint8)
    for offset in scale_offsets:
        blocks[:, offset:offset + 2] = super_scales(rng, count).view(np.uint8).reshape(count, 2)
    return blocks


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(20250312)
    entries = []
    for name, qtype, block_bytes, scale_offsets in TYPES:
        blocks = random_blocks(rng, block_bytes, scale_offsets)
        raw = blocks.reshape(ROWS, K // QK_K * block_bytes)
        values = quants.dequantize(raw, qtype).astype("<f4")
        assert values.shape == (ROWS, K) and np.isfinite(values).all(), name
        raw.tofile(OUT / f"{name}.blocks.bin")
        values.tofile(OUT / f"{name}.dequant.f32.bin")
        entries.append({
            "type": name,
            "rows": ROWS,
            "k": K,
            "blocks": f"{name}.blocks.bin",
            "block_bytes": int(raw.nbytes),
            "dequantized": f"{name}.dequant.f32.bin",
        })
    meta = {
        "generator": "test/reference/make_kquant_fixtures.py",
        "gguf_version": importlib.metadata.version("gguf"),
        "numpy_version": np.__version__,
        "fixtures": entries,
    }
    (OUT / "kquant_fixtures.json").write_text(json.dumps(meta, indent=2) + "\n")


if __name__ == "__main__":
    main()
