/* gen_fixture.h — the program the generate tests run: a generated Llama
 * (random weights, seeded) with the real Llama-3.1 tokenizer (vocab
 * 128256, BOS 128000, EOS <|eot_id|> 128009) and its chat template,
 * exported with 16-token prefill chunks into dir/model.okv. */
#ifndef OKV_TEST_GEN_FIXTURE_H
#define OKV_TEST_GEN_FIXTURE_H

#include <stdio.h>
#include <stdlib.h>

#include "mkckpt.h"
#include "offkv.h"
#include "okv_test.h"

#define GEN_FIXTURE_TOKDIR "../shared/fixtures/tokenizers/llama3_1/"

/* The exported program's path (malloc'ed). */
static char *gen_fixture_llama(const char *dir_root, uint64_t seed) {
    okv_mkckpt_spec s;
    okv_mkckpt_default_spec(&s, OKV_MK_LLAMA);
    s.vocab = 128256;
    s.bos_id = 128000;
    s.eos_id = 128009;
    s.seed = seed;
    char dir[256], path[300];
    snprintf(dir, sizeof dir, "%s/ckpt", dir_root);
    okv_error err = {0};
    CHECK_OK(okv_mkckpt_write(&s, dir, &err), &err);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    okv_test_copy_file(GEN_FIXTURE_TOKDIR "tokenizer.json", path);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    okv_test_copy_file(GEN_FIXTURE_TOKDIR "tokenizer_config.json", path);
    char *out = malloc(300);
    snprintf(out, 300, "%s/model.okv", dir_root);
    okv_export_options o;
    okv_export_options_default(&o);
    o.prefill_chunk_size = 16;
    CHECK_OK(okv_export(dir, out, &o, &err), &err);
    return out;
}

#endif
