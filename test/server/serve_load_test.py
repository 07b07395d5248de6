"""A bounded loopback load and soak test of kiln serve on SmolLM2 (CPU).

--clients threads send requests with random (exponential) gaps between
them, for --seconds after a warm-up, in rounds of at most --round-seconds.
The mix: streams read to the end, non-streamed completions, streams
cancelled after a few events, clients that hang up before reading a byte,
clients that hang up in the middle of their request body, and oversized or
malformed requests (a prompt past the context, max_tokens past the context,
a body over the 16 MiB limit, broken JSON, an invalid field).

Passes when
- no well-formed request failed, and every refused one got its 4xx with a
  well-formed OpenAI error body (JSON, an "error" object with a message, a
  type, a param and a code);
- the KV pool balances in every /metrics sample taken during the load
  (free + cached + used == total, used counted from the sequences' block
  tables; cached <= prefix-cache blocks <= cached + used), and at the end
  of each round nothing is held (used == 0, the cached blocks are exactly
  the prefix cache's);
- the server's RSS at the end of each round is within 5% of its RSS after
  the warm-up;
- /health answers 200 after the load and SIGTERM exits 0.

    serve_load_test.py --kiln build/bin/kiln --model ARTIFACT_OR_MODEL [--seconds 60]

scripts/soak.sh runs it for ten minutes (docs/reliability.md has the figures).
"""
import argparse
import http.client
import json
import os
import random
import socket
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
BODY_LIMIT = 16 << 20  # the server's payload limit (runtime/server/openai_server.cc)

# (kind, weight). "stream", "plain" and "cancel" are well-formed requests;
# the rest are the abuse a public endpoint sees.
MIX = [("stream", 40), ("plain", 12), ("cancel", 15), ("hang_up_early", 6), ("hang_up_in_body", 4),
       ("long_prompt", 5), ("huge_max_tokens", 5), ("huge_body", 1), ("bad_json", 6), ("bad_field", 6)]


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {kind: 0 for kind, _ in MIX}
        self.tokens = 0
        self.failures = []

    def count(self, kind, tokens=0):
        with self.lock:
            self.counts[kind] += 1
            self.tokens += tokens

    def fail(self, kind, message):
        with self.lock:
            self.failures.append(f"{kind}: {message}")


def error_problem(status, headers, data, expected_status, message_part=None):
    """Why (status, body) is not a well-formed OpenAI error with `expected_status`, or None."""
    if status != expected_status:
        return f"status {status}, expected {expected_status}: {data[:200]!r}"
    if not headers.get("Content-Type", "").startswith("application/json"):
        return f"Content-Type {headers.get('Content-Type')!r}, expected application/json"
    try:
        body = json.loads(data)
    except ValueError:
        return f"the error body is not JSON: {data[:200]!r}"
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict) or set(error) != {"message", "type", "param", "code"}:
        return f"not an OpenAI error object: {body!r:.200}"
    if not isinstance(error["message"], str) or not error["message"] or not isinstance(error["type"], str):
        return f"the error has no message or type: {error!r:.200}"
    if message_part and message_part not in error["message"]:
        return f"the message {error['message']!r} does not say {message_part!r}"
    return None


