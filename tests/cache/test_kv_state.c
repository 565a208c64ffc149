/* test_kv_state.c — sequence state files at the byte layer: a saved flat +
 * ring set loads back bit-exact (rows, length, each ring's rewind floor, so
 * every rewind target is judged as before); a cell sequence with a hole
 * loads into a fresh id of another cell set; a single set loads into a cell
 * set; refusals: other layout / program digest, kv dtype, window override,
 * holes into a single set, the file cut at every length and every byte
 * flipped (the set untouched each time); a save that fails midway (file size
 * limit) leaves the old file intact and no temporary behind. */
#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "okv_test.h"
#include "cache_test_util.h"

static char dir[] = "/tmp/okv-kvstate-XXXXXX";
static const okv_kv_state_id ID = { 0x1111, 0x2222 };

static uint8_t pattern(int32_t pos, size_t b, int c, int kvi) { return (uint8_t)(pos * 7 + b * 13 + c * 31 + kvi * 101); }

/* Steps the single set to `len` (chunks of up to 3) writing the pattern. */
static void fill(okv_kv *kv, int32_t len) {
    okv_error err = {0};
    while (kv->seq.length < len) {
        int32_t pos = kv->seq.length, T = len - pos < 3 ? len - pos : 3, p[3];
        for (int t = 0; t < T; t++) p[t] = pos + t;
        CHECK_OK(okv_kv_begin_step(kv, p, T, &err), &err);
        for (int c = 0; c < kv->n_caches; c++) {
            okv_cache *ca = &kv->caches[c];
            for (int kvi = 0; kvi < 2; kvi++) { /* K and V rows may differ in size */
                size_t row = okv_kv_slot_bytes(ca, kvi == 1), done = 0;
                uint8_t *pool = kvi ? ca->v : ca->k;
                const okv_step_plan *pl = &kv->plans[c];
                for (int r = 0; r < pl->n_write; r++)
                    for (int32_t i = 0; i < pl->write[r].n; i++, done++)
                        for (size_t b = 0; b < row; b++)
                            pool[(size_t)(pl->write[r].slot + i) * row + b] = pattern(pos + (int32_t)done, b, c, kvi);
            }
        }
        okv_kv_commit_step(kv);
    }
}

/* Whether every held row of cache c in a single set has the pattern. */
static bool rows_ok(const okv_kv *kv, int c) {
    const okv_cache *ca = &kv->caches[c];
    size_t row = okv_kv_slot_bytes(ca, false), vrow = okv_kv_slot_bytes(ca, true);
    for (int32_t p = ca->oldest; p < kv->seq.length; p++) {
        size_t slot = (size_t)(ca->policy.kind == OKV_POLICY_RING ? p % ca->policy.slots : p);
        for (size_t b = 0; b < row; b++)
            if (((uint8_t *)ca->k)[slot * row + b] != pattern(p, b, c, 0)) return false;
        for (size_t b = 0; b < vrow; b++)
            if (((uint8_t *)ca->v)[slot * vrow + b] != pattern(p, b, c, 1)) return false;
    }
    return true;
}

static okv_kv *make_set2(okv_dtype kdt, okv_dtype vdt, const int32_t *wo, int n_wo, bool cells) {
    okv_layout l;
    int w[3] = { 0, 5, 0 };
    make_layout(&l, 3, w, 2, 4, 3, 64);
    okv_kv_options o;
    okv_kv_options_default(&o);
    o.k_dtype = kdt;
    o.v_dtype = vdt;
    o.initial_capacity = 4;
    o.windows_override = wo;
    o.n_windows_override = n_wo;
    o.cells = cells;
    o.max_seqs = cells ? 4 : 0;
    okv_kv *kv = kv_create_ok(&l, &o);
    okv_layout_free(&l);
    return kv;
}

static okv_kv *make_set(okv_dtype dt, const int32_t *wo, int n_wo, bool cells) {
    return make_set2(dt, dt, wo, n_wo, cells);
}

static char *path_of(const char *name) { return okv_path_join(dir, name); }

static uint8_t *slurp(const char *path, size_t *n) {
    char *d = NULL;
    okv_error err;
    if (okv_read_file(path, &d, n, &err)) return NULL;
    return (uint8_t *)d;
}

