/* main.c — the `offkv` command line. Uses only the public API (offkv.h and
 * the text-layer headers). This is the only place that prints errors and
 * exits; library calls return an okv_error whose message is shown as is.
 *
 *   offkv export DIR -o OUT.okv [--dtype fp32|fp16|bf16] [--max-ctx-len N] [--prefill-chunk-size N]
 *                [--qlinear 4w|8w] [--qlinear-group-size G] [--qembedding 4w|8w] [--qembedding-group-size G]
 *                [--calibration TEXT] [--calibration-ctx N] [--threads N] [--keep-quant | --dequantize]
 *   offkv inspect OUT.okv|MODEL.gguf [--json] |  offkv inspect --config DIR|config.json [--json]
 *   offkv logits OUT.okv --tokens FILE|"ids" --out logits.f32 [--chunk N] [cache/runner options]
 *   offkv generate OUT.okv --tokens FILE|"ids" [--max-new-tokens N] [cache/runner options]
 *   offkv tokenize / detokenize / chat-render / run  (text commands)
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "cli.h"
#include "offkv.h"
#include "offkv_gen.h"

static void notice_to_stderr(void *ctx, const char *msg) { okv_cli_report("note", msg); }

int okv_cli_die(const okv_error *err) {
    okv_cli_report("error", err->message);
    return 1;
}

int okv_cli_usage_error(const char *fmt, const char *arg) {
    fprintf(stderr, "offkv: ");
    fprintf(stderr, fmt, arg ? arg : "");
    fprintf(stderr, "\n");
    return 2;
}

bool okv_cli_parse_int(const char *s, int lo, int hi, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return false;
    *out = (int)v;
    return true;
}

/* ---- shared option groups ------------------------------------------------------ */

void okv_cli_run_opts_init(okv_cli_run_opts *o) {
    memset(o, 0, sizeof *o);
    okv_program_options_default(&o->program);
    okv_cache_options_default(&o->cache);
    o->cache.k_storage_auto = o->cache.v_storage_auto = true; /* --kv-storage-dtype auto */
    okv_runner_options_default(&o->runner);
}

static int parse_windows(const char *s, okv_cli_run_opts *o) {
    o->n_windows = 0;
    const char *p = s;
    while (*p && o->n_windows < OKV_CLI_MAX_WINDOWS) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > (1L << 30))
            return okv_cli_usage_error("--kv-windows: '%s' must be a comma-separated list of window sizes >= 0 (0 = flat)", s);
        o->windows[o->n_windows++] = (int32_t)v;
        p = end;
        if (*p == ',') p++;
        else if (*p) return okv_cli_usage_error("--kv-windows: '%s' must be a comma-separated list", s);
    }
    o->cache.windows = o->windows;
    o->cache.n_windows = o->n_windows;
    return 0;
}

/* Consumes one cache/runner option at argv[*i]. Returns 1 if consumed, 0 if
 * not one of ours, negative on a bad value (already reported). */
