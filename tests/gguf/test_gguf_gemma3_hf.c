/* test_gguf_gemma3_hf — the same Gemma-3 270M through both input paths
 * gives identical logits. A test-side converter (its own name table and
 * norm convention, independent of src/export/okv_gguf_model.c) writes an HF
 * directory from the GGUF: config.json from the fixture's recorded HF
 * config, model.safetensors with every tensor dequantized (llama.cpp's +1
 * taken off the RMSNorm weights; matrices rounded to bf16 as export would),
 * and the real Gemma-3 tokenizer.json. Both are exported at bf16 and run on
 * the fixture's 32 tokens: the logits must be bit-identical. Skips (77) when
 * the model is not cached, and in the sanitizer pass. */
#include <limits.h>

#include "gguf/real_models.h"
#include "okv_gguf.h"
#include "okv_st_write.h"

#define V 262144

static const char *const names[][2] = {
    {"attn_norm", "input_layernorm"},           {"post_attention_norm", "post_attention_layernorm"},
    {"ffn_norm", "pre_feedforward_layernorm"},  {"post_ffw_norm", "post_feedforward_layernorm"},
    {"attn_q", "self_attn.q_proj"},             {"attn_k", "self_attn.k_proj"},
    {"attn_v", "self_attn.v_proj"},             {"attn_output", "self_attn.o_proj"},
    {"attn_q_norm", "self_attn.q_norm"},        {"attn_k_norm", "self_attn.k_norm"},
    {"ffn_gate", "mlp.gate_proj"},              {"ffn_up", "mlp.up_proj"},
    {"ffn_down", "mlp.down_proj"},
};

static bool hf_name_of(const char *g, char *out, size_t n) {
    if (!strcmp(g, "token_embd.weight")) { snprintf(out, n, "model.embed_tokens.weight"); return true; }
    if (!strcmp(g, "output_norm.weight")) { snprintf(out, n, "model.norm.weight"); return true; }
    int layer;
    char part[64];
    if (sscanf(g, "blk.%d.%63[a-z_].weight", &layer, part) != 2) return false;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(part, names[i][0])) {
            snprintf(out, n, "model.layers.%d.%s.weight", layer, names[i][1]);
            return true;
        }
    return false;
}

/* config.json: the fixture's recorded HF config plus what HF adds. */
static bool write_config(const char *dir) {
    cJSON *ref = real_reference("gemma-3-270m");
    const cJSON *ck = cJSON_GetObjectItemCaseSensitive(ref, "hf_checkpoint");
    cJSON *cfg = cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(ck, "config"), true);
    const char *arch = "Gemma3ForCausalLM";
    cJSON_AddItemToObject(cfg, "architectures", cJSON_CreateStringArray(&arch, 1));
    cJSON_AddStringToObject(cfg, "model_type", "gemma3_text");
    cJSON_AddItemToObject(cfg, "layer_types", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(ck, "layer_types"), true));
    cJSON_AddNumberToObject(cfg, "bos_token_id", 2);
    cJSON_AddNumberToObject(cfg, "eos_token_id", 1);
    cJSON_AddNumberToObject(cfg, "max_position_embeddings", 32768);
    char *text = cJSON_Print(cfg), path[600];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    bool ok = f && fputs(text, f) >= 0;
    if (f) ok = fclose(f) == 0 && ok;
    free(text);
    cJSON_Delete(cfg);
    cJSON_Delete(ref);
    return ok;
}

static bool write_weights(const char *gguf_path, const char *dir) {
    okv_gguf *g = NULL;
    okv_error err = {0};
    CHECK_OK(okv_gguf_open(gguf_path, &g, &err), &err);
    if (!g) return false;
    int n = okv_gguf_tensor_count(g), k = 0;
    okv_st_write_tensor *w = calloc((size_t)n, sizeof *w);
    char (*nm)[160] = calloc((size_t)n, sizeof *nm);
    bool ok = true;
    for (int i = 0; i < n && ok; i++) {
        const okv_gguf_tensor *t = okv_gguf_tensor_at(g, i);
        if (!hf_name_of(t->name, nm[k], sizeof nm[k])) { fprintf(stderr, "unmapped %s\n", t->name); ok = false; break; }
        float *f = malloc(t->n_elems * sizeof *f);
        ok = okv_gguf_dequantize(t, 0, t->n_elems, f, &err) == OKV_OK;
        CHECKF(ok, "%s", err.message);
        okv_st_write_tensor *x = &w[k];
        x->name = nm[k];
        x->ndim = t->n_dims;
        for (int d = 0; d < t->n_dims; d++) x->shape[d] = t->ne[t->n_dims - 1 - d];
        if (t->n_dims == 1) { /* RMSNorm weight: the GGUF stores 1 + w */
            for (uint64_t e = 0; e < t->n_elems; e++) f[e] -= 1.0f;
            x->dtype = OKV_F32;
            x->data = f;
        } else {
            uint16_t *b = malloc(t->n_elems * sizeof *b);
            for (uint64_t e = 0; e < t->n_elems; e++) b[e] = okv_f32_to_bf16(f[e]);
            free(f);
            x->dtype = OKV_BF16;
            x->data = b;
        }
        k++;
    }
    char path[600];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (ok) CHECK_OK(okv_st_write(path, w, k, &err), &err);
    for (int i = 0; i < k; i++) free((void *)w[i].data);
    free(w);
    free(nm);
    okv_gguf_close(g);
    return ok;
}

static float *logits_of(const char *prog, const int32_t *ids, int n) {
    okv_program *p = NULL;
    okv_error err = {0};
    CHECK_OK(okv_program_open(prog, &p, &err), &err);
    if (!p) return NULL;
    e2e_run_opts o;
    e2e_opts_default(&o);
    float *l = e2e_run(p, ids, n, &o);
    okv_program_free(p);
    return l;
}

int main(void) {
    char *gguf = real_model_or_skip("gemma-3-270m-q4_k_m.gguf", "GGUF vs HF-directory comparison");
    if (!gguf) return SKIP_RC;
    char *dir = e2e_path("gemma-hf");
    mkdir(dir, 0755);
    char tok_src[PATH_MAX], tok_dst[700];
    snprintf(tok_dst, sizeof tok_dst, "%s/tokenizer.json", dir);
    CHECK(realpath("../shared/fixtures/tokenizers/gemma3/tokenizer.json", tok_src) && symlink(tok_src, tok_dst) == 0);
    double t0 = real_now();
    bool ok = write_config(dir) && write_weights(gguf, dir);
    printf("gemma3 HF directory written from the GGUF: %.2f s\n", real_now() - t0);
    CHECK(ok);
    char *from_hf = ok ? e2e_export(dir, "gemma-hf-bf16.okv", OKV_BF16, 0) : NULL;
    char *from_gguf = e2e_export(gguf, "gemma-gguf-bf16.okv", OKV_BF16, 0);
    int32_t *ids;
    int n = e2e_ref_tokens(REAL_FIXTURES "gemma-3-270m", &ids);
    float *a = from_hf ? logits_of(from_hf, ids, n) : NULL, *b = from_gguf ? logits_of(from_gguf, ids, n) : NULL;
    if (a && b) {
        double d = e2e_max_diff(a, b, (size_t)n * V);
        printf("gemma3 bf16 logits, HF directory vs GGUF (%d tokens): max abs diff %g\n", n, d);
        CHECKF(d == 0.0, "the two paths differ by %g", d);
    }
    free(a);
    free(b);
    free(ids);
    free(from_hf);
    free(from_gguf);
    free(dir);
    free(gguf);
    e2e_cleanup();
    return okv_test_finish();
}
