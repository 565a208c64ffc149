/* Quantized tensors in the program file: a hand-built program with a 4-bit
 * matmul weight and an 8-bit embedding table (also the tied head)
 * round-trips with its schemes, is written as format version 2 (a float-only
 * program stays version 1), and every inconsistency in a quantized tensor's
 * record is a one-line load error naming the tensor: unknown bits, group or
 * scale dtype, a group that does not divide K, a scale plane of the wrong
 * size (nbytes), a missing scheme, a quantized tensor where the op has no
 * quantized kernel, a quantized tensor in a version-1 file. A GGUF block
 * type (here Q8_0 blocks as the matmul weight) round-trips as format
 * version 3, and a block record that is unknown, in a version-2 file,
 * disagrees with its bits/group, or with the tensor's byte size, is refused
 * naming the tensor. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "okv_common.h"
#include "okv_format.h"
#include "okv_op_params.h"
#include "okv_quant.h"
#include "okv_test.h"
#include "format_test_graph.h"

#define V 16
#define H 64

static float embed[V * H], qw[H * H], kvw[4 * H], inv_freq[2], norm_w[H];
static uint8_t *q_embed, *q_qw;
static const okv_qscheme S4 = {4, 32, true, OKV_F16, OKV_QB_NONE, false}, S8 = {8, 32, false, OKV_F16, OKV_QB_NONE, false};

/* embed(q8) -> q(q4), k, v -> attn -> select -> norm -> matmul(embed^T, q8) */
static void build(okv_program_file *pf, okv_tensor *t, okv_node *nodes, okv_value *values) {
    memset(pf, 0, sizeof *pf);
    pf->meta = (okv_meta){.architecture = "Test", .dtype = OKV_F32, .vocab_size = V, .hidden_size = H, .n_layers = 1,
                          .bos_id = -1, .source = "test"};
    okv_tensor ts[] = {
        {.name = "embed", .dtype = OKV_T_Q, .n_dims = 2, .shape = {V, H}, .nbytes = okv_quant_bytes(&S8, V, H), .data = q_embed, .quant = S8},
        {.name = "q", .dtype = OKV_T_Q, .n_dims = 2, .shape = {H, H}, .nbytes = okv_quant_bytes(&S4, H, H), .data = q_qw, .quant = S4},
        {.name = "kv", .dtype = OKV_T_F32, .n_dims = 2, .shape = {4, H}, .nbytes = sizeof kvw, .data = kvw},
        {.name = "rope", .dtype = OKV_T_F32, .n_dims = 1, .shape = {2}, .nbytes = sizeof inv_freq, .data = inv_freq},
        {.name = "norm", .dtype = OKV_T_F32, .n_dims = 1, .shape = {H}, .nbytes = sizeof norm_w, .data = norm_w},
    };
    memcpy(t, ts, sizeof ts);
    format_test_graph(pf, nodes, values, H, V, 16);
    pf->n_tensors = 5;
    pf->tensors = t;
}

static char path[] = "/tmp/okv-format-q-XXXXXX";

static okv_status write_and_open(const okv_program_file *pf, okv_program_file **out, okv_error *err) {
    okv_status st = okv_format_write(path, pf, err);
    if (st) return st;
    okv_program_file *got = NULL;
    st = okv_format_open(path, &got, err);
    if (out && !st) *out = got;
    else okv_format_close(got);
    return st;
}

static uint32_t file_version(void) {
    uint8_t h[12] = {0};
    FILE *f = fopen(path, "rb");
    if (!f || fread(h, 1, sizeof h, f) != sizeof h) { if (f) fclose(f); return 0; }
    fclose(f);
    return (uint32_t)h[8] | (uint32_t)h[9] << 8 | (uint32_t)h[10] << 16 | (uint32_t)h[11] << 24;
}

static void test_roundtrip(void) {
    okv_program_file pf, *got = NULL;
    okv_tensor t[5];
    okv_node nodes[8];
    okv_value values[8];
    build(&pf, t, nodes, values);
    okv_error err = {0};
    CHECK_OK(write_and_open(&pf, &got, &err), &err);
    CHECK(file_version() == 2);
    if (got) {
        const okv_tensor *e = &got->tensors[okv_format_find_tensor(got, "embed")], *q = &got->tensors[okv_format_find_tensor(got, "q")];
        CHECK(e->dtype == OKV_T_Q && e->quant.bits == 8 && e->quant.group == 32 && !e->quant.asym && e->quant.scale_dtype == OKV_F16);
        CHECK(q->dtype == OKV_T_Q && q->quant.bits == 4 && q->quant.asym && q->nbytes == okv_quant_bytes(&S4, H, H));
        CHECK(!memcmp(q->data, q_qw, q->nbytes) && !memcmp(e->data, q_embed, e->nbytes));
        char name[64];
        CHECK(!strcmp(okv_tensor_scheme_name(q, name, sizeof name), "q4 g32 asym f16"));
        CHECK(!strcmp(okv_tensor_scheme_name(&got->tensors[2], name, sizeof name), "f32"));
        CHECK(okv_tensor_nbytes(q) == q->nbytes && okv_tensor_nbytes(&got->tensors[2]) == sizeof kvw);
    }
    okv_format_close(got);
    /* without quantized tensors the file stays version 1 (older readers keep working) */
    t[0] = (okv_tensor){.name = "embed", .dtype = OKV_T_F32, .n_dims = 2, .shape = {V, H}, .nbytes = sizeof embed, .data = embed};
    t[1] = (okv_tensor){.name = "q", .dtype = OKV_T_F32, .n_dims = 2, .shape = {H, H}, .nbytes = sizeof qw, .data = qw};
    CHECK_OK(write_and_open(&pf, NULL, &err), &err);
    CHECK(file_version() == 1);
    okv_layout_free(&pf.layout);
}

