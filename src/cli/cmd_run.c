/* cmd_run.c — `offkv run`: text in, streamed text out.
 *
 *   offkv run PROGRAM.okv --prompt TEXT [--system TEXT] [--chat auto|none] [--chat-arg KEY=JSON]...
 *       [--temperature F] [--top-k N] [--top-p F] [--min-p F] [--repetition-penalty F] [--seed N]
 *       [--greedy] [--stop STRING]... [--max-new-tokens N] [--tokenizer FILE] [cache options]
 *       [--json | --json-schema FILE]   constrained output: any JSON object, or a value of the schema
 *   offkv run PROGRAM.okv --interactive [--drop-old-turns] [...]   a conversation on stdin, one turn per
 *       line; each turn reuses the cache up to the longest prefix it already holds (/reset, /save FILE,
 *       /load FILE, /quit). A turn
 *       that does not fit the context is refused and the session goes on (or, with --drop-old-turns, the
 *       oldest turns are dropped until it fits)
 *
 * Sampling defaults, the EOS set and the context limit come from the
 * library (okv_gen_defaults_get: the bundled generation_config.json as HF's
 * generate() would use it); any flag overrides them. The reply
 * streams to stdout and ends with a newline (added only when the text did
 * not end with one); the stats line then goes to stderr, after stdout is
 * flushed, so the two never share a line on a terminal. --verbose first
 * prints the model's name and size and the cache layout, and last the
 * kernel variants the router ran (okv_runner_kernels_ran). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cli.h"
#include "offkv_gen.h"

#define MAX_STOPS 16
#define MAX_CHAT_ARGS 16

typedef struct run_args {
    const char *program, *prompt, *system, *tokenizer;
    okv_chat_mode chat;
    const char *chat_args[MAX_CHAT_ARGS];
    int n_chat_args;
    const char *stops[MAX_STOPS];
    int n_stops;
    int max_new;
    /* sampling overrides: NaN / -1 = not given */
    double temperature, top_p, min_p, penalty;
    long long top_k, seed;
    bool greedy, interactive, verbose, drop_old_turns;
    bool json;                   /* --json: the reply is a JSON object */
    const char *json_schema;     /* --json-schema FILE: the reply is a value of this schema */
    okv_cli_run_opts run;
} run_args;

/* A finite number in [lo, hi] (NaN and inf are refused). */
static bool parse_double(const char *s, double lo, double hi, double *out) {
    char *end;
    *out = strtod(s, &end);
    return end != s && !*end && isfinite(*out) && *out >= lo && *out <= hi;
}

