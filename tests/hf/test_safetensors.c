/* Tests the safetensors reader/writer: the real fixtures (single file and
 * the sharded copy of the same tensors), writer -> reader round trips, a
 * corpus of hand-made corrupt files and indexes that must each fail with a
 * message naming the problem, and a seeded mutation fuzz loop that must
 * never crash (run it under ASan/UBSan). */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "okv_common.h"
#include "okv_safetensors.h"
#include "okv_st_write.h"
#include "okv_test.h"

#define FIX "../shared/fixtures/models/"

/* ---- temp files ------------------------------------------------------ */

static char g_tmp[64];


/* g_tmp/name (static buffer, valid until the next call). */
static const char *tmp_path(const char *name) {
    static char buf[512];
    snprintf(buf, sizeof buf, "%s/%s", g_tmp, name);
    return buf;
}

static void write_bytes(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) { perror(path); exit(2); }
    if (n) fwrite(data, 1, n, f);
    fclose(f);
}

/* A safetensors file with the given header text, declared header length
 * hlen (strlen(header) if < 0) and n_data zero-ish data bytes. */
static void write_raw(const char *path, const char *header, long long hlen, size_t n_data) {
    size_t len = strlen(header);
    uint64_t declared = hlen < 0 ? len : (uint64_t)hlen;
    size_t total = 8 + len + n_data;
    uint8_t *buf = calloc(1, total);
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)(declared >> (8 * i));
    memcpy(buf + 8, header, len);
    for (size_t i = 0; i < n_data; i++) buf[8 + len + i] = (uint8_t)i;
    write_bytes(path, buf, total);
    free(buf);
}

static uint8_t *slurp(const char *path, size_t *n) {
    char *data;
    okv_error err;
    if (okv_read_file(path, &data, n, &err)) return NULL;
    return (uint8_t *)data;
}

/* ---- fixtures -------------------------------------------------------- */

static void test_fixture_single(void) {
    okv_st_set *set = NULL;
    okv_error err;
    CHECK_OK(okv_st_open_dir(FIX "llama32-tiny", &set, &err), &err);
    if (!set) return;
    /* llama32-tiny: tied, 4 layers x 9 tensors + embed + final norm */
    CHECK(okv_st_count(set) == 4 * 9 + 2);
    CHECK(okv_st_file_count(set) == 1);
    CHECK(okv_st_metadata(set, "format") && !strcmp(okv_st_metadata(set, "format"), "pt"));
    CHECK(okv_st_find(set, "lm_head.weight") == NULL);
    const okv_st_tensor *e = okv_st_find(set, "model.embed_tokens.weight");
    CHECK(e && e->ndim == 2 && e->shape[0] == 512 && e->shape[1] == 64);
    CHECK(e && e->supported && e->dtype == OKV_BF16 && !strcmp(e->dtype_name, "BF16"));
    CHECK(e && e->nbytes == 512 * 64 * 2 && e->numel == 512 * 64);
    const okv_st_tensor *k = okv_st_find(set, "model.layers.3.self_attn.k_proj.weight");
    CHECK(k && k->ndim == 2 && k->shape[0] == 32 && k->shape[1] == 64);
    const okv_st_tensor *n = okv_st_find(set, "model.norm.weight");
    CHECK(n && n->ndim == 1 && n->shape[0] == 64);
    /* sorted by name */
    int sorted = 1;
    for (int i = 1; i < okv_st_count(set); i++)
        if (strcmp(okv_st_get(set, i - 1)->name, okv_st_get(set, i)->name) >= 0) sorted = 0;
    CHECK(sorted);
    CHECK(okv_st_get(set, -1) == NULL && okv_st_get(set, okv_st_count(set)) == NULL);

    /* the embedding's bytes are the first data bytes of the file (offsets [0, 65536]) */
    size_t len;
    uint8_t *raw = slurp(FIX "llama32-tiny/model.safetensors", &len);
    CHECK(raw != NULL);
    if (raw && e) {
        uint64_t hlen = 0;
        for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | raw[i];
        CHECK(8 + hlen + e->nbytes <= len);
        CHECK(memcmp(raw + 8 + hlen, e->data, e->nbytes) == 0);
    }
    free(raw);
    okv_st_free(set);
}

