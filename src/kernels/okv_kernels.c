/* okv_kernels.c — the kernel tables and the one router that picks, per call,
 * which variant of an op runs.
 *
 * A table is an immutable struct per ISA; selecting one only asks the CPU
 * what it supports (no global switch, no init call), so a test can hold the
 * plain and the AVX2 table side by side and compare. Each shape-dependent op
 * of a table (matmul, matmul_q, matmul_qb, attend) is an ordered list of
 * variants {name, fits(shape, caps), run} below; the table's function
 * pointer is a router over that list: okv_kernels_route takes the first
 * variant that fits, notes its name on the pool (okv_kernels_ran: what
 * `offkv run --verbose` and bench_kernels print) and runs it. Leaf files
 * hold one op on one ISA and never choose between kernels: every threshold
 * ("packing pays from T = 48") lives here, next to the list it orders. The
 * row-wise ops (rmsnorm, glu, add_rmsnorm, rope_apply) have one variant per
 * ISA and are plain pointers. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "okv_kernels_internal.h"

/* The row-wise ops per ISA (ops/ops_plain.c, ops/ops_simd.c): every table of an
 * ISA gets the same ones, so the fused and unfused steps agree. */
#define OPS_PLAIN .rmsnorm = okv_rmsnorm_plain, .glu = okv_glu_plain, .add_rmsnorm = okv_add_rmsnorm_plain, \
                  .rope_apply = okv_rope_apply
#define OPS_AVX2 .rmsnorm = okv_rmsnorm_avx2, .glu = okv_glu_avx2, .add_rmsnorm = okv_add_rmsnorm_avx2, \
                 .rope_apply = okv_rope_apply_avx2
#define OPS_AVX512 .rmsnorm = okv_rmsnorm_avx512, .glu = okv_glu_avx512, .add_rmsnorm = okv_add_rmsnorm_avx512, \
                   .rope_apply = okv_rope_apply_avx512

/* ---- the router ------------------------------------------------------------------ */

static bool cpu_has_avx2(void) {
    const okv_cpu_caps *c = okv_cpu();
    return c->avx2 && c->fma && c->f16c;
}

static bool cpu_has_avx512(void) {
    const okv_cpu_caps *c = okv_cpu();
    return cpu_has_avx2() && c->avx512f && c->avx512bw && c->avx512vl && c->avx512dq;
}

static okv_kcaps kcaps;
static pthread_once_t kcaps_once = PTHREAD_ONCE_INIT;

static void kcaps_read(void) {
    kcaps.avx2 = cpu_has_avx2();
    kcaps.avx512 = cpu_has_avx512();
    kcaps.avx512bf16 = kcaps.avx512 && okv_cpu()->avx512bf16;
    kcaps.vnni512 = okv_qmm_have_avx512vnni();
    kcaps.amx = okv_amx_usable(NULL);
    kcaps.amx_int8 = okv_qmm_have_amx_int8();
}

const okv_kcaps *okv_kcaps_get(void) {
    pthread_once(&kcaps_once, kcaps_read);
    return &kcaps;
}

const okv_kvariant *okv_kernels_route(const okv_kvariant *v, const okv_kshape *sh) {
    const okv_kcaps *c = okv_kcaps_get();
    while (v) {
        if (!v->name) v = v->then;
        else if (!v->fits || v->fits(sh, c)) return v;
        else v++;
    }
    return NULL;
}

const char *okv_kop_name(okv_kop op) {
    static const char *const names[OKV_KOP_COUNT] = {"matmul", "matmul_q", "matmul_qb", "attend"};
    return op >= 0 && op < OKV_KOP_COUNT ? names[op] : "?";
}

const char *okv_kernels_pick(const okv_kernels *k, okv_kop op, const okv_kshape *sh) {
    if (!k || op < 0 || op >= OKV_KOP_COUNT || !k->variants[op]) return NULL;
    const okv_kvariant *v = okv_kernels_route(k->variants[op], sh);
    return v ? v->name : NULL;
}

const char *okv_kernels_ran(const okv_threadpool *tp, char *buf, size_t n) {
    if (!buf || n == 0) return buf;
    buf[0] = '\0';
    size_t at = 0;
    for (int op = 0; op < OKV_KOP_COUNT; op++) {
        const char *names[OKV_TP_NOTES];
        int k = okv_threadpool_notes(tp, op, names, OKV_TP_NOTES);
        for (int i = 0; i < k && at < n; i++) {
            int w = snprintf(buf + at, n - at, "%s%s%s%s", i ? ", " : at ? "; " : "", i ? "" : okv_kop_name((okv_kop)op),
                             i ? "" : ": ", names[i]);
            if (w < 0) break;
            at += (size_t)w;
        }
    }
    return buf;
}

/* A router per list: the function a table (or a test naming a path) calls. */
#define MATMUL_ROUTER(fname, list)                                                                        \
    void fname(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W, okv_dtype wdt, int N, \
               const float *bias) {                                                                       \
        okv_kshape sh = {.T = T, .K = K, .N = N, .wdt = wdt};                                             \
        const okv_kvariant *v = okv_kernels_route(list, &sh);                                             \
        okv_threadpool_note(tp, OKV_KOP_MATMUL, v->name);                                                 \
        v->run.matmul(tp, y, x, T, K, W, wdt, N, bias);                                                   \
    }
