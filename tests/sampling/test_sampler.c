/* Tests the sampler's deterministic behaviour: greedy argmax and its ties,
 * the temperature -> 0 and top-k = 1 limits, reproducibility per seed,
 * the repetition penalty on hand examples, bad parameters, odd logits
 * (NaN, -inf, +inf) and that the caller's row is left alone. */
#include <math.h>
#include <string.h>

#include "offkv_sample.h"
#include "okv_test.h"
#include "sampler_test_util.h"



static void fill_random(float *x, int n, uint32_t seed, float scale) {
    for (int i = 0; i < n; i++) x[i] = ((float)(lcg(&seed) % 100000) / 100000.0f - 0.5f) * scale;
}

static int reference_argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

static void test_defaults(void) {
    okv_sampler_params p = okv_sampler_params_default();
    CHECK(!p.do_sample);
    CHECK(p.temperature == 1.0f);
    CHECK(p.top_k == 50);
    CHECK(p.top_p == 1.0f);
    CHECK(p.min_p == 0.0f);
    CHECK(p.repetition_penalty == 1.0f);
}

static void test_greedy_and_ties(void) {
    okv_sampler *s = make(6, false, 1.0f, 0, 1.0f, 0.0f, 1.0f, 1);
    float a[6] = {0.5f, 3.0f, -1.0f, 3.0f, 2.9f, 3.0f};
    CHECK(okv_sampler_sample(s, a) == 1);          /* lowest id of the tied max */
    float b[6] = {-7.0f, -3.0f, -2.0f, -9.0f, -2.5f, -100.0f};
    CHECK(okv_sampler_sample(s, b) == 2);
    float c[6] = {NAN, 1.0f, NAN, 4.0f, NAN, -1.0f};
    CHECK(okv_sampler_sample(s, c) == 3);          /* NaN never wins */
    float d[6] = {-INFINITY, -INFINITY, NAN, -INFINITY, -INFINITY, -INFINITY};
    CHECK(okv_sampler_sample(s, d) == -1);
    float e[6] = {1.0f, INFINITY, 2.0f, INFINITY, 0.0f, 0.0f};
    CHECK(okv_sampler_sample(s, e) == 1);
    okv_sampler_free(s);

    /* temperature 0 is greedy even with do_sample, and draws nothing */
    s = make(6, true, 0.0f, 0, 1.0f, 0.0f, 1.0f, 1);
    for (int i = 0; i < 20; i++) CHECK(okv_sampler_sample(s, a) == 1);
    okv_sampler_free(s);
}

static void test_caller_row_untouched(void) {
    enum { V = 64 };
    float x[V], copy[V];
    fill_random(x, V, 3, 8.0f);
    memcpy(copy, x, sizeof x);
    okv_sampler *s = make(V, true, 0.7f, 10, 0.9f, 0.05f, 1.3f, 5);
    okv_error err;
    for (int i = 0; i < V; i += 3) CHECK_OK(okv_sampler_accept(s, i, &err), &err);
    for (int i = 0; i < 50; i++) okv_sampler_sample(s, x);
    CHECK(memcmp(x, copy, sizeof x) == 0);
    okv_sampler_free(s);
}

/* Logits spread by >= 0.01; at T = 1e-3 the runner-up has weight <= e^-10. */
static void test_temperature_limit_is_greedy(void) {
    enum { V = 300 };
    float x[V];
    int mismatches = 0;
    for (uint32_t row = 0; row < 50; row++) {
        for (int i = 0; i < V; i++) x[i] = (float)((i * 37 + row * 11) % V) * 0.01f;
        okv_sampler *greedy = make(V, false, 1.0f, 0, 1.0f, 0.0f, 1.0f, 0);
        okv_sampler *cold = make(V, true, 1e-4f, 0, 1.0f, 0.0f, 1.0f, row);
        int g = okv_sampler_sample(greedy, x);
        CHECK(g == reference_argmax(x, V));
        for (int k = 0; k < 20; k++)
            if (okv_sampler_sample(cold, x) != g) mismatches++;
        okv_sampler_free(greedy);
        okv_sampler_free(cold);
    }
    CHECK(mismatches == 0);
}

static void test_top_k_one_is_greedy(void) {
    enum { V = 1000 };
    float x[V];
    int mismatches = 0;
    for (uint32_t row = 0; row < 20; row++) {
        fill_random(x, V, row + 100, 20.0f);
        int g = reference_argmax(x, V);
        okv_sampler *s = make(V, true, 1.5f, 1, 1.0f, 0.0f, 1.0f, row);
        for (int k = 0; k < 20; k++)
            if (okv_sampler_sample(s, x) != g) mismatches++;
        okv_sampler_free(s);
    }
    CHECK(mismatches == 0);
    /* top_p 0 keeps exactly the most likely token too */
    fill_random(x, V, 77, 2.0f);
    okv_sampler *s = make(V, true, 1.0f, 0, 0.0f, 0.0f, 1.0f, 9);
    int g = reference_argmax(x, V);
    for (int k = 0; k < 50; k++) CHECK(okv_sampler_sample(s, x) == g);
    okv_sampler_free(s);
}

