#!/usr/bin/env python3
"""Replicas benchmark (docs/deploy.md's numbers; not in CI), over
deploy/run-replicas.sh on loopback:

1. TTFT of a long shared system prompt (~--prompt-tokens) on replica B
   after replica A prefilled it: cold (A's own first request), loaded from
   the shared --prefix-cache-dir, loaded from Redis (a redis-server this
   script starts). Each repetition uses a different prompt, so no replica
   has it in memory.
2. Aggregate generated tokens/s of --clients concurrent streams: one
   replica (--parallel 2*P) asked directly vs two replicas (--parallel P)
   through nginx (no affinity key: least_conn).

usage: replicas.py OFFKV PROGRAM.okv [--prompt-tokens 2000] [--reps 3] [--clients 4]
                   [--requests 3] [--max-tokens 64] [--parallel 2] [--ctx 4096]"""
import argparse
import http.client
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
RUN = os.path.join(ROOT, "deploy", "run-replicas.sh")


def free_port():
    with socket.socket() as k:
        k.bind(("127.0.0.1", 0))
        return k.getsockname()[1]


def free_ports_after(n):
    """A port B such that B+1 .. B+n are free now (run-replicas.sh puts replica i on B+i)."""
    while True:
        base, socks = free_port(), []
        try:
            for i in range(1, n + 1):
                socks.append(socket.socket())
                socks[-1].bind(("127.0.0.1", base + i))
            return base
        except OSError:
            pass
        finally:
            for k in socks:
                k.close()


class Replicas:
    def __init__(self, offkv, program, state, n, run_args, serve_args):
        self.state, self.port, base = state, free_port(), free_ports_after(n)
        while base < self.port <= base + n:
            base = free_ports_after(n)
        self.proc = subprocess.Popen([RUN, program, "-n", str(n), "--port", str(self.port), "--base-port", str(base),
                                      "--state", state, *run_args, "--", *serve_args],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ, "OFFKV": offkv})
        out = []
        for line in self.proc.stdout:
            out.append(line)
            if "run-replicas: ready" in line:
                break
        else:
            raise RuntimeError("run-replicas.sh did not start: " + "".join(out))
        threading.Thread(target=lambda: [None for _ in self.proc.stdout], daemon=True).start()
        self.ports = {}
        for line in open(os.path.join(state, "pids")):
            name, _, port = line.split()
            if name.startswith("replica"):
                self.ports[name] = int(port)

    def served_by(self):
        seen, t0 = getattr(self, "_seen", 0), time.time()   # nginx logs a request after its reply went out
        lines = open(os.path.join(self.state, "nginx-access.log")).read().splitlines()
        while len(lines) <= seen and time.time() - t0 < 10:
            time.sleep(0.02)
            lines = open(os.path.join(self.state, "nginx-access.log")).read().splitlines()
        self._seen = len(lines)
        last = lines[-1]
        up = re.search(r"upstream=(.*?) upstream_status=", last).group(1).split(",")[-1].strip()
        return next(n for n, p in self.ports.items() if up.endswith(":%d" % p))

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(120)


def post(port, path, body, key=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=900)
    h = {"Content-Type": "application/json", **({"X-Prompt-Cache-Key": key} if key else {})}
    c.request("POST" if body is not None else "GET", path, body=json.dumps(body) if body is not None else None, headers=h)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


