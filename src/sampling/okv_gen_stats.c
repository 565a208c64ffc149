/* okv_gen_stats.c — the one-line end-of-run report (token counts, times,
 * rates and why generation stopped), kept in the library so every front end
 * (the CLI, a server) prints the same thing. Pure formatting: the caller measures the times. */
#include <stdio.h>

#include "offkv_sample.h"

const char *okv_stop_reason_name(okv_stop_reason r) {
    switch (r) {
    case OKV_STOP_NONE: return "none";
    case OKV_STOP_EOS: return "eos";
    case OKV_STOP_STRING: return "stop string";
    case OKV_STOP_MAX_TOKENS: return "max tokens";
    case OKV_STOP_CONTEXT: return "context full";
    }
    return "unknown";
}

/* Appends "<what> N tok" and, when seconds > 0, " in S s (R tok/s)". */
static size_t format_part(char *buf, size_t cap, size_t at, const char *what,
                          int64_t tokens, double seconds) {
    char *dst = at < cap ? buf + at : NULL;
    size_t room = at < cap ? cap - at : 0;
    int n;
    if (seconds > 0)
        n = snprintf(dst, room, "%s %lld tok in %.3f s (%.1f tok/s)", what, (long long)tokens,
                     seconds, (double)tokens / seconds);
    else
        n = snprintf(dst, room, "%s %lld tok", what, (long long)tokens);
    return n > 0 ? (size_t)n : 0;
}

static size_t append(char *buf, size_t cap, size_t at, const char *text) {
    int n = snprintf(at < cap ? buf + at : NULL, at < cap ? cap - at : 0, "%s", text);
    return n > 0 ? (size_t)n : 0;
}

size_t okv_gen_stats_format(const okv_gen_stats *st, char *buf, size_t cap) {
    if (cap) buf[0] = '\0';
    size_t at = 0;
    at += format_part(buf, cap, at, "prompt", st->prompt_tokens, st->prefill_seconds);
    at += append(buf, cap, at, " | ");
    at += format_part(buf, cap, at, "generated", st->generated_tokens, st->decode_seconds);
    if (st->stop != OKV_STOP_NONE) {
        at += append(buf, cap, at, " | stop: ");
        at += append(buf, cap, at, okv_stop_reason_name(st->stop));
    }
    return at;
}
