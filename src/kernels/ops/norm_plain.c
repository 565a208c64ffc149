/* ops/norm_plain.c — the portable rmsnorm and GLU: the definition the SIMD
 * versions (ops/ops_simd.c) are tested against. Built with the compiler's
 * default contraction, as before the move (ops_plain.c / ops_simd.c are
 * -ffp-contract=off). */
#include <math.h>
#include <stdlib.h>

#include "okv_kernels_internal.h"

void okv_rmsnorm_plain(float *y, const float *x, int T, int width, int group, const float *w, float eps) {
    if (group <= 0) group = width;
    for (size_t g = 0; g < (size_t)T * (size_t)(width / group); g++) {
        const float *xg = x + g * group;
        float *yg = y + g * group;
        double ss = 0.0;
        for (int i = 0; i < group; i++) ss += (double)xg[i] * xg[i];
        float r = (float)(1.0 / sqrt(ss / group + eps));
        for (int i = 0; i < group; i++) yg[i] = xg[i] * r * (w ? w[i] : 1.0f);
    }
}

static float gelu_tanh(float x) {
    const float c = 0.7978845608028654f; /* sqrt(2/pi) */
    return 0.5f * x * (1.0f + tanhf(c * (x + 0.044715f * x * x * x)));
}

void okv_glu_plain(float *y, const float *gate, const float *up, size_t n, okv_act act) {
    for (size_t i = 0; i < n; i++) {
        float g = gate[i];
        float a = act == OKV_ACT_SILU ? g / (1.0f + expf(-g)) : gelu_tanh(g);
        y[i] = a * up[i];
    }
}

