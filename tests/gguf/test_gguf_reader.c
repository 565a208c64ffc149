/* test_gguf_reader — the GGUF reader on hand-built files: every value type
 * and accessor on a valid file, then each malformed-input class (bad magic,
 * versions, every truncation point, lengths and counts past the end, nested
 * arrays, unknown types, misaligned / out-of-range / overlapping tensors,
 * duplicates, bad alignment, bad shapes) fails with a one-line message that
 * names the key or tensor, and never crashes (run under ASan/UBSan too). */
#include "gguf_build.h"
#include "okv_common.h"
#include "okv_gguf.h"
#include "okv_test.h"

/* A valid file: every scalar type, arrays, alignment 64, three tensors. */
static gb valid_file(void) {
    gb b = {0};
    gb_header(&b, 3, 3, 17);
    gb_kv_str(&b, "general.architecture", "llama");
    gb_kv_u32(&b, "general.alignment", 64);
    gb_key(&b, "v.u8", 0); gb_u8(&b, 200);
    gb_key(&b, "v.i8", 1); gb_u8(&b, 0xfe);            /* -2 */
    gb_key(&b, "v.u16", 2); gb_uint(&b, 65000, 2);
    gb_key(&b, "v.i16", 3); gb_uint(&b, 0x8000, 2);    /* -32768 */
    gb_kv_u32(&b, "v.u32", 4000000000u);
    gb_kv_i32(&b, "v.i32", -7);
    gb_kv_f32(&b, "v.f32", 0.5f);
    gb_kv_bool(&b, "v.bool", 1);
    gb_key(&b, "v.u64", 10); gb_u64(&b, UINT64_MAX);
    gb_key(&b, "v.i64", 11); gb_u64(&b, (uint64_t)-5);
    gb_key(&b, "v.f64", 12); { double d = 1e-6; uint64_t u; memcpy(&u, &d, 8); gb_u64(&b, u); }
    gb_kv_arr(&b, "a.str", 8, 3); gb_str(&b, "hello"); gb_str(&b, ""); gb_str(&b, "w\xc3\xb6rld");
    gb_kv_arr(&b, "a.i32", 5, 2); gb_u32(&b, (uint32_t)-3); gb_u32(&b, 9);
    gb_kv_arr(&b, "a.f32", 6, 2); gb_f32(&b, 1.5f); gb_f32(&b, -2.0f);
    gb_kv_arr(&b, "a.bool", 7, 2); gb_u8(&b, 0); gb_u8(&b, 1);
    int64_t ne_a[2] = {4, 2}, ne_b[1] = {32}, ne_c[1] = {3};
    gb_tensor(&b, "w.f32", 2, ne_a, OKV_GGML_F32, 0);      /* 32 bytes */
    gb_tensor(&b, "w.q8", 1, ne_b, OKV_GGML_Q8_0, 64);     /* 34 bytes */
    gb_tensor(&b, "w.f16", 1, ne_c, OKV_GGML_F16, 128);    /* 6 bytes */
    gb_pad(&b, 64);
    for (int i = 0; i < 8; i++) gb_f32(&b, (float)i - 3.0f);
    gb_pad(&b, 64);
    gb_uint(&b, okv_f32_to_f16(0.25f), 2);
    for (int i = 0; i < 32; i++) gb_u8(&b, (uint8_t)(int8_t)(i - 16));
    gb_pad(&b, 64);
    gb_uint(&b, okv_f32_to_f16(1.0f), 2); gb_uint(&b, okv_f32_to_f16(-2.0f), 2); gb_uint(&b, okv_f32_to_f16(0.5f), 2);
    return b;
}

