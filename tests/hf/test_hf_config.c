/* okv_hf_parse_config on hostile values (issue 8): each case takes a fixture's
 * real config.json, sets one field through cJSON and must be refused with
 * that field named, where today's main accepted it silently (or converted an
 * out-of-range double, undefined behaviour). Unedited fixtures and edits at
 * the edge of the accepted range must still parse. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "hf_config_edit.h"
#include "okv_test.h"

#define FIX "../shared/fixtures/models/"

/* Fixture `model`'s config.json with one field edited (hf_config_edit.h). */
static okv_status parse_edited(const char *model, const char *key, const char *value, okv_hf_model *m, okv_error *err) {
    char path[256];
    snprintf(path, sizeof path, FIX "%s/config.json", model);
    return hf_parse_edited(path, key, value, m, err);
}

typedef struct bad_case {
    const char *model, *key, *value, *needle;
} bad_case;

static void expect_refused(const bad_case *c) {
    okv_hf_model m;
    okv_error err = {0};
    okv_status st = parse_edited(c->model, c->key, c->value, &m, &err);
    CHECKF(st != OKV_OK && strstr(err.message, c->needle) && strstr(err.message, "config.json"),
           "%s %s = %s: status %d, message '%s' (want '%s')", c->model, c->key, c->value, st, err.message, c->needle);
}

static void expect_ok(const char *model, const char *key, const char *value, okv_hf_model *m) {
    okv_error err = {0};
    okv_status st = parse_edited(model, key, value, m, &err);
    CHECKF(st == OKV_OK, "%s %s = %s: %s", model, key ? key : "-", value ? value : "-", err.message);
}

#define SEVENTEEN "[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17]"
#define SIXTEEN "[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]"

