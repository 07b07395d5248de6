"""The Python module on the SmolLM2 artifact, on the CPU: greedy generate
is `kiln run`'s greedy answer, streaming concatenates to the same text, and
bad parameters raise ValueError with the library's message.

    kiln_module_test.py --kiln build/bin/kiln --model ARTIFACT_DIR
(ctest puts the module on PYTHONPATH)."""

import argparse
import subprocess
import sys
import unittest

import kiln

ARGS = None
PROMPT = "Once upon a time"
MAX_TOKENS = 24


class KilnModuleTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.llm = kiln.LLM(ARGS.model, device="cpu", threads=2)

    def test_greedy_generate_is_kiln_runs_answer(self):
        want = subprocess.run(
            [ARGS.kiln, "run", ARGS.model, PROMPT, "--max-tokens", str(MAX_TOKENS), "--device", "cpu", "--quiet"],
            check=True, capture_output=True, text=True).stdout
        got = self.llm.generate(PROMPT, kiln.SamplingParams(max_tokens=MAX_TOKENS))
        self.assertTrue(got.text.strip())
        self.assertEqual(got.text.rstrip("\n"), want.rstrip("\n"))
        self.assertGreater(len(got.tokens), 0)
        self.assertIn(got.finish_reason, ("length", "eos"))

    def test_stream_concatenates_to_generate(self):
        params = kiln.SamplingParams(max_tokens=16, ignore_eos=True)
        batch = self.llm.generate([PROMPT, "1, 2, 3, 4,"], params)
        self.assertEqual(len(batch), 2)
        stream = self.llm.stream(PROMPT, params)
        pieces = list(stream)
        self.assertGreater(len(pieces), 1)
        self.assertEqual("".join(pieces), batch[0].text)
        self.assertEqual(stream.finish_reason, "length")
        self.assertEqual(self.llm.metrics()["requests"], 0)

    def test_chat_messages(self):
        out = self.llm.generate([{"role": "user", "content": "Name a primary color."}],
                                kiln.SamplingParams(max_tokens=8))
        self.assertTrue(out.text)

    def test_bad_params_raise_value_error(self):
        with self.assertRaisesRegex(ValueError, "temperature"):
            self.llm.generate(PROMPT, kiln.SamplingParams(temperature=-1.0))
        with self.assertRaisesRegex(ValueError, "top_p"):
            list(self.llm.stream(PROMPT, kiln.SamplingParams(top_p=2.0)))
        with self.assertRaisesRegex(ValueError, "max_tokens"):
            self.llm.generate([PROMPT], kiln.SamplingParams(max_tokens=0))
        self.assertEqual(self.llm.metrics()["requests"], 0)

    def test_bad_model_raises(self):
        with self.assertRaisesRegex(RuntimeError, "/nonexistent"):
            kiln.LLM("/nonexistent/artifact", device="cpu")
        with self.assertRaisesRegex(ValueError, "device"):
            kiln.LLM(ARGS.model, device="tpu")

    def test_generate_does_not_wait_for_streams(self):
        stream = self.llm.stream(PROMPT, kiln.SamplingParams(max_tokens=400, ignore_eos=True))
        first = next(stream)
        self.llm.generate("Hi", kiln.SamplingParams(max_tokens=2))
        self.assertEqual(self.llm.metrics()["running"], 1)
        stream.cancel()
        rest = "".join(stream)
        self.assertEqual(stream.finish_reason, "cancelled")
        self.assertLess(len(first + rest), 400 * 8)
        self.assertEqual(self.llm.metrics()["requests"], 0)

    def test_dropped_stream_cancels_its_request(self):
        stream = self.llm.stream(PROMPT, kiln.SamplingParams(max_tokens=200, ignore_eos=True))
        next(stream)
        del stream
        self.llm.generate("Hi", kiln.SamplingParams(max_tokens=2))  # steps the cancel through
        metrics = self.llm.metrics()
        self.assertEqual(metrics["running"] + metrics["waiting"], 0)
        self.assertEqual(metrics["requests"], 0)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--kiln", required=True)
    parser.add_argument("--model", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest)
