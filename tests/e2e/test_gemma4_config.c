/* Gemma-4 config spellings and the KV-sharing donor rule:
 *   - the newer per_layer_config spelling of the full-layer geometry gives
 *     the same program (same oracle logits) as flat global_head_dim;
 *   - layer -> cache follows HF's rule (the last earlier non-shared layer of
 *     the same type), not a fixed offset, for a pattern like [S,S,S,F,S];
 *   - a shared layer whose type has no earlier donor is refused. */
#include "e2e_util.h"

#define G4 "gemma4-tiny"

static void test_per_layer_config(void) {
    char *dir = patched_checkpoint(G4, "g4-plc", "{\"global_head_dim\": null, "
                                   "\"per_layer_config\": {\"4\": {\"head_dim\": 32}, \"9\": {\"head_dim\": 32}}}");
    char *path = e2e_export(dir, "g4-plc.okv", OKV_F32, 0);
    okv_program *p = NULL;
    okv_error err = {0};
    if (path) CHECK_OK(okv_program_open(path, &p, &err), &err);
    if (p) {
        double d = e2e_oracle_diff(p, FIXTURES G4, 5);
        CHECKF(d <= 1e-3, "per_layer_config: %.3g", d);
        okv_program_free(p);
    }
    free(path);
    free(dir);
}


static void test_donor_rule(void) {
    /* 7 layers [S,S,S,F,S | S,F], the last 2 shared: layer 5 (sliding) reads
     * layer 4's cache, layer 6 (full) reads layer 3's. */
    char *dir = patched_checkpoint(G4, "g4-donor", "{\"layer_types\": [\"sliding_attention\", \"sliding_attention\", "
        "\"sliding_attention\", \"full_attention\", \"sliding_attention\", \"sliding_attention\", \"full_attention\"], "
        "\"num_hidden_layers\": 7, \"num_kv_shared_layers\": 2}");
    cJSON *j = e2e_layout_of(dir);
    if (j) {
        int want[7] = {0, 1, 2, 3, 4, 4, 3};
        const cJSON *map = cJSON_GetObjectItemCaseSensitive(j, "layer_to_cache");
        CHECK(cJSON_GetArraySize(map) == 7);
        for (int l = 0; l < 7; l++)
            CHECKF(cJSON_GetArrayItem(map, l) && (int)cJSON_GetArrayItem(map, l)->valuedouble == want[l], "layer %d", l);
        CHECK((int)cJSON_GetObjectItemCaseSensitive(j, "n_caches")->valuedouble == 5);
        CHECK((int)cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "head_dims"), 3)->valuedouble == 32);
        CHECK((int)cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "windows"), 3)->valuedouble == 0);
        cJSON_Delete(j);
    }
    free(dir);
    /* only sliding layers before the shared ones: the full shared layer has no donor */
    dir = patched_checkpoint(G4, "g4-nodonor", "{\"layer_types\": [\"sliding_attention\", \"sliding_attention\", "
        "\"sliding_attention\", \"sliding_attention\", \"sliding_attention\", \"sliding_attention\", \"sliding_attention\", "
        "\"sliding_attention\", \"sliding_attention\", \"full_attention\"]}");
    char *text = NULL;
    okv_error err = {0};
    CHECK(okv_config_describe(dir, true, NULL, &text, &err) == OKV_ERR_UNSUPPORTED);
    CHECKF(strstr(err.message, "layer 9") && strstr(err.message, "no earlier non-shared layer"), "%s", err.message);
    free(text);
    free(dir);
}

/* num_kv_shared_layers 0 (or absent): every layer owns a cache. */
static void test_no_sharing(void) {
    const char *patches[] = {"{\"num_kv_shared_layers\": 0}", "{\"num_kv_shared_layers\": null}"};
    for (int k = 0; k < 2; k++) {
        char name[32];
        snprintf(name, sizeof name, "g4-noshare%d", k);
        char *dir = patched_checkpoint(G4, name, patches[k]);
        cJSON *j = e2e_layout_of(dir);
        if (j) {
            CHECK((int)cJSON_GetObjectItemCaseSensitive(j, "n_caches")->valuedouble == 10);
            for (int l = 0; l < 10; l++)
                CHECK((int)cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "layer_to_cache"), l)->valuedouble == l);
            cJSON_Delete(j);
        }
        free(dir);
    }
}

/* attention_k_eq_v: full layers take v from the raw k projection; their
 * v_proj is skipped; chunkings still agree; the logits move. */
static void test_k_eq_v(void) {
    char *dir = patched_checkpoint(G4, "g4-keqv", "{\"attention_k_eq_v\": true}");
    char notes[4096] = "", *out = e2e_export_noted(dir, "g4-keqv.okv", notes);
    okv_error err = {0};
    CHECKF(strstr(notes, "self_attn.v_proj.weight (1)") != NULL, "notices: %s", notes);
    okv_program *p = NULL;
    if (out) CHECK_OK(okv_program_open(out, &p, &err), &err);
    if (p) {
        int32_t *ids;
        int n = e2e_ref_tokens(FIXTURES G4, &ids);
        float *ref = e2e_ref_logits(FIXTURES G4, (size_t)n * 512);
        e2e_run_opts ro;
        e2e_opts_default(&ro);
        ro.chunk = 1;
        float *a = e2e_run(p, ids, n, &ro);
        ro.chunk = 8;
        ro.runner.reference_attention = true;
        float *b = e2e_run(p, ids, n, &ro);
        if (a && b) {
            CHECK(e2e_max_diff(a, b, (size_t)n * 512) <= 1e-4);
            CHECK(e2e_max_diff(a, ref, (size_t)n * 512) > 1e-2);
        }
        free(a);
        free(b);
        free(ref);
        free(ids);
        okv_program_free(p);
    }
    free(out);
    free(dir);
}

int main(void) {
    test_no_sharing();
    test_k_eq_v();
    test_per_layer_config();
    test_donor_rule();
    e2e_cleanup();
    return okv_test_finish();
}
