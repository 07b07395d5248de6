#!/usr/bin/env python3
"""Distils a small draft model for speculative decoding from SmolLM2-135M-Instruct.

Runs on the GPU machine (torch, transformers, safetensors, numpy; no network):

  python3 scripts/distill_draft.py --gguf /tmp/smollm2.gguf --out $OUT/draft

1. The teacher comes from the Q4_1 GGUF (the file kiln's tests use): its
   Q4_1 / Q8_0 / F32 tensors are dequantized here with NumPy (no gguf
   package there), q/k rows put back from llama.cpp's RoPE permutation into
   Hugging Face's order, and loaded into transformers' LlamaForCausalLM.
2. Prompts are drawn from the docstrings of the Python standard library of
   the interpreter that runs this (Debian/Ubuntu ship it as
   libpython3.X-stdlib; the script prints the version it read), wrapped in
   SmolLM2's chat template as requests of three kinds: explain, summarise,
   rewrite. The teacher continues each (sampled at temperature 0.7, so the
   draft sees the teacher's own text, which is what it will be asked to
   predict).
3. The draft: a SmolLM2-shaped Llama of --layers layers at --hidden width,
   tied embeddings initialised from the teacher's projected onto their top
   --hidden principal directions (the checkpoint must stay under 60 MB:
   the 49152 x 576 teacher embedding alone is 57 MB in bf16). Trained with
   the KL divergence to the teacher's next-token distribution at every
   position of prompt and answer (soft targets at temperature 1), AdamW,
   cosine schedule, fixed seed.
4. Written as a Hugging Face checkpoint directory kiln compiles: config.json,
   model.safetensors (bf16), tokenizer.json and tokenizer_config.json
   rebuilt from the GGUF's tokenizer metadata (the same tokens, merges and
   chat template), generation_config.json, and distill.json with the
   settings, the corpus and the losses.
"""

import argparse
import inspect
import json
import math
import os
import pkgutil
import random
import struct
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

# --- GGUF ---------------------------------------------------------------------

GGUF_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
GGML_F32, GGML_F16, GGML_Q4_1, GGML_Q8_0 = 0, 1, 3, 8


class Gguf:
    """The metadata and tensors of a GGUF v2/v3 file (the types SmolLM2's Q4_1 file holds)."""

    def __init__(self, path):
        self.data = np.memmap(path, dtype=np.uint8, mode="r")
        self.pos = 0
        if bytes(self.data[:4]) != b"GGUF":
            sys.exit(f"{path}: not a GGUF file")
        self.pos = 4
        version = self._read("<I")
        if version not in (2, 3):
            sys.exit(f"{path}: GGUF version {version}, expected 2 or 3")
        n_tensors, n_kv = self._read("<Q"), self._read("<Q")
        self.meta = {}
        for _ in range(n_kv):
            key = self._string()
            self.meta[key] = self._value(self._read("<I"))
        infos = []
        for _ in range(n_tensors):
            name = self._string()
            dims = [self._read("<Q") for _ in range(self._read("<I"))]
            infos.append((name, dims, self._read("<I"), self._read("<Q")))
        align = int(self.meta.get("general.alignment", 32))
        start = (self.pos + align - 1) // align * align
        self.tensors = {name: (dims, kind, start + offset) for name, dims, kind, offset in infos}

    def _read(self, fmt):
        size = struct.calcsize(fmt)
        (value,) = struct.unpack(fmt, bytes(self.data[self.pos : self.pos + size]))
        self.pos += size
        return value

    def _string(self):
        n = self._read("<Q")
        text = bytes(self.data[self.pos : self.pos + n]).decode("utf-8", errors="replace")
        self.pos += n
        return text

    def _value(self, kind):
        if kind == 8:
            return self._string()
        if kind == 9:
            item, n = self._read("<I"), self._read("<Q")
            if item in GGUF_SCALAR and item != 7:
                dtype = np.dtype(GGUF_SCALAR[item])
                values = np.frombuffer(bytes(self.data[self.pos : self.pos + n * dtype.itemsize]), dtype=dtype)
                self.pos += n * dtype.itemsize
                return values.tolist()
            return [self._value(item) for _ in range(n)]
        return self._read(GGUF_SCALAR[kind])

    def tensor(self, name):
        """The tensor as float32, in PyTorch's [rows, cols] order (GGUF lists dims innermost first)."""
        dims, kind, offset = self.tensors[name]
        count = int(np.prod(dims))
        shape = tuple(reversed(dims))
        if kind == GGML_F32:
            return np.frombuffer(self.data, np.float32, count, offset).reshape(shape).copy()
        if kind == GGML_F16:
            return np.frombuffer(self.data, np.float16, count, offset).astype(np.float32).reshape(shape)
        blocks = count // 32
        if kind == GGML_Q4_1:
            # Block of 32: f16 scale d, f16 minimum m, 16 bytes of nibbles;
            # byte j holds element j (low nibble) and j + 16 (high): x = d q + m.
            raw = np.frombuffer(self.data, np.uint8, blocks * 20, offset).reshape(blocks, 20)
            d = raw[:, 0:2].copy().view(np.float16).astype(np.float32)
            m = raw[:, 2:4].copy().view(np.float16).astype(np.float32)
            qs = raw[:, 4:20]
            q = np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.float32)
            return (d * q + m).reshape(shape)
        if kind == GGML_Q8_0:
            # Block of 32: f16 scale d, 32 int8: x = d q.
            raw = np.frombuffer(self.data, np.uint8, blocks * 34, offset).reshape(blocks, 34)
            d = raw[:, 0:2].copy().view(np.float16).astype(np.float32)
            q = raw[:, 2:34].copy().view(np.int8).astype(np.float32)
            return (d * q).reshape(shape)
        sys.exit(f"tensor {name}: GGML type {kind} is not one this script dequantizes (F32, F16, Q4_1, Q8_0)")


