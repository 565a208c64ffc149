/* okv_server_sched.c — the scheduler: one thread that owns the server's
 * runner and its cell-pool cache key, and runs continuous batching over it.
 *
 * Each iteration builds ONE okv_runner_step_batch: every decoding
 * sequence's next token (one row each), then pending prompt tokens of the
 * sequences still prefilling, oldest admission first, at most
 * prefill_chunk of them per step (a long prompt is prefilled over several
 * steps while the others keep decoding). Each sequence's okv_gen_seq
 * samples from its own row, stops and streams text; the scheduler only
 * runs the model (okv_gen_seq_fed).
 *
 * Prefix reuse: a finished sequence stays in the key as a prefix-cache
 * entry holding its ids' cells. A new prompt forks (okv_seq_fork, zero
 * copy) the running or kept sequence sharing its longest prefix and
 * prefills only the rest (of equally long ones, preferring one whose
 * request had the same prompt_cache_key); entries are evicted least recently used first
 * when sequence ids or cells are needed, or when their positions'
 * bytes pass prefix_cache_bytes. An entry whose ids are a prefix of a newer
 * entry's is dropped (the newer one holds those cells). Cancelled or failed
 * sequences free their cells at once.
 *
 * With a prefix-cache directory (okv_server_dir.c) an evicted entry is
 * written there first (shared: every entry as its request ends), every
 * kept entry is written when the scheduler stops, and a prompt whose
 * stored prefix beats everything in memory loads that file as a kept
 * entry, which is then forked as above. The Redis tier
 * (okv_server_redis.c) comes next the same way: asked when memory and the
 * directory leave more than SRV_MIN_GAIN prompt tokens to prefill, written
 * as each request ends.
 *
 * A request with n choices takes n sequences: choice 0 is started as
 * above, the others reserve slots at admission (so the step never holds
 * more rows than max_running) and fork choice 0's prompt cells the moment
 * its prefill ends, sampling their first token from that same logits row:
 * the prompt is prefilled once. Each choice samples with seed + its index. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "okv_server.h"

double srv_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- requests ------------------------------------------------------------- */

srv_request *srv_request_new(void) {
    srv_request *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    pthread_mutex_init(&r->lock, NULL);
    pthread_cond_init(&r->cond, NULL);
    r->refs = 1;
    return r;
}

bool srv_request_choices(srv_request *r, int n) {
    r->choices = n > 0 ? calloc((size_t)n, sizeof *r->choices) : NULL;
    r->n_choices = r->choices ? n : 0;
    return r->choices != NULL;
}

void srv_request_unref(srv_request *r) {
    if (!r) return;
    pthread_mutex_lock(&r->lock);
    int left = --r->refs;
    pthread_mutex_unlock(&r->lock);
    if (left) return;
    for (int i = 0; i < r->n_stops; i++) free(r->stops[i]);
    okv_grammar_free(r->grammar);
    srv_resp_free(r->resp);
    free(r->prompt);
    srv_buf_free(&r->out);
    for (int i = 0; r->choices && i < r->n_choices; i++) {   /* (a request refused by parsing has none) */
        srv_buf_free(&r->choices[i].content);
        srv_buf_free(&r->choices[i].reasoning);
        free(r->choices[i].lp);
        srv_tool_stream_free(&r->choices[i].tool_split);
        for (int k = 0; k < r->choices[i].n_calls && r->choices[i].calls; k++) {
            free(r->choices[i].calls[k].name);
            free(r->choices[i].calls[k].arguments);
        }
        free(r->choices[i].calls);
    }
    srv_tools_free(&r->tools);
    free(r->choices);
    pthread_mutex_destroy(&r->lock);
    pthread_cond_destroy(&r->cond);
    free(r);
}

bool srv_submit(okv_server *s, srv_request *r, bool *stopping) {
    pthread_mutex_lock(&s->lock);
    *stopping = s->stopping;
    bool ok = !s->stopping && s->n_queue < s->o.max_queue;
    if (ok) {
        pthread_mutex_lock(&r->lock);
        r->refs++;
        pthread_mutex_unlock(&r->lock);
        s->queue[s->n_queue++] = r;
        s->m.requests++;
        pthread_cond_signal(&s->wake);
    } else s->m.requests_rejected++;
    pthread_mutex_unlock(&s->lock);
    return ok;
}

/* ---- sequences ------------------------------------------------------------ */

static okv_status set_error(okv_error *e, okv_status st, const char *msg) {
    e->status = st;
    snprintf(e->message, sizeof e->message, "%s", msg);
    return st;
}

