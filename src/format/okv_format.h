/* okv_format.h — the program file: what an exported model is on disk and in
 * memory.
 *
 * A program is a stateless step graph plus everything needed to run it:
 *
 *   [0..48)   fixed header: magic "OKVPROG\0", version, CRC-32 of the JSON
 *             header, header length, data offset, data size
 *   [48..)    JSON header: metadata, cache layout, graph, tensor table
 *   [data..)  tensor data, each tensor 64-byte aligned (mmap-friendly)
 *
 * The JSON header keeps the format readable and extensible; tensor bytes are
 * never parsed, only mapped. The loader validates every offset, size, index
 * and enum before anything is used, so a truncated or corrupted file gives a
 * precise error, never a crash.
 *
 * The graph's values are activations of shape [rows, width] in float32,
 * where rows is the step's T (or, after a SELECT_ROWS node, the number of
 * logit rows the caller asked for). Token ids and positions are the graph's
 * two inputs and are not values. */
#ifndef OKV_FORMAT_H
#define OKV_FORMAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "offkv_base.h"
#include "okv_layout.h"
#include "okv_quant.h"

/* Version 2 added quantized tensors (dtype "q" + a "quant" scheme object);
 * version 3 GGUF block types carried as they are ("quant": {"block":
 * "q4_K", ...}). A file is written at the oldest version that holds its
 * tensors, so older builds still read what they can run. All load. */
#define OKV_FORMAT_VERSION 3
#define OKV_FORMAT_VERSION_MIN 1
#define OKV_ALIGN 64

/* Bounds every program must respect (okv_program_validate). */
#define OKV_MAX_WIDTH (1 << 28)       /* columns of one graph value */
#define OKV_MAX_VOCAB (1 << 28)
#define OKV_MAX_HIDDEN (1 << 20)
#define OKV_MAX_LAYERS (1 << 16)
#define OKV_MAX_EOS 16                /* eos ids a program may list */
#define OKV_MAX_JSON_INT (1LL << 53)  /* largest integer a JSON number holds exactly */

/* Element types of program tensors: the model dtypes, raw bytes (for
 * bundled blobs such as tokenizer.json), and group-quantized matrices
 * (okv_tensor.quant says how; only MATMUL weights and EMBED tables). */
typedef enum okv_tdtype {
    OKV_T_F32 = OKV_F32,
    OKV_T_F16 = OKV_F16,
    OKV_T_BF16 = OKV_BF16,
    OKV_T_U8 = 3,
    OKV_T_Q = 4
} okv_tdtype;

typedef struct okv_tensor {
    char *name;
    okv_tdtype dtype;
    int n_dims;
    int64_t shape[4];
    uint64_t offset;    /* from the start of the data section */
    uint64_t nbytes;    /* OKV_T_Q: okv_quant_bytes(quant, shape[0], shape[1]) */
    const void *data;   /* reader: points into the mapping; writer: source */
    okv_qscheme quant;  /* OKV_T_Q only: scheme of W[shape[0], shape[1]] */
} okv_tensor;

typedef enum okv_op {   /* each op's parameters: okv_op_params.h */
    OKV_OP_EMBED = 0,   /* ids -> [T, w]: table w0, scaled */
    OKV_OP_RMSNORM,     /* in0 -> out: weight w0 (optional), per group of columns */
    OKV_OP_MATMUL,      /* in0 @ w0^T (+ bias w1) */
    OKV_OP_ROPE,        /* in0 rotated: inv_freq w0 */
    OKV_OP_ATTN,        /* update_and_attend(q=in0, k=in1, v=in2) on one cache;
                           attend-only nodes (KV sharing) have no k/v */
    OKV_OP_GLU,         /* act(in0) * in1 */
    OKV_OP_ADD,         /* in0 + in1 */
    OKV_OP_MUL,         /* in0 * in1 */
    OKV_OP_SCALE,       /* in0 * factor (* the one-element f32 tensor w0 if present) */
    OKV_OP_SOFTCAP,     /* tanh(in0 / cap) * cap */
    OKV_OP_SLICE,       /* a column range of in0 */
    OKV_OP_SELECT_ROWS, /* the logit rows the caller wants (all or last) */
    OKV_OP_COUNT
} okv_op;

#define OKV_NODE_MAX_IN 3
#define OKV_NODE_MAX_I 6
#define OKV_NODE_MAX_F 2

typedef struct okv_node {
    okv_op op;
    int in[OKV_NODE_MAX_IN];   /* value ids, -1 = unused */
    int out;                   /* value id */
    int w[2];                  /* tensor ids, -1 = unused */
    int32_t i[OKV_NODE_MAX_I]; /* the op's parameters: read and written only */
    float f[OKV_NODE_MAX_F];   /* through okv_op_params.h */
} okv_node;

typedef struct okv_value {
    int width;
    bool logit_rows;   /* rows = selected logit rows instead of T */
} okv_value;

