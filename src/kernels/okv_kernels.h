/* okv_kernels.h — the numeric kernels of a step (they run on the thread
 * pool of okv_threadpool.h). Activations are always float32, row-major [rows, width].
 *
 * Every kernel has a plain C version; some have SIMD versions chosen at run
 * time from the CPU's features. The choice lives in an okv_kernels table
 * (no global state): okv_kernels_select(OKV_ISA_AUTO) picks the best the CPU
 * supports, okv_kernels_select(OKV_ISA_PLAIN) the portable one, and tests
 * compare the two. Kernels receive cache *runs* from the cache layer; they
 * know nothing about policies. */
#ifndef OKV_KERNELS_H
#define OKV_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "offkv_base.h"
#include "okv_run.h"
#include "okv_threadpool.h"
#include "okv_quant.h"

/* ---- kernel table ------------------------------------------------------------ */

/* AVX512: AVX-512 F/BW/VL matmul for prefill (vdpbf16ps for bf16 weights
 * when the CPU has AVX512-BF16); AMX: BF16 tiles for bf16/f16 weights. Both
 * keep the AVX2 kernels for everything else (decode GEMV included). */
typedef enum okv_isa { OKV_ISA_AUTO = 0, OKV_ISA_PLAIN = 1, OKV_ISA_AVX2 = 2, OKV_ISA_AVX512 = 3, OKV_ISA_AMX = 4 } okv_isa;
typedef enum okv_act { OKV_ACT_SILU = 0, OKV_ACT_GELU_TANH = 1 } okv_act;

/* K/V of one cache as the attention kernel sees it. */
typedef struct okv_attn_kv {
    const void *k, *v;   /* pools: [slots, kv_heads, head_dim] in k_dtype / v_dtype */
    void *k_w, *v_w;     /* same pools, writable (for okv_attend_write) */
    okv_dtype k_dtype, v_dtype; /* each pool's storage dtype: K may keep more
                                 * precision than V (q8 V costs ~1/8 of q8 K's KL) */
    int kv_heads, head_dim;
} okv_attn_kv;

/* Which keys each query may see: the key-visibility input of attention.
 *
 * The keys are the slots the read runs list (run r covers pool slots
 * [slot, slot + n)); their order ("logical key index", runs concatenated)
 * matters only to the reduction order, never to the result's meaning.
 *
 * One sequence (okv_attn_args.vis == NULL): the runs are in position order
 * and slot slot + i of run r holds position pos + i. Query t (position
 * positions[t]) sees key position j iff j <= positions[t] and (window == 0 or
 * positions[t] - j < window). The kernel turns this into one contiguous key
 * range per query and masks only the blocks at its edges.
 *
 * Many sequences in one pool (a cell cache, a batched step): vis != NULL.
 *   q_seq[t]     sequence of query t, in [0, OKV_ATTN_MAX_SEQS)
 *   k_pos[s]     position held by pool slot s (indexed by SLOT, so a cell
 *                cache passes its per-cell array as is; only slots inside the
 *                runs are read)
 *   k_owner[s]   bit q of k_owner[s] set iff sequence q owns slot s (a forked
 *                prefix is owned by several; 0 = a free cell, seen by nobody)
 * Query t sees slot s iff bit q_seq[t] of k_owner[s] is set and k_pos[s]
 * passes the causal + window test against positions[t] above. Runs may then
 * be in any order and any positions; a query that sees no key gets zeros.
 * The kernel checks visibility per key here (block by block), so passing
 * runs that skip long stretches of foreign or free cells saves work, but
 * including them is always correct. */
enum { OKV_ATTN_MAX_SEQS = 64 };
typedef struct okv_attn_vis {
    const int32_t *q_seq;    /* [T] */
    const int32_t *k_pos;    /* [pool slots] */
    const uint64_t *k_owner; /* [pool slots] */
} okv_attn_vis;

typedef struct okv_attn_args {
    const float *q;          /* [T, n_heads, head_dim], RoPE applied */
    int T, n_heads;
    const int32_t *positions;/* [T] absolute positions of the queries */
    okv_attn_kv kv;
    const okv_run *runs;     /* read runs from the planner (see okv_attn_vis) */
    int n_runs;
    int32_t window;          /* 0 = full; else key j visible iff p - j < window */
    float scale;             /* multiplies q.k before softmax */
    float *out;              /* [T, n_heads, head_dim] */
    const okv_attn_vis *vis; /* NULL: one sequence, positions implied by the runs */
} okv_attn_args;

/* ---- variants and the router ---------------------------------------------------- */

/* The ops whose implementation depends on the call's shape. Each table
 * holds, per op, an ordered list of variants (name, fits, run); the router
 * (okv_kernels.c) runs the first whose fits() accepts the call's shape on
 * this CPU. The table's function pointers below are that router. */
typedef enum okv_kop { OKV_KOP_MATMUL = 0, OKV_KOP_MATMUL_Q, OKV_KOP_MATMUL_QB, OKV_KOP_ATTEND, OKV_KOP_COUNT } okv_kop;
/* What a variant's fits() sees of a call: the matmuls fill T, K, N and wdt
 * (dense) or s (matmul_q / matmul_qb); attend fills T, n_heads, kv_heads,
 * head_dim and the pools' dtypes. */