#define MATMUL_Q_ROUTER(fname, list, op)                                                                  \
    void fname(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W, const okv_qscheme *s, \
               int N, const float *bias) {                                                                \
        okv_kshape sh = {.T = T, .K = K, .N = N, .s = s};                                                 \
        const okv_kvariant *v = okv_kernels_route(list, &sh);                                             \
        okv_threadpool_note(tp, op, v->name);                                                             \
        v->run.matmul_q(tp, y, x, T, K, W, s, N, bias);                                                   \
    }
#define ATTEND_ROUTER(fname, list)                                                                        \
    void fname(okv_threadpool *tp, const okv_attn_args *a) {                                              \
        okv_kshape sh = {.T = a->T, .n_heads = a->n_heads, .kv_heads = a->kv.kv_heads,                    \
                         .head_dim = a->kv.head_dim, .k_dt = a->kv.k_dtype, .v_dt = a->kv.v_dtype};       \
        const okv_kvariant *v = okv_kernels_route(list, &sh);                                             \
        okv_threadpool_note(tp, OKV_KOP_ATTEND, v->name);                                                 \
        v->run.attend(tp, a);                                                                             \
    }
#define MM(n, f, r) {.name = n, .fits = f, .run.matmul = r}
#define QM(n, f, r) {.name = n, .fits = f, .run.matmul_q = r}
#define AT(n, f, r) {.name = n, .fits = f, .run.attend = r}
#define THEN(list) {.name = NULL, .then = list}
#define END {.name = NULL, .then = NULL}

/* ---- dense matmul: fits ------------------------------------------------------------ */

/* Fewest rows for which the AVX2 packed GEMM pays (2 threads, 8192 x 2048
 * W, Zen 3, GFLOP/s packed / unpacked): bf16 T = 16 58 / 84, 32 84 / 96, 48
 * 98 / 97, 96 139 / 110, 512 ~140 / ~99 (whole layer); q8 against the
 * integer path T = 4 15 / 31, 8 28 / 25, 16 46 / 26, 512 104 / 30; q4 T =
 * 16 35 / 44, 32 56 / 57, 64 82 / 46, 512 113 / 42. Packing costs ~0.75 ns
 * (bf16) to ~1.25 ns (q4) per weight and thread, paid once per call. */
enum { AVX2_PACK_MIN_T_FLOAT = 48, AVX2_PACK_MIN_T_Q8 = 8, AVX2_PACK_MIN_T_Q4 = 32 };
/* Where the vdpbf16ps packed kernel wins on Zen 4 (2 threads, 8192x2048 and
 * 2048x2048, GFLOP/s): bf16 W, dot-product kernel vs packed at T = 2..64
 * 46-56 / 21-26 up to 297-320 / 266-287 (the packing costs ~0.7 ns per
 * weight), T = 128 317-337 / 309-328, T = 256-1024 255-359 / 271-371
 * (packed ahead in 9 of 12 rows); quantized W, VNNI vs dequantized to bf16:
 * q4 g32 at T = 128 265-299 / 294-335, q8 g32 266-298 / 195-236, at T =
 * 256-1024 q8 216-310 / 215-340 (ahead in 11 of 12 rows). */
enum { VDP_PACKED_FROM_T = 256, VDP_Q4_PACKED_FROM_T = 128, VDP_Q8_PACKED_FROM_T = 256 };
/* GGUF blocks: prompt rows from which the packed GEMMs (W dequantized
 * exactly per call, each weight reused for every row) beat the integer dots. */
enum { QB_PACK_MIN_T = 16 };
/* AMX tiles for quantized W: below one tile of rows the VNNI path (padding
 * and the per-call W repack would not pay). */
enum { AMX_Q_MIN_T = 16 };

static bool is16(okv_dtype dt) { return dt == OKV_BF16 || dt == OKV_F16; }
static bool mm_t1(const okv_kshape *sh, const okv_kcaps *c) { (void)c; return sh->T == 1; }
static bool mm_t_le1(const okv_kshape *sh, const okv_kcaps *c) {
    (void)c;
    return sh->T <= 1 || sh->N <= 0 || sh->K <= 0;
}
static bool mm_packs16(const okv_kshape *sh, const okv_kcaps *c) { /* okv_matmul_avx512_gemm_takes */
    (void)c;
    return sh->T > 1 && sh->K > 0 && sh->N > 0 && is16(sh->wdt);
}
static bool mm_avx2_packs(const okv_kshape *sh, const okv_kcaps *c) {
    return sh->T >= AVX2_PACK_MIN_T_FLOAT && mm_packs16(sh, c);
}
static bool mm_bf16_t1(const okv_kshape *sh, const okv_kcaps *c) { (void)c; return sh->T == 1 && sh->wdt == OKV_BF16; }
static bool mm_bf16_dot(const okv_kshape *sh, const okv_kcaps *c) {
    (void)c;
    return sh->wdt == OKV_BF16 && sh->T > 1 && sh->N > 0 && sh->K > 0;
}
static bool mm_dp_packs(const okv_kshape *sh, const okv_kcaps *c) { return mm_bf16_dot(sh, c); }
static bool mm_vdp_packs(const okv_kshape *sh, const okv_kcaps *c) {
    return sh->T >= VDP_PACKED_FROM_T && mm_bf16_dot(sh, c);
}
static bool mm_f16_packs(const okv_kshape *sh, const okv_kcaps *c) { return sh->wdt == OKV_F16 && mm_packs16(sh, c); }
static bool mm_t1_not_f32(const okv_kshape *sh, const okv_kcaps *c) {
    (void)c;
    return sh->T == 1 && sh->wdt != OKV_F32;
}
static bool mm_amx_tiles(const okv_kshape *sh, const okv_kcaps *c) {
    return c->amx && sh->T >= 1 && sh->wdt != OKV_F32 && sh->N > 0 && sh->K > 0;
}
static bool mm_amx_blocked(const okv_kshape *sh, const okv_kcaps *c) { return sh->T > 1 && mm_amx_tiles(sh, c); }
/* x rounded to bf16, then the AVX2 GEMV (matmul/dot_avx512.c) */
static void run_gemv_bf16x(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W, okv_dtype wdt,
                           int N, const float *bias) {
    (void)T;
    okv_matmul_gemv_bf16x(tp, y, x, K, W, wdt, N, bias);
}
static void run_gemv_bf16x_1row(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W,
                                okv_dtype wdt, int N, const float *bias) {
    (void)T;
    okv_matmul_gemv_bf16x_1row(tp, y, x, K, W, wdt, N, bias);
}

