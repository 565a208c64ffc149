/* The program file format: a hand-built program round-trips through
 * write/open, and graphs that break the rules (geometry of an attention
 * node vs its cache, values used before they exist, tensor shapes, bad
 * layouts, a cache map the nodes contradict: two writers, attend-only before
 * the writer, a cache nobody writes) are rejected at load with a message
 * naming the node or cache. */
#include <dirent.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "okv_common.h"
#include "okv_format.h"
#include "okv_op_params.h"
#include "okv_test.h"
#include "format_test_graph.h"

#define V 16
#define H 8

static float embed[V * H], norm_w[H], qw[H * H], kvw[4 * H], inv_freq[2];

/* embed -> q, k, v -> attn(cache 0: 1 kv head x 4) -> select -> matmul(embed^T) */
static void build(okv_program_file *pf, okv_tensor *t, okv_node *nodes, okv_value *values) {
    memset(pf, 0, sizeof *pf);
    pf->meta = (okv_meta){.architecture = "Test", .dtype = OKV_F32, .vocab_size = V, .hidden_size = H, .n_layers = 1,
                          .bos_id = -1, .source = "test"};
    okv_tensor ts[] = {
        {"embed", OKV_T_F32, 2, {V, H}, 0, sizeof embed, embed, {0}},
        {"q", OKV_T_F32, 2, {H, H}, 0, sizeof qw, qw, {0}},
        {"kv", OKV_T_F32, 2, {4, H}, 0, sizeof kvw, kvw, {0}},
        {"rope", OKV_T_F32, 1, {2}, 0, sizeof inv_freq, inv_freq, {0}},
        {"norm", OKV_T_F32, 1, {H}, 0, sizeof norm_w, norm_w, {0}},
    };
    memcpy(t, ts, sizeof ts);
    format_test_graph(pf, nodes, values, H, V, 2);
    pf->n_tensors = 5;
    pf->tensors = t;
}

static char path[] = "/tmp/okv-format-XXXXXX";

/* Writes pf and opens it; returns the open status (message in err). */
static okv_status write_and_open(const okv_program_file *pf, okv_error *err) {
    okv_status st = okv_format_write(path, pf, err);
    if (st) return st;
    okv_program_file *got = NULL;
    st = okv_format_open(path, &got, err);
    okv_format_close(got);
    return st;
}

typedef void (*mutate_fn)(okv_program_file *pf);

/* The attention node's parameters, edited by fn. */
static void edit_attn(okv_program_file *pf, void (*fn)(okv_op_attend_params *)) {
    okv_op_attend_params p = okv_op_attend_get(&pf->graph.nodes[4]);
    fn(&p);
    okv_op_attend_set(&pf->graph.nodes[4], p);
}
static void two_kv_heads(okv_op_attend_params *p) { p->kv_heads = 2; p->n_heads = 2; }
static void cache_3(okv_op_attend_params *p) { p->cache = 3; }
static void no_write(okv_op_attend_params *p) { p->writes_cache = 0; }
static void heads_wrap(okv_op_attend_params *p) { p->n_heads = (1 << 30) + 2; }
static void write_flag_7(okv_op_attend_params *p) { p->writes_cache = 7; }

static void attn_kv_heads(okv_program_file *pf) { edit_attn(pf, two_kv_heads); }
static void attn_head_dim(okv_program_file *pf) { pf->layout.head_dims[0] = 8; }
static void attn_cache_id(okv_program_file *pf) { edit_attn(pf, cache_3); }
static void use_before_def(okv_program_file *pf) { pf->graph.nodes[1].in[0] = 5; }
static void wrong_shape(okv_program_file *pf) { pf->tensors[1].shape[0] = 4; pf->tensors[1].nbytes = 4 * H * 4; }
static void rows_mixed(okv_program_file *pf) { pf->graph.nodes[6].in[0] = 4; }
static void attend_only_with_kv(okv_program_file *pf) { edit_attn(pf, no_write); }
static void output_width(okv_program_file *pf) { pf->meta.vocab_size = V + 1; }
static void layout_map(okv_program_file *pf) { pf->layout.layer_to_cache[0] = 1; }
static void norm_dtype(okv_program_file *pf) { pf->graph.nodes[6].w[0] = 1; }
/* Node integers whose int products or sums wrap to look consistent (issue 8):
 * rope n_heads (2^30 + 2) * head_dim 4 == 8 mod 2^32, attention with
 * 2^30 + 2 heads of dim 4, a slice at column INT_MAX - 1. */
