/* Token log-probabilities (okv_server_logprobs.c): the log-softmax against
 * a direct double computation, the top-k order (larger first, ties to the
 * lower id), NaN and -inf logits, k bounds, an id outside the vocabulary,
 * and a large-magnitude row that a naive exp() would overflow. */
#include <math.h>
#include <stdio.h>

#include "okv_server.h"
#include "okv_test.h"

/* log(exp(row[id]) / sum exp(row)) directly, in double (row small and tame). */
static double direct(const float *row, int n, int id) {
    double sum = 0;
    for (int i = 0; i < n; i++) sum += exp((double)row[i]);
    return log(exp((double)row[id]) / sum);
}

int main(void) {
    float row[8] = {0.5f, -1.0f, 2.0f, 2.0f, 0.0f, -3.5f, 1.25f, 2.0f};
    srv_logprob lp;
    srv_logprob_of(row, 8, 6, 4, &lp);
    CHECKF(fabs(lp.logprob - direct(row, 8, 6)) < 1e-6, "logprob %g vs %g", lp.logprob, direct(row, 8, 6));
    CHECK(lp.id == 6 && lp.n_top == 4);
    /* the three 2.0 logits tie: ids 2, 3, 7 in that order, then 1.25 (id 6) */
    CHECKF(lp.top[0].id == 2 && lp.top[1].id == 3 && lp.top[2].id == 7 && lp.top[3].id == 6, "order %d %d %d %d",
           lp.top[0].id, lp.top[1].id, lp.top[2].id, lp.top[3].id);
    for (int t = 0; t < lp.n_top; t++)
        CHECKF(fabs(lp.top[t].logprob - direct(row, 8, lp.top[t].id)) < 1e-6, "top %d: %g", t, lp.top[t].logprob);
    CHECK(lp.top[3].logprob == lp.logprob);
    double total = 0;
    for (int i = 0; i < 8; i++) {
        srv_logprob one;
        srv_logprob_of(row, 8, i, 0, &one);
        CHECK(one.n_top == 0 && one.logprob <= 0);
        total += exp(one.logprob);
    }
    CHECKF(fabs(total - 1) < 1e-6, "probabilities sum to %g", total);

    /* k above the vocabulary: every id once; above the cap: the cap */
    srv_logprob_of(row, 3, 0, 10, &lp);
    CHECK(lp.n_top == 3 && lp.top[0].id == 2 && lp.top[1].id == 0 && lp.top[2].id == 1);
    float wide[40];
    for (int i = 0; i < 40; i++) wide[i] = (float)(i % 7);
    srv_logprob_of(wide, 40, 0, 99, &lp);
    CHECK(lp.n_top == SRV_MAX_TOP_LOGPROBS);
    for (int t = 1; t < lp.n_top; t++)
        CHECKF(lp.top[t - 1].logprob > lp.top[t].logprob || (lp.top[t - 1].logprob == lp.top[t].logprob && lp.top[t - 1].id < lp.top[t].id),
               "sorted at %d", t);

    /* NaN and -inf count as ruled out; an id outside the row gets -inf */
    float odd[4] = {NAN, 1.0f, -INFINITY, 1.0f};
    srv_logprob_of(odd, 4, 0, 4, &lp);
    CHECKF(isinf(lp.logprob) && lp.logprob < 0, "NaN logit: %g", lp.logprob);
    CHECKF(lp.top[0].id == 1 && lp.top[1].id == 3 && fabs(lp.top[0].logprob - log(0.5)) < 1e-6, "NaN row top %d %d %g",
           lp.top[0].id, lp.top[1].id, lp.top[0].logprob);
    srv_logprob_of(odd, 4, 7, 0, &lp);
    CHECK(isinf(lp.logprob) && lp.logprob < 0);
    srv_logprob_of(odd, 4, -1, 0, &lp);
    CHECK(isinf(lp.logprob) && lp.logprob < 0);

    /* logits in the thousands: shifted by the max, finite */
    float big[3] = {5000.0f, 4999.0f, -5000.0f};
    srv_logprob_of(big, 3, 1, 1, &lp);
    CHECKF(fabs(lp.logprob - (-1 - log1p(exp(-1.0)))) < 1e-5 && fabs(lp.top[0].logprob + log1p(exp(-1.0))) < 1e-5, "big: %g %g",
           lp.logprob, lp.top[0].logprob);
    return okv_test_finish();
}
