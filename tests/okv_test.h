/* okv_test.h — the tiny assertion harness every test program uses.
 * CHECK records a failure and continues; the program prints
 * "N passed, N failed" and exits non-zero if anything failed. */
#ifndef OKV_TEST_H
#define OKV_TEST_H
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int okv_t_pass, okv_t_fail;

#define CHECK(cond) do { if (cond) okv_t_pass++; else { okv_t_fail++; \
    fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); } } while (0)
#define CHECKF(cond, ...) do { if (cond) okv_t_pass++; else { okv_t_fail++; \
    fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
    fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)
#define CHECK_OK(expr, errp) do { okv_status s_ = (expr); if (s_ == OKV_OK) okv_t_pass++; else { \
    okv_t_fail++; fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #expr, (errp)->message); } } while (0)
#define CHECK_NEAR(a, b, tol) CHECKF(fabs((double)(a) - (double)(b)) <= (tol), "%g vs %g (tol %g)", (double)(a), (double)(b), (double)(tol))

/* Removes a directory tree the test made (no symlink is followed). */
static inline void okv_test_rm_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        size_t n = strlen(dir) + strlen(e->d_name) + 2;
        char *p = malloc(n);
        if (!p) break;
        snprintf(p, n, "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode)) okv_test_rm_tree(p);
        else unlink(p);
        free(p);
    }
    closedir(d);
    rmdir(dir);
}

/* Makes a fresh directory /tmp/okv-<tag>-XXXXXX, its path in buf[n]; a test
 * cannot go on without it, so failure exits. */
static inline void okv_test_mkdtemp(char *buf, size_t n, const char *tag) {
    snprintf(buf, n, "/tmp/okv-%s-XXXXXX", tag);
    if (!mkdtemp(buf)) {
        perror("mkdtemp");
        exit(1);
    }
}

/* dir/name in one of 8 rotating buffers (a call may take several at once). */
static inline char *okv_test_path(const char *dir, const char *name) {
    static char buf[8][512];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, sizeof buf[0], "%s/%s", dir, name);
    return p;
}

/* Writes n bytes of data to path (created or truncated); a test cannot go on
 * without its input, so failure exits. */
static inline void okv_test_write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
}

/* Writes a NUL-terminated text to path (okv_test_write_file). */
static inline void okv_test_write_text(const char *path, const char *text) {
    okv_test_write_file(path, text, strlen(text));
}

/* Copies file from to file to (a fixture into a test's folder); failure exits. */
static inline void okv_test_copy_file(const char *from, const char *to) {
    FILE *in = fopen(from, "rb");
    if (!in) { fprintf(stderr, "cannot read %s\n", from); exit(1); }
    FILE *out = fopen(to, "wb");
    char chunk[1 << 14];
    size_t n;
    int ok = out != NULL;
    while (ok && (n = fread(chunk, 1, sizeof chunk, in)) > 0) ok = fwrite(chunk, 1, n, out) == n;
    ok = ok && !ferror(in);
    fclose(in);
    if (out && fclose(out) != 0) ok = 0;
    if (!ok) { fprintf(stderr, "cannot copy %s to %s\n", from, to); exit(1); }
}

static inline int okv_test_finish(void) {
    printf("%d passed, %d failed\n", okv_t_pass, okv_t_fail);
    return okv_t_fail ? 1 : 0;
}
#endif
