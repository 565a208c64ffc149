/* okv_gguf_model.c — GGUF metadata and tensors in HF terms (okv_gguf_model.h).
 *
 * The metadata mapping writes the config.json HF would have shipped and
 * lets okv_hf_parse_config apply the family's defaults and refusals, so the
 * two input paths cannot drift apart. What llama.cpp's runtime hard-codes
 * instead of storing is supplied here the way llama.cpp does: Gemma-3
 * sliding layers use rope base 10000 and a full layer every 6th (unless the
 * file says otherwise), attention scale 1/sqrt(key_length) except for the
 * 62-layer 27B (1/sqrt(hidden/heads)).
 *
 * llama.cpp's converter permutes Llama-family q/k rows so its interleaved
 * RoPE sees HF's rotate-half pairs: within each head of D rows, HF row
 * j*D/2 + i is stored at row 2*i + j. Qwen and Gemma are converted
 * unpermuted (their llama.cpp RoPE is the NEOX/rotate-half kind). Gemma
 * RMSNorm weights are stored as 1 + w. */
#include "okv_gguf_model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "offkv.h"
#include "okv_common.h"
#include "okv_hf.h"

typedef enum { ARCH_LLAMA, ARCH_QWEN2, ARCH_QWEN3, ARCH_GEMMA3 } gguf_arch;

static const struct {
    const char *gguf, *hf;
    gguf_arch arch;
} arch_table[] = {
    {"llama", "LlamaForCausalLM", ARCH_LLAMA},
    {"qwen2", "Qwen2ForCausalLM", ARCH_QWEN2},
    {"qwen3", "Qwen3ForCausalLM", ARCH_QWEN3},
    {"gemma3", "Gemma3ForCausalLM", ARCH_GEMMA3},
};

static bool arch_of(const okv_gguf *g, int *idx) {
    const okv_gguf_kv *kv = okv_gguf_find(g, "general.architecture");
    if (!kv || kv->type != OKV_GGUF_STRING) return false;
    for (size_t i = 0; i < sizeof arch_table / sizeof arch_table[0]; i++)
        if (kv->v.s.len == strlen(arch_table[i].gguf) && !memcmp(kv->v.s.ptr, arch_table[i].gguf, kv->v.s.len)) {
            *idx = (int)i;
            return true;
        }
    return false;
}

okv_status okv_gguf_hf_architecture(const okv_gguf *g, const char **hf_class, okv_error *err) {
    int i;
    if (arch_of(g, &i)) { *hf_class = arch_table[i].hf; return OKV_OK; }
    okv_gguf_str s;
    okv_error e2 = {0};
    if (okv_gguf_get_str(g, "general.architecture", &s, &e2))
        return okv_fail(err, OKV_ERR_FORMAT, "%s: no string key 'general.architecture'", okv_gguf_path(g));
    return okv_fail(err, OKV_ERR_UNSUPPORTED,
                    "%s: general.architecture '%.*s' is not supported (llama, qwen2, qwen3, gemma3)", okv_gguf_path(g),
                    (int)(s.len > 64 ? 64 : s.len), s.ptr);
}

/* ---- metadata -> config.json ---------------------------------------------------- */

typedef struct cfg {
    const okv_gguf *g;
    const char *arch;   /* GGUF key prefix */
    cJSON *j;
    okv_error *err;
    okv_status st;
    char key[128];      /* the last key arch_key made */
} cfg;

/* "<arch>.suffix", in c->key (valid until the next call). */
static const char *arch_key(cfg *c, const char *suffix) {
    snprintf(c->key, sizeof c->key, "%s.%s", c->arch, suffix);
    return c->key;
}

/* <arch>.suffix as an integer in [lo, hi] into HF field `field`; missing:
 * required -> error, else dflt (< 0: leave the field out). */
