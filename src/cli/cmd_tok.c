/* cmd_tok.c — `offkv tokenize` and `offkv detokenize`: the tokenizer from
 * the command line, for one text or a JSONL batch.
 *
 *   offkv tokenize   --tokenizer tokenizer.json --text "..." [--json] [--no-special] [--out FILE]
 *   offkv tokenize   --tokenizer tokenizer.json --jsonl IN.jsonl [--no-special] [--out FILE]
 *   offkv detokenize --tokenizer tokenizer.json --ids "9906 1917" [--skip-special] [--out FILE]
 *   offkv detokenize --tokenizer tokenizer.json --jsonl IN.jsonl [--skip-special] [--out FILE]
 *   (a program file in place of --tokenizer uses the tokenizer bundled in it)
 *
 * tokenize --text prints ids one per line (a JSON array with --json);
 * --jsonl reads {"text": ..., "add_special_tokens": bool?} lines and writes
 * {"ids": [...]} lines in order. detokenize --ids prints the text and a
 * newline; --jsonl reads {"ids": [...], "skip_special_tokens": bool?} lines
 * and writes {"text": ...} lines. Per-line flags override the command-line
 * ones. Any error (bad option, bad line, id out of range) stops with a
 * message on stderr and exit code 1. Uses only the public tokenizer API. */
#include "cmd_tok.h"
#include "offkv.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>

typedef struct tok_cli_opts {
    okv_cli_tok_source src;
    const char *text, *ids, *jsonl, *out;
    bool json, no_special, skip_special;
} tok_cli_opts;

static int tok_cli_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int tok_cli_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "offkv %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return 1;
}

static int tok_cli_usage(const char *cmd, const char *msg, const char *arg) {
    tok_cli_error(cmd, "%s%s", msg, arg ? arg : "");
    fprintf(stderr,
            "usage: offkv tokenize   (PROGRAM.okv | --tokenizer tokenizer.json) (--text TEXT [--json] | --jsonl IN.jsonl) [--no-special] [--out FILE]\n"
            "       offkv detokenize (PROGRAM.okv | --tokenizer tokenizer.json) (--ids \"ID ID ...\" | --jsonl IN.jsonl) [--skip-special] [--out FILE]\n");
    return 1;
}

/* Parses the options both commands share; returns 0 or an exit code. */
static int tok_cli_parse(int argc, char **argv, tok_cli_opts *o) {
    const char *cmd = argv[0];
    memset(o, 0, sizeof *o);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char **val = NULL;
        if (!strcmp(a, "--tokenizer")) val = &o->src.tokenizer_json;
        else if (!strcmp(a, "--text")) val = &o->text;
        else if (!strcmp(a, "--ids")) val = &o->ids;
        else if (!strcmp(a, "--jsonl")) val = &o->jsonl;
        else if (!strcmp(a, "--out")) val = &o->out;
        else if (!strcmp(a, "--json")) o->json = true;
        else if (!strcmp(a, "--no-special")) o->no_special = true;
        else if (!strcmp(a, "--skip-special")) o->skip_special = true;
        else if (a[0] == '-' && a[1]) return tok_cli_usage(cmd, "unknown option ", a);
        else if (!o->src.program) o->src.program = a;
        else return tok_cli_usage(cmd, "unexpected argument ", a);
        if (val) {
            if (i + 1 >= argc) return tok_cli_usage(cmd, "missing value for ", a);
            *val = argv[++i];
        }
    }
    if (!o->src.tokenizer_json && !o->src.program) return tok_cli_usage(cmd, "give a program file or --tokenizer tokenizer.json", NULL);
    return 0;
}

okv_status okv_cli_tokenizer_from_program(const okv_program *p, const char *name, okv_tok **out, okv_error *err) {
    size_t len;
    const char *json = okv_program_blob(p, "tokenizer.json", &len);
    if (!json) {
        err->status = OKV_ERR_NOT_FOUND;
        snprintf(err->message, sizeof err->message,
                 "%s has no bundled tokenizer (its checkpoint had no tokenizer.json): pass --tokenizer tokenizer.json", name);
        return err->status;
    }
    return okv_tok_load_json(json, len, out, err);
}

