/* okv_qblock.h — GGUF block formats carried into programs as they are
 * (okv_qblock.c has the layouts): their facts and their exact
 * dequantization. Type ids are ggml's (ggml.h), so a GGUF tensor's type is
 * its block type with no table in between. */
#ifndef OKV_QBLOCK_H
#define OKV_QBLOCK_H

#include <stdbool.h>
#include <stdint.h>

typedef enum okv_qblock_type {
    OKV_QB_NONE = 0, /* not a block format: offkv's own planes (okv_quant.c) */
    OKV_QB_Q4_0 = 2,
    OKV_QB_Q4_1 = 3,
    OKV_QB_Q5_0 = 6,
    OKV_QB_Q5_1 = 7,
    OKV_QB_Q8_0 = 8,
    OKV_QB_Q2_K = 10,
    OKV_QB_Q3_K = 11,
    OKV_QB_Q4_K = 12,
    OKV_QB_Q5_K = 13,
    OKV_QB_Q6_K = 14,
    OKV_QB_Q8_K = 15, /* dequantized only (an activation format, not carried) */
} okv_qblock_type;

typedef struct okv_qblock_info {
    int type;
    const char *name; /* "q4_K": the program file's spelling */
    int elems;        /* elements per block (32 or 256) */
    int bytes;        /* bytes per block */
    int bits;         /* nominal code bits */
    bool asym;        /* a min / offset per block or sub-block */
    bool carried;     /* may be a program tensor's block type */
} okv_qblock_info;

/* Facts of a block type; NULL when `type` is not one. */
const okv_qblock_info *okv_qblock_get(int type);
/* The carried block type spelled `name` ("q6_K"); NULL if none. */
const okv_qblock_info *okv_qblock_parse(const char *name);
/* n elements (whole blocks of `type`, a type okv_qblock_get knows) at src -> dst. */
void okv_qblock_dequant(int type, const void *src, float *dst, uint64_t n);
/* Elements [e0, e1) of a row of blocks (any range inside the row) -> dst[e1 - e0]. */
void okv_qblock_dequant_range(int type, const void *row, int64_t e0, int64_t e1, float *dst);

/* ---- the in-memory x8 layout: rows interleaved by 8 (okv_qblock_x8.c) ---- */
/* Whether `type` has an x8 layout (every carried type has). */
bool okv_qblock_x8_has(int type);
/* Rearranges W[N, K] (file order, N % 8 == 0) into the x8 layout in place;
 * false (W untouched) when the shape does not fit or memory is short. */
bool okv_qblock_x8_pack(int type, void *W, int64_t N, int64_t K);
/* Row n's blocks [b0, b1) of an x8 W[N, K], in the file's bytes, -> dst. */
void okv_qblock_x8_row(int type, const void *W, int64_t K, int64_t n, int64_t b0, int64_t b1, void *dst);

/* ---- quantizing into block types (okv_qblock_quant.c) ---- */
/* Whether okv_qblock_quantize_row writes `type` (Q4_0, Q4_1, Q5_0, Q5_1,
 * Q8_0, Q4_K, Q5_K, Q6_K). */
bool okv_qblock_quantizable(int type);
/* Quantizes x[n] (finite; n whole blocks of a quantizable type) into
 * n / elems blocks at dst, each block by an error-minimising search of
 * sum imp[i] (x[i] - y[i])^2 (imp NULL = all 1), never worse on it than
 * round to nearest (okv_qblock_quant.c). Returns -1, or the index of the
 * first block whose scale is beyond f16 (the blocks from it on are not
 * written). */
int64_t okv_qblock_quantize_row(int type, const float *x, const float *imp, int64_t n, void *dst);
/* The 32-element type of at most `type`'s bits per weight, for an input
 * dimension the 256 of a K-quant does not divide (q4_K -> q4_0, q5_K ->
 * q5_0, q6_K -> q5_1); `type` itself when it is not a K-quant. */
int okv_qblock_fallback(int type);

#endif
