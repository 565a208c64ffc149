/* Tests the streaming stop-string matcher: stops split across pieces (down
 * to single bytes inside UTF-8 characters), overlapping stop prefixes, a
 * stop at the very start, several stops, flush, nothing released after a
 * stop, never a release ending mid-character; and a randomised comparison
 * against a naive reference computed on the whole text. */
#include <stdbool.h>

#include "offkv_sample.h"
#include "okv_test.h"

typedef struct stream {
    okv_stopper *st;
    char out[4096];     /* everything released so far */
    size_t out_len;
    bool stopped;
    bool cut_mid_char;  /* some release ended inside a UTF-8 character */
} stream;

static okv_stopper *make(const char *const *stops, int n) {
    okv_stopper *st = NULL;
    okv_error err;
    CHECK_OK(okv_stopper_create(stops, n, &st, &err), &err);
    return st;
}

/* True if text[0..len) ends inside a multi-byte UTF-8 character. */
static bool ends_mid_char(const char *text, size_t len) {
    size_t i = len, back = 0;
    while (i > 0 && back < 4 && ((unsigned char)text[i - 1] & 0xc0) == 0x80) { i--; back++; }
    if (i == 0) return back > 0;
    unsigned char lead = (unsigned char)text[i - 1];
    size_t need = lead >= 0xf0 ? 3 : lead >= 0xe0 ? 2 : lead >= 0xc0 ? 1 : 0;
    return back != need;
}

static void take(stream *s, const char *emit, size_t n) {
    CHECK(strlen(emit) == n);   /* NUL-terminated, no embedded NUL here */
    if (n && ends_mid_char(emit, n)) s->cut_mid_char = true;
    memcpy(s->out + s->out_len, emit, n);
    s->out_len += n;
    s->out[s->out_len] = '\0';
}

/* Pushes len bytes of text in pieces of `step` bytes (0: all at once). */
static void push_text(stream *s, const char *text, size_t step) {
    size_t len = strlen(text);
    if (step == 0) step = len ? len : 1;
    for (size_t at = 0; at < len; at += step) {
        size_t n = len - at < step ? len - at : step;
        const char *emit;
        size_t emit_len;
        okv_error err;
        CHECK_OK(okv_stopper_push(s->st, text + at, n, &emit, &emit_len, &s->stopped, &err), &err);
        take(s, emit, emit_len);
    }
}

static void flush(stream *s) {
    const char *emit;
    size_t n;
    okv_stopper_flush(s->st, &emit, &n);
    take(s, emit, n);
}

/* Streams text in steps of `step` bytes, then flushes; returns the output. */
static stream run(const char *const *stops, int n_stops, const char *text, size_t step) {
    stream s;
    memset(&s, 0, sizeof s);
    s.st = make(stops, n_stops);
    push_text(&s, text, step);
    flush(&s);
    return s;
}

static void expect(const char *const *stops, int n, const char *text, const char *want, bool want_stop,
                   int want_which) {
    for (size_t step = 0; step <= 4; step++) {
        stream s = run(stops, n, text, step);
        CHECKF(strcmp(s.out, want) == 0, "text \"%s\" step %zu: got \"%s\", want \"%s\"", text, step, s.out, want);
        CHECKF(s.stopped == want_stop, "text \"%s\" step %zu: stopped %d", text, step, s.stopped);
        CHECK(okv_stopper_which(s.st) == want_which);
        CHECK(!s.cut_mid_char);
        okv_stopper_free(s.st);
    }
}

static void test_basic_cases(void) {
    const char *eos[] = {"</s>"};
    expect(eos, 1, "Hello</s>world", "Hello", true, 0);
    expect(eos, 1, "Hello world", "Hello world", false, -1);
    expect(eos, 1, "a</b> c", "a</b> c", false, -1);
    expect(eos, 1, "</s>after", "", true, 0);                 /* stop at the very start */
    expect(eos, 1, "<<</s", "<<</s", false, -1);               /* flush releases held text */
    expect(NULL, 0, "no stops at all", "no stops at all", false, -1);

    /* overlapping prefixes: "ab" completes first */
    const char *ab[] = {"ab", "abc"};
    expect(ab, 2, "xabd", "x", true, 0);
    const char *abc_bd[] = {"abc", "bd"};
    expect(abc_bd, 2, "xabd", "xa", true, 1);
    const char *aab[] = {"aab"};
    expect(aab, 1, "aaab!", "a", true, 0);                     /* restart inside a held prefix */

    /* several stops: the earliest occurrence wins */
    const char *chat[] = {"\n\nUser:", "<|im_end|>"};
    expect(chat, 2, "Hi there<|im_end|>\n\nUser: more", "Hi there", true, 1);
    expect(chat, 2, "Hi\n\nUser:<|im_end|>", "Hi", true, 0);
    expect(chat, 2, "Hi\n\nUse it", "Hi\n\nUse it", false, -1);

    /* multi-byte characters around and inside the stop */
    const char *jp[] = {"。"};
    expect(jp, 1, "你好。再见", "你好", true, 0);
    const char *e_bang[] = {"é!"};
    expect(e_bang, 1, "café au lait", "café au lait", false, -1);
    expect(e_bang, 1, "café!", "caf", true, 0);
    const char *emoji[] = {"🙂 bye"};
    expect(emoji, 1, "ok 🙂🙂 bye now", "ok 🙂", true, 0);
}

