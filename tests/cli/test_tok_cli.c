/* test_tok_cli.c — `offkv tokenize` / `offkv detokenize` (src/cli/cmd_tok.c,
 * called through the okv_cli library, in process so the tokenizer source
 * helper can be checked too): --jsonl output must match the llama3_1 fixtures line by line,
 * --text/--ids/--json/--no-special/--skip-special must print what the
 * fixtures say, and every bad invocation must exit 1. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cjson/cJSON.h>

#include "cmd_tok.h"
#include "okv_test.h"

#define FIX "../shared/fixtures/tokenizers/llama3_1/"

static char *read_all(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *s = malloc((size_t)n + 1);
    if (fread(s, 1, (size_t)n, f) != (size_t)n) n = 0;
    s[n] = 0;
    fclose(f);
    return s;
}

static void temp_path(char *buf, const char *tag) {
    snprintf(buf, 64, "/tmp/okv_tok_cli_%s_XXXXXX", tag);
    int fd = mkstemp(buf);
    if (fd >= 0) close(fd);
}

/* Runs cmd with args (NULL-terminated), --out OUT inserted after the name; returns exit code
 * and the output text in *out (free it). */
static int run(int (*cmd)(int, char **), char **out, ...) {
    char path[64];
    temp_path(path, "out");
    char *argv[32];
    int argc = 0;
    va_list ap;
    va_start(ap, out);
    argv[argc++] = va_arg(ap, char *); /* subcommand name, then --out first */
    argv[argc++] = "--out";
    argv[argc++] = path;
    for (char *a; (a = va_arg(ap, char *));) argv[argc++] = a;
    va_end(ap);
    int rc = cmd(argc, argv);
    *out = read_all(path);
    unlink(path);
    return rc;
}

/* Builds an input JSONL from cases.jsonl (lines without \u0000) and checks
 * tokenize/detokenize --jsonl reproduce ids and decoded text. */
static void test_jsonl_against_fixtures(void) {
    char in_tok[64], in_detok[64];
    temp_path(in_tok, "tin");
    temp_path(in_detok, "din");
    char *cases = read_all(FIX "cases.jsonl");
    CHECK(cases != NULL);
    if (!cases) return;
    FILE *ft = fopen(in_tok, "w"), *fd = fopen(in_detok, "w");
    cJSON **want = malloc(2000 * sizeof *want);
    int n = 0;
    for (char *line = strtok(cases, "\n"); line && n < 2000; line = strtok(NULL, "\n")) {
        if (strstr(line, "\\u0000")) continue;
        cJSON *j = cJSON_Parse(line);
        if (!j) continue;
        cJSON *in = cJSON_CreateObject();
        cJSON_AddItemReferenceToObject(in, "text", cJSON_GetObjectItem(j, "text"));
        cJSON_AddItemReferenceToObject(in, "add_special_tokens", cJSON_GetObjectItem(j, "add_special_tokens"));
        char *s = cJSON_PrintUnformatted(in);
        fprintf(ft, "%s\n", s);
        free(s);
        cJSON_Delete(in);
        in = cJSON_CreateObject();
        cJSON_AddItemReferenceToObject(in, "ids", cJSON_GetObjectItem(j, "ids"));
        s = cJSON_PrintUnformatted(in);
        fprintf(fd, "%s\n\n", s); /* blank lines are skipped */
        free(s);
        cJSON_Delete(in);
        want[n++] = j;
    }
    fclose(ft);
    fclose(fd);
    free(cases);
    CHECK(n > 500);

    char *out = NULL;
    CHECK(run(okv_cli_tokenize, &out, "tokenize", "--tokenizer", FIX "tokenizer.json", "--jsonl", in_tok, NULL) == 0);
    int k = 0, bad = 0;
    for (char *line = out ? strtok(out, "\n") : NULL; line; line = strtok(NULL, "\n"), k++) {
        cJSON *j = cJSON_Parse(line);
        char *got = j ? cJSON_PrintUnformatted(cJSON_GetObjectItem(j, "ids")) : NULL;
        char *exp = k < n ? cJSON_PrintUnformatted(cJSON_GetObjectItem(want[k], "ids")) : NULL;
        if (!got || !exp || strcmp(got, exp)) bad++;
        free(got);
        free(exp);
        cJSON_Delete(j);
    }
    CHECKF(k == n && bad == 0, "tokenize --jsonl: %d lines of %d, %d differ", k, n, bad);
    free(out);

    CHECK(run(okv_cli_detokenize, &out, "detokenize", "--tokenizer", FIX "tokenizer.json", "--jsonl", in_detok, NULL) == 0);
    k = bad = 0;
    for (char *line = out ? strtok(out, "\n") : NULL; line; line = strtok(NULL, "\n"), k++) {
        cJSON *j = cJSON_Parse(line);
        const char *got = j ? cJSON_GetStringValue(cJSON_GetObjectItem(j, "text")) : NULL;
        const char *exp = k < n ? cJSON_GetStringValue(cJSON_GetObjectItem(want[k], "decoded")) : NULL;
        if (!got || !exp || strcmp(got, exp)) bad++;
        cJSON_Delete(j);
    }
    CHECKF(k == n && bad == 0, "detokenize --jsonl: %d lines of %d, %d differ", k, n, bad);
    free(out);
    for (int i = 0; i < n; i++) cJSON_Delete(want[i]);
    free(want);
    unlink(in_tok);
    unlink(in_detok);
}

