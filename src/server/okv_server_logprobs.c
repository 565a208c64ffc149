/* okv_server_logprobs.c — token log-probabilities for `logprobs` /
 * `top_logprobs`: the log-softmax of one logits row at the sampled token
 * and its k most likely tokens, and their two OpenAI shapes (chat's
 * logprobs.content[] entries, legacy completions' parallel arrays).
 *
 * The distribution is the model's own: the raw logits row the scheduler
 * fed, before temperature, penalties and top-k/top-p/min-p truncation (what
 * OpenAI and vLLM report), so a sampled token's logprob does not depend on
 * the sampling parameters. Sums are in double; the result is within float
 * rounding of the log-softmax of the same logits computed elsewhere. A
 * token's text is its own decode (okv_tok_decode of the one id): a token
 * holding part of a multi-byte character shows U+FFFD there, and `bytes`
 * are the UTF-8 bytes of that text. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "okv_server.h"

static double finite_or_ninf(float v) { return isnan(v) ? -INFINITY : (double)v; }

/* log(sum(exp(row))) by the max-shifted sum. */
static double log_sum_exp(const float *row, int vocab) {
    double mx = -INFINITY;
    for (int i = 0; i < vocab; i++) mx = fmax(mx, finite_or_ninf(row[i]));
    if (!isfinite(mx)) return mx;
    double sum = 0;
    for (int i = 0; i < vocab; i++) sum += exp(finite_or_ninf(row[i]) - mx);
    return mx + log(sum);
}

/* True when (v, id) ranks above (w, wid): larger logit, then lower id. */
static bool ranks_above(double v, int32_t id, double w, int32_t wid) { return v > w || (v == w && id < wid); }

/* The k largest logits of row, best first, into top (logprob holds the raw logit). */
static int top_k_logits(const float *row, int vocab, int k, srv_top *top) {
    int n = 0;
    for (int i = 0; i < vocab && k > 0; i++) {
        double v = finite_or_ninf(row[i]);
        if (n == k && !ranks_above(v, i, top[n - 1].logprob, top[n - 1].id)) continue;
        int at = n < k ? n++ : k - 1;
        while (at > 0 && ranks_above(v, i, top[at - 1].logprob, top[at - 1].id)) { top[at] = top[at - 1]; at--; }
        top[at] = (srv_top){(int32_t)i, (float)v};
    }
    return n;
}

void srv_logprob_of(const float *row, int vocab, int32_t id, int k, srv_logprob *out) {
    if (k > SRV_MAX_TOP_LOGPROBS) k = SRV_MAX_TOP_LOGPROBS;
    double lse = log_sum_exp(row, vocab);
    out->id = id;
    out->logprob = id >= 0 && id < vocab ? (float)(finite_or_ninf(row[id]) - lse) : -INFINITY;
    out->n_top = top_k_logits(row, vocab, k < 0 ? 0 : k, out->top);
    for (int t = 0; t < out->n_top; t++) out->top[t].logprob = (float)(finite_or_ninf(row[out->top[t].id]) - lse);
}

/* ---- JSON ------------------------------------------------------------------------ */

/* The token's text (heap, NUL-terminated; "" when it cannot be decoded). */
static char *token_text(const okv_tok *tok, int32_t id) {
    char *text = NULL;
    size_t len = 0;
    okv_error err;
    if (okv_tok_decode(tok, &id, 1, false, &text, &len, &err)) return strdup("");
    return text;
}

/* JSON has no -inf: a token the model rules out gets OpenAI's floor, -9999. */
static double json_logprob(float lp) { return isfinite(lp) ? lp : -9999.0; }

/* {token, logprob, bytes} of one token. */
static cJSON *token_entry(const okv_tok *tok, int32_t id, float logprob) {
    cJSON *e = cJSON_CreateObject(), *bytes;
    char *text = token_text(tok, id);
    cJSON_AddStringToObject(e, "token", text ? text : "");
    cJSON_AddNumberToObject(e, "logprob", json_logprob(logprob));
    bytes = cJSON_AddArrayToObject(e, "bytes");
    for (const unsigned char *p = (const unsigned char *)(text ? text : ""); *p; p++)
        cJSON_AddItemToArray(bytes, cJSON_CreateNumber(*p));
    free(text);
    return e;
}

cJSON *srv_logprobs_chat_json(const okv_tok *tok, const srv_logprob *lp, size_t n) {
    cJSON *o = cJSON_CreateObject(), *content = cJSON_AddArrayToObject(o, "content");
    for (size_t i = 0; i < n; i++) {
        cJSON *e = token_entry(tok, lp[i].id, lp[i].logprob), *top = cJSON_AddArrayToObject(e, "top_logprobs");
        for (int t = 0; t < lp[i].n_top; t++) cJSON_AddItemToArray(top, token_entry(tok, lp[i].top[t].id, lp[i].top[t].logprob));
        cJSON_AddItemToArray(content, e);
    }
    return o;
}

/* Characters (UTF-8 lead bytes) of s. */
static size_t utf8_chars(const char *s) {
    size_t n = 0;
    for (; *s; s++) n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

cJSON *srv_logprobs_legacy_json(const okv_tok *tok, const srv_logprob *lp, size_t n, size_t *offset) {
    cJSON *o = cJSON_CreateObject();
    cJSON *tokens = cJSON_AddArrayToObject(o, "tokens"), *values = cJSON_AddArrayToObject(o, "token_logprobs");
    cJSON *tops = cJSON_AddArrayToObject(o, "top_logprobs"), *offsets = cJSON_AddArrayToObject(o, "text_offset");
    for (size_t i = 0; i < n; i++) {
        char *text = token_text(tok, lp[i].id);
        cJSON_AddItemToArray(tokens, cJSON_CreateString(text ? text : ""));
        cJSON_AddItemToArray(values, cJSON_CreateNumber(json_logprob(lp[i].logprob)));
        cJSON_AddItemToArray(offsets, cJSON_CreateNumber((double)*offset));
        *offset += text ? utf8_chars(text) : 0;
        free(text);
        cJSON *top = cJSON_CreateObject();
        for (int t = 0; t < lp[i].n_top; t++) {
            char *tt = token_text(tok, lp[i].top[t].id);
            if (tt && !cJSON_GetObjectItemCaseSensitive(top, tt))   /* two ids may decode alike: the likelier one stays */
                cJSON_AddNumberToObject(top, tt, json_logprob(lp[i].top[t].logprob));
            free(tt);
        }
        cJSON_AddItemToArray(tops, top);
    }
    return o;
}
