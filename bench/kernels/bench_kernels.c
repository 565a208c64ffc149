/* bench_kernels.c — how fast the kernels are on this machine, measured
 * against what the machine can do.
 *
 *   1. memory read bandwidth: sum over a 1 GiB buffer, 1 and 2 threads
 *   2. decode GEMV (T = 1) for 2048x8192 and 8192x2048 weights in f32/bf16/f16:
 *      GB/s of weights streamed and the fraction of measured bandwidth
 *   3. prefill matmul (T = 128): GFLOP/s
 *   4. attention decode over 4k keys
 *   5. thread pool dispatch latency
 *   6. the core's FMA peak with 256-bit and 512-bit vectors (why there is no
 *      AVX-512 path: Zen 4 runs 512-bit FMAs as two 256-bit halves), and
 *      the peak of each path a bf16 GEMM can take (512-bit f32 FMA,
 *      vdpbf16ps, AMX tdpbf16ps) on one core and on both pool threads at
 *      once (the denominator of issue 12's "pp512 >= 60% of peak")
 *   7. decode: the GEMVs of one Llama-3.2-1B token (q k v o gate up down per
 *      layer, then the 128256-row LM head) in bf16 on 2 threads, each shape
 *      alone and as back-to-back layers, as GB/s and an estimated tok/s
 *   8. quantized (okv_quant.h) decode GEMV on the Llama-3.2-1B shapes, q8
 *      and q4, each path side by side with bf16 and with the read-bandwidth
 *      probe in the same loop (medians: this VM's bandwidth flips between
 *      two states), as GB/s of bytes really read; and the prefill GEMM
 *      (T = 512) in GFLOP/s next to bf16's
 *
 *  10. attnlong: attention of the Llama-3.2-1B geometry (32/8 heads x 64) at
 *      512/4k/16k/32k positions, a decode step and the prefill of the last
 *      512 tokens (one T = 512 call), flat cache and ring (window 4096, 4607
 *      slots), the previous kernel (attend_v1.c) and the blocked one
 *      interleaved rep by rep on the same data, medians, 2 threads;
 *      attnlongcpu: the same on one thread by CPU time, old vs AVX-512 vs AMX
 *
 *  11. attnkv: KV storage A/B for the same attention (Llama-3.2-1B geometry,
 *      flat cache): the same random K/V stored as bf16, q8 and f32, a decode
 *      step and a prefill-512 call at 512/4k/16k/32k positions, the dtypes
 *      interleaved rep by rep, medians, 2 threads; q8/bf16 time ratio and
 *      q8's max |diff| from f32 storage
 *
 *  12. attndecode: a whole decode step's attention of Llama-3.2-1B (16 layers,
 *      each its own pool: 512 MiB of bf16 K/V at 16k positions) at 512/4k/16k
 *      positions and with K/V hot in cache, the decode kernels (dpbf16 =
 *      the vdpbf16ps one the AMX kernel replaced, kept for Zen 4; the
 *      blocked AVX-512 one for q8) interleaved with a read-bandwidth probe
 *      over the same pools; medians of wall and process CPU time, the
 *      probe's time over each kernel's; `q8` for q8 KV, `1t` one thread,
 *      `16k` / `hot` one row only
 *
 *  13. ops: the row-wise ops (GLU, RoPE, add + RMSNorm, RMSNorm) at pp512 and
 *      decode sizes, old and new paths interleaved, one thread by CPU time,
 *      next to a memory roof (bench_ops.c)
 *  14. decodestep: the GEMVs of one Llama-3.2-1B decode step for the bf16,
 *      q8 and q4 programs (every matrix in its own memory), each step
 *      alternating with a sum over the same bytes; bf16 also on the previous
 *      AVX2 GEMV and the deterministic table's AMX T = 1 form
 *
 *  15. attnamx: the AMX prefill attention (okv_attend_amx_tiles; its vdpbf16ps
 *      form where AMX is absent or OKV_KERNELS caps it off) against the
 *      blocked AVX-512 kernel (okv_attend_avx512), interleaved rep by rep on
 *      the same data, medians: the T = 512 calls of pp512 (512 positions
 *      from 0) and of the last 512 at 4k/16k (flat) and 16k (ring, window
 *      4096), one thread by CPU time, then 2 threads by wall time
 *
 *  16. amxceiling: one thread, round by round: the tdpbf16ps probe, the
 *      GEMM's 2x2 step with its four tile loads (operands in L1), and
 *      okv_matmul_amx on the gate shape; medians and per-round ratios
 *  18. amxmix: one thread, whether 512-bit FMAs run beside tdpbf16ps (four
 *      products with 32..256 independent FMAs per iteration, alone and
 *      together) and what a tile store costs: the model behind the AMX
 *      attention's stage costs (attend/prefill16.c)
 *  17. onednn (only when built against the peers, bench/peer/onednn.sh):
 *      okv_matmul_amx beside oneDNN's matmul (W in place, W repacked) and
 *      oneMKL's cblas_gemm_bf16bf16f32 on the Llama-3.2-1B prefill shapes,
 *      call by call with the tdpbf16ps probe, 1 and 2 threads
 *
 *  19. qbgemv: the GGUF block-weight decode GEMV (okv_qbmm_run, T = 1) for
 *      each block type on 2048x2048, 8192x2048 and 2048x8192, on 2 threads,
 *      each okv_qb_isa this CPU has (plain, avx2, avx512) rep by rep on
 *      rotating copies, medians next to the read-bandwidth probe
 *
 *   9. pp512: the prefill matmuls of Llama-3.2-1B at T=512 (q k v o gate up
 *      down) per weight dtype and per path (avx2, avx512 f32 FMA, avx512
 *      vdpbf16ps, amx tiles), interleaved round by round, median GFLOP/s of
 *      each shape and of a whole layer (amx-v1 = the previous AMX loop); then
 *      the peaks of section 6 and the layer as a percentage of the best
 *      path's (2-thread peak for the 2-thread table, one-core for pp512cpu)
 *
 * Usage: bench_kernels [--quick] [bw] [gemv] [prefill] [attn] [pool] [peak]
 * [decode] [qgemv] [qgemm] [qgemmcpu] [qlayout] [qroof] [pp512] [pp512cpu] [attnlong] [attnlongcpu] [--kv f32|f16|bf16] [attnkv] [ops] [decodestep] [attnamx]
 * [attndecode [q8|vq8] [1t] [16k|hot]] [amxceiling] [amxmix] [onednn] [qbgemv]
 * (default: all sections but attnlong, attndecode, ops, attnamx, amxmix, qbgemv and pp512cpu, which is pp512 on one thread timed by its CPU time,
 * for an overloaded machine). Best of N repetitions everywhere; weights
 * rotate through enough copies that no GEMV is served from the 32 MiB L3. */
#include <immintrin.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attend_v1.h"
#include "okv_common.h"
#include "okv_kernels.h"
#include "okv_kernels_internal.h"
#ifdef OKV_PEER_ONEDNN
#include "peer_onednn.h"
#endif

void bench_ops(int quick); /* 13, bench_ops.c */

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* CPU seconds of the calling thread: on a shared, overloaded machine this
 * still measures the work of a 1-thread run (time descheduled not counted). */
static double thread_cpu(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t rng = 88172645463325252ull;
static float frand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 40) * (1.0 / 8388608.0)) - 1.0f;
}

/* ---- 1. memory bandwidth ---------------------------------------------------------- */

typedef struct sum_job {
    const float *buf;
    size_t n;
    int parts;
    float result[64];
} sum_job;

__attribute__((target("avx2"))) static float sum_range(const float *p, size_t n) {
    __m256 a = _mm256_setzero_ps(), b = a, c = a, d = a;
    for (size_t i = 0; i + 32 <= n; i += 32) {
        a = _mm256_add_ps(a, _mm256_load_ps(p + i));
        b = _mm256_add_ps(b, _mm256_load_ps(p + i + 8));
        c = _mm256_add_ps(c, _mm256_load_ps(p + i + 16));
        d = _mm256_add_ps(d, _mm256_load_ps(p + i + 24));
    }
    float out[8];
    _mm256_storeu_ps(out, _mm256_add_ps(_mm256_add_ps(a, b), _mm256_add_ps(c, d)));
    return out[0] + out[1] + out[2] + out[3] + out[4] + out[5] + out[6] + out[7];
}

static void sum_task(void *ctx, int task, int thread) {
    sum_job *j = ctx;
    size_t per = j->n / j->parts;
    j->result[task] = sum_range(j->buf + per * task, per);
}

static double measure_bandwidth(okv_threadpool *tp, const float *buf, size_t n, int reps) {
    sum_job j = {buf, n, okv_threadpool_size(tp), {0}};
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        okv_threadpool_run(tp, j.parts, sum_task, &j);
        double dt = now() - t0;
        if (dt < best) best = dt;
    }
    return (double)n * 4 / best / 1e9;
}

/* ---- 2./3. matmul ------------------------------------------------------------------ */

typedef struct wset {
    void *copies[80];
    int n_copies;
    okv_dtype dt;
    int N, K;
} wset;

/* Enough copies of a random N x K weight that they don't fit in L3 together. */
static wset make_wset(okv_dtype dt, int N, int K) {
    wset w = {{0}, 0, dt, N, K};
    size_t n = (size_t)N * K, bytes = n * okv_dtype_size(dt);
    w.n_copies = (int)((128u << 20) / bytes) + 1;
    if (w.n_copies > 80) w.n_copies = 80;
    float *tmp = malloc(n * 4);
    for (size_t i = 0; i < n; i++) tmp[i] = frand() * 0.05f;
    for (int c = 0; c < w.n_copies; c++) {
        w.copies[c] = aligned_alloc(64, (bytes + 63) / 64 * 64);
        okv_convert(w.copies[c], dt, tmp, OKV_F32, n);
    }
    free(tmp);
    return w;
}

static void free_wset(wset *w) {
    for (int c = 0; c < w->n_copies; c++) free(w->copies[c]);
}

/* Best seconds per call of y = x @ W^T over reps calls (rotating copies). */
static double time_matmul(const okv_kernels *k, okv_threadpool *tp, const wset *w, int T, int reps) {
    float *x = malloc(sizeof(float) * (size_t)T * w->K), *y = malloc(sizeof(float) * (size_t)T * w->N);
    for (size_t i = 0; i < (size_t)T * w->K; i++) x[i] = frand();
    k->matmul(tp, y, x, T, w->K, w->copies[0], w->dt, w->N, NULL); /* warm-up */
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        const void *W = w->copies[(r + 1) % w->n_copies];
        double t0 = now();
        k->matmul(tp, y, x, T, w->K, W, w->dt, w->N, NULL);
        double dt = now() - t0;
        if (dt < best) best = dt;
    }
    free(x);
    free(y);
    return best;
}

/* ---- 4. attention --------------------------------------------------------------------- */

/* Best seconds for T queries at the last T positions of n_keys cached keys. */
static double time_attend(const okv_kernels *k, okv_threadpool *tp, int Hq, int Hkv, int D, okv_dtype dt,
                          int n_keys, int T, int reps) {
    size_t row = (size_t)Hkv * D, esz = okv_dtype_size(dt);
    void *kp = malloc(n_keys * row * esz), *vp = malloc(n_keys * row * esz);
    float *tmp = malloc(sizeof(float) * n_keys * row);
    for (size_t i = 0; i < n_keys * row; i++) tmp[i] = frand();
    okv_convert(kp, dt, tmp, OKV_F32, n_keys * row);
    okv_convert(vp, dt, tmp, OKV_F32, n_keys * row);
    float *q = malloc(sizeof(float) * T * Hq * D), *out = malloc(sizeof(float) * T * Hq * D);
    for (int i = 0; i < T * Hq * D; i++) q[i] = frand();
    int32_t *pos = malloc(sizeof(int32_t) * T);
    for (int t = 0; t < T; t++) pos[t] = n_keys - T + t;
    okv_run run = {0, n_keys, 0};
    okv_attn_args a = {q, T, Hq, pos, {kp, vp, kp, vp, dt, dt, Hkv, D}, &run, 1, 0, 1.0f / sqrtf((float)D), out, NULL};
    k->attend(tp, &a);
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        k->attend(tp, &a);
        double d = now() - t0;
        if (d < best) best = d;
    }
    free(kp);
    free(vp);
    free(tmp);
    free(q);
    free(out);
    free(pos);
    return best;
}

/* GFLOP/s of 12 independent FMA chains on one core, 256- or 512-bit, by
 * the thread's CPU time (so a probe descheduled on a loaded machine still
 * measures the core; the peak probes below do the same). */
__attribute__((target("avx2,fma"))) static double fma_peak_256(long iters) {
    __m256 a[12], m = _mm256_set1_ps(0.999f), c = _mm256_set1_ps(0.001f);
    for (int i = 0; i < 12; i++) a[i] = _mm256_set1_ps((float)i);
    double t0 = thread_cpu();
    for (long it = 0; it < iters; it++)
#pragma GCC unroll 12
        for (int i = 0; i < 12; i++) a[i] = _mm256_fmadd_ps(a[i], m, c);
    double dt = thread_cpu() - t0;
    float sink[8];
    __m256 s = a[0];
    for (int i = 1; i < 12; i++) s = _mm256_add_ps(s, a[i]);
    _mm256_storeu_ps(sink, s);
    if (sink[0] == 12345.0f) printf(" ");
    return 12.0 * 8 * 2 * iters / dt / 1e9;
}

__attribute__((target("avx512f"))) static double fma_peak_512(long iters) {
    __m512 a[12], m = _mm512_set1_ps(0.999f), c = _mm512_set1_ps(0.001f);
    for (int i = 0; i < 12; i++) a[i] = _mm512_set1_ps((float)i);
    double t0 = thread_cpu();
    for (long it = 0; it < iters; it++)
#pragma GCC unroll 12
        for (int i = 0; i < 12; i++) a[i] = _mm512_fmadd_ps(a[i], m, c);
    double dt = thread_cpu() - t0;
    __m512 s = a[0];
    for (int i = 1; i < 12; i++) s = _mm512_add_ps(s, a[i]);
    if (_mm512_reduce_add_ps(s) == 12345.0f) printf(" ");
    return 12.0 * 16 * 2 * iters / dt / 1e9;
}

/* ---- 7. decode shapes ------------------------------------------------------------------ */

enum { DEC_SHAPES = 7, DEC_LAYERS = 16, DEC_SEQ_LAYERS = 4 };
static const char *const dec_names[DEC_SHAPES] = {"q", "k", "v", "o", "gate", "up", "down"};
static const int dec_shape[DEC_SHAPES][2] = {{2048, 2048}, {512, 2048}, {512, 2048}, {2048, 2048},
                                             {8192, 2048}, {8192, 2048}, {2048, 8192}}; /* N x K */