/* What is released while the stream runs, piece by piece. */
static void test_held_back_then_released(void) {
    const char *eos[] = {"</s>"};
    stream s;
    memset(&s, 0, sizeof s);
    s.st = make(eos, 1);
    push_text(&s, "Hello<", 0);
    CHECK(strcmp(s.out, "Hello") == 0);          /* "<" held */
    push_text(&s, "/", 0);
    CHECK(strcmp(s.out, "Hello") == 0);
    push_text(&s, "b", 0);
    CHECK(strcmp(s.out, "Hello</b") == 0);       /* not a stop after all */
    push_text(&s, "</s", 0);
    CHECK(strcmp(s.out, "Hello</b") == 0 && !s.stopped);
    push_text(&s, ">tail", 0);
    CHECK(strcmp(s.out, "Hello</b") == 0 && s.stopped);
    /* after the stop nothing more comes out, not even on flush */
    push_text(&s, "more text", 0);
    CHECK(strcmp(s.out, "Hello</b") == 0 && s.stopped);
    flush(&s);
    CHECK(strcmp(s.out, "Hello</b") == 0);
    /* reset: a fresh stream with the same stops */
    okv_stopper_reset(s.st);
    memset(s.out, 0, sizeof s.out);
    s.out_len = 0;
    push_text(&s, "x</s>", 1);
    CHECK(strcmp(s.out, "x") == 0 && s.stopped);
    okv_stopper_free(s.st);
}

/* Pieces that split UTF-8 characters (a tokenizer emitting raw bytes): the
 * incomplete tail is held until it completes; flush releases it anyway. */
static void test_split_characters(void) {
    stream s;
    memset(&s, 0, sizeof s);
    s.st = make(NULL, 0);
    push_text(&s, "\xe4\xbd", 0);       /* first two bytes of 你 */
    CHECK(s.out_len == 0);
    push_text(&s, "\xa0", 0);
    CHECK(strcmp(s.out, "你") == 0);
    push_text(&s, "a\xf0\x9f", 0);      /* "a" then half of an emoji */
    CHECK(strcmp(s.out, "你a") == 0);
    push_text(&s, "\x99\x82", 0);
    CHECK(strcmp(s.out, "你a🙂") == 0);
    push_text(&s, "\xc3", 0);           /* a dangling lead byte at the end */
    CHECK(strcmp(s.out, "你a🙂") == 0);
    flush(&s);
    CHECK(strcmp(s.out, "你a🙂\xc3") == 0);
    okv_stopper_free(s.st);

    /* a (malformed) stop starting with a continuation byte must not make
     * the release cut é in half */
    const char *odd[] = {"\xa9x"};
    memset(&s, 0, sizeof s);
    s.st = make(odd, 1);
    push_text(&s, "caf\xc3\xa9", 0);
    CHECK(strcmp(s.out, "caf") == 0);
    push_text(&s, "y", 0);
    CHECK(strcmp(s.out, "café" "y") == 0);
    CHECK(!s.cut_mid_char);
    okv_stopper_free(s.st);
}

static void test_bad_stops(void) {
    okv_stopper *st = (okv_stopper *)&st;
    okv_error err;
    const char *empty[] = {"ok", ""};
    CHECK(okv_stopper_create(empty, 2, &st, &err) == OKV_ERR_INVALID);
    CHECK(st == NULL);
    CHECK(strstr(err.message, "1") != NULL);
    const char *null_stop[] = {NULL};
    CHECK(okv_stopper_create(null_stop, 1, &st, &err) == OKV_ERR_INVALID);
    CHECK(okv_stopper_create(NULL, -1, &st, &err) == OKV_ERR_INVALID);
}

/* ---------------------------------------------------------- randomised */

