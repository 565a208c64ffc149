/* okv_common.c — implementation of the shared helpers in okv_common.h. */
#include "okv_common.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

const char *okv_status_name(okv_status s) {
    switch (s) {
    case OKV_OK: return "ok";
    case OKV_ERR_INVALID: return "invalid argument";
    case OKV_ERR_IO: return "i/o error";
    case OKV_ERR_FORMAT: return "format error";
    case OKV_ERR_UNSUPPORTED: return "unsupported";
    case OKV_ERR_NOMEM: return "out of memory";
    case OKV_ERR_CAPACITY: return "capacity exceeded";
    case OKV_ERR_STATE: return "invalid state";
    case OKV_ERR_NOT_FOUND: return "not found";
    }
    return "unknown status";
}

const char *okv_dtype_name(okv_dtype d) {
    switch (d) {
    case OKV_F32: return "f32";
    case OKV_F16: return "f16";
    case OKV_BF16: return "bf16";
    }
    return "?";
}

int okv_dtype_parse(const char *s, okv_dtype *out) {
    if (!s) return -1;
    if (!strcmp(s, "f32") || !strcmp(s, "fp32") || !strcmp(s, "float32")) { *out = OKV_F32; return 0; }
    if (!strcmp(s, "f16") || !strcmp(s, "fp16") || !strcmp(s, "float16")) { *out = OKV_F16; return 0; }
    if (!strcmp(s, "bf16") || !strcmp(s, "bfloat16")) { *out = OKV_BF16; return 0; }
    return -1;
}

size_t okv_dtype_size(okv_dtype d) { return d == OKV_F32 ? 4 : 2; }

okv_status okv_fail(okv_error *err, okv_status status, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
        err->status = status;
    }
    return status;
}

okv_status okv_fail_prefix(okv_error *err, const char *fmt, ...) {
    if (!err) return OKV_ERR_INVALID;
    char prefix[512], old[sizeof err->message];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, err->message, sizeof old);
    size_t n = strlen(prefix);
    if (n > sizeof err->message - 3) n = sizeof err->message - 3;
    memcpy(err->message, prefix, n);
    memcpy(err->message + n, ": ", 2);
    size_t room = sizeof err->message - n - 3;
    size_t m = strlen(old);
    if (m > room) m = room;
    memcpy(err->message + n + 2, old, m);
    err->message[n + 2 + m] = 0;
    return err->status;
}

void okv_error_clear(okv_error *err) {
    if (err) { err->status = OKV_OK; err->message[0] = 0; }
}

okv_status okv_read_file(const char *path, char **data, size_t *len, okv_error *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return okv_fail(err, OKV_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    if (fseek(f, 0, SEEK_END) != 0) { fclose(f); return okv_fail(err, OKV_ERR_IO, "%s: cannot seek", path); }
    long n = ftell(f);
    if (n < 0) { fclose(f); return okv_fail(err, OKV_ERR_IO, "%s: cannot tell size", path); }
    rewind(f);
    char *buf = malloc((size_t)n + 1);
    if (!buf) { fclose(f); return okv_fail(err, OKV_ERR_NOMEM, "%s: out of memory (%ld bytes)", path, n); }
    if (n > 0 && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf); fclose(f);
        return okv_fail(err, OKV_ERR_IO, "%s: short read", path);
    }
    fclose(f);
    buf[n] = 0;
    *data = buf;
    if (len) *len = (size_t)n;
    return OKV_OK;
}

bool okv_file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

char *okv_path_join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (!p) return NULL;
    memcpy(p, dir, a);
    size_t k = a;
    if (a && dir[a - 1] != '/') p[k++] = '/';
    memcpy(p + k, name, b + 1);
    return p;
}

char *okv_strdup(const char *s) {
    if (!s) return NULL;
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}

/* ---- float16 / bfloat16 ------------------------------------------------ */

float okv_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0) {
        if (man == 0) bits = sign;
        else { /* subnormal: value = man * 2^-24 */
            float v = (float)man * 5.9604644775390625e-8f;
            return sign ? -v : v;
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t okv_f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) /* inf or nan */
        return sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0);
    if (ax >= 0x477ff000u) return sign | 0x7c00; /* rounds to >= 65520: inf */
    if (ax < 0x38800000u) { /* below the smallest normal: subnormal or zero */
        float a;
        memcpy(&a, &ax, 4);
        /* scale so that one f16 subnormal ulp (2^-24) is 1, round to even */
        float r = nearbyintf(a * 16777216.0f);
        return sign | (uint16_t)r;
    }
    uint32_t exp = (ax >> 23) - 112, man = ax & 0x7fffff;
    uint32_t h = (exp << 10) | (man >> 13);
    uint32_t rem = man & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;
    return sign | (uint16_t)h;
}