static void bench_decode(const okv_kernels *k, okv_threadpool *tp, double bw, int quick) {
    int reps = quick ? 10 : 40;
    printf("\ndecode GEMVs of one Llama-3.2-1B token, bf16, %s, %d threads\n", k->name, okv_threadpool_size(tp));
    printf("%-6s %-12s %9s %9s %8s\n", "matmul", "W (NxK)", "us", "GB/s", "of bw");
    double layer_sec = 0, layer_bytes = 0;
    for (int s = 0; s < DEC_SHAPES; s++) {
        wset w = make_wset(OKV_BF16, dec_shape[s][0], dec_shape[s][1]);
        double bytes = (double)w.N * w.K * 2, sec = time_matmul(k, tp, &w, 1, reps);
        printf("%-6s %5dx%-6d %9.1f %9.1f %7.0f%%\n", dec_names[s], w.N, w.K, sec * 1e6, bytes / sec / 1e9,
               100 * bytes / sec / 1e9 / bw);
        layer_sec += sec;
        layer_bytes += bytes;
        free_wset(&w);
    }
    /* the LM head: 525 MB, one copy is already far beyond L3 */
    int vocab = 128256, dim = 2048;
    uint16_t *head = aligned_alloc(64, (size_t)vocab * dim * 2);
    for (size_t i = 0; i < (size_t)vocab * dim; i++) head[i] = okv_f32_to_bf16(frand() * 0.05f);
    wset hw = {{head}, 1, OKV_BF16, vocab, dim};
    double head_sec = time_matmul(k, tp, &hw, 1, quick ? 3 : 8), head_bytes = (double)vocab * dim * 2;
    printf("%-6s %5dx%-6d %9.1f %9.1f %7.0f%%\n", "head", vocab, dim, head_sec * 1e6, head_bytes / head_sec / 1e9,
           100 * head_bytes / head_sec / 1e9 / bw);
    free(head);
    double tok = DEC_LAYERS * layer_sec + head_sec, tok_bytes = DEC_LAYERS * layer_bytes + head_bytes;
    printf("one token (16 layers + head, shapes timed alone): %.2f ms, %.1f GB/s, %.1f tok/s\n", tok * 1e3,
           tok_bytes / tok / 1e9, 1 / tok);

    /* the same shapes back to back, as a model runs them: 4 layers of distinct
     * weights (464 MB) so every layer comes from DRAM */
    void *lw[DEC_SEQ_LAYERS][DEC_SHAPES];
    int dmax = 8192;
    float *x = malloc(sizeof(float) * dmax), *y = malloc(sizeof(float) * dmax);
    for (int i = 0; i < dmax; i++) x[i] = frand();
    for (int l = 0; l < DEC_SEQ_LAYERS; l++)
        for (int s = 0; s < DEC_SHAPES; s++) {
            size_t n = (size_t)dec_shape[s][0] * dec_shape[s][1];
            uint16_t *w = aligned_alloc(64, n * 2);
            for (size_t i = 0; i < n; i++) w[i] = okv_f32_to_bf16(frand() * 0.05f);
            lw[l][s] = w;
        }
    double best = 1e30;
    for (int r = 0; r < (quick ? 5 : 20); r++) {
        double t0 = now();
        for (int l = 0; l < DEC_SEQ_LAYERS; l++)
            for (int s = 0; s < DEC_SHAPES; s++)
                k->matmul(tp, y, x, 1, dec_shape[s][1], lw[l][s], OKV_BF16, dec_shape[s][0], NULL);
        double dt = (now() - t0) / DEC_SEQ_LAYERS;
        if (dt < best) best = dt;
    }
    printf("layers back to back: %.1f us per layer, %.1f GB/s (shapes alone: %.1f us)\n", best * 1e6,
           layer_bytes / best / 1e9, layer_sec * 1e6);
    for (int l = 0; l < DEC_SEQ_LAYERS; l++)
        for (int s = 0; s < DEC_SHAPES; s++) free(lw[l][s]);
    free(x);
    free(y);
}


/* ---- 8. quantized matmul --------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* One probe pass: seconds to sum the buffer on the pool. */
static double probe_once(okv_threadpool *tp, const float *buf, size_t n) {
    sum_job j = {buf, n, okv_threadpool_size(tp), {0}};
    double t0 = now();
    okv_threadpool_run(tp, j.parts, sum_task, &j);
    return now() - t0;
}

/* Copies of one quantized matrix laid end to end in an arena much larger
 * than the L3, with random codes and valid scales; calls rotate through
 * them so every byte comes from DRAM. */
typedef struct qarena {
    uint8_t *mem;
    size_t size;
} qarena;

/* Valid, normal bf16 everywhere (so the bf16 rows read the same arena
 * without subnormal slow paths); any byte is a valid code. */
static void qarena_fill_random(qarena *a) {
    uint16_t *p = (uint16_t *)a->mem;
    for (size_t i = 0; i < a->size / 2; i++) p[i] = (uint16_t)(0x3c00 | ((i * 2654435761u) >> 24 & 0xff));
}

typedef struct qset {
    const qarena *a;
    okv_qscheme s;
    int N, K, n_copies;
    size_t stride;
    uint64_t bytes;
} qset;

static qset make_qset(const qarena *a, okv_qscheme s, int N, int K) {
    qset q = {a, s, N, K, 0, 0, okv_quant_bytes(&s, N, K)};
    q.stride = (q.bytes + 63) / 64 * 64;
    q.n_copies = (int)(a->size / q.stride);
    for (int c = 0; c < q.n_copies; c++) { /* scales and offsets: small, valid f16 */
        okv_qview v = okv_quant_view(&s, a->mem + c * q.stride, N, K);
        uint16_t *d = (uint16_t *)v.d;
        size_t n = (size_t)N * v.groups;
        for (size_t i = 0; i < n; i++) d[i] = okv_f32_to_f16(0.001f + (float)(i % 7) * 1e-4f);
        if (v.m)
            for (size_t i = 0; i < n; i++) ((uint16_t *)v.m)[i] = okv_f32_to_f16(-0.01f * (float)(i % 3));
    }
    return q;
}

static const void *qset_copy(const qset *q, int i) { return q->a->mem + (size_t)(i % q->n_copies) * q->stride; }

typedef struct qpath {
    const char *name;
    void (*fn)(okv_threadpool *tp, float *y, const float *x, int T, int K, const void *W, const okv_qscheme *s, int N,
               const float *bias);
} qpath;

enum { Q_MAX_PATHS = 5 };

static int q_paths(qpath *p) {
    int n = 0;
    if (okv_qmm_have_avx512vnni()) p[n++] = (qpath){"int8-avx512vnni", okv_matmul_q_avx512vnni};
    if (okv_qmm_have_avx512vnni()) p[n++] = (qpath){"f32-avx512", okv_matmul_q_avx512_f32};
    if (!n) p[n++] = (qpath){"int8-plain", okv_matmul_q_int_plain};
    return n;
}

static void bench_qgemv(okv_threadpool *tp, const okv_kernels *best, int quick) {
    static const int shapes[5][2] = {{2048, 2048}, {512, 2048}, {8192, 2048}, {2048, 8192}, {128256, 2048}};
    static const okv_qscheme schemes[3] = {{8, 32, false, OKV_F16, OKV_QB_NONE, false}, {4, 32, true, OKV_F16, OKV_QB_NONE, false}, {4, 32, false, OKV_F16, OKV_QB_NONE, false}};
    qarena a = {NULL, (size_t)(quick ? 640 : 1280) << 20};
    a.mem = aligned_alloc(64, a.size);
    qarena_fill_random(&a);
    size_t pn = (256u << 20) / 4; /* probe: 256 MiB, one pass per rep */
    float *pbuf = aligned_alloc(64, pn * 4);
    for (size_t i = 0; i < pn; i++) pbuf[i] = 1.0f;
    qpath paths[Q_MAX_PATHS];
    int n_paths = q_paths(paths), reps = quick ? 9 : 25;
    float *x = malloc(sizeof(float) * 8192), *y = malloc(sizeof(float) * 128256);
    for (int i = 0; i < 8192; i++) x[i] = frand();
    printf("\nquantized decode GEMV, %d threads, medians of %d (probe = 256 MiB sum, same loop)\n",
           okv_threadpool_size(tp), reps);
    printf("%-12s %-16s %-16s %9s %9s %9s %8s\n", "W (NxK)", "scheme", "path", "us", "MB read", "GB/s", "of bw");
    for (int si = 0; si < 5; si++)
        for (int qi = 0; qi < 3; qi++) {
            int N = shapes[si][0], K = shapes[si][1];
            qset q = make_qset(&a, schemes[qi], N, K);
            double t[Q_MAX_PATHS][64], tp_[64], tb[64];
            /* bf16 of the same shape, for reference (copies in the same arena) */
            size_t bf_bytes = (size_t)N * K * 2, bf_copies = a.size / bf_bytes;
            for (int r = 0; r < reps; r++) {
                tp_[r] = probe_once(tp, pbuf, pn);
                for (int p = 0; p < n_paths; p++) {
                    const void *W = qset_copy(&q, r * (n_paths + 1) + p);
                    double t0 = now();
                    paths[p].fn(tp, y, x, 1, K, W, &q.s, N, NULL);
                    t[p][r] = now() - t0;
                }
                if (qi == 0) {
                    const void *W = a.mem + (size_t)(r % (bf_copies ? bf_copies : 1)) * bf_bytes;
                    double t0 = now();
                    best->matmul(tp, y, x, 1, K, W, OKV_BF16, N, NULL);
                    tb[r] = now() - t0;
                }
            }
            double bw = (double)pn * 4 / median(tp_, reps) / 1e9;
            char sname[32];
            okv_qscheme_name(&q.s, sname, sizeof sname);
            double bytes = (double)q.bytes + K * 4.0;
            for (int p = 0; p < n_paths; p++) {
                double sec = median(t[p], reps);
                printf("%6dx%-5d %-16s %-16s %9.1f %9.2f %9.1f %7.0f%%\n", N, K, sname, paths[p].name, sec * 1e6,
                       bytes / 1e6, bytes / sec / 1e9, 100 * bytes / sec / 1e9 / bw);
            }
            if (qi == 0) {
                double sec = median(tb, reps), bb = (double)bf_bytes;
                printf("%6dx%-5d %-16s %-16s %9.1f %9.2f %9.1f %7.0f%%\n", N, K, "bf16", best->name, sec * 1e6,
                       bb / 1e6, bb / sec / 1e9, 100 * bb / sec / 1e9 / bw);
            }
            printf("%6dx%-5d %-16s %-16s %9s %9s %9.1f\n", N, K, "", "probe", "", "", bw);
        }
    free(x);
    free(y);
    free(pbuf);
    free(a.mem);
}

/* The layout question: the same kernel over the three planes of
 * okv_quant.c, or over rows that carry their own scales ([codes][d][m] per
 * row, one stream), medians side by side with the probe. */
static void bench_qlayout(okv_threadpool *tp, int quick) {
    static const int shapes[3][2] = {{2048, 2048}, {8192, 2048}, {2048, 8192}};
    static const okv_qscheme schemes[2] = {{4, 32, true, OKV_F16, OKV_QB_NONE, false}, {8, 32, false, OKV_F16, OKV_QB_NONE, false}};
    if (!okv_qmm_have_avx512vnni()) return;
    qarena a = {NULL, (size_t)(quick ? 640 : 1280) << 20};
    a.mem = aligned_alloc(64, a.size);
    qarena_fill_random(&a);
    size_t pn = (256u << 20) / 4;
    float *pbuf = aligned_alloc(64, pn * 4);
    for (size_t i = 0; i < pn; i++) pbuf[i] = 1.0f;
    float *x = malloc(sizeof(float) * 8192), *y = malloc(sizeof(float) * 8192);
    for (int i = 0; i < 8192; i++) x[i] = frand();
    int reps = quick ? 9 : 25;
    printf("\nquantized GEMV layout: planes vs per-row interleaved scales, %d threads, medians of %d\n",
           okv_threadpool_size(tp), reps);
    printf("%-12s %-16s %-12s %9s %9s %8s\n", "W (NxK)", "scheme", "layout", "us", "GB/s", "of bw");
    for (int si = 0; si < 3; si++)
        for (int qi = 0; qi < 2; qi++) {
            int N = shapes[si][0], K = shapes[si][1];
            qset q = make_qset(&a, schemes[qi], N, K); /* scales valid at both layouts' places: all f16-ish */
            okv_qview pv = okv_quant_view(&q.s, a.mem, N, K), rv = pv;
            size_t sbytes = (size_t)pv.groups * 2, row = pv.code_stride + sbytes * (q.s.asym ? 2 : 1);
            rv.code_stride = rv.scale_stride = row; /* scale_stride in elements below */
            rv.scale_stride = row / 2;
            const okv_qmm_ops *ops = okv_qmm_ops_avx512vnni(q.s.bits, q.s.asym);
            double tpl[64], tri[64], tpr[64];
            for (int r = 0; r < reps; r++) {
                tpr[r] = probe_once(tp, pbuf, pn);
                okv_qview v = pv;
                size_t off = (size_t)(r * 2 % q.n_copies) * q.stride;
                v.codes += off;
                v.d = (const uint16_t *)((const uint8_t *)v.d + off);
                if (v.m) v.m = (const uint16_t *)((const uint8_t *)v.m + off);
                double t0 = now();
                okv_qmm_run_view(tp, ops, y, x, 1, K, &v, N, NULL, false);
                tpl[r] = now() - t0;
                v = rv;
                off = (size_t)((r * 2 + 1) % q.n_copies) * q.stride;
                v.codes = a.mem + off;
                v.d = (const uint16_t *)(a.mem + off + pv.code_stride);
                v.m = q.s.asym ? (const uint16_t *)(a.mem + off + pv.code_stride + sbytes) : NULL;
                t0 = now();
                okv_qmm_run_view(tp, ops, y, x, 1, K, &v, N, NULL, false);
                tri[r] = now() - t0;
            }
            double bw = (double)pn * 4 / median(tpr, reps) / 1e9, bytes = (double)q.bytes;
            char sname[32];
            okv_qscheme_name(&q.s, sname, sizeof sname);
            double a1 = median(tpl, reps), a2 = median(tri, reps);
            printf("%6dx%-5d %-16s %-12s %9.1f %9.1f %7.0f%%\n", N, K, sname, "planes", a1 * 1e6, bytes / a1 / 1e9,
                   100 * bytes / a1 / 1e9 / bw);
            printf("%6dx%-5d %-16s %-12s %9.1f %9.1f %7.0f%%\n", N, K, sname, "row-interl.", a2 * 1e6, bytes / a2 / 1e9,
                   100 * bytes / a2 / 1e9 / bw);
        }
    free(x);
    free(y);
    free(pbuf);
    free(a.mem);
}

/* 19. qbgemv: the GGUF block-weight decode GEMV (okv_qbmm_run, T = 1) per
 * block type and shape on each okv_qb_isa this CPU has (plain, avx2,
 * avx512), rep by rep on copies rotating through an arena far larger than
 * the L3, next to the read-bandwidth probe; medians, GB/s of W bytes. */
