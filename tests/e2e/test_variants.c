/* Model shapes beyond the fixtures: generated checkpoints (okv_mkckpt) with
 * other GQA ratios, head_dim != hidden/heads, tied/untied embeddings, rope
 * scaling on/off, biases, q/k norms, sliding windows of several sizes. No
 * oracle here, so the test checks invariants that a wrong kernel, planner
 * or ring would break:
 *   - every chunking (1, window-1, window, sizes that make ring writes wrap)
 *     gives the same logits,
 *   - the reference attention with plain kernels agrees with the fast path,
 *   - a sliding window at least as long as the sequence equals full
 *     attention (--kv-windows 0),
 *   - f16/bf16 KV storage stays close to f32. */
#include "e2e_util.h"
#include "mkckpt.h"

#define N_TOKENS 48

typedef struct variant {
    const char *name;
    okv_mkckpt_arch arch;
    int hidden, heads, kv_heads, head_dim;
    bool tied;
    okv_mkckpt_rope rope;
    int window;
} variant;

static const variant VARIANTS[] = {
    {"llama-mha-untied-norope", OKV_MK_LLAMA, 64, 4, 4, 16, false, OKV_MK_ROPE_NONE, 0},
    {"llama-gqa4-hd24-linear", OKV_MK_LLAMA, 64, 8, 2, 24, true, OKV_MK_ROPE_LINEAR, 0},
    {"llama-mqa-hd32-llama3", OKV_MK_LLAMA, 96, 6, 1, 32, false, OKV_MK_ROPE_LLAMA3, 0},
    {"qwen3-gqa2-hd48", OKV_MK_QWEN3, 64, 4, 2, 48, true, OKV_MK_ROPE_NONE, 0},
    {"qwen2-gqa3-bias", OKV_MK_QWEN2, 96, 6, 2, 16, true, OKV_MK_ROPE_NONE, 0},
    {"gemma3-w5", OKV_MK_GEMMA3, 64, 4, 2, 32, true, OKV_MK_ROPE_NONE, 5},
    {"gemma3-w11-mqa", OKV_MK_GEMMA3, 64, 4, 1, 16, true, OKV_MK_ROPE_LINEAR, 11},
    {"gemma3-w64", OKV_MK_GEMMA3, 64, 4, 2, 16, true, OKV_MK_ROPE_NONE, 64},
    {"qwen3-sliding-w6", OKV_MK_QWEN3, 64, 4, 2, 16, true, OKV_MK_ROPE_NONE, 6},
    {"qwen2-sliding-w9", OKV_MK_QWEN2, 64, 4, 2, 16, true, OKV_MK_ROPE_NONE, 9},
};

static char *make_checkpoint(const variant *v) {
    okv_mkckpt_spec s;
    okv_mkckpt_default_spec(&s, v->arch);
    s.hidden = v->hidden;
    s.heads = v->heads;
    s.kv_heads = v->kv_heads;
    s.head_dim = v->head_dim;
    s.tied = v->tied;
    s.rope_scaling = v->rope;
    s.rope_factor = 4.0;
    s.rope_original_max = 16;
    if (v->window) s.window = v->window;
    s.seed = 42;
    s.dtype = OKV_F32;
    char *dir = e2e_path(v->name);
    okv_error err = {0};
    okv_status st = okv_mkckpt_write(&s, dir, &err);
    CHECKF(st == OKV_OK, "%s: %s", v->name, err.message);
    if (st) { free(dir); return NULL; }
    return dir;
}

static void compare(const char *what, const char *v, const float *a, const float *b, int n, int V, double tol) {
    double d = e2e_max_diff(a, b, (size_t)n * V);
    CHECKF(d <= tol, "%s %s: max diff %.3g > %.1g", v, what, d, tol);
}

static void check_variant(const variant *v) {
    char *dir = make_checkpoint(v);
    if (!dir) return;
    char name[128];
    snprintf(name, sizeof name, "%s.okv", v->name);
    char *path = e2e_export(dir, name, OKV_F32, 0);
    okv_program *p = NULL;
    okv_error err = {0};
    if (!path || okv_program_open(path, &p, &err)) { CHECKF(0, "%s: %s", v->name, err.message); free(dir); free(path); return; }
    okv_program_info info;
    okv_program_get_info(p, &info);
    int V = info.vocab_size, max = info.prefill_chunk_size;
    int32_t ids[N_TOKENS];
    for (int i = 0; i < N_TOKENS; i++) ids[i] = (i * 37 + 11) % V;

    e2e_run_opts o;
    e2e_opts_default(&o);
    o.chunk = 1;
    float *decode = e2e_run(p, ids, N_TOKENS, &o);
    int chunks[] = {max > 1 ? max - 1 : 1, max, 3, 7};
    for (size_t c = 0; decode && c < sizeof chunks / sizeof chunks[0]; c++) {
        o.chunk = chunks[c] <= max ? chunks[c] : max;
        float *got = e2e_run(p, ids, N_TOKENS, &o);
        char what[64];
        snprintf(what, sizeof what, "chunk %d vs decode", o.chunk);
        if (got) compare(what, v->name, got, decode, N_TOKENS, V, 1e-4);
        free(got);
    }
    o.chunk = max;
    o.runner.reference_attention = o.runner.plain_kernels = true;
    float *plain = e2e_run(p, ids, N_TOKENS, &o);
    if (plain && decode) compare("reference/plain vs fast", v->name, plain, decode, N_TOKENS, V, 1e-4);
    free(plain);

    e2e_opts_default(&o);
    o.cache.k_storage_dtype = o.cache.v_storage_dtype = OKV_F16;
    float *kv16 = e2e_run(p, ids, N_TOKENS, &o);
    if (kv16 && decode) CHECKF(e2e_min_cosine(kv16, decode, N_TOKENS, V) >= 0.999, "%s: f16 kv", v->name);
    free(kv16);

    if (v->window >= N_TOKENS) { /* a window longer than the sequence is full attention */
        int32_t zero = 0;
        e2e_opts_default(&o);
        o.cache.windows = &zero;
        o.cache.n_windows = 1;
        float *flat = e2e_run(p, ids, N_TOKENS, &o);
        if (flat && decode) compare("window >= length vs --kv-windows 0", v->name, flat, decode, N_TOKENS, V, 1e-4);
        free(flat);
    } else if (v->window > 0) { /* and a shorter one is not */
        int32_t zero = 0;
        e2e_opts_default(&o);
        o.cache.windows = &zero;
        o.cache.n_windows = 1;
        float *flat = e2e_run(p, ids, N_TOKENS, &o);
        if (flat && decode) CHECKF(e2e_max_diff(flat, decode, (size_t)N_TOKENS * V) > 1e-3, "%s: window had no effect", v->name);
        free(flat);
    }
    free(decode);
    okv_program_free(p);
    free(path);
    free(dir);
}

int main(void) {
    for (size_t i = 0; i < sizeof VARIANTS / sizeof VARIANTS[0]; i++) check_variant(&VARIANTS[i]);
    e2e_cleanup();
    return okv_test_finish();
}
