/* test_gguf_native — the two real GGUFs exported with their own blocks (the
 * default for .gguf input), run on the native block kernels:
 *   - every matrix the file stores in a block type offkv runs is a program
 *     tensor of that block type holding the file's bytes (rows in HF order:
 *     llama.cpp's q/k row permutation undone here independently);
 *   - the program's logits on the fixture's tokens stay near the oracle's
 *     (HF / our float64 oracle on the dequantized weights) with the same
 *     argmax at nearly every position: the only new error is x's int8
 *     rounding in decode-sized steps and bf16 rounding where the prompt GEMM
 *     uses it;
 *   - perplexity over a real text (MPL-2.0, ctx 512, BOS per window) within
 *     0.5% of the fp32 program dequantized from the same file, and KL to it
 *     small (reduced pass: skipped);
 *   - SmolLM2 answers HF's greedy chat reply token for token.
 * Skips (77) when the models are not cached. */
#include "gguf/real_models.h"
#include "okv_format.h"
#include "okv_gguf.h"
#include "okv_kernels.h"
#include "offkv_eval.h"
#include "offkv_tok.h"

/* GGUF row holding HF row r of a q/k matrix permuted over `heads`. */
static int64_t permuted_row(int64_t rows, int heads, int64_t r) {
    int64_t D = rows / heads, half = D / 2, h = r / D, j = r % D / half, i = r % half;
    return h * D + 2 * i + j;
}

static bool is_qk(const char *hf_name) { return strstr(hf_name, "q_proj.weight") || strstr(hf_name, "k_proj.weight"); }

/* Checks the program's block tensors against the file; returns how many it checked. */
static int check_blocks(const char *gguf_path, const char *prog_path, bool llama, int heads, int kv_heads) {
    okv_gguf *g = NULL;
    okv_program_file *pf = NULL;
    okv_error err = {0};
    CHECK_OK(okv_gguf_open(gguf_path, &g, &err), &err);
    CHECK_OK(okv_format_open(prog_path, &pf, &err), &err);
    int checked = 0;
    for (int t = 0; g && pf && t < pf->n_tensors; t++) {
        const okv_tensor *pt = &pf->tensors[t];
        if (pt->dtype != OKV_T_Q) continue;
        CHECKF(pt->quant.block != OKV_QB_NONE, "%s: quantized but not a GGUF block type", pt->name);
        /* find the GGUF tensor with this HF name through the export's own mapping is what we test; match by
         * shape + bytes instead: the program name "layers.N.x" <-> GGUF "blk.N.*" is the mapping under test */
        const okv_gguf_tensor *src = NULL;
        for (int k = 0; k < okv_gguf_tensor_count(g) && !src; k++) {
            const okv_gguf_tensor *c = okv_gguf_tensor_at(g, k);
            if ((int)c->type == pt->quant.block && c->nbytes == pt->nbytes && c->n_dims == 2 && c->ne[0] == pt->shape[1]) {
                size_t row = (size_t)(pt->nbytes / (uint64_t)pt->shape[0]);
                int hd = !llama || !is_qk(pt->name) ? 0 : strstr(pt->name, "q_proj") ? heads : kv_heads;
                bool same = true;
                for (int64_t r = 0; r < pt->shape[0] && same; r++) {
                    int64_t gr = hd ? permuted_row(pt->shape[0], hd, r) : r;
                    same = !memcmp((const uint8_t *)pt->data + (size_t)r * row, c->data + (size_t)gr * row, row);
                }
                if (same) src = c;
            }
        }
        CHECKF(src != NULL, "%s (%s): no GGUF tensor of that type holds these bytes", pt->name,
               okv_qblock_get(pt->quant.block)->name);
        checked++;
    }
    okv_format_close(pf);
    okv_gguf_close(g);
    return checked;
}

/* Tokens of a text file through the program's own tokenizer (heap). */
static int text_ids(const okv_program *p, const char *path, int32_t **ids) {
    size_t tj_len = 0, n = 0, len = 0;
    const char *tj = okv_program_blob(p, "tokenizer.json", &tj_len);
    okv_tok *tok = NULL;
    okv_error err = {0};
    char *text = NULL;
    *ids = NULL;
    if (!tj || okv_tok_load_json(tj, tj_len, &tok, &err) || okv_read_file(path, &text, &len, &err)) {
        fprintf(stderr, "text_ids: %s\n", err.message);
        okv_tok_free(tok);
        return 0;
    }
    CHECK_OK(okv_tok_encode(tok, text, len, false, ids, &n, &err), &err);
    free(text);
    okv_tok_free(tok);
    return (int)n;
}

static void check_ppl(const okv_program *native, const okv_program *f32, const char *text, const char *label) {
    int32_t *ids;
    int n = text_ids(native, text, &ids);
    okv_program_info info;
    okv_program_get_info(native, &info);
    okv_eval_options eo;
    okv_eval_options_default(&eo);
    eo.ctx = 512;
    eo.bos_id = info.bos_id;
    eo.runner.n_threads = 2;
    okv_eval_result r = {0};
    okv_error err = {0};
    double t0 = real_now();
    CHECK_OK(okv_eval_perplexity(native, f32, ids, n < 4 * 512 ? n : 4 * 512, &eo, &r, &err), &err);
    printf("%s: PPL %.4f native vs %.4f fp32 (%+.2f%%), KL %.5f, top-1 %.2f%%, %d windows (%.1f s)\n", label, r.ppl,
           r.base_ppl, 100.0 * (r.ppl / r.base_ppl - 1.0), r.kl, 100.0 * r.top1, r.n_windows, real_now() - t0);
    CHECKF(r.n_windows == 4 && fabs(r.ppl / r.base_ppl - 1.0) <= 0.005, "%s: PPL %.4f vs fp32 %.4f", label, r.ppl,
           r.base_ppl);
    CHECKF(r.kl <= 0.01 && r.top1 >= 0.95, "%s: KL %.5f, top-1 %.4f", label, r.kl, r.top1);
    free(ids);
}

