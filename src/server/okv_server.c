/* okv_server.c — the HTTP side of `offkv serve` (libmicrohttpd, one thread
 * per connection): routing, the API key, body limits, OpenAI-shaped errors,
 * and handing admitted requests to the scheduler. A streamed reply is a
 * callback response that waits for the scheduler's SSE events; when the
 * client goes away libmicrohttpd frees that response, which marks the
 * request cancelled so the scheduler drops its sequence at its next turn.
 * A non-streamed reply waits for the whole body in the connection's thread,
 * polling the socket so a hang-up cancels it too. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <microhttpd.h>

#include "okv_server.h"

#define JSON_TYPE "application/json"

static okv_status fail(okv_error *err, okv_status st, const char *fmt, const char *a, const char *b) {
    err->status = st;
    snprintf(err->message, sizeof err->message, fmt, a ? a : "", b ? b : "");
    return st;
}

void okv_server_options_default(okv_server_options *o) {
    memset(o, 0, sizeof *o);
    o->parallel = 4;
    o->max_queue = 64;
    o->max_body_bytes = 1 << 20;
    o->prefill_chunk = 64;
    o->shutdown_grace_s = 5;
    okv_cache_options_default(&o->cache);
    okv_runner_options_default(&o->runner);
    okv_program_options_default(&o->program);
}

/* ---- responses -------------------------------------------------------------------- */

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, const char *type, const char *body, size_t len) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, "Content-Type", type);
    enum MHD_Result ret = MHD_queue_response(c, status, resp);
    MHD_destroy_response(resp);
    return ret;
}

static enum MHD_Result reply_error(struct MHD_Connection *c, unsigned status, const char *message, const char *param) {
    const char *type = status == 401 ? "authentication_error" : status == 429 ? "rate_limit_error"
                     : status >= 500 ? "server_error" : "invalid_request_error";
    char *body = srv_error_json(message, type, param);
    enum MHD_Result ret = body ? reply(c, status, JSON_TYPE, body, strlen(body)) : MHD_NO;
    free(body);
    return ret;
}

static enum MHD_Result reply_json(struct MHD_Connection *c, char *body) {
    enum MHD_Result ret = body ? reply(c, 200, JSON_TYPE, body, strlen(body)) : MHD_NO;
    free(body);
    return ret;
}

/* ---- streaming -------------------------------------------------------------------- */

/* Waits on r->cond (r->lock held) for at most ms milliseconds. */
static void wait_a_while(srv_request *r, long ms) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += ms * 1000000L;
    if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
    pthread_cond_timedwait(&r->cond, &r->lock, &ts);
}

static ssize_t read_events(void *cls, uint64_t pos, char *buf, size_t max) {
    srv_request *r = cls;
    pthread_mutex_lock(&r->lock);
    while (r->out_sent == r->out.len && !r->done) wait_a_while(r, 200);
    size_t n = r->out.len - r->out_sent;
    if (n > max) n = max;
    ssize_t ret = n ? (ssize_t)n : MHD_CONTENT_READER_END_OF_STREAM;
    if (n) memcpy(buf, r->out.data + r->out_sent, n);
    r->out_sent += n;
    pthread_mutex_unlock(&r->lock);
    return ret;
}

/* The response is gone: finished, or the client disconnected. */
static void release_events(void *cls) {
    srv_request *r = cls;
    pthread_mutex_lock(&r->lock);
    if (!r->done) r->cancelled = true;
    pthread_mutex_unlock(&r->lock);
    srv_request_unref(r);
}

/* ---- requests ------------------------------------------------------------------ */

typedef struct conn_state {
    srv_buf body;
    bool too_large;
} conn_state;

static void new_id(srv_request *r, const char *prefix) {
    static unsigned long long counter;
    unsigned long long n = __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
    snprintf(r->id, sizeof r->id, "%s-%llx%06llx", prefix, (unsigned long long)time(NULL), n);
    r->created = (long long)time(NULL);
}

/* Waits for a non-streamed reply; a client that hangs up meanwhile cancels it. */
static void wait_done(struct MHD_Connection *c, srv_request *r) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    struct pollfd pfd = {.fd = ci ? ci->connect_fd : -1, .events = POLLRDHUP};
    pthread_mutex_lock(&r->lock);
    while (!r->done) {
        wait_a_while(r, 100);
        if (!r->done && pfd.fd >= 0 && poll(&pfd, 1, 0) > 0 && (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR))) r->cancelled = true;
    }
    pthread_mutex_unlock(&r->lock);
}

