/* test_gguf_quant_carry — --qlinear/--qembedding on a GGUF whose blocks are
 * the scheme's groups keep the GGUF's values exactly: SmolLM2's Q4_1
 * matrices exported with --qlinear 4w (asymmetric 4-bit g32) and its Q8_0
 * embedding with --qembedding 8w (symmetric 8-bit g32) dequantize, row by
 * row from the program, to exactly the GGUF's dequantized rows (q/k rows
 * un-permuted), and export says all 211 were carried. With group 64 nothing
 * maps, every tensor is re-quantized and the export says so. Skips (77)
 * when the model is not cached and in the sanitizer pass. */
#include "gguf/real_models.h"
#include "okv_format.h"
#include "okv_gguf.h"
#include "okv_gguf_model.h"
#include "okv_quant.h"

static char notices[4096];
static void keep_notice(void *ctx, const char *msg) {
    (void)ctx;
    snprintf(notices + strlen(notices), sizeof notices - strlen(notices), "%s\n", msg);
}

static char *export_q(const char *gguf, const char *name, int group) {
    okv_export_options o;
    okv_export_options_default(&o);
    o.qlinear = 4;
    o.qembedding = 8;
    o.qlinear_group = o.qembedding_group = group;
    o.notice = keep_notice;
    notices[0] = 0;
    okv_error err = {0};
    char *out = e2e_path(name);
    CHECK_OK(okv_export(gguf, out, &o, &err), &err);
    return out;
}

int main(void) {
    char *gguf = real_model_or_skip("SmolLM2-135M-Instruct.Q4_1.gguf", "quantized GGUF export");
    if (!gguf) return SKIP_RC;
    char *prog = export_q(gguf, "smol-q.okv", 32);
    CHECKF(strstr(notices, "211 quantized tensors keep the GGUF's own blocks exactly, 0 are"), "notices: %s", notices);
    okv_program_file *pf = NULL;
    okv_gguf *g = NULL;
    okv_error err = {0};
    CHECK_OK(okv_format_open(prog, &pf, &err), &err);
    CHECK_OK(okv_gguf_open(gguf, &g, &err), &err);
    int compared = 0, exact = 0;
    for (int i = 0; pf && g && i < okv_gguf_tensor_count(g); i++) {
        const okv_gguf_tensor *t = okv_gguf_tensor_at(g, i);
        okv_gguf_hf_tensor h;
        if (t->n_dims != 2 || !okv_gguf_hf_tensor_of(g, t, &h)) continue;
        const okv_tensor *q = NULL;
        for (int k = 0; k < pf->n_tensors && !q; k++)
            if (!strcmp(h.name + 6, pf->tensors[k].name)) q = &pf->tensors[k]; /* "model." stripped */
        CHECKF(q && q->dtype == OKV_T_Q, "%s is not a quantized program tensor", t->name);
        if (!q || q->dtype != OKV_T_Q) continue;
        int64_t N = q->shape[0], K = q->shape[1];
        float *want = malloc(sizeof(float) * (size_t)(N * K)), *row = malloc(sizeof(float) * (size_t)K);
        CHECK_OK(okv_gguf_read_hf(t, &h, 0, N, want, &err), &err);
        bool same = true;
        for (int64_t r = 0; r < N && same; r++) {
            okv_dequant_row(&q->quant, q->data, N, K, r, row);
            same = !memcmp(row, want + r * K, sizeof(float) * (size_t)K);
        }
        compared++;
        exact += same;
        CHECKF(same, "%s: program rows differ from the GGUF's", t->name);
        free(want);
        free(row);
    }
    printf("smollm2 --qlinear 4w --qembedding 8w: %d of %d quantized tensors bit-identical to the GGUF's values\n", exact,
           compared);
    CHECK(compared == 211);
    okv_format_close(pf);
    okv_gguf_close(g);
    char *prog64 = export_q(gguf, "smol-q64.okv", 64);
    CHECKF(strstr(notices, "0 quantized tensors keep the GGUF's own blocks exactly, 211 are"), "notices: %s", notices);
    free(prog);
    free(prog64);
    free(gguf);
    e2e_cleanup();
    return okv_test_finish();
}