static void rope_wrap(okv_program_file *pf) {
    pf->graph.nodes[1] = (okv_node){.op = OKV_OP_ROPE, .in = {0, -1, -1}, .out = 1, .w = {3, -1}};
    okv_op_rope_set(&pf->graph.nodes[1], (okv_op_rope_params){.n_heads = (1 << 30) + 2, .head_dim = 4});
}
static void attn_heads_wrap(okv_program_file *pf) { edit_attn(pf, heads_wrap); }
static void slice_wrap(okv_program_file *pf) {
    pf->graph.nodes[2] = (okv_node){.op = OKV_OP_SLICE, .in = {0, -1, -1}, .out = 2, .w = {-1, -1}};
    okv_op_slice_set(&pf->graph.nodes[2], (okv_op_slice_params){.first = INT_MAX - 1});
}
static void attn_write_flag(okv_program_file *pf) { edit_attn(pf, write_flag_7); }
static void node_float_inf(okv_program_file *pf) {
    okv_op_rmsnorm_set(&pf->graph.nodes[6], (okv_op_rmsnorm_params){.group = H, .eps = INFINITY});
}
static void meta_bos(okv_program_file *pf) { pf->meta.bos_id = -5; }
static void layout_heads_huge(okv_program_file *pf) { pf->layout.kv_heads[0] = 1 << 20; }

