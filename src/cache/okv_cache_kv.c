/* okv_cache_kv.c — the byte layer: a kv set is one K pool and one V pool per
 * cache of a layout, all sharing one sequence controller.
 *
 * Pools are [slots_alloc, kv_heads, head_dim] elements of their storage
 * dtype, chosen per side (K may keep bf16 while V is q8: V's rounding costs
 * the output far less, see README "KV storage") (q8: each (slot, head) row is head_dim / 32 blocks of 32 int8 codes + an
 * f32 scale, okv_kvq8.h; quantized by the write half of attention, so a
 * slot's bytes depend on that slot's row only and ring, cell and rewind
 * logic stays byte-agnostic).
 * Rings are allocated once at their full size (min(window + max_write - 1,
 * capacity) slots); flat pools start at initial_capacity slots and double (capped at
 * the capacity) when a step needs more. A step is a transaction:
 * okv_kv_begin_step checks the positions, grows pools (allocating every new
 * pool before releasing any old one, so a failed growth leaves all caches as
 * they were) and plans the runs; okv_kv_commit_step then advances the length.
 * Pool pointers may change in begin_step, never between begin and commit. */
#include <stdio.h>
#include <stdlib.h>

#include "okv_cache_internal.h"
#include "okv_common.h"
#include "okv_kvq8.h"

void okv_kv_options_default(okv_kv_options *o) {
    memset(o, 0, sizeof *o);
    o->k_dtype = o->v_dtype = OKV_F32;
}

size_t okv_kv_slot_bytes(const okv_cache *c, bool v) {
    size_t n, b;
    if (__builtin_mul_overflow((size_t)c->kv_heads, (size_t)c->head_dim, &n)) return 0;
    return okv_kv_bytes_checked(v ? c->v_dtype : c->k_dtype, n, &b) ? b : 0;
}

/* Bytes of one pool (v: the V pool, else K) of `slots` slots, or 0 if that
 * does not fit in size_t. */
static size_t pool_bytes(const okv_cache *c, bool v, int32_t slots) {
    size_t n;
    if (__builtin_mul_overflow(okv_kv_slot_bytes(c, v), (size_t)slots, &n)) return 0;
    return n;
}

/* Both pools of `slots` slots; SIZE_MAX if the sum does not fit, so a
 * max_pool_bytes limit refuses it. */
static size_t pair_bytes(const okv_cache *c, int32_t slots) {
    size_t n;
    return __builtin_add_overflow(pool_bytes(c, false, slots), pool_bytes(c, true, slots), &n) ? SIZE_MAX : n;
}

static void lock_kv(const okv_kv *kv) { pthread_mutex_lock((pthread_mutex_t *)&kv->lock); }
static void unlock_kv(const okv_kv *kv) { pthread_mutex_unlock((pthread_mutex_t *)&kv->lock); }

static okv_status copy_layout(okv_layout *dst, const okv_layout *src, okv_error *err) {
    okv_status st = okv_layout_alloc(dst, src->n_caches, src->n_layers, err);
    if (st != OKV_OK) return st;
    memcpy(dst->kv_heads, src->kv_heads, (size_t)src->n_caches * sizeof(int));
    memcpy(dst->head_dims, src->head_dims, (size_t)src->n_caches * sizeof(int));
    memcpy(dst->windows, src->windows, (size_t)src->n_caches * sizeof(int));
    memcpy(dst->layer_to_cache, src->layer_to_cache, (size_t)src->n_layers * sizeof(int));
    dst->prefill_chunk_size = src->prefill_chunk_size;
    dst->max_ctx_len = src->max_ctx_len;
    return OKV_OK;
}

/* One side's storage dtype: known, and q8 only where head_dim has whole blocks. */
static okv_status check_storage(const okv_layout *l, okv_dtype dt, const char *side, okv_error *err) {
    if (dt != OKV_F32 && dt != OKV_F16 && dt != OKV_BF16 && dt != OKV_Q8)
        return okv_fail(err, OKV_ERR_INVALID, "kv options: unknown %s storage dtype %d", side, (int)dt);
    for (int c = 0; dt == OKV_Q8 && c < l->n_caches; c++)
        if (l->head_dims[c] % OKV_Q8_BLOCK != 0)
            return okv_fail(err, OKV_ERR_UNSUPPORTED,
                            "kv options: q8 %s storage needs head_dim a multiple of %d, cache %d has head_dim %d",
                            side, OKV_Q8_BLOCK, c, l->head_dims[c]);
    return OKV_OK;
}