static void test_valid(void) {
    gb b = valid_file();
    okv_error err = {0};
    okv_gguf *g = NULL;
    CHECK_OK(okv_gguf_open_memory(b.p, b.len, "valid", &g, &err), &err);
    if (!g) { free(b.p); return; }
    CHECK(okv_gguf_version(g) == 3);
    CHECK(okv_gguf_alignment(g) == 64);
    CHECK(okv_gguf_kv_count(g) == 17);
    okv_gguf_str s;
    CHECK_OK(okv_gguf_get_str(g, "general.architecture", &s, &err), &err);
    CHECK(s.len == 5 && !memcmp(s.ptr, "llama", 5));
    char *dup = NULL;
    CHECK_OK(okv_gguf_get_strdup(g, "general.architecture", &dup, &err), &err);
    CHECK(dup && !strcmp(dup, "llama"));
    free(dup);
    int64_t i;
    uint64_t u;
    double f;
    bool bo;
    CHECK(!okv_gguf_get_int(g, "v.u8", &i, &err) && i == 200);
    CHECK(!okv_gguf_get_int(g, "v.i8", &i, &err) && i == -2);
    CHECK(!okv_gguf_get_int(g, "v.u16", &i, &err) && i == 65000);
    CHECK(!okv_gguf_get_int(g, "v.i16", &i, &err) && i == -32768);
    CHECK(!okv_gguf_get_int(g, "v.u32", &i, &err) && i == 4000000000LL);
    CHECK(!okv_gguf_get_int(g, "v.i32", &i, &err) && i == -7);
    CHECK(!okv_gguf_get_int(g, "v.i64", &i, &err) && i == -5);
    CHECK(okv_gguf_get_int(g, "v.u64", &i, &err) == OKV_ERR_FORMAT && strstr(err.message, "v.u64"));
    CHECK(!okv_gguf_get_uint(g, "v.u64", &u, &err) && u == UINT64_MAX);
    CHECK(okv_gguf_get_uint(g, "v.i32", &u, &err) == OKV_ERR_FORMAT);
    CHECK(!okv_gguf_get_float(g, "v.f32", &f, &err) && f == 0.5);
    CHECK(!okv_gguf_get_float(g, "v.f64", &f, &err) && f == 1e-6);
    CHECK(!okv_gguf_get_float(g, "v.i32", &f, &err) && f == -7.0);
    CHECK(!okv_gguf_get_bool(g, "v.bool", &bo, &err) && bo);
    CHECK(okv_gguf_get_bool(g, "v.u8", &bo, &err) == OKV_ERR_FORMAT && strstr(err.message, "'v.u8'"));
    CHECK(okv_gguf_get_int(g, "general.architecture", &i, &err) == OKV_ERR_FORMAT);
    CHECK(okv_gguf_get_str(g, "no.such", &s, &err) == OKV_ERR_NOT_FOUND && strstr(err.message, "no.such"));
    okv_gguf_vtype et;
    uint64_t n;
    CHECK(!okv_gguf_get_array(g, "a.str", &et, &n, &err) && et == OKV_GGUF_STRING && n == 3);
    CHECK(!okv_gguf_arr_str(g, "a.str", 0, &s, &err) && s.len == 5 && !memcmp(s.ptr, "hello", 5));
    CHECK(!okv_gguf_arr_str(g, "a.str", 1, &s, &err) && s.len == 0);
    CHECK(!okv_gguf_arr_str(g, "a.str", 2, &s, &err) && s.len == 6 && !memcmp(s.ptr, "w\xc3\xb6rld", 6));
    CHECK(okv_gguf_arr_str(g, "a.str", 3, &s, &err) == OKV_ERR_NOT_FOUND && strstr(err.message, "a.str"));
    CHECK(okv_gguf_arr_int(g, "a.str", 0, &i, &err) == OKV_ERR_FORMAT);
    CHECK(!okv_gguf_arr_int(g, "a.i32", 0, &i, &err) && i == -3);
    CHECK(!okv_gguf_arr_int(g, "a.i32", 1, &i, &err) && i == 9);
    CHECK(!okv_gguf_arr_float(g, "a.f32", 1, &f, &err) && f == -2.0);
    CHECK(!okv_gguf_arr_bool(g, "a.bool", 1, &bo, &err) && bo);
    CHECK(!okv_gguf_arr_bool(g, "a.bool", 0, &bo, &err) && !bo);
    CHECK(okv_gguf_get_array(g, "v.u8", &et, &n, &err) == OKV_ERR_FORMAT);

    CHECK(okv_gguf_tensor_count(g) == 3);
    const okv_gguf_tensor *t = okv_gguf_find_tensor(g, "w.q8");
    CHECK(t && t->type == OKV_GGML_Q8_0 && t->n_elems == 32 && t->nbytes == 34 && t->offset == 64);
    CHECK(!okv_gguf_find_tensor(g, "w.none"));
    uint64_t dsz;
    const uint8_t *data = okv_gguf_data(g, &dsz);
    CHECK((size_t)(data - b.p) % 64 == 0 && dsz == 128 + 6);
    float out[32];
    t = okv_gguf_find_tensor(g, "w.f32");
    CHECK(t && t->n_dims == 2 && t->ne[0] == 4 && t->ne[1] == 2);
    CHECK_OK(okv_gguf_dequantize(t, 4, 4, out, &err), &err);
    CHECK(out[0] == 1.0f && out[3] == 4.0f);
    t = okv_gguf_find_tensor(g, "w.q8");
    CHECK_OK(okv_gguf_dequantize(t, 0, 32, out, &err), &err);
    CHECK(out[0] == -4.0f && out[31] == 3.75f);
    CHECK(okv_gguf_dequantize(t, 0, 16, out, &err) == OKV_ERR_INVALID && strstr(err.message, "w.q8"));
    t = okv_gguf_find_tensor(g, "w.f16");
    CHECK_OK(okv_gguf_dequantize(t, 0, 3, out, &err), &err);
    CHECK(out[0] == 1.0f && out[1] == -2.0f && out[2] == 0.5f);
    okv_gguf_close(g);
    free(b.p);
}

