/* okv_kvq8.h — the q8 KV storage format, shared by the cache's byte layer
 * (sizes), the update half of attention (quantize on write) and the
 * attention read loops (attend/blocked_q8.c).
 *
 * A row of n elements (n a multiple of 32; the cache requires head_dim % 32
 * == 0) is n / 32 blocks of 36 bytes: 32 int8 codes, then the block's f32
 * scale (little-endian, at byte 32 of the block). x ~ scale * code with the
 * symmetric scale max|x| / 127 and codes round(x / scale) in [-127, 127], so
 * each element is within half a step (scale / 2) of what was written.
 *
 * Why this shape: one block covers 32 consecutive channels of ONE (token,
 * head) row, so every token's row is self-contained (a ring overwrite, a
 * cell reuse, a rewind touch nothing else) and the element offsets the
 * kernels compute for f32/bf16 ((slot * kv_heads + head) * head_dim) map to
 * bytes as offset / 32 * 36. Scales interleaved with their codes keep a key
 * one contiguous stream of 9/8 * head_dim bytes (one prefetch run, one
 * cache line per block pair at head_dim 64). f32 scales cost 1/16 byte per
 * element more than f16 ones but have no subnormal range to lose precision
 * in (small-magnitude V heads exist) and need no conversion on read.
 * 1.125 bytes per element: 0.5625x bf16, 0.28x f32. */
#ifndef OKV_KVQ8_H
#define OKV_KVQ8_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "offkv_base.h"

enum { OKV_Q8_BLOCK = 32, OKV_Q8_BLOCK_BYTES = 36 };

/* Bytes n elements take stored in dt (q8: n a multiple of OKV_Q8_BLOCK);
 * false if that overflows size_t. */
static inline bool okv_kv_bytes_checked(okv_dtype dt, size_t n, size_t *out) {
    if (dt == OKV_Q8) return !__builtin_mul_overflow(n / OKV_Q8_BLOCK, (size_t)OKV_Q8_BLOCK_BYTES, out);
    return !__builtin_mul_overflow(n, okv_dtype_size(dt), out);
}

/* The same for counts already known to fit (offsets inside an allocated pool). */
static inline size_t okv_kv_row_bytes(okv_dtype dt, size_t n) {
    return dt == OKV_Q8 ? n / OKV_Q8_BLOCK * OKV_Q8_BLOCK_BYTES : n * okv_dtype_size(dt);
}

static inline float okv_q8_scale(const void *block) {
    float s;
    memcpy(&s, (const char *)block + OKV_Q8_BLOCK, sizeof s);
    return s;
}

/* One block: 32 floats -> codes + scale. A block holding inf or NaN gets a
 * NaN scale (reads give NaN, as an f32 cache would propagate them). */
static inline void okv_q8_quantize_block(void *dst, const float *x) {
    int8_t *q = dst;
    float amax = 0.0f;
    bool finite = true;
    for (int i = 0; i < OKV_Q8_BLOCK; i++) {
        float a = fabsf(x[i]);
        finite &= isfinite(a);
        amax = a > amax ? a : amax;
    }
    float scale = finite ? amax / 127.0f : NAN, inv = finite && amax > 0.0f ? 127.0f / amax : 0.0f;
    for (int i = 0; i < OKV_Q8_BLOCK; i++) {
        long c = finite ? lrintf(x[i] * inv) : 0;
        q[i] = (int8_t)(c > 127 ? 127 : c < -127 ? -127 : c);
    }
    memcpy((char *)dst + OKV_Q8_BLOCK, &scale, sizeof scale);
}

/* n floats (a multiple of OKV_Q8_BLOCK) -> n / 32 blocks. */
static inline void okv_q8_quantize(void *dst, const float *src, size_t n) {
    for (size_t b = 0; b < n / OKV_Q8_BLOCK; b++)
        okv_q8_quantize_block((char *)dst + b * OKV_Q8_BLOCK_BYTES, src + b * OKV_Q8_BLOCK);
}

/* Element i of a q8 row. */
static inline float okv_q8_load(const void *src, size_t i) {
    const char *blk = (const char *)src + i / OKV_Q8_BLOCK * OKV_Q8_BLOCK_BYTES;
    return okv_q8_scale(blk) * (float)((const int8_t *)blk)[i % OKV_Q8_BLOCK];
}

/* dst[0..n) = the q8 row src dequantized (n a multiple of OKV_Q8_BLOCK). */
static inline void okv_q8_dequantize(float *dst, const void *src, size_t n) {
    for (size_t b = 0; b < n / OKV_Q8_BLOCK; b++) {
        const char *blk = (const char *)src + b * OKV_Q8_BLOCK_BYTES;
        float s = okv_q8_scale(blk);
        for (int i = 0; i < OKV_Q8_BLOCK; i++) dst[b * OKV_Q8_BLOCK + i] = s * (float)((const int8_t *)blk)[i];
    }
}

#endif