static size_t common_prefix(const int32_t *a, size_t na, const int32_t *b, size_t nb) {
    size_t k = 0;
    while (k < na && k < nb && a[k] == b[k]) k++;
    return k;
}

static bool append_ids(srv_slot *sl, const int32_t *ids, size_t n) {
    int32_t *p = srv_grow(sl->ids, &sl->cap_ids, sl->n_ids + n, sizeof *p);
    if (!p) return false;
    sl->ids = p;
    memcpy(sl->ids + sl->n_ids, ids, n * sizeof *ids);
    sl->n_ids += n;
    return true;
}

/* Drops slot sl's sequence and its cells (running or kept). */
static void drop_seq(okv_server *s, srv_slot *sl) {
    okv_error e;
    if (sl->seq >= 0) okv_seq_free(s->key, sl->seq, &e);
    sl->seq = -1;
    sl->n_ids = 0;
    sl->on_disk = false;
    sl->in_redis = false;
}

static bool is_entry(const srv_slot *sl) { return sl->seq >= 0 && !sl->req; }

/* The least recently used kept entry other than `except`, or NULL. */
static srv_slot *lru_entry(okv_server *s, const srv_slot *except) {
    srv_slot *best = NULL;
    for (int i = 0; i < s->n_slots; i++) {
        srv_slot *sl = &s->slots[i];
        if (is_entry(sl) && sl != except && (!best || sl->last_used < best->last_used)) best = sl;
    }
    return best;
}

static void evict(okv_server *s, srv_slot *sl) {
    srv_dir_store(s, sl);
    drop_seq(s, sl);
    pthread_mutex_lock(&s->lock);
    s->m.prefix_evictions++;
    pthread_mutex_unlock(&s->lock);
}

static int free_cells(okv_server *s) {
    okv_cells_info ci;
    okv_error e;
    return okv_cache_cells(s->key, &ci, &e) ? 0 : ci.free_cells;
}

/* Evicts entries (LRU, never `keep`) until n cells are free; false if they cannot be. */
static bool make_room(okv_server *s, int n, const srv_slot *keep) {
    while (free_cells(s) < n) {
        srv_slot *v = lru_entry(s, keep);
        if (!v) return false;
        evict(s, v);
    }
    return true;
}

/* Keeps the kept entries' positions within prefix_cache_bytes (0 = no cap). */
static void enforce_byte_cap(okv_server *s) {
    if (!s->o.prefix_cache_bytes) return;
    for (;;) {
        double held = 0;
        for (int i = 0; i < s->n_slots; i++)
            if (is_entry(&s->slots[i])) held += (double)s->slots[i].n_ids * s->bytes_per_cell;
        srv_slot *v = held > (double)s->o.prefix_cache_bytes ? lru_entry(s, NULL) : NULL;
        if (!v) return;
        evict(s, v);
    }
}

/* Text of slot sl's choice, as its generator streams it. */
static void on_text(void *ctx, const char *text, size_t len) {
    srv_slot *sl = ctx;
    srv_request *r = sl->req;
    pthread_mutex_lock(&r->lock);
    if (!r->t_first) r->t_first = srv_now() - r->t_submit;
    srv_emit_text(r, sl->choice, text, len);
    pthread_cond_broadcast(&r->cond);
    pthread_mutex_unlock(&r->lock);
}

/* A token sampled for slot sl's choice from the row being fed (its logprobs, when asked for). */
static void on_token(void *ctx, int32_t id) {
    srv_slot *sl = ctx;
    srv_request *r = sl->req;
    for (int i = 0; i < r->go.n_eos; i++)
        if (r->go.eos_ids[i] == id) return;   /* EOS is not part of the reply */
    pthread_mutex_lock(&r->lock);
    srv_emit_token(r, sl->choice, sl->row, id);
    pthread_mutex_unlock(&r->lock);
}

/* Generation options of slot sl's choice: choice k samples with seed + k,
 * so a seeded request's choices differ and repeat. */
static okv_gen_options choice_options(const okv_server *s, const srv_request *r, srv_slot *sl) {
    okv_gen_options go = r->go;
    go.sampling.seed += (uint64_t)sl->choice;
    go.context_limit = s->o.ctx_per_seq;
    go.on_text = on_text;
    go.on_token = on_token;
    go.ctx = sl;
    return go;
}

/* The sequence (running or kept) sharing the longest prefix with prompt,
 * usable up to *keep tokens; among equally long ones, one whose request
 * had r's affinity key (prompt_cache_key). */
