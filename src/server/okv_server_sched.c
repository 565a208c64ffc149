/* okv_server_sched.c — the scheduler: one thread that owns every slot's
 * runner and steps the active sequences round-robin, one unit of work each
 * per turn (a prefill chunk of at most prefill_chunk tokens, or one decoded
 * token), so a long prompt is prefilled between the other streams' tokens
 * instead of stalling them.
 *
 * Each slot is one cache key (one sequence per key until a multi-sequence
 * cache is in the public API). A finished sequence's tokens stay in its
 * slot, so admission picks the free slot whose cached ids share the longest
 * prefix with the new prompt and rewinds to it (a shared system prompt or
 * the previous turn of a chat is not recomputed); the least recently used
 * slot is taken when nothing matches. */
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

void srv_request_unref(srv_request *r) {
    if (!r) return;
    pthread_mutex_lock(&r->lock);
    int left = --r->refs;
    pthread_mutex_unlock(&r->lock);
    if (left) return;
    for (int i = 0; i < r->n_stops; i++) free(r->stops[i]);
    free(r->prompt);
    okv_buf_free(&r->out);
    okv_buf_free(&r->content);
    okv_buf_free(&r->reasoning);
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

/* ---- slots ------------------------------------------------------------------ */

static size_t common_prefix(const int32_t *a, size_t na, const int32_t *b, size_t nb) {
    size_t k = 0;
    while (k < na && k < nb && a[k] == b[k]) k++;
    return k;
}

/* The free slot that shares the longest prefix with prompt (ties: least
 * recently used), or -1. */
static int pick_slot(okv_server *s, const srv_request *r, size_t *match) {
    int best = -1;
    size_t best_n = 0;
    for (int i = 0; i < s->n_slots; i++) {
        srv_slot *sl = &s->slots[i];
        if (sl->req) continue;
        size_t n = common_prefix(sl->cached, sl->n_cached, r->prompt, r->n_prompt);
        if (best < 0 || n > best_n || (n == best_n && sl->last_used < s->slots[best].last_used)) { best = i; best_n = n; }
    }
    *match = best_n;
    return best;
}

/* Text of the sequence in slot sl's request, as the generator streams it. */
static void on_text(void *ctx, const char *text, size_t len) {
    srv_slot *sl = ctx;
    srv_request *r = sl->req;
    pthread_mutex_lock(&r->lock);
    if (!r->t_first) r->t_first = srv_now() - r->t_submit;
    srv_emit_text(r, text, len);
    pthread_cond_broadcast(&r->cond);
    pthread_mutex_unlock(&r->lock);
}

/* Starts r in slot i: rewinds to the shared prefix (keeping one token to
 * prefill, which yields the next-token logits) or clears. */
static void start_in_slot(okv_server *s, int i, srv_request *r, size_t match) {
    srv_slot *sl = &s->slots[i];
    okv_error err = {0};
    size_t keep = match < r->n_prompt ? match : r->n_prompt - 1;
    if (okv_cache_rewind(sl->key, (int)keep, &err) != OKV_OK) {
        okv_cache_clear(sl->key, &err);
        keep = 0;
    }
    pthread_mutex_lock(&s->lock);
    sl->req = r;
    pthread_mutex_unlock(&s->lock);
    sl->n_reused = keep;
    sl->last_used = ++s->admissions;
    okv_gen_options go = r->go;
    go.context_limit = okv_runner_capacity(sl->runner);
    go.prefill_chunk = s->o.prefill_chunk;
    go.on_text = on_text;
    go.ctx = sl;
    okv_status st = okv_gen_seq_create(sl->runner, s->tok, r->prompt + keep, r->n_prompt - keep, (int)keep, &go, &sl->seq, &err);
    pthread_mutex_lock(&s->lock);
    s->m.prompt_tokens += (int64_t)r->n_prompt;
    s->m.cached_tokens += (int64_t)keep;
    if (keep) s->m.prefix_hits++;
    pthread_mutex_unlock(&s->lock);
    pthread_mutex_lock(&r->lock);
    r->cached_tokens = (int64_t)keep;
    if (st) {
        srv_emit_end(r, NULL, err.message);
        pthread_cond_broadcast(&r->cond);
    }
    pthread_mutex_unlock(&r->lock);
    if (st) {
        pthread_mutex_lock(&s->lock);
        sl->req = NULL;
        pthread_mutex_unlock(&s->lock);
        srv_request_unref(r);
        sl->n_cached = 0;
        okv_cache_clear(sl->key, &err);
    }
}

/* What the slot's cache holds after a sequence: the prompt, then the
 * generated ids that were fed back. */
static void remember_cached(srv_slot *sl) {
    okv_error err;
    int len = 0;
    sl->n_cached = 0;
    if (okv_cache_length(sl->key, &len, &err) || len <= 0) return;
    int32_t *p = okv_grow(sl->cached, &sl->cap_cached, (size_t)len, sizeof *p);
    if (!p) return;
    sl->cached = p;
    size_t n_gen = 0;
    const int32_t *gen = sl->seq ? okv_gen_seq_ids(sl->seq, &n_gen) : NULL;
    const srv_request *r = sl->req;
    for (size_t k = 0; k < (size_t)len; k++) {
        if (k < r->n_prompt) sl->cached[k] = r->prompt[k];
        else if (k - r->n_prompt < n_gen) sl->cached[k] = gen[k - r->n_prompt];
        else return;   /* unknown ids: keep the prefix we know */
        sl->n_cached = k + 1;
    }
}

/* Ends the slot's sequence: reports, keeps its tokens as a prefix cache
 * entry (unless it failed or was cancelled mid-step), frees the slot. */
static void finish_slot(okv_server *s, srv_slot *sl, const char *error, bool cancelled) {
    srv_request *r = sl->req;
    const okv_gen_stats *st = sl->seq ? okv_gen_seq_stats(sl->seq) : NULL;
    if (error) { okv_error e; okv_cache_clear(sl->key, &e); sl->n_cached = 0; }
    else remember_cached(sl);
    pthread_mutex_lock(&s->lock);
    if (st) s->m.generated_tokens += st->generated_tokens;
    if (cancelled) s->m.requests_cancelled++;
    else if (!error) s->m.requests_ok++;
    pthread_mutex_unlock(&s->lock);
    pthread_mutex_lock(&r->lock);
    double first = r->t_first;
    if (cancelled && !error) error = "cancelled";
    srv_emit_end(r, st, error);
    pthread_cond_broadcast(&r->cond);
    pthread_mutex_unlock(&r->lock);
    if (first > 0) {   /* locks are never nested request -> server */
        pthread_mutex_lock(&s->lock);
        s->m.ttft_sum += first;
        s->m.ttft_count++;
        pthread_mutex_unlock(&s->lock);
    }
    okv_gen_seq_free(sl->seq);
    sl->seq = NULL;
    pthread_mutex_lock(&s->lock);
    sl->req = NULL;
    pthread_mutex_unlock(&s->lock);
    srv_request_unref(r);
}

static bool is_cancelled(srv_request *r) {
    pthread_mutex_lock(&r->lock);
    bool c = r->cancelled;
    pthread_mutex_unlock(&r->lock);
    return c;
}

/* Moves queued requests into free slots (FIFO). Called with s->lock held. */
static void admit(okv_server *s) {
    while (s->n_queue) {
        size_t match;
        int i = pick_slot(s, s->queue[0], &match);
        if (i < 0) return;
        srv_request *r = s->queue[0];
        memmove(s->queue, s->queue + 1, (size_t)(--s->n_queue) * sizeof *s->queue);
        if (is_cancelled(r)) {
            pthread_mutex_lock(&r->lock);
            srv_emit_end(r, NULL, "cancelled");
            pthread_cond_broadcast(&r->cond);
            pthread_mutex_unlock(&r->lock);
            s->m.requests_cancelled++;
            srv_request_unref(r);
            continue;
        }
        pthread_mutex_unlock(&s->lock);
        start_in_slot(s, i, r, match);
        pthread_mutex_lock(&s->lock);
    }
}

/* Stopping: queued requests are refused; past the grace time running ones are cancelled. */
static void drain_on_stop(okv_server *s) {
    while (s->n_queue) {
        srv_request *r = s->queue[--s->n_queue];
        pthread_mutex_lock(&r->lock);
        srv_emit_end(r, NULL, "the server is shutting down");
        pthread_cond_broadcast(&r->cond);
        pthread_mutex_unlock(&r->lock);
        srv_request_unref(r);
    }
}

static void *sched_main(void *arg) {
    okv_server *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->lock);
        if (s->stopping) drain_on_stop(s);
        else admit(s);
        bool past_grace = s->stopping && srv_now() > s->stop_deadline;
        int active = 0;
        for (int i = 0; i < s->n_slots; i++) active += s->slots[i].req != NULL;
        if (!active) {
            if (s->stopping) { pthread_mutex_unlock(&s->lock); break; }
            pthread_cond_wait(&s->wake, &s->lock);
            pthread_mutex_unlock(&s->lock);
            continue;
        }
        pthread_mutex_unlock(&s->lock);
        for (int i = 0; i < s->n_slots; i++) {
            srv_slot *sl = &s->slots[i];
            if (!sl->req) continue;
            if (past_grace || is_cancelled(sl->req)) { finish_slot(s, sl, NULL, true); continue; }
            bool done = false;
            okv_error err = {0};
            okv_status st = okv_gen_seq_step(sl->seq, &done, &err);
            pthread_mutex_lock(&s->lock);
            s->m.steps++;
            pthread_mutex_unlock(&s->lock);
            if (st) finish_slot(s, sl, err.message, false);
            else if (done) finish_slot(s, sl, NULL, false);
        }
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
    int n = 0;
    for (int i = 0; i < s->n_slots; i++) n += s->slots[i].req != NULL;
    pthread_mutex_unlock(&s->lock);
    return n;
}