static void draw_sequence(okv_sampler *s, const float *x, int *out, int n) {
    for (int i = 0; i < n; i++) out[i] = okv_sampler_sample(s, x);
}

static void test_reproducible(void) {
    enum { V = 100, N = 500 };
    float x[V];
    fill_random(x, V, 11, 3.0f);   /* a flat-ish distribution: many outcomes */
    int a[N], b[N], c[N], d[N];
    okv_sampler *s1 = make(V, true, 1.0f, 0, 0.95f, 0.0f, 1.0f, 1234);
    okv_sampler *s2 = make(V, true, 1.0f, 0, 0.95f, 0.0f, 1.0f, 1234);
    okv_sampler *s3 = make(V, true, 1.0f, 0, 0.95f, 0.0f, 1.0f, 1235);
    draw_sequence(s1, x, a, N);
    draw_sequence(s2, x, b, N);
    draw_sequence(s3, x, c, N);
    CHECK(memcmp(a, b, sizeof a) == 0);
    int differ = 0, distinct = 0;
    for (int i = 0; i < N; i++) differ += a[i] != c[i];
    CHECKF(differ > N / 2, "only %d of %d draws differ between seeds", differ, N);
    for (int t = 0; t < V; t++) {
        for (int i = 0; i < N; i++)
            if (a[i] == t) { distinct++; break; }
    }
    CHECK(distinct > 20);
    /* reset restarts the stream (and forgets accepted tokens) */
    okv_sampler_reset(s1);
    draw_sequence(s1, x, d, N);
    CHECK(memcmp(a, d, sizeof a) == 0);
    okv_sampler_free(s1);
    okv_sampler_free(s2);
    okv_sampler_free(s3);
}

/* OpenAI penalties: l - count * frequency - presence, over generated ids
 * only (prompt ids accepted with okv_sampler_accept are not counted). */
static void test_openai_penalties_hand(void) {
    okv_error err;
    okv_sampler_params p = okv_sampler_params_default();
    p.presence_penalty = 0.6f;
    okv_sampler *s = NULL;
    CHECK_OK(okv_sampler_create(3, &p, &s, &err), &err);
    float l[3] = {2.0f, 1.5f, -3.0f};
    CHECK_OK(okv_sampler_accept(s, 0, &err), &err);          /* a prompt id: no penalty */
    CHECK(okv_sampler_sample(s, l) == 0);
    CHECK_OK(okv_sampler_accept_generated(s, 0, &err), &err); /* 2.0 - 0.6 = 1.4 < 1.5 */
    CHECK(okv_sampler_sample(s, l) == 1);
    okv_sampler_free(s);

    p = okv_sampler_params_default();
    p.frequency_penalty = 0.3f;                              /* once: 2.0 - 0.3 = 1.7; twice: 1.4 */
    CHECK_OK(okv_sampler_create(3, &p, &s, &err), &err);
    CHECK_OK(okv_sampler_accept_generated(s, 0, &err), &err);
    CHECK(okv_sampler_sample(s, l) == 0);
    CHECK_OK(okv_sampler_accept_generated(s, 0, &err), &err);
    CHECK(okv_sampler_sample(s, l) == 1);
    okv_sampler_reset(s);                                    /* forgets the counts */
    CHECK(okv_sampler_sample(s, l) == 0);
    okv_sampler_free(s);

    p = okv_sampler_params_default();
    p.frequency_penalty = 2.5f;
    CHECK(okv_sampler_params_check(&p, &err) == OKV_ERR_INVALID && strstr(err.message, "frequency_penalty"));
    p.frequency_penalty = 0;
    p.presence_penalty = -2.1f;
    CHECK(okv_sampler_params_check(&p, &err) == OKV_ERR_INVALID && strstr(err.message, "presence_penalty"));
}

