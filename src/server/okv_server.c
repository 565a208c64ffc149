/* okv_server.c — the HTTP side of `offkv serve` (libmicrohttpd, one thread
 * per connection): routing, the API key, body limits, OpenAI-shaped errors,
 * and handing admitted requests to the scheduler. A streamed reply is a
 * callback response that waits for the scheduler's SSE events; when the
 * client goes away libmicrohttpd frees that response, which marks the
 * request cancelled so the scheduler drops its sequence at its next turn.
 * A non-streamed reply waits for the whole body in the connection's thread,
 * watching the socket so a hang-up cancels it too (a half-close does not:
 * see client_gone).
 *
 * Connections: the listening socket is okv_server_gate.c's, which hands
 * libmicrohttpd only those that start like an HTTP request (400 to the
 * rest). libmicrohttpd caps the open connections and those of one client
 * address, and closes a connection idle for idle_timeout_s;
 * that timeout is lifted while the server produces a reply (a queued
 * request, a long prefill or the gaps of a stream are the server's silence,
 * not the client's) and restored once the reply is ready to send. A body
 * declared over max_body_bytes is refused (413) from its headers, before
 * any of it is read; chunked request bodies are refused (411): their size
 * is unknown until sent.
 *
 * CORS (cors_origin set): every libmicrohttpd response (not the gate's 400)
 * carries Access-Control-Allow-Origin (reply headers look the server up
 * from the connection's socket context, set for each handed-over connection),
 * and an OPTIONS preflight is answered 204 before routing and the API key. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

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
    o->max_connections = 256;
    o->max_connections_per_ip = 64;
    o->idle_timeout_s = 15;
    okv_cache_options_default(&o->cache);
    okv_runner_options_default(&o->runner);
    okv_program_options_default(&o->program);
}

/* ---- responses -------------------------------------------------------------------- */

/* Access-Control-Allow-Origin when the server has a cors_origin. */
static void add_cors(struct MHD_Connection *c, struct MHD_Response *resp) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    const okv_server *s = ci ? ci->socket_context : NULL;
    if (!s || !s->o.cors_origin) return;
    MHD_add_response_header(resp, "Access-Control-Allow-Origin", s->o.cors_origin);
    if (strcmp(s->o.cors_origin, "*")) MHD_add_response_header(resp, "Vary", "Origin");
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, const char *type, const char *body, size_t len) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, "Content-Type", type);
    add_cors(c, resp);
    enum MHD_Result ret = MHD_queue_response(c, status, resp);
    MHD_destroy_response(resp);
    return ret;
}

static enum MHD_Result reply_error_code(struct MHD_Connection *c, unsigned status, const char *message, const char *param,
                                        const char *code) {
    const char *type = status == 401 ? "authentication_error" : status == 429 ? "rate_limit_error"
                     : status >= 500 ? "server_error" : "invalid_request_error";
    char *body = srv_error_json_code(message, type, param, code);
    enum MHD_Result ret = body ? reply(c, status, JSON_TYPE, body, strlen(body)) : MHD_NO;
    free(body);
    return ret;
}

static enum MHD_Result reply_error(struct MHD_Connection *c, unsigned status, const char *message, const char *param) {
    return reply_error_code(c, status, message, param, NULL);
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

/* The connection's idle timeout (0 = none), see the head comment. */
static void set_idle_timeout(struct MHD_Connection *c, unsigned seconds) {
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, seconds);
}

/* A streamed reply: its request, and its connection, whose idle timeout
 * comes back once the request is done (then only sending is left). */
typedef struct stream_reader {
    srv_request *r;
    struct MHD_Connection *c;
    unsigned idle_timeout_s;
    bool timeout_restored;
} stream_reader;

static ssize_t read_events(void *cls, uint64_t pos, char *buf, size_t max) {
    stream_reader *sr = cls;
    srv_request *r = sr->r;
    pthread_mutex_lock(&r->lock);
    while (r->out_sent == r->out.len && !r->done) wait_a_while(r, 200);
    size_t n = r->out.len - r->out_sent;
    if (n > max) n = max;
    ssize_t ret = n ? (ssize_t)n : MHD_CONTENT_READER_END_OF_STREAM;
    if (n) memcpy(buf, r->out.data + r->out_sent, n);
    r->out_sent += n;
    bool done = r->done;
    pthread_mutex_unlock(&r->lock);
    if (done && !sr->timeout_restored) {   /* (this runs in the connection's thread) */
        set_idle_timeout(sr->c, sr->idle_timeout_s);
        sr->timeout_restored = true;
    }
    return ret;
}