typedef struct okv_kshape {
    int T, K, N;
    okv_dtype wdt;
    const okv_qscheme *s;
    int n_heads, kv_heads, head_dim;
    okv_dtype k_dt, v_dt;
} okv_kshape;
typedef struct okv_kvariant okv_kvariant; /* okv_kernels_internal.h */
/* "op" -> "matmul", "matmul_q", "matmul_qb", "attend". */
const char *okv_kop_name(okv_kop op);

typedef struct okv_kernels {
    okv_isa isa;
    const char *name;
    /* per op, the variant list the router walks (see okv_kernels_pick) */
    const okv_kvariant *variants[OKV_KOP_COUNT];
    /* y[T,N] = x[T,K] @ W[N,K]^T (+ bias[N] if non-NULL); W in wdt. y must
     * not alias x. Each output is computed by one task, so results do not
     * depend on the number of threads. */
    void (*matmul)(okv_threadpool *tp, float *y, const float *x, int T, int K,
                   const void *W, okv_dtype wdt, int N, const float *bias);
    /* y = x / sqrt(mean(x^2 over each group of `group` channels) + eps) * w,
     * w [group] or NULL (no weight). x and y [T, width], may alias. width
     * must be a multiple of group; group <= 0 means group = width. */
    void (*rmsnorm)(float *y, const float *x, int T, int width, int group, const float *w, float eps);
    /* y[i] = act(gate[i]) * up[i] for i < n; y may alias gate or up. */
    void (*glu)(float *y, const float *gate, const float *up, size_t n, okv_act act);
    /* sum = a + b, then y = this table's rmsnorm of sum, bit for bit, in one
     * pass over each row group; all [T, width]. sum may alias a or b, y any
     * of the three. */
    void (*add_rmsnorm)(float *y, float *sum, const float *a, const float *b, int T, int width, int group,
                        const float *w, float eps);
    /* okv_rope_apply, bit for bit (every table) */
    void (*rope_apply)(float *y, const float *x, int T, int n_heads, int head_dim, const float *cs);
    /* update_and_attend, the fast version: blocked, flash style (online
     * softmax over key blocks, each block shared by a query block and by the
     * GQA heads of its kv head, threads over (kv head, query block[, keys])),
     * K/V read in their storage dtype. n_heads must be a multiple of
     * kv_heads. Scratch comes from the pool's workspace (see
     * okv_attend_scratch_bytes); a caller that planned none gets it
     * allocated, and if that fails the output is filled with NaN. */
    void (*attend)(okv_threadpool *tp, const okv_attn_args *a);
    /* y[T,N] = x[T,K] @ dequant(W)[N,K]^T (+ bias[N] if non-NULL), W[N,K]
     * quantized with scheme s (okv_quant.h; checked by the caller). Fast
     * versions quantize x to int8 per group and use integer dots (error
     * bounds in qmatmul/int_plain.c). Each output is computed by one task, so
     * results do not depend on the number of threads. If scratch memory
     * cannot be allocated the output is filled with NaN. */
    void (*matmul_q)(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W,
                     const okv_qscheme *s, int N, const float *bias);
    /* The same for W stored as GGUF blocks (s->block set; matmul_q takes
     * only offkv's own planes): decode on integer dots with x quantized
     * per block as llama.cpp does, prompts on the packed GEMM with W
     * dequantized exactly per call (qmatmul/block_plain.c). */
    void (*matmul_qb)(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W,
                      const okv_qscheme *s, int N, const float *bias);
    /* Whether matmul_qb runs W of block type `type` faster with its rows
     * interleaved by 8 (okv_qblock_x8.c): the runtime then packs such
     * matrices after loading and sets s->x8. NULL: never. */
    bool (*matmul_qb_x8)(int type);
    /* How far matmul's products may be from exact f32 products, relative,
     * per weight dtype (index okv_dtype): 0 = x and W are used exactly (f32
     * FMAs); 2^-8 = x is rounded to bf16 (AMX: every T; avx512-bf16: the
     * T = 1 GEMV, its prefill is exact);
     * 2^-7 = x and W (f16 -> bf16) are both rounded. Tests derive their
     * tolerance from it; f32 weights always get 0. */
    float matmul_rounding[3];
    /* attend rounds q, k, p, v to bf16 when the pools are f16 or bf16 (AMX
     * tiles for T x heads per kv head >= 16, vdpbf16ps decode below);
     * f32 pools stay exact */
    bool attend_bf16;
} okv_kernels;

/* Table for the requested ISA; falls back to the next best the CPU (and,
 * for AMX, the OS) supports: amx -> avx512 -> avx2 -> plain. For
 * OKV_ISA_AUTO the environment variable OKV_KERNELS (plain, avx2, avx512 or
 * amx) caps the choice, so one build can be benchmarked per path. */
const okv_kernels *okv_kernels_select(okv_isa isa);
/* The batch-invariant table (okv_runner_options.deterministic): for every
 * weight dtype one per-output arithmetic for every T (no GEMV/GEMM switch
 * that changes sums, no split K; matmul/det.c) and an attention whose
 * key blocks are fixed by position, without key splits (attend/det.c);
 * with the plain matmuls when isa or the CPU gives plain. */
