/* --deterministic (okv_runner_options.deterministic): a sequence's logits
 * are bit for bit the same whatever else shares its steps, however many
 * rows a step has, and however its prompt is chunked. For every weight
 * dtype (f32, bf16, f16, q8, q4) on three cache shapes
 *   - Llama flat (prompt 40 = one chunk, 6 decode steps: key blocks of 32
 *     positions crossed, T = 40 and T = 16 reach the AMX thresholds),
 *   - Llama with every cache a ring (window override 20, prompt 20, 20
 *     decode steps: the ring wraps, windows cross block edges),
 *   - Gemma-3 (its own sliding window 8 plus global layers, prompt 8),
 * the truth for each sequence is its tokens run one per step on a
 * single-sequence key; compared with memcmp (every position's logits):
 *   - the same key with prompt chunks of 7 and the whole prompt at once;
 *   - a cell-pool key holding 1, 3 and 16 sequences (8 for Gemma, whose
 *     steps hold at most 8 rows) stepped together: every step gives each
 *     decoding sequence one token, then fills the remaining rows with prompt
 *     chunks of the others (chunk 1, 7 or whole by sequence), sequences
 *     starting at different steps, batch order not sequence order.
 * The default kernels run the same schedule and their differences are
 * printed (there a row may legitimately differ: GEMV/GEMM and AMX
 * switches, split keys); the sanitizer pass (OKV_REAL_MODEL_TESTS=reduced)
 * skips that and the f16 programs. */
#include "e2e_util.h"

enum { MAX_SEQ = 16, MAX_N = 64 };

typedef struct det_case {
    const char *fixture;
    int chunk;      /* the program's prefill_chunk_size = the prompt length */
    int window;     /* cache window override for every cache (0 = the program's) */
    int n_decode;   /* tokens after the prompt */
    int max_batch;  /* most sequences stepped together (<= chunk) */
} det_case;

static int g_vocab;
static bool g_reduced; /* the sanitizer pass: deterministic runs only */

static int32_t tok(int k, int j) { return (int32_t)(1 + (j * 7 + k * 23 + (j * j) % 5 + k * j) % 400); }

static void cache_options(const det_case *c, okv_cache_options *co, const int32_t *win) {
    okv_cache_options_default(co);
    co->max_capacity = MAX_N;
    if (c->window) {
        co->windows = win;
        co->n_windows = 1;
    }
}

/* [n, vocab] logits of sequence k on a single-sequence key, prompt
 * (chunk tokens) in steps of `step`, then one token per step. */
static float *run_single(okv_program *p, const okv_runner_options *ro, const det_case *c, int k, int step) {
    okv_error err = {0};
    int n = c->chunk + c->n_decode;
    float *out = calloc((size_t)n * g_vocab, sizeof(float));
    int32_t win = c->window, ids[MAX_N], pos[MAX_N];
    for (int j = 0; j < n; j++) ids[j] = tok(k, j), pos[j] = j;
    okv_cache_options co;
    cache_options(c, &co, &win);
    okv_runner *r = NULL;
    CHECK_OK(okv_cache_install("det-single", p, &co, &err), &err);
    CHECK_OK(okv_runner_create(p, "det-single", ro, &r, &err), &err);
    for (int t = 0; r && t < n;) {
        int T = t < c->chunk ? (step < c->chunk - t ? step : c->chunk - t) : 1;
        okv_status st = okv_runner_step(r, ids + t, pos + t, T, OKV_LOGITS_ALL, out + (size_t)t * g_vocab, &err);
        CHECK_OK(st, &err);
        if (st) break;
        t += T;
    }
    okv_runner_free(r);
    okv_cache_remove("det-single", &err);
    return out;
}

/* n_seq sequences on one cell-pool key; got[k] receives sequence k's rows
 * in position order. */
static void run_cells(okv_program *p, const okv_runner_options *ro, const det_case *c, int n_seq, float **got) {
    okv_error err = {0};
    int32_t win = c->window;
    okv_cache_options co;
    cache_options(c, &co, &win);
    co.mode = OKV_CACHE_CELLS;
    co.max_seqs = MAX_SEQ;
    co.n_cells = MAX_SEQ * MAX_N;
    okv_runner *r = NULL;
    CHECK_OK(okv_cache_install("det-cells", p, &co, &err), &err);
    CHECK_OK(okv_runner_create(p, "det-cells", ro, &r, &err), &err);
    int n = c->chunk + c->n_decode, seq[MAX_SEQ], done[MAX_SEQ] = {0};
    for (int k = 0; k < n_seq; k++) CHECK_OK(okv_seq_new("det-cells", &seq[k], &err), &err);
    int32_t bid[MAX_N], bseq[MAX_N], bpos[MAX_N], rows[MAX_N], owner[MAX_N];
    float *logits = malloc(sizeof(float) * (size_t)c->chunk * g_vocab);
    for (int step = 0; r; step++) {
        int T = 0;
        for (int pass = 0; pass < 2; pass++)     /* decoders first, then prompt chunks */
            for (int k = n_seq - 1; k >= 0; k--) { /* reversed: the batch order is not the sequence order */
                if (step < k % 5 || done[k] >= n || (done[k] >= c->chunk) != (pass == 0)) continue;
                int want = done[k] >= c->chunk ? 1 : (k % 3 == 0 ? 1 : k % 3 == 1 ? 7 : c->chunk);
                if (want > c->chunk - done[k] && done[k] < c->chunk) want = c->chunk - done[k];
                for (int i = 0; i < want && T < c->chunk; i++, T++) {
                    bid[T] = tok(k, done[k] + i);
                    bseq[T] = seq[k];
                    bpos[T] = done[k] + i;
                    owner[T] = k;
                    rows[T] = T;
                }
            }
        if (!T) {
            bool left = false;
            for (int k = 0; k < n_seq; k++) left |= done[k] < n;
            if (!left) break;
            continue; /* a sequence that has not started yet */
        }
        okv_status st = okv_runner_step_batch(r, bid, bseq, bpos, T, rows, T, logits, &err);
        CHECK_OK(st, &err);
        if (st) break;
        for (int t = 0; t < T; t++) {
            memcpy(got[owner[t]] + (size_t)bpos[t] * g_vocab, logits + (size_t)t * g_vocab, sizeof(float) * g_vocab);
            done[owner[t]]++;
        }
    }
    free(logits);
    okv_runner_free(r);
    okv_cache_remove("det-cells", &err);
}