/* Our reference to r dropped; a request not done by then is cancelled. */
static void release_request(srv_request *r) {
    pthread_mutex_lock(&r->lock);
    if (!r->done) r->cancelled = true;
    pthread_mutex_unlock(&r->lock);
    srv_request_unref(r);
}

/* The response is gone: finished, or the client disconnected. */
static void release_events(void *cls) {
    stream_reader *sr = cls;
    release_request(sr->r);
    free(sr);
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

/* The socket of a non-streamed request's client, watched while its reply is made. */
typedef struct hangup_watch {
    int fd;            /* -1 = not known: never gone */
    bool eof_seen;     /* the client sent FIN: closed, or only half-closed */
    bool may_probe;    /* HTTP/1.1: an interim 1xx reply may be sent */
} hangup_watch;

#define INTERIM_REPLY "HTTP/1.1 100 Continue\r\n\r\n"

/* Whether the client is gone. Its read side at EOF alone does not say so:
 * shutdown(SHUT_WR) after the request (nc -N) and close() look the same
 * until something is written. So at the first EOF an HTTP/1.1 client is
 * sent an interim "100 Continue" (clients skip 1xx replies; nothing of
 * this request has been written yet): a closed socket answers it with a
 * reset, seen as POLLHUP/POLLERR or a failed send, a half-closed one reads
 * it and gets the reply after it. After EOF only those are watched; an
 * HTTP/1.0 client gets no probe, so its close is noticed when the reply is
 * written. */
static bool client_gone(hangup_watch *w) {
    if (w->fd < 0) return false;
    struct pollfd pfd = {.fd = w->fd, .events = w->eof_seen ? 0 : POLLRDHUP};
    if (poll(&pfd, 1, 0) <= 0) return false;
    if (pfd.revents & (POLLHUP | POLLERR | POLLNVAL)) return true;
    if (!(pfd.revents & POLLRDHUP) || w->eof_seen) return false;
    w->eof_seen = true;
    if (!w->may_probe) return false;
    ssize_t n = send(w->fd, INTERIM_REPLY, sizeof INTERIM_REPLY - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    return n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

/* Waits for a non-streamed reply; a client that hangs up meanwhile cancels it. */
static void wait_done(struct MHD_Connection *c, const char *version, srv_request *r) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    hangup_watch w = {.fd = ci ? ci->connect_fd : -1, .may_probe = version && !strcmp(version, MHD_HTTP_VERSION_1_1)};
    pthread_mutex_lock(&r->lock);
    while (!r->done) {
        wait_a_while(r, 100);
        if (!r->done && !r->cancelled && client_gone(&w)) r->cancelled = true;
    }
    pthread_mutex_unlock(&r->lock);
}

/* The X-Prompt-Cache-Key header, the affinity key a load balancer hashes
 * on (deploy/nginx: nginx cannot read prompt_cache_key from a JSON body),
 * hashed into r->affinity (a prompt_cache_key in the body, parsed later,
 * wins); absent is fine, one longer than SRV_MAX_AFFINITY bytes or holding
 * control bytes is refused (false). */
static bool read_affinity_header(struct MHD_Connection *c, srv_request *r) {
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, SRV_AFFINITY_HEADER);
    if (!h) return true;
    size_t n = strlen(h);
    if (n > SRV_MAX_AFFINITY) return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)h[i] < 0x20 || h[i] == 0x7f) return false;
    r->affinity = srv_affinity_hash(h);
    return true;
}

