/* The calibration pass of activation-aware quantization (okv_calib.c, export
 * --calibration): its statistics against an independent computation, and
 * its input errors.
 *  - llama32-tiny (fp32): layer 0's q/k/v projections multiply
 *    RMSNorm(embedding[id]) * input_layernorm.weight, computed here from the
 *    safetensors in double; the collected sum of x^2 per channel matches it
 *    (and q, k and v carry identical sums), over windows that each begin with
 *    BOS, with the row count = tokens + one BOS per window.
 *  - Every linear of every layer has statistics; the LM head has none (the
 *    pass asks for no logits).
 *  - A calibrated 4w + 8w export changes every linear's bytes and none of
 *    the embedding's (it has no statistics), and is deterministic (two
 *    exports give the same file).
 *  - Bad calibration input is a one-line export error naming the file or
 *    token, and no program is left: missing file, empty file, a text with no
 *    tokenizer to read it, a token outside the vocabulary, calibration
 *    without quantization. */
#include "e2e_util.h"

#include "okv_calib.h"
#include "okv_format.h"
#include "okv_safetensors.h"

#define LLAMA FIXTURES "llama32-tiny"

static const float *st_f32(okv_st_set *set, const char *name, int64_t n, float *dst) {
    for (int i = 0; i < okv_st_count(set); i++) {
        const okv_st_tensor *t = okv_st_get(set, i);
        if (strcmp(t->name, name)) continue;
        okv_convert(dst, OKV_F32, t->data, t->dtype, (size_t)n);
        return dst;
    }
    CHECKF(0, "no tensor %s", name);
    return NULL;
}

static void test_stats_match(void) {
    char *prog = e2e_export(LLAMA, "calib-base.okv", OKV_F32, 0);
    if (!prog) return;
    enum { H = 64, V = 512, BOS = 256, CTX = 16, NT = 40 };
    int32_t ids[NT];
    for (int i = 0; i < NT; i++) ids[i] = (int32_t)((i * 37 + 11) % V);
    okv_calib c = {0};
    okv_calib_source src = {.ids = ids, .n_ids = NT, .ctx = CTX, .n_threads = 2};
    okv_error err = {0};
    CHECK_OK(okv_calib_collect(prog, &src, &c, &err), &err);
    /* independent: windows of CTX - 1 tokens after a BOS */
    okv_st_set *set = NULL;
    CHECK_OK(okv_st_open_dir(LLAMA, &set, &err), &err);
    float *emb = malloc(sizeof(float) * V * H), ln[H];
    double want[H] = {0};
    int64_t rows = 0;
    if (set && st_f32(set, "model.embed_tokens.weight", (int64_t)V * H, emb) &&
        st_f32(set, "model.layers.0.input_layernorm.weight", H, ln)) {
        for (int at = 0; at < NT; at += CTX - 1)
            for (int j = -1; j < CTX - 1 && at + j < NT; j++) {
                const float *e = emb + (size_t)(j < 0 ? BOS : ids[at + j]) * H;
                double ms = 0;
                for (int k = 0; k < H; k++) ms += (double)e[k] * e[k];
                double inv = 1.0 / sqrt(ms / H + 1e-5);
                for (int k = 0; k < H; k++) {
                    double x = e[k] * inv * ln[k];
                    want[k] += x * x;
                }
                rows++;
            }
    }
    CHECKF(rows == NT + 3 && c.tokens == rows, "rows %lld, tokens %lld", (long long)rows, (long long)c.tokens);
    const char *qkv[3] = {"layers.0.self_attn.q_proj.weight", "layers.0.self_attn.k_proj.weight",
                          "layers.0.self_attn.v_proj.weight"};
    const okv_calib_stat *q = NULL;
    for (int i = 0; i < c.n; i++)
        if (strstr(c.stats[i].name, qkv[0])) q = &c.stats[i];
    CHECKF(q != NULL, "no statistics for %s (%d tensors)", qkv[0], c.n);
    if (q) {
        double worst = 0;
        for (int k = 0; k < H; k++) {
            double rel = fabs(q->sum_x2[k] - want[k]) / want[k];
            worst = rel > worst ? rel : worst;
        }
        printf("layer 0 q_proj: %lld rows, max relative difference of sum x^2 %.3g\n", (long long)q->rows, worst);
        CHECKF(q->K == H && q->rows == rows && worst < 1e-5, "K %d rows %lld worst %.3g", q->K, (long long)q->rows, worst);
        for (int i = 1; i < 3; i++) {
            const okv_calib_stat *o = NULL;
            for (int s = 0; s < c.n; s++)
                if (strstr(c.stats[s].name, qkv[i])) o = &c.stats[s];
            CHECKF(o && o->K == H && !memcmp(o->sum_x2, q->sum_x2, sizeof(double) * H), "%s differs from q_proj", qkv[i]);
        }
        float imp[H];
        CHECK(okv_calib_importance(&c, q->name, H, imp));
        CHECK(fabsf(imp[5] - (float)(want[5] / rows)) < 1e-3f * imp[5]);
        CHECK(!okv_calib_importance(&c, q->name, H + 1, imp));
    }
    /* 4 layers x 7 linears, no head */
    int head = 0;
    for (int i = 0; i < c.n; i++) head += strstr(c.stats[i].name, "embed") || strstr(c.stats[i].name, "lm_head");
    CHECKF(c.n == 28 && head == 0, "%d tensors with statistics, %d of them the head", c.n, head);
    okv_calib_free(&c);
    okv_st_free(set);
    free(emb);
    free(prog);
}

