/* Tests the dtype conversions and JSON accessors of the common layer. */
#include "okv_common.h"
#include "okv_test.h"

static void test_f16_roundtrip(void) {
    /* every finite f16 value must survive f16 -> f32 -> f16 exactly */
    int bad = 0;
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7c00) == 0x7c00) continue;
        if (okv_f32_to_f16(okv_f16_to_f32((uint16_t)h)) != h) bad++;
    }
    CHECKF(bad == 0, "%d f16 values did not round-trip", bad);
    CHECK(okv_f16_to_f32(0x3c00) == 1.0f);
    CHECK(okv_f16_to_f32(0xc000) == -2.0f);
    CHECK(okv_f32_to_f16(65520.0f) == 0x7c00);       /* rounds to inf */
    CHECK(okv_f32_to_f16(1.0f + 1.0f / 2048) == 0x3c00); /* tie to even */
    CHECK(okv_f32_to_f16(5.9604644775390625e-8f) == 1);   /* smallest subnormal */
}

static void test_bf16(void) {
    CHECK(okv_bf16_to_f32(0x3f80) == 1.0f);
    CHECK(okv_f32_to_bf16(1.0f) == 0x3f80);
    CHECK(okv_f32_to_bf16(1.00390625f) == 0x3f80);   /* exact tie rounds to even */
    CHECK(okv_f32_to_bf16(1.01171875f) == 0x3f82);   /* tie rounds up to even */
    int bad = 0;
    for (uint32_t b = 0; b < 0x10000; b++) {
        if ((b & 0x7f80) == 0x7f80) continue;
        if (okv_f32_to_bf16(okv_bf16_to_f32((uint16_t)b)) != b) bad++;
    }
    CHECK(bad == 0);
}

static void test_json(void) {
    okv_error err;
    cJSON *j = NULL;
    const char *text = "{\"a\": 3, \"b\": 2.5, \"c\": true, \"s\": \"x\", \"n\": null}";
    CHECK_OK(okv_json_parse(text, strlen(text), &j, "t", &err), &err);
    int64_t i;
    double d;
    bool b;
    CHECK_OK(okv_json_req_int(j, "a", &i, "t", &err), &err);
    CHECK(i == 3);
    CHECK(okv_json_req_int(j, "b", &i, "t", &err) == OKV_ERR_FORMAT);
    CHECK(strstr(err.message, "'b'") != NULL);
    CHECK(okv_json_req_int(j, "zz", &i, "t", &err) == OKV_ERR_FORMAT);
    CHECK_OK(okv_json_opt_int(j, "n", &i, 7, "t", &err), &err);
    CHECK(i == 7);
    CHECK_OK(okv_json_opt_double(j, "b", &d, 0, "t", &err), &err);
    CHECK(d == 2.5);
    CHECK_OK(okv_json_opt_bool(j, "c", &b, false, "t", &err), &err);
    CHECK(b);
    CHECK(okv_json_opt_bool(j, "a", &b, false, "t", &err) == OKV_ERR_FORMAT);
    CHECK(strcmp(okv_json_str(j, "s"), "x") == 0);
    cJSON_Delete(j);
    CHECK(okv_json_parse("{\"a\":", 5, &j, "trunc", &err) == OKV_ERR_FORMAT);
}

int main(void) {
    test_f16_roundtrip();
    test_bf16();
    test_json();
    return okv_test_finish();
}
