#!/usr/bin/env python3
"""make_seeds.py BUILD_DIR — regenerates fuzz/corpus/<target>/ from the
fixtures in ../shared/fixtures, keeping every seed a few KB:

  config       fixture configs, and the same shrunken to tiny dims
  program      tiny programs exported (offkv export) from the shrunken
               configs with okv-fuzz-ckpt weights, f32/f16/bf16, one with a
               bundled tokenizer and chat template
  safetensors  a shrunken checkpoint's model.safetensors, plus hand-made
               files: other dtypes, scalars, empty tensors, metadata
  tokenizer    each fixture tokenizer.json cut to its first bytes/merges
               (ids renumbered), then NUL and a sample text
  chat         the fixture chat templates, and tokenizer_config.json files
               reduced to the chat fields
  gguf         hand-written GGUF v3 files: every metadata value type, one
               tensor of each dequantizable ggml type, and the cut llama3 and
               gemma3 vocabularies as tokenizer.ggml.* arrays (gpt2 / llama)

Run from the repo root after building what it calls:
  cmake --build build --target offkv okv-fuzz-ckpt && fuzz/make_seeds.py build
The output is deterministic (fixed weights seed, relative checkpoint paths)."""
import json, os, shutil, struct, subprocess, sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(ROOT, "..", "shared", "fixtures")
CORPUS = os.path.join(ROOT, "fuzz", "corpus")
BUILD = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build")


def out_dir(target):
    d = os.path.join(CORPUS, target)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d