def unpermute(w, heads):
    """llama.cpp's converter interleaves each head's RoPE halves; Hugging Face keeps them apart."""
    rows = w.shape[0]
    return w.reshape(heads, rows // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def teacher_config(g):
    from transformers import LlamaConfig

    a = "llama."
    hidden = g.meta[a + "embedding_length"]
    heads = g.meta[a + "attention.head_count"]
    return LlamaConfig(
        vocab_size=len(g.meta["tokenizer.ggml.tokens"]),
        hidden_size=hidden,
        intermediate_size=g.meta[a + "feed_forward_length"],
        num_hidden_layers=g.meta[a + "block_count"],
        num_attention_heads=heads,
        num_key_value_heads=g.meta[a + "attention.head_count_kv"],
        head_dim=hidden // heads,
        max_position_embeddings=g.meta[a + "context_length"],
        rms_norm_eps=g.meta[a + "attention.layer_norm_rms_epsilon"],
        # transformers 5 reads rope_parameters, earlier ones rope_theta.
        rope_theta=g.meta[a + "rope.freq_base"],
        rope_parameters={"rope_type": "default", "rope_theta": g.meta[a + "rope.freq_base"]},
        tie_word_embeddings="output.weight" not in g.tensors,
        bos_token_id=g.meta.get("tokenizer.ggml.bos_token_id"),
        eos_token_id=g.meta.get("tokenizer.ggml.eos_token_id"),
        pad_token_id=g.meta.get("tokenizer.ggml.padding_token_id"),
    )


def teacher_state(g, config):
    names = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
             "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
             "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm"}
    state = {"model.embed_tokens.weight": g.tensor("token_embd.weight"),
             "model.norm.weight": g.tensor("output_norm.weight")}
    if "output.weight" in g.tensors:
        state["lm_head.weight"] = g.tensor("output.weight")
    for i in range(config.num_hidden_layers):
        for short, hf in names.items():
            w = g.tensor(f"blk.{i}.{short}.weight")
            if short == "attn_q":
                w = unpermute(w, config.num_attention_heads)
            elif short == "attn_k":
                w = unpermute(w, config.num_key_value_heads)
            state[f"model.layers.{i}.{hf}.weight"] = w
    return {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in state.items()}


# --- Tokenizer ----------------------------------------------------------------