static int parse_run_args(int argc, char **argv, run_args *a) {
    memset(a, 0, sizeof *a);
    a->max_new = 256;
    a->temperature = a->top_p = a->min_p = a->penalty = -1;
    a->top_k = a->seed = -1;
    okv_cli_run_opts_init(&a->run);
    for (int i = 1; i < argc; i++) {
        int r = okv_cli_run_opt(argc, argv, &i, &a->run);
        if (r < 0) return 2;
        if (r) continue;
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool ok = true;
        if (!strcmp(o, "--greedy")) { a->greedy = true; continue; }
        if (!strcmp(o, "--interactive") || !strcmp(o, "-i")) { a->interactive = true; continue; }
        if (!strcmp(o, "--verbose") || !strcmp(o, "-v")) { a->verbose = true; continue; }
        if (!strcmp(o, "--drop-old-turns")) { a->drop_old_turns = true; continue; }
        if (!strcmp(o, "--json")) { a->json = true; continue; }
        if (o[0] != '-') { if (a->program) return okv_cli_usage_error("run: unexpected argument '%s'", o); a->program = o; continue; }
        if (!v) return okv_cli_usage_error("%s needs a value", o);
        i++;
        if (!strcmp(o, "--prompt")) a->prompt = v;
        else if (!strcmp(o, "--system")) a->system = v;
        else if (!strcmp(o, "--json-schema")) a->json_schema = v;
        else if (!strcmp(o, "--tokenizer")) a->tokenizer = v;
        else if (!strcmp(o, "--chat")) {
            if (!strcmp(v, "auto")) a->chat = OKV_CHAT_AUTO;
            else if (!strcmp(v, "none")) a->chat = OKV_CHAT_NONE;
            else if (!strcmp(v, "template")) a->chat = OKV_CHAT_TEMPLATE;
            else return okv_cli_usage_error("--chat: '%s' is not auto, none or template", v);
        } else if (!strcmp(o, "--chat-arg")) {
            if (a->n_chat_args == MAX_CHAT_ARGS || !strchr(v, '=')) return okv_cli_usage_error("--chat-arg: '%s' must be KEY=JSON", v);
            a->chat_args[a->n_chat_args++] = v;
        } else if (!strcmp(o, "--stop")) {
            if (a->n_stops == MAX_STOPS || !*v) return okv_cli_usage_error("--stop: '%s' (non-empty, at most 16)", v);
            a->stops[a->n_stops++] = v;
        } else if (!strcmp(o, "--max-new-tokens")) ok = okv_cli_parse_int(v, 0, 1 << 30, &a->max_new);
        else if (!strcmp(o, "--temperature")) {
            if (!parse_double(v, 0, 1e6, &a->temperature)) return okv_cli_usage_error("--temperature: '%s' must be a finite number >= 0", v);
        } else if (!strcmp(o, "--top-p")) {
            if (!parse_double(v, 0, 1, &a->top_p)) return okv_cli_usage_error("--top-p: '%s' must be a number in [0, 1]", v);
        } else if (!strcmp(o, "--min-p")) {
            if (!parse_double(v, 0, 1, &a->min_p)) return okv_cli_usage_error("--min-p: '%s' must be a number in [0, 1]", v);
        } else if (!strcmp(o, "--repetition-penalty")) {
            if (!parse_double(v, 1e-6, 1e6, &a->penalty)) return okv_cli_usage_error("--repetition-penalty: '%s' must be a finite number > 0", v);
        } else if (!strcmp(o, "--top-k")) {
            int k;
            if (!okv_cli_parse_int(v, 0, 1 << 30, &k)) return okv_cli_usage_error("--top-k: '%s' must be an integer >= 0", v);
            a->top_k = k;
        } else if (!strcmp(o, "--seed")) { char *end; a->seed = strtoll(v, &end, 10); ok = end != v && !*end && a->seed >= 0; }
        else return okv_cli_usage_error("run: unknown option '%s'", o);
        if (!ok) return okv_cli_usage_error("invalid value for option: '%s'", v);
    }
    if (!a->program || (!a->prompt && !a->interactive))
        return okv_cli_usage_error("usage: offkv run PROGRAM.okv --prompt TEXT | --interactive [options]%s", "");
    return 0;
}

/* {"k1": v1, ...} from KEY=JSON pairs; a value that is not JSON is taken as a string. */
static char *chat_vars_json(const run_args *a) {
    if (!a->n_chat_args) return NULL;
    cJSON *obj = cJSON_CreateObject();
    for (int i = 0; i < a->n_chat_args; i++) {
        const char *eq = strchr(a->chat_args[i], '=');
        char *key = strndup(a->chat_args[i], (size_t)(eq - a->chat_args[i]));
        cJSON *val = cJSON_Parse(eq + 1);
        cJSON_AddItemToObject(obj, key, val ? val : cJSON_CreateString(eq + 1));
        free(key);
    }
    char *s = cJSON_PrintUnformatted(obj);
    cJSON_Delete(obj);
    return s;
}

/* The command line over the program's defaults. */
static okv_sampler_params sampling_params(const okv_sampler_params *defaults, const run_args *a) {
    okv_sampler_params sp = *defaults;
    if (a->temperature >= 0) { sp.temperature = (float)a->temperature; sp.do_sample = a->temperature > 0; }
    if (a->top_p >= 0) sp.top_p = (float)a->top_p;
    if (a->min_p >= 0) sp.min_p = (float)a->min_p;
    if (a->penalty >= 0) sp.repetition_penalty = (float)a->penalty;
    if (a->top_k >= 0) sp.top_k = (int32_t)a->top_k;
    if (a->seed >= 0) sp.seed = (uint64_t)a->seed;
    if (a->greedy) sp.do_sample = false;
    return sp;
}

/* The tokenizer bundled in the program, or --tokenizer. */
static okv_status load_tokenizer(const okv_program *p, const char *name, const char *override, okv_tok **tok, okv_error *err) {
    if (override) return okv_tok_load_file(override, tok, err);
    return okv_cli_tokenizer_from_program(p, name, tok, err);
}

static char *blob_string(const okv_program *p, const char *name) {
    size_t len;
    const char *b = okv_program_blob(p, name, &len);
    return b ? strndup(b, len) : NULL;
}

/* The streamed reply; remembers whether stdout is at the start of a line. */
typedef struct text_out {
    bool at_line_start;
} text_out;

static void print_text(void *ctx, const char *text, size_t len) {
    text_out *o = ctx;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    if (len) o->at_line_start = text[len - 1] == '\n';
}

/* Ends the reply's line (if it has one open) before stderr is written. */
static void end_reply(const okv_gen_options *go) {
    text_out *o = go->ctx;
    if (!o->at_line_start) fputc('\n', stdout);
    fflush(stdout);
    o->at_line_start = true;
}

