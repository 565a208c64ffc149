/* test_tok_qwen3.c — the qwen3 tokenizer fixtures (see tok_fixture_check.h). */
#include "tok_fixture_check.h"

int main(void) {
    okv_tok *tok = run_fixture_dir("qwen3", true, true, false);
    if (tok) long_text_consistency(tok, "qwen3", 70000);
    okv_tok_free(tok);
    return okv_test_finish();
}
