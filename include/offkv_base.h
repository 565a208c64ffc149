/* offkv_base.h — the types every offkv API shares: status codes, the error
 * record that carries a human message naming the file/field/tensor at fault,
 * and the element dtypes of weights and caches.
 *
 * Library code never prints and never exits: it fills an okv_error and
 * returns its status. Only the CLI's main() talks to the user. */
#ifndef OFFKV_BASE_H
#define OFFKV_BASE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum okv_status {
    OKV_OK = 0,
    OKV_ERR_INVALID = 1,     /* bad argument or option value */
    OKV_ERR_IO = 2,          /* file could not be opened/read/written */
    OKV_ERR_FORMAT = 3,      /* malformed or corrupted input file */
    OKV_ERR_UNSUPPORTED = 4, /* valid input we cannot honour (yet) */
    OKV_ERR_NOMEM = 5,
    OKV_ERR_CAPACITY = 6,    /* step would overflow a cache */
    OKV_ERR_STATE = 7,       /* call not valid in the current state */
    OKV_ERR_NOT_FOUND = 8    /* unknown key, tensor, token, ... */
} okv_status;

typedef struct okv_error {
    okv_status status;
    char message[1024];
} okv_error;

typedef enum okv_dtype {
    OKV_F32 = 0,
    OKV_F16 = 1,
    OKV_BF16 = 2
} okv_dtype;
/* KV cache storage only, never a tensor dtype: blocks of 32 int8 codes + one
 * f32 scale (src/common/okv_kvq8.h). Outside the enum's list on purpose, so
 * the tensor-dtype switches elsewhere need no q8 case. */
#define OKV_Q8 ((okv_dtype)3)

/* Where a program's bytes live once opened (okv_program_options.weights).
 * Decode streams every weight once per token, and on 4 KiB pages a bf16
 * matrix row is a page: a TLB miss and a hardware-prefetch stop per row.
 * AUTO: HUGE_PAGES where the kernel grants transparent huge pages on
 * request, else MAPPED. */
typedef enum okv_weights_memory {
    OKV_WEIGHTS_AUTO = 0,
    OKV_WEIGHTS_MAPPED = 1,     /* the file mapped read-only (shared with the page cache, loaded lazily) */
    OKV_WEIGHTS_HUGE_PAGES = 2  /* read into private memory that asked for 2 MiB pages; asked for, the same as
                                   AUTO (where the kernel grants none, or the memory cannot be had: MAPPED) */
} okv_weights_memory;

const char *okv_status_name(okv_status s);
const char *okv_dtype_name(okv_dtype d);
/* Parses "f32"/"fp32"/"float32", "f16"/"fp16"/"float16", "bf16"/"bfloat16"
 * (never "q8": tensor dtypes only; okv_kv_dtype_parse adds it). */
int okv_dtype_parse(const char *s, okv_dtype *out);
/* okv_dtype_parse plus "q8": a KV cache storage dtype. */
int okv_kv_dtype_parse(const char *s, okv_dtype *out);
/* Bytes per element; q8: 1 (the codes; storage sizes with their scales come
 * from okv_kv_row_bytes). */
size_t okv_dtype_size(okv_dtype d);

/* Reads a whole regular file into a NUL-terminated heap buffer (free() it);
 * *len (may be NULL) gets its size. Directories, FIFOs and devices are
 * refused by name. */
okv_status okv_read_file(const char *path, char **data, size_t *len, okv_error *err);

#ifdef __cplusplus
}
#endif
#endif
