"""kiln serve's log probabilities, tools and token ids, end to end on SmolLM2
(CPU), through the official `openai` client and plain HTTP.

- logprobs: every generated token's logprob and top alternatives equal a
  NumPy log-softmax of the CPU executor's own logits for that position
  (kiln_dump_cpu_steps runs the prompt and the generated tokens through the
  executor alone and writes its logits rows), greedy and sampled, streamed
  and not, in the completions (legacy) and chat forms.
- tools: served with --chat-template (Qwen2.5's template, which writes
  tools), the tools of a chat request are in the rendered prompt
  (/tokenize then /detokenize) where the template writes them, in the
  order they were sent; tool and assistant-tool-call messages are taken;
  tool_choice "required" is refused naming the value.

    serve_features_test.py --kiln build/bin/kiln --model ARTIFACT --dump-steps build/bin/kiln_dump_cpu_steps
        --chat-template runtime/chat/testdata/templates/qwen2.5.jinja
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kiln_server import KilnServer  # noqa: E402

try:
    import openai
except ImportError:  # scripts/setup.sh installs it
    sys.exit("serve_features_test.py needs the openai package (pip install openai; scripts/setup.sh does)")

ARGS = None
MODEL = "smollm2"
PROMPT_IDS = [504, 3156, 282, 4649, 314, 1345, 28, 253]  # any ids of the vocabulary
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


def executor_logprobs(prompt, generated):
    """NumPy log-softmax of the CPU executor's logits before each generated
    token: [len(generated), vocab] float64."""
    with tempfile.TemporaryDirectory() as out:
        ids = lambda xs: ",".join(str(x) for x in xs)  # noqa: E731
        args = [ARGS.dump_steps, ARGS.model, out, ids(prompt)]
        if len(generated) > 1:
            args.append(ids(generated[:-1]))
        subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
        rows = []
        for step in ["p"] + [f"d{i}" for i in range(len(generated) - 1)]:
            logits_file = sorted(glob.glob(os.path.join(out, step, "*_1x*.f32")))[-1]  # the last step: logits
            logits = np.fromfile(logits_file, dtype="<f4").astype(np.float64)
            shifted = logits - logits.max()
            rows.append(shifted - np.log(np.exp(shifted).sum()))
        return np.stack(rows)


class LogprobsTest(unittest.TestCase):
    server = None

    @classmethod
    def setUpClass(cls):
        cls.server = KilnServer(ARGS.kiln, ARGS.model, "--model-name", MODEL, "--threads", "2")
        cls.client = openai.OpenAI(base_url=f"http://127.0.0.1:{cls.server.port}/v1", api_key="none",
                                   max_retries=0, timeout=120)
        cls.tokens = {}  # id -> the bytes it adds, from answers with token ids

    @classmethod
    def tearDownClass(cls):
        code = cls.server.stop()
        if code != 0:
            print("\n".join(cls.server.log), file=sys.stderr)
        assert code == 0, f"kiln serve exited {code}"

    def assertMatchesExecutor(self, generated, chosen, top):
        """chosen[i]: the logprob of generated[i]; top[i]: [(token bytes, logprob)] most likely first."""
        reference = executor_logprobs(PROMPT_IDS, generated)
        for i, token in enumerate(generated):
            self.assertAlmostEqual(chosen[i], reference[i][token], delta=2e-3, msg=f"token {i}")
            expected_ids = np.argsort(-reference[i], kind="stable")[:len(top[i])]
            self.assertEqual([round(lp, 2) for _, lp in top[i]],
                             [round(float(reference[i][t]), 2) for t in expected_ids], f"token {i}")
            for (_, lp), t in zip(top[i], expected_ids):
                self.assertAlmostEqual(lp, reference[i][t], delta=2e-3)

    def test_completions_greedy_matches_numpy(self):
        status, _, body = self.server.request("POST", "/v1/completions", {
            "model": MODEL, "prompt": PROMPT_IDS, "max_tokens": 6, "temperature": 0, "ignore_eos": True,
            "logprobs": 5, "return_token_ids": True})
        body = json.loads(body)
        self.assertEqual(status, 200, body)
        choice = body["choices"][0]
        generated, logprobs = choice["token_ids"], choice["logprobs"]
        self.assertEqual(len(generated), 6)
        self.assertEqual(len(logprobs["tokens"]), 6)
        self.assertEqual("".join(logprobs["tokens"]), choice["text"])
        offsets = [0]
        for token in logprobs["tokens"][:-1]:
            offsets.append(offsets[-1] + len(token))
        self.assertEqual(logprobs["text_offset"], offsets)
        # Greedy: the chosen token is the most likely, and its own map holds it.
        top = [sorted(d.items(), key=lambda kv: -kv[1]) for d in logprobs["top_logprobs"]]
        for i, token in enumerate(logprobs["tokens"]):
            self.assertEqual(top[i][0][0], token)
            self.assertEqual(len(top[i]), 5)
        self.assertMatchesExecutor(generated, logprobs["token_logprobs"], top)

    def test_sampled_logprobs_are_the_raw_distribution(self):
        # Temperature and top-k change what is drawn, not the logprobs reported.
        kwargs = dict(model=MODEL, prompt=PROMPT_IDS, max_tokens=5, temperature=1.7, seed=3, logprobs=3,
                      extra_body={"return_token_ids": True, "ignore_eos": True, "top_k": 40})
        whole = self.client.completions.create(**kwargs)
        choice = whole.choices[0]
        generated = choice.model_extra["token_ids"]
        top = [sorted(d.items(), key=lambda kv: -kv[1]) for d in choice.logprobs.top_logprobs]
        # Each map holds the 3 most likely and the chosen token: its first 3 are the 3 most likely.
        self.assertTrue(all(3 <= len(t) <= 4 for t in top), top)
        self.assertMatchesExecutor(generated, choice.logprobs.token_logprobs, [t[:3] for t in top])
        # Streamed: the same tokens and numbers, chunk by chunk.
        chunks = list(self.client.completions.create(stream=True, **kwargs))
        streamed = [lp for c in chunks if c.choices and c.choices[0].logprobs
                    for lp in c.choices[0].logprobs.token_logprobs]
        self.assertEqual(streamed, choice.logprobs.token_logprobs)
        offsets = [o for c in chunks if c.choices and c.choices[0].logprobs for o in c.choices[0].logprobs.text_offset]
        self.assertEqual(offsets, choice.logprobs.text_offset)

    def test_chat_logprobs(self):
        messages = [{"role": "user", "content": "What is the capital of France?"}]
        whole = self.client.chat.completions.create(model=MODEL, messages=messages, max_tokens=6, temperature=0,
                                                    logprobs=True, top_logprobs=4)
        content = whole.choices[0].logprobs.content
        self.assertEqual(len(content), whole.usage.completion_tokens)
        self.assertEqual("".join(t.token for t in content), whole.choices[0].message.content)
        for t in content:
            self.assertEqual(bytes(t.bytes).decode(errors="replace"), t.token)
            self.assertEqual(len(t.top_logprobs), 4)
            self.assertEqual(t.top_logprobs[0].token, t.token)  # greedy
            self.assertAlmostEqual(t.top_logprobs[0].logprob, t.logprob, places=6)
            self.assertLessEqual(t.logprob, 0)
            probabilities = [np.exp(x.logprob) for x in t.top_logprobs]
            self.assertEqual(probabilities, sorted(probabilities, reverse=True))
            self.assertLessEqual(sum(probabilities), 1 + 1e-5)
        stream = self.client.chat.completions.create(model=MODEL, messages=messages, max_tokens=6, temperature=0,
                                                     logprobs=True, top_logprobs=4, stream=True)
        streamed = [t for chunk in stream for c in chunk.choices if c.logprobs for t in c.logprobs.content]
        self.assertEqual([(t.token, t.logprob) for t in streamed], [(t.token, t.logprob) for t in content])
        # logprobs false (or absent): none.
        plain = self.client.chat.completions.create(model=MODEL, messages=messages, max_tokens=2, temperature=0)
        self.assertIsNone(plain.choices[0].logprobs)

    def test_bad_logprobs(self):
        with self.assertRaises(openai.BadRequestError) as caught:
            self.client.completions.create(model=MODEL, prompt="Hi", max_tokens=2, logprobs=21)
        self.assertEqual(caught.exception.param, "logprobs")
        with self.assertRaises(openai.BadRequestError) as caught:
            self.client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}],
                                                max_tokens=2, top_logprobs=2)
        self.assertEqual(caught.exception.param, "top_logprobs")


class ToolsTest(unittest.TestCase):
    server = None

    @classmethod
    def setUpClass(cls):
        cls.server = KilnServer(ARGS.kiln, ARGS.model, "--model-name", MODEL, "--threads", "2",
                                "--chat-template", ARGS.chat_template)
        cls.client = openai.OpenAI(base_url=f"http://127.0.0.1:{cls.server.port}/v1", api_key="none",
                                   max_retries=0, timeout=120)

    @classmethod
    def tearDownClass(cls):
        code = cls.server.stop()
        if code != 0:
            print("\n".join(cls.server.log), file=sys.stderr)
        assert code == 0, f"kiln serve exited {code}"

    def rendered(self, body):
        status, _, tokens = self.server.request("POST", "/tokenize", dict(body, model=MODEL))
        tokens = json.loads(tokens)
        self.assertEqual(status, 200, tokens)
        status, _, text = self.server.request("POST", "/detokenize", {"model": MODEL, "tokens": tokens["tokens"]})
        self.assertEqual(status, 200, text)
        return tokens["count"], json.loads(text)["prompt"]

    def test_tools_reach_the_template(self):
        messages = [{"role": "user", "content": "What is the weather in Paris?"}]
        count, prompt = self.rendered({"messages": messages, "tools": TOOLS})
        # Where Qwen2.5's template writes them: in <tools>, one JSON object a
        # line, keys in the order sent (transformers' tojson).
        self.assertIn("<tools>\n" + json.dumps(TOOLS[0], ensure_ascii=False) + "\n</tools>", prompt)
        self.assertTrue(prompt.endswith("<|im_start|>assistant\n"), prompt)
        _, without = self.rendered({"messages": messages})
        self.assertNotIn("<tools>", without)
        # The request itself renders the same prompt.
        answer = self.client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS, max_tokens=8,
                                                     temperature=0)
        self.assertEqual(answer.usage.prompt_tokens, count)
        self.assertIn(answer.choices[0].finish_reason, ("stop", "length", "tool_calls"))
        if answer.choices[0].finish_reason != "tool_calls":
            self.assertIsInstance(answer.choices[0].message.content, str)

    def test_tool_messages_and_choice(self):
        messages = [{"role": "user", "content": "What is the weather in Paris?"},
                    {"role": "assistant", "content": None, "tool_calls": [{
                        "id": "call_1", "type": "function",
                        "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
                    {"role": "tool", "tool_call_id": "call_1", "content": "18 C, sunny"}]
        _, prompt = self.rendered({"messages": messages, "tools": TOOLS})
        self.assertIn('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>', prompt)
        self.assertIn("<tool_response>\n18 C, sunny\n</tool_response>", prompt)
        answer = self.client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS,
                                                     tool_choice="none", max_tokens=8, temperature=0)
        self.assertIsNone(answer.choices[0].message.tool_calls)
        stream = self.client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS, max_tokens=8,
                                                     temperature=0, stream=True)
        finishes = [c.finish_reason for chunk in stream for c in chunk.choices if c.finish_reason]
        self.assertEqual(len(finishes), 1)
        with self.assertRaises(openai.BadRequestError) as caught:
            self.client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS,
                                                tool_choice="required", max_tokens=2)
        self.assertEqual(caught.exception.param, "tool_choice")
        self.assertIn('"required"', caught.exception.message)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--kiln", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--dump-steps", required=True)
    parser.add_argument("--chat-template", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0], "-v", *rest])