static srv_slot *best_prefix(okv_server *s, const srv_request *r, size_t *keep) {
    srv_slot *best = NULL;
    size_t best_n = 0;
    for (int i = 0; i < s->n_slots; i++) {
        srv_slot *sl = &s->slots[i];
        if (sl->seq < 0) continue;
        size_t n = common_prefix(sl->ids, sl->n_ids, r->prompt, r->n_prompt);
        bool kin = r->affinity && sl->affinity == r->affinity && best && best->affinity != r->affinity;
        if (n > best_n || (n && n == best_n && kin)) { best = sl; best_n = n; }
    }
    *keep = best_n < r->n_prompt ? best_n : r->n_prompt - 1;  /* one token left to prefill gives the logits */
    return *keep ? best : NULL;
}

static srv_slot *unused_slot(okv_server *s, const srv_slot *keep) {
    for (int i = 0; i < s->n_slots; i++)
        if (s->slots[i].seq < 0 && !s->slots[i].req) return &s->slots[i];
    srv_slot *v = lru_entry(s, keep);
    if (v) evict(s, v);
    return v;
}

/* Ends every choice of a request that never ran (or could not start). */
static void end_request(srv_request *r, const okv_gen_stats *st, const char *error) {
    pthread_mutex_lock(&r->lock);
    srv_emit_end(r, -1, st, error, false);
    pthread_cond_broadcast(&r->cond);
    pthread_mutex_unlock(&r->lock);
}

/* Loads the directory's entry for r's prompt as a kept entry when it
 * shares more than the `keep` ids memory has (src, protected); making room
 * may write entries and so move the index, hence the second look. */
static bool fetch_from_dir(okv_server *s, const srv_request *r, const srv_slot *src, size_t keep) {
    int di;
    srv_dir_refresh(s);
    for (int tries = 0; tries < 3; tries++) {   /* a file removed by another server meanwhile: the next best */
        if (!srv_dir_best(s, r->prompt, r->n_prompt, keep, &di)) return false;
        if (!make_room(s, srv_dir_cells(s, di), src)) return false;
        srv_slot *into = unused_slot(s, src);
        if (!into || !srv_dir_best(s, r->prompt, r->n_prompt, keep, &di) || srv_dir_cells(s, di) > free_cells(s))
            return false;
        if (!srv_dir_load(s, di, into)) continue;
        pthread_mutex_lock(&s->lock);
        into->req = NULL;
        into->affinity = 0;   /* the files keep no key */
        into->last_used = ++s->admissions;
        pthread_mutex_unlock(&s->lock);
        return true;
    }
    return false;
}

/* Loads the Redis tier's entry for r's prompt as a kept entry when it
 * shares more than the `keep` ids memory has (src, protected): room for
 * the prompt's cells is made first, since the entry's size is known only
 * once it arrives. */
static void fetch_from_redis(okv_server *s, const srv_request *r, const srv_slot *src, size_t keep) {
    if (!make_room(s, (int)r->n_prompt, src)) return;
    srv_slot *into = unused_slot(s, src);
    if (!into || !srv_redis_fetch(s, r->prompt, r->n_prompt, keep, into)) return;
    pthread_mutex_lock(&s->lock);
    into->req = NULL;
    into->affinity = 0;   /* the files keep no key */
    into->last_used = ++s->admissions;
    pthread_mutex_unlock(&s->lock);
}

/* Reserves a slot for each of r's choices after the first (counted as
 * running from now on, so admission keeps room for them); they fork
 * choice 0's cells once its prompt is in (start_choices). Each holds a
 * reference to r. A choice that finds no slot fails the request. */
static void reserve_choices(okv_server *s, srv_request *r, const srv_slot *src) {
    for (int k = 1; k < r->n_choices; k++) {
        srv_slot *sl = unused_slot(s, src);
        if (!sl) {
            pthread_mutex_lock(&r->lock);
            srv_emit_end(r, k, NULL, "no free sequence for another choice", false);
            pthread_cond_broadcast(&r->cond);
            pthread_mutex_unlock(&r->lock);
            continue;
        }
        pthread_mutex_lock(&r->lock);
        r->refs++;
        pthread_mutex_unlock(&r->lock);
        pthread_mutex_lock(&s->lock);
        sl->req = r;
        sl->choice = k;
        sl->gen = NULL;
        sl->last_used = sl->admitted = ++s->admissions;
        pthread_mutex_unlock(&s->lock);
    }
}

