#!/usr/bin/env python3
"""The llama.cpp peer for `kiln bench decode`: same GGUF, same prompt token
ids, same thread count. Prints one JSON object with prefill and decode speed.

Prefill: one llama_decode of the whole prompt. Decode: greedy, one token per
llama_decode, G tokens (EOS ignored), as kiln's benchmark does.
"""
import argparse
import json
import sys
import time


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--prompt-ids", required=True, help="JSON file with the prompt token ids")
    p.add_argument("--gen", type=int, required=True)
    p.add_argument("--threads", type=int, required=True)
    args = p.parse_args()
    try:
        import llama_cpp
    except ImportError:
        print("llama-cpp-python is not installed (pip install llama-cpp-python)", file=sys.stderr)
        return 2
    prompt = json.load(open(args.prompt_ids))
    llm = llama_cpp.Llama(model_path=args.model, n_ctx=len(prompt) + args.gen + 16,
                          n_batch=max(512, len(prompt)), n_threads=args.threads,
                          n_threads_batch=args.threads, verbose=False)
    # Warm-up, as kiln does: a short eval, then reset.
    llm.eval(prompt[:8])
    llm.reset()
    t0 = time.perf_counter()
    llm.eval(prompt)
    t1 = time.perf_counter()
    token = int(llm.scores[llm.n_tokens - 1].argmax())
    t2 = time.perf_counter()
    for _ in range(args.gen - 1):
        llm.eval([token])
        token = int(llm.scores[llm.n_tokens - 1].argmax())
    t3 = time.perf_counter()
    print(json.dumps({
        "prefill_ms": (t1 - t0) * 1e3,
        "prefill_tps": len(prompt) / (t1 - t0),
        "decode_tps": (args.gen - 1) / (t3 - t2),
        "llama_cpp_python": llama_cpp.__version__,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