static okv_status check_options(const okv_layout *l, const okv_kv_options *o, okv_error *err) {
    okv_status st = check_storage(l, o->k_dtype, "K", err);
    if (st == OKV_OK) st = check_storage(l, o->v_dtype, "V", err);
    if (st != OKV_OK) return st;
    if (o->max_capacity < 0 || o->max_capacity > l->max_ctx_len)
        return okv_fail(err, OKV_ERR_INVALID, "kv options: max_capacity %d outside [0, max_ctx_len %d]",
                        o->max_capacity, l->max_ctx_len);
    if (o->max_step < 0 || o->max_step > l->prefill_chunk_size)
        return okv_fail(err, OKV_ERR_INVALID, "kv options: max_step %d outside [0, prefill_chunk_size %d]", o->max_step,
                        l->prefill_chunk_size);
    if (o->initial_capacity < 0)
        return okv_fail(err, OKV_ERR_INVALID, "kv options: initial_capacity %d is negative", o->initial_capacity);
    if (o->n_windows_override < 0 || (o->n_windows_override > 0 && !o->windows_override))
        return okv_fail(err, OKV_ERR_INVALID, "kv options: windows_override has %d entries but no array",
                        o->n_windows_override);
    for (int i = 0; i < o->n_windows_override; i++) {
        if (o->windows_override[i] < 0)
            return okv_fail(err, OKV_ERR_INVALID, "kv options: windows_override[%d] = %d is negative",
                            i, o->windows_override[i]);
    }
    return OKV_OK;
}

/* The window cache c uses: the override (repeating over the caches) if any. */
static int effective_window(const okv_layout *l, const okv_kv_options *o, int c) {
    if (o->n_windows_override > 0) return o->windows_override[c % o->n_windows_override];
    return l->windows[c];
}

/* Sets up cache c's policy and geometry (no pools yet); steps write at most max_step tokens. */
static okv_status init_cache(okv_cache *c, int idx, const okv_layout *l, const okv_kv_options *o,
                             int32_t capacity, int32_t initial, int32_t max_step, okv_error *err) {
    int window = effective_window(l, o, idx);
    c->kv_heads = l->kv_heads[idx];
    c->head_dim = l->head_dims[idx];
    c->k_dtype = o->k_dtype;
    c->v_dtype = o->v_dtype;
    c->oldest = 0;
    if (window > 0) {
        c->policy = okv_policy_ring_capped(window, max_step, capacity);
        c->slots_alloc = c->policy.slots;
    } else {
        c->policy = okv_policy_flat(capacity);
        c->policy.max_write = max_step;
        c->slots_alloc = initial;
    }
    if (pool_bytes(c, false, c->policy.slots) == 0 || pool_bytes(c, true, c->policy.slots) == 0 ||
        pool_bytes(c, false, c->slots_alloc) == 0 || pool_bytes(c, true, c->slots_alloc) == 0)
        return okv_fail(err, OKV_ERR_INVALID, "kv cache %d: pool of %d slots x %d heads x %d dims is too large",
                        idx, c->policy.slots, c->kv_heads, c->head_dim);
    return OKV_OK;
}

static void free_pools(okv_kv *kv) {
    for (int c = 0; c < kv->n_caches; c++) {
        free(kv->caches[c].k);
        free(kv->caches[c].v);
        kv->caches[c].k = kv->caches[c].v = NULL;
    }
}

/* Total bytes if every cache had the given slot counts (NULL = slots_alloc). */
static size_t total_bytes(const okv_kv *kv, const int32_t *slots) {
    size_t total = 0;
    for (int c = 0; c < kv->n_caches; c++) {
        const okv_cache *ca = &kv->caches[c];
        if (__builtin_add_overflow(total, pair_bytes(ca, slots ? slots[c] : ca->slots_alloc), &total)) return SIZE_MAX;
    }
    return total;
}

