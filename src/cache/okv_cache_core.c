/* okv_cache_core.c — the tensor-free core of the KV cache: the two layout
 * policies (flat, ring), the step planner and the sequence
 * controller. Nothing here touches bytes, so every rule about which slot
 * holds which position can be tested exhaustively without a pool.
 *
 * A ring of S = window + max_write - 1 slots maps position p to slot p mod S.
 * A step of T <= max_write tokens at pos needs keys [pos - window + 1, pos+T),
 * at most window + T - 1 <= S positions, so it never overwrites a key one of
 * its own queries still needs. Spans that cross the end of the ring are cut
 * into two runs; a span is never longer than S, so two runs always suffice.
 * When the capacity is smaller than that, S = capacity: positions never reach
 * S, so nothing is ever overwritten and the ring behaves as a flat cache with
 * a window mask. */
#include <stdint.h>
#include <stdlib.h>

#include "okv_cache.h"
#include "okv_common.h"

/* ---- policies and planner ------------------------------------------------ */

okv_policy okv_policy_flat(int32_t capacity) {
    okv_policy p = { OKV_POLICY_FLAT, 0, 0, capacity };
    return p;
}

okv_policy okv_policy_ring_capped(int32_t window, int32_t max_write, int32_t capacity) {
    int64_t slots = (int64_t)window + max_write - 1;   /* may exceed int32 for a huge window */
    okv_policy p = { OKV_POLICY_RING, window, max_write, slots < capacity ? (int32_t)slots : capacity };
    return p;
}

/* Cuts positions [first, first+n) of a ring of S slots into at most two runs
 * of consecutive slots, in position order. Returns the number of runs. */
static int ring_runs(int32_t S, int32_t first, int32_t n, okv_run runs[2]) {
    if (n <= 0) return 0;
    int32_t slot = first % S;
    int32_t head = S - slot < n ? S - slot : n;   /* rows before the wrap */
    runs[0] = (okv_run){ slot, head, first };
    if (head == n) return 1;
    runs[1] = (okv_run){ 0, n - head, first + head };
    return 2;
}

void okv_policy_plan(const okv_policy *p, int32_t pos, int32_t T, okv_step_plan *out) {
    memset(out, 0, sizeof *out);
    if (p->kind == OKV_POLICY_FLAT) {
        out->write[0] = (okv_run){ pos, T, pos };
        out->n_write = 1;
        out->read_base = 0;
        out->read[0] = (okv_run){ 0, pos + T, 0 };
        out->n_read = 1;
        out->window = 0;
        return;
    }
    int32_t base = pos - p->window + 1;
    if (base < 0) base = 0;
    out->n_write = ring_runs(p->slots, pos, T, out->write);
    out->read_base = base;
    out->n_read = ring_runs(p->slots, base, pos + T - base, out->read);
    out->window = p->window;
}

bool okv_policy_can_serve(const okv_policy *p, int32_t oldest_held, int32_t new_len) {
    if (p->kind == OKV_POLICY_FLAT || new_len == 0) return true;
    int32_t need = new_len - p->window + 1;
    if (need < 0) need = 0;
    return need >= oldest_held;
}

int32_t okv_policy_oldest_after_write(const okv_policy *p, int32_t oldest_held, int32_t pos, int32_t T) {
    if (p->kind == OKV_POLICY_FLAT) return oldest_held;
    int64_t gone = (int64_t)pos + T - p->slots;   /* positions below this were overwritten */
    return gone > oldest_held ? (int32_t)gone : oldest_held;
}

/* ---- sequence controller ------------------------------------------------- */

okv_status okv_seq_check_step(const okv_seq *s, const int32_t *positions, int32_t T, okv_error *err) {
    if (T < 1 || T > s->max_write)
        return okv_fail(err, OKV_ERR_INVALID, "kv step: %d tokens, must be in [1, %d] (the step size: max_step, else prefill_chunk_size)",
                        T, s->max_write);
    if (!positions)
        return okv_fail(err, OKV_ERR_INVALID, "kv step: positions missing");
    for (int32_t t = 0; t < T; t++) {
        if ((int64_t)positions[t] != (int64_t)s->length + t)
            return okv_fail(err, OKV_ERR_INVALID,
                            "kv step: positions[%d] = %d, expected %lld (sequence length %d, positions must continue it)",
                            t, positions[t], (long long)s->length + t, s->length);
    }
    if ((int64_t)s->length + T > s->capacity)
        return okv_fail(err, OKV_ERR_CAPACITY,
                        "kv step: positions %d..%d overflow the cache capacity %d",
                        s->length, s->length + T - 1, s->capacity);
    return OKV_OK;
}