static void test_round_trip(void) {
    okv_error err = {0};
    okv_kv *a = make_set(OKV_BF16, NULL, 0, false);
    fill(a, 23);   /* ring of 5 + 3 - 1 = 7 slots wrapped several times */
    CHECK_OK(okv_kv_rewind(a, 21, &err), &err);
    fill(a, 22);
    char *path = path_of("a.okvseq");
    const char extra[] = "{\"hello\":1}";
    CHECK_OK(okv_kv_state_save(a, -1, &ID, extra, sizeof extra, path, &err), &err);

    okv_kv *b = make_set(OKV_BF16, NULL, 0, false);
    fill(b, 2);   /* replaced by the load */
    void *ex = NULL;
    size_t exn = 0;
    int seq = 7;
    CHECK_OK(okv_kv_state_load(b, &ID, path, &seq, &ex, &exn, &err), &err);
    CHECK(seq == -1 && exn == sizeof extra && ex && !memcmp(ex, extra, exn));
    free(ex);
    CHECK(b->seq.length == 22);
    for (int c = 0; c < 3; c++) {
        CHECKF(b->caches[c].oldest == a->caches[c].oldest, "cache %d oldest %d vs %d", c, b->caches[c].oldest,
               a->caches[c].oldest);
        CHECKF(rows_ok(b, c), "cache %d rows bit-exact", c);
    }
    CHECK(a->caches[1].oldest == 16);   /* 23 - 7 slots, kept by the rewind to 21 */
    /* the exact rewind floor: every target accepted or refused as on the original */
    for (int32_t t = 0; t <= 22; t++) {
        okv_error e1 = {0}, e2 = {0};
        okv_kv *x = make_set(OKV_BF16, NULL, 0, false);
        CHECK_OK(okv_kv_state_load(x, &ID, path, NULL, NULL, NULL, &err), &err);
        okv_kv *y = make_set(OKV_BF16, NULL, 0, false);
        CHECK_OK(okv_kv_state_load(y, &ID, path, NULL, NULL, NULL, &err), &err);
        okv_status s1 = okv_kv_rewind(x, t, &e1);
        CHECK_OK(okv_kv_rewind(y, 22, &e2), &e2);
        okv_kv_free(y);
        /* the original, copied through another file so a stays as it is */
        okv_kv *o = make_set(OKV_BF16, NULL, 0, false);
        fill(o, 23);
        CHECK_OK(okv_kv_rewind(o, 21, &e2), &e2);
        fill(o, 22);
        okv_status s2 = okv_kv_rewind(o, t, &e2);
        CHECKF(s1 == s2, "rewind to %d: loaded %d, original %d", t, s1, s2);
        okv_kv_free(o);
        okv_kv_free(x);
    }
    /* refusals, each leaving b as it was */
    okv_kv_state_id other = ID;
    other.layout++;
    CHECK(okv_kv_state_load(b, &other, path, NULL, NULL, NULL, &err) == OKV_ERR_INVALID &&
          strstr(err.message, "different cache layout") && strstr(err.message, path));
    other = ID;
    other.program++;
    CHECK(okv_kv_state_load(b, &other, path, NULL, NULL, NULL, &err) == OKV_ERR_INVALID &&
          strstr(err.message, "different program"));
    okv_kv *f = make_set(OKV_F32, NULL, 0, false);
    CHECK(okv_kv_state_load(f, &ID, path, NULL, NULL, NULL, &err) == OKV_ERR_INVALID && strstr(err.message, "kv_dtype"));
    okv_kv_free(f);
    int32_t w4 = 4;
    okv_kv *g = make_set(OKV_BF16, &w4, 1, false);
    CHECKF(okv_kv_state_load(g, &ID, path, NULL, NULL, NULL, &err) == OKV_ERR_INVALID && strstr(err.message, "window"),
           "%s", err.message);
    okv_kv_free(g);
    CHECK(b->seq.length == 22 && rows_ok(b, 0) && rows_ok(b, 1));

    /* cut at every length, every byte flipped: refused, b untouched */
    size_t n;
    uint8_t *img = slurp(path, &n);
    CHECK(img && n > 200);
    int cut_ok = 0, flip_ok = 0;
    for (size_t k = 0; img && k < n; k++) {
        okv_status s = okv_kv_state_apply(b, &ID, img, k, "cut", NULL, NULL, NULL, &err);
        cut_ok += s == OKV_ERR_FORMAT;
    }
    for (size_t k = 0; img && k < n; k++) {
        img[k] ^= 0x20;
        okv_status s = okv_kv_state_apply(b, &ID, img, n, "flip", NULL, NULL, NULL, &err);
        flip_ok += s != OKV_OK;
        img[k] ^= 0x20;
    }
    CHECKF(cut_ok == (int)n && flip_ok == (int)n, "cut refused %d/%zu, flip refused %d/%zu", cut_ok, n, flip_ok, n);
    CHECK(b->seq.length == 22 && rows_ok(b, 0) && rows_ok(b, 1) && rows_ok(b, 2));
    free(img);
    free(path);
    okv_kv_free(a);
    okv_kv_free(b);
}

/* K and V in different dtypes (rows of different sizes): a single and a
 * cell sequence round-trip bit-exact; a set whose K or V dtype differs
 * refuses the file, naming both; a version-1 file (one dtype, byte 68
 * zero) still loads into a set storing that dtype for both. */