static void test_fixture_sharded(void) {
    okv_st_set *one = NULL, *sh = NULL;
    okv_error err;
    CHECK_OK(okv_st_open_file(FIX "llama32-tiny/model.safetensors", &one, &err), &err);
    CHECK_OK(okv_st_open_dir(FIX "llama32-tiny-sharded", &sh, &err), &err);
    if (!one || !sh) { okv_st_free(one); okv_st_free(sh); return; }
    CHECK(okv_st_file_count(sh) == 2);
    CHECK(okv_st_count(sh) == okv_st_count(one));
    int mismatched = 0;
    for (int i = 0; i < okv_st_count(one); i++) {
        const okv_st_tensor *a = okv_st_get(one, i), *b = okv_st_find(sh, a->name);
        if (!b || b->dtype != a->dtype || b->ndim != a->ndim || b->nbytes != a->nbytes ||
            memcmp(a->shape, b->shape, sizeof a->shape) || memcmp(a->data, b->data, a->nbytes)) {
            mismatched++;
            fprintf(stderr, "sharded tensor differs: %s\n", a->name);
        }
    }
    CHECK(mismatched == 0);
    /* layer 1 spans both shards (per the fixture's index) */
    const okv_st_tensor *g = okv_st_find(sh, "model.layers.1.mlp.gate_proj.weight");
    const okv_st_tensor *u = okv_st_find(sh, "model.layers.1.mlp.up_proj.weight");
    CHECK(g && strstr(g->file, "model-00001-of-00002.safetensors"));
    CHECK(u && strstr(u->file, "model-00002-of-00002.safetensors"));
    okv_st_free(one);
    okv_st_free(sh);
    /* every fixture single file opens */
    const char *dirs[] = {"qwen3-tiny", "qwen3-untied-tiny", "qwen2-tiny", "gemma3-tiny",
                          "gemma3-mm-tiny", "gemma4-tiny", "gemma4-tiny-nested"};
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        char path[256];
        snprintf(path, sizeof path, FIX "%s", dirs[i]);
        okv_st_set *s = NULL;
        CHECK_OK(okv_st_open_dir(path, &s, &err), &err);
        CHECKF(s && okv_st_count(s) > 10, "%s", dirs[i]);
        okv_st_free(s);
    }
}

/* ---- round trips ----------------------------------------------------- */

static float g_f32[12];
static uint16_t g_f16[5], g_bf16[24];
static int64_t g_i64[2] = {-7, 1LL << 40};
static float g_scalar = 3.5f;

static int make_tensors(okv_st_write_tensor *w) {
    for (int i = 0; i < 12; i++) g_f32[i] = (float)i * 0.25f - 1.0f;
    for (int i = 0; i < 5; i++) g_f16[i] = okv_f32_to_f16((float)i + 0.5f);
    for (int i = 0; i < 24; i++) g_bf16[i] = okv_f32_to_bf16((float)i * -0.125f);
    memset(w, 0, 6 * sizeof *w);
    w[0] = (okv_st_write_tensor){.name = "b.f32", .dtype = OKV_F32, .ndim = 2, .shape = {3, 4}, .data = g_f32};
    w[1] = (okv_st_write_tensor){.name = "a.f16", .dtype = OKV_F16, .ndim = 1, .shape = {5}, .data = g_f16};
    w[2] = (okv_st_write_tensor){.name = "c.bf16", .dtype = OKV_BF16, .ndim = 3, .shape = {2, 3, 4}, .data = g_bf16};
    w[3] = (okv_st_write_tensor){.name = "d.i64", .dtype_name = "I64", .ndim = 1, .shape = {2}, .data = g_i64};
    w[4] = (okv_st_write_tensor){.name = "e.scalar", .dtype = OKV_F32, .ndim = 0, .data = &g_scalar};
    w[5] = (okv_st_write_tensor){.name = "f.empty \"quoted\"", .dtype = OKV_BF16, .ndim = 2, .shape = {0, 7}};
    return 6;
}

