/* Hostile files around export and load: a spec-valid safetensors whose
 * header length is odd (tensor data misaligned), an export that dies while
 * writing (no temporary may remain), input paths that are directories or
 * FIFOs (refused by name, never a hang or a bogus size), and -o targets that
 * are not regular files (refused, left intact). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mkckpt.h"
#include "offkv.h"
#include "okv_common.h"
#include "okv_format.h"
#include "okv_test.h"

static char tmpdir[64];

static char *tpath(const char *name) { return okv_test_path(tmpdir, name); }

static bool same_file(const char *a, const char *b) {
    char *x = NULL, *y = NULL;
    size_t nx = 0, ny = 0;
    okv_error err;
    bool ok = !okv_read_file(a, &x, &nx, &err) && !okv_read_file(b, &y, &ny, &err) && nx == ny && !memcmp(x, y, nx);
    free(x);
    free(y);
    return ok;
}

/* Rewrites a safetensors file with one more space of header padding, so the
 * data section (and every tensor) starts at an odd offset. */
static bool pad_header_odd(const char *path) {
    char *d = NULL;
    size_t n = 0;
    okv_error err;
    if (okv_read_file(path, &d, &n, &err) || n < 8) return false;
    uint64_t h = 0;
    for (int i = 0; i < 8; i++) h |= (uint64_t)(unsigned char)d[i] << (8 * i);
    uint64_t h2 = h + 1;
    FILE *f = fopen(path, "wb");
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)(h2 >> (8 * i));
    bool ok = f && fwrite(len8, 1, 8, f) == 8 && fwrite(d + 8, 1, h, f) == h && fputc(' ', f) != EOF &&
              fwrite(d + 8 + h, 1, n - 8 - h, f) == n - 8 - h;
    if (f && fclose(f)) ok = false;
    free(d);
    return ok && (h2 + 8) % 2 == 1;
}

static okv_status export_to(const char *ckpt, const char *out, okv_dtype dt, okv_error *err) {
    okv_export_options o;
    okv_export_options_default(&o);
    o.dtype = dt;
    o.max_ctx_len = 64;
    return okv_export(ckpt, out, &o, err);
}

/* Found 4: an odd header made load_elem read uint16_t/float at odd
 * addresses (UBSan abort). The export must work and equal the aligned one. */
static void test_misaligned_safetensors(void) {
    const char *ck = tpath("ckpt");
    okv_mkckpt_spec s;
    okv_mkckpt_default_spec(&s, OKV_MK_LLAMA);
    s.seed = 3;
    okv_error err = {0};
    CHECK_OK(okv_mkckpt_write(&s, ck, &err), &err);
    CHECK_OK(export_to(ck, tpath("a32.okv"), OKV_F32, &err), &err);
    CHECK_OK(export_to(ck, tpath("a16.okv"), OKV_F16, &err), &err);
    char st[400];
    snprintf(st, sizeof st, "%s/model.safetensors", ck);
    CHECK(pad_header_odd(st));
    CHECK_OK(export_to(ck, tpath("b32.okv"), OKV_F32, &err), &err);
    CHECK_OK(export_to(ck, tpath("b16.okv"), OKV_F16, &err), &err);
    CHECK(same_file(tpath("a32.okv"), tpath("b32.okv")));
    CHECK(same_file(tpath("a16.okv"), tpath("b16.okv")));
    /* f32 checkpoint, misaligned floats converted down */
    const char *ck2 = tpath("ckpt32");
    s.dtype = OKV_F32;
    CHECK_OK(okv_mkckpt_write(&s, ck2, &err), &err);
    CHECK_OK(export_to(ck2, tpath("c.okv"), OKV_BF16, &err), &err);
    snprintf(st, sizeof st, "%s/model.safetensors", ck2);
    CHECK(pad_header_odd(st));
    CHECK_OK(export_to(ck2, tpath("d.okv"), OKV_BF16, &err), &err);
    CHECK(same_file(tpath("c.okv"), tpath("d.okv")));
}

static int count_entries(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    if (d) closedir(d);
    return n;
}

static int produced;
static okv_status dying_produce(void *ctx, int t, void *dst, okv_error *err) {
    if (++produced == 2) _exit(7); /* the process dies in the middle of the write */
    memset(dst, 0, 64);
    return OKV_OK;
}

/* The export of found 4 aborted mid-write and left OUT.tmpPID behind. */
static void test_no_temp_after_death(void) {
    const char *dir = tpath("dying");
    mkdir(dir, 0755);
    pid_t pid = fork();
    if (pid == 0) {
        okv_tensor t[3];
        memset(t, 0, sizeof t);
        const char *names[3] = {"a", "b", "c"};
        for (int i = 0; i < 3; i++) {
            t[i].name = (char *)names[i];
            t[i].dtype = OKV_T_U8;
            t[i].n_dims = 1;
            t[i].shape[0] = 64;
            t[i].nbytes = 64;
        }
        okv_program_file pf;
        memset(&pf, 0, sizeof pf);
        pf.meta.architecture = "test";
        pf.n_tensors = 3;
        pf.tensors = t;
        pf.produce = dying_produce;
        char out[450];
        snprintf(out, sizeof out, "%s/out.okv", dir);
        okv_error err;
        okv_format_write(out, &pf, &err);
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 7);
    CHECKF(count_entries(dir) == 0, "%d files left in %s", count_entries(dir), dir);
}

