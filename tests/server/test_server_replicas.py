#!/usr/bin/env python3
"""Replicas behind nginx (deploy/run-replicas.sh with deploy/nginx/offkv.conf)
on loopback: 2 `offkv serve` replicas of a generated Llama (--deterministic,
greedy) and Debian's nginx; then the same with Redis as the shared tier.

- Affinity: requests with an X-Prompt-Cache-Key reach the replica the
  consistent hash picks (nginx's access log names it); two keys landing on
  different replicas are found by asking.
- Shared directory (--prefix-cache-dir --prefix-cache-dir-shared): a long
  system prompt sent with key A is prefilled on replica A; the same prompt
  with key B on replica B is loaded from A's file (cached_tokens =
  prompt_tokens - 1, B's directory load counted) and its greedy text equals
  A's uncached one byte for byte.
- Byte cap across writers: both replicas write to one directory capped at
  2.5 entries; after four long prompts it holds at most the cap, and a
  prompt whose file one replica removed is a clean miss on the other.
- Failure: replica A killed (SIGKILL) while a stream runs on replica B: the
  stream finishes ([DONE], finish_reason), and requests with key A, whose
  replica is dead, are retried by nginx on B and succeed.
- Redis (when redis-server is installed and offkv was built with hiredis):
  the same load across replicas with no shared directory, through a
  redis-server this test starts on a loopback port (Redis load counted);
  with nginx's njs module (libnginx-mod-http-js) the key travels as the
  body's prompt_cache_key and deploy/nginx/offkv-key.js finds it.

SKIP (77) when nginx is not installed; the Redis part says so and is
skipped alone when redis-server or hiredis is missing, the njs part when
the module is (scripts/setup.sh installs them all, so CI runs everything).

usage: test_server_replicas.py OFFKV OKV_MKCKPT"""
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import exit_status  # noqa: E402

OFFKV, MKCKPT = os.path.abspath(sys.argv[1]), sys.argv[2]
ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
RUN = os.path.join(ROOT, "deploy", "run-replicas.sh")
TOK = "../shared/fixtures/tokenizers/"
SYSTEM = " ".join("Rule %d: answer in full sentences and name every source you use." % i for i in range(30))
SERVE_ARGS = ["--deterministic", "--parallel", "2", "--ctx-per-seq", "1024", "--prefill-chunk", "16"]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)
    return cond


def make_program(tmp):
    ck = os.path.join(tmp, "ck")
    subprocess.run([MKCKPT, "--out", ck, "--arch", "llama", "--vocab", "128256", "--bos", "128000", "--eos", "128009",
                    "--seed", "5"], check=True, stdout=subprocess.DEVNULL)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(TOK, "llama3_1", f), os.path.join(ck, f))
    out = os.path.join(tmp, "m.okv")
    subprocess.run([OFFKV, "export", ck, "-o", out, "--dtype", "fp32", "--max-ctx-len", "1024", "--prefill-chunk-size", "16"],
                   check=True, stderr=subprocess.DEVNULL)
    return out


def free_port():
    with socket.socket() as k:
        k.bind(("127.0.0.1", 0))
        return k.getsockname()[1]


def free_ports_after(n=2):
    """A port B such that B+1 .. B+n are free now (run-replicas.sh puts replica i on B+i)."""
    for _ in range(100):
        base = free_port()
        if base + n >= 65536:
            continue
        socks = []
        try:
            for i in range(1, n + 1):
                k = socket.socket()
                socks.append(k)
                k.bind(("127.0.0.1", base + i))
            return base
        except OSError:
            pass
        finally:
            for k in socks:
                k.close()
    raise RuntimeError("no free run of ports")


def request(port, method, path, body=None, key=None, timeout=120):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    h = {"Content-Type": "application/json"}
    if key:
        h["X-Prompt-Cache-Key"] = key
    c.request(method, path, body=json.dumps(body) if body is not None else None, headers=h)
    r = c.getresponse()
    text = r.read().decode("utf-8")
    c.close()
    return r.status, text


def metric(port, name):
    status, text = request(port, "GET", "/metrics")
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def wait_metric_at_least(port, name, want, timeout=30):
    t0 = time.time()
    while time.time() - t0 < timeout:
        v = metric(port, name)
        if v is not None and v >= want:
            return v
        time.sleep(0.05)
    return metric(port, name)


