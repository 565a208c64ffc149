/* okv_hf_config.c — config.json (+ generation_config.json) -> okv_hf_model.
 *
 * One function per architecture family fills the switches of okv_hf_model
 * from the fields that family's HF modeling code reads, with HF's class
 * defaults. Shared pieces (shapes, RoPE, layer types) are helpers. Every
 * value we cannot honour is refused here, naming the field and value, so an
 * export never runs with silently different semantics. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "okv_common.h"
#include "okv_hf.h"

typedef struct cfg_ctx {
    const cJSON *j;      /* the (text) config object */
    const char *what;    /* file name for messages */
    okv_error *err;
} cfg_ctx;

static okv_status get_int(cfg_ctx *c, const char *key, int *out, int dflt, int lo, int hi) {
    int64_t v;
    okv_status st = okv_json_opt_int(c->j, key, &v, dflt, c->what, c->err);
    if (st) return st;
    if (v < lo || v > hi)
        return okv_fail(c->err, OKV_ERR_UNSUPPORTED, "%s: %s = %lld is out of the supported range [%d, %d]", c->what, key,
                        (long long)v, lo, hi);
    *out = (int)v;
    return OKV_OK;
}

static okv_status get_double(cfg_ctx *c, const char *key, double *out, double dflt) {
    return okv_json_opt_double(c->j, key, out, dflt, c->what, c->err);
}

static okv_status get_bool(cfg_ctx *c, const char *key, bool *out, bool dflt) {
    return okv_json_opt_bool(c->j, key, out, dflt, c->what, c->err);
}

/* Shapes common to every family. */
static okv_status read_shapes(cfg_ctx *c, okv_hf_model *m, int d_hidden, int d_inter, int d_layers, int d_heads,
                              int d_kv, int d_head_dim, int d_vocab) {
    okv_status st = get_int(c, "hidden_size", &m->hidden, d_hidden, 1, 1 << 16);
    if (!st) st = get_int(c, "intermediate_size", &m->intermediate, d_inter, 1, 1 << 20);
    if (!st) st = get_int(c, "num_hidden_layers", &m->n_layers, d_layers, 1, OKV_HF_MAX_LAYERS);
    if (!st) st = get_int(c, "num_attention_heads", &m->n_heads, d_heads, 1, 1024);
    if (!st) st = get_int(c, "num_key_value_heads", &m->n_kv_heads, d_kv > 0 ? d_kv : m->n_heads, 1, 1024);
    if (!st) st = get_int(c, "head_dim", &m->head_dim, d_head_dim > 0 ? d_head_dim : m->hidden / m->n_heads, 2, 4096);
    if (!st) st = get_int(c, "vocab_size", &m->vocab, d_vocab, 1, 1 << 24);
    if (!st) st = get_int(c, "max_position_embeddings", &m->max_position_embeddings, 131072, 1, 1 << 30);
    if (!st) st = get_double(c, "rms_norm_eps", &m->rms_eps, 1e-6);
    if (st) return st;
    if (m->n_heads % m->n_kv_heads)
        return okv_fail(c->err, OKV_ERR_UNSUPPORTED, "%s: num_attention_heads %d is not a multiple of num_key_value_heads %d",
                        c->what, m->n_heads, m->n_kv_heads);
    if (m->head_dim % 2) return okv_fail(c->err, OKV_ERR_UNSUPPORTED, "%s: head_dim %d must be even", c->what, m->head_dim);
    /* the graph carries eps as a float: it must survive the conversion */
    if (!(m->rms_eps >= 1e-30 && m->rms_eps <= 1))
        return okv_fail(c->err, OKV_ERR_UNSUPPORTED, "%s: rms_norm_eps = %g is outside the supported range [1e-30, 1]",
                        c->what, m->rms_eps);
    return OKV_OK;
}

