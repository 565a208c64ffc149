/* Statistical tests of the sampler: with fixed seeds, the frequencies of
 * many draws must match the filtered, renormalised distribution that each
 * test works out by hand from HuggingFace's rules. Logits are log-weights
 * (logit = ln w), so softmax gives w / sum(w) and the expected values are
 * simple fractions. Tokens the filters remove must never be drawn; the rest
 * must pass a chi-square bound far above chance for a correct sampler and
 * far below what a wrong filter or a wrong order would produce. */
#include <math.h>

#include "offkv_sample.h"
#include "okv_test.h"

enum { DRAWS = 100000, MAXV = 8 };

typedef struct dist_case {
    const char *name;
    int vocab;
    double weights[MAXV];   /* logits are ln(weight); weight 0 -> -inf */
    double logits_override[MAXV];
    bool use_override;
    float temperature;
    int32_t top_k;
    float top_p;
    float min_p;
    float penalty;
    int seen[MAXV];         /* ids accepted before sampling, -1 terminated */
    double expect[MAXV];    /* unnormalised expected probabilities */
} dist_case;

static void run_case(const dist_case *c, uint64_t seed) {
    okv_sampler_params p = okv_sampler_params_default();
    p.do_sample = true;
    p.temperature = c->temperature;
    p.top_k = c->top_k;
    p.top_p = c->top_p;
    p.min_p = c->min_p;
    p.repetition_penalty = c->penalty;
    p.seed = seed;
    okv_sampler *s = NULL;
    okv_error err;
    CHECK_OK(okv_sampler_create(c->vocab, &p, &s, &err), &err);
    if (!s) return;
    for (int i = 0; i < MAXV && c->seen[i] >= 0; i++) CHECK_OK(okv_sampler_accept(s, c->seen[i], &err), &err);

    float logits[MAXV];
    for (int i = 0; i < c->vocab; i++)
        logits[i] = c->use_override ? (float)c->logits_override[i]
                                    : (c->weights[i] > 0 ? (float)log(c->weights[i]) : -INFINITY);
    long count[MAXV] = {0};
    long bad = 0;
    for (int d = 0; d < DRAWS; d++) {
        int t = okv_sampler_sample(s, logits);
        if (t < 0 || t >= c->vocab) bad++;
        else count[t]++;
    }
    okv_sampler_free(s);
    CHECKF(bad == 0, "%s: %ld draws out of range", c->name, bad);

    double z = 0;
    for (int i = 0; i < c->vocab; i++) z += c->expect[i];
    double chi2 = 0;
    int df = -1;
    for (int i = 0; i < c->vocab; i++) {
        double e = c->expect[i] / z * DRAWS;
        if (e == 0) {
            CHECKF(count[i] == 0, "%s: token %d was filtered out but drawn %ld times", c->name, i, count[i]);
            continue;
        }
        chi2 += (count[i] - e) * (count[i] - e) / e;
        df++;
    }
    /* a chi-square variable exceeds df + 6 sqrt(2 df) + 6 with p < 1e-4 */
    double bound = df + 6 * sqrt(2.0 * (df > 0 ? df : 1)) + 6;
    CHECKF(chi2 <= bound, "%s: chi2 %.1f > %.1f (df %d); counts %ld %ld %ld %ld %ld", c->name, chi2, bound,
           df, count[0], count[1], count[2], count[3], count[4]);
}

#define NONE {-1}