static int64_t put_int(cfg *c, const char *suffix, const char *field, bool required, int64_t dflt, int64_t lo, int64_t hi) {
    if (c->st) return 0;
    const char *key = arch_key(c, suffix);
    int64_t v = dflt;
    okv_error e = {0};
    okv_status st = okv_gguf_get_int(c->g, key, &v, &e);
    if (st == OKV_ERR_NOT_FOUND && !required) {
        if (dflt >= 0 && field) cJSON_AddNumberToObject(c->j, field, (double)dflt);
        return dflt;
    }
    if (st) { c->st = okv_fail(c->err, st, "%s", e.message); return 0; }
    if (v < lo || v > hi) {
        c->st = okv_fail(c->err, OKV_ERR_UNSUPPORTED, "%s: key '%s' = %lld is out of the supported range [%lld, %lld]",
                         okv_gguf_path(c->g), key, (long long)v, (long long)lo, (long long)hi);
        return 0;
    }
    if (field) cJSON_AddNumberToObject(c->j, field, (double)v);
    return v;
}

/* A float hyperparameter as the file gives it: finite and > 0 (>= 0 when
 * zero_ok), else c->st names the GGUF key. A NaN left out of config.json
 * would silently become the family's default. */
static bool float_ok(cfg *c, const char *key, double v, bool zero_ok) {
    if (isfinite(v) && (v > 0 || (zero_ok && v == 0))) return true;
    c->st = okv_fail(c->err, OKV_ERR_FORMAT, "%s: key '%s' = %g must be a finite number %s", okv_gguf_path(c->g), key, v,
                     zero_ok ? ">= 0" : "> 0");
    return false;
}

/* <arch>.suffix as a number into obj's `field` (missing: left out, so the
 * HF parser applies its default). */
static void put_float(cfg *c, cJSON *obj, const char *suffix, const char *field, bool zero_ok) {
    if (c->st) return;
    const char *key = arch_key(c, suffix);
    double v;
    okv_error e = {0};
    okv_status st = okv_gguf_get_float(c->g, key, &v, &e);
    if (st == OKV_ERR_NOT_FOUND) return;
    if (st) { c->st = okv_fail(c->err, st, "%s", e.message); return; }
    if (float_ok(c, key, v, zero_ok)) cJSON_AddNumberToObject(obj, field, v);
}

/* <arch>.rope.scaling.* -> rope_scaling (the HF parser refuses kinds it
 * cannot honour, by name). */
static void put_rope_scaling(cfg *c) {
    if (c->st) return;
    const char *key = arch_key(c, "rope.scaling.type");
    okv_gguf_str s;
    okv_error e = {0};
    okv_status st = okv_gguf_get_str(c->g, key, &s, &e);
    if (st == OKV_ERR_NOT_FOUND) return;
    if (st) { c->st = okv_fail(c->err, st, "%s", e.message); return; }
    char type[32];
    snprintf(type, sizeof type, "%.*s", (int)(s.len < 31 ? s.len : 31), s.ptr);
    if (!strcmp(type, "none")) return;
    cJSON *r = cJSON_AddObjectToObject(c->j, "rope_scaling");
    cJSON_AddStringToObject(r, "rope_type", type);
    put_float(c, r, "rope.scaling.factor", "factor", false);
    key = arch_key(c, "rope.scaling.original_context_length");
    int64_t orig;
    if (okv_gguf_get_int(c->g, key, &orig, &e) == OKV_OK)
        cJSON_AddNumberToObject(r, "original_max_position_embeddings", (double)orig);
}

static void put_special_ids(cfg *c) {
    static const struct { const char *key, *field; } ids[] = {
        {"tokenizer.ggml.bos_token_id", "bos_token_id"},
        {"tokenizer.ggml.eos_token_id", "eos_token_id"},
        {"tokenizer.ggml.padding_token_id", "pad_token_id"},
    };
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        int64_t v;
        okv_error e = {0};
        if (okv_gguf_get_int(c->g, ids[i].key, &v, &e) == OKV_OK && v >= 0 && v < INT32_MAX)
            cJSON_AddNumberToObject(c->j, ids[i].field, (double)v);
    }
}