def chat(question="What is a prefix cache?", max_tokens=12, **kw):
    return {"model": "m", "temperature": 0, "max_tokens": max_tokens, **kw,
            "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]}


class Replicas:
    """deploy/run-replicas.sh in the background: nginx on self.port, replica i on self.ports[i]."""

    def __init__(self, tmp, name, program, extra_run=(), serve=()):
        self.state = os.path.join(tmp, name)
        self.port, base = free_port(), free_ports_after()
        while self.port in (base + 1, base + 2):
            base = free_ports_after()
        cmd = [RUN, program, "-n", "2", "--port", str(self.port), "--base-port", str(base), "--state", self.state,
               *extra_run, "--", *SERVE_ARGS, *serve]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     env={**os.environ, "OFFKV": OFFKV})
        self.out = []
        ready = False
        for line in self.proc.stdout:   # bounded: the script gives up after 60 s per replica
            self.out.append(line)
            if "run-replicas: ready" in line:
                ready = True
                break
        if not ready:
            self.proc.wait()
            raise RuntimeError("run-replicas.sh did not start: " + "".join(self.out))
        threading.Thread(target=lambda: [self.out.append(x) for x in self.proc.stdout], daemon=True).start()
        self.pids, self.ports = {}, {}
        for line in open(os.path.join(self.state, "pids")):
            n, pid, port = line.split()
            self.pids[n], self.ports[n] = int(pid), int(port)

    def log_lines(self):
        with open(os.path.join(self.state, "nginx-access.log")) as f:
            return f.read().splitlines()

    def served_by(self):
        """The replica (name) that served the last request nginx logged. nginx
        logs a request after its reply went out, so the client may read the
        reply first: the line of the request made since the previous call is
        waited for (bounded)."""
        seen = getattr(self, "_seen", 0)
        t0 = time.time()
        lines = self.log_lines()
        while len(lines) <= seen and time.time() - t0 < 10:
            time.sleep(0.02)
            lines = self.log_lines()
        self._seen = len(lines)
        m = re.search(r"upstream=(.*?) upstream_status=", lines[-1]) if lines else None
        last = m.group(1).split(",")[-1].strip().rsplit(":", 1)[-1] if m else ""
        for n, p in self.ports.items():
            if n.startswith("replica") and str(p) == last:
                return n
        return None

    def keys_on_two_replicas(self):
        """Two affinity keys that nginx sends to different replicas: {replica: key}."""
        found = {}
        for i in range(40):
            key = "conversation-%d" % i
            status, _ = request(self.port, "GET", "/v1/models", key=key)
            r = self.served_by()
            if status == 200 and r and r not in found:
                found[r] = key
            if len(found) == 2:
                break
        return found

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for n in self.pids:   # a sanitizer build's reports land in the replicas' logs
            path = os.path.join(self.state, n + ".log")
            text = open(path, errors="replace").read() if n.startswith("replica") and os.path.exists(path) else ""
            check(not re.search(r"ERROR: AddressSanitizer|ERROR: LeakSanitizer|runtime error:", text),
                  "%s's log has a sanitizer report: %s" % (n, text[-1500:]))
        for n, pid in self.pids.items():   # nothing the script started outlives it
            try:
                os.kill(pid, 0)
                check(False, "%s (pid %d) still runs after the script stopped" % (n, pid))
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def shared_load(rs, tier_metric, what, in_body=False):
    """The long prompt on replica A (cold), then on replica B through the tier: (A, B, keys) or None.
    in_body: the key travels as the body's prompt_cache_key (nginx's njs rule reads it), not as the header."""
    keys = rs.keys_on_two_replicas()
    if not check(len(keys) == 2, "%s: two keys on different replicas (%s)" % (what, keys)):
        return None
    (a, ka), (b, kb) = sorted(keys.items())

    def ask(key):
        if in_body:
            return request(rs.port, "POST", "/v1/chat/completions", chat(prompt_cache_key=key))
        return request(rs.port, "POST", "/v1/chat/completions", chat(), key=key)

    status, text = ask(ka)
    by = rs.served_by()
    check(status == 200 and by == a, "%s: key %s served by %s, wanted %s: %s %s" % (what, ka, by, a, status, text[:200]))
    r1 = json.loads(text)
    u1 = r1["usage"]
    check(u1["prompt_tokens"] > 300 and u1["prompt_tokens_details"]["cached_tokens"] < 20, "%s: A prefills: %s" % (what, u1))
    # A writes its entry as the request ends (after the reply): wait for it, not for a time
    check(wait_metric_at_least(rs.ports[a], tier_metric + "_writes_total", 1) >= 1, "%s: A wrote its entry" % what)
    status, text = ask(kb)
    by = rs.served_by()
    check(status == 200 and by == b, "%s: key %s served by %s, wanted %s: %s" % (what, kb, by, b, status))
    r2 = json.loads(text)
    u2 = r2["usage"]
    check(u2["prompt_tokens"] == u1["prompt_tokens"] and u2["prompt_tokens_details"]["cached_tokens"] == u2["prompt_tokens"] - 1,
          "%s: B loads A's prefix instead of prefilling: %s" % (what, u2))
    check(metric(rs.ports[b], tier_metric + "_loads_total") == 1, "%s: B counts one load" % what)
    t1, t2 = r1["choices"][0]["message"]["content"], r2["choices"][0]["message"]["content"]
    check(t1 == t2 and len(t1) > 0, "%s: same greedy text from the loaded prefix: %r vs %r" % (what, t2, t1))
    return a, b, ka, kb