static enum MHD_Result completions(okv_server *s, struct MHD_Connection *c, const char *version, srv_kind kind,
                                   const conn_state *cs) {
    srv_request *r = srv_request_new();
    if (!r) return reply_error(c, 500, "out of memory", NULL);
    char msg[1024];
    const char *param = NULL, *body = cs->body.data ? cs->body.data : "";
    /* the prefix-cache affinity a router hashes on; the body's prompt_cache_key wins */
    if (!read_affinity_header(c, r)) {
        srv_request_unref(r);
        return reply_error(c, 400, "the " SRV_AFFINITY_HEADER " header must be at most 256 bytes without control "
                           "characters", SRV_AFFINITY_HEADER);
    }
    int status = kind == SRV_RESPONSE ? srv_parse_responses(s, body, cs->body.len, r, msg, sizeof msg, &param)
                                      : srv_parse_request(s, kind, body, cs->body.len, r, msg, sizeof msg, &param);
    if (status) {   /* param may point into r (a tool's field name): reply first */
        enum MHD_Result ret = reply_error_code(c, (unsigned)status, msg, param, r->err_code);
        srv_request_unref(r);
        return ret;
    }
    new_id(r, kind == SRV_CHAT ? "chatcmpl" : kind == SRV_RESPONSE ? "resp" : "cmpl");
    r->model = s->model_name;
    if (kind == SRV_RESPONSE) srv_resp_begin(r);
    r->t_submit = srv_now();
    bool stopping = false;
    if (!srv_submit(s, r, &stopping)) {
        srv_request_unref(r);
        if (stopping) return reply_error(c, 503, SRV_SHUTTING_DOWN, NULL);
        return reply_error(c, 429, "too many requests are waiting; try again later", NULL);
    }
    set_idle_timeout(c, 0);   /* the server's turn: restored when the reply is ready */
    if (r->stream) {   /* the response takes our reference */
        stream_reader *sr = calloc(1, sizeof *sr);
        if (!sr) { release_request(r); return MHD_NO; }
        *sr = (stream_reader){.r = r, .c = c, .idle_timeout_s = (unsigned)s->o.idle_timeout_s};
        struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, read_events, sr, release_events);
        if (!resp) { release_events(sr); return MHD_NO; }
        MHD_add_response_header(resp, "Content-Type", "text/event-stream");
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
        add_cors(c, resp);
        enum MHD_Result ret = MHD_queue_response(c, 200, resp);
        MHD_destroy_response(resp);
        return ret;
    }
    wait_done(c, version, r);
    set_idle_timeout(c, (unsigned)s->o.idle_timeout_s);
    enum MHD_Result ret;
    if (r->error[0]) ret = reply_error(c, strcmp(r->error, SRV_SHUTTING_DOWN) ? 500 : 503, r->error, NULL);
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

static enum MHD_Result reply_too_large(okv_server *s, struct MHD_Connection *c) {
    char msg[128];
    snprintf(msg, sizeof msg, "the request body is larger than %zu bytes", s->o.max_body_bytes);
    return reply_error(c, 413, msg, NULL);
}

static enum MHD_Result route(okv_server *s, struct MHD_Connection *c, const char *url, const char *method,
                             const char *version, conn_state *cs) {
    /* HEAD is GET without the body (libmicrohttpd sends the headers only) */
    bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD"), post = !strcmp(method, "POST");
    if (!strcmp(url, "/health")) {
        if (!get) return reply_error(c, 405, "use GET or HEAD", NULL);
        pthread_mutex_lock(&s->lock);
        bool stopping = s->stopping;
        pthread_mutex_unlock(&s->lock);
        const char *body = stopping ? "{\"status\":\"stopping\"}" : "{\"status\":\"ok\"}";
        return reply(c, stopping ? 503 : 200, JSON_TYPE, body, strlen(body));
    }
    bool known = !strcmp(url, "/metrics") || !strcmp(url, "/v1/models") || !strcmp(url, "/v1/chat/completions") ||
                 !strcmp(url, "/v1/completions") || !strcmp(url, "/v1/responses");
    if (!known) return reply_error(c, 404, "no such endpoint", NULL);
    if (!authorized(s, c)) return reply_error(c, 401, "invalid or missing API key (Authorization: Bearer KEY)", NULL);
    if (!strcmp(url, "/metrics")) {
        if (!get) return reply_error(c, 405, "use GET or HEAD", NULL);
        char *text = srv_metrics_text(s);
        enum MHD_Result ret = text ? reply(c, 200, "text/plain; version=0.0.4", text, strlen(text)) : MHD_NO;
        free(text);
        return ret;
    }
    if (!strcmp(url, "/v1/models")) return get ? reply_json(c, srv_models_json(s)) : reply_error(c, 405, "use GET or HEAD", NULL);
    if (!post) return reply_error(c, 405, "use POST", NULL);
    if (cs->too_large) return reply_too_large(s, c);
    srv_kind kind = !strcmp(url, "/v1/chat/completions") ? SRV_CHAT : !strcmp(url, "/v1/responses") ? SRV_RESPONSE : SRV_COMPLETION;
    return completions(s, c, version, kind, cs);
}