static void check_tensors_match(const okv_st_set *set, const okv_st_write_tensor *w, int n) {
    CHECK(okv_st_count(set) == n);
    for (int i = 0; i < n; i++) {
        const okv_st_tensor *t = okv_st_find(set, w[i].name);
        CHECKF(t != NULL, "missing %s", w[i].name);
        if (!t) continue;
        size_t nb = okv_st_write_tensor_bytes(&w[i]);
        CHECKF(t->ndim == w[i].ndim && !memcmp(t->shape, w[i].shape, sizeof(int64_t) * (size_t)w[i].ndim),
               "shape of %s", w[i].name);
        CHECKF(t->nbytes == nb && (nb == 0 || !memcmp(t->data, w[i].data, nb)), "bytes of %s", w[i].name);
        if (w[i].dtype_name) CHECK(!t->supported && !strcmp(t->dtype_name, w[i].dtype_name));
        else CHECK(t->supported && t->dtype == w[i].dtype && !strcmp(t->dtype_name, okv_st_dtype_str(w[i].dtype)));
    }
}

static void test_roundtrip(void) {
    okv_st_write_tensor w[6];
    int n = make_tensors(w);
    okv_error err;
    /* independent byte sizes: 12*4, 5*2, 24*2, 2*8, 4, 0 */
    CHECK(okv_st_write_tensor_bytes(&w[0]) == 48 && okv_st_write_tensor_bytes(&w[1]) == 10);
    CHECK(okv_st_write_tensor_bytes(&w[2]) == 48 && okv_st_write_tensor_bytes(&w[3]) == 16);
    CHECK(okv_st_write_tensor_bytes(&w[4]) == 4 && okv_st_write_tensor_bytes(&w[5]) == 0);
    /* the reader's dtype table the writer sizes with */
    CHECK(okv_st_dtype_bits("BF16") == 16 && okv_st_dtype_bits("I64") == 64 && okv_st_dtype_bits("F4") == 4);
    CHECK(okv_st_dtype_bits("Q7") == 0 && okv_st_dtype_bits(NULL) == 0);

    const char *path = tmp_path("rt.safetensors");
    CHECK_OK(okv_st_write(path, w, n, &err), &err);
    size_t len;
    uint8_t *raw = slurp(path, &len);
    CHECK(raw != NULL);
    if (raw) {
        uint64_t hlen = 0;
        for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | raw[i];
        CHECK(hlen % 8 == 0);                       /* padded like HF */
        CHECK(len == 8 + hlen + 48 + 10 + 48 + 16 + 4);
        CHECK(raw[8] == '{' && (raw[8 + hlen - 1] == ' ' || raw[8 + hlen - 1] == '}'));
    }
    free(raw);
    okv_st_set *set = NULL;
    CHECK_OK(okv_st_open_file(path, &set, &err), &err);
    if (set) {
        check_tensors_match(set, w, n);
        const okv_st_tensor *s = okv_st_find(set, "e.scalar");
        float v = 0;
        if (s) memcpy(&v, s->data, 4);
        CHECK(v == 3.5f);
        CHECK(okv_st_find(set, "nope") == NULL);
    }
    okv_st_free(set);

    /* sharded: 3 shards, read back through the index */
    mkdir(tmp_path("sh3"), 0755);
    CHECK_OK(okv_st_write_sharded(tmp_path("sh3"), w, n, 3, &err), &err);
    CHECK(okv_file_exists(tmp_path("sh3/model-00003-of-00003.safetensors")));
    set = NULL;
    CHECK_OK(okv_st_open_dir(tmp_path("sh3"), &set, &err), &err);
    if (set) {
        CHECK(okv_st_file_count(set) == 3);
        check_tensors_match(set, w, n);
    }
    okv_st_free(set);
    CHECK(okv_st_write_sharded(tmp_path("sh3"), w, n, 7, &err) == OKV_ERR_INVALID);

    /* writer refuses an unknown dtype name */
    okv_st_write_tensor bad = {.name = "x", .dtype_name = "Q7", .ndim = 1, .shape = {1}, .data = g_f32};
    CHECK(okv_st_write(tmp_path("bad.safetensors"), &bad, 1, &err) == OKV_ERR_INVALID);
}

/* ---- corrupt corpus -------------------------------------------------- */

