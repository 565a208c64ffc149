/* e2e_util.h — helpers for the end-to-end tests: export a checkpoint into a
 * temporary directory, run a token sequence through the public API in
 * chunks, and compare logits (max abs diff, argmax, cosine). Everything goes
 * through include/offkv.h, like a user would. */
#ifndef OKV_E2E_UTIL_H
#define OKV_E2E_UTIL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "offkv.h"
#include "okv_common.h"
#include "okv_test.h"

#define FIXTURES "../shared/fixtures/models/"

static char e2e_tmpdir[256];

static inline const char *e2e_tmp(void) {
    if (!e2e_tmpdir[0]) {
        okv_test_mkdtemp(e2e_tmpdir, sizeof e2e_tmpdir, "e2e");
    }
    return e2e_tmpdir;
}

static inline void e2e_cleanup(void) {
    if (e2e_tmpdir[0]) okv_test_rm_tree(e2e_tmpdir);
}

static inline char *e2e_path(const char *name) {
    char *p = malloc(512);
    snprintf(p, 512, "%s/%s", e2e_tmp(), name);
    return p;
}

/* Exports dir to <tmp>/<name> (caller frees the returned path); NULL on failure (reported). */
static inline char *e2e_export(const char *dir, const char *name, okv_dtype dtype, int chunk) {
    okv_export_options o;
    okv_export_options_default(&o);
    o.dtype = dtype;
    o.prefill_chunk_size = chunk;
    o.gguf_dequantize = true; /* a GGUF's blocks become `dtype` floats: the oracle-exact path these tests check */
    okv_error err = {0};
    char *out = e2e_path(name);
    okv_status st = okv_export(dir, out, &o, &err);
    CHECKF(st == OKV_OK, "export %s: %s", dir, err.message);
    if (st) { free(out); return NULL; }
    return out;
}

/* Reference tokens from reference.json; returns count. */
static inline int e2e_ref_tokens(const char *model_dir, int32_t **ids) {
    char path[512];
    snprintf(path, sizeof path, "%s/reference.json", model_dir);
    cJSON *j;
    okv_error err;
    if (okv_json_load(path, &j, &err)) { fprintf(stderr, "%s\n", err.message); exit(1); }
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "tokens"), *e;
    int n = cJSON_GetArraySize(t), k = 0;
    *ids = malloc(sizeof(int32_t) * (size_t)n);
    cJSON_ArrayForEach(e, t) (*ids)[k++] = (int32_t)e->valuedouble;
    cJSON_Delete(j);
    return n;
}

static inline float *e2e_ref_logits(const char *model_dir, size_t n) {
    char path[512];
    snprintf(path, sizeof path, "%s/logits.f32", model_dir);
    char *data;
    size_t len;
    okv_error err;
    if (okv_read_file(path, &data, &len, &err) || len != n * sizeof(float)) {
        fprintf(stderr, "%s: cannot read or wrong size\n", path);
        exit(1);
    }
    return (float *)data;
}

typedef struct e2e_run_opts {
    int chunk;
    okv_cache_options cache;
    okv_runner_options runner;
} e2e_run_opts;

static inline void e2e_opts_default(e2e_run_opts *o) {
    memset(o, 0, sizeof *o);
    okv_cache_options_default(&o->cache);
    okv_runner_options_default(&o->runner);
    o->runner.n_threads = 2;
}

/* Installs caches for p under key and opens a runner on them (NULL options:
 * the defaults); NULL on failure, reported, with the key removed again. */
static inline okv_runner *e2e_runner_open(const okv_program *p, const char *key, const okv_cache_options *co,
                                          const okv_runner_options *ro) {
    okv_error err = {0};
    okv_runner *r = NULL;
    okv_status st = okv_cache_install(key, p, co, &err);
    if (!st) st = okv_runner_create(p, key, ro, &r, &err);
    CHECKF(st == OKV_OK, "runner on '%s': %s", key, err.message);
    if (st) okv_cache_remove(key, &err);
    return r;
}

/* Frees r (NULL: nothing) and removes the key it was bound to. */
static inline void e2e_runner_close(okv_runner *r) {
    if (!r) return;
    char key[256];
    snprintf(key, sizeof key, "%s", okv_runner_cache_key(r));
    okv_error err = {0};
    okv_runner_free(r);
    CHECK_OK(okv_cache_remove(key, &err), &err);
}

/* The key's sequence length (-1 if the key is unknown). */
static inline int e2e_cache_length(const char *key) {
    int len = -1;
    okv_error err = {0};
    okv_cache_length(key, &len, &err);
    return len;
}

/* Runs ids through program p with fresh caches; returns [n, vocab] logits. */
static inline float *e2e_run(const okv_program *p, const int32_t *ids, int n, const e2e_run_opts *o) {
    okv_program_info info;
    okv_program_get_info(p, &info);
    okv_error err = {0};
    const char *key = "e2e";
    okv_runner *r = e2e_runner_open(p, key, &o->cache, &o->runner);
    if (!r) return NULL;
    okv_status st = OKV_OK;
    float *logits = calloc((size_t)n * (size_t)info.vocab_size, sizeof(float));
    int chunk = o->chunk > 0 ? o->chunk : info.prefill_chunk_size;
    for (int t = 0; t < n && !st; t += chunk) {
        int T = n - t < chunk ? n - t : chunk;
        int32_t pos[1024];
        for (int k = 0; k < T; k++) pos[k] = t + k;
        st = okv_runner_step(r, ids + t, pos, T, OKV_LOGITS_ALL, logits + (size_t)t * info.vocab_size, &err);
        CHECKF(st == OKV_OK, "step at %d: %s", t, err.message);
    }
    e2e_runner_close(r);
    if (st) { free(logits); return NULL; }
    return logits;
}

