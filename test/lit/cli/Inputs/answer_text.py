"""Prints the text of one answer of a `kiln generate` output, as `kiln run`
prints its answer (the text, then a newline), to diff the two.

usage: answer_text.py OUT.jsonl ID [CHOICE]
"""
import json
import sys

path, wanted = sys.argv[1], sys.argv[2]
choice = int(sys.argv[3]) if len(sys.argv) > 3 else 0
for line in open(path, encoding="utf-8"):
    answer = json.loads(line)
    if str(answer.get("id")) == wanted:
        sys.stdout.write(answer["choices"][choice]["text"] + "\n")
        sys.exit(0)
sys.exit(f"answer_text.py: no answer with id {wanted} in {path}")
