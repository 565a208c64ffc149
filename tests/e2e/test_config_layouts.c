/* `inspect --config`: the cache layout full-size checkpoints would get,
 * from their config.json alone (no weights). Expected values are the
 * architectures' documented geometry, written here by hand. */
#include "e2e_util.h"

#define CONFIGS "../shared/fixtures/configs/"


static int at(const cJSON *j, const char *key, int i) {
    const cJSON *v = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, key), i);
    return cJSON_IsNumber(v) ? (int)v->valuedouble : -999;
}

static int num(const cJSON *j, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    return cJSON_IsNumber(v) ? (int)v->valuedouble : -999;
}

static void test_gemma4_e2b(void) {
    cJSON *j = e2e_layout_of(CONFIGS "gemma-4-e2b-it/config.json");
    if (!j) return;
    CHECK(num(j, "n_caches") == 15);
    for (int c = 0; c < 15; c++) {
        bool full = (c + 1) % 5 == 0;
        CHECKF(at(j, "kv_heads", c) == 1, "cache %d kv_heads", c);
        CHECKF(at(j, "head_dims", c) == (full ? 512 : 256), "cache %d head_dim", c);
        CHECKF(at(j, "windows", c) == (full ? 0 : 512), "cache %d window", c);
    }
    for (int l = 0; l < 35; l++) {
        bool full = (l + 1) % 5 == 0;
        int want = l < 15 ? l : (full ? 14 : 13);
        CHECKF(at(j, "layer_to_cache", l) == want, "layer %d -> cache %d, want %d", l, at(j, "layer_to_cache", l), want);
    }
    CHECK(num(j, "prefill_chunk_size") == 512);
    cJSON_Delete(j);
}

static void test_flat(const char *dir, int n_layers, int kv_heads, int head_dim) {
    cJSON *j = e2e_layout_of(dir);
    if (!j) return;
    CHECKF(num(j, "n_caches") == n_layers, "%s: %d caches", dir, num(j, "n_caches"));
    for (int c = 0; c < n_layers; c++) {
        CHECK(at(j, "windows", c) == 0 && at(j, "kv_heads", c) == kv_heads && at(j, "head_dims", c) == head_dim);
        CHECK(at(j, "layer_to_cache", c) == c);
    }
    cJSON_Delete(j);
}

static void test_gemma3_1b(void) {
    cJSON *j = e2e_layout_of(CONFIGS "gemma-3-1b-it");
    if (!j) return;
    CHECK(num(j, "n_caches") == 26);
    for (int c = 0; c < 26; c++) {
        bool full = c == 5 || c == 11 || c == 17 || c == 23;
        CHECKF(at(j, "windows", c) == (full ? 0 : 512), "cache %d window %d", c, at(j, "windows", c));
        CHECK(at(j, "kv_heads", c) == 1 && at(j, "head_dims", c) == 256);
    }
    CHECK(num(j, "prefill_chunk_size") == 512);
    cJSON_Delete(j);
}

/* The text rendering names the same facts. */
static void test_text_form(void) {
    char *text = NULL;
    okv_error err = {0};
    CHECK_OK(okv_config_describe(CONFIGS "gemma-4-e2b-it", false, NULL, &text, &err), &err);
    if (!text) return;
    CHECK(strstr(text, "15 caches for 35 layers") != NULL);
    CHECK(strstr(text, "Gemma4ForConditionalGeneration") != NULL);
    free(text);
    CHECK(okv_config_describe(CONFIGS "does-not-exist", true, NULL, &text, &err) == OKV_ERR_IO);
    CHECK(strstr(err.message, "does-not-exist") != NULL);
}

int main(void) {
    test_gemma4_e2b();
    test_flat(CONFIGS "llama-3.2-1b-instruct", 16, 8, 64);
    test_flat(CONFIGS "qwen3-0.6b/config.json", 28, 8, 128);
    test_gemma3_1b();
    test_text_form();
    return okv_test_finish();
}