static void bench_qbgemv(okv_threadpool *tp, int quick, bool hot) {
    static const int shapes[3][2] = {{2048, 2048}, {8192, 2048}, {2048, 8192}};
    static const int types[] = {OKV_QB_Q4_0, OKV_QB_Q4_1, OKV_QB_Q5_0, OKV_QB_Q5_1, OKV_QB_Q8_0,
                                OKV_QB_Q2_K, OKV_QB_Q3_K, OKV_QB_Q4_K, OKV_QB_Q5_K, OKV_QB_Q6_K};
    enum { MAX_ISAS = 3 };
    const okv_qb_isa *isas[MAX_ISAS];
    int n_isas = 0;
    isas[n_isas++] = &okv_qb_isa_plain;
    if (okv_qb_isa_avx2()) isas[n_isas++] = okv_qb_isa_avx2();
    if (okv_qb_isa_avx512()) isas[n_isas++] = okv_qb_isa_avx512();
    qarena a = {NULL, (size_t)(quick ? 640 : 1280) << 20};
    a.mem = aligned_alloc(64, a.size);
    for (size_t i = 0; i < a.size; i++) a.mem[i] = (uint8_t)(((i * 2654435761u) ^ (i >> 7)) >> 13);
    size_t pn = (256u << 20) / 4;
    float *pbuf = aligned_alloc(64, pn * 4);
    for (size_t i = 0; i < pn; i++) pbuf[i] = 1.0f;
    float *x = malloc(sizeof(float) * 8192), *y = malloc(sizeof(float) * 8192);
    for (int i = 0; i < 8192; i++) x[i] = frand();
    int reps = quick ? 9 : 25;
    printf("\nGGUF block decode GEMV (okv_qbmm_run, T = 1), %d threads, medians of %d (probe = 256 MiB sum, same loop)\n",
           okv_threadpool_size(tp), reps);
    printf("%-12s %-6s %-7s %9s %9s %9s %8s\n", "W (NxK)", "type", "isa", "us", "MB read", "GB/s", "of bw");
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const okv_qblock_info *b = okv_qblock_get(types[ti]);
        okv_qscheme s = okv_qscheme_block(types[ti]);
        /* the arena as one run of blocks with finite, normal f16 scales
         * (every shape's copy is a whole number of blocks, 64-byte aligned) */
        int sf[2] = {0, -1};
        switch (types[ti]) {
        case OKV_QB_Q4_1: case OKV_QB_Q5_1: case OKV_QB_Q4_K: case OKV_QB_Q5_K: sf[1] = 2; break;
        case OKV_QB_Q2_K: sf[0] = 80; sf[1] = 82; break;
        case OKV_QB_Q3_K: sf[0] = 108; break;
        case OKV_QB_Q6_K: sf[0] = 208; break;
        default: break;
        }
        for (size_t blk = 0; blk < a.size / (size_t)b->bytes; blk++)
            for (int f = 0; f < 2; f++)
                if (sf[f] >= 0) {
                    uint16_t h = okv_f32_to_f16(0.001f + (float)(blk % 7) * 1e-4f);
                    memcpy(a.mem + blk * (size_t)b->bytes + sf[f], &h, 2);
                }
        for (int si = 0; si < 3; si++) {
            int N = shapes[si][0], K = shapes[si][1];
            size_t bytes = (size_t)N * (size_t)(K / b->elems) * (size_t)b->bytes;
            int n_copies = hot ? 1 : (int)(a.size / bytes);
            double t[MAX_ISAS][64], tpr[64];
            okv_qbmm_run(tp, isas[n_isas - 1], y, x, 1, K, a.mem, &s, N, NULL); /* warm-up */
            for (int r = 0; r < reps; r++) {
                tpr[r] = probe_once(tp, pbuf, pn);
                for (int i = 0; i < n_isas; i++) {
                    const void *W = a.mem + (size_t)((r * n_isas + i) % n_copies) * bytes;
                    double t0 = now();
                    okv_qbmm_run(tp, isas[i], y, x, 1, K, W, &s, N, NULL);
                    t[i][r] = now() - t0;
                }
            }
            double bw = (double)pn * 4 / median(tpr, reps) / 1e9;
            for (int i = 0; i < n_isas; i++) {
                double sec = median(t[i], reps);
                printf("%6dx%-5d %-6s %-7s %9.1f %9.2f %9.1f %7.0f%%\n", N, K, b->name, isas[i]->name, sec * 1e6,
                       (double)bytes / 1e6, (double)bytes / sec / 1e9, 100 * (double)bytes / sec / 1e9 / bw);
            }
            printf("%6dx%-5d %-6s %-7s %9s %9s %9.1f\n", N, K, "", "probe", "", "", bw);
        }
    }
    free(x);
    free(y);
    free(pbuf);
    free(a.mem);
}

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The compute roof, which a loaded machine can still measure: one thread,
 * W resident in L2 (no DRAM), timed in this thread's CPU time (time spent
 * descheduled does not count). GB/s here is how fast a core can consume
 * weights; decode reaches the memory wall on 2 cores iff this is above half
 * the machine's read bandwidth. */
static void bench_qroof(const okv_kernels *best, int quick) {
    static const okv_qscheme schemes[3] = {{8, 32, false, OKV_F16, OKV_QB_NONE, false}, {4, 32, true, OKV_F16, OKV_QB_NONE, false}, {4, 32, false, OKV_F16, OKV_QB_NONE, false}};
    const int N = 512, K = 2048, reps = quick ? 101 : 301;
    qarena a = {NULL, (size_t)4 << 20};
    a.mem = aligned_alloc(64, a.size);
    qarena_fill_random(&a);
    float *x = malloc(sizeof(float) * 64 * K), *y = malloc(sizeof(float) * 64 * N);
    for (int i = 0; i < 64 * K; i++) x[i] = frand();
    qpath paths[Q_MAX_PATHS];
    int n_paths = q_paths(paths);
    if (okv_qmm_have_avx2()) paths[n_paths++] = (qpath){"int8-avx2", okv_matmul_q_avx2};
    printf("\ncompute roof, 1 thread, W %dx%d in L2, CPU time, medians of %d\n", N, K, reps);
    printf("%-16s %-16s %9s %12s %12s\n", "scheme", "path", "us", "GB/s (T=1)", "GFLOP/s T=64");
    double t[301], t64[31]; /* reps, reps / 10 */
    for (int qi = 0; qi < 3; qi++) {
        qset q = make_qset(&a, schemes[qi], N, K);
        char sname[32];
        okv_qscheme_name(&q.s, sname, sizeof sname);
        for (int p = 0; p < n_paths; p++) {
            for (int r = 0; r < reps; r++) {
                double t0 = cpu_now();
                paths[p].fn(NULL, y, x, 1, K, a.mem, &q.s, N, NULL);
                t[r] = cpu_now() - t0;
            }
            for (int r = 0; r < reps / 10; r++) {
                double t0 = cpu_now();
                paths[p].fn(NULL, y, x, 64, K, a.mem, &q.s, N, NULL);
                t64[r] = cpu_now() - t0;
            }
            double sec = median(t, reps), s64 = median(t64, reps / 10);
            printf("%-16s %-16s %9.1f %12.1f %12.1f\n", sname, paths[p].name, sec * 1e6, q.bytes / sec / 1e9,
                   2.0 * 64 * N * K / s64 / 1e9);
        }
    }
    uint16_t *wb = (uint16_t *)a.mem; /* valid bf16 from the fill */
    for (int r = 0; r < reps; r++) {
        double t0 = cpu_now();
        best->matmul(NULL, y, x, 1, K, wb, OKV_BF16, N, NULL);
        t[r] = cpu_now() - t0;
    }
    for (int r = 0; r < reps / 10; r++) {
        double t0 = cpu_now();
        best->matmul(NULL, y, x, 64, K, wb, OKV_BF16, N, NULL);
        t64[r] = cpu_now() - t0;
    }
    double sec = median(t, reps), s64 = median(t64, reps / 10);
    printf("%-16s %-16s %9.1f %12.1f %12.1f\n", "bf16", best->name, sec * 1e6, (double)N * K * 2 / sec / 1e9,
           2.0 * 64 * N * K / s64 / 1e9);
    free(x);
    free(y);
    free(a.mem);
}

/* The block dots' compute roof (as bench_qroof: 1 thread, W 512 x 2048 in
 * L2, CPU time) per type and ISA, W in file order and in the x8 layout;
 * with tp (qbroof dram): W 65536 x 2048 streamed from DRAM on its
 * threads, wall time. */
static void bench_qbroof(int quick, okv_threadpool *tp) {
    const int N = tp ? 65536 : 512, K = 2048, reps = tp ? 9 : quick ? 101 : 301;
    static const int types[] = {OKV_QB_Q4_0, OKV_QB_Q8_0, OKV_QB_Q4_K, OKV_QB_Q5_K, OKV_QB_Q6_K};
    const okv_qb_isa *isas[3] = {okv_qb_isa_avx2(), okv_qb_isa_avx512(), NULL};
    float *x = malloc(sizeof(float) * K), *y = malloc(sizeof(float) * N);
    for (int i = 0; i < K; i++) x[i] = frand();
    if (tp) printf("\nblock dots, %d threads, W %dx%d from DRAM, wall time, medians of %d\n", okv_threadpool_size(tp), N, K, reps);
    else printf("\nblock dot compute roof, 1 thread, W %dx%d in L2, CPU time, medians of %d\n", N, K, reps);
    printf("%-6s %-11s %-5s %9s %9s\n", "type", "isa", "rows", "us", "GB/s");
    double t[301];
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const okv_qblock_info *b = okv_qblock_get(types[ti]);
        size_t bytes = (size_t)N * (size_t)(K / b->elems) * (size_t)b->bytes;
        uint8_t *w = aligned_alloc(64, (bytes + 63) / 64 * 64), *w8 = aligned_alloc(64, (bytes + 63) / 64 * 64);
        for (size_t i = 0; i < bytes; i++) w[i] = (uint8_t)(rand() >> 7);
        for (size_t i = 0; i + 2 <= bytes; i += 2) { /* every f16 field finite: bytes below 0x70 in odd places */
            if (w[i + 1] >= 0x70) w[i + 1] = (uint8_t)(w[i + 1] % 0x30 + 0x10);
        }
        memcpy(w8, w, bytes);
        okv_qblock_x8_pack(types[ti], w8, N, K);
        for (int i = 0; i < 2; i++) {
            if (!isas[i]) continue;
            for (int lay = 0; lay < 2; lay++) {
                if (lay && !isas[i]->dot8[types[ti]]) continue;
                okv_qscheme s = okv_qscheme_block(types[ti]);
                s.x8 = lay == 1;
                for (int r = 0; r < reps; r++) {
                    double t0 = tp ? now() : cpu_now();
                    okv_qbmm_run(tp, isas[i], y, x, 1, K, lay ? w8 : w, &s, N, NULL);
                    t[r] = (tp ? now() : cpu_now()) - t0;
                }
                double sec = median(t, reps);
                printf("%-6s %-11s %-5s %9.1f %9.1f\n", b->name, isas[i]->name, lay ? "x8" : "file", sec * 1e6,
                       (double)bytes / sec / 1e9);
            }
        }
        free(w);
        free(w8);
    }
    free(x);
    free(y);
}

/* Quantized prefill GEMMs vs bf16 on the best table, interleaved rounds;
 * with cpu_time tp has 1 thread and times are its CPU time. */
static void bench_qgemm(okv_threadpool *tp, const okv_kernels *best, int quick, bool cpu_time) {
    double (*clock_fn)(void) = cpu_time ? thread_cpu : now;
    static const int shapes[3][2] = {{2048, 2048}, {8192, 2048}, {2048, 8192}};
    static const okv_qscheme schemes[2] = {{8, 32, false, OKV_F16, OKV_QB_NONE, false}, {4, 32, true, OKV_F16, OKV_QB_NONE, false}};
    const int T = 512, reps = quick ? 3 : 5;
    bool amx8 = okv_qmm_have_amx_int8(), pk = okv_qmm_have_avx512vnni(); /* pk: the AVX-512 packed f32 GEMM */
    bool bfpk = pk && okv_cpu()->avx512bf16; /* the packed vdpbf16ps GEMM */
    qarena a = {NULL, (size_t)256 << 20};
    a.mem = aligned_alloc(64, a.size);
    qarena_fill_random(&a);
    float *x = malloc(sizeof(float) * (size_t)T * 8192), *y = malloc(sizeof(float) * (size_t)T * 8192);
    for (size_t i = 0; i < (size_t)T * 8192; i++) x[i] = frand();
    printf("\nprefill GEMM T=%d, %d thread%s, %s, medians of %d interleaved rounds\n", T, okv_threadpool_size(tp),
           okv_threadpool_size(tp) > 1 ? "s" : "", cpu_time ? "thread CPU time" : "wall clock", reps);
    printf("%-12s %-16s %-19s %9s %9s\n", "W (NxK)", "scheme", "path", "ms", "GFLOP/s");
    for (int si = 0; si < 3; si++) {
        int N = shapes[si][0], K = shapes[si][1];
        uint16_t *wb = aligned_alloc(64, (size_t)N * K * 2);
        for (size_t i = 0; i < (size_t)N * K; i++) wb[i] = okv_f32_to_bf16(frand() * 0.05f);
        qset q[2];
        for (int qi = 0; qi < 2; qi++) q[qi] = make_qset(&a, schemes[qi], N, K);
        double tq[2][5][16], tb[2][16];
        for (int r = 0; r < reps; r++) {
            for (int qi = 0; qi < 2; qi++)
                for (int p = 0; p < 5; p++) {
                    if ((p == 1 || p == 2) && !amx8) continue;
                    if (p == 3 && !pk) continue;
                    if (p == 4 && !bfpk) continue;
                    double t0 = clock_fn();
                    if (p == 0) okv_matmul_q_best(tp, y, x, T, K, qset_copy(&q[qi], 0), &q[qi].s, N, NULL);
                    else if (p == 1) okv_matmul_q_amx_tiles(tp, y, x, T, K, qset_copy(&q[qi], 0), &q[qi].s, N, NULL);
                    else if (p == 2) okv_matmul_q_amx_bf16(tp, y, x, T, K, qset_copy(&q[qi], 0), &q[qi].s, N, NULL);
                    else if (p == 3) okv_matmul_q_avx512_packed(tp, y, x, T, K, qset_copy(&q[qi], 0), &q[qi].s, N, NULL);
                    else okv_matmul_q_avx512_dpbf16(tp, y, x, T, K, qset_copy(&q[qi], 0), &q[qi].s, N, NULL);
                    tq[qi][p][r] = clock_fn() - t0;
                }
            double t0 = clock_fn();
            best->matmul(tp, y, x, T, K, wb, OKV_BF16, N, NULL);
            tb[0][r] = clock_fn() - t0;
            if (pk) { /* bf16 W on the same packed f32 kernel: the quantized path's peer without AMX */
                t0 = clock_fn();
                okv_matmul_avx512_gemm(tp, y, x, T, K, wb, OKV_BF16, N, NULL);
                tb[1][r] = clock_fn() - t0;
            }
        }
        double flop = 2.0 * T * N * K;
        for (int qi = 0; qi < 2; qi++)
            for (int p = 0; p < 5; p++) {
                if ((p == 1 || p == 2) && !amx8) continue;
                if (p == 3 && !pk) continue;
                if (p == 4 && !bfpk) continue;
                char sname[32];
                double sec = median(tq[qi][p], reps);
                const char *path = p == 4   ? "deq-bf16-avx512bfpk"
                                   : p == 3 ? "deq-f32-avx512pk"
                                   : p == 2 ? "deq-bf16-amx"
                                   : p      ? "int8-amx"
                                   : okv_qmm_have_avx512vnni() ? "int8-avx512vnni" : "int8-plain";
                printf("%6dx%-5d %-16s %-19s %9.2f %9.1f\n", N, K, okv_qscheme_name(&q[qi].s, sname, sizeof sname),
                       path, sec * 1e3, flop / sec / 1e9);
            }
        double sec = median(tb[0], reps);
        printf("%6dx%-5d %-16s %-19s %9.2f %9.1f\n", N, K, "bf16", best->name, sec * 1e3, flop / sec / 1e9);
        if (pk) {
            sec = median(tb[1], reps);
            printf("%6dx%-5d %-16s %-19s %9.2f %9.1f\n", N, K, "bf16", "f32-avx512pk", sec * 1e3, flop / sec / 1e9);
        }
        free(wb);
    }
    free(x);
    free(y);
    free(a.mem);
}