okv_status okv_cli_open_tokenizer(const okv_cli_tok_source *src, okv_tok **out, okv_error *err) {
    *out = NULL;
    if (src->tokenizer_json) return okv_tok_load_file(src->tokenizer_json, out, err);
    if (!src->program) {
        err->status = OKV_ERR_INVALID;
        snprintf(err->message, sizeof err->message, "give a program file or --tokenizer tokenizer.json");
        return err->status;
    }
    okv_program *p;
    okv_program_options po;
    okv_program_options_default(&po);
    po.weights = OKV_WEIGHTS_MAPPED; /* only the tokenizer blob is read */
    okv_status st = okv_program_open_with(src->program, &po, &p, err);
    if (st) return st;
    st = okv_cli_tokenizer_from_program(p, src->program, out, err);
    okv_program_free(p);
    return st;
}

/* Writes s[0..n) as a JSON string (UTF-8 kept, controls escaped; NUL too). */
static void write_json_string(FILE *f, const char *s, size_t n) {
    fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"') fputs("\\\"", f);
        else if (c == '\\') fputs("\\\\", f);
        else if (c == '\n') fputs("\\n", f);
        else if (c == '\r') fputs("\\r", f);
        else if (c == '\t') fputs("\\t", f);
        else if (c < 0x20 || c == 0x7F) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

static void write_ids_json(FILE *f, const int32_t *ids, size_t n) {
    fputc('[', f);
    for (size_t i = 0; i < n; i++) fprintf(f, i ? ",%d" : "%d", ids[i]);
    fputc(']', f);
}

static FILE *open_out(const tok_cli_opts *o) {
    return o->out ? fopen(o->out, "wb") : stdout;
}

static int close_out(const tok_cli_opts *o, FILE *f, int rc) {
    if (f && f != stdout) {
        if (fclose(f) != 0 && rc == 0) rc = tok_cli_error("tokenize", "%s: write failed", o->out);
    } else if (f) fflush(f);
    return rc;
}

/* Calls fn(obj, lineno) for each non-blank line of path; stops at the first
 * non-zero result. */
static int for_each_jsonl(const char *cmd, const char *path, int (*fn)(void *, const cJSON *, const char *, long),
                          void *ctx) {
    FILE *in = fopen(path, "rb");
    if (!in) return tok_cli_error(cmd, "%s: cannot open", path);
    char *line = NULL;
    size_t cap = 0;
    long lineno = 0;
    int rc = 0;
    ssize_t len;
    while (rc == 0 && (len = getline(&line, &cap, in)) >= 0) {
        lineno++;
        size_t n = (size_t)len;
        while (n && (line[n - 1] == '\n' || line[n - 1] == '\r')) n--;
        if (n == 0) continue;
        line[n] = 0;
        /* cJSON ends strings at an escaped NUL; refuse rather than cut */
        if (strstr(line, "\\u0000")) {
            rc = tok_cli_error(cmd, "%s:%ld: strings containing \\u0000 are not supported", path, lineno);
            break;
        }
        cJSON *j = cJSON_ParseWithLength(line, n);
        if (!cJSON_IsObject(j)) rc = tok_cli_error(cmd, "%s:%ld: not a JSON object", path, lineno);
        else rc = fn(ctx, j, path, lineno);
        cJSON_Delete(j);
    }
    free(line);
    fclose(in);
    return rc;
}

/* What each JSONL line of tokenize and detokenize is handled with. */
typedef struct jsonl_ctx {
    const okv_tok *tok;
    const tok_cli_opts *o;
    FILE *out;
} jsonl_ctx;

/* A line's optional boolean field: *out = the field, or dflt when it is
 * absent or null; false when it is something else. */
