/* The row-wise ops' fast paths (ops/ops_simd.c) against the plain table and
 * a double computation, over odd lengths (every tail and block size of the
 * 8- and 16-lane loops), misaligned pointers and every aliasing the runtime
 * may use, for each ISA the CPU has (avx2, avx512: each its own table):
 *   - glu (SiLU, tanh-GELU; y apart, over gate, over up): within 2e-6 |want| + 1e-6 |up| of the double
 *     formula (the stated accuracy), NaN in gives NaN out;
 *   - rmsnorm: within 1e-5 relative of double;
 *   - add_rmsnorm: bit for bit (memcmp) the same table's rmsnorm of a + b,
 *     with the sum stored exactly;
 *   - rope_apply: bit for bit okv_rope, in place and out of place. */
#include <stdbool.h>
#include <stdint.h>

#include "okv_common.h"
#include "okv_kernels.h"
#include "okv_test.h"
#include "kernel_test_util.h"

static const okv_kernels *tables[4];
static int n_tables;

static void add_table(const okv_kernels *k) {
    for (int i = 0; i < n_tables; i++)
        if (tables[i]->glu == k->glu && tables[i]->rope_apply == k->rope_apply &&
            tables[i]->add_rmsnorm == k->add_rmsnorm && tables[i]->rmsnorm == k->rmsnorm)
            return;
    tables[n_tables++] = k;
}

/* lengths that cover every tail of 8/16/32/64-element loops */
static const int lens[] = {0, 1, 2, 3, 5, 7, 8, 9, 13, 15, 16, 17, 23, 31, 32, 33, 47, 48, 63, 64, 65, 95, 127, 129, 1003, 2051};
enum { N_LENS = sizeof lens / sizeof *lens, MAXN = 2051 };

/* ---- glu ------------------------------------------------------------------------- */

static double act_ref(double g, okv_act act) {
    if (act == OKV_ACT_SILU) return g / (1.0 + exp(-g));
    return 0.5 * g * (1.0 + tanh(sqrt(2.0 / M_PI) * (g + 0.044715 * g * g * g)));
}

static void test_glu(void) {
    float *gate = malloc(sizeof(float) * (MAXN + 1)), *up = malloc(sizeof(float) * (MAXN + 1));
    float *y = malloc(sizeof(float) * (MAXN + 1)), *g = malloc(sizeof(float) * (MAXN + 1));
    float *u = malloc(sizeof(float) * (MAXN + 1));
    float *ref = malloc(sizeof(float) * (MAXN + 1));
    for (int i = 0; i <= MAXN; i++) { gate[i] = frand() * 12.0f; up[i] = frand() * 2.0f; }
    /* the ends of exp's clamps and of float range */
    static const float special[] = {-100.0f, 100.0f, 0.0f, -30.0f, 1e-4f, -1e-30f, -87.5f, 88.5f, -104.5f, 89.5f, 20.0f, -9.0f};
    for (size_t i = 0; i < sizeof special / sizeof *special; i++) gate[1 + 3 * i] = special[i];
    for (int ti = 0; ti < n_tables; ti++)
        for (int act = 0; act < 2; act++)
            for (int li = 0; li < N_LENS; li++)
                for (int mis = 0; mis < 2; mis++) /* mis: every pointer one float off 64-byte alignment */
                    for (int alias = 0; alias < 3; alias++) { /* y apart, y = gate, y = up */
                        int n = lens[li];
                        const float *gs = gate + mis, *us = up + mis;
                        memcpy(g + mis, gs, sizeof(float) * (size_t)n);
                        memcpy(u + mis, us, sizeof(float) * (size_t)n);
                        float *out = alias == 1 ? g + mis : alias == 2 ? u + mis : y + mis;
                        tables[ti]->glu(out, g + mis, u + mis, (size_t)n, (okv_act)act);
                        tables[0]->glu(ref, gs, us, (size_t)n, (okv_act)act);
                        int bad = 0;
                        for (int i = 0; i < n; i++) {
                            double want = act_ref(gs[i], (okv_act)act) * us[i], tol = 2e-6 * fabs(want) + 1e-6 * fabs(us[i]);
                            if (!(fabs(out[i] - want) <= tol) || !(fabs(out[i] - ref[i]) <= 2 * tol)) {
                                if (bad < 3)
                                    fprintf(stderr, "  %s glu act=%d n=%d g=%.9g: %.9g want %.9g plain %.9g\n",
                                            tables[ti]->name, act, n, gs[i], out[i], want, ref[i]);
                                bad++;
                            }
                        }
                        CHECKF(bad == 0, "%s glu act=%d n=%d mis=%d alias=%d: %d wrong", tables[ti]->name, act, n, mis,
                               alias, bad);
                    }
    /* NaN propagates, as in the plain formula */
    for (int ti = 0; ti < n_tables; ti++)
        for (int act = 0; act < 2; act++) {
            float gn[19], un[19], yn[19];
            for (int i = 0; i < 19; i++) { gn[i] = (float)i - 9.0f; un[i] = 1.0f; }
            gn[3] = gn[17] = NAN;
            tables[ti]->glu(yn, gn, un, 19, (okv_act)act);
            CHECKF(isnan(yn[3]) && isnan(yn[17]) && !isnan(yn[4]), "%s glu act=%d: NaN gate must give NaN",
                   tables[ti]->name, act);
        }
    free(gate); free(up); free(y); free(g); free(u); free(ref);
}