/* vocab_size: <arch>.vocab_size, else the token table's row count. */
static void put_vocab(cfg *c) {
    if (c->st) return;
    const char *key = arch_key(c, "vocab_size");
    int64_t v;
    okv_error e = {0};
    if (okv_gguf_get_int(c->g, key, &v, &e) != OKV_OK) {
        const okv_gguf_tensor *t = okv_gguf_find_tensor(c->g, "token_embd.weight");
        if (!t || t->n_dims != 2) {
            c->st = okv_fail(c->err, OKV_ERR_FORMAT, "%s: no '%s' and no 2-D tensor 'token_embd.weight'",
                             okv_gguf_path(c->g), key);
            return;
        }
        v = t->ne[1];
    }
    cJSON_AddNumberToObject(c->j, "vocab_size", (double)v);
}

/* Gemma-3 layer types: <arch>.attention.sliding_window_pattern as a per-layer
 * bool array (true = sliding) or a period; llama.cpp's default period is 6. */
static void put_gemma3_layers(cfg *c, int64_t n_layers) {
    if (c->st) return;
    const char *key = arch_key(c, "attention.sliding_window_pattern");
    const okv_gguf_kv *kv = okv_gguf_find(c->g, key);
    if (kv && kv->type == OKV_GGUF_ARRAY) {
        if (kv->elem_type != OKV_GGUF_BOOL || kv->n_elems != (uint64_t)n_layers) {
            c->st = okv_fail(c->err, OKV_ERR_FORMAT, "%s: key '%s' must be %lld bools", okv_gguf_path(c->g), key,
                             (long long)n_layers);
            return;
        }
        cJSON *lt = cJSON_AddArrayToObject(c->j, "layer_types");
        for (int64_t i = 0; i < n_layers; i++)
            cJSON_AddItemToArray(lt, cJSON_CreateString(kv->elems[i] ? "sliding_attention" : "full_attention"));
        return;
    }
    put_int(c, "attention.sliding_window_pattern", "sliding_window_pattern", false, 6, 1, 1 << 20);
}