static void test_repetition_penalty_hand(void) {
    okv_error err;
    /* positive logits are divided: 2.0 / 2 = 1.0 < 1.5 */
    okv_sampler *s = make(3, false, 1.0f, 0, 1.0f, 0.0f, 2.0f, 0);
    float pos[3] = {2.0f, 1.5f, -3.0f};
    CHECK(okv_sampler_sample(s, pos) == 0);
    CHECK_OK(okv_sampler_accept(s, 0, &err), &err);
    CHECK(okv_sampler_sample(s, pos) == 1);
    /* accepting twice counts once (HF penalises the set of ids) */
    CHECK_OK(okv_sampler_accept(s, 0, &err), &err);
    float pos2[3] = {2.0f, 0.9f, -3.0f};   /* 2.0 / 2 = 1.0 > 0.9, /4 would not be */
    CHECK(okv_sampler_sample(s, pos2) == 0);
    okv_sampler_free(s);

    /* negative logits are multiplied: -1.0 * 2 = -2.0 < -1.5 */
    s = make(3, false, 1.0f, 0, 1.0f, 0.0f, 2.0f, 0);
    float neg[3] = {-1.0f, -1.5f, -9.0f};
    CHECK(okv_sampler_sample(s, neg) == 0);
    CHECK_OK(okv_sampler_accept(s, 0, &err), &err);
    CHECK(okv_sampler_sample(s, neg) == 1);
    /* a seen token at 0 stays 0 */
    float zero[3] = {0.0f, -0.1f, -0.2f};
    CHECK(okv_sampler_sample(s, zero) == 0);
    /* reset forgets the seen ids */
    okv_sampler_reset(s);
    CHECK(okv_sampler_sample(s, neg) == 0);
    okv_sampler_free(s);

    /* penalty < 1 favours seen tokens: 1.0 / 0.5 = 2.0 > 1.5 */
    s = make(3, false, 1.0f, 0, 1.0f, 0.0f, 0.5f, 0);
    float low[3] = {1.0f, 1.5f, 0.0f};
    CHECK(okv_sampler_sample(s, low) == 1);
    CHECK_OK(okv_sampler_accept(s, 0, &err), &err);
    CHECK(okv_sampler_sample(s, low) == 0);
    okv_sampler_free(s);

    /* the penalty also applies before sampling: with top_k 1 the seen
     * favourite drops out */
    s = make(3, true, 0.8f, 1, 1.0f, 0.0f, 3.0f, 0);
    float pk[3] = {3.0f, 2.0f, 1.0f};
    CHECK_OK(okv_sampler_accept(s, 0, &err), &err);
    for (int i = 0; i < 20; i++) CHECK(okv_sampler_sample(s, pk) == 1);
    okv_sampler_free(s);
}

/* Creating a sampler with p must fail, name `field`, and leave the output NULL. */
static void expect_bad_param(const okv_sampler_params *p, const char *field) {
    okv_sampler *s = (okv_sampler *)p;   /* must be reset to NULL on error */
    okv_error err = {0};
    CHECK(okv_sampler_create(10, p, &s, &err) == OKV_ERR_INVALID);
    CHECKF(s == NULL && strstr(err.message, field), "%s: %s", field, err.message);
}

static void test_bad_params(void) {
    okv_sampler_params p = okv_sampler_params_default();
    p.top_p = 1.5f;
    expect_bad_param(&p, "top_p");
    p = okv_sampler_params_default();
    p.temperature = -1.0f;
    expect_bad_param(&p, "temperature");
    p = okv_sampler_params_default();
    p.repetition_penalty = 0.0f;
    expect_bad_param(&p, "repetition_penalty");
    p = okv_sampler_params_default();
    p.min_p = NAN;
    expect_bad_param(&p, "min_p");
    p = okv_sampler_params_default();
    p.top_k = -1;
    expect_bad_param(&p, "top_k");
    p = okv_sampler_params_default();
    okv_sampler *s = NULL;
    okv_error err;
    CHECK(okv_sampler_create(0, &p, &s, &err) == OKV_ERR_INVALID);

    CHECK_OK(okv_sampler_create(10, &p, &s, &err), &err);
    CHECK(okv_sampler_accept(s, 10, &err) == OKV_ERR_INVALID);
    CHECK(strstr(err.message, "10") != NULL);
    CHECK(okv_sampler_accept(s, -1, &err) == OKV_ERR_INVALID);
    CHECK(okv_sampler_get_params(s)->top_k == 50);
    okv_sampler_free(s);
}

static void test_odd_logits_when_sampling(void) {
    float x[5] = {NAN, -INFINITY, 2.0f, NAN, 2.0f};
    okv_sampler *s = make(5, true, 1.0f, 0, 0.9f, 0.0f, 1.0f, 3);
    int seen2 = 0, seen4 = 0, other = 0;
    for (int i = 0; i < 400; i++) {
        int t = okv_sampler_sample(s, x);
        if (t == 2) seen2++;
        else if (t == 4) seen4++;
        else other++;
    }
    CHECK(other == 0 && seen2 > 100 && seen4 > 100);
    float none[5] = {NAN, -INFINITY, -INFINITY, NAN, NAN};
    CHECK(okv_sampler_sample(s, none) == -1);
    float inf[5] = {0.0f, INFINITY, 50.0f, 1.0f, INFINITY};
    for (int i = 0; i < 50; i++) {
        int t = okv_sampler_sample(s, inf);
        CHECK(t == 1 || t == 4);
    }
    okv_sampler_free(s);
    /* top-k larger than the vocabulary means no top-k */
    s = make(5, true, 1.0f, 100, 1.0f, 0.0f, 1.0f, 3);
    float flat[5] = {0, 0, 0, 0, 0};
    int hit[5] = {0};
    for (int i = 0; i < 500; i++) hit[okv_sampler_sample(s, flat)]++;
    for (int t = 0; t < 5; t++) CHECK(hit[t] > 50);
    okv_sampler_free(s);
}

int main(void) {
    test_defaults();
    test_greedy_and_ties();
    test_caller_row_untouched();
    test_temperature_limit_is_greedy();
    test_top_k_one_is_greedy();
    test_reproducible();
    test_repetition_penalty_hand();
    test_openai_penalties_hand();
    test_bad_params();
    test_odd_logits_when_sampling();
    return okv_test_finish();
}
