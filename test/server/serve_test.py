"""kiln serve end to end on SmolLM2 (CPU): every endpoint through the
standard library and the official `openai` client, streamed and not; bad
requests get their 4xx and the server keeps serving; a client that goes
away mid-stream frees its KV blocks; a full queue answers 429; SIGTERM lets
a running stream finish and exits 0.

    serve_test.py --kiln build/bin/kiln --model ARTIFACT_OR_MODEL
"""
import argparse
import http.client
import json
import os
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kiln_server import KilnServer, read_events  # noqa: E402

try:
    import openai
except ImportError:  # scripts/setup.sh installs it
    sys.exit("serve_test.py needs the openai package (pip install openai; scripts/setup.sh does)")

ARGS = None
API_KEY = "test-key"
MODEL = "smollm2"
AUTH = {"Authorization": "Bearer " + API_KEY}


class ServeTest(unittest.TestCase):
    server = None

    @classmethod
    def setUpClass(cls):
        cls.server = KilnServer(ARGS.kiln, ARGS.model, "--model-name", MODEL, "--api-key", API_KEY,
                                "--threads", "2", "--max-messages", "8")
        cls.client = openai.OpenAI(base_url=f"http://127.0.0.1:{cls.server.port}/v1", api_key=API_KEY,
                                   max_retries=0, timeout=120)

    @classmethod
    def tearDownClass(cls):
        code = cls.server.stop()
        if code != 0:
            print("\n".join(cls.server.log), file=sys.stderr)
        assert code == 0, f"kiln serve exited {code}"

    def post(self, path, body, headers=AUTH):
        status, _, data = self.server.request("POST", path, body, headers)
        return status, json.loads(data)

    def assertApiError(self, status, body, expected_status, param=None, code=None, message_part=None):
        self.assertEqual(status, expected_status, body)
        error = body["error"]
        self.assertEqual(set(error), {"message", "type", "param", "code"})
        if param is not None:
            self.assertEqual(error["param"], param)
        if code is not None:
            self.assertEqual(error["code"], code)
        if message_part is not None:
            self.assertIn(message_part, error["message"])

    def assertStillServing(self):
        status, body = self.post("/v1/completions", {"model": MODEL, "prompt": "Hi", "max_tokens": 2})
        self.assertEqual(status, 200, body)

    # --- plain HTTP ---

    def test_health_and_models(self):
        status, _, body = self.server.request("GET", "/health")
        self.assertEqual((status, json.loads(body)), (200, {"status": "ok"}))
        status, _, body = self.server.request("GET", "/v1/models", headers=AUTH)
        models = json.loads(body)
        self.assertEqual(status, 200)
        self.assertEqual(models["object"], "list")
        self.assertEqual([m["id"] for m in models["data"]], [MODEL])
        status, _, body = self.server.request("GET", "/v1/models/" + MODEL, headers=AUTH)
        self.assertEqual((status, json.loads(body)["id"]), (200, MODEL))
        status, _, body = self.server.request("GET", "/v1/models/gpt-4", headers=AUTH)
        self.assertApiError(status, json.loads(body), 404, code="model_not_found")

    def test_completion_fields(self):
        status, body = self.post("/v1/completions", {"model": MODEL, "prompt": "The capital of France is",
                                                     "max_tokens": 8, "temperature": 0, "user": "u"})
        self.assertEqual(status, 200, body)
        self.assertEqual(body["object"], "text_completion")
        self.assertTrue(body["id"].startswith("cmpl-"))
        self.assertEqual(body["model"], MODEL)
        choice = body["choices"][0]
        self.assertEqual(choice["finish_reason"], "length")
        self.assertIn("Paris", choice["text"])
        self.assertEqual(body["usage"]["completion_tokens"], 8)
        self.assertEqual(body["usage"]["total_tokens"], body["usage"]["prompt_tokens"] + 8)

    def test_stop_strings_and_parallel_sampling(self):
        status, body = self.post("/v1/completions", {"model": MODEL, "prompt": "List: 1. red\n2. blue\n3.",
                                                     "max_tokens": 24, "temperature": 0, "stop": ["\n"]})
        self.assertEqual(status, 200, body)
        self.assertEqual(body["choices"][0]["finish_reason"], "stop")
        self.assertNotIn("\n", body["choices"][0]["text"])
        status, body = self.post("/v1/completions", {"model": MODEL, "prompt": "Once upon a time", "n": 3,
                                                     "max_tokens": 6, "temperature": 0.9, "top_p": 0.95,
                                                     "top_k": 50, "min_p": 0.01, "seed": 11,
                                                     "presence_penalty": 0.5, "frequency_penalty": 0.5})
        self.assertEqual(status, 200, body)
        self.assertEqual([c["index"] for c in body["choices"]], [0, 1, 2])
        self.assertEqual(body["usage"]["completion_tokens"], 18)
        # The same seed draws the same completions.
        _, again = self.post("/v1/completions", {"model": MODEL, "prompt": "Once upon a time", "n": 3,
                                                 "max_tokens": 6, "temperature": 0.9, "top_p": 0.95,
                                                 "top_k": 50, "min_p": 0.01, "seed": 11,
                                                 "presence_penalty": 0.5, "frequency_penalty": 0.5})
        self.assertEqual([c["text"] for c in again["choices"]], [c["text"] for c in body["choices"]])

    def test_metrics(self):
        self.assertStillServing()
        values = self.server.metrics()
        for name in ["kiln_queue_depth", "kiln_requests_running", "kiln_kv_blocks_total", "kiln_kv_blocks_free",
                     "kiln_kv_blocks_cached", "kiln_prefix_cache_hit_rate", "kiln_generated_tokens_total",
                     "kiln_time_to_first_token_seconds_count", "kiln_time_per_output_token_seconds_count",
                     'kiln_requests_finished_total{finish_reason="length"}']:
            self.assertIn(name, values)
        self.assertGreater(values["kiln_generated_tokens_total"], 0)
        self.assertGreater(values["kiln_kv_blocks_total"], 0)
        self.assertGreaterEqual(values['kiln_time_to_first_token_seconds_bucket{le="+Inf"}'], 1)

    # --- the official client ---

    def test_openai_completions(self):
        kwargs = dict(model=MODEL, prompt="The three primary colors are", max_tokens=12, temperature=0)
        whole = self.client.completions.create(**kwargs)
        self.assertEqual(whole.choices[0].finish_reason, "length")
        self.assertEqual(whole.usage.completion_tokens, 12)
        streamed = "".join(chunk.choices[0].text for chunk in self.client.completions.create(stream=True, **kwargs)
                           if chunk.choices)
        self.assertEqual(streamed, whole.choices[0].text)

    def test_openai_chat(self):
        messages = [{"role": "system", "content": "You answer in one short sentence."},
                    {"role": "user", "content": "What is the capital of France?"}]
        whole = self.client.chat.completions.create(model=MODEL, messages=messages, max_tokens=16, temperature=0)
        answer = whole.choices[0].message.content
        self.assertEqual(whole.object, "chat.completion")
        self.assertEqual(whole.choices[0].message.role, "assistant")
        self.assertIn("Paris", answer)
        stream = self.client.chat.completions.create(model=MODEL, messages=messages, max_tokens=16, temperature=0,
                                                     stream=True, stream_options={"include_usage": True})
        pieces, finish, usage = [], None, None
        for chunk in stream:
            if chunk.usage:
                usage = chunk.usage
            for choice in chunk.choices:
                pieces.append(choice.delta.content or "")
                finish = choice.finish_reason or finish
        self.assertEqual("".join(pieces), answer)
        self.assertEqual(finish, whole.choices[0].finish_reason)
        self.assertEqual(usage.completion_tokens, whole.usage.completion_tokens)
        # Content as a list of text parts reads as the joined text.
        parts = self.client.chat.completions.create(
            model=MODEL, max_tokens=16, temperature=0,
            messages=[messages[0], {"role": "user", "content": [{"type": "text", "text": "What is the capital "},
                                                                {"type": "text", "text": "of France?"}]}])
        self.assertEqual(parts.choices[0].message.content, answer)

    def test_openai_errors(self):
        with self.assertRaises(openai.NotFoundError) as caught:
            self.client.completions.create(model="gpt-4", prompt="Hi", max_tokens=2)
        self.assertEqual(caught.exception.code, "model_not_found")
        with self.assertRaises(openai.BadRequestError) as caught:
            self.client.completions.create(model=MODEL, prompt="Hi", max_tokens=2, echo=True)
        self.assertEqual(caught.exception.param, "echo")
        self.assertEqual(caught.exception.code, "unsupported_field")
        bad_key = openai.OpenAI(base_url=self.client.base_url, api_key="wrong", max_retries=0)
        with self.assertRaises(openai.AuthenticationError):
            bad_key.models.list()
        self.assertStillServing()

    # --- bad requests over plain HTTP ---

    def test_bad_requests(self):
        good = {"model": MODEL, "prompt": "Hi", "max_tokens": 2}
        status, _, body = self.server.request("POST", "/v1/completions", b'{"model": "smollm2", "prompt": ', AUTH)
        self.assertApiError(status, json.loads(body), 400, message_part="not valid JSON")
        self.assertApiError(*self.post("/v1/completions", dict(good, promt="x")), 400, param="promt",
                            message_part='unknown field "promt"')
        self.assertApiError(*self.post("/v1/completions", dict(good, max_tokens="ten")), 400, param="max_tokens")
        self.assertApiError(*self.post("/v1/completions", dict(good, temperature=-1)), 400, param="temperature")
        self.assertApiError(*self.post("/v1/completions", dict(good, max_tokens=10**9)), 400, param="max_tokens",
                            message_part="context length")
        self.assertApiError(*self.post("/v1/completions", dict(good, model="other")), 404, code="model_not_found")
        self.assertApiError(*self.post("/v1/completions", dict(good, echo=True)), 400, code="unsupported_field")
        self.assertApiError(*self.post("/v1/chat/completions", {"model": MODEL, "messages": [
            {"role": "user", "content": "x"}] * 9}), 400, param="messages", message_part="limit of 8")
        self.assertApiError(*self.post("/v1/chat/completions", {"model": MODEL, "messages": "Hi"}), 400,
                            param="messages")
        # A prompt longer than the context: the engine refuses it at submit.
        self.assertApiError(*self.post("/v1/completions", dict(good, prompt=[1] * 9000)), 400)
        self.assertApiError(*self.post("/v1/completions", good, headers={"Authorization": "Bearer nope"}), 401,
                            code="invalid_api_key")
        self.assertApiError(*self.post("/v1/completions", good, headers={}), 401)
        status, _, body = self.server.request("GET", "/v1/nothing", headers=AUTH)
        self.assertApiError(status, json.loads(body), 404)
        self.assertStillServing()
        self.assertGreaterEqual(self.server.metrics()['kiln_requests_rejected_total{reason="invalid_request"}'], 8)

    def test_disconnect_mid_stream_frees_the_request(self):
        before = self.server.metrics()['kiln_requests_finished_total{finish_reason="cancelled"}']
        connection = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=60)
        connection.request("POST", "/v1/completions", json.dumps({
            "model": MODEL, "prompt": "Tell me a long story.", "max_tokens": 2000, "temperature": 0,
            "ignore_eos": True, "stream": True}), {**AUTH, "Content-Type": "application/json"})
        response = connection.getresponse()
        self.assertEqual(response.status, 200)
        self.assertEqual(response.getheader("Content-Type"), "text/event-stream")
        self.assertTrue(response.read1(100).startswith(b"data: "))
        connection.close()
        deadline = time.time() + 30
        while time.time() < deadline:
            values = self.server.metrics()
            if (values['kiln_requests_finished_total{finish_reason="cancelled"}'] > before
                    and values["kiln_requests_running"] == 0
                    and values["kiln_kv_blocks_free"] + values["kiln_kv_blocks_cached"]
                    == values["kiln_kv_blocks_total"]):
                break
            time.sleep(0.2)
        else:
            self.fail(f"the abandoned stream was not cancelled: {values}")
        self.assertStillServing()


