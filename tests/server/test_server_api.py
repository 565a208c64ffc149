#!/usr/bin/env python3
"""`offkv serve`: the OpenAI request fields clients send on every call, end
to end on loopback against a generated Llama (random weights, the Llama-3.1
tokenizer) under --deterministic, with plain HTTP and (when installed) the
openai client:

- logprobs / top_logprobs (chat) and logprobs k (completions, legacy shape),
  streamed and not: every value <= 0, top lists sorted, greedy's token is
  its own top entry, and the values equal the log-softmax of the logits
  `offkv logits` computes for the same ids within 1e-4 — before temperature
  (a temperature-1.5 request reports the same distribution);
- n > 1: choices indexed 0..n-1 (streamed chunks carry the index), greedy
  choices identical, choice k of a seeded request equal to n=1 with seed+k,
  prompt tokens counted once and the prompt prefilled once (step tokens);
  n above --parallel is a 400; n=4 beside a running request waits for its
  sequences; a hang-up frees every choice's sequence, one cancellation;
- stream_options.include_usage, max_completion_tokens over max_tokens,
  user / prompt_cache_key accepted;
- system_fingerprint on every reply and chunk, the first chat chunk of a
  choice carrying the role alone;
- --cors-origin: OPTIONS preflight 204 before the API key, the origin on
  every response (streamed, errors); without the flag neither.

usage: test_server_api.py OFFKV OKV_MKCKPT"""
import array
import http.client
import json
import math
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import Server, chat_text, exit_status  # noqa: E402
from test_server import check, failures, make_program  # noqa: E402  (OFFKV, MKCKPT from sys.argv as here)

OFFKV = sys.argv[1]
KEY = "api-key-42"
AUTH = {"Authorization": "Bearer " + KEY}
ORIGIN = "http://app.example"
PROMPT_IDS = [128000, 791, 4062, 14198, 39935]
VOCAB = 128256


def chat(content, **kw):
    return {"model": "m", "messages": [{"role": "user", "content": content}], "temperature": 0, **kw}


def raw(s, method, path, body=None, headers=None):
    """(status, headers dict with lower-case names, body text) of one request."""
    c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=120)
    c.request(method, path, body=json.dumps(body) if body is not None else None,
              headers={"Content-Type": "application/json", **(headers or {})})
    r = c.getresponse()
    text = r.read().decode("utf-8")
    c.close()
    return r.status, {k.lower(): v for k, v in r.getheaders()}, text


def expect_400(s, path, body, param):
    code, r = s.post(path, body)
    err = r.get("error", {}) if isinstance(r, dict) else {}
    check(code == 400 and err.get("param") == param, "%s %s -> %d %s (wanted 400 naming %s)" % (path, str(body)[-70:], code, r, param))


# ---- the independent reference: offkv logits --------------------------------------------

def log_softmax_last(program, ids, tmp):
    """log-softmax (float64) of the logits row after ids, from `offkv logits`."""
    out = os.path.join(tmp, "ref.f32")
    subprocess.run([OFFKV, "logits", program, "--tokens", " ".join(map(str, ids)), "--out", out, "--deterministic"],
                   check=True, stderr=subprocess.DEVNULL)
    row = array.array("f")
    with open(out, "rb") as f:
        f.seek(4 * VOCAB * (len(ids) - 1))
        row.frombytes(f.read(4 * VOCAB))
    mx = max(row)
    lse = mx + math.log(math.fsum(math.exp(v - mx) for v in row))
    return [v - lse for v in row]


def top(lsm, k):
    return sorted(range(len(lsm)), key=lambda i: (-lsm[i], i))[:k]


def close(a, b, tol=1e-4):
    return abs(a - b) <= tol


def sorted_desc(values):
    return all(a >= b for a, b in zip(values, values[1:]))


