/* okv_cache_state.c — sequence state files (byte layer): the K/V rows one
 * sequence holds, written to disk and loaded back into a running kv set.
 *
 * What is saved is what the caches hold, per cache, in position order: the
 * positions (so rings and cells with holes round-trip exactly), the K rows
 * and the V rows as raw bytes of the storage dtype (row = one position's
 * [kv_heads, head_dim] slot; its size comes from the byte layer, so a block
 * dtype such as q8 with its scales is carried the same way), plus each
 * cache's oldest held position (the rewind floor of rings and windowed
 * cells). The caller adds a fingerprint of the program (okv_kv_state_id) and
 * an opaque "extra" blob (a chat session's conversation) and nothing else:
 * this file does not know programs.
 *
 * File layout (little-endian, no padding; okv_cache.h has the constants):
 *   [0, 96)   header: magic "OKVSEQ\0\0", version, header bytes, layout
 *             digest, program digest, K dtype, n_caches, length, source
 *             mode, extra bytes, file bytes, max_write, V dtype, zeros
 *   [96, ..)  n_caches entries of 32 bytes: window, kv_heads, head_dim,
 *             oldest, n_held, 0, K row_bytes (u64; a V row's size follows
 *             from the V dtype and the geometry)
 * Version 1 files (one dtype for K and V, byte 68 zero) still load.
 *   then      extra blob
 *   then      per cache: positions i32[n_held], K rows, V rows
 *   last 8    CRC-32 of everything before it, then "OKVE"
 *
 * Loading reads the whole file (its size bounded by what the running kv set
 * could hold, before anything is allocated), checks the CRC, then every
 * field against the running set with checked 64-bit arithmetic, and only
 * then touches the caches (under the set's lock, all or nothing). A single
 * sequence set is replaced by the file's sequence (flat caches need
 * positions 0..length-1, rings a contiguous run [oldest, length) within
 * their slots); a cell-pool set gets the sequence under a fresh id, its
 * rows in free cells. Writes go through okv_out_file: a temporary file
 * renamed into place, so a failed save leaves no file and the old one
 * intact. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "okv_cache_internal.h"
#include "okv_common.h"
#include "okv_kvq8.h"

#define HDR_BYTES 96
#define ENTRY_BYTES 32
#define TRAILER_BYTES 8
static const char STATE_MAGIC[8] = { 'O', 'K', 'V', 'S', 'E', 'Q', 0, 0 };
static const char TRAILER_MAGIC[4] = { 'O', 'K', 'V', 'E' };

/* ---- CRC-32 (IEEE, reflected), slice-by-8 --------------------------------- */

static uint32_t crc_table[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[0][i] = c;
    }
    for (int t = 1; t < 8; t++)
        for (int i = 0; i < 256; i++) crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 255];
}

uint32_t okv_kv_state_crc32(uint32_t crc, const void *data, size_t n) {
    pthread_once(&crc_once, crc_init);
    const unsigned char *p = data;
    crc = ~crc;
    while (n >= 8) {
        uint32_t a = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
        crc = crc_table[7][a & 255] ^ crc_table[6][(a >> 8) & 255] ^ crc_table[5][(a >> 16) & 255] ^
              crc_table[4][a >> 24] ^ crc_table[3][p[4]] ^ crc_table[2][p[5]] ^ crc_table[1][p[6]] ^ crc_table[0][p[7]];
        p += 8;
        n -= 8;
    }
    while (n--) crc = crc_table[0][(crc ^ *p++) & 255] ^ (crc >> 8);
    return ~crc;
}

/* ---- little-endian fields --------------------------------------------------- */

static void put32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get64(const unsigned char *p) { return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32; }

/* ---- what one sequence holds ----------------------------------------------- */

/* Cache c's held positions of the saved sequence and the slot of each. */
typedef struct held_rows {
    int32_t oldest, n;
    int32_t *pos, *slot;   /* [n] in position order */
} held_rows;

static int cmp_pos_slot(const void *a, const void *b) {
    const int32_t *x = a, *y = b;
    return (x[0] > y[0]) - (x[0] < y[0]);
}

/* Fills h for cache c: a single-sequence set holds [oldest, length) at slot
 * p (flat) or p mod slots (ring); a cell set holds the cells seq owns. */
