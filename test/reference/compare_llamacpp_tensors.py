#!/usr/bin/env python3
"""Compares kiln's CPU step results with llama.cpp's tensors, layer by layer.

Inputs: an .npz from dump_llamacpp_tensors.py and a folder from
kiln_dump_cpu_steps (build/bin), for the same prompt. Prints, per tensor in
graph order, the largest absolute difference, that relative to the tensor's
largest magnitude, the number of elements that differ at all, and the
number that differ by more than `--ulps` f32 ulps of the tensor's scale: the first row with a large count is
where the two engines stop computing the same thing.

Run:  python3 test/reference/compare_llamacpp_tensors.py /tmp/llama.npz \
          /tmp/kiln_dump [--phase p|d0|d1...] [--layers 2]
"""

import argparse
import os
import re
import sys

import numpy as np


def load_llama(path, phase):
    z = np.load(path)
    prefix = "" if phase == "p" else phase + "/"
    out = {}
    for key in z.files:
        if key == "prompt_ids" or not key.startswith(prefix):
            continue
        rest = key[len(prefix):]
        if "/" in rest:
            continue
        _, name, op = rest.split(":")
        out[(name, op)] = z[key]  # the last tensor of a (name, op) wins
    return out


def load_kiln(folder):
    steps = []
    for f in sorted(os.listdir(folder)):
        m = re.match(r"(\d+)_(\w+?)_r(\d+)_(\d+)x(\d+)\.f32$", f)
        step, kind, result, rows, width = m.group(1), m.group(2), *map(int, m.groups()[2:])
        data = np.fromfile(os.path.join(folder, f), dtype=np.float32).reshape(rows, width)
        steps.append((int(step), kind, result, data))
    return steps


def pairs(kiln, hidden=576, q_dim=576, kv_dim=192, ffn=1536):
    """(label, kiln rows, llama (name, op)) in graph order."""
    layer = 0
    seen_attn_out = seen_ffn = False
    for step, kind, result, x in kiln:
        if kind == "embedding":
            yield "embd", x, ("embd", "GET_ROWS")
        elif kind == "rms_norm" and step == 1:
            yield "attn_norm-0", x, ("attn_norm-0", "MUL")
        elif kind == "gemm" and x.shape[1] == q_dim + 2 * kv_dim:
            yield f"Qcur-{layer}", x[:, :q_dim], (f"Qcur-{layer}", "MUL_MAT")
            yield f"Kcur-{layer}", x[:, q_dim:q_dim + kv_dim], (f"Kcur-{layer}", "MUL_MAT")
            yield f"Vcur-{layer}", x[:, q_dim + kv_dim:], (f"Vcur-{layer}", "MUL_MAT")
        elif kind == "rope_kv_append":
            yield f"Qcur-{layer} roped", x, (f"Qcur-{layer}", "ROPE")
        elif kind == "paged_attention":
            yield f"kqv_out-{layer}", x, (f"kqv_out-{layer}", "CONT")
        elif kind == "gemm" and x.shape[1] == hidden and not seen_attn_out:
            seen_attn_out = True
            yield f"attn_out-{layer}", x, (f"attn_out-{layer}", "MUL_MAT")
        elif kind == "residual_rms_norm" and result == 0 and seen_attn_out and not seen_ffn:
            yield f"ffn_inp-{layer}", x, (f"ffn_inp-{layer}", "ADD")
        elif kind == "residual_rms_norm" and result == 1 and seen_attn_out and not seen_ffn:
            yield f"ffn_norm-{layer}", x, (f"ffn_norm-{layer}", "MUL")
        elif kind == "gemm" and x.shape[1] == 2 * ffn:
            yield f"ffn_gate-{layer}", x[:, :ffn], (f"ffn_gate-{layer}", "MUL_MAT")
            yield f"ffn_up-{layer}", x[:, ffn:], (f"ffn_up-{layer}", "MUL_MAT")
        elif kind == "silu_mul":
            yield f"ffn_swiglu-{layer}", x, (f"ffn_swiglu-{layer}", "SWIGLU")
        elif kind == "gemm" and x.shape[1] == hidden:
            seen_ffn = True
            yield f"ffn_out-{layer}", x, (f"ffn_out-{layer}", "MUL_MAT")
        elif kind in ("residual_rms_norm", "add") and result == 0:
            yield f"l_out-{layer}", x, (f"l_out-{layer}", "ADD")
            layer += 1
        elif kind == "residual_rms_norm" and result == 1:
            yield f"attn_norm-{layer}", x, (f"attn_norm-{layer}", "MUL")
        elif kind == "rms_norm":
            yield "result_norm", x, ("result_norm", "MUL")
        elif kind == "gemm":
            yield "result_output", x, ("result_output", "MUL_MAT")
        if kind == "rope_kv_append":
            seen_attn_out = seen_ffn = False


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("llama_npz")
    parser.add_argument("kiln_dir")
    parser.add_argument("--phase", default="p")
    parser.add_argument("--layers", type=int, default=100)
    parser.add_argument("--ulps", type=float, default=8)
    args = parser.parse_args()
    llama = load_llama(args.llama_npz, args.phase)
    kiln = load_kiln(os.path.join(args.kiln_dir, args.phase))
    print(f"{'tensor':<22} {'max|d|':>10} {'rel':>9} {'cos':>10} {'!=':>8} {'>ulps':>8}")
    for label, mine, key in pairs(kiln):
        m = re.search(r"-(\d+)", label)
        if m and int(m.group(1)) >= args.layers:
            break
        ref = llama[key]
        ref = ref.reshape(-1, mine.shape[1]) if ref.size % mine.shape[1] == 0 else ref
        if ref.shape[0] != mine.shape[0]:
            ref = ref[-mine.shape[0]:]  # kiln keeps only the last token's row
        d = np.abs(mine.astype(np.float64) - ref)
        scale = np.abs(ref).max()
        tol = args.ulps * np.spacing(np.float32(scale))
        cos = float((mine.ravel() @ ref.ravel().astype(np.float64)) /
                    (np.linalg.norm(mine) * np.linalg.norm(ref) + 1e-30))
        print(f"{label:<22} {d.max():10.3g} {d.max() / (scale + 1e-30):9.2e} {cos:10.7f} "
              f"{int((d > 0).sum()):8d} {int((d > tol).sum()):8d}/{d.size}")


if __name__ == "__main__":
    sys.exit(main())
