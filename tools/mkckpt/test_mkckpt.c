/* Tests okv_mkckpt_write: generates checkpoints of every architecture
 * (single and sharded, each storage dtype, tied and untied) and reads them
 * back with the safetensors reader, checking tensor names/shapes/dtypes
 * against tables written here from the fixtures' layouts, config.json keys
 * against the spec, weight scales, seeding, and spec validation. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mkckpt.h"
#include "okv_common.h"
#include "okv_safetensors.h"
#include "okv_test.h"

static char g_tmp[64];


/* ---- expected layout ------------------------------------------------- */

/* Per-layer tensor suffixes and their shapes in terms of the spec, as in
 * the fixtures (llama32-tiny, qwen3-tiny, qwen2-tiny, gemma3-tiny). */
enum { S_Q, S_KV, S_H, S_I, S_D }; /* Q = heads*head_dim, KV = kv_heads*head_dim */
typedef struct layer_tensor {
    const char *suffix;
    int rows, cols; /* S_* codes; cols -1 = 1-D */
    unsigned archs; /* bit per okv_mkckpt_arch */
} layer_tensor;

#define ALL 0xf
#define BIT(a) (1u << (a))
static const layer_tensor k_layer[] = {
    {"self_attn.q_proj.weight", S_Q, S_H, ALL},
    {"self_attn.k_proj.weight", S_KV, S_H, ALL},
    {"self_attn.v_proj.weight", S_KV, S_H, ALL},
    {"self_attn.o_proj.weight", S_H, S_Q, ALL},
    {"self_attn.q_proj.bias", S_Q, -1, BIT(OKV_MK_QWEN2)},
    {"self_attn.k_proj.bias", S_KV, -1, BIT(OKV_MK_QWEN2)},
    {"self_attn.v_proj.bias", S_KV, -1, BIT(OKV_MK_QWEN2)},
    {"self_attn.q_norm.weight", S_D, -1, BIT(OKV_MK_QWEN3) | BIT(OKV_MK_GEMMA3)},
    {"self_attn.k_norm.weight", S_D, -1, BIT(OKV_MK_QWEN3) | BIT(OKV_MK_GEMMA3)},
    {"mlp.gate_proj.weight", S_I, S_H, ALL},
    {"mlp.up_proj.weight", S_I, S_H, ALL},
    {"mlp.down_proj.weight", S_H, S_I, ALL},
    {"input_layernorm.weight", S_H, -1, ALL},
    {"post_attention_layernorm.weight", S_H, -1, ALL},
    {"pre_feedforward_layernorm.weight", S_H, -1, BIT(OKV_MK_GEMMA3)},
    {"post_feedforward_layernorm.weight", S_H, -1, BIT(OKV_MK_GEMMA3)},
};

static int64_t dim_of(const okv_mkckpt_spec *s, int code) {
    switch (code) {
    case S_Q: return (int64_t)s->heads * s->head_dim;
    case S_KV: return (int64_t)s->kv_heads * s->head_dim;
    case S_H: return s->hidden;
    case S_I: return s->intermediate;
    case S_D: return s->head_dim;
    }
    return -1;
}

static void check_tensor(const okv_st_set *set, const char *name, const okv_mkckpt_spec *s, int64_t r, int64_t c,
                         const char *what) {
    const okv_st_tensor *t = okv_st_find(set, name);
    CHECKF(t != NULL, "%s: missing %s", what, name);
    if (!t) return;
    CHECKF(t->supported && t->dtype == s->dtype, "%s: %s has dtype %s", what, name, t->dtype_name);
    bool ok = c < 0 ? (t->ndim == 1 && t->shape[0] == r) : (t->ndim == 2 && t->shape[0] == r && t->shape[1] == c);
    CHECKF(ok, "%s: %s shape [%lld, %lld] expected [%lld, %lld]", what, name, (long long)t->shape[0],
           (long long)(t->ndim > 1 ? t->shape[1] : -1), (long long)r, (long long)c);
}

