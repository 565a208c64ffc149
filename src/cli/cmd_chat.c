/* cmd_chat.c — `offkv chat-render`: apply a model's chat template to
 * conversations, one per JSONL line, the way HF apply_chat_template would.
 *
 *   offkv chat-render --tokenizer-config tokenizer_config.json [--template FILE.jinja]
 *                     --jsonl IN.jsonl [--out OUT.jsonl] [--now UNIX_SECONDS]
 *
 * Input lines look like chat_cases.jsonl: {"messages": [...], "tools": [...]?,
 * "add_generation_prompt": bool?, "kwargs": {...}?}. Each produces one output
 * line, {"rendered": "..."} or {"error": "..."}. --template replaces the
 * config's template (the config still supplies bos/eos/unk/pad tokens);
 * --now fixes strftime_now's clock. Uses only the public chat API. */
#include "cmd_chat.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>

#include "offkv_chat.h"

static int chat_usage(const char *msg, const char *arg) {
    fprintf(stderr, "offkv chat-render: ");
    fprintf(stderr, msg, arg ? arg : "");
    fprintf(stderr, "\nusage: offkv chat-render --tokenizer-config tokenizer_config.json [--template FILE.jinja]\n"
                    "                         --jsonl IN.jsonl [--out OUT.jsonl] [--now UNIX_SECONDS]\n");
    return 2;
}

/* Reads a whole file; NULL (with errno) on failure. */
static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (!buf) break;
        if (n + 1 >= cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) { free(buf); buf = NULL; break; }
            buf = nb;
            cap *= 2;
        }
        size_t k = fread(buf + n, 1, cap - n - 1, f);
        n += k;
        if (k == 0) break;
    }
    fclose(f);
    if (buf) buf[n] = 0;
    return buf;
}

/* Skips one JSON string starting at its opening quote; returns the byte after
 * its closing quote. The line was already validated by cJSON. */
static const char *skip_string(const char *p) {
    for (p++; *p && *p != '"'; p++)
        if (*p == '\\' && p[1]) p++;
    return *p ? p + 1 : p;
}

/* Skips one JSON value (any type) starting at p. */
static const char *skip_value(const char *p) {
    if (*p == '"') return skip_string(p);
    if (*p != '[' && *p != '{') {
        while (*p && *p != ',' && *p != '}' && *p != ']' && *p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') p++;
        return p;
    }
    int depth = 0;
    for (; *p; p++) {
        if (*p == '"') { p = skip_string(p) - 1; continue; }
        if (*p == '[' || *p == '{') depth++;
        else if ((*p == ']' || *p == '}') && --depth == 0) return p + 1;
    }
    return p;
}

static const char *skip_ws(const char *p) {
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    return p;
}

/* The raw text of top-level field `key` of the JSON object `line` (heap copy),
 * or NULL when absent or null. Passing the text through unchanged keeps what
 * re-printing with cJSON would lose (1.0 vs 1, big integers). */
static char *field_text(const char *line, const char *key) {
    const char *p = skip_ws(line);
    if (*p != '{') return NULL;
    p = skip_ws(p + 1);
    size_t klen = strlen(key);
    while (*p == '"') {
        const char *kend = skip_string(p);
        bool match = (size_t)(kend - p) == klen + 2 && !memcmp(p + 1, key, klen);
        p = skip_ws(kend);
        if (*p != ':') return NULL;
        p = skip_ws(p + 1);
        const char *vend = skip_value(p);
        if (match) {
            if (vend - p == 4 && !memcmp(p, "null", 4)) return NULL;
            size_t n = (size_t)(vend - p);
            char *v = malloc(n + 1);
            if (v) { memcpy(v, p, n); v[n] = 0; }
            return v;
        }
        p = skip_ws(vend);
        if (*p != ',') return NULL;
        p = skip_ws(p + 1);
    }
    return NULL;
}

/* Renders one input line into an output object. */
static cJSON *render_line(const okv_chat_template *t, const okv_chat_config *cfg, const char *line,
                          long long now, long lineno) {
    cJSON *res = cJSON_CreateObject();
    char msg[1200];
    cJSON *in = cJSON_Parse(line);
    if (!in || !cJSON_IsObject(in)) {
        snprintf(msg, sizeof msg, "line %ld: not a JSON object", lineno);
        cJSON_AddStringToObject(res, "error", msg);
        cJSON_Delete(in);
        return res;
    }
    const cJSON *messages = cJSON_GetObjectItemCaseSensitive(in, "messages");
    if (!cJSON_IsArray(messages)) {
        snprintf(msg, sizeof msg, "line %ld: field 'messages' must be an array", lineno);
        cJSON_AddStringToObject(res, "error", msg);
        cJSON_Delete(in);
        return res;
    }
    char *messages_s = field_text(line, "messages");
    char *tools_s = field_text(line, "tools");
    char *kwargs_s = field_text(line, "kwargs");
    okv_chat_args args = {0};
    args.messages_json = messages_s;
    args.tools_json = tools_s;
    args.extra_vars_json = kwargs_s;
    args.add_generation_prompt = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(in, "add_generation_prompt"));
    args.bos_token = cfg->bos_token;
    args.eos_token = cfg->eos_token;
    args.unk_token = cfg->unk_token;
    args.pad_token = cfg->pad_token;
    args.now_unix = now;
    char *out = NULL;
    okv_error err = {0};
    if (okv_chat_render(t, &args, &out, NULL, &err) == OKV_OK) {
        cJSON_AddStringToObject(res, "rendered", out);
    } else {
        snprintf(msg, sizeof msg, "line %ld: %s", lineno, err.message);
        cJSON_AddStringToObject(res, "error", msg);
    }
    free(out);
    free(messages_s);
    free(tools_s);
    free(kwargs_s);
    cJSON_Delete(in);
    return res;
}

