/* okv_eval_perplexity against numbers computed here by other means:
 *  - one window over a fixture's reference tokens: the perplexity of the
 *    fp32 program equals the one computed from the float64 HF oracle's logits
 *    (logits.f32) by hand;
 *  - several windows with the BOS substituted: equals the perplexity
 *    computed from logits of independent one-token-at-a-time runs;
 *  - a program against itself: KL 0, top-1 agreement 1, base perplexity =
 *    perplexity; a 4-bit program against fp32: KL > 0 and the base
 *    perplexity is the fp32 program's own;
 *  - bad arguments are errors. */
#include "e2e_util.h"
#include "offkv_eval.h"

/* Mean NLL of rows [first, ctx-1) of logits [ctx, V] predicting win[j+1]. */
static double nll_by_hand(const float *logits, const int32_t *win, int ctx, int V, int64_t *count) {
    double sum = 0;
    for (int j = ctx / 2; j < ctx - 1; j++) {
        const float *x = logits + (size_t)j * V;
        double m = x[0], s = 0;
        for (int i = 1; i < V; i++) if (x[i] > m) m = x[i];
        for (int i = 0; i < V; i++) s += exp((double)x[i] - m);
        sum += m + log(s) - (double)x[win[j + 1]];
        (*count)++;
    }
    return sum;
}

static okv_program *open_export(const char *fixture, const char *name, int qlinear) {
    char dir[256];
    snprintf(dir, sizeof dir, FIXTURES "%s", fixture);
    okv_export_options o;
    okv_export_options_default(&o);
    o.dtype = OKV_F32;
    o.qlinear = qlinear;
    char *out = e2e_path(name);
    okv_error err = {0};
    okv_program *p = NULL;
    okv_status st = okv_export(dir, out, &o, &err);
    if (!st) st = okv_program_open(out, &p, &err);
    CHECKF(st == OKV_OK, "%s: %s", fixture, err.message);
    free(out);
    return p;
}

static void test_oracle_window(okv_program *p) {
    int32_t *ids;
    int n = e2e_ref_tokens(FIXTURES "llama32-tiny", &ids);
    float *ref = e2e_ref_logits(FIXTURES "llama32-tiny", (size_t)n * 512);
    int64_t count = 0;
    double want = exp(nll_by_hand(ref, ids, n, 512, &count) / (double)count);
    okv_eval_options o;
    okv_eval_options_default(&o);
    o.ctx = n;
    o.runner.n_threads = 2;
    okv_eval_result r;
    okv_error err = {0};
    CHECK_OK(okv_eval_perplexity(p, NULL, ids, n, &o, &r, &err), &err);
    printf("one window of %d: perplexity %.6f (oracle by hand %.6f), %lld scored\n", n, r.ppl, want, (long long)r.n_scored);
    CHECKF(fabs(r.ppl - want) <= 1e-4 * want, "perplexity %.8f vs oracle %.8f", r.ppl, want);
    CHECK(r.n_windows == 1 && r.n_scored == count && r.n_scored == n - 1 - n / 2);
    CHECK(r.kl == 0 && r.top1 == 0);   /* no base */
    free(ref);
    free(ids);
}

/* 6 windows of 16 over 100 tokens (the 4-token tail is not scored), BOS
 * substituted, against logits of one-token steps on fresh caches. */