static okv_status alloc_initial_pools(okv_kv *kv, okv_error *err) {
    size_t total = total_bytes(kv, NULL);
    if (kv->max_pool_bytes && total > kv->max_pool_bytes)
        return okv_fail(err, OKV_ERR_NOMEM, "kv pools: %zu bytes needed at start, over the max_pool_bytes limit %zu",
                        total, kv->max_pool_bytes);
    for (int c = 0; c < kv->n_caches; c++) {
        okv_cache *ca = &kv->caches[c];
        size_t nk = pool_bytes(ca, false, ca->slots_alloc), nv = pool_bytes(ca, true, ca->slots_alloc);
        ca->k = calloc(1, nk);
        ca->v = calloc(1, nv);
        if (!ca->k || !ca->v)
            return okv_fail(err, OKV_ERR_NOMEM, "kv cache %d: out of memory for pools of %zu + %zu bytes", c, nk, nv);
    }
    return OKV_OK;
}

okv_status okv_kv_create(const okv_layout *layout, const okv_kv_options *opt, okv_kv **out, okv_error *err) {
    *out = NULL;
    okv_kv_options defaults;
    if (!opt) {
        okv_kv_options_default(&defaults);
        opt = &defaults;
    }
    okv_status st = okv_layout_validate(layout, err);
    if (st != OKV_OK) return st;
    st = check_options(layout, opt, err);
    if (st != OKV_OK) return st;

    int32_t capacity = opt->max_capacity ? opt->max_capacity : layout->max_ctx_len;
    int32_t initial = opt->initial_capacity ? opt->initial_capacity : 256;
    if (initial > capacity) initial = capacity;

    okv_kv *kv = calloc(1, sizeof *kv);
    if (!kv) return okv_fail(err, OKV_ERR_NOMEM, "kv set: out of memory");
    pthread_mutex_init(&kv->lock, NULL);
    int32_t max_step = opt->max_step ? opt->max_step : layout->prefill_chunk_size;
    kv->seq = (okv_seq){ 0, capacity, max_step };
    kv->max_pool_bytes = opt->max_pool_bytes;
    st = copy_layout(&kv->layout, layout, err);
    if (st != OKV_OK) goto fail;
    kv->n_caches = layout->n_caches;
    kv->caches = calloc((size_t)kv->n_caches, sizeof *kv->caches);
    kv->plans = calloc((size_t)kv->n_caches, sizeof *kv->plans);
    if (!kv->caches || !kv->plans) {
        st = okv_fail(err, OKV_ERR_NOMEM, "kv set: out of memory for %d caches", kv->n_caches);
        goto fail;
    }
    for (int c = 0; c < kv->n_caches; c++) {
        st = init_cache(&kv->caches[c], c, layout, opt, capacity, initial, max_step, err);
        if (st != OKV_OK) goto fail;
    }
    if (opt->cells) {
        st = okv_kv_cells_create(kv, opt, err);
        if (st != OKV_OK) goto fail;
    }
    st = alloc_initial_pools(kv, err);
    if (st != OKV_OK) goto fail;
    *out = kv;
    return OKV_OK;
fail:
    okv_kv_free(kv);
    return st;
}

void okv_kv_free(okv_kv *kv) {
    if (!kv) return;
    if (kv->caches) free_pools(kv);
    okv_kv_cells_free(kv);
    free(kv->caches);
    free(kv->plans);
    okv_layout_free(&kv->layout);
    pthread_mutex_destroy(&kv->lock);
    free(kv);
}

/* Slots a flat pool of `have` slots grows to so it holds `need` positions:
 * doubling, capped at the capacity. */
static int32_t grown_slots(int32_t have, int32_t need, int32_t capacity) {
    int64_t s = have > 0 ? have : 1;
    while (s < need) s *= 2;
    return s > capacity ? capacity : (int32_t)s;
}

