/* okv_qblock.c — the GGUF (ggml) block formats a program can carry as they
 * are: their facts (elements and bytes per block, name), and their
 * dequantization to f32, bit-identical to llama.cpp's reference
 * dequantize_row_* (tests/gguf compares against gguf-py's numpy version on
 * random blocks and on every tensor of the real models).
 *
 * Exactness depends on doing the same float operations in the same order:
 * each block's fp16 scale(s) are widened to f32 exactly, integer codes are
 * reconstructed in int, and the final value is `scale * code` or
 * `scale * code + min` / `- min` as ggml writes it, one rounding per
 * operation (the project's C11 mode compiles with -ffp-contract=off).
 *
 * Block layouts (little-endian, packed):
 *   Q4_0 {f16 d; u8 qs[16]}                      32 x (q-8)*d, low nibbles first half
 *   Q4_1 {f16 d, m; u8 qs[16]}                   q*d + m
 *   Q5_0 {f16 d; u8 qh[4]; u8 qs[16]}            5th bit from qh, (q-16)*d
 *   Q5_1 {f16 d, m; u8 qh[4]; u8 qs[16]}         q*d + m
 *   Q8_0 {f16 d; i8 qs[32]}                      q*d
 *   Q2_K {u8 scales[16]; u8 qs[64]; f16 d, dmin} 16 groups of 16, 4-bit scale/min
 *   Q3_K {u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d}  6-bit signed scales
 *   Q4_K {f16 d, dmin; u8 scales[12]; u8 qs[128]}  8 groups of 32, 6-bit scale/min
 *   Q5_K {f16 d, dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]}
 *   Q6_K {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}
 *   Q8_K {f32 d; i8 qs[256]; i16 bsums[16]}      q*d (bsums unused; dequantized, never carried)
 * A row of a carried W[N, K] is its K / elems blocks back to back, exactly
 * as in the GGUF file: rows are whole blocks, so permuting rows (llama.cpp's
 * q/k order) is a row copy. */
#include <string.h>

#include "okv_common.h"
#include "okv_qblock.h"

#define QK 32
#define QKK 256

static float f16_at(const uint8_t *p) { return okv_f16_to_f32((uint16_t)(p[0] | (p[1] << 8))); }

static void deq_q4_0(const uint8_t *b, float *y) {
    const float d = f16_at(b);
    const uint8_t *qs = b + 2;
    for (int j = 0; j < QK / 2; j++) {
        y[j] = (float)((qs[j] & 0x0f) - 8) * d;
        y[j + QK / 2] = (float)((qs[j] >> 4) - 8) * d;
    }
}

static void deq_q4_1(const uint8_t *b, float *y) {
    const float d = f16_at(b), m = f16_at(b + 2);
    const uint8_t *qs = b + 4;
    for (int j = 0; j < QK / 2; j++) {
        y[j] = (float)(qs[j] & 0x0f) * d + m;
        y[j + QK / 2] = (float)(qs[j] >> 4) * d + m;
    }
}

