/* offkv.h — the public C API of offkv.
 *
 *   export   HF checkpoint directory -> one program file
 *   program  a loaded (mmap'ed, validated) program file
 *   cache    runtime-owned KV caches, built from a program's published layout
 *            and registered under a string key (a process-wide, thread-safe
 *            registry); capacity, storage dtype and window overrides are
 *            chosen here, not at export
 *   runner   executes steps of a program against the caches of one key
 *
 * Every call returns an okv_status and fills an okv_error with a message on
 * failure; nothing here prints or exits. The tokenizer, chat template and
 * sampling APIs live in offkv_tok.h, offkv_chat.h and offkv_sample.h. */
#ifndef OFFKV_H
#define OFFKV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "offkv_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- export ------------------------------------------------------------------ */

/* How far an export is (see okv_export_options.progress). */
typedef struct okv_export_progress {
    int tensors_done, n_tensors;     /* weights and bundled files */
    uint64_t bytes_done, total_bytes;
    double seconds;                  /* since the first tensor started */
} okv_export_progress;

typedef struct okv_export_options {
    okv_dtype dtype;          /* weight dtype of matrices that are not quantized (default bf16) */
    int max_ctx_len;          /* default 2048 */
    int prefill_chunk_size;   /* 0 = min(512, smallest window, max_ctx_len) */
    /* Group-wise weight quantization along the input dimension (0 = off,
     * 4 = 4-bit asymmetric, 8 = 8-bit symmetric; f16 scales). qlinear: every
     * decoder linear (attention, MLP, Gemma-4 per-layer projections);
     * qembedding: the token embedding tables and the LM head (tied or not).
     * Groups 32, 64, 128 or 256 (0 = the default, OKV_QGROUP_DEFAULT); an
     * input dimension the group does not divide is an export error. */
    int qlinear, qlinear_group;
    int qembedding, qembedding_group;
    /* Receives non-fatal notices (skipped tensors, missing tokenizer, ...). */
    void (*notice)(void *ctx, const char *message);
    void *notice_ctx;
    /* Called on the exporting thread after each tensor is converted and
     * written (the library never prints; the CLI draws a progress line). */
    void (*progress)(void *ctx, const okv_export_progress *p);
    void *progress_ctx;
} okv_export_options;

#define OKV_QGROUP_DEFAULT 32

void okv_export_options_default(okv_export_options *o);
/* Reads hf_dir (config.json, safetensors, generation_config.json, tokenizer
 * files) and writes the program to out_path. On failure no file is left. */
okv_status okv_export(const char *hf_dir, const char *out_path, const okv_export_options *o, okv_error *err);

/* ---- program ------------------------------------------------------------------ */

typedef struct okv_program okv_program;

okv_status okv_program_open(const char *path, okv_program **out, okv_error *err);
void okv_program_free(okv_program *p);

typedef struct okv_program_info {
    const char *architecture;
    okv_dtype dtype;
    int vocab_size, hidden_size, n_layers;
    int n_caches, prefill_chunk_size, max_ctx_len;
    int bos_id;                /* -1 if none */
    const int *eos_ids;
    int n_eos;
} okv_program_info;

void okv_program_get_info(const okv_program *p, okv_program_info *info);
/* A bundled byte blob ("tokenizer.json", "tokenizer_config.json",
 * "chat_template"), or NULL if the program has none. */
const void *okv_program_blob(const okv_program *p, const char *name, size_t *len);
/* Human-readable (json = false) or JSON description: metadata, cache layout,
 * graph summary, tensor table. The caller frees *out. */
okv_status okv_program_describe(const okv_program *p, bool json, char **out, okv_error *err);
/* The layout a checkpoint would get, without weights: path is a checkpoint
 * directory or its config.json. Same output shape as okv_program_describe. */
okv_status okv_config_describe(const char *path, bool json, const okv_export_options *o, char **out, okv_error *err);
/* What a GGUF file holds: name, architecture and the HF class it maps to,
 * hyperparameters, tensor counts and bytes per ggml type, tokenizer kind,
 * whether a chat template is present. */