typedef struct bad_case {
    const char *header;
    long long hlen; /* -1: the real length */
    size_t n_data;
    const char *expect; /* substring of the error message */
} bad_case;

static void expect_fail(okv_status st, const okv_error *err, const char *what, const char *expect,
                        const char *file_hint) {
    printf("  %-14s -> %s\n", what, err->message);
    CHECKF(st == OKV_ERR_FORMAT || st == OKV_ERR_IO, "%s: status %d", what, st);
    CHECKF(strstr(err->message, expect) != NULL, "%s: message '%s' lacks '%s'", what, err->message, expect);
    if (file_hint) CHECKF(strstr(err->message, file_hint) != NULL, "%s: message '%s' does not name %s", what,
                          err->message, file_hint);
}

static void test_corrupt_files(void) {
    static const bad_case cases[] = {
        {"{}", 1000, 0, "past the end"},
        {"{not json", -1, 0, "not valid JSON"},
        {"[1, 2]", -1, 0, "must be a JSON object"},
        {"\"str\"", -1, 0, "must be a JSON object"},
        {"{}xx", -1, 0, "other than space"},
        {"{}\0\0", 4, 0, "other than space"},
        {"{\"a\": 5}", -1, 0, "'a': entry must be an object"},
        {"{\"a\": {\"shape\": [2], \"data_offsets\": [0, 8]}}", -1, 8, "'a': missing 'dtype'"},
        {"{\"a\": {\"dtype\": 4, \"shape\": [2], \"data_offsets\": [0, 8]}}", -1, 8, "'dtype' must be a string"},
        {"{\"a\": {\"dtype\": \"Q7\", \"shape\": [2], \"data_offsets\": [0, 8]}}", -1, 8, "unknown dtype 'Q7'"},
        {"{\"a\": {\"dtype\": \"F32\", \"data_offsets\": [0, 8]}}", -1, 8, "'a': missing 'shape'"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": 2, \"data_offsets\": [0, 8]}}", -1, 8, "'shape' must be an array"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [2]}}", -1, 8, "'a': missing 'data_offsets'"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [-2], \"data_offsets\": [0, 8]}}", -1, 8, "dim 0 must be a non-negative integer"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1, 2.5], \"data_offsets\": [0, 8]}}", -1, 8, "dim 1 must be a non-negative integer"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [\"2\"], \"data_offsets\": [0, 8]}}", -1, 8, "dim 0 must be a non-negative integer"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1e300], \"data_offsets\": [0, 8]}}", -1, 8, "dim 0 must be a non-negative integer"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [1,1,1,1,1,1,1,1,2], \"data_offsets\": [0, 8]}}", -1, 8, "9 dims"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [4294967296, 4294967296, 16], \"data_offsets\": [0, 8]}}", -1, 8, "element count overflows"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [2147483648, 2147483648, 2], \"data_offsets\": [0, 8]}}", -1, 8, "overflows"},
        {"{\"a\": {\"dtype\": \"F4\", \"shape\": [3], \"data_offsets\": [0, 2]}}", -1, 8, "fractional"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 1000]}}", -1, 8, "past the data section"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [8, 0]}}", -1, 8, "begin 8 > end 0"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8, 9]}}", -1, 8, "'data_offsets' must be [begin, end]"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [-8, 0]}}", -1, 8, "'data_offsets' must be [begin, end]"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": \"0-8\"}}", -1, 8, "'data_offsets' must be [begin, end]"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [3], \"data_offsets\": [0, 8]}}", -1, 8, "need 12"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
         " \"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [4, 12]}}", -1, 16, "'a' and 'b' overlap"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]},"
         " \"b\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [15, 16]}}", -1, 16, "overlap"},
        {"{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
         " \"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [8, 16]}}", -1, 16, "'a' appears twice"},
        {"{\"__metadata__\": {\"format\": 1}}", -1, 0, "'__metadata__' value 'format' must be a string"},
        {"{\"__metadata__\": [\"pt\"]}", -1, 0, "'__metadata__' must be an object"},
    };
    okv_error err;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char name[64], what[80];
        snprintf(name, sizeof name, "bad%02zu.safetensors", i);
        snprintf(what, sizeof what, "case %zu", i);
        const char *path = tmp_path(name);
        /* the {}\0\0 case needs its embedded NULs written: build it by hand */
        if (cases[i].hlen == 4 && cases[i].header[2] == 0) {
            uint8_t buf[12] = {4, 0, 0, 0, 0, 0, 0, 0, '{', '}', 0, 0};
            write_bytes(path, buf, sizeof buf);
        } else {
            write_raw(path, cases[i].header, cases[i].hlen, cases[i].n_data);
        }
        okv_st_set *set = (okv_st_set *)1;
        okv_error_clear(&err);
        okv_status st = okv_st_open_file(path, &set, &err);
        CHECKF(set == NULL, "%s: set not NULL on failure", what);
        expect_fail(st, &err, what, cases[i].expect, name);
    }

    /* too short for the length field; header length limit; missing file */
    okv_st_set *set = NULL;
    write_bytes(tmp_path("short.safetensors"), "\x02\0\0\0\0", 5);
    expect_fail(okv_st_open_file(tmp_path("short.safetensors"), &set, &err), &err, "short", "too short",
                "short.safetensors");
    write_raw(tmp_path("huge.safetensors"), "{}", 1LL << 40, 0);
    expect_fail(okv_st_open_file(tmp_path("huge.safetensors"), &set, &err), &err, "huge", "past the end", NULL);
    write_raw(tmp_path("empty.safetensors"), "", -1, 0);
    expect_fail(okv_st_open_file(tmp_path("empty.safetensors"), &set, &err), &err, "empty", "too short", NULL);
    CHECK(okv_st_open_file(tmp_path("nothere.safetensors"), &set, &err) == OKV_ERR_IO);
    CHECK(strstr(err.message, "nothere.safetensors") != NULL);
    CHECK(okv_st_open_file(g_tmp, &set, &err) == OKV_ERR_IO); /* a directory */
    CHECK(okv_st_open_dir(tmp_path("no-such-dir"), &set, &err) == OKV_ERR_IO);

    /* valid edge cases: an empty header object, null metadata, unsupported dtypes kept */
    write_raw(tmp_path("ok0.safetensors"), "{}      ", -1, 0);
    CHECK_OK(okv_st_open_file(tmp_path("ok0.safetensors"), &set, &err), &err);
    CHECK(set && okv_st_count(set) == 0);
    okv_st_free(set);
    write_raw(tmp_path("ok1.safetensors"),
              "{\"__metadata__\": null, \"x\": {\"dtype\": \"F8_E4M3\", \"shape\": [3], \"data_offsets\": [1, 4]},"
              " \"z\": {\"dtype\": \"F32\", \"shape\": [0], \"data_offsets\": [2, 2]}}", -1, 4);
    set = NULL;
    CHECK_OK(okv_st_open_file(tmp_path("ok1.safetensors"), &set, &err), &err);
    const okv_st_tensor *x = set ? okv_st_find(set, "x") : NULL;
    CHECK(x && !x->supported && !strcmp(x->dtype_name, "F8_E4M3") && x->nbytes == 3);
    CHECK(x && ((const uint8_t *)x->data)[0] == 1); /* data byte i holds i */
    okv_st_free(set);
}