/* Native logits on the fixture tokens against the oracle's. */
static void check_oracle(const okv_program *p, const char *model, int V, double tol, int max_bad, const char *label) {
    cJSON *ref = real_reference(model);
    int32_t *ids;
    int n = real_ids(ref, "tokens", &ids);
    char dir[256];
    snprintf(dir, sizeof dir, REAL_FIXTURES "%s", model);
    float *want = e2e_ref_logits(dir, (size_t)n * V);
    e2e_run_opts o;
    e2e_opts_default(&o);
    float *got = e2e_run(p, ids, n, &o);
    if (got && want) {
        double d = e2e_max_diff(got, want, (size_t)n * V);
        int bad = e2e_argmax_mismatches(got, want, n, V);
        printf("%s logits (%d tokens): max abs diff %.3g, argmax mismatches %d\n", label, n, d, bad);
        CHECKF(d <= tol, "%s: max abs diff %g", label, d);
        CHECKF(bad <= max_bad, "%s: %d argmax mismatches", label, bad);
    }
    free(got);
    free(want);
    free(ids);
    cJSON_Delete(ref);
}

static char *export_native(const char *gguf, const char *name) {
    okv_export_options o;
    okv_export_options_default(&o); /* GGUF blocks kept: the default */
    o.max_ctx_len = 1024;
    okv_error err = {0};
    char *out = e2e_path(name);
    okv_status st = okv_export(gguf, out, &o, &err);
    CHECKF(st == OKV_OK, "export %s: %s", gguf, err.message);
    return out;
}

static void run_model(const char *file, const char *fixture, int V, bool llama, int heads, int kv_heads, int n_blocks,
                      double tol, int max_bad, const char *label) {
    char *gguf = real_model_path(file);
    if (!gguf) return;
    char *native_path = export_native(gguf, "native.okv"), *f32_path = NULL;
    int checked = check_blocks(gguf, native_path, llama, heads, kv_heads);
    printf("%s: %d block tensors carried byte for byte\n", label, checked);
    CHECKF(checked == n_blocks, "%s: %d block tensors (want %d)", label, checked, n_blocks);
    okv_program *p = NULL, *f = NULL;
    okv_error err = {0};
    CHECK_OK(okv_program_open(native_path, &p, &err), &err);
    if (p) { /* where the kernels have x8 dots for these types, the checks below run them */
        okv_program_info info;
        okv_program_get_info(p, &info);
        const okv_kernels *k = okv_kernels_select(OKV_ISA_AUTO);
        bool want = info.weights_memory == OKV_WEIGHTS_HUGE_PAGES && k->matmul_qb_x8 && k->matmul_qb_x8(OKV_QB_Q4_K) &&
                    !getenv("OKV_QB_X8");
        printf("%s: %d block matrices interleaved x8 (%s table)\n", label, info.n_x8, k->name);
        if (want && strstr(label, "gemma3")) CHECKF(info.n_x8 > 0, "%s: no block matrix packed x8", label);
    }
    if (p) check_oracle(p, fixture, V, tol, max_bad, label);
    if (p && !real_reduced()) {
        f = real_export_open(gguf, "f32.okv", OKV_F32, 0, label, &f32_path);
        if (f) check_ppl(p, f, "/usr/share/common-licenses/MPL-2.0", label);
    }
    if (p && llama) { /* HF's greedy chat reply (the France question) */
        cJSON *ref = real_reference(fixture);
        const cJSON *gens = cJSON_GetObjectItemCaseSensitive(ref, "generations"), *g;
        cJSON_ArrayForEach(g, gens) {
            if (strcmp(okv_json_str(g, "kind"), "chat")) continue;
            int32_t *prompt, *want, out[64];
            int np = real_ids(g, "prompt_ids", &prompt), nw = real_ids(g, "new_ids", &want);
            int max_new = nw < 16 ? nw : 16, got = real_greedy(p, prompt, np, max_new, 2, out);
            bool same = got == max_new && !memcmp(out, want, sizeof *out * (size_t)got);
            if (!same) { real_print_ids("got ", out, got); real_print_ids("want", want, max_new); }
            CHECKF(same, "%s: greedy chat reply differs from HF's", label);
            free(prompt);
            free(want);
        }
        cJSON_Delete(ref);
    }
    okv_program_free(p);
    okv_program_free(f);
    free(native_path);
    free(f32_path);
    free(gguf);
}

int main(void) {
    if (access("/usr/share/common-licenses/MPL-2.0", R_OK)) {
        printf("SKIP: /usr/share/common-licenses/MPL-2.0 missing\n");
        return SKIP_RC;
    }
    char *probe = real_model_path("SmolLM2-135M-Instruct.Q4_1.gguf");
    if (!probe) return SKIP_RC;
    free(probe);
    /* SmolLM2: 30 layers x 7 Q4_1 linears + the Q8_0 embedding (tied head) */
    run_model("SmolLM2-135M-Instruct.Q4_1.gguf", "smollm2-135m-instruct", 49152, true, 9, 3, 211, 0.5, 1, "smollm2");
    /* Gemma-3 270M Q4_K_M: 18 layers x 7 linears (q5_0 / q8_0 / q4_K / q6_K) + the q8_0 embedding */
    run_model("gemma-3-270m-q4_k_m.gguf", "gemma-3-270m", 262144, false, 4, 1, 127, 0.5, 1, "gemma3");
    e2e_cleanup();
    return okv_test_finish();
}
