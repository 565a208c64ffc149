/* real_models.h — helpers of the real-model tests: where the GGUFs are
 * (scripts/fetch-models.sh puts them in $OKV_CACHE/models, default
 * ~/.cache/offkv/models), a loud SKIP (exit 77) when one is missing, the
 * reduced mode the sanitizer pass asks for (OKV_REAL_MODEL_TESTS=reduced),
 * reference.json fields, and a greedy loop over the public runner API that
 * shares nothing with the sampler. */
#ifndef OKV_REAL_MODELS_H
#define OKV_REAL_MODELS_H

#include <time.h>

#include "e2e/e2e_util.h"

#define REAL_FIXTURES "../shared/fixtures/real/"
#define SKIP_RC 77

static inline bool real_reduced(void) {
    const char *m = getenv("OKV_REAL_MODEL_TESTS");
    return m && !strcmp(m, "reduced");
}

/* Path of a cached model, or NULL after printing why the test skips. */
static inline char *real_model_path(const char *file) {
    char *p = malloc(1024);
    const char *cache = getenv("OKV_CACHE"), *home = getenv("HOME");
    if (cache) snprintf(p, 1024, "%s/models/%s", cache, file);
    else snprintf(p, 1024, "%s/.cache/offkv/models/%s", home ? home : "/root", file);
    if (access(p, R_OK) != 0) {
        fprintf(stderr, "\n*** SKIP: %s is not there; run scripts/fetch-models.sh (needs PyPI) ***\n\n", p);
        free(p);
        return NULL;
    }
    return p;
}

static inline double real_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* A real-model test's start: the model's path, or NULL after saying why the
 * test skips (the model is not cached, or `reduced_skip` names a run the
 * sanitizer pass leaves out). */
static inline char *real_model_or_skip(const char *file, const char *reduced_skip) {
    if (reduced_skip && real_reduced()) {
        fprintf(stderr, "SKIP: %s (OKV_REAL_MODEL_TESTS=reduced)\n", reduced_skip);
        return NULL;
    }
    return real_model_path(file);
}

/* Exports src (timed, printed with label) and opens the program; NULL on
 * failure (reported). *path gets the program's path (caller frees). */
static inline okv_program *real_export_open(const char *src, const char *name, okv_dtype dtype, int chunk,
                                            const char *label, char **path) {
    double t0 = real_now();
    *path = e2e_export(src, name, dtype, chunk);
    printf("%s export: %.2f s\n", label, real_now() - t0);
    okv_program *p = NULL;
    okv_error err = {0};
    if (*path) CHECK_OK(okv_program_open(*path, &p, &err), &err);
    return p;
}

/* The oracle check: ids[0..n) through p (e2e_run's default chunking) against
 * the logits.f32 beside `model`'s reference: max abs <= tol and the same
 * argmax at every position. */
static inline void real_check_oracle(const okv_program *p, const int32_t *ids, int n, const char *model, int V,
                                     double tol, const char *label) {
    char dir[256];
    snprintf(dir, sizeof dir, REAL_FIXTURES "%s", model);
    float *want = e2e_ref_logits(dir, (size_t)n * V);
    e2e_run_opts o;
    e2e_opts_default(&o);
    double t0 = real_now();
    float *got = e2e_run(p, ids, n, &o);
    if (got) {
        double d = e2e_max_diff(got, want, (size_t)n * V);
        int bad = e2e_argmax_mismatches(got, want, n, V);
        printf("%s logits (%d tokens): max abs diff %.3g, argmax mismatches %d (%.2f s)\n", label, n, d, bad,
               real_now() - t0);
        CHECKF(d <= tol, "max abs diff %g", d);
        CHECK(bad == 0);
    }
    free(got);
    free(want);
}

static inline cJSON *real_reference(const char *model) {
    char path[512];
    snprintf(path, sizeof path, REAL_FIXTURES "%s/reference.json", model);
    cJSON *j = NULL;
    okv_error err = {0};
    if (okv_json_load(path, &j, &err)) { fprintf(stderr, "%s\n", err.message); exit(1); }
    return j;
}

/* An int array field as int32 (heap); returns the count. */
static inline int real_ids(const cJSON *obj, const char *key, int32_t **out) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(obj, key), *e;
    int n = cJSON_GetArraySize(a), k = 0;
    *out = malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    cJSON_ArrayForEach(e, a) (*out)[k++] = (int32_t)e->valuedouble;
    return n;
}

/* Greedy continuation: prefill prompt in chunks, then one token per step
 * until stop_id or max_new; returns the new ids (stop_id included). */
static inline int real_greedy(const okv_program *p, const int32_t *prompt, int n, int max_new, int32_t stop_id,
                              int32_t *out) {
    okv_program_info info;
    okv_program_get_info(p, &info);
    okv_runner_options ro;
    okv_runner_options_default(&ro);
    ro.n_threads = 2;
    okv_error err = {0};
    okv_runner *r = e2e_runner_open(p, "greedy", NULL, &ro);
    okv_status st = r ? OKV_OK : OKV_ERR_INVALID;
    float *logits = malloc(sizeof(float) * (size_t)info.vocab_size);
    int32_t pos[1024];
    int len = 0, produced = 0;
    for (int t = 0; t < n && !st; t += info.prefill_chunk_size) {
        int T = n - t < info.prefill_chunk_size ? n - t : info.prefill_chunk_size;
        for (int k = 0; k < T; k++) pos[k] = len + k;
        st = okv_runner_step(r, prompt + t, pos, T, OKV_LOGITS_LAST, logits, &err);
        len += T;
    }
    while (!st && produced < max_new) {
        int32_t next = (int32_t)e2e_argmax(logits, info.vocab_size);
        out[produced++] = next;
        if (next == stop_id) break;
        pos[0] = len++;
        st = okv_runner_step(r, &next, pos, 1, OKV_LOGITS_LAST, logits, &err);
    }
    CHECKF(st == OKV_OK, "greedy: %s", err.message);
    free(logits);
    e2e_runner_close(r);
    return produced;
}

static inline void real_print_ids(const char *label, const int32_t *ids, int n) {
    fprintf(stderr, "%s:", label);
    for (int i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
    fputc('\n', stderr);
}

#endif
