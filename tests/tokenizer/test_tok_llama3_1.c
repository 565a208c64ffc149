/* test_tok_llama3_1.c — the llama3_1 tokenizer fixtures (see tok_fixture_check.h),
 * plus the Llama-3.1/3.2 chat-template fixtures' ids. */
#include "tok_fixture_check.h"

int main(void) {
    okv_tok *tok = run_fixture_dir("llama3_1", true, false, false);
    /* the Llama-3.1/3.2 chat-template fixtures were tokenized with this tokenizer */
    static const char *more[] = {"../shared/fixtures/chat_templates/llama3.1-8b-instruct/chat_cases.jsonl",
                                 "../shared/fixtures/chat_templates/llama3.2-3b-instruct/chat_cases.jsonl"};
    for (int i = 0; tok && i < 2; i++) {
        fx f = {tok, more[i], 0};
        CHECK(for_each_line(more[i], chat_line, &f) >= 20);
    }
    okv_tok_free(tok);
    return okv_test_finish();
}