/* Returns the number of tensors the spec should produce, checking each. */
static int check_layout(const okv_st_set *set, const okv_mkckpt_spec *s, const char *what) {
    int n = 0;
    check_tensor(set, "model.embed_tokens.weight", s, s->vocab, s->hidden, what), n++;
    check_tensor(set, "model.norm.weight", s, s->hidden, -1, what), n++;
    if (!s->tied) check_tensor(set, "lm_head.weight", s, s->vocab, s->hidden, what), n++;
    else CHECKF(okv_st_find(set, "lm_head.weight") == NULL, "%s: tied but lm_head present", what);
    for (int l = 0; l < s->layers; l++) {
        for (size_t i = 0; i < sizeof k_layer / sizeof k_layer[0]; i++) {
            char name[128];
            snprintf(name, sizeof name, "model.layers.%d.%s", l, k_layer[i].suffix);
            if (!(k_layer[i].archs & BIT(s->arch))) {
                CHECKF(okv_st_find(set, name) == NULL, "%s: unexpected %s", what, name);
                continue;
            }
            check_tensor(set, name, s, dim_of(s, k_layer[i].rows),
                         k_layer[i].cols < 0 ? -1 : dim_of(s, k_layer[i].cols), what);
            n++;
        }
    }
    return n;
}

/* ---- config.json ----------------------------------------------------- */

static int64_t cfg_int(const cJSON *c, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c, key);
    return cJSON_IsNumber(v) ? (int64_t)v->valuedouble : -999;
}

static void check_config(const char *dir, const okv_mkckpt_spec *s, const char *what) {
    char *path = okv_path_join(dir, "config.json");
    cJSON *c = NULL;
    okv_error err;
    CHECK_OK(okv_json_load(path, &c, &err), &err);
    free(path);
    if (!c) return;
    static const char *classes[] = {"LlamaForCausalLM", "Qwen3ForCausalLM", "Qwen2ForCausalLM", "Gemma3ForCausalLM"};
    static const char *types[] = {"llama", "qwen3", "qwen2", "gemma3_text"};
    const cJSON *arch = cJSON_GetObjectItemCaseSensitive(c, "architectures");
    CHECKF(cJSON_IsArray(arch) && cJSON_GetArraySize(arch) == 1 && cJSON_IsString(arch->child) &&
               !strcmp(arch->child->valuestring, classes[s->arch]), "%s: architectures", what);
    const char *mt = okv_json_str(c, "model_type");
    CHECKF(mt && !strcmp(mt, types[s->arch]), "%s: model_type", what);
    CHECK(cfg_int(c, "hidden_size") == s->hidden);
    CHECK(cfg_int(c, "num_hidden_layers") == s->layers);
    CHECK(cfg_int(c, "num_attention_heads") == s->heads);
    CHECK(cfg_int(c, "num_key_value_heads") == s->kv_heads);
    CHECK(cfg_int(c, "intermediate_size") == s->intermediate);
    CHECK(cfg_int(c, "vocab_size") == s->vocab);
    if (s->arch == OKV_MK_QWEN2) CHECKF(!okv_json_has(c, "head_dim"), "%s: qwen2 has no head_dim key", what);
    else CHECKF(cfg_int(c, "head_dim") == s->head_dim, "%s: head_dim", what);
    bool tied = !s->tied;
    okv_error e2;
    CHECK(okv_json_opt_bool(c, "tie_word_embeddings", &tied, !s->tied, what, &e2) == OKV_OK && tied == s->tied);
    static const char *torch[] = {"float32", "float16", "bfloat16"};
    const char *td = okv_json_str(c, "torch_dtype");
    CHECKF(td && !strcmp(td, torch[s->dtype]), "%s: torch_dtype", what);
    CHECK(cfg_int(c, "bos_token_id") == s->bos_id && cfg_int(c, "eos_token_id") == s->eos_id);

    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(c, "rope_scaling");
    if (s->rope_scaling == OKV_MK_ROPE_NONE) {
        CHECKF(!rs || cJSON_IsNull(rs), "%s: rope_scaling should be null", what);
    } else {
        const char *rt = okv_json_str(rs, "rope_type");
        CHECKF(rt && !strcmp(rt, s->rope_scaling == OKV_MK_ROPE_LLAMA3 ? "llama3" : "linear"), "%s: rope_type", what);
        double f = 0;
        CHECK(okv_json_opt_double(rs, "factor", &f, 0, what, &e2) == OKV_OK && f == s->rope_factor);
        if (s->rope_scaling == OKV_MK_ROPE_LLAMA3)
            CHECK(cfg_int(rs, "original_max_position_embeddings") == s->rope_original_max &&
                  okv_json_has(rs, "low_freq_factor") && okv_json_has(rs, "high_freq_factor"));
    }
    double theta = 0;
    CHECK(okv_json_opt_double(c, "rope_theta", &theta, 0, what, &e2) == OKV_OK && theta == s->rope_theta);

    if (s->arch == OKV_MK_GEMMA3) {
        CHECK(cfg_int(c, "sliding_window") == s->window);
        CHECK(cfg_int(c, "sliding_window_pattern") == s->sliding_pattern);
        CHECK(cfg_int(c, "query_pre_attn_scalar") == (int64_t)s->query_pre_attn_scalar);
        CHECK(okv_json_has(c, "rope_local_base_freq"));
        const char *act = okv_json_str(c, "hidden_activation");
        CHECK(act && !strcmp(act, "gelu_pytorch_tanh"));
        const cJSON *lt = cJSON_GetObjectItemCaseSensitive(c, "layer_types");
        CHECKF(cJSON_GetArraySize(lt) == s->layers, "%s: layer_types length", what);
        int i = 0, bad = 0;
        for (const cJSON *e = lt ? lt->child : NULL; e; e = e->next, i++) {
            const char *want = (i % s->sliding_pattern == s->sliding_pattern - 1) ? "full_attention" : "sliding_attention";
            if (!cJSON_IsString(e) || strcmp(e->valuestring, want)) bad++;
        }
        CHECKF(bad == 0, "%s: layer_types disagree with the pattern", what);
    } else {
        const char *act = okv_json_str(c, "hidden_act");
        CHECK(act && !strcmp(act, "silu"));
    }
    if (s->arch == OKV_MK_QWEN3 || s->arch == OKV_MK_QWEN2) {
        bool sliding = !(s->window > 0);
        CHECK(okv_json_opt_bool(c, "use_sliding_window", &sliding, false, what, &e2) == OKV_OK &&
              sliding == (s->window > 0));
        if (s->window > 0) CHECK(cfg_int(c, "sliding_window") == s->window);
    }
    cJSON_Delete(c);

    path = okv_path_join(dir, "generation_config.json");
    CHECK_OK(okv_json_load(path, &c, &err), &err);
    free(path);
    if (c) {
        const cJSON *eos = cJSON_GetObjectItemCaseSensitive(c, "eos_token_id");
        CHECK(cJSON_IsArray(eos) && cJSON_IsNumber(eos->child) && eos->child->valueint == s->eos_id);
        cJSON_Delete(c);
    }
}

