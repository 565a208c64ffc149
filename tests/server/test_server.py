#!/usr/bin/env python3
"""`offkv serve` end to end on loopback: a generated Llama (random weights,
the Llama-3.1 tokenizer, so replies are arbitrary but deterministic under
greedy sampling) and a generated Qwen3 (its real chat template with
enable_thinking). Plain HTTP (http.client, raw sockets) and, when it is
installed, the openai client from PyPI. Covers: status codes and OpenAI
error shapes, streamed == non-streamed text, stop strings (also split
across chunks), completions from text and token ids, prefix reuse
(cached_tokens), concurrent greedy requests == the same requests one at a
time, a client disconnect cancelling its sequence (the metrics gauge
returns), 429 on a full queue, chat_template_kwargs reaching the template,
and SIGTERM / SIGINT exiting 0.

usage: test_server.py OFFKV OKV_MKCKPT"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import Server, chat_text  # noqa: E402

OFFKV, MKCKPT = sys.argv[1], sys.argv[2]
TOK = "../shared/fixtures/tokenizers/"
KEY = "test-key-123"
AUTH = {"Authorization": "Bearer " + KEY}
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)


def make_program(tmp, name, arch, vocab, bos, eos, tokdir, template_suffix=None, ctx=512):
    """A random-weight checkpoint with a fixture tokenizer, exported; template_suffix
    (if given) is appended to the chat template's generation prompt."""
    ck = os.path.join(tmp, name)
    subprocess.run([MKCKPT, "--out", ck, "--arch", arch, "--vocab", str(vocab), "--bos", str(bos), "--eos", str(eos),
                    "--seed", "5"], check=True, stdout=subprocess.DEVNULL)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(TOK, tokdir, f), os.path.join(ck, f))
    if template_suffix:
        path = os.path.join(ck, "tokenizer_config.json")
        cfg = json.load(open(path))
        cfg["chat_template"] += "{%- if add_generation_prompt %}" + template_suffix + "{%- endif %}"
        json.dump(cfg, open(path, "w"))
    out = os.path.join(tmp, name + ".okv")
    subprocess.run([OFFKV, "export", ck, "-o", out, "--dtype", "fp32", "--max-ctx-len", str(ctx), "--prefill-chunk-size", "16"],
                   check=True, stderr=subprocess.DEVNULL)
    return out


def chat(content, **kw):
    return {"model": "m", "messages": [{"role": "user", "content": content}], "temperature": 0, **kw}


def expect_error(s, path, body, status, param=None, raw=None, headers=AUTH, needle=None):
    code, ctype, text = s.request("POST", path, body, headers=headers, raw=raw)
    ok = code == status and "json" in ctype
    err = json.loads(text).get("error", {}) if ok else {}
    ok = ok and isinstance(err.get("message"), str) and "type" in err and err.get("param") == param
    if needle:
        ok = ok and needle in err.get("message", "")
    check(ok, "%s %s -> %d %s (wanted %d, param %s)" % (path, str(body)[:60] if raw is None else "<raw>", code, text[:200], status, param))


def check_oversize_body(port):
    """A 2 MiB body over --max-body: 413 from the headers, before the body is
    read; the server then closes, so sending the rest may fail (EPIPE or a
    reset), but the 413 is there to read."""
    data = ('{"prompt": "' + "a" * (2 << 20) + '"}').encode()
    k = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        k.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode() +
                  b"\r\nContent-Type: application/json\r\nContent-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data)
    except OSError:
        pass
    got = b""
    try:
        while True:
            chunk = k.recv(65536)
            if not chunk:
                break
            got += chunk
    except OSError:
        pass
    k.close()
    head, _, body = got.partition(b"\r\n\r\n")
    check(head.startswith(b"HTTP/1.1 413") and b"larger than" in body, "2 MiB body -> 413: %r" % got[:200])


