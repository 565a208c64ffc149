/* test_seq_state_mem.c — the in-memory form of sequence state and the
 * header-only peek (okv_seq_save_mem / okv_seq_load_mem / okv_seq_peek,
 * which the server's Redis tier and shared directory use), through the
 * public API on a generated Llama with a cell-pool key:
 * - the image okv_seq_save_mem returns is byte for byte the file
 *   okv_seq_save writes for the same sequence and extra blob;
 * - okv_seq_load_mem of it into a fresh key gives a sequence whose next
 *   steps' logits equal, bit for bit, those of the original sequence
 *   stepped on without interruption (a flat cache: positions load in the
 *   order they were written), and hands back the extra blob;
 * - okv_seq_peek reads the length and extra blob from the file's header
 *   alone, calls a truncated file malformed (OKV_ERR_FORMAT) and a file of
 *   another program (other weights) OKV_ERR_INVALID;
 * - an image with one flipped byte is refused (CRC) and leaves the key's
 *   sequence count unchanged. */
#include "e2e_mkckpt.h"

#define N_PROMPT 21
#define N_NEXT 3
#define CHUNK 8

static int V;

static okv_program *make_program(const char *name, uint64_t seed) {
    okv_mkckpt_spec s;
    okv_mkckpt_default_spec(&s, OKV_MK_LLAMA);
    s.seed = seed;
    V = s.vocab;
    return e2e_generated_program(&s, name, CHUNK, 64);
}

static int32_t tok(int t) { return (int32_t)(3 + (t * 37 + (t * t) % 11) % 200); }

static okv_runner *open_key(okv_program *p, const char *key) {
    okv_cache_options co;
    okv_cache_options_default(&co);
    co.mode = OKV_CACHE_CELLS;
    co.max_seqs = 4;
    return e2e_install_runner(p, key, &co);
}

static void step_range(okv_runner *r, int seq, int from, int to, float *out) {
    e2e_step_range(r, tok, CHUNK, seq, from, to, out);
}

static unsigned char *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = len > 0 ? malloc((size_t)len) : NULL;
    *n = b && fread(b, 1, (size_t)len, f) == (size_t)len ? (size_t)len : 0;
    fclose(f);
    return b;
}

static void write_all(const char *path, const void *d, size_t n) {
    FILE *f = fopen(path, "wb");
    CHECKF(f && fwrite(d, 1, n, f) == n, "cannot write %s", path);
    if (f) fclose(f);
}

static int n_seqs(const char *key) {
    okv_cells_info ci;
    okv_error err = {0};
    return okv_cache_cells(key, &ci, &err) ? -1 : ci.n_seqs;
}

