/* bench_batch — decode throughput of many sequences stepped together on a
 * cell-pool key, against one sequence on a single-sequence key.
 *
 *   bench_batch PROGRAM.okv [--seqs 1,4,16] [--prompt N] [--decode N] [--threads N] [--reps N]
 *               [--deterministic 0|1|both]   (okv_runner_options.deterministic for every runner;
 *                                             both: default and deterministic runners alternate
 *                                             rep by rep in this one process, medians side by side)
 *
 * For the single key: prefill N prompt tokens, then decode one token per
 * okv_runner_step (the single-sequence fast path). For each S in --seqs: S
 * sequences on a cell key, each prefilled with its own prompt (batched
 * steps of up to a chunk), then decode steps of S tokens (one per sequence,
 * okv_runner_step_batch, logits for each). Prints tok/s per configuration,
 * the median over --reps repetitions (decode is memory-bound: a batched
 * step reads each weight once for S tokens, so aggregate tok/s should grow
 * with S until compute or attention dominates). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "offkv.h"

static bool g_deterministic;   /* the runners of the configuration being measured */

static double clock_s(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}
static double now(void) { return clock_s(CLOCK_MONOTONIC); }
/* CPU seconds of the whole process (all pool threads): on a loaded shared
 * machine tokens per CPU-second vary less than tokens per wall second. */
