/* okv_qbmm_avx512.c — the GGUF block dots (okv_qbmm.c's algorithm) on
 * AVX-512 VNNI. Not written yet: every type runs the AVX2 or plain dots. */
#include "okv_kernels_internal.h"

const okv_qb_isa *okv_qb_isa_avx512(void) { return NULL; }