int main(void) {
    okv_program *p = make_program("llama-mem", 21), *other = make_program("llama-mem-other", 22);
    if (!p || !other) return okv_test_finish();
    okv_error err = {0};
    static const char extra[] = "prefix ids here";
    char file[300], cut[300], foreign[300];
    snprintf(file, sizeof file, "%s/mem.okvseq", e2e_tmp());
    snprintf(cut, sizeof cut, "%s/mem-cut.okvseq", e2e_tmp());
    snprintf(foreign, sizeof foreign, "%s/mem-other.okvseq", e2e_tmp());
    float *want = calloc((size_t)N_NEXT * V, sizeof(float)), *got = calloc((size_t)N_NEXT * V, sizeof(float));
    float *scratch = calloc((size_t)V, sizeof(float));

    okv_runner *r = open_key(p, "mem-a");
    int seq = -1;
    CHECK_OK(okv_seq_new("mem-a", &seq, &err), &err);
    step_range(r, seq, 0, N_PROMPT, scratch);
    void *img = NULL;
    size_t img_len = 0, file_len = 0;
    CHECK_OK(okv_seq_save("mem-a", p, seq, file, extra, sizeof extra, &err), &err);
    CHECK_OK(okv_seq_save_mem("mem-a", p, seq, extra, sizeof extra, &img, &img_len, &err), &err);
    unsigned char *on_disk = read_all(file, &file_len);
    CHECKF(on_disk && img && file_len == img_len && !memcmp(on_disk, img, img_len),
           "the in-memory image (%zu bytes) is the file (%zu bytes) byte for byte", img_len, file_len);
    for (int k = 0; k < N_NEXT; k++) step_range(r, seq, N_PROMPT + k, N_PROMPT + k + 1, want + (size_t)k * V);
    okv_runner_free(r);
    okv_cache_remove("mem-a", &err);

    /* peek: the header's length and the extra blob, nothing loaded */
    int len = -1;
    void *x = NULL;
    size_t xlen = 0;
    CHECK_OK(okv_seq_peek(p, file, &len, &x, &xlen, &err), &err);
    CHECKF(len == N_PROMPT && xlen == sizeof extra && x && !memcmp(x, extra, xlen), "peek: length %d, extra %zu bytes", len, xlen);
    free(x);
    write_all(cut, on_disk, file_len / 2);
    x = NULL;
    CHECKF(okv_seq_peek(p, cut, &len, &x, &xlen, &err) == OKV_ERR_FORMAT && !x, "peek of a truncated file: %s", err.message);
    CHECKF(okv_seq_peek(other, file, &len, &x, &xlen, &err) == OKV_ERR_INVALID && strstr(err.message, "fingerprint"),
           "peek with another program: %s", err.message);

    /* load_mem: the next steps equal the uninterrupted sequence's, bit for bit */
    r = open_key(p, "mem-b");
    int loaded = -2;
    x = NULL;
    CHECK_OK(okv_seq_load_mem("mem-b", p, img, img_len, "image", &loaded, &x, &xlen, &err), &err);
    CHECKF(loaded >= 0 && xlen == sizeof extra && x && !memcmp(x, extra, xlen), "load_mem: sequence %d, extra %zu bytes",
           loaded, xlen);
    free(x);
    len = -1;
    if (loaded >= 0) okv_seq_len("mem-b", loaded, &len, &err);
    CHECKF(len == N_PROMPT, "the loaded sequence holds %d positions, not %d", len, N_PROMPT);
    for (int k = 0; len == N_PROMPT && k < N_NEXT; k++) step_range(r, loaded, N_PROMPT + k, N_PROMPT + k + 1, got + (size_t)k * V);
    for (int k = 0; k < N_NEXT; k++)
        CHECKF(!memcmp(want + (size_t)k * V, got + (size_t)k * V, sizeof(float) * V),
               "step %d after load_mem differs from the uninterrupted sequence (max %.3g)", k,
               e2e_max_diff(want + (size_t)k * V, got + (size_t)k * V, (size_t)V));
    /* one flipped byte in the rows: refused by the CRC, the key unchanged */
    unsigned char *bad = malloc(img_len);
    if (bad) {
        memcpy(bad, img, img_len);
        bad[img_len - 100] ^= 0x10;
        int before = n_seqs("mem-b"), s2 = -2;
        CHECKF(okv_seq_load_mem("mem-b", p, bad, img_len, "flipped", &s2, NULL, NULL, &err) == OKV_ERR_FORMAT &&
               strstr(err.message, "CRC") && strstr(err.message, "flipped"), "a flipped byte is refused: %s", err.message);
        CHECKF(n_seqs("mem-b") == before && s2 == -1, "the refused image left the key as it was (%d -> %d)", before, n_seqs("mem-b"));
        free(bad);
    }
    okv_runner_free(r);
    okv_cache_remove("mem-b", &err);

    /* a file of the other program: peek refuses it by its fingerprint too (the other direction) */
    r = open_key(other, "mem-c");
    int s3 = -1;
    CHECK_OK(okv_seq_new("mem-c", &s3, &err), &err);
    step_range(r, s3, 0, 9, scratch);
    CHECK_OK(okv_seq_save("mem-c", other, s3, foreign, NULL, 0, &err), &err);
    CHECKF(okv_seq_peek(p, foreign, &len, &x, &xlen, &err) == OKV_ERR_INVALID, "peek of another program's file: %s", err.message);
    CHECK_OK(okv_seq_peek(other, foreign, &len, &x, &xlen, &err), &err);
    CHECKF(len == 9 && xlen == 0 && !x, "peek of a file without extra: length %d, extra %zu", len, xlen);
    okv_runner_free(r);
    okv_cache_remove("mem-c", &err);

    free(on_disk);
    free(img);
    free(want);
    free(got);
    free(scratch);
    okv_program_free(p);
    okv_program_free(other);
    e2e_cleanup();
    return okv_test_finish();
}