static uint32_t u32_at(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void deq_q5_0(const uint8_t *b, float *y) {
    const float d = f16_at(b);
    const uint32_t qh = u32_at(b + 2);
    const uint8_t *qs = b + 6;
    for (int j = 0; j < QK / 2; j++) {
        const int xh0 = (int)(((qh >> j) << 4) & 0x10);
        const int xh1 = (int)((qh >> (j + 12)) & 0x10);
        y[j] = (float)(((qs[j] & 0x0f) | xh0) - 16) * d;
        y[j + QK / 2] = (float)(((qs[j] >> 4) | xh1) - 16) * d;
    }
}

static void deq_q5_1(const uint8_t *b, float *y) {
    const float d = f16_at(b), m = f16_at(b + 2);
    const uint32_t qh = u32_at(b + 4);
    const uint8_t *qs = b + 8;
    for (int j = 0; j < QK / 2; j++) {
        const int xh0 = (int)(((qh >> j) << 4) & 0x10);
        const int xh1 = (int)((qh >> (j + 12)) & 0x10);
        y[j] = (float)((qs[j] & 0x0f) | xh0) * d + m;
        y[j + QK / 2] = (float)((qs[j] >> 4) | xh1) * d + m;
    }
}

static void deq_q8_0(const uint8_t *b, float *y) {
    const float d = f16_at(b);
    const int8_t *qs = (const int8_t *)(b + 2);
    for (int j = 0; j < QK; j++) y[j] = (float)qs[j] * d;
}

static void deq_q2_k(const uint8_t *b, float *y) {
    const uint8_t *scales = b, *q = b + 16;
    const float d = f16_at(b + 80), dmin = f16_at(b + 82);
    int is = 0;
    for (int n = 0; n < QKK; n += 128) {
        int shift = 0;
        for (int j = 0; j < 4; j++) {
            for (int half = 0; half < 2; half++) {
                const uint8_t sc = scales[is++];
                const float dl = d * (float)(sc & 0x0f), ml = dmin * (float)(sc >> 4);
                const uint8_t *qq = q + 16 * half;
                for (int l = 0; l < 16; l++) *y++ = dl * (float)((qq[l] >> shift) & 3) - ml;
            }
            shift += 2;
        }
        q += 32;
    }
}

/* Q3_K's 16 6-bit signed scales: low 4 bits in bytes 0..7, high 2 bits in
 * bytes 8..11, minus 32. */
static void q3k_scales(const uint8_t *s, int sc[16]) {
    for (int i = 0; i < 16; i++) {
        int lo = i < 8 ? (s[i] & 0x0f) : (s[i - 8] >> 4);
        int hi = (s[8 + (i % 4)] >> (2 * (i / 4))) & 3;
        sc[i] = (lo | (hi << 4)) - 32;
    }
}

static void deq_q3_k(const uint8_t *b, float *y) {
    const uint8_t *hm = b, *q = b + 32;
    int sc[16];
    q3k_scales(b + 96, sc);
    const float d_all = f16_at(b + 108);
    int is = 0;
    uint8_t m = 1;
    for (int n = 0; n < QKK; n += 128) {
        int shift = 0;
        for (int j = 0; j < 4; j++) {
            for (int half = 0; half < 2; half++) {
                const float dl = d_all * (float)sc[is++];
                const int o = 16 * half;
                for (int l = 0; l < 16; l++)
                    *y++ = dl * (float)(((q[o + l] >> shift) & 3) - ((hm[o + l] & m) ? 0 : 4));
            }
            shift += 2;
            m = (uint8_t)(m << 1);
        }
        q += 32;
    }
}

/* The 6-bit scale and min of sub-block j (0..7) of Q4_K/Q5_K. */
static void k4_scale_min(int j, const uint8_t *q, int *d, int *m) {
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

static void deq_q4_k(const uint8_t *b, float *y) {
    const float d = f16_at(b), dmin = f16_at(b + 2);
    const uint8_t *scales = b + 4, *q = b + 16;
    for (int j = 0, is = 0; j < QKK; j += 64, is += 2, q += 32) {
        int sc, m;
        k4_scale_min(is, scales, &sc, &m);
        const float d1 = d * (float)sc, m1 = dmin * (float)m;
        k4_scale_min(is + 1, scales, &sc, &m);
        const float d2 = d * (float)sc, m2 = dmin * (float)m;
        for (int l = 0; l < 32; l++) *y++ = d1 * (float)(q[l] & 0x0f) - m1;
        for (int l = 0; l < 32; l++) *y++ = d2 * (float)(q[l] >> 4) - m2;
    }
}

static void deq_q5_k(const uint8_t *b, float *y) {
    const float d = f16_at(b), dmin = f16_at(b + 2);
    const uint8_t *scales = b + 4, *qh = b + 16, *ql = b + 48;
    uint8_t u1 = 1, u2 = 2;
    for (int j = 0, is = 0; j < QKK; j += 64, is += 2, ql += 32) {
        int sc, m;
        k4_scale_min(is, scales, &sc, &m);
        const float d1 = d * (float)sc, m1 = dmin * (float)m;
        k4_scale_min(is + 1, scales, &sc, &m);
        const float d2 = d * (float)sc, m2 = dmin * (float)m;
        for (int l = 0; l < 32; l++) *y++ = d1 * (float)((ql[l] & 0x0f) + ((qh[l] & u1) ? 16 : 0)) - m1;
        for (int l = 0; l < 32; l++) *y++ = d2 * (float)((ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
        u1 = (uint8_t)(u1 << 2);
        u2 = (uint8_t)(u2 << 2);
    }
}

static void deq_q6_k(const uint8_t *b, float *y) {
    const uint8_t *ql = b, *qh = b + 128;
    const int8_t *sc = (const int8_t *)(b + 192);
    const float d = f16_at(b + 208);
    for (int n = 0; n < QKK; n += 128) {
        for (int l = 0; l < 32; l++) {
            const int is = l / 16;
            const int q1 = ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
            const int q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
            const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            y[l + 0] = d * (float)sc[is + 0] * (float)q1;
            y[l + 32] = d * (float)sc[is + 2] * (float)q2;
            y[l + 64] = d * (float)sc[is + 4] * (float)q3;
            y[l + 96] = d * (float)sc[is + 6] * (float)q4;
        }
        y += 128;
        ql += 64;
        qh += 32;
        sc += 8;
    }
}

static void deq_q8_k(const uint8_t *b, float *y) {
    float d;
    memcpy(&d, b, 4); /* little-endian host */
    const int8_t *qs = (const int8_t *)(b + 4);
    for (int j = 0; j < QKK; j++) y[j] = d * (float)qs[j];
}

typedef void (*deq_block_fn)(const uint8_t *block, float *y);

static deq_block_fn block_fn(int type) {
    switch (type) {
    case OKV_QB_Q4_0: return deq_q4_0;
    case OKV_QB_Q4_1: return deq_q4_1;
    case OKV_QB_Q5_0: return deq_q5_0;
    case OKV_QB_Q5_1: return deq_q5_1;
    case OKV_QB_Q8_0: return deq_q8_0;
    case OKV_QB_Q2_K: return deq_q2_k;
    case OKV_QB_Q3_K: return deq_q3_k;
    case OKV_QB_Q4_K: return deq_q4_k;
    case OKV_QB_Q5_K: return deq_q5_k;
    case OKV_QB_Q6_K: return deq_q6_k;
    case OKV_QB_Q8_K: return deq_q8_k;
    default: return NULL;
    }
}

/* name, elements, bytes, nominal bits, has a min/offset, carried in programs */
static const okv_qblock_info infos[] = {
    {OKV_QB_Q4_0, "q4_0", 32, 18, 4, false, true},   {OKV_QB_Q4_1, "q4_1", 32, 20, 4, true, true},
    {OKV_QB_Q5_0, "q5_0", 32, 22, 5, false, true},   {OKV_QB_Q5_1, "q5_1", 32, 24, 5, true, true},
    {OKV_QB_Q8_0, "q8_0", 32, 34, 8, false, true},   {OKV_QB_Q2_K, "q2_K", 256, 84, 2, true, true},
    {OKV_QB_Q3_K, "q3_K", 256, 110, 3, false, true}, {OKV_QB_Q4_K, "q4_K", 256, 144, 4, true, true},
    {OKV_QB_Q5_K, "q5_K", 256, 176, 5, true, true},  {OKV_QB_Q6_K, "q6_K", 256, 210, 6, false, true},
    {OKV_QB_Q8_K, "q8_K", 256, 292, 8, false, false},
};

const okv_qblock_info *okv_qblock_get(int type) {
    for (size_t i = 0; i < sizeof infos / sizeof infos[0]; i++)
        if (infos[i].type == type) return &infos[i];
    return NULL;
}

const okv_qblock_info *okv_qblock_parse(const char *name) {
    for (size_t i = 0; i < sizeof infos / sizeof infos[0]; i++)
        if (infos[i].carried && !strcmp(infos[i].name, name)) return &infos[i];
    return NULL;
}

void okv_qblock_dequant(int type, const void *src, float *dst, uint64_t n) {
    const okv_qblock_info *b = okv_qblock_get(type);
    deq_block_fn fn = block_fn(type);
    const uint8_t *s = src;
    for (uint64_t i = 0; i < n / (uint64_t)b->elems; i++) fn(s + i * (uint64_t)b->bytes, dst + i * (uint64_t)b->elems);
}

void okv_qblock_dequant_range(int type, const void *row, int64_t e0, int64_t e1, float *dst) {
    const okv_qblock_info *b = okv_qblock_get(type);
    deq_block_fn fn = block_fn(type);
    const uint8_t *s = row;
    float tmp[QKK];
    for (int64_t blk = e0 / b->elems; blk * b->elems < e1; blk++) {
        int64_t lo = blk * b->elems, hi = lo + b->elems;
        const uint8_t *bp = s + (size_t)blk * (size_t)b->bytes;
        if (lo >= e0 && hi <= e1) {
            fn(bp, dst + (lo - e0));
            continue;
        }
        fn(bp, tmp);
        int64_t a = lo > e0 ? lo : e0, z = hi < e1 ? hi : e1;
        memcpy(dst + (a - e0), tmp + (a - lo), (size_t)(z - a) * sizeof(float));
    }
}
