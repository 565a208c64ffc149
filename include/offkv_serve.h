/* offkv_serve.h — `offkv serve`: an OpenAI-compatible HTTP server over one
 * program (POST /v1/chat/completions, POST /v1/completions, POST
 * /v1/responses, GET /v1/models, GET /health, GET /metrics). It is a layer above generation and uses only
 * the public API: one scheduler thread runs up to `parallel` sequences of
 * one cell-pool cache key with continuous batching (one
 * okv_runner_step_batch per iteration: every decoding sequence's next
 * token plus a bounded chunk of pending prompt tokens); a prompt starting
 * with ids a running or finished sequence holds forks those cells
 * (okv_seq_fork, zero copy) and prefills only the rest
 * (usage.prompt_tokens_details.cached_tokens); finished sequences are kept
 * as an LRU prefix cache. With prefix_cache_dir those entries outlive the
 * process: written to the directory (okv_seq_save) when evicted from memory
 * and at a graceful stop (or as each request ends, when several servers
 * share the directory), indexed at start and whenever the directory
 * changed, and loaded (okv_seq_load) instead of prefilled when a prompt
 * starts with one. With prefix_cache_redis the same state bytes go to a
 * Redis server shared by replicas on several machines.
 *
 * Connections are bounded (max_connections, max_connections_per_ip,
 * idle_timeout_s). A client that half-closes its socket after sending a
 * request (shutdown(SHUT_WR), `nc -N`) still gets the whole reply; one that
 * closes it (or resets it) has its request cancelled.
 *
 * The server binds the given IPv4 address (tests and the default: 127.0.0.1)
 * and answers on libmicrohttpd's threads; nothing here prints (notes go to
 * the options' log callback). */
#ifndef OFFKV_SERVE_H
#define OFFKV_SERVE_H

#include <stdbool.h>
#include <stdint.h>

#include "offkv.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct okv_server_options {
    const char *program_path;
    const char *model_name;      /* "model" in responses; NULL = the file name without .okv */
    const char *host;            /* IPv4 address to bind; NULL = 127.0.0.1 */
    int port;                    /* 0 = any free port (see okv_server_port) */
    int parallel;                /* sequences served at once (default 4) */
    int ctx_per_seq;             /* positions per sequence (0 = the program's max_ctx_len; more is refused, as is
                                    a parallel x ctx_per_seq plan under one step or past physical memory) */
    int max_queue;               /* requests waiting for a slot before 429 (default 64) */
    size_t max_body_bytes;       /* request bodies over this get 413 (default 1 MiB) */
    int prefill_chunk;           /* largest prefill step between other sequences' decode steps (default 64) */
    int max_tokens_default;      /* when a request sets none (0 = up to the context) */
    double shutdown_grace_s;     /* on stop, running requests may finish for this long; then each ends as if at
                                    max_tokens (finish_reason "length", what was generated so far), or, with
                                    no token yet, with 503 (default 5) */
    int max_connections;         /* open client connections (default 256); past it new ones wait in the backlog */
    int max_connections_per_ip;  /* open connections from one client address (default 64; 0 = no own cap);
                                    past it a new connection is closed at once */
    int idle_timeout_s;          /* seconds a connection may stay silent while the client is to act: sending
                                    its request, reading a finished reply, keep-alive between requests
                                    (default 15); never while the server is still producing the reply */
    size_t prefix_cache_bytes;   /* K/V bytes finished sequences may keep as prefix-cache entries (0 = as
                                    many as the pool holds; evicted LRU when cells are needed) */
    const char *api_key;         /* NULL = no authentication; else "Authorization: Bearer KEY" on /v1 and /metrics */
    const char *chat_template_path; /* NULL = the program's own chat template; else a Jinja file used instead
                                       (a template with tools for a model whose own has none) */
    const char *cors_origin;     /* NULL = no CORS headers; else an origin or "*": every response carries
                                    Access-Control-Allow-Origin, and OPTIONS (a browser's preflight) is
                                    answered 204 with Access-Control-Allow-* before the API key is checked */
    const char *prefix_cache_dir; /* NULL = prefix-cache entries live in memory only; else a directory (created if
                                    missing) keeping them across restarts, one sequence state file per entry */
    uint64_t prefix_cache_dir_bytes; /* files in prefix_cache_dir (every server's) beyond this are removed, least
                                        recently used first (0 = 1 GiB) */
    bool prefix_cache_dir_shared;  /* several servers share prefix_cache_dir: every entry is written as its request
                                      ends (not only when evicted), so the others find it at once */
    const char *prefix_cache_redis; /* NULL = no Redis tier; else "HOST:PORT" of a Redis server holding entries
                                       (the state-file bytes) keyed by program and token prefix, fetched when
                                       memory and the directory miss, written as each request ends */
    int prefix_cache_redis_ttl_s;  /* seconds a Redis entry lives after it is written (0 = 3600) */
    uint64_t prefix_cache_redis_bytes; /* > 0: set the Redis server's maxmemory to this with allkeys-lru eviction
                                          (CONFIG SET at connect); 0 = leave its configuration alone */
    void (*log)(void *ctx, const char *line); /* one line per note (a skipped file, ...); NULL = silent */
    void *log_ctx;
    okv_cache_options cache;     /* max_capacity is replaced by ctx_per_seq */
    okv_runner_options runner;
    okv_program_options program; /* where the weights live (default: huge pages where granted) */
} okv_server_options;

typedef struct okv_server okv_server;

void okv_server_options_default(okv_server_options *o);
/* Loads the program and tokenizer, builds the slots, binds and starts
 * answering. */
okv_status okv_server_start(const okv_server_options *o, okv_server **out, okv_error *err);
/* The port actually bound. */
int okv_server_port(const okv_server *s);
/* Graceful stop: refuses new requests (503), lets running streams finish for
 * shutdown_grace_s, cancels the rest, stops the threads. */
void okv_server_stop(okv_server *s);
void okv_server_free(okv_server *s);

#ifdef __cplusplus
}
#endif
#endif
