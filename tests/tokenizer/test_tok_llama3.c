/* test_tok_llama3.c — the llama3 tokenizer fixtures (see tok_fixture_check.h). */
#include "tok_fixture_check.h"

int main(void) {
    okv_tok *tok = run_fixture_dir("llama3", true, false, false);
    if (tok) long_text_consistency(tok, "llama3", 70000);
    okv_tok_free(tok);
    return okv_test_finish();
}