/* ---- 9. pp512 -------------------------------------------------------------------------- */

/* GFLOP/s of 12 independent vdpbf16ps chains on one core (64 flops each). */
__attribute__((target("avx512f,avx512bf16"))) static double dpbf16_peak(long iters) {
    __m512 a[12];
    __m512bh m = (__m512bh)_mm512_set1_epi16(0x3f80), c = (__m512bh)_mm512_set1_epi16(0x3a83);
    for (int i = 0; i < 12; i++) a[i] = _mm512_set1_ps((float)i);
    double t0 = thread_cpu();
    for (long it = 0; it < iters; it++)
#pragma GCC unroll 12
        for (int i = 0; i < 12; i++) a[i] = _mm512_dpbf16_ps(a[i], m, c);
    double dt = thread_cpu() - t0;
    __m512 s = a[0];
    for (int i = 1; i < 12; i++) s = _mm512_add_ps(s, a[i]);
    if (_mm512_reduce_add_ps(s) == 12345.0f) printf(" ");
    return 12.0 * 64 * iters / dt / 1e9;
}

/* The AMX probes' LDTILECFG block: palette 1, tiles 0-7 16 rows x 64
 * bytes, every other byte zero. */
static const uint8_t amx_probe_cfg[64] __attribute__((aligned(64))) = {
    1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 64, 0, 64, 0, 64, 0, 64, 0, 64, 0, 64, 0, 64, 0, 64, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 16, 16, 16, 16, 16, 16, 16, 16};

/* GFLOP/s of tdpbf16ps on one core: 4 independent C tiles from 2 A and 2 B
 * tiles in registers (16x16x32 x 2 flops each), as the GEMM's inner loop
 * without the loads. */
static double amx_peak(long iters) {
    uint16_t tile[512] __attribute__((aligned(64))); /* per thread: the probe runs on both at once */
    for (int i = 0; i < 512; i++) tile[i] = 0x3c00; /* bf16 2^-7: sums stay finite */
    __asm__ volatile("ldtilecfg %0" ::"m"(amx_probe_cfg));
    __asm__ volatile("tilezero %%tmm0\n\ttilezero %%tmm1\n\ttilezero %%tmm2\n\ttilezero %%tmm3" ::);
    __asm__ volatile("tileloadd (%0,%1,1), %%tmm4\n\ttileloadd (%0,%1,1), %%tmm5\n\t"
                     "tileloadd (%0,%1,1), %%tmm6\n\ttileloadd (%0,%1,1), %%tmm7" ::"r"(tile), "r"((long)64) : "memory");
    double t0 = thread_cpu();
    for (long it = 0; it < iters; it++)
        __asm__ volatile("tdpbf16ps %%tmm6, %%tmm4, %%tmm0\n\ttdpbf16ps %%tmm7, %%tmm4, %%tmm1\n\t"
                         "tdpbf16ps %%tmm6, %%tmm5, %%tmm2\n\ttdpbf16ps %%tmm7, %%tmm5, %%tmm3" ::);
    double dt = thread_cpu() - t0;
    __asm__ volatile("tilerelease" ::);
    return 4.0 * 16 * 16 * 32 * 2 * iters / dt / 1e9;
}

/* GFLOP/s of the GEMM's 2x2 step as it must run: per 32 k two A and two B
 * tiles loaded (from 16 KiB of packed tiles that stay in L1, cycling over
 * four k steps), then the four tdpbf16ps that use them, C tiles held in
 * registers throughout (no C traffic). Not an instruction peak but the
 * ceiling of any loop built on this step: it measures what the tile loads
 * cost next to the products (on the Xeon VM: nothing while the host runs
 * fast, ~45% of the step's time while it runs slow). */
static double amx_loop_peak(long iters) {
    enum { STEPS = 4 };
    static _Thread_local uint16_t tiles[STEPS][4][512] __attribute__((aligned(64))); /* per thread */
    for (int s = 0; s < STEPS; s++)
        for (int t = 0; t < 4; t++)
            for (int i = 0; i < 512; i++) tiles[s][t][i] = (uint16_t)(0x3c00 + ((s * 4 + t + i) & 0x7f)); /* ~2^-7 */
    __asm__ volatile("ldtilecfg %0" ::"m"(amx_probe_cfg));
    __asm__ volatile("tilezero %%tmm0\n\ttilezero %%tmm1\n\ttilezero %%tmm2\n\ttilezero %%tmm3" ::);
    double t0 = thread_cpu();
    for (long it = 0; it < iters; it++) {
        const uint16_t *w0 = tiles[it % STEPS][0], *w1 = tiles[it % STEPS][1];
        const uint16_t *x0 = tiles[it % STEPS][2], *x1 = tiles[it % STEPS][3];
        __asm__ volatile("tileloadd (%0,%4,1), %%tmm4\n\ttileloadd (%2,%4,1), %%tmm6\n\t"
                         "tdpbf16ps %%tmm6, %%tmm4, %%tmm0\n\ttileloadd (%3,%4,1), %%tmm7\n\t"
                         "tdpbf16ps %%tmm7, %%tmm4, %%tmm1\n\ttileloadd (%1,%4,1), %%tmm5\n\t"
                         "tdpbf16ps %%tmm6, %%tmm5, %%tmm2\n\ttdpbf16ps %%tmm7, %%tmm5, %%tmm3" ::"r"(w0),
                         "r"(w1), "r"(x0), "r"(x1), "r"((long)64)
                         : "memory");
    }
    double dt = thread_cpu() - t0;
    __asm__ volatile("tilerelease" ::);
    return 4.0 * 16 * 16 * 32 * 2 * iters / dt / 1e9;
}

/* A peak probe on every thread of a 2-thread pool at once, as pp512 runs
 * its two threads: each task waits (up to 0.2 s) for the other to start,
 * then probes; the figure is the sum of the two threads' GFLOP/s (each by
 * its CPU time). *both is false when one pool thread ran both tasks (they
 * then ran one after the other and the sum means nothing). */
typedef struct peak2_job {
    double (*probe)(long);
    long iters;
    atomic_int arrived;
    double gflops[2];
    int thread[2];
} peak2_job;

static void peak2_task(void *ctx, int task, int thread) {
    peak2_job *p = ctx;
    atomic_fetch_add(&p->arrived, 1);
    double t0 = now();
    while (atomic_load(&p->arrived) < 2 && now() - t0 < 0.2) {
    }
    p->gflops[task] = p->probe(p->iters);
    p->thread[task] = thread;
}

static double peak_two_threads(okv_threadpool *tp2, double (*probe)(long), long iters, bool *both) {
    peak2_job p = {probe, iters, 0, {0, 0}, {-1, -1}};
    okv_threadpool_run(tp2, 2, peak2_task, &p);
    *both = p.thread[0] != p.thread[1];
    return p.gflops[0] + p.gflops[1];
}

/* The one-core and 2-thread peaks of the instruction paths a bf16 GEMM can
 * use here (256- and 512-bit f32 FMA, vdpbf16ps, AMX tdpbf16ps; 0 = path
 * absent), best of `rounds`: the denominators of "percent of peak". */
enum { PEAK_PATHS = 5, PEAK_INSNS = 4 }; /* the first PEAK_INSNS are instruction peaks; the last the AMX loop ceiling */
typedef struct peaks {
    double one[PEAK_PATHS], two[PEAK_PATHS];
    bool both;
} peaks;
static const char *const peak_names[PEAK_PATHS] = {"f32 FMA 256-bit", "f32 FMA 512-bit", "vdpbf16ps", "AMX tdpbf16ps",
                                                   "AMX 2x2 + loads"};

static peaks measure_peaks(okv_threadpool *tp2, int rounds) {
    const okv_cpu_caps *c = okv_cpu();
    peaks pk = {{0}, {0}, true};
    double (*probe[PEAK_PATHS])(long) = {c->avx2 && c->fma ? fma_peak_256 : NULL, c->avx512f ? fma_peak_512 : NULL,
                                          c->avx512f && c->avx512bf16 ? dpbf16_peak : NULL,
                                          c->avx512f && okv_amx_usable(NULL) ? amx_peak : NULL,
                                          c->avx512f && okv_amx_usable(NULL) ? amx_loop_peak : NULL};
    static const long iters[PEAK_PATHS] = {10000000, 10000000, 10000000, 2000000, 2000000};
    for (int r = 0; r < rounds; r++)
        for (int i = 0; i < PEAK_PATHS; i++) {
            if (!probe[i]) continue;
            double v = probe[i](iters[i]);
            if (v > pk.one[i]) pk.one[i] = v;
            bool both;
            v = peak_two_threads(tp2, probe[i], iters[i], &both);
            if (!both) pk.both = false;
            if (v > pk.two[i]) pk.two[i] = v;
        }
    return pk;
}

static void print_peaks(const peaks *pk) {
    printf("peak (thread CPU time, best of rounds; 0 = path absent)%s:\n",
           pk->both ? "" : " [a 2-thread probe ran on one pool thread: its sum is void]");
    for (int i = 0; i < PEAK_PATHS; i++)
        printf("  %-16s one core %7.1f GFLOP/s, 2 threads at once %7.1f GFLOP/s\n", peak_names[i], pk->one[i],
               pk->two[i]);
}

typedef struct pp_path {
    const char *name;
    void (*fn)(okv_threadpool *, float *, const float *, int, int, const void *, okv_dtype, int, const float *);
    bool ok;
} pp_path;


enum { PP_T = 512, PP_MAX_REPS = 15, PP_PATHS = 8 };

/* Planned scratch for the Llama-3.2-1B prefill shapes at T = PP_T on up to
 * 2 threads, as the runtime gives its kernels (without it the packed paths
 * allocate, and fault in, their panels on every call); the caller frees. */
static void *pp_workspace(size_t *bytes) {
    size_t ws_bytes = 0;
    for (int s = 0; s < DEC_SHAPES; s++) {
        size_t b = okv_matmul_scratch_bytes(PP_T, dec_shape[s][1], dec_shape[s][0], OKV_BF16, 2);
        if (b > ws_bytes) ws_bytes = b;
    }
    void *ws = aligned_alloc(64, (ws_bytes + 63) / 64 * 64);
    memset(ws, 0, ws_bytes);
    *bytes = ws_bytes;
    return ws;
}

/* With cpu_time, tp must have 1 thread and times are the thread's CPU time. */
static void bench_pp512(okv_threadpool *tp, okv_threadpool *tp2, int quick, bool cpu_time) {
    double (*clock_fn)(void) = cpu_time ? thread_cpu : now;
    const okv_cpu_caps *c = okv_cpu();
    const char *amx_why;
    bool avx512 = c->avx512f && c->avx512bw && c->avx512vl && c->avx512dq && c->avx2 && c->fma && c->f16c;
    bool amx = avx512 && okv_amx_usable(&amx_why);
    pp_path paths[PP_PATHS] = {{"avx2", okv_matmul_avx2, c->avx2 && c->fma && c->f16c},
                        {"avx512", okv_matmul_avx512, avx512},
                        {"avx512bf", okv_matmul_avx512_bf16, avx512 && c->avx512bf16},
                        {"amx-v1", okv_matmul_amx_v1, amx}, {"amx", okv_matmul_amx, amx},
                        {"avx512pk", okv_matmul_avx512_gemm, avx512},
                        {"avx2pk", okv_matmul_avx2_gemm, c->avx2 && c->fma && c->f16c},
                        {"avx512bfpk", okv_matmul_avx512_dpbf16, avx512 && c->avx512bf16}};
    if (getenv("PP_AMX_ONLY")) paths[0].ok = paths[1].ok = paths[2].ok = paths[6].ok = false;
    int reps = quick ? 3 : 7;
    printf("\npp512: Llama-3.2-1B prefill matmuls, T=%d, %d thread%s, %s, median of %d interleaved rounds (amx: %s)\n",
           PP_T, okv_threadpool_size(tp), okv_threadpool_size(tp) > 1 ? "s" : "",
           cpu_time ? "thread CPU time" : "wall clock", reps, amx_why);
    printf("  avx2 = dot-product tiles, avx2pk / avx512pk = packed broadcast kernels (f32 FMAs, exact products),\n"
           "  avx512 = f32 FMAs (exact products), avx512bf = vdpbf16ps for bf16 weights (x rounded to bf16),\n"
           "  avx512bfpk = packed broadcast kernel on vdpbf16ps (bf16 weights, x rounded to bf16),\n"
           "  amx = tdpbf16ps tiles for bf16/f16 weights (x, f16 W rounded to bf16); f32 weights: amx/avx512bf = avx512\n");
    printf("%-6s %-11s %-5s", "matmul", "W (NxK)", "dtype");
    for (int p = 0; p < PP_PATHS; p++) printf(" %9s", paths[p].name);
    printf("   GFLOP/s\n");
    float *x = malloc(sizeof(float) * PP_T * 8192), *y = malloc(sizeof(float) * PP_T * 8192);
    for (int i = 0; i < PP_T * 8192; i++) x[i] = frand();
    size_t ws_bytes;
    void *ws = pp_workspace(&ws_bytes);
    okv_threadpool_set_workspace(tp, ws, ws_bytes);
    static const okv_dtype dts[3] = {OKV_BF16, OKV_F16, OKV_F32};
    int n_dt = getenv("PP_BF16_ONLY") ? 1 : 3, best_paths[3];
    double layer_best[3] = {0};
    for (int d = 0; d < 3; d++) /* the path the kernel table dispatches for this weight dtype */
        best_paths[d] = amx ? 4 : avx512 && c->avx512bf16 && dts[d] == OKV_BF16 ? 7 : avx512 ? 5 : 6;
    for (int d = 0; d < n_dt; d++) {
        int best_path = best_paths[d];
        double layer_sec[PP_PATHS] = {0}, layer_flops = 0;
        for (int s = 0; s < DEC_SHAPES; s++) {
            int N = dec_shape[s][0], K = dec_shape[s][1];
            wset w = make_wset(dts[d], N, K);
            double t[PP_PATHS][PP_MAX_REPS];
            for (int p = 0; p < PP_PATHS; p++)
                if (paths[p].ok) paths[p].fn(tp, y, x, PP_T, K, w.copies[0], w.dt, N, NULL); /* warm-up */
            for (int r = 0; r < reps; r++)
                for (int p = 0; p < PP_PATHS; p++) {
                    if (!paths[p].ok) continue;
                    const void *W = w.copies[(r + 1) % w.n_copies];
                    double t0 = clock_fn();
                    paths[p].fn(tp, y, x, PP_T, K, W, w.dt, N, NULL);
                    t[p][r] = clock_fn() - t0;
                }
            double flops = 2.0 * PP_T * N * K;
            printf("%-6s %5dx%-5d %-5s", dec_names[s], N, K, okv_dtype_name(dts[d]));
            for (int p = 0; p < PP_PATHS; p++) {
                if (!paths[p].ok) { printf(" %9s", "-"); continue; }
                qsort(t[p], (size_t)reps, sizeof(double), cmp_double);
                double med = t[p][reps / 2];
                layer_sec[p] += med;
                printf(" %9.1f", flops / med / 1e9);
            }
            printf("\n");
            layer_flops += flops;
            free_wset(&w);
        }
        printf("%-6s %-11s %-5s", "layer", "(sum)", okv_dtype_name(dts[d]));
        for (int p = 0; p < PP_PATHS; p++)
            if (paths[p].ok) printf(" %9.1f", layer_flops / layer_sec[p] / 1e9);
            else printf(" %9s", "-");
        printf("   (%.1f ms per layer on the best path)\n", 1e3 * layer_sec[best_path]);
        layer_best[d] = layer_flops / layer_sec[best_path] / 1e9;
    }
    okv_threadpool_set_workspace(tp, NULL, 0);
    free(ws);
    free(x);
    free(y);
    peaks pk = measure_peaks(tp2, quick ? 1 : 3);
    print_peaks(&pk);
    int best = 0; /* the instruction path with the highest measured peak here (vdpbf16ps runs at half
                   * the f32 FMA rate on some Xeons, twice it on Zen 4) */
    const double *pkv = okv_threadpool_size(tp) > 1 ? pk.two : pk.one;
    for (int i = 1; i < PEAK_INSNS; i++)
        if (pkv[i] > pkv[best]) best = i;
    double denom = pkv[best];
    for (int d = 0; d < n_dt; d++)
        printf("layer %-5s on %s: %.1f GFLOP/s = %.1f%% of the %s %s peak\n", okv_dtype_name(dts[d]),
               paths[best_paths[d]].name, layer_best[d], denom > 0 ? 100 * layer_best[d] / denom : 0.0,
               okv_threadpool_size(tp) > 1 ? "2-thread" : "one-core", peak_names[best]);
}


