/* cmd_serve.c — `offkv serve`: parses the flags, starts the server
 * (offkv_serve.h), prints where it listens and waits for SIGINT/SIGTERM,
 * then stops gracefully and exits 0.
 *
 * Signals are blocked in every thread before the server starts its
 * threads, and main waits for them with sigwait, so no handler runs
 * inside library code. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "offkv_serve.h"

static int parse_serve_args(int argc, char **argv, okv_server_options *o, okv_cli_run_opts *run) {
    okv_cli_run_opts_init(run);
    for (int i = 1; i < argc; i++) {
        int r = okv_cli_run_opt(argc, argv, &i, run);
        if (r < 0) return 2;
        if (r) continue;
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--prefix-cache-dir-shared")) {   /* (the one flag without a value) */
            o->prefix_cache_dir_shared = true;
            continue;
        }
        if (a[0] != '-') {
            if (o->program_path) return okv_cli_usage_error("serve: unexpected argument '%s'", a);
            o->program_path = a;
            continue;
        }
        if (!v) return okv_cli_usage_error("%s needs a value", a);
        i++;
        int n = 0;
        if (!strcmp(a, "--host")) o->host = v;
        else if (!strcmp(a, "--api-key")) o->api_key = v;
        else if (!strcmp(a, "--cors-origin")) o->cors_origin = v;
        else if (!strcmp(a, "--model-name")) o->model_name = v;
        else if (!strcmp(a, "--port")) {
            if (!okv_cli_parse_int(v, 0, 65535, &o->port)) return okv_cli_usage_error("--port: '%s' must be in [0, 65535]", v);
        } else if (!strcmp(a, "--parallel")) {
            if (!okv_cli_parse_int(v, 1, 256, &o->parallel)) return okv_cli_usage_error("--parallel: '%s' must be in [1, 256]", v);
        } else if (!strcmp(a, "--ctx-per-seq")) {
            if (!okv_cli_parse_int(v, 1, 1 << 30, &o->ctx_per_seq)) return okv_cli_usage_error("--ctx-per-seq: '%s' must be a positive integer", v);
        } else if (!strcmp(a, "--max-queue")) {
            if (!okv_cli_parse_int(v, 0, 1 << 20, &o->max_queue)) return okv_cli_usage_error("--max-queue: '%s' must be an integer >= 0", v);
        } else if (!strcmp(a, "--max-body")) {
            if (!okv_cli_parse_int(v, 1, 1 << 30, &n)) return okv_cli_usage_error("--max-body: '%s' must be a positive byte count", v);
            o->max_body_bytes = (size_t)n;
        } else if (!strcmp(a, "--prefix-cache-bytes")) {
            char *end = NULL;
            unsigned long long b = strtoull(v, &end, 10);
            if (!*v || *end || v[0] == '-') return okv_cli_usage_error("--prefix-cache-bytes: '%s' must be a byte count", v);
            o->prefix_cache_bytes = (size_t)b;
        } else if (!strcmp(a, "--chat-template")) {
            o->chat_template_path = v;
        } else if (!strcmp(a, "--prefix-cache-dir")) {
            o->prefix_cache_dir = v;
        } else if (!strcmp(a, "--prefix-cache-dir-bytes")) {
            char *end = NULL;
            unsigned long long b = strtoull(v, &end, 10);
            if (!*v || *end || v[0] == '-' || !b)
                return okv_cli_usage_error("--prefix-cache-dir-bytes: '%s' must be a positive byte count", v);
            o->prefix_cache_dir_bytes = (uint64_t)b;
        } else if (!strcmp(a, "--prefix-cache-redis")) {
            o->prefix_cache_redis = v;
        } else if (!strcmp(a, "--prefix-cache-redis-ttl")) {
            if (!okv_cli_parse_int(v, 1, 1 << 30, &o->prefix_cache_redis_ttl_s))
                return okv_cli_usage_error("--prefix-cache-redis-ttl: '%s' must be a positive number of seconds", v);
        } else if (!strcmp(a, "--prefix-cache-redis-bytes")) {
            char *end = NULL;
            unsigned long long b = strtoull(v, &end, 10);
            if (!*v || *end || v[0] == '-' || !b)
                return okv_cli_usage_error("--prefix-cache-redis-bytes: '%s' must be a positive byte count", v);
            o->prefix_cache_redis_bytes = (uint64_t)b;
        } else if (!strcmp(a, "--prefill-chunk")) {
            if (!okv_cli_parse_int(v, 1, 1 << 20, &o->prefill_chunk)) return okv_cli_usage_error("--prefill-chunk: '%s' must be a positive integer", v);
        } else if (!strcmp(a, "--max-tokens")) {
            if (!okv_cli_parse_int(v, 1, 1 << 30, &o->max_tokens_default)) return okv_cli_usage_error("--max-tokens: '%s' must be a positive integer", v);
        } else if (!strcmp(a, "--shutdown-grace")) {
            if (!okv_cli_parse_int(v, 0, 3600, &n)) return okv_cli_usage_error("--shutdown-grace: '%s' must be seconds in [0, 3600]", v);
            o->shutdown_grace_s = n;
        } else if (!strcmp(a, "--max-connections")) {
            if (!okv_cli_parse_int(v, 1, 65536, &o->max_connections))
                return okv_cli_usage_error("--max-connections: '%s' must be in [1, 65536]", v);
        } else if (!strcmp(a, "--max-connections-per-ip")) {
            if (!okv_cli_parse_int(v, 0, 65536, &o->max_connections_per_ip))
                return okv_cli_usage_error("--max-connections-per-ip: '%s' must be in [0, 65536] (0 = no cap)", v);
        } else if (!strcmp(a, "--idle-timeout")) {
            if (!okv_cli_parse_int(v, 1, 3600, &o->idle_timeout_s))
                return okv_cli_usage_error("--idle-timeout: '%s' must be seconds in [1, 3600]", v);
        } else return okv_cli_usage_error("serve: unknown option '%s'", a);
    }
    if (!o->program_path) return okv_cli_usage_error("usage: offkv serve PROGRAM.okv [--host 127.0.0.1] [--port 8080] [options]%s", "");
    o->cache = run->cache;
    o->runner = run->runner;
    o->program = run->program;
    return 0;
}

/* The server's notes (a skipped prefix-cache file, ...), one stderr line each. */
static void log_line(void *ctx, const char *line) {
    (void)ctx;
    fprintf(stderr, "offkv: %s\n", line);
}

int okv_cli_serve(int argc, char **argv) {
    okv_server_options o;
    okv_server_options_default(&o);
    o.port = 8080;
    o.log = log_line;
    okv_cli_run_opts run;
    int rc = parse_serve_args(argc, argv, &o, &run);
    if (rc) return rc;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    okv_server *s = NULL;
    okv_error err = {0};
    if (okv_server_start(&o, &s, &err)) return okv_cli_die(&err);
    fprintf(stderr, "offkv: serving %s on http://%s:%d (%d parallel; Ctrl-C stops)\n", o.program_path,
            o.host ? o.host : "127.0.0.1", okv_server_port(s), o.parallel);
    int sig = 0;
    sigwait(&set, &sig);
    fprintf(stderr, "offkv: %s: stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    okv_server_stop(s);
    okv_server_free(s);
    fprintf(stderr, "offkv: stopped\n");
    return 0;
}