/* Starts r in a sequence: forks the longest cached prefix (or a new
 * sequence) and prepares its generator. False when it must wait for cells;
 * r is ended (and released) when it cannot run at all. */
static bool start_request(okv_server *s, srv_request *r) {
    size_t keep = 0;
    srv_slot *src = best_prefix(s, r, &keep);
    if (s->dir && fetch_from_dir(s, r, src, keep)) src = best_prefix(s, r, &keep);
    if (s->redis && keep + SRV_MIN_GAIN < r->n_prompt) {
        fetch_from_redis(s, r, src, keep);
        src = best_prefix(s, r, &keep);
    }
    if (!make_room(s, (int)(r->n_prompt - keep) + 1, src)) {
        /* only the prefix's own entry holds the cells: prefill it all instead (src may go) */
        if (!src || !make_room(s, (int)r->n_prompt + 1, NULL)) return false;
        src = NULL;
        keep = 0;
    }
    srv_slot *sl = unused_slot(s, src);
    if (!sl) return false;
    okv_error err = {0};
    int seq = -1;
    if (!src || okv_seq_fork(s->key, src->seq, (int)keep, &seq, &err)) {
        keep = 0;
        if (okv_seq_new(s->key, &seq, &err)) return false;   /* ids all taken by running sequences */
    }
    sl->seq = seq;
    sl->n_ids = 0;
    sl->on_disk = false;
    sl->in_redis = false;
    sl->choice = 0;
    sl->affinity = r->affinity;
    okv_gen_options go = choice_options(s, r, sl);
    okv_status st = append_ids(sl, r->prompt, keep) ? OKV_OK : set_error(&err, OKV_ERR_NOMEM, "out of memory");
    if (!st) st = okv_gen_seq_create_fed(s->program, s->tok, r->prompt + keep, r->n_prompt - keep, (int)keep, &go,
                                         &sl->gen, &err);
    pthread_mutex_lock(&s->lock);
    s->m.prompt_tokens += (int64_t)r->n_prompt;
    if (!st) {
        s->m.cached_tokens += (int64_t)keep;
        if (keep) s->m.prefix_hits++;
        if (keep && src && r->affinity && src->affinity == r->affinity) s->m.affinity_hits++;
        sl->req = r;
        sl->last_used = sl->admitted = ++s->admissions;
    }
    pthread_mutex_unlock(&s->lock);
    if (st) {
        drop_seq(s, sl);
        end_request(r, NULL, err.message);
        srv_request_unref(r);
        return true;
    }
    pthread_mutex_lock(&r->lock);
    r->cached_tokens = (int64_t)keep;
    pthread_mutex_unlock(&r->lock);
    reserve_choices(s, r, src);
    return true;
}

/* How a running choice ends besides an error: on its own, cancelled
 * (client gone), or cut short when the shutdown grace runs out. */
typedef enum slot_end { END_NORMAL, END_CANCELLED, END_CUT } slot_end;

/* Ends slot sl's choice: reports (the request's counters once its last
 * choice ends), keeps its cells as a prefix entry (unless it failed or was
 * cancelled) and releases its reference to the request. */
static void finish_slot(okv_server *s, srv_slot *sl, const char *error, slot_end how) {
    bool cancelled = how == END_CANCELLED;
    srv_request *r = sl->req;
    const okv_gen_stats *st = sl->gen ? okv_gen_seq_stats(sl->gen) : NULL;
    pthread_mutex_lock(&r->lock);
    double first = r->t_first;
    if (cancelled && !error) error = "cancelled";
    bool complete = srv_emit_end(r, sl->choice, st, error, how == END_CUT);
    bool gone = cancelled || r->cancelled, ok = !r->failed;
    pthread_cond_broadcast(&r->cond);
    pthread_mutex_unlock(&r->lock);
    pthread_mutex_lock(&s->lock);   /* locks are never nested request -> server */
    if (st) s->m.generated_tokens += st->generated_tokens;
    if (complete && gone) s->m.requests_cancelled++;
    else if (complete && ok) s->m.requests_ok++;
    if (complete && first > 0) {
        s->m.ttft_sum += first;
        s->m.ttft_count++;
    }
    pthread_mutex_unlock(&s->lock);
    okv_gen_seq_free(sl->gen);
    sl->gen = NULL;
    pthread_mutex_lock(&s->lock);
    sl->req = NULL;
    sl->last_used = ++s->admissions;
    pthread_mutex_unlock(&s->lock);
    srv_request_unref(r);
    if (error || cancelled || !sl->n_ids) { drop_seq(s, sl); return; }
    for (int i = 0; i < s->n_slots; i++) {   /* entries this one contains add nothing */
        srv_slot *o = &s->slots[i];
        if (o != sl && is_entry(o) && o->n_ids <= sl->n_ids && common_prefix(o->ids, o->n_ids, sl->ids, sl->n_ids) == o->n_ids)
            drop_seq(s, o);
    }
    if (s->o.prefix_cache_dir_shared && sl->n_ids >= SRV_SHARE_MIN) srv_dir_store(s, sl);   /* the others find it now */
    srv_redis_store(s, sl);
    enforce_byte_cap(s);
}

