/* Tests the sampler on real vocabulary sizes (262144, Gemma's) and on
 * candidate lists long enough to take the heap (top-k), threshold and
 * quickselect (top-p) paths. Expected sets are computed here with a plain
 * sort; speed is measured in bench/sampling, not here. */
#include <math.h>

#include "offkv_sample.h"
#include "okv_test.h"
#include "sampler_test_util.h"

enum { BIG = 262144 };



/* Logits quantised to steps of 1/8 over [-scale/2, scale/2): many ties. */
static void fill_random(float *x, int n, uint32_t seed, float scale) {
    for (int i = 0; i < n; i++) x[i] = (float)(lcg(&seed) % 8192) / 8192.0f * scale - scale / 2;
}

typedef struct ref_cand { float l; int id; } ref_cand;

/* Descending logit, ascending id. */
static int ref_compare(const void *a, const void *b) {
    const ref_cand *x = a, *y = b;
    if (x->l != y->l) return x->l > y->l ? -1 : 1;
    return x->id - y->id;
}

static ref_cand *sorted_copy(const float *x, int n) {
    ref_cand *r = malloc((size_t)n * sizeof *r);
    for (int i = 0; i < n; i++) r[i] = (ref_cand){x[i], i};
    qsort(r, (size_t)n, sizeof *r, ref_compare);
    return r;
}

static void test_greedy_big(void) {
    float *x = malloc(BIG * sizeof *x);
    fill_random(x, BIG, 1, 20.0f);
    x[200000] = 50.0f;
    okv_sampler *s = make(BIG, false, 1.0f, 0, 1.0f, 0.0f, 1.0f, 0);
    CHECK(okv_sampler_sample(s, x) == 200000);
    x[150000] = 50.0f;
    CHECK(okv_sampler_sample(s, x) == 150000);
    /* penalty on many seen ids: 50 / 2 = 25 < 30 */
    okv_error err;
    x[7] = 30.0f;
    for (int i = 100000; i < 160000; i += 7) CHECK_OK(okv_sampler_accept(s, i, &err), &err);
    okv_sampler_free(s);
    s = make(BIG, false, 1.0f, 0, 1.0f, 0.0f, 2.0f, 0);
    CHECK_OK(okv_sampler_accept(s, 150000, &err), &err);
    CHECK(okv_sampler_sample(s, x) == 200000);
    CHECK_OK(okv_sampler_accept(s, 200000, &err), &err);
    CHECK(okv_sampler_sample(s, x) == 7);
    okv_sampler_free(s);
    free(x);
}

/* top-k 50 over 262144 tied-heavy logits: every draw lies in the 50 largest
 * plus anything tied with the 50th; top-k 1 is the argmax. */
static void test_top_k_big(void) {
    float *x = malloc(BIG * sizeof *x);
    fill_random(x, BIG, 2, 16.0f);
    ref_cand *r = sorted_copy(x, BIG);
    float kth = r[49].l;
    int in_set = 0;
    while (in_set < BIG && r[in_set].l >= kth) in_set++;
    CHECK(in_set >= 50);
    okv_sampler *s = make(BIG, true, 1.0f, 50, 1.0f, 0.0f, 1.0f, 5);
    int outside = 0, distinct = 0;
    char *hit = calloc(BIG, 1);
    for (int d = 0; d < 400; d++) {
        int t = okv_sampler_sample(s, x);
        if (t < 0 || x[t] < kth) outside++;
        else if (!hit[t]) { hit[t] = 1; distinct++; }
    }
    CHECK(outside == 0);
    CHECKF(distinct > 10, "only %d distinct tokens in the top-k set were drawn", distinct);
    okv_sampler_free(s);
    /* top_k 1 keeps the maximum and its ties (HF semantics) ... */
    s = make(BIG, true, 1.0f, 1, 1.0f, 0.0f, 1.0f, 5);
    for (int d = 0; d < 20; d++) {
        int t = okv_sampler_sample(s, x);
        CHECK(t >= 0 && x[t] == r[0].l);
    }
    /* ... so with a unique maximum it is greedy */
    x[r[0].id] += 1.0f;
    for (int d = 0; d < 20; d++) CHECK(okv_sampler_sample(s, x) == r[0].id);
    okv_sampler_free(s);
    free(hit);
    free(r);
    free(x);
}

/* Token 1000 has p .5, token 2000 p .3, the other 262142 share .2. */
static void fill_two_peaks(float *x) {
    float rest = logf(0.2f / (BIG - 2));
    for (int i = 0; i < BIG; i++) x[i] = rest;
    x[1000] = logf(0.5f);
    x[2000] = logf(0.3f);
}

typedef struct tally { long a, b, rest, bad; int max_rest_id; } tally;

static tally draw_two_peaks(okv_sampler *s, const float *x, int n) {
    tally t = {0, 0, 0, 0, -1};
    for (int d = 0; d < n; d++) {
        int id = okv_sampler_sample(s, x);
        if (id == 1000) t.a++;
        else if (id == 2000) t.b++;
        else if (id >= 0 && id < BIG) {
            t.rest++;
            if (id > t.max_rest_id) t.max_rest_id = id;
        } else t.bad++;
    }
    return t;
}