static okv_status require_act(cfg_ctx *c, const char *key, const char *dflt, okv_hf_model *m) {
    const char *a = okv_json_str(c->j, key);
    if (!a) a = dflt;
    if (!strcmp(a, "silu")) m->act = 0;
    else if (!strcmp(a, "gelu_pytorch_tanh") || !strcmp(a, "gelu_tanh")) m->act = 1;
    else return okv_fail(c->err, OKV_ERR_UNSUPPORTED, "%s: %s \"%s\" is not supported (silu, gelu_pytorch_tanh)", c->what, key, a);
    return OKV_OK;
}

/* Parses one rope parameter object (rope_scaling / rope_parameters[...]).
 * theta_dflt is used when the object has no rope_theta. */
static okv_status check_rope_params(cfg_ctx *c, const okv_rope *r);

/* field names the object (or, when r is NULL, where theta_dflt came from). */
static okv_status parse_rope_obj(cfg_ctx *c, const cJSON *r, const char *field, double theta_dflt, okv_rope *out) {
    memset(out, 0, sizeof *out);
    out->theta = theta_dflt;
    out->factor = 1.0;
    out->partial_rotary = 1.0;
    out->kind = OKV_ROPE_DEFAULT;
    snprintf(out->field, sizeof out->field, "%s", field);
    if (!r || cJSON_IsNull(r)) return check_rope_params(c, out);
    if (!cJSON_IsObject(r)) return okv_fail(c->err, OKV_ERR_FORMAT, "%s: %s must be an object or null", c->what, field);
    const char *type = okv_json_str(r, "rope_type");
    if (!type) type = okv_json_str(r, "type");
    if (!type) type = "default";
    cfg_ctx rc = {r, c->what, c->err};
    okv_status st = get_double(&rc, "rope_theta", &out->theta, theta_dflt);
    if (!st) st = get_double(&rc, "factor", &out->factor, 1.0);
    if (!st) st = get_double(&rc, "partial_rotary_factor", &out->partial_rotary, 1.0);
    if (st) return st;
    if (!strcmp(type, "default")) out->kind = OKV_ROPE_DEFAULT;
    else if (!strcmp(type, "linear")) out->kind = OKV_ROPE_LINEAR;
    else if (!strcmp(type, "proportional")) out->kind = OKV_ROPE_PROPORTIONAL;
    else if (!strcmp(type, "llama3")) {
        out->kind = OKV_ROPE_LLAMA3;
        st = get_double(&rc, "low_freq_factor", &out->low_freq_factor, 1.0);
        if (!st) st = get_double(&rc, "high_freq_factor", &out->high_freq_factor, 4.0);
        if (!st) st = get_double(&rc, "original_max_position_embeddings", &out->original_max_pos, 0);
        if (st) return st;
        if (!(out->high_freq_factor > out->low_freq_factor) || !(out->low_freq_factor > 0))
            return okv_fail(c->err, OKV_ERR_UNSUPPORTED, "%s: %s llama3 needs high_freq_factor > low_freq_factor > 0", c->what, field);
    } else
        return okv_fail(c->err, OKV_ERR_UNSUPPORTED, "%s: %s rope_type \"%s\" is not supported (default, linear, llama3%s)",
                        c->what, field, type, "");
    return check_rope_params(c, out);
}

/* The parameters alone (the inv_freq tables are checked once head dims are
 * known, check_rope_tables). */
static okv_status check_rope_params(cfg_ctx *c, const okv_rope *r) {
    if (!(r->theta > 0) || !isfinite(r->theta))
        return okv_fail(c->err, OKV_ERR_UNSUPPORTED, "%s: %s: rope_theta = %g must be a positive number", c->what, r->field,
                        r->theta);
    if (!(r->factor > 0) || !isfinite(r->factor))
        return okv_fail(c->err, OKV_ERR_UNSUPPORTED, "%s: %s: factor = %g must be a positive number", c->what, r->field,
                        r->factor);
    if (!(r->partial_rotary > 0 && r->partial_rotary <= 1))
        return okv_fail(c->err, OKV_ERR_UNSUPPORTED, "%s: %s: partial_rotary_factor = %g must be in (0, 1]", c->what,
                        r->field, r->partial_rotary);
    if (r->kind != OKV_ROPE_PROPORTIONAL && r->partial_rotary != 1)
        return okv_fail(c->err, OKV_ERR_UNSUPPORTED, "%s: %s: partial_rotary_factor = %g is only supported with rope_type "
                        "\"proportional\"", c->what, r->field, r->partial_rotary);
    if (r->kind == OKV_ROPE_LLAMA3 && !(r->original_max_pos >= 0 && isfinite(r->original_max_pos) &&
                                        isfinite(r->high_freq_factor)))
        return okv_fail(c->err, OKV_ERR_UNSUPPORTED, "%s: %s: llama3 original_max_position_embeddings = %g and "
                        "high_freq_factor = %g must be finite and non-negative", c->what, r->field, r->original_max_pos,
                        r->high_freq_factor);
    return OKV_OK;
}

