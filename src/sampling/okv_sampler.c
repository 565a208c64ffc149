/* okv_sampler.c — picks the next token from one row of logits, following
 * HuggingFace generate(): repetition penalty, then greedy argmax or
 * temperature -> top-k -> top-p -> min-p -> draw (see offkv_sample.h).
 *
 * Shape: every filter works on a list of candidates (id, weight) where
 * weight = exp(logit - max logit) of the temperature-scaled logit, so the
 * most likely candidate weighs exactly 1 and probabilities are weight / sum.
 * The list starts as either the top-k survivors (found with a k-entry heap,
 * no sort of the vocabulary) or the whole vocabulary, minus the tokens no
 * filter could keep (found before any exp is taken). Top-p thresholds the
 * weights down to a superset of the nucleus and then finds the nucleus with
 * a quickselect, so nothing is fully sorted; min-p is a plain threshold
 * (p < min_p * p_max  <=>  weight < min_p). All buffers are sized once, at
 * create time; sample() never allocates. */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

#include "offkv_sample.h"
#include "okv_common.h"
#include "okv_rng.h"

typedef struct okv_cand {
    float w;      /* exp(scaled logit - max scaled logit), in (0, 1] */
    int32_t id;
} okv_cand;

struct okv_sampler {
    int32_t vocab;
    okv_sampler_params p;
    okv_rng rng;
    uint8_t *seen;      /* [vocab] 1 once the id was accepted */
    int32_t *seen_ids;  /* the accepted ids, each once */
    int32_t n_seen;
    uint32_t *gen_count; /* [vocab] times the id was generated (okv_sampler_accept_generated) */
    int32_t *gen_ids;    /* the generated ids, each once */
    int32_t n_gen;
    float *work;        /* [vocab] penalised (and temperature-scaled) logits */
    okv_cand *cand;     /* [vocab] candidates still in the running */
    float *heap;        /* [min(top_k, vocab)] min-heap for top-k */
};

/* Top-p first cuts candidate lists longer than this down to a superset of
 * the nucleus (a cheap threshold pass) before selecting the nucleus. */
#define OKV_TOP_P_SHRINK_ABOVE 1024

okv_sampler_params okv_sampler_params_default(void) {
    okv_sampler_params p;
    p.do_sample = false;
    p.temperature = 1.0f;
    p.top_k = 50;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.repetition_penalty = 1.0f;
    p.seed = 0;
    p.frequency_penalty = 0.0f;
    p.presence_penalty = 0.0f;
    return p;
}

okv_status okv_sampler_params_check(const okv_sampler_params *p, okv_error *err) {
    if (!(isfinite(p->temperature) && p->temperature >= 0))
        return okv_fail(err, OKV_ERR_INVALID, "sampler: temperature must be finite and >= 0 (got %g)",
                        (double)p->temperature);
    if (p->top_k < 0)
        return okv_fail(err, OKV_ERR_INVALID, "sampler: top_k must be >= 0 (got %d)", (int)p->top_k);
    if (!(p->top_p >= 0 && p->top_p <= 1))
        return okv_fail(err, OKV_ERR_INVALID, "sampler: top_p must be in [0, 1] (got %g)", (double)p->top_p);
    if (!(p->min_p >= 0 && p->min_p <= 1))
        return okv_fail(err, OKV_ERR_INVALID, "sampler: min_p must be in [0, 1] (got %g)", (double)p->min_p);
    if (!(isfinite(p->repetition_penalty) && p->repetition_penalty > 0))
        return okv_fail(err, OKV_ERR_INVALID, "sampler: repetition_penalty must be finite and > 0 (got %g)",
                        (double)p->repetition_penalty);
    if (!(p->frequency_penalty >= -2 && p->frequency_penalty <= 2))
        return okv_fail(err, OKV_ERR_INVALID, "sampler: frequency_penalty must be in [-2, 2] (got %g)",
                        (double)p->frequency_penalty);
    if (!(p->presence_penalty >= -2 && p->presence_penalty <= 2))
        return okv_fail(err, OKV_ERR_INVALID, "sampler: presence_penalty must be in [-2, 2] (got %g)",
                        (double)p->presence_penalty);
    return OKV_OK;
}