static okv_status collect_held(const okv_kv *kv, int c, int seq, held_rows *h, okv_error *err) {
    const okv_cache *ca = &kv->caches[c];
    memset(h, 0, sizeof *h);
    if (!kv->cells) {
        int32_t len = kv->seq.length;
        h->oldest = ca->policy.kind == OKV_POLICY_RING ? ca->oldest : 0;
        if (h->oldest > len) h->oldest = len;
        h->n = len - h->oldest;
        h->pos = malloc(((size_t)h->n + 1) * sizeof *h->pos);
        h->slot = malloc(((size_t)h->n + 1) * sizeof *h->slot);
        if (!h->pos || !h->slot) return okv_fail(err, OKV_ERR_NOMEM, "sequence save: out of memory");
        for (int32_t i = 0; i < h->n; i++) {
            int32_t p = h->oldest + i;
            h->pos[i] = p;
            h->slot[i] = ca->policy.kind == OKV_POLICY_RING ? p % ca->policy.slots : p;
        }
        return OKV_OK;
    }
    const okv_cells *g = &kv->cells->groups[kv->cells->group_of[c]];
    h->oldest = g->oldest[seq];
    int32_t n = 0;
    for (int32_t i = 0; i < g->hwm; i++) n += g->pos[i] >= 0 && okv_cells_owns(g, i, seq);
    int32_t *pairs = malloc(((size_t)n + 1) * 2 * sizeof *pairs);
    h->pos = malloc(((size_t)n + 1) * sizeof *h->pos);
    h->slot = malloc(((size_t)n + 1) * sizeof *h->slot);
    if (!pairs || !h->pos || !h->slot) {
        free(pairs);
        return okv_fail(err, OKV_ERR_NOMEM, "sequence save: out of memory");
    }
    int32_t k = 0;
    for (int32_t i = 0; i < g->hwm; i++)
        if (g->pos[i] >= 0 && okv_cells_owns(g, i, seq)) {
            pairs[2 * k] = g->pos[i];
            pairs[2 * k + 1] = i;
            k++;
        }
    qsort(pairs, (size_t)n, 2 * sizeof *pairs, cmp_pos_slot);
    for (int32_t i = 0; i < n; i++) {
        h->pos[i] = pairs[2 * i];
        h->slot[i] = pairs[2 * i + 1];
    }
    h->n = n;
    free(pairs);
    return OKV_OK;
}

static void free_held(held_rows *h, int n) {
    if (!h) return;
    for (int c = 0; c < n; c++) {
        free(h[c].pos);
        free(h[c].slot);
    }
    free(h);
}

/* ---- writing ------------------------------------------------------------------ */

/* A buffered writer that keeps the running CRC, over the temporary file
 * (fd) or, with fd < 0, a heap image (mem, grown by doubling). */
typedef struct state_writer {
    int fd;
    uint32_t crc;
    unsigned char buf[1 << 16];
    size_t n;
    int err;   /* errno of the first failed write, 0 if none */
    unsigned char *mem;
    size_t mem_len, mem_cap;
} state_writer;

static void flush_to_mem(state_writer *w) {
    if (w->n > SIZE_MAX - w->mem_len) { w->err = ENOMEM; return; }
    if (w->mem_len + w->n > w->mem_cap) {
        size_t cap = w->mem_cap ? w->mem_cap : 1 << 20;
        while (cap < w->mem_len + w->n) cap = cap > SIZE_MAX / 2 ? w->mem_len + w->n : cap * 2;
        unsigned char *m = realloc(w->mem, cap);
        if (!m) { w->err = ENOMEM; return; }
        w->mem = m;
        w->mem_cap = cap;
    }
    memcpy(w->mem + w->mem_len, w->buf, w->n);
    w->mem_len += w->n;
}

static void flush_writer(state_writer *w) {
    if (w->fd < 0) {
        if (!w->err) flush_to_mem(w);
        w->n = 0;
        return;
    }
    size_t done = 0;
    while (done < w->n && !w->err) {
        ssize_t k = write(w->fd, w->buf + done, w->n - done);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) w->err = k < 0 ? errno : EIO;
        else done += (size_t)k;
    }
    w->n = 0;
}

static void emit(state_writer *w, const void *data, size_t n) {
    const unsigned char *p = data;
    w->crc = okv_kv_state_crc32(w->crc, data, n);
    while (n > 0 && !w->err) {
        size_t room = sizeof w->buf - w->n, k = n < room ? n : room;
        memcpy(w->buf + w->n, p, k);
        w->n += k;
        p += k;
        n -= k;
        if (w->n == sizeof w->buf) flush_writer(w);
    }
}

/* Window a cache applies, whatever its mode (0 = full history). */
static int32_t cache_window(const okv_cache *ca) { return ca->policy.kind == OKV_POLICY_FLAT ? 0 : ca->policy.window; }

/* Header + table + extra + rows: the file size of held (checked). */
static bool file_bytes_of(const okv_kv *kv, const held_rows *h, size_t extra_len, uint64_t *out) {
    uint64_t total = HDR_BYTES + (uint64_t)ENTRY_BYTES * (uint64_t)kv->n_caches + TRAILER_BYTES, x;
    if (__builtin_add_overflow(total, (uint64_t)extra_len, &total)) return false;
    for (int c = 0; c < kv->n_caches; c++) {
        const okv_cache *ca = &kv->caches[c];
        uint64_t row = 4 + (uint64_t)okv_kv_slot_bytes(ca, false) + (uint64_t)okv_kv_slot_bytes(ca, true);
        if (__builtin_mul_overflow(row, (uint64_t)h[c].n, &x) || __builtin_add_overflow(total, x, &total)) return false;
    }
    *out = total;
    return true;
}