/* ---- 10. long-context attention, old vs new ------------------------------------------ */

typedef void (*attend_fn)(okv_threadpool *tp, const okv_attn_args *a);


/* T queries ending at position n_pos - 1 (keys 0 .. n_pos - 1 written), over
 * a flat pool or a ring of `ring` slots with `window`; the n_fn kernels
 * timed in turn rep by rep by `clock`, medians in secs[]; returns max
 * |fn[n_fn-1] - fn[0]|. */
static double attn_long_case(okv_threadpool *tp, const attend_fn *fns, int n_fn, double (*clock)(void), okv_dtype dt,
                             int n_pos, int T, int32_t ring, int32_t window, int reps, double *secs) {
    enum { HQ = 32, HKV = 8, D = 64, MAXF = 4 };
    int32_t slots = ring ? ring : n_pos;
    size_t row = (size_t)HKV * D, esz = okv_dtype_size(dt), cnt = (size_t)slots * row;
    void *kp = malloc(cnt * esz), *vp = malloc(cnt * esz);
    float *tmp = malloc(sizeof(float) * row * 1024);
    for (size_t i = 0; i < cnt; i += row * 1024) { /* chunked: no f32 copy of a whole 32k cache */
        size_t m = cnt - i < row * 1024 ? cnt - i : row * 1024;
        for (size_t e = 0; e < m; e++) tmp[e] = frand();
        okv_convert((char *)kp + i * esz, dt, tmp, OKV_F32, m);
        for (size_t e = 0; e < m; e++) tmp[e] = frand();
        okv_convert((char *)vp + i * esz, dt, tmp, OKV_F32, m);
    }
    free(tmp);
    float *q = malloc(sizeof(float) * T * HQ * D), *o[MAXF];
    for (int f = 0; f < n_fn; f++) o[f] = malloc(sizeof(float) * T * HQ * D);
    for (int i = 0; i < T * HQ * D; i++) q[i] = frand();
    int32_t *pos = malloc(sizeof(int32_t) * T);
    for (int t = 0; t < T; t++) pos[t] = n_pos - T + t;
    /* read span: what the planner hands over (ring: the window of the first query on) */
    int32_t from = ring && window && pos[0] - window + 1 > 0 ? pos[0] - window + 1 : 0;
    okv_run runs[2];
    int n_runs = 1;
    if (!ring) {
        runs[0] = (okv_run){0, n_pos, 0};
    } else {
        int32_t first = from % ring, n1 = n_pos - from < ring - first ? n_pos - from : ring - first;
        runs[0] = (okv_run){first, n1, from};
        if (n1 < n_pos - from) runs[n_runs++] = (okv_run){0, n_pos - from - n1, from + n1};
    }
    okv_attn_args a = {q, T, HQ, pos, {kp, vp, kp, vp, dt, dt, HKV, D}, runs, n_runs, window, 0.125f, o[0], NULL};
    double t[MAXF][16];
    for (int r = 0; r < reps; r++)
        for (int f = 0; f < n_fn; f++) {
            a.out = o[f];
            double t0 = clock();
            fns[f](tp, &a);
            t[f][r] = clock() - t0;
        }
    for (int f = 0; f < n_fn; f++) {
        qsort(t[f], reps, sizeof(double), cmp_double);
        secs[f] = t[f][reps / 2];
    }
    double md = 0;
    for (int i = 0; i < T * HQ * D; i++)
        if (fabs(o[0][i] - o[n_fn - 1][i]) > md) md = fabs(o[0][i] - o[n_fn - 1][i]);
    free(kp);
    free(vp);
    free(q);
    for (int f = 0; f < n_fn; f++) free(o[f]);
    free(pos);
    return md;
}

static void bench_attn_long(okv_threadpool *tp, int quick, okv_dtype dt) {
    const okv_kernels *k = okv_kernels_select(OKV_ISA_AUTO);
    if (!okv_cpu()->avx2) {
        printf("\nattnlong: needs AVX2 (the old kernel's path)\n");
        return;
    }
    printf("\nlong-context attention, 32/8 heads x 64, kv %s, 2 threads, medians; old = attend_v1 (avx2), new = %s table\n",
           okv_dtype_name(dt), k->name);
    printf("%-5s %6s %-13s %10s %10s %7s %9s %9s\n", "cache", "pos", "step", "old ms", "new ms", "new/old", "new GF/s",
           "max|diff|");
    static const int npos[] = {512, 4096, 16384, 32768};
    double dec[2][4] = {{0}}, pre[2][4] = {{0}};
    for (int c = 0; c < 2; c++)
        for (int i = 0; i < 4; i++)
            for (int m = 0; m < 2; m++) {
                int T = m ? 512 : 1, reps = m ? (quick || npos[i] > 16384 ? 1 : 3) : (quick ? 3 : 9);
                int32_t ring = c ? 4096 + 512 - 1 : 0, window = c ? 4096 : 0;
                attend_fn fns[2] = {bench_attend_v1_avx2, k->attend};
                double sec[2];
                double md = attn_long_case(tp, fns, 2, now, dt, npos[i], T, ring, window, reps, sec);
                double so = sec[0], sn = sec[1];
                /* visible (query, key) pairs x heads x (2 D for q.k + 2 D for p.v) */
                double pairs = 0;
                for (int t = 0; t < T; t++) {
                    double p = npos[i] - T + t + 1;
                    pairs += window && p > window ? window : p;
                }
                double gf = pairs * 32 * 64 * 4 / sn / 1e9;
                (m ? pre : dec)[c][i] = sn;
                printf("%-5s %6d %-13s %10.3f %10.3f %7.2f %9.1f %9.2g\n", c ? "ring" : "flat", npos[i],
                       m ? "prefill 512" : "decode", so * 1e3, sn * 1e3, sn / so, gf, md);
                fflush(stdout);
            }
    for (int c = 0; c < 2; c++)
        printf("%s, new kernel: decode 16k / decode 512 = %.2fx, 32k / 512 = %.2fx; prefill-512 attention at 16k "
               "= %.1f ms per layer\n", c ? "ring" : "flat", dec[c][2] / dec[c][0], dec[c][3] / dec[c][0],
               pre[c][2] * 1e3);
}

/* ---- 11. KV storage dtypes, same attention ----------------------------------------- */

static void bench_attn_kv(okv_threadpool *tp, int quick) {
    enum { HQ = 32, HKV = 8, D = 64, ND = 3 };
    static const okv_dtype dts[ND] = {OKV_BF16, OKV_Q8, OKV_F32};
    static const int npos[] = {512, 4096, 16384, 32768};
    const okv_kernels *k = okv_kernels_select(OKV_ISA_AUTO);
    size_t row = (size_t)HKV * D;
    printf("\nKV storage A/B, 32/8 heads x 64, flat cache, %s table, 2 threads, medians (dtypes interleaved)\n", k->name);
    printf("%6s %-12s %9s %9s %9s %8s %15s %11s\n", "pos", "step", "bf16 ms", "q8 ms", "f32 ms", "q8/bf16", "q8 B/tok/layer",
           "q8-f32 diff");
    for (int i = 0; i < 4; i++)
        for (int m = 0; m < 2; m++) {
            int n_pos = npos[i], T = m ? 512 : 1, reps = m ? (quick ? 1 : 5) : (quick ? 5 : 21);
            void *kp[ND], *vp[ND];
            for (int d = 0; d < ND; d++) {
                size_t b = okv_kv_row_bytes(dts[d], (size_t)n_pos * row);
                kp[d] = malloc(b);
                vp[d] = malloc(b);
            }
            float *kin = malloc(sizeof(float) * row * 1024), *vin = malloc(sizeof(float) * row * 1024);
            for (int32_t p0 = 0; p0 < n_pos; p0 += 1024) { /* chunked: no f32 copy of a whole 32k cache */
                int n = n_pos - p0 < 1024 ? n_pos - p0 : 1024;
                for (size_t e = 0; e < (size_t)n * row; e++) { kin[e] = frand(); vin[e] = frand(); }
                okv_run run = {p0, n, p0};
                for (int d = 0; d < ND; d++) {
                    okv_attn_kv kv = {kp[d], vp[d], kp[d], vp[d], dts[d], dts[d], HKV, D};
                    okv_attend_write(&kv, &run, 1, kin, vin);
                }
            }
            free(kin);
            free(vin);
            float *q = malloc(sizeof(float) * T * HQ * D), *out[ND];
            int32_t *pos = malloc(sizeof(int32_t) * T);
            for (int e = 0; e < T * HQ * D; e++) q[e] = frand();
            for (int t = 0; t < T; t++) pos[t] = n_pos - T + t;
            okv_run runs[1] = {{0, n_pos, 0}};
            double ts[ND][32];
            for (int d = 0; d < ND; d++) out[d] = malloc(sizeof(float) * T * HQ * D);
            for (int r = 0; r < reps; r++)
                for (int d = 0; d < ND; d++) {
                    okv_attn_args a = {q, T, HQ, pos, {kp[d], vp[d], kp[d], vp[d], dts[d], dts[d], HKV, D}, runs, 1, 0, 0.125f,
                                       out[d], NULL};
                    double t0 = now();
                    k->attend(tp, &a);
                    ts[d][r] = now() - t0;
                }
            double med[ND];
            for (int d = 0; d < ND; d++) med[d] = median(ts[d], reps);
            double md = 0;
            for (int e = 0; e < T * HQ * D; e++)
                if (fabs(out[1][e] - out[2][e]) > md) md = fabs(out[1][e] - out[2][e]);
            printf("%6d %-12s %9.3f %9.3f %9.3f %8.2f %15zu %11.2g\n", n_pos, m ? "prefill 512" : "decode", med[0] * 1e3,
                   med[1] * 1e3, med[2] * 1e3, med[1] / med[0], okv_kv_row_bytes(OKV_Q8, 2 * row), md);
            fflush(stdout);
            for (int d = 0; d < ND; d++) {
                free(kp[d]);
                free(vp[d]);
                free(out[d]);
            }
            free(q);
            free(pos);
        }
}

/* The same cases on one thread timed by CPU time (a loaded machine): old
 * kernel, the AVX-512 blocked one, and the table's (AMX tiles for prefill
 * on this CPU), so the ratios hold whatever else runs. */
static void bench_attn_long_cpu(okv_threadpool *tp1, int quick, okv_dtype dt) {
    const okv_kernels *k = okv_kernels_select(OKV_ISA_AUTO), *k512 = okv_kernels_select(OKV_ISA_AVX512);
    if (!okv_cpu()->avx2) return;
    printf("\nlong-context attention, 32/8 heads x 64, kv %s, ONE thread, CPU time, medians; old = attend_v1, "
           "avx512 = %s table's, new = %s table's (%s)\n", okv_dtype_name(dt), k512->name, k->name,
           okv_kernels_describe(k));
    printf("%-5s %6s %-13s %10s %10s %10s %8s %9s %9s\n", "cache", "pos", "step", "old ms", "avx512 ms", "new ms",
           "new/512", "new GF/s", "max|diff|");
    static const int npos[] = {512, 4096, 16384};
    for (int c = 0; c < 2; c++)
        for (int i = c; i < 3; i++) /* ring only past its window */
            for (int m = 0; m < 2; m++) {
                int T = m ? 512 : 1, reps = m ? (quick ? 1 : 3) : (quick ? 5 : 9);
                int32_t ring = c ? 4096 + 512 - 1 : 0, window = c ? 4096 : 0;
                attend_fn fns[3] = {bench_attend_v1_avx2, k512->attend, k->attend};
                double sec[3];
                double md = attn_long_case(tp1, fns, 3, cpu_now, dt, npos[i], T, ring, window, reps, sec);
                double pairs = 0;
                for (int t = 0; t < T; t++) {
                    double p = npos[i] - T + t + 1;
                    pairs += window && p > window ? window : p;
                }
                printf("%-5s %6d %-13s %10.3f %10.3f %10.3f %8.2f %9.1f %9.2g\n", c ? "ring" : "flat", npos[i],
                       m ? "prefill 512" : "decode", sec[0] * 1e3, sec[1] * 1e3, sec[2] * 1e3, sec[2] / sec[1],
                       pairs * 32 * 64 * 4 / sec[2] / 1e9, md);
                fflush(stdout);
            }
}

/* ---- 12. attndecode: the decode step's attention against the memory wall -------------- */

