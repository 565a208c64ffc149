/* replay_main.c — runs a fuzz target's entry function over files, without
 * libFuzzer, so any compiler (gcc too) and any build (normal, ASan) can
 * replay the committed seed corpus and the regression inputs of crashes the
 * fuzzers found. ctest calls it as: fuzz_replay_<target> DIR_OR_FILE...
 * A missing directory is skipped (a target may have no regression yet);
 * replaying nothing at all is a failure (the seed corpus always exists).
 * A crash or sanitizer report fails the test; returning normally is a pass. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz_util.h"

static int replay_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "%s: cannot open\n", path); return -1; }
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) buf = realloc(buf, cap *= 2);
    }
    fclose(f);
    if (!buf) { fprintf(stderr, "%s: out of memory\n", path); return -1; }
    /* An exact-size copy so ASan sees reads past the input's end. */
    uint8_t *exact = malloc(n ? n : 1);
    if (!exact) { free(buf); return -1; }
    memcpy(exact, buf, n);
    free(buf);
    LLVMFuzzerTestOneInput(exact, n);
    free(exact);
    return 0;
}

static int name_cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Replays every regular file of dir in name order; returns how many, -1 on error. */
static int replay_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    char **names = NULL;
    int n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' || !strcmp(e->d_name, "README.md")) continue;
        if (n == cap) names = realloc(names, sizeof *names * (size_t)(cap = cap ? cap * 2 : 64));
        names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, name_cmp);
    int done = 0, bad = 0;
    for (int i = 0; i < n; i++) {
        size_t len = strlen(dir) + strlen(names[i]) + 2;
        char *path = malloc(len);
        snprintf(path, len, "%s/%s", dir, names[i]);
        struct stat st;
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
            if (replay_file(path) == 0) done++;
            else bad = 1;
        }
        free(path);
        free(names[i]);
    }
    free(names);
    return bad ? -1 : done;
}

int main(int argc, char **argv) {
    int total = 0;
    for (int a = 1; a < argc; a++) {
        struct stat st;
        int got;
        if (stat(argv[a], &st) != 0) got = 0;
        else if (S_ISDIR(st.st_mode)) got = replay_dir(argv[a]);
        else got = replay_file(argv[a]) == 0 ? 1 : -1;
        if (got < 0) return 1;
        printf("%s: %d inputs replayed\n", argv[a], got);
        total += got;
    }
    if (total == 0) { fprintf(stderr, "no inputs replayed\n"); return 1; }
    return 0;
}