/* Every layer's inv_freq table, as the graph builder will compute it, must
 * be finite and within float range (a tiny rope_theta or factor overflows). */
static okv_status check_rope_tables(cfg_ctx *c, const okv_hf_model *m) {
    for (int layer = 0; layer < m->n_layers; layer++) {
        const okv_rope *r = okv_hf_layer_is_full(m, layer) ? &m->rope_full : &m->rope_sliding;
        int d = okv_hf_layer_head_dim(m, layer);
        for (int i = 0; i < d / 2; i++) {
            double inv = okv_hf_rope_inv_freq_at(r, d, i);
            if (!okv_double_fits_float(inv) || inv < 0)
                return okv_fail(c->err, OKV_ERR_UNSUPPORTED, "%s: %s: rope_theta = %g, factor = %g give inv_freq[%d] = %g "
                                "for head_dim %d (layer %d): not a finite float", c->what, r->field, r->theta, r->factor,
                                i, inv, d, layer);
        }
    }
    return OKV_OK;
}

/* Llama-style RoPE: rope_scaling or rope_parameters, rope_theta at top level
 * or inside rope_parameters. */
static okv_status read_rope_single(cfg_ctx *c, okv_hf_model *m, double theta_dflt, okv_rope *out) {
    double theta;
    okv_status st = get_double(c, "rope_theta", &theta, theta_dflt);
    if (st) return st;
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(c->j, "rope_scaling");
    const char *field = "rope_scaling";
    if (!r || cJSON_IsNull(r)) { r = cJSON_GetObjectItemCaseSensitive(c->j, "rope_parameters"); field = "rope_parameters"; }
    if (!r || cJSON_IsNull(r)) field = "rope_theta";
    st = parse_rope_obj(c, r, field, theta, out);
    if (!st && out->kind == OKV_ROPE_LLAMA3 && out->original_max_pos <= 0) out->original_max_pos = m->max_position_embeddings;
    if (!st && out->kind == OKV_ROPE_PROPORTIONAL)
        return okv_fail(c->err, OKV_ERR_UNSUPPORTED, "%s: %s rope_type \"proportional\" is only supported for Gemma-4", c->what, field);
    return st;
}

static okv_status read_tied(cfg_ctx *c, const cJSON *outer, okv_hf_model *m, bool dflt) {
    /* nested configs keep tie_word_embeddings at the top level */
    bool inner_has = okv_json_has(c->j, "tie_word_embeddings");
    if (!inner_has && outer && outer != c->j) {
        cfg_ctx oc = {outer, c->what, c->err};
        return get_bool(&oc, "tie_word_embeddings", &m->tied, dflt);
    }
    return get_bool(c, "tie_word_embeddings", &m->tied, dflt);
}

/* layer_types (sliding_attention/full_attention) or a pattern fallback. */
static okv_status read_layer_types(cfg_ctx *c, okv_hf_model *m, int window, int pattern) {
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(c->j, "layer_types");
    if (lt && !cJSON_IsNull(lt)) {
        if (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != m->n_layers)
            return okv_fail(c->err, OKV_ERR_FORMAT, "%s: layer_types must list num_hidden_layers (%d) entries", c->what, m->n_layers);
        for (int i = 0; i < m->n_layers; i++) {
            const cJSON *e = cJSON_GetArrayItem(lt, i);
            const char *s = cJSON_IsString(e) ? e->valuestring : "(not a string)";
            if (!strcmp(s, "full_attention")) m->window[i] = 0;
            else if (!strcmp(s, "sliding_attention")) m->window[i] = window;
            else return okv_fail(c->err, OKV_ERR_UNSUPPORTED, "%s: layer_types[%d] = \"%s\" is not a known layer type "
                                 "(sliding_attention, full_attention)", c->what, i, s);
        }
        return OKV_OK;
    }
    for (int i = 0; i < m->n_layers; i++) m->window[i] = (pattern > 0 && (i + 1) % pattern) ? window : 0;
    return OKV_OK;
}

