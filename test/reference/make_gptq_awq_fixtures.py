#!/usr/bin/env python3
"""Writes test/fixtures/quant/gptq-awq/: a small random linear layer, random
correlated inputs with a few loud channels, and what GPTQ, AWQ and
round-to-nearest make of them, computed here in float64 NumPy as
models/quantize/ describes the algorithms (int4_grid.h, gptq.h, awq.h), so
kiln's C++ can be checked against an independent implementation.

  w.f32.bin      [ROWS, COLS] little-endian f32, the layer's weight
  x.f32.bin      [TOKENS, COLS] f32, its inputs
  expected.json  per case: the method's options, its codes [rows * cols],
                 scales (f16 values) and zeros [groups * rows], and the
                 output error sum_r dW_r H dW_r^T of its weights (H = X^T X /
                 TOKENS) beside round-to-nearest's on the same grid; AWQ adds
                 its alpha and channel scales (the codes are of W diag(s)).

Run: python3 test/reference/make_gptq_awq_fixtures.py  (needs numpy)
"""
import json
import pathlib

import numpy as np

OUT = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "quant" / "gptq-awq"
ROWS, COLS, TOKENS = 32, 128, 256
BLOCK = 64  # GPTQ columns a lazy update batches: two blocks for groups of 32 and 64
SEED = 20261202


def f16(x):
    """Rounded through f32 to f16, as int4_grid.cc rounds a scale."""
    return np.asarray(x, np.float64).astype(np.float32).astype(np.float16).astype(np.float64)


def group_params(w, sym):
    """Grid of each group: w [..., G] -> scale, zero [...]."""
    lo = np.minimum(w.min(-1), 0.0)
    hi = np.maximum(w.max(-1), 0.0)
    if sym:
        return f16(np.maximum(-lo, hi) / 7.0), np.full(lo.shape, 8.0)
    scale = f16((hi - lo) / 15.0)
    safe = np.where(scale == 0, 1.0, scale)
    zero = np.where(scale == 0, 0.0, np.clip(np.round(-lo / safe), 0, 15))
    return scale, zero


def codes_of(w, scale, zero):
    safe = np.where(scale == 0, 1.0, scale)
    return np.where(scale == 0, zero, np.clip(np.round(w / safe) + zero, 0, 15))