/* ---- rmsnorm / add_rmsnorm ----------------------------------------------------------- */

/* widths and the groups tried for each: the width, 0 (= width), a third */
static void rms_check(const okv_kernels *k, int T, int width, int group, bool use_w, bool alias, int mis) {
    size_t n = (size_t)T * width;
    int gsz = group > 0 ? group : width;
    float *x = malloc(sizeof(float) * (n + 1)), *x0 = malloc(sizeof(float) * (n + 1));
    float *y = malloc(sizeof(float) * (n + 1)), *w = malloc(sizeof(float) * (gsz + 1));
    fill(x, n + 1, 3.0f);
    fill(w, (size_t)gsz + 1, 2.0f);
    memcpy(x0, x, sizeof(float) * (n + 1));
    float *out = alias ? x + mis : y + mis;
    k->rmsnorm(out, x + mis, T, width, group, use_w ? w + mis : NULL, 1e-6f);
    int bad = 0;
    for (size_t r = 0; r < n / gsz; r++) {
        const float *xr = x0 + mis + r * gsz;
        double ss = 0;
        for (int i = 0; i < gsz; i++) ss += (double)xr[i] * xr[i];
        double f = 1.0 / sqrt(ss / gsz + 1e-6);
        for (int i = 0; i < gsz; i++) {
            double want = xr[i] * f * (use_w ? w[mis + i] : 1.0);
            if (!(fabs(out[r * gsz + i] - want) <= 1e-5 * (fabs(want) + 1e-3))) bad++;
        }
    }
    CHECKF(bad == 0, "%s rmsnorm T=%d width=%d group=%d w=%d alias=%d mis=%d: %d wrong", k->name, T, width, group,
           use_w, alias, mis, bad);
    free(x); free(x0); free(y); free(w);
}

/* add_rmsnorm(a, b) == (sum = a + b exactly, y = k->rmsnorm(sum)) byte for
 * byte, for each aliasing: 0 none, 1 sum = a, 2 sum = b, 3 y = sum, 4 y = a
 * (a dead input's buffer reused), 5 y = b. */
static void add_rms_check(const okv_kernels *k, int T, int width, int group, bool use_w, int alias) {
    size_t n = (size_t)T * width;
    int gsz = group > 0 ? group : width;
    float *a = malloc(sizeof(float) * (n + 1)), *b = malloc(sizeof(float) * (n + 1)), *w = malloc(sizeof(float) * gsz);
    float *sum = malloc(sizeof(float) * (n + 1)), *y = malloc(sizeof(float) * (n + 1));
    float *want_sum = malloc(sizeof(float) * (n + 1)), *want_y = malloc(sizeof(float) * (n + 1));
    fill(a, n, 4.0f);
    fill(b, n, 1.0f);
    fill(w, (size_t)gsz, 2.0f);
    for (size_t i = 0; i < n; i++) want_sum[i] = a[i] + b[i];
    const float *wp = use_w ? w : NULL;
    k->rmsnorm(want_y, want_sum, T, width, group, wp, 1e-5f);
    float *ps = alias == 1 ? a : alias == 2 ? b : sum;
    float *py = alias == 3 ? ps : alias == 4 ? a : alias == 5 ? b : y;
    k->add_rmsnorm(py, ps, a, b, T, width, group, wp, 1e-5f);
    bool ok = !memcmp(ps, want_sum, sizeof(float) * n) || alias == 3;
    ok = ok && !memcmp(py, want_y, sizeof(float) * n);
    CHECKF(ok, "%s add_rmsnorm T=%d width=%d group=%d w=%d alias=%d differs from add + rmsnorm", k->name, T, width,
           group, use_w, alias);
    free(a); free(b); free(w); free(sum); free(y); free(want_sum); free(want_y);
}

