/* okv_hf.h — reading HuggingFace checkpoints: config.json into one
 * architecture-neutral model description, and the mapping of each supported
 * architecture onto the step graph (okv_hf_graph.c).
 *
 * okv_hf_model is deliberately flat: every architecture we support is a
 * decoder-only transformer whose differences are a handful of switches
 * (norm offset, q/k norm, biases, sandwich norms, sliding layers, rope per
 * layer type, KV sharing, per-layer inputs). Anything a config asks for that
 * these switches cannot express is refused with the field and value named. */
#ifndef OKV_HF_H
#define OKV_HF_H

#include <stdbool.h>

#include "offkv_base.h"
#include "okv_format.h"
#include "okv_layout.h"

typedef enum okv_hf_family {
    OKV_FAM_LLAMA = 0,
    OKV_FAM_QWEN2,
    OKV_FAM_QWEN3,
    OKV_FAM_GEMMA3,
    OKV_FAM_GEMMA4
} okv_hf_family;

typedef enum okv_rope_kind {
    OKV_ROPE_DEFAULT = 0,
    OKV_ROPE_LINEAR,
    OKV_ROPE_LLAMA3,
    OKV_ROPE_PROPORTIONAL
} okv_rope_kind;

/* RoPE parameters of one layer type; inv_freq is derived from them. */
typedef struct okv_rope {
    okv_rope_kind kind;
    double theta;
    double factor;              /* linear, llama3, proportional */
    double low_freq_factor, high_freq_factor;
    double original_max_pos;    /* llama3 */
    double partial_rotary;      /* proportional: fraction of pairs that rotate */
    char field[48];             /* the config field it came from (for messages) */
} okv_rope;

#define OKV_HF_MAX_LAYERS 512
#define OKV_HF_MAX_EOS 16   /* = OKV_MAX_EOS, what a program may list */

typedef struct okv_hf_model {
    char architecture[64];      /* HF class, e.g. "LlamaForCausalLM" */
    okv_hf_family family;
    char prefix[64];            /* decoder tensor prefix, e.g. "model." */
    int hidden, intermediate, n_layers, n_heads, n_kv_heads, head_dim, vocab;
    int max_position_embeddings;
    double rms_eps;
    bool tied;
    bool attn_bias_qkv, attn_bias_o, mlp_bias;
    bool qk_norm;               /* per-head RMSNorm on q and k before RoPE */
    bool norm_plus_one;         /* Gemma-3: x * (1 + w) */
    bool sandwich_norms;        /* Gemma: post-attention / pre+post feed-forward norms */
    int act;                    /* okv_act */
    float embed_scale;          /* 1 or sqrt(hidden) */
    float attn_scale;           /* multiplies q.k */
    float final_softcap;        /* 0 = none */
    int window[OKV_HF_MAX_LAYERS];  /* per layer: 0 = full attention */
    okv_rope rope_full, rope_sliding;
    /* Gemma-4 */
    int kv_shared_layers;       /* the last N layers reuse a donor's k/v */
    int global_head_dim, global_kv_heads; /* full layers' geometry (0 = same) */
    int ple_dim, ple_vocab;     /* per-layer inputs (0 = none) */
    bool double_wide_mlp, k_eq_v, has_v_norm, has_layer_scalar;
    char notes[512];            /* facts export should tell the user (may be empty) */
    /* generation */
    int bos_id;                 /* -1 if none */
    int eos_ids[OKV_HF_MAX_EOS];/* more is refused, naming the field */
    int n_eos;
} okv_hf_model;

/* Parses config.json text (what = file name for messages). Unknown
 * architectures, unsupported features and out-of-range values fail. */
okv_status okv_hf_parse_config(const char *json, size_t len, const char *what, okv_hf_model *m, okv_error *err);
/* Loads <dir>/config.json, or the file itself if path is a file, then
 * <dir>/generation_config.json's EOS list when present. */
okv_status okv_hf_load_config(const char *path, okv_hf_model *m, okv_error *err);

/* Per-layer geometry. */
bool okv_hf_layer_is_full(const okv_hf_model *m, int layer);
int okv_hf_layer_head_dim(const okv_hf_model *m, int layer);
int okv_hf_layer_kv_heads(const okv_hf_model *m, int layer);
/* The cache layout this model gets: one cache per non-shared layer; shared
 * layers map to their donor's (HF's rule: the last earlier non-shared layer
 * of the same attention type). */
okv_status okv_hf_build_layout(const okv_hf_model *m, int prefill_chunk, int max_ctx, okv_layout *out, okv_error *err);
/* inv_freq[D/2] for a rope spec and head dim (values beyond float range
 * become inf; okv_hf_parse_config refuses specs that produce any). */
void okv_hf_rope_inv_freq(const okv_rope *r, int head_dim, float *inv_freq);
/* Entry i of that table, computed in double. */
double okv_hf_rope_inv_freq_at(const okv_rope *r, int head_dim, int i);

/* Where an exported tensor's bytes come from. */
typedef struct okv_hf_tensor_src {
    char *ckpt_name;     /* checkpoint tensor, or NULL for computed data */
    float add;           /* added to every element (Gemma-3 norms: 1) */
    float *computed;     /* owned f32 data when ckpt_name is NULL */
} okv_hf_tensor_src;

/* The graph of the model, with one source per program tensor. The caller
 * (export) fills in dtypes/data. `weight_dtype` is the dtype chosen for
 * matrices; vectors are always f32. */
typedef struct okv_hf_graph {
    okv_graph graph;
    int n_tensors;
    okv_tensor *tensors;        /* name, dtype, shape; data NULL */
    okv_hf_tensor_src *srcs;    /* [n_tensors] */
} okv_hf_graph;

okv_status okv_hf_build_graph(const okv_hf_model *m, const okv_layout *layout, okv_dtype weight_dtype,
                              okv_hf_graph *out, okv_error *err);
void okv_hf_graph_free(okv_hf_graph *g);

#endif