def request_body(rng, stream):
    body = {"model": MODEL, "prompt": rng.choice(PROMPTS), "max_tokens": rng.randint(4, 12),
            "temperature": rng.choice([0, 0.8]), "seed": rng.randint(0, 1000), "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


def send(port, body_bytes, timeout=120):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    connection.request("POST", "/v1/completions", body_bytes, {"Content-Type": "application/json"})
    return connection, connection.getresponse()


def one_request(port, rng, kind, tally):
    connection = None
    try:
        if kind in ("stream", "cancel"):
            connection, response = send(port, json.dumps(request_body(rng, True)))
            if response.status != 200:
                return tally.fail(kind, f"status {response.status}: {response.read()[:200]!r}")
            if kind == "cancel":  # a client that stops reading and hangs up mid-stream
                for _ in range(rng.randint(1, 3)):
                    if not response.read1(256):
                        break
                return tally.count(kind)
            events = read_events(response)
            if not events or events[-1] != "[DONE]":
                return tally.fail(kind, f"stream ended without [DONE]: {events[-2:]}")
            finish = [e["choices"][0]["finish_reason"] for e in events[:-1] if e.get("choices")]
            usage = [e["usage"] for e in events[:-1] if e.get("usage")]
            if not finish or finish[-1] not in ("length", "stop") or len(usage) != 1:
                return tally.fail(kind, f"bad ending: finish {finish[-1:]}, usage {usage}")
            return tally.count(kind, usage[0]["completion_tokens"])
        if kind == "plain":
            connection, response = send(port, json.dumps(request_body(rng, False)))
            data = response.read()
            if response.status != 200:
                return tally.fail(kind, f"status {response.status}: {data[:200]!r}")
            body = json.loads(data)
            if body["choices"][0]["finish_reason"] not in ("length", "stop"):
                return tally.fail(kind, f"bad finish: {body['choices'][0]}")
            return tally.count(kind, body["usage"]["completion_tokens"])
        if kind in ("hang_up_early", "hang_up_in_body"):
            # Raw sockets: a client that sends a request and leaves before the
            # answer, or leaves with half its body unsent.
            body = json.dumps(request_body(rng, rng.random() < 0.5)).encode()
            sock = socket.create_connection(("127.0.0.1", port), timeout=30)
            head = (f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(body)}\r\n\r\n").encode()
            sock.sendall(head + (body if kind == "hang_up_early" else body[:len(body) // 2]))
            sock.close()
            return tally.count(kind)
        # The refused kinds: each must get its status and a well-formed error.
        if kind == "long_prompt":
            body = request_body(rng, rng.random() < 0.5)
            body["prompt"] = "the sea " * 6000  # ~12000 tokens, past the 8192-token context
            expected, part = 400, "context"
            payload = json.dumps(body)
        elif kind == "huge_max_tokens":
            body = request_body(rng, True)
            body["max_tokens"] = rng.choice([10 ** 6, 2 ** 40])
            expected, part = 400, "max_tokens"
            payload = json.dumps(body)
        elif kind == "bad_json":
            payload = json.dumps(request_body(rng, False))[:-rng.randint(1, 10)]
            expected, part = 400, None
        elif kind == "bad_field":
            body = request_body(rng, False)
            body[rng.choice(["temperature", "top_p", "max_tokens"])] = rng.choice([-3, "hot", [1]])
            expected, part = 400, None
            payload = json.dumps(body)
        elif kind == "huge_body":
            # The headers promise more than the limit; the server answers
            # without reading the body.
            sock = socket.create_connection(("127.0.0.1", port), timeout=60)
            sock.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                          f"Content-Length: {BODY_LIMIT + 1}\r\n\r\n").encode() + b"{\"prompt\": \"" + b"x" * 4096)
            response = http.client.HTTPResponse(sock)
            response.begin()
            data = response.read()
            sock.close()
            problem = error_problem(response.status, dict(response.getheaders()), data, 413, "16 MiB")
            return tally.fail(kind, problem) if problem else tally.count(kind)
        connection, response = send(port, payload)
        data = response.read()
        problem = error_problem(response.status, dict(response.getheaders()), data, expected, part)
        return tally.fail(kind, problem) if problem else tally.count(kind)
    except Exception as e:  # any exception of a request the server should have answered is a failure
        tally.fail(kind, f"{type(e).__name__}: {e}")
    finally:
        if connection is not None:
            connection.close()


def run_clients(port, clients, seconds, seed, think_seconds, tally):
    deadline = time.time() + seconds
    kinds = [kind for kind, _ in MIX]
    weights = [weight for _, weight in MIX]

    def client(index):
        rng = random.Random(seed * 1000 + index)
        while time.time() < deadline:
            one_request(port, rng, rng.choices(kinds, weights)[0], tally)
            time.sleep(rng.expovariate(1.0 / think_seconds))  # random arrivals

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def pool_problem(values):
    total, free = values["kiln_kv_blocks_total"], values["kiln_kv_blocks_free"]
    cached, used = values["kiln_kv_blocks_cached"], values["kiln_kv_blocks_used"]
    tree = values["kiln_prefix_cache_blocks"]
    if free + cached + used != total:
        return f"free {free:.0f} + cached {cached:.0f} + used {used:.0f} != total {total:.0f}"
    if not cached <= tree <= cached + used:
        return f"prefix-cache blocks {tree:.0f} outside [cached {cached:.0f}, cached + used {cached + used:.0f}]"
    return None


class MetricsWatch:
    """Samples /metrics every `period` seconds while the load runs."""

    def __init__(self, server, period):
        self.server, self.period = server, period
        self.samples, self.problems, self.max_used = 0, [], 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop.wait(self.period):
            try:
                values = self.server.metrics()
            except Exception as e:
                self.problems.append(f"/metrics: {type(e).__name__}: {e}")
                continue
            self.samples += 1
            self.max_used = max(self.max_used, values["kiln_kv_blocks_used"])
            problem = pool_problem(values)
            if problem:
                self.problems.append(problem)

    def finish(self):
        self.stop.set()
        self.thread.join()


def wait_idle(server, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        values = server.metrics()
        if values["kiln_requests_running"] == 0 and values["kiln_queue_depth"] == 0 \
                and values["kiln_sequences_running"] == 0:
            return values
        time.sleep(0.2)
    raise AssertionError(f"the server never went idle: {values}")


def idle_problems(values):
    problems = []
    problem = pool_problem(values)
    if problem:
        problems.append(problem)
    if values["kiln_kv_blocks_used"] != 0:
        problems.append(f"{values['kiln_kv_blocks_used']:.0f} KV blocks still held with nothing running")
    if values["kiln_kv_blocks_cached"] != values["kiln_prefix_cache_blocks"]:
        problems.append(f"cached {values['kiln_kv_blocks_cached']:.0f} != prefix-cache blocks "
                        f"{values['kiln_prefix_cache_blocks']:.0f} with nothing running")
    return problems


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--kiln", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--clients", type=int, default=48)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--warmup-seconds", type=float, default=15)
    parser.add_argument("--round-seconds", type=float, default=60,
                        help="the load runs in rounds this long; the pool and RSS are checked idle after each")
    parser.add_argument("--think-seconds", type=float, default=0.05, help="mean gap between a client's requests")
    parser.add_argument("--metrics-seconds", type=float, default=0.5, help="period of the /metrics samples")
    args = parser.parse_args()

    server = KilnServer(args.kiln, args.model, "--model-name", MODEL, "--quiet", "--max-sequences", "32",
                        "--max-queue", "256")
    problems = []
    try:
        start = time.time()
        warmup = Tally()
        run_clients(server.port, args.clients, args.warmup_seconds, 1, args.think_seconds, warmup)
        wait_idle(server)
        rss_warm = server.rss_kib()
        load, watch = Tally(), MetricsWatch(server, args.metrics_seconds)
        rounds = max(1, round(args.seconds / args.round_seconds))
        rss_rounds = []
        for r in range(rounds):
            run_clients(server.port, args.clients, args.seconds / rounds, 2 + r, args.think_seconds, load)
            values = wait_idle(server)
            rss_rounds.append(server.rss_kib())
            problems += [f"after round {r + 1}: {p}" for p in idle_problems(values)]
        watch.finish()
        elapsed = time.time() - start

        well_formed = sum(load.counts[k] for k in ("stream", "plain", "cancel"))
        print(f"warm-up: {sum(warmup.counts.values())} requests, {len(warmup.failures)} failed")
        print(f"load: {args.clients} clients for {args.seconds:.0f} s in {rounds} round(s): "
              f"{sum(load.counts.values())} requests answered as expected ({well_formed} well-formed, "
              f"{load.tokens} tokens, {load.tokens / args.seconds:.1f} tok/s), {len(load.failures)} failed")
        print("by kind: " + ", ".join(f"{k} {v}" for k, v in load.counts.items()))
        cancelled = values['kiln_requests_finished_total{finish_reason="cancelled"}']
        print(f"KV blocks: total {values['kiln_kv_blocks_total']:.0f}, free {values['kiln_kv_blocks_free']:.0f}, "
              f"cached {values['kiln_kv_blocks_cached']:.0f}, used {values['kiln_kv_blocks_used']:.0f} "
              f"(at most {watch.max_used:.0f} during the load); {watch.samples} /metrics samples, "
              f"{len(watch.problems)} unbalanced; {cancelled:.0f} completions cancelled")
        worst = max(rss_rounds, key=lambda v: abs(v - rss_warm))
        print(f"RSS: {rss_warm} KiB after the warm-up; after each round "
              + ", ".join(str(v) for v in rss_rounds)
              + f" KiB (worst {100.0 * (worst - rss_warm) / rss_warm:+.2f}%); {elapsed:.0f} s in all")

        problems += [f"failed request: {f}" for f in (warmup.failures + load.failures)[:10]]
        problems += [f"during the load: {p}" for p in watch.problems[:10]]
        if load.counts["stream"] == 0 or load.counts["cancel"] == 0:
            problems.append("the load ran no complete or no cancelled streams")
        if watch.samples == 0:
            problems.append("no /metrics sample was taken during the load")
        if abs(worst - rss_warm) > 0.05 * rss_warm:
            problems.append("RSS moved by more than 5% from its value after the warm-up")
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
