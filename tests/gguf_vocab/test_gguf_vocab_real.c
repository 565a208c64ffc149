/* test_gguf_vocab_real.c — the tokenizers of the two real GGUFs
 * (~/.cache/offkv/models or $OKV_CACHE/models, put there by
 * scripts/fetch-models.sh; exit 77 = skipped when absent), read with our
 * GGUF reader and synthesised by okv_gguf_vocab:
 * - Gemma-3 270M: the merges derived from the scores equal HF's 514906 in
 *   order, and the ids (and raw decode) equal the Gemma-3 tokenizer.json
 *   fixture's on all its cases;
 * - SmolLM2-135M-Instruct: HF's ids from
 *   ../shared/fixtures/real/smollm2-135m-instruct/reference.json for the
 *   64-token text and both prompts, the chat prompt rendered through the
 *   GGUF's own template equal to HF's rendering, HF's generations decoding
 *   to HF's text.
 * OKV_REAL_MODEL_TESTS=reduced (the sanitizer pass) skips the merge-list
 * comparison and Gemma's 540 + 162 cases.jsonl/decode_cases.jsonl lines. */
#include "gguf_vocab_check.h"
#include "okv_gguf.h"

#include <time.h>

/* ---- 3. the real GGUFs ------------------------------------------------------------------------ */

static char *model_path(const char *file) {
    const char *cache = getenv("OKV_CACHE");
    const char *home = getenv("HOME");
    char buf[1024];
    if (cache) snprintf(buf, sizeof buf, "%s/models/%s", cache, file);
    else snprintf(buf, sizeof buf, "%s/.cache/offkv/models/%s", home ? home : "", file);
    return okv_file_exists(buf) ? okv_strdup(buf) : NULL;
}

static bool gguf_texts(const char *file, okv_gguf_vocab_texts *t) {
    char *path = model_path(file);
    if (!path) {
        printf("SKIP %s: not in the model cache (scripts/fetch-models.sh)\n", file);
        return false;
    }
    okv_gguf *g = NULL;
    okv_error err = {0};
    CHECK_OK(okv_gguf_open(path, &g, &err), &err);
    free(path);
    if (!g) return false;
    struct timespec t0, t1;
    clock_t c0 = clock();
    clock_gettime(CLOCK_MONOTONIC, &t0);
    okv_status st = okv_gguf_tokenizer_texts(g, t, &err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    CHECK_OK(st, &err);
    if (!st)
        printf("%s: tokenizer.json of %.1f MB synthesised in %.2f s (%.2f s CPU)\n", file, (double)t->tokenizer_json_len / 1e6,
               (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec),
               (double)(clock() - c0) / CLOCKS_PER_SEC);
    okv_gguf_close(g);
    return st == OKV_OK;
}

static int g_real_checked;

/* model.merges of a tokenizer.json text as "a\x01b" strings (cJSON tree freed
 * before returning, so only one big tree is alive at a time). */
static char **merges_of(const char *text, size_t len, size_t *n) {
    cJSON *root = NULL;
    okv_error err = {0};
    *n = 0;
    CHECK_OK(okv_json_parse(text, len, &root, "tokenizer.json", &err), &err);
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "model"), "merges"), *it;
    char **out = malloc(((size_t)cJSON_GetArraySize(m) + 1) * sizeof *out);
    cJSON_ArrayForEach(it, m) {
        const char *a = it->child->valuestring, *b = it->child->next->valuestring;
        char *s = malloc(strlen(a) + strlen(b) + 2);
        sprintf(s, "%s\x01%s", a, b);
        out[(*n)++] = s;
    }
    cJSON_Delete(root);
    return out;
}

