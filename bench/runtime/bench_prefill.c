/* bench_prefill — warm prefill of several programs side by side in one
 * process, so the machine's drift hits them alike (issue 10's "quantized
 * prefill >= bf16" and issue 12's pp512 figures on a shared host).
 *
 *   bench_prefill P1.okv [P2.okv ...] [--prompt 512] [--rounds 7] [--threads 2] [--kv-storage-dtype bf16]
 *                 [--profile 1]
 *
 * Every program gets its own cache and runner (okv_program_open's wall
 * time printed as "open"); one step each first (the weights' page faults;
 * printed as "first step"), then per round one prompt step of each
 * program (cache rewound, logits of the last row), the order rotating
 * from round to round. Prints per program the median and best tok/s (wall
 * clock) and CPU-seconds per step (the process's CPU time: both threads),
 * and the median of the per-round ratios against the first program; with
 * --profile 1, the median round's matmul and attention ms per step. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "offkv.h"

enum { MAX_PROGS = 8, MAX_ROUNDS = 64 };

static double clock_s(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(const double *v, int n) {
    double s[MAX_ROUNDS];
    memcpy(s, v, sizeof(double) * (size_t)n);
    qsort(s, (size_t)n, sizeof *s, cmp_d);
    return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

typedef struct bench_prog {
    const char *path;
    okv_program *p;
    okv_runner *r;
    char key[16];
    double wall[MAX_ROUNDS], cpu[MAX_ROUNDS], mm[MAX_ROUNDS], att[MAX_ROUNDS];
    double open_s; /* okv_program_open's wall time */
} bench_prog;

/* ms per step spent in ops named `name` since the last reset. */
static double profile_ms(okv_runner *r, const char *name) {
    okv_op_profile pr[32];
    int n = okv_runner_profile(r, pr, 32);
    for (int i = 0; i < n && i < 32; i++)
        if (!strcmp(pr[i].name, name)) return pr[i].seconds * 1e3;
    return 0;
}

static int step_once(bench_prog *b, const int32_t *ids, const int32_t *pos, int T, float *logits, double *wall,
                     double *cpu) {
    okv_error err = {0};
    if (okv_cache_rewind(b->key, 0, &err)) goto fail;
    okv_runner_profile_reset(b->r);
    double w0 = clock_s(CLOCK_MONOTONIC), c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
    if (okv_runner_step(b->r, ids, pos, T, OKV_LOGITS_LAST, logits, &err)) goto fail;
    *cpu = clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
    *wall = clock_s(CLOCK_MONOTONIC) - w0;
    return 0;
fail:
    fprintf(stderr, "%s: %s\n", b->path, err.message);
    return 1;
}

