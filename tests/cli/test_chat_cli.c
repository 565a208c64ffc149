/* test_chat_cli.c — `offkv chat-render` (src/cli/cmd_chat.c, called through
 * the okv_cli library): every output line must match the fixture's
 * `rendered` / `error`, --template must override the config's template
 * while keeping its tokens, and bad options must be usage errors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cjson/cJSON.h>

#include "cmd_chat.h"
#include "okv_test.h"

#define FIX "../shared/fixtures/"

/* Runs chat-render on `jsonl` and compares line by line with `field`. */
static void run_and_compare(const char *config, const char *tmpl, const char *jsonl, const char *field) {
    char out_path[] = "/tmp/okv_chat_cli_XXXXXX";
    int fd = mkstemp(out_path);
    CHECK(fd >= 0);
    if (fd < 0) return;
    close(fd);
    char *argv[12];
    int argc = 0;
    argv[argc++] = "chat-render";
    argv[argc++] = "--tokenizer-config";
    argv[argc++] = (char *)config;
    if (tmpl) { argv[argc++] = "--template"; argv[argc++] = (char *)tmpl; }
    argv[argc++] = "--jsonl";
    argv[argc++] = (char *)jsonl;
    argv[argc++] = "--out";
    argv[argc++] = out_path;
    CHECK(okv_cli_chat_render(argc, argv) == 0);
    FILE *in = fopen(jsonl, "r"), *out = fopen(out_path, "r");
    CHECK(in && out);
    char *a = NULL, *b = NULL;
    size_t ca = 0, cb = 0;
    int n = 0;
    while (in && out && getline(&a, &ca, in) > 0) {
        CHECKF(getline(&b, &cb, out) > 0, "%s: output has fewer lines than input", jsonl);
        cJSON *want = cJSON_Parse(a), *got = cJSON_Parse(b);
        const char *w = cJSON_GetStringValue(cJSON_GetObjectItem(want, field));
        const char *g = cJSON_GetStringValue(cJSON_GetObjectItem(got, field));
        if (!strcmp(field, "rendered")) CHECKF(w && g && !strcmp(w, g), "%s line %d differs", jsonl, n + 1);
        else CHECKF(w && g && strstr(g, w), "%s line %d: error [%s] lacks [%s]", jsonl, n + 1, g ? g : "", w ? w : "");
        cJSON_Delete(want);
        cJSON_Delete(got);
        n++;
    }
    if (out) CHECKF(getline(&b, &cb, out) <= 0, "%s: output has extra lines", jsonl);
    CHECK(n > 0);
    free(a);
    free(b);
    if (in) fclose(in);
    if (out) fclose(out);
    unlink(out_path);
}

/* Inputs are passed through as written: 1.0 stays a float, as json.loads
 * keeps it (re-printing with cJSON would turn it into 1). */
static void test_raw_json_passthrough(void) {
    char dir[] = "/tmp/okv_chat_cli_dir_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char cfg[256], in[256], out[256];
    snprintf(cfg, sizeof cfg, "%s/cfg.json", dir);
    snprintf(in, sizeof in, "%s/in.jsonl", dir);
    snprintf(out, sizeof out, "%s/out.jsonl", dir);
    FILE *f = fopen(cfg, "w");
    fputs("{\"chat_template\": \"{{ x }}|{{ messages[0].n }}|{{ tools[0] | tojson }}|{{ add_generation_prompt }}\"}", f);
    fclose(f);
    f = fopen(in, "w");
    fputs("{\"kwargs\": {\"x\": 1.0}, \"tools\": [{\"t\": [2.50, 1E2]}], \"messages\": [{\"n\": -0.0}]}\n\n", f);
    fputs("{\"messages\": \"nope\"}\n", f);
    fclose(f);
    char *argv[] = {"chat-render", "--tokenizer-config", cfg, "--jsonl", in, "--out", out};
    CHECK(okv_cli_chat_render(7, argv) == 0);
    f = fopen(out, "r");
    char line[512] = {0};
    CHECK(f && fgets(line, sizeof line, f));
    CHECKF(!strcmp(line, "{\"rendered\":\"1.0|-0.0|{\\\"t\\\": [2.5, 100.0]}|False\"}\n"), "got %s", line);
    CHECK(f && fgets(line, sizeof line, f) && strstr(line, "\"error\"") && strstr(line, "line 3"));
    if (f) fclose(f);
    unlink(cfg);
    unlink(in);
    unlink(out);
    rmdir(dir);
}

int main(void) {
    test_raw_json_passthrough();
    run_and_compare(FIX "tokenizers/qwen3/tokenizer_config.json", NULL, FIX "tokenizers/qwen3/chat_cases.jsonl", "rendered");
    run_and_compare(FIX "tokenizers/gemma3/tokenizer_config.json", NULL, FIX "tokenizers/gemma3/chat_error_cases.jsonl", "error");
    run_and_compare(FIX "tokenizers/llama3_1/tokenizer_config.json", FIX "chat_templates/llama3.2-3b-instruct/template.jinja",
                    FIX "chat_templates/llama3.2-3b-instruct/chat_cases.jsonl", "rendered");
    char *bad1[] = {"chat-render", "--jsonl", "x.jsonl"};
    CHECK(okv_cli_chat_render(3, bad1) == 2);
    char *bad2[] = {"chat-render", "--tokenizer-config"};
    CHECK(okv_cli_chat_render(2, bad2) == 2);
    char *bad3[] = {"chat-render", "--frobnicate", "1"};
    CHECK(okv_cli_chat_render(3, bad3) == 2);
    char *missing[] = {"chat-render", "--tokenizer-config", "/nonexistent/tokenizer_config.json", "--jsonl", "x"};
    CHECK(okv_cli_chat_render(5, missing) == 1);
    return okv_test_finish();
}