static void write_header(state_writer *w, const okv_kv *kv, const okv_kv_state_id *id, int32_t length,
                         const held_rows *h, size_t extra_len, uint64_t file_bytes) {
    unsigned char hdr[HDR_BYTES] = {0};
    memcpy(hdr, STATE_MAGIC, 8);
    put32(hdr + 8, OKV_STATE_VERSION);
    put32(hdr + 12, HDR_BYTES);
    put64(hdr + 16, id->layout);
    put64(hdr + 24, id->program);
    put32(hdr + 32, (uint32_t)kv->caches[0].k_dtype);
    put32(hdr + 36, (uint32_t)kv->n_caches);
    put32(hdr + 40, (uint32_t)length);
    put32(hdr + 44, kv->cells ? 1u : 0u);
    put64(hdr + 48, (uint64_t)extra_len);
    put64(hdr + 56, file_bytes);
    put32(hdr + 64, (uint32_t)kv->seq.max_write);
    put32(hdr + 68, (uint32_t)kv->caches[0].v_dtype);
    emit(w, hdr, sizeof hdr);
    for (int c = 0; c < kv->n_caches; c++) {
        const okv_cache *ca = &kv->caches[c];
        unsigned char e[ENTRY_BYTES] = {0};
        put32(e + 0, (uint32_t)cache_window(ca));
        put32(e + 4, (uint32_t)ca->kv_heads);
        put32(e + 8, (uint32_t)ca->head_dim);
        put32(e + 12, (uint32_t)h[c].oldest);
        put32(e + 16, (uint32_t)h[c].n);
        put64(e + 24, (uint64_t)okv_kv_slot_bytes(ca, false));
        emit(w, e, sizeof e);
    }
}

static void write_rows(state_writer *w, const okv_kv *kv, const held_rows *h) {
    for (int c = 0; c < kv->n_caches; c++) {
        const okv_cache *ca = &kv->caches[c];
        for (int32_t i = 0; i < h[c].n; i++) {
            unsigned char p[4];
            put32(p, (uint32_t)h[c].pos[i]);
            emit(w, p, 4);
        }
        for (int kvi = 0; kvi < 2; kvi++) {
            const unsigned char *pool = kvi ? ca->v : ca->k;
            size_t row = okv_kv_slot_bytes(ca, kvi == 1);
            for (int32_t i = 0; i < h[c].n; i++) emit(w, pool + (size_t)h[c].slot[i] * row, row);
        }
    }
}

/* Checks the saved sequence exists; fills *length (lock held). */
static okv_status check_source(const okv_kv *kv, int seq, int32_t *length, okv_error *err) {
    if (kv->step_T != 0) return okv_fail(err, OKV_ERR_STATE, "sequence save: a step is in flight on this cache key");
    if (!kv->cells) {
        if (seq != -1)
            return okv_fail(err, OKV_ERR_INVALID, "sequence save: this cache key holds one sequence: pass -1, not %d", seq);
        *length = kv->seq.length;
        return OKV_OK;
    }
    const okv_seq_table *t = &kv->cells->seqs;
    if (seq < 0 || seq >= t->max_seqs || !t->alive[seq])
        return okv_fail(err, OKV_ERR_INVALID, "sequence save: sequence %d does not exist", seq);
    *length = t->length[seq];
    return OKV_OK;
}

/* Writes sequence seq's image through w (what names it in errors). */
static okv_status write_image(okv_kv *kv, int seq, const okv_kv_state_id *id, const void *extra, size_t extra_len,
                              state_writer *w, const char *what, okv_error *err) {
    if (extra_len > OKV_STATE_MAX_EXTRA)
        return okv_fail(err, OKV_ERR_INVALID, "%s: extra data of %zu bytes is over the limit %d", what, extra_len,
                        OKV_STATE_MAX_EXTRA);
    held_rows *h = calloc((size_t)kv->n_caches, sizeof *h);
    okv_status st = h ? OKV_OK : okv_fail(err, OKV_ERR_NOMEM, "%s: out of memory", what);
    pthread_mutex_lock(&kv->lock);
    int32_t length = 0;
    uint64_t file_bytes = 0;
    if (!st) st = check_source(kv, seq, &length, err);
    for (int c = 0; c < kv->n_caches && !st; c++) st = collect_held(kv, c, seq, &h[c], err);
    if (!st && !file_bytes_of(kv, h, extra_len, &file_bytes))
        st = okv_fail(err, OKV_ERR_INVALID, "%s: the sequence state does not fit in 64 bits", what);
    if (!st) {
        write_header(w, kv, id, length, h, extra_len, file_bytes);
        if (extra_len) emit(w, extra, extra_len);
        write_rows(w, kv, h);
    }
    pthread_mutex_unlock(&kv->lock);
    if (!st) {
        unsigned char tr[TRAILER_BYTES];
        put32(tr, w->crc);
        memcpy(tr + 4, TRAILER_MAGIC, 4);
        emit(w, tr, sizeof tr);
        flush_writer(w);
        if (w->err) st = okv_fail(err, w->err == ENOMEM ? OKV_ERR_NOMEM : OKV_ERR_IO, "%s: write failed: %s", what,
                                  strerror(w->err));
    }
    if (h) free_held(h, kv->n_caches);
    return st;
}

