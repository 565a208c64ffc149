/* okv_gguf.h — reading llama.cpp GGUF files: metadata, tensor infos, and
 * dequantization of their tensors to f32.
 *
 * A GGUF file is a header (magic "GGUF", version, tensor and key counts),
 * typed key/value metadata, tensor infos (name, dims, ggml type, offset) and
 * a data section aligned to general.alignment (default 32). okv_gguf_open
 * maps the file read-only and validates everything a later reader would
 * otherwise trust: every count, string length, array length, alignment,
 * tensor dimension, offset and extent, with checked 64-bit arithmetic, and
 * that tensors lie inside the data section, aligned, and do not overlap.
 * Errors are one line naming the file and the key or tensor at fault.
 *
 * Values point into the mapping (strings are NOT NUL-terminated: use the
 * length); the okv_gguf owns the map. Nested arrays are refused at open
 * (llama.cpp writes none). This layer knows nothing of models, the runtime
 * or caches: mapping GGUF onto a model description lives in okv_gguf_model.c.
 *
 * Versions 2 and 3 are read (64-bit counts); version 1 and big-endian files
 * are refused by name. */
#ifndef OKV_GGUF_H
#define OKV_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "offkv_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* GGUF metadata value types (numbering as in the file format). */
typedef enum okv_gguf_vtype {
    OKV_GGUF_U8 = 0,
    OKV_GGUF_I8 = 1,
    OKV_GGUF_U16 = 2,
    OKV_GGUF_I16 = 3,
    OKV_GGUF_U32 = 4,
    OKV_GGUF_I32 = 5,
    OKV_GGUF_F32 = 6,
    OKV_GGUF_BOOL = 7,
    OKV_GGUF_STRING = 8,
    OKV_GGUF_ARRAY = 9,
    OKV_GGUF_U64 = 10,
    OKV_GGUF_I64 = 11,
    OKV_GGUF_F64 = 12,
    OKV_GGUF_VTYPE_COUNT
} okv_gguf_vtype;

/* ggml tensor types (numbering as in ggml.h; gaps are removed types). */
typedef enum okv_ggml_type {
    OKV_GGML_F32 = 0,
    OKV_GGML_F16 = 1,
    OKV_GGML_Q4_0 = 2,
    OKV_GGML_Q4_1 = 3,
    OKV_GGML_Q5_0 = 6,
    OKV_GGML_Q5_1 = 7,
    OKV_GGML_Q8_0 = 8,
    OKV_GGML_Q8_1 = 9,
    OKV_GGML_Q2_K = 10,
    OKV_GGML_Q3_K = 11,
    OKV_GGML_Q4_K = 12,
    OKV_GGML_Q5_K = 13,
    OKV_GGML_Q6_K = 14,
    OKV_GGML_Q8_K = 15,
    OKV_GGML_IQ2_XXS = 16,
    OKV_GGML_IQ2_XS = 17,
    OKV_GGML_IQ3_XXS = 18,
    OKV_GGML_IQ1_S = 19,
    OKV_GGML_IQ4_NL = 20,
    OKV_GGML_IQ3_S = 21,
    OKV_GGML_IQ2_S = 22,
    OKV_GGML_IQ4_XS = 23,
    OKV_GGML_I8 = 24,
    OKV_GGML_I16 = 25,
    OKV_GGML_I32 = 26,
    OKV_GGML_I64 = 27,
    OKV_GGML_F64 = 28,
    OKV_GGML_IQ1_M = 29,
    OKV_GGML_BF16 = 30,
    OKV_GGML_TQ1_0 = 34,
    OKV_GGML_TQ2_0 = 35,
    OKV_GGML_MXFP4 = 39,
    OKV_GGML_NVFP4 = 40,
    OKV_GGML_Q1_0 = 41,
    OKV_GGML_TYPE_LIMIT = 42
} okv_ggml_type;

#define OKV_GGUF_MAX_DIMS 4
#define OKV_GGUF_DEFAULT_ALIGNMENT 32
#define OKV_GGUF_MAX_KEY 65535u      /* longest key we accept */

/* A string inside the mapping: len bytes at ptr, not NUL-terminated. */
typedef struct okv_gguf_str {
    const char *ptr;
    uint64_t len;
} okv_gguf_str;

typedef struct okv_gguf_kv {
    char *key;                  /* NUL-terminated copy */
    okv_gguf_vtype type;
    union {
        uint64_t u;             /* U8/U16/U32/U64, BOOL (0/1) */
        int64_t i;              /* I8/I16/I32/I64 */
        double f;               /* F32/F64 */
        okv_gguf_str s;         /* STRING */
    } v;
    /* ARRAY */
    okv_gguf_vtype elem_type;
    uint64_t n_elems;
    const uint8_t *elems;       /* packed elements (non-string arrays) */
    const uint8_t **str_at;     /* string arrays: each element's 8-byte length field, in the map */
} okv_gguf_kv;

