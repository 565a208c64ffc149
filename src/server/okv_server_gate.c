/* okv_server_gate.c — the server's listening socket and the first look at
 * each new connection, before libmicrohttpd gets it.
 *
 * One thread accepts connections and holds each until its first bytes say
 * whether it is an HTTP request: optional empty lines, then a method token
 * and a space ("POST "). Those go to libmicrohttpd (MHD_add_connection),
 * which applies the per-client cap and the idle timeout from then on.
 * Anything else (binary, a TLS hello, a request line without a method,
 * which libmicrohttpd would drop silently or wait on until the timeout) is
 * answered 400 at once and closed. Nothing is read here: the bytes are
 * peeked (MSG_PEEK), so libmicrohttpd sees the whole request.
 *
 * Held connections count against the same limits: at most max_connections
 * held or served (past it the listening socket is not polled, so new ones
 * wait in the backlog) and max_connections_per_ip held from one address
 * (past it a new one is closed at once); one silent for idle_timeout_s is
 * closed. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <microhttpd.h>

#include "okv_server.h"

#define GATE_PEEK 32            /* bytes looked at: longer methods are not HTTP for us */
#define GATE_RETRY_S 0.05       /* an undecided connection is looked at again after this */

typedef struct held_conn {
    int fd;
    struct sockaddr_in addr;
    double deadline;            /* closed when still undecided then */
    double next_look;           /* not polled before then (its peeked bytes stay readable) */
} held_conn;

struct srv_gate {
    struct MHD_Daemon *daemon;
    int listen_fd;
    int wake[2];                /* a byte on wake[1] stops the thread */
    int max_connections, per_ip;
    double idle_s;
    held_conn *held;            /* [max_connections] */
    int n_held;
    struct pollfd *pfds;        /* [max_connections + 2] */
    int *pfd_held;              /* [max_connections + 2] held index of each pfd, -1 = not one */
    pthread_t thread;
    bool started;
};

typedef enum first_look { LOOK_HTTP, LOOK_NOT_HTTP, LOOK_UNSURE, LOOK_GONE } first_look;

