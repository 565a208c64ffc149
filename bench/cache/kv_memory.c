/* kv_memory.c — how many bytes the runtime-owned KV cache takes for real
 * model geometries, from the library itself (okv_kv_bytes at the start of a
 * sequence, okv_kv_bytes_full once a sequence reaches the capacity):
 *   - Gemma-3-1B: 26 caches, 1 KV head, head_dim 256, 22 sliding (window 512)
 *     + 4 full (layers 5, 11, 17, 23), chunk 512; and the same forced flat
 *     with windows override {0} (what a cache without rings would cost);
 *   - Llama-3.2-1B: 16 flat caches, 8 KV heads, head_dim 64.
 * at 4k and 32k context, bf16 and f32 storage. Also times begin+commit of a
 * one-token step (the planner's per-step overhead). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "okv_cache.h"
#include "okv_common.h"

static void build_layout(okv_layout *l, int n, int heads, int dim, const int *windows, int max_ctx) {
    okv_error err;
    if (okv_layout_alloc(l, n, n, &err) != OKV_OK) { fprintf(stderr, "%s\n", err.message); exit(1); }
    for (int c = 0; c < n; c++) {
        l->kv_heads[c] = heads;
        l->head_dims[c] = dim;
        l->windows[c] = windows ? windows[c] : 0;
        l->layer_to_cache[c] = c;
    }
    l->prefill_chunk_size = 512;
    l->max_ctx_len = max_ctx;
}

static double mib(size_t b) { return (double)b / (1024.0 * 1024.0); }

static void row(const char *model, const okv_layout *l, int ctx, okv_dtype dt, const int32_t *ov, int n_ov,
                const char *label) {
    okv_kv_options o;
    okv_kv_options_default(&o);
    o.k_dtype = o.v_dtype = dt;
    o.max_capacity = ctx;
    o.windows_override = ov;
    o.n_windows_override = n_ov;
    okv_kv *kv;
    okv_error err;
    if (okv_kv_create(l, &o, &kv, &err) != OKV_OK) { fprintf(stderr, "%s\n", err.message); exit(1); }
    char desc[256];
    okv_kv_describe(kv, desc, sizeof desc);
    printf("%-13s %-10s %6d  %-5s %10.1f %12.1f   %s\n", model, label, ctx, okv_dtype_name(dt), mib(okv_kv_bytes(kv)),
           mib(okv_kv_bytes_full(kv)), desc);
    okv_kv_free(kv);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ns per begin_step + commit_step of one token, cycling a 4k sequence. */
static double step_overhead_ns(const okv_layout *l) {
    okv_kv_options o;
    okv_kv_options_default(&o);
    o.k_dtype = o.v_dtype = OKV_BF16;
    o.max_capacity = 4096;
    o.initial_capacity = 4096;
    okv_kv *kv;
    okv_error err;
    if (okv_kv_create(l, &o, &kv, &err) != OKV_OK) { fprintf(stderr, "%s\n", err.message); exit(1); }
    const int n = 400000;
    double t0 = now_s();
    int32_t len = 0; /* the set's length, tracked here: the set is opaque */
    for (int i = 0; i < n; i++) {
        if (len == 4096) { okv_kv_clear(kv); len = 0; }
        int32_t pos = len;
        if (okv_kv_begin_step(kv, &pos, 1, &err) != OKV_OK) { fprintf(stderr, "%s\n", err.message); exit(1); }
        okv_kv_commit_step(kv);
        len++;
    }
    double dt = now_s() - t0;
    okv_kv_free(kv);
    return dt / n * 1e9;
}

int main(void) {
    int gw[26];
    for (int i = 0; i < 26; i++) gw[i] = (i % 6 == 5) ? 0 : 512;
    okv_layout gemma, llama;
    build_layout(&gemma, 26, 1, 256, gw, 32768);
    build_layout(&llama, 16, 8, 64, NULL, 131072);
    int32_t flat_all[] = { 0 };
    int ctxs[] = { 4096, 32768 };
    okv_dtype dts[] = { OKV_BF16, OKV_F32 };

    printf("%-13s %-10s %6s  %-5s %10s %12s   %s\n", "model", "layout", "ctx", "kv", "start MiB", "full MiB",
           "describe()");
    for (int c = 0; c < 2; c++)
        for (int d = 0; d < 2; d++) {
            row("gemma-3-1b", &gemma, ctxs[c], dts[d], NULL, 0, "ring+flat");
            row("gemma-3-1b", &gemma, ctxs[c], dts[d], flat_all, 1, "all flat");
            row("llama-3.2-1b", &llama, ctxs[c], dts[d], NULL, 0, "flat");
        }
    printf("\nbegin_step+commit_step, 1 token: gemma-3-1b (26 caches) %.0f ns, llama-3.2-1b (16 caches) %.0f ns\n",
           step_overhead_ns(&gemma), step_overhead_ns(&llama));
    okv_layout_free(&gemma);
    okv_layout_free(&llama);
    return 0;
}