/* ---- dense matmul: lists ------------------------------------------------------------ */

/* AVX2 dot-product kernels (matmul/dot_avx2.c): the GEMV at T = 1, tiles of rows above */
static const okv_kvariant mm_avx2_dot[] = {MM("avx2-gemv", mm_t1, okv_matmul_avx2), MM("avx2-dot", NULL, okv_matmul_avx2), END};
/* the avx2 table: packed f32 FMAs from the T where packing pays */
static const okv_kvariant mm_avx2[] = {MM("avx2-packed", mm_avx2_packs, okv_mm_avx2_packed), THEN(mm_avx2_dot)};
static const okv_kvariant mm_avx2_packed_any[] = {MM("avx2-packed", mm_packs16, okv_mm_avx2_packed), THEN(mm_avx2_dot)};
/* 512-bit f32 FMAs for T > 1, the AVX2 GEMV at T = 1 */
static const okv_kvariant mm_avx512_dot[] = {MM("avx2-gemv", mm_t_le1, okv_matmul_avx2),
                                             MM("avx512-dot", NULL, okv_mm_avx512_dot), END};
/* the avx512 table: bf16 / f16 W at T > 1 packed */
static const okv_kvariant mm_avx512[] = {MM("avx512-packed", mm_packs16, okv_mm_avx512_packed), THEN(mm_avx512_dot)};
/* vdpbf16ps for bf16 W (x rounded to bf16), the rest as mm_avx512_dot */
static const okv_kvariant mm_avx512_bf16_dot[] = {MM("bf16x-gemv", mm_bf16_t1, run_gemv_bf16x),
                                                  MM("avx512bf16-dot", mm_bf16_dot, okv_mm_avx512_bf16_dot),
                                                  THEN(mm_avx512_dot)};
/* the avx512-bf16 table (vdpbf16ps at half the FMA rate): packed f32 FMAs
 * for prompts, the bf16 GEMV for decode */
static const okv_kvariant mm_avx512_bf16[] = {MM("avx512-packed", mm_packs16, okv_mm_avx512_packed),
                                              THEN(mm_avx512_bf16_dot)};
static const okv_kvariant mm_avx512_dpbf16_any[] = {MM("dpbf16-packed", mm_dp_packs, okv_mm_avx512_dpbf16_packed),
                                                    THEN(mm_avx512_bf16_dot)};
/* the avx512-vdpbf16 table (Zen 4): bf16 decode GEMV one row per pass, bf16
 * prompts packed on vdpbf16ps from VDP_PACKED_FROM_T, f16 packed on f32 FMAs
 * (exact), below that the vdpbf16ps dot tiles */
static const okv_kvariant mm_avx512_vdp[] = {MM("bf16x-gemv-1row", mm_bf16_t1, run_gemv_bf16x_1row),
                                             MM("dpbf16-packed", mm_vdp_packs, okv_mm_avx512_dpbf16_packed),
                                             MM("avx512-packed", mm_f16_packs, okv_mm_avx512_packed),
                                             THEN(mm_avx512_bf16_dot)};
/* AMX: the previous tile loop (every T >= 1), the blocked loop (T > 1), T =
 * 1 with x rounded to bf16 as the tiles round it (f16 W exact there) */
static const okv_kvariant mm_amx_tiles_l[] = {MM("amx-tiles", mm_amx_tiles, okv_mm_amx_tiles), THEN(mm_avx512_bf16_dot)};
static const okv_kvariant mm_amx_v1[] = {MM("bf16x-gemv", mm_t1_not_f32, run_gemv_bf16x), THEN(mm_amx_tiles_l)};
static const okv_kvariant mm_amx[] = {MM("amx-blocked", mm_amx_blocked, okv_mm_amx_blocked), THEN(mm_amx_v1)};
static const okv_kvariant mm_plain[] = {MM("plain", NULL, okv_matmul_plain), END};
static const okv_kvariant mm_det_avx2[] = {MM("det-avx2", NULL, okv_matmul_det), END};
/* deterministic AVX-512: bf16 W with AMX on the tiles' sums for every T
 * (decode included), else the 16-lane rule */
