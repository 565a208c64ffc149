#!/usr/bin/env python3
"""Structured output (response_format) through `offkv serve` and `offkv run`.

Default mode, on a generated Llama (random weights, the Llama-3.1 tokenizer:
its free text is garbage, so only the constraint can make it JSON): 50
chat completions sampled at temperature 1 under a json_schema response_format
all json.loads and validate (jsonschema from PyPI when installed, else a
structural check) with finish_reason "stop"; streamed content too; the openai
client's response_format reaches the server; json_object gives an object
(or is cut by max_tokens); a schema we cannot enforce is a 400 naming the
keyword with param "response_format"; `offkv run --json-schema` for several
seeds validates too.

--real: SmolLM2-135M-Instruct (SKIP, exit 77, when the GGUF is not cached)
asked for the capital of France under {"name": string, "capital": string}
answers a valid object that names Paris.

usage: test_server_schema.py OFFKV OKV_MKCKPT | test_server_schema.py --real OFFKV"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import Server, chat_text  # noqa: E402

TOK = "../shared/fixtures/tokenizers/"
failures = []

try:
    import jsonschema
except ImportError:  # the structural fallback below still checks parse + required keys
    jsonschema = None

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 20},
        "age": {"type": "integer"},
        "score": {"type": "number"},
        "tags": {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "maxItems": 3},
        "address": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                                     "zip": {"type": ["string", "null"], "maxLength": 5}},
                    "required": ["city", "zip"], "additionalProperties": False},
        "ok": {"type": "boolean"},
        "id": {"type": "string", "format": "uuid"},
        "born": {"type": "string", "format": "date"},
        "seen": {"anyOf": [{"type": "string", "format": "date-time"}, {"type": "null"}]},
        "wakes": {"type": "string", "format": "time"},
    },
    "required": ["name", "age", "score", "tags", "address", "ok", "id", "born", "seen", "wakes"],
    "additionalProperties": False,
}


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)


def validates(text, schema):
    try:
        v = json.loads(text)
    except ValueError as e:
        return "does not parse (%s): %r" % (e, text[:300])
    if jsonschema is not None:
        try:
            jsonschema.validate(v, schema)
        except jsonschema.ValidationError as e:
            return "does not validate (%s): %r" % (e.message, text[:300])
    elif not isinstance(v, dict) or not all(k in v for k in schema.get("required", [])):
        return "misses required keys: %r" % text[:300]
    return formats_hold(v, schema)


def formats_hold(v, schema):
    """The string formats, checked by Python's own parsers (jsonschema checks
    date-time and time only with optional packages installed)."""
    import datetime
    import uuid
    parse = {"date": datetime.date.fromisoformat, "uuid": uuid.UUID,
             "date-time": lambda t: datetime.datetime.fromisoformat(t.replace("Z", "+00:00")),
             "time": lambda t: datetime.time.fromisoformat(t.replace("Z", "+00:00"))}
    for key, sub in schema.get("properties", {}).items():
        for alt in sub.get("anyOf", [sub]):
            fmt, val = alt.get("format"), v.get(key) if isinstance(v, dict) else None
            if fmt and isinstance(val, str):
                try:
                    parse[fmt](val)
                except ValueError as e:
                    return "%s %r is no %s (%s)" % (key, val, fmt, e)
                if fmt in ("time", "date-time") and not (val.endswith("Z") or val[-6] in "+-"):
                    return "%s %r has no offset" % (key, val)
    return None


def rf(schema, name="person"):
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}


def chat(content, **kw):
    return {"model": "m", "messages": [{"role": "user", "content": content}], **kw}


def make_program(mkckpt, offkv, tmp):
    ck = os.path.join(tmp, "llama")
    subprocess.run([mkckpt, "--out", ck, "--arch", "llama", "--vocab", "128256", "--bos", "128000", "--eos", "128009",
                    "--seed", "7"], check=True, stdout=subprocess.DEVNULL)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(TOK, "llama3_1", f), os.path.join(ck, f))
    out = os.path.join(tmp, "llama.okv")
    subprocess.run([offkv, "export", ck, "-o", out, "--dtype", "fp32", "--max-ctx-len", "1024", "--prefill-chunk-size", "16"],
                   check=True, stderr=subprocess.DEVNULL)
    return out


def test_sampled(s):
    """50 completions at temperature 1, 4 at a time."""
    results = [None] * 50

    def one(i):
        body = chat("Describe a person as JSON.", temperature=1.0, seed=1000 + i, max_tokens=500, response_format=rf(SCHEMA))
        code, _, text = s.request("POST", "/v1/chat/completions", body)
        results[i] = (code, text)

    for start in range(0, 50, 4):
        ts = [threading.Thread(target=one, args=(i,)) for i in range(start, min(start + 4, 50))]
        [t.start() for t in ts]
        [t.join() for t in ts]
    bad = []
    for i, (code, text) in enumerate(results):
        if code != 200:
            bad.append("request %d: %d %s" % (i, code, text[:200]))
            continue
        choice = json.loads(text)["choices"][0]
        why = validates(choice["message"]["content"], SCHEMA)
        if why or choice["finish_reason"] != "stop":
            bad.append("request %d (finish %s): %s" % (i, choice["finish_reason"], why))
    check(not bad, "sampled schema'd completions: %d of 50 bad: %s" % (len(bad), "; ".join(bad[:3])))
    print("50 sampled completions, first: %s" % json.loads(results[0][1])["choices"][0]["message"]["content"][:200],
          file=sys.stderr)


def test_stream_and_object(s):
    events, done = s.stream("/v1/chat/completions", chat("JSON please", temperature=1.0, seed=5, max_tokens=500, stream=True,
                                                   response_format=rf(SCHEMA)))
    text, _, finish = chat_text(events)
    check(done and finish == "stop" and validates(text, SCHEMA) is None,
          "streamed schema'd content (finish %s): %s" % (finish, validates(text, SCHEMA)))
    for seed in range(3):
        code, _, body = s.request("POST", "/v1/chat/completions", chat("An object", temperature=1.0, seed=seed, max_tokens=300,
                                                           response_format={"type": "json_object"}))
        choice = json.loads(body)["choices"][0] if code == 200 else {}
        content, why = choice.get("message", {}).get("content", ""), choice.get("finish_reason")
        ok = code == 200 and (why == "length" or (why == "stop" and isinstance(json.loads(content), dict)))
        check(ok, "json_object seed %d: %d finish %s %r" % (seed, code, why, content[:200]))
    # text is the default: nothing enforced, still 200
    code, _, body = s.request("POST", "/v1/chat/completions", chat("hi", max_tokens=4, temperature=0, response_format={"type": "text"}))
    check(code == 200, "response_format text: %d %s" % (code, body[:200]))


def expect_400(s, body, needle):
    code, _, text = s.request("POST", "/v1/chat/completions", body)
    err = json.loads(text).get("error", {}) if code == 400 else {}
    check(code == 400 and err.get("param") == "response_format" and needle in err.get("message", ""),
          "expected a 400 naming %r: %d %s" % (needle, code, text[:300]))


def test_errors(s):
    expect_400(s, chat("x", response_format=rf({"type": "string", "pattern": "^a"})), "'pattern' at #")
    expect_400(s, chat("x", response_format=rf({"type": "object", "properties": {"d": {"type": "string", "format": "email"}}})),
               "#/properties/d: unsupported 'format' \"email\"")
    expect_400(s, chat("x", response_format=rf({"oneOf": [{"type": "string"}]})), "'oneOf'")
    expect_400(s, chat("x", response_format={"type": "xml"}), "json_schema")
    expect_400(s, chat("x", response_format={"type": "json_schema"}), "name")
    expect_400(s, chat("x", response_format="json"), "object")
    deep = {}
    for _ in range(40):
        deep = {"type": "array", "items": deep}
    expect_400(s, chat("x", response_format=rf(deep)), "deeper")


def test_openai_client(s):
    try:
        import openai
    except ImportError:
        print("openai client not installed: skipped", file=sys.stderr)
        return
    client = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % s.port, api_key="none")
    r = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "JSON"}], temperature=1.0, seed=9,
                                       max_tokens=500, response_format=rf(SCHEMA))
    check(validates(r.choices[0].message.content, SCHEMA) is None,
          "openai client: %s" % validates(r.choices[0].message.content, SCHEMA))
    try:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}],
                                       response_format=rf({"type": "string", "minimum": 1}))
        check(False, "openai client: an unsupported keyword was accepted")
    except openai.BadRequestError as e:
        check("minimum" in str(e), "openai client 400 names the keyword: %s" % e)


def test_cli(offkv, prog, tmp):
    path = os.path.join(tmp, "schema.json")
    json.dump(SCHEMA, open(path, "w"))
    for seed in range(3):
        r = subprocess.run([offkv, "run", prog, "--prompt", "A person as JSON", "--json-schema", path, "--temperature", "1",
                            "--seed", str(seed), "--max-new-tokens", "500"], capture_output=True, text=True)
        check(r.returncode == 0 and validates(r.stdout, SCHEMA) is None,
              "offkv run --json-schema seed %d: rc %d %s %s" % (seed, r.returncode, validates(r.stdout, SCHEMA), r.stderr[-300:]))
    bad = os.path.join(tmp, "bad.json")
    open(bad, "w").write('{"type": "string", "pattern": "x"}')
    r = subprocess.run([offkv, "run", prog, "--prompt", "x", "--json-schema", bad], capture_output=True, text=True)
    check(r.returncode != 0 and "'pattern'" in r.stderr, "offkv run refuses an unsupported keyword: %s" % r.stderr[-300:])


def main_random(offkv, mkckpt):
    tmp = tempfile.mkdtemp(prefix="okv-serve-schema-")
    try:
        prog = make_program(mkckpt, offkv, tmp)
        s = Server(offkv, prog, "--parallel", "4", "--ctx-per-seq", "1024")
        try:
            test_errors(s)
            test_sampled(s)
            test_stream_and_object(s)
            test_openai_client(s)
        finally:
            rc = s.stop()
        check(rc == 0, "SIGTERM exits 0 (got %s)" % rc)
        test_cli(offkv, prog, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main_real(offkv):
    gguf = os.path.join(os.environ.get("OKV_CACHE", os.path.expanduser("~/.cache/offkv")), "models",
                        "SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.isfile(gguf):
        print("SKIP: %s is not cached (scripts/fetch-models.sh smollm2)" % gguf, file=sys.stderr)
        return 77
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "capital": {"type": "string"}},
              "required": ["name", "capital"], "additionalProperties": False}
    with tempfile.TemporaryDirectory(prefix="okv-serve-schema-real-") as tmp:
        prog = os.path.join(tmp, "smol.okv")
        subprocess.run([offkv, "export", gguf, "-o", prog, "--max-ctx-len", "1024"], check=True, stderr=subprocess.DEVNULL)
        s = Server(offkv, prog, "--parallel", "2", "--ctx-per-seq", "1024")
        try:
            body = chat("What is the capital of France? Answer as JSON with the country's name and its capital.",
                        temperature=0, max_tokens=64, response_format=rf(schema, "country"))
            code, _, text = s.request("POST", "/v1/chat/completions", body)
            content = json.loads(text)["choices"][0]["message"]["content"] if code == 200 else ""
            print("SmolLM2 under the schema: %s" % content, file=sys.stderr)
            check(code == 200 and validates(content, schema) is None and "Paris" in content,
                  "SmolLM2 France: %d %r %s" % (code, content, validates(content, schema) if content else ""))
        finally:
            s.stop()
    return 0


def main():
    if sys.argv[1] == "--real":
        rc = main_real(sys.argv[2])
        if rc:
            return rc
    else:
        main_random(sys.argv[1], sys.argv[2])
    if failures:
        print("%d failure(s)" % len(failures), file=sys.stderr)
        return 1
    print("ok", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
