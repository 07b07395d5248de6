#!/usr/bin/env python3
"""torch's scaled_dot_product_attention on the shapes of kiln_attention_bench,
printed in its line format, for the `attention` part of scripts/gpu-check.sh.

  python3 test/gpu/sdpa_bench.py [--reps N] [--json PATH]

(1) prefill: bf16, causal, B=1, H=32 (Hkv=8), S=4096 and 2048, D=128;
    TFLOP/s with FLOPs = 4 S^2 H D / 2.
(2) decode: one query at context 8192, B=1, same heads; GB/s of K+V with
    bytes = 2 * 8192 * Hkv * D * 2 (the GQA cache, whatever SDPA reads).
GQA goes through enable_gqa=True where this torch's SDPA takes it, else K/V
are repeated to H heads first (outside the timing); the line says which.
Decode reps rotate over copies of K/V larger than the L2 together, as the
kiln bench does. Each figure is the median of --reps samples, a sample
being a CUDA graph of 20 consecutive calls timed by CUDA events, per call
(as kiln_attention_bench times kiln's kernels).
(3) the HBM read probe of scripts/hf_bench.py (torch sum over 4 GiB), the
    ceiling gpu-check.sh passes to kiln_attention_bench --hbm; its last
    line is "hbm_read_probe: N GB/s".
"""
import argparse
import json
import math

import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from hf_bench import hbm_read_gbps  # noqa: E402


CHAIN = 20  # calls per timed sample, as kiln_attention_bench's kChain


def median_ms(fn, reps):
    """Median ms per call: a CUDA graph of CHAIN consecutive calls (call i
    reading the i-th copy of its data) replayed between two events, / CHAIN."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for i in range(3):  # warm-up outside the capture (kernel selection, workspaces)
            fn(i)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(CHAIN):
            fn(i)
    graph.replay()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / CHAIN)
    times.sort()
    return times[len(times) // 2]


def takes_enable_gqa(q, k, v, causal):
    """Whether this torch's SDPA runs grouped K/V itself (enable_gqa, torch >= 2.5)."""
    try:
        F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
        return True
    except (TypeError, RuntimeError):
        return False


def sdpa(gqa, causal):
    if gqa:
        return lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    return lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    dev = torch.device("cuda")
    torch.manual_seed(0)
    records = []
    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}, median of {args.reps} reps", flush=True)

    B, H, Hkv, D = 1, 32, 8, 128
    for S in (4096, 2048):  # 2048: the length of kiln bench prefill's forward
        q = torch.rand(B, H, S, D, device=dev, dtype=torch.bfloat16) * 2 - 1
        k = torch.rand(B, Hkv, S, D, device=dev, dtype=torch.bfloat16) * 2 - 1
        v = torch.rand(B, Hkv, S, D, device=dev, dtype=torch.bfloat16) * 2 - 1
        gqa = takes_enable_gqa(q, k, v, True)
        mode = "enable_gqa" if gqa else "repeated KV"
        if not gqa:  # repeated once, outside the timing
            k, v = k.repeat_interleave(H // Hkv, dim=1), v.repeat_interleave(H // Hkv, dim=1)
        call = sdpa(gqa, True)
        ms = median_ms(lambda i: call(q, k, v), args.reps)
        tflops = 4.0 * S * S * H * D / 2 / (ms * 1e-3) / 1e12
        print(f"torch_sdpa prefill B={B} S={S} H={H} Hkv={Hkv} D={D} causal ({mode}): {ms:.3f} ms, {tflops:.1f} TFLOP/s",
              flush=True)
        records.append({"name": "torch_sdpa_prefill", "B": B, "S": S, "H": H, "Hkv": Hkv, "D": D, "mode": mode,
                        "ms": ms, "tflops": tflops})
        del q, k, v

    ctx = 8192
    kv_bytes = 2.0 * ctx * Hkv * D * 2
    copies = math.ceil(150e6 / kv_bytes)
    q = torch.rand(B, H, 1, D, device=dev, dtype=torch.bfloat16) * 2 - 1
    ks = [torch.rand(B, Hkv, ctx, D, device=dev, dtype=torch.bfloat16) * 2 - 1 for _ in range(copies)]
    vs = [torch.rand(B, Hkv, ctx, D, device=dev, dtype=torch.bfloat16) * 2 - 1 for _ in range(copies)]
    gqa = takes_enable_gqa(q, ks[0], vs[0], False)
    mode = "enable_gqa" if gqa else "repeated KV"
    if not gqa:
        ks = [x.repeat_interleave(H // Hkv, dim=1) for x in ks]
        vs = [x.repeat_interleave(H // Hkv, dim=1) for x in vs]
    call = sdpa(gqa, False)
    ms = median_ms(lambda i: call(q, ks[i % copies], vs[i % copies]), args.reps)
    gbps = kv_bytes / (ms * 1e-3) / 1e9
    print(f"torch_sdpa decode B={B} ctx={ctx} H={H} Hkv={Hkv} D={D} ({mode}): {ms * 1e3:.1f} us, {gbps:.1f} GB/s of K+V",
          flush=True)
    records.append({"name": "torch_sdpa_decode", "B": B, "ctx": ctx, "H": H, "Hkv": Hkv, "D": D, "mode": mode,
                    "us": ms * 1e3, "gbps": gbps})

    del q, ks, vs
    hbm = hbm_read_gbps()
    print(f"torch_sdpa decode: {gbps / hbm:.2f} of the HBM read probe")
    print(f"hbm_read_probe: {hbm:.0f} GB/s", flush=True)
    records.append({"name": "hbm_read_probe", "gbps": hbm})

    if args.json:
        with open(args.json, "w") as f:
            json.dump(records, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
