/* okv_hf_parse_config field by field: each architecture's real config
 * (../shared/fixtures/configs: Llama-3.2-1B, Qwen3-0.6B, Gemma-3-1B,
 * Gemma-4-E2B; Qwen2 from the tiny model fixture) parsed into the values
 * read off the JSON by hand; the defaults a family uses when a field is
 * absent; and the exact one-line message for missing or ill-typed fields.
 * test_hf_config.c covers hostile numeric values; this file the plain
 * mapping a newcomer would want to check first. */
#include <math.h>

#include "hf_config_edit.h"
#include "okv_test.h"

#define CONFIGS "../shared/fixtures/configs/"
#define LLAMA CONFIGS "llama-3.2-1b-instruct/config.json"
#define QWEN3 CONFIGS "qwen3-0.6b/config.json"
#define GEMMA3 CONFIGS "gemma-3-1b-it/config.json"
#define GEMMA4 CONFIGS "gemma-4-e2b-it/config.json"
#define QWEN2 "../shared/fixtures/models/qwen2-tiny/config.json"

static bool near(double a, double b) { return fabs(a - b) <= 1e-6 * fabs(b); }

/* Parses path with one edit (NULL key: none); the parse must succeed. */
static okv_hf_model parsed(const char *path, const char *key, const char *value) {
    okv_hf_model m;
    okv_error err = {0};
    okv_status st = hf_parse_edited(path, key, value, &m, &err);
    CHECKF(st == OKV_OK, "%s %s = %s: %s", path, key ? key : "-", value ? value : "(deleted)", err.message);
    return m;
}

/* Parses path with one edit; must fail with exactly `message`. */
static void expect_message(const char *path, const char *key, const char *value, okv_status want, const char *message) {
    okv_hf_model m;
    okv_error err = {0};
    okv_status st = hf_parse_edited(path, key, value, &m, &err);
    CHECKF(st == want && !strcmp(err.message, message), "%s %s = %s: status %d '%s', want %d '%s'", path, key,
           value ? value : "(deleted)", st, err.message, want, message);
}

/* Counts layers with window w. */
static int layers_with_window(const okv_hf_model *m, int w) {
    int n = 0;
    for (int i = 0; i < m->n_layers; i++) n += m->window[i] == w;
    return n;
}

static void test_llama(void) {
    okv_hf_model m = parsed(LLAMA, NULL, NULL);
    CHECK(m.family == OKV_FAM_LLAMA && !strcmp(m.architecture, "LlamaForCausalLM") && !strcmp(m.prefix, "model."));
    CHECK(m.hidden == 2048 && m.intermediate == 8192 && m.n_layers == 16 && m.n_heads == 32 && m.n_kv_heads == 8);
    CHECK(m.head_dim == 64 && m.vocab == 128256 && m.max_position_embeddings == 131072 && near(m.rms_eps, 1e-5));
    CHECK(m.tied && !m.attn_bias_qkv && !m.attn_bias_o && !m.mlp_bias && !m.qk_norm && !m.norm_plus_one);
    CHECK(m.act == 0 && m.embed_scale == 1.0f && near(m.attn_scale, 0.125) && m.final_softcap == 0);
    CHECK(layers_with_window(&m, 0) == 16);
    CHECK(m.rope_full.kind == OKV_ROPE_LLAMA3 && near(m.rope_full.theta, 500000) && near(m.rope_full.factor, 32));
    CHECK(near(m.rope_full.low_freq_factor, 1) && near(m.rope_full.high_freq_factor, 4));
    CHECK(near(m.rope_full.original_max_pos, 8192) && m.rope_sliding.kind == OKV_ROPE_LLAMA3);
    CHECK(m.bos_id == 128000 && m.n_eos == 1 && m.eos_ids[0] == 128009);
    CHECK(m.kv_shared_layers == 0 && m.ple_dim == 0);
}

