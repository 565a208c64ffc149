/* okv_server_redis.c — the Redis prefix tier (--prefix-cache-redis
 * HOST:PORT): kept prefix entries shared by replicas on several machines,
 * over hiredis. Compiled out (srv_redis_open refuses the option) when the
 * build found no hiredis.
 *
 * Values are the sequence-state bytes a --prefix-cache-dir file would hold
 * (okv_seq_save_mem / okv_seq_load_mem: fingerprinted, CRC-checked on
 * load), the entry's ids in the extra blob as there. Keys live under a
 * namespace of the program's digests and the K/V storage dtypes
 * ("offkv:<program>-<layout>:<kdtype>-<vdtype>"), so replicas of other
 * programs or cache setups never fetch each other's entries:
 *   NS:e:<FNV-1a of the ids>-<count>   the entry (its state bytes)
 *   NS:b:<chained hash>-<k*BLOCK>      the name of the newest entry whose
 *                                      first k*BLOCK ids hash so
 * A lookup hashes the prompt's first BLOCK, 2*BLOCK, ... ids (one chained
 * FNV pass), asks for all those boundary keys in one MGET, and GETs the
 * entry behind the longest one present; the entry's own ids then say how
 * much it really shares (at least that boundary, often more). An entry or
 * boundary gone (TTL, eviction) is a miss, and the next shorter boundary is
 * tried. Every key is written with the TTL; the byte cap is Redis's own
 * maxmemory with allkeys-lru (set at connect when prefix_cache_redis_bytes
 * is given), which evicts atomically for every client at once: no
 * accounting of ours to race.
 *
 * All of it runs on the scheduler thread, blocking, with a connect timeout
 * and a command timeout (a 2k-token SmolLM2 entry is ~45 MB: tens of ms on
 * loopback, against seconds of prefill). A failed command drops the
 * connection with one note; the next use after RETRY_S reconnects. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "okv_server.h"

#ifdef OKV_HAVE_HIREDIS
#include <hiredis/hiredis.h>

#define BLOCK 64                 /* ids per boundary key */
#define RETRY_S 5.0
#define CONNECT_TIMEOUT_S 2
#define COMMAND_TIMEOUT_S 10
#define DEFAULT_TTL_S 3600
#define MAX_BOUNDARIES 4096      /* BLOCK * this covers any --ctx-per-seq we accept without limit issues */

typedef struct srv_redis {
    redisContext *c;
    char host[256];
    int port;
    char ns[96];
    int ttl_s;
    double retry_at;             /* srv_now() after which a dropped connection is tried again */
    bool down_noted;
} srv_redis;

static void count(okv_server *s, int64_t *counter) {
    pthread_mutex_lock(&s->lock);
    (*counter)++;
    pthread_mutex_unlock(&s->lock);
}

static void drop_connection(okv_server *s, const char *what) {
    srv_redis *rd = s->redis;
    if (!rd->down_noted)
        srv_log(s, "prefix-cache-redis %s:%d: %s: %s; running without it, retrying every %.0f s", rd->host, rd->port,
                what, rd->c && rd->c->errstr[0] ? rd->c->errstr : "no connection", RETRY_S);
    rd->down_noted = true;
    if (rd->c) redisFree(rd->c);
    rd->c = NULL;
    rd->retry_at = srv_now() + RETRY_S;
    count(s, &s->m.redis_errors);
}

/* Sets maxmemory and allkeys-lru when a byte cap was asked for. */
static void apply_cap(okv_server *s) {
    srv_redis *rd = s->redis;
    if (!s->o.prefix_cache_redis_bytes) return;
    char cap[32];
    snprintf(cap, sizeof cap, "%llu", (unsigned long long)s->o.prefix_cache_redis_bytes);
    const char *argv[2][4] = { { "CONFIG", "SET", "maxmemory", cap }, { "CONFIG", "SET", "maxmemory-policy", "allkeys-lru" } };
    for (int i = 0; i < 2 && rd->c; i++) {
        redisReply *r = redisCommandArgv(rd->c, 4, argv[i], NULL);
        if (!r) { drop_connection(s, "CONFIG SET failed"); return; }
        if (r->type == REDIS_REPLY_ERROR)
            srv_log(s, "prefix-cache-redis: CONFIG SET %s refused (%s): set maxmemory and maxmemory-policy allkeys-lru "
                       "on the Redis server itself", argv[i][2], r->str);
        freeReplyObject(r);
    }
}

