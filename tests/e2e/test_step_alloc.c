/* test_step_alloc.c — a step allocates nothing once it is admitted (issue 9
 * item 6): every kernel takes its scratch from the workspace the runner
 * planned with the activation arena.
 *
 * This binary is linked with -Wl,--wrap for malloc, calloc, realloc,
 * aligned_alloc and posix_memalign, so every allocation the library makes
 * passes through the wrappers below. Two checks per program (fixtures in
 * f32, bf16, q8 and q4, SIMD and plain kernels, default and deterministic
 * tables, 1 and 2 threads; caches
 * created at full capacity, so no growth is due):
 *   - counting: prefill chunks and decode steps make zero allocations;
 *   - failure injection: with every allocation failing during the steps, the
 *     logits are bit-identical to the normal run (a kernel that needed to
 *     allocate would have fallen back to another path or to NaN).
 * Both again for batched steps of three sequences on a cell-pool key (pools
 * full from the start): a first batch whose sequences' rows interleave (the
 * runner's gather path), then decode steps of one token per sequence; the
 * cache layer's read runs are planned when the key is installed. */
#include <stdatomic.h>

#include "e2e_util.h"

/* ---- the allocation hooks ------------------------------------------------------ */

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t m);
void *__real_realloc(void *p, size_t n);
void *__real_aligned_alloc(size_t a, size_t n);
int __real_posix_memalign(void **p, size_t a, size_t n);

static atomic_int alloc_count; /* allocations while counting is on */
static atomic_bool counting, failing;

static bool note_alloc(void) {
    if (atomic_load(&counting)) atomic_fetch_add(&alloc_count, 1);
    return !atomic_load(&failing);
}
void *__wrap_malloc(size_t n) { return note_alloc() ? __real_malloc(n) : NULL; }
void *__wrap_calloc(size_t n, size_t m) { return note_alloc() ? __real_calloc(n, m) : NULL; }
void *__wrap_realloc(void *p, size_t n) { return note_alloc() ? __real_realloc(p, n) : NULL; }
void *__wrap_aligned_alloc(size_t a, size_t n) { return note_alloc() ? __real_aligned_alloc(a, n) : NULL; }
int __wrap_posix_memalign(void **p, size_t a, size_t n) { return note_alloc() ? __real_posix_memalign(p, a, n) : 12; }

/* ---- steps ------------------------------------------------------------------------ */

enum { N_TOK = 35, MAX_CHUNK = 16 }; /* 16: the AMX-INT8 path starts at T = 16 */

/* Runs ids through a fresh cache (prefill in two chunks of `chunk`, then the rest
 * one token at a time) with the hooks set as asked around each step; logits
 * [N_TOK, vocab] into out. Returns the allocations counted. */
static int run_steps(const okv_program *p, int chunk, const okv_runner_options *ro, const int32_t *ids, bool fail,
                     float *out, int vocab) {
    okv_error err = {0};
    okv_cache_options co;
    okv_cache_options_default(&co);
    co.max_capacity = 64;
    co.initial_capacity = 64;
    CHECK_OK(okv_cache_install("alloc", p, &co, &err), &err);
    okv_runner *r = NULL;
    CHECK_OK(okv_runner_create(p, "alloc", ro, &r, &err), &err);
    if (!r) return -1;
    atomic_store(&alloc_count, 0);
    int32_t pos[MAX_CHUNK];
    for (int t = 0; t < N_TOK;) {
        int T = t < 2 * chunk ? chunk : 1;
        for (int i = 0; i < T; i++) pos[i] = t + i;
        atomic_store(&failing, fail);
        atomic_store(&counting, true);
        okv_status st = okv_runner_step(r, ids + t, pos, T, OKV_LOGITS_ALL, out + (size_t)t * vocab, &err);
        atomic_store(&counting, false);
        atomic_store(&failing, false);
        CHECKF(st == OKV_OK, "step at %d: %s", t, err.message);
        t += T;
    }
    okv_runner_free(r);
    okv_cache_remove("alloc", &err);
    return atomic_load(&alloc_count);
}

enum { B_SEQS = 3, B_FIRST = 8, B_DECODE = 8, B_ROWS = B_FIRST + B_SEQS * B_DECODE };

/* The batched schedule on a fresh cell-pool key: rows of the first batch
 * belong to sequences 0,0,0,1,1,2,0,2 (not adjacent), then B_DECODE steps of
 * sequences 0,1,2. Logits of every row [B_ROWS, vocab] into out; returns the
 * allocations counted during the steps. */
static int run_batch_steps(const okv_program *p, const okv_runner_options *ro, const int32_t *ids, bool fail,
                           float *out, int vocab) {
    okv_error err = {0};
    okv_cache_options co;
    okv_cache_options_default(&co);
    co.mode = OKV_CACHE_CELLS;
    co.max_seqs = B_SEQS;
    co.max_capacity = co.initial_capacity = co.n_cells = 64;
    CHECK_OK(okv_cache_install("alloc_cells", p, &co, &err), &err);
    okv_runner *r = NULL;
    CHECK_OK(okv_runner_create(p, "alloc_cells", ro, &r, &err), &err);
    if (!r) return -1;
    int seq[B_SEQS];
    for (int i = 0; i < B_SEQS; i++) CHECK_OK(okv_seq_new("alloc_cells", &seq[i], &err), &err);
    static const int first[B_FIRST] = {0, 0, 0, 1, 1, 2, 0, 2};
    int32_t len[B_SEQS] = {0}, seqs[B_FIRST], pos[B_FIRST], rows[B_FIRST];
    atomic_store(&alloc_count, 0);
    for (int step = 0, row = 0; step <= B_DECODE; step++) {
        int T = step ? B_SEQS : B_FIRST;
        for (int i = 0; i < T; i++) {
            int k = step ? i : first[i];
            seqs[i] = seq[k];
            pos[i] = len[k]++;
            rows[i] = i;
        }
        atomic_store(&failing, fail);
        atomic_store(&counting, true);
        okv_status st = okv_runner_step_batch(r, ids + row, seqs, pos, T, rows, T, out + (size_t)row * vocab, &err);
        atomic_store(&counting, false);
        atomic_store(&failing, false);
        CHECKF(st == OKV_OK, "batched step %d: %s", step, err.message);
        row += T;
    }
    okv_runner_free(r);
    okv_cache_remove("alloc_cells", &err);
    return atomic_load(&alloc_count);
}