/* The merges derived from the GGUF's scores are HF's, in HF's order. */
static void check_gemma3_merges(const okv_gguf_vocab_texts *t) {
    char *text;
    size_t len, n_hf, n_ours, same = 0;
    okv_error err = {0};
    CHECK_OK(okv_read_file(FIXTURES "gemma3/tokenizer.json", &text, &len, &err), &err);
    if (!text) return;
    char **hf = merges_of(text, len, &n_hf);
    free(text);
    char **ours = merges_of(t->tokenizer_json, t->tokenizer_json_len, &n_ours);
    for (size_t i = 0; i < n_hf && i < n_ours; i++) same += !strcmp(hf[i], ours[i]);
    printf("gemma3 merges from GGUF scores: %zu, HF's: %zu, equal at the same rank: %zu\n", n_ours, n_hf, same);
    CHECK(n_hf == 514906 && n_ours == n_hf && same == n_hf);
    for (size_t i = 0; i < n_hf; i++) free(hf[i]);
    for (size_t i = 0; i < n_ours; i++) free(ours[i]);
    free(hf);
    free(ours);
}

static void check_gemma3_gguf(void) {
    okv_gguf_vocab_texts t;
    if (!gguf_texts("gemma-3-270m-q4_k_m.gguf", &t)) return;
    g_real_checked++;
    const char *mode = getenv("OKV_REAL_MODEL_TESTS");
    bool reduced = mode && !strcmp(mode, "reduced");
    if (!reduced) check_gemma3_merges(&t);
    okv_tok *tok = load_texts(&t);
    if (tok) {
        static const char *files[] = {"cases.jsonl", "llamacpp_cases.jsonl", "decode_cases.jsonl"};
        for (int i = 0; i < 3; i++) {
            if (reduced && i != 1) continue;
            case_counts c = run_cases(tok, "gemma3", files[i]);
            bool has_text = i < 2;
            /* ids and raw decode must all match, except decode lines using
             * <image_soft_token> (262144), which HF's file adds beyond the
             * model's 262144 tokens. Skip-special decode differs where the
             * GGUF marks a token CONTROL that HF does not call special
             * (<unusedN> ...): counted, not required. */
            CHECKF(c.lines >= 46 && (!has_text || c.ids_ok == c.lines) && c.dec_ok == c.lines - c.beyond_vocab &&
                       c.beyond_vocab <= 3,
                   "gemma3 GGUF vs %s: ids %d, decoded %d of %d", files[i], c.ids_ok, c.dec_ok, c.lines);
        }
        char path[256];
        snprintf(path, sizeof path, FIXTURES "gemma3/chat_cases.jsonl");
        case_counts c = {tok, 0, 0, 0, 0, false, 0};
        for_each_line(path, chat_ids_line, &c);
        printf("gemma3/chat_cases.jsonl: %d rendered prompts, ids %d\n", c.lines, c.ids_ok);
        CHECKF(c.lines >= 20 && c.ids_ok == c.lines, "gemma3 chat ids %d of %d", c.ids_ok, c.lines);
        CHECK(okv_tok_vocab_size(tok) == 262144);
        okv_tok_free(tok);
    }
    CHECK(strstr(t.tokenizer_config_json, "\"bos_token\":\"<bos>\"") && strstr(t.tokenizer_config_json, "\"add_bos_token\":true"));
    /* Gemma's <end_of_turn> (106) ends generation beside <eos> (1) */
    CHECKF(strstr(t.generation_config_json, "\"eos_token_id\":[1,106]") != NULL, "%s", t.generation_config_json);
    okv_gguf_vocab_texts_free(&t);
}

static void check_ids(const okv_tok *tok, const char *text, const cJSON *want_j, size_t prefix, const char *what) {
    size_t nwant, n = 0;
    int32_t *want = json_ids(want_j, &nwant), *ids = NULL;
    okv_error err = {0};
    CHECK_OK(okv_tok_encode(tok, text, strlen(text), true, &ids, &n, &err), &err);
    if (prefix && n > prefix) n = prefix;
    bool ok = ids_equal(ids, n, want, nwant);
    CHECKF(ok, "SmolLM2 %s ids differ from HF's", what);
    if (!ok) { print_ids("got ", ids, n); print_ids("want", want, nwant); }
    free(ids);
    free(want);
}