static double cpu_now(void) { return clock_s(CLOCK_PROCESS_CPUTIME_ID); }
static double g_cpu_tps; /* tokens per CPU-second of the last bench_single / bench_cells */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *x, int n) {
    qsort(x, (size_t)n, sizeof *x, cmp_double);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

static int32_t tok(int seq, int j, int vocab) { return (int32_t)((j * 7919 + seq * 104729 + 11) % (vocab - 1) + 1); }

static void die(const char *what, const okv_error *err) {
    fprintf(stderr, "bench_batch: %s: %s\n", what, err->message);
    exit(1);
}

/* Decode tok/s of one sequence on a single-sequence key. */
static double bench_single(okv_program *p, const okv_program_info *info, int threads, int prompt, int decode) {
    okv_error err = {0};
    okv_runner_options ro;
    okv_runner_options_default(&ro);
    ro.n_threads = threads;
    ro.max_logit_rows = 1;
    ro.deterministic = g_deterministic;
    okv_runner *r = NULL;
    if (okv_cache_install("single", p, NULL, &err) || okv_runner_create(p, "single", &ro, &r, &err)) die("single key", &err);
    float *logits = malloc(sizeof(float) * (size_t)info->vocab_size);
    int32_t ids[4096], pos[4096];
    for (int t = 0; t < prompt; t += info->prefill_chunk_size) {
        int T = prompt - t < info->prefill_chunk_size ? prompt - t : info->prefill_chunk_size;
        for (int i = 0; i < T; i++) { ids[i] = tok(0, t + i, info->vocab_size); pos[i] = t + i; }
        if (okv_runner_step(r, ids, pos, T, OKV_LOGITS_LAST, logits, &err)) die("prefill", &err);
    }
    double t0 = now(), c0 = cpu_now();
    for (int j = 0; j < decode; j++) {
        int32_t id = tok(0, prompt + j, info->vocab_size), ps = prompt + j;
        if (okv_runner_step(r, &id, &ps, 1, OKV_LOGITS_LAST, logits, &err)) die("decode", &err);
    }
    double tps = decode / (now() - t0);
    g_cpu_tps = decode / (cpu_now() - c0);
    okv_runner_free(r);
    okv_cache_remove("single", &err);
    free(logits);
    return tps;
}

/* Aggregate decode tok/s of S sequences stepped together on a cell key. */
static double bench_cells(okv_program *p, const okv_program_info *info, int threads, int S, int prompt, int decode) {
    okv_error err = {0};
    okv_cache_options co;
    okv_cache_options_default(&co);
    co.mode = OKV_CACHE_CELLS;
    co.max_seqs = S;
    co.max_capacity = prompt + decode + 1;
    co.n_cells = S * (prompt + decode) + info->prefill_chunk_size;
    okv_runner_options ro;
    okv_runner_options_default(&ro);
    ro.n_threads = threads;
    ro.deterministic = g_deterministic;
    ro.max_logit_rows = S < info->prefill_chunk_size ? S : info->prefill_chunk_size;
    okv_runner *r = NULL;
    if (okv_cache_install("cells", p, &co, &err) || okv_runner_create(p, "cells", &ro, &r, &err)) die("cell key", &err);
    int seq[256];
    for (int s = 0; s < S; s++)
        if (okv_seq_new("cells", &seq[s], &err)) die("seq_new", &err);
    float *logits = malloc(sizeof(float) * (size_t)info->vocab_size * (size_t)S);
    int32_t ids[4096], seqs[4096], pos[4096], rows[256];
    for (int s = 0; s < S; s++)
        for (int t = 0; t < prompt; t += info->prefill_chunk_size) {
            int T = prompt - t < info->prefill_chunk_size ? prompt - t : info->prefill_chunk_size;
            for (int i = 0; i < T; i++) { ids[i] = tok(s, t + i, info->vocab_size); seqs[i] = seq[s]; pos[i] = t + i; }
            rows[0] = T - 1;
            if (okv_runner_step_batch(r, ids, seqs, pos, T, rows, 1, logits, &err)) die("batched prefill", &err);
        }
    double t0 = now(), c0 = cpu_now();
    for (int j = 0; j < decode; j++) {
        for (int s = 0; s < S; s++) {
            ids[s] = tok(s, prompt + j, info->vocab_size);
            seqs[s] = seq[s];
            pos[s] = prompt + j;
            rows[s] = s;
        }
        if (okv_runner_step_batch(r, ids, seqs, pos, S, rows, ro.max_logit_rows, logits, &err)) die("batched decode", &err);
    }
    double tps = (double)decode * S / (now() - t0);
    g_cpu_tps = (double)decode * S / (cpu_now() - c0);
    okv_runner_free(r);
    okv_cache_remove("cells", &err);
    free(logits);
    return tps;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_batch PROGRAM.okv [--seqs 1,4,16] [--prompt N] [--decode N] [--threads N] [--reps N] [--deterministic 0|1|both]\n");
        return 2;
    }
    int list[16] = {1, 4, 16}, n_list = 3, prompt = 64, decode = 32, threads = 0, reps = 3;
    bool both = false;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--seqs")) {
            n_list = 0;
            for (char *tk = strtok(argv[i + 1], ","); tk && n_list < 16; tk = strtok(NULL, ",")) list[n_list++] = atoi(tk);
        } else if (!strcmp(argv[i], "--prompt")) prompt = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--decode")) decode = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--deterministic")) {
            both = !strcmp(argv[i + 1], "both");
            g_deterministic = !both && atoi(argv[i + 1]) != 0;
        }
    }
    if (prompt < 1 || prompt > 4000 || decode < 1 || reps < 1 || reps > 64) {
        fprintf(stderr, "bench_batch: --prompt 1..4000, --decode >= 1, --reps 1..64\n");
        return 2;
    }
    for (int k = 0; k < n_list; k++)
        if (list[k] < 1 || list[k] > 256) { fprintf(stderr, "bench_batch: --seqs entries must be 1..256\n"); return 2; }
    if (both && reps > 32) reps = 32;
    okv_error err = {0};
    okv_program *p = NULL;
    if (okv_program_open(argv[1], &p, &err)) die(argv[1], &err);
    okv_program_info info;
    okv_program_get_info(p, &info);
    if (both) { /* default and deterministic alternate rep by rep (order flipped each rep) */
        double d[32], q[32], dc[32], qc[32];
        for (int k = -1; k < n_list; k++) {
            for (int i = 0; i < reps; i++)
                for (int w = 0; w < 2; w++) {
                    g_deterministic = (w + i) % 2;
                    double v = k < 0 ? bench_single(p, &info, threads, prompt, decode)
                                     : bench_cells(p, &info, threads, list[k], prompt, decode);
                    (g_deterministic ? q : d)[i] = v;
                    (g_deterministic ? qc : dc)[i] = g_cpu_tps;
                }
            double md = median(d, reps), mq = median(q, reps), mdc = median(dc, reps), mqc = median(qc, reps);
            if (k < 0) printf("single key, 1 sequence: ");
            else printf("cell key, %3d sequences: ", list[k]);
            printf("default %.2f tok/s, deterministic %.2f tok/s (%.3fx); per CPU-second %.2f vs %.2f (%.3fx); medians of %d, "
                   "interleaved\n", md, mq, mq / md, mdc, mqc, mqc / mdc, reps);
        }
        okv_program_free(p);
        return 0;
    }
    double x[64];
    for (int i = 0; i < reps; i++) x[i] = bench_single(p, &info, threads, prompt, decode);
    double single = median(x, reps);
    printf("single key, 1 sequence: decode %.2f tok/s (median of %d)\n", single, reps);
    for (int k = 0; k < n_list; k++) {
        for (int i = 0; i < reps; i++) x[i] = bench_cells(p, &info, threads, list[k], prompt, decode);
        double agg = median(x, reps);
        printf("cell key, %3d sequences: decode %.2f tok/s aggregate (%.2fx the single key)\n", list[k], agg, agg / single);
    }
    okv_program_free(p);
    return 0;
}