typedef struct okv_graph {
    int n_values, n_nodes;
    okv_value *values;
    okv_node *nodes;
    int output;        /* value holding the logits [rows, vocab] */
} okv_graph;

/* What `inspect` shows and the runtime needs besides graph and layout. */
typedef struct okv_meta {
    char *architecture;      /* HF class name, e.g. "LlamaForCausalLM" */
    okv_dtype dtype;         /* weight dtype chosen at export */
    int vocab_size, hidden_size, n_layers;
    int bos_id;              /* -1 if none */
    int *eos_ids;            /* generation_config's EOS list (may be several) */
    int n_eos;
    char *source;            /* checkpoint directory it was exported from */
    char *extra_json;        /* free-form JSON object of other facts (tokenizer bits, ...) */
} okv_meta;

typedef struct okv_program_file {
    okv_meta meta;
    okv_layout layout;
    okv_graph graph;
    int n_tensors;
    okv_tensor *tensors;
    /* writer side: tensors whose data is NULL are produced on demand into a
     * scratch buffer of nbytes (so export never holds the whole model) */
    okv_status (*produce)(void *ctx, int tensor, void *dst, okv_error *err);
    void *produce_ctx;
    /* reader side */
    void *map;
    size_t map_size;         /* the file's bytes at map */
    size_t map_len;          /* the mapping's length (huge pages: rounded up to 2 MiB) */
    okv_weights_memory weights_memory; /* MAPPED or HUGE_PAGES: what map is */
    char *header_json;       /* the parsed JSON header text (for inspect --json) */
} okv_program_file;

const char *okv_op_name(okv_op op);
int okv_op_parse(const char *name);   /* -1 if unknown */
/* Bytes per element; 0 for OKV_T_Q (use okv_tensor_nbytes). */
size_t okv_tdtype_size(okv_tdtype t);
const char *okv_tdtype_name(okv_tdtype t);
/* The bytes a tensor of its dtype (and scheme) and shape needs; 0 if the
 * shape overflows or a quantized tensor is not a valid [N, K] for its
 * scheme. */
uint64_t okv_tensor_nbytes(const okv_tensor *t);
/* "bf16", "f32", "u8" or the scheme's name ("q4 g32 asym f16"); buf >= 32. */
const char *okv_tensor_scheme_name(const okv_tensor *t, char *buf, size_t n);

/* Writes pf (tensors' data pointers are the sources) to path atomically:
 * a temporary file renamed into place, removed on any failure. */
okv_status okv_format_write(const char *path, const okv_program_file *pf, okv_error *err);
/* Maps and validates path (the file mapped read-only). */
okv_status okv_format_open(const char *path, okv_program_file **out, okv_error *err);
/* The same with the bytes where `weights` asks (AUTO / HUGE_PAGES: copied
 * into private huge-page memory when the kernel grants it, else mapped). */
okv_status okv_format_open_with(const char *path, okv_weights_memory weights, okv_program_file **out, okv_error *err);
void okv_format_close(okv_program_file *pf);
/* Rearranges, in the private huge-page copy only (weights_memory ==
 * HUGE_PAGES; a mapped file is left as it is), every GGUF block matrix
 * whose type want() accepts and whose rows divide by 8 into the in-memory
 * x8 layout (okv_qblock_x8.c), setting its quant.x8. Returns how many
 * were packed (a matrix that cannot be is left in file order). */
int okv_format_pack_x8(okv_program_file *pf, bool (*want)(int type));
/* Frees what a writer-side okv_program_file owns (names, graph, meta). */
void okv_program_file_clear(okv_program_file *pf);
/* The layout as a JSON object (n_caches, kv_heads, head_dims, windows,
 * layer_to_cache, prefill_chunk_size, max_ctx_len). */
struct cJSON;
struct cJSON *okv_layout_to_json(const okv_layout *l);
/* The tensor table as a JSON array (name, dtype, shape, offset, nbytes);
 * offsets NULL = the tensors' own offsets. */
struct cJSON *okv_tensors_to_json(const okv_program_file *pf, const uint64_t *offsets);
/* Finds a tensor by name; -1 if absent. */
int okv_format_find_tensor(const okv_program_file *pf, const char *name);
/* Checks the graph against tensors and layout (ids in range, widths agree,
 * unnamed parameter slots 0) and the cache map: one update_and_attend node
 * per layer (as many as the metadata's n_layers) whose cache is the layout's
 * layer_to_cache entry, one writer per cache, every attend-only node after
 * its cache's writer. */
okv_status okv_graph_validate(const okv_program_file *pf, okv_error *err);
/* Checks the metadata (sizes in range, bos/eos ids inside the vocabulary). */
okv_status okv_meta_validate(const okv_meta *m, okv_error *err);
/* Everything the loader requires of a program: metadata, layout, graph.
 * The loader runs it on every file; export runs it before writing, so it
 * never writes a program the loader would refuse. */
okv_status okv_program_validate(const okv_program_file *pf, okv_error *err);

#endif
