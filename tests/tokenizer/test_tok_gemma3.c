/* test_tok_gemma3.c — the gemma3 tokenizer fixtures (see tok_fixture_check.h). */
#include "tok_fixture_check.h"

int main(void) {
    okv_tok *tok = run_fixture_dir("gemma3", true, false, true);
    okv_tok_free(tok);
    return okv_test_finish();
}
