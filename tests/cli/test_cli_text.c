/* The offkv binary on hostile or careless text-side input (issue 8): a chat
 * template that nests too deeply, --tokens JSON with decoy keys, all-NaN
 * logits in `generate`, an interactive conversation that outgrows the
 * context, a tokenizer larger than the program's vocabulary, and sampling
 * values out of range on the command line or in generation_config.json.
 * Each must end in a one-line message naming the problem (and the session,
 * for interactive turns, must go on), never a crash or a silent wrong answer.
 * Models: random Llama geometry (okv-mkckpt) with the real Llama-3.1
 * tokenizer. OKV_BIN is the built binary. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mkckpt.h"
#include "okv_common.h"
#include "okv_test.h"

#define TOKDIR "../shared/fixtures/tokenizers/llama3_1/"

static char dir[] = "/tmp/okv-clitext-XXXXXX";

static char *tpath(const char *name) {
    static char buf[8][400];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, 400, "%s/%s", dir, name);
    return p;
}

/* Runs a shell command; exit status (-1 if killed by a signal), stdout in
 * *out and stderr in *errout (either may be NULL). */
static int run_cmd(const char *cmdline, char **out, char **errout) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s > %s/o.txt 2> %s/e.txt", cmdline, dir, dir);
    int rc = system(cmd);
    okv_error err;
    size_t len;
    if (out && okv_read_file(tpath("o.txt"), out, &len, &err)) *out = NULL;
    if (errout && okv_read_file(tpath("e.txt"), errout, &len, &err)) *errout = NULL;
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static int count(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = hay; p && (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

/* A checkpoint dir NAME; vocab 128256 with the Llama-3.1 tokenizer when
 * with_tokenizer, else the mkckpt default (512). */
static const char *make_ckpt(const char *name, bool with_tokenizer, int vocab) {
    const char *ck = tpath(name);
    okv_mkckpt_spec s;
    okv_mkckpt_default_spec(&s, OKV_MK_LLAMA);
    s.vocab = vocab;
    if (vocab > 128009) { s.bos_id = 128000; s.eos_id = 128009; }
    s.seed = 11;
    okv_error err = {0};
    CHECK_OK(okv_mkckpt_write(&s, ck, &err), &err);
    if (with_tokenizer) {
        char p[450];
        snprintf(p, sizeof p, "%s/tokenizer.json", ck);
        okv_test_copy_file(TOKDIR "tokenizer.json", p);
        snprintf(p, sizeof p, "%s/tokenizer_config.json", ck);
        okv_test_copy_file(TOKDIR "tokenizer_config.json", p);
    }
    return ck;
}

static bool export_ckpt(const char *ck, const char *out) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "%s export %s -o %s --dtype bf16 --max-ctx-len 256", OKV_BIN, ck, out);
    return run_cmd(cmd, NULL, NULL) == 0;
}

static char model[400];

/* Found 3: {{ 1+1+...+1 }} of 20000 terms in chat_template.jinja exported
 * fine and then `run` died with SIGSEGV. */
static void test_deep_template(void) {
    const char *ck = make_ckpt("deeptpl", true, 128256);
    size_t n = 20000;
    char *src = malloc(n * 2 + 16);
    size_t o = (size_t)sprintf(src, "{{ 1");
    for (size_t i = 0; i < n; i++) { src[o++] = '+'; src[o++] = '1'; }
    strcpy(src + o, " }}");
    char p[450];
    snprintf(p, sizeof p, "%s/chat_template.jinja", ck);
    okv_test_write_text(p, src);
    free(src);
    const char *out = tpath("deeptpl.okv");
    CHECK(export_ckpt(ck, out));
    char cmd[1200], *err = NULL;
    snprintf(cmd, sizeof cmd, "%s run %s --prompt hi --max-new-tokens 1", OKV_BIN, out);
    int rc = run_cmd(cmd, NULL, &err);
    CHECKF(rc == 1 && err && strstr(err, "chat_template.jinja") && strstr(err, "1:") && strstr(err, "nested deeper"),
           "exit %d: %s", rc, err ? err : "");
    free(err);
}

/* --tokens JSON was found by string search: a "tokens" key inside another
 * object, or an earlier array, was read instead of the top-level one. */
static void test_tokens_json(void) {
    const char *f = tpath("toks.json");
    okv_test_write_text(f, "{\"x\":{\"tokens\":null},\"shape\":[9,9],\"tokens\":[128000,791,4062]}");
    char cmd[1200], *a = NULL, *b = NULL;
    snprintf(cmd, sizeof cmd, "%s generate %s --tokens %s --max-new-tokens 3", OKV_BIN, model, f);
    CHECK(run_cmd(cmd, &a, NULL) == 0);
    snprintf(cmd, sizeof cmd, "%s generate %s --tokens \"128000 791 4062\" --max-new-tokens 3", OKV_BIN, model);
    CHECK(run_cmd(cmd, &b, NULL) == 0);
    CHECKF(a && b && !strcmp(a, b), "json '%s' vs inline '%s'", a ? a : "", b ? b : "");
    free(a);
    free(b);
    static const char *bad[] = {"{\"tokens\":[1,2.5]}", "{\"tokens\":\"1 2\"}", "[1,-3]", "{\"x\":{\"tokens\":[1]}}",
                                "{\"tokens\":[1,2]", "[1e20]"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        okv_test_write_text(f, bad[i]);
        char *err = NULL;
        snprintf(cmd, sizeof cmd, "%s generate %s --tokens %s --max-new-tokens 1", OKV_BIN, model, f);
        int rc = run_cmd(cmd, NULL, &err);
        CHECKF(rc == 2 && err && strstr(err, "--tokens"), "'%s': exit %d: %s", bad[i], rc, err ? err : "");
        free(err);
    }
}