static bool mm_det_amx_gemv(const okv_kshape *sh, const okv_kcaps *c) {
    return c->amx && sh->wdt == OKV_BF16 && sh->T == 1 && sh->K % 32 == 0 && sh->N >= 16;
}
static bool mm_det_amx(const okv_kshape *sh, const okv_kcaps *c) { return sh->wdt == OKV_BF16 && mm_amx_tiles(sh, c); }
static const okv_kvariant mm_det_avx512[] = {MM("det-amx-gemv", mm_det_amx_gemv, okv_mm_det_amx_gemv),
                                             MM("det-amx-tiles", mm_det_amx, okv_mm_amx_tiles),
                                             MM("det-avx512", NULL, okv_mm_det_avx512), END};

static MATMUL_ROUTER(route_mm_plain, mm_plain)
MATMUL_ROUTER(okv_matmul_avx2_gemm, mm_avx2)
MATMUL_ROUTER(okv_matmul_avx2_packed, mm_avx2_packed_any)
MATMUL_ROUTER(okv_matmul_avx512, mm_avx512_dot)
MATMUL_ROUTER(okv_matmul_avx512_gemm, mm_avx512)
MATMUL_ROUTER(okv_matmul_avx512_bf16, mm_avx512_bf16_dot)
MATMUL_ROUTER(okv_matmul_avx512_bf16_gemm, mm_avx512_bf16)
MATMUL_ROUTER(okv_matmul_avx512_dpbf16, mm_avx512_dpbf16_any)
MATMUL_ROUTER(okv_matmul_avx512_vdp_gemm, mm_avx512_vdp)
MATMUL_ROUTER(okv_matmul_amx_tiles, mm_amx_tiles_l)
MATMUL_ROUTER(okv_matmul_amx_v1, mm_amx_v1)
MATMUL_ROUTER(okv_matmul_amx, mm_amx)
static MATMUL_ROUTER(route_mm_det_avx2, mm_det_avx2)
static MATMUL_ROUTER(route_mm_det_avx512, mm_det_avx512)

/* ---- quantized matmul ---------------------------------------------------------------- */

static bool q_block(const okv_kshape *sh, const okv_kcaps *c) { (void)c; return sh->s->block != OKV_QB_NONE; }
static bool q_block_vnni(const okv_kshape *sh, const okv_kcaps *c) { return c->vnni512 && q_block(sh, c); }
static bool q_block_avx2(const okv_kshape *sh, const okv_kcaps *c) { return c->avx2 && q_block(sh, c); }
static bool q_has_vnni(const okv_kshape *sh, const okv_kcaps *c) { (void)sh; return c->vnni512; }
static bool q_has_avx2(const okv_kshape *sh, const okv_kcaps *c) { (void)sh; return c->avx2; }
static bool q_packs(const okv_kshape *sh, const okv_kcaps *c) {
    (void)c;
    return okv_gemm_quant_packs(sh->T, sh->K, sh->N, sh->s);
}
static bool q_avx2_packs(const okv_kshape *sh, const okv_kcaps *c) {
    return sh->T >= (sh->s->bits == 8 ? AVX2_PACK_MIN_T_Q8 : AVX2_PACK_MIN_T_Q4) && q_packs(sh, c);
}
static bool q_vdp_packs(const okv_kshape *sh, const okv_kcaps *c) {
    return sh->T >= (sh->s->bits == 4 ? VDP_Q4_PACKED_FROM_T : VDP_Q8_PACKED_FROM_T) && q_packs(sh, c);
}
static bool q_vnni_t1(const okv_kshape *sh, const okv_kcaps *c) { return sh->T == 1 && c->vnni512; }
static bool q_amx_bf16_any(const okv_kshape *sh, const okv_kcaps *c) {
    return c->amx && sh->T > 1 && sh->N > 0 && sh->K > 0 && sh->K % 32 == 0;
}
static bool q_amx_bf16(const okv_kshape *sh, const okv_kcaps *c) { return sh->T >= AMX_Q_MIN_T && q_amx_bf16_any(sh, c); }
static bool q_amx_int8(const okv_kshape *sh, const okv_kcaps *c) { return c->amx_int8 && sh->T >= 2 && sh->N > 0; }
static bool qb_pack(const okv_kshape *sh, const okv_kcaps *c) { return sh->T >= QB_PACK_MIN_T && q_packs(sh, c); }

/* The integer-dot kernels, best first: GGUF blocks on the block driver,
 * offkv planes on VNNI, AVX2, plain (qmatmul/int_*.c, qmatmul/block_*.c). */
static const okv_kvariant q_int[] = {QM("qb-int-avx512", q_block_vnni, okv_qbmm_int_avx512),
                                     QM("qb-int-avx2", q_block_avx2, okv_qbmm_int_avx2),
                                     QM("qb-int-plain", q_block, okv_matmul_qb_int_plain),
                                     QM("q-int-avx512vnni", q_has_vnni, okv_matmul_q_avx512vnni),
                                     QM("q-int-avx2", q_has_avx2, okv_matmul_q_avx2),
                                     QM("q-plain", NULL, okv_matmul_q_plain), END};