int okv_cli_run_opt(int argc, char **argv, int *i, okv_cli_run_opts *o) {
    const char *a = argv[*i];
    bool has_val = *i + 1 < argc;
    const char *v = has_val ? argv[*i + 1] : NULL;
    if (!strcmp(a, "--reference-attention")) { o->runner.reference_attention = true; return 1; }
    if (!strcmp(a, "--plain-kernels")) { o->runner.plain_kernels = true; return 1; }
    if (!strcmp(a, "--deterministic")) { o->runner.deterministic = true; return 1; }
    if (!strcmp(a, "--mmap")) { o->program.weights = OKV_WEIGHTS_MAPPED; return 1; }
    bool k_side = !strcmp(a, "--kv-storage-dtype") || !strcmp(a, "--kv-k-dtype");
    bool v_side = !strcmp(a, "--kv-storage-dtype") || !strcmp(a, "--kv-v-dtype");
    if (!k_side && !v_side && strcmp(a, "--kv-max-capacity") && strcmp(a, "--kv-initial-capacity") &&
        strcmp(a, "--kv-windows") && strcmp(a, "--threads"))
        return 0;
    if (!has_val) return -okv_cli_usage_error("%s needs a value", a);
    (*i)++;
    if (k_side || v_side) { /* later flags override earlier ones, side by side */
        okv_dtype dt = OKV_F32;
        bool automatic = !strcmp(v, "auto");
        if (!automatic && okv_kv_dtype_parse(v, &dt))
            return -okv_cli_usage_error(k_side && v_side ? "--kv-storage-dtype: '%s' is not auto, f32, f16, bf16 or q8"
                                        : k_side ? "--kv-k-dtype: '%s' is not auto, f32, f16, bf16 or q8"
                                                 : "--kv-v-dtype: '%s' is not auto, f32, f16, bf16 or q8", v);
        if (k_side) {
            o->cache.k_storage_auto = automatic;
            o->cache.k_storage_dtype = dt;
        }
        if (v_side) {
            o->cache.v_storage_auto = automatic;
            o->cache.v_storage_dtype = dt;
        }
    } else if (!strcmp(a, "--kv-max-capacity")) {
        if (!okv_cli_parse_int(v, 1, 1 << 30, &o->cache.max_capacity)) return -okv_cli_usage_error("--kv-max-capacity: '%s' must be a positive integer", v);
    } else if (!strcmp(a, "--kv-initial-capacity")) {
        if (!okv_cli_parse_int(v, 1, 1 << 30, &o->cache.initial_capacity)) return -okv_cli_usage_error("--kv-initial-capacity: '%s' must be a positive integer", v);
    } else if (!strcmp(a, "--kv-windows")) {
        if (parse_windows(v, o)) return -2;
    } else if (!strcmp(a, "--threads")) {
        if (!okv_cli_parse_int(v, 1, 1024, &o->runner.n_threads)) return -okv_cli_usage_error("--threads: '%s' must be a positive integer", v);
    }
    return 1;
}

/* Opens the program with its caches and runner (one okv_session); prints
 * the cache summary to stderr when verbose. */
int okv_cli_session_open(const char *path, okv_cli_run_opts *o, okv_cli_session *s, bool verbose) {
    okv_error err = {0};
    memset(s, 0, sizeof *s);
    okv_session_options so = {.program = o->program, .cache = o->cache, .runner = o->runner};
    if (okv_session_create(path, &so, &s->session, &err)) return okv_cli_die(&err);
    s->key = okv_session_cache_key(s->session);
    s->program = okv_session_program(s->session);
    s->runner = okv_session_runner(s->session);
    okv_program_get_info(s->program, &s->info);
    if (verbose) {
        char line[256];
        if (!okv_cache_describe(s->key, line, sizeof line, &err)) fprintf(stderr, "offkv: %s\n", line);
        fprintf(stderr, "offkv: kernels %s\n", okv_runner_kernels(s->runner));
        fprintf(stderr, "offkv: weights %s\n", s->info.weights_memory == OKV_WEIGHTS_HUGE_PAGES
                                                    ? "copied into huge pages (--mmap maps the file instead)"
                                                    : "mapped from the file");
    }
    return 0;
}

void okv_cli_session_close(okv_cli_session *s) { okv_session_free(s->session); }

/* ---- token lists ----------------------------------------------------------------- */

static int parse_id_text(const char *text, int32_t **ids, int *n) {
    int cap = 64;
    *ids = malloc(sizeof(int32_t) * (size_t)cap);
    *n = 0;
    const char *p = text;
    while (*ids) {
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || *p == ',') p++;
        if (!*p) return 0;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX) return -1;
        if (*n == cap) {
            cap *= 2;
            int32_t *q = realloc(*ids, sizeof(int32_t) * (size_t)cap);
            if (!q) break;
            *ids = q;
        }
        (*ids)[(*n)++] = (int32_t)v;
        p = end;
    }
    return -1;
}