def tokenizer_files(g, out):
    """tokenizer.json and tokenizer_config.json from the GGUF's tokenizer metadata."""
    tokens = g.meta["tokenizer.ggml.tokens"]
    types = g.meta.get("tokenizer.ggml.token_type", [1] * len(tokens))
    merges = g.meta.get("tokenizer.ggml.merges", [])
    special = [i for i, t in enumerate(types) if t == 3]  # control tokens
    bos = g.meta.get("tokenizer.ggml.bos_token_id")
    eos = g.meta.get("tokenizer.ggml.eos_token_id")
    tokenizer = {
        "version": "1.0",
        "added_tokens": [{"id": i, "content": tokens[i], "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True} for i in special],
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": True},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": {t: i for i, t in enumerate(tokens)}, "merges": merges},
    }
    with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer, f, ensure_ascii=False)
    config = {"tokenizer_class": "GPT2Tokenizer", "model_max_length": 8192, "add_prefix_space": False,
              "bos_token": tokens[bos] if bos is not None else None,
              "eos_token": tokens[eos] if eos is not None else None,
              "chat_template": g.meta.get("tokenizer.chat_template")}
    with open(os.path.join(out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False, indent=2)


def load_tokenizer(out):
    """transformers' tokenizer over the files just written (tokenizers-backed, as in 4.x's fast classes)."""
    try:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(out)
    except Exception as e:  # an older or newer class layout: the tokenizer.json alone
        print(f"[distill] AutoTokenizer: {e}; loading tokenizer.json directly", flush=True)
        from transformers import PreTrainedTokenizerFast

        tok = PreTrainedTokenizerFast(tokenizer_file=os.path.join(out, "tokenizer.json"))
    config = json.load(open(os.path.join(out, "tokenizer_config.json"), encoding="utf-8"))
    tok.bos_token, tok.eos_token = config["bos_token"], config["eos_token"]
    tok.pad_token = config["eos_token"]
    tok.chat_template = config["chat_template"]
    return tok


# --- Corpus -------------------------------------------------------------------

STDLIB_MODULES = [
    "argparse", "array", "asyncio", "base64", "bisect", "calendar", "collections", "concurrent.futures",
    "configparser", "contextlib", "copy", "csv", "dataclasses", "datetime", "decimal", "difflib", "email",
    "enum", "fractions", "functools", "glob", "gzip", "hashlib", "heapq", "hmac", "html", "http.client",
    "inspect", "io", "ipaddress", "itertools", "json", "logging", "lzma", "math", "mimetypes", "operator",
    "os", "pathlib", "pickle", "platform", "pprint", "queue", "random", "re", "sched", "secrets", "selectors",
    "shelve", "shlex", "shutil", "signal", "socket", "sqlite3", "statistics", "string", "struct", "subprocess",
    "tarfile", "tempfile", "textwrap", "threading", "timeit", "tokenize", "traceback", "types", "typing",
    "unittest", "urllib.parse", "uuid", "warnings", "weakref", "xml.etree.ElementTree", "zipfile", "zlib",
]

ASKS = [
    "Explain what this part of the Python standard library does, in plain words:\n\n{doc}",
    "Summarise the following documentation in a few sentences.\n\n{doc}",
    "Rewrite this documentation as a short, friendly tutorial with an example:\n\n{doc}",
    "What would a beginner need to know about the following? Answer briefly.\n\n{doc}",
]


def stdlib_docstrings(min_chars=200, max_chars=1200):
    """Docstrings of the standard library's public modules, classes and functions, cut at a paragraph."""
    import importlib

    docs = []
    for name in STDLIB_MODULES:
        try:
            module = importlib.import_module(name)
        except Exception:
            continue
        members = [module] + [v for k, v in sorted(vars(module).items()) if not k.startswith("_")
                              and (inspect.isclass(v) or inspect.isfunction(v) or inspect.isbuiltin(v))]
        for obj in members:
            doc = inspect.getdoc(obj)
            if not doc or len(doc) < min_chars:
                continue
            if len(doc) > max_chars:
                cut = doc.rfind("\n\n", 0, max_chars)
                doc = doc[: cut if cut > min_chars else max_chars]
            docs.append(doc)
    return sorted(set(docs))


# --- Distillation -------------------------------------------------------------


def rope_base(config):
    """The RoPE base of a config from transformers 4 (rope_theta) or 5 (rope_parameters)."""
    params = getattr(config, "rope_parameters", None)
    if isinstance(params, dict) and "rope_theta" in params:
        return params["rope_theta"]
    return config.rope_theta


def student_from(teacher, layers, hidden, heads, kv_heads, ffn):
    from transformers import LlamaConfig, LlamaForCausalLM

    t = teacher.config
    config = LlamaConfig(
        vocab_size=t.vocab_size, hidden_size=hidden, intermediate_size=ffn, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=hidden // heads,
        max_position_embeddings=t.max_position_embeddings, rms_norm_eps=t.rms_norm_eps,
        rope_theta=rope_base(t), rope_parameters={"rope_type": "default", "rope_theta": rope_base(t)},
        tie_word_embeddings=True, bos_token_id=t.bos_token_id, eos_token_id=t.eos_token_id,
        pad_token_id=t.pad_token_id, torch_dtype="bfloat16")
    student = LlamaForCausalLM(config)
    # Tied embeddings: the teacher's, on their top `hidden` principal
    # directions (exactly the teacher's when the widths agree).
    e = teacher.model.embed_tokens.weight.detach().float()
    if hidden == e.shape[1]:
        init = e.clone()
    else:
        _, _, v = torch.linalg.svd(e - e.mean(0), full_matrices=False)
        init = e @ v[:hidden].T
        init *= e.norm(dim=1).mean() / init.norm(dim=1).mean()
    with torch.no_grad():
        student.model.embed_tokens.weight.copy_(init)
    return student


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--gguf", required=True, help="SmolLM2-135M-Instruct.Q4_1.gguf")
    p.add_argument("--out", required=True, help="the checkpoint directory to write")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=384)
    p.add_argument("--heads", type=int, default=6)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--ffn", type=int, default=1024)
    p.add_argument("--samples", type=int, default=3072, help="teacher answers to train on")
    p.add_argument("--answer-tokens", type=int, default=160)
    p.add_argument("--gen-batch", type=int, default=256)
    p.add_argument("--steps", type=int, default=1500)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--time-limit", type=float, default=480, help="seconds for the whole run, training stops early")
    args = p.parse_args()
    start = time.time()
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    os.makedirs(args.out, exist_ok=True)

    from transformers import LlamaForCausalLM

    g = Gguf(args.gguf)
    config = teacher_config(g)
    teacher = LlamaForCausalLM(config)
    missing, unexpected = teacher.load_state_dict(teacher_state(g, config), strict=False)
    missing = [k for k in missing if not (k == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or unexpected:
        sys.exit(f"teacher weights: missing {missing}, unexpected {unexpected}")
    teacher.tie_weights()
    teacher = teacher.to(device, torch.bfloat16).eval()
    tokenizer_files(g, args.out)
    tok = load_tokenizer(args.out)
    print(f"[distill] teacher {config.num_hidden_layers} layers x {config.hidden_size} loaded "
          f"({time.time() - start:.0f}s)", flush=True)

    # Prompts: stdlib docstrings asked about in the chat template, left-padded.
    docs = stdlib_docstrings()
    corpus = f"Python {sys.version.split()[0]} standard library docstrings ({len(docs)} of them)"
    print(f"[distill] corpus: {corpus}", flush=True)
    rng = random.Random(args.seed)
    prompts = []
    for i in range(args.samples):
        ask = ASKS[i % len(ASKS)].format(doc=rng.choice(docs))
        prompts.append(tok.apply_chat_template([{"role": "user", "content": ask}], tokenize=False,
                                               add_generation_prompt=True))
    tok.padding_side = "left"
    sequences = []
    with torch.no_grad():
        for b in range(0, len(prompts), args.gen_batch):
            batch = tok(prompts[b : b + args.gen_batch], return_tensors="pt", padding=True,
                        add_special_tokens=False).to(device)
            out = teacher.generate(**batch, max_new_tokens=args.answer_tokens, do_sample=True, temperature=0.7,
                                   top_p=0.95, pad_token_id=tok.pad_token_id)
            prompt_len = batch["input_ids"].shape[1]
            for row, mask in zip(out, batch["attention_mask"]):
                # Without the left padding, and without what follows the
                # answer's end-of-sequence token (padding too).
                pad = int((mask == 0).sum())
                ends = (row[prompt_len:] == tok.eos_token_id).nonzero()
                end = prompt_len + int(ends[0]) + 1 if len(ends) else len(row)
                sequences.append(row[pad:end].cpu())
    lengths = [len(r) for r in sequences]
    print(f"[distill] {len(sequences)} teacher answers, {np.mean(lengths):.0f} tokens on average, "
          f"{max(lengths)} at most ({time.time() - start:.0f}s)", flush=True)

    student = student_from(teacher, args.layers, args.hidden, args.heads, args.kv_heads, args.ffn).to(device)
    n_params = sum(p.numel() for p in student.parameters())
    print(f"[distill] student {args.layers} layers x {args.hidden}: {n_params / 1e6:.1f}M parameters", flush=True)
    opt = torch.optim.AdamW(student.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.01)
    warmup = max(1, args.steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(s, args.steps) / args.steps)))
    pad = tok.pad_token_id
    losses = []
    held_out = sequences[-64:]  # for the agreement figure, never trained on
    order = list(range(len(sequences) - len(held_out)))
    student.train()
    step = 0
    while step < args.steps and time.time() - start < args.time_limit:
        rng.shuffle(order)
        for b in range(0, len(order) - args.batch + 1, args.batch):
            rows = [sequences[i] for i in order[b : b + args.batch]]
            length = max(len(r) for r in rows)
            ids = torch.full((len(rows), length), pad, dtype=torch.long)
            mask = torch.zeros((len(rows), length), dtype=torch.long)
            for i, r in enumerate(rows):
                ids[i, : len(r)] = r
                mask[i, : len(r)] = 1
            ids, mask = ids.to(device), mask.to(device)
            with torch.no_grad():
                target = teacher(input_ids=ids, attention_mask=mask).logits.float()
            with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
                logits = student(input_ids=ids, attention_mask=mask).logits.float()
            # KL(teacher || student) at every real position.
            kl = F.kl_div(F.log_softmax(logits, -1), F.log_softmax(target, -1), log_target=True,
                          reduction="none").sum(-1)
            loss = (kl * mask).sum() / mask.sum()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(student.parameters(), 1.0)
            opt.step()
            sched.step()
            losses.append(loss.item())
            step += 1
            if step in (1, 10) or step % 50 == 0:
                print(f"[distill] step {step}: KL {np.mean(losses[-100:]):.3f} ({time.time() - start:.0f}s)",
                      flush=True)
            if step >= args.steps or time.time() - start >= args.time_limit:
                break

    # Greedy agreement on held-out answers: how often the draft's argmax is the teacher's.
    student.eval()
    agree = total = 0
    with torch.no_grad():
        for r in held_out:
            ids = r.unsqueeze(0).to(device)
            t = teacher(input_ids=ids).logits.argmax(-1)
            s = student(input_ids=ids).logits.argmax(-1)
            agree += int((t == s).sum())
            total += t.numel()
    print(f"[distill] greedy agreement with the teacher: {agree / total:.3f} ({len(held_out)} held-out answers)",
          flush=True)

    student.to(torch.bfloat16).save_pretrained(args.out)
    with open(os.path.join(args.out, "distill.json"), "w") as f:
        json.dump({"teacher": os.path.basename(args.gguf), "corpus": corpus, "seed": args.seed, "steps": step,
                   "layers": args.layers, "hidden": args.hidden, "heads": args.heads, "kv_heads": args.kv_heads,
                   "ffn": args.ffn, "samples": len(sequences), "answer_tokens": args.answer_tokens,
                   "final_kl": float(np.mean(losses[-100:])) if losses else None,
                   "greedy_agreement": agree / total, "seconds": time.time() - start}, f, indent=2)
    size = sum(os.path.getsize(os.path.join(args.out, n)) for n in os.listdir(args.out))
    print(f"[distill] wrote {args.out} ({size / 1e6:.1f} MB, {time.time() - start:.0f}s)", flush=True)


if __name__ == "__main__":
    main()
