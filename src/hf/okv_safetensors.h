/* okv_safetensors.h — reading HuggingFace .safetensors files.
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
 * The writer (tests and okv-mkckpt only) is tools/mkckpt/okv_st_write.h. */
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
/* Width in bits of any dtype the format defines ("I64" -> 64, "F4" -> 4);
 * 0 for a name it does not define. */
int okv_st_dtype_bits(const char *name);

#ifdef __cplusplus
}
#endif
#endif