static void test_rejects(void) {
    static const struct { mutate_fn fn; const char *needle; } cases[] = {
        {attn_kv_heads, "cache 0 has kv_heads 1"},
        {attn_head_dim, "head_dim"},
        {attn_cache_id, "cache id out of range"},
        {use_before_def, "undefined"},
        {wrong_shape, "wrong shape"},
        {rows_mixed, "mix step rows and logit rows"},
        {attend_only_with_kv, "attend-only"},
        {output_width, "vocab_size"},
        {layout_map, "layer_to_cache"},
        {norm_dtype, "wrong shape"},
        {rope_wrap, "n_heads * head_dim"},
        {attn_heads_wrap, "heads * head_dim"},
        {slice_wrap, "slice out of range"},
        {attn_write_flag, "writes_cache must be 0 or 1"},
        {node_float_inf, "'f' must be numbers"},   /* JSON has no inf: written as null */
        {meta_bos, "bos_id -5"},
        {layout_heads_huge, "kv_heads[0]"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        okv_program_file pf;
        okv_tensor t[5];
        okv_node nodes[8];
        okv_value values[8];
        build(&pf, t, nodes, values);
        cases[c].fn(&pf);
        okv_error err = {0};
        okv_status st = write_and_open(&pf, &err);
        CHECKF(st == OKV_ERR_FORMAT && strstr(err.message, cases[c].needle), "case %zu: status %d: %s", c, st, err.message);
        okv_layout_free(&pf.layout);
    }
}

/* What the writer (export) checks before writing: the loader's rules. */
static void test_validate_before_write(void) {
    static const struct { mutate_fn fn; const char *needle; } cases[] = {
        {node_float_inf, "f0 = inf is not a finite number"},
        {meta_bos, "bos_id -5"},
        {rope_wrap, "n_heads * head_dim"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        okv_program_file pf;
        okv_tensor t[5];
        okv_node nodes[8];
        okv_value values[8];
        build(&pf, t, nodes, values);
        okv_error err = {0};
        CHECK_OK(okv_program_validate(&pf, &err), &err);
        cases[c].fn(&pf);
        okv_status st = okv_program_validate(&pf, &err);
        CHECKF(st == OKV_ERR_FORMAT && strstr(err.message, cases[c].needle), "case %zu: status %d: %s", c, st, err.message);
        okv_layout_free(&pf.layout);
    }
}

/* err holds exactly the load error "<path>: what" (one line, the file named). */
static bool load_error_is(const okv_error *err, const char *what) {
    char want[sizeof err->message];
    snprintf(want, sizeof want, "%s: %s", path, what);
    return !strcmp(err->message, want);
}

/* ---- the cache map ------------------------------------------------------------ */

/* A two-layer program: build()'s graph with a second update_and_attend node
 * (node 5, reading q = the first one's output) before select_rows, over a
 * layout of n_caches caches (all 1 kv head x 4) mapped by map[layer]. The
 * node of layer l addresses cache[l] and writes it iff writes[l]; an
 * attend-only node takes no k/v. */
typedef struct two_layers {
    int n_caches, map[2], cache[2], writes[2];
    const char *error;   /* the exact load error; NULL = loads */
} two_layers;

static void build_two_layers(okv_program_file *pf, okv_tensor *t, okv_node *nodes, okv_value *values,
                             const two_layers *tl) {
    build(pf, t, nodes, values);
    okv_layout_free(&pf->layout);
    okv_layout_alloc(&pf->layout, tl->n_caches, 2, NULL);
    for (int c = 0; c < tl->n_caches; c++) { pf->layout.kv_heads[c] = 1; pf->layout.head_dims[c] = 4; }
    for (int l = 0; l < 2; l++) pf->layout.layer_to_cache[l] = tl->map[l];
    pf->layout.prefill_chunk_size = 4;
    pf->layout.max_ctx_len = 32;
    pf->meta.n_layers = 2;
    memmove(&nodes[6], &nodes[5], 3 * sizeof *nodes);   /* select, norm, head move down one */
    values[8] = (okv_value){H, false};
    nodes[5] = (okv_node){.op = OKV_OP_ATTN, .in = {4, 2, 3}, .out = 8, .w = {-1, -1}};
    nodes[6].in[0] = 8;
    for (int l = 0; l < 2; l++) {
        okv_node *nd = &nodes[4 + l];
        if (!tl->writes[l]) nd->in[1] = nd->in[2] = -1;
        okv_op_attend_set(nd, (okv_op_attend_params){.cache = tl->cache[l], .n_heads = 2, .kv_heads = 1, .head_dim = 4,
                                                     .writes_cache = tl->writes[l], .scale = 0.5f});
    }
    pf->graph = (okv_graph){9, 9, values, nodes, 7};
}

static void test_cache_map(void) {
    static const two_layers cases[] = {
        /* KV sharing as Gemma-4 exports it: layer 1 reads layer 0's cache */
        {1, {0, 0}, {0, 0}, {1, 0}, NULL},
        {2, {0, 1}, {0, 1}, {1, 1}, NULL},
        {1, {0, 0}, {0, 0}, {1, 1},
         "graph node 5 (update_and_attend): cache 0 is already written by node 4 (one writer per cache)"},
        {1, {0, 0}, {0, 0}, {0, 1},
         "graph node 4 (update_and_attend): attend-only node reads cache 0 before its writer (node 5) has run"},
        {2, {0, 1}, {0, 1}, {1, 0}, "graph node 5 (update_and_attend): attend-only node reads cache 1, which no node writes"},
        {2, {1, 0}, {0, 1}, {1, 1},
         "graph node 4 (update_and_attend): layer 0 addresses cache 0 but the layout's layer_to_cache[0] = 1"},
        {2, {0, 1}, {0, 0}, {1, 0},
         "graph node 5 (update_and_attend): layer 1 addresses cache 0 but the layout's layer_to_cache[1] = 1"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        okv_program_file pf;
        okv_tensor t[5];
        okv_node nodes[9];
        okv_value values[9];
        build_two_layers(&pf, t, nodes, values, &cases[c]);
        okv_error err = {0};
        okv_status st = write_and_open(&pf, &err);
        if (!cases[c].error) CHECKF(st == OKV_OK, "case %zu: %s", c, err.message);
        else
            CHECKF(st == OKV_ERR_FORMAT && load_error_is(&err, cases[c].error), "case %zu: status %d: %s", c, st, err.message);
        okv_layout_free(&pf.layout);
    }
}

/* The layout's layer count, the graph's attention nodes and the metadata's
 * n_layers must agree. */
static void test_layer_count(void) {
    okv_program_file pf;
    okv_tensor t[5];
    okv_node nodes[9];
    okv_value values[9];
    build(&pf, t, nodes, values);   /* one attention node ... */
    okv_layout_free(&pf.layout);
    okv_layout_alloc(&pf.layout, 1, 2, NULL);   /* ... for two layers */
    pf.layout.kv_heads[0] = 1;
    pf.layout.head_dims[0] = 4;
    pf.layout.prefill_chunk_size = 4;
    pf.layout.max_ctx_len = 32;
    okv_error err = {0};
    okv_status st = write_and_open(&pf, &err);
    CHECKF(st == OKV_ERR_FORMAT && load_error_is(&err, "graph: 1 update_and_attend node(s) for the layout's 2 layers "
                                                        "(layer_to_cache)"), "status %d: %s", st, err.message);
    okv_layout_free(&pf.layout);
    two_layers tl = {1, {0, 0}, {0, 0}, {1, 0}, NULL};
    build_two_layers(&pf, t, nodes, values, &tl);
    pf.layout.n_layers = 1;   /* two attention nodes, one layer */
    st = write_and_open(&pf, &err);
    CHECKF(st == OKV_ERR_FORMAT && load_error_is(&err, "graph node 5 (update_and_attend): attention of layer 1, but the "
                                                        "layout has 1 layers (layer_to_cache)"), "status %d: %s", st, err.message);
    pf.layout.n_layers = 2;
    pf.meta.n_layers = 3;   /* the graph and layout agree, the metadata does not */
    st = write_and_open(&pf, &err);
    CHECKF(st == OKV_ERR_FORMAT && load_error_is(&err, "layout has 2 layers (layer_to_cache) but the program meta says "
                                                        "n_layers 3"), "status %d: %s", st, err.message);
    okv_layout_free(&pf.layout);
}

/* Program files written by earlier builds (the fuzz seeds, committed) still
 * load under the cache-map and parameter-slot rules; the Gemma-4 one is a
 * KV-sharing program (attend-only nodes on their donors' caches). */
static void test_committed_programs(void) {
    const char *dir = "fuzz/corpus/program";
    DIR *d = opendir(dir);
    CHECKF(d != NULL, "cannot open %s (ctest runs from the repo root)", dir);
    if (!d) return;
    int loaded = 0, attend_only = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t n = strlen(e->d_name);
        if (n < 8 || strcmp(e->d_name + n - 8, ".program")) continue;
        char file[512];
        snprintf(file, sizeof file, "%s/%s", dir, e->d_name);
        okv_program_file *pf = NULL;
        okv_error err = {0};
        CHECK_OK(okv_format_open(file, &pf, &err), &err);
        if (pf) loaded++;
        for (int k = 0; pf && k < pf->graph.n_nodes; k++)
            if (pf->graph.nodes[k].op == OKV_OP_ATTN && !okv_op_attend_get(&pf->graph.nodes[k]).writes_cache &&
                strstr(e->d_name, "gemma4"))
                attend_only++;
        okv_format_close(pf);
    }
    closedir(d);
    CHECKF(loaded >= 10, "%d committed programs loaded", loaded);
    CHECKF(attend_only >= 2, "%d attend-only nodes in the Gemma-4 programs", attend_only);
}

/* Whether this kernel grants huge pages on request (what the test expects
 * of OKV_WEIGHTS_HUGE_PAGES; read here from sysfs, not from the loader). */
static bool thp_granted(void) {
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    char line[128] = {0};
    bool on = f && fgets(line, sizeof line, f) && (strstr(line, "[always]") || strstr(line, "[madvise]"));
    if (f) fclose(f);
    return on;
}

/* The program at path, already opened mapped, opened again for huge pages:
 * MAPPED maps the file; HUGE_PAGES copies it into 2 MiB-aligned private
 * memory (where granted) holding the same bytes, tensors still aligned;
 * then the file cut short is refused by the copy too. */
static void check_weights_memory(const okv_program_file *mapped) {
    okv_error err = {0};
    okv_program_file *huge = NULL;
    CHECK(mapped->weights_memory == OKV_WEIGHTS_MAPPED);
    CHECK_OK(okv_format_open_with(path, OKV_WEIGHTS_HUGE_PAGES, &huge, &err), &err);
    if (huge) {
        okv_weights_memory want = thp_granted() ? OKV_WEIGHTS_HUGE_PAGES : OKV_WEIGHTS_MAPPED;
        CHECKF(huge->weights_memory == want, "huge-page open gave %d, expected %d", (int)huge->weights_memory, (int)want);
        if (huge->weights_memory == OKV_WEIGHTS_HUGE_PAGES) {
            CHECK((uintptr_t)huge->map % ((uintptr_t)2 << 20) == 0);
            CHECK(huge->map_len % ((size_t)2 << 20) == 0 && huge->map_len >= huge->map_size);
        }
        CHECK(huge->map_size == mapped->map_size && !memcmp(huge->map, mapped->map, mapped->map_size));
        for (int k = 0; k < huge->n_tensors; k++) CHECK((uintptr_t)huge->tensors[k].data % OKV_ALIGN == 0);
    }
    okv_format_close(huge);
    CHECK(mapped->map_size > 256 && truncate(path, (off_t)(mapped->map_size - 64)) == 0);
    okv_program_file *cut = NULL;
    CHECK(okv_format_open_with(path, OKV_WEIGHTS_HUGE_PAGES, &cut, &err) == OKV_ERR_FORMAT && !cut);
}

static void test_roundtrip(void) {
    okv_program_file pf;
    okv_tensor t[5];
    okv_node nodes[8];
    okv_value values[8];
    for (int i = 0; i < V * H; i++) embed[i] = (float)i / 7.0f;
    build(&pf, t, nodes, values);
    okv_error err = {0};
    CHECK_OK(okv_format_write(path, &pf, &err), &err);
    okv_program_file *got = NULL;
    CHECK_OK(okv_format_open(path, &got, &err), &err);
    if (got) {
        CHECK(got->n_tensors == 5 && got->graph.n_nodes == 8 && got->graph.output == 7);
        CHECK(!strcmp(got->meta.architecture, "Test") && got->meta.vocab_size == V);
        int e = okv_format_find_tensor(got, "embed");
        CHECK(e == 0 && !memcmp(got->tensors[e].data, embed, sizeof embed));
        for (int k = 0; k < got->n_tensors; k++) CHECK((uintptr_t)got->tensors[k].data % OKV_ALIGN == 0);
        okv_op_attend_params a = okv_op_attend_get(&got->graph.nodes[4]);
        CHECK(got->graph.nodes[4].op == OKV_OP_ATTN && a.cache == 0 && a.n_heads == 2 && a.kv_heads == 1 &&
              a.head_dim == 4 && a.writes_cache == 1 && a.scale == 0.5f);
        CHECK(okv_op_rmsnorm_get(&got->graph.nodes[6]).group == H && okv_op_rmsnorm_get(&got->graph.nodes[6]).eps == 1e-5f);
        CHECK(got->layout.prefill_chunk_size == 4 && got->layout.max_ctx_len == 32);
        check_weights_memory(got);
    }
    okv_format_close(got);
    okv_layout_free(&pf.layout);
}

static uint32_t crc32_of(const uint8_t *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
    }
    return ~c;
}

/* Mutates the JSON header of a valid program (fixing up the checksum so the
 * parser and validator see the damage) a few thousand times: opening must
 * fail cleanly or succeed, never crash (run under ASan/UBSan too). */
static void test_header_fuzz(void) {
    okv_program_file pf;
    okv_tensor t[5];
    okv_node nodes[8];
    okv_value values[8];
    build(&pf, t, nodes, values);
    okv_error err = {0};
    CHECK_OK(okv_format_write(path, &pf, &err), &err);
    okv_layout_free(&pf.layout);
    char *data;
    size_t len;
    if (okv_read_file(path, &data, &len, &err)) { CHECK(0); return; }
    uint8_t *u = (uint8_t *)data;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | u[16 + i];
    static const char alphabet[] = "{}[],:\"-0123456789e.ntfaxyz ";
    uint64_t rng = 12345;
    int rejected = 0, accepted = 0;
    char *copy = malloc(len);
    for (int iter = 0; iter < 3000; iter++) {
        memcpy(copy, data, len);
        int edits = 1 + iter % 4;
        for (int e = 0; e < edits; e++) {
            rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
            size_t off = 48 + (rng >> 33) % hlen;
            copy[off] = alphabet[(rng >> 20) % (sizeof alphabet - 1)];
        }
        uint32_t crc = crc32_of((uint8_t *)copy + 48, hlen);
        for (int i = 0; i < 4; i++) copy[12 + i] = (char)(crc >> (8 * i));
        FILE *f = fopen(path, "wb");
        fwrite(copy, 1, len, f);
        fclose(f);
        okv_program_file *got = NULL;
        /* every other file through the huge-page copy: the same checks on the same bytes */
        okv_weights_memory wm = iter % 2 ? OKV_WEIGHTS_HUGE_PAGES : OKV_WEIGHTS_MAPPED;
        if (okv_format_open_with(path, wm, &got, &err) == OKV_OK) accepted++;
        else rejected++;
        okv_format_close(got);
    }
    CHECKF(rejected > 1000, "%d of 3000 mutated headers rejected", rejected);
    printf("header fuzz: %d rejected, %d accepted (harmless edits)\n", rejected, accepted);
    free(copy);
    free(data);
}

static uint64_t get_le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static void put_le(uint8_t *p, uint64_t v, int n) { for (int i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i)); }