static double process_cpu(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Integer sum of 64-byte lines (no float assists whatever the bytes are),
 * 512-bit where the CPU has AVX-512, else 256-bit. */
__attribute__((target("avx512f"))) static uint64_t sum_lines_512(const char *p, size_t bytes) {
    __m512i a = _mm512_setzero_si512(), b = a;
    size_t i = 0;
    for (; i + 128 <= bytes; i += 128) {
        a = _mm512_add_epi64(a, _mm512_loadu_si512(p + i));
        b = _mm512_add_epi64(b, _mm512_loadu_si512(p + i + 64));
    }
    return (uint64_t)_mm512_reduce_add_epi64(_mm512_add_epi64(a, b));
}

__attribute__((target("avx2"))) static uint64_t sum_lines_256(const char *p, size_t bytes) {
    __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
    size_t i = 0;
    for (; i + 128 <= bytes; i += 128) {
        a = _mm256_add_epi64(a, _mm256_loadu_si256((const __m256i *)(p + i)));
        b = _mm256_add_epi64(b, _mm256_loadu_si256((const __m256i *)(p + i + 32)));
        c = _mm256_add_epi64(c, _mm256_loadu_si256((const __m256i *)(p + i + 64)));
        d = _mm256_add_epi64(d, _mm256_loadu_si256((const __m256i *)(p + i + 96)));
    }
    uint64_t o[4];
    _mm256_storeu_si256((__m256i *)o, _mm256_add_epi64(_mm256_add_epi64(a, b), _mm256_add_epi64(c, d)));
    return o[0] + o[1] + o[2] + o[3];
}

static uint64_t sum_lines(const char *p, size_t bytes) {
    return okv_cpu()->avx512f ? sum_lines_512(p, bytes) : sum_lines_256(p, bytes);
}

typedef struct kvprobe_job {
    const char *k, *v;
    size_t k_bytes, v_bytes;
    int parts;
    uint64_t sink[16];
} kvprobe_job;

/* Bytes [at, at + n) of part `task` of a pool of `bytes` split in `parts`. */
static size_t probe_part(size_t bytes, int parts, int task, size_t *at) {
    size_t per = bytes / parts / 128 * 128;
    *at = per * task;
    return task == parts - 1 ? bytes - *at : per;
}

/* Task t reads part t of K and of V (what a key split of the kernel reads). */
static void kvprobe_task(void *ctx, int task, int thread) {
    (void)thread;
    kvprobe_job *j = ctx;
    size_t ka, va, kn = probe_part(j->k_bytes, j->parts, task, &ka), vn = probe_part(j->v_bytes, j->parts, task, &va);
    j->sink[task] = sum_lines(j->k + ka, kn) + sum_lines(j->v + va, vn);
}

/* A Llama-3.2-1B decode step's attention (16 layers, 32/8 heads x 64, one
 * query token at the end of n_pos keys, each layer its own pool: at 16k
 * positions 512 MiB of bf16 K/V, more than the L3) on 2 threads: each
 * kernel over all 16 layers back to back, then the read-bandwidth probe
 * over the same pools, interleaved round by round; medians of wall time,
 * process CPU time (both threads) and GB/s of K/V; "of wall" is the probe's
 * time over the kernel's. A "hot" row repeats one small layer 16 times
 * (4 MiB: K/V in L2/L3): what the kernel costs when DRAM does not bound it. */
static void bench_attn_decode(okv_threadpool *tp, int quick, okv_dtype dt, okv_dtype vdt, int only) {
    enum { HQ = 32, HKV = 8, D = 64, NL = 16, NF = 4, MAXR = 31 };
    const okv_kernels *k = okv_kernels_select(OKV_ISA_AUTO);
    const char *names[NF] = {"blocked", "dpbf16", "amx", "table"};
    bool avx512 = okv_cpu()->avx512f && okv_cpu()->avx512bw && okv_cpu()->avx512vl && okv_cpu()->avx512dq;
    /* "blocked": the blocked kernel of the table's ISA (on AVX2 what the table ran before its decode kernel) */
    attend_fn fns[NF] = {avx512 ? okv_attend_avx512 : okv_attend_avx2, okv_attend_decode_dpbf16, okv_attend_decode_amx,
                         k->attend};
    bool ok[NF] = {dt == OKV_Q8 || vdt == OKV_Q8 || !avx512, okv_attend_decode_dpbf16_fits(1, HQ, HKV, D, dt, vdt),
                   okv_attend_decode_amx_fits(1, HQ, HKV, D, dt, vdt), true};
    printf("\ndecode attention, 16 layers x 32/8 heads x 64, K %s / V %s, %d threads, medians (table %s)\n",
           okv_dtype_name(dt), okv_dtype_name(vdt), okv_threadpool_size(tp), k->name);
    printf("%-6s %-10s %9s %9s %8s %8s %9s\n", "pos", "kernel", "wall ms", "cpu ms", "cpu/wall", "GB/s", "of probe");
    static const int npos[] = {512, 4096, 16384, 2048};
    size_t row = (size_t)HKV * D;
    for (int c = 0; c < 4; c++) {
        if (only >= 0 && c != only) continue;
        int n_pos = npos[c], hot = c == 3, nl = hot ? 1 : NL, reps = quick ? 5 : hot || n_pos < 16384 ? 21 : 11;
        size_t bytes = okv_kv_row_bytes(dt, (size_t)n_pos * row), vbytes = okv_kv_row_bytes(vdt, (size_t)n_pos * row);
        char *kp[NL], *vp[NL];
        for (int l = 0; l < nl; l++) {
            kp[l] = aligned_alloc(64, (bytes + 63) / 64 * 64);
            vp[l] = aligned_alloc(64, (vbytes + 63) / 64 * 64);
        }
        float *kin = malloc(sizeof(float) * row * 1024), *vin = malloc(sizeof(float) * row * 1024);
        for (int32_t p0 = 0; p0 < n_pos; p0 += 1024) {
            int n = n_pos - p0 < 1024 ? n_pos - p0 : 1024;
            for (size_t e = 0; e < (size_t)n * row; e++) { kin[e] = frand(); vin[e] = frand(); }
            okv_run run = {p0, n, p0};
            okv_attn_kv kv = {kp[0], vp[0], kp[0], vp[0], dt, vdt, HKV, D};
            okv_attend_write(&kv, &run, 1, kin, vin);
        }
        free(kin);
        free(vin);
        for (int l = 1; l < nl; l++) {
            memcpy(kp[l], kp[0], bytes);
            memcpy(vp[l], vp[0], vbytes);
        }
        float *q = malloc(sizeof(float) * HQ * D), *out[NF];
        for (int e = 0; e < HQ * D; e++) q[e] = frand();
        for (int f = 0; f < NF; f++) out[f] = malloc(sizeof(float) * HQ * D);
        int32_t pos = n_pos - 1;
        okv_run runs[1] = {{0, n_pos, 0}};
        double wall[NF + 1][MAXR], cpu[NF + 1][MAXR];
        for (int r = 0; r < reps; r++)
            for (int f = 0; f <= NF; f++) {
                if (f < NF && !ok[f]) continue;
                double w0 = now(), c0 = process_cpu();
                for (int l = 0; l < NL; l++) {
                    int ll = hot ? 0 : l;
                    if (f == NF) {
                        kvprobe_job pj = {kp[ll], vp[ll], bytes, vbytes, okv_threadpool_size(tp), {0}};
                        okv_threadpool_run(tp, pj.parts, kvprobe_task, &pj);
                        continue;
                    }
                    okv_attn_args a = {q, 1, HQ, &pos, {kp[ll], vp[ll], kp[ll], vp[ll], dt, vdt, HKV, D}, runs, 1, 0,
                                       0.125f, out[f], NULL};
                    fns[f](tp, &a);
                }
                wall[f][r] = now() - w0;
                cpu[f][r] = process_cpu() - c0;
            }
        double pw = median(wall[NF], reps), pc = median(cpu[NF], reps), gb = (double)(bytes + vbytes) * NL / 1e9;
        for (int f = 0; f <= NF; f++) {
            if (f < NF && !ok[f]) continue;
            double w = f == NF ? pw : median(wall[f], reps), cp = f == NF ? pc : median(cpu[f], reps);
            double md = 0;
            if (f < NF)
                for (int e = 0; e < HQ * D; e++)
                    if (fabs(out[f][e] - out[NF - 1][e]) > md) md = fabs(out[f][e] - out[NF - 1][e]);
            char label[16];
            snprintf(label, sizeof label, hot ? "hot%dk" : "%d", hot ? n_pos / 1024 : n_pos);
            printf("%-6s %-10s %9.3f %9.3f %8.2f %8.1f %8.2fx", label, f == NF ? "probe" : names[f],
                   w * 1e3, cp * 1e3, cp / w, gb / w, pw / w);
            if (f < NF) printf("  (max|diff| vs table %.2g)", md);
            printf("\n");
        }
        fflush(stdout);
        for (int l = 0; l < nl; l++) {
            free(kp[l]);
            free(vp[l]);
        }
        for (int f = 0; f < NF; f++) free(out[f]);
        free(q);
    }
}

/* ---- 14. decodestep: one decode step's GEMVs against the memory wall ---------------- */

typedef struct lines_job {
    const char *p;
    size_t bytes;
    int parts;
    uint64_t sink[64];
} lines_job;

static void lines_task(void *ctx, int task, int thread) {
    (void)thread;
    lines_job *j = ctx;
    size_t per = j->bytes / j->parts / 128 * 128, at = per * task;
    if (task == j->parts - 1) per = j->bytes - at;
    j->sink[task] = sum_lines(j->p + at, per);
}

/* The GEMVs of one Llama-3.2-1B decode step (q k v o gate up down x 16
 * layers, then the 128256 x 2048 tied head) for the bf16, q8 (8w linears,
 * 8w head) and q4 (4w g32 asym linears, 8w head) programs, every matrix in
 * its own memory (0.9-2.5 GB a step), on 2 threads with the dispatched
 * table; each step alternates with a sum over the same bytes (the probe),
 * medians of wall time. bf16 also runs the AVX2 GEMV (the default before
 * 2026-12-02) and the deterministic table's AMX T = 1 form, interleaved;
 * with AVX-512 BF16 + VNNI, bf16 and q8/q4 also run the GEMVs of 4 W rows
 * per pass with software prefetch (what the avx512-vdpbf16 table does not
 * use: on Zen 4 one row per pass reads faster). */
static void bench_decode_step(okv_threadpool *tp, const okv_kernels *best, int quick) {
    static const int shp[7][2] = {{2048, 2048}, {512, 2048}, {512, 2048}, {2048, 2048},
                                  {8192, 2048}, {8192, 2048}, {2048, 8192}};
    enum { NL = 16, NM = NL * 7 + 1, MAXS = 32, NP = 4 };
    const int steps = quick ? 5 : 15;
    const okv_qscheme q8 = {8, 32, false, OKV_F16, OKV_QB_NONE, false}, q4 = {4, 32, true, OKV_F16, OKV_QB_NONE, false};
    float *x = malloc(sizeof(float) * 8192), *y = malloc(sizeof(float) * 128256);
    for (int i = 0; i < 8192; i++) x[i] = frand();
    size_t ws_bytes = (size_t)4 << 20; /* planned scratch, as the runtime gives its kernels */
    void *ws = aligned_alloc(64, ws_bytes);
    okv_threadpool_set_workspace(tp, ws, ws_bytes);
    printf("\ndecode step GEMVs (Llama-3.2-1B, 16 layers + tied head), %d threads, medians of %d steps\n",
           okv_threadpool_size(tp), steps);
    printf("%-6s %-22s %9s %9s %9s %12s %8s\n", "prog", "path", "MB/step", "ms", "GB/s", "tok/s-equiv", "of probe");
    for (int prog = 0; prog < 3; prog++) {
        const okv_qscheme *lin = prog == 1 ? &q8 : prog == 2 ? &q4 : NULL, *head = prog ? &q8 : NULL;
        size_t off[NM + 1];
        off[0] = 0;
        for (int i = 0; i < NM; i++) {
            int N = i < NM - 1 ? shp[i % 7][0] : 128256, K = i < NM - 1 ? shp[i % 7][1] : 2048;
            const okv_qscheme *s = i < NM - 1 ? lin : head;
            size_t b = s ? (size_t)okv_quant_bytes(s, N, K) : (size_t)N * K * 2;
            off[i + 1] = off[i] + (b + 4095) / 4096 * 4096;
        }
        qarena a = {aligned_alloc(4096, off[NM]), off[NM]};
        if (!a.mem) {
            printf("%-6s no memory for %.0f MB\n", prog ? (prog == 1 ? "q8" : "q4") : "bf16", off[NM] / 1e6);
            continue;
        }
        qarena_fill_random(&a);
        for (int i = 0; i < NM && prog; i++) { /* valid f16 scales and offsets */
            int N = i < NM - 1 ? shp[i % 7][0] : 128256, K = i < NM - 1 ? shp[i % 7][1] : 2048;
            qarena one = {a.mem + off[i], off[i + 1] - off[i]};
            make_qset(&one, i < NM - 1 ? *lin : *head, N, K);
        }
        /* the last path: the GEMVs with 4 W row streams per pass and software prefetch (the
         * avx512-bf16 and AMX tables'), beside the avx512-vdpbf16 table's one row per pass */
        bool rows4 = okv_cpu()->avx512bf16 && okv_qmm_have_avx512vnni();
        const char *names[NP] = {best->name, "avx2 (previous)", "det amx T=1", "4 rows + prefetch"};
        const char *qnames[2] = {best->name, "4 rows + prefetch"};
        int n_paths = prog == 0 ? (rows4 ? NP : NP - 1) : (rows4 ? 2 : 1);
        double t[NP][MAXS], tp_[MAXS];
        for (int r = 0; r <= steps; r++) {
            for (int p = 0; p < n_paths; p++) {
                double t0 = now();
                for (int i = 0; i < NM; i++) {
                    int N = i < NM - 1 ? shp[i % 7][0] : 128256, K = i < NM - 1 ? shp[i % 7][1] : 2048;
                    const void *W = a.mem + off[i];
                    if (prog && p == 0) best->matmul_q(tp, y, x, 1, K, W, i < NM - 1 ? lin : head, N, NULL);
                    else if (prog) okv_matmul_q_avx512vnni(tp, y, x, 1, K, W, i < NM - 1 ? lin : head, N, NULL);
                    else if (p == 0) best->matmul(tp, y, x, 1, K, W, OKV_BF16, N, NULL);
                    else if (p == 1) okv_matmul_avx2(tp, y, x, 1, K, W, OKV_BF16, N, NULL);
                    else if (p == 2) okv_kernels_select_deterministic(OKV_ISA_AUTO)->matmul(tp, y, x, 1, K, W, OKV_BF16, N, NULL);
                    else okv_matmul_gemv_bf16x(tp, y, x, K, W, OKV_BF16, N, NULL);
                }
                if (r) t[p][r - 1] = now() - t0;
            }
            lines_job lj = {(const char *)a.mem, off[NM], okv_threadpool_size(tp), {0}};
            double t0 = now();
            okv_threadpool_run(tp, lj.parts, lines_task, &lj);
            if (r) tp_[r - 1] = now() - t0;
        }
        double bytes = 0, probe = median(tp_, steps);
        for (int i = 0; i < NM; i++) {
            int N = i < NM - 1 ? shp[i % 7][0] : 128256, K = i < NM - 1 ? shp[i % 7][1] : 2048;
            const okv_qscheme *s = i < NM - 1 ? lin : head;
            bytes += s ? (double)okv_quant_bytes(s, N, K) : (double)N * K * 2;
        }
        for (int p = 0; p < n_paths; p++) {
            double sec = median(t[p], steps);
            printf("%-6s %-22s %9.1f %9.2f %9.2f %12.2f %7.0f%%\n", prog ? (prog == 1 ? "q8" : "q4") : "bf16",
                   prog ? qnames[p] : names[p], bytes / 1e6, sec * 1e3, bytes / sec / 1e9, 1 / sec, 100 * probe / sec * bytes / off[NM]);
        }
        printf("%-6s %-22s %9.1f %9.2f %9.2f\n", "", "probe (same bytes)", off[NM] / 1e6, probe * 1e3, off[NM] / probe / 1e9);
        fflush(stdout);
        free(a.mem);
    }
    okv_threadpool_set_workspace(tp, NULL, 0);
    free(ws);
    free(x);
    free(y);
}

/* ---- 16. amxceiling: the bf16 GEMM against its loop and its instruction ------------ */

/* One thread, by CPU time, round by round in the same moments (the host's
 * speed drifts ~2x, so peaks taken in another minute say little): the
 * tdpbf16ps probe, the 2x2 step with its tile loads (amx_loop_peak), and
 * okv_matmul_amx on the gate shape (8192 x 2048, T = 512). Medians of each
 * and of the per-round ratios. */
static void bench_amx_ceiling(okv_threadpool *tp1, int quick) {
    if (!okv_amx_usable(NULL)) {
        printf("\namxceiling: AMX not usable here\n");
        return;
    }
    enum { N = 8192, K = 2048, R = 15 };
    int reps = quick ? 5 : R;
    wset w = make_wset(OKV_BF16, N, K);
    float *x = malloc(sizeof(float) * PP_T * K), *y = malloc(sizeof(float) * PP_T * N);
    for (int i = 0; i < PP_T * K; i++) x[i] = frand();
    size_t ws_bytes = okv_matmul_scratch_bytes(PP_T, K, N, OKV_BF16, 1);
    void *ws = aligned_alloc(64, (ws_bytes + 63) / 64 * 64);
    memset(ws, 0, ws_bytes);
    okv_threadpool_set_workspace(tp1, ws, ws_bytes);
    okv_matmul_amx(tp1, y, x, PP_T, K, w.copies[0], OKV_BF16, N, NULL); /* warm-up */
    double g[3][R], r_loop[R], r_peak[R];
    for (int r = 0; r < reps; r++) {
        g[0][r] = amx_peak(1000000);
        g[1][r] = amx_loop_peak(1000000);
        double t0 = thread_cpu();
        okv_matmul_amx(tp1, y, x, PP_T, K, w.copies[(r + 1) % w.n_copies], OKV_BF16, N, NULL);
        g[2][r] = 2.0 * PP_T * N * K / (thread_cpu() - t0) / 1e9;
        r_loop[r] = g[2][r] / g[1][r];
        r_peak[r] = g[2][r] / g[0][r];
    }
    printf("\namxceiling: one thread, CPU time, %d interleaved rounds, medians (GFLOP/s)\n", reps);
    printf("  tdpbf16ps alone %.1f, 2x2 step with its 4 tile loads %.1f (%.0f%% of it), "
           "okv_matmul_amx gate %dx%d T=%d %.1f\n",
           median(g[0], reps), median(g[1], reps), 100 * median(g[1], reps) / median(g[0], reps), N, K, PP_T,
           median(g[2], reps));
    printf("  per round: GEMM / 2x2-step %.0f%%, GEMM / tdpbf16ps %.0f%%\n", 100 * median(r_loop, reps),
           100 * median(r_peak, reps));
    okv_threadpool_set_workspace(tp1, NULL, 0);
    free(ws);
    free(x);
    free(y);
    free_wset(&w);
}

/* ---- 18. amxmix: what tile products leave to the vector units -------------------- */

/* ns per iteration of `n_fma` independent 512-bit FMAs (16 chains, all in
 * registers), with or without four tdpbf16ps (2x2 C tiles, operands in
 * tiles) issued at the top of each iteration; or four tilestored of 1 KiB
 * each into L1 (stores = true, no FMAs or products). One thread, CPU time. */
__attribute__((target("avx512f,amx-tile,amx-bf16"))) static double amx_mix_ns(int n_fma, bool tdp, bool stores,
                                                                             long iters) {
    static _Thread_local uint16_t tile[512] __attribute__((aligned(64)));
    static _Thread_local float cst[4][256] __attribute__((aligned(64)));
    for (int i = 0; i < 512; i++) tile[i] = 0x3c00; /* bf16 2^-7: sums stay finite */
    __asm__ volatile("ldtilecfg %0" ::"m"(amx_probe_cfg));
    __asm__ volatile("tilezero %%tmm0\n\ttilezero %%tmm1\n\ttilezero %%tmm2\n\ttilezero %%tmm3" ::);
    __asm__ volatile("tileloadd (%0,%1,1), %%tmm4\n\ttileloadd (%0,%1,1), %%tmm5\n\t"
                     "tileloadd (%0,%1,1), %%tmm6\n\ttileloadd (%0,%1,1), %%tmm7" ::"r"(tile), "r"((long)64) : "memory");
    const __m512 b = _mm512_set1_ps(0.999f), c = _mm512_set1_ps(0.001f);
    __m512 a0 = _mm512_set1_ps(1.0f), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    __m512 a8 = a0, a9 = a0, a10 = a0, a11 = a0, a12 = a0, a13 = a0, a14 = a0, a15 = a0;
    double t0 = thread_cpu();
    for (long it = 0; it < iters; it++) {
        if (tdp)
            __asm__ volatile("tdpbf16ps %%tmm6, %%tmm4, %%tmm0\n\ttdpbf16ps %%tmm7, %%tmm4, %%tmm1\n\t"
                             "tdpbf16ps %%tmm6, %%tmm5, %%tmm2\n\ttdpbf16ps %%tmm7, %%tmm5, %%tmm3" ::);
        if (stores)
            __asm__ volatile("tilestored %%tmm0, (%0,%4,1)\n\ttilestored %%tmm1, (%1,%4,1)\n\t"
                             "tilestored %%tmm2, (%2,%4,1)\n\ttilestored %%tmm3, (%3,%4,1)" ::"r"(cst[0]),
                             "r"(cst[1]), "r"(cst[2]), "r"(cst[3]), "r"((long)64)
                             : "memory");
        for (int v = 0; v < n_fma; v += 16) { /* 16 independent chains, kept in registers */
            a0 = _mm512_fmadd_ps(a0, b, c), a1 = _mm512_fmadd_ps(a1, b, c), a2 = _mm512_fmadd_ps(a2, b, c);
            a3 = _mm512_fmadd_ps(a3, b, c), a4 = _mm512_fmadd_ps(a4, b, c), a5 = _mm512_fmadd_ps(a5, b, c);
            a6 = _mm512_fmadd_ps(a6, b, c), a7 = _mm512_fmadd_ps(a7, b, c), a8 = _mm512_fmadd_ps(a8, b, c);
            a9 = _mm512_fmadd_ps(a9, b, c), a10 = _mm512_fmadd_ps(a10, b, c), a11 = _mm512_fmadd_ps(a11, b, c);
            a12 = _mm512_fmadd_ps(a12, b, c), a13 = _mm512_fmadd_ps(a13, b, c), a14 = _mm512_fmadd_ps(a14, b, c);
            a15 = _mm512_fmadd_ps(a15, b, c);
            __asm__ volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5), "+v"(a6), "+v"(a7));
            __asm__ volatile("" : "+v"(a8), "+v"(a9), "+v"(a10), "+v"(a11), "+v"(a12), "+v"(a13), "+v"(a14), "+v"(a15));
        }
    }
    double dt = thread_cpu() - t0;
    __asm__ volatile("tilerelease" ::);
    __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                             _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
    s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)),
                                       _mm512_add_ps(_mm512_add_ps(a12, a13), _mm512_add_ps(a14, a15))));
    volatile float sink = _mm512_reduce_add_ps(s);
    (void)sink;
    return dt / iters * 1e9;
}

