"""Starts `kiln serve` on an ephemeral port for the server tests and talks
to it with the standard library only (the OpenAI client is the tests' own)."""
import http.client
import json
import re
import subprocess
import threading
import time


class KilnServer:
    """`kiln serve MODEL --port 0 ...` as a child process; its stderr is kept
    (and echoed on failure) so a test can show what the server logged."""

    def __init__(self, kiln, model, *extra_args, ready_timeout=120):
        self.args = [kiln, "serve", model, "--port", "0", "--device", "cpu", *extra_args]
        self.process = subprocess.Popen(self.args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.log = []
        self.port = None
        ready = threading.Event()

        def read_stderr():
            for line in self.process.stderr:
                self.log.append(line.rstrip("\n"))
                match = re.search(r"listening on http://[^:]+:(\d+)", line)
                if match:
                    self.port = int(match.group(1))
                    ready.set()
            ready.set()

        self.reader = threading.Thread(target=read_stderr, daemon=True)
        self.reader.start()
        if not ready.wait(ready_timeout) or self.port is None:
            self.process.kill()
            raise RuntimeError("kiln serve did not start:\n" + "\n".join(self.log))
        self.wait_healthy()

    @property
    def pid(self):
        return self.process.pid

    def wait_healthy(self, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                status, _, _ = self.request("GET", "/health")
                if status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError("/health never answered 200")

    def request(self, method, path, body=None, headers=None, timeout=120):
        """(status, headers dict, body bytes); `body` may be bytes, str or a JSON-able object."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            if body is not None and not isinstance(body, (bytes, str)):
                body = json.dumps(body)
            all_headers = {"Content-Type": "application/json"}
            all_headers.update(headers or {})
            connection.request(method, path, body=body, headers=all_headers)
            response = connection.getresponse()
            return response.status, dict(response.getheaders()), response.read()
        finally:
            connection.close()

    def metrics(self):
        """/metrics as {name or name{labels}: float}."""
        status, _, body = self.request("GET", "/metrics")
        assert status == 200, status
        values = {}
        for line in body.decode().splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                values[name] = float(value)
        return values

    def rss_kib(self):
        with open(f"/proc/{self.pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise RuntimeError("no VmRSS")

    def stop(self, timeout=60):
        """SIGTERM, then the exit status."""
        if self.process.poll() is None:
            self.process.terminate()
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise
        self.reader.join(5)
        self.process.stderr.close()
        return code


def read_events(response):
    """The `data:` payloads of a server-sent-event stream, up to [DONE] (which
    is included as the string "[DONE]")."""
    events = []
    buffer = b""
    while True:
        chunk = response.read1(65536) if hasattr(response, "read1") else response.read(65536)
        if not chunk:
            return events
        buffer += chunk
        while b"\n\n" in buffer:
            event, buffer = buffer.split(b"\n\n", 1)
            assert event.startswith(b"data: "), event
            payload = event[len(b"data: "):].decode()
            events.append(payload if payload == "[DONE]" else json.loads(payload))
            if payload == "[DONE]":
                return events