/* Opens the image; expects failure with the given status and a one-line
 * message containing `needle`. */
static void expect_fail(const gb *b, okv_status want, const char *needle, int line) {
    okv_error err = {0};
    okv_gguf *g = NULL;
    okv_status st = okv_gguf_open_memory(b->p, b->len, "bad.gguf", &g, &err);
    CHECKF(st == want, "line %d: status %d, want %d (%s)", line, st, want, err.message);
    CHECKF(!g, "line %d: handle returned on failure", line);
    CHECKF(strstr(err.message, needle), "line %d: message '%s' lacks '%s'", line, err.message, needle);
    CHECKF(!strchr(err.message, '\n'), "line %d: message has a newline", line);
    okv_gguf_close(g);
}
#define FAIL(b, st, needle) expect_fail(&(b), st, needle, __LINE__)

static void test_truncations(void) {
    gb b = valid_file();
    /* every proper prefix ending before the last tensor's bytes fails */
    size_t last_end = b.len; /* w.f16 ends exactly at the end */
    int failed = 0, crashed_ok = 1;
    for (size_t n = 0; n < last_end; n++) {
        okv_error err = {0};
        okv_gguf *g = NULL;
        okv_status st = okv_gguf_open_memory(b.p, n, "cut.gguf", &g, &err);
        if (st != OKV_OK && !g && !strchr(err.message, '\n')) failed++;
        else crashed_ok = 0;
        okv_gguf_close(g);
    }
    CHECKF(crashed_ok && failed == (int)last_end, "%d of %zu truncations refused", failed, last_end);
    okv_error err = {0};
    okv_gguf *g = NULL;
    okv_gguf_open_memory(b.p, b.len - 3, "cut.gguf", &g, &err);
    CHECKF(strstr(err.message, "w.f16") && strstr(err.message, "outside the data section"), "%s", err.message);
    okv_gguf_open_memory(b.p, 300, "cut.gguf", &g, &err);
    CHECKF(strstr(err.message, "cut.gguf: truncated") || strstr(err.message, "past the end"), "%s", err.message);
    free(b.p);
}

static void test_header_errors(void) {
    gb b = valid_file();
    b.p[0] = 'X';
    FAIL(b, OKV_ERR_FORMAT, "bad magic");
    b.p[0] = 'G';
    b.p[4] = 1;
    FAIL(b, OKV_ERR_UNSUPPORTED, "version 1");
    b.p[4] = 4;
    FAIL(b, OKV_ERR_UNSUPPORTED, "version 4");
    b.p[4] = 0; b.p[7] = 3;
    FAIL(b, OKV_ERR_UNSUPPORTED, "big-endian");
    b.p[4] = 3; b.p[7] = 0;
    b.p[8 + 7] = 0x10; /* tensor count 2^60 */
    FAIL(b, OKV_ERR_FORMAT, "tensors");
    b.p[8 + 7] = 0;
    b.p[16 + 4] = 0x7f; /* kv count */
    FAIL(b, OKV_ERR_FORMAT, "metadata keys");
    free(b.p);
}