static int rows_differing(const float *a, const float *b, int n) {
    int bad = 0;
    for (int t = 0; t < n; t++) bad += memcmp(a + (size_t)t * g_vocab, b + (size_t)t * g_vocab, sizeof(float) * g_vocab) != 0;
    return bad;
}

static void check_program(const char *path, const det_case *c, const char *what) {
    okv_program *p = NULL;
    okv_error err = {0};
    CHECK_OK(okv_program_open(path, &p, &err), &err);
    if (!p) return;
    okv_program_info info;
    okv_program_get_info(p, &info);
    g_vocab = info.vocab_size;
    int n = c->chunk + c->n_decode;
    for (int det = 1; det >= (g_reduced ? 1 : 0); det--) {
        okv_runner_options ro;
        okv_runner_options_default(&ro);
        ro.n_threads = 2;
        ro.deterministic = det;
        float *truth[MAX_SEQ], *got[MAX_SEQ];
        for (int k = 0; k < c->max_batch; k++) {
            truth[k] = run_single(p, &ro, c, k, 1);
            got[k] = calloc((size_t)n * g_vocab, sizeof(float));
        }
        char label[64];
        int bad_total = 0;
        double worst = 0;
        static const int steps[] = {7, 0};
        for (int s = 0; s < 2; s++) {
            float *o = run_single(p, &ro, c, 0, steps[s] ? steps[s] : c->chunk);
            int bad = rows_differing(o, truth[0], n);
            double d = e2e_max_diff(o, truth[0], (size_t)n * g_vocab);
            worst = d > worst ? d : worst;
            bad_total += bad;
            snprintf(label, sizeof label, "prompt chunks of %d", steps[s] ? steps[s] : c->chunk);
            if (det) CHECKF(bad == 0, "%s deterministic, %s: %d of %d rows differ from T=1 (max %.3g)", what, label, bad, n, d);
            free(o);
        }
        int batches[] = {1, 3, c->max_batch};
        for (int b = 0; b < 3; b++) {
            run_cells(p, &ro, c, batches[b], got);
            int bad = 0;
            double d = 0;
            for (int k = 0; k < batches[b]; k++) {
                bad += rows_differing(got[k], truth[k], n);
                double dk = e2e_max_diff(got[k], truth[k], (size_t)n * g_vocab);
                d = dk > d ? dk : d;
            }
            worst = d > worst ? d : worst;
            bad_total += bad;
            if (det)
                CHECKF(bad == 0, "%s deterministic, %d sequences on a cell key: %d of %d rows differ from alone (max %.3g)",
                       what, batches[b], bad, batches[b] * n, d);
        }
        if (!det)
            fprintf(stderr, "%s default kernels: %d rows not bit-equal (max diff %.3g)\n", what, bad_total, worst);
        for (int k = 0; k < c->max_batch; k++) { free(truth[k]); free(got[k]); }
    }
    okv_program_free(p);
}

int main(void) {
    const char *red = getenv("OKV_REAL_MODEL_TESTS");
    g_reduced = red && !strcmp(red, "reduced");
    static const det_case cases[] = {
        {"llama32-tiny", 40, 0, 6, 16},   /* flat */
        {"llama32-tiny", 20, 20, 20, 16}, /* every cache a ring */
        {"gemma3-tiny", 8, 0, 30, 8},     /* sliding window 8 + global layers */
    };
    for (size_t f = 0; f < sizeof cases / sizeof *cases; f++) {
        const det_case *c = &cases[f];
        char dir[256], name[256], what[256];
        snprintf(dir, sizeof dir, FIXTURES "%s", c->fixture);
        static const struct { const char *tag; okv_dtype dt; int ql; } kinds[] = {
            {"f32", OKV_F32, 0}, {"bf16", OKV_BF16, 0}, {"f16", OKV_F16, 0}, {"q8", OKV_F32, 8}, {"q4", OKV_F32, 4}};
        for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
            if (g_reduced && kinds[k].dt == OKV_F16) continue;
            okv_export_options o;
            okv_export_options_default(&o);
            o.dtype = kinds[k].dt;
            o.prefill_chunk_size = c->chunk;
            o.qlinear = kinds[k].ql;
            o.qembedding = kinds[k].ql;
            snprintf(name, sizeof name, "%s-%d.%s.okv", c->fixture, c->chunk, kinds[k].tag);
            char *out = e2e_path(name);
            okv_error err = {0};
            okv_status st = okv_export(dir, out, &o, &err);
            CHECKF(st == OKV_OK, "export %s: %s", name, err.message);
            snprintf(what, sizeof what, "%s %s%s", c->fixture, kinds[k].tag, c->window ? " (rings)" : "");
            if (!st) check_program(out, c, what);
            free(out);
        }
    }
    e2e_cleanup();
    return okv_test_finish();
}