/* All-NaN weights give all-NaN logits: `generate` printed "0 0 0" and exited 0. */
static void test_nan_logits(void) {
    const char *ck = make_ckpt("nan", false, 512);
    char p[450];
    snprintf(p, sizeof p, "%s/model.safetensors", ck);
    char *d = NULL;
    size_t n = 0;
    okv_error e;
    CHECK_OK(okv_read_file(p, &d, &n, &e), &e);
    if (!d) return;
    uint64_t h = 0;
    for (int i = 0; i < 8; i++) h |= (uint64_t)(unsigned char)d[i] << (8 * i);
    memset(d + 8 + h, 0xFF, n - 8 - h); /* every bf16 weight 0xFFFF: NaN */
    FILE *f = fopen(p, "wb");
    fwrite(d, 1, n, f);
    fclose(f);
    free(d);
    const char *out = tpath("nan.okv");
    CHECK(export_ckpt(ck, out));
    char cmd[1200], *o = NULL, *err = NULL;
    snprintf(cmd, sizeof cmd, "%s generate %s --tokens \"1 2 3\" --max-new-tokens 4", OKV_BIN, out);
    int rc = run_cmd(cmd, &o, &err);
    CHECKF(rc == 1 && err && strstr(err, "no finite logit") && o && !strstr(o, "0 0"), "exit %d: out '%s' err %s", rc,
           o ? o : "", err ? err : "");
    free(o);
    free(err);
}

/* The conversation outgrew the context: the error counted only the new
 * tokens and the whole session ended; so did one over-long line. */
static void test_interactive_context(void) {
    char line[4000] = "";
    for (int i = 0; i < 300; i++) strcat(line, "word ");
    char input[8000];
    snprintf(input, sizeof input, "hi\n%s\nhello\n/quit\n", line);
    okv_test_write_text(tpath("in1.txt"), input);
    char cmd[1200], *err = NULL;
    snprintf(cmd, sizeof cmd, "%s run %s --interactive --greedy --max-new-tokens 3 --kv-max-capacity 120 < %s", OKV_BIN,
             model, tpath("in1.txt"));
    int rc = run_cmd(cmd, NULL, &err);
    CHECKF(rc == 0 && err && count(err, "generated") == 2 && strstr(err, "does not fit the context (120 positions)") &&
           strstr(err, "turn refused") && strstr(err, "drop the oldest turns automatically) (--drop-old-turns)"),
           "exit %d: %s", rc, err ? err : "");
    free(err);
    /* short turns until the conversation no longer fits: refused with the whole count, session alive */
    char many[2000] = "";
    for (int i = 0; i < 12; i++) strcat(many, "tell me more please\n");
    okv_test_write_text(tpath("in2.txt"), many);
    snprintf(cmd, sizeof cmd, "%s run %s --interactive --greedy --max-new-tokens 8 --kv-max-capacity 120 < %s", OKV_BIN,
             model, tpath("in2.txt"));
    rc = run_cmd(cmd, NULL, &err);
    int refused = count(err, "turn refused"), done = count(err, "generated");
    CHECKF(rc == 0 && refused > 0 && done > 0 && refused + done == 12 && strstr(err, "of earlier turns"), "exit %d: %s", rc,
           err ? err : "");
    free(err);
    /* --drop-old-turns: every turn is answered */
    snprintf(cmd, sizeof cmd, "%s run %s --interactive --drop-old-turns --greedy --max-new-tokens 8 --kv-max-capacity 120 < %s",
             OKV_BIN, model, tpath("in2.txt"));
    rc = run_cmd(cmd, NULL, &err);
    CHECKF(rc == 0 && count(err, "generated") == 12 && !strstr(err, "turn refused"), "exit %d: %s", rc, err ? err : "");
    free(err);
}

/* /save after two turns, /load in a new process: the third reply is the
 * uninterrupted session's, its prompt served from the cache; a bad /load
 * is reported and the session goes on. */
