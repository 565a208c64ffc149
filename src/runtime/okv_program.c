/* okv_program.c — opening a program file (okv_program, offkv.h): options,
 * open and validate, the x8 row packing of GGUF block matrices chosen at
 * open, the metadata getters and the describe text. The file format itself
 * lives in src/format; the runtime only wraps it in the public handle
 * (okv_runtime_internal.h) so runners and sessions can share one program. */
#include <stdlib.h>

#include "offkv.h"
#include "okv_common.h"
#include "okv_describe.h"
#include "okv_format.h"
#include "okv_kernels.h"
#include "okv_runtime_internal.h"

void okv_program_options_default(okv_program_options *o) {
    memset(o, 0, sizeof *o);
    o->weights = OKV_WEIGHTS_AUTO;
}

okv_status okv_program_open(const char *path, okv_program **out, okv_error *err) {
    okv_program_options o;
    okv_program_options_default(&o);
    return okv_program_open_with(path, &o, out, err);
}

okv_status okv_program_open_with(const char *path, const okv_program_options *o, okv_program **out, okv_error *err) {
    if (o->weights != OKV_WEIGHTS_AUTO && o->weights != OKV_WEIGHTS_MAPPED && o->weights != OKV_WEIGHTS_HUGE_PAGES)
        return okv_fail(err, OKV_ERR_INVALID, "program options: weights must be AUTO, MAPPED or HUGE_PAGES (got %d)",
                        (int)o->weights);
    okv_program *p = calloc(1, sizeof *p);
    if (!p) return okv_fail(err, OKV_ERR_NOMEM, "out of memory");
    okv_status st = okv_format_open_with(path, o->weights, &p->pf, err);
    if (st) { free(p); return st; }
    /* GGUF block matrices in the row order the default table's decode dots
     * want (x8: 8 rows interleaved, okv_qblock_x8.c). Every table runs
     * either order, so runners with other tables stay right. OKV_QB_X8=0
     * keeps the file's order (for side-by-side runs). */
    const okv_kernels *k = okv_kernels_select(OKV_ISA_AUTO);
    const char *x8 = getenv("OKV_QB_X8");
    if (k->matmul_qb_x8 && !(x8 && !strcmp(x8, "0"))) p->n_x8 = okv_format_pack_x8(p->pf, k->matmul_qb_x8);
    *out = p;
    return OKV_OK;
}

void okv_program_free(okv_program *p) {
    if (!p) return;
    okv_format_close(p->pf);
    free(p);
}

void okv_program_get_info(const okv_program *p, okv_program_info *info) {
    const okv_meta *m = &p->pf->meta;
    const okv_layout *l = &p->pf->layout;
    *info = (okv_program_info){m->architecture, m->dtype, m->vocab_size, m->hidden_size, m->n_layers, l->n_caches,
                               l->prefill_chunk_size, l->max_ctx_len, m->bos_id, m->eos_ids, m->n_eos,
                               p->pf->weights_memory, p->n_x8};
}

const void *okv_program_blob(const okv_program *p, const char *name, size_t *len) {
    int t = okv_format_find_tensor(p->pf, name);
    if (t < 0 || p->pf->tensors[t].dtype != OKV_T_U8) return NULL;
    if (len) *len = p->pf->tensors[t].nbytes;
    return p->pf->tensors[t].data;
}

okv_status okv_program_describe(const okv_program *p, bool json, char **out, okv_error *err) {
    cJSON *doc = okv_describe_program_doc(p->pf);
    *out = doc ? okv_describe_render(doc, json) : NULL;
    cJSON_Delete(doc);
    return *out ? OKV_OK : okv_fail(err, OKV_ERR_NOMEM, "out of memory describing the program");
}