/* The ids of a JSON array: integers in [0, INT32_MAX]. */
static int json_id_array(const cJSON *arr, const char *arg, int32_t **ids, int *n) {
    int count = cJSON_GetArraySize(arr);
    *ids = malloc(sizeof(int32_t) * (size_t)(count > 0 ? count : 1));
    if (!*ids) return okv_cli_usage_error("--tokens %s: out of memory", arg);
    const cJSON *e;
    cJSON_ArrayForEach(e, arr) {
        double d = cJSON_IsNumber(e) ? e->valuedouble : -1;
        if (!cJSON_IsNumber(e) || d < 0 || d > INT32_MAX || d != (double)(int64_t)d)
            return okv_cli_usage_error("--tokens %s: the \"tokens\" array must hold integer ids in [0, 2^31)", arg);
        (*ids)[(*n)++] = (int32_t)d;
    }
    return 0;
}

/* A JSON file with a top-level "tokens" array (or a bare array), or
 * whitespace separated ids, either in a file or given inline. */
int okv_cli_read_tokens(const char *arg, int32_t **ids, int *n) {
    *ids = NULL;
    *n = 0;
    char *text = NULL;
    struct stat sb;
    if (stat(arg, &sb) == 0) { /* a file (anything else that exists is refused, a FIFO would block) */
        FILE *f = S_ISREG(sb.st_mode) ? fopen(arg, "rb") : NULL;
        text = f ? malloc((size_t)sb.st_size + 1) : NULL;
        size_t got = text ? fread(text, 1, (size_t)sb.st_size, f) : 0;
        if (f) fclose(f);
        if (!text || got != (size_t)sb.st_size) {
            free(text);
            return okv_cli_usage_error("--tokens: cannot read %s (not a readable regular file)", arg);
        }
        text[got] = 0;
    }
    const char *src = text ? text : arg;
    const char *start = src + strspn(src, " \t\r\n");
    int rc = 0;
    if (*start == '{' || *start == '[') {
        cJSON *j = cJSON_Parse(start);
        const cJSON *arr = cJSON_IsArray(j) ? j : cJSON_GetObjectItemCaseSensitive(j, "tokens");
        if (!j) rc = okv_cli_usage_error("--tokens %s: invalid JSON", arg);
        else if (!cJSON_IsArray(arr)) rc = okv_cli_usage_error("--tokens %s: JSON without a top-level \"tokens\" array", arg);
        else rc = json_id_array(arr, arg, ids, n);
        cJSON_Delete(j);
    } else if (parse_id_text(src, ids, n)) rc = okv_cli_usage_error("--tokens %s: expected whitespace-separated token ids", arg);
    free(text);
    if (!rc && *n == 0) rc = okv_cli_usage_error("--tokens %s: no tokens", arg);
    if (rc) { free(*ids); *ids = NULL; }
    return rc;
}

/* ---- export / inspect ------------------------------------------------------------ */

/* "4w" / "8w" -> 4 / 8 bits (offkv's own planes); a GGUF block type name
 * ("q4_K") -> that type (the library checks it again) and its code bits. */
static bool parse_qbits(const char *v, int *bits, const char **block) {
    static const struct { const char *name; int bits; } blocks[] = {
        {"q4_0", 4}, {"q4_1", 4}, {"q5_0", 5}, {"q5_1", 5}, {"q8_0", 8}, {"q4_K", 4}, {"q5_K", 5}, {"q6_K", 6}};
    if (!strcmp(v, "4w") || !strcmp(v, "8w")) { *bits = v[0] - '0'; *block = NULL; return true; }
    for (size_t i = 0; i < sizeof blocks / sizeof blocks[0]; i++)
        if (!strcmp(v, blocks[i].name)) { *bits = blocks[i].bits; *block = blocks[i].name; return true; }
    return false;
}