/* Makes every flat pool hold at least `need` slots. */
static okv_status grow_flat_pools(okv_kv *kv, int32_t need, okv_error *err) {
    int n = kv->n_caches;
    bool any = false;
    for (int c = 0; c < n; c++)
        any |= kv->caches[c].policy.kind == OKV_POLICY_FLAT && kv->caches[c].slots_alloc < need;
    if (!any) return OKV_OK;
    int32_t *needs = malloc((size_t)n * sizeof *needs);
    if (!needs) return okv_fail(err, OKV_ERR_NOMEM, "kv pools: out of memory planning growth to %d slots", need);
    for (int c = 0; c < n; c++) needs[c] = kv->caches[c].policy.kind == OKV_POLICY_FLAT ? need : 0;
    okv_status st = okv_kv_grow_pools(kv, needs, err);
    free(needs);
    return st;
}

okv_status okv_kv_grow_pools(okv_kv *kv, const int32_t *need, okv_error *err) {
    int n = kv->n_caches;
    bool any = false;
    for (int c = 0; c < n; c++) any |= kv->caches[c].slots_alloc < need[c];
    if (!any) return OKV_OK;

    int32_t *slots = malloc((size_t)n * sizeof *slots);
    void **fresh = calloc((size_t)n * 2, sizeof *fresh);   /* new k, v per cache */
    okv_status st = OKV_OK;
    if (!slots || !fresh) {
        st = okv_fail(err, OKV_ERR_NOMEM, "kv pools: out of memory planning growth");
        goto done;
    }
    int32_t most = 0;
    for (int c = 0; c < n; c++) {
        const okv_cache *ca = &kv->caches[c];
        bool grows = ca->slots_alloc < need[c];
        slots[c] = grows ? grown_slots(ca->slots_alloc, need[c], ca->policy.slots) : ca->slots_alloc;
        if (need[c] > most) most = need[c];
    }
    size_t total = total_bytes(kv, slots);
    if (kv->max_pool_bytes && total > kv->max_pool_bytes) {
        st = okv_fail(err, OKV_ERR_NOMEM,
                      "kv pools: growing caches to %d slots needs %zu bytes, over the max_pool_bytes limit %zu",
                      most, total, kv->max_pool_bytes);
        goto done;
    }
    for (int c = 0; c < n; c++) {
        const okv_cache *ca = &kv->caches[c];
        if (slots[c] == ca->slots_alloc) continue;
        size_t kbytes = pool_bytes(ca, false, slots[c]), vbytes = pool_bytes(ca, true, slots[c]);
        fresh[2 * c] = calloc(1, kbytes);
        fresh[2 * c + 1] = calloc(1, vbytes);
        if (!fresh[2 * c] || !fresh[2 * c + 1]) {
            st = okv_fail(err, OKV_ERR_NOMEM, "kv cache %d: out of memory growing to %d slots (%zu + %zu bytes)",
                          c, slots[c], kbytes, vbytes);
            goto done;
        }
    }
    for (int c = 0; c < n; c++) {   /* commit: nothing can fail from here */
        okv_cache *ca = &kv->caches[c];
        if (!fresh[2 * c]) continue;
        memcpy(fresh[2 * c], ca->k, pool_bytes(ca, false, ca->slots_alloc));
        memcpy(fresh[2 * c + 1], ca->v, pool_bytes(ca, true, ca->slots_alloc));
        free(ca->k);
        free(ca->v);
        ca->k = fresh[2 * c];
        ca->v = fresh[2 * c + 1];
        fresh[2 * c] = fresh[2 * c + 1] = NULL;
        ca->slots_alloc = slots[c];
    }
done:
    if (fresh)
        for (int i = 0; i < 2 * n; i++) free(fresh[i]);
    free(fresh);
    free(slots);
    return st;
}

