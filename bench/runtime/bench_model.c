/* bench_model — prefill and decode speed of a program, with decode put in
 * terms of memory bandwidth (decode is memory-bound: every token streams
 * all weights once).
 *
 *   bench_model PROGRAM.okv [--prompt N] [--decode N] [--threads N] [--kv-storage-dtype bf16] [--longctx N] [--profile 1]
 *
 * --longctx N (issue 12's long-context targets; give --kv-storage-dtype bf16
 * for the tiles): pp512 and the median decode step at 512 positions, then a
 * prompt of N tokens (filled in the program's largest chunks, logits of the
 * fill skipped) whose last 512 are one timed step, and the median decode
 * step at N positions; ratios against the targets.
 *
 * --profile 1: the runner times every op (okv_runner_options.profile) and
 * the prefill's and the decode's breakdowns are printed per kind of op (ms
 * per step, share of the step, thread-pool loops per step).
 *
 * Prints prefill tok/s, decode tok/s, the weight bytes a decode step reads,
 * the GB/s that implies, and the machine's measured read bandwidth (best of
 * several passes over a 1 GiB buffer with the same thread count). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "offkv.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct bw_arg { const uint64_t *p; size_t n; uint64_t sum; } bw_arg;

static void *bw_read(void *arg) {
    bw_arg *a = arg;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = 0; i + 4 <= a->n; i += 4) { s0 += a->p[i]; s1 += a->p[i + 1]; s2 += a->p[i + 2]; s3 += a->p[i + 3]; }
    a->sum = s0 + s1 + s2 + s3;
    return NULL;
}

/* Best-of-10 read bandwidth in GB/s over a 1 GiB buffer, split over threads. */
static double measure_bandwidth(int threads) {
    size_t bytes = (size_t)1 << 30, n = bytes / 8;
    uint64_t *buf = malloc(bytes);
    if (!buf) return 0;
    for (size_t i = 0; i < n; i++) buf[i] = i;
    double best = 0;
    for (int rep = 0; rep < 10; rep++) {
        pthread_t th[64];
        bw_arg args[64];
        double t0 = now();
        for (int t = 0; t < threads; t++) {
            args[t] = (bw_arg){buf + n / threads * t, n / threads, 0};
            pthread_create(&th[t], NULL, bw_read, &args[t]);
        }
        for (int t = 0; t < threads; t++) pthread_join(th[t], NULL);
        double gbs = bytes / (now() - t0) / 1e9;
        if (gbs > best) best = gbs;
    }
    free(buf);
    return best;
}

/* Bytes one decode step reads from weights: every weight tensor, except
 * embedding tables that only serve lookups (one row per token): the token
 * embedding counts when it doubles as the (tied) LM head. */
static double decode_weight_bytes(const okv_program *p) {
    char *json;
    okv_error err;
    if (okv_program_describe(p, true, &json, &err)) return 0;
    cJSON *doc = cJSON_Parse(json);
    free(json);
    const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(doc, "config");
    bool tied = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cfg, "tie_word_embeddings"));
    double total = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(doc, "tensors")) {
        const char *name = cJSON_GetObjectItemCaseSensitive(t, "name")->valuestring;
        const char *dtype = cJSON_GetObjectItemCaseSensitive(t, "dtype")->valuestring;
        bool lookup_only = !strcmp(name, "embed_tokens_per_layer.weight") || (!strcmp(name, "embed_tokens.weight") && !tied);
        if (strcmp(dtype, "u8") && !lookup_only) total += cJSON_GetObjectItemCaseSensitive(t, "nbytes")->valuedouble;
    }
    cJSON_Delete(doc);
    return total;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median ms of n decode steps from position at (tokens from ids). */
static double decode_median_ms(okv_runner *r, const int32_t *ids, int at, int n, float *logits, okv_error *err) {
    double t[64];
    if (n > 64) n = 64;
    for (int i = 0; i < n; i++) {
        int32_t id = ids[at + i], p = at + i;
        double t0 = now();
        if (okv_runner_step(r, &id, &p, 1, OKV_LOGITS_LAST, logits, err)) return -1;
        t[i] = now() - t0;
    }
    qsort(t, n, sizeof *t, cmp_d);
    return t[n / 2] * 1e3;
}

