/* okv_gguf_dequant.c — a GGUF tensor's elements as f32: float types
 * converted, block types through the quant layer's exact dequantization
 * (okv_qblock.c, bit-identical to llama.cpp's dequantize_row_*). */
#include <stdio.h>

#include "okv_common.h"
#include "okv_gguf.h"
#include "okv_qblock.h"

bool okv_ggml_can_dequantize(int type) {
    return type == OKV_GGML_F32 || type == OKV_GGML_F16 || type == OKV_GGML_BF16 || okv_qblock_get(type) != NULL;
}

okv_status okv_ggml_dequantize_row(int type, const void *src, float *dst, uint64_t n, okv_error *err) {
    const uint8_t *s = src;
    switch (type) {
    case OKV_GGML_F32: memcpy(dst, s, n * sizeof(float)); return OKV_OK;
    case OKV_GGML_F16: okv_convert(dst, OKV_F32, s, OKV_F16, n); return OKV_OK;
    case OKV_GGML_BF16: okv_convert(dst, OKV_F32, s, OKV_BF16, n); return OKV_OK;
    default: break;
    }
    const char *name = okv_ggml_type_name(type);
    if (!okv_qblock_get(type))
        return okv_fail(err, OKV_ERR_UNSUPPORTED,
                        "ggml type %s cannot be dequantized (supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, "
                        "Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K)",
                        name ? name : "?");
    const uint64_t bs = (uint64_t)okv_ggml_block_size(type);
    if (n % bs) return okv_fail(err, OKV_ERR_INVALID, "%llu elements is not a whole number of %s blocks",
                                (unsigned long long)n, name);
    okv_qblock_dequant(type, s, dst, n);
    return OKV_OK;
}

okv_status okv_gguf_dequantize(const okv_gguf_tensor *t, uint64_t first, uint64_t n, float *dst, okv_error *err) {
    const uint64_t bs = (uint64_t)okv_ggml_block_size(t->type), ts = (uint64_t)okv_ggml_type_size(t->type);
    uint64_t end;
    if (!bs || first % bs || n % bs || __builtin_add_overflow(first, n, &end) || end > t->n_elems)
        return okv_fail(err, OKV_ERR_INVALID, "tensor '%s': elements [%llu, +%llu) are not whole blocks inside it",
                        t->name, (unsigned long long)first, (unsigned long long)n);
    okv_status st = okv_ggml_dequantize_row(t->type, t->data + first / bs * ts, dst, n, err);
    if (st == OKV_ERR_UNSUPPORTED) return okv_fail_prefix(err, "tensor '%s'", t->name);
    return st;
}
