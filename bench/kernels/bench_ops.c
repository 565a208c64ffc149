/* bench_ops.c — `bench_kernels ops`: the row-wise ops of a Llama-3.2-1B step
 * (issue 12 part 4), old and new side by side, against a memory roof.
 *
 * One thread, timed in its own CPU time (a loaded machine still measures the
 * work; time descheduled is not counted), variants interleaved round by
 * round on the same buffers, medians. Shapes of a pp512 step: GLU over
 * [512, 8192] (SiLU, and tanh-GELU as Gemma has it), RoPE over q [512, 32,
 * 64] + k [512, 8, 64] in place, add + RMSNorm over [512, 2048] (as the
 * runtime ran it before: okv_add then the AVX2 rmsnorm over 64-row blocks),
 * RMSNorm alone; then the same at T = 1 (decode: one row, data in L1/L2,
 * many calls per sample). The roof: y = a + b with 512-bit vectors over the
 * same bytes as the GLU (two streams in, one out), and memcpy of the RoPE's
 * bytes. Buffers are 16 MiB per stream: they live in this CPU's L3 between
 * rounds, as a step's activations do (each op reads what the op before it
 * just wrote). */
#include <immintrin.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "okv_kernels.h"
#include "okv_kernels_internal.h"

void bench_ops(int quick);

static double cpu_sec(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double med(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static float *fbuf(size_t n, float scale) {
    float *p = aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
    uint32_t s = 12345u;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        p[i] = ((float)(s >> 8) * (1.0f / 16777216.0f) * 2.0f - 1.0f) * scale;
    }
    return p;
}

__attribute__((target("avx512f"))) static void add_roof(float *y, const float *a, const float *b, size_t n) {
    for (size_t i = 0; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_add_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i)));
}

/* the shared state of one shape's variants */
typedef struct ops_bufs {
    int T;
    float *gate, *up, *y;           /* [T, 8192] */
    float *q, *k, *cs;              /* [T, 32, 64], [T, 8, 64], [T, 32, 2] */
    float *a, *b, *sum, *norm, *w;  /* [T, 2048], w [2048] */
} ops_bufs;

enum { V_GLU_OLD, V_GLU_A2, V_GLU_A5, V_GELU_A2, V_GELU_A5, V_ROOF_ADD,
       V_ROPE_OLD, V_ROPE_A2, V_ROPE_A5, V_ROOF_COPY,
       V_AR_OLD, V_AR_PLAIN, V_AR_A2, V_AR_A5, V_RMS_A2, V_RMS_A5, N_V };
static const char *const v_name[N_V] = {
    "glu silu   avx2 (old)", "glu silu   avx2", "glu silu   avx512", "glu gelu   avx2", "glu gelu   avx512",
    "  roof: y=a+b 512-bit", "rope       plain (old)", "rope       avx2", "rope       avx512", "  roof: memcpy",
    "add+rms    old (2 pass)", "add_rmsnorm plain", "add_rmsnorm avx2", "add_rmsnorm avx512",
    "rmsnorm    avx2", "rmsnorm    avx512"};
/* the "old" variant each ratio is taken against */
static const int v_base[N_V] = {V_GLU_OLD, V_GLU_OLD, V_GLU_OLD, V_GELU_A2, V_GELU_A2, V_GLU_OLD,
                                V_ROPE_OLD, V_ROPE_OLD, V_ROPE_OLD, V_ROPE_OLD,
                                V_AR_OLD, V_AR_OLD, V_AR_OLD, V_AR_OLD, V_RMS_A2, V_RMS_A2};

static bool v_usable(int v, bool avx512) {
    switch (v) {
    case V_GLU_A5: case V_GELU_A5: case V_ROOF_ADD: case V_ROPE_A5: case V_AR_A5: case V_RMS_A5: return avx512;
    default: return true;
    }
}

/* bytes each variant moves (reads + writes), for GB/s */
static double v_bytes(int v, int T) {
    double row8k = 4.0 * 8192, row2k = 4.0 * 2048, rope = 4.0 * (32 + 8) * 64;
    if (v <= V_ROOF_ADD) return 3 * row8k * T;
    if (v <= V_ROOF_COPY) return 2 * rope * T;
    if (v <= V_AR_A5) return 4 * row2k * T; /* a, b in; sum, norm out */
    return 2 * row2k * T;
}

