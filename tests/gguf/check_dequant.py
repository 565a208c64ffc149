#!/usr/bin/env python3
"""Bit-exactness of our dequantization against llama.cpp's gguf-py (numpy).

  check_dequant.py DUMP_TOOL random OUTDIR   random blocks of every type we
        support, written into a GGUF by gguf-py's own writer (so this also
        checks that our reader places tensors where gguf-py put them)
  check_dequant.py DUMP_TOOL file FILE.gguf  every tensor of a real file: the
        tool also streams each tensor's raw blocks (--raw), which gguf-py
        dequantizes (its GGUFReader would spend most of the time parsing
        the 262144-entry Gemma vocabulary; where the reader places tensors
        is what the random mode checks against gguf-py's writer)

DUMP_TOOL (gguf_dump_f32) writes each tensor dequantized to f32 in file
order; each must equal gguf.quants.dequantize bit for bit. Exit 0 on
success, 1 on a mismatch, 77 (ctest SKIP) when gguf/numpy are missing.
"""
import os, subprocess, sys

try:
    import numpy as np
    import gguf
    from gguf import quants
    from gguf.constants import GGMLQuantizationType as T
except ImportError as e:
    print(f"SKIP: python gguf/numpy not installed ({e}); scripts/setup.sh installs them", file=sys.stderr)
    sys.exit(77)

SUPPORTED = ["F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0",
             "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K"]
# byte offsets of each block's fp16 scale fields (and Q8_K's f32 one): kept
# finite so reference and us never multiply by NaN/Inf (payloads may differ)
F16_FIELDS = {"Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q8_0": [0],
              "Q2_K": [80, 82], "Q3_K": [108], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208]}


def reference(data, qtype):
    if qtype == T.F32:
        return np.asarray(data).view(np.float32).reshape(-1)
    if qtype == T.F16:
        return np.asarray(data).view(np.float16).astype(np.float32).reshape(-1)
    if qtype == T.Q8_K:  # gguf-py has no Q8_K dequantizer: {f32 d; i8 qs[256]; i16 bsums[16]}
        b = np.asarray(data).view(np.uint8).reshape(-1, 292)
        d = b[:, :4].copy().view(np.float32)
        q = b[:, 4:260].copy().view(np.int8).astype(np.float32)
        return (d * q).reshape(-1)
    return quants.dequantize(np.asarray(data), qtype).astype(np.float32, copy=False).reshape(-1)


def run_dump(tool, path):
    return subprocess.run([tool, path], check=True, stdout=subprocess.PIPE).stdout


def compare(tool, path, tensors):
    """tensors: [(name, qtype, raw data)] in file order."""
    out = run_dump(tool, path)
    pos, bad = 0, 0
    for name, qtype, data in tensors:
        want = reference(data, qtype)
        n = want.size * 4
        got = np.frombuffer(out[pos:pos + n], dtype=np.uint32)
        pos += n
        w = want.view(np.uint32)
        if got.size != w.size or not np.array_equal(got, w):
            diff = np.nonzero(got != w[:got.size])[0] if got.size == w.size else []
            first = int(diff[0]) if len(diff) else -1
            print(f"MISMATCH {name} ({qtype.name}): {len(diff)} of {w.size} elements differ, first at {first}",
                  file=sys.stderr)
            bad += 1
    if pos != len(out):
        print(f"MISMATCH: dump has {len(out)} bytes, expected {pos}", file=sys.stderr)
        bad += 1
    return bad


