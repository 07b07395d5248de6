#!/usr/bin/env python3
"""Dumps llama.cpp's intermediate tensors for one greedy-fixture prompt.

Runs the prompt exactly as make_llamacpp_fixtures.py does (same Llama
settings, prompt evaluated as one batch, logits_all) with the graph eval
callback (llama_context_params.cb_eval) set, and saves every tensor the CPU
backend computes, in graph order, to an .npz: key "NNNN:name:op", value the
tensor as float32 in ggml's shape order reversed (numpy row-major), e.g.
attn_norm-0 -> [tokens, 576], Qcur-0 (after rope) -> [tokens, 9, 64],
kq-0 -> [9, tokens, kv]. Only f32 tensors are kept.

For comparing kiln's CPU executor step by step against llama.cpp (see
docs/design/cpu-numerics.md).

Run:  python3 test/reference/dump_llamacpp_tensors.py --prompt chat_capital \
          --out /tmp/llama_chat_capital.npz [--decode N]
--decode N also evaluates llama.cpp's first N greedy tokens one at a time and
dumps those graphs too (keys prefixed "dN/").
"""

import argparse
import ctypes
import json
import os
import sys

import numpy as np
import llama_cpp
from llama_cpp import Llama

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_MODEL = os.path.expanduser(
    "~/.cache/kiln/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")

# struct ggml_tensor (ggml.h): type @0, ne[4] @16, nb[4] @48, op @80,
# data @248, name[64] @256. ggml_get_name() checks the name offset below.
OFF_NE, OFF_NB, OFF_OP, OFF_DATA, OFF_NAME = 16, 48, 80, 248, 256
GGML_TYPE_F32 = 0

_ggml = ctypes.CDLL(os.path.join(os.path.dirname(llama_cpp.__file__), "lib",
                                 "libggml-base.so"))
_ggml.ggml_op_desc.restype = ctypes.c_char_p
_ggml.ggml_op_desc.argtypes = [ctypes.c_void_p]
_ggml.ggml_get_name.restype = ctypes.c_void_p
_ggml.ggml_get_name.argtypes = [ctypes.c_void_p]


def read_tensor(ptr):
    assert _ggml.ggml_get_name(ptr) == ptr + OFF_NAME, "ggml_tensor layout changed"
    ttype = ctypes.c_int32.from_address(ptr).value
    ne = [ctypes.c_int64.from_address(ptr + OFF_NE + 8 * i).value for i in range(4)]
    nb = [ctypes.c_uint64.from_address(ptr + OFF_NB + 8 * i).value for i in range(4)]
    name = ctypes.string_at(ptr + OFF_NAME).decode()
    op = _ggml.ggml_op_desc(ptr).decode()
    data = ctypes.c_void_p.from_address(ptr + OFF_DATA).value
    if ttype != GGML_TYPE_F32 or not data:
        return name, op, None
    # A strided view over the bytes the tensor spans (views and permutes
    # included), copied out.
    span = sum((n - 1) * s for n, s in zip(ne, nb)) + 4
    flat = np.frombuffer((ctypes.c_char * span).from_address(data), dtype=np.uint8)
    arr = np.lib.stride_tricks.as_strided(flat.view(np.float32), shape=tuple(reversed(ne)),
                                          strides=tuple(reversed(nb)))
    return name, op, np.array(arr, dtype=np.float32)


class Recorder:
    def __init__(self):
        self.prefix = ""
        self.tensors = {}
        self.count = 0
        self.callback = llama_cpp.ggml_backend_sched_eval_callback(self._on_eval)

    def _on_eval(self, tensor, ask, _user):
        if ask:
            return True  # we want every tensor
        name, op, arr = read_tensor(tensor)
        if arr is not None:
            self.tensors[f"{self.prefix}{self.count:04d}:{name}:{op}"] = arr
            self.count += 1
        return True


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--prompt", default="chat_capital")
    parser.add_argument("--out", required=True)
    parser.add_argument("--decode", type=int, default=0)
    args = parser.parse_args()

    with open(os.path.join(HERE, "..", "fixtures", "llamacpp", "greedy.json")) as f:
        fixture = json.load(f)
    row = next(p for p in fixture["prompts"] if p["name"] == args.prompt)

    recorder = Recorder()
    init = llama_cpp.llama_cpp.llama_init_from_model

    def init_with_callback(model, params):
        params.cb_eval = recorder.callback
        params.cb_eval_user_data = None
        return init(model, params)

    llama_cpp.llama_cpp.llama_init_from_model = init_with_callback
    # The settings of make_llamacpp_fixtures.py.
    llm = Llama(model_path=args.model, n_ctx=2048, n_threads=2,
                n_threads_batch=2, logits_all=True, seed=1234, verbose=False,
                type_k=llama_cpp.GGML_TYPE_F32, type_v=llama_cpp.GGML_TYPE_F32)
    llm.reset()
    llm.eval(row["prompt_ids"])
    for i, token in enumerate(row["generated_ids"][: args.decode]):
        recorder.prefix = f"d{i}/"
        recorder.count = 0
        llm.eval([token])
    np.savez(args.out, prompt_ids=np.array(row["prompt_ids"]), **recorder.tensors)
    print(f"wrote {args.out}: {len(recorder.tensors)} tensors")


if __name__ == "__main__":
    sys.exit(main())