static void run_variant(int v, ops_bufs *o) {
    int T = o->T;
    size_t n8 = (size_t)T * 8192, n2 = (size_t)T * 2048;
    switch (v) {
    case V_GLU_OLD: case V_GLU_A2: okv_glu_avx2(o->y, o->gate, o->up, n8, OKV_ACT_SILU); break;
    case V_GLU_A5: okv_glu_avx512(o->y, o->gate, o->up, n8, OKV_ACT_SILU); break;
    case V_GELU_A2: okv_glu_avx2(o->y, o->gate, o->up, n8, OKV_ACT_GELU_TANH); break;
    case V_GELU_A5: okv_glu_avx512(o->y, o->gate, o->up, n8, OKV_ACT_GELU_TANH); break;
    case V_ROOF_ADD: add_roof(o->y, o->gate, o->up, n8); break;
    case V_ROPE_OLD:
        okv_rope_apply(o->q, o->q, T, 32, 64, o->cs);
        okv_rope_apply(o->k, o->k, T, 8, 64, o->cs);
        break;
    case V_ROPE_A2:
        okv_rope_apply_avx2(o->q, o->q, T, 32, 64, o->cs);
        okv_rope_apply_avx2(o->k, o->k, T, 8, 64, o->cs);
        break;
    case V_ROPE_A5:
        okv_rope_apply_avx512(o->q, o->q, T, 32, 64, o->cs);
        okv_rope_apply_avx512(o->k, o->k, T, 8, 64, o->cs);
        break;
    case V_ROOF_COPY:
        memcpy(o->y, o->q, sizeof(float) * (size_t)T * 32 * 64);
        memcpy(o->y + (size_t)T * 32 * 64, o->k, sizeof(float) * (size_t)T * 8 * 64);
        break;
    case V_AR_OLD: /* the runtime before: per 64-row block, okv_add then rmsnorm */
        for (int r0 = 0; r0 < T; r0 += 64) {
            int r1 = r0 + 64 < T ? r0 + 64 : T;
            size_t o0 = (size_t)r0 * 2048;
            okv_add(o->sum + o0, o->a + o0, o->b + o0, (size_t)(r1 - r0) * 2048);
            okv_rmsnorm_avx2(o->norm + o0, o->sum + o0, r1 - r0, 2048, 0, o->w, 1e-5f);
        }
        break;
    case V_AR_PLAIN: okv_add_rmsnorm_plain(o->norm, o->sum, o->a, o->b, T, 2048, 0, o->w, 1e-5f); break;
    case V_AR_A2: okv_add_rmsnorm_avx2(o->norm, o->sum, o->a, o->b, T, 2048, 0, o->w, 1e-5f); break;
    case V_AR_A5: okv_add_rmsnorm_avx512(o->norm, o->sum, o->a, o->b, T, 2048, 0, o->w, 1e-5f); break;
    case V_RMS_A2: okv_rmsnorm_avx2(o->norm, o->a, T, 2048, 0, o->w, 1e-5f); break;
    case V_RMS_A5: okv_rmsnorm_avx512(o->norm, o->a, T, 2048, 0, o->w, 1e-5f); break;
    }
    (void)n2;
}

static void bench_shape(int T, int rounds, int calls, bool avx512) {
    ops_bufs o = {.T = T};
    size_t n8 = (size_t)T * 8192, n2 = (size_t)T * 2048;
    o.gate = fbuf(n8, 6.0f); o.up = fbuf(n8, 1.0f); o.y = fbuf(n8, 1.0f);
    o.q = fbuf((size_t)T * 32 * 64, 1.0f); o.k = fbuf((size_t)T * 8 * 64, 1.0f);
    o.a = fbuf(n2, 1.0f); o.b = fbuf(n2, 0.1f); o.sum = fbuf(n2, 0.0f); o.norm = fbuf(n2, 0.0f); o.w = fbuf(2048, 1.0f);
    o.cs = malloc(sizeof(float) * (size_t)T * 64);
    float inv[32];
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)T);
    for (int i = 0; i < 32; i++) inv[i] = (float)pow(500000.0, -i / 32.0);
    for (int t = 0; t < T; t++) pos[t] = t + 17;
    okv_rope_angles(o.cs, T, 32, pos, inv);
    double *samp = malloc(sizeof(double) * (size_t)N_V * rounds);
    for (int v = 0; v < N_V; v++) /* warm up: pages touched, data in cache */
        if (v_usable(v, avx512)) run_variant(v, &o);
    for (int r = 0; r < rounds; r++)
        for (int v = 0; v < N_V; v++) {
            if (!v_usable(v, avx512)) continue;
            double t0 = cpu_sec();
            for (int c = 0; c < calls; c++) run_variant(v, &o);
            samp[(size_t)v * rounds + r] = (cpu_sec() - t0) / calls;
        }
    double m[N_V] = {0};
    for (int v = 0; v < N_V; v++)
        if (v_usable(v, avx512)) m[v] = med(samp + (size_t)v * rounds, rounds);
    printf("\nrow-wise ops, T = %d (Llama-3.2-1B widths), one thread, CPU time, median of %d rounds x %d calls\n", T,
           rounds, calls);
    printf("%-24s %11s %8s %8s\n", "op / path", T > 1 ? "ms/call" : "us/call", "GB/s", "vs old");
    for (int v = 0; v < N_V; v++) {
        if (!v_usable(v, avx512)) continue;
        printf("%-24s %11.3f %8.1f %7.2fx\n", v_name[v], m[v] * (T > 1 ? 1e3 : 1e6), v_bytes(v, T) / m[v] / 1e9,
               m[v_base[v]] / m[v]);
    }
    free(samp); free(pos); free(o.cs);
    free(o.gate); free(o.up); free(o.y); free(o.q); free(o.k);
    free(o.a); free(o.b); free(o.sum); free(o.norm); free(o.w);
}

void bench_ops(int quick) {
    const okv_cpu_caps *c = okv_cpu();
    if (!(c->avx2 && c->fma && c->f16c)) {
        printf("\nrow-wise ops: no AVX2 on this CPU, nothing to compare\n");
        return;
    }
    bool avx512 = c->avx512f && c->avx512bw && c->avx512vl && c->avx512dq;
    bench_shape(512, quick ? 5 : 11, 1, avx512);
    bench_shape(1, quick ? 5 : 11, 2000, avx512);
}