okv_status okv_gguf_hf_config(const okv_gguf *g, char **json, okv_error *err) {
    *json = NULL;
    const char *hf;
    okv_status st = okv_gguf_hf_architecture(g, &hf, err);
    if (st) return st;
    int ai;
    arch_of(g, &ai);
    gguf_arch arch = arch_table[ai].arch;
    cfg c = {.g = g, .arch = arch_table[ai].gguf, .j = cJSON_CreateObject(), .err = err};
    if (!c.j) return okv_fail(err, OKV_ERR_NOMEM, "out of memory");
    cJSON_AddItemToObject(c.j, "architectures", cJSON_CreateStringArray(&hf, 1));
    cJSON_AddStringToObject(c.j, "model_type", arch == ARCH_GEMMA3 ? "gemma3_text" : c.arch);
    int64_t hidden = put_int(&c, "embedding_length", "hidden_size", true, 0, 1, 1 << 16);
    put_int(&c, "feed_forward_length", "intermediate_size", true, 0, 1, 1 << 20);
    int64_t layers = put_int(&c, "block_count", "num_hidden_layers", true, 0, 1, 512);
    int64_t heads = put_int(&c, "attention.head_count", "num_attention_heads", true, 0, 1, 1024);
    put_int(&c, "attention.head_count_kv", "num_key_value_heads", false, heads, 1, 1024);
    int64_t head_dim = !c.st && heads ? hidden / heads : 0;
    head_dim = put_int(&c, "attention.key_length", "head_dim", false, head_dim, 2, 4096);
    int64_t vlen = put_int(&c, "attention.value_length", NULL, false, head_dim, 2, 4096);
    int64_t rot = put_int(&c, "rope.dimension_count", NULL, false, head_dim, 0, 4096);
    put_int(&c, "context_length", "max_position_embeddings", false, -1, 1, 1 << 30);
    put_float(&c, c.j, "attention.layer_norm_rms_epsilon", "rms_norm_eps", false);
    put_float(&c, c.j, "rope.freq_base", "rope_theta", false);
    put_rope_scaling(&c);
    put_vocab(&c);
    cJSON_AddBoolToObject(c.j, "tie_word_embeddings", okv_gguf_find_tensor(g, "output.weight") == NULL);
    if (!c.st && vlen != head_dim)
        c.st = okv_fail(err, OKV_ERR_UNSUPPORTED, "%s: %s.attention.value_length %lld differs from key_length %lld",
                        okv_gguf_path(g), c.arch, (long long)vlen, (long long)head_dim);
    if (!c.st && rot != head_dim)
        c.st = okv_fail(err, OKV_ERR_UNSUPPORTED,
                        "%s: %s.rope.dimension_count %lld differs from the head dim %lld (partial rotary is not supported)",
                        okv_gguf_path(g), c.arch, (long long)rot, (long long)head_dim);
    if (arch == ARCH_LLAMA)
        cJSON_AddBoolToObject(c.j, "attention_bias", okv_gguf_find_tensor(g, "blk.0.attn_q.bias") != NULL);
    if (arch == ARCH_QWEN3)
        cJSON_AddBoolToObject(c.j, "attention_bias", okv_gguf_find_tensor(g, "blk.0.attn_q.bias") != NULL);
    if (arch == ARCH_QWEN2 || arch == ARCH_QWEN3) {
        int64_t sw = put_int(&c, "attention.sliding_window", NULL, false, 0, 0, 1 << 30);
        if (sw > 0) {
            cJSON_AddBoolToObject(c.j, "use_sliding_window", true);
            cJSON_AddNumberToObject(c.j, "sliding_window", (double)sw);
            cJSON_AddNumberToObject(c.j, "max_window_layers", 0);
        }
    }
    if (arch == ARCH_GEMMA3) {
        put_int(&c, "attention.sliding_window", "sliding_window", true, 0, 1, 1 << 30);
        put_gemma3_layers(&c, layers);
        cJSON_AddNumberToObject(c.j, "rope_local_base_freq", 10000.0);
        cJSON_AddNumberToObject(c.j, "query_pre_attn_scalar", (double)(layers == 62 ? hidden / heads : head_dim));
        cJSON_AddStringToObject(c.j, "hidden_activation", "gelu_pytorch_tanh");
        put_float(&c, c.j, "final_logit_softcapping", "final_logit_softcapping", true); /* 0 = none */
    } else {
        cJSON_AddStringToObject(c.j, "hidden_act", "silu");
    }
    put_special_ids(&c);
    if (!c.st) {
        *json = cJSON_PrintUnformatted(c.j);
        if (!*json) c.st = okv_fail(err, OKV_ERR_NOMEM, "out of memory");
    }
    cJSON_Delete(c.j);
    return c.st;
}

/* ---- tensor names ----------------------------------------------------------------- */

static const struct { const char *gguf, *hf; } layer_names[] = {
    {"attn_norm", "input_layernorm"},
    {"attn_q", "self_attn.q_proj"},
    {"attn_k", "self_attn.k_proj"},
    {"attn_v", "self_attn.v_proj"},
    {"attn_output", "self_attn.o_proj"},
    {"attn_q_norm", "self_attn.q_norm"},
    {"attn_k_norm", "self_attn.k_norm"},
    {"ffn_gate", "mlp.gate_proj"},
    {"ffn_up", "mlp.up_proj"},
    {"ffn_down", "mlp.down_proj"},
};

/* Gemma's four norms per layer: llama.cpp's ffn_norm is HF's
 * pre_feedforward_layernorm there, post_attention_layernorm elsewhere. */
static const char *norm_name(gguf_arch arch, const char *g) {
    if (!strcmp(g, "ffn_norm")) return arch == ARCH_GEMMA3 ? "pre_feedforward_layernorm" : "post_attention_layernorm";
    if (arch == ARCH_GEMMA3 && !strcmp(g, "post_attention_norm")) return "post_attention_layernorm";
    if (arch == ARCH_GEMMA3 && !strcmp(g, "post_ffw_norm")) return "post_feedforward_layernorm";
    return NULL;
}

