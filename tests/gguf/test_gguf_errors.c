/* test_gguf_errors — every class of bad GGUF given to `offkv export` (and
 * `offkv inspect`) through the real binary: bad magic, unsupported version,
 * truncated header, a string length past the end, a tensor offset out of
 * range or misaligned, an unknown ggml type, a type we cannot dequantize, a
 * shape that disagrees with the metadata, a missing tensor, an unsupported
 * architecture or pre-tokenizer. Each must exit non-zero with exactly one
 * line on stderr naming the culprit, and leave no output file; the
 * sanitizer pass runs the same binary under ASan/UBSan. A valid tiny model
 * built the same way must export, inspect and run. */
#include "gguf/gguf_build.h"
#include "e2e/e2e_util.h"
#include "okv_gguf.h"

/* A 1-layer llama: hidden 64, 2 heads of 32, 1 KV head, FFN 96, vocab 16;
 * F32 norms and embedding, Q8_0 / F16 matrices; a 16-token gpt2 vocab. */
enum { H = 64, HD = 32, KV = 32, FF = 96, VOC = 16 };

typedef struct model_opts {
    uint32_t version;
    const char *arch, *pre;
    int drop;                /* index of a tensor left out (-1 none) */
    int bad_type_of;         /* tensor index given type `bad_type` */
    uint32_t bad_type;
    int bad_shape_of;        /* tensor index whose ne[1] is halved (data kept consistent) */
    int bad_offset_of;       /* tensor index with offset `bad_offset` */
    uint64_t bad_offset;
    bool huge_string;        /* general.name's length runs past the end */
} model_opts;

static model_opts defaults(void) {
    return (model_opts){.version = 3, .arch = "llama", .pre = "default", .drop = -1, .bad_type_of = -1,
                        .bad_shape_of = -1, .bad_offset_of = -1};
}

typedef struct tdesc { const char *name; int nd; int64_t ne[2]; uint32_t type; } tdesc;

static const tdesc tensors[] = {
    {"token_embd.weight", 2, {H, VOC}, OKV_GGML_F32},
    {"output_norm.weight", 1, {H, 1}, OKV_GGML_F32},
    {"blk.0.attn_norm.weight", 1, {H, 1}, OKV_GGML_F32},
    {"blk.0.attn_q.weight", 2, {H, H}, OKV_GGML_Q8_0},
    {"blk.0.attn_k.weight", 2, {H, KV}, OKV_GGML_Q8_0},
    {"blk.0.attn_v.weight", 2, {H, KV}, OKV_GGML_F16},
    {"blk.0.attn_output.weight", 2, {H, H}, OKV_GGML_Q8_0},
    {"blk.0.ffn_norm.weight", 1, {H, 1}, OKV_GGML_F32},
    {"blk.0.ffn_gate.weight", 2, {H, FF}, OKV_GGML_Q8_0},
    {"blk.0.ffn_up.weight", 2, {H, FF}, OKV_GGML_Q8_0},
    {"blk.0.ffn_down.weight", 2, {FF, H}, OKV_GGML_Q8_0},
};
#define NT ((int)(sizeof tensors / sizeof tensors[0]))

static uint64_t tensor_bytes(const int64_t *ne, int nd, uint32_t type) {
    uint64_t n = 1;
    for (int d = 0; d < nd; d++) n *= (uint64_t)ne[d];
    int bs = okv_ggml_block_size((int)type), ts = okv_ggml_type_size((int)type);
    return bs ? n / (uint64_t)bs * (uint64_t)ts : n;
}

/* Small deterministic values: f32/f16 in [-0.1, 0.1], Q8_0 blocks with
 * scale 1/512 and codes in [-50, 50]. */
static void tensor_data(gb *b, uint64_t bytes, uint32_t type, uint32_t *seed) {
    for (uint64_t i = 0; i < bytes;) {
        *seed = *seed * 1664525u + 1013904223u;
        float v = ((float)(*seed >> 8) / 16777216.0f - 0.5f) * 0.2f;
        if (type == OKV_GGML_F32) { gb_f32(b, v); i += 4; }
        else if (type == OKV_GGML_F16) { gb_uint(b, okv_f32_to_f16(v), 2); i += 2; }
        else if (type == OKV_GGML_Q8_0) {
            gb_uint(b, okv_f32_to_f16(1.0f / 512), 2);
            for (int k = 0; k < 32; k++) { *seed = *seed * 1664525u + 1013904223u; gb_u8(b, (uint8_t)(int8_t)((int)(*seed >> 24) % 51)); }
            i += 34;
        } else { gb_u8(b, 0); i++; }
    }
}