static bool parse_qgroup(const char *v, int *group) {
    return okv_cli_parse_int(v, 32, 256, group) && (*group == 32 || *group == 64 || *group == 128 || *group == 256);
}

#define EXPORT_USAGE "HF_DIR|MODEL.gguf -o OUT.okv [--dtype fp32|fp16|bf16] [--max-ctx-len N] [--prefill-chunk-size N] " \
                     "[--qlinear 4w|8w] [--qlinear-group-size 32|64|128|256] [--qembedding 4w|8w] [--qembedding-group-size G] " \
                     "[--calibration TEXT] [--calibration-ctx N] [--threads N] [--keep-quant | --dequantize]"

/* The export progress line: redrawn in place (at most 5 times a second)
 * when stderr is a terminal; a summary line at the end either way. */
typedef struct export_meter {
    bool tty;
    double last_drawn;
    okv_export_progress last;
} export_meter;

static void draw_progress(void *ctx, const okv_export_progress *p) {
    export_meter *m = ctx;
    if (p->calib_tokens) { /* the calibration pass, before any tensor */
        if (!m->tty || (p->seconds - m->last_drawn < 0.2 && p->calib_tokens_done < p->calib_tokens)) return;
        m->last_drawn = p->calib_tokens_done < p->calib_tokens ? p->seconds : -1;
        fprintf(stderr, "\roffkv: calibrating: %lld/%lld tokens, %.0f tok/s   %s", (long long)p->calib_tokens_done,
                (long long)p->calib_tokens, p->seconds > 0 ? (double)p->calib_tokens_done / p->seconds : 0.0,
                p->calib_tokens_done < p->calib_tokens ? "" : "\n");
        fflush(stderr);
        return;
    }
    m->last = *p;
    if (!m->tty || (p->seconds - m->last_drawn < 0.2 && p->tensors_done < p->n_tensors)) return;
    m->last_drawn = p->seconds;
    double mib = (double)p->bytes_done / (1024.0 * 1024.0);
    fprintf(stderr, "\roffkv: converting: %d/%d tensors, %.1f/%.1f MiB, %.0f MiB/s   ", p->tensors_done, p->n_tensors, mib,
            (double)p->total_bytes / (1024.0 * 1024.0), p->seconds > 0 ? mib / p->seconds : 0.0);
    fflush(stderr);
}

static void end_progress(const export_meter *m) {
    const okv_export_progress *p = &m->last;
    if (!p->tensors_done) return;
    double mib = (double)p->bytes_done / (1024.0 * 1024.0);
    fprintf(stderr, "%soffkv: converted %d tensors, %.1f MiB in %.1f s (%.0f MiB/s)%s\n", m->tty ? "\r" : "", p->tensors_done,
            mib, p->seconds, p->seconds > 0 ? mib / p->seconds : 0.0, m->tty ? "          " : "");
}

