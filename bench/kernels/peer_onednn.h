/* peer_onednn.h — oneDNN's bf16 matmul (and oneMKL's GEMM) as side-by-side
 * peers for bench_kernels' "onednn" section (built only with -DOKV_ONEDNN_DIR=...,
 * see bench/peer/onednn.sh). Not part of offkv: a measuring stick. */
#ifndef PEER_ONEDNN_H
#define PEER_ONEDNN_H
#include <stdint.h>

typedef struct peer_gemm peer_gemm;

/* A primitive for y[T][N] (f32) = x[T][K] (bf16) . W[N][K]^T (bf16). With
 * packed = 0 W is offkv's own row-major layout (oneDNN's "ba" for a K x N
 * weight), so both sides read the same bytes; with packed = 1 oneDNN picks
 * its preferred weight layout and W must come from peer_gemm_pack (a
 * load-time repack, as a runtime built on oneDNN would do). NULL on
 * failure; *impl names the kernel oneDNN chose (e.g. "brg:avx512_core_amx"). */
peer_gemm *peer_gemm_create(int T, int K, int N, int packed, const char **impl);
/* A malloc'ed copy of W [N][K] bf16 in the primitive's weight layout. */
void *peer_gemm_pack(peer_gemm *g, const uint16_t *W);
/* One call on n_threads OpenMP threads (1: the calling thread). */
int peer_gemm_run(peer_gemm *g, float *y, const uint16_t *x, const uint16_t *W, int n_threads);
void peer_gemm_free(peer_gemm *g);

/* oneMKL's y = x . W^T (peer_mkl.c), when built with OKV_MKL_DIR. */
void peer_mkl_gemm(float *y, const uint16_t *x, const uint16_t *W, int T, int K, int N, int n_threads);

#endif