static void test_refusals(void) {
    static const bad_case cases[] = {
        /* rope parameters whose inv_freq is not a finite float */
        {"qwen3-tiny", "rope_theta", "1e-300", "rope_theta = 1e-300"},
        {"qwen3-tiny", "rope_theta", "-5", "rope_theta = -5 must be a positive number"},
        {"qwen3-tiny", "rope_theta", "0", "rope_theta = 0 must be a positive number"},
        {"qwen3-tiny", "rope_scaling", "{\"rope_type\": \"linear\", \"factor\": 1e-300}", "inv_freq"},
        {"llama32-tiny", "rope_scaling", "{\"rope_type\": \"llama3\", \"factor\": 1e-300, \"low_freq_factor\": 1, "
                                         "\"high_freq_factor\": 4, \"original_max_position_embeddings\": 64}", "inv_freq"},
        {"llama32-tiny", "rope_scaling", "{\"rope_type\": \"linear\", \"factor\": -2}", "factor = -2"},
        {"qwen3-tiny", "rope_scaling", "{\"rope_type\": \"default\", \"partial_rotary_factor\": 0.5}",
         "only supported with rope_type \"proportional\""},
        /* Gemma-3 sliding layers' base frequency */
        {"gemma3-tiny", "rope_local_base_freq", "0", "rope_local_base_freq: rope_theta = 0"},
        {"gemma3-tiny", "rope_local_base_freq", "-10000", "rope_local_base_freq: rope_theta = -10000"},
        /* Gemma-4 proportional rope */
        {"gemma4-tiny", "rope_parameters", "{\"full_attention\": {\"rope_type\": \"proportional\", \"rope_theta\": 1e6, "
                                           "\"partial_rotary_factor\": 1.5}, \"sliding_attention\": {\"rope_theta\": 1e4}}",
         "partial_rotary_factor = 1.5 must be in (0, 1]"},
        {"gemma4-tiny", "rope_parameters", "{\"full_attention\": {\"rope_type\": \"proportional\", \"rope_theta\": 1e6, "
                                           "\"partial_rotary_factor\": 0}, \"sliding_attention\": {\"rope_theta\": 1e4}}",
         "partial_rotary_factor = 0 must be in (0, 1]"},
        {"gemma4-tiny", "rope_parameters", "{\"full_attention\": {\"rope_type\": \"proportional\", \"rope_theta\": 1e6, "
                                           "\"partial_rotary_factor\": 1e300}, \"sliding_attention\": {\"rope_theta\": 1e4}}",
         "rope_parameters.full_attention: partial_rotary_factor"},
        /* Gemma-4 per_layer_config keys */
        {"gemma4-tiny", "per_layer_config", "{\"abc\": {\"head_dim\": 32}}", "per_layer_config key \"abc\""},
        {"gemma4-tiny", "per_layer_config", "{\"5x\": {\"head_dim\": 32}}", "per_layer_config key \"5x\""},
        {"gemma4-tiny", "per_layer_config", "{\"-1\": {\"head_dim\": 32}}", "per_layer_config key \"-1\""},
        {"gemma4-tiny", "per_layer_config", "{\"\": {\"head_dim\": 32}}", "per_layer_config key \"\""},
        {"gemma4-tiny", "per_layer_config", "{\"99\": {\"head_dim\": 32}}", "per_layer_config key \"99\""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) expect_refused(&cases[i]);
    /* fields the numeric conversion used to wrap or truncate; special ids are what a program can carry */
    static const bad_case more[] = {
        {"llama32-tiny", "rms_norm_eps", "1e300", "rms_norm_eps = 1e+300"},
        {"llama32-tiny", "rms_norm_eps", "0", "rms_norm_eps = 0"},
        {"llama32-tiny", "rms_norm_eps", "1e-300", "rms_norm_eps = 1e-300"},
        {"gemma3-tiny", "final_logit_softcapping", "-30", "final_logit_softcapping = -30"},
        {"gemma3-tiny", "final_logit_softcapping", "1e300", "final_logit_softcapping = 1e+300"},
        {"llama32-tiny", "bos_token_id", "-5", "bos_token_id = -5 is not a token id"},
        {"llama32-tiny", "bos_token_id", "1e20", "bos_token_id = 1e+20 is not a token id"},
        {"llama32-tiny", "bos_token_id", "512", "bos_token_id = 512 is not a token id in [0, vocab_size 512)"},
        {"llama32-tiny", "bos_token_id", "2.5", "bos_token_id = 2.5"},
        {"llama32-tiny", "bos_token_id", "\"1\"", "bos_token_id must be an integer"},
        {"llama32-tiny", "eos_token_id", "-1", "eos_token_id = -1"},
        {"llama32-tiny", "eos_token_id", "[1, 3e9]", "eos_token_id[1] = 3000000000"},
        {"llama32-tiny", "eos_token_id", "[1, \"x\"]", "eos_token_id[1] must be an integer"},
        {"llama32-tiny", "eos_token_id", SEVENTEEN, "eos_token_id lists 17 ids; at most 16 are supported"},
    };
    for (size_t i = 0; i < sizeof more / sizeof more[0]; i++) expect_refused(&more[i]);
}

static void test_accepted(void) {
    static const char *const models[] = {"llama32-tiny", "qwen2-tiny", "qwen3-tiny", "gemma3-tiny", "gemma3-mm-tiny",
                                         "gemma4-tiny", "gemma4-tiny-nested"};
    okv_hf_model m;
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) expect_ok(models[i], NULL, NULL, &m);
    expect_ok("llama32-tiny", "eos_token_id", SIXTEEN, &m);
    CHECK(m.n_eos == 16 && m.eos_ids[15] == 16);
    expect_ok("llama32-tiny", "bos_token_id", "null", &m);
    expect_ok("llama32-tiny", "bos_token_id", "511", &m);
    CHECK(m.bos_id == 511);
    expect_ok("llama32-tiny", "rms_norm_eps", "1", &m);
    expect_ok("gemma4-tiny", "rope_parameters", "{\"full_attention\": {\"rope_type\": \"proportional\", \"rope_theta\": 1e6, "
                                                "\"partial_rotary_factor\": 1}, \"sliding_attention\": {\"rope_theta\": 1e4}}", &m);
    expect_ok("gemma4-tiny", "per_layer_config", "{\"5\": {\"head_dim\": 32}}", &m);
    CHECK(m.global_head_dim == 32);
    expect_ok("gemma3-tiny", "final_logit_softcapping", "30", &m);
    CHECK(m.final_softcap == 30.0f);
}

int main(void) {
    test_refusals();
    test_accepted();
    return okv_test_finish();
}
