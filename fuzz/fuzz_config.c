/* fuzz_config.c — libFuzzer target: a config.json. okv_hf_parse_config into
 * the model description, then what export and `inspect --config` do with an
 * accepted one: the cache layout (default chunk/context and a small odd
 * pair), the step graph with its tensor list (no weights), and the layout
 * document rendered as text and JSON. */
#include <stdint.h>
#include <stdlib.h>

#include "fuzz_util.h"
#include "okv_describe.h"
#include "okv_hf.h"

static void layout_and_graph(const okv_hf_model *m, int chunk, int max_ctx) {
    okv_layout l = {0};
    okv_error err = {0};
    if (okv_hf_build_layout(m, chunk, max_ctx, &l, &err)) return;
    okv_fuzz_require(l.n_caches >= 1, "a layout has a cache");
    for (int json = 0; json < 2; json++) {
        cJSON *doc = okv_describe_layout_doc(&l, m->architecture, NULL);
        char *text = doc ? okv_describe_render(doc, json) : NULL;
        free(text);
        cJSON_Delete(doc);
    }
    okv_hf_graph g = {0};
    if (okv_hf_build_graph(m, &l, OKV_BF16, &g, &err) == OKV_OK) okv_hf_graph_free(&g);
    okv_layout_free(&l);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    okv_hf_model *m = calloc(1, sizeof *m);
    if (!m) return 0;
    okv_error err = {0};
    if (okv_hf_parse_config((const char *)data, size, "config.json", m, &err) == OKV_OK) {
        layout_and_graph(m, 0, 2048);
        layout_and_graph(m, 7, 64);
    } else {
        okv_fuzz_require(err.message[0] != 0, "a refusal carries a message");
    }
    free(m);
    return 0;
}