static void test_qwen3(void) {
    okv_hf_model m = parsed(QWEN3, NULL, NULL);
    CHECK(m.family == OKV_FAM_QWEN3 && m.hidden == 1024 && m.intermediate == 3072 && m.n_layers == 28);
    CHECK(m.n_heads == 16 && m.n_kv_heads == 8 && m.head_dim == 128 && m.vocab == 151936);
    CHECK(m.max_position_embeddings == 40960 && near(m.rms_eps, 1e-6) && m.tied && m.qk_norm);
    CHECK(!m.attn_bias_qkv && !m.attn_bias_o && near(m.attn_scale, 1.0 / sqrt(128.0)));
    CHECK(m.rope_full.kind == OKV_ROPE_DEFAULT && near(m.rope_full.theta, 1e6));
    CHECK(layers_with_window(&m, 0) == 28);   /* sliding_window null, use_sliding_window false */
    CHECK(m.bos_id == 151643 && m.n_eos == 1 && m.eos_ids[0] == 151645);
}

static void test_qwen2(void) {
    okv_hf_model m = parsed(QWEN2, NULL, NULL);
    CHECK(m.family == OKV_FAM_QWEN2 && m.hidden == 96 && m.n_heads == 6 && m.n_kv_heads == 2 && m.n_layers == 4);
    CHECK(m.head_dim == 16);                   /* no head_dim: hidden / heads */
    CHECK(m.attn_bias_qkv && !m.attn_bias_o && !m.qk_norm && m.tied);
    CHECK(layers_with_window(&m, 0) == 4);     /* use_sliding_window false */
    m = parsed(QWEN2, "use_sliding_window", "true");   /* layers >= max_window_layers (3) slide */
    CHECK(m.window[0] == 0 && m.window[2] == 0 && m.window[3] == 32768);
}

static void test_gemma3(void) {
    okv_hf_model m = parsed(GEMMA3, NULL, NULL);
    CHECK(m.family == OKV_FAM_GEMMA3 && m.hidden == 1152 && m.intermediate == 6912 && m.n_layers == 26);
    CHECK(m.n_heads == 4 && m.n_kv_heads == 1 && m.head_dim == 256 && m.vocab == 262144);
    CHECK(m.tied && m.qk_norm && m.norm_plus_one && m.sandwich_norms && m.act == 1);
    CHECK(near(m.embed_scale, sqrt(1152.0)) && near(m.attn_scale, 1.0 / 16) && m.final_softcap == 0);
    /* sliding_window_pattern 6: every 6th layer (5, 11, 17, 23) attends to the whole history */
    CHECK(layers_with_window(&m, 512) == 22 && m.window[5] == 0 && m.window[11] == 0 && m.window[23] == 0);
    CHECK(m.window[0] == 512 && m.window[25] == 512);
    CHECK(near(m.rope_full.theta, 1e6) && near(m.rope_sliding.theta, 1e4));
    CHECK(m.bos_id == 2 && m.n_eos == 2 && m.eos_ids[0] == 1 && m.eos_ids[1] == 106);
}

static void test_gemma4(void) {
    okv_hf_model m = parsed(GEMMA4, NULL, NULL);
    CHECK(m.family == OKV_FAM_GEMMA4 && !strcmp(m.architecture, "Gemma4ForConditionalGeneration"));
    CHECK(!strcmp(m.prefix, "model.language_model."));
    CHECK(m.hidden == 1536 && m.intermediate == 6144 && m.n_layers == 35 && m.n_heads == 8 && m.n_kv_heads == 1);
    /* no num_global_key_value_heads and no attention_k_eq_v: full layers keep num_key_value_heads */
    CHECKF(m.head_dim == 256 && m.global_head_dim == 512 && m.global_kv_heads == 1 && m.vocab == 262144,
           "head_dim %d, global_head_dim %d, global_kv_heads %d, vocab %d", m.head_dim, m.global_head_dim,
           m.global_kv_heads, m.vocab);
    CHECK(m.kv_shared_layers == 20 && m.ple_dim == 256 && m.ple_vocab == 262144 && m.double_wide_mlp && !m.k_eq_v);
    CHECK(m.tied && m.final_softcap == 30.0f);
    /* layer_types: full attention at 4, 9, ..., 34 */
    CHECK(layers_with_window(&m, 0) == 7 && layers_with_window(&m, 512) == 28);
    for (int i = 4; i < 35; i += 5) CHECKF(m.window[i] == 0, "layer %d", i);
    CHECK(m.rope_full.kind == OKV_ROPE_PROPORTIONAL && near(m.rope_full.theta, 1e6) && near(m.rope_full.partial_rotary, 0.25));
    CHECK(m.rope_sliding.kind == OKV_ROPE_DEFAULT && near(m.rope_sliding.theta, 1e4));
    CHECK(m.bos_id == 2 && m.n_eos == 1 && m.eos_ids[0] == 1);
}