static bool line_flag(const cJSON *j, const char *key, bool dflt, bool *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (v && !cJSON_IsBool(v) && !cJSON_IsNull(v)) return false;
    *out = cJSON_IsBool(v) ? cJSON_IsTrue(v) : dflt;
    return true;
}

/* ---- tokenize ------------------------------------------------------------- */

static int tokenize_line(void *vctx, const cJSON *j, const char *path, long lineno) {
    jsonl_ctx *c = vctx;
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(j, "text");
    bool add_special;
    if (!cJSON_IsString(text)) return tok_cli_error("tokenize", "%s:%ld: field \"text\" must be a string", path, lineno);
    if (!line_flag(j, "add_special_tokens", !c->o->no_special, &add_special))
        return tok_cli_error("tokenize", "%s:%ld: field \"add_special_tokens\" must be true or false", path, lineno);
    int32_t *ids;
    size_t n;
    okv_error err = {0};
    if (okv_tok_encode(c->tok, text->valuestring, strlen(text->valuestring), add_special, &ids, &n, &err))
        return tok_cli_error("tokenize", "%s:%ld: %s", path, lineno, err.message);
    fputs("{\"ids\":", c->out);
    write_ids_json(c->out, ids, n);
    fputs("}\n", c->out);
    free(ids);
    return 0;
}

/* The tokenizer the options name and the output stream, or an exit code. */
static int open_tokenizer_and_out(const char *cmd, const tok_cli_opts *o, okv_tok **tok, FILE **out) {
    okv_error err = {0};
    if (okv_cli_open_tokenizer(&o->src, tok, &err)) return tok_cli_error(cmd, "%s", err.message);
    *out = open_out(o);
    if (!*out) {
        okv_tok_free(*tok);
        return tok_cli_error(cmd, "%s: cannot open for writing", o->out);
    }
    return 0;
}

int okv_cli_tokenize(int argc, char **argv) {
    tok_cli_opts o;
    int rc = tok_cli_parse(argc, argv, &o);
    if (rc) return rc;
    if (!o.text == !o.jsonl) return tok_cli_usage(argv[0], "give exactly one of --text and --jsonl", NULL);
    if (o.ids || o.skip_special) return tok_cli_usage(argv[0], "--ids/--skip-special belong to detokenize", NULL);
    okv_tok *tok;
    FILE *out;
    okv_error err = {0};
    if ((rc = open_tokenizer_and_out(argv[0], &o, &tok, &out))) return rc;
    if (o.jsonl) {
        jsonl_ctx c = {tok, &o, out};
        rc = for_each_jsonl(argv[0], o.jsonl, tokenize_line, &c);
    } else {
        int32_t *ids;
        size_t n;
        if (okv_tok_encode(tok, o.text, strlen(o.text), !o.no_special, &ids, &n, &err)) {
            rc = tok_cli_error(argv[0], "%s", err.message);
        } else {
            if (o.json) {
                write_ids_json(out, ids, n);
                fputc('\n', out);
            } else {
                for (size_t i = 0; i < n; i++) fprintf(out, "%d\n", ids[i]);
            }
            free(ids);
        }
    }
    rc = close_out(&o, out, rc);
    okv_tok_free(tok);
    return rc;
}

/* ---- detokenize ----------------------------------------------------------- */

/* Checks every id has a token (decode would silently skip it). */
static int check_ids(const okv_tok *tok, const int32_t *ids, size_t n, const char *where) {
    size_t vs = okv_tok_vocab_size(tok);
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || (size_t)ids[i] >= vs || !okv_tok_id_to_token(tok, ids[i]))
            return tok_cli_error("detokenize", "%sid %d has no token (vocab size %zu)", where, ids[i], vs);
    return 0;
}

