/* offkv.h — the public C API of offkv.
 *
 *   export   HF checkpoint directory -> one program file
 *   program  a loaded (mmap'ed, validated) program file
 *   cache    runtime-owned KV caches, built from a program's published layout
 *            and registered under a string key (a process-wide, thread-safe
 *            registry); capacity, storage dtype and window overrides are
 *            chosen here, not at export
 *   runner   executes steps of a program against the caches of one key
 *   session  a program, its caches and a runner, created and freed together:
 *            what a caller that runs one model needs, with no key to name
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
    /* during the calibration pass (tensors_done = n_tensors = 0 then):
     * tokens run so far of all, seconds since it started */
    int64_t calib_tokens_done, calib_tokens;
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
    /* Quantize into a GGUF block type instead (NULL = the scheme above):
     * "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q4_K", "q5_K" or "q6_K"
     * (an error-minimising search per block, weighted by the calibration
     * when there is one) when qlinear / qembedding is nonzero (0 is still
     * off; the CLI sets the type's code bits); their group sizes unused. A
     * matrix whose input dimension the K-quants' 256 does not divide takes
     * the 32-element type of at most the same bits per weight instead (q4_K
     * -> q4_0, q5_K -> q5_0, q6_K -> q5_1), with a notice. */
    const char *qlinear_block, *qembedding_block;
    /* GGUF input: a matrix stored in a block type offkv runs (Q4_0, Q4_1,
     * Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) keeps its blocks as
     * they are unless qlinear / qembedding cover it (then it is quantized
     * into that scheme, as before) or this is set (then it is dequantized
     * to dtype: the float path that matches the oracle exactly). Other
     * types (F16, BF16, F32) follow dtype. */
    bool gguf_dequantize;
    /* Activation-aware quantization: before quantizing, the float program
     * runs over a calibration text (tokenized with the checkpoint's
     * tokenizer.json) or token stream, and each linear's squared error is
     * weighted per input channel by the mean square of its inputs there
     * (okv_quantize_weighted). Windows of calibration_ctx tokens (0 = 512).
     * Needs qlinear or qembedding; use a text other than the one you
     * evaluate on. calibration_ids is used when calibration_file is NULL. */
    const char *calibration_file;
    const int32_t *calibration_ids;
    int n_calibration_ids;
    int calibration_ctx;
    /* Threads for quantization's scale search (0 = every online CPU; the
     * bytes written do not depend on it) and for the calibration pass. */
    int n_threads;
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

typedef struct okv_program_options {
    /* Where the program's bytes live (offkv_base.h). AUTO (the default)
     * copies them into huge pages where the kernel grants them: fewer TLB
     * misses on decode's one pass over every weight, at the cost of private
     * memory the size of the file (MAPPED shares the page cache instead;
     * the measured difference is in README / docs/perf). */
    okv_weights_memory weights;
} okv_program_options;

void okv_program_options_default(okv_program_options *o);
/* Opens and validates a program with the default options. */
okv_status okv_program_open(const char *path, okv_program **out, okv_error *err);
okv_status okv_program_open_with(const char *path, const okv_program_options *o, okv_program **out, okv_error *err);
void okv_program_free(okv_program *p);