def random_file(outdir):
    rng = np.random.default_rng(1234)
    path = os.path.join(outdir, "random_blocks.gguf")
    w = gguf.GGUFWriter(path, "llama")
    tensors = []
    for ti, tname in enumerate(SUPPORTED):
        qt = T[tname]
        bs, ts = gguf.GGML_QUANT_SIZES[qt]
        rows, cols = 3, 512 if bs > 1 else 96
        if tname == "F32":
            raw = rng.standard_normal((rows, cols), dtype=np.float32) * 10
            w.add_tensor(f"t{ti}.{tname}", raw)
        elif tname == "F16":
            raw = (rng.standard_normal((rows, cols)) * 10).astype(np.float16)
            w.add_tensor(f"t{ti}.{tname}", raw)
        elif tname == "BF16":
            f = (rng.standard_normal((rows, cols)) * 10).astype(np.float32)
            raw = (f.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8).reshape(rows, cols * 2)
            w.add_tensor(f"t{ti}.{tname}", raw, raw_shape=(rows, cols * 2), raw_dtype=qt)
        else:
            nblk = rows * cols // bs
            raw = rng.integers(0, 256, size=(nblk, ts), dtype=np.uint8)
            for off in F16_FIELDS.get(tname, []):
                raw[:, off:off + 2] = (rng.standard_normal(nblk) * 0.05).astype(np.float16).view(np.uint8).reshape(nblk, 2)
            if tname == "Q8_K":
                raw[:, 0:4] = (rng.standard_normal(nblk) * 0.05).astype(np.float32).view(np.uint8).reshape(nblk, 4)
            raw = raw.reshape(rows, cols // bs * ts)
            w.add_tensor(f"t{ti}.{tname}", raw, raw_shape=raw.shape, raw_dtype=qt)
        tensors.append((f"t{ti}.{tname}", qt, raw))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path, tensors


def main():
    if len(sys.argv) != 4 or sys.argv[2] not in ("random", "file"):
        print(__doc__, file=sys.stderr)
        return 2
    tool, mode, arg = sys.argv[1:]
    if mode == "random":
        os.makedirs(arg, exist_ok=True)
        path, tensors = random_file(arg)
        bad = compare(tool, path, tensors)
        os.unlink(path)
        print(f"random blocks: {len(tensors)} types, {bad} mismatching")
        return 1 if bad else 0
    if not os.path.exists(arg):
        print(f"SKIP: {arg} is not there (scripts/fetch-models.sh fetches it)", file=sys.stderr)
        return 77
    if os.environ.get("OKV_REAL_MODEL_TESTS") == "reduced":
        print(f"SKIP: whole-file comparison of {os.path.basename(arg)} (OKV_REAL_MODEL_TESTS=reduced)", file=sys.stderr)
        return 77
    out = subprocess.run([tool, arg, "--raw"], check=True, stdout=subprocess.PIPE).stdout
    pos, n_t, bad = 0, 0, 0
    while pos < len(out):
        nl = int.from_bytes(out[pos:pos + 4], "little"); pos += 4
        name = out[pos:pos + nl].decode(); pos += nl
        qtype = T(int.from_bytes(out[pos:pos + 4], "little")); pos += 4
        ne = int.from_bytes(out[pos:pos + 8], "little"); pos += 8
        nb = int.from_bytes(out[pos:pos + 8], "little"); pos += 8
        raw = np.frombuffer(out, dtype=np.uint8, count=nb, offset=pos); pos += nb
        got = np.frombuffer(out, dtype=np.uint32, count=ne, offset=pos); pos += 4 * ne
        bs, ts = gguf.GGML_QUANT_SIZES[qtype]
        if qtype.name not in SUPPORTED or nb != ne // bs * ts:
            print(f"MISMATCH {name}: type {qtype.name}, {ne} elements, {nb} bytes", file=sys.stderr)
            bad += 1
            continue
        data = raw.view(np.float32) if qtype == T.F32 else raw.view(np.float16) if qtype == T.F16 else raw.reshape(-1, ts)
        want = reference(data, qtype).view(np.uint32)
        if want.size != ne or not np.array_equal(got, want):
            print(f"MISMATCH {name} ({qtype.name})", file=sys.stderr)
            bad += 1
        n_t += 1
    print(f"{os.path.basename(arg)}: {n_t} tensors compared, {bad} mismatching")
    return 1 if bad or n_t == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
