/* okv_gen_defaults_get on exported fixture programs: sampling values, EOS
 * set and context limit must equal what the fixture's own
 * generation_config.json / tokenizer_config.json say (read here with cJSON,
 * independently of the library), the runner reports its key and capacity,
 * and an out-of-range bundled value is an error naming the field. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mkckpt.h"
#include "offkv_gen.h"
#include "okv_common.h"
#include "okv_test.h"

#define FIXTURES "../shared/fixtures/models/"
#define TOKDIR "../shared/fixtures/tokenizers/llama3_1/"

static char tmpdir[] = "/tmp/okv-defaults-XXXXXX";

static double num_or(const cJSON *j, const char *key, double dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

static bool has_id(const okv_gen_defaults *d, int id) {
    for (int i = 0; i < d->n_eos; i++)
        if (d->eos_ids[i] == id) return true;
    return false;
}

static void check_no_duplicates(const okv_gen_defaults *d) {
    for (int i = 0; i < d->n_eos; i++)
        for (int k = i + 1; k < d->n_eos; k++) CHECKF(d->eos_ids[i] != d->eos_ids[k], "eos id %d twice", d->eos_ids[i]);
}

/* Exports dir to tmpdir/name.okv, opens it with a cache of max_capacity (0 = default). */
static okv_runner *open_program(const char *dir, const char *name, int max_capacity, okv_program **p) {
    char out[400];
    snprintf(out, sizeof out, "%s/%s.okv", tmpdir, name);
    okv_export_options eo;
    okv_export_options_default(&eo);
    eo.dtype = OKV_F32;
    okv_error err = {0};
    *p = NULL;
    CHECK_OK(okv_export(dir, out, &eo, &err), &err);
    CHECK_OK(okv_program_open(out, p, &err), &err);
    if (!*p) return NULL;
    okv_cache_options co;
    okv_cache_options_default(&co);
    co.max_capacity = max_capacity;
    okv_runner *r = NULL;
    CHECK_OK(okv_cache_install(name, *p, &co, &err), &err);
    CHECK_OK(okv_runner_create(*p, name, NULL, &r, &err), &err);
    return r;
}

static void close_program(okv_runner *r, okv_program *p, const char *name) {
    okv_error err;
    okv_runner_free(r);
    okv_cache_remove(name, &err);
    okv_program_free(p);
}

/* Every value the fixture's generation_config.json sets reaches the defaults;
 * the ones it leaves out keep HF's (temperature 1, top_k 50, top_p 1, min_p 0,
 * repetition_penalty 1). */
static void test_fixture(const char *model, int max_capacity) {
    char dir[300], path[400];
    snprintf(dir, sizeof dir, FIXTURES "%s", model);
    okv_program *p;
    okv_runner *r = open_program(dir, model, max_capacity, &p);
    if (!r) return;
    cJSON *gc = NULL, *cfg = NULL;
    okv_error err = {0};
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    CHECK_OK(okv_json_load(path, &gc, &err), &err);
    snprintf(path, sizeof path, "%s/config.json", dir);
    CHECK_OK(okv_json_load(path, &cfg, &err), &err);
    okv_gen_defaults d;
    CHECK_OK(okv_gen_defaults_get(r, NULL, &d, &err), &err);
    const cJSON *ds = cJSON_GetObjectItemCaseSensitive(gc, "do_sample");
    CHECKF(d.sampling.do_sample == (ds && cJSON_IsTrue(ds)), "%s do_sample", model);
    CHECK_NEAR(d.sampling.temperature, num_or(gc, "temperature", 1.0), 1e-6);
    CHECKF(d.sampling.top_k == (int)num_or(gc, "top_k", 50), "%s top_k %d", model, d.sampling.top_k);
    CHECK_NEAR(d.sampling.top_p, num_or(gc, "top_p", 1.0), 1e-6);
    CHECK_NEAR(d.sampling.min_p, num_or(gc, "min_p", 0.0), 1e-6);
    CHECK_NEAR(d.sampling.repetition_penalty, num_or(gc, "repetition_penalty", 1.0), 1e-6);
    /* EOS: generation_config's ids are all there; nothing beyond them and config.json's */
    const cJSON *ge = cJSON_GetObjectItemCaseSensitive(gc, "eos_token_id"), *ce = cJSON_GetObjectItemCaseSensitive(cfg, "eos_token_id");
    const cJSON *e, *ga = cJSON_IsArray(ge) ? ge : NULL, *ca = cJSON_IsArray(ce) ? ce : NULL;
    int n_expected = 0;
    if (cJSON_IsNumber(ge)) { CHECK(has_id(&d, ge->valueint)); n_expected++; }
    cJSON_ArrayForEach(e, ga) { CHECKF(has_id(&d, e->valueint), "%s eos %d", model, e->valueint); n_expected++; }
    for (int i = 0; i < d.n_eos; i++) {
        bool known = false;
        cJSON_ArrayForEach(e, ga) known |= e->valueint == d.eos_ids[i];
        cJSON_ArrayForEach(e, ca) known |= e->valueint == d.eos_ids[i];
        known |= cJSON_IsNumber(ge) && ge->valueint == d.eos_ids[i];
        known |= cJSON_IsNumber(ce) && ce->valueint == d.eos_ids[i];
        CHECKF(known, "%s: eos %d is in neither config", model, d.eos_ids[i]);
    }
    CHECK(n_expected > 0 && d.n_eos >= n_expected);
    check_no_duplicates(&d);
    /* context: the runner's capacity, i.e. the install's max_capacity or max_ctx_len */
    okv_program_info info;
    okv_program_get_info(p, &info);
    int want = max_capacity > 0 ? max_capacity : info.max_ctx_len;
    CHECKF(d.context_limit == want && okv_runner_capacity(r) == want, "%s context %d, want %d", model, d.context_limit, want);
    CHECK(!strcmp(okv_runner_cache_key(r), model));
    okv_gen_options o;
    okv_gen_options_init(&o, &d, 17);
    CHECK(o.max_new_tokens == 17 && o.n_eos == d.n_eos && o.eos_ids == d.eos_ids && o.context_limit == want);
    CHECK(o.sampling.top_k == d.sampling.top_k && !o.on_text && !o.n_stops);
    cJSON_Delete(gc);
    cJSON_Delete(cfg);
    close_program(r, p, model);
}