static void test_two_peaks(void) {
    float *x = malloc(BIG * sizeof *x);
    fill_two_peaks(x);
    enum { N = 500 };   /* sd of a frequency <= .023 */

    /* no filter: .5 / .3 / .2 */
    okv_sampler *s = make(BIG, true, 1.0f, 0, 1.0f, 0.0f, 1.0f, 11);
    tally t = draw_two_peaks(s, x, N);
    CHECK(t.bad == 0);
    CHECK_NEAR((double)t.a / N, 0.5, 0.07);
    CHECK_NEAR((double)t.b / N, 0.3, 0.07);
    CHECK_NEAR((double)t.rest / N, 0.2, 0.07);
    okv_sampler_free(s);

    /* top_p .7: token 2000 crosses .7 and stays: 5/8, 3/8, nothing else */
    s = make(BIG, true, 1.0f, 0, 0.7f, 0.0f, 1.0f, 12);
    t = draw_two_peaks(s, x, N);
    CHECK(t.rest == 0 && t.bad == 0);
    CHECK_NEAR((double)t.a / N, 5.0 / 8, 0.07);
    okv_sampler_free(s);

    /* min_p .5: .3 >= .25 stays, the rest goes; min_p .7: only token 1000 */
    s = make(BIG, true, 1.0f, 0, 1.0f, 0.5f, 1.0f, 13);
    t = draw_two_peaks(s, x, N);
    CHECK(t.rest == 0 && t.bad == 0);
    CHECK_NEAR((double)t.b / N, 3.0 / 8, 0.07);
    okv_sampler_free(s);
    s = make(BIG, true, 1.0f, 0, 1.0f, 0.7f, 1.0f, 13);
    t = draw_two_peaks(s, x, 200);
    CHECK(t.a == 200);
    okv_sampler_free(s);

    /* top_p .9: after .8 of the peaks, the tied rest tokens join in id
     * order until the mass before the next reaches .9: (.1 / q) = 131071
     * of them (q = .2 / 262142), i.e. ids 0..131072 minus the peak ids.
     * The nucleus has mass .9: rest .1/.9 of the draws. */
    s = make(BIG, true, 1.0f, 0, 0.9f, 0.0f, 1.0f, 14);
    enum { N2 = 200 };
    t = draw_two_peaks(s, x, N2);
    CHECK(t.bad == 0);
    CHECK_NEAR((double)t.rest / N2, 0.1 / 0.9, 0.07);
    CHECK_NEAR((double)t.a / N2, 0.5 / 0.9, 0.08);
    /* allow a few ids of float slack at the boundary */
    CHECKF(t.max_rest_id <= 131072 + 8 && t.max_rest_id > 90000, "max rest id %d", t.max_rest_id);
    okv_sampler_free(s);
    free(x);
}

/* All 262144 logits equal: top_p .5 keeps exactly ids 0..131071. */
static void test_flat_top_p(void) {
    float *x = calloc(BIG, sizeof *x);
    okv_sampler *s = make(BIG, true, 1.0f, 0, 0.5f, 0.0f, 1.0f, 21);
    int max_id = -1, bad = 0;
    for (int d = 0; d < 300; d++) {
        int id = okv_sampler_sample(s, x);
        if (id < 0 || id >= BIG / 2) bad++;
        if (id > max_id) max_id = id;
    }
    CHECK(bad == 0);
    CHECK(max_id > 120000);
    okv_sampler_free(s);
    free(x);
}

/* A few thousand candidates with many ties: the quickselect nucleus must be
 * exactly the prefix of the (weight desc, id asc) order that a sort gives. */
static void test_nucleus_matches_sort(void) {
    enum { V = 3000, N = 10000 };
    float x[V];
    const float top_ps[3] = {0.3f, 0.5f, 0.83f};
    for (int round = 0; round < 3; round++) {
        fill_random(x, V, 40 + round, 3.0f);
        float top_p = top_ps[round];
        ref_cand *r = sorted_copy(x, V);
        /* reference nucleus in doubles; the sampler works on float weights,
         * so only a boundary token within float slack may differ */
        double z = 0;
        for (int i = 0; i < V; i++) z += exp((double)r[i].l - r[0].l);
        double before = 0;
        int k = 0;
        while (k < V && (k == 0 || before < top_p * z)) before += exp((double)r[k++].l - r[0].l);
        char *in = calloc(V, 1);
        for (int i = 0; i < k; i++) in[r[i].id] = 1;
        okv_sampler *s = make(V, true, 1.0f, 0, top_p, 0.0f, 1.0f, 50 + round);
        int outside = 0, last_hits = 0;
        for (int d = 0; d < N; d++) {
            int t = okv_sampler_sample(s, x);
            if (t < 0 || !in[t]) outside++;
            if (t == r[k - 1].id) last_hits++;
        }
        CHECKF(outside == 0, "top_p %.2f: %d draws outside the %d-token nucleus", top_p, outside, k);
        CHECKF(last_hits > 0, "top_p %.2f: boundary token %d never drawn", top_p, r[k - 1].id);
        CHECK(k > 100);
        okv_sampler_free(s);
        free(in);
        free(r);
    }
}

int main(void) {
    test_greedy_big();
    test_top_k_big();
    test_two_peaks();
    test_flat_top_p();
    test_nucleus_matches_sort();
    return okv_test_finish();
}
