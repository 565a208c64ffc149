#!/usr/bin/env python3
"""Load benchmark for `offkv serve`: for each concurrency C, C client threads
each send streamed chat requests back to back (greedy, fixed max_tokens, a
different question each) for a fixed number of requests; reports aggregate
generated tokens/s, p50/p99 time to first token and per-stream decode rate.

usage: serve_load.py OFFKV PROGRAM.okv [--conc 1,4,16] [--requests-per-stream 3] [--max-tokens 64]
                     [--parallel 16] [--threads 2]
Starts its own server on 127.0.0.1 (port 0) with --parallel P and stops it."""
import argparse
import http.client
import json
import os
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "server"))
from serve_util import Server  # noqa: E402

QUESTIONS = ["What is the capital of France?", "Name three colours.", "Why is the sky blue?", "What is 12 times 7?",
             "Write a haiku about the sea.", "Who wrote Hamlet?", "What do bees make?", "Describe a cat in one sentence."]


def one_request(port, q, max_tokens):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    body = {"messages": [{"role": "user", "content": q}], "temperature": 0, "max_tokens": max_tokens, "stream": True,
            "stream_options": {"include_usage": True}}
    t0 = time.time()
    c.request("POST", "/v1/chat/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    first, tokens = None, 0
    while True:
        line = r.readline()
        if not line:
            break
        if line.startswith(b"data: {"):
            e = json.loads(line[6:])
            if first is None and e.get("choices") and e["choices"][0]["delta"].get("content"):
                first = time.time() - t0
            if e.get("usage"):
                tokens = e["usage"]["completion_tokens"]
    c.close()
    return first or (time.time() - t0), tokens, time.time() - t0


def run_level(port, conc, per_stream, max_tokens):
    ttfts, totals, lock = [], [0, 0.0], threading.Lock()

    def client(k):
        for i in range(per_stream):
            t, n, d = one_request(port, QUESTIONS[(k * per_stream + i) % len(QUESTIONS)] + " (%d)" % k, max_tokens)
            with lock:
                ttfts.append(t)
                totals[0] += n
    t0 = time.time()
    ts = [threading.Thread(target=client, args=(k,)) for k in range(conc)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall = time.time() - t0
    ttfts.sort()
    p99 = ttfts[min(len(ttfts) - 1, int(round(0.99 * (len(ttfts) - 1))))]
    return totals[0] / wall, statistics.median(ttfts), p99, totals[0], wall


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("offkv")
    ap.add_argument("program")
    ap.add_argument("--conc", default="1,4,16")
    ap.add_argument("--requests-per-stream", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--parallel", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    s = Server(a.offkv, a.program, "--parallel", str(a.parallel), "--threads", str(a.threads), "--ctx-per-seq", "1024")
    try:
        print("| streams | aggregate tok/s | p50 TTFT | p99 TTFT | tokens | wall |")
        print("|---|---|---|---|---|---|")
        for conc in [int(x) for x in a.conc.split(",")]:
            rate, p50, p99, n, wall = run_level(s.port, conc, a.requests_per_stream, a.max_tokens)
            print("| %d | %.1f | %.3f s | %.3f s | %d | %.1f s |" % (conc, rate, p50, p99, n, wall), flush=True)
    finally:
        s.stop()


if __name__ == "__main__":
    main()