typedef void (*mutate_fn)(okv_program_file *pf);
static void bits5(okv_program_file *pf) { pf->tensors[1].quant.bits = 5; }
static void group48(okv_program_file *pf) { pf->tensors[1].quant.group = 48; }
static void group_k(okv_program_file *pf) {   /* K = 64 is not a multiple of 128 */
    pf->tensors[1].quant.group = 128;
}
static void scale_bf16(okv_program_file *pf) { pf->tensors[1].quant.scale_dtype = OKV_BF16; }
static void short_scales(okv_program_file *pf) { pf->tensors[1].nbytes -= 64; }   /* a scale plane too small */
static void long_scales(okv_program_file *pf) { pf->tensors[0].nbytes += 64; }    /* ... or too large */
static void q_norm(okv_program_file *pf) {   /* the rmsnorm weight may not be quantized */
    static uint8_t buf[4096];
    okv_qscheme s = S8;
    pf->tensors[4] = (okv_tensor){.name = "norm", .dtype = OKV_T_Q, .n_dims = 2, .shape = {1, H},
                                  .nbytes = okv_quant_bytes(&s, 1, H), .data = buf, .quant = s};
}
static void q_1d(okv_program_file *pf) { pf->tensors[1].n_dims = 1; pf->tensors[1].shape[0] = H * H; }