/* "blk.N.<part>.<weight|bias>" -> layer N, part, suffix. */
static bool split_layer_name(const char *name, long *layer, char *part, size_t n, const char **suffix) {
    if (strncmp(name, "blk.", 4)) return false;
    char *end;
    *layer = strtol(name + 4, &end, 10);
    if (end == name + 4 || *end != '.' || *layer < 0) return false;
    const char *p = end + 1, *dot = strrchr(p, '.');
    if (!dot || (size_t)(dot - p) >= n) return false;
    memcpy(part, p, (size_t)(dot - p));
    part[dot - p] = 0;
    *suffix = dot + 1;
    return !strcmp(*suffix, "weight") || !strcmp(*suffix, "bias");
}

/* The HF name of a GGUF tensor, or false. */
static bool hf_name(gguf_arch arch, const char *name, char *out, size_t n) {
    if (!strcmp(name, "token_embd.weight")) { snprintf(out, n, "model.embed_tokens.weight"); return true; }
    if (!strcmp(name, "output_norm.weight")) { snprintf(out, n, "model.norm.weight"); return true; }
    if (!strcmp(name, "output.weight")) { snprintf(out, n, "lm_head.weight"); return true; }
    long layer;
    char part[64];
    const char *suffix;
    if (!split_layer_name(name, &layer, part, sizeof part, &suffix)) return false;
    const char *hf = norm_name(arch, part);
    for (size_t i = 0; !hf && i < sizeof layer_names / sizeof layer_names[0]; i++)
        if (!strcmp(part, layer_names[i].gguf)) hf = layer_names[i].hf;
    if (!hf) return false;
    snprintf(out, n, "model.layers.%ld.%s.%s", layer, hf, suffix);
    return true;
}

void okv_gguf_gguf_name(const okv_gguf *g, const char *hf, char *out, size_t n) {
    int ai;
    snprintf(out, n, "%s", hf);
    if (!arch_of(g, &ai)) return;
    gguf_arch arch = arch_table[ai].arch;
    if (!strcmp(hf, "model.embed_tokens.weight")) { snprintf(out, n, "token_embd.weight"); return; }
    if (!strcmp(hf, "model.norm.weight")) { snprintf(out, n, "output_norm.weight"); return; }
    if (!strcmp(hf, "lm_head.weight")) { snprintf(out, n, "output.weight"); return; }
    long layer;
    char rest[128];
    if (sscanf(hf, "model.layers.%ld.%127s", &layer, rest) != 2) return;
    char *dot = strrchr(rest, '.');
    if (!dot) return;
    *dot = 0;
    static const char *const norms[] = {"ffn_norm", "post_attention_norm", "post_ffw_norm"};
    for (size_t i = 0; i < sizeof norms / sizeof norms[0]; i++) {
        const char *h = norm_name(arch, norms[i]);
        if (h && !strcmp(h, rest)) { snprintf(out, n, "blk.%ld.%s.%s", layer, norms[i], dot + 1); return; }
    }
    for (size_t i = 0; i < sizeof layer_names / sizeof layer_names[0]; i++)
        if (!strcmp(rest, layer_names[i].hf)) { snprintf(out, n, "blk.%ld.%s.%s", layer, layer_names[i].gguf, dot + 1); return; }
}

static bool is_norm(const char *hf) { return strstr(hf, "norm.weight") != NULL; }

bool okv_gguf_hf_tensor_of(const okv_gguf *g, const okv_gguf_tensor *t, okv_gguf_hf_tensor *out) {
    int ai;
    if (!arch_of(g, &ai)) return false;
    gguf_arch arch = arch_table[ai].arch;
    memset(out, 0, sizeof *out);
    if (!hf_name(arch, t->name, out->name, sizeof out->name)) return false;
    out->ndim = t->n_dims;
    for (int d = 0; d < t->n_dims; d++) out->shape[d] = t->ne[t->n_dims - 1 - d];
    if (arch == ARCH_GEMMA3 && is_norm(out->name)) out->add = -1.0f;
    if (arch == ARCH_LLAMA && t->n_dims == 2) {
        bool q = strstr(out->name, "self_attn.q_proj.") != NULL, k = strstr(out->name, "self_attn.k_proj.") != NULL;
        okv_error e = {0};
        int64_t heads = 0, kv_heads = 0;
        okv_gguf_get_int(g, "llama.attention.head_count", &heads, &e);
        if (okv_gguf_get_int(g, "llama.attention.head_count_kv", &kv_heads, &e)) kv_heads = heads;
        if (q) out->unpermute_heads = (int)heads;
        if (k) out->unpermute_heads = (int)kv_heads;
    }
    return true;
}

