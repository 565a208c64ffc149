/* okv_server_dir.c — the prefix-cache directory (--prefix-cache-dir): kept
 * prefix entries that outlive the process, on the public sequence-state
 * API (okv_seq_save / okv_seq_load: fingerprinted, CRC-checked, written to
 * a temporary file, fsynced and renamed into place).
 *
 * One file per entry, named "<FNV-1a of the ids>-<count>.okvprefix"; the
 * entry's ids travel in the file's extra blob ("OKVSRVP1", u32 count, i32
 * ids, little-endian), so the file alone says which prompts it serves.
 *
 * When: an entry evicted from memory (LRU, cells or ids needed, the memory
 * byte cap) is written, unless it was loaded from the directory or a stored
 * entry already extends it; at a graceful stop every kept entry is written;
 * with prefix_cache_dir_shared every entry is written as its request ends
 * (so other servers find it at once). A stored entry whose ids are a prefix
 * of a newly written one is removed: loading the longer one and truncating
 * serves the same prompts.
 *
 * Start: every *.okvprefix is loaded once into the (still empty) key and
 * dropped again, so the index holds only files this program can load; a
 * file the loader calls malformed (truncated, flipped bytes, not a state
 * file) is removed, one of another program, layout, KV dtype or window
 * setting, or longer than --ctx-per-seq, is left alone (another server may
 * own it), each with one note. Recency is the file's mtime (set to the
 * last use), and the oldest files go first past the byte cap.
 *
 * Several servers on one directory: files appear only whole (rename), are
 * never rewritten in place, and a reader holds its open descriptor, so an
 * entry removed or replaced (same name, same ids) while it is read loads
 * as it was. Before a lookup the index is brought up to date when the
 * directory changed (its mtime, or any change less than CHANGE_SLACK ago,
 * since the stamp is coarse): new files are indexed from their header and
 * extra blob alone (okv_seq_peek; the full checks run when one is loaded),
 * vanished ones dropped, and a file gone by the time it is loaded is a
 * miss, not an error. The byte cap is enforced over the directory listing
 * (every writer's files) under flock on LOCK_NAME, by every writer after
 * each publish: whoever publishes last leaves the directory within the cap.
 *
 * A prompt whose stored prefix is longer than anything in memory (by at
 * least SRV_MIN_GAIN tokens, and a quarter of the file) loads the file as a
 * kept entry (the scheduler then forks it like any other), so its
 * usage counts those tokens as cached. Only the scheduler thread touches
 * the index once the server runs. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "okv_server.h"

#define EXT ".okvprefix"
#define EXTRA_MAGIC "OKVSRVP1"
#define DEFAULT_CAP ((uint64_t)1 << 30)
#define LOCK_NAME "okvprefix.lock"
#define CHANGE_SLACK_NS 2000000000LL   /* a directory changed this recently may change again within its mtime tick */

void srv_log(okv_server *s, const char *fmt, ...) {
    if (!s->o.log) return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    s->o.log(s->o.log_ctx, line);
}

static bool ends_with(const char *s, const char *tail) {
    size_t n = strlen(s), k = strlen(tail);
    return n >= k && !memcmp(s + n - k, tail, k);
}

