/* mkckpt_lib.c — the checkpoint generator behind okv-mkckpt and the tests.
 *
 * Three steps, each its own function: build the tensor plan (names and
 * shapes in HF state-dict order, per architecture: mk_plan), fill it with
 * seeded random values of the right scale (mk_fill), then write
 * config.json / generation_config.json (mk_config_*) and the safetensors
 * file(s) through okv_st_write / okv_st_write_sharded. */
#include "mkckpt.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "okv_common.h"
#include "okv_st_write.h"

/* ---- names ----------------------------------------------------------- */

static const char *const mk_arch_names[] = {"llama", "qwen3", "qwen2", "gemma3"};

const char *okv_mkckpt_arch_name(okv_mkckpt_arch arch) {
    return (unsigned)arch < 4 ? mk_arch_names[arch] : "?";
}

int okv_mkckpt_parse_arch(const char *s, okv_mkckpt_arch *out) {
    for (int i = 0; i < 4; i++)
        if (!strcmp(s, mk_arch_names[i])) { *out = (okv_mkckpt_arch)i; return 0; }
    return -1;
}

int okv_mkckpt_parse_rope(const char *s, okv_mkckpt_rope *out) {
    if (!strcmp(s, "none")) *out = OKV_MK_ROPE_NONE;
    else if (!strcmp(s, "linear")) *out = OKV_MK_ROPE_LINEAR;
    else if (!strcmp(s, "llama3")) *out = OKV_MK_ROPE_LLAMA3;
    else return -1;
    return 0;
}

void okv_mkckpt_default_spec(okv_mkckpt_spec *s, okv_mkckpt_arch arch) {
    memset(s, 0, sizeof *s);
    s->arch = arch;
    s->dtype = OKV_BF16;
    s->seed = 1;
    s->shards = 1;
    s->tied = true;
    s->max_window_layers = -1;
    s->sliding_pattern = 6;
    s->rope_factor = 8.0;
    s->rope_original_max = 64;
    s->bos_id = 1;
    s->eos_id = 2;
    switch (arch) {
    case OKV_MK_LLAMA: /* llama32-tiny */
        s->hidden = 64; s->layers = 4; s->heads = 4; s->kv_heads = 2; s->head_dim = 16;
        s->intermediate = 128; s->vocab = 512; s->rope_theta = 500000.0;
        s->rope_scaling = OKV_MK_ROPE_LLAMA3; s->rope_factor = 32.0;
        break;
    case OKV_MK_QWEN3: /* qwen3-tiny: head_dim 32 != 64/4 */
        s->hidden = 64; s->layers = 4; s->heads = 4; s->kv_heads = 2; s->head_dim = 32;
        s->intermediate = 160; s->vocab = 640; s->rope_theta = 1000000.0;
        break;
    case OKV_MK_QWEN2: /* qwen2-tiny */
        s->hidden = 96; s->layers = 4; s->heads = 6; s->kv_heads = 2; s->head_dim = 16;
        s->intermediate = 256; s->vocab = 640; s->rope_theta = 1000000.0;
        break;
    case OKV_MK_GEMMA3: /* gemma3-tiny */
        s->hidden = 64; s->layers = 6; s->heads = 4; s->kv_heads = 2; s->head_dim = 32;
        s->intermediate = 192; s->vocab = 512; s->rope_theta = 1000000.0;
        s->window = 8; s->query_pre_attn_scalar = 16; s->bos_id = 2; s->eos_id = 1;
        break;
    }
}

