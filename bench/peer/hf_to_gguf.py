#!/usr/bin/env python3
"""hf_to_gguf.py — measurement helper for the side-by-side benchmark against
llama.cpp (bench/peer/llamacpp.sh): writes a Llama-architecture HF checkpoint
(config.json + model.safetensors, bf16/f16/f32, as okv-mkckpt makes them)
as a GGUF file holding exactly the same weights, so both runtimes compute the
same model. Linear weights keep their dtype (bf16 stays bf16); norm weights
become f32 as llama.cpp's own converter stores them; q/k rows get
llama.cpp's rotary permutation (the inverse of bench/quality/gguf_to_hf.py's
unpermute), so the GGUF model is the HF model, not merely the same shape.

The vocabulary is llama.cpp's "none" type with vocab_size dummy tokens: the
benchmark feeds random token ids, and no tokenizer is needed to time a step.

    hf_to_gguf.py CKPT_DIR OUT.gguf
Needs numpy and the `gguf` package from PyPI.
"""
import json
import os
import struct
import sys

import numpy as np
import gguf

# HF tensor name suffix -> GGUF tensor kind (per layer)
LAYER_NAMES = {
    "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
    "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}
RAW_TYPES = {"BF16": (np.uint16, gguf.GGMLQuantizationType.BF16),
             "F16": (np.float16, gguf.GGMLQuantizationType.F16),
             "F32": (np.float32, gguf.GGMLQuantizationType.F32)}


def read_safetensors(path):
    """{name: (dtype string, shape, raw numpy array)} without copying the data."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
    out = {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        np_type, _ = RAW_TYPES[h["dtype"]]
        a, b = h["data_offsets"]
        out[name] = (h["dtype"], h["shape"], data[a:b].view(np_type).reshape(h["shape"]))
    return out


def to_f32(dtype, a):
    if dtype == "BF16":
        return (a.astype(np.uint32) << 16).view(np.float32)
    return a.astype(np.float32)


def permute_rows(w, n_head):
    """llama.cpp's rotary row order: per head, rows (i, half) -> (half, i)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def main():
    ckpt, out = sys.argv[1], sys.argv[2]
    with open(os.path.join(ckpt, "config.json")) as f:
        cfg = json.load(f)
    if cfg.get("model_type") != "llama":
        sys.exit(f"hf_to_gguf.py: {ckpt}: model_type {cfg.get('model_type')!r}, only llama is written")
    tensors = read_safetensors(os.path.join(ckpt, "model.safetensors"))
    n_head, n_kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    head_dim = cfg.get("head_dim", cfg["hidden_size"] // n_head)

    w = gguf.GGUFWriter(out, "llama")
    w.add_context_length(cfg.get("max_position_embeddings", 4096))
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_rope_dimension_count(head_dim)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_freq_base(float(cfg.get("rope_theta", 10000.0)))
    w.add_layer_norm_rms_eps(float(cfg.get("rms_norm_eps", 1e-5)))
    w.add_vocab_size(cfg["vocab_size"])
    w.add_tokenizer_model("none")
    w.add_file_type(gguf.LlamaFileType.MOSTLY_BF16)

    for name, (dtype, shape, a) in tensors.items():
        if name == "model.embed_tokens.weight":
            gname = "token_embd.weight"
        elif name == "model.norm.weight":
            gname = "output_norm.weight"
        elif name == "lm_head.weight":
            gname = "output.weight"
        else:
            parts = name.split(".")  # model.layers.N.<kind...>.weight
            gname = f"blk.{parts[2]}.{LAYER_NAMES['.'.join(parts[3:-1])]}.weight"
        if len(shape) == 1:  # norms: f32
            w.add_tensor(gname, np.ascontiguousarray(to_f32(dtype, a)))
            continue
        if gname.endswith("attn_q.weight"):
            a = permute_rows(a, n_head)
        elif gname.endswith("attn_k.weight"):
            a = permute_rows(a, n_kv)
        _, raw = RAW_TYPES[dtype]
        w.add_tensor(gname, np.ascontiguousarray(a), raw_shape=shape, raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
