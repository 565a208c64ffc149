/* test_gguf_hparams — GGUF float hyperparameters becoming config.json
 * (okv_gguf_hf_config) are refused when not finite or not positive, with a
 * one-line message naming the GGUF key, instead of being left out (a NaN
 * rope.freq_base used to export with rope_theta 10000, a NaN
 * layer_norm_rms_epsilon with 1e-6). Every float key the mapping reads is
 * covered: rms epsilon, rope base, rope scaling factor, Gemma-3's final
 * logit softcap. Valid values still reach config.json and the HF parser. */
#include <math.h>

#include "gguf_build.h"
#include "okv_common.h"
#include "okv_gguf.h"
#include "okv_gguf_model.h"
#include "okv_hf.h"
#include "okv_test.h"

typedef struct hp {
    const char *arch;
    float eps, base, factor, softcap; /* factor / softcap: written when != 0 */
} hp;

/* Metadata only (the config mapping reads no tensor data): a 1-layer model
 * of hidden 64, 2 heads, vocab 16. */
static gb hparams_file(const hp *h) {
    gb b = {0};
    char key[96];
    int n_kv = 9 + (h->factor != 0) * 2 + (h->softcap != 0) + 2 * !strcmp(h->arch, "gemma3");
    gb_header(&b, 3, 0, (uint64_t)n_kv);
    gb_kv_str(&b, "general.architecture", h->arch);
#define AK(s) (snprintf(key, sizeof key, "%s.%s", h->arch, s), key)
    gb_kv_u32(&b, AK("block_count"), 1);
    gb_kv_u32(&b, AK("embedding_length"), 64);
    gb_kv_u32(&b, AK("feed_forward_length"), 96);
    gb_kv_u32(&b, AK("attention.head_count"), 2);
    gb_kv_u32(&b, AK("attention.head_count_kv"), 1);
    gb_kv_u32(&b, AK("vocab_size"), 16);
    gb_kv_f32(&b, AK("attention.layer_norm_rms_epsilon"), h->eps);
    gb_kv_f32(&b, AK("rope.freq_base"), h->base);
    if (h->factor != 0) {
        gb_kv_str(&b, AK("rope.scaling.type"), "linear");
        gb_kv_f32(&b, AK("rope.scaling.factor"), h->factor);
    }
    if (h->softcap != 0) gb_kv_f32(&b, AK("final_logit_softcapping"), h->softcap);
    if (!strcmp(h->arch, "gemma3")) {
        gb_kv_u32(&b, AK("attention.sliding_window"), 512);
        gb_kv_u32(&b, AK("attention.key_length"), 32);
    }
#undef AK
    return b;
}

/* okv_gguf_hf_config on the file: its status, the config or the message. */
static okv_status config_of(const hp *h, char **json, okv_error *err) {
    gb b = hparams_file(h);
    okv_gguf *g = NULL;
    okv_status st = okv_gguf_open_memory(b.p, b.len, "hp.gguf", &g, err);
    *json = NULL;
    if (!st) st = okv_gguf_hf_config(g, json, err);
    okv_gguf_close(g);
    free(b.p);
    return st;
}

static void expect_refused(hp h, const char *key, const char *label) {
    char *json = NULL;
    okv_error err = {0};
    okv_status st = config_of(&h, &json, &err);
    CHECKF(st == OKV_ERR_FORMAT && !json, "%s: status %d, config %s", label, (int)st, json ? json : "(none)");
    CHECKF(strstr(err.message, key) && strstr(err.message, "must be a finite number") && !strchr(err.message, '\n'),
           "%s: message '%s' lacks key '%s'", label, err.message, key);
    free(json);
}

static void test_valid_values_pass(void) {
    const hp llama = {"llama", 1e-5f, 500000.0f, 2.0f, 0}, gemma = {"gemma3", 1e-6f, 1e6f, 0, 30.0f};
    const hp *cases[] = {&llama, &gemma};
    for (int i = 0; i < 2; i++) {
        char *json = NULL;
        okv_error err = {0};
        CHECK_OK(config_of(cases[i], &json, &err), &err);
        if (!json) continue;
        cJSON *j = cJSON_Parse(json);
        const cJSON *theta = cJSON_GetObjectItem(j, "rope_theta"), *eps = cJSON_GetObjectItem(j, "rms_norm_eps");
        CHECKF(theta && theta->valuedouble == cases[i]->base, "%s: rope_theta in %s", cases[i]->arch, json);
        CHECKF(eps && fabs(eps->valuedouble / (double)cases[i]->eps - 1) < 1e-12, /* cJSON prints 15 digits */ "%s: rms_norm_eps in %s", cases[i]->arch, json);
        if (cases[i]->factor != 0) {
            const cJSON *f = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "rope_scaling"), "factor");
            CHECKF(f && f->valuedouble == 2.0, "rope_scaling.factor in %s", json);
        }
        if (cases[i]->softcap != 0) {
            const cJSON *f = cJSON_GetObjectItem(j, "final_logit_softcapping");
            CHECKF(f && f->valuedouble == 30.0, "final_logit_softcapping in %s", json);
        }
        okv_hf_model m;
        CHECK_OK(okv_hf_parse_config(json, strlen(json), "hp.gguf", &m, &err), &err);
        cJSON_Delete(j);
        free(json);
    }
}

static void test_bad_values_refused(void) {
    const float bad[] = {NAN, INFINITY, -INFINITY, 0.0f, -1.0f};
    const char *names[] = {"nan", "inf", "-inf", "0", "-1"};
    char label[96];
    for (int i = 0; i < 5; i++) {
        snprintf(label, sizeof label, "freq_base %s", names[i]);
        expect_refused((hp){"llama", 1e-5f, bad[i], 0, 0}, "'llama.rope.freq_base'", label);
        snprintf(label, sizeof label, "rms epsilon %s", names[i]);
        expect_refused((hp){"qwen2", bad[i], 10000.0f, 0, 0}, "'qwen2.attention.layer_norm_rms_epsilon'", label);
        if (bad[i] != 0) { /* 0 is "no scaling" only for the softcap; a zero factor reads as absent here */
            snprintf(label, sizeof label, "rope scaling factor %s", names[i]);
            expect_refused((hp){"llama", 1e-5f, 10000.0f, bad[i], 0}, "'llama.rope.scaling.factor'", label);
        }
        if (bad[i] != 0 && !(bad[i] > 0)) {
            snprintf(label, sizeof label, "softcap %s", names[i]);
            expect_refused((hp){"gemma3", 1e-6f, 1e6f, 0, bad[i]}, "'gemma3.final_logit_softcapping'", label);
        }
    }
    expect_refused((hp){"gemma3", 1e-6f, 1e6f, 0, INFINITY}, "'gemma3.final_logit_softcapping'", "softcap inf");
}

int main(void) {
    test_valid_values_pass();
    test_bad_values_refused();
    return okv_test_finish();
}
