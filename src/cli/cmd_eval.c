/* cmd_eval.c — `offkv perplexity`: tokenizes a text file with the program's
 * tokenizer and reports okv_eval_perplexity's figures (offkv_eval.h holds
 * the computation; this file only parses options and prints). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "cmd_tok.h"
#include "offkv_eval.h"
#include "offkv_tok.h"

/* On a terminal one line is redrawn per window; into a file or pipe only
 * the last one is written, so logs do not collect carriage returns. */
static void eval_progress(void *ctx, int w, int n) {
    if (!isatty(STDERR_FILENO) && w != n) return;
    fprintf(stderr, "\roffkv: window %d/%d", w, n);
    if (w == n) fputc('\n', stderr);
}

/* The text file as ids (no special tokens: each window gets the BOS). */
static int tokenize_file(const okv_program *p, const char *prog_path, const char *tok_path, const char *file, int32_t **ids,
                         size_t *n) {
    okv_error err = {0};
    okv_tok *tok = NULL;
    char *text = NULL;
    size_t len = 0;
    okv_status st = tok_path ? okv_tok_load_file(tok_path, &tok, &err) : okv_cli_tokenizer_from_program(p, prog_path, &tok, &err);
    if (!st) st = okv_read_file(file, &text, &len, &err);
    if (!st) st = okv_tok_encode(tok, text, len, false, ids, n, &err);
    free(text);
    okv_tok_free(tok);
    return st ? okv_cli_die(&err) : 0;
}

int okv_cli_perplexity(int argc, char **argv) {
    okv_cli_run_opts ro;
    okv_cli_run_opts_init(&ro);
    const char *path = NULL, *file = NULL, *base_path = NULL, *tok_path = NULL;
    okv_eval_options eo;
    okv_eval_options_default(&eo);
    okv_dtype base_kv = OKV_F32;
    bool base_kv_set = false;
    for (int i = 1; i < argc; i++) {
        int r = okv_cli_run_opt(argc, argv, &i, &ro);
        if (r < 0) return 2;
        if (r) continue;
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--file") && v) { file = v; i++; }
        else if (!strcmp(a, "--kl-base") && v) { base_path = v; i++; }
        else if (!strcmp(a, "--kl-base-kv-storage-dtype") && v) {
            if (okv_kv_dtype_parse(v, &base_kv)) return okv_cli_usage_error("--kl-base-kv-storage-dtype: '%s' is not f32, f16, bf16 or q8", v);
            base_kv_set = true;
            i++;
        }
        else if (!strcmp(a, "--tokenizer") && v) { tok_path = v; i++; }
        else if (!strcmp(a, "--ctx") && v) {
            if (!okv_cli_parse_int(v, 4, 1 << 24, &eo.ctx)) return okv_cli_usage_error("--ctx: '%s' must be an integer >= 4", v);
            i++;
        } else if (a[0] != '-' && !path) path = a;
        else return okv_cli_usage_error("perplexity: unknown or incomplete option '%s'", a);
    }
    if (!path || !file)
        return okv_cli_usage_error("usage: offkv perplexity PROGRAM.okv --file TEXT [--ctx N] [--kl-base BASE.okv] [--threads N]%s", "");
    okv_error err = {0};
    okv_program *p = NULL, *base = NULL;
    if (okv_program_open_with(path, &ro.program, &p, &err)) return okv_cli_die(&err);
    if (base_path && okv_program_open_with(base_path, &ro.program, &base, &err)) { okv_program_free(p); return okv_cli_die(&err); }
    /* --kl-base-kv-storage-dtype alone: the base is the program itself with
     * that KV storage (what a KV dtype costs, same weights) */
    const okv_program *base_run = base ? base : base_kv_set ? p : NULL;
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = tokenize_file(p, path, tok_path, file, &ids, &n);
    okv_program_info info;
    okv_program_get_info(p, &info);
    eo.bos_id = info.bos_id;
    eo.runner = ro.runner;
    eo.cache = ro.cache;
    okv_cache_options base_cache = ro.cache;
    base_cache.k_storage_dtype = base_cache.v_storage_dtype = base_kv;
    base_cache.k_storage_auto = base_cache.v_storage_auto = false;
    if (base_kv_set) eo.base_cache = &base_cache;
    eo.progress = eval_progress;
    okv_eval_result res;
    if (!rc && n > (size_t)INT32_MAX) rc = okv_cli_usage_error("%s: too many tokens", file);
    if (!rc && okv_eval_perplexity(p, base_run, ids, (int)n, &eo, &res, &err)) rc = okv_cli_die(&err);
    if (!rc) {
        printf("perplexity %.4f over %lld positions (%d windows of %d tokens, %zu tokens in %s)\n", res.ppl,
               (long long)res.n_scored, res.n_windows, eo.ctx, n, file);
        if (base_run)
            printf("base perplexity %.4f | KL(base || program) mean %.6f max %.4f nats | top-1 agreement %.2f%%\n",
                   res.base_ppl, res.kl, res.kl_max, 100.0 * res.top1);
    }
    free(ids);
    okv_program_free(base);
    okv_program_free(p);
    return rc;
}