/* A checkpoint with the Llama-3.1 tokenizer: tokenizer_config.json's
 * eos_token joins the program's EOS id; a bad generation_config value is
 * refused by name. */
static void test_tokenizer_eos_and_bad_config(void) {
    okv_mkckpt_spec s;
    okv_mkckpt_default_spec(&s, OKV_MK_LLAMA);
    s.vocab = 128256;
    s.bos_id = 128000;
    s.eos_id = 7;
    char dir[300], path[400];
    snprintf(dir, sizeof dir, "%s/ckpt", tmpdir);
    okv_error err = {0};
    CHECK_OK(okv_mkckpt_write(&s, dir, &err), &err);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    okv_test_copy_file(TOKDIR "tokenizer.json", path);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    okv_test_copy_file(TOKDIR "tokenizer_config.json", path);
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    okv_test_write_text(path, "{\"eos_token_id\": 7, \"do_sample\": true, \"min_p\": 0.05}");
    okv_program *p;
    okv_runner *r = open_program(dir, "tokeos", 0, &p);
    if (!r) return;
    /* the eos_token string, from the fixture's tokenizer_config.json */
    cJSON *tc = NULL;
    CHECK_OK(okv_json_load(TOKDIR "tokenizer_config.json", &tc, &err), &err);
    const char *eos_text = okv_json_str(tc, "eos_token");
    okv_tok *tok = NULL;
    CHECK_OK(okv_tok_load_file(TOKDIR "tokenizer.json", &tok, &err), &err);
    int32_t eos_id = eos_text && tok ? okv_tok_token_to_id(tok, eos_text) : -1;
    CHECKF(eos_id >= 0 && eos_id != 7, "eos_token '%s' -> %d", eos_text ? eos_text : "?", eos_id);
    okv_gen_defaults d;
    CHECK_OK(okv_gen_defaults_get(r, tok, &d, &err), &err);
    CHECKF(d.n_eos == 2 && has_id(&d, 7) && has_id(&d, eos_id), "n_eos %d", d.n_eos);
    CHECK(d.sampling.do_sample && fabs(d.sampling.min_p - 0.05) < 1e-7 && d.sampling.top_k == 50);
    CHECK_OK(okv_gen_defaults_get(r, NULL, &d, &err), &err);
    CHECK(d.n_eos == 1 && d.eos_ids[0] == 7);
    okv_tok_free(tok);
    cJSON_Delete(tc);
    close_program(r, p, "tokeos");

    okv_test_write_text(path, "{\"eos_token_id\": 7, \"top_p\": 1.5}");
    r = open_program(dir, "badgc", 0, &p);
    if (!r) return;
    okv_status st = okv_gen_defaults_get(r, NULL, &d, &err);
    CHECKF(st != OKV_OK && strstr(err.message, "generation_config.json") && strstr(err.message, "top_p") &&
           strstr(err.message, "1.5"), "status %d: %s", (int)st, err.message);
    close_program(r, p, "badgc");
}

int main(void) {
    if (!mkdtemp(tmpdir)) return 1;
    test_fixture("llama32-tiny", 0);
    test_fixture("qwen2-tiny", 100);
    test_fixture("qwen3-tiny", 0);
    test_fixture("gemma3-tiny", 0);
    test_fixture("gemma4-tiny", 64);
    test_tokenizer_eos_and_bad_config();
    okv_test_rm_tree(tmpdir);
    return okv_test_finish();
}
