#!/usr/bin/env python3
"""The llama.cpp peer for `kiln bench ppl`: the perplexity of a text under a
GGUF as llama.cpp computes it, windowed and scored as kiln windows and scores.

The text is tokenized by llama.cpp's own tokenizer (no BOS added, special
tokens not parsed: kiln's EncodeOptions{.add_special = false}), cut into
len(tokens) // ctx windows of ctx tokens, a remainder dropped. Each window is
evaluated from an empty KV cache in one llama_decode with logits for every
position (n_ctx = n_batch = n_ubatch = ctx), and the tokens ctx/2 + 1 ..
ctx - 1 are scored, each given every token before it in its window. The
window's first token becomes BOS where the GGUF asks for one
(tokenizer.ggml.add_bos_token), as in llama.cpp's perplexity tool;
--bos=always replaces it wherever the vocabulary has a BOS.

The figure and its standard error are computed as both kiln and
llama-perplexity compute them: exp(mean NLL), and exp(mean NLL) times
sqrt((mean(NLL^2) - mean(NLL)^2) / (scored - 1)).

  python3 scripts/llamacpp_perplexity.py --model SmolLM2-135M-Instruct.Q4_1.gguf \\
      --text licenses.txt --ctx 512 --kv f16 --bos always [--kiln-log kiln.log]

Needs llama-cpp-python (`pip install llama-cpp-python` builds llama.cpp).
llama.cpp's own perplexity tool is not in that package; to have it and this
script on one build, compile the llama.cpp the package vendors and point the
binding at it:

  pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36 && tar xzf llama_cpp_python-0.3.36.tar.gz
  cmake -G Ninja -S llama_cpp_python-0.3.36/vendor/llama.cpp -B $LLAMA_BUILD -DCMAKE_BUILD_TYPE=Release \\
      -DBUILD_SHARED_LIBS=ON -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF
  ninja -C $LLAMA_BUILD llama-perplexity
  CMAKE_ARGS="-DLLAMA_BUILD=OFF -DLLAVA_BUILD=OFF" pip install ./llama_cpp_python-0.3.36.tar.gz
  export LLAMA_CPP_LIB_PATH=$LLAMA_BUILD/bin

--kiln-log takes `kiln bench ppl`'s stdout and stderr (`> kiln.log 2>&1`) and
prints how far its token count, figure and per-window mean NLL are from
llama.cpp's. kiln prints the running perplexity after each window to 4
decimals; window w's mean NLL is recovered from the running figures after
windows w - 1 and w, to about 1e-5 * w.
"""
import argparse
import json
import math
import re
import sys
import time

import numpy as np


def window_nll(logits, window, first):
    """NLL of window[j + 1] given window[0..j], for j in first .. ctx - 2.
    logits: [ctx, vocab] float32, row j predicting token j + 1."""
    rows = logits[first:len(window) - 1].astype(np.float64)
    rows -= rows.max(axis=1, keepdims=True)
    log_z = np.log(np.exp(rows).sum(axis=1))
    targets = np.asarray(window[first + 1:], dtype=np.int64)
    return log_z - rows[np.arange(len(targets)), targets]