static bool blank(const char *s) {
    for (; *s; s++)
        if (*s != ' ' && *s != '\t' && *s != '\n' && *s != '\r') return false;
    return true;
}

int okv_cli_chat_render(int argc, char **argv) {
    const char *config_path = NULL, *template_path = NULL, *jsonl_path = NULL, *out_path = NULL;
    long long now = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--tokenizer-config") && strcmp(a, "--template") && strcmp(a, "--jsonl") &&
            strcmp(a, "--out") && strcmp(a, "--now"))
            return chat_usage("unknown option '%s'", a);
        if (i + 1 >= argc) return chat_usage("%s needs a value", a);
        const char *v = argv[++i];
        if (!strcmp(a, "--tokenizer-config")) config_path = v;
        else if (!strcmp(a, "--template")) template_path = v;
        else if (!strcmp(a, "--jsonl")) jsonl_path = v;
        else if (!strcmp(a, "--out")) out_path = v;
        else {
            char *end;
            errno = 0;
            now = strtoll(v, &end, 10);
            if (errno || end == v || *end || now <= 0) return chat_usage("--now: '%s' must be seconds since 1970 (> 0)", v);
        }
    }
    if (!config_path) return chat_usage("--tokenizer-config is required%s", NULL);
    if (!jsonl_path) return chat_usage("--jsonl is required%s", NULL);

    okv_error err = {0};
    char *cfg_text = slurp(config_path);
    if (!cfg_text) {
        fprintf(stderr, "offkv: error: cannot read %s: %s\n", config_path, strerror(errno));
        return 1;
    }
    okv_chat_config cfg;
    okv_chat_template *t = NULL;
    okv_status st = template_path ? okv_chat_config_parse(cfg_text, &cfg, &err)
                                  : okv_chat_template_from_config(cfg_text, &cfg, &t, &err);
    free(cfg_text);
    if (st != OKV_OK && !(template_path && st == OKV_ERR_NOT_FOUND)) {
        fprintf(stderr, "offkv: error: %s: %s\n", config_path, err.message);
        return 1;
    }
    if (template_path) {
        char *src = slurp(template_path);
        if (!src) {
            fprintf(stderr, "offkv: error: cannot read %s: %s\n", template_path, strerror(errno));
            okv_chat_config_free(&cfg);
            return 1;
        }
        st = okv_chat_template_parse(src, &t, &err);
        free(src);
        if (st) {
            fprintf(stderr, "offkv: error: %s: %s\n", template_path, err.message);
            okv_chat_config_free(&cfg);
            return 1;
        }
    }

    int rc = 0;
    FILE *in = fopen(jsonl_path, "r");
    FILE *out = out_path ? fopen(out_path, "w") : stdout;
    if (!in || !out) {
        fprintf(stderr, "offkv: error: cannot open %s: %s\n", !in ? jsonl_path : out_path, strerror(errno));
        rc = 1;
    } else {
        char *line = NULL;
        size_t cap = 0;
        long lineno = 0;
        while (getline(&line, &cap, in) > 0) {
            lineno++;
            if (blank(line)) continue;
            cJSON *res = render_line(t, &cfg, line, now, lineno);
            char *s = cJSON_PrintUnformatted(res);
            if (s) fprintf(out, "%s\n", s);
            else rc = 1;
            free(s);
            cJSON_Delete(res);
        }
        free(line);
        if (ferror(in) || fflush(out)) {
            fprintf(stderr, "offkv: error: i/o error on %s\n", ferror(in) ? jsonl_path : (out_path ? out_path : "stdout"));
            rc = 1;
        }
    }
    if (in) fclose(in);
    if (out && out != stdout) fclose(out);
    okv_chat_template_free(t);
    okv_chat_config_free(&cfg);
    return rc;
}
