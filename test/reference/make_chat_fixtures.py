#!/usr/bin/env python3
"""Renders real chat templates with jinja2 (as Hugging Face's
apply_chat_template does) and writes the expected prompts for kiln's
ChatTemplate tests to runtime/chat/testdata/chat_templates.json.

Templates: SmolLM2-135M-Instruct's, read from its GGUF
(tokenizer.chat_template); Meta-Llama-3-8B-Instruct's and
Mistral-7B-Instruct-v0.1's, copied below from their tokenizer_config.json.

Run:  python3 test/reference/make_chat_fixtures.py [--model PATH]
Needs: pip install jinja2 gguf
"""

import argparse
import json
import os

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment
from gguf import GGUFReader

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "..", "runtime", "chat", "testdata",
                   "chat_templates.json")
DEFAULT_MODEL = os.path.expanduser(
    "~/.cache/kiln/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")

LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + "
    "'<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}"
    "{% if loop.index0 == 0 %}{% set content = bos_token + content %}"
    "{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")

MISTRAL_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate "
    "user/assistant/user/assistant/...') }}{% endif %}"
    "{% if message['role'] == 'user' %}"
    "{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}"
    "{{ message['content'] + eos_token}}"
    "{% else %}{{ raise_exception('Only user and assistant roles are "
    "supported!') }}{% endif %}{% endfor %}")

CONVERSATIONS = {
    "empty": [],
    "single_user": [("user", "What is the capital of France?")],
    "with_system": [("system", "You are terse."), ("user", "Hi")],
    "multi_turn": [("user", "Hi!"), ("assistant", "Hello! How can I help?"),
                   ("user", "Tell me a joke.")],
    "whitespace": [("user", "  padded question \n\n"),
                   ("assistant", "\tanswer  "), ("user", "next")],
    "unicode": [("user", "Café? 你好 😀\nline two")],
    "system_then_turns": [("system", "Be kind."), ("user", "a"),
                          ("assistant", "b"), ("user", "c")],
}


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def render(source, messages, add_generation_prompt, bos, eos):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    return env.from_string(source).render(
        messages=[{"role": r, "content": c} for r, c in messages],
        add_generation_prompt=add_generation_prompt,
        bos_token=bos, eos_token=eos)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default=DEFAULT_MODEL)
    args = parser.parse_args()
    reader = GGUFReader(args.model)
    field = reader.fields["tokenizer.chat_template"]
    smollm2 = bytes(field.parts[field.data[0]]).decode("utf-8")

    templates = [
        ("smollm2", smollm2, "<|im_start|>", "<|im_end|>", "chatml"),
        ("llama3", LLAMA3_TEMPLATE, "<|begin_of_text|>", "<|eot_id|>", "llama3"),
        ("mistral", MISTRAL_TEMPLATE, "<s>", "</s>", "mistral"),
    ]
    out = {"generator": "test/reference/make_chat_fixtures.py",
           "jinja2_version": jinja2.__version__, "templates": []}
    for name, source, bos, eos, family in templates:
        cases = []
        for conv_name, messages in CONVERSATIONS.items():
            for gen in (False, True):
                case = {"conversation": conv_name,
                        "messages": [{"role": r, "content": c}
                                     for r, c in messages],
                        "add_generation_prompt": gen}
                try:
                    case["expected"] = render(source, messages, gen, bos, eos)
                except jinja2.exceptions.TemplateError as e:
                    case["error"] = str(e)
                cases.append(case)
        out["templates"].append({"name": name, "family": family,
                                 "source": source, "bos": bos, "eos": eos,
                                 "cases": cases})
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