static gb build(const model_opts *o) {
    gb b = {0};
    int nt = o->drop >= 0 ? NT - 1 : NT;
    gb_header(&b, o->version, (uint64_t)nt, 13);
    gb_kv_str(&b, "general.architecture", o->arch);
    if (o->huge_string) { gb_key(&b, "general.name", 8); gb_u64(&b, 1u << 30); gb_bytes(&b, "tiny", 4); }
    else gb_kv_str(&b, "general.name", "tiny test llama");
    char key[96];
#define AK(s) (snprintf(key, sizeof key, "%s.%s", o->arch, s), key)
    gb_kv_u32(&b, AK("block_count"), 1);
    gb_kv_u32(&b, AK("embedding_length"), H);
    gb_kv_u32(&b, AK("feed_forward_length"), FF);
    gb_kv_u32(&b, AK("attention.head_count"), 2);
    gb_kv_u32(&b, AK("attention.head_count_kv"), 1);
    gb_kv_f32(&b, AK("attention.layer_norm_rms_epsilon"), 1e-5f);
    gb_kv_f32(&b, AK("rope.freq_base"), 10000.0f);
    gb_kv_str(&b, "tokenizer.ggml.model", "gpt2");
    gb_kv_str(&b, "tokenizer.ggml.pre", o->pre);
    static const char *const toks[VOC] = {"a", "b", "c", "d", "e", "f", "g", "h", "ab", "cd", "ef", "gh", "abcd", "efgh", "<s>", "</s>"};
    gb_kv_arr(&b, "tokenizer.ggml.tokens", 8, VOC);
    for (int i = 0; i < VOC; i++) gb_str(&b, toks[i]);
    static const char *const merges[] = {"a b", "c d", "e f", "g h", "ab cd", "ef gh"};
    gb_kv_arr(&b, "tokenizer.ggml.merges", 8, 6);
    for (int i = 0; i < 6; i++) gb_str(&b, merges[i]);
    uint64_t off = 0, offs[NT];
    for (int i = 0; i < NT; i++) {
        if (i == o->drop) { offs[i] = 0; continue; }
        tdesc t = tensors[i];
        if (i == o->bad_shape_of) t.ne[1] /= 2;
        uint32_t ty = i == o->bad_type_of ? o->bad_type : t.type;
        uint64_t at = i == o->bad_offset_of ? o->bad_offset : off;
        gb_tensor(&b, t.name, t.nd, t.ne, ty, at);
        offs[i] = off;
        off += (tensor_bytes(t.ne, t.nd, t.type) + 31) / 32 * 32;
    }
    gb_pad(&b, 32);
    uint32_t seed = 7;
    for (int i = 0; i < NT; i++) {
        if (i == o->drop) continue;
        tdesc t = tensors[i];
        if (i == o->bad_shape_of) t.ne[1] /= 2;
        uint64_t n = tensor_bytes(t.ne, t.nd, t.type);
        tensor_data(&b, n, t.type, &seed);
        gb_pad(&b, 32);
    }
    (void)offs;
    return b;
}

/* Runs the binary; returns its exit status, stderr+stdout in out. */
static int run(const char *args, char *out, size_t n) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "\"%s\" %s 2>&1", OKV_BIN, args);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t len = fread(out, 1, n - 1, p);
    out[len] = 0;
    int rc = pclose(p);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

static int lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

/* Writes the image, exports it, expects failure naming `needle`. */
static void expect_export_fails(const char *label, const gb *b, const char *needle) {
    char *in = e2e_path("bad.gguf"), *outp = e2e_path("bad.okv"), args[1200], out[8192];
    CHECK(gb_save(b, in) == 0);
    unlink(outp);
    snprintf(args, sizeof args, "export \"%s\" -o \"%s\" --dtype fp32", in, outp);
    int rc = run(args, out, sizeof out);
    CHECKF(rc == 1, "%s: exit %d (%s)", label, rc, out);
    CHECKF(lines(out) == 1, "%s: %d lines of output: %s", label, lines(out), out);
    CHECKF(strstr(out, needle), "%s: '%s' lacks '%s'", label, out, needle);
    CHECKF(access(outp, F_OK) != 0, "%s: an output file was left", label);
    printf("%-24s -> %s", label, out);
    free(in);
    free(outp);
}

