/* okv_op_params.h — the named parameters of each graph op, and the one place
 * that knows which node slot holds which of them.
 *
 * On disk (and in okv_node) an op's integers and floats are positional
 * slots, i[0..OKV_NODE_MAX_I) and f[0..OKV_NODE_MAX_F), so the file format
 * stays one fixed shape for every op. Everything else — the graph builder,
 * the validator, the runtime's op dispatch, `inspect` — reads and writes
 * them through the struct of the op below, the way ggml kernels read their
 * op_params into named locals: nobody outside this header spells a slot
 * index. The validator requires every slot the struct of a node's
 * op does not name to be 0 (it copies the params through get/set and
 * compares), so a node carries nothing these structs do not show. Ops without parameters (matmul, add, mul, select_rows) have no
 * struct. */
#ifndef OKV_OP_PARAMS_H
#define OKV_OP_PARAMS_H

#include "okv_format.h"

/* embed: y[t] = table[ids[t]] * scale */
typedef struct okv_op_embed_params { float scale; } okv_op_embed_params;

/* rmsnorm over groups of `group` columns (width % group == 0), eps > 0 */
typedef struct okv_op_rmsnorm_params { int32_t group; float eps; } okv_op_rmsnorm_params;

/* rope over [T, n_heads, head_dim] (head_dim even) */
typedef struct okv_op_rope_params { int32_t n_heads, head_dim; } okv_op_rope_params;

/* update_and_attend: q [T, n_heads, head_dim] over cache `cache` (kv_heads x
 * head_dim); writes_cache = 1: the node writes this step's k/v first (its
 * layer owns the cache), 0: attend-only (a KV-sharing layer reading its
 * donor's cache, written by an earlier node of the same step). */
typedef struct okv_op_attend_params {
    int32_t cache, n_heads, kv_heads, head_dim;
    int32_t writes_cache;   /* 0 or 1 (validated) */
    float scale;            /* applied to q.k */
} okv_op_attend_params;

/* glu: act(in0) * in1; act is an okv_act of the kernels (0 silu, 1 gelu-tanh) */
typedef struct okv_op_glu_params { int32_t act; } okv_op_glu_params;

/* scale: in0 * factor (* the one-element tensor w0 if present) */
typedef struct okv_op_scale_params { float factor; } okv_op_scale_params;

/* softcap: tanh(in0 / cap) * cap, cap > 0 */
typedef struct okv_op_softcap_params { float cap; } okv_op_softcap_params;

/* slice: columns [first, first + width of out) of in0 */
typedef struct okv_op_slice_params { int32_t first; } okv_op_slice_params;

/* The slot map. Each op's get and set sit on one line pair so a new field
 * is added to both or neither. */
static inline okv_op_embed_params okv_op_embed_get(const okv_node *nd) { return (okv_op_embed_params){nd->f[0]}; }
static inline void okv_op_embed_set(okv_node *nd, okv_op_embed_params p) { nd->f[0] = p.scale; }

static inline okv_op_rmsnorm_params okv_op_rmsnorm_get(const okv_node *nd) {
    return (okv_op_rmsnorm_params){.group = nd->i[0], .eps = nd->f[0]};
}
static inline void okv_op_rmsnorm_set(okv_node *nd, okv_op_rmsnorm_params p) { nd->i[0] = p.group; nd->f[0] = p.eps; }

static inline okv_op_rope_params okv_op_rope_get(const okv_node *nd) {
    return (okv_op_rope_params){.n_heads = nd->i[0], .head_dim = nd->i[1]};
}
static inline void okv_op_rope_set(okv_node *nd, okv_op_rope_params p) { nd->i[0] = p.n_heads; nd->i[1] = p.head_dim; }

static inline okv_op_attend_params okv_op_attend_get(const okv_node *nd) {
    return (okv_op_attend_params){.cache = nd->i[0], .n_heads = nd->i[1], .kv_heads = nd->i[2], .head_dim = nd->i[3],
                                  .writes_cache = nd->i[4], .scale = nd->f[0]};
}
static inline void okv_op_attend_set(okv_node *nd, okv_op_attend_params p) {
    nd->i[0] = p.cache; nd->i[1] = p.n_heads; nd->i[2] = p.kv_heads; nd->i[3] = p.head_dim;
    nd->i[4] = p.writes_cache; nd->f[0] = p.scale;
}

static inline okv_op_glu_params okv_op_glu_get(const okv_node *nd) { return (okv_op_glu_params){nd->i[0]}; }
static inline void okv_op_glu_set(okv_node *nd, okv_op_glu_params p) { nd->i[0] = p.act; }

static inline okv_op_scale_params okv_op_scale_get(const okv_node *nd) { return (okv_op_scale_params){nd->f[0]}; }
static inline void okv_op_scale_set(okv_node *nd, okv_op_scale_params p) { nd->f[0] = p.factor; }

static inline okv_op_slice_params okv_op_slice_get(const okv_node *nd) { return (okv_op_slice_params){nd->i[0]}; }
static inline void okv_op_slice_set(okv_node *nd, okv_op_slice_params p) { nd->i[0] = p.first; }

static inline okv_op_softcap_params okv_op_softcap_get(const okv_node *nd) { return (okv_op_softcap_params){nd->f[0]}; }
static inline void okv_op_softcap_set(okv_node *nd, okv_op_softcap_params p) { nd->f[0] = p.cap; }

#endif