static int cmd_export(int argc, char **argv) {
    okv_export_options o;
    okv_export_options_default(&o);
    o.notice = notice_to_stderr;
    export_meter meter = {isatty(fileno(stderr)) != 0, -1, {0}};
    o.progress = draw_progress;
    o.progress_ctx = &meter;
    const char *dir = NULL, *out = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if ((!strcmp(a, "-o") || !strcmp(a, "--output")) && v) { out = v; i++; }
        else if (!strcmp(a, "--dtype") && v) {
            if (okv_dtype_parse(v, &o.dtype)) return okv_cli_usage_error("--dtype: '%s' is not fp32, fp16 or bf16", v);
            i++;
        } else if ((!strcmp(a, "--max-ctx-len") || !strcmp(a, "--max-seq-len")) && v) {
            if (!okv_cli_parse_int(v, 1, 1 << 30, &o.max_ctx_len)) return okv_cli_usage_error("--max-ctx-len: '%s' must be a positive integer", v);
            i++;
        } else if (!strcmp(a, "--prefill-chunk-size") && v) {
            if (!okv_cli_parse_int(v, -(1 << 30), 1 << 30, &o.prefill_chunk_size) || o.prefill_chunk_size == 0)
                return okv_cli_usage_error("--prefill-chunk-size: '%s' must be an integer >= 1", v);
            i++;
        } else if ((!strcmp(a, "--qlinear") || !strcmp(a, "--qembedding")) && v) {
            bool lin = a[3] == 'l';
            if (!parse_qbits(v, lin ? &o.qlinear : &o.qembedding, lin ? &o.qlinear_block : &o.qembedding_block))
                return okv_cli_usage_error(lin ? "--qlinear: '%s' is not 4w, 8w or a block type (q4_0 q4_1 q5_0 q5_1 q8_0 q4_K q5_K q6_K)"
                                               : "--qembedding: '%s' is not 4w, 8w or a block type (q4_0 q4_1 q5_0 q5_1 q8_0 q4_K q5_K q6_K)", v);
            i++;
        } else if ((!strcmp(a, "--qlinear-group-size") || !strcmp(a, "--qembedding-group-size")) && v) {
            if (!parse_qgroup(v, a[3] == 'l' ? &o.qlinear_group : &o.qembedding_group))
                return okv_cli_usage_error("group size '%s' is not 32, 64, 128 or 256", v);
            i++;
        } else if (!strcmp(a, "--keep-quant")) {
            o.gguf_dequantize = false;
        } else if (!strcmp(a, "--dequantize")) {
            o.gguf_dequantize = true;
        } else if (!strcmp(a, "--calibration") && v) {
            o.calibration_file = v;
            i++;
        } else if (!strcmp(a, "--calibration-ctx") && v) {
            if (!okv_cli_parse_int(v, 2, 1 << 24, &o.calibration_ctx))
                return okv_cli_usage_error("--calibration-ctx: '%s' must be an integer >= 2", v);
            i++;
        } else if (!strcmp(a, "--threads") && v) {
            if (!okv_cli_parse_int(v, 1, 1024, &o.n_threads)) return okv_cli_usage_error("--threads: '%s' must be an integer in 1..1024", v);
            i++;
        } else if (a[0] != '-' && !dir) dir = a;
        else return okv_cli_usage_error("export: unknown or incomplete option '%s'", a);
    }
    if (!dir || !out) return okv_cli_usage_error("usage: offkv export " EXPORT_USAGE "%s", "");
    okv_error err = {0};
    okv_status st = okv_export(dir, out, &o, &err);
    end_progress(&meter);
    if (st) return okv_cli_die(&err);
    fprintf(stderr, "offkv: wrote %s\n", out);
    return 0;
}

static int cmd_inspect(int argc, char **argv) {
    bool json = false;
    const char *path = NULL, *config = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = true;
        else if (!strcmp(argv[i], "--config") && i + 1 < argc) config = argv[++i];
        else if (argv[i][0] != '-' && !path) path = argv[i];
        else return okv_cli_usage_error("inspect: unknown option '%s'", argv[i]);
    }
    if (!path && !config) return okv_cli_usage_error("usage: offkv inspect PROGRAM.okv|MODEL.gguf [--json] | offkv inspect --config DIR [--json]%s", "");
    okv_error err = {0};
    char *text = NULL;
    if (config) {
        if (okv_config_describe(config, json, NULL, &text, &err)) return okv_cli_die(&err);
    } else if (okv_is_gguf_file(path)) {
        if (okv_gguf_describe(path, json, &text, &err)) return okv_cli_die(&err);
    } else {
        okv_program *p;
        okv_program_options po;
        okv_program_options_default(&po);
        po.weights = OKV_WEIGHTS_MAPPED; /* inspecting reads a few bytes: no copy */
        if (okv_program_open_with(path, &po, &p, &err)) return okv_cli_die(&err);
        okv_status st = okv_program_describe(p, json, &text, &err);
        okv_program_free(p);
        if (st) return okv_cli_die(&err);
    }
    fputs(text, stdout);
    if (json) fputc('\n', stdout);
    free(text);
    return 0;
}