/* The connection, (re)made when there is none and the retry time has come; NULL = none now. */
static redisContext *connection(okv_server *s) {
    srv_redis *rd = s->redis;
    if (rd->c) return rd->c;
    if (srv_now() < rd->retry_at) return NULL;
    rd->c = redisConnectWithTimeout(rd->host, rd->port, (struct timeval){ CONNECT_TIMEOUT_S, 0 });
    if (!rd->c || rd->c->err || redisSetTimeout(rd->c, (struct timeval){ COMMAND_TIMEOUT_S, 0 }) != REDIS_OK) {
        drop_connection(s, "cannot connect");
        return NULL;
    }
    if (rd->down_noted) srv_log(s, "prefix-cache-redis %s:%d: connected again", rd->host, rd->port);
    rd->down_noted = false;
    apply_cap(s);
    return rd->c;
}

/* "HOST:PORT" into host and port; false if malformed. */
static bool parse_address(const char *a, char *host, size_t host_len, int *port) {
    const char *colon = strrchr(a, ':');
    if (!colon || colon == a || (size_t)(colon - a) >= host_len) return false;
    char *end = NULL;
    errno = 0;
    long p = strtol(colon + 1, &end, 10);
    if (!colon[1] || *end || errno || p < 1 || p > 65535) return false;
    memcpy(host, a, (size_t)(colon - a));
    host[colon - a] = 0;
    *port = (int)p;
    return true;
}

static okv_dtype storage_dtype(const okv_server *s, bool v) {
    bool autod = v ? s->o.cache.v_storage_auto : s->o.cache.k_storage_auto;
    return autod ? okv_kv_dtype_auto(s->program) : v ? s->o.cache.v_storage_dtype : s->o.cache.k_storage_dtype;
}

okv_status srv_redis_open(okv_server *s, okv_error *err) {
    if (!s->o.prefix_cache_redis) return OKV_OK;
    srv_redis *rd = calloc(1, sizeof *rd);
    if (!rd) {
        err->status = OKV_ERR_NOMEM;
        snprintf(err->message, sizeof err->message, "out of memory");
        return OKV_ERR_NOMEM;
    }
    s->redis = rd;
    if (!parse_address(s->o.prefix_cache_redis, rd->host, sizeof rd->host, &rd->port)) {
        err->status = OKV_ERR_INVALID;
        snprintf(err->message, sizeof err->message, "--prefix-cache-redis '%s': give HOST:PORT (port 1..65535)",
                 s->o.prefix_cache_redis);
        return OKV_ERR_INVALID;
    }
    rd->ttl_s = s->o.prefix_cache_redis_ttl_s > 0 ? s->o.prefix_cache_redis_ttl_s : DEFAULT_TTL_S;
    uint64_t layout = 0, program = 0;
    okv_program_fingerprint(s->program, &layout, &program);
    snprintf(rd->ns, sizeof rd->ns, "offkv:%016llx-%016llx:%s-%s", (unsigned long long)program,
             (unsigned long long)layout, okv_dtype_name(storage_dtype(s, false)), okv_dtype_name(storage_dtype(s, true)));
    if (connection(s)) srv_log(s, "prefix-cache-redis %s:%d: connected (keys %s:*, ttl %d s)", rd->host, rd->port, rd->ns, rd->ttl_s);
    return OKV_OK;
}

void srv_redis_free(okv_server *s) {
    if (!s->redis) return;
    if (s->redis->c) redisFree(s->redis->c);
    free(s->redis);
    s->redis = NULL;
}

/* ---- keys ---------------------------------------------------------------------- */

static void entry_key(const srv_redis *rd, const int32_t *ids, size_t n, char *out, size_t len) {
    snprintf(out, len, "%s:e:%016llx-%zu", rd->ns, (unsigned long long)srv_fnv_ids(ids, n), n);
}

/* Boundary keys of ids' first BLOCK, 2*BLOCK, ... up to n ids: *nb of them
 * (heap array of heap strings), the k-th for the first (k+1)*BLOCK ids. */
