/* okv_kernels.c — the kernel tables and the run-time choice between them.
 *
 * A table is an immutable struct of function pointers per ISA; selecting one
 * only asks the CPU what it supports (no global switch, no init call), so a
 * test can hold the plain and the AVX2 table side by side and compare. The
 * AVX-512 and AMX tables differ from AVX2 in the prefill matmul (T > 1) and
 * the attention's inner loops (512-bit: attention is compute-bound at long
 * prefill) and in the row-wise ops (rmsnorm, add_rmsnorm, glu, rope_apply:
 * okv_ops_simd.c: 1.4-9x faster at decode sizes, rope and add + rmsnorm
 * 2-4x at pp512, where the GLU is at the memory wall on either path); the
 * decode GEMV is the AVX2 one. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "okv_kernels_internal.h"

/* The row-wise ops per ISA (okv_ops.c, okv_ops_simd.c): every table of an
 * ISA gets the same ones, so the fused and unfused steps agree. */
#define OPS_PLAIN .rmsnorm = okv_rmsnorm_plain, .glu = okv_glu_plain, .add_rmsnorm = okv_add_rmsnorm_plain, \
                  .rope_apply = okv_rope_apply
#define OPS_AVX2 .rmsnorm = okv_rmsnorm_avx2, .glu = okv_glu_avx2, .add_rmsnorm = okv_add_rmsnorm_avx2, \
                 .rope_apply = okv_rope_apply_avx2
#define OPS_AVX512 .rmsnorm = okv_rmsnorm_avx512, .glu = okv_glu_avx512, .add_rmsnorm = okv_add_rmsnorm_avx512, \
                   .rope_apply = okv_rope_apply_avx512

static const okv_kernels kernels_plain = {
    .isa = OKV_ISA_PLAIN, .name = "plain", .matmul = okv_matmul_plain, OPS_PLAIN,
    .attend = okv_attend_plain, .matmul_q = okv_matmul_q_plain, .matmul_qb = okv_matmul_q_plain,
};

/* AVX2 + FMA (Zen 2/3, Haswell...): prompt matmuls (T > 1) of bf16 / f16
 * and quantized weights on packed f32 FMAs (okv_kernels_avx2_gemm.c), the
 * decode GEMV on the dot-product kernels (okv_kernels_avx2.c) and integer
 * dots for quantized W (okv_qmatmul_avx2.c); decode attention on the AVX2
 * key-split kernel (okv_attend_decode.c), the rest on the blocked one. */
static const okv_kernels kernels_avx2 = {
    .isa = OKV_ISA_AVX2, .name = "avx2", .matmul = okv_matmul_avx2_gemm, OPS_AVX2,
    .attend = okv_attend_avx2_dec, .matmul_q = okv_matmul_q_avx2_gemm, .matmul_qb = okv_matmul_qb_avx2, .matmul_qb_x8 = okv_qb_x8_avx2,
};

/* AVX-512 without BF16 instructions (e.g. Skylake-SP): f32 FMAs for all. */
static const okv_kernels kernels_avx512 = {
    .isa = OKV_ISA_AVX512, .name = "avx512", .matmul = okv_matmul_avx512_gemm, OPS_AVX512,
    .attend = okv_attend_avx512, .matmul_q = okv_matmul_q_avx512_gemm, .matmul_qb = okv_matmul_qb_avx512, .matmul_qb_x8 = okv_qb_x8_best,
};

/* AVX-512 with vdpbf16ps (Zen 4, Sapphire Rapids without AMX): prefill of
 * bf16 / f16 weights on packed f32 FMAs (okv_kernels_avx512_gemm.c),
 * quantized weights on the VNNI integer path (okv_qmatmul_avx512.c), decode
 * GEMV of bf16 weights on vdpbf16ps with x rounded to bf16;
 * decode attention over bf16/f16 pools on vdpbf16ps (okv_attend_decode.c). */
static const okv_kernels kernels_avx512_bf16 = {
    .isa = OKV_ISA_AVX512, .name = "avx512-bf16", .matmul = okv_matmul_avx512_bf16_gemm, OPS_AVX512,
    .attend = okv_attend_avx512_bf16, .matmul_q = okv_matmul_q_avx512_gemm, .matmul_qb = okv_matmul_qb_avx512, .matmul_qb_x8 = okv_qb_x8_best,
    .matmul_rounding = {[OKV_BF16] = 0x1p-8f}, .attend_bf16 = true,
};

/* AVX-512 BF16 where vdpbf16ps runs at the f32 FMA's instruction rate
 * (Zen 4: twice its flops; okv_cpu_caps.vdpbf16_full_rate): bf16 prefill on
 * vdpbf16ps and quantized prefill on the same packed kernel with W
 * dequantized to bf16 (okv_kernels_avx512_dpbf16.c), small T of quantized
 * W on VNNI; f16 W on the f32 packed GEMM (exact); decode as avx512-bf16. */
static const okv_kernels kernels_avx512_vdpbf16 = {
    .isa = OKV_ISA_AVX512, .name = "avx512-vdpbf16", .matmul = okv_matmul_avx512_vdp_gemm, OPS_AVX512,
    .attend = okv_attend_avx512_bf16, .matmul_q = okv_matmul_q_avx512_vdp_gemm, .matmul_qb = okv_matmul_qb_avx512_vdp, .matmul_qb_x8 = okv_qb_x8_best,
    .matmul_rounding = {[OKV_BF16] = 0x1p-8f}, .attend_bf16 = true,
};

static const okv_kernels kernels_amx = {
    .isa = OKV_ISA_AMX, .name = "amx-bf16", .matmul = okv_matmul_amx, OPS_AVX512,
    .attend = okv_attend_amx, .matmul_q = okv_matmul_q_amx, .matmul_qb = okv_matmul_qb_avx512, .matmul_qb_x8 = okv_qb_x8_best,
    .matmul_rounding = {[OKV_BF16] = 0x1p-8f, [OKV_F16] = 0x1p-7f}, .attend_bf16 = true,
};

/* Batch-invariant (okv_kernels_det.c): one matmul per weight dtype for every T. */
static const okv_kernels kernels_det = {
    .isa = OKV_ISA_AVX2, .name = "deterministic-avx2", .matmul = okv_matmul_det, OPS_AVX2,
    .attend = okv_attend_det_avx2, .matmul_q = okv_matmul_q_det, .matmul_qb = okv_matmul_qb_int_best, .matmul_qb_x8 = okv_qb_x8_best,
};
static const okv_kernels kernels_det_plain = {
    .isa = OKV_ISA_PLAIN, .name = "deterministic-plain", .matmul = okv_matmul_plain, OPS_PLAIN,
    .attend = okv_attend_det_plain, .matmul_q = okv_matmul_q_plain, .matmul_qb = okv_matmul_q_plain,
};
static const okv_kernels kernels_det_avx512 = {
    .isa = OKV_ISA_AVX512, .name = "deterministic-avx512", .matmul = okv_matmul_det_avx512, OPS_AVX512,
    .attend = okv_attend_det_avx512, .matmul_q = okv_matmul_q_det, .matmul_qb = okv_matmul_qb_int_best, .matmul_qb_x8 = okv_qb_x8_best,
};

static bool cpu_has_avx2(void) {
    const okv_cpu_caps *c = okv_cpu();
    return c->avx2 && c->fma && c->f16c;
}

static bool cpu_has_avx512(void) {
    const okv_cpu_caps *c = okv_cpu();
    return cpu_has_avx2() && c->avx512f && c->avx512bw && c->avx512vl && c->avx512dq;
}

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