/* Whether any choice of r has generated a token: running in a slot, or
 * already ended. */
static bool request_generated(okv_server *s, srv_request *r) {
    for (int i = 0; i < s->n_slots; i++) {
        const srv_slot *sl = &s->slots[i];
        if (sl->req != r || !sl->gen) continue;
        const okv_gen_stats *st = okv_gen_seq_stats(sl->gen);
        if (st && st->generated_tokens > 0) return true;
    }
    bool any = false;
    pthread_mutex_lock(&r->lock);
    for (int i = 0; i < r->n_choices; i++) any |= r->choices[i].done && r->choices[i].completion_tokens > 0;
    pthread_mutex_unlock(&r->lock);
    return any;
}

/* The shutdown grace ran out while sl's choice runs: a request that has
 * generated something ends with it (each choice still running with
 * finish_reason "length"), one with no token yet (choice 0 still
 * prefilling: its other choices have not forked) with the 503 of a request
 * refused while stopping. */
static void cut_at_grace(okv_server *s, srv_slot *sl) {
    if (request_generated(s, sl->req)) finish_slot(s, sl, NULL, END_CUT);
    else finish_slot(s, sl, SRV_SHUTTING_DOWN, END_NORMAL);
}

static bool is_cancelled(srv_request *r) {
    pthread_mutex_lock(&r->lock);
    bool c = r->cancelled;
    pthread_mutex_unlock(&r->lock);
    return c;
}

static bool has_failed(srv_request *r) {
    pthread_mutex_lock(&r->lock);
    bool f = r->failed;
    pthread_mutex_unlock(&r->lock);
    return f;
}

static int n_running(const okv_server *s) {
    int n = 0;
    for (int i = 0; i < s->n_slots; i++) n += s->slots[i].req != NULL;
    return n;
}

/* Moves queued requests into sequences (FIFO) while fewer than max_running
 * run. Called with s->lock held; drops it around each start. */
static void admit(okv_server *s) {
    while (s->n_queue && n_running(s) + s->queue[0]->n_choices <= s->max_running) {
        srv_request *r = s->queue[0];
        if (is_cancelled(r)) {
            memmove(s->queue, s->queue + 1, (size_t)(--s->n_queue) * sizeof *s->queue);
            end_request(r, NULL, "cancelled");
            s->m.requests_cancelled++;
            srv_request_unref(r);
            continue;
        }
        pthread_mutex_unlock(&s->lock);
        bool started = start_request(s, r);
        pthread_mutex_lock(&s->lock);
        if (!started) return;   /* waits for cells to be freed by running sequences */
        memmove(s->queue, s->queue + 1, (size_t)(--s->n_queue) * sizeof *s->queue);
    }
}

/* Stopping: queued requests are refused. */
static void drain_on_stop(okv_server *s) {
    while (s->n_queue) {
        srv_request *r = s->queue[--s->n_queue];
        end_request(r, NULL, SRV_SHUTTING_DOWN);
        srv_request_unref(r);
    }
}

/* ---- the batched step --------------------------------------------------------- */

/* Adds up to `n` of slot i's pending tokens to the step; returns how many. */
static int add_part(okv_server *s, int i, int *T, int *parts, int *rows, int n) {
    srv_slot *sl = &s->slots[i];
    const int32_t *ids;
    int pos;
    size_t pending = okv_gen_seq_pending(sl->gen, &ids, &pos);
    int take = pending < (size_t)n ? (int)pending : n;
    if (take <= 0) return 0;
    for (int k = 0; k < take; k++) {
        s->b_ids[*T + k] = ids[k];
        s->b_seqs[*T + k] = sl->seq;
        s->b_pos[*T + k] = pos + k;
    }
    *T += take;
    s->b_slot[*parts] = i;
    s->b_n[*parts] = take;
    (*parts)++;
    if ((size_t)take == pending) s->b_rows[(*rows)++] = *T - 1;
    return take;
}

