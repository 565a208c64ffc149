/* gguf_build.h — a byte-level GGUF writer for tests: every field is written
 * explicitly, so a test can produce exactly the malformed file it needs
 * (wrong counts, lengths, offsets, types). Independent of the reader. */
#ifndef GGUF_BUILD_H
#define GGUF_BUILD_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct gb {
    uint8_t *p;
    size_t len, cap;
} gb;

static inline void gb_bytes(gb *b, const void *d, size_t n) {
    if (b->len + n > b->cap) {
        b->cap = (b->len + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        if (!b->p) abort();
    }
    memcpy(b->p + b->len, d, n);
    b->len += n;
}
static inline void gb_uint(gb *b, uint64_t v, int n) {
    uint8_t t[8];
    for (int i = 0; i < n; i++) t[i] = (uint8_t)(v >> (8 * i));
    gb_bytes(b, t, (size_t)n);
}
static inline void gb_u8(gb *b, uint8_t v) { gb_uint(b, v, 1); }
static inline void gb_u32(gb *b, uint32_t v) { gb_uint(b, v, 4); }
static inline void gb_u64(gb *b, uint64_t v) { gb_uint(b, v, 8); }
static inline void gb_f32(gb *b, float f) { uint32_t u; memcpy(&u, &f, 4); gb_u32(b, u); }
static inline void gb_str(gb *b, const char *s) { gb_u64(b, strlen(s)); gb_bytes(b, s, strlen(s)); }
static inline void gb_pad(gb *b, size_t align) { while (b->len % align) gb_u8(b, 0); }

static inline void gb_header(gb *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    gb_bytes(b, "GGUF", 4);
    gb_u32(b, version);
    gb_u64(b, n_tensors);
    gb_u64(b, n_kv);
}
/* key + type tag; the caller writes the value */
static inline void gb_key(gb *b, const char *key, uint32_t type) { gb_str(b, key); gb_u32(b, type); }
static inline void gb_kv_u32(gb *b, const char *key, uint32_t v) { gb_key(b, key, 4); gb_u32(b, v); }
static inline void gb_kv_i32(gb *b, const char *key, int32_t v) { gb_key(b, key, 5); gb_u32(b, (uint32_t)v); }
static inline void gb_kv_f32(gb *b, const char *key, float v) { gb_key(b, key, 6); gb_f32(b, v); }
static inline void gb_kv_bool(gb *b, const char *key, int v) { gb_key(b, key, 7); gb_u8(b, (uint8_t)v); }
static inline void gb_kv_str(gb *b, const char *key, const char *v) { gb_key(b, key, 8); gb_str(b, v); }
static inline void gb_kv_arr(gb *b, const char *key, uint32_t elem_type, uint64_t n) {
    gb_key(b, key, 9);
    gb_u32(b, elem_type);
    gb_u64(b, n);
}
/* tensor info with dims ne[0..nd) (ggml order) */
static inline void gb_tensor(gb *b, const char *name, int nd, const int64_t *ne, uint32_t type, uint64_t offset) {
    gb_str(b, name);
    gb_u32(b, (uint32_t)nd);
    for (int d = 0; d < nd; d++) gb_u64(b, (uint64_t)ne[d]);
    gb_u32(b, type);
    gb_u64(b, offset);
}
static inline int gb_save(const gb *b, const char *path) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(b->p, 1, b->len, f);
    return fclose(f) == 0 && w == b->len ? 0 : -1;
}
#endif
