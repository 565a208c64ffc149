/* test_chat_fixtures.c — every chat_cases.jsonl / chat_error_cases.jsonl in
 * the shared fixtures, rendered with its real template, must reproduce the
 * Jinja2 (HF apply_chat_template) output byte for byte, or fail with the
 * expected raise_exception message. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "offkv_chat.h"
#include "okv_common.h"
#include "okv_test.h"

#define FIX "../shared/fixtures/"

typedef struct suite {
    const char *dir;        /* holds chat_cases.jsonl */
    const char *config;     /* tokenizer_config.json giving the special tokens */
    const char *template_;  /* template.jinja, or NULL = the config's template */
} suite;

static const suite SUITES[] = {
    {FIX "tokenizers/llama3", FIX "tokenizers/llama3/tokenizer_config.json", NULL},
    {FIX "tokenizers/llama3_1", FIX "tokenizers/llama3_1/tokenizer_config.json", NULL},
    {FIX "tokenizers/qwen3", FIX "tokenizers/qwen3/tokenizer_config.json", NULL},
    {FIX "tokenizers/gemma3", FIX "tokenizers/gemma3/tokenizer_config.json", NULL},
    /* provenance.json: special tokens from ../tokenizers/llama3_1 and gemma3 */
    {FIX "chat_templates/llama3.1-8b-instruct", FIX "tokenizers/llama3_1/tokenizer_config.json",
     FIX "chat_templates/llama3.1-8b-instruct/template.jinja"},
    {FIX "chat_templates/llama3.2-3b-instruct", FIX "tokenizers/llama3_1/tokenizer_config.json",
     FIX "chat_templates/llama3.2-3b-instruct/template.jinja"},
    {FIX "chat_templates/gemma4-31b-it", FIX "tokenizers/gemma3/tokenizer_config.json",
     FIX "chat_templates/gemma4-31b-it/template.jinja"},
};

/* Renders one jsonl case; returns the status and fills *out / err. */
static okv_status render_case(const okv_chat_template *t, const okv_chat_config *cfg, const cJSON *c,
                              char **out, okv_error *err) {
    char *messages = cJSON_PrintUnformatted(cJSON_GetObjectItem(c, "messages"));
    const cJSON *tools = cJSON_GetObjectItem(c, "tools");
    char *tools_s = tools && !cJSON_IsNull(tools) ? cJSON_PrintUnformatted(tools) : NULL;
    const cJSON *kw = cJSON_GetObjectItem(c, "kwargs");
    char *kw_s = kw ? cJSON_PrintUnformatted(kw) : NULL;
    okv_chat_args args = {0};
    args.messages_json = messages;
    args.tools_json = tools_s;
    args.extra_vars_json = kw_s;
    args.add_generation_prompt = cJSON_IsTrue(cJSON_GetObjectItem(c, "add_generation_prompt"));
    args.bos_token = cfg->bos_token;
    args.eos_token = cfg->eos_token;
    args.unk_token = cfg->unk_token;
    args.pad_token = cfg->pad_token;
    okv_status st = okv_chat_render(t, &args, out, NULL, err);
    free(messages);
    free(tools_s);
    free(kw_s);
    return st;
}

static void run_file(const okv_chat_template *t, const okv_chat_config *cfg, const char *path,
                     bool errors, int *count) {
    FILE *fp = fopen(path, "r");
    if (!fp) return;
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, fp) > 0) {
        cJSON *c = cJSON_Parse(line);
        CHECKF(c != NULL, "%s: bad jsonl line", path);
        if (!c) continue;
        const char *name = okv_json_str(c, "name");
        char *out = NULL;
        okv_error err = {0};
        okv_status st = render_case(t, cfg, c, &out, &err);
        if (errors) {
            const char *want = okv_json_str(c, "error");
            CHECKF(st != OKV_OK, "%s %s: expected an error", path, name);
            CHECKF(st != OKV_OK && want && strstr(err.message, want), "%s %s: error '%s' lacks '%s'", path, name,
                   err.message, want ? want : "?");
        } else {
            const char *want = okv_json_str(c, "rendered");
            CHECKF(st == OKV_OK, "%s %s: %s", path, name, err.message);
            if (st == OKV_OK) {
                bool same = want && !strcmp(out, want);
                CHECKF(same, "%s %s: rendered differs\n--- got ---\n%s\n--- want ---\n%s", path, name, out, want);
            }
        }
        (*count)++;
        free(out);
        cJSON_Delete(c);
    }
    free(line);
    fclose(fp);
}

