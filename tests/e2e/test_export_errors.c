/* Export refuses what it cannot honour, naming the field and value, and
 * leaves no output file behind; the program loader rejects truncated and
 * corrupted files with a precise error instead of crashing. Checkpoints are
 * the fixtures with an edited config.json (weights symlinked). */
#include "e2e_util.h"
#include "okv_safetensors.h"
#include "okv_st_write.h"

/* Export of dir must fail with status st and a message containing needle,
 * and leave no file at the output path. */
static void expect_export_error(const char *dir, int chunk, okv_status want, const char *needle) {
    okv_export_options o;
    okv_export_options_default(&o);
    o.dtype = OKV_F32;
    o.prefill_chunk_size = chunk;
    char *out = e2e_path("should-not-exist.okv");
    okv_error err = {0};
    okv_status st = okv_export(dir, out, &o, &err);
    CHECKF(st == want, "%s: status %d, want %d (%s)", dir, st, want, err.message);
    CHECKF(strstr(err.message, needle) != NULL, "%s: message '%s' lacks '%s'", dir, err.message, needle);
    CHECKF(!okv_file_exists(out), "%s: failed export left %s behind", dir, out);
    free(out);
}

/* One config.json edit (the first `from` replaced by `to`) that export must
 * refuse with status `want` and a message containing `needle`. */
typedef struct config_case {
    const char *fixture, *name, *from, *to;
    okv_status want;
    const char *needle;
} config_case;

static void expect_edit_refused(const config_case *c) {
    char *d = edited_checkpoint(c->fixture, c->name, c->from, c->to);
    expect_export_error(d, 0, c->want, c->needle);
    free(d);
}