/* Prefill of [from, to) in steps of `chunk` tokens; seconds of the last step in *last. */
static int prefill_range(okv_runner *r, const int32_t *ids, int from, int to, int chunk, float *logits, double *last,
                         okv_error *err) {
    for (int t = from; t < to; t += chunk) {
        int T = to - t < chunk ? to - t : chunk;
        int32_t pos[4096];
        for (int i = 0; i < T; i++) pos[i] = t + i;
        double t0 = now();
        if (okv_runner_step(r, ids + t, pos, T, t + T == to ? OKV_LOGITS_LAST : OKV_LOGITS_NONE, logits, err)) return -1;
        *last = now() - t0;
    }
    return 0;
}

/* --longctx N: the long-context targets on one program: pp512 and
 * decode at 512 positions, then (cache rewound) a prompt of N tokens whose
 * last 512 are one timed chunk, and decode at N positions. */
static int bench_longctx(okv_runner *r, const okv_program_info *info, okv_dtype kvdt, int n_ctx, int n_dec,
                         float *logits) {
    okv_error err = {0};
    int chunk = info->prefill_chunk_size, total = n_ctx + n_dec;
    if (chunk > 4096) chunk = 4096;
    if (chunk < 512 || total > info->max_ctx_len) {
        fprintf(stderr, "longctx: needs prefill_chunk_size >= 512 (has %d) and max_ctx_len >= %d (has %d; re-export "
                "with --max-ctx-len)\n", info->prefill_chunk_size, total, info->max_ctx_len);
        return 1;
    }
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)total);
    for (int i = 0; i < total; i++) ids[i] = (i * 7919 + 13) % info->vocab_size;
    double pp = 0, last = 0, fill0, fill1;
    /* best of 2 for the short case (the first pays page faults) */
    double pp_best = 1e30, dec512 = 0;
    for (int rep = 0; rep < 2; rep++) {
        if (okv_cache_rewind("bench", 0, &err) || prefill_range(r, ids, 0, 512, 512, logits, &pp, &err)) goto fail;
        if (pp < pp_best) pp_best = pp;
    }
    dec512 = decode_median_ms(r, ids, 512, n_dec, logits, &err);
    if (dec512 < 0 || okv_cache_rewind("bench", 0, &err)) goto fail;
    fill0 = now();
    if (prefill_range(r, ids, 0, n_ctx - 512, chunk, logits, &last, &err)) goto fail;
    fill1 = now();
    if (prefill_range(r, ids, n_ctx - 512, n_ctx, 512, logits, &last, &err)) goto fail;
    double decN = decode_median_ms(r, ids, n_ctx, n_dec, logits, &err);
    if (decN < 0) goto fail;
    printf("longctx: kernels %s; attention: %s\n", okv_runner_kernels(r),
           strstr(okv_runner_kernels(r), "amx-bf16 (amx: granted)") && kvdt != OKV_F32
               ? "AMX-BF16 tiles for prefill chunks when KV is bf16/f16, AMX score tiles + "
                 "f32 FMA P V for decode (bf16/f16/q8 KV)"
               : "blocked kernel of the table (f32 KV, or no AMX: no tiles; avx512-bf16: vdpbf16ps decode)");
    printf("longctx: kv storage %s\n", okv_dtype_name(kvdt));
    printf("longctx: pp512 %.1f tok/s; last 512 of a %d-token prompt %.1f tok/s = %.0f%% of pp512 (target >= 50%%)\n",
           512 / pp_best, n_ctx, 512 / last, 100 * pp_best / last);
    printf("longctx: decode at 512 %.1f ms/token, at %d %.1f ms/token = %.2fx (target <= 1.3x); fill of %d tokens "
           "in %.1f s\n", dec512, n_ctx, decN, decN / dec512, n_ctx - 512, fill1 - fill0);
    free(ids);
    return 0;
fail:
    fprintf(stderr, "longctx: %s\n", err.message);
    free(ids);
    return 1;
}