static enum MHD_Result completions(okv_server *s, struct MHD_Connection *c, srv_kind kind, const conn_state *cs) {
    srv_request *r = srv_request_new();
    if (!r) return reply_error(c, 500, "out of memory", NULL);
    char msg[1024];
    const char *param = NULL;
    int status = srv_parse_request(s, kind, cs->body.data ? cs->body.data : "", cs->body.len, r, msg, sizeof msg, &param);
    if (status) { srv_request_unref(r); return reply_error(c, (unsigned)status, msg, param); }
    new_id(r, kind == SRV_CHAT ? "chatcmpl" : "cmpl");
    r->model = s->model_name;
    r->t_submit = srv_now();
    bool stopping = false;
    if (!srv_submit(s, r, &stopping)) {
        srv_request_unref(r);
        if (stopping) return reply_error(c, 503, "the server is shutting down", NULL);
        return reply_error(c, 429, "too many requests are waiting; try again later", NULL);
    }
    if (r->stream) {   /* the response takes our reference */
        struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, read_events, r, release_events);
        if (!resp) { release_events(r); return MHD_NO; }
        MHD_add_response_header(resp, "Content-Type", "text/event-stream");
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
        enum MHD_Result ret = MHD_queue_response(c, 200, resp);
        MHD_destroy_response(resp);
        return ret;
    }
    wait_done(c, r);
    enum MHD_Result ret;
    if (r->error[0]) ret = reply_error(c, strcmp(r->error, "the server is shutting down") ? 500 : 503, r->error, NULL);
    else if (r->out.oom) ret = reply_error(c, 500, "out of memory", NULL);
    else ret = reply(c, 200, JSON_TYPE, r->out.data, r->out.len);
    srv_request_unref(r);
    return ret;
}

static bool authorized(okv_server *s, struct MHD_Connection *c) {
    if (!s->o.api_key) return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    return h && !strncmp(h, "Bearer ", 7) && !strcmp(h + 7, s->o.api_key);
}

static enum MHD_Result route(okv_server *s, struct MHD_Connection *c, const char *url, const char *method, conn_state *cs) {
    bool get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
    if (!strcmp(url, "/health")) {
        if (!get) return reply_error(c, 405, "use GET", NULL);
        pthread_mutex_lock(&s->lock);
        bool stopping = s->stopping;
        pthread_mutex_unlock(&s->lock);
        const char *body = stopping ? "{\"status\":\"stopping\"}" : "{\"status\":\"ok\"}";
        return reply(c, stopping ? 503 : 200, JSON_TYPE, body, strlen(body));
    }
    bool known = !strcmp(url, "/metrics") || !strcmp(url, "/v1/models") || !strcmp(url, "/v1/chat/completions") ||
                 !strcmp(url, "/v1/completions");
    if (!known) return reply_error(c, 404, "no such endpoint", NULL);
    if (!authorized(s, c)) return reply_error(c, 401, "invalid or missing API key (Authorization: Bearer KEY)", NULL);
    if (!strcmp(url, "/metrics")) {
        if (!get) return reply_error(c, 405, "use GET", NULL);
        char *text = srv_metrics_text(s);
        enum MHD_Result ret = text ? reply(c, 200, "text/plain; version=0.0.4", text, strlen(text)) : MHD_NO;
        free(text);
        return ret;
    }
    if (!strcmp(url, "/v1/models")) return get ? reply_json(c, srv_models_json(s)) : reply_error(c, 405, "use GET", NULL);
    if (!post) return reply_error(c, 405, "use POST", NULL);
    if (cs->too_large) {
        char msg[128];
        snprintf(msg, sizeof msg, "the request body is larger than %zu bytes", s->o.max_body_bytes);
        return reply_error(c, 413, msg, NULL);
    }
    return completions(s, c, strcmp(url, "/v1/chat/completions") ? SRV_COMPLETION : SRV_CHAT, cs);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    okv_server *s = cls;
    conn_state *cs = *con_cls;
    if (!cs) {   /* headers only: set up, refuse a declared oversize body without reading it */
        cs = calloc(1, sizeof *cs);
        if (!cs) return MHD_NO;
        *con_cls = cs;
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > s->o.max_body_bytes) cs->too_large = true;
        return MHD_YES;
    }
    if (*upload_size) {
        if (cs->body.len + *upload_size > s->o.max_body_bytes) cs->too_large = true;
        if (!cs->too_large) srv_buf_put(&cs->body, upload, *upload_size);
        *upload_size = 0;
        return MHD_YES;
    }
    if (cs->body.oom) return reply_error(c, 500, "out of memory", NULL);
    return route(s, c, url, method, cs);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    conn_state *cs = *con_cls;
    if (!cs) return;
    srv_buf_free(&cs->body);
    free(cs);
    *con_cls = NULL;
}

