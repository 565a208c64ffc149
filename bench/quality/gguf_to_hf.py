#!/usr/bin/env python3
"""gguf_to_hf.py — measurement helper: turns one of the real-model GGUF files
(SmolLM2-135M = llama, Gemma-3 270M = gemma3) into a float32 HF checkpoint
directory (config.json + model.safetensors), so the quality figures of
--qlinear/--qembedding can be measured through the ordinary HF export path
while offkv's own GGUF export is being built. Every tensor is dequantized
with gguf-py; llama.cpp's conventions are undone (Llama q/k row
permutation, Gemma norm weights stored as 1 + w), as the fixtures' README
describes for the reference logits.

    gguf_to_hf.py MODEL.gguf OUT_DIR [--tokenizer tokenizer.json]
(without --tokenizer a gpt2-type GGUF vocab becomes tokenizer.json).
"""
import json
import os
import shutil
import struct
import sys

import numpy as np
import gguf


def field(reader, key, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    v = f.parts[f.data[0]]
    if f.types and f.types[0] == gguf.GGUFValueType.STRING:
        return bytes(v).decode()
    return v.tolist()[0] if hasattr(v, "tolist") else v


def unpermute(w, n_head):
    # inverse of llama.cpp's permute(): rows grouped (head, half, i) -> (head, i, half)
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


LLAMA_NAMES = {
    "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
}
GEMMA_NAMES = dict(LLAMA_NAMES, **{
    "post_attention_norm": "post_attention_layernorm", "ffn_norm": "pre_feedforward_layernorm",
    "post_ffw_norm": "post_feedforward_layernorm", "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
})


def gpt2_tokenizer_json(r):
    """SmolLM2's tokenizer.json from the GGUF vocab (gpt2 byte-level BPE;
    digits split one by one as HF's SmolLM2 tokenizer does)."""
    f = r.fields["tokenizer.ggml.tokens"]
    tokens = [bytes(f.parts[i]).decode() for i in f.data]
    f = r.fields["tokenizer.ggml.merges"]
    merges = [bytes(f.parts[i]).decode() for i in f.data]
    f = r.fields["tokenizer.ggml.token_type"]
    types = [int(f.parts[i][0]) for i in f.data]
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
              "special": True} for i, t in enumerate(tokens) if types[i] == 3]
    bl = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": True}, bl]},
            "post_processor": None, "decoder": bl,
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                      "vocab": {t: i for i, t in enumerate(tokens)}, "merges": merges}}


def write_safetensors(path, tensors):
    header, off, blobs = {}, 0, []
    for name, a in tensors:
        b = np.ascontiguousarray(a, dtype=np.float32).tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def main():
    src, out = sys.argv[1], sys.argv[2]
    tok = sys.argv[sys.argv.index("--tokenizer") + 1] if "--tokenizer" in sys.argv else None
    r = gguf.GGUFReader(src)
    arch = field(r, "general.architecture")
    a = lambda k, d=None: field(r, f"{arch}.{k}", d)
    n_head, n_kv = a("attention.head_count"), a("attention.head_count_kv")
    tensors = {}
    for t in r.tensors:
        w = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        w = w.reshape([int(x) for x in reversed(t.shape)]) if w.size == int(np.prod(t.shape)) else w
        tensors[t.name] = w
    names = GEMMA_NAMES if arch == "gemma3" else LLAMA_NAMES
    hf = []
    for name, w in tensors.items():
        if name == "token_embd.weight":
            hf.append(("model.embed_tokens.weight", w)); continue
        if name == "output_norm.weight":
            hf.append(("model.norm.weight", w - 1 if arch == "gemma3" else w)); continue
        if name == "output.weight":
            hf.append(("lm_head.weight", w)); continue
        _, layer, kind, _ = name.split(".")
        if kind == "attn_q" and arch == "llama":
            w = unpermute(w, n_head)
        if kind == "attn_k" and arch == "llama":
            w = unpermute(w, n_kv)
        if arch == "gemma3" and kind.endswith("norm"):
            w = w - 1
        hf.append((f"model.layers.{layer}.{names[kind]}.weight", w))
    vocab, hidden = tensors["token_embd.weight"].shape
    cfg = {
        "vocab_size": int(vocab), "hidden_size": int(hidden), "intermediate_size": int(a("feed_forward_length")),
        "num_hidden_layers": int(a("block_count")), "num_attention_heads": int(n_head), "num_key_value_heads": int(n_kv),
        "rms_norm_eps": float(a("attention.layer_norm_rms_epsilon")), "rope_theta": float(a("rope.freq_base", 10000.0)),
        "max_position_embeddings": int(a("context_length")), "tie_word_embeddings": "output.weight" not in tensors,
        "bos_token_id": field(r, "tokenizer.ggml.bos_token_id"), "eos_token_id": field(r, "tokenizer.ggml.eos_token_id"),
        "torch_dtype": "float32",
    }
    if arch == "llama":
        cfg.update(architectures=["LlamaForCausalLM"], model_type="llama", hidden_act="silu",
                   head_dim=int(hidden) // int(n_head))
    else:
        cfg.update(architectures=["Gemma3ForCausalLM"], model_type="gemma3_text", hidden_act="gelu_pytorch_tanh",
                   head_dim=int(a("attention.key_length")), sliding_window=int(a("attention.sliding_window")),
                   query_pre_attn_scalar=int(a("attention.key_length")), rope_local_base_freq=10000.0,
                   sliding_window_pattern=6, final_logit_softcapping=None, attn_logit_softcapping=None)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    write_safetensors(os.path.join(out, "model.safetensors"), hf)
    if tok:
        shutil.copy(tok, os.path.join(out, "tokenizer.json"))
    elif field(r, "tokenizer.ggml.model") == "gpt2":
        with open(os.path.join(out, "tokenizer.json"), "w") as f:
            json.dump(gpt2_tokenizer_json(r), f, ensure_ascii=False)
    print(f"{src}: {arch}, {len(hf)} tensors -> {out}")


if __name__ == "__main__":
    main()