static void test_mixed_dtypes(void) {
    okv_error err = {0};
    okv_kv *a = make_set2(OKV_BF16, OKV_F32, NULL, 0, false);
    fill(a, 13);
    char *path = path_of("mixed.okvseq");
    CHECK_OK(okv_kv_state_save(a, -1, &ID, NULL, 0, path, &err), &err);
    okv_kv *b = make_set2(OKV_BF16, OKV_F32, NULL, 0, false);
    CHECK_OK(okv_kv_state_load(b, &ID, path, NULL, NULL, NULL, &err), &err);
    CHECK(b->seq.length == 13 && rows_ok(b, 0) && rows_ok(b, 1) && rows_ok(b, 2));
    okv_kv *cells = make_set2(OKV_BF16, OKV_F32, NULL, 0, true);
    int seq = -1;
    CHECK_OK(okv_kv_state_load(cells, &ID, path, &seq, NULL, NULL, &err), &err);
    CHECK(seq >= 0 && cells->cells->seqs.length[seq] == 13);
    static const okv_dtype other[2][2] = {{OKV_BF16, OKV_BF16}, {OKV_F32, OKV_F32}};
    for (int i = 0; i < 2; i++) {
        okv_kv *x = make_set2(other[i][0], other[i][1], NULL, 0, false);
        CHECKF(okv_kv_state_load(x, &ID, path, NULL, NULL, NULL, &err) == OKV_ERR_INVALID &&
               strstr(err.message, "K storage bf16 and V storage f32"), "%s", err.message);
        okv_kv_free(x);
    }
    /* version 1: rewrite a same-dtype save as the old format */
    okv_kv *s16 = make_set(OKV_F16, NULL, 0, false);
    fill(s16, 9);
    char *p1 = path_of("v1.okvseq");
    CHECK_OK(okv_kv_state_save(s16, -1, &ID, NULL, 0, p1, &err), &err);
    size_t n;
    uint8_t *img = slurp(p1, &n);
    CHECK(img && n > 104 && img[8] == OKV_STATE_VERSION && img[68] == OKV_F16);
    if (img && n > 104) {
        img[8] = 1;
        memset(img + 68, 0, 4);
        uint32_t crc = okv_kv_state_crc32(0, img, n - 8);
        for (int i = 0; i < 4; i++) img[n - 8 + i] = (uint8_t)(crc >> (8 * i));
        okv_kv *y = make_set(OKV_F16, NULL, 0, false);
        CHECK_OK(okv_kv_state_apply(y, &ID, img, n, "v1", NULL, NULL, NULL, &err), &err);
        CHECK(y->seq.length == 9 && rows_ok(y, 0) && rows_ok(y, 2));
        okv_kv_free(y);
        img[68] = OKV_F16; /* version 1 has no V dtype field: a nonzero byte 68 is refused */
        crc = okv_kv_state_crc32(0, img, n - 8);
        for (int i = 0; i < 4; i++) img[n - 8 + i] = (uint8_t)(crc >> (8 * i));
        y = make_set(OKV_F16, NULL, 0, false);
        CHECK(okv_kv_state_apply(y, &ID, img, n, "v1", NULL, NULL, NULL, &err) == OKV_ERR_FORMAT &&
              strstr(err.message, "reserved"));
        okv_kv_free(y);
    }
    free(img);
    free(p1);
    free(path);
    okv_kv_free(s16);
    okv_kv_free(cells);
    okv_kv_free(b);
    okv_kv_free(a);
}

/* A cell sequence (forked, with a hole) into another cell set, and a single
 * set into a cell set. */