static const okv_kvariant qb_int[] = {QM("qb-int-avx512", q_has_vnni, okv_qbmm_int_avx512),
                                      QM("qb-int-avx2", q_has_avx2, okv_qbmm_int_avx2),
                                      QM("qb-int-plain", NULL, okv_matmul_qb_int_plain), END};
static const okv_kvariant q_plain[] = {QM("q-plain", NULL, okv_matmul_q_plain), END};
/* the avx2 table: W dequantized to f32 into the packed GEMM from the T where it pays */
static const okv_kvariant q_avx2[] = {QM("avx2-packed", q_avx2_packs, okv_qmm_avx2_packed), THEN(q_int)};
static const okv_kvariant q_avx2_any[] = {QM("avx2-packed", q_packs, okv_qmm_avx2_packed), THEN(q_int)};
static const okv_kvariant q_avx512_any[] = {QM("avx512-packed", q_packs, okv_qmm_avx512_packed), THEN(q_int)};
static const okv_kvariant q_dpbf16_any[] = {QM("dpbf16-packed", q_packs, okv_qmm_avx512_dpbf16_packed), THEN(q_int)};
/* the avx512-vdpbf16 table: W dequantized to bf16 for vdpbf16ps from the T
 * where it beats VNNI; the decode GEMV one W row per pass */
static const okv_kvariant q_vdp[] = {QM("dpbf16-packed", q_vdp_packs, okv_qmm_avx512_dpbf16_packed),
                                     QM("q-int-avx512vnni-1row", q_vnni_t1, okv_matmul_q_avx512vnni_1row), THEN(q_int)};
static const okv_kvariant q_amx_bf16_l[] = {QM("amx-bf16-dequant", q_amx_bf16_any, okv_qmm_amx_bf16), THEN(q_int)};
static const okv_kvariant q_amx[] = {QM("amx-bf16-dequant", q_amx_bf16, okv_qmm_amx_bf16), THEN(q_int)};
static const okv_kvariant q_amx_tiles_l[] = {QM("amx-int8", q_amx_int8, okv_qmm_amx_int8), THEN(q_int)};
static bool q_det_amx(const okv_kshape *sh, const okv_kcaps *c) { return sh->T >= 16 && q_amx_int8(sh, c); }
static const okv_kvariant q_det[] = {QM("det-amx-int8", q_det_amx, okv_qmm_amx_int8),
                                     QM("det-int", NULL, okv_qmm_det_int), END};
/* GGUF blocks: prompts from QB_PACK_MIN_T rows on the ISA's packed GEMM */
static const okv_kvariant qb_avx2[] = {QM("avx2-packed", qb_pack, okv_qmm_avx2_packed),
                                       QM("qb-int-avx2", q_has_avx2, okv_qbmm_int_avx2),
                                       QM("qb-int-plain", NULL, okv_matmul_qb_int_plain), END};
static const okv_kvariant qb_avx512[] = {QM("avx512-packed", qb_pack, okv_qmm_avx512_packed), THEN(qb_int)};
static const okv_kvariant qb_vdp[] = {QM("dpbf16-packed", qb_pack, okv_qmm_avx512_dpbf16_packed), THEN(qb_int)};

static MATMUL_Q_ROUTER(route_q_plain, q_plain, OKV_KOP_MATMUL_Q)
static MATMUL_Q_ROUTER(route_qb_plain, q_plain, OKV_KOP_MATMUL_QB)
MATMUL_Q_ROUTER(okv_matmul_q_best, q_int, OKV_KOP_MATMUL_Q)
MATMUL_Q_ROUTER(okv_matmul_q_avx2_gemm, q_avx2, OKV_KOP_MATMUL_Q)
MATMUL_Q_ROUTER(okv_matmul_q_avx2_packed, q_avx2_any, OKV_KOP_MATMUL_Q)
MATMUL_Q_ROUTER(okv_matmul_q_avx512_gemm, q_int, OKV_KOP_MATMUL_Q)
MATMUL_Q_ROUTER(okv_matmul_q_avx512_packed, q_avx512_any, OKV_KOP_MATMUL_Q)
MATMUL_Q_ROUTER(okv_matmul_q_avx512_dpbf16, q_dpbf16_any, OKV_KOP_MATMUL_Q)
MATMUL_Q_ROUTER(okv_matmul_q_avx512_vdp_gemm, q_vdp, OKV_KOP_MATMUL_Q)
MATMUL_Q_ROUTER(okv_matmul_q_amx_bf16, q_amx_bf16_l, OKV_KOP_MATMUL_Q)
MATMUL_Q_ROUTER(okv_matmul_q_amx, q_amx, OKV_KOP_MATMUL_Q)
MATMUL_Q_ROUTER(okv_matmul_q_amx_tiles, q_amx_tiles_l, OKV_KOP_MATMUL_Q)
static MATMUL_Q_ROUTER(route_q_det, q_det, OKV_KOP_MATMUL_Q)
MATMUL_Q_ROUTER(okv_matmul_qb_int_best, qb_int, OKV_KOP_MATMUL_QB)
MATMUL_Q_ROUTER(okv_matmul_qb_avx2, qb_avx2, OKV_KOP_MATMUL_QB)
MATMUL_Q_ROUTER(okv_matmul_qb_avx512, qb_avx512, OKV_KOP_MATMUL_QB)
MATMUL_Q_ROUTER(okv_matmul_qb_avx512_vdp, qb_vdp, OKV_KOP_MATMUL_QB)