def test_completion_logprobs_vs_logits(s, program, tmp):
    """Greedy completions from ids with logprobs 5: each step's token_logprob
    and top 5 are the reference log-softmax's (the greedy token its argmax);
    streamed chunks give the same entries; text_offset counts the tokens."""
    body = {"prompt": PROMPT_IDS, "max_tokens": 4, "temperature": 0, "logprobs": 5}
    code, r = s.post("/v1/completions", body)
    check(code == 200, "completion with logprobs: %s %s" % (code, r))
    lp = r["choices"][0]["logprobs"]
    check(len(lp["tokens"]) == 4 == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == len(lp["text_offset"]),
          "one entry per token: %s" % lp)
    ids = list(PROMPT_IDS)
    for t in range(4):
        ref = log_softmax_last(program, ids, tmp)
        best = top(ref, 5)
        got_top = list(lp["top_logprobs"][t].values())
        check(close(lp["token_logprobs"][t], ref[best[0]]),
              "step %d: token_logprob %.6f vs reference %.6f" % (t, lp["token_logprobs"][t], ref[best[0]]))
        check(len(got_top) == 5 and all(close(g, ref[i]) for g, i in zip(got_top, best)),
              "step %d: top 5 %s vs reference %s" % (t, got_top, [ref[i] for i in best]))
        check(sorted_desc(got_top) and all(v <= 0 for v in got_top), "step %d: sorted, <= 0: %s" % (t, got_top))
        check(lp["top_logprobs"][t].get(lp["tokens"][t]) == lp["token_logprobs"][t], "step %d: greedy's token leads its top list" % t)
        ids.append(best[0])
    offsets = [0]
    for tok in lp["tokens"][:-1]:
        offsets.append(offsets[-1] + len(tok))
    check(lp["text_offset"] == offsets, "text_offset %s vs token lengths %s" % (lp["text_offset"], offsets))
    if "\ufffd" not in "".join(lp["tokens"]):
        check("".join(lp["tokens"]) == r["choices"][0]["text"], "tokens join to the text")
    events, done = s.stream("/v1/completions", {**body, "stream": True})
    st = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    for e in events:
        for ch in e["choices"]:
            for k in st:
                st[k] += (ch.get("logprobs") or {}).get(k, [])
    check(done and st["tokens"] == lp["tokens"] and st["text_offset"] == lp["text_offset"] and
          all(close(a, b, 1e-6) for a, b in zip(st["token_logprobs"], lp["token_logprobs"])),
          "streamed logprobs %s vs %s" % (st, lp))
    # sampled at temperature 1.5: the model's own distribution is reported, not the tempered one
    ref = log_softmax_last(program, PROMPT_IDS, tmp)
    best = top(ref, 5)
    for seed in (3, 4, 5):   # top_k 5: the sampled token is one of the 5 listed, with its listed value
        hot = s.post("/v1/completions", {**body, "temperature": 1.5, "top_k": 5, "seed": seed, "max_tokens": 1})[1]
        hot = hot["choices"][0]["logprobs"]
        check(all(close(g, ref[i]) for g, i in zip(hot["top_logprobs"][0].values(), best)),
              "temperature 1.5 reports the raw distribution: %s vs %s" % (hot["top_logprobs"][0], [ref[i] for i in best]))
        check(hot["top_logprobs"][0].get(hot["tokens"][0]) == hot["token_logprobs"][0], "sampled token's logprob: %s" % hot)