/* Rewrites the program at `path` with the first `from` in its JSON header
 * replaced by `to`, re-laying the file (header length, data offset, CRC) so
 * only the JSON content differs. Returns false if `from` is absent. */
static bool edit_header(const char *from, const char *to) {
    char *data;
    size_t len;
    okv_error err;
    if (okv_read_file(path, &data, &len, &err)) return false;
    uint8_t *u = (uint8_t *)data;
    uint64_t hlen = get_le(u + 16, 8), off = get_le(u + 24, 8), dsize = get_le(u + 32, 8);
    char *json = strndup(data + 48, hlen);
    char *hit = strstr(json, from);
    if (!hit) { free(json); free(data); return false; }
    size_t nlen = hlen - strlen(from) + strlen(to);
    char *nj = malloc(nlen + 1);
    size_t pre = (size_t)(hit - json);
    memcpy(nj, json, pre);
    memcpy(nj + pre, to, strlen(to));
    strcpy(nj + pre + strlen(to), hit + strlen(from));
    uint64_t noff = (48 + nlen + 63) / 64 * 64;
    uint8_t *out = calloc(1, noff + dsize);
    memcpy(out, u, 48);
    memcpy(out + 48, nj, nlen);
    memcpy(out + noff, u + off, dsize);
    put_le(out + 12, crc32_of((uint8_t *)nj, nlen), 4);
    put_le(out + 16, nlen, 8);
    put_le(out + 24, noff, 8);
    FILE *f = fopen(path, "wb");
    fwrite(out, 1, noff + dsize, f);
    fclose(f);
    free(out); free(nj); free(json); free(data);
    return true;
}