/* final_logit_softcapping: 0/absent = none, else a cap the graph's float holds. */
static okv_status get_softcap(cfg_ctx *c, double *cap) {
    okv_status st = get_double(c, "final_logit_softcapping", cap, 0);
    if (!st && *cap != 0 && !(*cap >= 1e-30 && *cap <= 1e30))
        return okv_fail(c->err, OKV_ERR_UNSUPPORTED, "%s: final_logit_softcapping = %g must be 0 (none) or in [1e-30, 1e30]",
                        c->what, *cap);
    return st;
}

static okv_status refuse_if_true(cfg_ctx *c, const char *key, const char *why) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c->j, key);
    if (v && !cJSON_IsNull(v) && !cJSON_IsFalse(v) && !(cJSON_IsNumber(v) && v->valuedouble == 0))
        return okv_fail(c->err, OKV_ERR_UNSUPPORTED, "%s: %s is set; %s", c->what, key, why);
    return OKV_OK;
}

/* ---- families ------------------------------------------------------------- */

static okv_status parse_llama(cfg_ctx *c, const cJSON *outer, okv_hf_model *m) {
    okv_status st = read_shapes(c, m, 4096, 11008, 32, 32, 0, 0, 32000);
    if (!st) st = require_act(c, "hidden_act", "silu", m);
    if (!st) st = get_bool(c, "attention_bias", &m->attn_bias_qkv, false);
    if (!st) st = get_bool(c, "mlp_bias", &m->mlp_bias, false);
    if (!st) st = read_tied(c, outer, m, false);
    if (!st) st = read_rope_single(c, m, 10000.0, &m->rope_full);
    m->attn_bias_o = m->attn_bias_qkv;
    m->rope_sliding = m->rope_full;
    m->attn_scale = 1.0f / sqrtf((float)m->head_dim);
    return st;
}

/* Qwen2/Qwen3: Mistral-style sliding window on layers >= max_window_layers
 * when use_sliding_window is true (honoured with ring caches). */
static okv_status read_qwen_window(cfg_ctx *c, okv_hf_model *m) {
    bool use_sw;
    int sw, mwl;
    okv_status st = get_bool(c, "use_sliding_window", &use_sw, false);
    if (!st) st = get_int(c, "sliding_window", &sw, 4096, 0, 1 << 30);
    if (!st) st = get_int(c, "max_window_layers", &mwl, m->n_layers, 0, 1 << 30);
    if (st) return st;
    if (use_sw && sw < 1)
        return okv_fail(c->err, OKV_ERR_UNSUPPORTED, "%s: use_sliding_window is true but sliding_window is %d", c->what, sw);
    if (okv_json_has(c->j, "layer_types"))
        return read_layer_types(c, m, use_sw ? sw : 0, 0);
    for (int i = 0; i < m->n_layers; i++) m->window[i] = (use_sw && i >= mwl) ? sw : 0;
    return OKV_OK;
}

