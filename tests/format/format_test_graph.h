/* format_test_graph.h — the one-layer program both format tests build by
 * hand (test_format.c with float weights, test_format_quant.c with
 * quantized ones): its cache layout and its graph
 *     embed -> q, k, v -> attn(cache 0: 1 kv head x 4) -> select -> rmsnorm
 *           -> matmul(embed^T)
 * over tensors 0 embed, 1 q, 2 kv, 3 rope, 4 norm. The tests fill the
 * tensor table themselves, since that is where they differ. */
#ifndef OKV_FORMAT_TEST_GRAPH_H
#define OKV_FORMAT_TEST_GRAPH_H

#include <string.h>

#include "okv_format.h"
#include "okv_op_params.h"

/* values[8], nodes[8]; hidden h, vocab v, n_heads query heads of 4 over one kv head. */
static inline void format_test_graph(okv_program_file *pf, okv_node *nodes, okv_value *values, int h, int v,
                                     int n_heads) {
    okv_layout_alloc(&pf->layout, 1, 1, NULL);
    pf->layout.kv_heads[0] = 1;
    pf->layout.head_dims[0] = 4;
    pf->layout.windows[0] = 0;
    pf->layout.layer_to_cache[0] = 0;
    pf->layout.prefill_chunk_size = 4;
    pf->layout.max_ctx_len = 32;
    okv_value vs[] = {{h, false}, {h, false}, {4, false}, {4, false}, {h, false}, {h, true}, {h, true}, {v, true}};
    memcpy(values, vs, sizeof vs);
    okv_node ns[] = {
        {.op = OKV_OP_EMBED, .in = {-1, -1, -1}, .out = 0, .w = {0, -1}},
        {.op = OKV_OP_MATMUL, .in = {0, -1, -1}, .out = 1, .w = {1, -1}},
        {.op = OKV_OP_MATMUL, .in = {0, -1, -1}, .out = 2, .w = {2, -1}},
        {.op = OKV_OP_MATMUL, .in = {0, -1, -1}, .out = 3, .w = {2, -1}},
        {.op = OKV_OP_ATTN, .in = {1, 2, 3}, .out = 4, .w = {-1, -1}},
        {.op = OKV_OP_SELECT_ROWS, .in = {4, -1, -1}, .out = 5, .w = {-1, -1}},
        {.op = OKV_OP_RMSNORM, .in = {5, -1, -1}, .out = 6, .w = {4, -1}},
        {.op = OKV_OP_MATMUL, .in = {6, -1, -1}, .out = 7, .w = {0, -1}},
    };
    memcpy(nodes, ns, sizeof ns);
    okv_op_embed_set(&nodes[0], (okv_op_embed_params){.scale = 1});
    okv_op_attend_set(&nodes[4], (okv_op_attend_params){.cache = 0, .n_heads = n_heads, .kv_heads = 1, .head_dim = 4,
                                                        .writes_cache = 1, .scale = 0.5f});
    okv_op_rmsnorm_set(&nodes[6], (okv_op_rmsnorm_params){.group = h, .eps = 1e-5f});
    pf->graph = (okv_graph){8, 8, values, nodes, 7};
}

#endif