/* Whether vector work hides behind tile products on this core: four
 * tdpbf16ps (~16 cycles each) with 0..256 independent FMAs per iteration,
 * each alone and together, medians of interleaved rounds. "Together" equal
 * to the products alone means the FMAs ran free beside them; equal to the
 * sum, that they did not overlap at all. Also the cost of a tile store. */
static void bench_amx_mix(int quick) {
    if (!okv_amx_usable(NULL) || !okv_cpu()->avx512f) {
        printf("\namxmix: AMX not usable here\n");
        return;
    }
    enum { R = 7, NF = 5 };
    static const int nf[NF] = {32, 64, 128, 192, 256};
    int reps = quick ? 3 : R;
    long iters = quick ? 200000 : 1000000;
    double tdp[R], st[R], fma[NF][R], mix[NF][R];
    for (int r = 0; r < reps; r++) {
        tdp[r] = amx_mix_ns(0, true, false, iters);
        st[r] = amx_mix_ns(0, false, true, iters);
        for (int f = 0; f < NF; f++) {
            fma[f][r] = amx_mix_ns(nf[f], false, false, iters);
            mix[f][r] = amx_mix_ns(nf[f], true, false, iters);
        }
    }
    double t = median(tdp, reps);
    printf("\namxmix: one thread, CPU time, medians of %d rounds: 4 tdpbf16ps %.1f ns; 4 tilestored (1 KiB each, L1) "
           "%.1f ns\n", reps, t, median(st, reps));
    printf("  %5s %12s %16s %20s %22s\n", "FMAs", "FMAs alone", "with 4 products", "of sum (alone each)",
           "FMAs/ns beside tiles");
    for (int f = 0; f < NF; f++) {
        double a = median(fma[f], reps), m = median(mix[f], reps);
        printf("  %5d %9.1f ns %13.1f ns %19.0f%% %22.2f\n", nf[f], a, m, 100 * m / (a + t), nf[f] / m);
    }
}

/* ---- 17. onednn: the AMX GEMM side by side with oneDNN's ------------------------- */

#ifdef OKV_PEER_ONEDNN
/* Per Llama-3.2-1B prefill shape (T = 512, bf16 W read in place by both):
 * okv_matmul_amx and oneDNN's matmul (peer_onednn.c) alternating call by
 * call, with the tdpbf16ps probe in each round; first one thread by CPU
 * time, then two threads by wall clock (our pool vs oneDNN's OpenMP team).
 * Medians, and the median of the per-round ratios peer / ours. */
static void bench_onednn(okv_threadpool **tps, int quick) {
    if (!okv_amx_usable(NULL)) {
        printf("\nonednn: AMX not usable here\n");
        return;
    }
    enum { R = 9 };
    int reps = quick ? 3 : R;
    float *x = malloc(sizeof(float) * PP_T * 8192), *y = malloc(sizeof(float) * PP_T * 8192);
    uint16_t *xb = malloc(sizeof(uint16_t) * PP_T * 8192);
    for (int i = 0; i < PP_T * 8192; i++) x[i] = frand();
    size_t ws_bytes;
    void *ws = pp_workspace(&ws_bytes);
    for (int nt = 1; nt <= 2; nt++) {
        okv_threadpool *tp = tps[nt - 1];
        double (*clock_fn)(void) = nt == 1 ? thread_cpu : now;
        okv_threadpool_set_workspace(tp, ws, ws_bytes);
        printf("\nonednn: bf16 W [N][K] read in place, T=%d, %d thread%s by %s, %d rounds, medians (GFLOP/s)\n", PP_T,
               nt, nt > 1 ? "s" : "", nt == 1 ? "CPU time" : "wall clock", reps);
        printf("  oneDNN = W read in place (as offkv does), packed = W repacked once into oneDNN's layout,\n"
               "  MKL = cblas_gemm_bf16bf16f32 on W in place (0 when not built in);\n"
               "  ratios = peer speed / offkv speed, per round\n");
        printf("%-6s %-11s %9s %9s %9s %9s %9s %8s %8s %8s  %s\n", "matmul", "W (NxK)", "tdpbf16ps", "offkv",
               "oneDNN", "packed", "MKL", "oneDNN/", "packed/", "MKL/", "oneDNN kernels");
        double lay[4][R] = {{0}}, layer_flops = 0;
        for (int s = 0; s < DEC_SHAPES; s++) {
            int N = dec_shape[s][0], K = dec_shape[s][1];
            double flops = 2.0 * PP_T * N * K;
            layer_flops += flops;
            const char *impl = "?", *impl_p = "?";
            peer_gemm *pg = peer_gemm_create(PP_T, K, N, 0, &impl), *pp = peer_gemm_create(PP_T, K, N, 1, &impl_p);
            if (!pg || !pp) {
                printf("%-6s oneDNN refused the shape\n", dec_names[s]);
                peer_gemm_free(pg);
                peer_gemm_free(pp);
                continue;
            }
            okv_convert(xb, OKV_BF16, x, OKV_F32, (size_t)PP_T * K);
            wset w = make_wset(OKV_BF16, N, K);
            void *packed[80];
            for (int c = 0; c < w.n_copies; c++) packed[c] = peer_gemm_pack(pp, w.copies[c]);
            okv_matmul_amx(tp, y, x, PP_T, K, w.copies[0], OKV_BF16, N, NULL); /* warm-up all three */
            peer_gemm_run(pg, y, xb, w.copies[0], nt);
            peer_gemm_run(pp, y, xb, packed[0], nt);
            double g[5][R] = {{0}}, ratio[3][R] = {{0}};
            for (int r = 0; r < reps; r++) {
                g[0][r] = amx_peak(300000);
                int c0 = (3 * r + 1) % w.n_copies, c1 = (3 * r + 2) % w.n_copies, c2 = (3 * r + 3) % w.n_copies;
                double t0 = clock_fn();
                okv_matmul_amx(tp, y, x, PP_T, K, w.copies[c0], OKV_BF16, N, NULL);
                double t1 = clock_fn();
                peer_gemm_run(pg, y, xb, w.copies[c1], nt);
                double t2 = clock_fn();
                peer_gemm_run(pp, y, xb, packed[c2], nt);
                double t3 = clock_fn(), t4 = t3;
#ifdef OKV_PEER_MKL
                peer_mkl_gemm(y, xb, w.copies[(3 * r + 4) % w.n_copies], PP_T, K, N, nt);
                t4 = clock_fn();
                g[4][r] = flops / (t4 - t3) / 1e9;
                ratio[2][r] = (t1 - t0) / (t4 - t3);
                lay[3][r] += t4 - t3;
#endif
                g[1][r] = flops / (t1 - t0) / 1e9;
                g[2][r] = flops / (t2 - t1) / 1e9;
                g[3][r] = flops / (t3 - t2) / 1e9;
                ratio[0][r] = (t1 - t0) / (t2 - t1);
                ratio[1][r] = (t1 - t0) / (t3 - t2);
                lay[0][r] += t1 - t0;
                lay[1][r] += t2 - t1;
                lay[2][r] += t3 - t2;
            }
            printf("%-6s %5dx%-5d %9.1f %9.1f %9.1f %9.1f %9.1f %7.2fx %7.2fx %7.2fx  %s / %s\n", dec_names[s], N, K,
                   median(g[0], reps), median(g[1], reps), median(g[2], reps), median(g[3], reps),
                   median(g[4], reps), median(ratio[0], reps), median(ratio[1], reps), median(ratio[2], reps),
                   impl, impl_p);
            for (int c = 0; c < w.n_copies; c++) free(packed[c]);
            free_wset(&w);
            peer_gemm_free(pg);
            peer_gemm_free(pp);
        }
        double lr[3][R];
        for (int r = 0; r < reps; r++) {
            for (int i = 0; i < 3; i++) lr[i][r] = lay[i + 1][r] > 0 ? lay[0][r] / lay[i + 1][r] : 0;
            for (int i = 0; i < 4; i++) lay[i][r] = lay[i][r] > 0 ? layer_flops / lay[i][r] / 1e9 : 0;
        }
        printf("%-18s %9s %9.1f %9.1f %9.1f %9.1f %7.2fx %7.2fx %7.2fx\n", "layer (7 matmuls)", "",
               median(lay[0], reps), median(lay[1], reps), median(lay[2], reps), median(lay[3], reps),
               median(lr[0], reps), median(lr[1], reps), median(lr[2], reps));
        okv_threadpool_set_workspace(tp, NULL, 0);
    }
    free(ws);
    free(x);
    free(xb);
    free(y);
}
#endif

/* ---- 15. 16-bit prefill attention (AMX tiles or vdpbf16ps) vs the blocked AVX-512 kernel ---- */