static void test_single_text(void) {
    const char *T = FIX "tokenizer.json";
    char *out = NULL;
    /* llama3_1 adds <|begin_of_text|> 128000; "Hello" 9906, " world" 1917 */
    CHECK(run(okv_cli_tokenize, &out, "tokenize", "--tokenizer", T, "--text", "Hello world", NULL) == 0);
    CHECK(out && strcmp(out, "128000\n9906\n1917\n") == 0);
    free(out);
    CHECK(run(okv_cli_tokenize, &out, "tokenize", "--tokenizer", T, "--text", "Hello world", "--json", "--no-special", NULL) == 0);
    CHECK(out && strcmp(out, "[9906,1917]\n") == 0);
    free(out);
    CHECK(run(okv_cli_detokenize, &out, "detokenize", "--tokenizer", T, "--ids", "128000 9906 1917", NULL) == 0);
    CHECK(out && strcmp(out, "<|begin_of_text|>Hello world\n") == 0);
    free(out);
    CHECK(run(okv_cli_detokenize, &out, "detokenize", "--tokenizer", T, "--ids", "[128000, 9906,1917]", "--skip-special", NULL) == 0);
    CHECK(out && strcmp(out, "Hello world\n") == 0);
    free(out);
}

static void test_errors(void) {
    const char *T = FIX "tokenizer.json";
    char bad[64];
    temp_path(bad, "bad");
    FILE *f = fopen(bad, "w");
    fputs("{\"text\":\"ok\"}\n{\"text\":5}\n", f);
    fclose(f);
    char *out = NULL;
#define EXPECT_EXIT1(...) do { CHECK(run(__VA_ARGS__, NULL) == 1); free(out); out = NULL; } while (0)
    EXPECT_EXIT1(okv_cli_tokenize, &out, "tokenize", "--text", "x");                               /* no tokenizer */
    EXPECT_EXIT1(okv_cli_tokenize, &out, "tokenize", "--tokenizer", T);                            /* no input */
    EXPECT_EXIT1(okv_cli_tokenize, &out, "tokenize", "--tokenizer", T, "--text", "x", "--jsonl", bad);
    EXPECT_EXIT1(okv_cli_tokenize, &out, "tokenize", "--tokenizer", T, "--text", "x", "--frobnicate");
    EXPECT_EXIT1(okv_cli_tokenize, &out, "tokenize", "--tokenizer", T, "--text");                 /* missing value */
    EXPECT_EXIT1(okv_cli_tokenize, &out, "tokenize", "--tokenizer", T, "--jsonl", bad);            /* line 2 bad */
    EXPECT_EXIT1(okv_cli_tokenize, &out, "tokenize", "--tokenizer", "/nonexistent.json", "--text", "x");
    EXPECT_EXIT1(okv_cli_tokenize, &out, "tokenize", "model.okv", "--text", "x");                  /* no such program */
    EXPECT_EXIT1(okv_cli_tokenize, &out, "tokenize", "--tokenizer", T, "--text", "\xff");         /* invalid UTF-8 */
    EXPECT_EXIT1(okv_cli_detokenize, &out, "detokenize", "--tokenizer", T, "--ids", "1 x");
    EXPECT_EXIT1(okv_cli_detokenize, &out, "detokenize", "--tokenizer", T, "--ids", "999999999");
    EXPECT_EXIT1(okv_cli_detokenize, &out, "detokenize", "--tokenizer", T, "--ids", "-1");
    EXPECT_EXIT1(okv_cli_detokenize, &out, "detokenize", "--tokenizer", T, "--jsonl", bad);        /* no "ids" */
    EXPECT_EXIT1(okv_cli_detokenize, &out, "detokenize", "--tokenizer", T, "--ids", "1", "--json");
    unlink(bad);
    /* a program that cannot be opened is reported by name */
    okv_cli_tok_source src = {NULL, "model.okv"};
    okv_tok *tok = NULL;
    okv_error err = {0};
    CHECK(okv_cli_open_tokenizer(&src, &tok, &err) == OKV_ERR_IO && tok == NULL);
    CHECK(strstr(err.message, "model.okv") != NULL);
}

int main(void) {
    test_jsonl_against_fixtures();
    test_single_text();
    test_errors();
    return okv_test_finish();
}