def write(path, data):
    with open(path, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


# ---- configs ---------------------------------------------------------------

TINY = {"hidden_size": 8, "intermediate_size": 16, "num_attention_heads": 2, "num_key_value_heads": 1,
        "head_dim": 4, "vocab_size": 32, "global_head_dim": 8, "hidden_size_per_layer_input": 4,
        "vocab_size_per_layer_input": 32, "sliding_window": 4, "max_window_layers": 1,
        "max_position_embeddings": 64, "query_pre_attn_scalar": 4}


def shrink(cfg, **dims):
    c = json.loads(json.dumps(cfg))
    t = c.get("text_config", c)
    for k, v in dict(TINY, **dims).items():
        if k in t:
            t[k] = v
    layers = t.get("num_hidden_layers", 2)
    keep = 4 if "num_kv_shared_layers" in t else min(layers, 3)
    t["num_hidden_layers"] = keep
    if "layer_types" in t:
        t["layer_types"] = ["sliding_attention", "full_attention"] * (keep // 2)
    if "num_kv_shared_layers" in t:
        t["num_kv_shared_layers"] = 2
    if "sliding_window_pattern" in t:
        t["sliding_window_pattern"] = 2
    for k in ("bos_token_id", "eos_token_id", "pad_token_id", "image_token_index", "boi_token_index",
              "eoi_token_index"):
        for dct in (c, t):
            if isinstance(dct.get(k), int):
                dct[k] = min(dct[k], 3)
            if isinstance(dct.get(k), list):
                dct[k] = [min(x, 3) for x in dct[k]]
    if "rope_scaling" in t and isinstance(t["rope_scaling"], dict) and "original_max_position_embeddings" in t["rope_scaling"]:
        t["rope_scaling"]["original_max_position_embeddings"] = 16
    return c


def model_dirs():
    d = os.path.join(FIX, "models")
    return sorted(m for m in os.listdir(d) if os.path.exists(os.path.join(d, m, "config.json")))


def make_config():
    d = out_dir("config")
    for name in sorted(os.listdir(os.path.join(FIX, "configs"))):
        shutil.copyfile(os.path.join(FIX, "configs", name, "config.json"), os.path.join(d, name + ".json"))
    for m in model_dirs():
        cfg = json.load(open(os.path.join(FIX, "models", m, "config.json")))
        write(os.path.join(d, m + "-shrunk.json"), json.dumps(shrink(cfg), indent=1))


# ---- programs and safetensors -------------------------------------------------

def run(*args, cwd=None):
    r = subprocess.run(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=cwd)
    if r.returncode:
        sys.exit(f"{args[0]} failed: {r.stderr.strip()}")


def make_program_and_safetensors(tok_seed, tcfg_seed):
    dp, ds = out_dir("program"), out_dir("safetensors")
    build = os.path.abspath(BUILD)
    tmp = os.path.join(build, "fuzz-seeds")   # relative name below: it is stored as the program's source
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    dtypes = ["f32", "bf16", "f16"]
    try:
        for i, m in enumerate(model_dirs()):
            if m.endswith("-sharded"):
                continue
            ck = os.path.join(tmp, m)
            os.makedirs(ck)
            cfg = json.load(open(os.path.join(FIX, "models", m, "config.json")))
            write(os.path.join(ck, "config.json"), json.dumps(shrink(cfg)))
            run(os.path.join(build, "fuzz", "okv-fuzz-ckpt"), ck)
            if m == "llama32-tiny":
                write(os.path.join(ck, "tokenizer.json"), tok_seed)
                write(os.path.join(ck, "tokenizer_config.json"), tcfg_seed)
                shutil.copyfile(os.path.join(ck, "model.safetensors"), os.path.join(ds, m + ".safetensors"))
            out = os.path.join(dp, m + ".program")  # not .okv: .gitignore drops those
            run(os.path.join(build, "src", "cli", "offkv"), "export", os.path.join("fuzz-seeds", m), "-o", out,
                "--dtype", dtypes[i % 3], "--max-ctx-len", "16", "--prefill-chunk-size", "4", cwd=build)
            if m in ("llama32-tiny", "gemma3-tiny"):   # quantized linears + embedding: dims a multiple of 32
                q = "4w" if m == "llama32-tiny" else "8w"
                qk = ck + "-q"
                os.makedirs(qk)
                write(os.path.join(qk, "config.json"),
                      json.dumps(shrink(cfg, hidden_size=32, intermediate_size=64, head_dim=16)))
                run(os.path.join(build, "fuzz", "okv-fuzz-ckpt"), qk)
                run(os.path.join(build, "src", "cli", "offkv"), "export", os.path.join("fuzz-seeds", m + "-q"), "-o",
                    os.path.join(dp, f"{m}-q{q}.program"), "--dtype", "f32", "--max-ctx-len", "16",
                    "--prefill-chunk-size", "4", "--qlinear", q, "--qlinear-group-size", "32",
                    "--qembedding", q, "--qembedding-group-size", "32", cwd=build)
                if m == "llama32-tiny":   # GGUF block types (format version 3): q4_0 linears, q8_0 embedding
                    run(os.path.join(build, "src", "cli", "offkv"), "export", os.path.join("fuzz-seeds", m + "-q"),
                        "-o", os.path.join(dp, f"{m}-qblocks.program"), "--dtype", "f32", "--max-ctx-len", "16",
                        "--prefill-chunk-size", "4", "--qlinear", "q4_0", "--qembedding", "q8_0", cwd=build)
    finally:
        shutil.rmtree(tmp)
    for name, tensors, meta in hand_made_safetensors():
        write(os.path.join(ds, name + ".safetensors"), st_bytes(tensors, meta))


def st_bytes(tensors, meta, pad_to=8):
    header, data = {}, b""
    if meta is not None:
        header["__metadata__"] = meta
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % pad_to)
    return struct.pack("<Q", len(h)) + h + data


def hand_made_safetensors():
    f32 = struct.pack("<4f", 1.0, -2.5, 3.25, 0.0)
    return [
        ("dtypes", [("a.bf16", "BF16", [2, 2], b"\x80\x3f\x00\x40\x40\x40\x80\x40"),
                    ("b.f16", "F16", [4], b"\x00\x3c\x00\x40\x00\x42\x00\x44"),
                    ("c.f32", "F32", [2, 2], f32),
                    ("d.i64", "I64", [1], struct.pack("<q", 7)),
                    ("e.u8", "U8", [3], b"\x01\x02\x03"),
                    ("f.f8", "F8_E4M3", [2], b"\x38\x40"),
                    ("g.bool", "BOOL", [1], b"\x01"),
                    ("h.f64", "F64", [1], struct.pack("<d", 0.5))], {"format": "pt"}),
        ("scalar-empty", [("s", "F32", [], struct.pack("<f", 2.0)), ("z", "BF16", [0, 3], b""),
                          ("w", "F32", [1, 1, 1, 1, 1], struct.pack("<f", 1.0))], None),
        ("odd-pad", [("x", "F16", [3], b"\x00\x3c\x00\x40\x00\x42")], {"format": "pt", "k": "v"}),
    ]


# ---- tokenizers -----------------------------------------------------------------

def remap_special(node, remap, vocab):
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "special_tokens" and isinstance(v, dict):
                for st in v.values():
                    st["ids"] = [remap[vocab[t]] for t in st.get("tokens", []) if t in vocab and vocab[t] in remap]
            else:
                remap_special(v, remap, vocab)
    elif isinstance(node, list):
        for x in node:
            remap_special(x, remap, vocab)


def shrink_tokenizer(j, n_merges=120, n_added=12):
    model = j["model"]
    vocab = model["vocab"]
    keep = {t for t, i in vocab.items() if i < 256 or (len(t) == 1 and (t.isascii() or t in "\u2581\u0120\u010a"))}
    for t in (model.get("unk_token"),):
        if t in vocab:
            keep.add(t)
    merges = []
    for mg in model["merges"]:
        a, b = mg.split(" ", 1) if isinstance(mg, str) else mg
        if a in keep and b in keep and a + b in vocab:
            merges.append(mg)
            keep.add(a + b)
            if len(merges) >= n_merges:
                break
    wanted = set()
    remap_text = json.dumps(j.get("post_processor"))
    added = [a for a in j["added_tokens"] if a["content"] in remap_text or a.get("special")][:n_added]
    # all ids that survive, renumbered densely in their old order
    all_tok = {t: vocab[t] for t in keep}
    for a in added:
        all_tok.setdefault(a["content"], a["id"])
    order = sorted(set(all_tok.values()))
    remap = {old: i for i, old in enumerate(order)}
    model["vocab"] = {t: remap[i] for t, i in sorted(all_tok.items(), key=lambda x: x[1]) if t in keep}
    model["merges"] = merges
    full_vocab = dict(vocab)
    for a in added:
        full_vocab.setdefault(a["content"], a["id"])
        a["id"] = remap[all_tok[a["content"]]]
    j["added_tokens"] = added
    remap_special(j.get("post_processor"), remap, full_vocab)
    return j


def make_tokenizer():
    d = out_dir("tokenizer")
    first = None
    for name in sorted(os.listdir(os.path.join(FIX, "tokenizers"))):
        p = os.path.join(FIX, "tokenizers", name, "tokenizer.json")
        if not os.path.exists(p):
            continue
        j = shrink_tokenizer(json.load(open(p, encoding="utf-8")))
        text = json.dumps(j, ensure_ascii=False)
        sample = "Hello  world! caf\u00e9 123\n"
        for line in open(os.path.join(FIX, "tokenizers", name, "cases.jsonl"), encoding="utf-8"):
            c = json.loads(line)
            if 12 < len(c["text"]) < 80:
                sample = c["text"]
                break
        write(os.path.join(d, name + ".json"), text.encode() + b"\0" + sample.encode())
        if first is None:
            first = text
    return first


# ---- chat templates ---------------------------------------------------------------

def make_chat():
    d = out_dir("chat")
    for name in sorted(os.listdir(os.path.join(FIX, "chat_templates"))):
        p = os.path.join(FIX, "chat_templates", name, "template.jinja")
        if os.path.exists(p):
            shutil.copyfile(p, os.path.join(d, name + ".jinja"))
    tcfg = None
    for name in sorted(os.listdir(os.path.join(FIX, "tokenizers"))):
        p = os.path.join(FIX, "tokenizers", name, "tokenizer_config.json")
        if not os.path.exists(p):
            continue
        c = json.load(open(p, encoding="utf-8"))
        small = {k: c[k] for k in ("bos_token", "eos_token", "unk_token", "pad_token", "chat_template",
                                   "add_bos_token", "model_max_length") if k in c}
        text = json.dumps(small, ensure_ascii=False)
        write(os.path.join(d, name + "-tokenizer_config.json"), text)
        if isinstance(small.get("chat_template"), str):
            write(os.path.join(d, name + ".jinja"), small["chat_template"])
        if tcfg is None:
            tcfg = text
    return tcfg


# ---- GGUF --------------------------------------------------------------------------

GGML = {"F32": (0, 1, 4), "F16": (1, 1, 2), "Q4_0": (2, 32, 18), "Q4_1": (3, 32, 20), "Q5_0": (6, 32, 22),
        "Q5_1": (7, 32, 24), "Q8_0": (8, 32, 34), "Q2_K": (10, 256, 84), "Q3_K": (11, 256, 110),
        "Q4_K": (12, 256, 144), "Q5_K": (13, 256, 176), "Q6_K": (14, 256, 210), "Q8_K": (15, 256, 292),
        "BF16": (30, 1, 2)}
U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
SCALAR = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f", BOOL: "<?", U64: "<Q",
          I64: "<q", F64: "<d"}