static inline double e2e_max_diff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= m)) m = d;   /* NaN propagates as a failure */
    }
    return m;
}

static inline int e2e_argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++) if (x[i] > x[b]) b = i;
    return b;
}

/* Number of rows whose argmax differs. */
static inline int e2e_argmax_mismatches(const float *a, const float *b, int rows, int V) {
    int bad = 0;
    for (int r = 0; r < rows; r++) bad += e2e_argmax(a + (size_t)r * V, V) != e2e_argmax(b + (size_t)r * V, V);
    return bad;
}

/* Smallest per-row cosine similarity. */
static inline double e2e_min_cosine(const float *a, const float *b, int rows, int V) {
    double worst = 1.0;
    for (int r = 0; r < rows; r++) {
        double ab = 0, aa = 0, bb = 0;
        for (int i = 0; i < V; i++) {
            double x = a[(size_t)r * V + i], y = b[(size_t)r * V + i];
            ab += x * y; aa += x * x; bb += y * y;
        }
        double c = ab / sqrt(aa * bb);
        if (!(c >= worst)) worst = c;
    }
    return worst;
}

/* Makes <tmp>/<name>/ with the fixture's safetensors symlinked and its
 * config.json text passed through edit(from -> to). Returns the dir. */
static inline char *edited_checkpoint(const char *fixture, const char *name, const char *from, const char *to) {
    char src[512], *dir = e2e_path(name), path[640];
    mkdir(dir, 0755);
    snprintf(src, sizeof src, "%s/" FIXTURES "%s/model.safetensors", getcwd(path, sizeof path), fixture);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (symlink(src, path) != 0) perror("symlink");
    snprintf(src, sizeof src, FIXTURES "%s/config.json", fixture);
    char *text;
    size_t len;
    okv_error err;
    if (okv_read_file(src, &text, &len, &err)) { fprintf(stderr, "%s\n", err.message); exit(1); }
    char *at = strstr(text, from);
    CHECKF(at != NULL, "%s: '%s' not in config", fixture, from);
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "wb");
    if (at) {
        fwrite(text, 1, (size_t)(at - text), f);
        fputs(to, f);
        fputs(at + strlen(from), f);
    }
    fclose(f);
    free(text);
    return dir;
}


/* Like edited_checkpoint, but applies a JSON object patch to config.json:
 * each key of patch replaces (or adds) the top-level key; null deletes it. */
static inline char *patched_checkpoint(const char *fixture, const char *name, const char *patch) {
    char *dir = edited_checkpoint(fixture, name, "{", "{");
    char path[640];
    snprintf(path, sizeof path, "%s/config.json", dir);
    cJSON *cfg, *p = cJSON_Parse(patch), *e;
    okv_error err;
    if (okv_json_load(path, &cfg, &err) || !p) { fprintf(stderr, "patch %s: bad config or patch\n", name); exit(1); }
    cJSON_ArrayForEach(e, p) {
        cJSON_DeleteItemFromObjectCaseSensitive(cfg, e->string);
        if (!cJSON_IsNull(e)) cJSON_AddItemToObject(cfg, e->string, cJSON_Duplicate(e, true));
    }
    char *text = cJSON_Print(cfg);
    FILE *f = fopen(path, "wb");
    fputs(text, f);
    fclose(f);
    free(text);
    cJSON_Delete(cfg);
    cJSON_Delete(p);
    return dir;
}


/* The layout `inspect --config` reports for a checkpoint dir or config.json. */
static inline cJSON *e2e_layout_of(const char *path) {
    char *text = NULL;
    okv_error err = {0};
    okv_status st = okv_config_describe(path, true, NULL, &text, &err);
    CHECKF(st == OKV_OK, "%s: %s", path, err.message);
    cJSON *j = st ? NULL : cJSON_Parse(text);
    free(text);
    return j;
}

static inline void e2e_collect_notice(void *ctx, const char *msg) {
    char *buf = ctx;
    strncat(buf, msg, 4000 - strlen(buf));
    strncat(buf, "\n", 4000 - strlen(buf));
}

/* fp32 export of dir to <tmp>/name, notices appended to notes[4096]. */
static inline char *e2e_export_noted(const char *dir, const char *name, char *notes) {
    okv_export_options o;
    okv_export_options_default(&o);
    o.dtype = OKV_F32;
    o.gguf_dequantize = true;
    o.notice = e2e_collect_notice;
    o.notice_ctx = notes;
    char *out = e2e_path(name);
    okv_error err = {0};
    okv_status st = okv_export(dir, out, &o, &err);
    CHECKF(st == OKV_OK, "export %s: %s", dir, err.message);
    if (st) { free(out); return NULL; }
    return out;
}

/* Max |logits - oracle| of program p over the fixture's tokens (vocab 512). */
static inline double e2e_oracle_diff(const okv_program *p, const char *fixture_dir, int chunk) {
    int32_t *ids;
    int n = e2e_ref_tokens(fixture_dir, &ids);
    float *ref = e2e_ref_logits(fixture_dir, (size_t)n * 512);
    e2e_run_opts ro;
    e2e_opts_default(&ro);
    ro.chunk = chunk;
    float *got = e2e_run(p, ids, n, &ro);
    double d = got ? e2e_max_diff(got, ref, (size_t)n * 512) : INFINITY;
    free(got);
    free(ref);
    free(ids);
    return d;
}

#endif