/* "offkv: model NAME | ARCH | 134.5M parameters | 256.6 MiB of bf16 weights in huge pages" */
static void print_model_line(const okv_program *p, const okv_program_info *info) {
    char *json = NULL;
    okv_error err = {0};
    if (okv_program_describe(p, true, &json, &err)) return;
    cJSON *d = cJSON_Parse(json);
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(d, "parameters");
    const cJSON *bytes = cJSON_GetObjectItemCaseSensitive(d, "weight_bytes");
    const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(d, "name"));
    const char *arch = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(d, "architecture"));
    const char *dtype = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(d, "dtype"));
    if (name && cJSON_IsNumber(params) && cJSON_IsNumber(bytes)) {
        double n = params->valuedouble;
        char x8[64] = "";
        if (info->n_x8) snprintf(x8, sizeof x8, " (%d block matrices in x8 rows)", info->n_x8);
        fprintf(stderr, "offkv: model %s | %s | %.*f%s parameters | %.1f MiB of %s weights %s%s\n", name,
                arch ? arch : "?", n >= 1e9 ? 2 : 1, n >= 1e9 ? n / 1e9 : n >= 1e6 ? n / 1e6 : n / 1e3,
                n >= 1e9 ? "B" : n >= 1e6 ? "M" : "K", bytes->valuedouble / (1024.0 * 1024.0), dtype ? dtype : "",
                info->weights_memory == OKV_WEIGHTS_HUGE_PAGES ? "in huge pages" : "mapped from the file", x8);
    }
    cJSON_Delete(d);
    free(json);
}

static void print_stats(const okv_gen_stats *stats, size_t reused) {
    char line[256];
    okv_gen_stats_format(stats, line, sizeof line);
    if (reused) fprintf(stderr, "offkv: %s | %zu more prompt tokens reused from the cache\n", line, reused);
    else fprintf(stderr, "offkv: %s\n", line);
}

/* One prompt in, one reply out. */
static okv_status run_once(const run_args *a, okv_cli_session *s, const okv_tok *tok, const okv_gen_prompt_args *pa,
                           const okv_gen_options *go, okv_error *err) {
    int32_t *ids = NULL;
    size_t n = 0;
    bool templated = false;
    okv_status st = okv_gen_prompt(tok, pa, &ids, &n, &templated, err);
    if (!st && a->chat == OKV_CHAT_AUTO && !templated) fprintf(stderr, "offkv: note: no chat template; prompt used as is\n");
    okv_gen_stats stats;
    if (!st) st = okv_generate(s->runner, tok, ids, n, 0, go, NULL, &stats, err);
    end_reply(go);
    if (!st) print_stats(&stats, 0);
    free(ids);
    return st;
}

/* /save FILE or /load FILE: the conversation and its cache to or from a
 * state file; a refusal is reported and the session goes on as it was. */
static void session_file_command(okv_chat_session *chat, const char *key, const char *line, okv_error *err) {
    const char *path = line + 6;
    while (*path == ' ') path++;
    bool save = line[1] == 's';
    if (!*path) {
        okv_cli_report("error", save ? "/save needs a file name" : "/load needs a file name");
        return;
    }
    okv_status st = save ? okv_chat_session_save(chat, path, err) : okv_chat_session_load(chat, path, err);
    int len = 0;
    okv_error e2;
    if (st) okv_cli_report("error", err->message);
    else if (!okv_cache_length(key, &len, &e2))
        fprintf(stderr, "offkv: %s %s (%d cached tokens)\n", save ? "saved to" : "loaded", path, len);
}

/* A conversation read from stdin, one user turn per line (/reset starts
 * over, /save FILE and /load FILE keep and restore the conversation with
 * its cache, /quit or end of input stops); each turn reuses the cached prefix. */
static okv_status run_interactive(const run_args *a, okv_cli_session *s, const okv_tok *tok,
                                  const okv_gen_prompt_args *pa, const okv_gen_options *go, okv_error *err) {
    okv_chat_session *chat = NULL;
    okv_status st = okv_chat_session_create(s->runner, tok, pa, &chat, err);
    char *line = NULL;
    size_t cap = 0;
    const char *first = a->prompt;
    while (!st) {
        const char *turn = first;
        first = NULL;
        if (!turn) {
            fprintf(stderr, "> ");
            ssize_t len = getline(&line, &cap, stdin);
            if (len < 0) break;
            while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
            if (!strcmp(line, "/quit")) break;
            if (!strcmp(line, "/reset")) {
                okv_chat_session_free(chat);
                chat = NULL;
                st = okv_chat_session_create(s->runner, tok, pa, &chat, err);
                continue;
            }
            if (!strncmp(line, "/save ", 6) || !strncmp(line, "/load ", 6)) {
                session_file_command(chat, s->key, line, err);
                continue;
            }
            if (!len) continue;
            turn = line;
        }
        okv_gen_stats stats;
        size_t reused = 0;
        st = okv_chat_session_turn(chat, turn, go, NULL, &stats, &reused, err);
        end_reply(go);
        if (!st) print_stats(&stats, reused);
        else if (st != OKV_ERR_NOMEM) { /* the turn was refused or failed; the session goes on without it */
            fflush(stdout);
            okv_cli_report("error", err->message);
            st = OKV_OK;
        }
    }
    free(line);
    okv_chat_session_free(chat);
    return st;
}

