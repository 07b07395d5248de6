#!/usr/bin/env python3
"""The greedy prompts of a tiny state-space fixture's reference.json as `kiln
generate` requests, and the check of its answers against the reference.

  ssm_reference_greedy.py requests FIXTURE        JSONL requests on stdout
  ssm_reference_greedy.py check FIXTURE OUT.jsonl  "greedy K/N equal" (+ the first difference)

The fixtures' tokenizer (test/gpu/write_byte_tokenizer.py) maps id b < 127
to byte b and id 127 to its end-of-text token, so an answer's text, as
bytes with that token as byte 127, is its token ids.
"""
import json
import sys


def greedy_cases(fixture):
    with open(f"{fixture}/reference.json") as f:
        return json.load(f)["greedy"]


def main():
    mode, fixture = sys.argv[1], sys.argv[2]
    cases = greedy_cases(fixture)
    if mode == "requests":
        for i, case in enumerate(cases):
            print(json.dumps({"id": i, "prompt": case["prompt"], "max_tokens": len(case["tokens"]),
                              "ignore_eos": True}))
        return
    with open(sys.argv[3]) as f:
        answers = [json.loads(line) for line in f if line.strip()]
    equal = 0
    for case, answer in zip(cases, answers):
        text = answer["choices"][0]["text"]
        ids = list(text.replace("<|end_of_text|>", "\x7f").encode("utf-8"))
        if ids == case["tokens"]:
            equal += 1
        else:
            print(f"request {answer['id']}: {ids} != reference {case['tokens']}")
    print(f"greedy {equal}/{len(cases)} equal")


if __name__ == "__main__":
    main()
