/* Programs that pass every per-node check but whose sizes only go wrong when
 * the runtime multiplies them out (issue 8): the activation arena of many
 * wide values at a huge chunk size must be refused with the value named,
 * never wrap to a tiny allocation the kernels then write past. The program
 * is hand-built with the format writer and loaded through the public API. */
#include "e2e_util.h"
#include "okv_format.h"
#include "okv_op_params.h"

#define N_EMBED 1024          /* values live at once */
#define WIDE (1 << 22)        /* columns of each */
#define CHUNK (1 << 30)       /* prefill_chunk_size: rows of each */

/* N_EMBED embeddings of the same [1, WIDE] bf16 table, then a chain of adds
 * (so all embeddings are live together): N_EMBED * WIDE * CHUNK floats =
 * 2^62, whose byte count (2^64) wraps to 0 in size_t. Its one layer's
 * attention (one column of the first embedding as q, k and v) is what the
 * loader requires of the cache map: the layout's cache has its writer. */
static char *write_wide_program(void) {
    int n_chain = 2 * N_EMBED - 1, n_nodes = n_chain + 2;
    okv_value *values = calloc((size_t)n_nodes, sizeof *values);
    okv_node *nodes = calloc((size_t)n_nodes, sizeof *nodes);
    uint16_t *table = calloc(WIDE, sizeof *table);
    for (int v = 0; v < n_nodes; v++) values[v] = (okv_value){WIDE, false};
    for (int n = 0; n < N_EMBED; n++) {
        nodes[n] = (okv_node){.op = OKV_OP_EMBED, .in = {-1, -1, -1}, .out = n, .w = {0, -1}};
        okv_op_embed_set(&nodes[n], (okv_op_embed_params){.scale = 1});
    }
    for (int k = 1; k < N_EMBED; k++) {   /* value N_EMBED + k - 1 = (previous sum) + embed k */
        int prev = k == 1 ? 0 : N_EMBED + k - 2;
        nodes[N_EMBED + k - 1] = (okv_node){.op = OKV_OP_ADD, .in = {prev, k, -1}, .out = N_EMBED + k - 1, .w = {-1, -1}};
    }
    int col = n_chain, att = n_chain + 1;
    values[col] = values[att] = (okv_value){1, false};
    nodes[col] = (okv_node){.op = OKV_OP_SLICE, .in = {0, -1, -1}, .out = col, .w = {-1, -1}};
    nodes[att] = (okv_node){.op = OKV_OP_ATTN, .in = {col, col, col}, .out = att, .w = {-1, -1}};
    okv_op_attend_set(&nodes[att], (okv_op_attend_params){.cache = 0, .n_heads = 1, .kv_heads = 1, .head_dim = 1,
                                                          .writes_cache = 1, .scale = 1});
    okv_tensor t = {.name = "embed", .dtype = OKV_T_BF16, .n_dims = 2, .shape = {1, WIDE}, .nbytes = (uint64_t)WIDE * 2,
                    .data = table};
    okv_program_file pf = {0};
    okv_layout_alloc(&pf.layout, 1, 1, NULL);
    pf.layout.kv_heads[0] = 1;
    pf.layout.head_dims[0] = 1;
    pf.layout.prefill_chunk_size = CHUNK;
    pf.layout.max_ctx_len = CHUNK;
    pf.meta = (okv_meta){.architecture = "Hostile", .dtype = OKV_BF16, .vocab_size = WIDE, .hidden_size = 1,
                         .n_layers = 1, .bos_id = -1, .source = "test"};
    pf.graph = (okv_graph){n_nodes, n_nodes, values, nodes, n_chain - 1};
    pf.n_tensors = 1;
    pf.tensors = &t;
    char *path = e2e_path("wide.okv");
    okv_error err = {0};
    CHECK_OK(okv_program_validate(&pf, &err), &err);   /* every node is consistent */
    CHECK_OK(okv_format_write(path, &pf, &err), &err);
    okv_layout_free(&pf.layout);
    free(values);
    free(nodes);
    free(table);
    return path;
}

static void test_arena_overflow(void) {
    char *path = write_wide_program();
    okv_program *p = NULL;
    okv_error err = {0};
    CHECK_OK(okv_program_open(path, &p, &err), &err);
    if (!p) { free(path); return; }
    CHECK_OK(okv_cache_install("wide", p, NULL, &err), &err);
    okv_runner *r = NULL;
    okv_status st = okv_runner_create(p, "wide", NULL, &r, &err);
    CHECKF(st == OKV_ERR_NOMEM && r == NULL, "runner over a 2^64-byte arena: status %d (%s)", st, err.message);
    CHECKF(strstr(err.message, "activations too large") && strstr(err.message, "value 0") &&
               strstr(err.message, "prefill_chunk_size"), "message: %s", err.message);
    okv_runner_free(r);
    okv_cache_remove("wide", &err);
    okv_program_free(p);
    free(path);
}

int main(void) {
    test_arena_overflow();
    e2e_cleanup();
    return okv_test_finish();
}