typedef struct okv_gguf_tensor {
    char *name;                 /* NUL-terminated copy */
    int n_dims;
    int64_t ne[OKV_GGUF_MAX_DIMS]; /* ggml order: ne[0] is the fastest-varying (row length) */
    okv_ggml_type type;
    uint64_t offset;            /* from the start of the data section */
    uint64_t n_elems;
    uint64_t nbytes;
    const uint8_t *data;        /* into the map */
} okv_gguf_tensor;

typedef struct okv_gguf okv_gguf;

okv_status okv_gguf_open(const char *path, okv_gguf **out, okv_error *err);
/* Parses a GGUF image already in memory (not copied: must outlive the
 * result). `what` names it in messages. For tests and fuzzing. */
okv_status okv_gguf_open_memory(const void *data, size_t size, const char *what, okv_gguf **out, okv_error *err);
void okv_gguf_close(okv_gguf *g);

/* True if the file starts with the GGUF magic. */
bool okv_gguf_is_gguf_file(const char *path);

const char *okv_gguf_path(const okv_gguf *g);
uint32_t okv_gguf_version(const okv_gguf *g);
uint64_t okv_gguf_alignment(const okv_gguf *g);
/* Data section: start and size in bytes. */
const uint8_t *okv_gguf_data(const okv_gguf *g, uint64_t *size);

/* ---- metadata ------------------------------------------------------- */
int okv_gguf_kv_count(const okv_gguf *g);
const okv_gguf_kv *okv_gguf_kv_at(const okv_gguf *g, int i);
const okv_gguf_kv *okv_gguf_find(const okv_gguf *g, const char *key);
const char *okv_gguf_vtype_name(okv_gguf_vtype t);

/* Typed getters. Each returns OKV_OK and fills *out; a missing key gives
 * OKV_ERR_NOT_FOUND (message names the key), a value of another type
 * OKV_ERR_FORMAT. Integers of any width/sign convert when the value fits;
 * floats accept F32/F64 (and integers); bools accept BOOL only. */
okv_status okv_gguf_get_str(const okv_gguf *g, const char *key, okv_gguf_str *out, okv_error *err);
/* NUL-terminated heap copy (free() it). */
okv_status okv_gguf_get_strdup(const okv_gguf *g, const char *key, char **out, okv_error *err);
okv_status okv_gguf_get_int(const okv_gguf *g, const char *key, int64_t *out, okv_error *err);
okv_status okv_gguf_get_uint(const okv_gguf *g, const char *key, uint64_t *out, okv_error *err);
okv_status okv_gguf_get_float(const okv_gguf *g, const char *key, double *out, okv_error *err);
okv_status okv_gguf_get_bool(const okv_gguf *g, const char *key, bool *out, okv_error *err);

/* Arrays: element type and length; element access by index (bounds-checked). */
okv_status okv_gguf_get_array(const okv_gguf *g, const char *key, okv_gguf_vtype *elem_type, uint64_t *n,
                              okv_error *err);
okv_status okv_gguf_arr_int(const okv_gguf *g, const char *key, uint64_t i, int64_t *out, okv_error *err);
okv_status okv_gguf_arr_float(const okv_gguf *g, const char *key, uint64_t i, double *out, okv_error *err);
okv_status okv_gguf_arr_bool(const okv_gguf *g, const char *key, uint64_t i, bool *out, okv_error *err);
okv_status okv_gguf_arr_str(const okv_gguf *g, const char *key, uint64_t i, okv_gguf_str *out, okv_error *err);
/* Same on a kv already found (no lookup; for loops over large arrays). */
bool okv_gguf_kv_int(const okv_gguf_kv *kv, uint64_t i, int64_t *out);
bool okv_gguf_kv_float(const okv_gguf_kv *kv, uint64_t i, double *out);
bool okv_gguf_kv_str(const okv_gguf_kv *kv, uint64_t i, okv_gguf_str *out);

/* ---- tensors -------------------------------------------------------- */
int okv_gguf_tensor_count(const okv_gguf *g);
const okv_gguf_tensor *okv_gguf_tensor_at(const okv_gguf *g, int i);
const okv_gguf_tensor *okv_gguf_find_tensor(const okv_gguf *g, const char *name);

/* ggml type facts: name ("Q4_K"; NULL if unknown), elements per block and
 * bytes per block (0 if unknown), and whether okv_gguf_dequantize can
 * convert it. */
const char *okv_ggml_type_name(int type);
int okv_ggml_block_size(int type);
int okv_ggml_type_size(int type);
bool okv_ggml_can_dequantize(int type);

/* Dequantizes n elements (a multiple of the type's block size) starting at
 * element `first` (also a block multiple) of tensor t into dst, exactly as
 * llama.cpp's reference dequantize_row_* do. Unsupported types fail naming
 * the type and tensor. */
okv_status okv_gguf_dequantize(const okv_gguf_tensor *t, uint64_t first, uint64_t n, float *dst, okv_error *err);
/* Same for raw blocks: src holds n/block_size blocks of `type`. */
okv_status okv_ggml_dequantize_row(int type, const void *src, float *dst, uint64_t n, okv_error *err);

#ifdef __cplusplus
}
#endif
#endif