def g_str(x):
    b = x.encode() if isinstance(x, str) else x
    return struct.pack("<Q", len(b)) + b


def g_val(t, v):
    if t == STR:
        return g_str(v)
    if t == ARR:
        et, xs = v
        return struct.pack("<IQ", et, len(xs)) + b"".join(g_val(et, x) for x in xs)
    return struct.pack(SCALAR[t], v)


def gguf_bytes(kvs, tensors, align=32):
    """kvs: [(key, type, value)]; tensors: [(name, ne list, ggml type name, raw bytes)]."""
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs))
    for k, t, v in kvs:
        out += g_str(k) + struct.pack("<I", t) + g_val(t, v)
    off, data = 0, b""
    for name, ne, tname, raw in tensors:
        out += g_str(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", n) for n in ne)
        out += struct.pack("<IQ", GGML[tname][0], off)
        pad = b"\0" * (-len(raw) % align)
        data += raw + pad
        off += len(raw) + len(pad)
    out += b"\0" * (-len(out) % align)
    return out + data


def lcg_bytes(n, seed):
    b = bytearray()
    while len(b) < n:
        seed = (seed * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        b.append(seed >> 56)
    return bytes(b)


def small_floats(n, dtype):
    vals = [((i * 37) % 17 - 8) / 16.0 for i in range(n)]
    if dtype == "F32":
        return struct.pack(f"<{n}f", *vals)
    if dtype == "F16":
        return struct.pack(f"<{n}e", *vals)
    return b"".join(struct.pack("<f", v)[2:] for v in vals)  # BF16: top half of f32


def make_gguf():
    d = out_dir("gguf")
    tensors = []
    for i, (name, (tid, block, tsize)) in enumerate(GGML.items()):
        n = block * (2 if block == 32 else 1) if block > 1 else 8
        ne = [n] if block > 1 else [4, 2]
        raw = small_floats(n, name) if block == 1 else lcg_bytes(n // block * tsize, i + 1)
        if block > 1:   # keep the f16 block scales finite: first two bytes of each block small
            raw = bytearray(raw)
            for b0 in range(0, len(raw), tsize):
                raw[b0 + 1] &= 0x3B
            raw = bytes(raw)
        tensors.append((f"t.{name.lower()}", ne, name, raw))
    meta = [("general.architecture", STR, "llama"), ("general.alignment", U32, 32),
            ("general.name", STR, "fuzz seed"), ("llama.block_count", U32, 2), ("llama.context_length", U64, 64),
            ("llama.embedding_length", U32, 8), ("llama.attention.head_count", U32, 2),
            ("llama.attention.layer_norm_rms_epsilon", F32, 1e-5), ("llama.rope.freq_base", F32, 10000.0)]
    write(os.path.join(d, "tensor-types.gguf"), gguf_bytes(meta, tensors))
    values = [("u8", U8, 7), ("i8", I8, -7), ("u16", U16, 700), ("i16", I16, -700), ("u32", U32, 70000),
              ("i32", I32, -70000), ("f32", F32, 0.5), ("bool", BOOL, True), ("str", STR, "h\u00e9llo"),
              ("u64", U64, 1 << 40), ("i64", I64, -(1 << 40)), ("f64", F64, -2.25),
              ("arr.i32", ARR, (I32, [1, -2, 3])), ("arr.f32", ARR, (F32, [0.5, 1.5])),
              ("arr.str", ARR, (STR, ["a", "", "bc"])), ("arr.bool", ARR, (BOOL, [True, False])),
              ("arr.empty", ARR, (U8, [])), ("general.alignment", U32, 64)]
    write(os.path.join(d, "value-types.gguf"),
          gguf_bytes(values, [("w", [4, 2], "F32", small_floats(8, "F32"))], align=64))
    for name, model in (("llama3", "gpt2"), ("gemma3", "llama")):
        j = shrink_tokenizer(json.load(open(os.path.join(FIX, "tokenizers", name, "tokenizer.json"), encoding="utf-8")),
                             n_merges=40)
        vocab = dict(j["model"]["vocab"])
        for a in j["added_tokens"]:
            vocab.setdefault(a["content"], a["id"])
        ids = sorted(vocab.values())
        by_id = {i: t for t, i in vocab.items()}
        toks = [by_id.get(i, f"[UNUSED{i}]") for i in range(ids[-1] + 1)]
        special = {a["id"] for a in j["added_tokens"]}
        types = [3 if i in special else 6 if t.startswith("<0x") else 1 for i, t in enumerate(toks)]
        kv = [("general.architecture", STR, "llama"), ("tokenizer.ggml.model", STR, model),
              ("tokenizer.ggml.tokens", ARR, (STR, toks)), ("tokenizer.ggml.token_type", ARR, (I32, types)),
              ("tokenizer.ggml.bos_token_id", U32, min(special) if special else 0),
              ("tokenizer.ggml.eos_token_id", U32, max(special) if special else 0),
              ("tokenizer.chat_template", STR, "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}")]
        if model == "gpt2":
            kv += [("tokenizer.ggml.pre", STR, "smollm"),
                   ("tokenizer.ggml.merges", ARR, (STR, [m if isinstance(m, str) else " ".join(m)
                                                          for m in j["model"]["merges"]]))]
        else:
            kv += [("tokenizer.ggml.scores", ARR, (F32, [-float(i) for i in range(len(toks))])),
                   ("tokenizer.ggml.add_space_prefix", BOOL, False)]
        write(os.path.join(d, f"tokenizer-{name}.gguf"), gguf_bytes(kv, []))


def main():
    make_config()
    make_gguf()
    tok = make_tokenizer()
    tcfg = make_chat()
    make_program_and_safetensors(tok, tcfg)
    total = 0
    for t in sorted(os.listdir(CORPUS)):
        files = os.listdir(os.path.join(CORPUS, t))
        size = sum(os.path.getsize(os.path.join(CORPUS, t, f)) for f in files)
        total += size
        print(f"{t}: {len(files)} seeds, {size} bytes")
    print(f"total {total} bytes")


main()