/* A browser's CORS preflight: 204, the methods and the headers it asked for
 * (Authorization, Content-Type and X-Prompt-Cache-Key when it names none). */
static enum MHD_Result reply_preflight(struct MHD_Connection *c) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
    if (!resp) return MHD_NO;
    const char *asked = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Access-Control-Request-Headers");
    add_cors(c, resp);
    MHD_add_response_header(resp, "Access-Control-Allow-Methods", "GET, HEAD, POST, OPTIONS");
    MHD_add_response_header(resp, "Access-Control-Allow-Headers", asked && *asked ? asked : "Authorization, Content-Type, " SRV_AFFINITY_HEADER);
    MHD_add_response_header(resp, "Access-Control-Max-Age", "86400");
    enum MHD_Result ret = MHD_queue_response(c, 204, resp);
    MHD_destroy_response(resp);
    return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    okv_server *s = cls;
    conn_state *cs = *con_cls;
    if (!cs) {   /* headers only: set up; a body refused here is never read (the connection closes after the reply) */
        cs = calloc(1, sizeof *cs);
        if (!cs) return MHD_NO;
        *con_cls = cs;
        __atomic_add_fetch(&s->http_requests, 1, __ATOMIC_RELAXED);
        if (MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING))
            return reply_error(c, 411, "send the request body with a Content-Length (chunked bodies are not accepted)", NULL);
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > s->o.max_body_bytes) return reply_too_large(s, c);
        return MHD_YES;
    }
    if (*upload_size) {
        if (*upload_size > s->o.max_body_bytes - cs->body.len) cs->too_large = true;   /* body.len <= max_body_bytes */
        if (!cs->too_large) srv_buf_put(&cs->body, upload, *upload_size);
        *upload_size = 0;
        return MHD_YES;
    }
    if (s->o.cors_origin && !strcmp(method, "OPTIONS")) return reply_preflight(c);
    if (cs->body.oom) return reply_error(c, 500, "out of memory", NULL);
    return route(s, c, url, method, version, cs);
}

/* Each connection's socket context is the server (add_cors reads it). */
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context, enum MHD_ConnectionNotificationCode toe) {
    (void)c;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) *socket_context = cls;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    okv_server *s = cls;
    conn_state *cs = *con_cls;
    if (!cs) return;
    __atomic_sub_fetch(&s->http_requests, 1, __ATOMIC_RELAXED);
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

/* --chat-template FILE: the file's text replaces the program's template,
 * parsed once here so a template our Jinja subset cannot read is refused
 * at start, naming the file, rather than on every request. */
static okv_status load_chat_template_file(okv_server *s, okv_error *err) {
    char *text = NULL;
    size_t len = 0;
    okv_status st = okv_read_file(s->o.chat_template_path, &text, &len, err);
    if (st) return st;
    if (memchr(text, 0, len)) {
        free(text);
        return fail(err, OKV_ERR_INVALID, "%s (--chat-template): the template holds a NUL byte%s", s->o.chat_template_path, NULL);
    }
    okv_chat_template *t = NULL;
    okv_error e2 = {0};
    st = okv_chat_template_parse(text, &t, &e2);
    okv_chat_template_free(t);
    if (st) {
        free(text);
        err->status = st;
        snprintf(err->message, sizeof err->message, "%.200s (--chat-template): %.800s", s->o.chat_template_path, e2.message);
        return st;
    }
    free(s->chat_template);
    s->chat_template = text;
    return OKV_OK;
}