/* block NULL: offkv's own 4w / 8w planes; else --qlinear block --qembedding q8_0 */
static okv_status export_cal(const char *out, bool calibrated, const char *block, okv_error *err) {
    static int32_t ids[200];
    for (int i = 0; i < 200; i++) ids[i] = (int32_t)((i * 101 + 7) % 250);
    okv_export_options o;
    okv_export_options_default(&o);
    o.dtype = OKV_F32;
    o.qlinear = 4;
    o.qembedding = 8;
    o.qlinear_block = block;
    o.qembedding_block = block ? "q8_0" : NULL;
    if (calibrated) { o.calibration_ids = ids; o.n_calibration_ids = 200; o.calibration_ctx = 64; }
    return okv_export(LLAMA, out, &o, err);
}

static void test_calibrated_export(const char *block) {
    char *a = e2e_path("cal-a.okv"), *b = e2e_path("cal-b.okv"), *u = e2e_path("cal-u.okv");
    okv_error err = {0};
    CHECK_OK(export_cal(a, true, block, &err), &err);
    CHECK_OK(export_cal(b, true, block, &err), &err);
    CHECK_OK(export_cal(u, false, block, &err), &err);
    char *da = NULL, *db = NULL;
    size_t la = 0, lb = 0;
    CHECK_OK(okv_read_file(a, &da, &la, &err), &err);
    CHECK_OK(okv_read_file(b, &db, &lb, &err), &err);
    CHECKF(la == lb && la > 0 && !memcmp(da, db, la), "two calibrated exports differ (%zu, %zu bytes)", la, lb);
    free(da);
    free(db);
    okv_program_file *pa = NULL, *pu = NULL;
    CHECK_OK(okv_format_open(a, &pa, &err), &err);
    CHECK_OK(okv_format_open(u, &pu, &err), &err);
    int linears = 0, changed = 0, emb_same = 0;
    for (int i = 0; pa && pu && i < pa->n_tensors && i < pu->n_tensors; i++) {
        const okv_tensor *x = &pa->tensors[i], *y = &pu->tensors[i];
        if (x->dtype != OKV_T_Q || strcmp(x->name, y->name) || x->nbytes != y->nbytes) continue;
        bool same = !memcmp(x->data, y->data, x->nbytes);
        if (strstr(x->name, "embed")) emb_same += same;
        else { linears++; changed += !same; }
    }
    printf("%s, calibrated vs unweighted: %d/%d linears changed, embedding %s\n", block ? block : "4w", changed, linears,
           emb_same ? "same" : "changed");
    CHECKF(linears == 28 && changed == linears && emb_same == 1, "%d/%d linears changed, embedding same %d", changed,
           linears, emb_same);
    okv_format_close(pa);
    okv_format_close(pu);
    free(a);
    free(b);
    free(u);
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (f) { fputs(text, f); fclose(f); }
}

static void expect_error(const char *dir, okv_export_options *o, const char *want1, const char *want2) {
    char *out = e2e_path("calib-bad.okv");
    okv_error err = {0};
    okv_status st = okv_export(dir, out, o, &err);
    printf("expected error: %s\n", err.message);
    CHECKF(st != OKV_OK && strstr(err.message, want1) && (!want2 || strstr(err.message, want2)) &&
               !strchr(err.message, '\n'),
           "status %d: '%s' (want '%s')", st, err.message, want1);
    CHECK(access(out, F_OK) != 0);
    free(out);
}

static void test_bad_input(void) {
    okv_export_options o;
    okv_export_options_default(&o);
    o.qlinear = 4;
    char *missing = e2e_path("no-such-calibration.txt"), *empty = e2e_path("empty.txt"), *text = e2e_path("text.txt");
    write_text(empty, "");
    write_text(text, "Some calibration text.\n");
    o.calibration_file = missing;
    expect_error(LLAMA, &o, "no-such-calibration.txt", "No such file");
    o.calibration_file = empty;
    expect_error(LLAMA, &o, "empty.txt", "is empty");
    o.calibration_file = text;   /* the fixture has no tokenizer.json */
    expect_error(LLAMA, &o, "text.txt", "tokenizer");
    o.calibration_file = NULL;
    int32_t ids[4] = {1, 2, 999, 3};
    o.calibration_ids = ids;
    o.n_calibration_ids = 4;
    expect_error(LLAMA, &o, "calibration token 2", "999");
    o.qlinear = 0;
    ids[2] = 5;
    expect_error(LLAMA, &o, "calibration needs --qlinear or --qembedding", NULL);
    free(missing);
    free(empty);
    free(text);
}

int main(void) {
    test_stats_match();
    test_calibrated_export(NULL);
    test_calibrated_export("q4_0"); /* block types through the same calibration pass */
    test_bad_input();
    e2e_cleanup();
    return okv_test_finish();
}