int main(void) {
    model_opts o = defaults();
    gb good = build(&o);
    {   /* the valid model exports, inspects and runs */
        char *in = e2e_path("good.gguf"), *outp = e2e_path("good.okv"), args[1200], out[8192];
        CHECK(gb_save(&good, in) == 0);
        snprintf(args, sizeof args, "export \"%s\" -o \"%s\" --dtype fp32", in, outp);
        int rc = run(args, out, sizeof out);
        CHECKF(rc == 0, "valid tiny GGUF: exit %d: %s", rc, out);
        snprintf(args, sizeof args, "inspect \"%s\"", in);
        rc = run(args, out, sizeof out);
        CHECKF(rc == 0 && strstr(out, "llama -> LlamaForCausalLM") && strstr(out, "Q8_0 x6"), "inspect: %s", out);
        snprintf(args, sizeof args, "generate \"%s\" --tokens \"0 8 12\" --max-new-tokens 3", outp);
        rc = run(args, out, sizeof out);
        CHECKF(rc == 0, "generate on the exported tiny model: %s", out);
        free(in);
        free(outp);
    }
    gb b = good;
    b.p = malloc(good.len);
    memcpy(b.p, good.p, good.len);
    b.p[1] = 'X';
    expect_export_fails("bad magic", &b, "bad magic");
    memcpy(b.p, good.p, good.len);
    b.p[4] = 7;
    expect_export_fails("version 7", &b, "version 7");
    b.len = 20;
    expect_export_fails("truncated header", &b, "truncated");
    memcpy(b.p, good.p, good.len);
    b.len = good.len - 40;
    expect_export_fails("truncated data", &b, "blk.0.ffn_down.weight");
    free(b.p);

    struct { const char *label; model_opts o; const char *needle; } cases[] = {
        {"string past the end", {.huge_string = true}, "general.name"},
        {"offset out of range", {.bad_offset_of = 4, .bad_offset = 1u << 30}, "blk.0.attn_k.weight"},
        {"offset misaligned", {.bad_offset_of = 5, .bad_offset = 16}, "alignment"},
        {"unknown ggml type", {.bad_type_of = 3, .bad_type = 77}, "unknown ggml type 77"},
        {"undequantizable type", {.bad_type_of = 8, .bad_type = OKV_GGML_IQ4_NL}, "IQ4_NL"},
        {"shape mismatch", {.bad_shape_of = 9}, "blk.0.ffn_up.weight"},
        {"missing tensor", {.drop = 6}, "blk.0.attn_output.weight"},
        {"unsupported arch", {.arch = "mamba"}, "mamba"},
        {"unsupported pre-tok", {.pre = "no-such-pre"}, "no-such-pre"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        model_opts m = defaults();
        if (cases[i].o.huge_string) m.huge_string = true;
        if (cases[i].o.bad_offset_of) { m.bad_offset_of = cases[i].o.bad_offset_of; m.bad_offset = cases[i].o.bad_offset; }
        if (cases[i].o.bad_type_of) { m.bad_type_of = cases[i].o.bad_type_of; m.bad_type = cases[i].o.bad_type; }
        if (cases[i].o.bad_shape_of) m.bad_shape_of = cases[i].o.bad_shape_of;
        if (cases[i].o.drop) m.drop = cases[i].o.drop;
        if (cases[i].o.arch) m.arch = cases[i].o.arch;
        if (cases[i].o.pre) m.pre = cases[i].o.pre;
        gb x = build(&m);
        expect_export_fails(cases[i].label, &x, cases[i].needle);
        free(x.p);
    }
    {   /* inspect of a broken file fails the same way */
        char *in = e2e_path("bad.gguf"), args[1200], out[8192];
        model_opts m = defaults();
        m.huge_string = true;
        gb x = build(&m);
        CHECK(gb_save(&x, in) == 0);
        snprintf(args, sizeof args, "inspect \"%s\"", in);
        int rc = run(args, out, sizeof out);
        CHECKF(rc == 1 && lines(out) == 1 && strstr(out, "general.name"), "inspect of a bad GGUF: %d %s", rc, out);
        free(x.p);
        free(in);
    }
    free(good.p);
    e2e_cleanup();
    return okv_test_finish();
}
