/* test_tok_llama3_1.c — the llama3_1 tokenizer fixtures (see tok_fixture_check.h). */
#include "tok_fixture_check.h"

int main(void) {
    okv_tok *tok = run_fixture_dir("llama3_1", true, false, false);
    okv_tok_free(tok);
    return okv_test_finish();
}