static okv_status parse_qwen(cfg_ctx *c, const cJSON *outer, okv_hf_model *m, bool qwen3) {
    okv_status st = read_shapes(c, m, qwen3 ? 4096 : 4096, qwen3 ? 22016 : 22016, 32, 32, 32, qwen3 ? 128 : 0,
                                qwen3 ? 151936 : 151936);
    if (!st) st = require_act(c, "hidden_act", "silu", m);
    if (!st && qwen3) st = get_bool(c, "attention_bias", &m->attn_bias_qkv, false);
    if (!st) st = read_tied(c, outer, m, false);
    if (!st) st = read_rope_single(c, m, 10000.0, &m->rope_full);
    if (!st) st = read_qwen_window(c, m);
    if (!qwen3) m->attn_bias_qkv = true;   /* Qwen2: q/k/v with bias, o without */
    m->attn_bias_o = qwen3 && m->attn_bias_qkv;
    m->qk_norm = qwen3;
    m->rope_sliding = m->rope_full;
    m->attn_scale = 1.0f / sqrtf((float)m->head_dim);
    return st;
}

/* Gemma-3 full layers use rope_theta + rope_scaling; sliding layers use
 * rope_local_base_freq unscaled, unless the newer per-layer-type
 * rope_parameters spelling is present. */
static okv_status read_gemma3_rope(cfg_ctx *c, okv_hf_model *m) {
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(c->j, "rope_parameters");
    if (cJSON_IsObject(rp) && cJSON_GetObjectItemCaseSensitive(rp, "full_attention")) {
        okv_status st = parse_rope_obj(c, cJSON_GetObjectItemCaseSensitive(rp, "full_attention"),
                                       "rope_parameters.full_attention", 1e6, &m->rope_full);
        if (!st) st = parse_rope_obj(c, cJSON_GetObjectItemCaseSensitive(rp, "sliding_attention"),
                                     "rope_parameters.sliding_attention", 1e4, &m->rope_sliding);
        return st;
    }
    double local;
    okv_status st = read_rope_single(c, m, 1e6, &m->rope_full);
    if (!st) st = get_double(c, "rope_local_base_freq", &local, 1e4);
    if (st) return st;
    return parse_rope_obj(c, NULL, "rope_local_base_freq", local, &m->rope_sliding);
}

static okv_status parse_gemma3(cfg_ctx *c, const cJSON *outer, okv_hf_model *m) {
    int window, pattern, qpas;
    double cap;
    okv_status st = read_shapes(c, m, 2304, 9216, 26, 8, 4, 256, 262208);
    if (!st) st = require_act(c, "hidden_activation", "gelu_pytorch_tanh", m);
    if (!st) st = get_bool(c, "attention_bias", &m->attn_bias_qkv, false);
    if (!st) st = read_tied(c, outer, m, true);
    if (!st) st = get_int(c, "sliding_window", &window, 4096, 1, 1 << 30);
    if (!st) st = get_int(c, "sliding_window_pattern", &pattern, 6, 0, 1 << 20);
    if (!st) st = read_layer_types(c, m, window, pattern);
    if (!st) st = get_int(c, "query_pre_attn_scalar", &qpas, 256, 1, 1 << 20);
    if (!st) st = read_gemma3_rope(c, m);
    if (!st) st = get_softcap(c, &cap);
    if (!st) st = refuse_if_true(c, "use_bidirectional_attention", "bidirectional attention is not supported");
    if (st) return st;
    m->attn_bias_o = m->attn_bias_qkv;
    m->final_softcap = (float)cap;
    m->qk_norm = m->norm_plus_one = m->sandwich_norms = true;
    m->embed_scale = sqrtf((float)m->hidden);
    m->attn_scale = 1.0f / sqrtf((float)qpas);
    /* attn_logit_softcapping is stored but unused by HF's Gemma3Attention:
     * we follow HF and say so. */
    double attn_cap;
    st = get_double(c, "attn_logit_softcapping", &attn_cap, 0);
    if (!st && attn_cap != 0)
        snprintf(m->notes, sizeof m->notes, "attn_logit_softcapping = %g is ignored, as HF's Gemma3 attention ignores it",
                 attn_cap);
    return st;
}

/* A per_layer_config key: decimal digits only, naming a layer < n_layers;
 * -1 otherwise ("3abc", "", "-1", " 2" are refused, not read as numbers). */
static int layer_key(const char *s, int n_layers) {
    if (!s || !*s || strlen(s) > 6) return -1;
    int v = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9') return -1;
        v = v * 10 + (*p - '0');
    }
    return v < n_layers ? v : -1;
}