okv_status okv_kv_state_save(okv_kv *kv, int seq, const okv_kv_state_id *id, const void *extra, size_t extra_len,
                             const char *path, okv_error *err) {
    if (extra_len > OKV_STATE_MAX_EXTRA)
        return okv_fail(err, OKV_ERR_INVALID, "%s: extra data of %zu bytes is over the limit %d", path, extra_len,
                        OKV_STATE_MAX_EXTRA);
    okv_out_file out;
    okv_status st = okv_out_file_create(path, &out, err);
    if (st) return st;
    state_writer *w = calloc(1, sizeof *w);
    if (!w) st = okv_fail(err, OKV_ERR_NOMEM, "%s: out of memory", path);
    else {
        w->fd = out.fd;
        st = write_image(kv, seq, id, extra, extra_len, w, path, err);
    }
    if (!st && fsync(out.fd) != 0) st = okv_fail(err, OKV_ERR_IO, "%s: fsync failed: %s", path, strerror(errno));
    if (!st) st = okv_out_file_commit(&out, err);
    else okv_out_file_abort(&out);
    free(w);
    return st;
}

okv_status okv_kv_state_save_mem(okv_kv *kv, int seq, const okv_kv_state_id *id, const void *extra, size_t extra_len,
                                 void **data, size_t *len, okv_error *err) {
    *data = NULL;
    *len = 0;
    state_writer *w = calloc(1, sizeof *w);
    if (!w) return okv_fail(err, OKV_ERR_NOMEM, "sequence state image: out of memory");
    w->fd = -1;
    okv_status st = write_image(kv, seq, id, extra, extra_len, w, "sequence state image", err);
    if (!st) {
        *data = w->mem;
        *len = w->mem_len;
    } else free(w->mem);
    free(w);
    return st;
}

/* ---- reading ------------------------------------------------------------------ */

/* One cache's entry of a parsed file; pos/k/v point into the image. */
typedef struct state_entry {
    int32_t window, kv_heads, head_dim, oldest, n;
    uint64_t row_bytes, v_row_bytes; /* K's (from the file), V's (from the V dtype) */
    const unsigned char *pos, *k, *v;
} state_entry;

typedef struct state_image {
    int32_t length;
    const unsigned char *extra;
    uint64_t extra_len;
    state_entry *e;   /* [n_caches of the kv set] */
} state_image;

