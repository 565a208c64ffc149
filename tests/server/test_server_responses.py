#!/usr/bin/env python3
"""`offkv serve`: POST /v1/responses (OpenAI's Responses API) and issue
42's leftovers, end to end on loopback against generated programs (random
weights: a Llama with the Llama-3.1 tokenizer, a Qwen3 whose template opens
<think>) under --deterministic, with plain HTTP and the openai client:

- a Response equals the chat completion of the conversation it converts to
  (instructions -> a system message first, developer -> system, text parts
  joined, function_call / function_call_output items -> tool_calls / tool
  messages, flat function tools -> chat's): the same text and input tokens;
  its shape (resp_ id, output message, usage sums, incomplete at
  max_output_tokens); streamed, the typed events in OpenAI's order with
  "event:" lines, consecutive sequence_numbers, deltas joining to the text;
- text.format json_schema / json_object: output that parses and validates,
  status completed; include logprobs equal chat's logprobs; the <think>
  text as a reasoning item (and reasoning_text events) before the message,
  equal to chat's reasoning_content;
- refusals: previous_response_id, store: true, conversation, non-function
  tools, image parts, missing input, each a 400 naming the field; a stream
  whose client hangs up is cancelled and frees its sequence;
- the openai client (skipped loudly when not installed): responses.create,
  responses.stream with get_final_response, create(stream=True),
  responses.parse with a pydantic text_format, BadRequestError's param;
- context_length_exceeded: a prompt longer than --ctx-per-seq is a 400
  with code "context_length_exceeded" on chat, completions, responses;
- startup refusals: --ctx-per-seq beyond the program's max_ctx_len, cells
  fewer than one step, K/V beyond the machine's memory: exit 1, one line
  naming the flag and the limit;
- prompt_cache_key affinity: among fork sources sharing the longest
  prefix, one with the request's key (body, X-Prompt-Cache-Key header, or
  user), counted by offkv_prefix_cache_affinity_hits_total.

usage: test_server_responses.py OFFKV OKV_MKCKPT"""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import Server, exit_status  # noqa: E402
from test_server import check, failures, make_program  # noqa: E402  (OFFKV, MKCKPT from sys.argv as here)

OFFKV = sys.argv[1]
STREAM_ORDER = ["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"]
SCHEMA = {"type": "object",
          "properties": {"color": {"enum": ["red", "green", "blue"]}, "n": {"type": "integer"},
                         "name": {"type": "string", "maxLength": 8}},
          "required": ["color", "n", "name"], "additionalProperties": False}


def sse(s, path, body, headers=None):
    """(status, [(event line, data object)]) of a streamed request."""
    code, ctype, text = s.request("POST", path, body, headers=headers)
    if code != 200:
        return code, text
    check(ctype.startswith("text/event-stream"), "responses stream content type %s" % ctype)
    out = []
    for block in text.split("\n\n"):
        if not block:
            continue
        lines = block.split("\n")
        check(len(lines) == 2 and lines[0].startswith("event: ") and lines[1].startswith("data: "), "SSE block shape: %r" % block[:200])
        out.append((lines[0][len("event: "):], json.loads(lines[1][len("data: "):])))
    return code, out


def output_text(resp):
    return "".join(p["text"] for it in resp["output"] if it["type"] == "message" for p in it["content"] if p["type"] == "output_text")


def chat_reply(s, messages, **kw):
    code, r = s.post("/v1/chat/completions", {"model": "m", "messages": messages, "temperature": 0, **kw})
    check(code == 200, "chat: %s %s" % (code, r))
    return r


def responses(s, **body):
    code, r = s.post("/v1/responses", {"model": "m", "temperature": 0, **body})
    check(code == 200 and isinstance(r, dict) and r.get("object") == "response", "responses: %s %s" % (code, str(r)[:300]))
    return r


def expect_400(s, path, body, param, code=None, needle=None):
    status, r = s.post(path, body)
    err = r.get("error", {}) if isinstance(r, dict) else {}
    ok = status == 400 and err.get("param") == param and err.get("type") == "invalid_request_error" and err.get("code") == code
    ok = ok and (needle is None or needle in err.get("message", ""))
    check(ok, "%s %s -> %d %s (wanted 400 naming %s, code %s)" % (path, str(body)[:80], status, str(r)[:300], param, code))