def test_chat_logprobs(s):
    """Chat logprobs.content[]: one entry per token with token, logprob, bytes and
    top_logprobs (sorted, k long, greedy's token first); streamed the same; absent -> null."""
    body = chat("Tell me about foxes", max_tokens=6, logprobs=True, top_logprobs=3)
    code, r = s.post("/v1/chat/completions", body)
    ch = r["choices"][0]
    content = ch["logprobs"]["content"] if code == 200 and ch.get("logprobs") else []
    check(len(content) == r["usage"]["completion_tokens"] == 6, "6 entries: %s" % ch.get("logprobs"))
    for e in content:
        tops = [t["logprob"] for t in e["top_logprobs"]]
        check(len(tops) == 3 and sorted_desc(tops) and e["logprob"] <= 0, "entry %s" % e)
        check(e["top_logprobs"][0]["token"] == e["token"] and e["top_logprobs"][0]["logprob"] == e["logprob"],
              "greedy: the chosen token is top_logprobs[0]: %s" % e)
        check(bytes(e["bytes"]) == e["token"].encode("utf-8"), "bytes are the token's UTF-8: %s" % e)
    if content and "\ufffd" not in "".join(e["token"] for e in content):
        check("".join(e["token"] for e in content) == ch["message"]["content"], "tokens join to the content")
    events, done = s.stream("/v1/chat/completions", {**body, "stream": True})
    streamed = [e for ev in events for c in ev["choices"] for e in ((c.get("logprobs") or {}).get("content") or [])]
    check(done and [e["token"] for e in streamed] == [e["token"] for e in content] and
          all(close(a["logprob"], b["logprob"], 1e-6) for a, b in zip(streamed, content)), "streamed chat logprobs")
    plain = s.post("/v1/chat/completions", chat("Tell me about foxes", max_tokens=2))[1]
    check(plain["choices"][0].get("logprobs", "absent") is None, "no logprobs asked: null")
    only = s.post("/v1/chat/completions", chat("Tell me about foxes", max_tokens=2, logprobs=True))[1]
    check(all(e["top_logprobs"] == [] for e in only["choices"][0]["logprobs"]["content"]), "logprobs without top_logprobs: []")
    expect_400(s, "/v1/chat/completions", chat("x", top_logprobs=2), "top_logprobs")
    expect_400(s, "/v1/chat/completions", chat("x", logprobs=True, top_logprobs=21), "top_logprobs")
    expect_400(s, "/v1/chat/completions", chat("x", logprobs="yes"), "logprobs")
    expect_400(s, "/v1/completions", {"prompt": "x", "logprobs": 21}, "logprobs")


def test_n(s):
    """n choices: indexed, greedy ones identical, seeded choice k == n=1 with seed+k,
    usage counts the prompt once, the prompt is prefilled once."""
    one = s.post("/v1/chat/completions", chat("Name three rivers", max_tokens=8))[1]
    code, r = s.post("/v1/chat/completions", chat("Name three rivers", max_tokens=8, n=3))
    texts = [c["message"]["content"] for c in r.get("choices", [])]
    check(code == 200 and [c["index"] for c in r["choices"]] == [0, 1, 2], "n=3 indexed 0..2: %s" % r)
    check(texts == [one["choices"][0]["message"]["content"]] * 3, "greedy n=3 identical to n=1: %s" % texts)
    check(r["usage"]["prompt_tokens"] == one["usage"]["prompt_tokens"] and r["usage"]["completion_tokens"] == 24,
          "usage: prompt once, completions summed: %s vs %s" % (r["usage"], one["usage"]))
    body = chat("Name three rivers", max_tokens=8, n=3, temperature=1.0, top_k=0, seed=7)
    a = [c["message"]["content"] for c in s.post("/v1/chat/completions", body)[1]["choices"]]
    b = [c["message"]["content"] for c in s.post("/v1/chat/completions", body)[1]["choices"]]
    singles = [s.post("/v1/chat/completions", {**body, "n": 1, "seed": 7 + k})[1]["choices"][0]["message"]["content"]
               for k in range(3)]
    check(a == b, "seeded n=3 repeats: %s vs %s" % (a, b))
    check(a == singles, "choice k samples with seed + k: %s vs %s" % (a, singles))
    check(len(set(a)) > 1, "sampled choices differ: %s" % a)
    # one prefill for all choices: the step tokens are the uncached prompt plus one token per choice
    prompt = "A fresh prompt nobody asked before, about lighthouses and the sea"
    steps0 = s.metric("offkv_batch_tokens_total")
    r = s.post("/v1/chat/completions", chat(prompt, max_tokens=2, n=4))[1]
    u = r["usage"]
    uncached = u["prompt_tokens"] - u["prompt_tokens_details"]["cached_tokens"]
    fed = s.metric("offkv_batch_tokens_total") - steps0   # (a step is counted before its replies go out)
    check(len(r["choices"]) == 4 and fed == uncached + 4,
          "n=4 costs one prefill: %d step tokens for %d uncached prompt tokens (%s)" % (fed, uncached, u))
    # streamed: every chunk names its choice; each choice opens with the role alone and finishes
    events, done = s.stream("/v1/chat/completions", chat("Name three rivers", max_tokens=8, n=2, stream=True))
    by = {0: [], 1: []}
    for e in events:
        for c in e["choices"]:
            by[c["index"]].append(c)
    for i in (0, 1):
        first = by[i][0]["delta"] if by[i] else {}
        check(first.get("role") == "assistant" and not first.get("content"), "choice %d opens with the role alone: %s" % (i, first))
        text = "".join(c["delta"].get("content") or "" for c in by[i])
        check(text == texts[i] and by[i][-1]["finish_reason"] == "length", "streamed choice %d: %r vs %r" % (i, text, texts[i]))
    expect_400(s, "/v1/chat/completions", chat("x", n=5), "n")
    expect_400(s, "/v1/chat/completions", chat("x", n=0), "n")
    code, c2 = s.post("/v1/completions", {"prompt": "Once", "max_tokens": 4, "temperature": 0, "n": 2, "logprobs": 1})
    check(code == 200 and [c["index"] for c in c2["choices"]] == [0, 1] and c2["choices"][0]["text"] == c2["choices"][1]["text"]
          and len(c2["choices"][1]["logprobs"]["tokens"]) == 4, "completions n=2 with logprobs: %s" % c2)