static okv_status bad(okv_error *err, const char *what, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static okv_status bad(okv_error *err, const char *what, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return okv_fail(err, OKV_ERR_FORMAT, "%s: %s", what, msg);
}

/* Magic, version, sizes and CRC: is this an intact state file at all. */
static okv_status check_envelope(const unsigned char *d, size_t len, const char *what, okv_error *err) {
    if (len < HDR_BYTES + TRAILER_BYTES)
        return bad(err, what, "%zu bytes, too short for a sequence state file (header %d + trailer %d)", len,
                   HDR_BYTES, TRAILER_BYTES);
    if (memcmp(d, STATE_MAGIC, 8) != 0) return bad(err, what, "not a sequence state file (magic)");
    if (get32(d + 8) != OKV_STATE_VERSION && get32(d + 8) != 1)
        return okv_fail(err, OKV_ERR_UNSUPPORTED, "%s: version %u, this build reads versions 1 and %d", what,
                        get32(d + 8), OKV_STATE_VERSION);
    if (get32(d + 12) != HDR_BYTES) return bad(err, what, "header_bytes %u, expected %d", get32(d + 12), HDR_BYTES);
    if (get64(d + 56) != (uint64_t)len)
        return bad(err, what, "file_bytes says %llu but the file has %zu (truncated or extended)",
                   (unsigned long long)get64(d + 56), len);
    if (memcmp(d + len - 4, TRAILER_MAGIC, 4) != 0) return bad(err, what, "trailer magic missing (truncated?)");
    uint32_t want = get32(d + len - 8), got = okv_kv_state_crc32(0, d, len - TRAILER_BYTES);
    if (want != got) return bad(err, what, "CRC mismatch (stored %08x, computed %08x): the file is corrupted", want, got);
    return OKV_OK;
}

/* The header's identity and geometry against the running set. */
static okv_status check_identity(const okv_kv *kv, const unsigned char *d, const okv_kv_state_id *id, const char *what,
                                 okv_error *err) {
    if (get64(d + 16) != id->layout)
        return okv_fail(err, OKV_ERR_INVALID, "%s: fingerprint: saved for a different cache layout (layout digest "
                        "%016llx, this program's %016llx)", what, (unsigned long long)get64(d + 16),
                        (unsigned long long)id->layout);
    if (get64(d + 24) != id->program)
        return okv_fail(err, OKV_ERR_INVALID, "%s: fingerprint: saved from a different program (same layout, other "
                        "weights or graph: digest %016llx, this program's %016llx)", what,
                        (unsigned long long)get64(d + 24), (unsigned long long)id->program);
    uint32_t kdt = get32(d + 32), vdt = get32(d + 8) == 1 ? kdt : get32(d + 68);
    const okv_cache *c0 = &kv->caches[0];
    if (kdt != (uint32_t)c0->k_dtype || vdt != (uint32_t)c0->v_dtype)
        return okv_fail(err, OKV_ERR_INVALID, "%s: kv_dtype: saved with K storage %s and V storage %s, this cache key "
                        "stores %s and %s", what, okv_dtype_name((okv_dtype)kdt), okv_dtype_name((okv_dtype)vdt),
                        okv_dtype_name(c0->k_dtype), okv_dtype_name(c0->v_dtype));
    if (get32(d + 36) != (uint32_t)kv->n_caches)
        return okv_fail(err, OKV_ERR_INVALID, "%s: n_caches %u, this cache key has %d", what, get32(d + 36), kv->n_caches);
    if (get32(d + 64) != (uint32_t)kv->seq.max_write)
        return okv_fail(err, OKV_ERR_INVALID, "%s: max_write %u, this cache key's prefill chunk is %d", what,
                        get32(d + 64), kv->seq.max_write);
    for (int i = get32(d + 8) == 1 ? 68 : 72; i < HDR_BYTES; i++)
        if (d[i]) return bad(err, what, "reserved header byte %d is not zero", i);
    return OKV_OK;
}

/* Entry c of the table, checked against cache c of the set. */
static okv_status parse_entry(const okv_kv *kv, int c, const unsigned char *e, int32_t length, state_entry *out,
                              const char *what, okv_error *err) {
    const okv_cache *ca = &kv->caches[c];
    out->window = (int32_t)get32(e);
    out->kv_heads = (int32_t)get32(e + 4);
    out->head_dim = (int32_t)get32(e + 8);
    out->oldest = (int32_t)get32(e + 12);
    out->n = (int32_t)get32(e + 16);
    out->row_bytes = get64(e + 24);
    if (get32(e + 20) != 0) return bad(err, what, "cache %d: reserved field is not zero", c);
    if (out->window != cache_window(ca))
        return okv_fail(err, OKV_ERR_INVALID, "%s: cache %d: window %d in the file, %d in this cache key (different "
                        "layout or window override)", what, c, out->window, cache_window(ca));
    if (out->kv_heads != ca->kv_heads || out->head_dim != ca->head_dim)
        return okv_fail(err, OKV_ERR_INVALID, "%s: cache %d: %d kv heads x %d dims in the file, %d x %d here", what, c,
                        out->kv_heads, out->head_dim, ca->kv_heads, ca->head_dim);
    if (out->row_bytes != (uint64_t)okv_kv_slot_bytes(ca, false))
        return okv_fail(err, OKV_ERR_INVALID, "%s: cache %d: row_bytes %llu in the file, %zu for this cache key's "
                        "storage", what, c, (unsigned long long)out->row_bytes, okv_kv_slot_bytes(ca, false));
    out->v_row_bytes = okv_kv_slot_bytes(ca, true); /* the V dtype was checked against this key's */
    if (out->oldest < 0 || out->oldest > length)
        return bad(err, what, "cache %d: oldest %d outside [0, length %d]", c, out->oldest, length);
    if (out->n < 0 || out->n > length - out->oldest)
        return bad(err, what, "cache %d: n_held %d outside [0, %d] (length %d - oldest %d)", c, out->n,
                   length - out->oldest, length, out->oldest);
    return OKV_OK;
}

/* Splits the image into header, entries, extra and rows; every size checked. */
static okv_status parse_image(const okv_kv *kv, const unsigned char *d, size_t len, state_image *im, const char *what,
                              okv_error *err) {
    im->length = (int32_t)get32(d + 40);
    im->extra_len = get64(d + 48);
    int32_t cap = kv->cells ? kv->cells->seqs.capacity : kv->seq.capacity;
    if (im->length < 0 || im->length > cap)
        return okv_fail(err, OKV_ERR_CAPACITY, "%s: length %d outside [0, capacity %d] of this cache key", what,
                        im->length, cap);
    if (get32(d + 44) > 1) return bad(err, what, "source mode %u unknown", get32(d + 44));
    uint64_t at = HDR_BYTES, end = (uint64_t)len - TRAILER_BYTES, x;
    if (__builtin_mul_overflow((uint64_t)ENTRY_BYTES, (uint64_t)kv->n_caches, &x) || x > end - at)
        return bad(err, what, "cache table runs past the end of the file");
    for (int c = 0; c < kv->n_caches; c++) {
        okv_status st = parse_entry(kv, c, d + at, im->length, &im->e[c], what, err);
        if (st) return st;
        at += ENTRY_BYTES;
    }
    if (im->extra_len > OKV_STATE_MAX_EXTRA || im->extra_len > end - at)
        return bad(err, what, "extra_bytes %llu runs past the end of the file or the limit %d",
                   (unsigned long long)im->extra_len, OKV_STATE_MAX_EXTRA);
    im->extra = d + at;
    at += im->extra_len;
    for (int c = 0; c < kv->n_caches; c++) {
        state_entry *e = &im->e[c];
        uint64_t pb, rb, vb;
        if (__builtin_mul_overflow((uint64_t)e->n, (uint64_t)4, &pb) ||
            __builtin_mul_overflow((uint64_t)e->n, e->row_bytes, &rb) ||
            __builtin_mul_overflow((uint64_t)e->n, e->v_row_bytes, &vb) || pb > end - at || rb > end - at - pb ||
            vb > end - at - pb - rb)
            return bad(err, what, "cache %d: %d rows of %llu + %llu bytes run past the end of the file", c, e->n,
                       (unsigned long long)e->row_bytes, (unsigned long long)e->v_row_bytes);
        e->pos = d + at;
        e->k = d + at + pb;
        e->v = d + at + pb + rb;
        at += pb + rb + vb;
        int32_t prev = e->oldest - 1;
        for (int32_t i = 0; i < e->n; i++) {
            int32_t p = (int32_t)get32(e->pos + 4 * (size_t)i);
            if (p <= prev || p >= im->length)
                return bad(err, what, "cache %d: position[%d] = %d is not increasing within [oldest %d, length %d)", c,
                           i, p, e->oldest, im->length);
            prev = p;
        }
    }
    if (at != end) return bad(err, what, "%llu bytes after the last cache's rows", (unsigned long long)(end - at));
    return OKV_OK;
}

static int32_t entry_pos(const state_entry *e, int32_t i) { return (int32_t)get32(e->pos + 4 * (size_t)i); }

/* Replaces a single-sequence set's sequence by the image (lock held). */
static okv_status apply_single(okv_kv *kv, const state_image *im, const char *what, okv_error *err) {
    int32_t *need = calloc((size_t)kv->n_caches, sizeof *need);
    if (!need) return okv_fail(err, OKV_ERR_NOMEM, "%s: out of memory", what);
    okv_status st = OKV_OK;
    for (int c = 0; c < kv->n_caches && !st; c++) {
        const okv_cache *ca = &kv->caches[c];
        const state_entry *e = &im->e[c];
        bool ring = ca->policy.kind == OKV_POLICY_RING;
        if (!ring && e->oldest != 0)
            st = okv_fail(err, OKV_ERR_INVALID, "%s: cache %d: flat, but the file's oldest position is %d", what, c,
                          e->oldest);
        else if (e->n != im->length - e->oldest || (e->n > 0 && entry_pos(e, 0) != e->oldest))
            st = okv_fail(err, OKV_ERR_INVALID, "%s: cache %d: the file holds %d positions with holes; a single-sequence "
                          "cache needs every position from %d to %d", what, c, e->n, e->oldest, im->length - 1);
        else if (e->n > ca->policy.slots)
            st = okv_fail(err, OKV_ERR_CAPACITY, "%s: cache %d: %d positions, this cache has %d slots", what, c, e->n,
                          ca->policy.slots);
        need[c] = ring ? 0 : im->length;
    }
    if (!st) st = okv_kv_grow_pools(kv, need, err);
    free(need);
    if (st) return st;
    for (int c = 0; c < kv->n_caches; c++) {   /* nothing fails from here */
        okv_cache *ca = &kv->caches[c];
        const state_entry *e = &im->e[c];
        size_t row = (size_t)e->row_bytes, vrow = (size_t)e->v_row_bytes;
        for (int32_t i = 0; i < e->n; i++) {
            int32_t p = e->oldest + i;
            size_t slot = (size_t)(ca->policy.kind == OKV_POLICY_RING ? p % ca->policy.slots : p);
            memcpy((unsigned char *)ca->k + slot * row, e->k + (size_t)i * row, row);
            memcpy((unsigned char *)ca->v + slot * vrow, e->v + (size_t)i * vrow, vrow);
        }
        ca->oldest = ca->policy.kind == OKV_POLICY_RING ? e->oldest : 0;
    }
    kv->seq.length = im->length;
    return OKV_OK;
}

/* Adds the image as a new sequence of a cell set (lock held). */
static okv_status apply_cells(okv_kv *kv, const state_image *im, int *seq_out, const char *what, okv_error *err) {
    okv_kv_cells *kc = kv->cells;
    int ng = kc->n_groups;
    int *rep = malloc((size_t)ng * sizeof *rep);   /* first cache of each group */
    int32_t **cells = calloc((size_t)ng, sizeof *cells);
    int32_t *need = calloc((size_t)kv->n_caches, sizeof *need);
    okv_status st = OKV_OK;
    if (!rep || !cells || !need) {
        st = okv_fail(err, OKV_ERR_NOMEM, "%s: out of memory", what);
        goto done;
    }
    for (int g = 0; g < ng; g++) rep[g] = -1;
    for (int c = 0; c < kv->n_caches && !st; c++) {   /* caches of a group share cells: same positions */
        int g = kc->group_of[c];
        if (rep[g] < 0) { rep[g] = c; continue; }
        const state_entry *a = &im->e[rep[g]], *b = &im->e[c];
        if (a->oldest != b->oldest || a->n != b->n || memcmp(a->pos, b->pos, 4 * (size_t)a->n) != 0)
            st = okv_fail(err, OKV_ERR_INVALID, "%s: caches %d and %d share cells here (window %d) but hold different "
                          "positions in the file", what, rep[g], c, a->window);
    }
    int s = -1;
    for (int i = 0; i < kc->seqs.max_seqs && s < 0; i++)
        if (!kc->seqs.alive[i]) s = i;
    if (!st && s < 0)
        st = okv_fail(err, OKV_ERR_CAPACITY, "%s: all %d sequences of this cache key are in use", what, kc->seqs.max_seqs);
    for (int g = 0; g < ng && !st; g++) {   /* pick free cells, take none yet */
        const okv_cells *cg = &kc->groups[g];
        const state_entry *e = &im->e[rep[g]];
        if (e->n > cg->n_cells - cg->n_used) {
            st = okv_fail(err, OKV_ERR_CAPACITY, "%s: %d positions for the cells of window %d, %d free", what, e->n,
                          cg->window, cg->n_cells - cg->n_used);
            break;
        }
        cells[g] = malloc(((size_t)e->n + 1) * sizeof *cells[g]);
        if (!cells[g]) { st = okv_fail(err, OKV_ERR_NOMEM, "%s: out of memory", what); break; }
        int32_t at = 0;
        for (int32_t i = 0; i < e->n; i++) {
            cells[g][i] = okv_cells_find_free(cg, at);
            at = cells[g][i] + 1;
        }
    }
    for (int c = 0; c < kv->n_caches && !st; c++) {
        int g = kc->group_of[c];
        need[c] = im->e[c].n ? cells[g][im->e[c].n - 1] + 1 : 0;
    }
    if (!st) st = okv_kv_grow_pools(kv, need, err);
    if (st) goto done;
    /* nothing fails from here */
    kc->seqs.alive[s] = true;
    kc->seqs.length[s] = im->length;
    for (int g = 0; g < ng; g++) {
        const state_entry *e = &im->e[rep[g]];
        for (int32_t i = 0; i < e->n; i++) okv_cells_take(&kc->groups[g], cells[g][i], s, entry_pos(e, i));
        kc->groups[g].oldest[s] = e->oldest;
    }
    for (int c = 0; c < kv->n_caches; c++) {
        okv_cache *ca = &kv->caches[c];
        const state_entry *e = &im->e[c];
        const int32_t *cl = cells[kc->group_of[c]];
        size_t row = (size_t)e->row_bytes, vrow = (size_t)e->v_row_bytes;
        for (int32_t i = 0; i < e->n; i++) {
            memcpy((unsigned char *)ca->k + (size_t)cl[i] * row, e->k + (size_t)i * row, row);
            memcpy((unsigned char *)ca->v + (size_t)cl[i] * vrow, e->v + (size_t)i * vrow, vrow);
        }
    }
    *seq_out = s;
done:
    if (cells)
        for (int g = 0; g < ng; g++) free(cells[g]);
    free(cells);
    free(rep);
    free(need);
    return st;
}

okv_status okv_kv_state_apply(okv_kv *kv, const okv_kv_state_id *id, const void *data, size_t len, const char *what,
                              int *seq, void **extra, size_t *extra_len, okv_error *err) {
    if (seq) *seq = -1;
    if (extra) *extra = NULL;
    if (extra_len) *extra_len = 0;
    const unsigned char *d = data;
    okv_status st = check_envelope(d, len, what, err);
    if (!st) st = check_identity(kv, d, id, what, err);
    if (st) return st;
    state_image im = {0};
    im.e = calloc((size_t)kv->n_caches, sizeof *im.e);
    if (!im.e) return okv_fail(err, OKV_ERR_NOMEM, "%s: out of memory", what);
    st = parse_image(kv, d, len, &im, what, err);
    void *copy = NULL;
    if (!st && extra && im.extra_len) {
        copy = malloc((size_t)im.extra_len);
        if (!copy) st = okv_fail(err, OKV_ERR_NOMEM, "%s: out of memory for %llu extra bytes", what,
                                 (unsigned long long)im.extra_len);
        else memcpy(copy, im.extra, (size_t)im.extra_len);
    }
    if (!st) {
        pthread_mutex_lock(&kv->lock);
        int s = -1;
        if (kv->step_T != 0) st = okv_fail(err, OKV_ERR_STATE, "%s: a step is in flight on this cache key", what);
        else st = kv->cells ? apply_cells(kv, &im, &s, what, err) : apply_single(kv, &im, what, err);
        pthread_mutex_unlock(&kv->lock);
        if (!st && seq) *seq = s;
    }
    if (!st && extra) {
        *extra = copy;
        *extra_len = (size_t)im.extra_len;
        copy = NULL;
    }
    free(copy);
    free(im.e);
    return st;
}

/* Largest file a load into kv can be: every position of every cache. */
static uint64_t max_file_bytes(const okv_kv *kv) {
    int32_t cap = kv->cells ? kv->cells->seqs.capacity : kv->seq.capacity;
    uint64_t total = HDR_BYTES + TRAILER_BYTES + (uint64_t)OKV_STATE_MAX_EXTRA, x;
    for (int c = 0; c < kv->n_caches; c++) {
        const okv_cache *ca = &kv->caches[c];
        uint64_t row = 4 + (uint64_t)okv_kv_slot_bytes(ca, false) + (uint64_t)okv_kv_slot_bytes(ca, true) + ENTRY_BYTES;
        if (__builtin_mul_overflow(row, (uint64_t)cap + 1, &x) || __builtin_add_overflow(total, x, &total))
            return UINT64_MAX;
    }
    return total;
}

okv_status okv_kv_state_load(okv_kv *kv, const okv_kv_state_id *id, const char *path, int *seq, void **extra,
                             size_t *extra_len, okv_error *err) {
    int fd;
    uint64_t size;
    okv_status st = okv_open_regular(path, &fd, &size, err);
    if (st) return st;
    uint64_t most = max_file_bytes(kv);
    if (size > most || size >= SIZE_MAX) {
        close(fd);
        return okv_fail(err, OKV_ERR_FORMAT, "%s: %llu bytes, more than a sequence of this cache key can be (%llu)",
                        path, (unsigned long long)size, (unsigned long long)most);
    }
    unsigned char *buf = malloc((size_t)size + 1);
    if (!buf) {
        close(fd);
        return okv_fail(err, OKV_ERR_NOMEM, "%s: out of memory (%llu bytes)", path, (unsigned long long)size);
    }
    size_t got = 0;
    while (got < size && !st) {
        ssize_t k = read(fd, buf + got, (size_t)size - got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) st = okv_fail(err, OKV_ERR_IO, "%s: short read%s%s", path, k < 0 ? ": " : "", k < 0 ? strerror(errno) : "");
        else got += (size_t)k;
    }
    close(fd);
    if (!st) st = okv_kv_state_apply(kv, id, buf, (size_t)size, path, seq, extra, extra_len, err);
    free(buf);
    return st;
}

okv_status okv_kv_state_peek(const okv_kv_state_id *id, const char *path, int32_t *length, void **extra,
                             size_t *extra_len, okv_error *err) {
    *length = 0;
    *extra = NULL;
    *extra_len = 0;
    int fd;
    uint64_t size;
    okv_status st = okv_open_regular(path, &fd, &size, err);
    if (st) return st;
    unsigned char d[HDR_BYTES];
    ssize_t k = pread(fd, d, sizeof d, 0);
    if (k != (ssize_t)sizeof d) {
        close(fd);
        return bad(err, path, "%llu bytes, too short for a sequence state file", (unsigned long long)size);
    }
    if (memcmp(d, STATE_MAGIC, 8) != 0) st = bad(err, path, "not a sequence state file (magic)");
    else if (get32(d + 8) != OKV_STATE_VERSION && get32(d + 8) != 1)
        st = okv_fail(err, OKV_ERR_UNSUPPORTED, "%s: version %u, this build reads versions 1 and %d", path,
                      get32(d + 8), OKV_STATE_VERSION);
    else if (get32(d + 12) != HDR_BYTES) st = bad(err, path, "header_bytes %u, expected %d", get32(d + 12), HDR_BYTES);
    else if (get64(d + 56) != size)
        st = bad(err, path, "file_bytes says %llu but the file has %llu (truncated or extended)",
                 (unsigned long long)get64(d + 56), (unsigned long long)size);
    else if (get64(d + 16) != id->layout || get64(d + 24) != id->program)
        st = okv_fail(err, OKV_ERR_INVALID, "%s: fingerprint: saved from a different program or cache layout", path);
    uint64_t table = (uint64_t)ENTRY_BYTES * get32(d + 36), xlen = get64(d + 48);
    if (!st && (xlen > OKV_STATE_MAX_EXTRA || table > size || xlen > size - table ||
                HDR_BYTES + TRAILER_BYTES > size - table - xlen))
        st = bad(err, path, "extra_bytes %llu runs past the end of the file or the limit %d", (unsigned long long)xlen,
                 OKV_STATE_MAX_EXTRA);
    unsigned char *x = NULL;
    if (!st && xlen) {
        x = malloc((size_t)xlen);
        if (!x) st = okv_fail(err, OKV_ERR_NOMEM, "%s: out of memory", path);
        else if (pread(fd, x, (size_t)xlen, (off_t)(HDR_BYTES + table)) != (ssize_t)xlen)
            st = okv_fail(err, OKV_ERR_IO, "%s: short read of the extra blob", path);
    }
    close(fd);
    if (st) { free(x); return st; }
    *length = (int32_t)get32(d + 40);
    *extra = x;
    *extra_len = (size_t)xlen;
    return OKV_OK;
}
