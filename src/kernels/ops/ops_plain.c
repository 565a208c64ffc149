/* ops/ops_plain.c — the plain row-wise kernels: rope (and its angle table and
 * rotation, whose SIMD versions are in ops/ops_simd.c and must equal these
 * bit for bit), the plain table's add + rmsnorm, embedding lookup, softcap,
 * elementwise add/scale, and writing a step's k/v into the pools. The
 * runtime runs them over row blocks of a long step on the pool; each row's
 * result is the same whatever the blocks.
 *
 * They are either cheap next to the matmuls (elementwise work over one
 * activation row per token) or dominated by something other than arithmetic
 * (rope's sin/cos, which we compute in double because positions reach 128k
 * and a float angle there would be off by whole radians' worth of ulps: the
 * angle table is computed once per step and inv_freq, so its cost is
 * T x head_dim/2 sin/cos pairs, not one per head). Built with
 * -ffp-contract=off, like ops/ops_simd.c. */
#include <math.h>
#include <stdlib.h>

#include "okv_common.h"
#include "okv_kernels_internal.h"

void okv_rope(float *x, int T, int n_heads, int head_dim, const int32_t *positions, const float *inv_freq) {
    int half = head_dim / 2;
    for (int t = 0; t < T; t++) {
        double p = (double)positions[t];
        for (int i = 0; i < half; i++) {
            /* one angle per (token, pair), shared by all heads */
            double ang = p * (double)inv_freq[i];
            float c = (float)cos(ang), s = (float)sin(ang);
            for (int h = 0; h < n_heads; h++) {
                float *xh = x + ((size_t)t * n_heads + h) * head_dim;
                float x0 = xh[i], x1 = xh[i + half];
                xh[i] = x0 * c - x1 * s;
                xh[i + half] = x1 * c + x0 * s;
            }
        }
    }
}

/* The angles okv_rope uses, computed once per step and shared by every
 * rope node over the same inv_freq (a Llama step has 2 per layer). */
void okv_rope_angles(float *cs, int T, int half, const int32_t *positions, const float *inv_freq) {
    for (int t = 0; t < T; t++) {
        double p = (double)positions[t];
        float *c = cs + (size_t)t * half * 2;
        for (int i = 0; i < half; i++) {
            double ang = p * (double)inv_freq[i];
            c[2 * i] = (float)cos(ang);
            c[2 * i + 1] = (float)sin(ang);
        }
    }
}

/* okv_rope's arithmetic, out of place, heads innermost per row so the row is
 * read and written once. */
void okv_rope_apply(float *y, const float *x, int T, int n_heads, int head_dim, const float *cs) {
    int half = head_dim / 2;
    for (int t = 0; t < T; t++) {
        const float *c = cs + (size_t)t * half * 2;
        for (int h = 0; h < n_heads; h++) {
            const float *xh = x + ((size_t)t * n_heads + h) * head_dim;
            float *yh = y + ((size_t)t * n_heads + h) * head_dim;
            for (int i = 0; i < half; i++) {
                float x0 = xh[i], x1 = xh[i + half], co = c[2 * i], si = c[2 * i + 1];
                yh[i] = x0 * co - x1 * si;
                yh[i + half] = x1 * co + x0 * si;
            }
        }
    }
}

void okv_embed(float *y, const int32_t *ids, int T, const void *E, okv_dtype edt, int width, float scale) {
    size_t esz = okv_dtype_size(edt);
    for (int t = 0; t < T; t++) {
        const void *row = (const char *)E + (size_t)ids[t] * width * esz;
        float *yt = y + (size_t)t * width;
        okv_k_load_row(yt, row, edt, (size_t)width);
        if (scale != 1.0f)
            for (int i = 0; i < width; i++) yt[i] *= scale;
    }
}

void okv_softcap(float *x, size_t n, float cap) {
    for (size_t i = 0; i < n; i++) x[i] = tanhf(x[i] / cap) * cap;
}

void okv_add(float *y, const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] = a[i] + b[i];
}

/* The plain table's add_rmsnorm: okv_add then okv_rmsnorm_plain, row by row
 * (the sum's row is normed while in L1). */
void okv_add_rmsnorm_plain(float *y, float *sum, const float *a, const float *b, int T, int width, int group,
                           const float *w, float eps) {
    for (int t = 0; t < T; t++) {
        size_t o = (size_t)t * (size_t)width;
        okv_add(sum + o, a + o, b + o, (size_t)width);
        okv_rmsnorm_plain(y + o, sum + o, 1, width, group, w, eps);
    }
}

void okv_scale(float *y, const float *x, size_t n, float s) {
    for (size_t i = 0; i < n; i++) y[i] = x[i] * s;
}

/* One side (K or V) of okv_attend_write: the two are independent, so a long
 * step writes them on two threads. */
void okv_attend_write_side(const okv_attn_kv *kv, const okv_run *runs, int n_runs, const float *src, bool v) {
    size_t row = (size_t)kv->kv_heads * kv->head_dim;
    char *pool = (char *)(v ? kv->v_w : kv->k_w);
    const okv_dtype dt = v ? kv->v_dtype : kv->k_dtype;
    size_t t = 0; /* source row: the runs take this step's rows in order */
    for (int r = 0; r < n_runs; r++) {
        size_t at = okv_kv_row_bytes(dt, (size_t)runs[r].slot * row), n = (size_t)runs[r].n * row;
        if (dt == OKV_Q8) okv_q8_quantize(pool + at, src + t * row, n); /* per 32 channels of one row */
        else okv_convert(pool + at, dt, src + t * row, OKV_F32, n);
        t += (size_t)runs[r].n;
    }
}

void okv_attend_write(const okv_attn_kv *kv, const okv_run *runs, int n_runs, const float *k, const float *v) {
    okv_attend_write_side(kv, runs, n_runs, k, false);
    okv_attend_write_side(kv, runs, n_runs, v, true);
}