def test_n_admission_and_cancel(s):
    """n=4 while another request runs waits for four free sequences, then answers in full;
    a streamed n=2 whose client hangs up frees both sequences and counts one cancellation."""
    got = {}
    def long_one():
        got["long"] = s.post("/v1/chat/completions", chat("Keep talking", max_tokens=40))[1]
    t = threading.Thread(target=long_one)
    t.start()
    code, r = s.post("/v1/chat/completions", chat("Count to ten", max_tokens=6, n=4))
    t.join()
    check(code == 200 and len(r["choices"]) == 4 and all(c["finish_reason"] == "length" for c in r["choices"]) and
          got["long"]["usage"]["completion_tokens"] == 40, "n=4 beside a running request: %s" % r)
    before = s.metric("offkv_requests_cancelled_total")
    data = json.dumps(chat("Keep talking", max_tokens=200, n=2, stream=True)).encode()
    k = socket.create_connection(("127.0.0.1", s.port))
    k.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode() +
              b"\r\nContent-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data)
    seen = b""
    while seen.count(b"data: ") < 6:
        chunk = k.recv(4096)
        if not chunk:
            break
        seen += chunk
    k.close()
    check(b'"index":1' in seen, "both choices streamed before the hang-up")
    check(s.wait_metric("offkv_active_sequences", 0) == 0, "both choices' sequences dropped after the hang-up")
    check(s.wait_metric("offkv_requests_cancelled_total", before + 1) == before + 1, "one request cancelled, counted once")


