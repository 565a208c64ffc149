/* peer_mkl.c — oneMKL's bf16 GEMM (cblas_gemm_bf16bf16f32, AMX tiles where
 * the CPU has them) as a second vendor peer for bench_kernels' "onednn"
 * section, built only with -DOKV_MKL_DIR=... (bench/peer/onednn.sh). W is
 * read where it lies, as offkv's [N][K] rows (the "T" operand). */
#include "peer_onednn.h"

#include <mkl.h>

void peer_mkl_gemm(float *y, const uint16_t *x, const uint16_t *W, int T, int K, int N, int n_threads) {
    mkl_set_num_threads(n_threads);
    cblas_gemm_bf16bf16f32(CblasRowMajor, CblasNoTrans, CblasTrans, T, N, K, 1.0f, (const MKL_BF16 *)x, K,
                           (const MKL_BF16 *)W, K, 0.0f, y, N);
}