# ---- Responses over plain HTTP ---------------------------------------------------------------

def test_shape_and_equivalence(s):
    """The Response of instructions + a string input equals the chat
    completion of [system, user]; its shape; incomplete at max_output_tokens."""
    r = responses(s, instructions="Answer briefly.", input="Name a colour.", max_output_tokens=6)
    c = chat_reply(s, [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Name a colour."}], max_tokens=6)
    text = c["choices"][0]["message"]["content"]
    check(output_text(r) == text and text, "responses text %r == chat text %r" % (output_text(r), text))
    check(r["id"].startswith("resp_") and r["status"] == "incomplete" and r["incomplete_details"] == {"reason": "max_output_tokens"},
          "incomplete at max_output_tokens: %s" % {k: r.get(k) for k in ("id", "status", "incomplete_details")})
    msg = r["output"][0]
    check(len(r["output"]) == 1 and msg["type"] == "message" and msg["role"] == "assistant" and msg["id"].startswith("msg_") and
          msg["content"][0]["type"] == "output_text" and msg["content"][0]["annotations"] == [], "output message shape: %s" % msg)
    u = r["usage"]
    check(u["input_tokens"] == c["usage"]["prompt_tokens"] and u["output_tokens"] == 6 and
          u["total_tokens"] == u["input_tokens"] + 6 and "cached_tokens" in u["input_tokens_details"] and
          u["output_tokens_details"]["reasoning_tokens"] == 0, "usage %s vs chat %s" % (u, c["usage"]))
    check(r["instructions"] == "Answer briefly." and r["max_output_tokens"] == 6 and r["temperature"] == 0 and
          r["tools"] == [] and r["store"] is False and isinstance(r["created_at"], (int, float)), "echoed fields: %s" % r)
    # items: developer -> system, text parts joined, an assistant turn replayed with output_text
    items = [{"type": "message", "role": "developer", "content": "Answer briefly."},
             {"role": "user", "content": [{"type": "input_text", "text": "Name "}, {"type": "input_text", "text": "a colour."}]},
             {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Red.", "annotations": []}]},
             {"type": "reasoning", "id": "rs_1", "summary": []},
             {"role": "user", "content": "Another."}]
    r2 = responses(s, input=items, max_output_tokens=5)
    c2 = chat_reply(s, [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Name a colour."},
                        {"role": "assistant", "content": "Red."}, {"role": "user", "content": "Another."}], max_tokens=5)
    check(output_text(r2) == c2["choices"][0]["message"]["content"] and r2["usage"]["input_tokens"] == c2["usage"]["prompt_tokens"],
          "items conversation == chat: %r vs %r" % (output_text(r2), c2["choices"][0]["message"]["content"]))
    return text


def test_function_items(s):
    """function_call / function_call_output items and flat function tools
    give the chat request with tool_calls, a tool message and nested tools."""
    params = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    items = [{"role": "user", "content": "Weather in Paris?"},
             {"type": "function_call", "call_id": "call_7", "name": "get_weather", "arguments": "{\"city\": \"Paris\"}"},
             {"type": "function_call_output", "call_id": "call_7", "output": "sunny, 21 C"}]
    r = responses(s, input=items, tools=[{"type": "function", "name": "get_weather", "description": "Weather now", "parameters": params}],
                  max_output_tokens=5)
    c = chat_reply(s, [{"role": "user", "content": "Weather in Paris?"},
                       {"role": "assistant", "content": "", "tool_calls": [
                           {"id": "call_7", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
                       {"role": "tool", "tool_call_id": "call_7", "content": "sunny, 21 C"}],
                   tools=[{"type": "function", "function": {"name": "get_weather", "description": "Weather now", "parameters": params}}],
                   max_tokens=5)
    check(output_text(r) == c["choices"][0]["message"]["content"] and r["usage"]["input_tokens"] == c["usage"]["prompt_tokens"],
          "function items == chat tool messages: %r vs %r" % (output_text(r), c["choices"][0]["message"]["content"]))
    check(r["tools"][0]["name"] == "get_weather", "tools echoed flat: %s" % r["tools"])


def test_function_call_output(s):
    """With tool_choice "required" the model's call comes back as a
    function_call output item equal to chat's tool_calls for the same
    request (greedy), streamed as added / arguments delta / done events."""
    params = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    flat = [{"type": "function", "name": "get_weather", "description": "Weather now", "parameters": params}]
    r = responses(s, input="Weather in Paris?", tools=flat, tool_choice="required", max_output_tokens=300)
    c = chat_reply(s, [{"role": "user", "content": "Weather in Paris?"}], max_tokens=300, tool_choice="required",
                   tools=[{"type": "function", "function": {"name": "get_weather", "description": "Weather now", "parameters": params}}])
    want = [(t["function"]["name"], t["function"]["arguments"]) for t in c["choices"][0]["message"].get("tool_calls") or []]
    calls = [it for it in r["output"] if it["type"] == "function_call"]
    got = [(it["name"], it["arguments"]) for it in calls]
    check(want and got == want, "function_call items %s == chat tool_calls %s (chat: %s)" % (got, want, str(c["choices"][0])[:400]))
    check(all(it["call_id"].startswith("call_") and it["id"].startswith("fc_") and it["status"] == "completed" for it in calls),
          "function_call item fields: %s" % calls)
    check(all(json.loads(a).get("city") is not None for _, a in got), "arguments parse and name the city: %s" % got)
    if c["choices"][0]["message"]["content"] is None:
        check(not [it for it in r["output"] if it["type"] == "message"], "a reply of calls alone has no message item: %s" % r["output"])
    code, events = sse(s, "/v1/responses", {"model": "m", "temperature": 0, "input": "Weather in Paris?", "tools": flat,
                                             "tool_choice": "required", "max_output_tokens": 300, "stream": True})
    check(code == 200, "streamed function call: %s" % code)
    if code != 200:
        return
    kinds = [e for e, _ in events]
    added = [d["item"] for e, d in events if e == "response.output_item.added" and d["item"]["type"] == "function_call"]
    deltas = "".join(d["delta"] for e, d in events if e == "response.function_call_arguments.delta")
    done = [d["item"] for e, d in events if e == "response.output_item.done" and d["item"]["type"] == "function_call"]
    check(len(added) == len(got) and all(a["arguments"] == "" for a in added), "function_call items added empty: %s" % added)
    check(deltas == "".join(a for _, a in got), "argument deltas %r reassemble to %r" % (deltas, got))
    check([(d["name"], d["arguments"]) for d in done] == got, "streamed items done %s == %s" % (done, got))
    final = events[-1][1]["response"] if events else {}
    check(kinds and kinds[-1] in ("response.completed", "response.incomplete") and
          [(it["name"], it["arguments"]) for it in final.get("output", []) if it["type"] == "function_call"] == got,
          "the final Response carries the calls: %s" % kinds[-3:])


def test_stream(s, plain_text):
    """Streamed: the events in order, "event:" = type, sequence_number 0..n-1,
    deltas joined == done text == the non-streamed text."""
    code, ev = sse(s, "/v1/responses", {"model": "m", "instructions": "Answer briefly.", "input": "Name a colour.",
                                        "max_output_tokens": 6, "temperature": 0, "stream": True})
    check(code == 200, "stream: %s %s" % (code, ev))
    if code != 200:
        return
    types = [d["type"] for _, d in ev]
    check(all(e == d["type"] for e, d in ev), "event lines name the data's type")
    check([d["sequence_number"] for _, d in ev] == list(range(len(ev))), "sequence numbers 0..n-1: %s" % [d["sequence_number"] for _, d in ev])
    n_delta = types.count("response.output_text.delta")
    want = STREAM_ORDER + ["response.output_text.delta"] * n_delta + [
        "response.output_text.done", "response.content_part.done", "response.output_item.done", "response.incomplete"]
    check(types == want and n_delta >= 1, "event order: %s" % types)
    deltas = "".join(d["delta"] for _, d in ev if d["type"] == "response.output_text.delta")
    done = next(d for _, d in ev if d["type"] == "response.output_text.done")
    final = ev[-1][1]["response"]
    check(deltas == done["text"] == output_text(final) == plain_text, "streamed text %r / %r / %r vs %r" % (deltas, done["text"], output_text(final), plain_text))
    item_ids = {d.get("item_id") or d.get("item", {}).get("id") for _, d in ev[2:-1]}
    check(len(item_ids) == 1 and ev[0][1]["response"]["id"] == final["id"] and ev[0][1]["response"]["status"] == "in_progress",
          "one item id, one response id: %s" % item_ids)
    check(final["usage"]["output_tokens"] == 6 and final["status"] == "incomplete", "final usage %s" % final["usage"])


def validates(text):
    try:
        v = json.loads(text)
    except ValueError:
        return False
    return (isinstance(v, dict) and set(v) == {"color", "n", "name"} and v["color"] in ("red", "green", "blue") and
            isinstance(v["n"], int) and isinstance(v["name"], str) and len(v["name"]) <= 8)


def test_text_format(s):
    """json_schema: every sampled output validates and completes; json_object an object."""
    for seed in range(4):
        r = responses(s, input="A JSON object please.", temperature=1.0, seed=seed, max_output_tokens=400,
                      text={"format": {"type": "json_schema", "name": "thing", "schema": SCHEMA, "strict": True}})
        check(r["status"] == "completed" and r["incomplete_details"] is None and validates(output_text(r)),
              "json_schema seed %d: %s %r" % (seed, r["status"], output_text(r)[:200]))
        check(r["text"]["format"]["name"] == "thing", "text.format echoed: %s" % r["text"])
    r = responses(s, input="An object.", temperature=1.0, seed=3, max_output_tokens=400, text={"format": {"type": "json_object"}})
    t = output_text(r)
    check(r["status"] != "completed" or isinstance(json.loads(t), dict), "json_object: %s %r" % (r["status"], t[:200]))
    expect_400(s, "/v1/responses", {"input": "x", "text": {"format": {"type": "json_schema", "name": "x",
                                                                       "schema": {"type": "string", "pattern": "a+"}}}},
               "text.format", needle="pattern")


def test_logprobs(s):
    """include message.output_text.logprobs: chat's logprobs for the same conversation."""
    r = responses(s, input="Hi", max_output_tokens=3, include=["message.output_text.logprobs"], top_logprobs=2)
    c = chat_reply(s, [{"role": "user", "content": "Hi"}], max_tokens=3, logprobs=True, top_logprobs=2)
    got = r["output"][0]["content"][0].get("logprobs")
    want = c["choices"][0]["logprobs"]["content"]
    check(got == want and len(got) == 3, "responses logprobs == chat's: %s vs %s" % (str(got)[:200], str(want)[:200]))
    code, ev = sse(s, "/v1/responses", {"input": "Hi", "max_output_tokens": 3, "temperature": 0, "stream": True,
                                        "include": ["message.output_text.logprobs"], "top_logprobs": 2})
    streamed = [e for _, d in ev if d["type"] == "response.output_text.delta" for e in d["logprobs"]] if code == 200 else []
    check(streamed == want, "streamed delta logprobs == chat's: %s" % str(streamed)[:200])


def test_reasoning(thinker):
    """A template that opens <think>: the reasoning item before the message, equal to chat's reasoning_content."""
    r = responses(thinker, input="Hello", max_output_tokens=8)
    c = chat_reply(thinker, [{"role": "user", "content": "Hello"}], max_tokens=8)
    types = [it["type"] for it in r["output"]]
    rs = r["output"][0]["content"][0]["text"] if types and types[0] == "reasoning" else None
    check(types == ["reasoning", "message"] and rs == c["choices"][0]["message"].get("reasoning_content") and
          output_text(r) == (c["choices"][0]["message"]["content"] or ""),
          "reasoning item: %s %r vs chat %s" % (types, rs, c["choices"][0]["message"]))
    check(0 < r["usage"]["output_tokens_details"]["reasoning_tokens"] <= 8, "reasoning_tokens %s" % r["usage"])
    code, ev = sse(thinker, "/v1/responses", {"input": "Hello", "max_output_tokens": 8, "temperature": 0, "stream": True})
    types = [d["type"] for _, d in ev] if code == 200 else []
    joined = "".join(d["delta"] for _, d in ev if d["type"] == "response.reasoning_text.delta") if code == 200 else None
    check("response.reasoning_text.delta" in types and "response.reasoning_text.done" in types and joined == rs and
          types[-1] == "response.incomplete" and output_text(ev[-1][1]["response"]) == output_text(r),
          "streamed reasoning: %s %r" % (types, joined))


def test_refusals(s):
    expect_400(s, "/v1/responses", {"input": "x", "previous_response_id": "resp_1"}, "previous_response_id", needle="previous_response_id")
    expect_400(s, "/v1/responses", {"input": "x", "store": True}, "store")
    expect_400(s, "/v1/responses", {"input": "x", "conversation": "conv_1"}, "conversation")
    expect_400(s, "/v1/responses", {"input": "x", "background": True}, "background")
    expect_400(s, "/v1/responses", {"input": "x", "tools": [{"type": "web_search"}]}, "tools", needle="web_search")
    expect_400(s, "/v1/responses", {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "http://x"}]}]}, "input",
               needle="input_image")
    expect_400(s, "/v1/responses", {"input": [{"role": "robot", "content": "x"}]}, "input")
    expect_400(s, "/v1/responses", {"input": [{"type": "item_reference", "id": "msg_1"}]}, "input")
    expect_400(s, "/v1/responses", {"model": "m"}, "input")
    expect_400(s, "/v1/responses", {"input": "x", "max_output_tokens": 0}, "max_output_tokens", needle="max_output_tokens")
    expect_400(s, "/v1/responses", {"input": "x", "temperature": "hot"}, "temperature")
    code, r = s.post("/v1/responses", {"input": "x", "store": False, "max_output_tokens": 1, "metadata": {"k": "v"}})
    check(code == 200 and r["metadata"] == {"k": "v"}, "store false accepted, metadata echoed: %s %s" % (code, str(r)[:200]))


def test_cancel(s):
    """A streamed response whose client goes away: cancelled, its sequence freed."""
    before = s.metric("offkv_requests_cancelled_total")
    sock = socket.create_connection(("127.0.0.1", s.port), timeout=60)
    body = json.dumps({"input": "Tell a long story.", "max_output_tokens": 200, "stream": True})
    sock.sendall(("POST /v1/responses HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                  % (len(body), body)).encode())
    got = b""
    while b"response.output_text.delta" not in got:
        chunk = sock.recv(4096)
        if not chunk:
            break
        got += chunk
    sock.close()
    check(b"response.created" in got, "stream began before the hang-up: %r" % got[:200])
    check(s.wait_metric("offkv_requests_cancelled_total", before + 1) == before + 1, "the hang-up cancels the response")
    check(s.wait_metric("offkv_active_sequences", 0) == 0, "its sequence is freed")


# ---- the openai client -------------------------------------------------------------------------

def test_openai_client(s, plain_text):
    try:
        import openai
        import pydantic
    except ImportError:
        print("SKIP: the openai package is not installed (scripts/setup.sh installs it); "
              "the Responses API was checked over plain HTTP only", file=sys.stderr)
        return False
    c = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % s.port, api_key="unused", max_retries=0, timeout=120)
    r = c.responses.create(model="m", instructions="Answer briefly.", input="Name a colour.", max_output_tokens=6, temperature=0)
    check(r.output_text == plain_text and r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens" and
          r.usage.output_tokens == 6 and r.usage.input_tokens_details.cached_tokens >= 0,
          "openai responses.create: %r %s" % (r.output_text, r.status))
    events = [e.type for e in c.responses.create(model="m", instructions="Answer briefly.", input="Name a colour.",
                                                 max_output_tokens=6, temperature=0, stream=True)]
    check(events[:2] == ["response.created", "response.in_progress"] and events[-1] == "response.incomplete",
          "openai create(stream=True) events: %s" % events)

    class Thing(pydantic.BaseModel):
        color: str
        n: int
        name: str

    fmt = {"format": {"type": "json_schema", "name": "thing", "schema": SCHEMA, "strict": True}}
    with c.responses.stream(model="m", input="A JSON object please.", text=fmt, max_output_tokens=400, temperature=1.0,
                            extra_body={"seed": 11}) as st:
        deltas = "".join(e.delta for e in st if e.type == "response.output_text.delta")
        final = st.get_final_response()
    check(final.status == "completed" and final.output_text == deltas and validates(deltas),
          "openai responses.stream: %s %r" % (final.status, deltas[:200]))
    p = c.responses.parse(model="m", input="A JSON object please.", text_format=Thing, max_output_tokens=400, temperature=1.0,
                          extra_body={"seed": 12})
    check(p.status == "completed" and isinstance(p.output_parsed, Thing), "openai responses.parse: %s %r" % (p.status, p.output_text[:200]))
    try:
        c.responses.create(model="m", input="x", previous_response_id="resp_x")
        check(False, "openai: previous_response_id raised nothing")
    except openai.BadRequestError as e:
        check(e.body.get("param") == "previous_response_id", "openai BadRequestError param: %s" % e.body)
    return True


# ---- issue 42's leftovers -----------------------------------------------------------------------

def test_context_length(s):
    """--ctx-per-seq 256: a prompt of 257 ids does not fit: 400 context_length_exceeded; 256 ids fill
    the context and still sample one token (from the last position's logits), finish "length"."""
    long_ids = [128000] + [791] * 256
    expect_400(s, "/v1/completions", {"prompt": long_ids, "max_tokens": 1}, "prompt", code="context_length_exceeded")
    expect_400(s, "/v1/chat/completions", {"messages": [{"role": "user", "content": "word " * 300}]}, "messages", code="context_length_exceeded")
    expect_400(s, "/v1/responses", {"input": "word " * 300}, "input", code="context_length_exceeded", needle="'input'")
    code, r = s.post("/v1/completions", {"prompt": long_ids[:256], "max_tokens": 8, "temperature": 0})
    check(code == 200 and r["usage"]["completion_tokens"] == 1 and r["choices"][0]["finish_reason"] == "length",
          "256 of 256 positions: one token, finish length: %s %s" % (code, str(r)[:300]))


def test_affinity(s):
    """Entries A (key ka) and B (key kb) share 6 ids with each later prompt;
    each later prompt forks the one with its key (body, header, user): one
    affinity hit each. Without the preference the scan takes the same entry
    for every tie, so one of the first two would miss."""
    base = [128000, 40, 41, 42, 43, 44]
    metric = "offkv_prefix_cache_affinity_hits_total"

    def run(tail, key=None, header=None, user=None):
        body = {"prompt": base + [tail], "max_tokens": 1, "temperature": 0}
        if key:
            body["prompt_cache_key"] = key
        if user:
            body["user"] = user
        h = dict(s.default_headers)
        if header:
            h["X-Prompt-Cache-Key"] = header
        code, ctype, text = s.request("POST", "/v1/completions", body, headers=h)
        check(code == 200, "affinity request: %s %s" % (code, text[:200]))
        return json.loads(text)["usage"]["prompt_tokens_details"]["cached_tokens"] if code == 200 else -1

    h0 = s.metric(metric)
    run(11, key="ka")
    run(12, key="kb")
    check(s.metric(metric) == h0, "B forked A's prefix (another key): no hit")
    cached = [run(13, key="kb"), run(14, key="ka")]
    check(s.metric(metric) == h0 + 2 and cached == [6, 6], "ties go to the same key: hits %s, cached %s" % (s.metric(metric) - h0, cached))
    run(15, header="ka")
    check(s.metric(metric) == h0 + 3, "X-Prompt-Cache-Key is the same key: hits %s" % (s.metric(metric) - h0))
    run(16, user="kb")
    check(s.metric(metric) == h0 + 4, "user is the key when none is given: hits %s" % (s.metric(metric) - h0))
    run(17, key="kc", header="ka")
    check(s.metric(metric) == h0 + 4, "the body's key wins over the header's (no entry has kc): hits %s" % (s.metric(metric) - h0))
    run(18)
    check(s.metric(metric) == h0 + 4, "no key, no hit: hits %s" % (s.metric(metric) - h0))
    code, _, text = s.request("POST", "/v1/completions", {"prompt": base + [19], "max_tokens": 1, "prompt_cache_key": 5},
                              headers=s.default_headers)
    check(code == 400 and json.loads(text)["error"]["param"] == "prompt_cache_key", "a non-string key: 400 %s" % text[:200])


def start_refused(program, *args):
    r = subprocess.run([OFFKV, "serve", program, "--host", "127.0.0.1", "--port", "0", *args], capture_output=True, text=True, timeout=120)
    return r.returncode, r.stderr.strip().splitlines()


def test_startup_refusals(program, big):
    """One line naming the flag and the limit, exit 1."""
    rc, lines = start_refused(program, "--ctx-per-seq", "4096")
    check(rc == 1 and len(lines) == 1 and "--ctx-per-seq" in lines[0] and "4096" in lines[0] and "max_ctx_len 512" in lines[0],
          "--ctx-per-seq past max_ctx_len: %s %s" % (rc, lines))
    rc, lines = start_refused(program, "--ctx-per-seq", "8", "--parallel", "1")
    check(rc == 1 and len(lines) == 1 and "--ctx-per-seq" in lines[0] and "--prefill-chunk" in lines[0] and "(64)" in lines[0],
          "cells fewer than one step's prompt tokens: %s %s" % (rc, lines))
    with open("/proc/meminfo") as f:
        gib = int(f.readline().split()[1]) / (1 << 20)
    parallel = int(2 * gib) + 2   # this program's K/V: 1 KiB per position, so parallel x 1 Mi positions = parallel GiB
    if parallel > 256:
        print("SKIP: the machine has %.0f GiB; 256 x 1 Mi positions fit" % gib, file=sys.stderr)
        return
    rc, lines = start_refused(big, "--ctx-per-seq", "1048576", "--parallel", str(parallel))
    check(rc == 1 and len(lines) == 1 and "--parallel" in lines[0] and "GiB of K/V cache" in lines[0],
          "K/V beyond the machine's memory: %s %s" % (rc, lines))


def test_small_plan(program):
    """--parallel 1 --ctx-per-seq 12 --prefill-chunk 8: fewer cells than the
    program's 16-token chunk, so its steps are capped at the 12 cells; it
    starts, and a 10-token prompt (two prefill steps) gives the greedy
    tokens a roomy server gives."""
    body = {"model": "m", "prompt": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], "max_tokens": 2, "temperature": 0, "logprobs": 0}
    replies = []
    for args in (("--parallel", "1", "--ctx-per-seq", "12", "--prefill-chunk", "8"), ("--parallel", "1", "--ctx-per-seq", "64")):
        s = Server(OFFKV, program, "--deterministic", *args)
        try:
            code, r = s.post("/v1/completions", body)
            check(code == 200 and r["usage"]["completion_tokens"] == 2, "%s: %s %s" % (" ".join(args), code, str(r)[:300]))
            replies.append(r["choices"][0]["text"] if code == 200 else None)
            code, r = s.post("/v1/completions", dict(body, prompt=list(range(1, 14))))
            check(code == 400 and r["error"]["code"] == "context_length_exceeded" or args[3] != "12",
                  "13 tokens into 12 cells: %s %s" % (code, str(r)[:200]))
        finally:
            check(s.stop() == 0, "small-plan server exits 0")
    check(replies[0] is not None and replies[0] == replies[1], "12 cells and 64 cells give the same greedy text: %r" % replies)


def main():
    tmp = tempfile.mkdtemp(prefix="okv-serve-responses-")
    sdk = False
    try:
        program = make_program(tmp, "llama", "llama", 128256, 128000, 128009, "llama3_1")
        thinker_prog = make_program(tmp, "thinker", "qwen3", 151669, 151643, 151645, "qwen3", template_suffix="<think>\n")
        big = os.path.join(tmp, "llama1m.okv")
        subprocess.run([OFFKV, "export", os.path.join(tmp, "llama"), "-o", big, "--dtype", "fp32", "--max-ctx-len", "1048576",
                        "--prefill-chunk-size", "16"], check=True, stderr=subprocess.DEVNULL)
        test_startup_refusals(program, big)
        test_small_plan(program)
        s = Server(OFFKV, program, "--deterministic", "--parallel", "2", "--ctx-per-seq", "256", "--prefill-chunk", "8")
        thinker = Server(OFFKV, thinker_prog, "--deterministic", "--parallel", "1", "--ctx-per-seq", "256")
        try:
            test_affinity(s)
            text = test_shape_and_equivalence(s)
            test_function_items(s)
            test_function_call_output(s)
            test_stream(s, text)
            test_text_format(s)
            test_logprobs(s)
            test_reasoning(thinker)
            test_refusals(s)
            test_context_length(s)
            sdk = test_openai_client(s, text)
            test_cancel(s)
        finally:
            check(thinker.stop() == 0, "thinker server exits 0")
            check(s.stop() == 0, "server exits 0: %s" % "".join(s.log)[-500:])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    rc = exit_status(failures)
    return 77 if rc == 0 and not sdk else rc


if __name__ == "__main__":
    sys.exit(main())
