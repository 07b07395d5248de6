#!/usr/bin/env python3
"""Writes test/fixtures/quant/sparsegpt/: what SparseGPT's 2:4 pruning and
magnitude pruning make of the random layer of test/fixtures/quant/gptq-awq
(make_gptq_awq_fixtures.py: correlated inputs with a few loud channels),
computed here in float64 NumPy as models/quantize/sparsegpt.h describes the
method, so kiln's C++ can be checked against an independent implementation.

  pruned.f64.bin  each case's pruned weights [ROWS, COLS], little-endian
                  float64, the cases one after another
  expected.json   per case: damp and lazy block, the output error
                  sum_r dW_r H dW_r^T of its weights (H = X^T X / TOKENS)
                  beside magnitude pruning's

Run: python3 test/reference/make_sparsegpt_fixtures.py  (needs numpy)
"""
import json
import pathlib

import numpy as np

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "quant"
LAYER = FIXTURES / "gptq-awq"
OUT = FIXTURES / "sparsegpt"
# (damp, block): two lazy blocks, one block, a stronger dampening.
CASES = [(0.01, 64), (0.01, 128), (0.1, 32)]


def keep_two(score):
    """Kept-column mask [rows, 4] of the two largest scores, ties to the lower column."""
    keep = np.argsort(-score, axis=1, kind="stable")[:, :2]
    mask = np.zeros(score.shape, bool)
    mask[np.arange(score.shape[0])[:, None], keep] = True
    return mask


def magnitude(w):
    rows, cols = w.shape
    groups = w.reshape(rows * cols // 4, 4)
    return np.where(keep_two(np.abs(groups)), groups, 0.0).reshape(rows, cols)


def sparsegpt(w, h, damp, block):
    w = w.astype(np.float64).copy()
    h = h.copy()
    rows, cols = w.shape
    block = 4 * max(1, block // 4)
    dead = np.diag(h) == 0
    h[dead, dead] = 1.0
    w[:, dead] = 0.0
    h[np.diag_indices(cols)] += damp * np.mean(np.diag(h))
    u = np.linalg.cholesky(np.linalg.inv(h)).T  # H^-1 = U^T U
    d = np.diag(u)
    for i1 in range(0, cols, block):
        i2 = min(i1 + block, cols)
        err = np.zeros((rows, i2 - i1))
        for j in range(i1, i2):
            if j % 4 == 0:
                mask = keep_two(w[:, j:j + 4] ** 2 / d[j:j + 4] ** 2)
            q = np.where(mask[:, j % 4], w[:, j], 0.0)
            e = (w[:, j] - q) / u[j, j]
            w[:, j] = q
            w[:, j + 1:i2] -= np.outer(e, u[j, j + 1:i2])
            err[:, j - i1] = e
        w[:, i2:] -= err @ u[i1:i2, i2:]
    return w


def output_error(a, b, h):
    d = a - b
    return float(np.sum(d * (d @ h)))


def main():
    layer = json.loads((LAYER / "expected.json").read_text())
    rows, cols, tokens = layer["rows"], layer["cols"], layer["tokens"]
    w = np.fromfile(LAYER / "w.f32.bin", np.float32).reshape(rows, cols).astype(np.float64)
    x = np.fromfile(LAYER / "x.f32.bin", np.float32).reshape(tokens, cols).astype(np.float64)
    h = x.T @ x / tokens
    magnitude_loss = output_error(w, magnitude(w), h)

    cases, pruned = [], []
    for damp, block in CASES:
        p = sparsegpt(w, h, damp, block)
        assert (np.count_nonzero(p.reshape(-1, 4), axis=1) <= 2).all()
        pruned.append(p)
        cases.append(dict(damp=damp, block=block, loss=output_error(w, p, h),
                          magnitude_loss=magnitude_loss))
        print(f"sparsegpt damp {damp} block {block:3}: output error {cases[-1]['loss']:.6g}, "
              f"magnitude pruning {magnitude_loss:.6g}")

    OUT.mkdir(parents=True, exist_ok=True)
    np.concatenate([p.ravel() for p in pruned]).astype("<f8").tofile(OUT / "pruned.f64.bin")
    doc = {"generator": "test/reference/make_sparsegpt_fixtures.py", "layer": "test/fixtures/quant/gptq-awq",
           "rows": rows, "cols": cols, "tokens": tokens, "cases": cases}
    (OUT / "expected.json").write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
