/* bench_sampler — microseconds per okv_sampler_sample call on a 262144-entry
 * (Gemma-sized) logits row, for the common parameter sets. Two rows: a
 * peaked one shaped like LLM output (a few likely tokens, a long tail) and
 * a flat one (the worst case for top-p). Usage: bench_sampler [vocab]. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "offkv_sample.h"

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint32_t lcg(uint32_t *x) {
    *x = *x * 1664525u + 1013904223u;
    return *x >> 8;
}

/* Peaked: a Gaussian-ish tail around -5 plus a few tokens near +15. */
static void fill_peaked(float *x, int n) {
    uint32_t seed = 1;
    for (int i = 0; i < n; i++) {
        float u = 0;
        for (int k = 0; k < 4; k++) u += (float)(lcg(&seed) % 10000) / 10000.0f;
        x[i] = (u - 2.0f) * 3.0f - 5.0f;
    }
    for (int i = 0; i < 20; i++) x[(int)(lcg(&seed) % (uint32_t)n)] = 10.0f + (float)i * 0.3f;
}

static void fill_flat(float *x, int n) {
    uint32_t seed = 2;
    for (int i = 0; i < n; i++) x[i] = (float)(lcg(&seed) % 10000) / 10000.0f;
}

typedef struct setting {
    const char *name;
    bool do_sample;
    float temperature;
    int32_t top_k;
    float top_p, min_p, penalty;
} setting;

static void run(const char *row, const float *x, int vocab, const setting *st) {
    okv_sampler_params p = okv_sampler_params_default();
    p.do_sample = st->do_sample;
    p.temperature = st->temperature;
    p.top_k = st->top_k;
    p.top_p = st->top_p;
    p.min_p = st->min_p;
    p.repetition_penalty = st->penalty;
    p.seed = 42;
    okv_sampler *s;
    okv_error err;
    if (okv_sampler_create(vocab, &p, &s, &err) != OKV_OK) {
        fprintf(stderr, "%s\n", err.message);
        exit(1);
    }
    for (int i = 0; i < 512; i++) okv_sampler_accept(s, i * 37 % vocab, NULL);
    int iters = 0;
    long sink = 0;
    double t0 = now_seconds(), t;
    do {
        sink += okv_sampler_sample(s, x);
        iters++;
        t = now_seconds() - t0;
    } while (t < 0.3 && iters < 100000);
    printf("%-6s %-34s %8.1f us/sample  (%d samples, checksum %ld)\n", row, st->name, t / iters * 1e6,
           iters, sink % 1000);
    okv_sampler_free(s);
}

int main(int argc, char **argv) {
    int vocab = argc > 1 ? atoi(argv[1]) : 262144;
    float *peaked = malloc((size_t)vocab * sizeof *peaked);
    float *flat = malloc((size_t)vocab * sizeof *flat);
    fill_peaked(peaked, vocab);
    fill_flat(flat, vocab);
    static const setting settings[] = {
        {"greedy", false, 1.0f, 0, 1.0f, 0.0f, 1.0f},
        {"greedy + penalty 1.1", false, 1.0f, 0, 1.0f, 0.0f, 1.1f},
        {"temperature 0.8 only", true, 0.8f, 0, 1.0f, 0.0f, 1.0f},
        {"HF defaults sampling (top_k 50)", true, 1.0f, 50, 1.0f, 0.0f, 1.0f},
        {"T 0.6 top_k 20 top_p 0.95", true, 0.6f, 20, 0.95f, 0.0f, 1.0f},
        {"T 0.7 top_p 0.9 (no top_k)", true, 0.7f, 0, 0.9f, 0.0f, 1.0f},
        {"T 1.0 min_p 0.05 (no top_k)", true, 1.0f, 0, 1.0f, 0.05f, 1.0f},
        {"T 1.0 top_k 64 top_p 0.95 pen 1.1", true, 1.0f, 64, 0.95f, 0.0f, 1.1f},
    };
    printf("vocab %d\n", vocab);
    for (size_t i = 0; i < sizeof settings / sizeof settings[0]; i++) run("peaked", peaked, vocab, &settings[i]);
    for (size_t i = 0; i < sizeof settings / sizeof settings[0]; i++) run("flat", flat, vocab, &settings[i]);
    free(peaked);
    free(flat);
    return 0;
}