def test_errors(s):
    check(s.request("GET", "/health")[0] == 200, "health")
    code, _, text = s.request("GET", "/v1/models", headers=AUTH)
    check(code == 200 and json.loads(text)["data"][0]["object"] == "model", "models: " + text)
    expect_error(s, "/v1/chat/completions", chat("hi"), 401, headers={})
    expect_error(s, "/v1/chat/completions", chat("hi"), 401, headers={"Authorization": "Bearer wrong"})
    check(s.request("GET", "/metrics", headers={})[0] == 401, "metrics needs the key")
    check(s.request("GET", "/nope", headers=AUTH)[0] == 404, "404")
    expect_error(s, "/v1/chat/completions", None, 400, raw="{not json")
    expect_error(s, "/v1/chat/completions", {"model": "m"}, 400, "messages")
    expect_error(s, "/v1/chat/completions", {"messages": [{"role": "user"}]}, 400, "messages")
    expect_error(s, "/v1/chat/completions", chat("hi", temperature="hot"), 400, "temperature")
    expect_error(s, "/v1/chat/completions", chat("hi", top_p=1.5), 400, "top_p")
    expect_error(s, "/v1/chat/completions", chat("hi", n=5), 400, "n")   # above --parallel 4
    expect_error(s, "/v1/chat/completions", chat("hi", max_tokens=0), 400, "max_tokens")
    expect_error(s, "/v1/chat/completions", chat("hi", stop=["x"] * 17), 400, "stop")
    expect_error(s, "/v1/chat/completions", chat("hi", stream="yes"), 400, "stream")
    expect_error(s, "/v1/chat/completions", chat("hi", frequency_penalty=2.5), 400, "frequency_penalty")
    expect_error(s, "/v1/completions", {"prompt": [1, 2, 10 ** 9]}, 400, "prompt")
    expect_error(s, "/v1/completions", {"prompt": 7}, 400, "prompt")
    expect_error(s, "/v1/completions", {"prompt": list(range(1, 300))}, 400, "prompt", needle="longer than the context")
    expect_error(s, "/v1/chat/completions", chat("word " * 400), 400, "messages", needle="longer than the context")
    check_oversize_body(s.port)
    code, _, _ = s.request("GET", "/v1/chat/completions", headers=AUTH)
    check(code == 405, "GET on a POST endpoint: %d" % code)


def test_stream_equals_plain(s):
    for i, q in enumerate(["Hello there", "Tell me a story about a fox", "1 2 3"]):
        code, plain = s.post("/v1/chat/completions", chat(q, max_tokens=24), headers=AUTH)
        check(code == 200, "chat %d: %s" % (code, plain))
        msg = plain["choices"][0]["message"]
        events, done = s.stream("/v1/chat/completions", chat(q, max_tokens=24, stream=True,
                                                              stream_options={"include_usage": True}))
        content, reasoning, finish = chat_text(events)
        check(done, "stream ends with [DONE]")
        check(events[0]["choices"][0]["delta"].get("role") == "assistant", "first delta has the role")
        check(content == msg["content"] and finish == plain["choices"][0]["finish_reason"],
              "stream %r/%s vs plain %r/%s" % (content, finish, msg["content"], plain["choices"][0]["finish_reason"]))
        check("\ufffd" not in content, "no replacement character in %r" % content)
        usage = events[-1].get("usage")
        check(usage and usage["completion_tokens"] == plain["usage"]["completion_tokens"] and
              usage["prompt_tokens"] == plain["usage"]["prompt_tokens"], "usage %s vs %s" % (usage, plain["usage"]))
        check(plain["usage"]["completion_tokens"] == 24 and plain["choices"][0]["finish_reason"] == "length",
              "24 tokens then length: %s" % plain["usage"])
        # the same prompt again is served from the cache (all but the last prompt token)
        check(usage["prompt_tokens_details"]["cached_tokens"] == usage["prompt_tokens"] - 1,
              "second run cached %s" % usage)
    return content


