#!/usr/bin/env python3
"""bad_inputs.py [BUILD_DIR] — feeds one example of each class of bad input
to the built `offkv` and prints the table in docs/reliability.md of what
each gets: the first line of stderr (chat-render, a batch tool, reports
per-line errors as JSON on stdout instead) and the exit code (and whether
stderr had more lines). The inputs are made from the fuzz seeds in a
temporary directory, so the table is regenerated, not written by hand,
whenever the behaviour changes."""
import json, os, struct, subprocess, sys, tempfile, zlib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build"))
OFFKV = os.path.join(BUILD, "src", "cli", "offkv")
SEEDS = os.path.join(ROOT, "fuzz", "corpus")
T = tempfile.mkdtemp(prefix="okv-bad-")


def path(name):
    return os.path.join(T, name)


def put(name, data):
    p = path(name)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)
    return p


def seed(target, name):
    with open(os.path.join(SEEDS, target, name), "rb") as f:
        return f.read()


# ---- program files -----------------------------------------------------------------

def split_program(b):
    hlen, data_off = struct.unpack_from("<QQ", b, 16)
    return json.loads(b[48:48 + hlen]), b[data_off:]


def join_program(header, data):
    h = json.dumps(header, separators=(",", ":")).encode()
    data_off = (48 + len(h) + 63) // 64 * 64
    fixed = b"OKVPROG\0" + struct.pack("<II", 1, zlib.crc32(h)) + struct.pack("<QQQ", len(h), data_off, len(data))
    fixed += b"\0" * (48 - len(fixed))
    return fixed + h + b"\0" * (data_off - 48 - len(h)) + data


def program_with(edit):
    header, data = split_program(seed("program", "llama32-tiny.program"))
    edit(header)
    return join_program(header, data)


def first_node(header, op):
    return next(n for n in header["graph"]["nodes"] if (n.get("op") if isinstance(n, dict) else None) == op)


def rope_wrap(h):
    n = first_node(h, "rope")
    n["i"] = [(1 << 30) + n["i"][0]] + n["i"][1:]   # n_heads * head_dim wraps back to the width in 32 bits


def huge_chunk(h):
    h["layout"]["prefill_chunk_size"] = 1 << 30
    h["layout"]["max_ctx_len"] = 1 << 30


def tensors_overlap(h):
    h["tensors"][2]["offset"] = h["tensors"][0]["offset"]   # 64-aligned, inside the first tensor's bytes


def name_twice(h):
    h["tensors"][3]["name"] = h["tensors"][1]["name"]


# ---- GGUF files ----------------------------------------------------------------------

def gguf_str(s):
    return struct.pack("<Q", len(s.encode())) + s.encode()


def gguf(kvs):
    """A GGUF v3 of metadata only; kvs: (key, type id, packed value)."""
    body = b"".join(gguf_str(k) + struct.pack("<I", t) + v for k, t, v in kvs)
    return b"GGUF" + struct.pack("<IQQ", 3, 0, len(kvs)) + body


def llama_meta(freq_base):
    u32 = lambda k, v: (k, 4, struct.pack("<I", v))
    return gguf([("general.architecture", 8, gguf_str("llama")), u32("llama.block_count", 1),
                 u32("llama.embedding_length", 64), u32("llama.feed_forward_length", 96),
                 u32("llama.attention.head_count", 2), u32("llama.vocab_size", 16),
                 ("llama.rope.freq_base", 6, struct.pack("<f", freq_base))])


# ---- cases --------------------------------------------------------------------------------