/* Gemma-4 full-layer geometry: flat global_head_dim/num_global_key_value_heads
 * or the newer per_layer_config {"<layer>": {"head_dim": ...}}. */
static okv_status read_gemma4_global(cfg_ctx *c, okv_hf_model *m) {
    okv_status st = get_int(c, "global_head_dim", &m->global_head_dim, 512, 0, 1 << 14);
    if (!st) st = get_int(c, "num_global_key_value_heads", &m->global_kv_heads, 0, 0, 1024);
    const cJSON *plc = cJSON_GetObjectItemCaseSensitive(c->j, "per_layer_config"), *e;
    if (st || !cJSON_IsObject(plc)) return st;
    cJSON_ArrayForEach(e, plc) {
        cfg_ctx lc = {e, c->what, c->err};
        int layer = layer_key(e->string, m->n_layers);
        if (layer < 0 || !cJSON_IsObject(e))
            return okv_fail(c->err, OKV_ERR_FORMAT, "%s: per_layer_config key \"%s\" is not a layer number in [0, %d) with an "
                            "object value", c->what, e->string ? e->string : "", m->n_layers);
        if (m->window[layer] != 0) continue;   /* only full layers carry their own geometry */
        if (okv_json_has(e, "head_dim")) st = get_int(&lc, "head_dim", &m->global_head_dim, 0, 2, 1 << 14);
        if (!st && okv_json_has(e, "num_key_value_heads")) st = get_int(&lc, "num_key_value_heads", &m->global_kv_heads, 0, 1, 1024);
        if (st) return st;
    }
    return OKV_OK;
}

static okv_status read_gemma4_rope(cfg_ctx *c, okv_hf_model *m) {
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(c->j, "rope_parameters");
    if (!cJSON_IsObject(rp)) {
        parse_rope_obj(c, NULL, "default sliding rope", 1e4, &m->rope_sliding);
        parse_rope_obj(c, NULL, "default full rope", 1e6, &m->rope_full);
        m->rope_full.kind = OKV_ROPE_PROPORTIONAL;
        m->rope_full.partial_rotary = 0.25;
        return OKV_OK;
    }
    okv_status st = parse_rope_obj(c, cJSON_GetObjectItemCaseSensitive(rp, "full_attention"), "rope_parameters.full_attention",
                                   1e6, &m->rope_full);
    if (!st) st = parse_rope_obj(c, cJSON_GetObjectItemCaseSensitive(rp, "sliding_attention"),
                                 "rope_parameters.sliding_attention", 1e4, &m->rope_sliding);
    return st;
}

static okv_status parse_gemma4(cfg_ctx *c, const cJSON *outer, okv_hf_model *m) {
    int window;
    double cap;
    okv_status st = read_shapes(c, m, 2304, 9216, 30, 8, 4, 256, 262144);
    if (!st) st = require_act(c, "hidden_activation", "gelu_pytorch_tanh", m);
    if (!st) st = get_bool(c, "attention_bias", &m->attn_bias_qkv, false);
    if (!st) st = read_tied(c, outer, m, true);
    if (!st) st = get_int(c, "sliding_window", &window, 512, 1, 1 << 30);
    if (!st) st = read_layer_types(c, m, window, 6);
    if (!st && !okv_json_has(c->j, "layer_types")) m->window[m->n_layers - 1] = 0; /* last layer forced full */
    if (!st) st = read_gemma4_global(c, m);
    if (!st) st = read_gemma4_rope(c, m);
    if (!st) st = get_int(c, "num_kv_shared_layers", &m->kv_shared_layers, 0, 0, m->n_layers - 1);
    if (!st) st = get_int(c, "hidden_size_per_layer_input", &m->ple_dim, 256, 0, 1 << 14);
    if (!st) st = get_int(c, "vocab_size_per_layer_input", &m->ple_vocab, 262144, 1, 1 << 24);
    if (!st) st = get_bool(c, "use_double_wide_mlp", &m->double_wide_mlp, false);
    if (!st) st = get_bool(c, "attention_k_eq_v", &m->k_eq_v, false);
    if (!st) st = get_softcap(c, &cap);
    if (!st) st = refuse_if_true(c, "enable_moe_block", "mixture-of-experts blocks are not supported yet");
    if (!st) st = refuse_if_true(c, "use_bidirectional_attention", "bidirectional attention is not supported");
    if (st) return st;
    m->attn_bias_o = m->attn_bias_qkv;
    m->final_softcap = (float)cap;
    m->qk_norm = m->sandwich_norms = m->has_v_norm = m->has_layer_scalar = true;
    m->embed_scale = sqrtf((float)m->hidden);
    m->attn_scale = 1.0f;
    if (m->global_head_dim == 0) m->global_head_dim = m->head_dim;
    if (!m->k_eq_v || m->global_kv_heads == 0) m->global_kv_heads = m->n_kv_heads;
    return OKV_OK;
}

