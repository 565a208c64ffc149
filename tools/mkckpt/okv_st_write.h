/* okv_st_write.h — writing HuggingFace .safetensors files, for tests and
 * tools only (okv-mkckpt, the fuzz seed maker): the library reads
 * checkpoints (src/hf/okv_safetensors.h) and never writes them, so the writer
 * lives here, next to its main user, as the okv_st_writer target.
 *
 * It writes the layout HF writes: 8-byte little-endian header length, JSON
 * header padded with spaces to a multiple of 8, packed tensor data; sharded
 * checkpoints get model-0000k-of-0000N.safetensors files plus the index. */
#ifndef OKV_ST_WRITE_H
#define OKV_ST_WRITE_H

#include <stddef.h>
#include <stdint.h>

#include "okv_safetensors.h"

#ifdef __cplusplus
extern "C" {
#endif

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
