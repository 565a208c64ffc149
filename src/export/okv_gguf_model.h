/* okv_gguf_model.h — a GGUF checkpoint seen as the HF checkpoint it was
 * converted from, so export shares everything after the model description
 * with the HF path (okv_hf_parse_config, graph, layout, streaming writer).
 *
 *   metadata  -> a config.json text (okv_gguf_hf_config), parsed by the HF
 *                config parser: same defaults, same refusals;
 *   tensors   -> HF names (okv_gguf_hf_name: token_embd -> embed_tokens,
 *                blk.N.attn_q -> layers.N.self_attn.q_proj, ...) with HF
 *                shapes ([out, in]; GGUF lists ne[0] = in first);
 *   values    -> f32 with llama.cpp's converter conventions undone
 *                (okv_gguf_read_hf): Llama-family q/k rows un-permuted, Gemma
 *                RMSNorm weights with the stored +1 taken off.
 * Supported general.architecture values: llama, qwen2, qwen3, gemma3. */
#ifndef OKV_GGUF_MODEL_H
#define OKV_GGUF_MODEL_H

#include <stdbool.h>
#include <stddef.h>

#include "offkv_base.h"
#include "okv_gguf.h"

/* How a GGUF tensor maps onto its HF counterpart. */
typedef struct okv_gguf_hf_tensor {
    char name[160];          /* HF name, e.g. "model.layers.3.self_attn.q_proj.weight" */
    int ndim;
    int64_t shape[OKV_GGUF_MAX_DIMS]; /* HF order (reversed ggml ne) */
    int unpermute_heads;     /* > 0: undo llama.cpp's q/k row permutation over this many heads */
    float add;               /* added after dequantization (-1: Gemma norm +1 undone) */
} okv_gguf_hf_tensor;

/* The HF class name for general.architecture, or an UNSUPPORTED error
 * naming it. */
okv_status okv_gguf_hf_architecture(const okv_gguf *g, const char **hf_class, okv_error *err);
/* config.json text (heap, free() it) describing the model as HF would. */
okv_status okv_gguf_hf_config(const okv_gguf *g, char **json, okv_error *err);
/* The HF view of GGUF tensor t; false if the tensor has no HF counterpart
 * in the text decoder (e.g. rope_freqs). */
bool okv_gguf_hf_tensor_of(const okv_gguf *g, const okv_gguf_tensor *t, okv_gguf_hf_tensor *out);
/* The GGUF name of an HF tensor name (for messages); the HF name itself
 * when there is none. */
void okv_gguf_gguf_name(const okv_gguf *g, const char *hf, char *out, size_t n);
/* Dequantizes rows [row0, row0 + n_rows) of the HF view (a 1-D tensor is
 * one row) into dst, conventions undone. Un-permuted tensors need whole
 * heads: row0 and n_rows multiples of the head dim. */
okv_status okv_gguf_read_hf(const okv_gguf_tensor *t, const okv_gguf_hf_tensor *h, int64_t row0, int64_t n_rows,
                            float *dst, okv_error *err);

#endif