/* A two-shard checkpoint: shard 1 holds a, shard 2 holds b, and the index
 * text is given. */
static void write_index_case(const char *dir, const char *index_text, const char *shard2_header) {
    mkdir(dir, 0755);
    char *p1 = okv_path_join(dir, "s1.safetensors"), *p2 = okv_path_join(dir, "s2.safetensors");
    char *pi = okv_path_join(dir, OKV_ST_INDEX_NAME);
    write_raw(p1, "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}", -1, 8);
    write_raw(p2, shard2_header ? shard2_header : "{\"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}",
              -1, 16);
    write_bytes(pi, index_text, strlen(index_text));
    free(p1); free(p2); free(pi);
}

static void test_corrupt_indexes(void) {
    okv_error err;
    okv_st_set *set = NULL;
#define GOOD_INDEX "{\"weight_map\": {\"a\": \"s1.safetensors\", \"b\": \"s2.safetensors\"}}"
    const char *good = GOOD_INDEX;
    write_index_case(tmp_path("ix_ok"), good, NULL);
    CHECK_OK(okv_st_open_dir(tmp_path("ix_ok"), &set, &err), &err);
    CHECK(set && okv_st_count(set) == 2 && okv_st_file_count(set) == 2);
    okv_st_free(set);

    static const struct { const char *index, *shard2, *expect, *hint; } cases[] = {
        {"{\"weight_map\": {\"a\": \"s1.safetensors\", \"b\": \"gone.safetensors\"}}", NULL, "cannot open", "gone.safetensors"},
        {"{\"weight_map\": {\"a\": \"../s1.safetensors\"}}", NULL, "not a file inside", "../s1.safetensors"},
        {"{\"weight_map\": {\"a\": \"sub/s1.safetensors\"}}", NULL, "not a file inside", "sub/s1.safetensors"},
        {"{\"weight_map\": {\"a\": \"/etc/passwd\"}}", NULL, "not a file inside", "/etc/passwd"},
        {"{\"weight_map\": {\"a\": \"..\"}}", NULL, "not a file inside", "'a'"},
        {"{\"weight_map\": {\"a\": \"\"}}", NULL, "not a file inside", "'a'"},
        {"{\"weight_map\": {\"a\": 3}}", NULL, "must be a file name string", "'a'"},
        {"{\"weight_map\": {\"a\": \"s1.safetensors\", \"c\": \"s2.safetensors\"}}", NULL, "'c'", "s2.safetensors"},
        {"{\"weight_map\": {\"a\": \"s2.safetensors\", \"b\": \"s2.safetensors\"}}", NULL, "'a'", "no such tensor"},
        {GOOD_INDEX, "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
               " \"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [8, 16]}}", "duplicate tensor 'a'", "s2.safetensors"},
        {GOOD_INDEX, "{\"b\": {\"dtype\": \"F32\", \"shape\": [9], \"data_offsets\": [0, 8]}}", "need 36", "s2.safetensors"},
        {"{\"metadata\": {}}", NULL, "missing 'weight_map'", OKV_ST_INDEX_NAME},
        {"{\"weight_map\": []}", NULL, "missing 'weight_map'", OKV_ST_INDEX_NAME},
        {"{\"weight_map\": {}}", NULL, "is empty", OKV_ST_INDEX_NAME},
        {"{\"weight_map\": {\"a\": \"s1.safe", NULL, "invalid JSON", OKV_ST_INDEX_NAME},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char name[32], what[48];
        snprintf(name, sizeof name, "ix%02zu", i);
        snprintf(what, sizeof what, "index case %zu", i);
        write_index_case(tmp_path(name), cases[i].index, cases[i].shard2);
        set = (okv_st_set *)1;
        okv_error_clear(&err);
        okv_status st = okv_st_open_dir(tmp_path(name), &set, &err);
        CHECKF(set == NULL, "%s: set not NULL on failure", what);
        expect_fail(st, &err, what, cases[i].expect, cases[i].hint);
    }
}