def test_fields(s):
    """include_usage, max_completion_tokens, user / prompt_cache_key, system_fingerprint, the role chunk."""
    events, _ = s.stream("/v1/chat/completions", chat("hi", max_tokens=3, stream=True, stream_options={"include_usage": True}))
    last = events[-1]
    check(last.get("choices") == [] and last.get("usage", {}).get("completion_tokens") == 3, "include_usage: %s" % last)
    check(not any("usage" in e for e in events[:-1]), "only the last chunk has usage")
    events2, _ = s.stream("/v1/chat/completions", chat("hi", max_tokens=3, stream=True))
    check(not any("usage" in e for e in events2), "no usage chunk unless asked")
    first = events2[0]["choices"][0]["delta"]
    check(first == {"role": "assistant", "content": ""} and chat_text(events2[1:])[0], "first chunk: role alone: %s" % first)
    r = s.post("/v1/chat/completions", chat("hi", max_tokens=10, max_completion_tokens=3))[1]
    check(r["usage"]["completion_tokens"] == 3, "max_completion_tokens wins over max_tokens: %s" % r["usage"])
    code, r2 = s.post("/v1/chat/completions", chat("hi", max_tokens=2, user="user-1", prompt_cache_key="conv-9"))
    check(code == 200, "user / prompt_cache_key accepted: %s" % r2)
    expect_400(s, "/v1/chat/completions", chat("hi", user=5), "user")
    # fields that would change the reply but are not implemented: refused by name
    for field, value in (("logit_bias", {"42": 5}), ("best_of", 2), ("functions", [{"name": "f"}]),
                         ("function_call", "auto"), ("audio", {"voice": "x"}), ("modalities", ["text", "audio"]),
                         ("web_search_options", {})):
        expect_400(s, "/v1/chat/completions", chat("hi", **{field: value}), field)
    expect_400(s, "/v1/completions", {"prompt": "a", "max_tokens": 1, "echo": True}, "echo")
    expect_400(s, "/v1/completions", {"prompt": "a", "max_tokens": 1, "suffix": "b"}, "suffix")
    # ... and their no-op values, like the fields that cannot change the output, are accepted
    code, r3 = s.post("/v1/chat/completions", chat("hi", max_tokens=2, logit_bias={}, best_of=1, modalities=["text"],
                                                   store=False, metadata={"k": "v"}, service_tier="auto"))
    check(code == 200, "no-op values of unsupported fields accepted: %s" % r3)
    code, r4 = s.post("/v1/completions", {"prompt": "a", "max_tokens": 1, "echo": False, "suffix": ""})
    check(code == 200, "echo false / empty suffix accepted: %s" % r4)
    fps = {r["system_fingerprint"], r2["system_fingerprint"], events[0]["system_fingerprint"], events[-1]["system_fingerprint"],
           s.post("/v1/completions", {"prompt": "a", "max_tokens": 1})[1]["system_fingerprint"]}
    fp = fps.pop() if len(fps) == 1 else ""
    check(fp.startswith("fp_") and len(fp) == 19, "one system_fingerprint everywhere: %s" % fps)
    return fp


def test_cors(s, plain):
    """--cors-origin: preflight 204 without the key, the origin on replies, streams and errors;
    the server without the flag sends none and refuses OPTIONS as before."""
    code, h, _ = raw(s, "OPTIONS", "/v1/chat/completions",
                     headers={"Origin": ORIGIN, "Access-Control-Request-Method": "POST",
                              "Access-Control-Request-Headers": "authorization, content-type, x-stainless-os"})
    check(code == 204 and h.get("access-control-allow-origin") == ORIGIN and "POST" in h.get("access-control-allow-methods", "")
          and "x-stainless-os" in h.get("access-control-allow-headers", ""), "preflight: %d %s" % (code, h))
    for method, path, body, headers, want in (("POST", "/v1/chat/completions", chat("hi", max_tokens=1), AUTH, 200),
                                              ("POST", "/v1/chat/completions", chat("hi", max_tokens=1, stream=True), AUTH, 200),
                                              ("POST", "/v1/chat/completions", chat("hi"), {}, 401),
                                              ("GET", "/v1/models", None, AUTH, 200)):
        code, h, _ = raw(s, method, path, body, {"Origin": ORIGIN, **headers})
        check(code == want and h.get("access-control-allow-origin") == ORIGIN, "%s %s: %d %s" % (method, path, code, h))
    code, h, _ = raw(plain, "OPTIONS", "/v1/chat/completions", headers={"Origin": ORIGIN, "Access-Control-Request-Method": "POST"})
    check(code not in (200, 204) and "access-control-allow-origin" not in h, "no --cors-origin: OPTIONS refused: %d %s" % (code, h))
    code, h, _ = raw(plain, "POST", "/v1/chat/completions", chat("hi", max_tokens=1), {"Origin": ORIGIN})
    check(code == 200 and "access-control-allow-origin" not in h, "no --cors-origin: no CORS header: %s" % h)


