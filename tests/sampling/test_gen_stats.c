/* Tests the end-of-run statistics line: exact text for typical runs,
 * left-out parts (no time, no stop reason), snprintf-style truncation. */
#include "offkv_sample.h"
#include "okv_test.h"

static void test_full_line(void) {
    okv_gen_stats st = {12, 0.1427, 32, 1.265, OKV_STOP_EOS};
    char buf[256];
    size_t n = okv_gen_stats_format(&st, buf, sizeof buf);
    /* 12 / 0.1427 = 84.09 tok/s, 32 / 1.265 = 25.30 tok/s */
    const char *want = "prompt 12 tok in 0.143 s (84.1 tok/s) | generated 32 tok in 1.265 s (25.3 tok/s) | stop: eos";
    CHECKF(strcmp(buf, want) == 0, "got \"%s\"", buf);
    CHECK(n == strlen(want));
}

static void test_parts_left_out(void) {
    okv_gen_stats st = {5, 0.0, 0, 0.0, OKV_STOP_NONE};
    char buf[128];
    okv_gen_stats_format(&st, buf, sizeof buf);
    CHECKF(strcmp(buf, "prompt 5 tok | generated 0 tok") == 0, "got \"%s\"", buf);
    st = (okv_gen_stats){1000, 2.0, 7, 0.5, OKV_STOP_MAX_TOKENS};
    okv_gen_stats_format(&st, buf, sizeof buf);
    CHECKF(strcmp(buf, "prompt 1000 tok in 2.000 s (500.0 tok/s) | generated 7 tok in 0.500 s (14.0 tok/s) | stop: max tokens") == 0,
           "got \"%s\"", buf);
    st.stop = OKV_STOP_STRING;
    okv_gen_stats_format(&st, buf, sizeof buf);
    CHECK(strstr(buf, "| stop: stop string") != NULL);
    st.stop = OKV_STOP_CONTEXT;
    okv_gen_stats_format(&st, buf, sizeof buf);
    CHECK(strstr(buf, "| stop: context full") != NULL);
}

static void test_truncation(void) {
    okv_gen_stats st = {12, 0.1427, 32, 1.265, OKV_STOP_EOS};
    char full[256], small[20];
    size_t n = okv_gen_stats_format(&st, full, sizeof full);
    memset(small, 'X', sizeof small);
    size_t m = okv_gen_stats_format(&st, small, sizeof small);
    CHECK(m == n);                                   /* the length the full line needs */
    CHECK(small[sizeof small - 1] == '\0');
    CHECK(strncmp(small, full, sizeof small - 1) == 0);
    CHECK(okv_gen_stats_format(&st, NULL, 0) == n);  /* size query */
    char one[1] = {'X'};
    okv_gen_stats_format(&st, one, 1);
    CHECK(one[0] == '\0');
}

static void test_reason_names(void) {
    CHECK(strcmp(okv_stop_reason_name(OKV_STOP_EOS), "eos") == 0);
    CHECK(strcmp(okv_stop_reason_name(OKV_STOP_NONE), "none") == 0);
    CHECK(strcmp(okv_stop_reason_name((okv_stop_reason)99), "unknown") == 0);
}

int main(void) {
    test_full_line();
    test_parts_left_out();
    test_truncation();
    test_reason_names();
    return okv_test_finish();
}
