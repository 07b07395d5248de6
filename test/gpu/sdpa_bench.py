#!/usr/bin/env python3
"""torch's scaled_dot_product_attention on the shapes of kiln_attention_bench,
printed in its line format, for the `attention` part of scripts/gpu-check.sh.

  python3 test/gpu/sdpa_bench.py [--reps N] [--json PATH]

(1) prefill: bf16, causal, B=1, H=32 (Hkv=8), S=4096, D=128;
    TFLOP/s with FLOPs = 4 S^2 H D / 2.
(2) decode: one query at context 8192, B=1, same heads; GB/s of K+V with
    bytes = 2 * 8192 * Hkv * D * 2 (the GQA cache, whatever SDPA reads).
GQA goes through enable_gqa=True where this torch's SDPA takes it, else K/V
are repeated to H heads first (outside the timing); the line says which.
Decode reps rotate over copies of K/V larger than the L2 together, as the
kiln bench does. Median of --reps CUDA-event timings after warm-up.
"""
import argparse
import json
import math

import torch
import torch.nn.functional as F


def median_ms(fn, reps, warmup=3):
    for i in range(warmup):
        fn(i)
    torch.cuda.synchronize()
    times = []
    for i in range(reps):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(i)
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
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

    B, S, H, Hkv, D = 1, 4096, 32, 8, 128
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

    if args.json:
        with open(args.json, "w") as f:
            json.dump(records, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