static void test_rejects(void) {
    static const struct { mutate_fn fn; const char *needle; } cases[] = {
        {bits5, "tensor 'q'"},
        {group48, "tensor 'q'"},
        {group_k, "tensor 'q'"},
        {scale_bf16, "tensor 'q'"},
        {short_scales, "tensor 'q': nbytes"},
        {long_scales, "tensor 'embed': nbytes"},
        {q_norm, "only matmul weights and embedding tables"},
        {q_1d, "tensor 'q': a quantized tensor must be 2-D"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        okv_program_file pf;
        okv_tensor t[5];
        okv_node nodes[8];
        okv_value values[8];
        build(&pf, t, nodes, values);
        cases[c].fn(&pf);
        okv_error err = {0};
        okv_status st = write_and_open(&pf, NULL, &err);
        CHECKF(st == OKV_ERR_FORMAT && strstr(err.message, cases[c].needle) && !strchr(err.message, '\n'),
               "case %zu: status %d: %s", c, st, err.message);
        printf("case %zu: %s\n", c, err.message);
        okv_layout_free(&pf.layout);
    }
}

/* Edits the written header text (same length, checksum fixed up). */
static okv_status open_edited(const char *from, const char *to, uint32_t version, okv_error *err) {
    char *data;
    size_t len;
    if (okv_read_file(path, &data, &len, err)) return err->status;
    char *at = strstr(data + 48, from);
    if (!at || strlen(from) != strlen(to)) { free(data); return okv_fail(err, OKV_ERR_INVALID, "test: '%s' not in header", from); }
    memcpy(at, to, strlen(to));
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | (uint8_t)data[16 + i];
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < hlen; i++) {
        c ^= (uint8_t)data[48 + i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
    }
    c = ~c;
    for (int i = 0; i < 4; i++) { data[12 + i] = (char)(c >> (8 * i)); data[8 + i] = (char)(version >> (8 * i)); }
    FILE *f = fopen(path, "wb");
    fwrite(data, 1, len, f);
    fclose(f);
    free(data);
    okv_program_file *got = NULL;
    okv_status st = okv_format_open(path, &got, err);
    okv_format_close(got);
    return st;
}

static void test_header_edits(void) {
    static const struct { const char *from, *to; uint32_t version; const char *needle; } cases[] = {
        {"\"bits\":4", "\"bits\":9", 2, "tensor 'q'"},
        {"\"bits\":4", "\"bitz\":4", 2, "'bits'"},
        {"\"asym\":true", "\"asym\":1234", 2, "'asym'"},
        {"\"scale_dtype\":\"f16\"", "\"scale_dtype\":\"u16\"", 2, "'scale_dtype'"},
        {"\"quant\":", "\"quanx\":", 2, "without a 'quant' object"},
        {"\"group\":32", "\"group\":-1", 2, "group"},
        {"\"group\":32", "\"group\":16", 2, "group size 16"},
        {"\"bits\":4", "\"bits\":4", 1, "need format version 2"},
        {"\"bits\":4", "\"bits\":4", 4, "unsupported format version 4"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        okv_program_file pf;
        okv_tensor t[5];
        okv_node nodes[8];
        okv_value values[8];
        build(&pf, t, nodes, values);
        okv_error err = {0};
        CHECK_OK(okv_format_write(path, &pf, &err), &err);
        okv_layout_free(&pf.layout);
        okv_status st = open_edited(cases[c].from, cases[c].to, cases[c].version, &err);
        CHECKF(st == OKV_ERR_FORMAT && strstr(err.message, cases[c].needle) && !strchr(err.message, '\n'),
               "edit %zu: status %d: %s", c, st, err.message);
        printf("edit %zu: %s\n", c, err.message);
    }
}

/* The 4-bit "q" weight replaced by Q8_0 blocks. */
static uint8_t q80[H * H / 32 * 34];
static void build_block(okv_program_file *pf, okv_tensor *t, okv_node *nodes, okv_value *values) {
    build(pf, t, nodes, values);
    okv_tensor *q = &t[1];
    q->quant = okv_qscheme_block(OKV_QB_Q8_0);
    q->nbytes = okv_quant_bytes(&q->quant, H, H);
    q->data = q80;
}

static void test_block(void) {
    for (size_t i = 0; i < sizeof q80; i++) q80[i] = (uint8_t)(i * 7 + 3);
    for (size_t b = 0; b < sizeof q80; b += 34) q80[b + 1] = 0x20; /* finite f16 scales */
    okv_program_file pf, *got = NULL;
    okv_tensor t[5];
    okv_node nodes[8];
    okv_value values[8];
    build_block(&pf, t, nodes, values);
    okv_error err = {0};
    CHECK(pf.tensors[1].nbytes == sizeof q80);
    CHECK_OK(write_and_open(&pf, &got, &err), &err);
    CHECK(file_version() == 3);
    if (got) {
        const okv_tensor *q = &got->tensors[okv_format_find_tensor(got, "q")];
        CHECK(q->dtype == OKV_T_Q && q->quant.block == OKV_QB_Q8_0 && q->quant.bits == 8 && q->quant.group == 32);
        CHECK(q->nbytes == sizeof q80 && !memcmp(q->data, q80, sizeof q80));
    }
    okv_format_close(got);
    okv_layout_free(&pf.layout);
    static const struct { const char *from, *to; uint32_t version; const char *needle; } cases[] = {
        {"\"block\":\"q8_0\"", "\"block\":\"q9_0\"", 3, "'block' 'q9_0' is not a block type"},
        {"\"block\":\"q8_0\"", "\"block\":\"q8_K\"", 3, "'block' 'q8_K' is not a block type"},
        {"\"block\":\"q8_0\"", "\"block\":123456", 3, "(not a string)"},
        {"\"block\":\"q8_0\"", "\"block\":\"q8_0\"", 2, "need format version 3"},
        {"\"block\":\"q8_0\"", "\"block\":\"q4_0\"", 3, "disagree with block type q4_0"},
        {"\"bits\":8,\"group\":32,\"asym\":false,\"scale_dtype\":\"f16\",\"block\":\"q8_0\"",
         "\"bits\":4,\"group\":32,\"asym\":false,\"scale_dtype\":\"f16\",\"block\":\"q4_0\"", 3,
         "does not match [64, 64] in q4_0"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        build_block(&pf, t, nodes, values);
        CHECK_OK(okv_format_write(path, &pf, &err), &err);
        okv_layout_free(&pf.layout);
        okv_status st = open_edited(cases[c].from, cases[c].to, cases[c].version, &err);
        CHECKF(st == OKV_ERR_FORMAT && strstr(err.message, cases[c].needle) && strstr(err.message, "tensor 'q'") &&
                   !strchr(err.message, '\n'),
               "block edit %zu: status %d: %s", c, st, err.message);
        printf("block edit %zu: %s\n", c, err.message);
    }
}

int main(void) {
    int fd = mkstemp(path);
    if (fd < 0) return 1;
    close(fd);
    uint64_t rng = 7;
    for (int i = 0; i < V * H; i++) { rng = rng * 6364136223846793005ULL + 1; embed[i] = (float)((rng >> 40) % 1000) / 500.0f - 1.0f; }
    for (int i = 0; i < H * H; i++) { rng = rng * 6364136223846793005ULL + 1; qw[i] = (float)((rng >> 40) % 1000) / 500.0f - 1.0f; }
    q_embed = calloc(1, okv_quant_bytes(&S8, V, H) + 64);   /* + 64: the too-large nbytes cases write past the end */
    q_qw = calloc(1, okv_quant_bytes(&S4, H, H) + 64);
    okv_error err = {0};
    CHECK_OK(okv_quantize(&S8, embed, V, H, q_embed, "embed", &err), &err);
    CHECK_OK(okv_quantize(&S4, qw, H, H, q_qw, "q", &err), &err);
    test_roundtrip();
    test_rejects();
    test_header_edits();
    test_block();
    free(q_embed);
    free(q_qw);
    unlink(path);
    return okv_test_finish();
}