/* ---- attention ------------------------------------------------------------------------ */

static bool at_decode_avx2(const okv_kshape *sh, const okv_kcaps *c) {
    (void)c;
    return okv_attend_decode_avx2_fits(sh->T, sh->n_heads, sh->kv_heads, sh->head_dim, sh->k_dt, sh->v_dt);
}
static bool at_decode_dpbf16(const okv_kshape *sh, const okv_kcaps *c) {
    (void)c;
    return okv_attend_decode_dpbf16_fits(sh->T, sh->n_heads, sh->kv_heads, sh->head_dim, sh->k_dt, sh->v_dt);
}
static bool at_decode_amx(const okv_kshape *sh, const okv_kcaps *c) {
    (void)c;
    return okv_attend_decode_amx_fits(sh->T, sh->n_heads, sh->kv_heads, sh->head_dim, sh->k_dt, sh->v_dt);
}
static bool at_prefill16(const okv_kshape *sh, const okv_kcaps *c) {
    (void)c;
    return okv_attend_prefill16_fits(sh->T, sh->n_heads, sh->kv_heads, sh->head_dim, sh->k_dt, sh->v_dt);
}
static bool at_prefill_amx(const okv_kshape *sh, const okv_kcaps *c) { return c->amx && at_prefill16(sh, c); }

static const okv_kvariant at_plain[] = {AT("plain", NULL, okv_attend_plain), END};
/* the avx2 table: decode-sized calls over f32/bf16/f16 pools on the key-split
 * decode kernel, the rest (prefill chunks, q8 pools) on the blocked one */
static const okv_kvariant at_avx2[] = {AT("decode-avx2", at_decode_avx2, okv_attend_decode_avx2),
                                       AT("blocked-avx2", NULL, okv_attend_avx2), END};
static const okv_kvariant at_avx512[] = {AT("blocked-avx512", NULL, okv_attend_avx512), END};
/* AVX-512 BF16 without AMX (e.g. Zen 4): decode on vdpbf16ps, prefill chunks
 * over 16-bit or q8 pools on the prefill kernel's vdpbf16ps products, the
 * rest (f32 pools, odd head_dims) blocked */
static const okv_kvariant at_avx512_bf16[] = {AT("decode-dpbf16", at_decode_dpbf16, okv_attend_decode_dpbf16),
                                              AT("prefill-dpbf16", at_prefill16, okv_attend_prefill_dpbf16),
                                              AT("blocked-avx512", NULL, okv_attend_avx512), END};
/* the decode kernels alone: AMX score tiles where they fit, else vdpbf16ps */
static const okv_kvariant at_decode[] = {AT("decode-amx", at_decode_amx, okv_attend_decode_amx),
                                         AT("decode-dpbf16", NULL, okv_attend_decode_dpbf16), END};
/* AMX: prefill chunks on tiles, decode on AMX score tiles or vdpbf16ps */
static const okv_kvariant at_amx[] = {AT("prefill-amx", at_prefill_amx, okv_attend_amx_tiles),
                                      AT("decode-amx", at_decode_amx, okv_attend_decode_amx),
                                      AT("decode-dpbf16", at_decode_dpbf16, okv_attend_decode_dpbf16),
                                      AT("blocked-avx512", NULL, okv_attend_avx512), END};
static const okv_kvariant at_det_plain[] = {AT("det-plain", NULL, okv_attend_det_plain), END};
static const okv_kvariant at_det_avx2[] = {AT("det-avx2", NULL, okv_attend_det_avx2), END};
static const okv_kvariant at_det_avx512[] = {AT("det-avx512", NULL, okv_attend_det_avx512), END};

static ATTEND_ROUTER(route_at_plain, at_plain)
ATTEND_ROUTER(okv_attend_avx2_dec, at_avx2)
static ATTEND_ROUTER(route_at_avx512, at_avx512)
ATTEND_ROUTER(okv_attend_avx512_bf16, at_avx512_bf16)
ATTEND_ROUTER(okv_attend_decode, at_decode)
ATTEND_ROUTER(okv_attend_amx, at_amx)
static ATTEND_ROUTER(route_at_det_plain, at_det_plain)
static ATTEND_ROUTER(route_at_det_avx2, at_det_avx2)
static ATTEND_ROUTER(route_at_det_avx512, at_det_avx512)

/* ---- the tables ------------------------------------------------------------------------ */

#define VARIANTS(mm, q, qb, at) .variants = {[OKV_KOP_MATMUL] = mm, [OKV_KOP_MATMUL_Q] = q, [OKV_KOP_MATMUL_QB] = qb, \
                                             [OKV_KOP_ATTEND] = at}

static const okv_kernels kernels_plain = {
    .isa = OKV_ISA_PLAIN, .name = "plain", VARIANTS(mm_plain, q_plain, q_plain, at_plain), .matmul = route_mm_plain,
    OPS_PLAIN, .attend = route_at_plain, .matmul_q = route_q_plain, .matmul_qb = route_qb_plain,
};