/* run_batch_steps with and without failing allocations: none counted, same logits. */
static void check_batched(const okv_program *p, const okv_runner_options *ro, const int32_t *ids, int vocab,
                          const char *what) {
    size_t n = (size_t)B_ROWS * vocab;
    float *a = malloc(sizeof(float) * n), *b = malloc(sizeof(float) * n);
    int count = run_batch_steps(p, ro, ids, false, a, vocab);
    CHECKF(count == 0, "%s: %d allocations during batched steps", what, count);
    run_batch_steps(p, ro, ids, true, b, vocab);
    CHECKF(!memcmp(a, b, sizeof(float) * n), "%s: batched logits change when allocations fail", what);
    bool finite = true;
    for (size_t i = 0; i < n; i++) finite &= isfinite(a[i]);
    CHECKF(finite, "%s: non-finite batched logits", what);
    free(a);
    free(b);
}

static void check_program(const char *path, int chunk, const char *what, const int32_t *ids) {
    okv_program *p = NULL;
    okv_error err = {0};
    CHECK_OK(okv_program_open(path, &p, &err), &err);
    if (!p) return;
    okv_program_info info;
    okv_program_get_info(p, &info);
    size_t n = (size_t)N_TOK * info.vocab_size;
    float *a = malloc(sizeof(float) * n), *b = malloc(sizeof(float) * n);
    for (int det = 0; det < 2; det++) /* deterministic: the batch-invariant table */
    for (int plain = 0; plain < 2; plain++)
        for (int threads = 1; threads <= 2; threads++) {
            okv_runner_options ro;
            okv_runner_options_default(&ro);
            ro.n_threads = threads;
            ro.plain_kernels = plain;
            ro.deterministic = det;
            const char *kinds = det ? (plain ? "deterministic plain" : "deterministic simd") : plain ? "plain" : "simd";
            int count = run_steps(p, chunk, &ro, ids, false, a, info.vocab_size);
            CHECKF(count == 0, "%s (%s kernels, %d threads): %d allocations during steps", what, kinds, threads, count);
            run_steps(p, chunk, &ro, ids, true, b, info.vocab_size);
            CHECKF(!memcmp(a, b, sizeof(float) * n), "%s (%s kernels, %d threads): logits change when allocations fail",
                   what, kinds, threads);
            bool finite = true;
            for (size_t i = 0; i < n; i++) finite &= isfinite(a[i]);
            CHECKF(finite, "%s: non-finite logits", what);
            char bwhat[300];
            snprintf(bwhat, sizeof bwhat, "%s (%s kernels, %d threads)", what, kinds, threads);
            check_batched(p, &ro, ids, info.vocab_size, bwhat);
        }
    free(a);
    free(b);
    okv_program_free(p);
}

/* The counter sees allocations made while counting (the hooks are live). */
static void test_hooks_work(void) {
    atomic_store(&alloc_count, 0);
    atomic_store(&counting, true);
    void *volatile x = malloc(16);
    atomic_store(&counting, false);
    free(x);
    CHECK(atomic_load(&alloc_count) == 1);
    atomic_store(&failing, true);
    void *volatile y = malloc(16);
    atomic_store(&failing, false);
    CHECK(y == NULL);
}

int main(void) {
    test_hooks_work();
    static const char *fixtures[] = {"llama32-tiny", "gemma3-tiny", "gemma4-tiny"};
    static const int chunks[] = {16, 8, 8}; /* Gemma: a step may not exceed the window (8) */
    for (size_t f = 0; f < sizeof fixtures / sizeof *fixtures; f++) {
        char dir[256], name[256], what[256];
        snprintf(dir, sizeof dir, FIXTURES "%s", fixtures[f]);
        int32_t ids[N_TOK];
        for (int i = 0; i < N_TOK; i++) ids[i] = (int32_t)(1 + (i * 7) % 60);
        static const struct { const char *tag; okv_dtype dt; int ql; } kinds[] = {
            {"f32", OKV_F32, 0}, {"bf16", OKV_BF16, 0}, {"q8", OKV_F32, 8}, {"q4", OKV_F32, 4}};
        for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
            if (kinds[k].ql && !strcmp(fixtures[f], "gemma4-tiny")) continue; /* K = 16 cannot be grouped */
            okv_export_options o;
            okv_export_options_default(&o);
            o.dtype = kinds[k].dt;
            o.prefill_chunk_size = chunks[f];
            o.qlinear = kinds[k].ql;
            snprintf(name, sizeof name, "%s.%s.okv", fixtures[f], kinds[k].tag);
            char *out = e2e_path(name);
            okv_error err = {0};
            okv_status st = okv_export(dir, out, &o, &err);
            CHECKF(st == OKV_OK, "export %s: %s", name, err.message);
            snprintf(what, sizeof what, "%s %s", fixtures[f], kinds[k].tag);
            if (!st) check_program(out, chunks[f], what, ids);
            free(out);
        }
    }
    e2e_cleanup();
    return okv_test_finish();
}