okv_status okv_kv_begin_step(okv_kv *kv, const int32_t *positions, int32_t T, okv_error *err) {
    lock_kv(kv);
    okv_status st;
    if (kv->step_T != 0) {
        st = okv_fail(err, OKV_ERR_STATE, "kv step: another step (positions %d..%d) is in flight on this cache set",
                      kv->step_pos, kv->step_pos + kv->step_T - 1);
        goto out;
    }
    if (kv->cells) {
        st = okv_fail(err, OKV_ERR_STATE, "kv step: this cache set holds many sequences (cell pool): step it with "
                      "okv_runner_step_batch");
        goto out;
    }
    st = okv_seq_check_step(&kv->seq, positions, T, err);
    if (st != OKV_OK) goto out;
    int32_t pos = kv->seq.length;
    st = grow_flat_pools(kv, pos + T, err);
    if (st != OKV_OK) goto out;
    for (int c = 0; c < kv->n_caches; c++) okv_policy_plan(&kv->caches[c].policy, pos, T, &kv->plans[c]);
    kv->step_pos = pos;
    kv->step_T = T;
out:
    unlock_kv(kv);
    return st;
}

/* The step in flight may have written its slots: rings forget what it overwrote. */
static void end_step(okv_kv *kv) {
    for (int c = 0; c < kv->n_caches; c++) {
        okv_cache *ca = &kv->caches[c];
        ca->oldest = okv_policy_oldest_after_write(&ca->policy, ca->oldest, kv->step_pos, kv->step_T);
    }
    kv->step_T = 0;
}

void okv_kv_commit_step(okv_kv *kv) {
    lock_kv(kv);
    if (kv->step_T != 0 && kv->cells) {
        okv_kv_cells_commit(kv);
        kv->step_T = 0;
    } else if (kv->step_T != 0) {
        kv->seq.length = kv->step_pos + kv->step_T;
        end_step(kv);
    }
    unlock_kv(kv);
}

void okv_kv_abort_step(okv_kv *kv) {
    lock_kv(kv);
    if (kv->step_T != 0 && kv->cells) {
        okv_kv_cells_abort(kv);
        kv->step_T = 0;
    } else if (kv->step_T != 0) end_step(kv);
    unlock_kv(kv);
}

okv_status okv_kv_rewind(okv_kv *kv, int32_t new_len, okv_error *err) {
    lock_kv(kv);
    okv_status st = OKV_OK;
    if (kv->step_T != 0) {
        st = okv_fail(err, OKV_ERR_STATE, "kv rewind: a step is in flight on this cache set");
        goto out;
    }
    if (kv->cells) {
        st = okv_fail(err, OKV_ERR_STATE, "kv rewind: this cache set holds many sequences (cell pool): use okv_seq_rm");
        goto out;
    }
    if (new_len < 0 || new_len > kv->seq.length) {
        st = okv_fail(err, OKV_ERR_INVALID, "kv rewind: target %d outside [0, length %d]", new_len, kv->seq.length);
        goto out;
    }
    for (int c = 0; c < kv->n_caches; c++) {
        const okv_cache *ca = &kv->caches[c];
        if (okv_policy_can_serve(&ca->policy, ca->oldest, new_len)) continue;
        int32_t W = ca->policy.window;
        st = okv_fail(err, OKV_ERR_INVALID,
                      "kv rewind to %d refused: cache %d (ring, window %d, %d slots) no longer holds positions "
                      "below %d, but a step at %d needs keys from %d; smallest accepted target is %d (or 0)",
                      new_len, c, W, ca->policy.slots, ca->oldest, new_len, new_len - W + 1, ca->oldest + W - 1);
        goto out;
    }
    kv->seq.length = new_len;
    if (new_len == 0)
        for (int c = 0; c < kv->n_caches; c++) kv->caches[c].oldest = 0;
out:
    unlock_kv(kv);
    return st;
}

void okv_kv_clear(okv_kv *kv) {
    lock_kv(kv);
    if (kv->step_T == 0 && !kv->cells) {
        kv->seq.length = 0;
        for (int c = 0; c < kv->n_caches; c++) kv->caches[c].oldest = 0;
    }
    unlock_kv(kv);
}

const okv_layout *okv_kv_layout(const okv_kv *kv) { return &kv->layout; }
bool okv_kv_is_cells(const okv_kv *kv) { return kv->cells != NULL; }
int32_t okv_kv_capacity(const okv_kv *kv) { return kv->seq.capacity; }
int32_t okv_kv_max_write(const okv_kv *kv) { return kv->seq.max_write; }