/* Fields each family may leave out, and what it then uses. */
static void test_defaults(void) {
    CHECK(parsed(LLAMA, "head_dim", NULL).head_dim == 64);          /* hidden / heads */
    CHECK(parsed(LLAMA, "num_key_value_heads", NULL).n_kv_heads == 32);
    CHECK(near(parsed(LLAMA, "rms_norm_eps", NULL).rms_eps, 1e-6));
    CHECK(!parsed(LLAMA, "tie_word_embeddings", NULL).tied);        /* Llama unties by default */
    CHECK(parsed(LLAMA, "max_position_embeddings", NULL).max_position_embeddings == 131072);
    CHECK(parsed(LLAMA, "bos_token_id", NULL).bos_id == -1 && parsed(LLAMA, "eos_token_id", NULL).n_eos == 0);
    okv_hf_model m = parsed(LLAMA, "rope_scaling", NULL);
    CHECK(m.rope_full.kind == OKV_ROPE_DEFAULT && near(m.rope_full.theta, 500000));
    CHECK(near(parsed(QWEN3, "rope_theta", NULL).rope_full.theta, 10000));
    CHECK(!parsed(QWEN3, "tie_word_embeddings", NULL).tied);
    CHECK(parsed(QWEN3, "hidden_act", NULL).act == 0);              /* silu */
    CHECK(near(parsed(GEMMA3, "query_pre_attn_scalar", NULL).attn_scale, 1.0 / 16));   /* 256 */
    CHECK(near(parsed(GEMMA3, "rope_local_base_freq", NULL).rope_sliding.theta, 1e4));
    CHECK(parsed(GEMMA3, "sliding_window", NULL).window[0] == 4096);
    CHECK(parsed(GEMMA3, "tie_word_embeddings", "false").tied == false);   /* Gemma ties by default */
    m = parsed(GEMMA3, "sliding_window_pattern", "2");
    CHECK(m.window[0] == 512 && m.window[1] == 0 && layers_with_window(&m, 0) == 13);
    m = parsed(GEMMA4, "layer_types", NULL);                        /* pattern 6, last layer forced full */
    CHECK(m.window[5] == 0 && m.window[4] == 512 && m.window[34] == 0 && m.window[33] == 512);
    CHECK(parsed(GEMMA4, "num_kv_shared_layers", NULL).kv_shared_layers == 0);
}

/* Missing or ill-typed fields: exactly one line naming the file and the field. */
typedef struct message_case {
    const char *path, *key, *value;   /* value NULL: the key deleted */
    okv_status want;
    const char *message;
} message_case;