/* AVX2 + FMA (Zen 2/3, Haswell...): prompt matmuls of bf16 / f16 and
 * quantized weights on packed f32 FMAs, the decode GEMV on the dot-product
 * kernels and integer dots for quantized W; decode attention on the AVX2
 * key-split kernel. */
static const okv_kernels kernels_avx2 = {
    .isa = OKV_ISA_AVX2, .name = "avx2", VARIANTS(mm_avx2, q_avx2, qb_avx2, at_avx2), .matmul = okv_matmul_avx2_gemm,
    OPS_AVX2, .attend = okv_attend_avx2_dec, .matmul_q = okv_matmul_q_avx2_gemm, .matmul_qb = okv_matmul_qb_avx2,
    .matmul_qb_x8 = okv_qb_x8_avx2,
};

/* AVX-512 without BF16 instructions (e.g. Skylake-SP): f32 FMAs for all;
 * the row-wise ops on 512-bit vectors (ops/ops_simd.c). */
static const okv_kernels kernels_avx512 = {
    .isa = OKV_ISA_AVX512, .name = "avx512", VARIANTS(mm_avx512, q_int, qb_avx512, at_avx512),
    .matmul = okv_matmul_avx512_gemm, OPS_AVX512, .attend = route_at_avx512, .matmul_q = okv_matmul_q_avx512_gemm,
    .matmul_qb = okv_matmul_qb_avx512, .matmul_qb_x8 = okv_qb_x8_best,
};

/* AVX-512 with vdpbf16ps (Sapphire Rapids without AMX): prefill of bf16 /
 * f16 weights on packed f32 FMAs, quantized weights on VNNI, the decode
 * GEMV of bf16 weights on vdpbf16ps with x rounded to bf16; decode
 * attention over bf16/f16 pools on vdpbf16ps. */
static const okv_kernels kernels_avx512_bf16 = {
    .isa = OKV_ISA_AVX512, .name = "avx512-bf16", VARIANTS(mm_avx512_bf16, q_int, qb_avx512, at_avx512_bf16),
    .matmul = okv_matmul_avx512_bf16_gemm, OPS_AVX512, .attend = okv_attend_avx512_bf16,
    .matmul_q = okv_matmul_q_avx512_gemm, .matmul_qb = okv_matmul_qb_avx512, .matmul_qb_x8 = okv_qb_x8_best,
    .matmul_rounding = {[OKV_BF16] = 0x1p-8f}, .attend_bf16 = true,
};

/* AVX-512 BF16 where vdpbf16ps runs at the f32 FMA's instruction rate
 * (Zen 4: twice its flops; okv_cpu_caps.vdpbf16_full_rate): bf16 prefill on
 * vdpbf16ps and quantized prefill on the same packed kernel with W
 * dequantized to bf16, small T of quantized W on VNNI; f16 W on the f32
 * packed GEMM (exact); decode as avx512-bf16. */
static const okv_kernels kernels_avx512_vdpbf16 = {
    .isa = OKV_ISA_AVX512, .name = "avx512-vdpbf16", VARIANTS(mm_avx512_vdp, q_vdp, qb_vdp, at_avx512_bf16),
    .matmul = okv_matmul_avx512_vdp_gemm, OPS_AVX512, .attend = okv_attend_avx512_bf16,
    .matmul_q = okv_matmul_q_avx512_vdp_gemm, .matmul_qb = okv_matmul_qb_avx512_vdp, .matmul_qb_x8 = okv_qb_x8_best,
    .matmul_rounding = {[OKV_BF16] = 0x1p-8f}, .attend_bf16 = true,
};

static const okv_kernels kernels_amx = {
    .isa = OKV_ISA_AMX, .name = "amx-bf16", VARIANTS(mm_amx, q_amx, qb_avx512, at_amx), .matmul = okv_matmul_amx,
    OPS_AVX512, .attend = okv_attend_amx, .matmul_q = okv_matmul_q_amx, .matmul_qb = okv_matmul_qb_avx512,
    .matmul_qb_x8 = okv_qb_x8_best, .matmul_rounding = {[OKV_BF16] = 0x1p-8f, [OKV_F16] = 0x1p-7f},
    .attend_bf16 = true,
};

/* Batch-invariant (matmul/det.c): one matmul per weight dtype for every T. */
static const okv_kernels kernels_det = {
    .isa = OKV_ISA_AVX2, .name = "deterministic-avx2", VARIANTS(mm_det_avx2, q_det, qb_int, at_det_avx2),
    .matmul = route_mm_det_avx2, OPS_AVX2, .attend = route_at_det_avx2, .matmul_q = route_q_det,
    .matmul_qb = okv_matmul_qb_int_best, .matmul_qb_x8 = okv_qb_x8_best,
};
static const okv_kernels kernels_det_plain = {
    .isa = OKV_ISA_PLAIN, .name = "deterministic-plain", VARIANTS(mm_plain, q_plain, q_plain, at_det_plain),
    .matmul = route_mm_plain, OPS_PLAIN, .attend = route_at_det_plain, .matmul_q = route_q_plain,
    .matmul_qb = route_qb_plain,
};
static const okv_kernels kernels_det_avx512 = {
    .isa = OKV_ISA_AVX512, .name = "deterministic-avx512", VARIANTS(mm_det_avx512, q_det, qb_int, at_det_avx512),
    .matmul = route_mm_det_avx512, OPS_AVX512, .attend = route_at_det_avx512, .matmul_q = route_q_det,
    .matmul_qb = okv_matmul_qb_int_best, .matmul_qb_x8 = okv_qb_x8_best,
};

