#!/usr/bin/env python3
"""`offkv serve` under hostile or unusual clients (issue 43), loopback only,
every loop bounded in count and time, on the generated Llama of
test_server.py:

- connection exhaustion: a few hundred connections that send half a header
  (and some that send nothing) from 127.0.0.1 and 127.0.0.3 leave /health
  answering from 127.0.0.2; past --max-connections-per-ip the extra ones are
  closed at once; --idle-timeout closes the rest; then 127.0.0.1 is served
  again;
- the idle timeout never cuts a reply the server is still producing: a
  streamed request whose prefill outlasts it and a non-streamed one queued
  behind it for longer both complete;
- a client that half-closes its socket after the request (nc -N) gets the
  whole reply, streamed or not, HTTP/1.1 (after an interim 100 Continue) or
  1.0; one that closes it is cancelled;
- refusals at once, each followed by the server closing the connection: 413
  for a declared body over --max-body (none sent), 411 for a chunked body
  (chunk size ffffffffffffffff), 400 for request lines that are not HTTP
  (binary, a TLS hello, no method);
- HEAD /health, /v1/models and /metrics answer like GET, without a body;
- SIGTERM with --shutdown-grace 0: running requests return what they have
  with finish_reason "length" (streamed and not), one still prefilling gets
  503, and the server exits 0.

usage: test_server_limits.py OFFKV OKV_MKCKPT"""
import json
import os
import resource
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_server as ts  # noqa: E402  (its make_program, chat and check; its main does not run)
from serve_util import Server, chat_text  # noqa: E402

OFFKV = ts.OFFKV
check = ts.check
chat = ts.chat


def connect_from(port, source, timeout=5):
    """A socket to the server from loopback address `source`."""
    k = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    k.settimeout(timeout)
    k.bind((source, 0))
    k.connect(("127.0.0.1", port))
    return k


def read_all(k, limit_s):
    """Everything the server sends until it closes (b"" if it resets), and whether it closed within limit_s."""
    k.settimeout(0.2)
    got, t0 = b"", time.time()
    while time.time() - t0 < limit_s:
        try:
            chunk = k.recv(65536)
        except socket.timeout:
            continue
        except (ConnectionResetError, BrokenPipeError):
            return got, True
        if not chunk:
            return got, True
        got += chunk
    return got, False


def http_once(port, source, request, limit_s=10):
    """Sends a raw request from `source`; (status line, headers+body, closed in time)."""
    k = connect_from(port, source)
    k.sendall(request)
    got, closed = read_all(k, limit_s)
    k.close()
    return got.split(b"\r\n", 1)[0], got, closed


def health_from(port, source):
    try:
        status, _, _ = http_once(port, source, b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 5)
        return status
    except OSError as e:
        return repr(e).encode()


def still_open(k):
    """True while the server has neither closed nor reset k (nothing is expected on it)."""
    try:
        k.setblocking(False)
        return k.recv(1) != b""   # (data would be a surprise, but not a close)
    except BlockingIOError:
        return True
    except OSError:
        return False