okv_status okv_sampler_create(int32_t vocab, const okv_sampler_params *params,
                              okv_sampler **out, okv_error *err) {
    *out = NULL;
    if (vocab <= 0)
        return okv_fail(err, OKV_ERR_INVALID, "sampler: vocab must be > 0 (got %d)", (int)vocab);
    okv_status st = okv_sampler_params_check(params, err);
    if (st != OKV_OK) return st;
    okv_sampler *s = calloc(1, sizeof *s);
    if (!s) return okv_fail(err, OKV_ERR_NOMEM, "sampler: out of memory");
    s->vocab = vocab;
    s->p = *params;
    s->seen = calloc((size_t)vocab, 1);
    s->seen_ids = malloc((size_t)vocab * sizeof *s->seen_ids);
    s->gen_count = calloc((size_t)vocab, sizeof *s->gen_count);
    s->gen_ids = malloc((size_t)vocab * sizeof *s->gen_ids);
    s->work = malloc((size_t)vocab * sizeof *s->work);
    s->cand = malloc((size_t)vocab * sizeof *s->cand);
    size_t heap_len = params->top_k > 0 && params->top_k < vocab ? (size_t)params->top_k : 1;
    s->heap = malloc(heap_len * sizeof *s->heap);
    if (!s->seen || !s->seen_ids || !s->gen_count || !s->gen_ids || !s->work || !s->cand || !s->heap) {
        okv_sampler_free(s);
        return okv_fail(err, OKV_ERR_NOMEM, "sampler: out of memory for vocab %d", (int)vocab);
    }
    okv_rng_seed(&s->rng, params->seed);
    *out = s;
    return OKV_OK;
}

void okv_sampler_free(okv_sampler *s) {
    if (!s) return;
    free(s->seen);
    free(s->seen_ids);
    free(s->gen_count);
    free(s->gen_ids);
    free(s->work);
    free(s->cand);
    free(s->heap);
    free(s);
}

okv_status okv_sampler_accept(okv_sampler *s, int32_t token, okv_error *err) {
    if (token < 0 || token >= s->vocab)
        return okv_fail(err, OKV_ERR_INVALID, "sampler: token %d outside the vocabulary [0, %d)",
                        (int)token, (int)s->vocab);
    if (!s->seen[token]) {
        s->seen[token] = 1;
        s->seen_ids[s->n_seen++] = token;
    }
    return OKV_OK;
}

okv_status okv_sampler_accept_generated(okv_sampler *s, int32_t token, okv_error *err) {
    okv_status st = okv_sampler_accept(s, token, err);
    if (st) return st;
    if (!s->gen_count[token]++) s->gen_ids[s->n_gen++] = token;
    return OKV_OK;
}

void okv_sampler_reset(okv_sampler *s) {
    for (int32_t i = 0; i < s->n_seen; i++) s->seen[s->seen_ids[i]] = 0;
    s->n_seen = 0;
    for (int32_t i = 0; i < s->n_gen; i++) s->gen_count[s->gen_ids[i]] = 0;
    s->n_gen = 0;
    okv_rng_seed(&s->rng, s->p.seed);
}

const okv_sampler_params *okv_sampler_get_params(const okv_sampler *s) {
    return &s->p;
}

/* ------------------------------------------------------------- the steps */

/* HF RepetitionPenaltyLogitsProcessor: divide positive logits, multiply the
 * others (so a penalty > 1 always makes a seen token less likely). */
static float penalise(float logit, float penalty) {
    return logit > 0 ? logit / penalty : logit * penalty;
}

/* Greedy: the argmax of the penalised logits, lowest id on ties; -1 if no
 * logit is above -inf. One read-only pass: seen ids are penalised on the
 * fly instead of copying the row. */
static int32_t argmax_penalised(const okv_sampler *s, const float *logits) {
    bool penalty_on = s->p.repetition_penalty != 1.0f && s->n_seen > 0;
    int32_t best = -1;
    float best_v = -INFINITY;
    for (int32_t i = 0; i < s->vocab; i++) {
        float v = logits[i];
        if (penalty_on && s->seen[i]) v = penalise(v, s->p.repetition_penalty);
        if (v > best_v) {
            best_v = v;
            best = i;
        }
    }
    return best;
}