/* ---- logits / generate --------------------------------------------------------------- */

static int cmd_logits(int argc, char **argv) {
    okv_cli_run_opts o;
    okv_cli_run_opts_init(&o);
    const char *path = NULL, *tokens = NULL, *out = NULL;
    int chunk = 0;
    for (int i = 1; i < argc; i++) {
        int r = okv_cli_run_opt(argc, argv, &i, &o);
        if (r < 0) return 2;
        if (r) continue;
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--tokens") && v) { tokens = v; i++; }
        else if (!strcmp(a, "--out") && v) { out = v; i++; }
        else if (!strcmp(a, "--chunk") && v) {
            if (!okv_cli_parse_int(v, 1, 1 << 30, &chunk)) return okv_cli_usage_error("--chunk: '%s' must be a positive integer", v);
            i++;
        } else if (a[0] != '-' && !path) path = a;
        else return okv_cli_usage_error("logits: unknown or incomplete option '%s'", a);
    }
    if (!path || !tokens || !out) return okv_cli_usage_error("usage: offkv logits PROGRAM.okv --tokens FILE --out LOGITS.f32 [--chunk N]%s", "");
    int32_t *ids = NULL;
    int n = 0;
    if (okv_cli_read_tokens(tokens, &ids, &n)) return 2;
    okv_cli_session s;
    if (okv_cli_session_open(path, &o, &s, false)) { free(ids); return 1; }
    if (chunk == 0) chunk = s.info.prefill_chunk_size;
    if (chunk > s.info.prefill_chunk_size) {
        fprintf(stderr, "offkv: note: --chunk %d is above the program's prefill_chunk_size; using %d\n", chunk, s.info.prefill_chunk_size);
        chunk = s.info.prefill_chunk_size;
    }
    int V = s.info.vocab_size, rc = 0;
    float *logits = malloc(sizeof(float) * (size_t)n * (size_t)V);
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)n);
    okv_error err = {0};
    for (int t = 0; t < n && pos; t++) pos[t] = t;
    for (int t = 0; logits && pos && t < n && !rc; t += chunk) {
        int T = n - t < chunk ? n - t : chunk;
        if (okv_runner_step(s.runner, ids + t, pos + t, T, OKV_LOGITS_ALL, logits + (size_t)t * V, &err)) rc = okv_cli_die(&err);
    }
    if (!logits || !pos) rc = okv_cli_usage_error("out of memory%s", "");
    if (!rc) {
        FILE *f = fopen(out, "wb");
        if (!f || fwrite(logits, sizeof(float), (size_t)n * V, f) != (size_t)n * V) rc = okv_cli_usage_error("cannot write %s", out);
        if (f && fclose(f)) rc = okv_cli_usage_error("cannot write %s", out);
        if (!rc) fprintf(stderr, "offkv: wrote %d x %d logits to %s\n", n, V, out);
    }
    free(logits); free(pos); free(ids);
    okv_cli_session_close(&s);
    return rc;
}

/* Prints each generated id as it comes (EOS included), space separated. */
typedef struct id_printer { int printed; } id_printer;

static void print_id(void *ctx, int32_t id) {
    id_printer *p = ctx;
    printf("%s%d", p->printed++ ? " " : "", (int)id);
    fflush(stdout);
}

/* Greedy ids through okv_generate (no tokenizer: ids in, ids out; stops at
 * the program's EOS ids, the limit or a full context). */