/* ---- metrics ------------------------------------------------------------------ */

static void metric(okv_buf *o, const char *name, const char *type, const char *help, double v) {
    char line[512];
    snprintf(line, sizeof line, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type, name, v);
    okv_buf_puts(o, line);
}

char *srv_metrics_text(okv_server *s) {
    pthread_mutex_lock(&s->lock);
    srv_metrics m = s->m;
    int queued = s->n_queue, active = 0;
    for (int i = 0; i < s->n_slots; i++) active += s->slots[i].req != NULL;
    pthread_mutex_unlock(&s->lock);
    size_t bytes = 0, cached = 0;
    for (int i = 0; i < s->n_slots; i++) {
        size_t b = 0;
        okv_error err;
        if (!okv_cache_bytes(s->slots[i].key, &b, &err)) bytes += b;
        int len = 0;
        if (!okv_cache_length(s->slots[i].key, &len, &err)) cached += (size_t)len;
    }
    okv_buf o = {0};
    metric(&o, "offkv_requests_total", "counter", "Requests admitted to the queue.", (double)m.requests);
    metric(&o, "offkv_requests_finished_total", "counter", "Requests that finished normally.", (double)m.requests_ok);
    metric(&o, "offkv_requests_cancelled_total", "counter", "Requests cancelled (client gone or shutdown).", (double)m.requests_cancelled);
    metric(&o, "offkv_requests_rejected_total", "counter", "Requests refused because the queue was full or the server stopping.", (double)m.requests_rejected);
    metric(&o, "offkv_prompt_tokens_total", "counter", "Prompt tokens of admitted requests.", (double)m.prompt_tokens);
    metric(&o, "offkv_prompt_tokens_cached_total", "counter", "Prompt tokens served from a slot's cache (not recomputed).", (double)m.cached_tokens);
    metric(&o, "offkv_prefix_cache_hits_total", "counter", "Requests that reused a cached prefix.", (double)m.prefix_hits);
    metric(&o, "offkv_generated_tokens_total", "counter", "Tokens generated.", (double)m.generated_tokens);
    metric(&o, "offkv_steps_total", "counter", "Scheduler steps (prefill chunks and decoded tokens).", (double)m.steps);
    metric(&o, "offkv_time_to_first_token_seconds_sum", "counter", "Sum of times to first text.", m.ttft_sum);
    metric(&o, "offkv_time_to_first_token_seconds_count", "counter", "Requests with a first text.", (double)m.ttft_count);
    metric(&o, "offkv_queue_depth", "gauge", "Requests waiting for a slot.", queued);
    metric(&o, "offkv_active_sequences", "gauge", "Sequences being generated (the batch size).", active);
    metric(&o, "offkv_slots_free", "gauge", "Slots without a running sequence.", s->n_slots - active);
    metric(&o, "offkv_slots_total", "gauge", "Slots (cache keys).", s->n_slots);
    metric(&o, "offkv_cache_tokens", "gauge", "Positions held by all slots' caches (running and kept prefixes).", (double)cached);
    metric(&o, "offkv_cache_bytes", "gauge", "Bytes held by all slots' K/V pools.", (double)bytes);
    return okv_buf_detach(&o, NULL);
}