/* ---- fuzz ------------------------------------------------------------ */

static uint64_t rng_next(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Mutates a valid file thousands of times (byte flips biased to the
 * header, digit/punctuation swaps, truncations, length-field edits); every
 * open must either fail cleanly or yield tensors inside the file. */
static void test_fuzz(void) {
    okv_st_write_tensor w[6];
    int n = make_tensors(w);
    okv_error err;
    const char *src = tmp_path("fuzz_src.safetensors");
    CHECK_OK(okv_st_write(src, w, n, &err), &err);
    size_t len;
    uint8_t *orig = slurp(src, &len);
    if (!orig) { CHECK(0); return; }
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | orig[i];
    uint8_t *buf = malloc(len);
    const char *path = tmp_path("fuzz.safetensors");
    uint64_t seed = 12345;
    int opened = 0, failed = 0, bad_msg = 0, out_of_file = 0;
    static const char swaps[] = "0123456789-.e[]{}\",: ";
    for (int iter = 0; iter < 3000; iter++) {
        memcpy(buf, orig, len);
        size_t cur = len;
        int muts = 1 + (int)(rng_next(&seed) % 4);
        for (int m = 0; m < muts; m++) {
            uint64_t r = rng_next(&seed);
            switch (r % 5) {
            case 0: buf[rng_next(&seed) % cur] ^= (uint8_t)(1u << (r >> 8) % 8); break;
            case 1: buf[8 + rng_next(&seed) % hlen] = (uint8_t)swaps[(r >> 8) % (sizeof swaps - 1)]; break;
            case 2: buf[8 + rng_next(&seed) % hlen] = (uint8_t)(r >> 16); break;
            case 3: cur = rng_next(&seed) % (cur + 1); if (cur == 0) cur = 1; break;
            case 4: buf[(r >> 8) % 8] = (uint8_t)(r >> 16); break;
            }
        }
        write_bytes(path, buf, cur);
        okv_st_set *set = NULL;
        okv_error_clear(&err);
        okv_status st = okv_st_open_file(path, &set, &err);
        if (st == OKV_OK) {
            opened++;
            for (int i = 0; i < okv_st_count(set); i++) {
                const okv_st_tensor *t = okv_st_get(set, i);
                if (t->nbytes > cur) out_of_file++;
                volatile uint8_t sink = 0;
                for (size_t b = 0; b < t->nbytes; b++) sink ^= ((const uint8_t *)t->data)[b];
                (void)sink;
            }
            okv_st_free(set);
        } else {
            failed++;
            if ((st != OKV_ERR_FORMAT && st != OKV_ERR_IO) || !strstr(err.message, "fuzz.safetensors")) bad_msg++;
        }
    }
    printf("fuzz: %d opened, %d rejected\n", opened, failed);
    CHECK(failed > 1000);  /* most mutations must be caught */
    CHECK(bad_msg == 0);
    CHECK(out_of_file == 0);
    free(buf);
    free(orig);
}

/* Mutates a valid index (shards stay valid): open must fail cleanly or
 * return only tensors that exist in the shards. */
static void test_fuzz_index(void) {
    okv_st_write_tensor w[6];
    int n = make_tensors(w);
    okv_error err;
    const char *dir = tmp_path("fuzz_ix");
    mkdir(dir, 0755);
    CHECK_OK(okv_st_write_sharded(dir, w, n, 2, &err), &err);
    char *ipath = okv_path_join(dir, OKV_ST_INDEX_NAME);
    size_t len;
    uint8_t *orig = slurp(ipath, &len);
    if (!orig) { CHECK(0); free(ipath); return; }
    uint8_t *buf = malloc(len);
    uint64_t seed = 777;
    int opened = 0, failed = 0, bad = 0;
    static const char swaps[] = "0123456789./-\\\"{}[],: a";
    for (int iter = 0; iter < 1000; iter++) {
        memcpy(buf, orig, len);
        size_t cur = len;
        int muts = 1 + (int)(rng_next(&seed) % 3);
        for (int m = 0; m < muts; m++) {
            uint64_t r = rng_next(&seed);
            if (r % 4 == 0) cur = rng_next(&seed) % (cur + 1);
            else if (cur) buf[rng_next(&seed) % cur] = (uint8_t)swaps[(r >> 8) % (sizeof swaps - 1)];
        }
        write_bytes(ipath, buf, cur);
        okv_st_set *set = NULL;
        okv_status st = okv_st_open_index(ipath, &set, &err);
        if (st == OKV_OK) {
            opened++;
            for (int i = 0; i < okv_st_count(set); i++)
                if (!okv_st_find(set, okv_st_get(set, i)->name)) bad++;
            okv_st_free(set);
        } else {
            failed++;
            if (st != OKV_ERR_FORMAT && st != OKV_ERR_IO) bad++;
        }
    }
    printf("index fuzz: %d opened, %d rejected\n", opened, failed);
    CHECK(failed > 300);
    CHECK(bad == 0);
    free(buf);
    free(orig);
    free(ipath);
}

int main(void) {
    okv_test_mkdtemp(g_tmp, sizeof g_tmp, "st");
    test_fixture_single();
    test_fixture_sharded();
    test_roundtrip();
    test_corrupt_files();
    test_corrupt_indexes();
    test_fuzz();
    test_fuzz_index();
    okv_test_rm_tree(g_tmp);
    return okv_test_finish();
}