/* ---- lifecycle ------------------------------------------------------------------ */

static char *blob_text(const okv_program *p, const char *name) {
    size_t len = 0;
    const char *b = okv_program_blob(p, name, &len);
    return b ? strndup(b, len) : NULL;
}

/* The file name without directories and ".okv". */
static char *default_model_name(const char *path) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t n = strlen(base);
    if (n > 4 && !strcmp(base + n - 4, ".okv")) n -= 4;
    return strndup(base, n);
}

static okv_status load_model(okv_server *s, okv_error *err) {
    okv_status st = okv_program_open_with(s->o.program_path, &s->o.program, &s->program, err);
    if (st) return st;
    okv_program_get_info(s->program, &s->info);
    size_t len = 0;
    const char *tj = okv_program_blob(s->program, "tokenizer.json", &len);
    if (!tj) return fail(err, OKV_ERR_NOT_FOUND, "%s: the program has no bundled tokenizer%s", s->o.program_path, NULL);
    st = okv_tok_load_json(tj, len, &s->tok, err);
    if (!st) st = okv_gen_check_tokenizer(s->program, s->tok, err);
    if (st) return st;
    s->tok_config = blob_text(s->program, "tokenizer_config.json");
    s->chat_template = blob_text(s->program, "chat_template.jinja");
    okv_chat_config cfg = {0};
    okv_error e2;
    const char *tmpl = s->chat_template;
    if (!tmpl && s->tok_config && !okv_chat_config_parse(s->tok_config, &cfg, &e2)) tmpl = cfg.chat_template;
    s->think_template = tmpl && strstr(tmpl, "<think>");
    okv_chat_config_free(&cfg);
    if (s->o.ctx_per_seq <= 0 || s->o.ctx_per_seq > s->info.max_ctx_len) s->o.ctx_per_seq = s->info.max_ctx_len;
    return OKV_OK;
}

/* The cell-pool key all sequences share: ctx_per_seq positions each for
 * `parallel` running sequences (so running ones never wait for cells),
 * ids for as many more kept prefix entries; one runner returning a logits
 * row per running sequence. */
static okv_status make_key(okv_server *s, okv_error *err) {
    okv_cache_options co = s->o.cache;
    co.mode = OKV_CACHE_CELLS;
    co.max_capacity = s->o.ctx_per_seq;
    int64_t cells = (int64_t)s->o.parallel * s->o.ctx_per_seq;
    co.n_cells = cells > (1 << 30) ? 1 << 30 : (int)cells;
    co.max_seqs = s->o.parallel * 2 + 16 < OKV_MAX_SEQS ? s->o.parallel * 2 + 16 : OKV_MAX_SEQS;
    co.initial_capacity = co.n_cells < 256 ? co.n_cells : 256;
    s->step_tokens = s->info.prefill_chunk_size;
    s->max_running = s->o.parallel < s->step_tokens ? s->o.parallel : s->step_tokens;
    okv_runner_options ro = s->o.runner;
    ro.max_logit_rows = s->max_running;
    snprintf(s->key, sizeof s->key, "serve-%p", (void *)s);
    okv_status st = okv_cache_install(s->key, s->program, &co, err);
    if (st) { s->key[0] = 0; return st; }
    size_t bytes = 0;
    okv_error e;
    s->bytes_per_cell = okv_cache_bytes(s->key, &bytes, &e) ? 0 : (double)bytes / co.initial_capacity;
    st = okv_runner_create(s->program, s->key, &ro, &s->runner, err);
    if (st) return st;
    s->n_slots = co.max_seqs;
    s->slots = calloc((size_t)s->n_slots, sizeof *s->slots);
    size_t T = (size_t)s->step_tokens;
    s->b_ids = malloc(T * sizeof(int32_t));
    s->b_seqs = malloc(T * sizeof(int32_t));
    s->b_pos = malloc(T * sizeof(int32_t));
    s->b_rows = malloc(T * sizeof(int32_t));
    s->b_slot = malloc(T * sizeof(int));
    s->b_n = malloc(T * sizeof(int));
    s->b_logits = malloc((size_t)s->max_running * (size_t)s->info.vocab_size * sizeof(float));
    if (!s->slots || !s->b_ids || !s->b_seqs || !s->b_pos || !s->b_rows || !s->b_slot || !s->b_n || !s->b_logits)
        return fail(err, OKV_ERR_NOMEM, "out of memory%s%s", NULL, NULL);
    for (int i = 0; i < s->n_slots; i++) s->slots[i].seq = -1;
    return okv_gen_defaults_get(s->runner, s->tok, &s->defaults, err);
}