/* Parses "9906 1917", "9906,1917" or "[9906, 1917]". */
static int parse_id_list(const char *s, int32_t **ids, size_t *n) {
    size_t cap = 16;
    *n = 0;
    *ids = malloc(cap * sizeof **ids);
    if (!*ids) return tok_cli_error("detokenize", "out of memory");
    const char *p = s;
    for (;;) {
        while (*p == ' ' || *p == ',' || *p == '\t' || *p == '\n' || *p == '[' || *p == ']') p++;
        if (!*p) break;
        char *end;
        long long v = strtoll(p, &end, 10);
        if (end == p || v < INT32_MIN || v > INT32_MAX) {
            free(*ids);
            *ids = NULL;
            return tok_cli_error("detokenize", "--ids: \"%.20s\" is not an integer", p);
        }
        if (*n == cap) {
            int32_t *g = realloc(*ids, 2 * cap * sizeof *g);
            if (!g) { free(*ids); *ids = NULL; return tok_cli_error("detokenize", "out of memory"); }
            *ids = g;
            cap *= 2;
        }
        (*ids)[(*n)++] = (int32_t)v;
        p = end;
    }
    return 0;
}

static int detokenize_line(void *vctx, const cJSON *j, const char *path, long lineno) {
    jsonl_ctx *c = vctx;
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(j, "ids");
    bool skip_special;
    char where[512];
    snprintf(where, sizeof where, "%s:%ld: ", path, lineno);
    if (!cJSON_IsArray(arr)) return tok_cli_error("detokenize", "%sfield \"ids\" must be an array", where);
    if (!line_flag(j, "skip_special_tokens", c->o->skip_special, &skip_special))
        return tok_cli_error("detokenize", "%sfield \"skip_special_tokens\" must be true or false", where);
    size_t n = (size_t)cJSON_GetArraySize(arr), k = 0;
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids) return tok_cli_error("detokenize", "out of memory");
    const cJSON *it;
    cJSON_ArrayForEach(it, arr) {
        if (!cJSON_IsNumber(it) || it->valuedouble != (double)(int32_t)it->valuedouble) {
            free(ids);
            return tok_cli_error("detokenize", "%sids[%zu] is not an integer", where, k);
        }
        ids[k++] = (int32_t)it->valuedouble;
    }
    int rc = check_ids(c->tok, ids, n, where);
    char *text = NULL;
    size_t len = 0;
    okv_error err = {0};
    if (!rc && okv_tok_decode(c->tok, ids, n, skip_special, &text, &len, &err))
        rc = tok_cli_error("detokenize", "%s%s", where, err.message);
    if (!rc) {
        fputs("{\"text\":", c->out);
        write_json_string(c->out, text, len);
        fputs("}\n", c->out);
    }
    free(text);
    free(ids);
    return rc;
}

int okv_cli_detokenize(int argc, char **argv) {
    tok_cli_opts o;
    int rc = tok_cli_parse(argc, argv, &o);
    if (rc) return rc;
    if (!o.ids == !o.jsonl) return tok_cli_usage(argv[0], "give exactly one of --ids and --jsonl", NULL);
    if (o.text || o.json || o.no_special)
        return tok_cli_usage(argv[0], "--text/--json/--no-special belong to tokenize", NULL);
    okv_tok *tok;
    FILE *out;
    okv_error err = {0};
    if ((rc = open_tokenizer_and_out(argv[0], &o, &tok, &out))) return rc;
    if (o.jsonl) {
        jsonl_ctx c = {tok, &o, out};
        rc = for_each_jsonl(argv[0], o.jsonl, detokenize_line, &c);
    } else {
        int32_t *ids = NULL;
        size_t n = 0;
        char *text = NULL;
        size_t len = 0;
        rc = parse_id_list(o.ids, &ids, &n);
        if (!rc) rc = check_ids(tok, ids, n, "");
        if (!rc && okv_tok_decode(tok, ids, n, o.skip_special, &text, &len, &err))
            rc = tok_cli_error(argv[0], "%s", err.message);
        if (!rc) {
            fwrite(text, 1, len, out);
            fputc('\n', out);
        }
        free(text);
        free(ids);
    }
    rc = close_out(&o, out, rc);
    okv_tok_free(tok);
    return rc;
}