static void test_windows(okv_program *p) {
    int32_t *ref_ids;
    int nr = e2e_ref_tokens(FIXTURES "llama32-tiny", &ref_ids);
    int n = 100, ctx = 16, bos = 7;
    int32_t ids[100];
    for (int i = 0; i < n; i++) ids[i] = ref_ids[(i * 7) % nr];
    double sum = 0;
    int64_t count = 0;
    e2e_run_opts ro;
    e2e_opts_default(&ro);
    ro.chunk = 1;
    for (int w = 0; w + ctx <= n; w += ctx) {
        int32_t win[16];
        memcpy(win, ids + w, sizeof win);
        win[0] = bos;
        float *logits = e2e_run(p, win, ctx, &ro);
        if (logits) sum += nll_by_hand(logits, win, ctx, 512, &count);
        free(logits);
    }
    double want = exp(sum / (double)count);
    okv_eval_options o;
    okv_eval_options_default(&o);
    o.ctx = ctx;
    o.bos_id = bos;
    okv_eval_result r;
    okv_error err = {0};
    CHECK_OK(okv_eval_perplexity(p, NULL, ids, n, &o, &r, &err), &err);
    printf("6 windows of 16: perplexity %.6f (by hand %.6f)\n", r.ppl, want);
    CHECKF(fabs(r.ppl - want) <= 1e-5 * want, "perplexity %.8f vs %.8f", r.ppl, want);
    CHECK(r.n_windows == 6 && r.n_scored == count && count == 6 * 7);
    free(ref_ids);
}

static void test_against_base(okv_program *p, okv_program *q4) {
    int32_t *ids;
    int n = e2e_ref_tokens(FIXTURES "llama32-tiny", &ids);
    okv_eval_options o;
    okv_eval_options_default(&o);
    o.ctx = 20;
    okv_eval_result self, q, alone;
    okv_error err = {0};
    CHECK_OK(okv_eval_perplexity(p, p, ids, n, &o, &self, &err), &err);
    CHECKF(self.kl == 0 && self.kl_max == 0 && self.top1 == 1 && self.base_ppl == self.ppl,
           "self: kl %g max %g top1 %g ppl %g/%g", self.kl, self.kl_max, self.top1, self.ppl, self.base_ppl);
    CHECK_OK(okv_eval_perplexity(p, NULL, ids, n, &o, &alone, &err), &err);
    CHECK_OK(okv_eval_perplexity(q4, p, ids, n, &o, &q, &err), &err);
    printf("q4 vs fp32: ppl %.4f vs %.4f, KL %.5f (max %.4f), top-1 %.3f\n", q.ppl, q.base_ppl, q.kl, q.kl_max, q.top1);
    CHECK(q.kl > 0 && q.kl_max >= q.kl && q.top1 > 0 && q.top1 <= 1);
    CHECK(fabs(q.base_ppl - alone.ppl) <= 1e-9 * alone.ppl && q.ppl != alone.ppl);
    free(ids);
}

static void test_errors(okv_program *p, okv_program *other_vocab) {
    int32_t ids[64] = {0};
    okv_eval_options o;
    okv_eval_options_default(&o);
    okv_eval_result r;
    okv_error err = {0};
    o.ctx = 2;
    CHECK(okv_eval_perplexity(p, NULL, ids, 64, &o, &r, &err) == OKV_ERR_INVALID && strstr(err.message, "window of 2 tokens"));
    o.ctx = 128;
    CHECK(okv_eval_perplexity(p, NULL, ids, 64, &o, &r, &err) == OKV_ERR_INVALID && strstr(err.message, "64 tokens"));
    o.ctx = 1 << 20;
    CHECK(okv_eval_perplexity(p, NULL, ids, 64, &o, &r, &err) == OKV_ERR_INVALID && strstr(err.message, "max_ctx_len"));
    o.ctx = 16;
    CHECK(okv_eval_perplexity(p, other_vocab, ids, 64, &o, &r, &err) == OKV_ERR_INVALID && strstr(err.message, "vocabulary"));
    ids[3] = 99999;
    CHECK(okv_eval_perplexity(p, NULL, ids, 64, &o, &r, &err) == OKV_ERR_INVALID && strstr(err.message, "99999"));
}

int main(void) {
    okv_program *p = open_export("llama32-tiny", "l.f32.okv", 0), *q4 = open_export("llama32-tiny", "l.q4.okv", 4);
    okv_program *qw = open_export("qwen3-tiny", "q.f32.okv", 0);
    if (p && q4 && qw) {
        test_oracle_window(p);
        test_windows(p);
        test_against_base(p, q4);
        test_errors(p, qw);
    }
    okv_program_free(p);
    okv_program_free(q4);
    okv_program_free(qw);
    e2e_cleanup();
    return okv_test_finish();
}