/* Builds one step: decoders first (one token each), then prompt tokens of
 * the oldest prefilling sequences, at most prefill_chunk of them. */
static void build_step(okv_server *s, int *T, int *parts, int *rows) {
    *T = *parts = *rows = 0;
    for (int i = 0; i < s->n_slots; i++)
        if (s->slots[i].gen && !okv_gen_seq_prefilling(s->slots[i].gen) && *T < s->step_tokens)
            add_part(s, i, T, parts, rows, 1);
    int budget = s->o.prefill_chunk > 0 ? s->o.prefill_chunk : s->step_tokens;
    for (;;) {
        int oldest = -1;
        for (int i = 0; i < s->n_slots; i++) {
            srv_slot *sl = &s->slots[i];
            bool taken = false;
            for (int p = 0; p < *parts; p++) taken |= s->b_slot[p] == i;
            if (sl->gen && !taken && okv_gen_seq_prefilling(sl->gen) && (oldest < 0 || sl->admitted < s->slots[oldest].admitted))
                oldest = i;
        }
        int room = s->step_tokens - *T < budget ? s->step_tokens - *T : budget;
        if (oldest < 0 || room <= 0) break;
        budget -= add_part(s, oldest, T, parts, rows, room);
    }
}

static void update_cell_metrics(okv_server *s) {
    okv_cells_info ci;
    okv_error e;
    if (okv_cache_cells(s->key, &ci, &e)) return;
    pthread_mutex_lock(&s->lock);
    s->m.cells_used = ci.used_cells;
    s->m.cells_free = ci.free_cells;
    s->m.cells_total = ci.n_cells;
    pthread_mutex_unlock(&s->lock);
}

/* The step counters, taken before the step's replies go out (so a client
 * that has its reply sees its step counted). */
static void count_step(okv_server *s, int T, int n_seqs) {
    pthread_mutex_lock(&s->lock);
    if (T) {
        s->m.steps++;
        s->m.batch_tokens += T;
    }
    s->m.last_batch_tokens = T;
    s->m.last_batch_seqs = n_seqs;
    pthread_mutex_unlock(&s->lock);
}

/* Choice 0 (slot src) has just prefilled its prompt and sampled from
 * row: every other reserved choice of its request forks those cells
 * (okv_seq_fork, zero copy) and samples its first token from the same row,
 * so the prompt is prefilled once for all n choices. */
static void start_choices(okv_server *s, srv_slot *src, const float *row) {
    srv_request *r = src->req;
    size_t keep = (size_t)r->cached_tokens;
    for (int i = 0; r->n_choices > 1 && i < s->n_slots; i++) {
        srv_slot *sl = &s->slots[i];
        if (sl->req != r || sl->gen) continue;
        okv_error err = {0};
        bool done = false;
        okv_gen_options go = choice_options(s, r, sl);
        sl->n_ids = 0;
        sl->on_disk = false;
        sl->affinity = r->affinity;
        sl->in_redis = false;
        okv_status st = okv_seq_fork(s->key, src->seq, (int)r->n_prompt, &sl->seq, &err);
        if (st) sl->seq = -1;
        if (!st) st = append_ids(sl, r->prompt, r->n_prompt) ? OKV_OK : set_error(&err, OKV_ERR_NOMEM, "out of memory");
        if (!st) st = okv_gen_seq_create_fed(s->program, s->tok, r->prompt + keep, r->n_prompt - keep, (int)keep, &go,
                                             &sl->gen, &err);
        sl->row = row;
        if (!st) st = okv_gen_seq_fed(sl->gen, r->n_prompt - keep, row, 0, &done, &err);
        sl->row = NULL;
        if (st) finish_slot(s, sl, err.message, END_NORMAL);
        else if (done) finish_slot(s, sl, NULL, END_NORMAL);
    }
}