/* --json / --json-schema: the grammar and the token bytes it masks with
 * (nothing when neither flag is given). */
static okv_status load_grammar(const run_args *a, const okv_tok *tok, int32_t vocab, okv_grammar **g,
                               okv_grammar_vocab **v, okv_error *err) {
    *g = NULL;
    *v = NULL;
    if (!a->json && !a->json_schema) return OKV_OK;
    if (a->json && a->json_schema) {
        snprintf(err->message, sizeof err->message, "--json and --json-schema exclude each other");
        return err->status = OKV_ERR_INVALID;
    }
    okv_status st;
    if (a->json_schema) {
        char *text = NULL;
        size_t len = 0;
        st = okv_read_file(a->json_schema, &text, &len, err);
        if (!st && (st = okv_grammar_from_schema(text, len, g, err))) {
            char msg[sizeof err->message];
            snprintf(msg, sizeof msg, "--json-schema %.200s: %.800s", a->json_schema, err->message);
            memcpy(err->message, msg, sizeof msg);
        }
        free(text);
    } else {
        st = okv_grammar_json_object(g, err);
    }
    if (!st) st = okv_gen_grammar_vocab(tok, vocab, v, err);
    return st;
}

int okv_cli_run(int argc, char **argv) {
    run_args a;
    int rc = parse_run_args(argc, argv, &a);
    if (rc) return rc;
    okv_cli_session s;
    a.run.runner.max_logit_rows = 1;   /* generation only reads the last row */
    if (okv_cli_session_open(a.program, &a.run, &s, false)) return 1;
    if (a.verbose) {
        char line[256];
        okv_error e = {0};
        print_model_line(s.program, &s.info);
        if (!okv_cache_describe(s.key, line, sizeof line, &e)) fprintf(stderr, "offkv: %s\n", line);
    }
    okv_error err = {0};
    okv_tok *tok = NULL;
    char *tok_config = blob_string(s.program, "tokenizer_config.json");
    char *tmpl = blob_string(s.program, "chat_template.jinja");
    char *vars = chat_vars_json(&a);
    okv_grammar *grammar = NULL;
    okv_grammar_vocab *gvocab = NULL;
    okv_status st = load_tokenizer(s.program, a.program, a.tokenizer, &tok, &err);
    if (!st) st = load_grammar(&a, tok, s.info.vocab_size, &grammar, &gvocab, &err);
    if (!st) {
        okv_gen_prompt_args pa = {a.chat, a.system, a.prompt, vars, tok_config, tmpl, s.info.bos_id, NULL};
        text_out out = {true};
        okv_gen_defaults d;
        okv_gen_options go;
        st = okv_gen_defaults_get(s.runner, tok, &d, &err);
        okv_gen_options_init(&go, &d, a.max_new);
        go.sampling = sampling_params(&d.sampling, &a);
        go.stops = a.stops;
        go.n_stops = a.n_stops;
        go.drop_oldest_turns = a.drop_old_turns;
        go.on_text = print_text;
        go.ctx = &out;
        go.grammar = grammar;
        go.grammar_vocab = gvocab;
        if (!st) st = okv_sampler_params_check(&go.sampling, &err);
        if (!st) st = okv_gen_check_tokenizer(s.program, tok, &err);
        if (!st) st = a.interactive ? run_interactive(&a, &s, tok, &pa, &go, &err) : run_once(&a, &s, tok, &pa, &go, &err);
    }
    if (!st && a.verbose) {
        char ran[512];
        fprintf(stderr, "offkv: kernels ran: %s\n", okv_runner_kernels_ran(s.runner, ran, sizeof ran));
    }
    if (st) rc = okv_cli_die(&err);
    free(vars); free(tmpl); free(tok_config);
    okv_grammar_free(grammar);
    okv_grammar_vocab_free(gvocab);
    okv_tok_free(tok);
    okv_cli_session_close(&s);
    return rc;
}