static okv_status load_model(okv_server *s, okv_error *err) {
    okv_status st = okv_program_open_with(s->o.program_path, &s->o.program, &s->program, err);
    if (st) return st;
    okv_program_get_info(s->program, &s->info);
    srv_fingerprint(s->program, s->fingerprint);
    size_t len = 0;
    const char *tj = okv_program_blob(s->program, "tokenizer.json", &len);
    if (!tj) return fail(err, OKV_ERR_NOT_FOUND, "%s: the program has no bundled tokenizer%s", s->o.program_path, NULL);
    st = okv_tok_load_json(tj, len, &s->tok, err);
    if (!st) st = okv_gen_check_tokenizer(s->program, s->tok, err);
    if (st) return st;
    s->tok_config = blob_text(s->program, "tokenizer_config.json");
    s->chat_template = blob_text(s->program, "chat_template.jinja");
    if (s->o.chat_template_path) {
        st = load_chat_template_file(s, err);
        if (st) return st;
    }
    okv_chat_config cfg = {0};
    okv_error e2;
    const char *tmpl = s->chat_template;
    if (!tmpl && s->tok_config && !okv_chat_config_parse(s->tok_config, &cfg, &e2)) tmpl = cfg.chat_template;
    s->think_template = tmpl && strstr(tmpl, "<think>");
    s->tool_syntax = srv_tools_syntax(tmpl);
    s->template_tools = srv_tools_template_renders(tmpl);
    okv_chat_config_free(&cfg);
    if (s->o.ctx_per_seq > s->info.max_ctx_len) {   /* positions past it have no trained (or exported) meaning */
        err->status = OKV_ERR_INVALID;
        snprintf(err->message, sizeof err->message, "ctx_per_seq (--ctx-per-seq) %d is larger than %s's max context (max_ctx_len %d)",
                 s->o.ctx_per_seq, s->o.program_path, s->info.max_ctx_len);
        return OKV_ERR_INVALID;
    }
    if (s->o.ctx_per_seq <= 0) s->o.ctx_per_seq = s->info.max_ctx_len;
    return OKV_OK;
}

/* The largest step: the program's chunk, or every cell when there are
 * fewer (a few short sequences: --parallel 1 --ctx-per-seq 256 under a
 * 512-token chunk), so steps never need more cells than exist. */
static int step_size(const okv_server *s, int64_t cells) {
    return cells < s->info.prefill_chunk_size ? (int)cells : s->info.prefill_chunk_size;
}

/* Refuses a plan whose cells cannot exist: fewer than --prefill-chunk
 * (one step's prompt tokens) or than --parallel, or (bytes_per_cell known)
 * K/V for every running sequence's whole context beyond the machine's
 * physical memory. */