const okv_kernels *okv_kernels_select_deterministic(okv_isa isa);
/* Whether this process may use AMX tiles, asking the OS once
 * (arch_prctl ARCH_REQ_XCOMP_PERM); *why (may be NULL) gets a static
 * sentence such as "granted" or "refused by the OS (...)". */
bool okv_amx_usable(const char **why);
/* The name of the variant k's router runs for op on a call of shape sh
 * (the same pick the call makes; static string). */
const char *okv_kernels_pick(const okv_kernels *k, okv_kop op, const okv_kshape *sh);
/* The variants that ran on tp so far (the router notes each pick on the
 * pool it runs on), as "matmul: a, b; attend: c" into buf (n bytes,
 * truncated, NUL-terminated); returns buf. tp NULL: "". */
const char *okv_kernels_ran(const okv_threadpool *tp, char *buf, size_t n);
/* "<table name> (amx: <why>)", a static string per table. */
const char *okv_kernels_describe(const okv_kernels *k);
/* What the CPU and OS let us use (CPUID + XGETBV, read once). AMX also
 * needs the per-process permission the AMX kernels ask for. */
typedef struct okv_cpu_caps {
    bool sse42, avx, avx2, fma, f16c, avxvnni;
    bool avx512f, avx512dq, avx512bw, avx512vl, avx512vnni, avx512bf16, avx512fp16;
    bool amx_tile, amx_bf16, amx_int8;
    /* vdpbf16ps issues at the f32 FMA's instruction rate, so it does twice
     * the FMA's flops (AMD Zen 4/5: bench_kernels peak 235 vs 117 GFLOP/s a
     * core); Intel's AVX-512 BF16 cores issue it at half that rate. */
    bool vdpbf16_full_rate;
} okv_cpu_caps;
const okv_cpu_caps *okv_cpu(void);
/* Human-readable CPU feature summary, e.g. "avx2 fma f16c avx512f" (a
 * static string, computed once). */
const char *okv_cpu_features(void);

/* ---- plain row-wise kernels (ops/ops_plain.c; rope_apply also in the tables) -------- */

/* x [T, n_heads*head_dim] in place; NeoX layout: channel i pairs with i+D/2,
 * angle = pos * inv_freq[i] for i < D/2 (inv_freq 0 = identity). */
void okv_rope(float *x, int T, int n_heads, int head_dim, const int32_t *positions, const float *inv_freq);
/* okv_rope in two parts, bit for bit the same: cs [T, head_dim/2, 2] gets
 * (cos, sin) of each (token, pair) angle, once per step and inv_freq;
 * okv_rope_apply rotates x into y (y may equal x). */
void okv_rope_angles(float *cs, int T, int half, const int32_t *positions, const float *inv_freq);
void okv_rope_apply(float *y, const float *x, int T, int n_heads, int head_dim, const float *cs);
/* y[t] = E[ids[t]] * scale; E [vocab, width] in edt. ids validated by caller. */
void okv_embed(float *y, const int32_t *ids, int T, const void *E, okv_dtype edt, int width, float scale);
void okv_softcap(float *x, size_t n, float cap);   /* x = tanh(x/cap)*cap */
void okv_add(float *y, const float *a, const float *b, size_t n);
void okv_scale(float *y, const float *x, size_t n, float s);
/* Writes this step's k/v rows [T, kv_heads, head_dim] (f32) into the pools
 * at the write runs, converting to the storage dtype. */
void okv_attend_write(const okv_attn_kv *kv, const okv_run *runs, int n_runs, const float *k, const float *v);
/* The K (v false) or the V half of okv_attend_write, from src [T, kv_heads, head_dim]. */
void okv_attend_write_side(const okv_attn_kv *kv, const okv_run *runs, int n_runs, const float *src, bool v);
/* The reference update_and_attend: gathers the full read span, builds an
 * explicit [T, n_keys] mask (okv_attn_vis's rule), plain softmax. It
 * allocates per call (a debugging path, not for planned steps). */
void okv_attend_reference(const okv_attn_args *a);
/* Workspace bytes any table's matmul (dense weights in wdt, or quantized
 * with scheme s) needs for up to T rows of x[., K] and N outputs on a pool
 * of n_threads. */
size_t okv_matmul_scratch_bytes(int T, int K, int N, okv_dtype wdt, int n_threads);
size_t okv_matmul_q_scratch_bytes(int T, int K, int N, const okv_qscheme *s, int n_threads);
/* Workspace bytes the fast attend needs for up to T queries of n_heads (kv_heads
 * kv heads, head_dim) on a pool of n_threads, for ANY number of keys, runs
 * and any visibility. */
size_t okv_attend_scratch_bytes(int T, int n_heads, int kv_heads, int head_dim, int n_threads);
/* The same for the deterministic table's attention (attend/det.c). */
size_t okv_attend_det_scratch_bytes(int T, int n_heads, int kv_heads, int head_dim, int n_threads);

#endif