static char **boundary_keys(const srv_redis *rd, const int32_t *ids, size_t n, int *nb) {
    size_t count_b = n / BLOCK < MAX_BOUNDARIES ? n / BLOCK : MAX_BOUNDARIES;
    *nb = 0;
    char **keys = count_b ? calloc(count_b, sizeof *keys) : NULL;
    if (!keys) return NULL;
    uint64_t h = SRV_FNV_OFFSET;
    for (size_t k = 0; k < count_b; k++) {
        h = srv_fnv_ids_from(h, ids + k * BLOCK, BLOCK);
        char buf[160];
        snprintf(buf, sizeof buf, "%s:b:%016llx-%zu", rd->ns, (unsigned long long)h, (k + 1) * BLOCK);
        keys[k] = strdup(buf);
        if (!keys[k]) break;
        (*nb)++;
    }
    return keys;
}

static void free_keys(char **keys, int n) {
    for (int i = 0; i < n; i++) free(keys[i]);
    free(keys);
}

static size_t common_len(const int32_t *a, size_t na, const int32_t *b, size_t nb) {
    size_t k = 0;
    while (k < na && k < nb && a[k] == b[k]) k++;
    return k;
}

/* ---- fetching ------------------------------------------------------------------ */

/* Loads entry `name`'s bytes into a new sequence of the key when it shares
 * more than `have` + SRV_MIN_GAIN ids with prompt; fills into. */
static bool load_entry(okv_server *s, redisContext *c, const char *name, const int32_t *prompt, size_t n_prompt,
                       size_t have, srv_slot *into) {
    redisReply *r = redisCommand(c, "GET %s", name);
    if (!r) { drop_connection(s, "GET failed"); return false; }
    if (r->type != REDIS_REPLY_STRING) { freeReplyObject(r); return false; }   /* expired or evicted meanwhile */
    okv_error e = {0};
    int seq = -1, len = -1;
    void *extra = NULL;
    size_t extra_len = 0, n = 0;
    okv_status rc = okv_seq_load_mem(s->key, s->program, r->str, r->len, name, &seq, &extra, &extra_len, &e);
    freeReplyObject(r);
    int32_t *ids = NULL;
    if (!rc) {
        okv_error e2;
        if (okv_seq_len(s->key, seq, &len, &e2)) len = -1;
        ids = srv_blob_ids(s, extra, extra_len, len, &n);
    }
    free(extra);
    size_t k = ids ? common_len(ids, n, prompt, n_prompt) : 0;
    if (k >= n_prompt) k = n_prompt - 1;
    int32_t *held = ids && k >= have + SRV_MIN_GAIN ? srv_grow(into->ids, &into->cap_ids, n, sizeof *held) : NULL;
    if (!held) {
        okv_error e2;
        if (seq >= 0) okv_seq_free(s->key, seq, &e2);
        if (rc) srv_log(s, "prefix-cache-redis: cannot load %s: %s", name, e.message);
        free(ids);
        return false;
    }
    into->ids = held;
    memcpy(into->ids, ids, n * sizeof *held);
    free(ids);
    into->n_ids = n;
    into->seq = seq;
    into->on_disk = true;    /* (not written to the directory again: it lives in a shared tier) */
    into->in_redis = true;
    count(s, &s->m.redis_loads);
    return true;
}

bool srv_redis_fetch(okv_server *s, const int32_t *prompt, size_t n_prompt, size_t have, srv_slot *into) {
    if (!s->redis || n_prompt < 2) return false;
    int nb = 0;
    char **keys = boundary_keys(s->redis, prompt, n_prompt - 1, &nb);   /* the last prompt token is always stepped */
    if (!nb || (size_t)nb * BLOCK < have + SRV_MIN_GAIN) { free_keys(keys, nb); return false; }
    redisContext *c = connection(s);
    if (!c) { free_keys(keys, nb); return false; }
    const char **argv = malloc(((size_t)nb + 1) * sizeof *argv);
    if (!argv) { free_keys(keys, nb); return false; }
    argv[0] = "MGET";
    for (int i = 0; i < nb; i++) argv[i + 1] = keys[i];
    redisReply *r = redisCommandArgv(c, nb + 1, argv, NULL);
    free(argv);
    free_keys(keys, nb);
    if (!r) { drop_connection(s, "MGET failed"); return false; }
    bool loaded = false;
    if (r->type == REDIS_REPLY_ARRAY) {
        int tries = 0;
        for (size_t i = r->elements; i-- > 0 && !loaded && tries < 3 && (i + 1) * BLOCK >= have + SRV_MIN_GAIN;) {
            const redisReply *v = r->element[i];
            if (v->type != REDIS_REPLY_STRING || v->len == 0 || v->len > 200) continue;
            char name[208];
            memcpy(name, v->str, v->len);
            name[v->len] = 0;
            if (strncmp(name, s->redis->ns, strlen(s->redis->ns))) continue;   /* not a key of ours */
            tries++;
            loaded = load_entry(s, c, name, prompt, n_prompt, have, into);
            if (!s->redis->c) break;   /* the connection dropped */
        }
    }
    freeReplyObject(r);
    if (!loaded) count(s, &s->m.redis_misses);
    return loaded;
}