typedef struct okv_program_info {
    const char *architecture;
    okv_dtype dtype;
    int vocab_size, hidden_size, n_layers;
    int n_caches, prefill_chunk_size, max_ctx_len;
    int bos_id;                /* -1 if none */
    const int *eos_ids;
    int n_eos;
    okv_weights_memory weights_memory; /* MAPPED or HUGE_PAGES: where the bytes ended up */
    int n_x8;                  /* GGUF block matrices whose rows were interleaved by 8 in memory for
                                * the decode dots (HUGE_PAGES only; OKV_QB_X8=0 turns it off) */
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

/* OKV_CACHE_SINGLE: one sequence per key (okv_runner_step, okv_cache_rewind).
 * OKV_CACHE_CELLS: a cell pool shared by up to max_seqs sequences (the
 * okv_seq_* verbs and okv_runner_step_batch; see "sequences" below). */
typedef enum okv_cache_mode { OKV_CACHE_SINGLE = 0, OKV_CACHE_CELLS = 1 } okv_cache_mode;

#define OKV_MAX_SEQS 256        /* most sequences one cell-pool key can hold */

typedef struct okv_cache_options {
    okv_dtype k_storage_dtype;   /* the K pools' element type; default f32 */
    okv_dtype v_storage_dtype;   /* the V pools'; default f32. Rounding V costs the
                                    output far less than rounding K (the KL of
                                    each pairing: README / docs/perf) */
    bool k_storage_auto;         /* true: ignore k_storage_dtype, take okv_kv_dtype_auto(program)
                                    (the CLI's default); default false */
    bool v_storage_auto;         /* the same for V */
    int max_capacity;            /* 0 = the program's max_ctx_len; cells: the
                                    longest one sequence may get (positions) */
    int initial_capacity;        /* 0 = min(256, capacity); cells: first pool size */
    const int32_t *windows;      /* NULL = the program's; else repeats over caches, 0 = flat */
    int n_windows;
    okv_cache_mode mode;         /* default OKV_CACHE_SINGLE */
    int max_seqs;                /* cells: 1..OKV_MAX_SEQS, 0 = 64 */
    int n_cells;                 /* cells: cells of every full-history cache,
                                    shared by all sequences; 0 = max_capacity.
                                    A windowed cache gets min(n_cells,
                                    max_seqs * (window + chunk - 1) + chunk) */
    int max_step;                /* the most tokens one step writes (chunk above):
                                    1..prefill_chunk_size, 0 = prefill_chunk_size.
                                    A smaller step lets n_cells be smaller than
                                    the program's chunk (a server of a few short
                                    sequences); the runner's steps must fit it */
} okv_cache_options;

void okv_cache_options_default(okv_cache_options *o);
/* The KV storage a program gets by default from the CLI and server: its
 * own dtype for bf16/f16 programs (quantized programs compute in bf16), as
 * llama.cpp keeps K/V in f16 and vLLM in the model's dtype; f32 for f32
 * programs, which stay fp32-exact. bf16 K/V also take the AMX attention
 * kernels; f32 K/V take the AVX-512 ones. */
okv_dtype okv_kv_dtype_auto(const okv_program *p);
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

/* ---- sequences (OKV_CACHE_CELLS keys) ------------------------------------------
 *
 * Contract (stable; the server builds on it):
 * - A sequence is an id in [0, max_seqs) handed out by okv_seq_new or
 *   okv_seq_fork and valid until okv_seq_free. Its length is the next
 *   position it must be stepped at; okv_runner_step_batch continues it.
 * - Every cache of the key holds cells: one cell = the K/V row of one
 *   position, plus that position and the set of sequences that own it.
 *   okv_seq_fork(src, upto) makes a new sequence owning src's cells of
 *   positions [0, upto): zero copy, the shared prefix is stored (and counted)
 *   once. A cell is freed when its last owner drops it.
 * - Windowed caches (window W, chunk C) keep, per sequence, only positions
 *   >= length - (W + C - 1) (what a ring of W + C - 1 slots would hold):
 *   older cells are dropped by that sequence when a step commits, and freed
 *   once no owner holds them. So a windowed cache's cells stay bounded by
 *   max_seqs * (W + C - 1) + C however long the sequences get.
 * - Free cells: a step of T tokens needs T free cells in every cache (after
 *   its pool grew, doubling, up to n_cells); okv_cache_cells reports the
 *   smallest free count over the caches.
 * - Every verb fails with OKV_ERR_STATE while a step is in flight on the key,
 *   with OKV_ERR_INVALID on an unknown sequence or bad range, and leaves the
 *   key unchanged on any error. Single-sequence keys refuse them
 *   (OKV_ERR_STATE); cell keys refuse okv_cache_length/rewind/clear and
 *   okv_runner_step. */
okv_status okv_seq_new(const char *key, int *seq, okv_error *err);
/* New sequence sharing src's cells of positions [0, upto), 0 <= upto <=
 * length(src); its length is upto. Refused if a windowed cache of src no
 * longer holds the keys a step at upto needs (as okv_cache_rewind). */
okv_status okv_seq_fork(const char *key, int src, int upto, int *seq, okv_error *err);
/* Drops seq's positions [p0, p1) (p1 < 0 = to the end). If that reaches the
 * end (p1 < 0 or p1 >= length) the sequence is truncated: length = p0 (with
 * the rewind rule on windowed caches). Otherwise the positions become holes
 * that later queries of seq no longer see (eviction); the length stays. */
okv_status okv_seq_rm(const char *key, int seq, int p0, int p1, okv_error *err);
/* Drops every cell of seq and releases the id. */
okv_status okv_seq_free(const char *key, int seq, okv_error *err);
okv_status okv_seq_len(const char *key, int seq, int *len, okv_error *err);
/* Whether seq can take a step of T more tokens now: alive, length + T within
 * max_capacity, T <= the program's chunk and T free cells in every cache. */
okv_status okv_seq_can_extend(const char *key, int seq, int T, bool *ok, okv_error *err);

typedef struct okv_cells_info {
    int max_seqs, n_seqs;       /* capacity and live sequences */
    int max_len;                /* longest a sequence may get (max_capacity) */
    int n_cells;                /* cells of the tightest cache (its upper bound) */
    int used_cells;             /* cells owned by at least one sequence there */
    int free_cells;             /* n_cells - used_cells: tokens a step may still add */
} okv_cells_info;

okv_status okv_cache_cells(const char *key, okv_cells_info *info, okv_error *err);

/* ---- sequence state on disk -----------------------------------------------------
 *
 * okv_seq_save writes what one sequence holds (seq = -1 on a single-sequence
 * key, else a cell key's sequence id) to path: per cache the positions, the
 * K/V rows in the storage dtype and the oldest held position (a ring's
 * rewind floor), the program's fingerprint and an optional opaque extra blob
 * (at most 64 MiB; a chat session keeps its conversation there). The write
 * is atomic: a temporary file renamed into place; on failure nothing is
 * left and an existing file is untouched.
 *
 * okv_seq_load checks the file (CRC, every size and offset, the fingerprint
 * of p, kv storage dtype, each cache's window and geometry against the key)
 * and refuses a mismatch with an error naming the file and field. On a
 * single-sequence key the key's sequence is replaced (a flat cache needs
 * positions 0..length-1, a ring what it can hold); on a cell key the state
 * becomes a new sequence (*seq, may be NULL; -1 for single keys). *extra
 * (may be NULL) gets a heap copy of the blob (free() it; NULL if none). On
 * any error the key is unchanged. p must be the program the key serves. */
okv_status okv_seq_save(const char *key, const okv_program *p, int seq, const char *path, const void *extra,
                        size_t extra_len, okv_error *err);
okv_status okv_seq_load(const char *key, const okv_program *p, const char *path, int *seq, void **extra,
                        size_t *extra_len, okv_error *err);
/* The same state as an in-memory image (*data, free() it; *len bytes),
 * byte for byte what okv_seq_save would write, and its load: for a store
 * that is not a file system (the server's Redis tier). `what` names the
 * image in errors. */
okv_status okv_seq_save_mem(const char *key, const okv_program *p, int seq, const void *extra, size_t extra_len,
                            void **data, size_t *len, okv_error *err);
okv_status okv_seq_load_mem(const char *key, const okv_program *p, const void *data, size_t len, const char *what,
                            int *seq, void **extra, size_t *extra_len, okv_error *err);
/* A state file's length (positions) and extra blob read from its header
 * alone, for indexing many files cheaply: nothing is loaded, the rows and
 * the CRC are not read (okv_seq_load checks them). OKV_ERR_FORMAT when it
 * does not look like a state file, OKV_ERR_INVALID when it was saved from
 * another program or cache layout. */
okv_status okv_seq_peek(const okv_program *p, const char *path, int *length, void **extra, size_t *extra_len,
                        okv_error *err);
/* The digests a state file is matched against: the cache layout, and the
 * rest of the program (header with graph and tensor table, sampled weight
 * bytes; the checkpoint path it was exported from does not count). */
void okv_program_fingerprint(const okv_program *p, uint64_t *layout, uint64_t *program);

/* ---- runner ------------------------------------------------------------------- */

typedef struct okv_runner_options {
    int n_threads;            /* 0 = number of CPUs */
    bool reference_attention; /* use the plain reference update_and_attend */
    bool plain_kernels;       /* disable SIMD dispatch (for testing) */
    int max_logit_rows;       /* most logit rows one step returns (0 = prefill_chunk_size);
                                 1 suffices for generation and saves [chunk, vocab] floats */
    /* Called before every MATMUL with its input rows x [rows, K] and the name
     * of its weight tensor (export's calibration pass collects activation
     * statistics this way); NULL = none. */
    void (*matmul_input)(void *ctx, const char *weight, const float *x, int rows, int K);
    void *matmul_input_ctx;
    bool deterministic;       /* batch invariance: one matmul kernel per weight dtype for every T and
                                 one attention variant, so a row's logits are bit for bit the same
                                 whatever else shares the step and whatever its size */
    bool profile;             /* time every op of every step (wall clock): okv_runner_profile */
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
/* The kernel variants the runner's steps ran so far, per op, as the kernel
 * router picked them, e.g. "matmul: avx2-gemv, avx2-packed; attend:
 * decode-avx2" (n bytes into buf, truncated); returns buf. */
const char *okv_runner_kernels_ran(const okv_runner *r, char *buf, size_t n);
/* One step: T tokens at absolute positions (for one sequence exactly
 * length..length+T-1, T <= prefill_chunk_size). Writes logits for all T
 * rows, the last row only, or none, as [rows, vocab] float32. A failed step
 * leaves the caches exactly as before. */
okv_status okv_runner_step(okv_runner *r, const int32_t *ids, const int32_t *positions, int T, okv_logits_rows rows,
                           float *logits, okv_error *err);
/* A batched step on a cell-pool key: token t (0 <= t < T <= the program's
 * prefill_chunk_size) has id ids[t], belongs to sequence seqs[t] and sits at
 * absolute position positions[t]. The tokens of each sequence, in the order
 * they appear, must be exactly length..length+n-1 of that sequence (they
 * need not be adjacent in the batch). Each token attends only to its own
 * sequence's cells (owner + position, + window). Logits are written for the
 * n_rows rows listed in rows[] (indices into the batch, e.g. each sequence's
 * last token; n_rows <= the runner's max_logit_rows) as [n_rows, vocab]
 * float32, in the order listed. Any error (bad id, sequence or position,
 * not enough free cells: OKV_ERR_CAPACITY) leaves every cache and sequence
 * exactly as before. Thread safety as okv_runner_step. */
okv_status okv_runner_step_batch(okv_runner *r, const int32_t *ids, const int32_t *seqs, const int32_t *positions, int T,
                                 const int32_t *rows, int n_rows, float *logits, okv_error *err);
/* Where a profiled runner's steps spend their time (okv_runner_options.profile;
 * all zero otherwise): per kind of work, the calls, wall-clock seconds and
 * thread-pool loops dispatched, summed over the steps since creation or the
 * last reset. Kinds are the graph's op names ("matmul" = step rows only),
 * "lm_head" (matmuls on logit rows), "kv_write" (the step's K/V into the
 * cache; not in "update_and_attend") and "step" (whole steps, admission
 * and commit included). Fills up to max entries, returns how many kinds
 * exist. */
typedef struct okv_op_profile {
    const char *name;
    int64_t calls;
    double seconds;
    int64_t dispatches;
} okv_op_profile;
int okv_runner_profile(const okv_runner *r, okv_op_profile *out, int max);
void okv_runner_profile_reset(okv_runner *r);

/* ---- session -------------------------------------------------------------------
 *
 * A session owns what running one model takes: the program (opened from a
 * path, or borrowed), its caches and a runner stepping them, built in that
 * order and freed in reverse by okv_session_free. Its caches sit in the
 * registry under a key the session chooses and removes, unique among the
 * live sessions, so every okv_cache_* / okv_seq_* verb and okv_seq_save /
 * okv_seq_load work on it through okv_session_cache_key; a caller never
 * names a key. Two sessions never share caches (for that, install a key
 * and create runners on it). A failed create leaves nothing behind: no key
 * registered, no program open. */

typedef struct okv_session okv_session;

typedef struct okv_session_options {
    okv_program_options program;  /* okv_session_create only */
    okv_cache_options cache;      /* the caches' capacity, storage, mode, ... */
    okv_runner_options runner;    /* threads, logit rows, kernels, ... */
} okv_session_options;

void okv_session_options_default(okv_session_options *o);
/* Opens the program at path and builds its caches and runner (o NULL = the
 * defaults). The session owns the program. */
okv_status okv_session_create(const char *path, const okv_session_options *o, okv_session **out, okv_error *err);
/* The same over a program the caller opened and keeps (o->program unused):
 * it must outlive the session. Several sessions may run one program's
 * weights, each with its own caches and runner. */
okv_status okv_session_create_for(const okv_program *p, const okv_session_options *o, okv_session **out,
                                  okv_error *err);
/* Frees the runner, removes the caches and, if the session opened it, frees
 * the program. NULL is fine. */
void okv_session_free(okv_session *s);
const okv_program *okv_session_program(const okv_session *s);
okv_runner *okv_session_runner(const okv_session *s);
/* The key the session's caches are registered under (owned by the session,
 * valid until okv_session_free), for the okv_cache_* and okv_seq_* verbs. */
const char *okv_session_cache_key(const okv_session *s);

#ifdef __cplusplus
}
#endif
#endif
