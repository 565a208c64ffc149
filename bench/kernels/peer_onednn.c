/* peer_onednn.c — the oneDNN side of bench_kernels' "onednn" section: one
 * matmul primitive per shape through oneDNN's C API, created once, its
 * memory objects re-pointed at the caller's buffers on every call (so the
 * rotating weight copies of the bench defeat the cache for both sides).
 * Weights are not reordered into oneDNN's blocked layout: the runtime reads
 * W where it lies, and so must the peer (oneDNN packs what it needs inside
 * the call, as offkv does). */
#include "peer_onednn.h"

#include <omp.h>
#include <stdlib.h>

#include <oneapi/dnnl/dnnl.h>

struct peer_gemm {
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    dnnl_primitive_t prim;
    dnnl_memory_t x, w, y, w_plain; /* w_plain: the source of peer_gemm_pack */
};

void peer_gemm_free(peer_gemm *g) {
    if (!g) return;
    if (g->x) dnnl_memory_destroy(g->x);
    if (g->w) dnnl_memory_destroy(g->w);
    if (g->y) dnnl_memory_destroy(g->y);
    if (g->w_plain) dnnl_memory_destroy(g->w_plain);
    if (g->prim) dnnl_primitive_destroy(g->prim);
    if (g->stream) dnnl_stream_destroy(g->stream);
    if (g->engine) dnnl_engine_destroy(g->engine);
    free(g);
}

peer_gemm *peer_gemm_create(int T, int K, int N, int packed, const char **impl) {
    peer_gemm *g = calloc(1, sizeof *g);
    dnnl_memory_desc_t xd = NULL, wd = NULL, wd_any = NULL, yd = NULL;
    const_dnnl_memory_desc_t wd_chosen = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_dims_t xdims = {T, K}, wdims = {K, N}, ydims = {T, N};
    int ok = g && dnnl_engine_create(&g->engine, dnnl_cpu, 0) == dnnl_success &&
             dnnl_stream_create(&g->stream, g->engine, dnnl_stream_default_flags) == dnnl_success &&
             dnnl_memory_desc_create_with_tag(&xd, 2, xdims, dnnl_bf16, dnnl_ab) == dnnl_success &&
             dnnl_memory_desc_create_with_tag(&wd, 2, wdims, dnnl_bf16, dnnl_ba) == dnnl_success &&
             dnnl_memory_desc_create_with_tag(&wd_any, 2, wdims, dnnl_bf16, dnnl_format_tag_any) == dnnl_success &&
             dnnl_memory_desc_create_with_tag(&yd, 2, ydims, dnnl_f32, dnnl_ab) == dnnl_success &&
             dnnl_matmul_primitive_desc_create(&pd, g->engine, xd, packed ? wd_any : wd, NULL, yd, NULL) ==
                 dnnl_success &&
             dnnl_primitive_create(&g->prim, pd) == dnnl_success &&
             (wd_chosen = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0)) != NULL &&
             dnnl_memory_create(&g->x, xd, g->engine, DNNL_MEMORY_NONE) == dnnl_success &&
             dnnl_memory_create(&g->w, wd_chosen, g->engine, DNNL_MEMORY_NONE) == dnnl_success &&
             dnnl_memory_create(&g->w_plain, wd, g->engine, DNNL_MEMORY_NONE) == dnnl_success &&
             dnnl_memory_create(&g->y, yd, g->engine, DNNL_MEMORY_NONE) == dnnl_success;
    if (pd) dnnl_primitive_desc_destroy(pd); /* the primitive keeps its own copy */
    const_dnnl_primitive_desc_t own = NULL;   /* ... which owns the name string */
    if (ok && impl && dnnl_primitive_get_primitive_desc(g->prim, &own) == dnnl_success)
        dnnl_primitive_desc_query(own, dnnl_query_impl_info_str, 0, (void *)impl);
    if (xd) dnnl_memory_desc_destroy(xd);
    if (wd) dnnl_memory_desc_destroy(wd);
    if (wd_any) dnnl_memory_desc_destroy(wd_any);
    if (yd) dnnl_memory_desc_destroy(yd);
    if (!ok) {
        peer_gemm_free(g);
        return NULL;
    }
    return g;
}

int peer_gemm_run(peer_gemm *g, float *y, const uint16_t *x, const uint16_t *W, int n_threads) {
    omp_set_num_threads(n_threads);
    dnnl_memory_set_data_handle(g->x, (void *)x);
    dnnl_memory_set_data_handle(g->w, (void *)W);
    dnnl_memory_set_data_handle(g->y, y);
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, g->x}, {DNNL_ARG_WEIGHTS, g->w}, {DNNL_ARG_DST, g->y}};
    if (dnnl_primitive_execute(g->prim, g->stream, 3, args) != dnnl_success) return -1;
    return dnnl_stream_wait(g->stream) == dnnl_success ? 0 : -1;
}

void *peer_gemm_pack(peer_gemm *g, const uint16_t *W) {
    const_dnnl_memory_desc_t md = NULL;
    dnnl_primitive_desc_t rpd = NULL;
    dnnl_primitive_t reorder = NULL;
    if (dnnl_memory_get_memory_desc(g->w, &md) != dnnl_success) return NULL;
    void *out = aligned_alloc(64, (dnnl_memory_desc_get_size(md) + 63) / 64 * 64);
    const_dnnl_memory_desc_t src_md = NULL;
    dnnl_memory_get_memory_desc(g->w_plain, &src_md);
    dnnl_memory_set_data_handle(g->w_plain, (void *)W);
    dnnl_memory_set_data_handle(g->w, out);
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, g->w_plain}, {DNNL_ARG_TO, g->w}};
    int ok = out && dnnl_reorder_primitive_desc_create(&rpd, src_md, g->engine, md, g->engine, NULL) == dnnl_success &&
             dnnl_primitive_create(&reorder, rpd) == dnnl_success &&
             dnnl_primitive_execute(reorder, g->stream, 2, args) == dnnl_success &&
             dnnl_stream_wait(g->stream) == dnnl_success;
    if (reorder) dnnl_primitive_destroy(reorder);
    if (rpd) dnnl_primitive_desc_destroy(rpd);
    if (!ok) {
        free(out);
        return NULL;
    }
    return out;
}