class QueueAndShutdownTest(unittest.TestCase):
    def test_full_queue_gets_429_and_sigterm_drains(self):
        server = KilnServer(ARGS.kiln, ARGS.model, "--model-name", MODEL, "--threads", "2", "--max-sequences", "2",
                            "--max-queue", "1", "--shutdown-grace-seconds", "8")
        try:
            def open_stream(max_tokens):
                connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
                connection.request("POST", "/v1/completions", json.dumps({
                    "model": MODEL, "prompt": "Count: 1, 2, 3,", "max_tokens": max_tokens, "temperature": 0,
                    "ignore_eos": True, "stream": True}), {"Content-Type": "application/json"})
                response = connection.getresponse()
                self.assertEqual(response.status, 200)
                return connection, response

            def wait_for(name, value):
                deadline = time.time() + 30
                while server.metrics()[name] != value:
                    self.assertLess(time.time(), deadline, f"{name} never reached {value}")
                    time.sleep(0.05)

            # Two endless streams fill both sequence slots, a third waits: the queue is full.
            endless = open_stream(4000)
            wait_for("kiln_sequences_running", 1)
            dropped = open_stream(4000)
            wait_for("kiln_sequences_running", 2)
            queued = open_stream(30)
            wait_for("kiln_queue_depth", 1)
            status, headers, body = server.request("POST", "/v1/completions",
                                                   {"model": MODEL, "prompt": "Hi", "max_tokens": 2})
            self.assertEqual(status, 429, body)
            self.assertEqual(headers.get("Retry-After"), "1")
            self.assertEqual(json.loads(body)["error"]["code"], "queue_full")
            # A client hanging up frees its slot: the queued stream starts.
            self.assertTrue(dropped[1].read1(100).startswith(b"data: "))
            dropped[0].close()
            wait_for("kiln_queue_depth", 0)

            # SIGTERM: new requests get 503; the queued stream finishes, the
            # endless one is cancelled when the grace runs out; both end with [DONE].
            server.process.terminate()
            deadline = time.time() + 5
            while time.time() < deadline and server.request("GET", "/health")[0] != 503:
                time.sleep(0.05)
            self.assertEqual(server.request("GET", "/health")[0], 503)
            status, _, body = server.request("POST", "/v1/completions", {"model": MODEL, "prompt": "Hi"})
            self.assertEqual((status, json.loads(body)["error"]["code"]), (503, "shutting_down"))
            finishes = {}
            for name, (connection, response) in {"endless": endless, "queued": queued}.items():
                events = read_events(response)
                connection.close()
                self.assertEqual(events[-1], "[DONE]", name)
                finishes[name] = events[-2]["choices"][0]["finish_reason"]
            self.assertEqual(finishes["queued"], "length")
            self.assertEqual(finishes["endless"], "cancelled")
            self.assertEqual(server.stop(), 0)
            self.assertTrue(any("shutting down" in line for line in server.log), server.log)
        finally:
            if server.process.poll() is None:
                server.process.kill()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--kiln", required=True)
    parser.add_argument("--model", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0], "-v", *rest])
