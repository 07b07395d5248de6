#!/usr/bin/env python3
"""Writes a byte-level BPE tokenizer.json (no merges) for a random-weight checkpoint.

A random checkpoint made on the GPU machine has no tokenizer, yet `kiln run`
and `kiln bench` open models through the engine, which needs one. This one
maps every byte to its own token (GPT-2's byte-to-unicode alphabet), so any
ASCII prompt encodes; the last vocabulary id is the end-of-text token and
the ids between are unused placeholders.
Benchmarks only need valid ids, not a trained vocabulary.

  write_byte_tokenizer.py DIR     (reads DIR/config.json for vocab_size)
"""
import json
import os
import sys


def byte_alphabet():
    """GPT-2's reversible byte -> printable unicode character table."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def main():
    directory = sys.argv[1]
    with open(os.path.join(directory, "config.json")) as f:
        vocab_size = json.load(f)["vocab_size"]
    alphabet = byte_alphabet()
    count = min(256, vocab_size - 1)  # the last id is the end-of-text token
    vocab = {alphabet[b]: b for b in range(count)}
    eos_id = vocab_size - 1
    # Ids must be dense: fill the gap between the bytes and end-of-text with
    # placeholder tokens no merge ever produces.
    for i in range(count, eos_id):
        vocab[f"<unused{i}>"] = i
    tokenizer = {
        "version": "1.0",
        "added_tokens": [{"id": eos_id, "content": "<|end_of_text|>", "single_word": False,
                          "lstrip": False, "rstrip": False, "normalized": False, "special": True}],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "vocab": vocab, "merges": []},
    }
    with open(os.path.join(directory, "tokenizer.json"), "w") as f:
        json.dump(tokenizer, f)
    with open(os.path.join(directory, "tokenizer_config.json"), "w") as f:
        json.dump({"eos_token": "<|end_of_text|>"}, f)


if __name__ == "__main__":
    main()