/* ---- entry points --------------------------------------------------------- */

/* A token id field entry: an integer in [0, vocab), judged as a double. */
static okv_status token_id(const cJSON *v, const char *what, const char *key, int idx, int vocab, int *out, okv_error *err) {
    int64_t id;
    if (okv_json_item_int(v, 0, (int64_t)vocab - 1, &id)) { *out = (int)id; return OKV_OK; }
    char at[24] = "";
    if (idx >= 0) snprintf(at, sizeof at, "[%d]", idx);
    if (cJSON_IsNumber(v))
        return okv_fail(err, OKV_ERR_UNSUPPORTED, "%s: %s%s = %.17g is not a token id in [0, vocab_size %d)", what, key, at,
                        v->valuedouble, vocab);
    return okv_fail(err, OKV_ERR_FORMAT, "%s: %s%s must be an integer token id", what, key, at);
}

/* bos_token_id (integer or null) and eos_token_id (integer, list of at most
 * OKV_HF_MAX_EOS integers, or null), every id inside the vocabulary: what
 * a program may carry (okv_meta_validate), so export never writes one the
 * loader refuses. Absent or null leaves m unchanged. */
static okv_status read_special_ids(const cJSON *j, const char *what, int vocab, okv_hf_model *m, okv_error *err) {
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(j, "bos_token_id");
    okv_status st = OKV_OK;
    if (b && !cJSON_IsNull(b)) st = token_id(b, what, "bos_token_id", -1, vocab, &m->bos_id, err);
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "eos_token_id");
    if (st || !e || cJSON_IsNull(e)) return st;
    if (!cJSON_IsArray(e)) {
        st = token_id(e, what, "eos_token_id", -1, vocab, &m->eos_ids[0], err);
        if (!st) m->n_eos = 1;
        return st;
    }
    int n = cJSON_GetArraySize(e);
    if (n > OKV_HF_MAX_EOS)
        return okv_fail(err, OKV_ERR_UNSUPPORTED, "%s: eos_token_id lists %d ids; at most %d are supported", what, n,
                        OKV_HF_MAX_EOS);
    int ids[OKV_HF_MAX_EOS];
    for (int i = 0; i < n && !st; i++) st = token_id(cJSON_GetArrayItem(e, i), what, "eos_token_id", i, vocab, &ids[i], err);
    if (!st) { memcpy(m->eos_ids, ids, sizeof ids); m->n_eos = n; }
    return st;
}