okv_kv_pools okv_kv_pools_of(const okv_kv *kv, int cache) {
    const okv_cache *c = &kv->caches[cache];
    return (okv_kv_pools){.k = c->k, .v = c->v, .k_dtype = c->k_dtype, .v_dtype = c->v_dtype,
                          .kv_heads = c->kv_heads, .head_dim = c->head_dim};
}

const okv_step_plan *okv_kv_plan(const okv_kv *kv, int cache) { return &kv->plans[cache]; }

int32_t okv_kv_length(const okv_kv *kv) {
    lock_kv(kv);
    int32_t n = kv->seq.length;
    unlock_kv(kv);
    return n;
}

size_t okv_kv_bytes(const okv_kv *kv) {
    lock_kv(kv);
    size_t n = total_bytes(kv, NULL);
    unlock_kv(kv);
    return n;
}

size_t okv_kv_bytes_full(const okv_kv *kv) {
    size_t total = 0;
    for (int c = 0; c < kv->n_caches; c++)
        total += pair_bytes(&kv->caches[c], kv->caches[c].policy.slots);
    return total;
}

/* "bf16", or "K bf16 / V q8" when the sides differ. */
static void describe_dtypes(okv_buf *out, const okv_cache *c) {
    if (c->k_dtype == c->v_dtype) okv_buf_printf(out, "%s", okv_dtype_name(c->k_dtype));
    else okv_buf_printf(out, "K %s / V %s", okv_dtype_name(c->k_dtype), okv_dtype_name(c->v_dtype));
}

void okv_kv_describe(const okv_kv *kv, char *buf, size_t n) {
    if (!buf || n == 0) return;
    okv_buf out; /* truncates at n - 1 bytes */
    okv_buf_init_fixed(&out, buf, n);
    int n_flat = 0;
    for (int c = 0; c < kv->n_caches; c++) n_flat += kv->caches[c].policy.kind == OKV_POLICY_FLAT;
    okv_buf_printf(&out, "%d caches: ", kv->n_caches);
    const char *sep = "";
    if (kv->cells) {
        int n_full = 0, n_win = 0;
        int32_t most = 0;
        for (int c = 0; c < kv->n_caches; c++) {
            const okv_policy *p = &kv->caches[c].policy;
            if (p->window) n_win++;
            else n_full++;
            if (p->slots > most) most = p->slots;
        }
        okv_buf_printf(&out, "%d full + %d windowed, cell pool of %d sequences | up to %d cells | capacity %d per "
               "sequence | kv ", n_full, n_win, kv->cells->seqs.max_seqs, most, kv->cells->seqs.capacity);
        describe_dtypes(&out, &kv->caches[0]);
        okv_buf_printf(&out, " | %.1f MiB", (double)okv_kv_bytes(kv) / (1024.0 * 1024.0));
        return;
    }
    if (n_flat) {
        okv_buf_printf(&out, "%d flat", n_flat);
        sep = " + ";
    }
    /* rings grouped by window, in order of each window's first cache */
    for (int c = 0; c < kv->n_caches; c++) {
        const okv_policy *p = &kv->caches[c].policy;
        if (p->kind != OKV_POLICY_RING) continue;
        bool seen = false;
        for (int e = 0; e < c && !seen; e++)
            seen = kv->caches[e].policy.kind == OKV_POLICY_RING && kv->caches[e].policy.window == p->window;
        if (seen) continue;
        int count = 0;
        for (int e = c; e < kv->n_caches; e++)
            count += kv->caches[e].policy.kind == OKV_POLICY_RING && kv->caches[e].policy.window == p->window;
        okv_buf_printf(&out, "%s%d ring(window %d)", sep, count, p->window);
        sep = " + ";
    }
    okv_buf_printf(&out, " | capacity %d | kv ", kv->seq.capacity);
    describe_dtypes(&out, &kv->caches[0]);
    okv_buf_printf(&out, " | %.1f MiB", (double)okv_kv_bytes(kv) / (1024.0 * 1024.0));
}