static void test_interactive_save_load(void) {
    okv_test_write_text(tpath("sl_all.txt"), "hi\nhello there\ntell me more\n");
    char save_in[600], load_in[600];
    snprintf(save_in, sizeof save_in, "hi\nhello there\n/save %s\n", tpath("chat.okvseq"));
    snprintf(load_in, sizeof load_in, "/load %s\n/load %s\ntell me more\n", tpath("missing.okvseq"), tpath("chat.okvseq"));
    okv_test_write_text(tpath("sl_save.txt"), save_in);
    okv_test_write_text(tpath("sl_load.txt"), load_in);
    char cmd[1200], *all = NULL, *o = NULL, *err = NULL;
    snprintf(cmd, sizeof cmd, "%s run %s --interactive --greedy --max-new-tokens 6 < %s", OKV_BIN, model,
             tpath("sl_all.txt"));
    CHECK(run_cmd(cmd, &all, NULL) == 0);
    snprintf(cmd, sizeof cmd, "%s run %s --interactive --greedy --max-new-tokens 6 < %s", OKV_BIN, model,
             tpath("sl_save.txt"));
    CHECK(run_cmd(cmd, NULL, &err) == 0 && err && strstr(err, "saved to"));
    free(err);
    snprintf(cmd, sizeof cmd, "%s run %s --interactive --greedy --max-new-tokens 6 < %s", OKV_BIN, model,
             tpath("sl_load.txt"));
    int rc = run_cmd(cmd, &o, &err);
    size_t na = all ? strlen(all) : 0, no = o ? strlen(o) : 0;
    CHECKF(rc == 0 && err && strstr(err, "missing.okvseq: cannot open") && strstr(err, "loaded") &&
           strstr(err, "reused from the cache") && no > 1 && na > no && !strcmp(all + na - no, o),
           "exit %d: third reply '%s' vs uninterrupted '%s': %s", rc, o ? o : "", all ? all : "", err ? err : "");
    free(all);
    free(o);
    free(err);
}

/* A tokenizer with more ids than the program's vocab surfaced late as
 * "sampler: token 9906 outside the vocabulary". */
static void test_tokenizer_too_big(void) {
    const char *ck = make_ckpt("smallvocab", true, 512);
    const char *out = tpath("small.okv");
    CHECK(export_ckpt(ck, out));
    char cmd[1200], *err = NULL;
    snprintf(cmd, sizeof cmd, "%s run %s --prompt hi --max-new-tokens 2", OKV_BIN, out);
    int rc = run_cmd(cmd, NULL, &err);
    CHECKF(rc == 1 && err && strstr(err, "ids up to 128255") && strstr(err, "vocabulary has 512"), "exit %d: %s", rc,
           err ? err : "");
    free(err);
}

/* --temperature -1 / nan were accepted, and top_k 1e20 in generation_config.json. */
static void test_sampling_values(void) {
    static const struct { const char *flags, *needle; } bad[] = {
        {"--temperature -1", "--temperature"}, {"--temperature nan", "--temperature"},
        {"--temperature inf", "--temperature"}, {"--top-p 2", "--top-p"}, {"--min-p -0.5", "--min-p"},
        {"--repetition-penalty 0", "--repetition-penalty"}, {"--top-k 1e20", "--top-k"},
    };
    char cmd[1200];
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char *err = NULL;
        snprintf(cmd, sizeof cmd, "%s run %s --prompt hi --max-new-tokens 1 %s", OKV_BIN, model, bad[i].flags);
        int rc = run_cmd(cmd, NULL, &err);
        CHECKF(rc == 2 && err && strstr(err, bad[i].needle), "'%s': exit %d: %s", bad[i].flags, rc, err ? err : "");
        free(err);
    }
    const char *ck = make_ckpt("genconf", true, 128256);
    char p[450];
    snprintf(p, sizeof p, "%s/generation_config.json", ck);
    okv_test_write_text(p, "{\"do_sample\": true, \"top_k\": 1e20, \"bos_token_id\": 128000, \"eos_token_id\": 128009}");
    const char *out = tpath("genconf.okv");
    CHECK(export_ckpt(ck, out));
    char *err = NULL;
    snprintf(cmd, sizeof cmd, "%s run %s --prompt hi --max-new-tokens 1", OKV_BIN, out);
    int rc = run_cmd(cmd, NULL, &err);
    CHECKF(rc == 1 && err && strstr(err, "generation_config.json") && strstr(err, "top_k") && strstr(err, "1e+20"),
           "exit %d: %s", rc, err ? err : "");
    free(err);
    okv_test_write_text(p, "{\"do_sample\": true, \"temperature\": -0.5, \"bos_token_id\": 128000, \"eos_token_id\": 128009}");
    CHECK(export_ckpt(ck, out));
    rc = run_cmd(cmd, NULL, &err);
    CHECKF(rc == 1 && err && strstr(err, "generation_config.json") && strstr(err, "temperature"), "exit %d: %s", rc,
           err ? err : "");
    free(err);
}

int main(void) {
    if (!mkdtemp(dir)) return 1;
    const char *ck = make_ckpt("main", true, 128256);
    snprintf(model, sizeof model, "%s/main.okv", dir);
    CHECK(export_ckpt(ck, model));
    test_deep_template();
    test_tokens_json();
    test_nan_logits();
    test_interactive_context();
    test_interactive_save_load();
    test_tokenizer_too_big();
    test_sampling_values();
    okv_test_rm_tree(dir);
    return okv_test_finish();
}
