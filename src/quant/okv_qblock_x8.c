/* okv_qblock_x8.c — the in-memory "x8" layout of GGUF block matrices: rows
 * interleaved in groups of 8 so a SIMD dot can keep one output row per
 * 32-bit lane (qmatmul/block_x8_avx512.c). It exists only in memory: the
 * runtime rearranges a loaded program's block matrices into it when the
 * kernel table has x8 dots; files always hold the GGUF row order.
 *
 * Why: with a row's codes contiguous, a block dot ends in a horizontal sum
 * per block and per row, and its scales are gathered one by one; with 8
 * rows side by side, one 32-byte load holds 4 codes of each of 8 rows, x's
 * 4 matching bytes are broadcast once for all 8, and the 8 rows' f16
 * scales are one 16-byte load. (The idea is llama.cpp's "repack" CPU
 * buffers; the layout here is our own and generic over the block types.)
 *
 * Layout: a group of 8 rows (N % 8 == 0) keeps the rows' K / elems blocks
 * in block order; block b of the group is the 8 rows' block b (8 x bytes),
 * arranged piece by piece: a type's pieces partition its block struct
 * (okv_qblock.c), listed in the order the x8 dot reads them so it streams
 * through memory front to back. Within a piece the 8 rows alternate in
 * units of `unit` bytes (2 for an f16 scale, 4 for everything else): unit
 * u of row r of the piece at block offset off sits at
 *     8 (bytes of the pieces listed before it) + (8 u + r) unit
 * so Q4_0's block b is d[8] (16 bytes) then 4 x 32 bytes, each holding 4
 * code bytes of every row. A pure byte permutation: okv_qblock_x8_row
 * gives any row's blocks back exactly. */
#include <stdlib.h>
#include <string.h>

#include "okv_qblock.h"

typedef struct x8_field {
    int off, size, unit; /* bytes within the block struct; the interleave unit */
} x8_field;

enum { X8_MAX_FIELDS = 14 };

typedef struct x8_layout {
    int n;
    x8_field f[X8_MAX_FIELDS];
} x8_layout;

/* The block structs of okv_qblock.c in pieces, in x8 order: each field
 * whole, in struct order, except Q6_K's codes, which go by quarters (h =
 * 0, 1 x units 0-3 / 4-7 of each 32-byte half: ql low half, ql high half,
 * qh) so a dot can read them front to back. */
static const x8_layout *layout_of(int type) {
    static const x8_layout q4_0 = {2, {{0, 2, 2}, {2, 16, 4}}};
    static const x8_layout q4_1 = {3, {{0, 2, 2}, {2, 2, 2}, {4, 16, 4}}};
    static const x8_layout q5_0 = {3, {{0, 2, 2}, {2, 4, 4}, {6, 16, 4}}};
    static const x8_layout q5_1 = {4, {{0, 2, 2}, {2, 2, 2}, {4, 4, 4}, {8, 16, 4}}};
    static const x8_layout q8_0 = {2, {{0, 2, 2}, {2, 32, 4}}};
    static const x8_layout q2_k = {4, {{0, 16, 4}, {16, 64, 4}, {80, 2, 2}, {82, 2, 2}}};
    static const x8_layout q3_k = {4, {{0, 32, 4}, {32, 64, 4}, {96, 12, 4}, {108, 2, 2}}};
    static const x8_layout q4_k = {4, {{0, 2, 2}, {2, 2, 2}, {4, 12, 4}, {16, 128, 4}}};
    static const x8_layout q5_k = {5, {{0, 2, 2}, {2, 2, 2}, {4, 12, 4}, {16, 32, 4}, {48, 128, 4}}};
    static const x8_layout q6_k = {14, {{0, 16, 4}, {32, 16, 4}, {128, 16, 4}, {16, 16, 4}, {48, 16, 4}, {144, 16, 4},
                                        {64, 16, 4}, {96, 16, 4}, {160, 16, 4}, {80, 16, 4}, {112, 16, 4}, {176, 16, 4},
                                        {192, 16, 4}, {208, 2, 2}}};
    switch (type) {
    case OKV_QB_Q4_0: return &q4_0;
    case OKV_QB_Q4_1: return &q4_1;
    case OKV_QB_Q5_0: return &q5_0;
    case OKV_QB_Q5_1: return &q5_1;
    case OKV_QB_Q8_0: return &q8_0;
    case OKV_QB_Q2_K: return &q2_k;
    case OKV_QB_Q3_K: return &q3_k;
    case OKV_QB_Q4_K: return &q4_k;
    case OKV_QB_Q5_K: return &q5_k;
    case OKV_QB_Q6_K: return &q6_k;
    default: return NULL;
    }
}

