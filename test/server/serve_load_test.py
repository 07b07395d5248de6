"""A bounded loopback load test of kiln serve on SmolLM2 (CPU): 64 clients
(threads) stream completions for --seconds (default 60) after a warm-up, a
third of them hanging up after the first event. Passes when no well-formed
request failed, no KV block leaked (free + cached == total, nothing running,
from /metrics) and the server's RSS after the run is within 5% of its RSS
after the warm-up.

    serve_load_test.py --kiln build/bin/kiln --model ARTIFACT_OR_MODEL
"""
import argparse
import http.client
import json
import os
import random
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kiln_server import KilnServer, read_events  # noqa: E402

MODEL = "smollm2"
# Shared openings (the prefix cache sees repeats) with varied endings.
PROMPTS = [f"{opening} {ending}" for opening in (
    "You are a helpful assistant. Answer briefly and clearly, without preamble.",
    "Write a short poem about the sea, the wind and the gulls over the harbour at dawn.",
    "Explain to a child why the sky is blue.")
    for ending in ("First point:", "Begin:", "Here it is:", "Well,")]


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.completed = 0
        self.disconnected = 0
        self.tokens = 0
        self.failures = []

    def add(self, field, amount=1):
        with self.lock:
            setattr(self, field, getattr(self, field) + amount)

    def fail(self, message):
        with self.lock:
            self.failures.append(message)


def one_request(port, rng, hang_up, tally):
    body = {"model": MODEL, "prompt": rng.choice(PROMPTS), "max_tokens": rng.randint(4, 12),
            "temperature": rng.choice([0, 0.8]), "seed": rng.randint(0, 1000), "stream": True,
            "stream_options": {"include_usage": True}}
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        connection.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
        response = connection.getresponse()
        if response.status != 200:
            tally.fail(f"status {response.status}: {response.read()[:200]!r}")
            return
        if hang_up:
            response.read1(64)
            tally.add("disconnected")
            return
        events = read_events(response)
        if not events or events[-1] != "[DONE]":
            tally.fail(f"stream ended without [DONE]: {events[-2:]}")
            return
        finish = [e["choices"][0]["finish_reason"] for e in events[:-1] if e.get("choices")]
        usage = [e["usage"] for e in events[:-1] if e.get("usage")]
        if finish[-1] not in ("length", "stop") or len(usage) != 1:
            tally.fail(f"bad ending: finish {finish[-1:]}, usage {usage}")
            return
        tally.add("completed")
        tally.add("tokens", usage[0]["completion_tokens"])
    except Exception as e:  # any error of a well-formed request is a failure
        tally.fail(f"{type(e).__name__}: {e}")
    finally:
        connection.close()


def run_clients(port, clients, seconds, seed):
    tally = Tally()
    deadline = time.time() + seconds

    def client(index):
        rng = random.Random(seed * 1000 + index)
        while time.time() < deadline:
            one_request(port, rng, hang_up=index % 3 == 0, tally=tally)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return tally


def wait_idle(server, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        values = server.metrics()
        if values["kiln_requests_running"] == 0 and values["kiln_queue_depth"] == 0 \
                and values["kiln_sequences_running"] == 0:
            return values
        time.sleep(0.2)
    raise AssertionError(f"the server never went idle: {values}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--kiln", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--warmup-seconds", type=float, default=15)
    args = parser.parse_args()

    server = KilnServer(args.kiln, args.model, "--model-name", MODEL, "--quiet", "--max-sequences", "32",
                        "--max-queue", "256")
    try:
        start = time.time()
        warmup = run_clients(server.port, args.clients, args.warmup_seconds, seed=1)
        wait_idle(server)
        rss_before = server.rss_kib()
        load = run_clients(server.port, args.clients, args.seconds, seed=2)
        values = wait_idle(server)
        rss_after = server.rss_kib()
        elapsed = time.time() - start

        print(f"warm-up: {warmup.completed} streams completed, {warmup.disconnected} hung up, "
              f"{len(warmup.failures)} failed")
        print(f"load: {args.clients} clients for {args.seconds:.0f} s: {load.completed} streams completed "
              f"({load.tokens} tokens, {load.tokens / args.seconds:.1f} tok/s), {load.disconnected} hung up, "
              f"{len(load.failures)} failed")
        cancelled = values['kiln_requests_finished_total{finish_reason="cancelled"}']
        print(f"KV blocks: total {values['kiln_kv_blocks_total']:.0f}, free {values['kiln_kv_blocks_free']:.0f}, "
              f"cached {values['kiln_kv_blocks_cached']:.0f}; {cancelled:.0f} completions cancelled")
        print(f"RSS: {rss_before} KiB after the warm-up, {rss_after} KiB after the load "
              f"({100.0 * (rss_after - rss_before) / rss_before:+.2f}%); {elapsed:.0f} s in all")

        problems = [f"failed request: {f}" for f in (warmup.failures + load.failures)[:10]]
        if load.completed == 0 or load.disconnected == 0:
            problems.append("the load ran no complete or no abandoned streams")
        if values["kiln_kv_blocks_free"] + values["kiln_kv_blocks_cached"] != values["kiln_kv_blocks_total"]:
            problems.append("KV blocks leaked: free + cached != total")
        if abs(rss_after - rss_before) > 0.05 * rss_before:
            problems.append("RSS moved by more than 5%")
        status, _, _ = server.request("GET", "/health")
        if status != 200:
            problems.append(f"/health answered {status} after the load")
    finally:
        code = server.stop()
    if code != 0:
        problems.append(f"kiln serve exited {code} on SIGTERM")
    for p in problems:
        print("FAIL:", p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