okv_status okv_gguf_describe(const char *path, bool json, char **out, okv_error *err);
/* True if path is a file starting with the GGUF magic or a regular file
 * named *.gguf (export and inspect take such files instead of an HF
 * directory; a damaged one then fails as a bad GGUF). */
bool okv_is_gguf_file(const char *path);

/* ---- caches ------------------------------------------------------------------- */

typedef struct okv_cache_options {
    okv_dtype storage_dtype;     /* default f32 */
    int max_capacity;            /* 0 = the program's max_ctx_len */
    int initial_capacity;        /* 0 = min(256, capacity) */
    const int32_t *windows;      /* NULL = the program's; else repeats over caches, 0 = flat */
    int n_windows;
} okv_cache_options;

void okv_cache_options_default(okv_cache_options *o);
/* Builds caches for p's layout and registers them under key. */
okv_status okv_cache_install(const char *key, const okv_program *p, const okv_cache_options *o, okv_error *err);
okv_status okv_cache_remove(const char *key, okv_error *err);
okv_status okv_cache_length(const char *key, int *length, okv_error *err);
/* Truncates the sequence to new_len if every cache can still serve the next
 * step (a ring cache only keeps its window plus one chunk). */
okv_status okv_cache_rewind(const char *key, int new_len, okv_error *err);
okv_status okv_cache_clear(const char *key, okv_error *err);
/* One line, e.g. "26 caches: 4 flat + 22 ring(window 512) | capacity 4096 | kv bf16 | 52.0 MiB". */
okv_status okv_cache_describe(const char *key, char *buf, size_t n, okv_error *err);
/* Bytes the key's pools currently hold. */
okv_status okv_cache_bytes(const char *key, size_t *bytes, okv_error *err);

/* ---- runner ------------------------------------------------------------------- */

typedef struct okv_runner_options {
    int n_threads;            /* 0 = number of CPUs */
    bool reference_attention; /* use the plain reference update_and_attend */
    bool plain_kernels;       /* disable SIMD dispatch (for testing) */
    int max_logit_rows;       /* most logit rows one step returns (0 = prefill_chunk_size);
                                 1 suffices for generation and saves [chunk, vocab] floats */
} okv_runner_options;

typedef enum okv_logits_rows { OKV_LOGITS_ALL = 0, OKV_LOGITS_LAST = 1, OKV_LOGITS_NONE = 2 } okv_logits_rows;

typedef struct okv_runner okv_runner;

void okv_runner_options_default(okv_runner_options *o);
okv_status okv_runner_create(const okv_program *p, const char *cache_key, const okv_runner_options *o,
                             okv_runner **out, okv_error *err);
void okv_runner_free(okv_runner *r);
/* The program a runner executes. */
const okv_program *okv_runner_program(const okv_runner *r);
/* The cache key it steps (owned by the runner) and the most positions that
 * key's sequence can hold (max_capacity of the install, else max_ctx_len). */
const char *okv_runner_cache_key(const okv_runner *r);
int okv_runner_capacity(const okv_runner *r);
/* The kernel path the runner uses, e.g. "amx-bf16 (amx: granted)" or
 * "avx512-bf16 (amx: refused by the OS (...))": static, for --verbose and
 * benchmarks. OKV_KERNELS=plain|avx2|avx512|amx in the environment caps it. */
const char *okv_runner_kernels(const okv_runner *r);
/* One step: T tokens at absolute positions (for one sequence exactly
 * length..length+T-1, T <= prefill_chunk_size). Writes logits for all T
 * rows, the last row only, or none, as [rows, vocab] float32. A failed step
 * leaves the caches exactly as before. */
okv_status okv_runner_step(okv_runner *r, const int32_t *ids, const int32_t *positions, int T, okv_logits_rows rows,
                           float *logits, okv_error *err);

#ifdef __cplusplus
}
#endif
#endif