/* The test program written, its header edited (from -> to) and opened;
 * the open's status (OKV_ERR_NOT_FOUND if `from` is not in the header). */
static okv_status open_edited(const char *from, const char *to, okv_error *err) {
    okv_program_file pf;
    okv_tensor t[5];
    okv_node nodes[8];
    okv_value values[8];
    build(&pf, t, nodes, values);
    CHECK_OK(okv_format_write(path, &pf, err), err);
    okv_layout_free(&pf.layout);
    if (!edit_header(from, to)) return okv_fail(err, OKV_ERR_NOT_FOUND, "'%s' not in the header", from);
    okv_program_file *got = NULL;
    okv_status st = okv_format_open(path, &got, err);
    CHECK(!st == !!got);
    okv_format_close(got);
    return st;
}

/* Numbers outside the target type's range are refused as doubles, before any
 * conversion (issue 8: (int)1e20 and (float)1e300 are undefined behaviour,
 * which clang's UBSan reports). */
static void test_header_numbers(void) {
    static const struct { const char *from, *to, *needle; } cases[] = {
        {"\"i\":[0,2,1,4,1,0]", "\"i\":[0,2,1,4,1e20,0]", "'i'[4] must be an integer"},
        {"\"i\":[0,2,1,4,1,0]", "\"i\":[0,2,1,4,-3e9,0]", "'i'[4] must be an integer"},
        {"\"in\":[1,2,3]", "\"in\":[1,2,4294967299]", "'in'[2] must be an integer"},
        {"\"eos_ids\":[]", "\"eos_ids\":[1e300]", "'eos_ids'[0] must be an integer"},
        {"\"f\":[0.5,0]", "\"f\":[1e300,0]", "within float range"},
        {"\"bos_id\":-1", "\"bos_id\":1e20", "'bos_id' must be an integer"},
        {"[16,1]", "[1e300,1]", "value 7 must be [width"},
        /* a slot the op's parameters do not name (embed: only f0) */
        {"\"i\":[0,0,0,0,0,0]", "\"i\":[0,0,7,0,0,0]", "graph node 0 (embed): integer slot 2 = 7 is not a parameter"},
        {"\"f\":[1,0]", "\"f\":[1,3]", "graph node 0 (embed): float slot 1 = 3 is not a parameter"},
        {"[16,1]", "[16,2]", "value 7 must be [width"},
        {"\"offset\":0", "\"offset\":1e300", "offset/nbytes"},
        {"\"offset\":0", "\"offset\":0.5", "offset/nbytes"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        okv_error err = {0};
        okv_status st = open_edited(cases[c].from, cases[c].to, &err);
        CHECKF(st == OKV_ERR_FORMAT && strstr(err.message, cases[c].needle), "case %zu: status %d: %s", c, st, err.message);
    }
}

/* The tensor table of a crafted file: data ranges that overlap (by a byte,
 * contained, or at the same offset) and repeated names are refused naming
 * both tensors; touching ranges and zero-byte tensors are not overlaps. */
static void test_tensor_table(void) {
    /* the writer's layout: embed [0,512) q [512,768) kv [768,896) rope [896,904) norm [960,992) */
    static const struct { const char *from, *to, *needle; } cases[] = {
        {"\"name\":\"q\",\"dtype\":\"f32\",\"shape\":[8,8],\"offset\":512",
         "\"name\":\"q\",\"dtype\":\"f32\",\"shape\":[8,8],\"offset\":448",
         "tensors 'embed' [0, +512) and 'q' [448, +256) overlap in the data section"},
        {"\"name\":\"kv\",\"dtype\":\"f32\",\"shape\":[4,8],\"offset\":768",
         "\"name\":\"kv\",\"dtype\":\"f32\",\"shape\":[4,8],\"offset\":0", "'embed' [0, +512) and 'kv' [0, +128) overlap"},
        {"\"name\":\"norm\",\"dtype\":\"f32\",\"shape\":[8],\"offset\":960",
         "\"name\":\"norm\",\"dtype\":\"f32\",\"shape\":[8],\"offset\":128", "'embed' [0, +512) and 'norm' [128, +32) overlap"},
        {"\"name\":\"norm\"", "\"name\":\"q\"", "tensor 'q' appears twice (tensors 1 and 4)"},
        {"\"name\":\"embed\"", "\"name\":\"rope\"", "tensor 'rope' appears twice (tensors 0 and 3)"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        okv_error err = {0};
        okv_status st = open_edited(cases[c].from, cases[c].to, &err);
        CHECKF(st == OKV_ERR_FORMAT && strstr(err.message, cases[c].needle) && strstr(err.message, path) &&
                   !strchr(err.message, '\n'),
               "case %zu: status %d: %s", c, st, err.message);
    }
    {   /* a zero-byte tensor inside another's bytes, and ranges that touch, load */
        okv_program_file pf;
        okv_tensor t[6];
        okv_node nodes[8];
        okv_value values[8];
        build(&pf, t, nodes, values);
        t[5] = (okv_tensor){"empty", OKV_T_F32, 1, {0}, 0, 0, NULL, {0}};
        pf.n_tensors = 6;
        okv_error err = {0};
        CHECK_OK(okv_format_write(path, &pf, &err), &err);
        okv_layout_free(&pf.layout);
        CHECK(edit_header("\"name\":\"empty\",\"dtype\":\"f32\",\"shape\":[0],\"offset\":1024",
                          "\"name\":\"empty\",\"dtype\":\"f32\",\"shape\":[0],\"offset\":64"));
        okv_program_file *got = NULL;
        CHECK_OK(okv_format_open(path, &got, &err), &err);
        okv_format_close(got);
    }
}

int main(void) {
    int fd = mkstemp(path);
    if (fd < 0) return 1;
    close(fd);
    test_roundtrip();
    test_rejects();
    test_cache_map();
    test_layer_count();
    test_committed_programs();
    test_header_numbers();
    test_tensor_table();
    test_validate_before_write();
    test_header_fuzz();
    unlink(path);
    return okv_test_finish();
}