static okv_status start_http(okv_server *s, okv_error *err) {
    struct sockaddr_in addr = {0};
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)s->o.port);
    const char *host = s->o.host ? s->o.host : "127.0.0.1";
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1)
        return fail(err, OKV_ERR_INVALID, "host '%s' is not an IPv4 address%s", host, NULL);
    s->daemon = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION, 0, NULL, NULL, on_request, s,
                                 MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
                                 MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                                 MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)600,
                                 MHD_OPTION_END);
    if (!s->daemon) return fail(err, OKV_ERR_IO, "cannot listen on %s (port in use or not permitted?)%s", host, NULL);
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = info ? info->port : s->o.port;
    return OKV_OK;
}

okv_status okv_server_start(const okv_server_options *o, okv_server **out, okv_error *err) {
    *out = NULL;
    if (!o->program_path) return fail(err, OKV_ERR_INVALID, "no program given%s%s", NULL, NULL);
    if (o->parallel < 1 || o->parallel > 256 || o->max_queue < 0 || o->prefill_chunk < 0)
        return fail(err, OKV_ERR_INVALID, "parallel must be in [1, 256], max_queue and prefill_chunk >= 0%s%s", NULL, NULL);
    okv_server *s = calloc(1, sizeof *s);
    if (!s) return fail(err, OKV_ERR_NOMEM, "out of memory%s%s", NULL, NULL);
    s->o = *o;
    pthread_mutex_init(&s->lock, NULL);
    pthread_mutex_init(&s->tok_lock, NULL);
    pthread_cond_init(&s->wake, NULL);
    s->model_name = o->model_name ? strdup(o->model_name) : default_model_name(o->program_path);
    okv_status st = s->model_name ? load_model(s, err) : fail(err, OKV_ERR_NOMEM, "out of memory%s%s", NULL, NULL);
    if (!st) st = make_key(s, err);
    if (!st) st = srv_dir_open(s, err);
    if (!st) st = srv_sched_start(s, err);
    if (!st) st = start_http(s, err);
    if (st) { okv_server_free(s); return st; }
    *out = s;
    return OKV_OK;
}

int okv_server_port(const okv_server *s) { return s->port; }

void okv_server_stop(okv_server *s) {
    if (!s || s->stopped) return;
    srv_sched_stop(s);      /* every request is done once this returns */
    if (s->daemon) MHD_stop_daemon(s->daemon);
    s->daemon = NULL;
    s->stopped = true;
}

void okv_server_free(okv_server *s) {
    if (!s) return;
    okv_server_stop(s);
    for (int i = 0; s->slots && i < s->n_slots; i++) free(s->slots[i].ids);
    srv_dir_free(s);
    okv_runner_free(s->runner);
    okv_error e;
    if (s->key[0]) okv_cache_remove(s->key, &e);
    free(s->slots);
    free(s->b_ids);
    free(s->b_seqs);
    free(s->b_pos);
    free(s->b_rows);
    free(s->b_slot);
    free(s->b_n);
    free(s->b_logits);
    free(s->queue);
    okv_grammar_vocab_free(s->grammar_vocab);
    okv_tok_free(s->tok);
    okv_program_free(s->program);
    free(s->tok_config);
    free(s->chat_template);
    free(s->model_name);
    pthread_mutex_destroy(&s->lock);
    pthread_mutex_destroy(&s->tok_lock);
    pthread_cond_destroy(&s->wake);
    free(s);
}