static okv_status pick_family(const char *arch, const char *what, okv_hf_model *m, okv_error *err) {
    static const struct { const char *name; okv_hf_family fam; const char *prefix; } table[] = {
        {"LlamaForCausalLM", OKV_FAM_LLAMA, "model."},
        {"Qwen2ForCausalLM", OKV_FAM_QWEN2, "model."},
        {"Qwen3ForCausalLM", OKV_FAM_QWEN3, "model."},
        {"Gemma3ForCausalLM", OKV_FAM_GEMMA3, "model."},
        {"Gemma3ForConditionalGeneration", OKV_FAM_GEMMA3, "language_model.model."},
        {"Gemma4ForCausalLM", OKV_FAM_GEMMA4, "model."},
        {"Gemma4ForConditionalGeneration", OKV_FAM_GEMMA4, "model.language_model."},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (!strcmp(arch, table[i].name)) {
            m->family = table[i].fam;
            snprintf(m->architecture, sizeof m->architecture, "%s", arch);
            snprintf(m->prefix, sizeof m->prefix, "%s", table[i].prefix);
            return OKV_OK;
        }
    return okv_fail(err, OKV_ERR_UNSUPPORTED, "%s: architectures[0] = \"%s\" is not supported (Llama, Qwen2, Qwen3, Gemma3, Gemma4)", what, arch);
}

okv_status okv_hf_parse_config(const char *json, size_t len, const char *what, okv_hf_model *m, okv_error *err) {
    cJSON *root;
    okv_status st = okv_json_parse(json, len, &root, what, err);
    if (st) return st;
    memset(m, 0, sizeof *m);
    m->bos_id = -1;
    m->embed_scale = 1.0f;
    const cJSON *archs = cJSON_GetObjectItemCaseSensitive(root, "architectures");
    const cJSON *a0 = cJSON_GetArrayItem(archs, 0);
    if (!cJSON_IsObject(root) || !cJSON_IsString(a0))
        st = okv_fail(err, OKV_ERR_FORMAT, "%s: missing \"architectures\" list", what);
    if (!st) st = pick_family(a0->valuestring, what, m, err);
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(root, "text_config");
    cfg_ctx c = {cJSON_IsObject(text) ? text : root, what, err};
    if (!st) {
        switch (m->family) {
        case OKV_FAM_LLAMA: st = parse_llama(&c, root, m); break;
        case OKV_FAM_QWEN2: st = parse_qwen(&c, root, m, false); break;
        case OKV_FAM_QWEN3: st = parse_qwen(&c, root, m, true); break;
        case OKV_FAM_GEMMA3: st = parse_gemma3(&c, root, m); break;
        case OKV_FAM_GEMMA4: st = parse_gemma4(&c, root, m); break;
        }
    }
    if (!st) st = check_rope_tables(&c, m);
    if (!st) st = read_special_ids(root, what, m->vocab, m, err);
    if (!st && c.j != root && m->bos_id < 0) st = read_special_ids(c.j, what, m->vocab, m, err);
    cJSON_Delete(root);
    return st;
}

static okv_status read_generation_eos(const char *dir, okv_hf_model *m, okv_error *err) {
    char *path = okv_path_join(dir, "generation_config.json");
    if (!path) return okv_fail(err, OKV_ERR_NOMEM, "out of memory");
    okv_status st = OKV_OK;
    if (okv_file_exists(path)) {
        cJSON *g;
        st = okv_json_load(path, &g, err);
        if (!st) {
            okv_hf_model tmp = {.bos_id = -1};
            st = read_special_ids(g, path, m->vocab, &tmp, err);
            if (!st && tmp.n_eos) { memcpy(m->eos_ids, tmp.eos_ids, sizeof m->eos_ids); m->n_eos = tmp.n_eos; }
            if (!st && tmp.bos_id >= 0) m->bos_id = tmp.bos_id;
            cJSON_Delete(g);
        }
    }
    free(path);
    return st;
}

okv_status okv_hf_load_config(const char *path, okv_hf_model *m, okv_error *err) {
    bool is_json = strlen(path) > 5 && !strcmp(path + strlen(path) - 5, ".json");
    char *cfg = is_json ? okv_strdup(path) : okv_path_join(path, "config.json");
    char *dir = okv_strdup(path);
    if (!cfg || !dir) { free(cfg); free(dir); return okv_fail(err, OKV_ERR_NOMEM, "out of memory"); }
    if (is_json) { char *slash = strrchr(dir, '/'); if (slash) *slash = 0; else strcpy(dir, "."); }
    char *text;
    size_t len;
    okv_status st = okv_read_file(cfg, &text, &len, err);
    if (!st) {
        st = okv_hf_parse_config(text, len, cfg, m, err);
        free(text);
    }
    if (!st) st = read_generation_eos(dir, m, err);
    free(cfg);
    free(dir);
    return st;
}