static bool openai_penalties_on(const okv_sampler *s) {
    return s->n_gen > 0 && (s->p.frequency_penalty != 0.0f || s->p.presence_penalty != 0.0f);
}

/* OpenAI's penalties over the generated ids: l - count * frequency_penalty
 * - presence_penalty (after the repetition penalty, before temperature). */
static void apply_openai_penalties(okv_sampler *s, const float *logits, float *w, float t) {
    if (!openai_penalties_on(s)) return;
    float penalty = s->p.repetition_penalty;
    for (int32_t j = 0; j < s->n_gen; j++) {
        int32_t id = s->gen_ids[j];
        float l = logits[id];
        if (penalty != 1.0f && s->seen[id]) l = penalise(l, penalty);
        w[id] = (l - (float)s->gen_count[id] * s->p.frequency_penalty - s->p.presence_penalty) / t;
    }
}

/* Lowest-id argmax of work (after prepare_logits), -1 if nothing is above -inf. */
static int32_t argmax_work(const okv_sampler *s) {
    int32_t best = -1;
    float best_v = -INFINITY;
    for (int32_t i = 0; i < s->vocab; i++)
        if (s->work[i] > best_v) { best_v = s->work[i]; best = i; }
    return best;
}

/* work = penalised logits / temperature, in that order (HF applies the
 * penalty processor before the temperature warper). Returns the largest
 * value (NaN ignored; -inf if there is none). */
static float prepare_logits(okv_sampler *s, const float *logits) {
    int32_t n = s->vocab;
    float t = s->p.temperature, penalty = s->p.repetition_penalty;
    float *w = s->work;
    if (!(t > 0)) t = 1.0f;   /* greedy with OpenAI penalties comes here too */
    if (t == 1.0f) memcpy(w, logits, (size_t)n * sizeof *w);
    else for (int32_t i = 0; i < n; i++) w[i] = logits[i] / t;
    if (penalty != 1.0f) {
        for (int32_t j = 0; j < s->n_seen; j++) {
            int32_t id = s->seen_ids[j];
            w[id] = penalise(logits[id], penalty) / t;
        }
    }
    apply_openai_penalties(s, logits, w, t);
    float m = -INFINITY;
    for (int32_t i = 0; i < n; i++)
        if (w[i] > m) m = w[i];
    return m;
}

static void heap_sift_up(float *h, int32_t i) {
    while (i > 0) {
        int32_t parent = (i - 1) / 2;
        if (h[parent] <= h[i]) break;
        float t = h[parent]; h[parent] = h[i]; h[i] = t;
        i = parent;
    }
}

static void heap_sift_down(float *h, int32_t n, int32_t i) {
    for (;;) {
        int32_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && h[l] < h[m]) m = l;
        if (r < n && h[r] < h[m]) m = r;
        if (m == i) return;
        float t = h[m]; h[m] = h[i]; h[i] = t;
        i = m;
    }
}

/* The k-th largest of the values above -inf (NaN ignored), or -inf when
 * there are fewer than k of them. A k-entry min-heap: most values lose the
 * comparison with its root, so this costs about one pass over x. */
static float kth_largest(const float *x, int32_t n, int32_t k, float *heap) {
    int32_t size = 0;
    for (int32_t i = 0; i < n; i++) {
        float v = x[i];
        if (!(v > -INFINITY)) continue;
        if (size < k) {
            heap[size] = v;
            heap_sift_up(heap, size);
            size++;
        } else if (v > heap[0]) {
            heap[0] = v;
            heap_sift_down(heap, k, 0);
        }
    }
    return size < k ? -INFINITY : heap[0];
}

/* Fills cand with the ids whose scaled logit is >= lowest, weighted
 * exp(l - lmax) (1 for every +inf logit when lmax is +inf). Ids whose weight
 * underflows to 0 cannot be drawn and are left out. Returns the count;
 * *total gets the sum of the weights. */