/* ---- weight scales --------------------------------------------------- */

static float elem(const okv_st_tensor *t, uint64_t i) {
    float f;
    uint16_t h;
    if (t->dtype == OKV_F32) { memcpy(&f, (const uint8_t *)t->data + 4 * i, 4); return f; }
    memcpy(&h, (const uint8_t *)t->data + 2 * i, 2);
    return t->dtype == OKV_F16 ? okv_f16_to_f32(h) : okv_bf16_to_f32(h);
}

static void moments(const okv_st_tensor *t, double *mean, double *sd, float *lo, float *hi) {
    double s = 0, s2 = 0;
    *lo = INFINITY; *hi = -INFINITY;
    for (uint64_t i = 0; i < t->numel; i++) {
        float v = elem(t, i);
        s += v; s2 += (double)v * v;
        if (v < *lo) *lo = v;
        if (v > *hi) *hi = v;
    }
    *mean = s / (double)t->numel;
    *sd = sqrt(fmax(0.0, s2 / (double)t->numel - *mean * *mean));
}

static void check_scales(const okv_st_set *set, const okv_mkckpt_spec *s, const char *what) {
    bool gemma = s->arch == OKV_MK_GEMMA3;
    double mean, sd;
    float lo, hi;
    const okv_st_tensor *t = okv_st_find(set, "model.layers.0.mlp.down_proj.weight");
    if (t) {
        moments(t, &mean, &sd, &lo, &hi);
        double want = 1.0 / sqrt((double)s->intermediate);
        CHECKF(fabs(sd - want) < 0.15 * want && fabs(mean) < 0.2 * want, "%s: down_proj sd %g want %g", what, sd, want);
    }
    t = okv_st_find(set, "model.layers.0.self_attn.q_proj.weight");
    if (t) { /* q/k are 1.5x wider so attention is far from uniform */
        moments(t, &mean, &sd, &lo, &hi);
        double want = 1.5 / sqrt((double)s->hidden);
        CHECKF(fabs(sd - want) < 0.15 * want, "%s: q_proj sd %g want %g", what, sd, want);
    }
    t = okv_st_find(set, "model.layers.0.input_layernorm.weight");
    if (t) {
        moments(t, &mean, &sd, &lo, &hi);
        double center = gemma ? 0.0 : 1.0;
        CHECKF(lo >= center - 0.31 && hi <= center + 0.31 && sd > 0.03, "%s: norm weights [%g, %g] sd %g", what, lo,
               hi, sd);
    }
    t = okv_st_find(set, "model.embed_tokens.weight");
    if (t) {
        moments(t, &mean, &sd, &lo, &hi);
        double want = gemma ? 0.1 : 0.5;
        CHECKF(fabs(sd - want) < 0.1 * want, "%s: embedding sd %g want %g", what, sd, want);
    }
}

