"""Helpers for the server tests: start `offkv serve` on a free loopback port
(port 0: the server prints the one it bound), plain HTTP requests, SSE
parsing, and a Prometheus gauge reader. Standard library only."""
import http.client
import json
import re
import signal
import subprocess
import sys
import threading
import time


class Server:
    def __init__(self, offkv, program, *args):
        cmd = [offkv, "serve", program, "--host", "127.0.0.1", "--port", "0", *args]
        self.proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
        self.log = []
        self.default_headers = {}   # sent when a call gives no headers (e.g. the API key)
        m = None
        while not m:   # notes (e.g. about --prefix-cache-dir files) may come before the port line
            line = self.proc.stderr.readline()
            self.log.append(line)
            m = re.search(r"http://127\.0\.0\.1:(\d+)", line)
            if not line:
                self.proc.kill()
                raise RuntimeError("server did not start: " + "".join(self.log))
        self.port = int(m.group(1))
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self):
        for line in self.proc.stderr:
            self.log.append(line)

    def stop(self, sig=signal.SIGTERM, timeout=30):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None

    def request(self, method, path, body=None, headers=None, raw=None, timeout=120):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        h = {"Content-Type": "application/json", **(self.default_headers if headers is None else headers)}
        data = raw if raw is not None else (json.dumps(body) if body is not None else None)
        c.request(method, path, body=data, headers=h)
        r = c.getresponse()
        text = r.read().decode("utf-8")
        c.close()
        return r.status, r.getheader("Content-Type") or "", text

    def post(self, path, body, **kw):
        status, ctype, text = self.request("POST", path, body, **kw)
        return status, (json.loads(text) if "json" in ctype else text)

    def stream(self, path, body, timeout=120):
        """The SSE events of a streamed request: (list of JSON objects, saw [DONE])."""
        status, ctype, text = self.request("POST", path, body, timeout=timeout)
        assert status == 200 and ctype.startswith("text/event-stream"), (status, ctype, text[:200])
        events, done = [], False
        for block in text.split("\n\n"):
            if not block:
                continue
            assert block.startswith("data: "), block
            payload = block[len("data: "):]
            if payload == "[DONE]":
                done = True
            else:
                assert not done, "event after [DONE]"
                events.append(json.loads(payload))
        return events, done

    def metric(self, name):
        status, _, text = self.request("GET", "/metrics")
        assert status == 200
        for line in text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        raise KeyError(name)

    def wait_metric(self, name, want, timeout=20):
        t0 = time.time()
        while time.time() - t0 < timeout:
            v = self.metric(name)
            if v == want:
                return v
            time.sleep(0.05)
        return self.metric(name)


def chat_text(events):
    """Joined content and reasoning deltas of chat chunks, and the finish reason."""
    content, reasoning, finish = "", "", None
    for e in events:
        for ch in e.get("choices", []):
            d = ch.get("delta", {})
            content += d.get("content") or ""
            reasoning += d.get("reasoning_content") or ""
            finish = ch.get("finish_reason") or finish
    return content, reasoning, finish


def exit_status(failures):
    """A test script's exit status: 1 (and the count) when checks failed, else 0 with "all passed"."""
    if failures:
        print("%d failed" % len(failures), file=sys.stderr)
        return 1
    print("all passed")
    return 0
