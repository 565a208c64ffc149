/* fuzz_util.h — what the libFuzzer targets in fuzz/ share.
 *
 * Every target defines LLVMFuzzerTestOneInput and nothing else that libFuzzer
 * needs, so the same file links either into a libFuzzer binary (clang,
 * -DOKV_FUZZ=ON) or into a replay driver (replay_main.c, any compiler) that
 * ctest runs over the committed seeds and regression inputs.
 *
 * Loaders that only take a path (program files, safetensors) get the input
 * through a memfd and its /proc/self/fd/N name: a regular file that lives in
 * memory, so fuzzing never touches the disk and parallel jobs never collide.
 * okv_fuzz_require() turns a broken invariant into a crash the fuzzer keeps. */
#ifndef OKV_FUZZ_UTIL_H
#define OKV_FUZZ_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Writes data into a new memfd and names it in path[64]; returns the fd
 * (close it when done) or -1. */
static inline int okv_fuzz_memfd(const uint8_t *data, size_t size, char path[64]) {
    int fd = memfd_create("okv-fuzz", MFD_CLOEXEC);
    if (fd < 0) return -1;
    size_t done = 0;
    while (done < size) {
        ssize_t w = write(fd, data + done, size - done);
        if (w <= 0) { close(fd); return -1; }
        done += (size_t)w;
    }
    snprintf(path, 64, "/proc/self/fd/%d", fd);
    return fd;
}

/* A NUL-terminated heap copy of the input (free() it). */
static inline char *okv_fuzz_cstr(const uint8_t *data, size_t size) {
    char *s = malloc(size + 1);
    if (!s) abort();
    if (size) memcpy(s, data, size);
    s[size] = 0;
    return s;
}

/* A documented guarantee of the API under test does not hold. */
#define okv_fuzz_require(cond, what)                                              \
    do {                                                                          \
        if (!(cond)) {                                                            \
            fprintf(stderr, "fuzz invariant broken: %s (%s:%d)\n", what, __FILE__, \
                    __LINE__);                                                    \
            abort();                                                              \
        }                                                                         \
    } while (0)

#endif