static char *path_of(const okv_server *s, const char *name) {
    size_t n = strlen(s->dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", s->dir, name);
    return p;
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* A fresh recency stamp, after every earlier one. */
static int64_t next_stamp(okv_server *s) {
    int64_t t = now_ns();
    if (t <= s->last_stamp) t = s->last_stamp + 1;
    s->last_stamp = t;
    return t;
}

static size_t common_len(const int32_t *a, size_t na, const int32_t *b, size_t nb) {
    size_t k = 0;
    while (k < na && k < nb && a[k] == b[k]) k++;
    return k;
}

/* ---- the extra blob: the entry's ids ---------------------------------------- */

unsigned char *srv_ids_blob(const int32_t *ids, size_t n, size_t *len) {
    *len = 12 + 4 * n;
    unsigned char *b = malloc(*len);
    if (!b) return NULL;
    memcpy(b, EXTRA_MAGIC, 8);
    for (int i = 0; i < 4; i++) b[8 + i] = (unsigned char)((uint32_t)n >> (8 * i));
    for (size_t k = 0; k < n; k++)
        for (int i = 0; i < 4; i++) b[12 + 4 * k + i] = (unsigned char)((uint32_t)ids[k] >> (8 * i));
    return b;
}

static uint32_t get32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

int32_t *srv_blob_ids(const okv_server *s, const unsigned char *b, size_t len, int len_seq, size_t *n) {
    if (!b || len < 12 || memcmp(b, EXTRA_MAGIC, 8)) return NULL;
    uint32_t k = get32(b + 8);
    if (k == 0 || (size_t)k != (len - 12) / 4 || (len - 12) % 4 || (int64_t)k != (int64_t)len_seq) return NULL;
    int32_t *ids = malloc((size_t)k * sizeof *ids);
    if (!ids) return NULL;
    for (uint32_t i = 0; i < k; i++) {
        uint32_t v = get32(b + 12 + 4 * (size_t)i);
        if (v >= (uint32_t)s->info.vocab_size) { free(ids); return NULL; }
        ids[i] = (int32_t)v;
    }
    *n = k;
    return ids;
}

/* ---- the index ---------------------------------------------------------------- */

static void update_disk_metrics(okv_server *s) {
    uint64_t bytes = 0;
    for (int i = 0; i < s->n_disk; i++) bytes += s->disk[i].bytes;
    pthread_mutex_lock(&s->lock);
    s->m.disk_files = s->n_disk;
    s->m.disk_bytes = bytes;
    pthread_mutex_unlock(&s->lock);
}

static void count(okv_server *s, int64_t *counter) {
    pthread_mutex_lock(&s->lock);
    (*counter)++;
    pthread_mutex_unlock(&s->lock);
}

/* Drops entry i from the index (its file is not touched). */
static void forget_entry(okv_server *s, int i) {
    free(s->disk[i].name);
    free(s->disk[i].ids);
    s->disk[i] = s->disk[--s->n_disk];
}

/* Removes entry i from the index and its file from the directory. */
static void remove_entry(okv_server *s, int i, const char *why) {
    srv_disk_entry *d = &s->disk[i];
    char *path = path_of(s, d->name);
    if (path && unlink(path) != 0 && errno != ENOENT) srv_log(s, "prefix-cache-dir: cannot remove %s: %s", path, strerror(errno));
    else if (why) srv_log(s, "prefix-cache-dir: removed %s (%s)", d->name, why);
    free(path);
    forget_entry(s, i);
    count(s, &s->m.disk_removed);
}

static int find_entry(const okv_server *s, const char *name) {
    for (int i = 0; i < s->n_disk; i++)
        if (!strcmp(s->disk[i].name, name)) return i;
    return -1;
}

static bool add_entry(okv_server *s, const char *name, int32_t *ids, size_t n, uint64_t bytes, int64_t stamp) {
    srv_disk_entry *d = srv_grow(s->disk, &s->cap_disk, (size_t)s->n_disk + 1, sizeof *d);
    char *nm = strdup(name);
    if (!d || !nm) {
        if (d) s->disk = d;
        free(nm);
        return false;
    }
    s->disk = d;
    s->disk[s->n_disk++] = (srv_disk_entry){ nm, ids, n, bytes, stamp };
    return true;
}

static uint64_t total_bytes(const okv_server *s) {
    uint64_t t = 0;
    for (int i = 0; i < s->n_disk; i++) t += s->disk[i].bytes;
    return t;
}

static int64_t mtime_ns(const struct stat *st) { return (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec; }

/* One *.okvprefix file of the directory listing, for the byte cap. */
typedef struct listed_file {
    char *name;
    uint64_t bytes;
    int64_t stamp;
} listed_file;

/* Every regular *.okvprefix file in the directory (any writer's): *n of
 * them (heap array, caller frees names and array); false when the
 * directory cannot be read or memory runs out. */
static bool list_files(okv_server *s, listed_file **out, int *n) {
    *out = NULL;
    *n = 0;
    DIR *dp = opendir(s->dir);
    if (!dp) return false;
    listed_file *v = NULL;
    size_t cap = 0;
    bool ok = true;
    for (struct dirent *de; ok && (de = readdir(dp));) {
        if (!ends_with(de->d_name, EXT)) continue;
        struct stat st;
        if (fstatat(dirfd(dp), de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
        listed_file *g = srv_grow(v, &cap, (size_t)*n + 1, sizeof *g);
        char *nm = strdup(de->d_name);
        if (!g || !nm) { free(nm); if (g) v = g; ok = false; break; }
        v = g;
        v[(*n)++] = (listed_file){ nm, (uint64_t)st.st_size, mtime_ns(&st) };
    }
    closedir(dp);
    *out = v;
    return ok;
}

/* Removes the least recently used files (by mtime, every writer's) while
 * the directory holds more than the cap, under an exclusive flock on
 * LOCK_NAME so two servers never both count the same files and overshoot
 * or both remove. Our index follows what went. */
static void enforce_cap(okv_server *s) {
    char *lp = path_of(s, LOCK_NAME);
    int fd = lp ? open(lp, O_RDWR | O_CREAT | O_CLOEXEC, 0644) : -1;
    free(lp);
    if (fd < 0 || flock(fd, LOCK_EX) != 0) {
        srv_log(s, "prefix-cache-dir: cannot lock %s/%s, the byte cap is not applied now: %s", s->dir, LOCK_NAME,
                strerror(errno));
        if (fd >= 0) close(fd);
        update_disk_metrics(s);
        return;
    }
    listed_file *v = NULL;
    int n = 0;
    list_files(s, &v, &n);   /* (a partial listing on failure: we remove less, never more) */
    uint64_t total = 0;
    for (int i = 0; i < n; i++) total += v[i].bytes;
    while (n && total > s->dir_cap) {
        int old = 0;
        for (int i = 1; i < n; i++)
            if (v[i].stamp < v[old].stamp) old = i;
        int k = find_entry(s, v[old].name);
        if (k >= 0) remove_entry(s, k, "over --prefix-cache-dir-bytes, least recently used");
        else {
            char *path = path_of(s, v[old].name);
            if (path && unlink(path) == 0) {
                srv_log(s, "prefix-cache-dir: removed %s (over --prefix-cache-dir-bytes, least recently used)", v[old].name);
                count(s, &s->m.disk_removed);
            }
            free(path);
        }
        total -= v[old].bytes;
        free(v[old].name);
        v[old] = v[--n];
    }
    for (int i = 0; i < n; i++) free(v[i].name);
    free(v);
    flock(fd, LOCK_UN);
    close(fd);
    update_disk_metrics(s);
}

/* Sets the file's mtime to its entry's stamp, so the next start sees the same recency. */
static void stamp_file(okv_server *s, srv_disk_entry *d) {
    char *path = path_of(s, d->name);
    if (!path) return;
    struct timespec ts[2] = { { 0, UTIME_OMIT }, { (time_t)(d->stamp / 1000000000), (long)(d->stamp % 1000000000) } };
    utimensat(AT_FDCWD, path, ts, AT_SYMLINK_NOFOLLOW);
    free(path);
}

/* A temporary file left by a writer that no longer runs ("X.okvprefix.tmpPID"). */
static bool stale_temp(const char *name) {
    const char *t = strstr(name, EXT ".tmp");
    if (!t) return false;
    char *end = NULL;
    long pid = strtol(t + strlen(EXT ".tmp"), &end, 10);
    return end && !*end && pid > 0 && pid != (long)getpid() && kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

/* Loads one file to check it and read its ids, then drops the sequence. */
static void index_file(okv_server *s, const char *name, const struct stat *st) {
    char *path = path_of(s, name);
    if (!path) return;
    okv_error e = {0};
    int seq = -1, len = 0;
    void *extra = NULL;
    size_t extra_len = 0, n = 0;
    okv_status rc = okv_seq_load(s->key, s->program, path, &seq, &extra, &extra_len, &e);
    int32_t *ids = NULL;
    if (!rc) {
        okv_error e2;
        if (okv_seq_len(s->key, seq, &len, &e2)) len = -1;
        ids = srv_blob_ids(s, extra, extra_len, len, &n);
        okv_seq_free(s->key, seq, &e2);
    }
    free(extra);
    if (rc == OKV_ERR_FORMAT) {
        if (unlink(path) == 0) count(s, &s->m.disk_removed);
        srv_log(s, "prefix-cache-dir: skipped and removed a damaged file: %s", e.message);
    } else if (rc) {
        srv_log(s, "prefix-cache-dir: ignoring %s (left in place): %s", name, e.message);
    } else if (!ids) {
        srv_log(s, "prefix-cache-dir: ignoring %s (left in place): a sequence state file, but not a prefix-cache entry "
                   "of this server", name);
    } else {
        int64_t stamp = mtime_ns(st);
        if (stamp > s->last_stamp) s->last_stamp = stamp;
        if (!add_entry(s, name, ids, n, (uint64_t)st->st_size, stamp)) free(ids);
    }
    free(path);
}

/* Indexes a file another server published since we looked, from its header
 * and ids alone; one we cannot use (another program, damaged, too long) is
 * passed over without a note (it is looked at again at the next change). */
static void peek_file(okv_server *s, const listed_file *f) {
    char *path = path_of(s, f->name);
    okv_error e = {0};
    int len = 0;
    void *extra = NULL;
    size_t extra_len = 0, n = 0;
    okv_status rc = path ? okv_seq_peek(s->program, path, &len, &extra, &extra_len, &e) : OKV_ERR_NOMEM;
    free(path);
    int32_t *ids = !rc && len <= s->o.ctx_per_seq ? srv_blob_ids(s, extra, extra_len, len, &n) : NULL;
    free(extra);
    if (ids && !add_entry(s, f->name, ids, n, f->bytes, f->stamp)) free(ids);
    if (f->stamp > s->last_stamp) s->last_stamp = f->stamp;
}

void srv_dir_refresh(okv_server *s) {
    struct stat st;
    if (!s->dir || stat(s->dir, &st) != 0) return;
    int64_t m = mtime_ns(&st);
    if (m == s->dir_seen && now_ns() - m > CHANGE_SLACK_NS) return;
    s->dir_seen = m;
    listed_file *v = NULL;
    int n = 0, known = s->n_disk;
    bool *present = known ? calloc((size_t)known, sizeof *present) : NULL;
    if ((known && !present) || !list_files(s, &v, &n)) n = -1;   /* keep the index as it is */
    for (int i = 0; i < n; i++) {
        int k = find_entry(s, v[i].name);
        if (k >= 0 && k < known) {   /* recency and size as the directory has them now */
            present[k] = true;
            s->disk[k].stamp = v[i].stamp;
            s->disk[k].bytes = v[i].bytes;
        } else if (k < 0) peek_file(s, &v[i]);
    }
    for (int i = known - 1; n >= 0 && i >= 0; i--)
        if (!present[i]) forget_entry(s, i);   /* removed by another server (byte cap, superseded) */
    for (int i = 0; i < n; i++) free(v[i].name);
    free(v);
    free(present);
    update_disk_metrics(s);
}

okv_status srv_dir_open(okv_server *s, okv_error *err) {
    if (!s->o.prefix_cache_dir) return OKV_OK;
    s->dir = strdup(s->o.prefix_cache_dir);
    s->dir_cap = s->o.prefix_cache_dir_bytes ? s->o.prefix_cache_dir_bytes : DEFAULT_CAP;
    if (!s->dir) {
        err->status = OKV_ERR_NOMEM;
        snprintf(err->message, sizeof err->message, "out of memory");
        return OKV_ERR_NOMEM;
    }
    if (mkdir(s->dir, 0755) != 0 && errno != EEXIST) {
        err->status = OKV_ERR_IO;
        snprintf(err->message, sizeof err->message, "--prefix-cache-dir %s: cannot create it: %s", s->dir, strerror(errno));
        return OKV_ERR_IO;
    }
    DIR *d = opendir(s->dir);
    if (!d) {
        err->status = OKV_ERR_IO;
        snprintf(err->message, sizeof err->message, "--prefix-cache-dir %s: %s", s->dir, strerror(errno));
        return OKV_ERR_IO;
    }
    int skipped = 0;
    for (struct dirent *de; (de = readdir(d));) {
        struct stat st;
        char *path = path_of(s, de->d_name);
        bool reg = path && lstat(path, &st) == 0 && S_ISREG(st.st_mode);
        if (reg && stale_temp(de->d_name)) {
            if (unlink(path) == 0) srv_log(s, "prefix-cache-dir: removed %s (left by an interrupted write)", de->d_name);
        } else if (ends_with(de->d_name, EXT)) {
            int before = s->n_disk;
            if (reg) index_file(s, de->d_name, &st);
            else srv_log(s, "prefix-cache-dir: ignoring %s: not a regular file", de->d_name);
            skipped += s->n_disk == before;
        }
        free(path);
    }
    closedir(d);
    enforce_cap(s);
    struct stat dst;
    if (stat(s->dir, &dst) == 0) s->dir_seen = mtime_ns(&dst);
    srv_log(s, "prefix-cache-dir %s: %d entries, %llu bytes (cap %llu)%s", s->dir, s->n_disk,
            (unsigned long long)total_bytes(s), (unsigned long long)s->dir_cap, skipped ? "; some files skipped" : "");
    return OKV_OK;
}

void srv_dir_free(okv_server *s) {
    for (int i = 0; i < s->n_disk; i++) {
        free(s->disk[i].name);
        free(s->disk[i].ids);
    }
    free(s->disk);
    free(s->dir);
    s->disk = NULL;
    s->n_disk = 0;
    s->dir = NULL;
}

/* ---- storing ------------------------------------------------------------------ */

uint64_t srv_fnv_ids_from(uint64_t h, const int32_t *ids, size_t n) {
    for (size_t k = 0; k < n; k++)
        for (int i = 0; i < 4; i++) h = (h ^ (((uint32_t)ids[k] >> (8 * i)) & 255)) * 1099511628211ULL;
    return h;
}

uint64_t srv_fnv_ids(const int32_t *ids, size_t n) { return srv_fnv_ids_from(SRV_FNV_OFFSET, ids, n); }

void srv_dir_store(okv_server *s, srv_slot *sl) {
    if (!s->dir || sl->seq < 0 || sl->n_ids < 2 || sl->on_disk) return;
    for (int i = 0; i < s->n_disk; i++) {   /* already stored, or a stored entry extends it: touch it */
        srv_disk_entry *d = &s->disk[i];
        if (d->n_ids >= sl->n_ids && common_len(d->ids, d->n_ids, sl->ids, sl->n_ids) == sl->n_ids) {
            d->stamp = next_stamp(s);
            stamp_file(s, d);
            return;
        }
    }
    char name[64];
    snprintf(name, sizeof name, "%016llx-%zu" EXT, (unsigned long long)srv_fnv_ids(sl->ids, sl->n_ids), sl->n_ids);
    char *path = path_of(s, name);
    size_t blen = 0;
    unsigned char *blob = srv_ids_blob(sl->ids, sl->n_ids, &blen);
    int32_t *ids = malloc(sl->n_ids * sizeof *ids);
    okv_error e = {0};
    struct stat st;
    okv_status rc = !path || !blob || !ids ? OKV_ERR_NOMEM : okv_seq_save(s->key, s->program, sl->seq, path, blob, blen, &e);
    if (!rc && stat(path, &st) != 0) rc = OKV_ERR_IO;
    free(blob);
    if (rc) {
        srv_log(s, "prefix-cache-dir: cannot write %s: %s", name, rc == OKV_ERR_NOMEM ? "out of memory" : e.message);
        free(ids);
        free(path);
        return;
    }
    memcpy(ids, sl->ids, sl->n_ids * sizeof *ids);
    for (int i = s->n_disk - 1; i >= 0; i--) {   /* stored prefixes of it add nothing */
        srv_disk_entry *d = &s->disk[i];
        if (d->n_ids < sl->n_ids && common_len(d->ids, d->n_ids, ids, sl->n_ids) == d->n_ids) remove_entry(s, i, NULL);
    }
    if (add_entry(s, name, ids, sl->n_ids, (uint64_t)st.st_size, next_stamp(s))) {
        stamp_file(s, &s->disk[s->n_disk - 1]);
        sl->on_disk = true;
        count(s, &s->m.disk_writes);
    } else {
        free(ids);
        unlink(path);
    }
    free(path);
    enforce_cap(s);
}

void srv_dir_flush(okv_server *s) {
    if (!s->dir) return;
    for (;;) {   /* least recently used first, so recency survives in the stamps */
        srv_slot *next = NULL;
        for (int i = 0; i < s->n_slots; i++) {
            srv_slot *sl = &s->slots[i];
            if (sl->seq >= 0 && !sl->req && !sl->on_disk && (!next || sl->last_used < next->last_used)) next = sl;
        }
        if (!next) return;
        srv_dir_store(s, next);
        next->on_disk = true;   /* stored, or given up on */
    }
}

/* ---- loading ------------------------------------------------------------------ */

bool srv_dir_best(okv_server *s, const int32_t *prompt, size_t n_prompt, size_t have, int *index) {
    size_t best = have;
    *index = -1;
    for (int i = 0; s->dir && i < s->n_disk; i++) {
        const srv_disk_entry *d = &s->disk[i];
        size_t k = common_len(d->ids, d->n_ids, prompt, n_prompt);
        if (k >= n_prompt) k = n_prompt - 1;   /* the last prompt token is always stepped (it gives the logits) */
        /* worth a load: SRV_MIN_GAIN more than memory has, and a quarter of the file (a template's common
           head alone does not pull in a long entry) */
        if (k >= best + SRV_MIN_GAIN && k * 4 >= d->n_ids) { best = k; *index = i; }
    }
    return *index >= 0;
}

int srv_dir_cells(const okv_server *s, int i) { return (int)s->disk[i].n_ids; }

bool srv_dir_load(okv_server *s, int i, srv_slot *into) {
    srv_disk_entry *d = &s->disk[i];
    char *path = path_of(s, d->name);
    okv_error e = {0};
    int seq = -1, len = -1;
    void *extra = NULL;
    size_t extra_len = 0, n = 0;
    okv_status rc = path ? okv_seq_load(s->key, s->program, path, &seq, &extra, &extra_len, &e) : OKV_ERR_NOMEM;
    free(path);
    int32_t *ids = NULL;
    if (!rc) {
        okv_error e2;
        if (okv_seq_len(s->key, seq, &len, &e2)) len = -1;
        ids = srv_blob_ids(s, extra, extra_len, len, &n);
    }
    free(extra);
    bool same = ids && n == d->n_ids && !memcmp(ids, d->ids, n * sizeof *ids);
    free(ids);
    int32_t *held = same ? srv_grow(into->ids, &into->cap_ids, n, sizeof *held) : NULL;
    struct stat st;
    char *again = rc ? path_of(s, d->name) : NULL;
    bool gone = again && stat(again, &st) != 0 && errno == ENOENT;
    free(again);
    if (gone) {   /* removed by another server since we indexed it: a miss */
        forget_entry(s, i);
        update_disk_metrics(s);
        return false;
    }
    if (!held) {
        okv_error e2;
        if (seq >= 0) okv_seq_free(s->key, seq, &e2);
        if (rc == OKV_ERR_FORMAT || (!rc && !same)) remove_entry(s, i, rc ? e.message : "its ids changed since the start");
        else srv_log(s, "prefix-cache-dir: cannot load %s: %s", d->name, rc ? e.message : "out of memory");
        update_disk_metrics(s);
        return false;
    }
    into->ids = held;
    memcpy(into->ids, d->ids, n * sizeof *held);
    into->n_ids = n;
    into->seq = seq;
    into->on_disk = true;
    d->stamp = next_stamp(s);
    stamp_file(s, d);
    count(s, &s->m.disk_loads);
    return true;
}