static int cmd_generate(int argc, char **argv) {
    okv_cli_run_opts o;
    okv_cli_run_opts_init(&o);
    const char *path = NULL, *tokens = NULL;
    int max_new = 32;
    for (int i = 1; i < argc; i++) {
        int r = okv_cli_run_opt(argc, argv, &i, &o);
        if (r < 0) return 2;
        if (r) continue;
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--tokens") && v) { tokens = v; i++; }
        else if (!strcmp(a, "--max-new-tokens") && v) {
            if (!okv_cli_parse_int(v, 0, 1 << 30, &max_new)) return okv_cli_usage_error("--max-new-tokens: '%s' must be >= 0", v);
            i++;
        } else if (a[0] != '-' && !path) path = a;
        else return okv_cli_usage_error("generate: unknown or incomplete option '%s'", a);
    }
    if (!path || !tokens) return okv_cli_usage_error("usage: offkv generate PROGRAM.okv --tokens \"ids\" [--max-new-tokens N]%s", "");
    int32_t *prompt = NULL;
    int n = 0;
    if (okv_cli_read_tokens(tokens, &prompt, &n)) return 2;
    okv_cli_session s;
    o.runner.max_logit_rows = 1;   /* greedy generation only reads the last row */
    if (okv_cli_session_open(path, &o, &s, true)) { free(prompt); return 1; }
    okv_error err = {0};
    okv_gen_defaults d;
    okv_gen_options go;
    okv_gen_stats stats;
    id_printer out = {0};
    int rc = 0;
    okv_status st = okv_gen_defaults_get(s.runner, NULL, &d, &err);
    okv_gen_options_init(&go, &d, max_new);
    go.sampling = okv_sampler_params_default();   /* greedy */
    go.on_token = print_id;
    go.ctx = &out;
    if (!st) st = okv_generate(s.runner, NULL, prompt, (size_t)n, 0, &go, NULL, &stats, &err);
    printf("\n");
    if (st) rc = okv_cli_die(&err);
    free(prompt);
    okv_cli_session_close(&s);
    return rc;
}

/* ---- dispatch ---------------------------------------------------------------------- */

typedef struct command {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
} command;

static const command COMMANDS[] = {
    {"export", cmd_export, EXPORT_USAGE},
    {"inspect", cmd_inspect, "PROGRAM.okv|MODEL.gguf [--json] | --config DIR|config.json [--json]"},
    {"logits", cmd_logits, "PROGRAM.okv --tokens FILE|\"ids\" --out LOGITS.f32 [--chunk N] [cache options]"},
    {"generate", cmd_generate, "PROGRAM.okv --tokens FILE|\"ids\" [--max-new-tokens N] [cache options]"},
    {"perplexity", okv_cli_perplexity, "PROGRAM.okv --file TEXT [--ctx 512] [--kl-base BASE.okv] [--tokenizer FILE] [cache options]"},
    {"serve", okv_cli_serve, "PROGRAM.okv [--host 127.0.0.1] [--port 8080] [--parallel N] [--ctx-per-seq N] [--api-key KEY]"},
    OKV_CLI_TEXT_COMMANDS
};

static int usage(void) {
    fprintf(stderr, "usage: offkv COMMAND ...\n");
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++)
        fprintf(stderr, "  offkv %-11s %s\n", COMMANDS[i].name, COMMANDS[i].help);
    fprintf(stderr, "cache options: --kv-storage-dtype f32|f16|bf16|q8 (--kv-k-dtype / --kv-v-dtype: one side)\n"
                    "               --kv-max-capacity N --kv-initial-capacity N\n"
                    "               --kv-windows W[,W...] (0 = flat) --threads N --reference-attention\n");
    return 2;
}

int main(int argc, char **argv) {
    if (argc < 2) return usage();
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++)
        if (!strcmp(argv[1], COMMANDS[i].name)) {
            /* answered before the command parses (it would take --help for an option) */
            if (okv_cli_wants_help(argc - 1, argv + 1)) return okv_cli_help(COMMANDS[i].name);
            return COMMANDS[i].fn(argc - 1, argv + 1);
        }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help"))
        return argc > 2 ? okv_cli_help(argv[2]) : okv_cli_overview(stdout);
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V") || !strcmp(argv[1], "version")) return okv_cli_version();
    fprintf(stderr, "offkv: unknown command '%s'\n", argv[1]);
    return usage();
}