/* Runs fn in a child with a time limit: a FIFO used to hang the open/read. */
static okv_status with_alarm(okv_status (*fn)(const char *, char *), const char *arg, char *msg) {
    int p[2];
    if (pipe(p)) return OKV_ERR_IO;
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        alarm(10);
        char m[512] = "";
        okv_status st = fn(arg, m);
        if (write(p[1], m, strlen(m) + 1) < 0) _exit(99);
        _exit((int)st);
    }
    close(p[1]);
    ssize_t k = read(p[0], msg, 511);
    msg[k > 0 ? k : 0] = 0;
    close(p[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (WIFSIGNALED(status)) { snprintf(msg, 512, "killed by signal %d (hang?)", WTERMSIG(status)); return OKV_ERR_STATE; }
    return (okv_status)WEXITSTATUS(status);
}

static okv_status do_export(const char *ckpt, char *msg) {
    okv_error err = {0};
    okv_status st = export_to(ckpt, tpath("never.okv"), OKV_F32, &err);
    snprintf(msg, 512, "%.500s", err.message);
    return st;
}

static okv_status do_open(const char *path, char *msg) {
    okv_error err = {0};
    okv_program *p = NULL;
    okv_status st = okv_program_open(path, &p, &err);
    okv_program_free(p);
    snprintf(msg, 512, "%.500s", err.message);
    return st;
}

static okv_status do_read(const char *path, char *msg) {
    okv_error err = {0};
    char *d = NULL;
    okv_status st = okv_read_file(path, &d, NULL, &err);
    free(d);
    snprintf(msg, 512, "%.500s", err.message);
    return st;
}

static okv_status do_is_gguf(const char *path, char *msg) {
    snprintf(msg, 512, "answered");
    return okv_is_gguf_file(path) ? OKV_ERR_INVALID : OKV_OK;
}

/* Found: a directory as config.json said "out of memory (9223372036854775807
 * bytes)", as a program "mmap failed: No such device"; a FIFO hung. */
static void test_not_regular_inputs(void) {
    char msg[512];
    const char *ck = tpath("dirckpt");
    mkdir(ck, 0755);
    char cfg[450];
    snprintf(cfg, sizeof cfg, "%s/config.json", ck);
    mkdir(cfg, 0755);
    okv_status st = with_alarm(do_export, ck, msg);
    CHECKF(st != OKV_OK && st != OKV_ERR_STATE && strstr(msg, "config.json") && strstr(msg, "is a directory"), "%s", msg);
    rmdir(cfg);
    CHECK(mkfifo(cfg, 0644) == 0);
    st = with_alarm(do_export, ck, msg);
    CHECKF(st != OKV_OK && st != OKV_ERR_STATE && strstr(msg, "FIFO"), "%s", msg);
    st = with_alarm(do_read, cfg, msg);
    CHECKF(st != OKV_OK && st != OKV_ERR_STATE && strstr(msg, "FIFO"), "%s", msg);
    st = with_alarm(do_open, ck, msg);
    CHECKF(st != OKV_OK && st != OKV_ERR_STATE && strstr(msg, "is a directory"), "%s", msg);
    st = with_alarm(do_open, cfg, msg);
    CHECKF(st != OKV_OK && st != OKV_ERR_STATE && strstr(msg, "FIFO"), "%s", msg);
    st = with_alarm(do_is_gguf, cfg, msg); /* inspect/export probe the GGUF magic first */
    CHECKF(st == OKV_OK, "%s", msg);
}

/* -o that is not a regular file: refused before any work, left intact. */
static void test_output_targets(void) {
    const char *ck = tpath("ckpt");
    okv_error err = {0};
    const char *fifo = tpath("out.fifo");
    CHECK(mkfifo(fifo, 0644) == 0);
    okv_status st = export_to(ck, fifo, OKV_F32, &err);
    struct stat sb;
    CHECKF(st != OKV_OK && strstr(err.message, "FIFO") && strstr(err.message, "refusing"), "%s", err.message);
    CHECK(lstat(fifo, &sb) == 0 && S_ISFIFO(sb.st_mode));
    const char *dir = tpath("out.dir");
    mkdir(dir, 0755);
    st = export_to(ck, dir, OKV_F32, &err);
    CHECKF(st != OKV_OK && strstr(err.message, "directory"), "%s", err.message);
    CHECK(lstat(dir, &sb) == 0 && S_ISDIR(sb.st_mode));
    /* a symlink is refused too (not followed, not replaced) */
    const char *target = tpath("target.okv"), *link = tpath("link.okv");
    FILE *f = fopen(target, "wb");
    fputs("keep", f);
    fclose(f);
    CHECK(symlink(target, link) == 0);
    st = export_to(ck, link, OKV_F32, &err);
    CHECKF(st != OKV_OK && strstr(err.message, "symbolic link"), "%s", err.message);
    CHECK(lstat(link, &sb) == 0 && S_ISLNK(sb.st_mode));
    CHECK(stat(target, &sb) == 0 && sb.st_size == 4);
    /* an existing regular file is still replaced */
    CHECK_OK(export_to(ck, target, OKV_F32, &err), &err);
    CHECK(stat(target, &sb) == 0 && sb.st_size > 4);
    CHECKF(count_entries(tmpdir) > 0, "%s", tmpdir);
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    okv_test_mkdtemp(tmpdir, sizeof tmpdir, "hostile");
    test_misaligned_safetensors();
    test_no_temp_after_death();
    test_not_regular_inputs();
    test_output_targets();
    okv_test_rm_tree(tmpdir);
    return okv_test_finish();
}