static int32_t collect_candidates(okv_sampler *s, float lmax, float lowest, double *total) {
    const float *x = s->work;
    okv_cand *c = s->cand;
    bool inf_max = isinf(lmax);
    double sum = 0;
    int32_t n = 0;
    for (int32_t i = 0; i < s->vocab; i++) {
        if (!(x[i] >= lowest)) continue;
        float w = inf_max ? 1.0f : expf(x[i] - lmax);
        if (w > 0) {
            c[n].id = i;
            c[n].w = w;
            sum += w;
            n++;
        }
    }
    *total = sum;
    return n;
}

/* The order top-p walks: descending weight, then ascending id. Strict
 * (no two candidates are equal), so the nucleus is uniquely defined. */
static bool goes_before(okv_cand a, okv_cand b) {
    return a.w > b.w || (a.w == b.w && a.id < b.id);
}

static void swap_cand(okv_cand *c, int32_t i, int32_t j) {
    okv_cand t = c[i];
    c[i] = c[j];
    c[j] = t;
}

static void insertion_sort(okv_cand *c, int32_t n) {
    for (int32_t i = 1; i < n; i++) {
        okv_cand x = c[i];
        int32_t j = i;
        for (; j > 0 && goes_before(x, c[j - 1]); j--) c[j] = c[j - 1];
        c[j] = x;
    }
}

/* Partitions c[lo..hi) around the median of its first, middle and last
 * candidates: returns p with c[lo..p) before c[p] and c(p..hi) after it. */
static int32_t partition(okv_cand *c, int32_t lo, int32_t hi) {
    int32_t mid = lo + (hi - lo) / 2, last = hi - 1;
    if (goes_before(c[mid], c[lo])) swap_cand(c, mid, lo);
    if (goes_before(c[last], c[lo])) swap_cand(c, last, lo);
    if (goes_before(c[last], c[mid])) swap_cand(c, last, mid);
    swap_cand(c, mid, last);   /* the median is the pivot, parked at the end */
    okv_cand pivot = c[last];
    int32_t p = lo;
    for (int32_t i = lo; i < last; i++)
        if (goes_before(c[i], pivot)) swap_cand(c, i, p++);
    swap_cand(c, p, last);
    return p;
}

/* Moves the nucleus to c[0..k) and returns k: in walking order, a candidate
 * is kept iff the weight before it is < need (the first always is). A
 * quickselect, not a sort: each round partitions the undecided range
 * [lo, hi) and either drops everything from the pivot on (the mass before
 * the pivot already reaches need) or keeps everything up to and including
 * it. Expected O(n) even when the nucleus holds most of the vocabulary.
 * Everything in c[0..lo) is kept and weighs `before`. */
static int32_t select_nucleus(okv_cand *c, int32_t n, double need, double *kept_mass) {
    int32_t lo = 0, hi = n;
    double before = 0;
    while (hi - lo > 16) {
        int32_t p = partition(c, lo, hi);
        double left = 0;
        for (int32_t i = lo; i < p; i++) left += c[i].w;
        if (p > 0 && before + left >= need) {
            hi = p;                       /* the pivot and all after it go */
        } else {
            before += left + c[p].w;      /* all before the pivot and it stay */
            lo = p + 1;
        }
    }
    insertion_sort(c + lo, hi - lo);
    while (lo < hi && (lo == 0 || before < need)) before += c[lo++].w;
    *kept_mass = before;
    return lo;
}

/* Moves the candidates with weight >= t to the front; returns their count. */
static int32_t keep_weight_at_least(okv_cand *c, int32_t n, double t) {
    int32_t kept = 0;
    for (int32_t j = 0; j < n; j++)
        if (c[j].w >= t) c[kept++] = c[j];
    return kept;
}

static double mass_at_least(const okv_cand *c, int32_t n, double t) {
    double m = 0;
    for (int32_t j = 0; j < n; j++)
        if (c[j].w >= t) m += c[j].w;
    return m;
}

/* Cuts a long candidate list down to the candidates of weight >= t for a t
 * whose set still holds top_p of the mass: that set is a prefix of the
 * walking order, so it contains the whole nucleus. LLM distributions are
 * peaked, so usually the first or second t leaves a few hundred candidates.
 * Tries t = total/256, /16 each round (at most 256, 4096, ... candidates)
 * down to the t at which the dropped tokens provably weigh at most
 * (1 - top_p) of the mass. */