static void test_config_refusals(void) {
    static const config_case cases[] = {
        {"llama32-tiny", "yarn", "\"rope_type\": \"llama3\"", "\"rope_type\": \"yarn\"", OKV_ERR_UNSUPPORTED,
         "rope_type \"yarn\""},
        {"llama32-tiny", "gelu", "\"hidden_act\": \"silu\"", "\"hidden_act\": \"relu2\"", OKV_ERR_UNSUPPORTED,
         "hidden_act \"relu2\""},
        {"llama32-tiny", "arch", "LlamaForCausalLM", "MambaForCausalLM", OKV_ERR_UNSUPPORTED, "MambaForCausalLM"},
        {"llama32-tiny", "shape", "\"intermediate_size\": 128", "\"intermediate_size\": 96", OKV_ERR_FORMAT,
         "mlp.gate_proj.weight"},
        {"llama32-tiny", "untied", "\"tie_word_embeddings\": true", "\"tie_word_embeddings\": false", OKV_ERR_FORMAT,
         "lm_head.weight"},
        {"gemma3-tiny", "layertype", "\"sliding_window_pattern\": 6",
         "\"sliding_window_pattern\": 6, \"layer_types\": [\"sliding_attention\", \"sliding_attention\", "
         "\"chunked_attention\", \"sliding_attention\", \"sliding_attention\", \"full_attention\"]",
         OKV_ERR_UNSUPPORTED, "layer_types[2] = \"chunked_attention\""},
        {"gemma4-tiny", "moe", "\"enable_moe_block\": false", "\"enable_moe_block\": true", OKV_ERR_UNSUPPORTED,
         "enable_moe_block"},
        {"gemma3-tiny", "bidi", "\"use_cache\": true", "\"use_cache\": true, \"use_bidirectional_attention\": true",
         OKV_ERR_UNSUPPORTED, "use_bidirectional_attention"},
        /* values main exported into programs its own loader then refused (issue 8):
         * export applies the loader's rules and names the field */
        {"llama32-tiny", "bos-neg", "\"bos_token_id\": 256", "\"bos_token_id\": -5", OKV_ERR_UNSUPPORTED,
         "bos_token_id = -5"},
        {"llama32-tiny", "bos-huge", "\"bos_token_id\": 256", "\"bos_token_id\": 1e20", OKV_ERR_UNSUPPORTED,
         "bos_token_id = 1e+20"},
        {"llama32-tiny", "eps-huge", "\"rms_norm_eps\": 1e-05", "\"rms_norm_eps\": 1e300", OKV_ERR_UNSUPPORTED,
         "rms_norm_eps = 1e+300"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) expect_edit_refused(&cases[i]);
    /* generation_config.json's EOS list: more than a program holds is refused, naming that file */
    char *d = edited_checkpoint("llama32-tiny", "eos-many", "{", "{"), path[640];
    snprintf(path, sizeof path, "%s/generation_config.json", d);
    static const char eos[] = "{\"eos_token_id\": [1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17]}";
    okv_test_write_file(path, eos, sizeof eos - 1);
    expect_export_error(d, 0, OKV_ERR_UNSUPPORTED, "generation_config.json: eos_token_id lists 17 ids");
    free(d);
}

/* A checkpoint whose model.safetensors is the fixture's cut to `keep` bytes. */
static char *truncated_checkpoint(const char *name, size_t keep) {
    char *dir = e2e_path(name), path[640];
    mkdir(dir, 0755);
    char *data;
    size_t len;
    okv_error err;
    if (okv_read_file(FIXTURES "llama32-tiny/model.safetensors", &data, &len, &err)) exit(1);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    okv_test_write_file(path, data, keep < len ? keep : len);
    free(data);
    if (okv_read_file(FIXTURES "llama32-tiny/config.json", &data, &len, &err)) exit(1);
    snprintf(path, sizeof path, "%s/config.json", dir);
    okv_test_write_file(path, data, len);
    free(data);
    return dir;
}

static void test_bad_safetensors(void) {
    char *d = truncated_checkpoint("st-short-len", 5);
    expect_export_error(d, 0, OKV_ERR_FORMAT, "model.safetensors");
    free(d);
    d = truncated_checkpoint("st-half-header", 200);
    expect_export_error(d, 0, OKV_ERR_FORMAT, "model.safetensors");
    free(d);
    d = truncated_checkpoint("st-data-cut", 300000);   /* header intact, data offsets now past the end */
    expect_export_error(d, 0, OKV_ERR_FORMAT, "data");
    free(d);
}

static void test_chunk_bounds(void) {
    /* Gemma-3 window 8: a chunk above the window names that bound */
    expect_export_error(FIXTURES "gemma3-tiny", 9, OKV_ERR_INVALID, "smallest sliding window (8)");
    expect_export_error(FIXTURES "gemma3-tiny", -1, OKV_ERR_INVALID, "outside [1, 8]");
    /* flat model: the bound is the context length (default 2048) */
    expect_export_error(FIXTURES "llama32-tiny", 4096, OKV_ERR_INVALID, "max context length");
}

/* Truncations and corruptions of a valid program file. */
static void test_corrupt_program(void) {
    char *path = e2e_export(FIXTURES "llama32-tiny", "valid.okv", OKV_F32, 0);
    if (!path) return;
    char *data;
    size_t len;
    okv_error err;
    if (okv_read_file(path, &data, &len, &err)) { CHECK(0); return; }
    char *bad = e2e_path("bad.okv");
    size_t cuts[] = {0, 7, 47, 48, 100, len / 2, len - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        okv_test_write_file(bad, data, cuts[i]);
        okv_program *p = NULL;
        okv_status st = okv_program_open(bad, &p, &err);
        CHECKF(st == OKV_ERR_FORMAT, "truncated at %zu: status %d (%s)", cuts[i], st, err.message);
        CHECKF(strstr(err.message, "bad.okv") != NULL, "message names the file: %s", err.message);
        okv_program_free(p);
    }
    /* flip one byte in the JSON header: the checksum catches it */
    for (size_t off = 60; off < 2000; off += 97) {
        data[off] ^= 0x20;
        okv_test_write_file(bad, data, len);
        data[off] ^= 0x20;
        okv_program *p = NULL;
        okv_status st = okv_program_open(bad, &p, &err);
        CHECKF(st == OKV_ERR_FORMAT && strstr(err.message, "checksum"), "flip at %zu: %s", off, err.message);
        okv_program_free(p);
    }
    /* bad magic */
    data[0] = 'X';
    okv_test_write_file(bad, data, len);
    okv_program *p = NULL;
    CHECK(okv_program_open(bad, &p, &err) == OKV_ERR_FORMAT && strstr(err.message, "magic"));
    free(data);
    free(bad);
    free(path);
}


/* Multimodal checkpoints: vision towers and the unused k/v of KV-shared
 * layers are skipped with a notice and not exported. */
static void test_skipped_tensors(const char *fixture, const char *needle, const char *absent) {
    char notes[4096] = "", dir[256];
    snprintf(dir, sizeof dir, FIXTURES "%s", fixture);
    char *out = e2e_export_noted(dir, "skip.okv", notes);
    okv_error err = {0};
    if (!out) return;
    CHECKF(strstr(notes, "skipped") && strstr(notes, needle), "%s notices: %s", fixture, notes);
    okv_program *p = NULL;
    CHECK_OK(okv_program_open(out, &p, &err), &err);
    char *json = NULL;
    if (p) CHECK_OK(okv_program_describe(p, true, &json, &err), &err);
    CHECKF(json && !strstr(json, absent), "%s: program still holds %s", fixture, absent);
    free(json);
    okv_program_free(p);
    unlink(out);
    free(out);
}

/* A runner refuses caches built for another layout. */
static void test_bind_mismatch(void) {
    char *a = e2e_export(FIXTURES "llama32-tiny", "bind-a.okv", OKV_F32, 0);
    char *b = e2e_export(FIXTURES "gemma3-tiny", "bind-b.okv", OKV_F32, 0);
    okv_program *pa = NULL, *pb = NULL;
    okv_runner *r = NULL;
    okv_error err = {0};
    if (a && b && !okv_program_open(a, &pa, &err) && !okv_program_open(b, &pb, &err)) {
        CHECK_OK(okv_cache_install("bind", pb, NULL, &err), &err);
        CHECK(okv_runner_create(pa, "bind", NULL, &r, &err) == OKV_ERR_INVALID && r == NULL);
        CHECKF(strstr(err.message, "different layout") != NULL, "%s", err.message);
        CHECK(okv_runner_create(pa, "no-such-key", NULL, &r, &err) == OKV_ERR_NOT_FOUND);
        okv_cache_remove("bind", &err);
    }
    okv_program_free(pa);
    okv_program_free(pb);
    free(a);
    free(b);
}

/* Gemma-3's attn_logit_softcapping is ignored like HF does, with a notice;
 * the logits are unchanged. */
static void test_gemma3_attn_softcap_notice(void) {
    char *dir = patched_checkpoint("gemma3-tiny", "g3-cap", "{\"attn_logit_softcapping\": 50.0}");
    char notes[4096] = "", *out = e2e_export_noted(dir, "g3-cap.okv", notes);
    CHECKF(strstr(notes, "attn_logit_softcapping = 50 is ignored") != NULL, "notices: %s", notes);
    okv_program *p = NULL;
    okv_error err = {0};
    if (out) CHECK_OK(okv_program_open(out, &p, &err), &err);
    if (p) {
        CHECK(e2e_oracle_diff(p, FIXTURES "gemma3-tiny", 8) <= 1e-4);
        okv_program_free(p);
    }
    free(out);
    free(dir);
}

/* gemma3-mm-tiny rewritten the way newer transformers save it
 * (model.language_model.* instead of language_model.model.*) exports to the
 * same logits. */
static void test_newer_multimodal_names(void) {
    okv_st_set *set = NULL;
    okv_error err = {0};
    CHECK_OK(okv_st_open_dir(FIXTURES "gemma3-mm-tiny", &set, &err), &err);
    if (!set) return;
    int n = okv_st_count(set);
    okv_st_write_tensor *w = calloc((size_t)n, sizeof *w);
    char (*names)[200] = calloc((size_t)n, sizeof *names);
    for (int i = 0; i < n; i++) {
        const okv_st_tensor *t = okv_st_get(set, i);
        if (!strncmp(t->name, "language_model.model.", 21)) snprintf(names[i], 200, "model.language_model.%s", t->name + 21);
        else snprintf(names[i], 200, "%s", t->name);
        w[i] = (okv_st_write_tensor){names[i], t->dtype, NULL, t->ndim, {0}, t->data};
        memcpy(w[i].shape, t->shape, sizeof t->shape);
    }
    char *dir = patched_checkpoint("gemma3-mm-tiny", "g3mm-new", "{}"), path[640];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    unlink(path);   /* the symlink to the fixture */
    CHECK_OK(okv_st_write(path, w, n, &err), &err);
    char notes[4096] = "", *out = e2e_export_noted(dir, "g3mm-new.okv", notes);
    CHECKF(strstr(notes, "'model.language_model.'") != NULL, "notices: %s", notes);
    okv_program *p = NULL;
    if (out) CHECK_OK(okv_program_open(out, &p, &err), &err);
    if (p) CHECK(e2e_oracle_diff(p, FIXTURES "gemma3-mm-tiny", 5) <= 1e-4);
    okv_program_free(p);
    free(out);
    free(dir);
    free(names);
    free(w);
    okv_st_free(set);
}

int main(void) {
    test_newer_multimodal_names();
    test_gemma3_attn_softcap_notice();
    test_skipped_tensors("gemma3-mm-tiny", "vision_tower", "vision_tower");
    test_skipped_tensors("gemma4-tiny-nested", "self_attn.k_", "layers.7.self_attn.k_proj");
    test_bind_mismatch();
    test_config_refusals();
    test_bad_safetensors();
    test_chunk_bounds();
    test_corrupt_program();
    e2e_cleanup();
    return okv_test_finish();
}
