#!/usr/bin/env python3
"""Writes test/fixtures/quant/: a few Q4_0 / Q4_1 / Q8_0 blocks produced and
decoded by gguf-py (the reference implementation llama.cpp's converter uses),
so kiln's quantizers and dequantizers can be checked bit for bit.

Per type T (q4_0, q4_1, q8_0):
  T.input.f32.bin    [n] little-endian f32, the values that were quantized
  T.blocks.bin       gguf.quants.quantize(input, T), raw ggml blocks
  T.dequant.f32.bin  [n] f32, gguf.quants.dequantize(blocks, T)
and quant_fixtures.json listing them with n and the gguf version.

Run: python3 test/reference/make_quant_fixtures.py  (needs numpy and gguf)
"""
import importlib.metadata
import json
import pathlib

import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import quants

OUT = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "quant"
BLOCK = 32


def sample_values(rng: np.random.Generator) -> np.ndarray:
    """Eight blocks covering the interesting cases."""
    blocks = [
        rng.standard_normal(BLOCK),                      # typical weights
        rng.standard_normal(BLOCK) * 1e-3,               # small scale
        rng.uniform(-30.0, 30.0, BLOCK),                  # large scale
        np.zeros(BLOCK),                                  # d == 0
        np.concatenate([[-5.0], rng.uniform(-1, 1, BLOCK - 1)]),  # negative extreme
        np.concatenate([rng.uniform(-1, 1, BLOCK - 1), [7.0]]),   # positive extreme last
        rng.uniform(0.5, 2.0, BLOCK),                     # all positive (Q4_1 m > 0)
        np.linspace(-1.0, 1.0, BLOCK),                    # evenly spaced, rounding ties
    ]
    return np.concatenate(blocks).astype(np.float32)


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(20240607)
    values = sample_values(rng)
    entries = []
    for name, qtype in (("q4_0", Q.Q4_0), ("q4_1", Q.Q4_1), ("q8_0", Q.Q8_0)):
        blocks = quants.quantize(values.reshape(1, -1), qtype)
        dequant = quants.dequantize(blocks, qtype).astype("<f4").reshape(-1)
        values.astype("<f4").tofile(OUT / f"{name}.input.f32.bin")
        blocks.tofile(OUT / f"{name}.blocks.bin")
        dequant.tofile(OUT / f"{name}.dequant.f32.bin")
        entries.append({
            "type": name,
            "n": int(values.size),
            "input": f"{name}.input.f32.bin",
            "blocks": f"{name}.blocks.bin",
            "block_bytes": int(blocks.nbytes),
            "dequantized": f"{name}.dequant.f32.bin",
        })
    meta = {
        "generator": "test/reference/make_quant_fixtures.py",
        "gguf_version": importlib.metadata.version("gguf"),
        "numpy_version": np.__version__,
        "fixtures": entries,
    }
    (OUT / "quant_fixtures.json").write_text(json.dumps(meta, indent=2) + "\n")


if __name__ == "__main__":
    main()
