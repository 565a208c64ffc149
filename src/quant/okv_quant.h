/* okv_quant.h — weight quantization schemes: what a quantized matrix is,
 * how floats become one (at export), how one becomes floats again (tests,
 * embedding rows), and how many bytes it takes (the loader's validation).
 *
 * A scheme quantizes a matrix W[N, K] group-wise along K (the input
 * dimension, the one a matmul sums over): every run of `group` consecutive
 * elements of a row shares one scale d (and, asymmetric, one offset m).
 * Codes are unsigned integers c in [0, 2^bits):
 *     symmetric:   w = d * (c - 2^(bits-1))      (c - 8 for 4 bits, c - 128 for 8)
 *     asymmetric:  w = d * c + m
 * This neutral form maps GGUF blocks exactly: Q8_0 = sym 8-bit group 32,
 * Q4_0 = sym 4-bit group 32, Q4_1 = asym 4-bit group 32 (d, m in f16).
 *
 * How codes and scales are laid out in memory is this layer's choice, made
 * for the kernels' sake (see okv_quant.c's head comment for the layout and
 * its measurement); everybody else goes through the functions below.
 *
 * A scheme may instead name a GGUF block type (`block`, okv_qblock.h): W
 * is then the file's blocks as they are, row by row, and bits / group /
 * asym only describe them (okv_qscheme_block fills them in). */
#ifndef OKV_QUANT_H
#define OKV_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "offkv_base.h"
#include "okv_qblock.h"

typedef struct okv_qscheme {
    int bits;               /* 4 or 8 */
    int group;              /* 32, 64, 128 or 256 elements along K */
    bool asym;              /* offset m per group (else symmetric around 0) */
    okv_dtype scale_dtype;  /* dtype of d and m in memory (f16) */
    int block;              /* okv_qblock_type: a GGUF block format carried as is; OKV_QB_NONE: the planes above */
    bool x8;                /* block rows interleaved by 8 in memory (okv_qblock_x8.c): set by the runtime
                             * after loading, never in a file */
} okv_qscheme;

/* The scheme of W stored as GGUF blocks of `type` (a carried okv_qblock type). */
okv_qscheme okv_qscheme_block(int type);

/* Checks bits/group/scale dtype are a scheme we implement, and that K is a
 * multiple of the group (what = tensor name for the message). */
okv_status okv_qscheme_check(const okv_qscheme *s, int64_t N, int64_t K, const char *what, okv_error *err);
/* "q4 g32 asym f16" style name; buf of at least 32 bytes. */
const char *okv_qscheme_name(const okv_qscheme *s, char *buf, size_t n);
/* Bytes of a quantized W[N, K] (scheme already checked). */
uint64_t okv_quant_bytes(const okv_qscheme *s, int64_t N, int64_t K);

/* Quantizes W[N, K] (f32) into dst (okv_quant_bytes). Chooses each group's
 * d (and m) by a search for the least squared error (never worse than the
 * range-based round to nearest; okv_quant.c). Non-finite input is an error
 * naming `what` and the element. */
okv_status okv_quantize(const okv_qscheme *s, const float *W, int64_t N, int64_t K, void *dst, const char *what,
                        okv_error *err);
/* The same with each input channel k's squared error weighted by imp[k]
 * >= 0 (the mean square of the activations it multiplies, collected over a
 * calibration text: the error a linear's outputs see is sum_k E[x_k^2] (w_k -
 * q_k)^2 when channels are uncorrelated). imp NULL = okv_quantize. The
 * weighted search keeps the range rule's pair unless a candidate is better on
 * the weighted error, so it is never worse than round to nearest there. */
okv_status okv_quantize_weighted(const okv_qscheme *s, const float *W, int64_t N, int64_t K, const float *imp, void *dst,
                                 const char *what, okv_error *err);
/* okv_quantize_weighted in two parts, so a caller can spread rows over
 * threads: the checks (scheme fits [N, K], every imp[k] finite and >= 0),
 * then rows [row0, row1) of dst, which only touches those rows' codes and
 * scales (each row is quantized on its own: any split gives the same
 * bytes). okv_quantize_rows assumes okv_quantize_check passed. */
okv_status okv_quantize_check(const okv_qscheme *s, int64_t N, int64_t K, const float *imp, const char *what,
                              okv_error *err);
okv_status okv_quantize_rows(const okv_qscheme *s, const float *W, int64_t N, int64_t K, const float *imp, void *dst,
                             int64_t row0, int64_t row1, const char *what, okv_error *err);
/* Lays out given codes and scales exactly (GGUF blocks carried over without
 * re-quantization): codes[N*K] in [0, 2^bits), d[N*K/group], m[N*K/group]
 * (NULL for symmetric); d and m must be exactly representable in the scale
 * dtype (they are rounded to it otherwise). */
void okv_quant_pack(const okv_qscheme *s, int64_t N, int64_t K, const uint8_t *codes, const float *d, const float *m,
                    void *dst);
/* Row r of a quantized W[N, K] as f32 into dst[K]. */
void okv_dequant_row(const okv_qscheme *s, const void *W, int64_t N, int64_t K, int64_t r, float *dst);

/* ---- for the kernels: where the planes of a quantized W[N, K] are ---------- */

/* Codes row r starts at codes + r * code_stride (bytes, in the superblock
 * order okv_quant.c describes); its `groups` f16 scales at d + r *
 * scale_stride, offsets (asymmetric only, else NULL) at m + r * scale_stride. */
typedef struct okv_qview {
    const uint8_t *codes;
    const uint16_t *d, *m;
    size_t code_stride, scale_stride;
    int bits, group, groups;
    bool asym;
    int block;               /* okv_qblock_type, or OKV_QB_NONE (then the planes above) */
    const uint8_t *blocks;   /* block W: row r at blocks + r * row_bytes (x8: see okv_qblock_x8.c) */
    size_t row_bytes;
    bool x8;
} okv_qview;
enum { OKV_QSB_GROUPS = 16 }; /* groups per superblock (one 32-bit lane each) */
okv_qview okv_quant_view(const okv_qscheme *s, const void *W, int64_t N, int64_t K);
/* Elements [e0, e1) of row n of a block view (either layout), exactly -> dst[e1 - e0]. */
void okv_qview_block_range(const okv_qview *v, int64_t n, int64_t e0, int64_t e1, float *dst);

#endif