def rtn(w, group, sym):
    """Codes [rows, cols], scales and zeros [groups, rows], values [rows, cols]."""
    rows, cols = w.shape
    wg = w.reshape(rows, cols // group, group)
    scale, zero = group_params(wg, sym)
    q = codes_of(wg, scale[..., None], zero[..., None])
    values = (scale[..., None] * (q - zero[..., None])).reshape(rows, cols)
    return q.reshape(rows, cols), scale.T.copy(), zero.T.copy(), values


def output_error(a, b, h):
    d = a - b
    return float(np.sum(d * (d @ h)))


def dequantize(codes, scales, zeros, group):
    g = np.arange(codes.shape[1]) // group
    return scales[g].T * (codes - zeros[g].T)


def gptq(w, h, group, sym, act_order, damp=0.01, block=BLOCK):
    w = w.astype(np.float64).copy()
    h = h.copy()
    rows, cols = w.shape
    block = group * max(1, block // group)
    dead = np.diag(h) == 0
    h[dead, dead] = 1.0
    w[:, dead] = 0.0
    scales = np.zeros((cols // group, rows))
    zeros = np.zeros((cols // group, rows))
    codes = np.zeros((rows, cols))
    perm = np.arange(cols)
    if act_order:
        for g in range(cols // group):
            scales[g], zeros[g] = group_params(w[:, g * group:(g + 1) * group], sym)
        perm = np.argsort(-np.diag(h), kind="stable")
        w = w[:, perm]
        h = h[perm][:, perm]
    h[np.diag_indices(cols)] += damp * np.mean(np.diag(h))
    u = np.linalg.cholesky(np.linalg.inv(h)).T  # H^-1 = U^T U
    for i1 in range(0, cols, block):
        i2 = min(i1 + block, cols)
        err = np.zeros((rows, i2 - i1))
        for j in range(i1, i2):
            g = perm[j] // group
            if not act_order and j % group == 0:
                scales[g], zeros[g] = group_params(w[:, j:j + group], sym)
            q = codes_of(w[:, j], scales[g], zeros[g])
            codes[:, perm[j]] = q
            e = (w[:, j] - scales[g] * (q - zeros[g])) / u[j, j]
            w[:, j + 1:i2] -= np.outer(e, u[j, j + 1:i2])
            err[:, j - i1] = e
        w[:, i2:] -= err @ u[i1:i2, i2:]
    return codes, scales, zeros


def awq_scales(w, h, x_mean, group, sym, n=20):
    best = (np.inf, 0.0, None)
    for i in range(n):
        alpha = i / n
        s = np.maximum(x_mean ** alpha, 1e-4)
        s = s / np.sqrt(s.max() * s.min())
        loss = output_error(w, rtn(w * s, group, sym)[3] / s, h)
        if loss < best[0]:
            best = (loss, alpha, s)
    return best


def awq_clip(w, h, group, sym, n=20, max_shrink=0.5):
    w = w.copy()
    for g in range(w.shape[1] // group):
        cols = slice(g * group, (g + 1) * group)
        wg, hg = w[:, cols].copy(), h[cols, cols]
        m0 = np.abs(wg).max(1)
        best, best_m = np.full(len(m0), np.inf), m0.copy()
        for step in range(int(max_shrink * n)):
            m = m0 * (1.0 - step / n)
            clipped = np.clip(wg, -m[:, None], m[:, None])
            d = wg - rtn(clipped, group, sym)[3]
            err = np.sum(d * (d @ hg), 1)
            better = err < best
            best[better], best_m[better] = err[better], m[better]
        w[:, cols] = np.clip(wg, -best_m[:, None], best_m[:, None])
    return w


def main():
    rng = np.random.default_rng(SEED)
    loud = np.ones(COLS)
    loud[rng.choice(COLS, 6, replace=False)] = 8.0  # activation outliers, AWQ's case
    mix = np.eye(COLS) + 0.3 * rng.standard_normal((COLS, COLS)) / np.sqrt(COLS)
    x = ((rng.standard_normal((TOKENS, COLS)) @ mix) * np.exp(0.5 * rng.standard_normal(COLS)) * loud)
    x = x.astype(np.float32)
    w = (0.05 * rng.standard_normal((ROWS, COLS))).astype(np.float32)
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    h = x64.T @ x64 / TOKENS
    x_mean = np.abs(x64).mean(0)

    cases = []
    for group, sym in [(32, True), (32, False)]:
        codes, scales, zeros, values = rtn(w64, group, sym)
        cases.append(dict(method="rtn", group=group, sym=sym, codes=codes, scales=scales, zeros=zeros,
                          loss=output_error(w64, values, h)))
    for group, sym, act_order in [(32, True, False), (64, False, False), (32, True, True),
                                  (128, False, True)]:
        codes, scales, zeros = gptq(w64, h, group, sym, act_order)
        cases.append(dict(method="gptq", group=group, sym=sym, act_order=act_order, codes=codes,
                          scales=scales, zeros=zeros,
                          loss=output_error(w64, dequantize(codes, scales, zeros, group), h)))
    for group, sym, clip in [(32, False, True), (64, True, False)]:
        _, alpha, s = awq_scales(w64, h, x_mean, group, sym)
        scaled = w64 * s
        if clip:
            scaled = awq_clip(scaled, h / np.outer(s, s), group, sym)
        codes, scales, zeros, values = rtn(scaled, group, sym)
        cases.append(dict(method="awq", group=group, sym=sym, clip=clip, alpha=alpha, s=s, codes=codes,
                          scales=scales, zeros=zeros, loss=output_error(w64, values / s, h)))
    for case in cases:
        case["rtn_loss"] = output_error(w64, rtn(w64, case["group"], case["sym"])[3], h)
        for key in ("codes", "zeros"):
            case[key] = [int(v) for v in np.ravel(case[key])]
        for key in ("scales", "s"):
            if key in case:
                case[key] = [float(v) for v in np.ravel(case[key])]
        print(f"{case['method']:4} group {case['group']:3} sym {case['sym']!s:5}: output error "
              f"{case['loss']:.6g}, round to nearest {case['rtn_loss']:.6g}")

    OUT.mkdir(parents=True, exist_ok=True)
    w.tofile(OUT / "w.f32.bin")
    x.tofile(OUT / "x.f32.bin")
    doc = {"generator": "test/reference/make_gptq_awq_fixtures.py", "seed": SEED, "rows": ROWS,
           "cols": COLS, "tokens": TOKENS, "damp": 0.01, "block": BLOCK, "grid_points": 20,
           "max_shrink": 0.5, "cases": cases}
    # One line a case: the code lists are long.
    cases_text = ",\n".join(json.dumps(c, separators=(",", ":")) for c in doc.pop("cases"))
    head = json.dumps(doc, indent=1)[:-2]
    (OUT / "expected.json").write_text(f'{head},\n "cases": [\n{cases_text}\n ]\n}}\n')


if __name__ == "__main__":
    main()