/* ---- values -------------------------------------------------------------------------- */

okv_status okv_gguf_read_hf(const okv_gguf_tensor *t, const okv_gguf_hf_tensor *h, int64_t row0, int64_t n_rows,
                            float *dst, okv_error *err) {
    const int64_t row_len = t->ne[0], rows = (int64_t)(t->n_elems / (uint64_t)row_len);
    if (row0 < 0 || n_rows < 0 || row0 + n_rows > rows)
        return okv_fail(err, OKV_ERR_INVALID, "tensor '%s': rows [%lld, +%lld) outside its %lld rows", t->name,
                        (long long)row0, (long long)n_rows, (long long)rows);
    okv_status st;
    if (h->unpermute_heads <= 0) {
        st = okv_gguf_dequantize(t, (uint64_t)(row0 * row_len), (uint64_t)(n_rows * row_len), dst, err);
    } else {
        if (rows % h->unpermute_heads || (rows / h->unpermute_heads) % 2)
            return okv_fail(err, OKV_ERR_FORMAT, "tensor '%s': %lld rows do not split into %d heads of even size", t->name,
                            (long long)rows, h->unpermute_heads);
        const int64_t D = rows / h->unpermute_heads, half = D / 2;
        if (row0 % D || n_rows % D)
            return okv_fail(err, OKV_ERR_INVALID, "tensor '%s': rows must be read in whole heads of %lld", t->name,
                            (long long)D);
        float *head = malloc((size_t)(D * row_len) * sizeof *head);
        if (!head) return okv_fail(err, OKV_ERR_NOMEM, "out of memory un-permuting '%s'", t->name);
        st = OKV_OK;
        for (int64_t r = 0; r < n_rows && !st; r += D) {
            st = okv_gguf_dequantize(t, (uint64_t)((row0 + r) * row_len), (uint64_t)(D * row_len), head, err);
            for (int64_t i = 0; !st && i < half; i++)
                for (int64_t j = 0; j < 2; j++)
                    memcpy(dst + (r + j * half + i) * row_len, head + (2 * i + j) * row_len, (size_t)row_len * sizeof *dst);
        }
        free(head);
    }
    if (!st && h->add != 0.0f)
        for (int64_t i = 0; i < n_rows * row_len; i++) dst[i] += h->add;
    return st;
}

/* ---- inspect --------------------------------------------------------------------------- */

static void add_gguf_str(cJSON *o, const okv_gguf *g, const char *key, const char *field) {
    okv_gguf_str s;
    okv_error e = {0};
    if (okv_gguf_get_str(g, key, &s, &e) == OKV_OK) {
        char buf[256];
        snprintf(buf, sizeof buf, "%.*s", (int)(s.len < 255 ? s.len : 255), s.ptr);
        cJSON_AddStringToObject(o, field, buf);
    }
}

