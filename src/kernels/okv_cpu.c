/* okv_cpu.c — what the CPU (and the OS) let us use, read once from CPUID.
 *
 * Kernel tables are chosen from these flags. We read CPUID and XGETBV
 * ourselves instead of __builtin_cpu_supports because (a) clang 14 does not
 * know every feature name gcc does ("f16c", "avx512bf16"), and the project
 * must build with both, and (b) a feature is only usable when the OS saves
 * its registers: AVX needs XCR0 bits 1-2, AVX-512 bits 5-7, AMX bits 17-18
 * (and, on Linux, a per-process permission asked with arch_prctl, which the
 * AMX kernels request themselves). */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "okv_kernels.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

static uint64_t read_xcr0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static void detect(okv_cpu_caps *c) {
    unsigned a, b, cx, d;
    memset(c, 0, sizeof *c);
    if (!__get_cpuid(1, &a, &b, &cx, &d)) return;
    bool osxsave = cx & (1u << 27);
    uint64_t xcr0 = osxsave ? read_xcr0() : 0;
    bool os_avx = (xcr0 & 0x6) == 0x6;
    bool os_avx512 = os_avx && (xcr0 & 0xe0) == 0xe0;
    bool os_amx = (xcr0 & 0x60000) == 0x60000;
    c->sse42 = cx & (1u << 20);
    c->fma = os_avx && (cx & (1u << 12));
    c->f16c = os_avx && (cx & (1u << 29));
    c->avx = os_avx && (cx & (1u << 28));
    unsigned max_leaf = __get_cpuid_max(0, NULL);
    if (max_leaf < 7) return;
    __cpuid_count(7, 0, a, b, cx, d);
    c->avx2 = c->avx && (b & (1u << 5));
    c->avx512f = os_avx512 && (b & (1u << 16));
    c->avx512dq = os_avx512 && (b & (1u << 17));
    c->avx512bw = os_avx512 && (b & (1u << 30));
    c->avx512vl = os_avx512 && (b & (1u << 31));
    c->avx512vnni = os_avx512 && (cx & (1u << 11));
    c->avx512fp16 = os_avx512 && (d & (1u << 23));
    c->amx_bf16 = os_amx && (d & (1u << 22));
    c->amx_tile = os_amx && (d & (1u << 24));
    c->amx_int8 = os_amx && (d & (1u << 25));
    unsigned a1, b1, c1, d1;
    __cpuid_count(7, 1, a1, b1, c1, d1);
    c->avxvnni = c->avx2 && (a1 & (1u << 4));
    c->avx512bf16 = os_avx512 && (a1 & (1u << 5));
    unsigned vendor[4] = {0};
    __cpuid(0, vendor[3], vendor[0], vendor[2], vendor[1]); /* "AuthenticAMD" in ebx, edx, ecx */
    c->vdpbf16_full_rate = c->avx512bf16 && !memcmp(vendor, "AuthenticAMD", 12);
}
#else
static void detect(okv_cpu_caps *c) { memset(c, 0, sizeof *c); }
#endif

static okv_cpu_caps caps;
static char features[256];
static pthread_once_t caps_once = PTHREAD_ONCE_INIT;

static void add_feature(const char *name, bool have) {
    if (!have) return;
    if (features[0]) strcat(features, " ");
    strcat(features, name);
}

static void init_caps(void) {
    detect(&caps);
    features[0] = 0;
    add_feature("sse4.2", caps.sse42);
    add_feature("avx", caps.avx);
    add_feature("avx2", caps.avx2);
    add_feature("fma", caps.fma);
    add_feature("f16c", caps.f16c);
    add_feature("avx-vnni", caps.avxvnni);
    add_feature("avx512f", caps.avx512f);
    add_feature("avx512dq", caps.avx512dq);
    add_feature("avx512bw", caps.avx512bw);
    add_feature("avx512vl", caps.avx512vl);
    add_feature("avx512vnni", caps.avx512vnni);
    add_feature("avx512bf16", caps.avx512bf16);
    add_feature("avx512fp16", caps.avx512fp16);
    add_feature("amx-tile", caps.amx_tile);
    add_feature("amx-bf16", caps.amx_bf16);
    add_feature("amx-int8", caps.amx_int8);
    add_feature("(vdpbf16ps at full rate)", caps.vdpbf16_full_rate);
    if (!features[0]) strcpy(features, "none");
}

const okv_cpu_caps *okv_cpu(void) {
    pthread_once(&caps_once, init_caps);
    return &caps;
}

const char *okv_cpu_features(void) {
    pthread_once(&caps_once, init_caps);
    return features;
}