static int count_of(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle)) n++;
    return n;
}

/* A long conversation through Gemma-4's template, whose backward scans make
 * the work quadratic in the number of messages: it must render (within the
 * render memory limit), one turn per message plus the generation prompt. */
static void test_long_conversation(void) {
    char *src = NULL;
    okv_error err = {0};
    okv_chat_template *t = NULL;
    CHECK_OK(okv_read_file(FIX "chat_templates/gemma4-31b-it/template.jinja", &src, NULL, &err), &err);
    if (src) CHECK_OK(okv_chat_template_parse(src, &t, &err), &err);
    free(src);
    if (!t) return;
    enum { TURNS = 300 };
    size_t cap = TURNS * 96 + 16, n = 0;
    char *msgs = malloc(cap);
    n += (size_t)snprintf(msgs + n, cap - n, "[");
    for (int i = 0; i < TURNS; i++)
        n += (size_t)snprintf(msgs + n, cap - n, "%s{\"role\": \"user\", \"content\": \"q%d\"}, "
                              "{\"role\": \"assistant\", \"content\": \"a%d\"}", i ? ", " : "", i, i);
    snprintf(msgs + n, cap - n, "]");
    okv_chat_args args = {0};
    args.messages_json = msgs;
    args.add_generation_prompt = true;
    args.bos_token = "<bos>";
    char *out = NULL;
    CHECK_OK(okv_chat_render(t, &args, &out, NULL, &err), &err);
    if (out) {
        const char *head = "<bos><|turn>user\nq0<turn|>\n<|turn>model\na0<turn|>\n";
        CHECK(!strncmp(out, head, strlen(head)));
        CHECKF(count_of(out, "<|turn>user\n") == TURNS, "%d user turns", count_of(out, "<|turn>user\n"));
        CHECKF(count_of(out, "<|turn>model\n") == TURNS + 1, "%d model turns", count_of(out, "<|turn>model\n"));
        const char *tail = "<|turn>model\n<|channel>thought\n<channel|>";
        CHECK(strlen(out) > strlen(tail) && !strcmp(out + strlen(out) - strlen(tail), tail));
    }
    free(out);
    free(msgs);
    okv_chat_template_free(t);
}

int main(void) {
    test_long_conversation();
    int total = 0, total_err = 0;
    for (size_t i = 0; i < sizeof SUITES / sizeof *SUITES; i++) {
        const suite *s = &SUITES[i];
        char *cfg_text = NULL;
        okv_error err = {0};
        CHECK_OK(okv_read_file(s->config, &cfg_text, NULL, &err), &err);
        if (!cfg_text) continue;
        okv_chat_config cfg;
        okv_chat_template *t = NULL;
        CHECK_OK(okv_chat_template_from_config(cfg_text, &cfg, &t, &err), &err);
        free(cfg_text);
        if (!t) continue;
        if (s->template_) {
            char *src = NULL;
            okv_chat_template_free(t);
            t = NULL;
            CHECK_OK(okv_read_file(s->template_, &src, NULL, &err), &err);
            if (src) CHECK_OK(okv_chat_template_parse(src, &t, &err), &err);
            free(src);
        }
        if (t) {
            char *p = okv_path_join(s->dir, "chat_cases.jsonl");
            int n = 0;
            run_file(t, &cfg, p, false, &n);
            CHECKF(n > 0, "%s: no cases", p);
            total += n;
            free(p);
            p = okv_path_join(s->dir, "chat_error_cases.jsonl");
            run_file(t, &cfg, p, true, &total_err);
            free(p);
        }
        okv_chat_template_free(t);
        okv_chat_config_free(&cfg);
    }
    printf("rendered %d cases, %d error cases\n", total, total_err);
    CHECK(total >= 237);
    CHECK(total_err >= 4);
    return okv_test_finish();
}