int main(int argc, char **argv) {
    bench_prog progs[MAX_PROGS];
    int n = 0, prompt = 512, rounds = 7, threads = 2, profile = 0;
    okv_cache_options co;
    okv_cache_options_default(&co);
    for (int i = 1; i < argc; i++) {
        if (!strncmp(argv[i], "--", 2) && i + 1 < argc) {
            const char *o = argv[i], *v = argv[++i];
            if (!strcmp(o, "--prompt")) prompt = atoi(v);
            else if (!strcmp(o, "--rounds")) rounds = atoi(v);
            else if (!strcmp(o, "--threads")) threads = atoi(v);
            else if (!strcmp(o, "--profile")) profile = atoi(v);
            else if (!strcmp(o, "--kv-storage-dtype")) {
                if (okv_kv_dtype_parse(v, &co.k_storage_dtype)) { fprintf(stderr, "bad dtype %s\n", v); return 2; }
                co.v_storage_dtype = co.k_storage_dtype;
            } else { fprintf(stderr, "unknown option %s\n", o); return 2; }
        } else if (n < MAX_PROGS) {
            memset(&progs[n], 0, sizeof progs[n]);
            progs[n++].path = argv[i];
        }
    }
    if (n == 0 || rounds < 1 || rounds > MAX_ROUNDS || prompt < 1) {
        fprintf(stderr, "usage: bench_prefill P1.okv [P2.okv ...] [--prompt N] [--rounds 1..64] [--threads N] "
                "[--kv-storage-dtype D] [--profile 1]\n");
        return 2;
    }
    int vocab = 0, min_vocab = 0;
    for (int i = 0; i < n; i++) {
        bench_prog *b = &progs[i];
        okv_error err = {0};
        okv_runner_options ro;
        okv_runner_options_default(&ro);
        ro.n_threads = threads;
        ro.profile = profile != 0;
        snprintf(b->key, sizeof b->key, "bench%d", i);
        double t_open = clock_s(CLOCK_MONOTONIC);
        okv_status st = okv_program_open(b->path, &b->p, &err);
        b->open_s = clock_s(CLOCK_MONOTONIC) - t_open;
        if (st || okv_cache_install(b->key, b->p, &co, &err) || okv_runner_create(b->p, b->key, &ro, &b->r, &err)) {
            fprintf(stderr, "%s: %s\n", b->path, err.message);
            return 1;
        }
        okv_program_info info;
        okv_program_get_info(b->p, &info);
        if (info.prefill_chunk_size < prompt) {
            fprintf(stderr, "%s: prefill_chunk_size %d < --prompt %d\n", b->path, info.prefill_chunk_size, prompt);
            return 1;
        }
        if (info.vocab_size > vocab) vocab = info.vocab_size;
        if (min_vocab == 0 || info.vocab_size < min_vocab) min_vocab = info.vocab_size;
    }
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)prompt), *pos = malloc(sizeof(int32_t) * (size_t)prompt);
    float *logits = malloc(sizeof(float) * (size_t)vocab);
    for (int i = 0; i < prompt; i++) { ids[i] = (i * 7919 + 13) % min_vocab; pos[i] = i; }
    double first[MAX_PROGS], c;
    for (int i = 0; i < n; i++)
        if (step_once(&progs[i], ids, pos, prompt, logits, &first[i], &c)) return 1;
    for (int r = 0; r < rounds; r++)
        for (int k = 0; k < n; k++) {
            bench_prog *b = &progs[(k + r) % n];
            if (step_once(b, ids, pos, prompt, logits, &b->wall[r], &b->cpu[r])) return 1;
            b->mm[r] = profile_ms(b->r, "matmul");
            b->att[r] = profile_ms(b->r, "update_and_attend");
        }
    printf("prefill of %d tokens, %d threads, %d interleaved rounds after one warm step each; kernels %s\n", prompt,
           threads, rounds, okv_runner_kernels(progs[0].r));
    for (int i = 0; i < n; i++) {
        bench_prog *b = &progs[i];
        double ratio[MAX_ROUNDS], cratio[MAX_ROUNDS], best = 1e30;
        for (int r = 0; r < rounds; r++) {
            ratio[r] = progs[0].wall[r] / b->wall[r];
            cratio[r] = progs[0].cpu[r] / b->cpu[r];
            if (b->wall[r] < best) best = b->wall[r];
        }
        printf("%-52s median %7.1f tok/s (best %7.1f), %6.3f CPU-s/step; vs first: wall %.3fx, cpu %.3fx", b->path,
               prompt / median(b->wall, rounds), prompt / best, median(b->cpu, rounds), median(ratio, rounds),
               median(cratio, rounds));
        if (profile) printf("; matmul %.0f ms, attention %.0f ms", median(b->mm, rounds), median(b->att, rounds));
        printf("; open %.3f s, first step %.1f tok/s", b->open_s, prompt / first[i]);
        printf("\n");
    }
    for (int i = 0; i < n; i++) {
        okv_error err = {0};
        char ran[512];
        printf("%s: kernels ran: %s\n", progs[i].path, okv_runner_kernels_ran(progs[i].r, ran, sizeof ran));
        okv_runner_free(progs[i].r);
        okv_cache_remove(progs[i].key, &err);
        okv_program_free(progs[i].p);
    }
    free(ids); free(pos); free(logits);
    return 0;
}