static void test_value_errors(void) {
    {   /* string value length past the end */
        gb b = {0};
        gb_header(&b, 3, 0, 1);
        gb_key(&b, "general.name", 8);
        gb_u64(&b, 1000);
        gb_bytes(&b, "short", 5);
        FAIL(b, OKV_ERR_FORMAT, "general.name");
        FAIL(b, OKV_ERR_FORMAT, "string length 1000");
        free(b.p);
    }
    {   /* key length past the end */
        gb b = {0};
        gb_header(&b, 3, 0, 1);
        gb_u64(&b, UINT64_MAX);
        gb_bytes(&b, "abcdefgh", 8);
        FAIL(b, OKV_ERR_FORMAT, "key 0");
        free(b.p);
    }
    {   /* string-array element past the end */
        gb b = {0};
        gb_header(&b, 3, 0, 1);
        gb_kv_arr(&b, "tokenizer.ggml.tokens", 8, 2);
        gb_str(&b, "a");
        gb_u64(&b, 99);
        gb_bytes(&b, "bc", 2);
        FAIL(b, OKV_ERR_FORMAT, "tokenizer.ggml.tokens");
        free(b.p);
    }
    {   /* array count past the end */
        gb b = {0};
        gb_header(&b, 3, 0, 1);
        gb_kv_arr(&b, "tokenizer.ggml.scores", 6, (uint64_t)1 << 62);
        gb_f32(&b, 1.0f);
        FAIL(b, OKV_ERR_FORMAT, "tokenizer.ggml.scores");
        free(b.p);
    }
    {   /* nested array */
        gb b = {0};
        gb_header(&b, 3, 0, 1);
        gb_kv_arr(&b, "x.nested", 9, 1);
        gb_u32(&b, 4); gb_u64(&b, 1); gb_u32(&b, 1);
        FAIL(b, OKV_ERR_UNSUPPORTED, "nested");
        free(b.p);
    }
    {   /* unknown value type */
        gb b = {0};
        gb_header(&b, 3, 0, 1);
        gb_key(&b, "x.weird", 13);
        gb_u32(&b, 0);
        FAIL(b, OKV_ERR_FORMAT, "x.weird");
        free(b.p);
    }
    {   /* bool that is not 0/1 */
        gb b = {0};
        gb_header(&b, 3, 0, 1);
        gb_kv_bool(&b, "x.flag", 7);
        FAIL(b, OKV_ERR_FORMAT, "x.flag");
        free(b.p);
    }
    {   /* duplicate key */
        gb b = {0};
        gb_header(&b, 3, 0, 2);
        gb_kv_u32(&b, "x.k", 1);
        gb_kv_u32(&b, "x.k", 2);
        FAIL(b, OKV_ERR_FORMAT, "appears twice");
        free(b.p);
    }
    {   /* alignment not a power of two, and of the wrong type */
        gb b = {0};
        gb_header(&b, 3, 0, 1);
        gb_kv_u32(&b, "general.alignment", 48);
        FAIL(b, OKV_ERR_FORMAT, "general.alignment");
        free(b.p);
        gb c = {0};
        gb_header(&c, 3, 0, 1);
        gb_kv_str(&c, "general.alignment", "32");
        FAIL(c, OKV_ERR_FORMAT, "general.alignment");
        free(c.p);
    }
}

/* n tensors (names[i] at offsets[i], all of type/dims) in a file whose data
 * section holds data_bytes bytes. */
static gb tensors_file(int n, const char *const *names, const uint64_t *offsets, int nd, const int64_t *ne, uint32_t type,
                       size_t data_bytes) {
    gb b = {0};
    gb_header(&b, 3, (uint64_t)n, 0);
    for (int i = 0; i < n; i++) gb_tensor(&b, names[i], nd, ne, type, offsets[i]);
    gb_pad(&b, 32);
    for (size_t i = 0; i < data_bytes; i++) gb_u8(&b, 0);
    return b;
}

static gb one_tensor(const char *name, int nd, const int64_t *ne, uint32_t type, uint64_t offset, size_t data_bytes) {
    return tensors_file(1, &name, &offset, nd, ne, type, data_bytes);
}

/* Two f32[8] tensors: "a" at offset 0, then `second` at `offset`. */
static gb two_f32_tensors(const char *second, uint64_t offset) {
    const char *names[2] = {"a", second};
    const uint64_t offsets[2] = {0, offset};
    const int64_t n8[1] = {8};
    return tensors_file(2, names, offsets, 1, n8, OKV_GGML_F32, 64);
}