/* One batched step over every running sequence, each fed its part. */
static void run_step(okv_server *s) {
    int T, parts, rows;
    build_step(s, &T, &parts, &rows);
    if (!T) return;
    okv_error err = {0};
    okv_status st = make_room(s, T, NULL) ? OKV_OK : set_error(&err, OKV_ERR_CAPACITY, "the cache has no free cells for this step");
    double t0 = srv_now();
    if (!st) st = okv_runner_step_batch(s->runner, s->b_ids, s->b_seqs, s->b_pos, T, s->b_rows, rows, s->b_logits, &err);
    double dt = srv_now() - t0;
    count_step(s, T, parts);
    int row = 0, t = 0;
    for (int p = 0; p < parts; p++) {
        srv_slot *sl = &s->slots[s->b_slot[p]];
        int n = s->b_n[p];
        bool ends = rows > row && s->b_rows[row] == t + n - 1;
        const float *lg = ends ? s->b_logits + (size_t)row * (size_t)s->info.vocab_size : NULL;
        row += ends;
        bool done = false, prefilling = okv_gen_seq_prefilling(sl->gen);
        okv_error e2 = {0};
        okv_status fs = st;
        if (!fs) {
            sl->row = lg;
            if (!append_ids(sl, s->b_ids + t, (size_t)n)) fs = set_error(&e2, OKV_ERR_NOMEM, "out of memory");
            else fs = okv_gen_seq_fed(sl->gen, (size_t)n, lg, dt * n / T, &done, &e2);
            sl->row = NULL;
            if (!fs && prefilling && lg) start_choices(s, sl, lg);
        } else e2 = err;
        t += n;
        if (fs) finish_slot(s, sl, e2.message, END_NORMAL);
        else if (done) finish_slot(s, sl, NULL, END_NORMAL);
    }
    update_cell_metrics(s);
}

static void *sched_main(void *arg) {
    okv_server *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->lock);
        if (s->stopping) drain_on_stop(s);
        else admit(s);
        bool past_grace = s->stopping && srv_now() > s->stop_deadline;
        if (!n_running(s)) {
            if (s->stopping) { pthread_mutex_unlock(&s->lock); srv_dir_flush(s); break; }
            pthread_mutex_unlock(&s->lock);
            update_cell_metrics(s);
            count_step(s, 0, 0);
            pthread_mutex_lock(&s->lock);
            if (!s->n_queue && !s->stopping) pthread_cond_wait(&s->wake, &s->lock);
            pthread_mutex_unlock(&s->lock);
            continue;
        }
        pthread_mutex_unlock(&s->lock);
        for (int i = 0; i < s->n_slots; i++) {
            srv_slot *sl = &s->slots[i];
            if (sl->req && is_cancelled(sl->req)) finish_slot(s, sl, NULL, END_CANCELLED);
            else if (sl->req && past_grace) cut_at_grace(s, sl);
            else if (sl->req && has_failed(sl->req)) finish_slot(s, sl, "cancelled", END_NORMAL);
        }
        run_step(s);
    }
    return NULL;
}

okv_status srv_sched_start(okv_server *s, okv_error *err) {
    s->queue = calloc((size_t)s->o.max_queue + 1, sizeof *s->queue);
    if (!s->queue || pthread_create(&s->sched, NULL, sched_main, s)) {
        err->status = OKV_ERR_NOMEM;
        snprintf(err->message, sizeof err->message, "cannot start the scheduler thread");
        return OKV_ERR_NOMEM;
    }
    s->sched_started = true;
    return OKV_OK;
}

void srv_sched_stop(okv_server *s) {
    pthread_mutex_lock(&s->lock);
    if (!s->stopping) {
        s->stopping = true;
        s->stop_deadline = srv_now() + s->o.shutdown_grace_s;
    }
    pthread_cond_broadcast(&s->wake);
    pthread_mutex_unlock(&s->lock);
    if (s->sched_started) pthread_join(s->sched, NULL);
    s->sched_started = false;
}

int srv_sched_active(okv_server *s) {
    pthread_mutex_lock(&s->lock);
    int n = n_running(s);
    pthread_mutex_unlock(&s->lock);
    return n;
}

/* ---- metrics ------------------------------------------------------------------ */

static void metric(srv_buf *o, const char *name, const char *type, const char *help, double v) {
    char line[512];
    snprintf(line, sizeof line, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type, name, v);
    srv_buf_puts(o, line);
}

