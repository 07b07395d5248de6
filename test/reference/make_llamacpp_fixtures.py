#!/usr/bin/env python3
"""Writes llama.cpp reference fixtures for SmolLM2-135M-Instruct (Q4_1 GGUF).

Outputs, under test/fixtures/llamacpp/:
  tokenize.json  llama.cpp token ids (and its detokenization) for strings
                 covering spaces, Unicode scripts, emoji, code, digits,
                 contractions and ChatML special tokens.
  greedy.json    10 prompts (chat-formatted and plain): prompt ids and 32
                 greedily generated ids (generation does not stop at EOS, so
                 every row has 32; `first_eos_index` says where EOS appeared).
  logits.json    full-vocabulary logits for 3 prompts at the last prompt
                 position and generated positions 0, 7 and 15: top-50
                 (id, value) exactly as float32, plus the whole vector as
                 float16, zlib-compressed, base64 ("logits_f16_zlib_b64").

Run:  python3 test/reference/make_llamacpp_fixtures.py [--model PATH] [--out DIR]
Needs: pip install llama-cpp-python jinja2 numpy
"""

import argparse
import base64
import json
import os
import platform
import sys
import zlib

import jinja2
import numpy as np
import llama_cpp
from llama_cpp import Llama

DEFAULT_MODEL = os.path.expanduser(
    "~/.cache/kiln/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "..", "fixtures", "llamacpp")

N_NEW_TOKENS = 32
LOGIT_GEN_POSITIONS = [0, 7, 15]  # generated-token indices to record
TOP_K = 50

# (name, text as str or bytes, special)
TOKENIZE_CASES = [
    ("ascii", "Hello world", False),
    ("sentence", "The quick brown fox jumps over the lazy dog.", False),
    ("empty", "", False),
    ("single_space", " ", False),
    ("leading_space", " Hello", False),
    ("leading_spaces", "   Hello", False),
    ("trailing_spaces", "Hello   ", False),
    ("multiple_spaces", "a  b   c    d", False),
    ("tabs_newlines", "line1\n\nline2\t\tx\r\n\r\n  \n\tend\n", False),
    ("newline_runs", "\n\n\n\nA\n \n", False),
    ("accents", "café naïve façade résumé Ångström", False),
    ("cjk", "你好，世界！这是一个测试。日本語のテキスト。한국어 문장.", False),
    ("cyrillic", "Привет, как дела? Ёлка.", False),
    ("arabic", "مرحبا بالعالم، كيف حالك؟", False),
    ("devanagari", "नमस्ते दुनिया। यह एक परीक्षण है।", False),
    ("emoji", "I love 🍕 and 🎉!", False),
    ("emoji_zwj", "Family: 👨‍👩‍👧‍👦, tech: 👩🏽‍💻, heart: ❤️‍🔥", False),
    ("flags", "Flags: 🇫🇷🇯🇵🇺🇸 🏴‍☠️", False),
    ("python", "def add(a, b):\n    return a + b\n\nprint(add(1, 2))\n", False),
    ("cpp", "#include <vector>\nint main() {\n  std::vector<int> v{1, 2, 3};\n"
            "  for (int x : v) {\n    if (x > 1) return x;\n  }\n"
            "  return 0;\n}\n", False),
    ("numbers", "3.14159 1,000,000 and 2024-01-15", False),
    ("long_digits", "12345678901234567890 0007 x1y22z333", False),
    ("contractions", "don't won't I'm you're they've she'll he'd it's", False),
    ("contractions_upper", "DON'T I'LL YOU'RE IT'S", False),
    ("punctuation", "Wait... what?!? (yes) [no] {maybe} <tag> @user #hash $5 100%", False),
    ("mixed_scripts", "English русский 中文 العربية हिन्दी 😀 123", False),
    ("chatml_as_text", "<|im_start|>user\nHi<|im_end|>\n", False),
    ("chatml_special", "<|im_start|>user\nHi there!<|im_end|>\n<|im_start|>assistant\n", True),
    ("special_endoftext", "Hello<|endoftext|>World", True),
    ("special_adjacent", "<|im_end|><|im_start|>system\n<|im_end|>", True),
    ("special_in_words", "pre<|im_start|>post<|im_end|>", True),
    ("url_email", "See https://example.com/a?b=c&d=e or mail me@example.org.", False),
    ("invalid_utf8", b"ok \xff\xfe bad \xc3 end \xe4\xb8", False),
]


def ids_of(llm, text, add_bos, special):
    data = text if isinstance(text, bytes) else text.encode("utf-8")
    return llm.tokenize(data, add_bos=add_bos, special=special)


def tokenize_fixture(llm):
    cases = []
    for name, text, special in TOKENIZE_CASES:
        data = text if isinstance(text, bytes) else text.encode("utf-8")
        ids = ids_of(llm, data, True, special)
        case = {
            "name": name,
            "hex": data.hex(),
            "add_bos": True,
            "special": special,
            "ids": ids,
            "detokenized_hex": llm.detokenize(ids, special=True).hex()
            if ids else "",
        }
        try:
            case["text"] = data.decode("utf-8")
            case["valid_utf8"] = True
        except UnicodeDecodeError:
            case["valid_utf8"] = False
        cases.append(case)
    # The same strings without add_bos must give the same ids for SmolLM2
    # (add_bos_token = false); a few are recorded to pin that down.
    for name, text, special in TOKENIZE_CASES[:3]:
        data = text.encode("utf-8")
        cases.append({
            "name": name + "_no_bos",
            "hex": data.hex(),
            "text": text,
            "valid_utf8": True,
            "add_bos": False,
            "special": special,
            "ids": ids_of(llm, data, False, special),
        })
    return cases


def render_chat(template_source, messages):
    env = jinja2.Environment(trim_blocks=False, lstrip_blocks=False)
    return env.from_string(template_source).render(
        messages=messages, add_generation_prompt=True)


def greedy(llm, prompt_ids, logit_positions=()):
    """Greedy decode of N_NEW_TOKENS; returns ids and requested logits."""
    llm.reset()
    llm.eval(prompt_ids)
    n_prompt = len(prompt_ids)
    generated = []
    logits = {}
    for step in range(N_NEW_TOKENS):
        row = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
        if step == 0 and "prompt_last" in logit_positions:
            logits["prompt_last"] = (n_prompt - 1, row)
        if step in logit_positions:
            logits[f"gen_{step}"] = (n_prompt - 1 + step, row)
        token = int(np.argmax(row))
        generated.append(token)
        llm.eval([token])
    return generated, logits


def encode_logits(row):
    top = np.argsort(-row, kind="stable")[:TOP_K]
    packed = zlib.compress(row.astype(np.float16).tobytes(), 9)
    return {
        "top_ids": [int(i) for i in top],
        "top_values": [float(row[i]) for i in top],
        "argmax": int(top[0]),
        "logits_f16_zlib_b64": base64.b64encode(packed).decode("ascii"),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--out", default=DEFAULT_OUT)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)

    # f32 KV cache (llama.cpp defaults to f16): kiln's CPU pools are f32, so
    # the comparison measures the model's arithmetic, not the cache's rounding.
    llm = Llama(model_path=args.model, n_ctx=2048, n_threads=2,
                n_threads_batch=2, logits_all=True, seed=1234, verbose=False,
                type_k=llama_cpp.GGML_TYPE_F32, type_v=llama_cpp.GGML_TYPE_F32)
    template = llm.metadata["tokenizer.chat_template"]
    # The wheel carries no llama.cpp commit; the shared-library versions in
    # its file names (libllama.so.X.Y.Z, libggml.so.X.Y.Z) pin the vendored
    # llama.cpp alongside the llama-cpp-python release.
    lib_dir = os.path.join(os.path.dirname(llama_cpp.__file__), "lib")
    libs = sorted(f for f in os.listdir(lib_dir)
                  if f.count(".so.") and f.split(".so.")[1].count(".") == 2)
    provenance = {
        "llama_cpp_python_version": llama_cpp.__version__,
        "shared_libraries": libs,
        "system_info": llama_cpp.llama_print_system_info().decode().strip(),
        "model": os.path.basename(args.model),
        "n_vocab": llm.n_vocab(),
        "n_ctx": 2048,
        "n_threads": 2,
        "python": platform.python_version(),
        "generator": "test/reference/make_llamacpp_fixtures.py",
    }

    def write(name, payload):
        path = os.path.join(args.out, name)
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"provenance": provenance, **payload}, f,
                      ensure_ascii=False, indent=1)
            f.write("\n")
        print(f"wrote {path} ({os.path.getsize(path)} bytes)")

    write("tokenize.json", {"cases": tokenize_fixture(llm)})

    chat = lambda *turns: render_chat(template, [
        {"role": role, "content": content} for role, content in turns])
    prompts = [
        ("chat_capital", chat(("user", "What is the capital of France?")), True),
        ("chat_system", chat(("system", "You are a terse assistant."),
                             ("user", "Name three primary colors.")), True),
        ("chat_multi_turn", chat(("user", "Hi!"), ("assistant", "Hello! How can I help?"),
                                 ("user", "Tell me a fun fact about cats.")), True),
        ("chat_code", chat(("user", "Write a Python function that reverses a string.")), True),
        ("chat_math", chat(("user", "What is 12 times 7?")), True),
        ("plain_story", "Once upon a time, in a small village,", False),
        ("plain_list", "The planets of the solar system are", False),
        ("plain_code", "def fibonacci(n):\n", False),
        ("plain_unicode", "Le café est très", False),
        ("plain_numbers", "1, 2, 3, 4, 5,", False),
    ]
    greedy_rows = []
    logit_rows = []
    logit_prompts = {"chat_capital", "plain_story", "plain_code"}
    for name, text, special in prompts:
        prompt_ids = ids_of(llm, text, True, special)
        wanted = ("prompt_last", *LOGIT_GEN_POSITIONS) if name in logit_prompts else ()
        generated, logits = greedy(llm, prompt_ids, wanted)
        eos = [i for i, t in enumerate(generated) if t == llm.token_eos()]
        greedy_rows.append({
            "name": name,
            "prompt": text,
            "parse_special": special,
            "prompt_ids": prompt_ids,
            "generated_ids": generated,
            "first_eos_index": eos[0] if eos else None,
            "generated_text": llm.detokenize(generated, special=True).decode(
                "utf-8", errors="replace"),
        })
        if logits:
            logit_rows.append({
                "name": name,
                "prompt_ids": prompt_ids,
                "generated_ids": generated,
                "positions": [
                    {"label": label, "position": pos, **encode_logits(row)}
                    for label, (pos, row) in logits.items()
                ],
            })
    write("greedy.json", {
        "n_new_tokens": N_NEW_TOKENS,
        "note": "greedy argmax over llama.cpp logits; does not stop at EOS",
        "prompts": greedy_rows,
    })
    write("logits.json", {
        "note": "position = index in the sequence (prompt + generated) whose "
                "output logits are recorded; logits are for the next token",
        "prompts": logit_rows,
    })


if __name__ == "__main__":
    sys.exit(main())
