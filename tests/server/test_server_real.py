#!/usr/bin/env python3
"""`offkv serve` on the real SmolLM2-135M-Instruct program: the openai client
(or plain HTTP when it is missing) asks "What is the capital of France?" and
the greedy answer names Paris, streamed and not; a second request with the
same system prompt is served from cached cells (usage.cached_tokens) and its
time to first token is printed beside the first one's. SKIP (77) when the
GGUF is not in ~/.cache/offkv/models (scripts/fetch-models.sh fetches it).

usage: test_server_real.py OFFKV"""
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import Server, chat_text  # noqa: E402

OFFKV = sys.argv[1]
GGUF = os.path.join(os.environ.get("OKV_CACHE", os.path.expanduser("~/.cache/offkv")), "models",
                    "SmolLM2-135M-Instruct.Q4_1.gguf")
SYSTEM = ("You are a helpful assistant who answers questions about geography briefly and precisely, "
          "in one sentence, without any preamble. ") * 3


def ttft(s, body):
    """Seconds until the first content delta of a streamed request, and the final usage."""
    import http.client
    import json
    c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=120)
    t0 = time.time()
    c.request("POST", "/v1/chat/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    first, usage, buf = None, None, b""
    while True:
        line = r.readline()
        if not line:
            break
        if line.startswith(b"data: {"):
            e = json.loads(line[6:])
            if first is None and e.get("choices") and e["choices"][0]["delta"].get("content"):
                first = time.time() - t0
            usage = e.get("usage") or usage
    c.close()
    return first, usage


def main():
    if not os.path.isfile(GGUF):
        print("SKIP: %s is not cached (scripts/fetch-models.sh smollm2)" % GGUF, file=sys.stderr)
        return 77
    fails = []
    with tempfile.TemporaryDirectory(prefix="okv-serve-real-") as tmp:
        prog = os.path.join(tmp, "smol.okv")
        subprocess.run([OFFKV, "export", GGUF, "-o", prog, "--dtype", "bf16", "--dequantize", "--max-ctx-len", "1024"], check=True,
                       stderr=subprocess.DEVNULL)
        s = Server(OFFKV, prog, "--parallel", "2", "--ctx-per-seq", "1024")
        try:
            ask(s, fails)
        finally:
            rc = s.stop()
        if rc != 0:
            fails.append("exit %s" % rc)
    for f in fails:
        print("FAIL:", f, file=sys.stderr)
    return 1 if fails else 0


def ask(s, fails):
    """The question, streamed and not; then the shared-prefix timing (fails collects what went wrong)."""
    q = [{"role": "user", "content": "What is the capital of France?"}]
    try:
        import openai
        c = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % s.port, api_key="none", max_retries=0)
        r = c.chat.completions.create(model="smol", messages=q, temperature=0, max_tokens=32)
        plain = r.choices[0].message.content
        streamed = "".join(ch.choices[0].delta.content or "" for ch in
                           c.chat.completions.create(model="smol", messages=q, temperature=0, max_tokens=32, stream=True)
                           if ch.choices)
    except ImportError:
        print("note: openai not installed; plain HTTP only", file=sys.stderr)
        plain = s.post("/v1/chat/completions", {"messages": q, "temperature": 0, "max_tokens": 32})[1]
        plain = plain["choices"][0]["message"]["content"]
        streamed = chat_text(s.stream("/v1/chat/completions", {"messages": q, "temperature": 0, "max_tokens": 32,
                                                                 "stream": True})[0])[0]
    print("answer: %r" % plain, file=sys.stderr)
    if "Paris" not in plain or streamed != plain:
        fails.append("answer %r / streamed %r" % (plain, streamed))
    if os.environ.get("OKV_REAL_MODEL_TESTS") == "reduced":
        print("reduced run (OKV_REAL_MODEL_TESTS=reduced): the shared-prefix timing is left out", file=sys.stderr)
        return
    # a shared system prompt: the second request reuses the first one's cells
    msgs = lambda u: [{"role": "system", "content": SYSTEM}, {"role": "user", "content": u}]
    body = lambda u: {"messages": msgs(u), "temperature": 0, "max_tokens": 8, "stream": True,
                      "stream_options": {"include_usage": True}}
    # both slots hold the France prompt now; the first system-prompt request computes the whole prompt
    t1, u1 = ttft(s, body("What is the capital of Spain?"))
    t2, u2 = ttft(s, body("What is the capital of Italy?"))
    print("system prompt %d tokens: TTFT cold %.3f s (cached %d), warm %.3f s (cached %d)" %
          (u1["prompt_tokens"], t1, u1["prompt_tokens_details"]["cached_tokens"], t2,
           u2["prompt_tokens_details"]["cached_tokens"]), file=sys.stderr)
    if u2["prompt_tokens_details"]["cached_tokens"] < u1["prompt_tokens"] // 2:
        fails.append("shared system prompt not reused: %s" % u2)


if __name__ == "__main__":
    sys.exit(main())