okv_status okv_mkckpt_check(const okv_mkckpt_spec *s, okv_error *err) {
    if ((unsigned)s->arch > OKV_MK_GEMMA3) return okv_fail(err, OKV_ERR_INVALID, "unknown --arch");
#define MK_RANGE(v, lo, hi, opt) \
    if ((v) < (lo) || (v) > (hi)) return okv_fail(err, OKV_ERR_INVALID, "%s %d out of range [%d, %d]", opt, (int)(v), lo, hi)
    MK_RANGE(s->hidden, 1, 1 << 16, "--hidden");
    MK_RANGE(s->layers, 1, 1024, "--layers");
    MK_RANGE(s->heads, 1, 1024, "--heads");
    MK_RANGE(s->kv_heads, 1, 1024, "--kv-heads");
    MK_RANGE(s->head_dim, 2, 4096, "--head-dim");
    MK_RANGE(s->intermediate, 1, 1 << 18, "--intermediate");
    MK_RANGE(s->vocab, 1, 1 << 20, "--vocab");
    MK_RANGE(s->shards, 1, 99, "--shards");
    MK_RANGE(s->bos_id, 0, s->vocab - 1, "--bos");
    MK_RANGE(s->eos_id, 0, s->vocab - 1, "--eos");
    MK_RANGE(s->window, 0, 1 << 24, "--window");
#undef MK_RANGE
    if (s->heads % s->kv_heads)
        return okv_fail(err, OKV_ERR_INVALID, "--heads %d is not a multiple of --kv-heads %d", s->heads, s->kv_heads);
    if (s->head_dim % 2) return okv_fail(err, OKV_ERR_INVALID, "--head-dim %d must be even (RoPE pairs)", s->head_dim);
    if ((double)s->heads * s->head_dim * s->hidden > 1e9 || (double)s->vocab * s->hidden > 1e9 ||
        (double)s->intermediate * s->hidden > 1e9)
        return okv_fail(err, OKV_ERR_INVALID, "a single tensor would exceed 1e9 elements");
    if (!(s->rope_theta > 0)) return okv_fail(err, OKV_ERR_INVALID, "--rope-theta must be > 0");
    if (s->rope_scaling != OKV_MK_ROPE_NONE && !(s->rope_factor >= 1.0))
        return okv_fail(err, OKV_ERR_INVALID, "--rope-factor must be >= 1");
    if (s->rope_scaling == OKV_MK_ROPE_LLAMA3 && s->rope_original_max < 1)
        return okv_fail(err, OKV_ERR_INVALID, "--rope-original-max must be >= 1");
    if (s->arch == OKV_MK_GEMMA3) {
        if (s->rope_scaling == OKV_MK_ROPE_LLAMA3)
            return okv_fail(err, OKV_ERR_INVALID, "--rope-scaling llama3 is not used by gemma3 (use none or linear)");
        if (s->window < 1) return okv_fail(err, OKV_ERR_INVALID, "gemma3 needs --window > 0");
        if (s->sliding_pattern < 1) return okv_fail(err, OKV_ERR_INVALID, "--sliding-pattern must be >= 1");
        if (!(s->query_pre_attn_scalar > 0))
            return okv_fail(err, OKV_ERR_INVALID, "--query-pre-attn-scalar must be > 0");
    }
    if (s->arch == OKV_MK_QWEN2 && s->head_dim * s->heads != s->hidden)
        return okv_fail(err, OKV_ERR_INVALID,
                        "qwen2 configs have no head_dim key: --head-dim must equal --hidden / --heads (%d)",
                        s->hidden / s->heads);
    if (s->max_window_layers > s->layers)
        return okv_fail(err, OKV_ERR_INVALID, "--max-window-layers %d exceeds --layers %d", s->max_window_layers, s->layers);
    return OKV_OK;
}

/* ---- tensor plan ----------------------------------------------------- */

typedef enum mk_kind { MK_MATRIX, MK_EMBED, MK_NORM, MK_BIAS } mk_kind;

typedef struct mk_tensor {
    char name[96];
    int ndim;
    int64_t shape[2];
    mk_kind kind;
    float scale;   /* standard deviation (matrices, embeddings, biases) */
    float *values; /* filled by mk_fill */
} mk_tensor;

