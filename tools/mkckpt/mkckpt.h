/* mkckpt.h — writes tiny random-weight HuggingFace checkpoints (config.json,
 * generation_config.json, model.safetensors or an index + shards) for the
 * Llama family, so tests can make model variants and the demo can ship a
 * default model without a download.
 *
 * Tensor names, shapes and config keys are copied from the real fixtures in
 * ../shared/fixtures/models (which copy HF's layout). Weights are seeded
 * random, scaled so activations stay O(1) and attention is not uniform:
 * matrices N(0, 1/fan_in) (q/k 1.5x wider), embeddings N(0, 0.25) (Gemma:
 * N(0, 0.01), it is scaled by sqrt(hidden)), norm weights 1 +- 0.3 (Gemma's
 * "1 + w" norms store w around 0), Qwen2 q/k/v biases O(0.3..1). */
#ifndef OKV_MKCKPT_H
#define OKV_MKCKPT_H

#include <stdbool.h>
#include <stdint.h>

#include "offkv_base.h"

typedef enum okv_mkckpt_arch {
    OKV_MK_LLAMA = 0,  /* LlamaForCausalLM */
    OKV_MK_QWEN3 = 1,  /* Qwen3ForCausalLM: + q_norm/k_norm over head_dim */
    OKV_MK_QWEN2 = 2,  /* Qwen2ForCausalLM: + q/k/v biases */
    OKV_MK_GEMMA3 = 3  /* Gemma3ForCausalLM: sandwich norms, q/k norm, 5:1 sliding */
} okv_mkckpt_arch;

typedef enum okv_mkckpt_rope {
    OKV_MK_ROPE_NONE = 0,
    OKV_MK_ROPE_LINEAR = 1,
    OKV_MK_ROPE_LLAMA3 = 2
} okv_mkckpt_rope;

typedef struct okv_mkckpt_spec {
    okv_mkckpt_arch arch;
    int hidden, layers, heads, kv_heads, head_dim, intermediate, vocab;
    bool tied;
    okv_mkckpt_rope rope_scaling;
    double rope_factor;       /* linear and llama3 factor */
    int rope_original_max;    /* llama3 original_max_position_embeddings */
    double rope_theta;
    okv_dtype dtype;          /* storage dtype of every tensor */
    uint64_t seed;
    int window;               /* sliding window; gemma3 needs > 0, qwen 0 = off */
    int sliding_pattern;      /* gemma3: layer i is full iff (i+1) % pattern == 0 */
    int max_window_layers;    /* qwen: layers >= this slide when window > 0; -1 = auto */
    double query_pre_attn_scalar; /* gemma3 */
    int shards;               /* 1 = model.safetensors, else index + N shards */
    int bos_id, eos_id;
} okv_mkckpt_spec;

/* The defaults mirror the fixture of that architecture (small dims, head_dim
 * != hidden/heads where the fixture has it, llama3 scaling for llama). */
void okv_mkckpt_default_spec(okv_mkckpt_spec *spec, okv_mkckpt_arch arch);
int okv_mkckpt_parse_arch(const char *s, okv_mkckpt_arch *out);  /* 0 ok, -1 unknown */
int okv_mkckpt_parse_rope(const char *s, okv_mkckpt_rope *out);  /* 0 ok, -1 unknown */
const char *okv_mkckpt_arch_name(okv_mkckpt_arch arch);

/* Checks the spec for consistency (OKV_ERR_INVALID naming the option). */
okv_status okv_mkckpt_check(const okv_mkckpt_spec *spec, okv_error *err);

/* Creates dir if needed and writes the checkpoint into it. */
okv_status okv_mkckpt_write(const okv_mkckpt_spec *spec, const char *dir, okv_error *err);

#endif
