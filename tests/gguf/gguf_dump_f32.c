/* gguf_dump_f32 — test helper: opens a GGUF with our reader and writes every
 * tensor, in file order, dequantized to little-endian f32 on stdout (tensors
 * of types we cannot dequantize are skipped). tests/gguf/check_dequant.py
 * compares the stream with gguf-py's numpy dequantization bit for bit.
 * With --raw each tensor is preceded by its record: u32 name length, name,
 * u32 ggml type, u64 element count, u64 byte count, the raw bytes (so the
 * checker can dequantize them with gguf-py without parsing the file again).
 * Usage: gguf_dump_f32 FILE.gguf [--raw] */
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "okv_gguf.h"

int main(int argc, char **argv) {
    bool raw = argc == 3 && !strcmp(argv[2], "--raw");
    if (argc != 2 && !raw) { fprintf(stderr, "usage: gguf_dump_f32 FILE.gguf [--raw]\n"); return 2; }
    okv_error err = {0};
    okv_gguf *g;
    if (okv_gguf_open(argv[1], &g, &err)) { fprintf(stderr, "%s\n", err.message); return 1; }
    int rc = 0;
    for (int i = 0; i < okv_gguf_tensor_count(g) && !rc; i++) {
        const okv_gguf_tensor *t = okv_gguf_tensor_at(g, i);
        if (!okv_ggml_can_dequantize(t->type)) continue;
        float *buf = malloc(t->n_elems * sizeof *buf);
        if (!buf) { fprintf(stderr, "out of memory\n"); rc = 1; break; }
        if (raw) {
            uint32_t nl = (uint32_t)strlen(t->name), ty = (uint32_t)t->type;
            uint64_t ne = t->n_elems, nb = t->nbytes;
            fwrite(&nl, 4, 1, stdout);
            fwrite(t->name, 1, nl, stdout);
            fwrite(&ty, 4, 1, stdout);
            fwrite(&ne, 8, 1, stdout);
            fwrite(&nb, 8, 1, stdout);
            fwrite(t->data, 1, nb, stdout);
        }
        if (okv_gguf_dequantize(t, 0, t->n_elems, buf, &err)) { fprintf(stderr, "%s\n", err.message); rc = 1; }
        else if (fwrite(buf, sizeof *buf, t->n_elems, stdout) != t->n_elems) { perror("write"); rc = 1; }
        free(buf);
    }
    okv_gguf_close(g);
    return rc;
}
