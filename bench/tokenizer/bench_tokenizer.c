/* bench_tokenizer.c — encode (and decode) throughput of the fixture
 * tokenizers on a deterministic ~1 MB mixed-language text.
 *
 * The text is built from the "text" fields of cases.jsonl (all four
 * tokenizer dirs share the same corpus: code, CJK, emoji, many scripts,
 * numbers, whitespace runs), shuffled with a fixed seed and repeated until
 * it reaches the target size. A second, generated text of random "words"
 * from several scripts (few repeats, so the per-call word cache rarely
 * hits) shows the cost of BPE itself. Run from the repo root:
 *   ./build/bench/tokenizer/bench_tokenizer [MB] */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "offkv_tok.h"
#include "okv_common.h"

#define FIXTURES "../shared/fixtures/tokenizers/"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* Corpus texts (no NUL bytes: cJSON strings), one per case line. */
static char **load_texts(const char *path, size_t *count) {
    char *data;
    size_t len;
    okv_error err = {0};
    if (okv_read_file(path, &data, &len, &err)) { fprintf(stderr, "%s\n", err.message); exit(1); }
    char **v = NULL;
    size_t n = 0, cap = 0;
    for (char *p = data; *p;) {
        char *nl = strchr(p, '\n');
        size_t l = nl ? (size_t)(nl - p) : strlen(p);
        cJSON *j = cJSON_ParseWithLength(p, l);
        const char *t = j ? cJSON_GetStringValue(cJSON_GetObjectItem(j, "text")) : NULL;
        cJSON *add = j ? cJSON_GetObjectItem(j, "add_special_tokens") : NULL;
        if (t && *t && cJSON_IsFalse(add)) {
            if (n == cap) { cap = cap ? cap * 2 : 256; v = realloc(v, cap * sizeof *v); }
            v[n++] = strdup(t);
        }
        cJSON_Delete(j);
        p += l + (nl ? 1 : 0);
    }
    free(data);
    *count = n;
    return v;
}

static size_t put_cp(char *p, uint32_t cp) {
    if (cp < 0x80) { p[0] = (char)cp; return 1; }
    if (cp < 0x800) { p[0] = (char)(0xC0 | (cp >> 6)); p[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        p[0] = (char)(0xE0 | (cp >> 12)); p[1] = (char)(0x80 | ((cp >> 6) & 0x3F)); p[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    p[0] = (char)(0xF0 | (cp >> 18)); p[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    p[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); p[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Random words: Latin letters mostly, some Cyrillic, CJK, digits, emoji. */
static size_t generated_text(char *text, size_t target) {
    uint64_t rng = 7;
    size_t len = 0;
    while (len < target) {
        uint64_t kind = rng_next(&rng) % 10, wl = 1 + rng_next(&rng) % 9;
        for (uint64_t i = 0; i < wl; i++) {
            uint32_t cp = kind < 6 ? 'a' + (uint32_t)(rng_next(&rng) % 26)
                        : kind < 7 ? 0x430 + (uint32_t)(rng_next(&rng) % 32)
                        : kind < 8 ? 0x4E00 + (uint32_t)(rng_next(&rng) % 3000)
                        : kind < 9 ? '0' + (uint32_t)(rng_next(&rng) % 10)
                                   : 0x1F600 + (uint32_t)(rng_next(&rng) % 64);
            len += put_cp(text + len, cp);
        }
        text[len++] = rng_next(&rng) % 12 ? ' ' : (rng_next(&rng) % 2 ? '.' : '\n');
    }
    text[len] = 0;
    return len;
}

#define REPEATS 3 /* best of: the machine is shared */

static void bench_one(const char *name, const okv_tok *tok, const char *label, const char *text, size_t len) {
    okv_error err = {0};
    int32_t *ids = NULL;
    size_t n = 0, out_len = 0;
    char *out = NULL;
    double t_enc = 1e9, t_dec = 1e9;
    for (int r = 0; r < REPEATS; r++) {
        free(ids);
        double t0 = now();
        if (okv_tok_encode(tok, text, len, false, &ids, &n, &err)) { fprintf(stderr, "%s\n", err.message); exit(1); }
        double t = now() - t0;
        if (t < t_enc) t_enc = t;
    }
    for (int r = 0; r < REPEATS; r++) {
        free(out);
        double t0 = now();
        if (okv_tok_decode(tok, ids, n, false, &out, &out_len, &err)) { fprintf(stderr, "%s\n", err.message); exit(1); }
        double t = now() - t0;
        if (t < t_dec) t_dec = t;
    }
    printf("%-9s %-9s encode %7.2f MB/s (%zu tokens, %.2f bytes/token)  decode %7.2f MB/s\n", name, label,
           len / t_enc / 1e6, n, (double)len / n, out_len / t_dec / 1e6);
    free(out);
    free(ids);
}

int main(int argc, char **argv) {
    double mb = argc > 1 ? atof(argv[1]) : 1.0;
    size_t target = (size_t)(mb * 1024 * 1024), n_texts;
    char **texts = load_texts(FIXTURES "llama3/cases.jsonl", &n_texts);
    char *text = malloc(target + 4096);
    size_t len = 0;
    uint64_t rng = 42;
    while (len < target) {
        const char *t = texts[rng_next(&rng) % n_texts];
        size_t l = strlen(t);
        memcpy(text + len, t, l);
        len += l;
        text[len++] = (rng_next(&rng) % 4) ? ' ' : '\n';
    }
    text[len] = 0;

    char *gen = malloc(target + 64);
    size_t gen_len = generated_text(gen, target);
    printf("text: %zu bytes from %zu corpus texts; generated: %zu bytes\n", len, n_texts, gen_len);

    static const char *dirs[] = {"llama3", "llama3_1", "qwen3", "gemma3"};
    for (int d = 0; d < 4; d++) {
        char path[256];
        snprintf(path, sizeof path, FIXTURES "%s/tokenizer.json", dirs[d]);
        okv_tok *tok;
        okv_error err = {0};
        double t0 = now();
        if (okv_tok_load_file(path, &tok, &err)) { fprintf(stderr, "%s\n", err.message); return 1; }
        printf("%-9s load %.0f ms\n", dirs[d], (now() - t0) * 1e3);
        bench_one(dirs[d], tok, "corpus", text, len);
        bench_one(dirs[d], tok, "generated", gen, gen_len);
        okv_tok_free(tok);
    }
    free(gen);
    for (size_t i = 0; i < n_texts; i++) free(texts[i]);
    free(texts);
    free(text);
    return 0;
}