/* ---- storing ------------------------------------------------------------------- */

/* Reads the n pipelined replies; false (connection dropped) on a failure. */
static bool read_replies(okv_server *s, redisContext *c, int n) {
    bool ok = true;
    for (int i = 0; i < n; i++) {
        void *reply = NULL;
        if (redisGetReply(c, &reply) != REDIS_OK) { drop_connection(s, "SET failed"); return false; }
        redisReply *r = reply;
        if (r->type == REDIS_REPLY_ERROR) {
            if (ok) srv_log(s, "prefix-cache-redis: SET refused: %s", r->str);
            ok = false;
        }
        freeReplyObject(r);
    }
    return ok;
}

void srv_redis_store(okv_server *s, srv_slot *sl) {
    if (!s->redis || sl->seq < 0 || sl->in_redis || sl->n_ids < SRV_SHARE_MIN) return;
    sl->in_redis = true;   /* stored, or given up on */
    redisContext *c = connection(s);
    if (!c) return;
    size_t blen = 0;
    unsigned char *blob = srv_ids_blob(sl->ids, sl->n_ids, &blen);
    void *data = NULL;
    size_t len = 0;
    okv_error e = {0};
    okv_status rc = blob ? okv_seq_save_mem(s->key, s->program, sl->seq, blob, blen, &data, &len, &e) : OKV_ERR_NOMEM;
    free(blob);
    if (rc) {
        srv_log(s, "prefix-cache-redis: cannot serialize an entry: %s", rc == OKV_ERR_NOMEM ? "out of memory" : e.message);
        return;
    }
    if (s->o.prefix_cache_redis_bytes && len > s->o.prefix_cache_redis_bytes / 2) {   /* it would evict everything */
        free(data);
        return;
    }
    char name[160];
    entry_key(s->redis, sl->ids, sl->n_ids, name, sizeof name);
    int nb = 0;
    char **keys = boundary_keys(s->redis, sl->ids, sl->n_ids, &nb);
    char ttl[16];
    snprintf(ttl, sizeof ttl, "%d", s->redis->ttl_s);
    /* the entry first, then the boundaries naming it: a reader never finds a boundary before its entry */
    const char *argv[5] = { "SET", name, data, "EX", ttl };
    size_t lens[5] = { 3, strlen(name), len, 2, strlen(ttl) };
    int sent = redisAppendCommandArgv(c, 5, argv, lens) == REDIS_OK;
    for (int i = 0; sent && i < nb; i++) {
        const char *bargv[5] = { "SET", keys[i], name, "EX", ttl };
        size_t blens[5] = { 3, strlen(keys[i]), strlen(name), 2, strlen(ttl) };
        if (redisAppendCommandArgv(c, 5, bargv, blens) != REDIS_OK) break;
        sent++;
    }
    free_keys(keys, nb);
    free(data);
    if (read_replies(s, c, sent)) count(s, &s->m.redis_writes);
}

#else /* no hiredis in this build */

okv_status srv_redis_open(okv_server *s, okv_error *err) {
    if (!s->o.prefix_cache_redis) return OKV_OK;
    err->status = OKV_ERR_UNSUPPORTED;
    snprintf(err->message, sizeof err->message,
             "--prefix-cache-redis: this build has no Redis support (libhiredis-dev was not found when it was configured)");
    return OKV_ERR_UNSUPPORTED;
}

bool srv_redis_fetch(okv_server *s, const int32_t *prompt, size_t n_prompt, size_t have, srv_slot *into) {
    (void)s; (void)prompt; (void)n_prompt; (void)have; (void)into;
    return false;
}

void srv_redis_store(okv_server *s, srv_slot *sl) { (void)s; (void)sl; }

void srv_redis_free(okv_server *s) { (void)s; }

#endif