bool okv_qblock_x8_has(int type) { return layout_of(type) != NULL; }

/* n bytes (the unit: 2 or 4) from src to dst, as one move. */
static inline void move_unit(void *dst, const void *src, int n) {
    if (n == 4) memcpy(dst, src, 4);
    else memcpy(dst, src, 2);
}

/* Row r's block taken back out of the group's block at g8. */
static void gather_block(const x8_layout *L, const uint8_t *g8, int r, uint8_t *blk) {
    for (int i = 0, at = 0; i < L->n; at += 8 * L->f[i].size, i++) {
        const x8_field *f = &L->f[i];
        for (int u = 0; u < f->size / f->unit; u++)
            move_unit(blk + f->off + u * f->unit, g8 + at + (8 * u + r) * f->unit, f->unit);
    }
}

/* Block b of the 8 rows at rows (file order, `row` bytes apart) -> the
 * group's block at g8: piece by piece, unit by unit, the 8 rows' units
 * side by side. */
static void scatter_group_block(const x8_layout *L, const uint8_t *rows, size_t row, size_t boff, uint8_t *g8) {
    for (int i = 0; i < L->n; i++) {
        const x8_field *f = &L->f[i];
        const uint8_t *src = rows + boff + f->off;
        if (f->unit == 4)
            for (int u = 0; u < f->size / 4; u++, g8 += 32)
                for (int r = 0; r < 8; r++) memcpy(g8 + 4 * r, src + r * row + 4 * u, 4);
        else
            for (int u = 0; u < f->size / 2; u++, g8 += 16)
                for (int r = 0; r < 8; r++) memcpy(g8 + 2 * r, src + r * row + 2 * u, 2);
    }
}

bool okv_qblock_x8_pack(int type, void *W, int64_t N, int64_t K) {
    const x8_layout *L = layout_of(type);
    const okv_qblock_info *b = okv_qblock_get(type);
    if (!L || !b || N % 8 || K % b->elems) return false;
    const size_t nb = (size_t)(K / b->elems), B = (size_t)b->bytes, row = nb * B;
    uint8_t *tmp = malloc(8 * row); /* the group's 8 rows in file order */
    if (!tmp) return false;
    for (int64_t g = 0; g < N / 8; g++) {
        uint8_t *grp = (uint8_t *)W + (size_t)g * 8 * row;
        memcpy(tmp, grp, 8 * row);
        for (size_t blk = 0; blk < nb; blk++) scatter_group_block(L, tmp, row, blk * B, grp + blk * 8 * B);
    }
    free(tmp);
    return true;
}

void okv_qblock_x8_row(int type, const void *W, int64_t K, int64_t n, int64_t b0, int64_t b1, void *dst) {
    const x8_layout *L = layout_of(type);
    const okv_qblock_info *b = okv_qblock_get(type);
    const size_t nb = (size_t)(K / b->elems), B = (size_t)b->bytes;
    const uint8_t *grp = (const uint8_t *)W + (size_t)(n / 8) * 8 * nb * B;
    for (int64_t blk = b0; blk < b1; blk++)
        gather_block(L, grp + (size_t)blk * 8 * B, (int)(n % 8), (uint8_t *)dst + (size_t)(blk - b0) * B);
}