static void test_rmsnorm(void) {
    for (int ti = 0; ti < n_tables; ti++)
        for (int li = 1; li < N_LENS; li++) {
            int width = lens[li];
            int groups[3] = {width, 0, width % 3 == 0 ? width / 3 : width};
            for (int gi = 0; gi < 3; gi++)
                for (int use_w = 0; use_w < 2; use_w++) {
                    for (int alias = 0; alias < 2; alias++)
                        for (int mis = 0; mis < 2; mis++) rms_check(tables[ti], 3, width, groups[gi], use_w, alias, mis);
                    for (int alias = 0; alias < 6; alias++) add_rms_check(tables[ti], 3, width, groups[gi], use_w, alias);
                }
        }
    /* T = 0 touches nothing */
    for (int ti = 0; ti < n_tables; ti++) {
        float one = 7.0f, s = 5.0f;
        tables[ti]->add_rmsnorm(&one, &s, &one, &one, 0, 1, 0, NULL, 1e-6f);
        CHECK(one == 7.0f && s == 5.0f);
    }
}

/* ---- rope ---------------------------------------------------------------------------- */

static void test_rope(void) {
    static const int heads[] = {1, 3, 5, 8, 32};
    int32_t pos[7] = {0, 3, 1000, 65535, 131071, 7, 200003};
    for (int ti = 0; ti < n_tables; ti++)
        for (int half = 1; half <= 130; half += half < 40 ? 1 : 22) /* 1..40, 62, 84, 106, 128 */
            for (size_t hi = 0; hi < sizeof heads / sizeof *heads; hi++) {
                int H = heads[hi], D = 2 * half, T = half % 3 == 0 ? 7 : 2;
                if (H == 32 && half != 32 && half != 64) continue;
                size_t n = (size_t)T * H * D;
                float *inv = malloc(sizeof(float) * half), *cs = malloc(sizeof(float) * T * D);
                float *x = malloc(sizeof(float) * n), *want = malloc(sizeof(float) * n), *got = malloc(sizeof(float) * n);
                for (int i = 0; i < half; i++) inv[i] = i == half - 1 && half > 1 ? 0.0f : (float)pow(10000.0, -2.0 * i / D);
                fill(x, n, 2.0f);
                memcpy(want, x, sizeof(float) * n);
                okv_rope(want, T, H, D, pos, inv);
                okv_rope_angles(cs, T, half, pos, inv);
                tables[ti]->rope_apply(got, x, T, H, D, cs);
                CHECKF(!memcmp(got, want, sizeof(float) * n), "%s rope_apply T=%d H=%d D=%d differs from okv_rope",
                       tables[ti]->name, T, H, D);
                tables[ti]->rope_apply(x, x, T, H, D, cs);
                CHECKF(!memcmp(x, want, sizeof(float) * n), "%s rope_apply in place T=%d H=%d D=%d differs from okv_rope",
                       tables[ti]->name, T, H, D);
                free(inv); free(cs); free(x); free(want); free(got);
            }
}

int main(void) {
    rng_state = 0x2545f4914f6cdd1dull;
    add_table(okv_kernels_select(OKV_ISA_PLAIN));
    add_table(okv_kernels_select(OKV_ISA_AVX2));
    add_table(okv_kernels_select(OKV_ISA_AVX512));
    add_table(okv_kernels_select(OKV_ISA_AUTO));
    printf("cpu: %s; op tables:", okv_cpu_features());
    for (int i = 0; i < n_tables; i++) printf(" %s", tables[i]->name);
    printf("\n");
    CHECK(tables[0]->isa == OKV_ISA_PLAIN);
    /* a CPU with AVX-512 F/BW/VL/DQ gets distinct avx2 and avx512 ops */
    const okv_cpu_caps *c = okv_cpu();
    if (c->avx2 && c->fma && c->f16c && c->avx512f && c->avx512bw && c->avx512vl && c->avx512dq && !getenv("OKV_KERNELS"))
        CHECKF(n_tables == 3, "expected plain, avx2 and avx512 ops, got %d tables", n_tables);
    test_glu();
    test_rmsnorm();
    test_rope();
    return okv_test_finish();
}