/* OKV_KERNELS=plain|avx2|avx512|amx caps OKV_ISA_AUTO (unset or unknown: no cap). */
static okv_isa isa_cap(void) {
    const char *e = getenv("OKV_KERNELS");
    if (!e) return OKV_ISA_AMX;
    if (!strcmp(e, "plain")) return OKV_ISA_PLAIN;
    if (!strcmp(e, "avx2")) return OKV_ISA_AVX2;
    if (!strcmp(e, "avx512")) return OKV_ISA_AVX512;
    return OKV_ISA_AMX;
}

const okv_kernels *okv_kernels_select(okv_isa isa) {
    if (isa == OKV_ISA_AUTO) isa = isa_cap();
    if (isa == OKV_ISA_PLAIN || !cpu_has_avx2()) return &kernels_plain;
    if (isa == OKV_ISA_AVX2 || !cpu_has_avx512()) return &kernels_avx2;
    if (isa == OKV_ISA_AMX && okv_amx_usable(NULL)) return &kernels_amx;
    if (!okv_cpu()->avx512bf16) return &kernels_avx512;
    return okv_cpu()->vdpbf16_full_rate ? &kernels_avx512_vdpbf16 : &kernels_avx512_bf16;
}

const okv_kernels *okv_kernels_select_deterministic(okv_isa isa) {
    const okv_kernels *k = okv_kernels_select(isa);
    if (k == &kernels_plain) return &kernels_det_plain; /* plain matmuls: one dot per output, already invariant */
    return k == &kernels_avx2 ? &kernels_det : &kernels_det_avx512;
}

/* One line per table, built once (the AMX answer does not change). */
enum { N_TABLES = 9 };
static char describe_buf[N_TABLES][192];
static pthread_once_t describe_once = PTHREAD_ONCE_INIT;
static const okv_kernels *const all_tables[N_TABLES] = {&kernels_plain, &kernels_avx2, &kernels_avx512,
                                                         &kernels_avx512_bf16, &kernels_avx512_vdpbf16, &kernels_amx,
                                                         &kernels_det,
                                                         &kernels_det_avx512, &kernels_det_plain};

static void build_descriptions(void) {
    const char *why;
    okv_amx_usable(&why);
    for (int i = 0; i < N_TABLES; i++) snprintf(describe_buf[i], sizeof describe_buf[i], "%s (amx: %s)", all_tables[i]->name, why);
}

const char *okv_kernels_describe(const okv_kernels *k) {
    pthread_once(&describe_once, build_descriptions);
    for (int i = 0; i < N_TABLES; i++)
        if (all_tables[i] == k) return describe_buf[i];
    return k->name;
}

/* Every table, for tests that walk all variant lists. */
int okv_kernels_all(const okv_kernels **out, int max) {
    int n = max < N_TABLES ? max : N_TABLES;
    for (int i = 0; i < n; i++) out[i] = all_tables[i];
    return N_TABLES;
}

/* ---- scratch plans ------------------------------------------------------------ */

static size_t max_size(size_t a, size_t b) { return a > b ? a : b; }

size_t okv_matmul_scratch_bytes(int T, int K, int N, okv_dtype wdt, int n_threads) {
    if (T <= 0 || K <= 0 || N <= 0) return 0;
    if (n_threads < 1) n_threads = 1;
    size_t b = okv_matmul_plain_scratch(K, wdt, n_threads);
    b = max_size(b, okv_matmul_avx512_scratch(T, K));
    b = max_size(b, okv_matmul_avx512_gemm_scratch(T, K, N, n_threads));
    b = max_size(b, okv_matmul_avx512_dpbf16_scratch(T, K, N, n_threads));
    b = max_size(b, okv_matmul_avx2_gemm_scratch(T, K, N, n_threads));
    return max_size(b, okv_matmul_amx_scratch(T, K, N, n_threads));
}

size_t okv_matmul_q_scratch_bytes(int T, int K, int N, const okv_qscheme *s, int n_threads) {
    if (T <= 0 || K <= 0 || N <= 0 || !s || s->group <= 0) return 0;
    if (n_threads < 1) n_threads = 1;
    int groups = K / s->group;
    size_t b = max_size(okv_matmul_q_plain_scratch(K, n_threads), okv_qmm_scratch(T, K, groups));
    b = max_size(b, okv_qbmm_scratch(T, K));
    b = max_size(b, okv_matmul_q_amx_scratch(T, K, N, s, n_threads));
    b = max_size(b, okv_matmul_avx2_gemm_scratch(T, K, N, n_threads));
    b = max_size(b, okv_matmul_avx512_gemm_scratch(T, K, N, n_threads));
    b = max_size(b, okv_matmul_avx512_dpbf16_scratch(T, K, N, n_threads));
    return max_size(b, sizeof(float) * ((size_t)K + groups)); /* okv_matmul_q_avx512_f32 */
}