static void bench_attn_amx(okv_threadpool **tps, int quick) {
    bool amx = okv_amx_usable(NULL) && okv_kernels_select(OKV_ISA_AUTO)->isa == OKV_ISA_AMX; /* OKV_KERNELS caps it */
    if (!amx && !okv_cpu()->avx512bf16) {
        printf("\nattnamx: neither AMX nor AVX-512 BF16 usable here\n");
        return;
    }
    const char *name = amx ? "amx" : "vdp";
    attend_fn fast = amx ? okv_attend_amx_tiles : okv_attend_prefill_dpbf16;
    printf("\n16-bit prefill attention, 32/8 heads x 64, kv bf16, T = 512, medians; blocked = okv_attend_avx512, %s = "
           "%s\n", name, amx ? "okv_attend_amx_tiles" : "okv_attend_prefill_dpbf16");
    printf("%-3s %-5s %6s %10s %7s ms %6s/blk %6s GF/s %9s\n", "thr", "cache", "pos", "blocked ms", name, name, name,
           "max|diff|");
    static const int npos[] = {512, 4096, 16384, 16384};
    for (int th = 0; th < 2; th++)
        for (int i = 0; i < 4; i++) {
            int ringc = i == 3, T = 512, reps = quick ? 3 : (npos[i] > 4096 ? 5 : 11);
            int32_t ring = ringc ? 4096 + 512 - 1 : 0, window = ringc ? 4096 : 0;
            attend_fn fns[2] = {okv_attend_avx512, fast};
            double sec[2];
            double md = attn_long_case(tps[th], fns, 2, th ? now : cpu_now, OKV_BF16, npos[i], T, ring, window, reps, sec);
            double pairs = 0;
            for (int t = 0; t < T; t++) {
                double p = npos[i] - T + t + 1;
                pairs += window && p > window ? window : p;
            }
            printf("%-3d %-5s %6d %10.3f %10.3f %10.3f %11.1f %9.2g\n", th + 1, ringc ? "ring" : "flat", npos[i],
                   sec[0] * 1e3, sec[1] * 1e3, sec[1] / sec[0], pairs * 32 * 64 * 4 / sec[1] / 1e9, md);
            fflush(stdout);
        }
}

/* The variant the table's router runs for these shapes (okv_kernels_pick). */
static const char *mm_variant(const okv_kernels *k, int T, const wset *w) {
    okv_kshape sh = {.T = T, .K = w->K, .N = w->N, .wdt = w->dt};
    const char *v = okv_kernels_pick(k, OKV_KOP_MATMUL, &sh);
    return v ? v : "?";
}

static const char *at_variant(const okv_kernels *k, int T, int nh, int kvh, int D, okv_dtype dt) {
    okv_kshape sh = {.T = T, .n_heads = nh, .kv_heads = kvh, .head_dim = D, .k_dt = dt, .v_dt = dt};
    const char *v = okv_kernels_pick(k, OKV_KOP_ATTEND, &sh);
    return v ? v : "?";
}

static int want(int argc, char **argv, const char *name) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], name)) return 1;
    return 0;
}

static void noop_task(void *ctx, int task, int thread) { (void)ctx; (void)task; (void)thread; }

/* Busy for us microseconds of wall time. */
static void spin_us(double us) {
    double end = now() + us * 1e-6;
    while (now() < end) {}
}
static void spin10_task(void *ctx, int task, int thread) { (void)ctx; (void)task; (void)thread; spin_us(10); }

int main(int argc, char **argv) {
    int quick = 0, only = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else only = 1;
    }
#define SECTION(name) (!only || want(argc, argv, name))
    okv_threadpool *tps[2] = {okv_threadpool_create(1), okv_threadpool_create(2)};
    const okv_kernels *tabs[2] = {okv_kernels_select(OKV_ISA_PLAIN), okv_kernels_select(OKV_ISA_AUTO)};
    int n_tabs = tabs[0] == tabs[1] ? 1 : 2;
    printf("cpu features: %s\n", okv_cpu_features());

    /* 1 */
    size_t n = (quick ? 256u << 20 : 1u << 30) / 4;
    float *buf = aligned_alloc(64, n * 4);
    for (size_t i = 0; i < n; i++) buf[i] = 1.0f;
    double bw[2] = {25, 35}; /* typical values here if the section is skipped */
    for (int t = 0; t < 2 && SECTION("bw"); t++) {
        bw[t] = measure_bandwidth(tps[t], buf, n, quick ? 3 : 7);
        printf("memory read bandwidth, %d thread%s: %.1f GB/s (sum over %zu MiB, best of %d)\n", t + 1,
               t ? "s" : "", bw[t], n * 4 >> 20, quick ? 3 : 7);
    }
    free(buf);

    /* 2 */
    static const int shapes[2][2] = {{2048, 8192}, {8192, 2048}}; /* N x K */
    static const okv_dtype dts[3] = {OKV_F32, OKV_BF16, OKV_F16};
    if (SECTION("gemv")) {
    printf("\nGEMV T=1 (weights streamed from DRAM)\n");
    printf("%-10s %-5s %-6s %-16s %3s %9s %9s %8s\n", "W (NxK)", "dtype", "isa", "variant", "thr", "ms", "GB/s", "of bw");
    for (int s = 0; s < 2; s++)
        for (int d = 0; d < 3; d++) {
            wset w = make_wset(dts[d], shapes[s][0], shapes[s][1]);
            double bytes = (double)w.N * w.K * okv_dtype_size(w.dt);
            for (int ti = 0; ti < n_tabs; ti++)
                for (int t = 0; t < 2; t++) {
                    double sec = time_matmul(tabs[ti], tps[t], &w, 1, ti == 0 && quick ? 2 : 10);
                    printf("%4dx%-5d %-5s %-6s %-16s %3d %9.3f %9.1f %7.0f%%\n", w.N, w.K, okv_dtype_name(w.dt),
                           tabs[ti]->name, mm_variant(tabs[ti], 1, &w), t + 1, sec * 1e3, bytes / sec / 1e9,
                           100 * bytes / sec / 1e9 / bw[t]);
                }
            free_wset(&w);
        }

    }

    /* 3 */
    if (SECTION("prefill")) {
    printf("\nprefill matmul T=128\n");
    printf("%-10s %-5s %-6s %-16s %3s %9s %9s\n", "W (NxK)", "dtype", "isa", "variant", "thr", "ms", "GFLOP/s");
    for (int s = 0; s < 2; s++)
        for (int d = 0; d < 3; d++) {
            wset w = make_wset(dts[d], shapes[s][0], shapes[s][1]);
            for (int ti = 0; ti < n_tabs; ti++)
                for (int t = 0; t < 2; t++) {
                    if (ti == 0 && (quick || t == 0 || s == 1)) continue; /* plain is slow: one sample */
                    double sec = time_matmul(tabs[ti], tps[t], &w, 128, ti == 0 ? 1 : 3);
                    printf("%4dx%-5d %-5s %-6s %-16s %3d %9.2f %9.1f\n", w.N, w.K, okv_dtype_name(w.dt), tabs[ti]->name,
                           mm_variant(tabs[ti], 128, &w), t + 1, sec * 1e3, 2.0 * 128 * w.N * w.K / sec / 1e9);
                }
            free_wset(&w);
        }

    }

    /* 4 */
    if (SECTION("attn")) {
    printf("\nattention decode, 4096 keys\n");
    printf("%-22s %-5s %-6s %-16s %3s %9s %9s\n", "heads q/kv x dim", "kv", "isa", "variant", "thr", "us", "KV GB/s");
    static const int cfg[3][3] = {{32, 8, 64}, {8, 1, 256}, {16, 8, 128}};
    for (int c = 0; c < 3; c++)
        for (int d = 0; d < 3; d++)
            for (int ti = 0; ti < n_tabs; ti++)
                for (int t = 0; t < 2; t++) {
                    double sec = time_attend(tabs[ti], tps[t], cfg[c][0], cfg[c][1], cfg[c][2], dts[d], 4096, 1,
                                             ti == 0 ? 5 : 20);
                    double bytes = 2.0 * 4096 * cfg[c][1] * cfg[c][2] * okv_dtype_size(dts[d]);
                    printf("%3d/%-2d x %-12d %-5s %-6s %-16s %3d %9.1f %9.1f\n", cfg[c][0], cfg[c][1], cfg[c][2],
                           okv_dtype_name(dts[d]), tabs[ti]->name,
                           at_variant(tabs[ti], 1, cfg[c][0], cfg[c][1], cfg[c][2], dts[d]), t + 1, sec * 1e6,
                           bytes / sec / 1e9);
                }

    }

    if (SECTION("attn")) {
        printf("\nattention decode, 32768 keys (cache larger than L3), 32/8 heads x 64\n");
        printf("%-5s %-6s %-16s %3s %9s %9s\n", "kv", "isa", "variant", "thr", "us", "KV GB/s");
        for (int d = 0; d < 3; d++)
            for (int t = 0; t < 2; t++) {
                double sec = time_attend(tabs[n_tabs - 1], tps[t], 32, 8, 64, dts[d], 32768, 1, 5);
                double bytes = 2.0 * 32768 * 8 * 64 * okv_dtype_size(dts[d]);
                printf("%-5s %-6s %-16s %3d %9.1f %9.1f\n", okv_dtype_name(dts[d]), tabs[n_tabs - 1]->name,
                       at_variant(tabs[n_tabs - 1], 1, 32, 8, 64, dts[d]), t + 1, sec * 1e6, bytes / sec / 1e9);
            }
        printf("\nattention prefill chunk, T=128 queries at the end of 4096 keys, 32/8 heads x 64\n");
        printf("%-5s %-6s %-16s %3s %9s %9s\n", "kv", "isa", "variant", "thr", "ms", "GFLOP/s");
        for (int d = 0; d < 3; d++)
            for (int t = 0; t < 2; t++) {
                double sec = time_attend(tabs[n_tabs - 1], tps[t], 32, 8, 64, dts[d], 4096, 128, 5);
                double pairs = 128.0 * (4096 - 64); /* visible (query, key) pairs, about */
                printf("%-5s %-6s %-16s %3d %9.2f %9.1f\n", okv_dtype_name(dts[d]), tabs[n_tabs - 1]->name,
                       at_variant(tabs[n_tabs - 1], 128, 32, 8, 64, dts[d]), t + 1, sec * 1e3,
                       pairs * 32 * 64 * 4 / sec / 1e9);
            }
    }

    /* 5 */
    if (SECTION("pool")) {
    int loops = 20000;
    double t0 = now();
    for (int i = 0; i < loops; i++) okv_threadpool_run(tps[1], 2, noop_task, NULL);
    printf("\nthread pool: %.2f us per 2-task loop on 2 threads\n", (now() - t0) / loops * 1e6);
    /* decode's pattern: loops of 8 tasks of ~10 us each (ideal: 40 us on 2
     * threads), back to back and after 100 us of caller-only work (the
     * workers have gone to sleep); per-loop medians over rounds */
    enum { ROUNDS = 21, PER = 200 };
    double busy[ROUNDS], gap[ROUNDS];
    for (int r = 0; r < ROUNDS; r++) {
        double sum = 0;
        for (int i = 0; i < PER; i++) {
            double a = now();
            okv_threadpool_run(tps[1], 8, spin10_task, NULL);
            sum += now() - a;
        }
        busy[r] = sum / PER * 1e6;
        sum = 0;
        for (int i = 0; i < PER / 4; i++) {
            spin_us(100);
            double a = now();
            okv_threadpool_run(tps[1], 8, spin10_task, NULL);
            sum += now() - a;
        }
        gap[r] = sum / (PER / 4) * 1e6;
    }
    printf("thread pool: 8 x 10 us tasks on 2 threads (ideal 40 us): back to back %.1f us, after 100 us idle %.1f us "
           "(medians of %d rounds)\n", median(busy, ROUNDS), median(gap, ROUNDS), ROUNDS);
    }

    /* 6 */
    if (SECTION("peak")) {
        double p256 = 0, p512 = 0;
        for (int r = 0; r < 5; r++) {
            double x = fma_peak_256(20000000);
            if (x > p256) p256 = x;
            if (okv_cpu()->avx512f) {
                x = fma_peak_512(10000000);
                if (x > p512) p512 = x;
            }
        }
        printf("\nFMA peak, one core: %.1f GFLOP/s with 256-bit vectors, %.1f with 512-bit%s\n", p256, p512,
               okv_cpu()->avx512f ? "" : " (no avx512f)");
        peaks pk = measure_peaks(tps[1], quick ? 1 : 3);
        print_peaks(&pk);
    }

    /* 7 */
    if (SECTION("decode")) bench_decode(tabs[n_tabs - 1], tps[1], bw[1], quick);

    /* 8 */
    if (SECTION("qgemv")) bench_qgemv(tps[1], tabs[n_tabs - 1], quick);
    if (SECTION("qgemm")) bench_qgemm(tps[1], tabs[n_tabs - 1], quick, false);
    if (want(argc, argv, "qgemmcpu")) bench_qgemm(tps[0], tabs[n_tabs - 1], quick, true);
    if (SECTION("qlayout")) bench_qlayout(tps[1], quick);
    if (SECTION("qroof")) bench_qroof(tabs[n_tabs - 1], quick);
    if (SECTION("qbroof")) bench_qbroof(quick, want(argc, argv, "dram") ? tps[1] : NULL);
    if (want(argc, argv, "qbgemv")) bench_qbgemv(tps[1], quick, want(argc, argv, "hot")); /* 19 */

    /* 9 */
    if (SECTION("pp512")) bench_pp512(tps[1], tps[1], quick, false);
    if (want(argc, argv, "pp512cpu")) bench_pp512(tps[0], tps[1], quick, true);
    if (want(argc, argv, "attnlong")) {
        okv_dtype kvdt = OKV_BF16;
        for (int i = 1; i + 1 < argc; i++)
            for (int d = 0; d < 3 && !strcmp(argv[i], "--kv"); d++)
                if (!strcmp(argv[i + 1], okv_dtype_name((okv_dtype)d))) kvdt = (okv_dtype)d;
        bench_attn_long(tps[1], quick, kvdt);
    }
    if (want(argc, argv, "attnkv")) bench_attn_kv(tps[1], quick); /* 11 */
    if (want(argc, argv, "attnlongcpu")) bench_attn_long_cpu(tps[0], quick, OKV_BF16);
    if (want(argc, argv, "attndecode")) /* 12 */
        bench_attn_decode(tps[want(argc, argv, "1t") ? 0 : 1], quick, want(argc, argv, "q8") ? OKV_Q8 : OKV_BF16,
                          want(argc, argv, "q8") || want(argc, argv, "vq8") ? OKV_Q8 : OKV_BF16,
                          want(argc, argv, "hot") ? 3 : want(argc, argv, "16k") ? 2 : -1);
    if (want(argc, argv, "ops")) bench_ops(quick); /* 13 */
    if (want(argc, argv, "decodestep")) bench_decode_step(tps[1], tabs[n_tabs - 1], quick); /* 14 */
    if (want(argc, argv, "attnamx")) bench_attn_amx(tps, quick); /* 15 */
    if (want(argc, argv, "amxceiling")) bench_amx_ceiling(tps[0], quick); /* 16 */
    if (want(argc, argv, "amxmix")) bench_amx_mix(quick); /* 18 */
#ifdef OKV_PEER_ONEDNN
    if (want(argc, argv, "onednn")) bench_onednn(tps, quick); /* 17 */
#endif

    okv_threadpool_free(tps[0]);
    okv_threadpool_free(tps[1]);
    return 0;
}