static cJSON *model_doc(const okv_hf_model *m) {
    cJSON *h = cJSON_CreateObject();
    cJSON_AddNumberToObject(h, "n_layers", m->n_layers);
    cJSON_AddNumberToObject(h, "hidden_size", m->hidden);
    cJSON_AddNumberToObject(h, "intermediate_size", m->intermediate);
    cJSON_AddNumberToObject(h, "n_heads", m->n_heads);
    cJSON_AddNumberToObject(h, "n_kv_heads", m->n_kv_heads);
    cJSON_AddNumberToObject(h, "head_dim", m->head_dim);
    cJSON_AddNumberToObject(h, "vocab_size", m->vocab);
    cJSON_AddNumberToObject(h, "context_length", m->max_position_embeddings);
    cJSON_AddNumberToObject(h, "rope_theta", m->rope_full.theta);
    if (m->rope_sliding.theta != m->rope_full.theta) cJSON_AddNumberToObject(h, "rope_theta_sliding", m->rope_sliding.theta);
    cJSON_AddNumberToObject(h, "rms_norm_eps", m->rms_eps);
    cJSON_AddBoolToObject(h, "tied_embeddings", m->tied);
    int sliding = 0, window = 0;
    for (int i = 0; i < m->n_layers; i++)
        if (m->window[i]) { sliding++; window = m->window[i]; }
    if (sliding) {
        cJSON_AddNumberToObject(h, "sliding_window", window);
        cJSON_AddNumberToObject(h, "sliding_layers", sliding);
    }
    return h;
}

static cJSON *types_doc(const okv_gguf *g, uint64_t *total) {
    uint64_t count[OKV_GGML_TYPE_LIMIT] = {0}, bytes[OKV_GGML_TYPE_LIMIT] = {0};
    *total = 0;
    for (int i = 0; i < okv_gguf_tensor_count(g); i++) {
        const okv_gguf_tensor *t = okv_gguf_tensor_at(g, i);
        count[t->type]++;
        bytes[t->type] += t->nbytes;
        *total += t->nbytes;
    }
    cJSON *a = cJSON_CreateArray();
    for (int ty = 0; ty < OKV_GGML_TYPE_LIMIT; ty++) {
        if (!count[ty]) continue;
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "type", okv_ggml_type_name(ty));
        cJSON_AddNumberToObject(e, "tensors", (double)count[ty]);
        cJSON_AddNumberToObject(e, "bytes", (double)bytes[ty]);
        cJSON_AddBoolToObject(e, "dequantizable", okv_ggml_can_dequantize(ty));
        cJSON_AddItemToArray(a, e);
    }
    return a;
}

static cJSON *tokenizer_doc(const okv_gguf *g) {
    cJSON *t = cJSON_CreateObject();
    add_gguf_str(t, g, "tokenizer.ggml.model", "model");
    add_gguf_str(t, g, "tokenizer.ggml.pre", "pre");
    uint64_t n;
    okv_error e = {0};
    if (okv_gguf_get_array(g, "tokenizer.ggml.tokens", NULL, &n, &e) == OKV_OK) cJSON_AddNumberToObject(t, "tokens", (double)n);
    if (okv_gguf_get_array(g, "tokenizer.ggml.merges", NULL, &n, &e) == OKV_OK) cJSON_AddNumberToObject(t, "merges", (double)n);
    cJSON_AddBoolToObject(t, "scores", okv_gguf_find(g, "tokenizer.ggml.scores") != NULL);
    okv_gguf_str s;
    bool tmpl = okv_gguf_get_str(g, "tokenizer.chat_template", &s, &e) == OKV_OK;
    cJSON_AddBoolToObject(t, "chat_template", tmpl);
    if (tmpl) cJSON_AddNumberToObject(t, "chat_template_bytes", (double)s.len);
    return t;
}