static void test_cells(void) {
    okv_error err = {0};
    okv_kv *a = make_set(OKV_F16, NULL, 0, true);
    int s0, s1;
    CHECK_OK(okv_kv_seq_new(a, &s0, &err), &err);
    for (int32_t p = 0; p < 14; p++) {   /* row bytes = the position */
        int32_t sq = s0;
        CHECK_OK(okv_kv_begin_batch(a, &sq, &p, 1, &err), &err);
        for (int c = 0; c < 3; c++) {
            const okv_run *r;
            int nr;
            okv_kv_cell_writes(a, c, &r, &nr);
            size_t row = cache_row_bytes(&a->caches[c]);
            memset((uint8_t *)a->caches[c].k + (size_t)r[0].slot * row, p + 1, row);
            memset((uint8_t *)a->caches[c].v + (size_t)r[0].slot * row, 100 + p, row);
        }
        okv_kv_commit_step(a);
    }
    CHECK_OK(okv_kv_seq_fork(a, s0, 12, &s1, &err), &err);
    CHECK_OK(okv_kv_seq_rm(a, s1, 2, 4, &err), &err);   /* hole at 2, 3 in full caches */
    char *path = path_of("cells.okvseq");
    CHECK_OK(okv_kv_state_save(a, s1, &ID, NULL, 0, path, &err), &err);

    okv_kv *b = make_set(OKV_F16, NULL, 0, true);
    int t0, t1;
    CHECK_OK(okv_kv_seq_new(b, &t0, &err), &err);
    CHECK_OK(okv_kv_state_load(b, &ID, path, &t1, NULL, NULL, &err), &err);
    CHECK(t1 == 1 && b->cells->seqs.length[t1] == 12);
    for (int c = 0; c < 3; c++) {
        const okv_cells *ga = &a->cells->groups[a->cells->group_of[c]], *gb = &b->cells->groups[b->cells->group_of[c]];
        CHECK(ga->oldest[s1] == gb->oldest[t1]);
        size_t row = cache_row_bytes(&b->caches[c]);
        int held_a = 0, held_b = 0;
        for (int32_t i = 0; i < ga->hwm; i++) held_a += ga->pos[i] >= 0 && okv_cells_owns(ga, i, s1);
        for (int32_t i = 0; i < gb->hwm; i++) {
            if (gb->pos[i] < 0 || !okv_cells_owns(gb, i, t1)) continue;
            held_b++;
            int32_t p = gb->pos[i];
            const uint8_t *k = (const uint8_t *)b->caches[c].k + (size_t)i * row;
            const uint8_t *v = (const uint8_t *)b->caches[c].v + (size_t)i * row;
            CHECKF(k[0] == p + 1 && k[row - 1] == p + 1 && v[0] == 100 + p, "cache %d position %d", c, p);
            CHECKF(c != 0 || (p != 2 && p != 3), "the hole stays a hole");
        }
        CHECKF(held_a == held_b && held_b > 0, "cache %d: %d held, %d loaded", c, held_a, held_b);
    }
    /* holes cannot go into a single set */
    okv_kv *s = make_set(OKV_F16, NULL, 0, false);
    CHECK(okv_kv_state_load(s, &ID, path, NULL, NULL, NULL, &err) == OKV_ERR_INVALID && strstr(err.message, "holes"));
    CHECK(s->seq.length == 0);
    /* a single set's sequence into a cell set */
    okv_kv *one = make_set(OKV_F16, NULL, 0, false);
    fill(one, 10);
    char *p2 = path_of("single.okvseq");
    CHECK_OK(okv_kv_state_save(one, -1, &ID, NULL, 0, p2, &err), &err);
    int t2;
    CHECK_OK(okv_kv_state_load(b, &ID, p2, &t2, NULL, NULL, &err), &err);
    CHECK(t2 == 2 && b->cells->seqs.length[t2] == 10);
    CHECK(okv_kv_state_save(one, 0, &ID, NULL, 0, p2, &err) == OKV_ERR_INVALID);
    CHECK(okv_kv_state_save(a, 3, &ID, NULL, 0, p2, &err) == OKV_ERR_INVALID);   /* no such sequence */
    free(p2);
    free(path);
    okv_kv_free(one);
    okv_kv_free(s);
    okv_kv_free(a);
    okv_kv_free(b);
}

static int count_entries(void) {
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += e->d_name[0] != '.';
    if (d) closedir(d);
    return n;
}

/* A save that cannot finish (RLIMIT_FSIZE in a child) leaves the old file. */
static void test_atomic(void) {
    okv_error err = {0};
    char *path = path_of("atomic.okvseq");
    okv_kv *a = make_set(OKV_F32, NULL, 0, false);
    fill(a, 3);
    CHECK_OK(okv_kv_state_save(a, -1, &ID, NULL, 0, path, &err), &err);
    size_t n0;
    uint8_t *before = slurp(path, &n0);
    int entries = count_entries();
    fill(a, 60);
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit rl = { 4096, 4096 };
        setrlimit(RLIMIT_FSIZE, &rl);
        okv_error e = {0};
        okv_status st = okv_kv_state_save(a, -1, &ID, NULL, 0, path, &e);
        _exit(st == OKV_ERR_IO && strstr(e.message, path) ? 0 : 1);
    }
    int ws = 0;
    waitpid(pid, &ws, 0);
    CHECKF(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "the limited save fails with an I/O error");
    size_t n1;
    uint8_t *after = slurp(path, &n1);
    CHECK(after && before && n0 == n1 && !memcmp(before, after, n0));
    CHECKF(count_entries() == entries, "no temporary left (%d entries, %d before)", count_entries(), entries);
    free(before);
    free(after);
    free(path);
    okv_kv_free(a);
}

int main(void) {
    if (!mkdtemp(dir)) return 1;
    test_round_trip();
    test_cells();
    test_mixed_dtypes();
    test_atomic();
    okv_test_rm_tree(dir);
    return okv_test_finish();
}