def test_stop_strings(s):
    code, plain = s.post("/v1/chat/completions", chat("Once upon a time", max_tokens=40), headers=AUTH)
    text = plain["choices"][0]["message"]["content"]
    check(len(text) > 12, "long enough reply: %r" % text)
    for start, length in ((6, 3), (10, 5), (len(text) // 2, 2)):
        stop = text[start:start + length]
        want = text[:text.find(stop)]
        code, r = s.post("/v1/chat/completions", chat("Once upon a time", max_tokens=40, stop=[stop, "\x01never"]), headers=AUTH)
        got = r["choices"][0]["message"]["content"]
        check(got == want and r["choices"][0]["finish_reason"] == "stop", "stop %r: %r, want %r" % (stop, got, want))
        events, _ = s.stream("/v1/chat/completions", chat("Once upon a time", max_tokens=40, stop=stop, stream=True))
        content, _, finish = chat_text(events)
        check(content == want and finish == "stop", "streamed stop %r: %r, want %r" % (stop, content, want))
        check(not any(stop in (e["choices"][0]["delta"].get("content") or "") for e in events if e["choices"]), "no chunk holds the stop")


def test_completions(s):
    code, r = s.post("/v1/completions", {"prompt": "The quick brown fox", "max_tokens": 8, "temperature": 0}, headers=AUTH)
    check(code == 200 and r["object"] == "text_completion" and r["usage"]["completion_tokens"] == 8, "completion: %s" % r)
    code, tok = s.request("POST", "/v1/completions", {"prompt": [128000, 791, 4062], "max_tokens": 8, "temperature": 0}, headers=AUTH)[:2]
    r2 = json.loads(s.request("POST", "/v1/completions", {"prompt": [128000, 791, 4062], "max_tokens": 8, "temperature": 0},
                              headers=AUTH)[2])
    check(r2["usage"]["prompt_tokens"] == 3 and r2["choices"][0]["text"], "ids prompt: %s" % r2)
    events, done = s.stream("/v1/completions", {"prompt": [128000, 791, 4062], "max_tokens": 8, "temperature": 0, "stream": True})
    streamed = "".join(e["choices"][0]["text"] for e in events if e.get("choices"))
    check(done and streamed == r2["choices"][0]["text"], "streamed completion %r vs %r" % (streamed, r2["choices"][0]["text"]))
    # seeded sampling is reproducible
    body = {"prompt": "Hello", "max_tokens": 12, "temperature": 1.0, "top_k": 40, "top_p": 0.9, "min_p": 0.01, "seed": 42,
            "repetition_penalty": 1.1}
    a = s.post("/v1/completions", body, headers=AUTH)[1]["choices"][0]["text"]
    b = s.post("/v1/completions", body, headers=AUTH)[1]["choices"][0]["text"]
    check(a == b, "seeded sampling repeats: %r vs %r" % (a, b))


def test_concurrent(s):
    prompts = ["Alpha %d says" % i for i in range(4)] + ["A much longer prompt that takes several prefill chunks " * 4]
    alone = [s.post("/v1/chat/completions", chat(p, max_tokens=20), headers=AUTH)[1]["choices"][0]["message"]["content"]
             for p in prompts]
    got = [None] * len(prompts)

    def run(i):
        events, _ = s.stream("/v1/chat/completions", chat(prompts[i], max_tokens=20, stream=True))
        got[i] = chat_text(events)[0]
    for _ in range(2):
        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        check(got == alone, "concurrent %r vs one at a time %r" % (got, alone))


def test_deterministic(program):
    """--deterministic: 8 concurrent streamed greedy chats (batched together,
    prompts of different lengths so prefill chunks mix with decode tokens)
    give exactly the text of the same 8 run one at a time; a shared system
    prompt is served from forked cells (cached_tokens)."""
    s = Server(OFFKV, program, "--deterministic", "--parallel", "8", "--ctx-per-seq", "256", "--prefill-chunk", "8")
    try:
        prompts = ["Number %d: %s" % (i, "la " * (i * 5)) for i in range(8)]
        def one(p, stream):
            body = chat(p, max_tokens=16, stream=stream)
            if not stream:
                return s.post("/v1/chat/completions", body)[1]["choices"][0]["message"]["content"]
            return chat_text(s.stream("/v1/chat/completions", body)[0])[0]
        alone = [one(p, False) for p in prompts]
        got = [None] * 8
        def run(i):
            got[i] = one(prompts[i], True)
        threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        check(s.metric("offkv_batch_tokens_total") > s.metric("offkv_steps_total"), "steps were batched")
        check(got == alone, "deterministic: 8 concurrent %r vs one at a time %r" % (got, alone))
        system = "You are a terse assistant. " * 12
        def sys_chat(q):
            body = {"model": "m", "temperature": 0, "max_tokens": 2, "messages": [
                {"role": "system", "content": system}, {"role": "user", "content": q}]}
            return s.post("/v1/chat/completions", body)[1]["usage"]
        u1, u2 = sys_chat("First question?"), sys_chat("Another one entirely?")
        check(u2["prompt_tokens_details"]["cached_tokens"] >= u1["prompt_tokens"] - 12,
              "shared system prompt from cached cells: %s then %s" % (u1, u2))
        test_openai_deterministic(s, prompts, alone)
    finally:
        check(s.stop() == 0, "deterministic server exits 0")


def prefix_files(d):
    return sorted(f for f in os.listdir(d) if f.endswith(".okvprefix") and os.path.isfile(os.path.join(d, f)))


def dir_bytes(d):
    return sum(os.path.getsize(os.path.join(d, f)) for f in prefix_files(d))


def test_prefix_dir(program, qwen, tmp):
    """--prefix-cache-dir: entries kept at SIGTERM are loaded by the next
    process instead of prefilled (usage counts them as cached) and give the
    same greedy text byte for byte (--deterministic); damaged files and
    garbage are skipped with a note, never fatal; the byte cap removes the
    least recently used files; another program's server leaves them alone."""
    d = os.path.join(tmp, "pcd")
    os.mkdir(d)
    garbage = os.path.join(d, "00000000deadbeef-40.okvprefix")
    with open(garbage, "wb") as f:
        f.write(os.urandom(3000))
    with open(os.path.join(d, "notes.txt"), "w") as f:
        f.write("not ours")
    os.mkdir(os.path.join(d, "sub.okvprefix"))
    system = "You are a careful assistant who answers in full sentences. " * 6

    def ask(s, sysprompt, q="What is a prefix cache?"):
        body = {"model": "m", "temperature": 0, "max_tokens": 12, "messages": [
            {"role": "system", "content": sysprompt}, {"role": "user", "content": q}]}
        code, r = s.post("/v1/chat/completions", body)
        check(code == 200, "prefix-dir chat: %s %s" % (code, r))
        return r["choices"][0]["message"]["content"], r["usage"]

    args = ("--deterministic", "--parallel", "2", "--ctx-per-seq", "256", "--prefill-chunk", "8", "--prefix-cache-dir", d)
    s = Server(OFFKV, program, *args)
    try:
        text1, u1 = ask(s, system)
        check(u1["prompt_tokens"] > 80 and u1["prompt_tokens_details"]["cached_tokens"] == 0, "first run prefills: %s" % u1)
    finally:
        check(s.stop() == 0, "prefix-dir server exits 0")
    log = "".join(s.log)
    check("damaged" in log and "00000000deadbeef-40.okvprefix" not in os.listdir(d), "garbage entry removed with a note: " + log[-600:])
    check(os.path.exists(os.path.join(d, "notes.txt")), "other files are left alone")
    files = prefix_files(d)
    check(len(files) == 1, "one entry written at shutdown: %s" % files)
    if len(files) != 1:
        return
    one = os.path.getsize(os.path.join(d, files[0]))
    with open(os.path.join(d, files[0]), "rb") as f:
        data = f.read()
    with open(os.path.join(d, "0000000000000001-9.okvprefix"), "wb") as f:   # truncated copy
        f.write(data[: len(data) // 2])
    flipped = bytearray(data)
    flipped[len(data) // 3] ^= 0x40
    with open(os.path.join(d, "0000000000000002-9.okvprefix"), "wb") as f:   # one flipped byte
        f.write(bytes(flipped))

    cap = one * 2 + one // 2
    # --prefix-cache-bytes 1: every finished entry is evicted from memory at once, so written then
    s = Server(OFFKV, program, *args, "--prefix-cache-dir-bytes", str(cap), "--prefix-cache-bytes", "1")
    try:
        check(s.metric("offkv_prefix_cache_dir_files") == 1, "indexed one entry, skipped the damaged copies")
        text2, u2 = ask(s, system)
        check(u2["prompt_tokens_details"]["cached_tokens"] == u2["prompt_tokens"] - 1,
              "restart: the stored prefix is loaded, not prefilled: %s" % u2)
        check(text2 == text1, "restart: same greedy text %r vs %r" % (text2, text1))
        check(s.metric("offkv_prefix_cache_dir_loads_total") == 1, "counted as a load")
        ask(s, system.replace("careful", "cheerful"))
        ask(s, system.replace("careful", "curious"))
        check(s.wait_metric("offkv_prefix_cache_dir_writes_total", 2) == 2 and s.metric("offkv_prefix_cache_dir_files") == 2,
              "entries evicted from memory are written at once, the cap applied")
    finally:
        check(s.stop() == 0, "capped prefix-dir server exits 0")
    files = prefix_files(d)
    check(len(files) == 2 and dir_bytes(d) <= cap, "cap %d: %s hold %d bytes" % (cap, files, dir_bytes(d)))
    log = "".join(s.log)
    check(log.count("damaged") == 2, "both damaged copies noted: " + log[-800:])
    check("least recently used" in log, "the cap removal is noted")
    # the first entry (least recently used) went: asking it again prefills
    s = Server(OFFKV, program, *args, "--prefix-cache-dir-bytes", str(cap))
    try:
        _, u3 = ask(s, system)
        # (only the template's head and "You are a" are shared with the stored entries)
        check(u3["prompt_tokens_details"]["cached_tokens"] < 20, "the least recently used entry was removed: %s" % u3)
        _, u4 = ask(s, system.replace("careful", "curious"))
        check(u4["prompt_tokens_details"]["cached_tokens"] == u4["prompt_tokens"] - 1, "the newest entry stayed: %s" % u4)
    finally:
        check(s.stop() == 0, "third prefix-dir server exits 0")
    # another program's server leaves these files alone
    before = prefix_files(d)
    s = Server(OFFKV, qwen, "--parallel", "1", "--prefix-cache-dir", d)
    check(s.stop() == 0, "qwen3 server on the same directory exits 0")
    check(all(f in prefix_files(d) for f in before), "files of another program are left in place")
    check("another program" in "".join(s.log) or "different" in "".join(s.log), "noted: " + "".join(s.log)[-400:])


def openai_client(port):
    try:
        import openai
    except ImportError:
        print("SKIP: the openai package is not installed (scripts/setup.sh installs it)", file=sys.stderr)
        return None
    return openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % port, api_key=KEY, max_retries=0, timeout=120)


def openai_stream(c, messages, max_tokens):
    """Streams a greedy chat through the openai client: (text, seconds to the first content, usage)."""
    t0 = time.perf_counter()
    first, parts, usage = None, [], None
    for ch in c.chat.completions.create(model="m", messages=messages, temperature=0, max_tokens=max_tokens, stream=True,
                                        stream_options={"include_usage": True}):
        if ch.usage:
            usage = ch.usage
        for choice in ch.choices:
            if choice.delta.content:
                if first is None:
                    first = time.perf_counter() - t0
                parts.append(choice.delta.content)
    return "".join(parts), first, usage


def test_openai_deterministic(s, prompts, plain_alone):
    """The openai client under --deterministic: 8 concurrent streamed greedy
    chats give exactly the text of the same 8 streamed one at a time (and of
    the plain-HTTP run)."""
    c = openai_client(s.port)
    if not c:
        return
    msgs = [[{"role": "user", "content": p}] for p in prompts]
    alone = [openai_stream(c, m, 16)[0] for m in msgs]
    check(alone == plain_alone, "openai one at a time %r vs plain HTTP %r" % (alone, plain_alone))
    steps, tokens = s.metric("offkv_steps_total"), s.metric("offkv_batch_tokens_total")
    got = [None] * len(msgs)
    def run(i):
        got[i] = openai_stream(c, msgs[i], 16)[0]
    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(msgs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    check(s.metric("offkv_batch_tokens_total") - tokens > s.metric("offkv_steps_total") - steps, "openai: steps were batched")
    check(got == alone, "openai: 8 concurrent %r vs one at a time %r" % (got, alone))


def test_openai_ttft(program):
    """A shared system prompt through the openai client: the second request
    with it reports cached tokens (prompt_tokens_details.cached_tokens) and
    its time to first token is well below the first's. The prompt is ~1140
    tokens (a program with a 2048-position context) prefilled 8 per step
    (~140 steps) against 1-2 steps when cached; three system prompts
    (different from their first word), medians, and the second must take
    under 0.5x the first (without the cache the two are alike)."""
    s = Server(OFFKV, program, "--parallel", "2", "--ctx-per-seq", "2048", "--prefill-chunk", "8", "--api-key", KEY)
    try:
        c = openai_client(s.port)
        if not c:
            return
        firsts, seconds = [], []
        for trial in range(3):
            system = "%s rules. " % ("First", "Second", "Third")[trial] + " ".join("w%d" % i for i in range(560))
            def ask(q):
                return openai_stream(c, [{"role": "system", "content": system}, {"role": "user", "content": q}], 2)
            _, t1, u1 = ask("First question?")
            _, t2, u2 = ask("Another question entirely?")
            # (the template's head before the system text is shared with the earlier trials)
            check(u1.prompt_tokens > 1100 and u1.prompt_tokens_details.cached_tokens < 40, "uncached first: %s" % u1)
            check(u2.prompt_tokens_details.cached_tokens > 1100, "the second is served from cached cells: %s" % u2)
            firsts.append(t1)
            seconds.append(t2)
        m1, m2 = sorted(firsts)[1], sorted(seconds)[1]
        print("time to first token, shared ~1140-token system prompt: first %.1f ms, second (cached) %.1f ms (%.1fx)" %
              (m1 * 1e3, m2 * 1e3, m1 / m2), file=sys.stderr)
        check(m2 < 0.5 * m1, "cached system prompt: time to first token %.4f s vs %.4f s uncached" % (m2, m1))
    finally:
        check(s.stop() == 0, "ttft server exits 0")


def raw_stream_then_close(port, body, read_events=1):
    """Starts a streamed request on a raw socket, reads a few events, then drops the connection."""
    data = json.dumps(body).encode()
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode() +
                 b"\r\nContent-Type: application/json\r\nContent-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data)
    got = b""
    while got.count(b"data: ") < read_events:
        chunk = sock.recv(4096)
        if not chunk:
            break
        got += chunk
    sock.close()
    return got


def test_disconnect(s):
    before = s.metric("offkv_requests_cancelled_total")
    check(s.wait_metric("offkv_active_sequences", 0) == 0, "idle before")
    time.sleep(0.2)
    cells, evictions = s.metric("offkv_cache_cells_used"), s.metric("offkv_prefix_cache_evictions_total")
    got = raw_stream_then_close(s.port, chat("Keep talking", max_tokens=480, stream=True), read_events=20)
    check(b"data: " in got, "got a first event before closing")
    check(s.wait_metric("offkv_active_sequences", 0) == 0, "the sequence is dropped after the disconnect")
    time.sleep(0.2)
    after = s.metric("offkv_cache_cells_used")
    if s.metric("offkv_prefix_cache_evictions_total") == evictions:
        check(after == cells, "the disconnected sequence's cells are freed: %d used before, %d after" % (cells, after))
    else:   # admission evicted kept prefixes meanwhile: fewer cells, never more
        check(after <= cells, "the disconnected sequence's cells are freed: %d used before, %d after" % (cells, after))
    check(s.metric("offkv_requests_cancelled_total") == before + 1, "counted as cancelled")
    # a non-streamed request whose client hangs up is cancelled too
    got = raw_stream_then_close(s.port, chat("Keep talking", max_tokens=480), read_events=0)
    check(s.wait_metric("offkv_requests_cancelled_total", before + 2) == before + 2, "non-streamed: counted as cancelled")
    check(s.wait_metric("offkv_active_sequences", 0) == 0, "the non-streamed sequence is dropped after the disconnect")
    # the server still answers
    check(s.post("/v1/chat/completions", chat("hi", max_tokens=2), headers=AUTH)[0] == 200, "alive after disconnect")


def test_queue_full(program):
    # The two streams must outlast the 0.6 s this takes: the scheduler does not wait for a client that
    # reads nothing, and 480 tokens of a 512-position program took under 0.6 s on a Zen 4 (2026-12-06),
    # so the program here holds 2048 positions and the streams ask for 2000 tokens each.
    s = Server(OFFKV, program, "--parallel", "1", "--max-queue", "1", "--ctx-per-seq", "2048", "--threads", "1")
    try:
        socks = []
        for _ in range(2):   # one running, one queued; both long
            data = json.dumps(chat("Go on", max_tokens=2000, stream=True)).encode()
            k = socket.create_connection(("127.0.0.1", s.port))
            k.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " + str(len(data)).encode() +
                      b"\r\n\r\n" + data)
            socks.append(k)
            time.sleep(0.3)
        expect_error(s, "/v1/chat/completions", chat("hi", max_tokens=2), 429, headers={})
        check(s.metric("offkv_queue_depth") == 1 and s.metric("offkv_active_sequences") == 1, "one running, one queued")
        for k in socks:
            k.close()
        check(s.wait_metric("offkv_active_sequences", 0) == 0 and s.metric("offkv_queue_depth") == 0, "drained after closing")
    finally:
        rc = s.stop(signal.SIGINT)
    check(rc == 0, "SIGINT exits 0 (got %s): %s" % (rc, "".join(s.log)[-500:]))


def test_thinking_kwargs(program):
    s = Server(OFFKV, program, "--parallel", "1")
    try:
        body = chat("2+2?", max_tokens=4)
        on = s.post("/v1/chat/completions", {**body, "chat_template_kwargs": {"enable_thinking": True}})[1]
        off = s.post("/v1/chat/completions", {**body, "chat_template_kwargs": {"enable_thinking": False}})[1]
        # Qwen3's template writes an empty <think></think> block into the prompt when thinking is off
        check(off["usage"]["prompt_tokens"] > on["usage"]["prompt_tokens"], "enable_thinking reaches the template: %s vs %s" %
              (off["usage"], on["usage"]))
        expect_error(s, "/v1/chat/completions", {**body, "chat_template_kwargs": [1]}, 400, "chat_template_kwargs", headers={})
    finally:
        check(s.stop() == 0, "qwen3 server exits 0")


def timed_events(port, body, stamps, started=None):
    """Reads a streamed request's events, appending the arrival time of each to stamps."""
    import http.client
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    c.request("POST", "/v1/chat/completions", body=json.dumps(body),
              headers={"Content-Type": "application/json", **AUTH})
    r = c.getresponse()
    while True:
        line = r.readline()
        if not line:
            break
        if line.startswith(b"data: {"):
            stamps.append(time.time())
            if started is not None:
                started.set()
    c.close()


def test_prefill_interleaves(s):
    """A long prompt is prefilled in chunks between another stream's tokens:
    stream A keeps receiving tokens while B's ~150-token prompt is prefilled
    (--prefill-chunk 8: about 19 chunks, so as many of A's tokens before B's first)."""
    a_stamps, b_stamps, started = [], [], threading.Event()
    ta = threading.Thread(target=timed_events, args=(s.port, chat("Keep talking", max_tokens=200, stream=True), a_stamps, started))
    ta.start()
    started.wait(30)
    t_submit = time.time()
    long_prompt = " ".join("w%d" % i for i in range(60))
    tb = threading.Thread(target=timed_events, args=(s.port, chat(long_prompt, max_tokens=4, stream=True), b_stamps))
    tb.start()
    tb.join()
    ta.join()
    check(b_stamps, "B streamed")
    during = [t for t in a_stamps if b_stamps and t_submit < t < b_stamps[0]]
    check(len(during) >= 10, "A got %d tokens while B's prompt was prefilled" % len(during))


def test_reasoning_opened_by_template(program):
    """A template whose generation prompt opens <think> (as thinking-only Qwen3 releases do): the
    reply up to </think> is reasoning_content, the same streamed and not; the content stays empty
    here because the random model never closes the block."""
    s = Server(OFFKV, program, "--parallel", "1")
    try:
        body = chat("2+2?", max_tokens=12)
        r = s.post("/v1/chat/completions", body)[1]
        msg = r["choices"][0]["message"]
        events, done = s.stream("/v1/chat/completions", {**body, "stream": True})
        content, reasoning, _ = chat_text(events)
        check(msg.get("reasoning_content") and "<think>" not in msg["reasoning_content"], "reasoning_content: %s" % msg)
        check(done and reasoning == msg["reasoning_content"] and content == msg["content"],
              "streamed reasoning %r / content %r vs %r / %r" % (reasoning, content, msg.get("reasoning_content"), msg["content"]))
    finally:
        check(s.stop() == 0, "reasoning server exits 0")


def test_openai_client(s):
    try:
        import openai
    except ImportError:
        print("SKIP: the openai package is not installed (scripts/setup.sh installs it)", file=sys.stderr)
        return
    c = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % s.port, api_key=KEY, max_retries=0)
    check(c.models.list().data[0].object == "model", "openai models.list")
    msgs = [{"role": "user", "content": "Hello there"}]
    r = c.chat.completions.create(model="m", messages=msgs, temperature=0, max_tokens=16)
    text = r.choices[0].message.content
    check(r.usage.completion_tokens == 16 and r.choices[0].finish_reason == "length", "openai chat usage %s" % r.usage)
    parts = [ch.choices[0].delta.content or "" for ch in
             c.chat.completions.create(model="m", messages=msgs, temperature=0, max_tokens=16, stream=True) if ch.choices]
    check("".join(parts) == text, "openai stream %r vs %r" % ("".join(parts), text))
    cr = c.completions.create(model="m", prompt="The quick brown fox", max_tokens=5, temperature=0)
    check(cr.usage.completion_tokens == 5 and isinstance(cr.choices[0].text, str), "openai completions")
    try:
        c.chat.completions.create(model="m", messages=msgs, temperature=-3)
        check(False, "openai: a bad temperature is refused")
    except openai.BadRequestError as e:
        check(e.status_code == 400 and "temperature" in str(e), "openai BadRequestError names the field: %s" % e)
    try:
        openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % s.port, api_key="nope", max_retries=0).models.list()
        check(False, "openai: a wrong key is refused")
    except openai.AuthenticationError as e:
        check(e.status_code == 401, "openai AuthenticationError")


def main():
    tmp = tempfile.mkdtemp(prefix="okv-serve-")
    try:
        llama = make_program(tmp, "llama", "llama", 128256, 128000, 128009, "llama3_1")
        qwen = make_program(tmp, "qwen3", "qwen3", 151669, 151643, 151645, "qwen3")
        thinker = make_program(tmp, "thinker", "qwen3", 151669, 151643, 151645, "qwen3", template_suffix="<think>\n")
        s = Server(OFFKV, llama, "--parallel", "4", "--ctx-per-seq", "256", "--api-key", KEY, "--max-queue", "8",
                   "--prefill-chunk", "8")
        s.default_headers = AUTH
        try:
            t0 = time.time()
            test_errors(s)
            test_stream_equals_plain(s)
            test_stop_strings(s)
            test_completions(s)
            test_concurrent(s)
            test_prefill_interleaves(s)
            test_disconnect(s)
            test_openai_client(s)
            print("main server tests: %.1f s" % (time.time() - t0), file=sys.stderr)
        finally:
            rc = s.stop()
        check(rc == 0, "SIGTERM exits 0 (got %s): %s" % (rc, "".join(s.log)[-800:]))
        test_deterministic(llama)
        test_prefix_dir(llama, qwen, tmp)
        llama2k = make_program(tmp, "llama2k", "llama", 128256, 128000, 128009, "llama3_1", ctx=2048)
        test_openai_ttft(llama2k)
        test_queue_full(llama2k)
        test_thinking_kwargs(qwen)
        test_reasoning_opened_by_template(thinker)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print("%d failed" % len(failures), file=sys.stderr)
        return 1
    print("all passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