float okv_bf16_to_f32(uint16_t b) {
    uint32_t bits = (uint32_t)b << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t okv_f32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40); /* quiet nan */
    x += 0x7fff + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

static float load_elem(const void *src, okv_dtype dt, size_t i) {
    switch (dt) {
    case OKV_F32: return ((const float *)src)[i];
    case OKV_F16: return okv_f16_to_f32(((const uint16_t *)src)[i]);
    case OKV_BF16: return okv_bf16_to_f32(((const uint16_t *)src)[i]);
    }
    return 0.0f;
}

void okv_convert(void *dst, okv_dtype dst_dt, const void *src, okv_dtype src_dt, size_t n) {
    if (dst_dt == src_dt) { memcpy(dst, src, n * okv_dtype_size(dst_dt)); return; }
    for (size_t i = 0; i < n; i++) {
        float v = load_elem(src, src_dt, i);
        switch (dst_dt) {
        case OKV_F32: ((float *)dst)[i] = v; break;
        case OKV_F16: ((uint16_t *)dst)[i] = okv_f32_to_f16(v); break;
        case OKV_BF16: ((uint16_t *)dst)[i] = okv_f32_to_bf16(v); break;
        }
    }
}

/* ---- JSON ---------------------------------------------------------------- */

okv_status okv_json_parse(const char *text, size_t len, cJSON **out, const char *what, okv_error *err) {
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!j) {
        size_t off = end && end >= text ? (size_t)(end - text) : 0;
        return okv_fail(err, OKV_ERR_FORMAT, "%s: invalid JSON near byte %zu", what, off);
    }
    *out = j;
    return OKV_OK;
}

okv_status okv_json_load(const char *path, cJSON **out, okv_error *err) {
    char *text;
    size_t len;
    okv_status st = okv_read_file(path, &text, &len, err);
    if (st) return st;
    st = okv_json_parse(text, len, out, path, err);
    free(text);
    return st;
}

bool okv_json_has(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return v && !cJSON_IsNull(v);
}

static okv_status get_number(const cJSON *obj, const char *key, double *out, bool *found,
                             const char *what, okv_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    *found = false;
    if (!v || cJSON_IsNull(v)) return OKV_OK;
    if (!cJSON_IsNumber(v))
        return okv_fail(err, OKV_ERR_FORMAT, "%s: field '%s' must be a number", what, key);
    *out = v->valuedouble;
    *found = true;
    return OKV_OK;
}

okv_status okv_json_req_int(const cJSON *obj, const char *key, int64_t *out, const char *what, okv_error *err) {
    double d;
    bool found;
    okv_status st = get_number(obj, key, &d, &found, what, err);
    if (st) return st;
    if (!found) return okv_fail(err, OKV_ERR_FORMAT, "%s: missing required field '%s'", what, key);
    if (d != floor(d) || fabs(d) > 9.0e15)
        return okv_fail(err, OKV_ERR_FORMAT, "%s: field '%s' must be an integer (got %g)", what, key, d);
    *out = (int64_t)d;
    return OKV_OK;
}

okv_status okv_json_opt_int(const cJSON *obj, const char *key, int64_t *out, int64_t dflt, const char *what, okv_error *err) {
    if (!okv_json_has(obj, key)) { *out = dflt; return OKV_OK; }
    return okv_json_req_int(obj, key, out, what, err);
}

okv_status okv_json_opt_double(const cJSON *obj, const char *key, double *out, double dflt, const char *what, okv_error *err) {
    bool found;
    okv_status st = get_number(obj, key, out, &found, what, err);
    if (!st && !found) *out = dflt;
    return st;
}

okv_status okv_json_opt_bool(const cJSON *obj, const char *key, bool *out, bool dflt, const char *what, okv_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v || cJSON_IsNull(v)) { *out = dflt; return OKV_OK; }
    if (!cJSON_IsBool(v)) return okv_fail(err, OKV_ERR_FORMAT, "%s: field '%s' must be true or false", what, key);
    *out = cJSON_IsTrue(v);
    return OKV_OK;
}

const char *okv_json_str(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}