def dir_files(d):
    return {f: os.path.getsize(os.path.join(d, f)) for f in os.listdir(d) if f.endswith(".okvprefix")}


def shared_cap(tmp, program, entry_bytes):
    """Both replicas write to one directory capped at 2.5 entries: after four
    distinct long prompts (alternating replicas) the directory holds at most
    the cap, whoever wrote last; the first prompt, removed by one replica
    while the other had it indexed, is asked again on that other one: a
    clean miss (200, prefilled), not an error."""
    cap = entry_bytes * 5 // 2
    rs = Replicas(tmp, "cap", program, serve=["--prefix-cache-dir-bytes", str(cap)])
    try:
        keys = rs.keys_on_two_replicas()
        if not check(len(keys) == 2, "cap: two keys on different replicas (%s)" % keys):
            return
        order = [keys["replica1"], keys["replica2"]] * 2
        d = os.path.join(rs.state, "prefix-cache")
        writes = {"replica1": 0, "replica2": 0}
        for i, key in enumerate(order):
            body = chat("Question %d?" % i)
            body["messages"][0]["content"] = "Variant %d. " % i + SYSTEM
            status, text = request(rs.port, "POST", "/v1/chat/completions", body, key=key)
            r = rs.served_by()
            check(status == 200, "cap: prompt %d: %s %s" % (i, status, text[:200]))
            writes[r] += 1
            wait_metric_at_least(rs.ports[r], "offkv_prefix_cache_dir_writes_total", writes[r])
        files = dir_files(d)
        check(0 < len(files) <= 2 and sum(files.values()) <= cap,
              "cap %d over two writers: %s" % (cap, files))
        # prompt 0 went to replica1 and was removed by the cap; replica2 asks for it now
        body = chat("Question 0?")
        body["messages"][0]["content"] = "Variant 0. " + SYSTEM
        status, text = request(rs.port, "POST", "/v1/chat/completions", body, key=keys["replica2"])
        u = json.loads(text).get("usage", {}) if status == 200 else {}
        check(status == 200 and u.get("prompt_tokens_details", {}).get("cached_tokens", 99) < 20,
              "cap: a prompt whose file another replica removed is prefilled: %s %s" % (status, text[:200]))
    finally:
        rs.stop()
    logs = "".join(open(os.path.join(rs.state, "replica%d.log" % i)).read() for i in (1, 2))
    check("least recently used" in logs, "cap: removals noted: " + logs[-600:])


def stream_events(port, body, key, first_event, out):
    """Reads a streamed reply; sets first_event at the first content chunk; out gets (events, done)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    c.request("POST", "/v1/chat/completions", body=json.dumps(body),
              headers={"Content-Type": "application/json", "X-Prompt-Cache-Key": key})
    r = c.getresponse()
    events, done = [], False
    try:
        for line in r:
            if line.startswith(b"data: [DONE]"):
                done = True
            elif line.startswith(b"data: {"):
                events.append(json.loads(line[6:]))
                first_event.set()
    except (OSError, http.client.HTTPException) as e:
        events.append({"error": str(e)})
    first_event.set()
    out.append((r.status, events, done))


def kill_one(rs, a, b, ka, kb):
    """Replica A dies (SIGKILL) while a stream runs on B: the stream finishes; key A's requests go to B."""
    first, out = threading.Event(), []
    body = chat("Tell me a long story about caches.", max_tokens=60, stream=True)
    t = threading.Thread(target=stream_events, args=(rs.port, body, kb, first, out))
    t.start()
    check(first.wait(120), "the stream on B started")
    os.kill(rs.pids[a], signal.SIGKILL)
    for i in range(3):   # key A's replica is dead: nginx's connect fails and the request goes to B
        status, text = request(rs.port, "POST", "/v1/chat/completions", chat("Question %d?" % i, max_tokens=4), key=ka)
        check(status == 200 and "choices" in json.loads(text), "request %d for dead replica A retried: %s %s" % (i, status, text[:200]))
        by = rs.served_by()
        check(by == b, "request %d answered by B (%s)" % (i, by))
    t.join(120)
    check(not t.is_alive() and out, "the stream on B ended")
    if out:
        status, events, done = out[0]
        finish = [c.get("finish_reason") for e in events for c in e.get("choices", []) if c.get("finish_reason")]
        check(status == 200 and done and finish and not any("error" in e for e in events),
              "the stream in flight on B finished: status %s, [DONE] %s, finish %s" % (status, done, finish))
    log = open(os.path.join(rs.state, "nginx-access.log")).read()
    check(re.search(r"upstream=\S+:%d, " % rs.ports[a], log) is not None, "nginx logged the retry past A: " + log[-600:])


