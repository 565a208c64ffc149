/* seed_ckpt.c — okv-fuzz-ckpt DIR: writes DIR/model.safetensors holding,
 * for the config.json already in DIR, every checkpoint tensor the step graph
 * reads (names and shapes exactly as okv_hf_build_graph asks for them),
 * filled with small deterministic values. fuzz/make_seeds.sh uses it to
 * turn shrunken fixture configs (every architecture, incl. Gemma-4, which
 * okv-mkckpt does not make) into checkpoints, then exports tiny program
 * files as seeds for the program fuzz target. */
#include <stdio.h>
#include <stdlib.h>

#include "okv_common.h"
#include "okv_hf.h"
#include "okv_st_write.h"

static float next_value(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return ((float)(*s >> 40) / (float)(1u << 24) - 0.5f) * 0.5f;
}

static int write_ckpt(const char *dir, okv_error *err) {
    okv_hf_model m;
    okv_layout l = {0};
    okv_hf_graph g = {0};
    char *cfg = okv_path_join(dir, "config.json"), *out = okv_path_join(dir, OKV_ST_SINGLE_NAME);
    okv_status st = okv_hf_load_config(cfg, &m, err);
    if (!st) st = okv_hf_build_layout(&m, 4, 16, &l, err);
    if (!st) st = okv_hf_build_graph(&m, &l, OKV_F32, &g, err);
    okv_st_write_tensor *w = st ? NULL : calloc((size_t)g.n_tensors + 1, sizeof *w);
    int n = 0;
    uint64_t seed = 1;
    for (int t = 0; w && t < g.n_tensors; t++) {
        const char *name = g.srcs[t].ckpt_name;
        bool dup = !name;
        for (int k = 0; !dup && k < n; k++) dup = !strcmp(w[k].name, name);
        if (dup) continue;
        okv_st_write_tensor *x = &w[n++];
        x->name = name;
        x->dtype = OKV_F32;
        x->ndim = g.tensors[t].n_dims;
        size_t numel = 1;
        for (int d = 0; d < x->ndim; d++) numel *= (size_t)(x->shape[d] = g.tensors[t].shape[d]);
        float *v = malloc(numel * sizeof *v + 1);
        for (size_t i = 0; i < numel; i++) v[i] = next_value(&seed);
        x->data = v;
    }
    if (!st) st = w ? okv_st_write(out, w, n, err) : okv_fail(err, OKV_ERR_NOMEM, "out of memory");
    for (int k = 0; w && k < n; k++) free((void *)w[k].data);
    free(w);
    okv_hf_graph_free(&g);
    okv_layout_free(&l);
    free(cfg);
    free(out);
    return st;
}

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: okv-fuzz-ckpt DIR (with DIR/config.json)\n"); return 2; }
    okv_error err = {0};
    if (write_ckpt(argv[1], &err)) { fprintf(stderr, "okv-fuzz-ckpt: %s\n", err.message); return 1; }
    return 0;
}
