/* gguf_dump_f32 — test helper: opens a GGUF with our reader and writes every
 * tensor, in file order, dequantized to little-endian f32 on stdout (tensors
 * of types we cannot dequantize are skipped). tests/gguf/check_dequant.py
 * compares the stream with gguf-py's numpy dequantization bit for bit.
 * Usage: gguf_dump_f32 FILE.gguf */
#include <stdio.h>
#include <stdlib.h>

#include "okv_gguf.h"

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: gguf_dump_f32 FILE.gguf\n"); return 2; }
    okv_error err = {0};
    okv_gguf *g;
    if (okv_gguf_open(argv[1], &g, &err)) { fprintf(stderr, "%s\n", err.message); return 1; }
    int rc = 0;
    for (int i = 0; i < okv_gguf_tensor_count(g) && !rc; i++) {
        const okv_gguf_tensor *t = okv_gguf_tensor_at(g, i);
        if (!okv_ggml_can_dequantize(t->type)) continue;
        float *buf = malloc(t->n_elems * sizeof *buf);
        if (!buf) { fprintf(stderr, "out of memory\n"); rc = 1; break; }
        if (okv_gguf_dequantize(t, 0, t->n_elems, buf, &err)) { fprintf(stderr, "%s\n", err.message); rc = 1; }
        else if (fwrite(buf, sizeof *buf, t->n_elems, stdout) != t->n_elems) { perror("write"); rc = 1; }
        free(buf);
    }
    okv_gguf_close(g);
    return rc;
}