def test_connection_exhaustion(program):
    per_ip, idle = 16, 5
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    n_half = max(50, min(300, soft // 3))
    s = Server(OFFKV, program, "--parallel", "1", "--max-connections", "64", "--max-connections-per-ip", str(per_ip),
               "--idle-timeout", str(idle))
    socks = []
    try:
        t0 = time.time()
        for _ in range(n_half):   # half a header each, then silence
            k = connect_from(s.port, "127.0.0.1")
            k.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            socks.append(k)
        silent = [connect_from(s.port, "127.0.0.3") for _ in range(40)]   # nothing at all
        time.sleep(0.5)
        opened = time.time() - t0
        check(opened < idle - 0.5, "%d connections opened in %.1f s (must stay under the idle timeout)" % (n_half + 40, opened))
        held = sum(still_open(k) for k in socks)
        held_silent = sum(still_open(k) for k in silent)
        check(1 <= held <= per_ip, "half-header connections held from one address: %d (cap %d)" % (held, per_ip))
        check(1 <= held_silent <= per_ip, "silent connections held from one address: %d (cap %d)" % (held_silent, per_ip))
        check(health_from(s.port, "127.0.0.2").startswith(b"HTTP/1.1 200"), "/health from 127.0.0.2 while 127.0.0.1 is at its cap")
        check(not health_from(s.port, "127.0.0.1").startswith(b"HTTP/1.1 200"), "127.0.0.1 past its cap is refused")
        deadline = time.time() + idle + 4
        while time.time() < deadline and any(still_open(k) for k in socks + silent):
            time.sleep(0.2)
        left = sum(still_open(k) for k in socks + silent)
        check(left == 0, "the idle timeout (%d s) closed every silent connection: %d still open" % (idle, left))
        check(health_from(s.port, "127.0.0.1").startswith(b"HTTP/1.1 200"), "127.0.0.1 is served again after the timeout")
    finally:
        for k in socks:
            k.close()
        check(s.stop() == 0, "exhaustion server exits 0")


def test_long_waits_not_cut(program):
    """--idle-timeout 1 and --parallel 1: while streams A1..Ak of 1900 tokens
    each run one after another, B (non-streamed) and C (streamed, so its
    headers go out and then nothing until its first token) wait in the queue
    behind them, silent far longer than the timeout; all complete. k is
    chosen from one timed 1900-token reply so that the wait exceeds 2 s on a
    fast CPU as well as under a sanitizer."""
    s = Server(OFFKV, program, "--parallel", "1", "--idle-timeout", "1", "--ctx-per-seq", "2048", "--max-queue", "10")
    try:
        t0 = time.time()
        code, r = s.post("/v1/chat/completions", chat("Go on", max_tokens=1900))
        one = time.time() - t0
        check(code == 200 and r["usage"]["completion_tokens"] == 1900, "a 1900-token reply outlasts the 1 s idle timeout")
        k = max(1, min(8, int(3.0 / max(one, 0.05)) + 1))
        res = {}

        def stream(name, body):
            res[name] = s.stream("/v1/chat/completions", body)
        threads = []
        for i in range(k):
            t = threading.Thread(target=stream, args=("a%d" % i, chat("Go on", max_tokens=1900, stream=True)))
            t.start()
            threads.append(t)
            time.sleep(0.1)
        time.sleep(0.2)
        tc = threading.Thread(target=stream, args=("c", chat("Queued and streamed", max_tokens=8, stream=True)))
        tc.start()
        threads.append(tc)
        t_b = time.time()
        code, r = s.post("/v1/chat/completions", chat("Queued behind", max_tokens=8))
        waited = time.time() - t_b
        for t in threads:
            t.join(240)
        for name, n in [("a%d" % i, 1900) for i in range(k)] + [("c", 8)]:
            events, done = res.get(name, ([], False))
            check(done and chat_text(events)[2] == "length", "stream %s completes (%d tokens asked)" % (name, n))
        check(code == 200 and r["usage"]["completion_tokens"] == 8, "the queued request is answered: %s %s" % (code, r))
        check(waited > 2, "the queued request waited %.1f s behind %d streams (one reply %.1f s), over twice the 1 s idle timeout"
              % (waited, k, one))
    finally:
        check(s.stop() == 0, "long-wait server exits 0")


def strip_interim(raw):
    """The final reply of a raw response: any 1xx interim replies before it removed."""
    while raw.startswith(b"HTTP/1.1 1"):
        raw = raw.split(b"\r\n\r\n", 1)[1]
    return raw


def half_closed(port, body, version=b"HTTP/1.1"):
    """Sends a request, shuts the socket's write side (like nc -N), reads the reply to its end."""
    data = json.dumps(body).encode()
    k = socket.create_connection(("127.0.0.1", port))
    k.sendall(b"POST /v1/chat/completions " + version + b"\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Authorization: Bearer " + ts.KEY.encode() + b"\r\nContent-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data)
    k.shutdown(socket.SHUT_WR)
    got, closed = read_all(k, 60)
    k.close()
    return got, closed


def test_half_close(s):
    got, _ = half_closed(s.port, chat("Keep talking", max_tokens=200))
    final = strip_interim(got)
    head, _, body = final.partition(b"\r\n\r\n")
    ok = head.startswith(b"HTTP/1.1 200")
    r = json.loads(body) if ok else {}
    check(ok and r["usage"]["completion_tokens"] == 200 and r["choices"][0]["finish_reason"] == "length",
          "half-closed non-streamed client gets the whole reply: %r" % got[:300])
    got, _ = half_closed(s.port, chat("Keep talking", max_tokens=200), b"HTTP/1.0")
    check(got.startswith(b"HTTP/1.1 200") and b'"completion_tokens":200' in got,
          "half-closed HTTP/1.0 client: no interim reply, the whole reply: %r" % got[:300])
    got, _ = half_closed(s.port, chat("Keep talking", max_tokens=200, stream=True))
    check(got.startswith(b"HTTP/1.1 200") and b"data: [DONE]" in got and got.count(b'"content":') >= 150,
          "half-closed streamed client gets the whole stream: %r" % got[-300:])
    # a client that closes (not half-closes) is still cancelled
    before = s.metric("offkv_requests_cancelled_total")
    data = json.dumps(chat("Keep talking", max_tokens=240)).encode()
    k = socket.create_connection(("127.0.0.1", s.port))
    k.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + ts.KEY.encode() +
              b"\r\nContent-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data)
    k.close()
    check(s.wait_metric("offkv_requests_cancelled_total", before + 1) == before + 1, "a closed client's request is cancelled")


def test_refusals(s):
    refusals = [
        ("Content-Length over --max-body, no body", b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
         b"Content-Type: application/json\r\nContent-Length: 2000000\r\n\r\n", b"413"),
        ("chunked, chunk size ffffffffffffffff", b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
         b"Transfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\nabc", b"411"),
        ("binary request line", b"\x00\x01\x02\xff\xfe garbage \x80\x90\r\n\r\n", b"400"),
        ("TLS client hello", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x11" * 64, b"400"),
        ("line without a method", b"GARBAGE\r\n\r\n", b"400"),
        ("method of bytes over 0x7f", b"\x80\x81 / HTTP/1.1\r\n\r\n", b"400"),
        ("no newline at all", b"\x01" * 20, b"400"),
    ]
    for what, raw, want in refusals:
        t0 = time.time()
        status, got, closed = http_once(s.port, "127.0.0.1", raw, 10)
        took = time.time() - t0
        check(status.startswith(b"HTTP/1.1 " + want) and closed and took < 2,
              "%s: %r, closed %s after %.2f s (want %s at once, then close)" % (what, got[:120], closed, took, want.decode()))
        body = got.partition(b"\r\n\r\n")[2]
        check(b'"error"' in body, "%s: an OpenAI-shaped error body: %r" % (what, body[:120]))
    # still serving normally afterwards
    check(s.post("/v1/chat/completions", chat("hi", max_tokens=2))[0] == 200, "alive after the refusals")


def test_head(s):
    for path in ("/health", "/v1/models", "/metrics"):
        code, ctype, text = s.request("HEAD", path, headers=ts.AUTH)
        gcode, gtype, _ = s.request("GET", path, headers=ts.AUTH)
        check(code == 200 and text == "" and ctype == gtype, "HEAD %s: %d %r %r (GET: %d %r)" % (path, code, ctype, text, gcode, gtype))
    check(s.request("HEAD", "/v1/models", headers={})[0] == 401, "HEAD /v1/models needs the key")


def test_shutdown_cut(program):
    """--shutdown-grace 0 and SIGTERM while A (non-streamed) and B
    (streamed) are generating and D is still prefilling (a ~1100-token
    prompt, --prefill-chunk 1): A and B end with what they generated and
    finish_reason "length", D gets 503. E (non-streamed, n=2: issue 42's
    forked choices) ends with both choices cut, "length" each."""
    s = Server(OFFKV, program, "--parallel", "5", "--ctx-per-seq", "2048", "--shutdown-grace", "0", "--prefill-chunk", "1")
    results, b_events, b_started = {}, [], threading.Event()

    def run_a():
        results["a"] = s.post("/v1/chat/completions", chat("Go on A", max_tokens=1900))

    def run_e():
        results["e"] = s.post("/v1/chat/completions", chat("Go on E", max_tokens=1900, n=2))

    def run_d():
        results["d"] = s.post("/v1/chat/completions", chat(" ".join("w%d" % i for i in range(560)), max_tokens=4))

    def run_b():
        import http.client
        c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=60)
        c.request("POST", "/v1/chat/completions", body=json.dumps(chat("Go on B", max_tokens=1900, stream=True)),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        for line in r:
            if line.startswith(b"data: "):
                b_events.append(line[6:].strip())
                if len(b_events) >= 5:
                    b_started.set()
        c.close()
    threads = [threading.Thread(target=f) for f in (run_a, run_b, run_e, run_d)]
    rc = None
    try:
        # one at a time, so A is admitted first and (prefill oldest first) generates before the cut
        threads[0].start()
        check(s.wait_metric("offkv_active_sequences", 1, timeout=30) == 1, "A is admitted")
        threads[1].start()
        check(s.wait_metric("offkv_active_sequences", 2, timeout=30) == 2, "B is admitted after A")
        threads[2].start()
        check(b_started.wait(60), "B streams")
        # E's second choice joins the step once E's prompt is in (before, the step holds A, B and E's prefill)
        check(s.wait_metric("offkv_batch_size", 4, timeout=30) == 4, "E's two choices generate")
        threads[3].start()
        check(s.wait_metric("offkv_active_sequences", 5, timeout=10) == 5, "A, B, E's two choices and D run")
        rc = s.stop()
    finally:
        for t in threads:
            t.join(60)
    check(rc == 0, "SIGTERM with requests running exits 0 (got %s): %s" % (rc, "".join(s.log)[-400:]))
    code, a = results.get("a", (None, None))
    ok = code == 200 and a["choices"][0]["finish_reason"] == "length" and 0 < a["usage"]["completion_tokens"] < 1900
    check(ok, "A returns what it generated, finish_reason length: %s %s" % (code, str(a)[:300]))
    check(b_events and b_events[-1] == b"[DONE]", "B's stream ends with [DONE]: %r" % b_events[-3:])
    last = [json.loads(e) for e in b_events if e.startswith(b"{")]
    finish = chat_text(last)[2]
    check(finish == "length" and 5 <= len(last) < 1900, "B ends with finish_reason length after %d chunks: %s" % (len(last), finish))
    code, e = results.get("e", (None, None))
    ok = code == 200 and len(e["choices"]) == 2 and all(c["finish_reason"] == "length" for c in e["choices"]) \
        and 0 < e["usage"]["completion_tokens"] < 2 * 1900
    check(ok, "E's two choices return what they generated, finish_reason length each: %s %s" % (code, str(e)[:300]))
    code, d = results.get("d", (None, None))
    check(code == 503 and "shutting down" in str(d), "D (still prefilling) gets 503: %s %s" % (code, str(d)[:200]))


def test_fork_source_evicted(program):
    """Found while writing these tests: with one sequence's worth of cells
    mostly held by a kept entry that shares only a token or two with a new
    prompt, the entry (protected as the prompt's fork source) was never
    evicted and the request waited forever. Now it is prefilled whole."""
    s = Server(OFFKV, program, "--parallel", "1", "--ctx-per-seq", "512")
    try:
        code, r = s.post("/v1/completions", {"prompt": "go", "max_tokens": 400, "temperature": 0})
        check(code == 200 and r["usage"]["completion_tokens"] == 400, "the long entry: %s" % code)
        try:
            code, r = s.post("/v1/completions", {"prompt": " ".join("w%d" % i for i in range(100)), "max_tokens": 2,
                                                 "temperature": 0}, timeout=20)
        except OSError as e:
            code, r = None, repr(e)
        check(code == 200, "a prompt whose only fork source must be evicted is served: %s %s" % (code, str(r)[:200]))
    finally:
        check(s.stop() == 0, "fork-source server exits 0")


def main():
    tmp = tempfile.mkdtemp(prefix="okv-serve-limits-")
    try:
        llama = ts.make_program(tmp, "llama2k", "llama", 128256, 128000, 128009, "llama3_1", ctx=2048)
        s = Server(OFFKV, llama, "--parallel", "2", "--ctx-per-seq", "512", "--api-key", ts.KEY)
        s.default_headers = ts.AUTH
        try:
            test_refusals(s)
            test_head(s)
            test_half_close(s)
        finally:
            check(s.stop() == 0, "main limits server exits 0")
        test_connection_exhaustion(llama)
        test_long_waits_not_cut(llama)
        test_shutdown_cut(llama)
        test_fork_source_evicted(llama)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if ts.failures:
        print("%d failed" % len(ts.failures), file=sys.stderr)
        return 1
    print("all passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