static uint32_t lcg(uint32_t *x) {
    *x = *x * 1664525u + 1013904223u;
    return *x >> 8;
}

/* Reference for the final output: the text before the earliest stop. */
static size_t ref_final_len(const char *const *stops, int n, const char *text, size_t len, bool *stopped) {
    *stopped = false;
    for (size_t at = 0; at < len; at++) {
        for (int i = 0; i < n; i++) {
            size_t sl = strlen(stops[i]);
            if (at + sl <= len && memcmp(text + at, stops[i], sl) == 0) {
                *stopped = true;
                return at;
            }
        }
    }
    return len;
}

/* Reference for what may be released after seeing text[0..len) with no stop
 * in it: everything before the earliest position whose suffix is a proper
 * prefix of a stop, then pulled back to a character boundary. */
static size_t ref_released_len(const char *const *stops, int n, const char *text, size_t len) {
    size_t cut = len;
    for (size_t at = 0; at < len && cut == len; at++) {
        for (int i = 0; i < n; i++) {
            size_t sl = strlen(stops[i]);
            if (len - at < sl && memcmp(text + at, stops[i], len - at) == 0) {
                cut = at;
                break;
            }
        }
    }
    while (cut > 0 && ends_mid_char(text, cut)) cut--;
    return cut;
}

static void test_random_against_reference(void) {
    static const char *alphabet[] = {"a", "b", "<", "/", "s", ">", "é", "你", "🙂", " ", "\n"};
    static const char *stops[] = {"</s>", "a你", "\n\n", "bb🙂b", "éé"};
    uint32_t seed = 12345;
    int mismatches = 0, stopped_runs = 0;
    for (int round = 0; round < 2000; round++) {
        int n_stops = 1 + (int)(lcg(&seed) % 5);
        char text[512];
        size_t len = 0;
        int n_sym = (int)(lcg(&seed) % 40);
        for (int k = 0; k < n_sym; k++) {
            const char *sym = alphabet[lcg(&seed) % 11];
            memcpy(text + len, sym, strlen(sym));
            len += strlen(sym);
        }
        text[len] = '\0';

        stream s;
        memset(&s, 0, sizeof s);
        s.st = make(stops, n_stops);
        size_t at = 0;
        while (at < len) {
            size_t n = 1 + lcg(&seed) % 6;   /* pieces may split characters */
            if (n > len - at) n = len - at;
            const char *emit;
            size_t emit_len;
            okv_error err;
            CHECK_OK(okv_stopper_push(s.st, text + at, n, &emit, &emit_len, &s.stopped, &err), &err);
            take(&s, emit, emit_len);
            at += n;
            bool ref_stop;
            size_t ref_len = ref_final_len(stops, n_stops, text, at, &ref_stop);
            size_t want = ref_stop ? ref_len : ref_released_len(stops, n_stops, text, at);
            if (s.stopped != ref_stop || s.out_len != want || memcmp(s.out, text, want) != 0) mismatches++;
        }
        flush(&s);
        bool ref_stop;
        size_t want = ref_final_len(stops, n_stops, text, len, &ref_stop);
        if (s.out_len != want || memcmp(s.out, text, want) != 0) mismatches++;
        if (s.cut_mid_char) mismatches++;
        stopped_runs += ref_stop;
        okv_stopper_free(s.st);
    }
    CHECKF(mismatches == 0, "%d mismatches against the reference", mismatches);
    CHECK(stopped_runs > 200 && stopped_runs < 1800);   /* both kinds of run occur */
}

/* A generation's first pieces may be empty (NULL, 0) before any text was
 * held: nothing is emitted and nothing is read from NULL. */
static void test_empty_pieces(void) {
    const char *stops[1] = {"END"};
    okv_stopper *st;
    okv_error err = {0};
    CHECK_OK(okv_stopper_create(stops, 1, &st, &err), &err);
    const char *emit = NULL;
    size_t len = 99;
    bool stopped = true;
    CHECK_OK(okv_stopper_push(st, NULL, 0, &emit, &len, &stopped, &err), &err);
    CHECK(len == 0 && !stopped);
    CHECK_OK(okv_stopper_push(st, "ab", 2, &emit, &len, &stopped, &err), &err);
    CHECK(len == 2 && !memcmp(emit, "ab", 2));
    okv_stopper_flush(st, &emit, &len);
    CHECK(len == 0);
    okv_stopper_free(st);
}

int main(void) {
    test_empty_pieces();
    test_basic_cases();
    test_held_back_then_released();
    test_split_characters();
    test_bad_stops();
    test_random_against_reference();
    return okv_test_finish();
}