static void test_tensor_errors(void) {
    int64_t ne[4] = {32, 2, 1, 1};
    gb b = one_tensor("blk.0.attn_q.weight", 2, ne, OKV_GGML_Q8_0, 0, 68);
    okv_error err = {0};
    okv_gguf *g = NULL;
    CHECK_OK(okv_gguf_open_memory(b.p, b.len, "ok.gguf", &g, &err), &err);
    okv_gguf_close(g);
    free(b.p);
    b = one_tensor("blk.0.attn_q.weight", 2, ne, OKV_GGML_Q8_0, 0, 67);
    FAIL(b, OKV_ERR_FORMAT, "blk.0.attn_q.weight");
    FAIL(b, OKV_ERR_FORMAT, "outside the data section");
    free(b.p);
    b = one_tensor("t.off", 2, ne, OKV_GGML_Q8_0, 16, 200);
    FAIL(b, OKV_ERR_FORMAT, "not a multiple of the alignment");
    free(b.p);
    b = one_tensor("t.far", 2, ne, OKV_GGML_Q8_0, UINT64_MAX - 31, 200);
    FAIL(b, OKV_ERR_FORMAT, "t.far");
    free(b.p);
    b = one_tensor("t.type", 2, ne, 4, 0, 200);
    FAIL(b, OKV_ERR_FORMAT, "unknown ggml type 4");
    free(b.p);
    b = one_tensor("t.type", 2, ne, 1000, 0, 200);
    FAIL(b, OKV_ERR_FORMAT, "unknown ggml type 1000");
    free(b.p);
    int64_t odd[2] = {33, 1};
    b = one_tensor("t.rows", 2, odd, OKV_GGML_Q4_K, 0, 200);
    FAIL(b, OKV_ERR_FORMAT, "not a multiple");
    free(b.p);
    b = one_tensor("t.dims", 5, (int64_t[5]){1, 1, 1, 1, 1}, OKV_GGML_F32, 0, 200);
    FAIL(b, OKV_ERR_FORMAT, "5 dimensions");
    free(b.p);
    b = one_tensor("t.zero", 2, (int64_t[2]){4, 0}, OKV_GGML_F32, 0, 200);
    FAIL(b, OKV_ERR_FORMAT, "t.zero");
    free(b.p);
    int64_t big[4] = {(int64_t)1 << 40, (int64_t)1 << 40, 1, 1};
    b = one_tensor("t.big", 2, big, OKV_GGML_F32, 0, 200);
    FAIL(b, OKV_ERR_FORMAT, "t.big");
    free(b.p);
    {   /* overlap and duplicate names */
        gb c = two_f32_tensors("b", 0);
        FAIL(c, OKV_ERR_FORMAT, "overlap");
        free(c.p);
        gb d = two_f32_tensors("a", 32);
        FAIL(d, OKV_ERR_FORMAT, "appears twice");
        free(d.p);
    }
    {   /* a type we can read but not dequantize */
        int64_t n256[1] = {256};
        gb c = one_tensor("blk.3.ffn_up.weight", 1, n256, OKV_GGML_IQ2_XS, 0, 74);
        okv_gguf *h = NULL;
        CHECK_OK(okv_gguf_open_memory(c.p, c.len, "iq.gguf", &h, &err), &err);
        float out[256];
        if (h) {
            const okv_gguf_tensor *t = okv_gguf_tensor_at(h, 0);
            CHECK(okv_gguf_dequantize(t, 0, 256, out, &err) == OKV_ERR_UNSUPPORTED);
            CHECK(strstr(err.message, "IQ2_XS") && strstr(err.message, "blk.3.ffn_up.weight"));
        }
        okv_gguf_close(h);
        free(c.p);
    }
}

static void test_file_open(void) {
    okv_error err = {0};
    okv_gguf *g = NULL;
    CHECK(okv_gguf_open("/nonexistent/x.gguf", &g, &err) == OKV_ERR_IO && strstr(err.message, "x.gguf"));
    char path[] = "/tmp/okv_gguf_readerXXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0) return;
    close(fd);
    gb b = valid_file();
    CHECK(gb_save(&b, path) == 0);
    CHECK(okv_gguf_is_gguf_file(path));
    CHECK_OK(okv_gguf_open(path, &g, &err), &err);
    CHECK(g && okv_gguf_find_tensor(g, "w.f16"));
    okv_gguf_close(g);
    gb_save(&(gb){.p = b.p, .len = 10}, path);
    CHECK(okv_gguf_open(path, &g, &err) == OKV_ERR_FORMAT && strstr(err.message, "truncated"));
    unlink(path);
    free(b.p);
}

int main(void) {
    test_valid();
    test_truncations();
    test_header_errors();
    test_value_errors();
    test_tensor_errors();
    test_file_open();
    return okv_test_finish();
}