typedef struct mk_plan {
    mk_tensor *t;
    int n, cap;
} mk_plan;

static mk_tensor *mk_add(mk_plan *p, const char *name, int64_t rows, int64_t cols, mk_kind kind, float scale) {
    if (p->n == p->cap) {
        int cap = p->cap ? p->cap * 2 : 64;
        mk_tensor *t = realloc(p->t, (size_t)cap * sizeof *t);
        if (!t) return NULL;
        p->t = t;
        p->cap = cap;
    }
    mk_tensor *t = &p->t[p->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = cols ? 2 : 1;
    t->shape[0] = rows;
    t->shape[1] = cols;
    t->kind = kind;
    t->scale = scale;
    return t;
}

static void mk_plan_free(mk_plan *p) {
    for (int i = 0; i < p->n; i++) free(p->t[i].values);
    free(p->t);
}

/* A weight of shape [out, in]: N(0, (gain / sqrt(in))^2). */
static bool mk_linear(mk_plan *p, int layer, const char *suffix, int out, int in, float gain) {
    char name[96];
    snprintf(name, sizeof name, "model.layers.%d.%s", layer, suffix);
    return mk_add(p, name, out, in, MK_MATRIX, gain / sqrtf((float)in)) != NULL;
}

static bool mk_vec(mk_plan *p, int layer, const char *suffix, int n, mk_kind kind, float scale) {
    char name[96];
    snprintf(name, sizeof name, "model.layers.%d.%s", layer, suffix);
    return mk_add(p, name, n, 0, kind, scale) != NULL;
}

/* Names and shapes in HF state-dict (module) order. */
static bool mk_plan_build(const okv_mkckpt_spec *s, mk_plan *p) {
    const int H = s->hidden, D = s->head_dim, Q = s->heads * D, KV = s->kv_heads * D, I = s->intermediate;
    const bool gemma = s->arch == OKV_MK_GEMMA3;
    bool ok = mk_add(p, "model.embed_tokens.weight", s->vocab, H, MK_EMBED, gemma ? 0.1f : 0.5f) != NULL;
    for (int l = 0; l < s->layers && ok; l++) {
        ok = mk_linear(p, l, "self_attn.q_proj.weight", Q, H, 1.5f);
        if (ok && s->arch == OKV_MK_QWEN2) ok = mk_vec(p, l, "self_attn.q_proj.bias", Q, MK_BIAS, 0.5f);
        ok = ok && mk_linear(p, l, "self_attn.k_proj.weight", KV, H, 1.5f);
        if (ok && s->arch == OKV_MK_QWEN2) ok = mk_vec(p, l, "self_attn.k_proj.bias", KV, MK_BIAS, 1.0f);
        ok = ok && mk_linear(p, l, "self_attn.v_proj.weight", KV, H, 1.0f);
        if (ok && s->arch == OKV_MK_QWEN2) ok = mk_vec(p, l, "self_attn.v_proj.bias", KV, MK_BIAS, 0.3f);
        ok = ok && mk_linear(p, l, "self_attn.o_proj.weight", H, Q, 1.0f);
        if (ok && (s->arch == OKV_MK_QWEN3 || gemma)) {
            ok = mk_vec(p, l, "self_attn.q_norm.weight", D, MK_NORM, 0) &&
                 mk_vec(p, l, "self_attn.k_norm.weight", D, MK_NORM, 0);
        }
        ok = ok && mk_linear(p, l, "mlp.gate_proj.weight", I, H, 1.0f) &&
             mk_linear(p, l, "mlp.up_proj.weight", I, H, 1.0f) &&
             mk_linear(p, l, "mlp.down_proj.weight", H, I, 1.0f) &&
             mk_vec(p, l, "input_layernorm.weight", H, MK_NORM, 0) &&
             mk_vec(p, l, "post_attention_layernorm.weight", H, MK_NORM, 0);
        if (ok && gemma)
            ok = mk_vec(p, l, "pre_feedforward_layernorm.weight", H, MK_NORM, 0) &&
                 mk_vec(p, l, "post_feedforward_layernorm.weight", H, MK_NORM, 0);
    }
    ok = ok && mk_add(p, "model.norm.weight", H, 0, MK_NORM, 0) != NULL;
    if (ok && !s->tied) ok = mk_add(p, "lm_head.weight", s->vocab, H, MK_MATRIX, 1.0f / sqrtf((float)H)) != NULL;
    return ok;
}

/* ---- values ---------------------------------------------------------- */

typedef struct mk_rng {
    uint64_t state;
} mk_rng;

static uint64_t mk_next(mk_rng *r) { /* splitmix64 */
    uint64_t z = (r->state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static double mk_uniform(mk_rng *r) { return ((double)(mk_next(r) >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

static float mk_normal(mk_rng *r) { /* Box-Muller, one value per call */
    double u = mk_uniform(r), v = mk_uniform(r);
    return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

/* Norm weights: 1 + w (Llama/Qwen) or w (Gemma's "1 + w" norms), with
 * w ~ N(0, 0.1^2) clipped to +-0.3. */
static float mk_norm_value(mk_rng *r, bool gemma) {
    float w = 0.1f * mk_normal(r);
    if (w > 0.3f) w = 0.3f;
    if (w < -0.3f) w = -0.3f;
    return gemma ? w : 1.0f + w;
}

static bool mk_fill(const okv_mkckpt_spec *s, mk_plan *p) {
    mk_rng rng = {s->seed * 0x2545f4914f6cdd1dULL + 0x1234567ULL};
    const bool gemma = s->arch == OKV_MK_GEMMA3;
    for (int i = 0; i < p->n; i++) {
        mk_tensor *t = &p->t[i];
        size_t n = (size_t)t->shape[0] * (size_t)(t->ndim == 2 ? t->shape[1] : 1);
        t->values = malloc(n * sizeof(float));
        if (!t->values) return false;
        for (size_t j = 0; j < n; j++)
            t->values[j] = t->kind == MK_NORM ? mk_norm_value(&rng, gemma) : t->scale * mk_normal(&rng);
    }
    return true;
}

/* ---- config.json ----------------------------------------------------- */

/* Adds a float the way Python's json writes one: shortest round-trip
 * digits, always with a '.' or exponent (HF reads 32.0 and 32 differently
 * in places, e.g. rope factor validation). */
static void mk_add_float(cJSON *obj, const char *key, double v) {
    char buf[64];
    if (v == floor(v) && fabs(v) < 1e16) {
        snprintf(buf, sizeof buf, "%.1f", v); /* 500000.0, not 5e+05 */
    } else {
        for (int prec = 1; prec <= 17; prec++) {
            snprintf(buf, sizeof buf, "%.*g", prec, v);
            if (strtod(buf, NULL) == v) break;
        }
        if (!strpbrk(buf, ".en")) strcat(buf, ".0");
    }
    cJSON_AddItemToObject(obj, key, cJSON_CreateRaw(buf));
}

static void mk_add_int(cJSON *obj, const char *key, double v) { cJSON_AddNumberToObject(obj, key, v); }

static const char *mk_torch_dtype(okv_dtype d) {
    switch (d) {
    case OKV_F32: return "float32";
    case OKV_F16: return "float16";
    case OKV_BF16: return "bfloat16";
    }
    return "?";
}

static cJSON *mk_rope_scaling(const okv_mkckpt_spec *s) {
    if (s->rope_scaling == OKV_MK_ROPE_NONE) return cJSON_CreateNull();
    cJSON *r = cJSON_CreateObject();
    mk_add_float(r, "factor", s->rope_factor);
    if (s->rope_scaling == OKV_MK_ROPE_LLAMA3) {
        mk_add_float(r, "high_freq_factor", 4.0);
        mk_add_float(r, "low_freq_factor", 1.0);
        mk_add_int(r, "original_max_position_embeddings", s->rope_original_max);
        cJSON_AddStringToObject(r, "rope_type", "llama3");
    } else {
        cJSON_AddStringToObject(r, "rope_type", "linear");
    }
    return r;
}

static void mk_add_architectures(cJSON *c, const char *cls) {
    cJSON *a = cJSON_AddArrayToObject(c, "architectures");
    cJSON_AddItemToArray(a, cJSON_CreateString(cls));
}

/* Qwen's rule: layers i >= max_window_layers slide when use_sliding_window. */
static int mk_max_window_layers(const okv_mkckpt_spec *s) {
    if (s->max_window_layers >= 0) return s->max_window_layers;
    return s->window > 0 ? s->layers / 2 : s->layers;
}

/* Orders an object's keys by strcmp, as HF's to_json_string(sort_keys=True)
 * does, so the builders below can add keys in any order. */
static int mk_key_cmp(const void *a, const void *b) {
    return strcmp((*(cJSON *const *)a)->string, (*(cJSON *const *)b)->string);
}

static cJSON *mk_sorted(cJSON *c) {
    int n = cJSON_GetArraySize(c);
    cJSON **items = malloc(sizeof *items * (size_t)(n ? n : 1));
    if (!items) return c; /* unsorted, still a valid config */
    for (int i = 0; i < n; i++) items[i] = cJSON_DetachItemViaPointer(c, c->child);
    qsort(items, (size_t)n, sizeof *items, mk_key_cmp);
    for (int i = 0; i < n; i++) cJSON_AddItemToObject(c, items[i]->string, items[i]);
    free(items);
    return c;
}

/* What a family's fixture config spells differently. */
typedef struct mk_family {
    const char *cls, *model_type, *transformers_version;
    int max_position_embeddings;
    double rms_norm_eps;
} mk_family;

/* Keys every fixture config has: class, shapes, special ids, dtype. */
static cJSON *mk_config_common(const okv_mkckpt_spec *s, const mk_family *f) {
    cJSON *c = cJSON_CreateObject();
    mk_add_architectures(c, f->cls);
    mk_add_float(c, "attention_dropout", 0.0);
    mk_add_int(c, "bos_token_id", s->bos_id);
    mk_add_int(c, "eos_token_id", s->eos_id);
    mk_add_int(c, "hidden_size", s->hidden);
    mk_add_float(c, "initializer_range", 0.02);
    mk_add_int(c, "intermediate_size", s->intermediate);
    mk_add_int(c, "max_position_embeddings", f->max_position_embeddings);
    cJSON_AddStringToObject(c, "model_type", f->model_type);
    mk_add_int(c, "num_attention_heads", s->heads);
    mk_add_int(c, "num_hidden_layers", s->layers);
    mk_add_int(c, "num_key_value_heads", s->kv_heads);
    mk_add_float(c, "rms_norm_eps", f->rms_norm_eps);
    cJSON_AddBoolToObject(c, "tie_word_embeddings", s->tied);
    cJSON_AddStringToObject(c, "torch_dtype", mk_torch_dtype(s->dtype));
    cJSON_AddStringToObject(c, "transformers_version", f->transformers_version);
    cJSON_AddTrueToObject(c, "use_cache");
    mk_add_int(c, "vocab_size", s->vocab);
    return c;
}

/* The keys of llama32-tiny/config.json. */
static cJSON *mk_config_llama(const okv_mkckpt_spec *s) {
    static const mk_family f = {"LlamaForCausalLM", "llama", "4.52.0.dev0", 131072, 1e-5};
    cJSON *c = mk_config_common(s, &f);
    cJSON_AddFalseToObject(c, "attention_bias");
    mk_add_int(c, "head_dim", s->head_dim);
    cJSON_AddStringToObject(c, "hidden_act", "silu");
    cJSON_AddFalseToObject(c, "mlp_bias");
    mk_add_int(c, "pretraining_tp", 1);
    cJSON_AddItemToObject(c, "rope_scaling", mk_rope_scaling(s));
    mk_add_float(c, "rope_theta", s->rope_theta);
    return c;
}

/* Qwen's sliding-window keys (use_sliding_window, max_window_layers). */
static void mk_add_qwen_window(cJSON *c, const okv_mkckpt_spec *s) {
    cJSON_AddStringToObject(c, "hidden_act", "silu");
    mk_add_int(c, "max_window_layers", mk_max_window_layers(s));
    cJSON_AddBoolToObject(c, "use_sliding_window", s->window > 0);
}

/* The keys of qwen3-tiny/config.json. */
static cJSON *mk_config_qwen3(const okv_mkckpt_spec *s) {
    static const mk_family f = {"Qwen3ForCausalLM", "qwen3", "4.51.0", 40960, 1e-6};
    cJSON *c = mk_config_common(s, &f);
    mk_add_qwen_window(c, s);
    cJSON_AddFalseToObject(c, "attention_bias");
    mk_add_int(c, "head_dim", s->head_dim);
    cJSON_AddItemToObject(c, "rope_scaling", mk_rope_scaling(s));
    mk_add_int(c, "rope_theta", s->rope_theta);
    if (s->window > 0) mk_add_int(c, "sliding_window", s->window);
    else cJSON_AddNullToObject(c, "sliding_window");
    return c;
}

/* The keys of qwen2-tiny/config.json (no head_dim, no attention_bias: the
 * q/k/v biases are unconditional in Qwen2). */
static cJSON *mk_config_qwen2(const okv_mkckpt_spec *s) {
    static const mk_family f = {"Qwen2ForCausalLM", "qwen2", "4.43.1", 32768, 1e-6};
    cJSON *c = mk_config_common(s, &f);
    mk_add_qwen_window(c, s);
    if (s->rope_scaling != OKV_MK_ROPE_NONE) cJSON_AddItemToObject(c, "rope_scaling", mk_rope_scaling(s));
    mk_add_float(c, "rope_theta", s->rope_theta);
    mk_add_int(c, "sliding_window", s->window > 0 ? s->window : 32768);
    return c;
}

/* The keys of gemma3-tiny/config.json plus an explicit layer_types that
 * agrees with sliding_window_pattern (newer HF reads the former, 4.50 the
 * latter). */
static cJSON *mk_config_gemma3(const okv_mkckpt_spec *s) {
    static const mk_family f = {"Gemma3ForCausalLM", "gemma3_text", "4.50.0.dev0", 32768, 1e-6};
    cJSON *c = mk_config_common(s, &f);
    cJSON_AddFalseToObject(c, "attention_bias");
    cJSON_AddNullToObject(c, "attn_logit_softcapping");
    cJSON_AddStringToObject(c, "cache_implementation", "hybrid");
    cJSON_AddNullToObject(c, "final_logit_softcapping");
    mk_add_int(c, "head_dim", s->head_dim);
    cJSON_AddStringToObject(c, "hidden_activation", "gelu_pytorch_tanh");
    cJSON *lt = cJSON_AddArrayToObject(c, "layer_types");
    for (int i = 0; i < s->layers; i++)
        cJSON_AddItemToArray(lt, cJSON_CreateString((i + 1) % s->sliding_pattern ? "sliding_attention"
                                                                                   : "full_attention"));
    mk_add_int(c, "pad_token_id", 0);
    mk_add_int(c, "query_pre_attn_scalar", s->query_pre_attn_scalar);
    mk_add_int(c, "rope_local_base_freq", 10000);
    cJSON_AddItemToObject(c, "rope_scaling", mk_rope_scaling(s));
    mk_add_int(c, "rope_theta", s->rope_theta);
    mk_add_int(c, "sliding_window", s->window);
    mk_add_int(c, "sliding_window_pattern", s->sliding_pattern);
    return c;
}

static cJSON *mk_generation_config(const okv_mkckpt_spec *s) {
    cJSON *g = cJSON_CreateObject();
    mk_add_int(g, "bos_token_id", s->bos_id);
    if (s->arch == OKV_MK_GEMMA3) cJSON_AddStringToObject(g, "cache_implementation", "hybrid");
    cJSON_AddTrueToObject(g, "do_sample");
    cJSON *eos = cJSON_AddArrayToObject(g, "eos_token_id");
    cJSON_AddItemToArray(eos, cJSON_CreateNumber(s->eos_id));
    if (s->arch == OKV_MK_GEMMA3) {
        mk_add_int(g, "pad_token_id", 0);
        mk_add_int(g, "top_k", 64);
        mk_add_float(g, "top_p", 0.95);
    } else {
        mk_add_float(g, "temperature", 0.6);
        mk_add_float(g, "top_p", 0.9);
    }
    cJSON_AddStringToObject(g, "transformers_version", "4.51.0");
    return g;
}

/* Prints j the way Python's json.dump(indent=2) does, so the files look
 * like the ones HF writes (cJSON_Print indents with tabs). */
static bool mk_json_print(FILE *f, const cJSON *j, int depth) {
    bool is_obj = cJSON_IsObject(j);
    if (!is_obj && !cJSON_IsArray(j)) {
        char *text = cJSON_PrintUnformatted(j);
        bool ok = text && fputs(text, f) >= 0;
        free(text);
        return ok;
    }
    if (!j->child) return fputs(is_obj ? "{}" : "[]", f) >= 0;
    bool ok = fputc(is_obj ? '{' : '[', f) != EOF;
    for (const cJSON *c = j->child; c && ok; c = c->next) {
        ok = fprintf(f, "\n%*s", 2 * (depth + 1), "") >= 0;
        if (ok && is_obj) {
            cJSON *key = cJSON_CreateString(c->string);
            char *text = key ? cJSON_PrintUnformatted(key) : NULL;
            ok = text && fprintf(f, "%s: ", text) >= 0;
            free(text);
            cJSON_Delete(key);
        }
        ok = ok && mk_json_print(f, c, depth + 1);
        if (ok && c->next) ok = fputc(',', f) != EOF;
    }
    return ok && fprintf(f, "\n%*s%c", 2 * depth, "", is_obj ? '}' : ']') >= 0;
}

static okv_status mk_write_json(const char *dir, const char *name, const cJSON *j, okv_error *err) {
    char *path = okv_path_join(dir, name);
    if (!path) return okv_fail(err, OKV_ERR_NOMEM, "%s: out of memory", dir);
    okv_status st = OKV_OK;
    FILE *f = fopen(path, "wb");
    if (!f) st = okv_fail(err, OKV_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    else {
        bool ok = mk_json_print(f, j, 0) && fputc('\n', f) != EOF;
        if (fclose(f) != 0 || !ok) st = okv_fail(err, OKV_ERR_IO, "%s: write failed", path);
    }
    free(path);
    return st;
}

/* ---- writing --------------------------------------------------------- */

static int mk_write_tensor_cmp(const void *a, const void *b) {
    return strcmp(((const okv_st_write_tensor *)a)->name, ((const okv_st_write_tensor *)b)->name);
}

/* Converts the plan to the storage dtype and writes the safetensors file(s);
 * a single file is sorted by name as HF's writer does, shards keep
 * state-dict order so a layer may span two shards (as in the fixture). */
static okv_status mk_write_weights(const okv_mkckpt_spec *s, const mk_plan *p, const char *dir, okv_error *err) {
    okv_st_write_tensor *w = calloc((size_t)p->n, sizeof *w);
    void **bufs = calloc((size_t)p->n, sizeof *bufs);
    okv_status st = OKV_OK;
    if (!w || !bufs) st = okv_fail(err, OKV_ERR_NOMEM, "%s: out of memory", dir);
    for (int i = 0; i < p->n && !st; i++) {
        const mk_tensor *t = &p->t[i];
        size_t n = (size_t)t->shape[0] * (size_t)(t->ndim == 2 ? t->shape[1] : 1);
        bufs[i] = malloc(n * okv_dtype_size(s->dtype));
        if (!bufs[i]) { st = okv_fail(err, OKV_ERR_NOMEM, "%s: out of memory", dir); break; }
        okv_convert(bufs[i], s->dtype, t->values, OKV_F32, n);
        w[i] = (okv_st_write_tensor){.name = t->name, .dtype = s->dtype, .ndim = t->ndim,
                                     .shape = {t->shape[0], t->shape[1]}, .data = bufs[i]};
    }
    char *single = okv_path_join(dir, OKV_ST_SINGLE_NAME), *index = okv_path_join(dir, OKV_ST_INDEX_NAME);
    if (!st && (!single || !index)) st = okv_fail(err, OKV_ERR_NOMEM, "%s: out of memory", dir);
    if (!st && s->shards == 1) {
        unlink(index); /* a stale index would not be read (model.safetensors wins) but confuses */
        qsort(w, (size_t)p->n, sizeof *w, mk_write_tensor_cmp);
        st = okv_st_write(single, w, p->n, err);
    } else if (!st) {
        unlink(single); /* it would shadow the index */
        st = okv_st_write_sharded(dir, w, p->n, s->shards, err);
    }
    free(single);
    free(index);
    for (int i = 0; bufs && i < p->n; i++) free(bufs[i]);
    free(bufs);
    free(w);
    return st;
}

/* mkdir -p: creates dir and any missing parents. */
static okv_status mk_mkdirs(const char *dir, okv_error *err) {
    char *p = okv_strdup(dir);
    if (!p) return okv_fail(err, OKV_ERR_NOMEM, "%s: out of memory", dir);
    okv_status st = OKV_OK;
    for (char *q = p + 1; !st; q++) {
        if (*q != '/' && *q) continue;
        char saved = *q;
        *q = 0;
        if (mkdir(p, 0755) != 0 && errno != EEXIST)
            st = okv_fail(err, OKV_ERR_IO, "%s: cannot create directory: %s", p, strerror(errno));
        *q = saved;
        if (!saved) break;
    }
    free(p);
    return st;
}

okv_status okv_mkckpt_write(const okv_mkckpt_spec *s, const char *dir, okv_error *err) {
    okv_status st = okv_mkckpt_check(s, err);
    if (st) return st;
    if (!*dir) return okv_fail(err, OKV_ERR_INVALID, "empty output directory");
    st = mk_mkdirs(dir, err);
    if (st) return st;
    mk_plan plan = {0};
    if (!mk_plan_build(s, &plan) || !mk_fill(s, &plan)) {
        mk_plan_free(&plan);
        return okv_fail(err, OKV_ERR_NOMEM, "%s: out of memory building the weights", dir);
    }
    cJSON *config = NULL;
    switch (s->arch) {
    case OKV_MK_LLAMA: config = mk_config_llama(s); break;
    case OKV_MK_QWEN3: config = mk_config_qwen3(s); break;
    case OKV_MK_QWEN2: config = mk_config_qwen2(s); break;
    case OKV_MK_GEMMA3: config = mk_config_gemma3(s); break;
    }
    cJSON *gen = mk_generation_config(s);
    st = mk_write_json(dir, "config.json", mk_sorted(config), err);
    if (!st) st = mk_write_json(dir, "generation_config.json", gen, err);
    if (!st) st = mk_write_weights(s, &plan, dir, err);
    cJSON_Delete(config);
    cJSON_Delete(gen);
    mk_plan_free(&plan);
    return st;
}
