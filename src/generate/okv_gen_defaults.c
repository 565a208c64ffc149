/* okv_gen_defaults.c — "defaults for generating from this program": the
 * sampling values of the bundled generation_config.json over HF's
 * defaults, the EOS set and the context limit, gathered in one place so
 * the CLI and the server start from the same values (see offkv_gen.h).
 *
 * generation_config.json travels inside the program but came from a
 * checkpoint: every value is checked and a bad one names its field. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "offkv_gen.h"
#include "okv_common.h"

#define GEN_CONFIG "generation_config.json (bundled)"

/* One number: absent/null keeps *out; otherwise finite, within [lo, hi]
 * and, when integral, whole. */
static okv_status config_number(const cJSON *j, const char *key, double lo, double hi, bool integral, double *out,
                                okv_error *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!v || cJSON_IsNull(v)) return OKV_OK;
    if (!cJSON_IsNumber(v)) return okv_fail(err, OKV_ERR_FORMAT, GEN_CONFIG ": '%s' must be a number", key);
    double d = v->valuedouble;
    if (!isfinite(d) || d < lo || d > hi || (integral && d != floor(d)))
        return okv_fail(err, OKV_ERR_FORMAT, GEN_CONFIG ": '%s' is %g; it must be %s in [%g, %g]", key, d,
                        integral ? "an integer" : "a number", lo, hi);
    *out = d;
    return OKV_OK;
}

/* HF defaults overlaid with generation_config.json's sampling fields. */
static okv_status sampling_from_config(const okv_program *p, okv_sampler_params *out, okv_error *err) {
    okv_sampler_params sp = okv_sampler_params_default();
    size_t len = 0;
    const char *gc = okv_program_blob(p, "generation_config.json", &len);
    cJSON *j = gc ? cJSON_ParseWithLength(gc, len) : NULL;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "do_sample");
    if (v && cJSON_IsBool(v)) sp.do_sample = cJSON_IsTrue(v);
    double t = sp.temperature, k = sp.top_k, tp = sp.top_p, mp = sp.min_p, rp = sp.repetition_penalty;
    okv_status st = config_number(j, "temperature", 0, 1e6, false, &t, err);
    if (!st) st = config_number(j, "top_k", 0, INT32_MAX, true, &k, err);
    if (!st) st = config_number(j, "top_p", 0, 1, false, &tp, err);
    if (!st) st = config_number(j, "min_p", 0, 1, false, &mp, err);
    if (!st) st = config_number(j, "repetition_penalty", 1e-6, 1e6, false, &rp, err);
    cJSON_Delete(j);
    if (st) return st;
    sp.temperature = (float)t;
    sp.top_k = (int32_t)k;
    sp.top_p = (float)tp;
    sp.min_p = (float)mp;
    sp.repetition_penalty = (float)rp;
    *out = sp;
    return okv_sampler_params_check(&sp, err);
}

static void add_eos(okv_gen_defaults *d, int32_t id) {
    for (int i = 0; i < d->n_eos; i++)
        if (d->eos_ids[i] == id) return;
    if (d->n_eos < OKV_GEN_MAX_EOS) d->eos_ids[d->n_eos++] = id;
}

/* tokenizer_config.json's eos_token, when the tokenizer knows it; -1 otherwise. */
static int32_t config_eos_id(const okv_program *p, const okv_tok *tok) {
    size_t len = 0;
    const char *b = okv_program_blob(p, "tokenizer_config.json", &len);
    char *text = b ? strndup(b, len) : NULL;
    okv_chat_config cfg = {0};
    okv_error err;
    int32_t id = -1;
    if (text && !okv_chat_config_parse(text, &cfg, &err) && cfg.eos_token) id = okv_tok_token_to_id(tok, cfg.eos_token);
    okv_chat_config_free(&cfg);
    free(text);
    return id;
}

okv_status okv_gen_defaults_get(const okv_runner *r, const okv_tok *tok, okv_gen_defaults *d, okv_error *err) {
    memset(d, 0, sizeof *d);
    const okv_program *p = okv_runner_program(r);
    okv_status st = sampling_from_config(p, &d->sampling, err);
    if (st) return st;
    okv_program_info info;
    okv_program_get_info(p, &info);
    for (int i = 0; i < info.n_eos; i++) add_eos(d, info.eos_ids[i]);
    int32_t id = tok ? config_eos_id(p, tok) : -1;
    if (id >= 0) add_eos(d, id);
    d->context_limit = okv_runner_capacity(r);
    return OKV_OK;
}

void okv_gen_options_init(okv_gen_options *o, const okv_gen_defaults *d, int max_new_tokens) {
    memset(o, 0, sizeof *o);
    o->sampling = d->sampling;
    o->eos_ids = d->eos_ids;
    o->n_eos = d->n_eos;
    o->context_limit = d->context_limit;
    o->max_new_tokens = max_new_tokens;
}