static void test_messages(void) {
    static const message_case cases[] = {
        {LLAMA, "architectures", NULL, OKV_ERR_FORMAT,
         "config.json: missing \"architectures\" list"},
        {LLAMA, "architectures", "[]", OKV_ERR_FORMAT,
         "config.json: missing \"architectures\" list"},
        {LLAMA, "architectures", "[\"GPT2LMHeadModel\"]", OKV_ERR_UNSUPPORTED,
         "config.json: architectures[0] = \"GPT2LMHeadModel\" is not supported (Llama, Qwen2, Qwen3, Gemma3, Gemma4)"},
        {LLAMA, "hidden_size", "\"2048\"", OKV_ERR_FORMAT,
         "config.json: field 'hidden_size' must be a number"},
        {LLAMA, "hidden_size", "2048.5", OKV_ERR_FORMAT,
         "config.json: field 'hidden_size' must be an integer (got 2048.5)"},
        {LLAMA, "num_hidden_layers", "0", OKV_ERR_UNSUPPORTED,
         "config.json: num_hidden_layers = 0 is out of the supported range [1, 512]"},
        {LLAMA, "num_key_value_heads", "5", OKV_ERR_UNSUPPORTED,
         "config.json: num_attention_heads 32 is not a multiple of num_key_value_heads 5"},
        {LLAMA, "head_dim", "63", OKV_ERR_UNSUPPORTED,
         "config.json: head_dim 63 must be even"},
        {LLAMA, "tie_word_embeddings", "\"yes\"", OKV_ERR_FORMAT,
         "config.json: field 'tie_word_embeddings' must be true or false"},
        {LLAMA, "hidden_act", "\"relu\"", OKV_ERR_UNSUPPORTED,
         "config.json: hidden_act \"relu\" is not supported (silu, gelu_pytorch_tanh)"},
        {LLAMA, "rope_scaling", "{\"rope_type\": \"yarn\", \"factor\": 4}", OKV_ERR_UNSUPPORTED,
         "config.json: rope_scaling rope_type \"yarn\" is not supported (default, linear, llama3)"},
        {LLAMA, "rope_scaling", "7", OKV_ERR_FORMAT,
         "config.json: rope_scaling must be an object or null"},
        {QWEN2, "use_sliding_window", "1", OKV_ERR_FORMAT,
         "config.json: field 'use_sliding_window' must be true or false"},
        {GEMMA3, "layer_types", "[\"full_attention\"]", OKV_ERR_FORMAT,
         "config.json: layer_types must list num_hidden_layers (26) entries"},
        {GEMMA4, "enable_moe_block", "true", OKV_ERR_UNSUPPORTED,
         "config.json: enable_moe_block is set; mixture-of-experts blocks are not supported yet"},
        {GEMMA3, "use_bidirectional_attention", "true", OKV_ERR_UNSUPPORTED,
         "config.json: use_bidirectional_attention is set; bidirectional attention is not supported"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        expect_message(cases[i].path, cases[i].key, cases[i].value, cases[i].want, cases[i].message);
    okv_hf_model m;
    okv_error err = {0};
    CHECK(okv_hf_parse_config("{\"architectures\": [", 19, "cfg.json", &m, &err) == OKV_ERR_FORMAT);
    CHECKF(!strcmp(err.message, "cfg.json: invalid JSON near byte 18"), "%s", err.message);   /* cJSON stops at the '[' */
    CHECK(okv_hf_parse_config("[1]", 3, "cfg.json", &m, &err) == OKV_ERR_FORMAT);
    CHECKF(!strcmp(err.message, "cfg.json: missing \"architectures\" list"), "%s", err.message);
}

/* okv_hf_load_config: a directory's generation_config.json overrides the EOS list and BOS. */
static void test_load_dir(void) {
    okv_hf_model m;
    okv_error err = {0};
    CHECK_OK(okv_hf_load_config("../shared/fixtures/models/llama32-tiny", &m, &err), &err);
    CHECK(m.bos_id == 256 && m.n_eos == 3 && m.eos_ids[0] == 257 && m.eos_ids[1] == 264 && m.eos_ids[2] == 265);
    CHECK_OK(okv_hf_load_config(LLAMA, &m, &err), &err);   /* a .json path: no generation_config beside it */
    CHECK(m.n_eos == 1 && m.eos_ids[0] == 128009);
    CHECK(okv_hf_load_config("/nonexistent-dir", &m, &err) != OKV_OK && strstr(err.message, "/nonexistent-dir/config.json"));
}

int main(void) {
    test_llama();
    test_qwen3();
    test_qwen2();
    test_gemma3();
    test_gemma4();
    test_defaults();
    test_messages();
    test_load_dir();
    return okv_test_finish();
}