static void check_smollm2_gguf(void) {
    okv_gguf_vocab_texts t;
    if (!gguf_texts("SmolLM2-135M-Instruct.Q4_1.gguf", &t)) return;
    g_real_checked++;
    cJSON *ref = NULL;
    okv_error err = {0};
    CHECK_OK(okv_json_load("../shared/fixtures/real/smollm2-135m-instruct/reference.json", &ref, &err), &err);
    okv_tok *tok = load_texts(&t);
    if (tok && ref) {
        /* the 64-token text (reference tokens are the first 64 of its encoding) */
        check_ids(tok, okv_json_str(ref, "text"), cJSON_GetObjectItemCaseSensitive(ref, "tokens"), 64, "64-token text");
        const cJSON *gens = cJSON_GetObjectItemCaseSensitive(ref, "generations"), *g;
        int checked = 0;
        cJSON_ArrayForEach(g, gens) {
            const char *kind = okv_json_str(g, "kind");
            const char *prompt = okv_json_str(g, "prompt");
            char *rendered = NULL;
            if (kind && !strcmp(kind, "chat")) {
                /* render through the GGUF's own template, as run does */
                okv_chat_config cfg;
                okv_chat_template *tmpl = NULL;
                CHECK_OK(okv_chat_template_from_config(t.tokenizer_config_json, &cfg, &tmpl, &err), &err);
                if (tmpl) {
                    char *msgs = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(g, "messages"));
                    okv_chat_args a = {.messages_json = msgs, .add_generation_prompt = true, .bos_token = cfg.bos_token,
                                       .eos_token = cfg.eos_token, .unk_token = cfg.unk_token, .pad_token = cfg.pad_token};
                    CHECK_OK(okv_chat_render(tmpl, &a, &rendered, NULL, &err), &err);
                    free(msgs);
                    const char *want = okv_json_str(g, "rendered");
                    CHECKF(rendered && want && !strcmp(rendered, want), "SmolLM2 chat render: \"%s\"", rendered ? rendered : "");
                    okv_chat_template_free(tmpl);
                    okv_chat_config_free(&cfg);
                }
                prompt = rendered;
            }
            if (prompt) {
                check_ids(tok, prompt, cJSON_GetObjectItemCaseSensitive(g, "prompt_ids"), 0, kind);
                checked++;
            }
            /* HF's generated ids decode to HF's text */
            size_t n;
            int32_t *ids = json_ids(cJSON_GetObjectItemCaseSensitive(g, "new_ids"), &n);
            const char *want = okv_json_str(g, "text");
            CHECKF(want && decode_is(tok, ids, n, false, want, strlen(want)), "SmolLM2 %s decode", kind);
            free(ids);
            free(rendered);
        }
        CHECK(checked == 2);
        CHECK(okv_tok_is_special(tok, 2) && okv_tok_token_to_id(tok, "<|im_end|>") == 2);
    }
    /* no BOS added (add_bos_token false), eos <|im_end|> */
    CHECK(strstr(t.tokenizer_config_json, "\"add_bos_token\":false") && strstr(t.tokenizer_config_json, "\"eos_token\":\"<|im_end|>\""));
    /* <|im_end|> first (HF's eos), then <|endoftext|>, which llama.cpp also stops at */
    CHECKF(strstr(t.generation_config_json, "\"eos_token_id\":[2,0]") != NULL, "%s", t.generation_config_json);
    okv_tok_free(tok);
    cJSON_Delete(ref);
    okv_gguf_vocab_texts_free(&t);
}

int main(void) {
    check_smollm2_gguf();
    check_gemma3_gguf();
    printf("real GGUF tokenizers checked: %d of 2\n", g_real_checked);
    if (!g_real_checked) return 77; /* skipped: no model in the cache */
    return okv_test_finish();
}
