#!/usr/bin/env python3
"""Magnitude 2:4 pruning of a float safetensors checkpoint's decoder linears
(q, k, v, o, gate, up, down projections), with NumPy: in every group of four
consecutive input columns of a row the two weights of largest magnitude stay
(ties to the lower column, a stable sort) and the other two become zero.
Linears whose in-features are not a multiple of 64 stay dense, as
xfmr-sparsify leaves them. kiln's e2e test compares the model compiled with
--sparsity=2:4 against this pruned checkpoint compiled dense.

    prune_24.py SRC_DIR DST_DIR
"""
import json
import pathlib
import shutil
import struct
import sys

import numpy as np

from tiny_checkpoint import write_safetensors

LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def read_safetensors(path):
    data = pathlib.Path(path).read_bytes()
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + size])
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] != "F32":
            sys.exit(f"{path}: {name} is {info['dtype']}, this script reads F32 checkpoints")
        begin, end = info["data_offsets"]
        tensors[name] = np.frombuffer(data[8 + size + begin:8 + size + end], dtype="<f4").reshape(info["shape"])
    return tensors


def prune_24(w):
    rows, cols = w.shape
    groups = w.reshape(rows, cols // 4, 4).copy()
    order = np.argsort(-np.abs(groups), axis=-1, kind="stable")
    np.put_along_axis(groups, order[..., 2:], 0.0, axis=-1)
    return groups.reshape(rows, cols)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    src, dst = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    dst.mkdir(parents=True, exist_ok=True)
    tensors = read_safetensors(src / "model.safetensors")
    pruned = 0
    for name, w in tensors.items():
        if name.endswith(tuple(f"{linear}.weight" for linear in LINEARS)) and w.shape[1] % 64 == 0:
            tensors[name] = prune_24(w)
            pruned += 1
    write_safetensors(dst / "model.safetensors", tensors)
    shutil.copy(src / "config.json", dst / "config.json")
    print(f"{dst}: {pruned} linears pruned 2:4", file=sys.stderr)


if __name__ == "__main__":
    main()