char *srv_metrics_text(okv_server *s) {
    pthread_mutex_lock(&s->lock);
    srv_metrics m = s->m;
    int queued = s->n_queue, active = n_running(s), entries = 0;
    int64_t entry_tokens = 0;
    for (int i = 0; i < s->n_slots; i++)
        if (is_entry(&s->slots[i])) { entries++; entry_tokens += (int64_t)s->slots[i].n_ids; }
    pthread_mutex_unlock(&s->lock);
    srv_buf o = {0};
    metric(&o, "offkv_requests_total", "counter", "Requests admitted to the queue.", (double)m.requests);
    metric(&o, "offkv_requests_finished_total", "counter", "Requests that finished normally.", (double)m.requests_ok);
    metric(&o, "offkv_requests_cancelled_total", "counter", "Requests cancelled (client gone or shutdown).", (double)m.requests_cancelled);
    metric(&o, "offkv_requests_rejected_total", "counter", "Requests refused because the queue was full or the server stopping.", (double)m.requests_rejected);
    metric(&o, "offkv_prompt_tokens_total", "counter", "Prompt tokens of admitted requests.", (double)m.prompt_tokens);
    metric(&o, "offkv_prompt_tokens_cached_total", "counter", "Prompt tokens served from forked cells (not recomputed).", (double)m.cached_tokens);
    metric(&o, "offkv_prefix_cache_hits_total", "counter", "Requests that forked a cached prefix.", (double)m.prefix_hits);
    metric(&o, "offkv_prefix_cache_affinity_hits_total", "counter", "Forks whose source had the request's prompt_cache_key.", (double)m.affinity_hits);
    metric(&o, "offkv_prefix_cache_evictions_total", "counter", "Prefix-cache entries evicted.", (double)m.prefix_evictions);
    metric(&o, "offkv_generated_tokens_total", "counter", "Tokens generated.", (double)m.generated_tokens);
    metric(&o, "offkv_steps_total", "counter", "Batched steps run.", (double)m.steps);
    metric(&o, "offkv_batch_tokens_total", "counter", "Tokens over all batched steps.", (double)m.batch_tokens);
    metric(&o, "offkv_time_to_first_token_seconds_sum", "counter", "Sum of times to first text.", m.ttft_sum);
    metric(&o, "offkv_time_to_first_token_seconds_count", "counter", "Requests with a first text.", (double)m.ttft_count);
    metric(&o, "offkv_queue_depth", "gauge", "Requests waiting for a sequence.", queued);
    metric(&o, "offkv_active_sequences", "gauge", "Sequences being generated.", active);
    metric(&o, "offkv_batch_size", "gauge", "Sequences in the last batched step.", m.last_batch_seqs);
    metric(&o, "offkv_batch_step_tokens", "gauge", "Tokens in the last batched step.", m.last_batch_tokens);
    metric(&o, "offkv_max_running", "gauge", "Most sequences generated at once (--parallel).", s->max_running);
    metric(&o, "offkv_prefix_cache_entries", "gauge", "Finished sequences kept as prefix-cache entries.", entries);
    metric(&o, "offkv_prefix_cache_tokens", "gauge", "Positions held by prefix-cache entries (shared cells counted per entry).", (double)entry_tokens);
    if (s->dir) {
        metric(&o, "offkv_prefix_cache_dir_files", "gauge", "Entries stored in --prefix-cache-dir.", m.disk_files);
        metric(&o, "offkv_prefix_cache_dir_bytes", "gauge", "Bytes of the entries stored in --prefix-cache-dir.", (double)m.disk_bytes);
        metric(&o, "offkv_prefix_cache_dir_loads_total", "counter", "Stored entries loaded instead of prefilled.", (double)m.disk_loads);
        metric(&o, "offkv_prefix_cache_dir_writes_total", "counter", "Entries written to --prefix-cache-dir.", (double)m.disk_writes);
        metric(&o, "offkv_prefix_cache_dir_removed_total", "counter", "Files removed (byte cap, damaged, superseded).", (double)m.disk_removed);
    }
    if (s->redis) {
        metric(&o, "offkv_prefix_cache_redis_loads_total", "counter", "Redis entries loaded instead of prefilled.", (double)m.redis_loads);
        metric(&o, "offkv_prefix_cache_redis_misses_total", "counter", "Redis lookups that found no usable entry.", (double)m.redis_misses);
        metric(&o, "offkv_prefix_cache_redis_writes_total", "counter", "Entries written to Redis.", (double)m.redis_writes);
        metric(&o, "offkv_prefix_cache_redis_errors_total", "counter", "Redis connections lost or refused.", (double)m.redis_errors);
    }
    metric(&o, "offkv_cache_cells_used", "gauge", "Cells owned by a sequence (tightest cache).", m.cells_used);
    metric(&o, "offkv_cache_cells_free", "gauge", "Cells free (tightest cache).", m.cells_free);
    metric(&o, "offkv_cache_cells_total", "gauge", "Cells of the tightest cache.", m.cells_total);
    return srv_buf_detach(&o);
}