static const dist_case cases[] = {
    {"plain T=1", 4, {4, 3, 2, 1}, {0}, false, 1.0f, 0, 1.0f, 0.0f, 1.0f, NONE, {4, 3, 2, 1}},
    /* p ~ w^(1/T): T = 0.5 squares the weights, T = 2 takes square roots */
    {"T=0.5", 4, {4, 3, 2, 1}, {0}, false, 0.5f, 0, 1.0f, 0.0f, 1.0f, NONE, {16, 9, 4, 1}},
    {"T=2", 4, {16, 9, 4, 1}, {0}, false, 2.0f, 0, 1.0f, 0.0f, 1.0f, NONE, {4, 3, 2, 1}},
    {"top_k=2", 4, {4, 3, 2, 1}, {0}, false, 1.0f, 2, 1.0f, 0.0f, 1.0f, NONE, {4, 3, 0, 0}},
    {"top_k=3 unordered", 5, {1, 5, 2, 0.5, 4}, {0}, false, 1.0f, 3, 1.0f, 0.0f, 1.0f, NONE, {0, 5, 2, 0, 4}},
    /* HF keeps every token tied with the k-th logit */
    {"top_k=2 tie", 4, {4, 2, 2, 1}, {0}, false, 1.0f, 2, 1.0f, 0.0f, 1.0f, NONE, {4, 2, 2, 0}},
    /* probabilities .2 .4 .1 .3 (ids 0..3); descending: id1 .4, id3 .3, id0 .2, id2 .1.
     * top_p .6: id3 brings the total from .4 to .7, crossing .6, and stays */
    {"top_p=0.6", 4, {2, 4, 1, 3}, {0}, false, 1.0f, 0, 0.6f, 0.0f, 1.0f, NONE, {0, 4, 0, 3}},
    {"top_p=0.75", 4, {2, 4, 1, 3}, {0}, false, 1.0f, 0, 0.75f, 0.0f, 1.0f, NONE, {2, 4, 0, 3}},
    {"top_p tiny", 4, {2, 4, 1, 3}, {0}, false, 1.0f, 0, 1e-6f, 0.0f, 1.0f, NONE, {0, 1, 0, 0}},
    /* exact boundary: four equal weights, cumulative .25 .5 .75 exactly.
     * HF removes a token once the mass before it is >= top_p, so top_p .5
     * keeps two (ties go to the lower id) and .25 keeps one */
    {"top_p=0.5 exact", 4, {1, 1, 1, 1}, {0}, false, 1.0f, 0, 0.5f, 0.0f, 1.0f, NONE, {1, 1, 0, 0}},
    {"top_p=0.25 exact", 4, {1, 1, 1, 1}, {0}, false, 1.0f, 0, 0.25f, 0.0f, 1.0f, NONE, {1, 0, 0, 0}},
    {"top_p=0.95", 4, {2, 4, 1, 3}, {0}, false, 1.0f, 0, 0.95f, 0.0f, 1.0f, NONE, {2, 4, 1, 3}},
    /* min_p: keep p >= min_p * p_max, i.e. w >= min_p * 4 */
    {"min_p=0.4", 4, {4, 3, 2, 1}, {0}, false, 1.0f, 0, 1.0f, 0.4f, 1.0f, NONE, {4, 3, 2, 0}},
    {"min_p=0.6", 4, {4, 3, 2, 1}, {0}, false, 1.0f, 0, 1.0f, 0.6f, 1.0f, NONE, {4, 3, 0, 0}},
    /* order: top-k renormalises before top-p. Over {4,3} the first token has
     * 4/7 >= .5, so only it survives (top-p alone would keep two) */
    {"top_k then top_p", 4, {4, 3, 2, 1}, {0}, false, 1.0f, 2, 0.5f, 0.0f, 1.0f, NONE, {1, 0, 0, 0}},
    /* order: top-p (.75 keeps 4,3,2) then min-p .3 (drops < 1.2: none of
     * them). min-p first would drop 1, renormalise, and top-p .75 over
     * 4/9, 3/9, 2/9 would then keep only two */
    {"top_p then min_p", 4, {4, 3, 2, 1}, {0}, false, 1.0f, 0, 0.75f, 0.3f, 1.0f, NONE, {4, 3, 2, 0}},
    /* order: temperature before top-p. At T=.5 the probabilities are
     * 16/30, 9/30, ...: the first alone reaches .5 */
    {"T=0.5 then top_p=0.5", 4, {4, 3, 2, 1}, {0}, false, 0.5f, 0, 0.5f, 0.0f, 1.0f, NONE, {1, 0, 0, 0}},
    /* all of them: top_k 3 -> {5,3,1}/9; top_p .8: 5/9 = .56 < .8, 8/9 >= .8
     * -> {5,3}; min_p .5: 3 >= 2.5 stays */
    {"k+p+min_p", 5, {5, 3, 1, 0.5, 0.5}, {0}, false, 1.0f, 3, 0.8f, 0.5f, 1.0f, NONE, {5, 3, 0, 0, 0}},
    /* weight 0 (logit -inf) is never drawn */
    {"-inf logit", 3, {1, 0, 1}, {0}, false, 1.0f, 0, 1.0f, 0.0f, 1.0f, NONE, {1, 0, 1}},
};

/* T=2 and top_p .65: weights become sqrt: 2, 1.732, 1.414, 1 (sum 6.146);
 * cumulative .325, .607 < .65, so three tokens stay. At T=1 the same top_p
 * would keep two (.4, .7). */
static void test_temperature_before_top_p(void) {
    dist_case c = {"T=2 then top_p=0.65", 4, {4, 3, 2, 1}, {0}, false, 2.0f, 0, 0.65f, 0.0f, 1.0f,
                   NONE, {2, sqrt(3.0), sqrt(2.0), 0}};
    run_case(&c, 77);
}

/* Repetition penalty 2 on ids 0 and 2: ln 4 -> ln 2 (divided), -1 -> -2
 * (multiplied), so the weights become 2, 2, e^-2, e^-2. */
static void test_penalty_distribution(void) {
    dist_case c = {"penalty", 4, {0}, {log(4.0), log(2.0), -1.0, -2.0}, true, 1.0f, 0, 1.0f, 0.0f, 2.0f,
                   {0, 2, -1}, {2, 2, exp(-2.0), exp(-2.0)}};
    run_case(&c, 99);
    /* with T = .5 after the penalty: weights squared */
    c.temperature = 0.5f;
    c.expect[0] = 4;
    c.expect[1] = 4;
    c.expect[2] = exp(-4.0);
    c.expect[3] = exp(-4.0);
    run_case(&c, 100);
}

int main(void) {
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i], 1000 + i);
    test_temperature_before_top_p();
    test_penalty_distribution();
    return okv_test_finish();
}