def test_openai_client(s):
    try:
        import openai
    except ImportError:
        print("SKIP: the openai package is not installed (scripts/setup.sh installs it)", file=sys.stderr)
        return
    c = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % s.port, api_key=KEY, max_retries=0, timeout=120)
    msgs = [{"role": "user", "content": "Tell me about foxes"}]
    r = c.chat.completions.create(model="m", messages=msgs, temperature=0, max_tokens=5, logprobs=True, top_logprobs=2, n=2)
    check(len(r.choices) == 2 and [ch.index for ch in r.choices] == [0, 1], "openai n=2: %s" % r.choices)
    check(r.choices[0].message.content == r.choices[1].message.content, "openai greedy n=2 identical")
    lp = r.choices[0].logprobs.content if r.choices[0].logprobs else []
    check(len(lp) == 5 and all(e.logprob <= 0 and len(e.top_logprobs) == 2 and e.top_logprobs[0].token == e.token for e in lp),
          "openai chat logprobs: %s" % lp)
    check(r.system_fingerprint and r.system_fingerprint.startswith("fp_"), "openai system_fingerprint")
    parts = {}
    for ch in c.chat.completions.create(model="m", messages=msgs, temperature=0, max_tokens=5, logprobs=True, n=2, stream=True,
                                        stream_options={"include_usage": True}):
        for choice in ch.choices:
            parts.setdefault(choice.index, []).extend(e.token for e in (choice.logprobs.content if choice.logprobs else []) or [])
        if ch.usage:
            check(ch.usage.completion_tokens == 10, "openai stream usage %s" % ch.usage)
    check(parts.get(0) == [e.token for e in lp] and parts.get(1) == parts.get(0), "openai streamed logprobs per choice: %s" % parts)
    cr = c.completions.create(model="m", prompt="The quick brown fox", max_tokens=3, temperature=0, logprobs=2)
    clp = cr.choices[0].logprobs
    check(len(clp.tokens) == 3 and len(clp.top_logprobs[0]) == 2 and clp.token_logprobs[0] <= 0, "openai completions logprobs: %s" % clp)


def main():
    tmp = tempfile.mkdtemp(prefix="okv-serve-api-")
    try:
        program = make_program(tmp, "llama", "llama", VOCAB, 128000, 128009, "llama3_1")
        s = Server(OFFKV, program, "--deterministic", "--parallel", "4", "--ctx-per-seq", "256", "--prefill-chunk", "8",
                   "--api-key", KEY, "--cors-origin", ORIGIN)
        s.default_headers = AUTH
        plain = Server(OFFKV, program, "--parallel", "1", "--ctx-per-seq", "64")
        try:
            test_completion_logprobs_vs_logits(s, program, tmp)
            test_chat_logprobs(s)
            test_n(s)
            test_n_admission_and_cancel(s)
            fp = test_fields(s)
            test_cors(s, plain)
            test_openai_client(s)
            other = plain.post("/v1/completions", {"prompt": "a", "max_tokens": 1})[1]["system_fingerprint"]
            check(other == fp, "the same program, the same fingerprint: %s vs %s" % (other, fp))
        finally:
            check(plain.stop() == 0, "plain server exits 0")
            check(s.stop() == 0, "server exits 0: %s" % "".join(s.log)[-500:])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return exit_status(failures)


if __name__ == "__main__":
    sys.exit(main())