/* The runner's profile as ms per step and share of the step time. */
static void print_profile(const okv_runner *r, const char *what) {
    okv_op_profile pr[32];
    int n = okv_runner_profile(r, pr, 32);
    if (n > 32) n = 32;
    const okv_op_profile *step = &pr[n - 1]; /* "step" is the last kind */
    if (step->calls == 0) return;
    double per = 1e3 / (double)step->calls, total = step->seconds;
    printf("%s profile: %lld steps, %.2f ms/step, %.1f pool loops/step\n", what, (long long)step->calls,
           total * per, (double)step->dispatches / (double)step->calls);
    for (int i = 0; i < n - 1; i++)
        if (pr[i].calls)
            printf("  %-18s %7.3f ms/step %5.1f%%  %6.1f calls/step %6.1f loops/step\n", pr[i].name, pr[i].seconds * per,
                   100 * pr[i].seconds / total, (double)pr[i].calls / (double)step->calls,
                   (double)pr[i].dispatches / (double)step->calls);
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: bench_model PROGRAM.okv [--prompt N] [--decode N] [--threads N] [--kv-storage-dtype D] [--longctx N] [--profile 1]\n"); return 2; }
    int prompt = 128, decode = 64, threads = 0, longctx = 0, profile = 0;
    okv_cache_options co;
    okv_cache_options_default(&co);
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--prompt")) prompt = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--decode")) decode = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--kv-storage-dtype")) {
            if (okv_kv_dtype_parse(argv[i + 1], &co.storage_dtype)) {
                fprintf(stderr, "--kv-storage-dtype: '%s' is not f32, f16, bf16 or q8\n", argv[i + 1]);
                return 2;
            }
        }
        else if (!strcmp(argv[i], "--longctx")) longctx = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--profile")) profile = atoi(argv[i + 1]);
    }
    okv_error err = {0};
    okv_program *p;
    if (okv_program_open(argv[1], &p, &err)) { fprintf(stderr, "%s\n", err.message); return 1; }
    okv_program_info info;
    okv_program_get_info(p, &info);
    okv_runner_options ro;
    okv_runner_options_default(&ro);
    ro.n_threads = threads;
    ro.profile = profile != 0;
    okv_runner *r;
    if (okv_cache_install("bench", p, &co, &err) || okv_runner_create(p, "bench", &ro, &r, &err)) {
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }
    if (longctx > 0) {
        float *lg = malloc(sizeof(float) * (size_t)info.vocab_size);
        int rc = bench_longctx(r, &info, co.storage_dtype, longctx, decode < 64 ? decode : 64, lg);
        free(lg);
        okv_runner_free(r);
        okv_cache_remove("bench", &err);
        okv_program_free(p);
        return rc;
    }
    int total = prompt + decode;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)total), *pos = malloc(sizeof(int32_t) * (size_t)total);
    for (int i = 0; i < total; i++) { ids[i] = (i * 7919 + 13) % info.vocab_size; pos[i] = i; }
    float *logits = malloc(sizeof(float) * (size_t)info.vocab_size);
    /* this VM's bandwidth changes over seconds: probe before and after, keep the best */
    int bw_threads = threads > 0 ? threads : 2;
    double bw_before = measure_bandwidth(bw_threads);
    double t0 = now();
    for (int t = 0; t < prompt; t += info.prefill_chunk_size) {
        int T = prompt - t < info.prefill_chunk_size ? prompt - t : info.prefill_chunk_size;
        if (okv_runner_step(r, ids + t, pos + t, T, OKV_LOGITS_LAST, logits, &err)) { fprintf(stderr, "%s\n", err.message); return 1; }
    }
    double t1 = now();
    if (profile) { print_profile(r, "prefill"); okv_runner_profile_reset(r); t1 = now(); }
    for (int t = prompt; t < total; t++)
        if (okv_runner_step(r, ids + t, pos + t, 1, OKV_LOGITS_LAST, logits, &err)) { fprintf(stderr, "%s\n", err.message); return 1; }
    double t2 = now();
    double wbytes = decode_weight_bytes(p);
    double dec_tps = decode / (t2 - t1);
    double bw_after = measure_bandwidth(bw_threads);
    double bw = bw_before > bw_after ? bw_before : bw_after;
    char line[256] = "";
    okv_cache_describe("bench", line, sizeof line, &err);
    printf("program: %s (%s, %d layers, vocab %d)\n", argv[1], info.architecture, info.n_layers, info.vocab_size);
    printf("kv: %s\n", line);
    printf("kernels: %s, %d threads\n", okv_runner_kernels(r), bw_threads);
    printf("prefill: %d tokens in %.2f s = %.1f tok/s\n", prompt, t1 - t0, prompt / (t1 - t0));
    printf("decode:  %d tokens in %.2f s = %.2f tok/s (%.1f ms/token)\n", decode, t2 - t1, dec_tps, 1000 / dec_tps);
    printf("decode weight traffic: %.2f GB/token -> %.1f GB/s; measured read bandwidth (%d threads, before/after) "
           "%.1f/%.1f GB/s -> %.0f%% of the better\n",
           wbytes / 1e9, wbytes * dec_tps / 1e9, bw_threads, bw_before, bw_after, 100 * wbytes * dec_tps / 1e9 / bw);
    if (profile) print_profile(r, "decode");
    okv_runner_free(r);
    okv_cache_remove("bench", &err);
    okv_program_free(p);
    free(ids); free(pos); free(logits);
    return 0;
}