def cases():
    prog = seed("program", "llama32-tiny.program")
    bad_crc = bytearray(prog)
    bad_crc[60] ^= 1
    cfg = json.loads(seed("config", "llama32-tiny-shrunk.json"))
    os.makedirs(path("dir-as-config/config.json"))
    st_long = struct.pack("<Q", 1 << 40) + b"{}"
    ck = path("ckpt-badst")
    os.makedirs(ck)
    put("ckpt-badst/config.json", json.dumps(cfg))
    put("ckpt-badst/model.safetensors", st_long)
    deep = "{{ " + "+".join(["1"] * 20000) + " }}"
    yield ("program: truncated", ["inspect", put("trunc.okv", prog[:100])])
    yield ("program: not a program", ["inspect", put("magic.okv", b"NOTPROG\0" + prog[8:])])
    yield ("program: header damaged (CRC)", ["inspect", put("crc.okv", bytes(bad_crc))])
    try:
        yield ("program: valid CRC, rope width that wraps int", ["generate", put("rope.okv", program_with(rope_wrap)),
                                                                "--tokens", "1 2", "--max-new-tokens", "1"])
        yield ("program: valid CRC, 2^30-token chunk (huge arena)", ["generate", put("chunk.okv", program_with(huge_chunk)),
                                                                    "--tokens", "1 2", "--max-new-tokens", "1"])
        yield ("program: valid CRC, two tensors share bytes", ["inspect", put("overlap.okv", program_with(tensors_overlap))])
        yield ("program: valid CRC, a tensor name twice", ["inspect", put("twice.okv", program_with(name_twice))])
    except (StopIteration, KeyError, ValueError, IndexError):
        pass
    yield ("config.json: unknown architecture",
           ["inspect", "--config", put("arch/config.json", json.dumps(dict(cfg, architectures=["FooForCausalLM"])))])
    yield ("config.json: absurd value (num_hidden_layers 1e9)",
           ["inspect", "--config", put("layers/config.json", json.dumps(dict(cfg, num_hidden_layers=10 ** 9)))])
    yield ("config.json: rope_theta -1",
           ["inspect", "--config", put("theta/config.json", json.dumps(dict(cfg, rope_theta=-1)))])
    yield ("config.json is a directory", ["inspect", "--config", path("dir-as-config/config.json")])
    yield ("safetensors: header length past the file", ["export", ck, "-o", path("out.okv")])
    yield ("tokenizer.json: invalid JSON", ["tokenize", "--tokenizer", put("tok1.json", "{\"model\": [}"), "--text", "hi"])
    yield ("tokenizer.json: unsupported model (WordPiece)",
           ["tokenize", "--tokenizer", put("tok2.json", json.dumps({"model": {"type": "WordPiece", "vocab": {}}})),
            "--text", "hi"])
    msgs = put("msgs.jsonl", json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n")
    tc = ["--tokenizer-config", put("tc.json", json.dumps({"bos_token": "<s>", "eos_token": "</s>"}))]
    yield ("chat template: 20,000-term `1+1+...` chain", ["chat-render", "--template", put("deep.jinja", deep),
                                                          "--jsonl", msgs] + tc)
    yield ("chat template: endless loop", ["chat-render", "--template",
                                           put("loop.jinja", "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}"),
                                           "--jsonl", msgs] + tc)
    yield ("chat template: unknown construct", ["chat-render", "--template", put("bad.jinja", "{% frobnicate %}"),
                                                "--jsonl", msgs] + tc)
    yield ("GGUF: truncated", ["inspect", put("cut.gguf", seed("gguf", "tensor-types.gguf")[:200])])
    yield ("GGUF: a key twice", ["inspect", put("dup.gguf", gguf([("a.k", 0, b"\1"), ("b.k", 0, b"\2"), ("a.k", 0, b"\3")]))])
    yield ("GGUF: rope.freq_base NaN", ["export", put("nan.gguf", llama_meta(float("nan"))), "-o", path("nan.okv")])
    p = put("good.okv", prog)
    yield ("--tokens: not ids", ["generate", p, "--tokens", "{\"tokens\":[1,", "--max-new-tokens", "1"])
    yield ("--temperature nan", ["run", p, "--prompt", "hi", "--temperature", "nan"])
    yield ("-o is a device node", ["export", os.path.join(ROOT, "..", "shared", "fixtures", "models", "llama32-tiny"),
                                   "-o", "/dev/null"])


def main():
    print("| bad input | command | what offkv says (first line of stderr) | exit |")
    print("|---|---|---|---|")
    for what, args in cases():
        r = subprocess.run([OFFKV] + args, capture_output=True, text=True, errors="replace", timeout=120)
        lines = [l for l in r.stderr.splitlines() if l.strip()]
        out = [l for l in r.stdout.splitlines() if '"error"' in l]
        msg = lines[0] if lines else "stdout: " + out[0] if out else "(nothing)"   # chat-render: per-line JSON errors
        msg = msg.replace(T + "/", "").replace("|", "\\|")
        if len(msg) > 160:
            msg = msg[:157] + "..."
        more = f" (+{len(lines) - 1} lines)" if len(lines) > 1 else ""
        print(f"| {what} | `{args[0]}` | {msg}{more} | {r.returncode} |")


main()