/* RFC 9110 tchar: what a method token is made of. */
static bool is_tchar(unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* What the first bytes of bytes[0..n) say (n of at most GATE_PEEK). */
static first_look classify(const unsigned char *bytes, size_t n) {
    size_t i = 0;
    while (i < n && (bytes[i] == '\r' || bytes[i] == '\n')) i++;   /* libmicrohttpd skips empty lines */
    size_t start = i;
    while (i < n && is_tchar(bytes[i])) i++;
    if (i < n) return bytes[i] == ' ' && i > start ? LOOK_HTTP : LOOK_NOT_HTTP;
    return n < GATE_PEEK ? LOOK_UNSURE : LOOK_NOT_HTTP;
}

static first_look peek_request(int fd) {
    unsigned char bytes[GATE_PEEK];
    ssize_t n = recv(fd, bytes, sizeof bytes, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) return LOOK_GONE;
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? LOOK_UNSURE : LOOK_GONE;
    return classify(bytes, (size_t)n);
}

/* 400 and close. What the client sent is read away first: closing with
 * unread bytes would reset the connection and could discard the answer. */
static void refuse_not_http(int fd) {
    char *body = srv_error_json("not an HTTP request", "invalid_request_error", NULL);
    size_t len = body ? strlen(body) : 0;
    char head[160];
    int n = snprintf(head, sizeof head, "HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\n\r\n", len);
    char sink[4096];
    for (int k = 0; k < 16 && recv(fd, sink, sizeof sink, MSG_DONTWAIT) > 0; k++) {}
    if (n > 0 && send(fd, head, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT) == n && len)
        send(fd, body, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    free(body);
    shutdown(fd, SHUT_WR);
    close(fd);
}

static void drop_held(srv_gate *g, int i) {
    g->held[i] = g->held[--g->n_held];
}

static int held_from(const srv_gate *g, const struct sockaddr_in *a) {
    int n = 0;
    for (int i = 0; i < g->n_held; i++) n += g->held[i].addr.sin_addr.s_addr == a->sin_addr.s_addr;
    return n;
}

static int served_connections(const srv_gate *g) {
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(g->daemon, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
    return info ? (int)info->num_connections : 0;
}

/* Takes one pending connection into the held set (or closes it past the per-address cap). */
static void accept_one(srv_gate *g, double now) {
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    int fd = accept4(g->listen_fd, (struct sockaddr *)&a, &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;
    if (g->n_held >= g->max_connections || (g->per_ip && held_from(g, &a) >= g->per_ip)) { close(fd); return; }
    g->held[g->n_held++] = (held_conn){.fd = fd, .addr = a, .deadline = now + g->idle_s, .next_look = now};
}

/* Looks at held connection i: hands it on, refuses it or keeps it; true when it left the set. */
static bool look_at(srv_gate *g, int i, double now) {
    held_conn *h = &g->held[i];
    switch (peek_request(h->fd)) {
    case LOOK_HTTP:   /* libmicrohttpd owns fd from here (and closes it itself if it refuses it) */
        MHD_add_connection(g->daemon, h->fd, (const struct sockaddr *)&h->addr, sizeof h->addr);
        return true;
    case LOOK_NOT_HTTP: refuse_not_http(h->fd); return true;
    case LOOK_GONE: close(h->fd); return true;
    case LOOK_UNSURE: break;
    }
    h->next_look = now + GATE_RETRY_S;
    return false;
}

/* The poll set: the wake pipe, the listening socket while there is room,
 * held connections due for a look; *timeout_ms until the next deadline or look. */
static int build_poll_set(srv_gate *g, double now, int *timeout_ms) {
    int n = 0;
    double next = now + 1.0;
    g->pfds[n] = (struct pollfd){.fd = g->wake[0], .events = POLLIN};
    g->pfd_held[n++] = -1;
    if (g->n_held + served_connections(g) < g->max_connections) {
        g->pfds[n] = (struct pollfd){.fd = g->listen_fd, .events = POLLIN};
        g->pfd_held[n++] = -1;
    } else if (now + 0.2 < next) next = now + 0.2;   /* served connections end unannounced */
    for (int i = 0; i < g->n_held; i++) {
        const held_conn *h = &g->held[i];
        if (h->deadline < next) next = h->deadline;
        if (h->next_look > now) { if (h->next_look < next) next = h->next_look; continue; }
        g->pfds[n] = (struct pollfd){.fd = h->fd, .events = POLLIN};
        g->pfd_held[n++] = i;
    }
    double ms = (next - now) * 1e3;
    *timeout_ms = ms < 1 ? 1 : (int)ms;
    return n;
}

static void *gate_main(void *arg) {
    srv_gate *g = arg;
    for (;;) {
        int timeout_ms;
        int n = build_poll_set(g, srv_now(), &timeout_ms);
        if (poll(g->pfds, (nfds_t)n, timeout_ms) < 0 && errno != EINTR) break;
        if (g->pfds[0].revents) break;
        double now = srv_now();
        bool listening = n > 1 && g->pfd_held[1] < 0;
        /* held connections first (higher pfds index first: drop_held moves the last into the gap) */
        for (int p = n - 1; p >= (listening ? 2 : 1); p--) {
            int i = g->pfd_held[p];
            if (g->pfds[p].revents && look_at(g, i, now)) drop_held(g, i);
        }
        for (int i = g->n_held - 1; i >= 0; i--)
            if (g->held[i].deadline <= now) { close(g->held[i].fd); drop_held(g, i); }
        if (listening && (g->pfds[1].revents & POLLIN)) accept_one(g, now);
    }
    return NULL;
}

static okv_status gate_fail(okv_error *err, okv_status st, const char *what, const char *host) {
    err->status = st;
    snprintf(err->message, sizeof err->message, "%s %s: %s", what, host, strerror(errno));
    return st;
}

okv_status srv_gate_start(struct MHD_Daemon *daemon, const struct sockaddr_in *addr, const okv_server_options *o,
                          srv_gate **out, int *port, okv_error *err) {
    *out = NULL;
    char host[INET_ADDRSTRLEN] = "?";
    inet_ntop(AF_INET, &addr->sin_addr, host, sizeof host);
    srv_gate *g = calloc(1, sizeof *g);
    if (!g) { errno = ENOMEM; return gate_fail(err, OKV_ERR_NOMEM, "cannot serve on", host); }
    g->daemon = daemon;
    g->listen_fd = g->wake[0] = g->wake[1] = -1;
    g->max_connections = o->max_connections;
    g->per_ip = o->max_connections_per_ip;
    g->idle_s = o->idle_timeout_s;
    size_t cap = (size_t)o->max_connections + 2;   /* max_connections <= 65536 (checked by the caller) */
    g->held = calloc(cap, sizeof *g->held);
    g->pfds = calloc(cap, sizeof *g->pfds);
    g->pfd_held = calloc(cap, sizeof *g->pfd_held);
    okv_status st = OKV_OK;
    int one = 1;
    if (!g->held || !g->pfds || !g->pfd_held || pipe2(g->wake, O_CLOEXEC)) {
        st = gate_fail(err, OKV_ERR_NOMEM, "cannot serve on", host);
    } else if ((g->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)) < 0 ||
               setsockopt(g->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
               bind(g->listen_fd, (const struct sockaddr *)addr, sizeof *addr) || listen(g->listen_fd, 128)) {
        st = gate_fail(err, OKV_ERR_IO, "cannot listen on", host);
    }
    struct sockaddr_in bound;
    socklen_t len = sizeof bound;
    if (!st && getsockname(g->listen_fd, (struct sockaddr *)&bound, &len)) st = gate_fail(err, OKV_ERR_IO, "cannot listen on", host);
    if (!st && pthread_create(&g->thread, NULL, gate_main, g)) st = gate_fail(err, OKV_ERR_NOMEM, "cannot start the accept thread for", host);
    if (st) { srv_gate_stop(g); return st; }
    g->started = true;
    *port = ntohs(bound.sin_port);
    *out = g;
    return OKV_OK;
}

void srv_gate_stop(srv_gate *g) {
    if (!g) return;
    if (g->started) {
        ssize_t w = write(g->wake[1], "x", 1);
        (void)w;
        pthread_join(g->thread, NULL);
    }
    for (int i = 0; i < g->n_held; i++) close(g->held[i].fd);
    if (g->listen_fd >= 0) close(g->listen_fd);
    if (g->wake[0] >= 0) close(g->wake[0]);
    if (g->wake[1] >= 0) close(g->wake[1]);
    free(g->held);
    free(g->pfds);
    free(g->pfd_held);
    free(g);
}