/* ---- cases ----------------------------------------------------------- */

static void run_case(const okv_mkckpt_spec *s, const char *name) {
    char *dir = okv_path_join(g_tmp, name);
    okv_error err;
    CHECK_OK(okv_mkckpt_write(s, dir, &err), &err);
    okv_st_set *set = NULL;
    CHECK_OK(okv_st_open_dir(dir, &set, &err), &err);
    if (set) {
        int want = check_layout(set, s, name);
        CHECKF(okv_st_count(set) == want, "%s: %d tensors, expected %d", name, okv_st_count(set), want);
        CHECKF(okv_st_file_count(set) == s->shards, "%s: %d files, expected %d", name, okv_st_file_count(set),
               s->shards);
        check_scales(set, s, name);
        okv_st_free(set);
    }
    check_config(dir, s, name);
    free(dir);
}

static void test_archs(void) {
    okv_mkckpt_spec s;
    okv_mkckpt_default_spec(&s, OKV_MK_LLAMA);
    run_case(&s, "llama");
    s.shards = 2; s.tied = false; s.dtype = OKV_F32; s.rope_scaling = OKV_MK_ROPE_LINEAR; s.rope_factor = 4;
    s.head_dim = 24; s.heads = 6; s.kv_heads = 3; /* head_dim != hidden/heads */
    run_case(&s, "llama-sharded-f32");
    okv_mkckpt_default_spec(&s, OKV_MK_LLAMA);
    s.rope_scaling = OKV_MK_ROPE_NONE; s.layers = 3; s.shards = 3; s.dtype = OKV_F16; s.kv_heads = 1;
    run_case(&s, "llama-3shards-mqa");

    okv_mkckpt_default_spec(&s, OKV_MK_QWEN3);
    run_case(&s, "qwen3");
    s.tied = false; s.window = 16; s.rope_scaling = OKV_MK_ROPE_LLAMA3; s.rope_factor = 8; s.rope_original_max = 32;
    run_case(&s, "qwen3-untied-window");

    okv_mkckpt_default_spec(&s, OKV_MK_QWEN2);
    run_case(&s, "qwen2");
    s.shards = 2; s.dtype = OKV_F16;
    run_case(&s, "qwen2-sharded");

    okv_mkckpt_default_spec(&s, OKV_MK_GEMMA3);
    run_case(&s, "gemma3");
    s.layers = 8; s.sliding_pattern = 4; s.window = 5; s.rope_scaling = OKV_MK_ROPE_LINEAR; s.tied = false;
    s.query_pre_attn_scalar = 64; s.shards = 2;
    run_case(&s, "gemma3-variant");
}

/* Same seed -> same bytes; another seed -> different weights. */
static void test_seeding(void) {
    okv_mkckpt_spec s;
    okv_mkckpt_default_spec(&s, OKV_MK_QWEN3);
    s.layers = 1;
    okv_error err;
    char *a = okv_path_join(g_tmp, "seed_a"), *b = okv_path_join(g_tmp, "seed_b"), *c = okv_path_join(g_tmp, "seed_c");
    CHECK_OK(okv_mkckpt_write(&s, a, &err), &err);
    CHECK_OK(okv_mkckpt_write(&s, b, &err), &err);
    s.seed = 2;
    CHECK_OK(okv_mkckpt_write(&s, c, &err), &err);
    okv_st_set *sa = NULL, *sb = NULL, *sc = NULL;
    CHECK_OK(okv_st_open_dir(a, &sa, &err), &err);
    CHECK_OK(okv_st_open_dir(b, &sb, &err), &err);
    CHECK_OK(okv_st_open_dir(c, &sc, &err), &err);
    if (sa && sb && sc) {
        int same_ab = 1, diff_ac = 0;
        for (int i = 0; i < okv_st_count(sa); i++) {
            const okv_st_tensor *ta = okv_st_get(sa, i), *tb = okv_st_get(sb, i), *tc = okv_st_get(sc, i);
            if (ta->nbytes != tb->nbytes || memcmp(ta->data, tb->data, ta->nbytes)) same_ab = 0;
            if (ta->nbytes == tc->nbytes && memcmp(ta->data, tc->data, ta->nbytes)) diff_ac++;
        }
        CHECK(same_ab);
        CHECK(diff_ac == okv_st_count(sa));
    }
    okv_st_free(sa); okv_st_free(sb); okv_st_free(sc);
    free(a); free(b); free(c);
}