def main():
    if not shutil.which("nginx") and not os.path.exists("/usr/sbin/nginx"):
        print("SKIP: nginx is not installed (scripts/setup.sh installs it)", file=sys.stderr)
        return 77
    with tempfile.TemporaryDirectory(prefix="okv-replicas-") as tmp:
        program = make_program(tmp)
        rs = Replicas(tmp, "dir", program)
        try:
            # the replica itself accepts the header as the affinity key, bounded (a short prompt: nothing shared)
            short = {"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "Hi"}]}
            status, text = request(rs.ports["replica1"], "POST", "/v1/chat/completions", short, key="k" * 300)
            check(status == 400 and json.loads(text)["error"]["param"] == "X-Prompt-Cache-Key",
                  "a 300-byte X-Prompt-Cache-Key is refused naming the header: %s %s" % (status, text[:200]))
            status, text = request(rs.ports["replica1"], "POST", "/v1/chat/completions", short, key="k" * 256)
            check(status == 200, "a 256-byte X-Prompt-Cache-Key is accepted: %s %s" % (status, text[:200]))
            got = shared_load(rs, "offkv_prefix_cache_dir", "shared dir")
            entry = max(dir_files(os.path.join(rs.state, "prefix-cache")).values(), default=0)
            if got:
                kill_one(rs, *got)
        finally:
            rs.stop()
            if failures:
                print("".join(rs.out)[-2000:], file=sys.stderr)
        if entry:
            shared_cap(tmp, program, entry)
        redis = shutil.which("redis-server")
        if not redis:
            print("SKIP (Redis part): redis-server is not installed (scripts/setup.sh installs it)", file=sys.stderr)
        else:
            rport = free_port()
            rp = subprocess.Popen([redis, "--bind", "127.0.0.1", "--port", str(rport), "--save", "", "--appendonly", "no",
                                   "--dir", tmp, "--maxmemory", "256mb", "--maxmemory-policy", "allkeys-lru"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                t0 = time.time()
                while time.time() - t0 < 20:
                    try:
                        socket.create_connection(("127.0.0.1", rport), timeout=1).close()
                        break
                    except OSError:
                        time.sleep(0.05)
                # a server refused the option only when built without hiredis (probed against a closed port)
                p = subprocess.Popen([OFFKV, "serve", program, "--port", "0", "--prefix-cache-redis", "127.0.0.1:%d" % rport],
                                     stderr=subprocess.PIPE, text=True)
                line = p.stderr.readline()
                p.send_signal(signal.SIGTERM)
                p.communicate(timeout=60)
                if "no Redis support" in line:
                    print("SKIP (Redis part): this offkv was built without hiredis (apt-get install libhiredis-dev)",
                          file=sys.stderr)
                else:
                    njs = os.path.exists("/usr/lib/nginx/modules/ngx_http_js_module.so")
                    if not njs:
                        print("SKIP (njs key from the body): libnginx-mod-http-js is not installed; the Redis part "
                              "sends the key as the header", file=sys.stderr)
                    rs = Replicas(tmp, "redis", program, extra_run=["--dir", "none"] + (["--njs"] if njs else []),
                                  serve=["--prefix-cache-redis", "127.0.0.1:%d" % rport, "--prefix-cache-redis-ttl", "600"])
                    try:
                        shared_load(rs, "offkv_prefix_cache_redis", "redis", in_body=njs)
                    finally:
                        rs.stop()
                        if failures:
                            print("".join(rs.out)[-2000:], file=sys.stderr)
            finally:
                rp.terminate()
                rp.wait(30)
    return exit_status(failures)


if __name__ == "__main__":
    sys.exit(main())