static okv_status check_plan(const okv_server *s, int64_t cells, okv_error *err) {
    err->status = OKV_ERR_INVALID;
    if (cells < s->o.prefill_chunk || cells < s->o.parallel) {
        snprintf(err->message, sizeof err->message,
                 "parallel (--parallel) %d x ctx_per_seq (--ctx-per-seq) %d = %lld cells is fewer than %s (%d)",
                 s->o.parallel, s->o.ctx_per_seq, (long long)cells,
                 cells < s->o.prefill_chunk ? "one step's prompt tokens, prefill_chunk (--prefill-chunk)" : "the sequences",
                 cells < s->o.prefill_chunk ? s->o.prefill_chunk : s->o.parallel);
        return OKV_ERR_INVALID;
    }
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    double need = s->bytes_per_cell * (double)cells, have = pages > 0 && page > 0 ? (double)pages * (double)page : 0;
    if (have > 0 && need > have) {
        snprintf(err->message, sizeof err->message,
                 "parallel (--parallel) %d x ctx_per_seq (--ctx-per-seq) %d needs %.1f GiB of K/V cache; the machine has %.1f GiB",
                 s->o.parallel, s->o.ctx_per_seq, need / (1 << 30), have / (1 << 30));
        return OKV_ERR_INVALID;
    }
    err->status = OKV_OK;
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
    okv_status st = check_plan(s, cells, err);
    if (st) return st;
    co.n_cells = cells > (1 << 30) ? 1 << 30 : (int)cells;
    co.max_seqs = s->o.parallel * 2 + 16 < OKV_MAX_SEQS ? s->o.parallel * 2 + 16 : OKV_MAX_SEQS;
    co.initial_capacity = co.n_cells < 256 ? co.n_cells : 256;
    s->step_tokens = step_size(s, cells);
    co.max_step = s->step_tokens;
    s->max_running = s->o.parallel < s->step_tokens ? s->o.parallel : s->step_tokens;
    okv_runner_options ro = s->o.runner;
    ro.max_logit_rows = s->max_running;
    okv_session_options so = {.cache = co, .runner = ro};
    st = okv_session_create_for(s->program, &so, &s->session, err);
    if (st) return st;
    snprintf(s->key, sizeof s->key, "%s", okv_session_cache_key(s->session));
    s->runner = okv_session_runner(s->session);
    size_t bytes = 0;
    okv_error e;
    s->bytes_per_cell = okv_cache_bytes(s->key, &bytes, &e) ? 0 : (double)bytes / co.initial_capacity;
    if ((st = check_plan(s, cells, err))) return st;
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
    /* poll(), not select(): a descriptor past FD_SETSIZE must not refuse connections; the
     * gate (okv_server_gate.c) listens and hands over the connections that are HTTP */
    s->daemon = MHD_start_daemon(MHD_USE_POLL_INTERNAL_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_NO_LISTEN_SOCKET |
                                 MHD_USE_ITC, 0, NULL, NULL, on_request, s,
                                 MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                                 MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
                                 MHD_OPTION_CONNECTION_LIMIT, (unsigned)s->o.max_connections,
                                 MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)s->o.max_connections_per_ip,
                                 MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)s->o.idle_timeout_s,
                                 MHD_OPTION_END);
    if (!s->daemon) return fail(err, OKV_ERR_IO, "cannot start the HTTP daemon for %s%s", host, NULL);
    return srv_gate_start(s->daemon, &addr, &s->o, &s->gate, &s->port, err);
}

okv_status okv_server_start(const okv_server_options *o, okv_server **out, okv_error *err) {
    *out = NULL;
    if (!o->program_path) return fail(err, OKV_ERR_INVALID, "no program given%s%s", NULL, NULL);
    if (o->parallel < 1 || o->parallel > 256 || o->max_queue < 0 || o->prefill_chunk < 0)
        return fail(err, OKV_ERR_INVALID, "parallel must be in [1, 256], max_queue and prefill_chunk >= 0%s%s", NULL, NULL);
    if (o->max_connections < 1 || o->max_connections > 65536 || o->max_connections_per_ip < 0 ||
        o->idle_timeout_s < 1 || o->idle_timeout_s > 3600)
        return fail(err, OKV_ERR_INVALID, "max_connections must be in [1, 65536], max_connections_per_ip >= 0, "
                    "idle_timeout_s in [1, 3600]%s%s", NULL, NULL);
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
    if (!st) st = srv_redis_open(s, err);
    if (!st) st = srv_sched_start(s, err);
    if (!st) st = start_http(s, err);
    if (st) { okv_server_free(s); return st; }
    *out = s;
    return OKV_OK;
}

int okv_server_port(const okv_server *s) { return s->port; }

/* Lets the connections' threads send what the scheduler's last turn
 * produced (stopping the daemon closes every connection at once), for at
 * most `seconds`: a client that reads nothing does not hold the stop. */
static void wait_replies_sent(okv_server *s, double seconds) {
    double until = srv_now() + seconds;
    while (__atomic_load_n(&s->http_requests, __ATOMIC_RELAXED) > 0 && srv_now() < until)
        nanosleep(&(struct timespec){.tv_nsec = 10 * 1000000L}, NULL);
}

void okv_server_stop(okv_server *s) {
    if (!s || s->stopped) return;
    srv_sched_stop(s);      /* every request is done once this returns */
    srv_gate_stop(s->gate);
    s->gate = NULL;
    wait_replies_sent(s, 2.0);
    if (s->daemon) MHD_stop_daemon(s->daemon);
    s->daemon = NULL;
    s->stopped = true;
}

void okv_server_free(okv_server *s) {
    if (!s) return;
    okv_server_stop(s);
    for (int i = 0; s->slots && i < s->n_slots; i++) free(s->slots[i].ids);
    srv_dir_free(s);
    srv_redis_free(s);
    okv_session_free(s->session);
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