static int32_t shrink_to_nucleus_superset(okv_cand *c, int32_t n, double total, double top_p) {
    double need = top_p * total;
    double t_floor = (1.0 - top_p) * total / (double)n;
    for (double t = total / 256.0;; t /= 16.0) {
        if (t <= t_floor) t = t_floor;
        if (mass_at_least(c, n, t) >= need) return keep_weight_at_least(c, n, t);
        if (t == t_floor) return n;   /* rounding: keep everything */
    }
}

/* HF TopPLogitsWarper: in descending probability order, keep a token iff
 * the probability before it is < top_p (so the first always stays). */
static int32_t apply_top_p(okv_cand *c, int32_t n, double *total, double top_p) {
    if (n > OKV_TOP_P_SHRINK_ABOVE) n = shrink_to_nucleus_superset(c, n, *total, top_p);
    return select_nucleus(c, n, top_p * *total, total);
}

/* HF MinPLogitsWarper: drop p < min_p * p_max. The most likely candidate
 * weighs 1, so that is weight < min_p; it always survives (min_p <= 1). */
static int32_t apply_min_p(okv_cand *c, int32_t n, double *total, double min_p) {
    int32_t kept = 0;
    double sum = 0;
    for (int32_t j = 0; j < n; j++) {
        if (c[j].w >= min_p) {
            c[kept++] = c[j];
            sum += c[j].w;
        }
    }
    *total = sum;
    return kept;
}

/* Draws one candidate with probability weight / total. */
static int32_t draw(okv_rng *rng, const okv_cand *c, int32_t n, double total) {
    double r = okv_rng_uniform(rng) * total;
    double acc = 0;
    for (int32_t j = 0; j < n; j++) {
        acc += c[j].w;
        if (r < acc) return c[j].id;
    }
    return c[n - 1].id;   /* r landed on the rounding slack at the end */
}

static bool is_greedy(const okv_sampler_params *p) {
    return !p->do_sample || p->temperature == 0.0f;
}

/* Weights below e^-104 are 0 in float: logits that far below the maximum
 * are never candidates. */
#define OKV_EXP_UNDERFLOW 104.0f

/* The lowest scaled logit that can still be drawn: everything below it is
 * cut by underflow, by top-k, or (when min-p is the only filter after
 * top-k) by min-p, whose rule p < min_p * p_max is l < lmax + ln(min_p).
 * That last bound is loosened by a few float ulps of lmax so rounding can
 * only let extra tokens through, which apply_min_p then removes exactly. */
static float lowest_drawable_logit(okv_sampler *s, float lmax) {
    const okv_sampler_params *p = &s->p;
    float lowest = lmax - OKV_EXP_UNDERFLOW;
    if (p->top_k > 0 && p->top_k < s->vocab) {
        float kth = kth_largest(s->work, s->vocab, p->top_k, s->heap);
        if (kth > lowest) lowest = kth;
    }
    if (p->min_p > 0.0f && p->top_p >= 1.0f) {
        float min_p_lowest = lmax + logf(p->min_p) - (1e-3f + fabsf(lmax) * 1e-6f);
        if (min_p_lowest > lowest) lowest = min_p_lowest;
    }
    return lowest;
}

int32_t okv_sampler_sample(okv_sampler *s, const float *logits) {
    const okv_sampler_params *p = &s->p;
    if (is_greedy(p) && openai_penalties_on(s)) {
        prepare_logits(s, logits);
        return argmax_work(s);
    }
    if (is_greedy(p)) return argmax_penalised(s, logits);

    float lmax = prepare_logits(s, logits);
    if (!(lmax > -INFINITY)) return -1;
    double total;
    int32_t n = collect_candidates(s, lmax, lowest_drawable_logit(s, lmax), &total);
    if (p->top_p < 1.0f) n = apply_top_p(s->cand, n, &total, p->top_p);
    if (p->min_p > 0.0f) n = apply_min_p(s->cand, n, &total, p->min_p);
    return draw(&s->rng, s->cand, n, total);
}
