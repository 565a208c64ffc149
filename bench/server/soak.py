#!/usr/bin/env python3
"""Soak run for `offkv serve` (not in CI): for --minutes, --clients threads
send mixed requests back to back (streamed and not, chat and completions,
greedy and seeded sampling, shared system prompts, varying lengths, a few
bad requests) and drop about --disconnect of the streams mid-way. Every
--sample seconds the server's RSS (/proc/PID/status VmRSS) and a few
/metrics values are printed; at the end a summary: RSS first/last/max,
requests by outcome, and unexpected errors (any status other than the
provoked 400s, any stream without [DONE] that was not dropped on purpose).

usage: soak.py OFFKV PROGRAM.okv [--minutes 30] [--clients 8] [--parallel 8] [--threads 2]
                                  [--disconnect 0.2] [--sample 30] [--seed 1]
Starts its own server on 127.0.0.1 (port 0) and stops it; exit 1 on unexpected errors."""
import argparse
import http.client
import json
import os
import random
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "server"))
from serve_util import Server  # noqa: E402

SYSTEMS = ["You are a helpful assistant. Answer briefly and precisely. " * 3, "You are a pirate. " * 6, None]
QUESTIONS = ["What is the capital of France?", "Name three colours.", "Why is the sky blue?", "What is 12 times 7?",
             "Write a haiku about the sea.", "Who wrote Hamlet?", "Tell me a long story about a dragon.",
             "List the planets of the solar system in order and say one thing about each."]


def rss_kb(pid):
    try:
        for line in open("/proc/%d/status" % pid):
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return -1


def make_body(rng):
    kind = rng.random()
    if kind < 0.05:   # provoked errors: 400
        return "bad", rng.choice([{"messages": "nope"}, {"messages": [{"role": "user"}]}, {"prompt": 7},
                                  {"messages": [{"role": "user", "content": "x"}], "top_p": 3}])
    sampling = {"temperature": 0} if rng.random() < 0.5 else {"temperature": 0.8, "top_p": 0.9, "seed": rng.randrange(1000)}
    n = rng.choice([4, 16, 48, 128])
    if kind < 0.25:
        return "completion", {"prompt": rng.choice(QUESTIONS), "max_tokens": n, **sampling}
    msgs = []
    sys_p = rng.choice(SYSTEMS)
    if sys_p:
        msgs.append({"role": "system", "content": sys_p})
    msgs.append({"role": "user", "content": rng.choice(QUESTIONS) + " " + "more " * rng.randrange(0, 60)})
    return "chat", {"messages": msgs, "max_tokens": n, "frequency_penalty": rng.choice([0, 0.5]), **sampling}


def one(port, rng, disconnect, stats, lock):
    what, body = make_body(rng)
    path = "/v1/completions" if "prompt" in body and what != "bad" else "/v1/chat/completions"
    stream = what != "bad" and rng.random() < 0.7
    if stream:
        body["stream"] = True
    drop = stream and rng.random() < disconnect
    outcome = "ok"
    try:
        if drop:   # raw socket: read a few events, then hang up
            data = json.dumps(body).encode()
            k = socket.create_connection(("127.0.0.1", port), timeout=300)
            k.sendall(b"POST " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data)
            got, want = b"", rng.randrange(1, 6)
            while got.count(b"data: ") < want and b"data: [DONE]" not in got:   # a short reply ends first
                c = k.recv(4096)
                if not c:
                    break
                got += c
            k.close()
            outcome = "dropped"
        else:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
            c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
            r = c.getresponse()
            text = r.read().decode("utf-8", "replace")
            c.close()
            if what == "bad":
                outcome = "bad-400" if r.status == 400 else "unexpected %d" % r.status
            elif r.status != 200:
                outcome = "unexpected %d" % r.status
            elif stream and "data: [DONE]" not in text:
                outcome = "unexpected: stream without [DONE]"
            elif stream and '"error"' in text:
                outcome = "unexpected: error event"
    except Exception as e:  # noqa: BLE001 - every failure is a finding here
        outcome = "unexpected exception %s" % type(e).__name__
    with lock:
        stats[outcome] = stats.get(outcome, 0) + 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("offkv")
    ap.add_argument("program")
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--parallel", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--disconnect", type=float, default=0.2)
    ap.add_argument("--sample", type=float, default=30)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    s = Server(a.offkv, a.program, "--parallel", str(a.parallel), "--threads", str(a.threads), "--ctx-per-seq", "1024",
               "--max-queue", "256")
    stats, lock, stop = {}, threading.Lock(), time.time() + a.minutes * 60

    def client(k):
        rng = random.Random(a.seed * 1000 + k)
        while time.time() < stop:
            one(s.port, rng, a.disconnect, stats, lock)
    ts = [threading.Thread(target=client, args=(k,), daemon=True) for k in range(a.clients)]
    for t in ts:
        t.start()
    rss, t0 = [], time.time()
    try:
        while time.time() < stop:
            time.sleep(min(a.sample, max(0.1, stop - time.time())))
            kb = rss_kb(s.proc.pid)
            rss.append(kb)
            try:
                m = {k: s.metric(k) for k in ("offkv_cache_cells_used", "offkv_active_sequences", "offkv_generated_tokens_total")}
            except Exception:  # noqa: BLE001
                m = {}
            with lock:
                done = dict(stats)
            print("t=%6.0fs rss=%d KiB %s %s" % (time.time() - t0, kb, m, done), flush=True)
        for t in ts:
            t.join(timeout=900)
    finally:
        rc = s.stop()
    bad = {k: v for k, v in stats.items() if k.startswith("unexpected")}
    print("RSS KiB first %d last %d max %d; outcomes %s; server exit %s" %
          (rss[0] if rss else -1, rss[-1] if rss else -1, max(rss) if rss else -1, stats, rc))
    if bad or rc != 0:
        print("UNEXPECTED: %s" % bad, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