def read_kiln_log(path):
    """Token count, perplexity and per-window mean NLL from kiln bench ppl's output."""
    log = open(path).read()
    tokens = int(re.search(r"kiln bench ppl: .*?, (\d+) tokens of ", log).group(1))
    ppl = float(re.search(r"^perplexity (\S+) \+/- ", log, re.M).group(1))
    running = [float(x) for x in re.findall(r"window \d+/\d+, perplexity so far (\S+)", log)]
    # Every window scores the same count of tokens, so window w's mean NLL is
    # w * ln(ppl after w) - (w - 1) * ln(ppl after w - 1).
    cumulative = [(w + 1) * math.log(p) for w, p in enumerate(running)]
    return tokens, ppl, [c - (cumulative[w - 1] if w else 0.0) for w, c in enumerate(cumulative)]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="the GGUF")
    p.add_argument("--text", required=True, help="the text to score")
    p.add_argument("--ctx", type=int, default=512, help="tokens a window (default 512)")
    p.add_argument("--kv", choices=["f16", "f32"], default="f16", help="KV cache type (llama.cpp's default f16)")
    p.add_argument("--bos", choices=["gguf", "always"], default="gguf",
                   help="window's first token to BOS: where the GGUF asks (gguf, llama-perplexity's rule) "
                        "or wherever the vocabulary has one (always)")
    p.add_argument("--flash-attn", action="store_true", help="llama.cpp's flash attention (default off)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", help="write the figure and the per-window mean NLL here")
    p.add_argument("--kiln-log", help="`kiln bench ppl`'s stdout and stderr, to compare with")
    args = p.parse_args()
    try:
        import llama_cpp
    except ImportError:
        print("llama-cpp-python is not installed (pip install llama-cpp-python)", file=sys.stderr)
        return 2

    kv_type = {"f16": llama_cpp.GGML_TYPE_F16, "f32": llama_cpp.GGML_TYPE_F32}[args.kv]
    llm = llama_cpp.Llama(model_path=args.model, n_ctx=args.ctx, n_batch=args.ctx, n_ubatch=args.ctx,
                          n_threads=args.threads, n_threads_batch=args.threads, logits_all=True,
                          flash_attn=args.flash_attn, type_k=kv_type, type_v=kv_type, verbose=False)
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    add_bos = bool(llama_cpp.llama_vocab_get_add_bos(vocab))
    bos = llm.token_bos()
    replace_bos = bos >= 0 and (add_bos or args.bos == "always")

    with open(args.text, "rb") as f:
        tokens = llm.tokenize(f.read(), add_bos=False, special=False)
    ctx, first = args.ctx, args.ctx // 2
    windows = len(tokens) // ctx
    if windows < 1:
        print(f"{args.text}: {len(tokens)} tokens, fewer than one window of --ctx {ctx}", file=sys.stderr)
        return 1

    nll = nll2 = 0.0
    scored = 0
    per_window = []
    t0 = time.perf_counter()
    for w in range(windows):
        window = list(tokens[w * ctx:(w + 1) * ctx])
        if replace_bos:
            window[0] = bos
        llm.reset()
        llm.eval(window)
        x = window_nll(llm.scores[:ctx], window, first)
        nll += float(x.sum())
        nll2 += float((x * x).sum())
        scored += len(x)
        per_window.append(float(x.mean()))
        print(f"\rllamacpp_perplexity: window {w + 1}/{windows}, perplexity so far {math.exp(nll / scored):.4f}",
              end="", file=sys.stderr, flush=True)
    print(f" ({time.perf_counter() - t0:.0f} s)", file=sys.stderr)

    mean = nll / scored
    sd = math.sqrt(max(0.0, nll2 / scored - mean * mean) / (scored - 1))
    ppl = math.exp(mean)
    version = f"llama-cpp-python {llama_cpp.__version__}"
    print(f"llamacpp_perplexity: {version}, {args.model}, {len(tokens)} tokens of {args.text}, "
          f"{windows} windows of {ctx}, {scored} tokens scored, {args.kv} KV, "
          f"BOS first: {'yes' if replace_bos else 'no'} (GGUF add_bos_token {str(add_bos).lower()})")
    print(f"perplexity {ppl:.4f} +/- {ppl * sd:.4f}")

    if args.kiln_log:
        kiln_tokens, kiln_ppl, kiln_windows = read_kiln_log(args.kiln_log)
        print(f"tokens: kiln {kiln_tokens}, llama.cpp {len(tokens)}")
        print(f"perplexity: kiln {kiln_ppl:.4f}, llama.cpp {ppl:.4f} ({100 * (kiln_ppl / ppl - 1):+.3f}%)")
        if len(kiln_windows) == windows:
            delta = np.abs(np.asarray(kiln_windows) - np.asarray(per_window))
            print(f"per-window mean NLL: max |kiln - llama.cpp| {delta.max():.4f} (window {int(delta.argmax()) + 1}), "
                  f"mean {delta.mean():.4f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"llama_cpp_python": llama_cpp.__version__, "model": args.model, "text": args.text,
                       "tokens": len(tokens), "ctx": ctx, "windows": windows, "scored": scored, "kv": args.kv,
                       "bos_first": replace_bos, "perplexity": ppl, "perplexity_error": ppl * sd,
                       "window_nll": per_window}, f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