def stream(port, body, key=None):
    """(seconds to the first content chunk, generated tokens, usage) of one streamed chat request."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=900)
    h = {"Content-Type": "application/json", **({"X-Prompt-Cache-Key": key} if key else {})}
    body = {**body, "stream": True, "stream_options": {"include_usage": True}}
    t0 = time.time()
    c.request("POST", "/v1/chat/completions", body=json.dumps(body), headers=h)
    r = c.getresponse()
    first, usage = None, None
    for line in r:
        if line.startswith(b"data: {"):
            e = json.loads(line[6:])
            if first is None and e.get("choices") and e["choices"][0]["delta"].get("content"):
                first = time.time() - t0
            usage = e.get("usage") or usage
    c.close()
    return first, usage


def system_prompt(rep, words):
    return "Session %d. " % rep + " ".join("Rule %d: answer questions about geography briefly and precisely, "
                                            "naming the river or mountain." % i for i in range(words))


def two_keys(rs):
    found = {}
    for i in range(60):
        post(rs.port, "/v1/models", None, key="k%d" % i)
        found.setdefault(rs.served_by(), "k%d" % i)
        if len(found) == 2:
            return found["replica1"], found["replica2"]
    raise RuntimeError("no two keys on different replicas")


def ttft_phase(a, rs, reps, rules, max_tokens, what):
    ka, kb = two_keys(rs)
    cold, warm = [], []
    for rep in range(reps):
        body = {"messages": [{"role": "system", "content": system_prompt(rep, rules)},
                             {"role": "user", "content": "What is the longest river in Africa?"}],
                "temperature": 0, "max_tokens": max_tokens}
        t_cold, u = stream(rs.port, body, ka)
        port_a = rs.ports[rs.served_by()]
        metric = re.compile(r"^offkv_prefix_cache_%s_writes_total (\d+)" % what, re.M)
        t0 = time.time()
        while time.time() - t0 < 60:   # A writes its entry as the request ends
            m = metric.search(post(port_a, "/metrics", None)[1].decode())
            if m and int(m.group(1)) >= rep + 1:
                break
            time.sleep(0.05)
        t_warm, u2 = stream(rs.port, body, kb)
        print("  %s rep %d: prompt %d tokens, cold %.3f s, from %s %.3f s (cached %d)" %
              (what, rep, u["prompt_tokens"], t_cold, what, t_warm, u2["prompt_tokens_details"]["cached_tokens"]), flush=True)
        cold.append(t_cold)
        warm.append(t_warm)
    return cold, warm


def load(port, clients, requests, max_tokens):
    qs = ["What is the capital of France?", "Name three colours.", "Why is the sky blue?", "Who wrote Hamlet?",
          "Write a haiku about the sea.", "What do bees make?", "Describe a cat.", "What is 12 times 7?"]
    total = [0]
    lock = threading.Lock()

    def client(i):
        for k in range(requests):
            body = {"messages": [{"role": "user", "content": qs[(i + k) % len(qs)]}], "temperature": 0,
                    "max_tokens": max_tokens, "ignore_eos": True}
            _, u = stream(port, body)
            with lock:
                total[0] += u["completion_tokens"]

    t0 = time.time()
    ts = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return total[0] / (time.time() - t0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("offkv")
    ap.add_argument("program")
    ap.add_argument("--prompt-tokens", type=int, default=2000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--requests", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--parallel", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--skip-load", action="store_true")
    a = ap.parse_args()
    offkv = os.path.abspath(a.offkv)
    rules = max(1, a.prompt_tokens // 19)   # ~19 tokens per rule (SmolLM2's and Llama-3's BPE)
    serve = ["--parallel", str(a.parallel), "--ctx-per-seq", str(a.ctx)]
    with tempfile.TemporaryDirectory(prefix="okv-bench-replicas-") as tmp:
        rs = Replicas(offkv, a.program, os.path.join(tmp, "dir"), 2, [], serve)
        try:
            cold_d, dir_t = ttft_phase(a, rs, a.reps, rules, 8, "dir")
        finally:
            rs.stop()
        rport = free_port()
        rp = subprocess.Popen([shutil.which("redis-server"), "--bind", "127.0.0.1", "--port", str(rport), "--save", "",
                               "--appendonly", "no", "--dir", tmp, "--maxmemory", "2gb", "--maxmemory-policy", "allkeys-lru"],
                              stdout=subprocess.DEVNULL)
        time.sleep(0.5)
        try:
            rs = Replicas(offkv, a.program, os.path.join(tmp, "redis"), 2, ["--dir", "none"],
                          serve + ["--prefix-cache-redis", "127.0.0.1:%d" % rport])
            try:
                cold_r, redis_t = ttft_phase(a, rs, a.reps, rules, 8, "redis")
            finally:
                rs.stop()
        finally:
            rp.terminate()
            rp.wait()
        cold = statistics.median(cold_d + cold_r)
        print("TTFT median: cold %.3f s, shared dir %.3f s (%.1fx), Redis %.3f s (%.1fx)" %
              (cold, statistics.median(dir_t), cold / statistics.median(dir_t), statistics.median(redis_t),
               cold / statistics.median(redis_t)), flush=True)
        if a.skip_load:
            return 0
        rs = Replicas(offkv, a.program, os.path.join(tmp, "one"), 1, ["--dir", "none"],
                      ["--parallel", str(2 * a.parallel), "--ctx-per-seq", "1024"])
        try:
            one = load(rs.ports["replica1"], a.clients, a.requests, a.max_tokens)
        finally:
            rs.stop()
        rs = Replicas(offkv, a.program, os.path.join(tmp, "two"), 2, ["--dir", "none"],
                      ["--parallel", str(a.parallel), "--ctx-per-seq", "1024"])
        try:
            two = load(rs.port, a.clients, a.requests, a.max_tokens)
        finally:
            rs.stop()
        print("aggregate: 1 replica direct %.1f tok/s, 2 replicas via nginx %.1f tok/s (%.2fx), %d clients" %
              (one, two, two / one, a.clients), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
