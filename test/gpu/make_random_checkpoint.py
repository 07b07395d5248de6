#!/usr/bin/env python3
"""Random bf16 weights for a header-only checkpoint (benchmarks only).

Fills the tensor table of HEADER (a header-only safetensors file from
test/models/make_header_only_checkpoint.py: the real file's header, no data)
with random bf16 data and writes OUT/{model.safetensors, config.json,
tokenizer.json}: the same header, so every name, shape and offset is the
one the artifact was compiled from. Norm weights (names ending in
"norm.weight") are 1; every other element has a random sign and mantissa
and a magnitude between S / 2 and S (S = --scale, default 0.02, the
families' initializer_range), like kiln_moe_bench's weights. The data is
cut from one pool of random values at random offsets, so tensors repeat
stretches of one another: decode speed depends on shapes, not values, and
this writes 23 GB at the disk's speed where a framework's initializer takes
minutes. The tokenizer maps bytes to tokens
(write_byte_tokenizer.py), enough for `kiln bench`'s prompts.

  make_random_checkpoint.py --header test/models/mixtral-8x7b-8l/model.safetensors --out /tmp/kiln-hf/mixtral-8x7b-8l

NumPy and the standard library only.
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import time

import numpy as np

CHUNK = 1 << 26  # elements a write (128 MB of bf16); the pool holds two


def bf16_bits(x):
    return int(np.array([x], dtype=np.float32).view(np.uint32)[0] >> 16)


def random_bf16(rng, n, scale):
    """n bf16 bit patterns: sign and 7 mantissa bits random, exponent of scale or one below."""
    exponent = bf16_bits(scale) & 0x7F80
    r = rng.integers(0, 1 << 16, size=n, dtype=np.uint16)
    return (r & 0x807F) | (exponent - ((r >> 7) & 1) * 0x80).astype(np.uint16)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--header", required=True, help="header-only model.safetensors")
    ap.add_argument("--out", required=True)
    ap.add_argument("--scale", type=float, default=0.02)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    with open(args.header, "rb") as f:
        length = struct.unpack("<Q", f.read(8))[0]
        header = f.read(length)
    table = json.loads(header)
    tensors = sorted(((v["data_offsets"], k, v) for k, v in table.items() if k != "__metadata__"),
                     key=lambda t: t[0][0])
    for (begin, end), name, v in tensors:
        if v["dtype"] != "BF16":
            sys.exit(f"{args.header}: {name} is {v['dtype']}, expected BF16")
    os.makedirs(args.out, exist_ok=True)
    shutil.copy(os.path.join(os.path.dirname(os.path.abspath(args.header)), "config.json"), args.out)
    rng = np.random.default_rng(args.seed)
    pool = random_bf16(rng, 2 * CHUNK, args.scale)
    ones = np.full(CHUNK, np.uint16(bf16_bits(1.0)), dtype=np.uint16)
    t0 = time.time()
    written = 0
    with open(os.path.join(args.out, "model.safetensors"), "wb") as out:
        out.write(struct.pack("<Q", length))
        out.write(header)
        for (begin, end), name, v in tensors:
            if begin != written:
                sys.exit(f"{args.header}: {name} starts at byte {begin}, expected {written} (no gaps)")
            n = (end - begin) // 2
            for at in range(0, n, CHUNK):
                m = min(CHUNK, n - at)
                if name.endswith("norm.weight"):
                    out.write(ones[:m].tobytes())
                else:
                    start = int(rng.integers(0, CHUNK))
                    out.write(pool[start:start + m].tobytes())
            written = end
    print(f"{args.out}: {len(tensors)} tensors, {written / 1e9:.1f} GB of random bf16 ({time.time() - t0:.1f} s)",
          flush=True)
    subprocess.run([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                 "write_byte_tokenizer.py"), args.out], check=True)


if __name__ == "__main__":
    main()
