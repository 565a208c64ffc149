/* okv_safetensors.h — reading and writing HuggingFace .safetensors files.
 *
 * A checkpoint is either one `model.safetensors` or several shards listed by
 * `model.safetensors.index.json` ("weight_map": tensor name -> shard file).
 * Either way the reader hands back one okv_st_set: every tensor of every
 * shard, sorted by name, each pointing straight into a read-only mmap of its
 * file. Files are untrusted, so opening validates everything a later reader
 * would otherwise trust (header length, JSON shape, dtype, shape, offsets,
 * sizes, overlaps, duplicates, shard file names) and fails with a message
 * naming the file and the tensor/field at fault.
 *
 * Tensors of dtypes other than BF16/F16/F32 are kept (with `supported`
 * false and their dtype name) so a caller can say which tensor it cannot
 * use instead of the reader refusing the whole file.
 *
 * The writer exists for tests and tools (okv-mkckpt): it writes the same
 * layout HF writes (8-byte length, JSON header padded with spaces to a
 * multiple of 8, packed data). */
#ifndef OKV_SAFETENSORS_H
#define OKV_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "offkv_base.h"

#ifdef __cplusplus
extern "C" {
#endif

#define OKV_ST_MAX_DIMS 8
#define OKV_ST_MAX_HEADER (100u * 1024u * 1024u) /* same cap as the Rust crate */
#define OKV_ST_INDEX_NAME "model.safetensors.index.json"
#define OKV_ST_SINGLE_NAME "model.safetensors"

typedef struct okv_st_tensor {
    const char *name;
    const char *dtype_name; /* as written in the file: "BF16", "I64", "F8_E4M3", ... */
    bool supported;         /* dtype is BF16, F16 or F32 */
    okv_dtype dtype;        /* meaningful only when supported */
    int ndim;               /* 0 = scalar */
    int64_t shape[OKV_ST_MAX_DIMS];
    uint64_t numel;
    const void *data;       /* into the file's mmap; NOT necessarily aligned */
    size_t nbytes;
    const char *file;       /* path of the file holding it (for messages) */
} okv_st_tensor;

typedef struct okv_st_set okv_st_set;

/* Opens dir/model.safetensors if present, else dir/model.safetensors.index.json. */
okv_status okv_st_open_dir(const char *dir, okv_st_set **out, okv_error *err);
/* Opens one .safetensors file. */
okv_status okv_st_open_file(const char *path, okv_st_set **out, okv_error *err);
/* Opens a sharded checkpoint from its index file; shards are looked up
 * next to the index. */
okv_status okv_st_open_index(const char *index_path, okv_st_set **out, okv_error *err);
void okv_st_free(okv_st_set *set);

int okv_st_count(const okv_st_set *set);
/* Tensors are ordered by name (strcmp). */
const okv_st_tensor *okv_st_get(const okv_st_set *set, int i);
const okv_st_tensor *okv_st_find(const okv_st_set *set, const char *name);
/* A "__metadata__" value of the first file that has the key, or NULL. */
const char *okv_st_metadata(const okv_st_set *set, const char *key);
int okv_st_file_count(const okv_st_set *set);

/* Name of a supported dtype as safetensors spells it ("BF16", "F16", "F32"). */
const char *okv_st_dtype_str(okv_dtype d);

/* ---- writer ---------------------------------------------------------- */

typedef struct okv_st_write_tensor {
    const char *name;
    okv_dtype dtype;
    const char *dtype_name; /* optional override written instead of dtype ("I64", "U8", ...) */
    int ndim;
    int64_t shape[OKV_ST_MAX_DIMS];
    const void *data;       /* numel * element size bytes */
} okv_st_write_tensor;

/* Writes one .safetensors file with the tensors in the given order and
 * __metadata__ {"format": "pt"}. */
okv_status okv_st_write(const char *path, const okv_st_write_tensor *tensors, int n, okv_error *err);

/* Writes dir/model-0000k-of-0000N.safetensors (tensors split in order into
 * n_shards runs of roughly equal bytes) and dir/model.safetensors.index.json.
 * n_shards == 1 still writes an index (use okv_st_write for a single file). */
okv_status okv_st_write_sharded(const char *dir, const okv_st_write_tensor *tensors, int n,
                                int n_shards, okv_error *err);

/* Byte size of a write tensor (0 if the dtype name is unknown or it overflows). */
size_t okv_st_write_tensor_bytes(const okv_st_write_tensor *t);

#ifdef __cplusplus
}
#endif
#endif
