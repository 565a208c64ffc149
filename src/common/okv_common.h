/* okv_common.h — small helpers every layer uses: error filling, checked
 * allocation, whole-file reads, float16/bfloat16 conversion, cJSON
 * accessors, and (through okv_buf.h) the growable buffer. Nothing here
 * holds state. */
#ifndef OKV_COMMON_H
#define OKV_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cjson/cJSON.h>

#include "offkv_base.h"
#include "okv_buf.h"

/* Fills err (may be NULL) with a printf-style message and returns status. */
okv_status okv_fail(okv_error *err, okv_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Prefixes an already-filled error message with more context. */
okv_status okv_fail_prefix(okv_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void okv_error_clear(okv_error *err);

/* Opens an input file read-only and returns its fd and size, refusing what
 * is not a regular file (directory, FIFO, device, socket) by name: opened
 * with O_NONBLOCK, so a FIFO cannot hang the open. */
okv_status okv_open_regular(const char *path, int *fd, uint64_t *size, okv_error *err);
/* Refuses an output path that exists and is not a regular file (a device
 * node, a directory, a symlink: replacing it by rename would destroy it or
 * surprise the user). A missing path is fine. */
okv_status okv_check_output_path(const char *path, okv_error *err);

/* An output file written whole and then put in place: the data goes to an
 * unnamed file in the target's directory (O_TMPFILE), which is linked under
 * a temporary name and renamed over the target only at commit. A process
 * that dies while writing leaves nothing behind; where O_TMPFILE is not
 * supported it falls back to a named PATH.tmpPID removed on abort. */
typedef struct okv_out_file {
    int fd;
    char *path, *tmp; /* tmp: the named fallback, or NULL */
} okv_out_file;
okv_status okv_out_file_create(const char *path, okv_out_file *o, okv_error *err);
/* Flushes, links and renames into place; on failure the target is untouched. */
okv_status okv_out_file_commit(okv_out_file *o, okv_error *err);
/* Drops the data (no-op after commit). */
void okv_out_file_abort(okv_out_file *o);

/* okv_read_file (a whole file into a heap buffer) is public: offkv_base.h. */
bool okv_file_exists(const char *path);
/* Joins dir and name into a heap string (free() it). */
char *okv_path_join(const char *dir, const char *name);
char *okv_strdup(const char *s);
/* Hash tables over names and texts from untrusted files: a 64-bit FNV-1a
 * started from `seed` and finished with a 64-bit mixer, so with a seed the
 * file cannot know (okv_hash_seed, one per table) no file can be crafted
 * to put all its keys in one probe chain. */
uint64_t okv_hash_bytes(uint64_t seed, const void *data, size_t n);
uint64_t okv_hash_seed(void);

/* Scalar conversions (round-to-nearest-even for the narrowing ones). */
float okv_f16_to_f32(uint16_t h);
uint16_t okv_f32_to_f16(float f);
float okv_bf16_to_f32(uint16_t b);
uint16_t okv_f32_to_bf16(float f);
/* Converts n elements between dtypes (src and dst must not overlap). */
void okv_convert(void *dst, okv_dtype dst_dt, const void *src, okv_dtype src_dt, size_t n);

/* Range checks done on a double BEFORE any conversion (converting a double
 * outside the target type's range is undefined behaviour, so JSON numbers
 * are judged as doubles first). NaN and infinities fail both. */
/* True iff d is an integer in [lo, hi] (|lo|, |hi| <= 2^53). */
bool okv_double_is_int_in(double d, int64_t lo, int64_t hi);
/* True iff d is finite and within float's range (|d| <= FLT_MAX). */
bool okv_double_fits_float(double d);
/* A cJSON item that is a number and an integer in [lo, hi]: stores it in
 * *out and returns true; else false (*out untouched). */
bool okv_json_item_int(const cJSON *item, int64_t lo, int64_t hi, int64_t *out);

/* cJSON accessors that validate types. `what` names the file/object in
 * error messages. A missing key is an error only for the _req variants. */
okv_status okv_json_parse(const char *text, size_t len, cJSON **out, const char *what, okv_error *err);
okv_status okv_json_load(const char *path, cJSON **out, okv_error *err);
okv_status okv_json_req_int(const cJSON *obj, const char *key, int64_t *out, const char *what, okv_error *err);
okv_status okv_json_opt_int(const cJSON *obj, const char *key, int64_t *out, int64_t dflt, const char *what, okv_error *err);
okv_status okv_json_opt_double(const cJSON *obj, const char *key, double *out, double dflt, const char *what, okv_error *err);
okv_status okv_json_opt_bool(const cJSON *obj, const char *key, bool *out, bool dflt, const char *what, okv_error *err);
/* Returns the string value or NULL (missing or not a string). */
const char *okv_json_str(const cJSON *obj, const char *key);
/* True if obj has key set to something other than null. */
bool okv_json_has(const cJSON *obj, const char *key);

#endif