static void render_text(const cJSON *d, char **out) {
    size_t cap = 8192, len = 0;
    char *b = malloc(cap);
    if (!b) { *out = NULL; return; }
#define P(...) do { int k_ = snprintf(b + len, cap - len, __VA_ARGS__); if (k_ > 0) len += (size_t)k_ < cap - len ? (size_t)k_ : cap - len - 1; } while (0)
    const char *name = okv_json_str(d, "name");
    P("gguf: %s (version %d)\n", okv_json_str(d, "path"), (int)cJSON_GetObjectItem(d, "version")->valuedouble);
    if (name) P("name: %s%s%s\n", name, okv_json_str(d, "size_label") ? " | size " : "",
                okv_json_str(d, "size_label") ? okv_json_str(d, "size_label") : "");
    const char *gguf_arch = okv_json_str(d, "gguf_architecture"); /* absent in a file without the key */
    P("architecture: %s -> %s\n", gguf_arch ? gguf_arch : "(none)", okv_json_str(d, "architecture"));
    const cJSON *h = cJSON_GetObjectItem(d, "hyperparameters"), *e;
    if (h) {
        P("hyperparameters:");
        cJSON_ArrayForEach(e, h) {
            if (cJSON_IsBool(e)) P(" %s=%s", e->string, cJSON_IsTrue(e) ? "yes" : "no");
            else P(" %s=%g", e->string, e->valuedouble);
        }
        P("\n");
    }
    const cJSON *err = cJSON_GetObjectItem(d, "unsupported");
    if (err) P("cannot export: %s\n", err->valuestring);
    P("tensors: %d, %.1f MiB:", (int)cJSON_GetObjectItem(d, "n_tensors")->valuedouble,
      cJSON_GetObjectItem(d, "tensor_bytes")->valuedouble / 1048576.0);
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(d, "tensor_types"))
        P(" %s x%d (%.1f MiB)%s", okv_json_str(e, "type"), (int)cJSON_GetObjectItem(e, "tensors")->valuedouble,
          cJSON_GetObjectItem(e, "bytes")->valuedouble / 1048576.0,
          cJSON_IsTrue(cJSON_GetObjectItem(e, "dequantizable")) ? "" : " [not dequantizable]");
    P("\n");
    const cJSON *t = cJSON_GetObjectItem(d, "tokenizer");
    P("tokenizer:");
    cJSON_ArrayForEach(e, t) {
        if (cJSON_IsString(e)) P(" %s=%s", e->string, e->valuestring);
        else if (cJSON_IsBool(e)) P(" %s=%s", e->string, cJSON_IsTrue(e) ? "yes" : "no");
        else P(" %s=%.0f", e->string, e->valuedouble);
    }
    P("\n");
#undef P
    *out = b;
}

okv_status okv_gguf_describe(const char *path, bool json, char **out, okv_error *err) {
    *out = NULL;
    okv_gguf *g;
    okv_status st = okv_gguf_open(path, &g, err);
    if (st) return st;
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "path", path);
    cJSON_AddNumberToObject(d, "version", okv_gguf_version(g));
    add_gguf_str(d, g, "general.name", "name");
    add_gguf_str(d, g, "general.size_label", "size_label");
    add_gguf_str(d, g, "general.architecture", "gguf_architecture");
    const char *hf = NULL;
    char *config = NULL;
    okv_hf_model m;
    okv_error e = {0};
    st = okv_gguf_hf_config(g, &config, &e);
    if (!st) st = okv_hf_parse_config(config, strlen(config), path, &m, &e);
    if (!st && okv_gguf_hf_architecture(g, &hf, &e) == OKV_OK) {
        cJSON_AddStringToObject(d, "architecture", hf);
        cJSON_AddItemToObject(d, "hyperparameters", model_doc(&m));
    } else {
        cJSON_AddStringToObject(d, "architecture", "(not supported)");
        cJSON_AddStringToObject(d, "unsupported", e.message);
    }
    free(config);
    uint64_t total;
    cJSON_AddNumberToObject(d, "n_tensors", okv_gguf_tensor_count(g));
    cJSON_AddItemToObject(d, "tensor_types", types_doc(g, &total));
    cJSON_AddNumberToObject(d, "tensor_bytes", (double)total);
    cJSON_AddItemToObject(d, "tokenizer", tokenizer_doc(g));
    okv_gguf_close(g);
    if (json) *out = cJSON_Print(d);
    else render_text(d, out);
    cJSON_Delete(d);
    return *out ? OKV_OK : okv_fail(err, OKV_ERR_NOMEM, "out of memory");
}

/* A regular file named *.gguf counts even without the magic, so a damaged
 * one is reported as a bad GGUF rather than as a missing HF directory. */
bool okv_is_gguf_file(const char *path) {
    if (okv_gguf_is_gguf_file(path)) return true;
    size_t n = strlen(path);
    struct stat sb;
    return n > 5 && !strcmp(path + n - 5, ".gguf") && stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}