/* Re-generating a directory as sharded must not leave a model.safetensors
 * that would shadow the index (and vice versa). */
static void test_regenerate(void) {
    okv_mkckpt_spec s;
    okv_mkckpt_default_spec(&s, OKV_MK_LLAMA);
    s.layers = 2;
    okv_error err;
    char *dir = okv_path_join(g_tmp, "nested/dirs/regen"); /* parents are created */
    CHECK_OK(okv_mkckpt_write(&s, dir, &err), &err);
    s.shards = 2;
    CHECK_OK(okv_mkckpt_write(&s, dir, &err), &err);
    okv_st_set *set = NULL;
    CHECK_OK(okv_st_open_dir(dir, &set, &err), &err);
    CHECK(set && okv_st_file_count(set) == 2);
    okv_st_free(set);
    s.shards = 1;
    CHECK_OK(okv_mkckpt_write(&s, dir, &err), &err);
    char *index = okv_path_join(dir, OKV_ST_INDEX_NAME);
    CHECK(!okv_file_exists(index));
    free(index);
    free(dir);
}

static void test_invalid_specs(void) {
    okv_mkckpt_spec s;
    okv_error err;
    char *dir = okv_path_join(g_tmp, "never");
    /* each case: an architecture's default spec with one field made inconsistent */
#define EXPECT_BAD_SPEC(arch, edit, needle)                                                       \
    do {                                                                                          \
        okv_mkckpt_default_spec(&s, arch);                                                        \
        edit;                                                                                     \
        CHECKF(okv_mkckpt_write(&s, dir, &err) == OKV_ERR_INVALID && strstr(err.message, needle), \
               "%s: %s", #edit, err.message);                                                     \
    } while (0)
    EXPECT_BAD_SPEC(OKV_MK_LLAMA, s.kv_heads = 3, "--kv-heads");
    EXPECT_BAD_SPEC(OKV_MK_QWEN2, s.head_dim = 32, "--head-dim");
    EXPECT_BAD_SPEC(OKV_MK_GEMMA3, s.rope_scaling = OKV_MK_ROPE_LLAMA3, "llama3");
    EXPECT_BAD_SPEC(OKV_MK_GEMMA3, s.window = 0, "--window");
    EXPECT_BAD_SPEC(OKV_MK_LLAMA, s.head_dim = 15, "even");
    EXPECT_BAD_SPEC(OKV_MK_LLAMA, s.eos_id = s.vocab, "--eos");
    EXPECT_BAD_SPEC(OKV_MK_LLAMA, s.shards = 1000, "--shards");
#undef EXPECT_BAD_SPEC
    CHECK(!okv_file_exists(dir)); /* nothing written on a bad spec */
    free(dir);
    okv_mkckpt_arch a;
    okv_mkckpt_rope r;
    CHECK(okv_mkckpt_parse_arch("gemma3", &a) == 0 && a == OKV_MK_GEMMA3);
    CHECK(okv_mkckpt_parse_arch("gemma4", &a) != 0);
    CHECK(okv_mkckpt_parse_rope("llama3", &r) == 0 && r == OKV_MK_ROPE_LLAMA3);
    CHECK(okv_mkckpt_parse_rope("yarn", &r) != 0);
}

int main(void) {
    okv_test_mkdtemp(g_tmp, sizeof g_tmp, "mkckpt");
    test_archs();
    test_seeding();
    test_regenerate();
    test_invalid_specs();
    okv_test_rm_tree(g_tmp);
    return okv_test_finish();
}
