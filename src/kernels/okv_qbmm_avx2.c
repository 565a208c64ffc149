/* okv_qbmm_avx2.c — the GGUF block dots (okv_qbmm.c's algorithm) on AVX2.
 * Not written yet: every type runs the plain dots. */
#include "okv_kernels_internal.h"

const okv_qb_isa *okv_qb_isa_avx2(void) { return NULL; }
