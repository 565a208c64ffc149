#!/usr/bin/env bash
# Side-by-side GEMM benchmark against oneDNN and oneMKL, Intel's own
# libraries for these instructions: oneDNN's bf16 matmul (brgemm on AMX
# tiles where the CPU has them), MKL's cblas_gemm_bf16bf16f32, and
# okv_matmul_amx on the Llama-3.2-1B prefill shapes, call by call in one
# process (bench_kernels onednn). It answers what share of the tdpbf16ps
# probe the vendors' GEMMs reach on this machine, next to ours.
#
# oneDNN comes from PyPI (onednn-cpu-gomp + onednn-devel-cpu-gomp: oneDNN
# 3.2 built with GNU OpenMP and no GPU runtime), unpacked once into
# ~/.cache/offkv/peer/onednn; bench_kernels is rebuilt against it in
# build-onednn/.
#   bench/peer/onednn.sh [ROUNDS_FLAG]     (--quick for 3 rounds)
set -euo pipefail
cd "$(dirname "$0")/../.."
root=${OKV_PEER_DIR:-$HOME/.cache/offkv/peer}
# unpack_wheels DEST PKG==VER... : the wheels' data/lib and data/include
# merged into DEST/lib and DEST/include.
unpack_wheels() {
  local dest=$1 tmp d
  shift
  tmp=$(mktemp -d)
  pip download --no-deps -q -d "$tmp" "$@" >&2
  for w in "$tmp"/*.whl; do python3 -m zipfile -e "$w" "$tmp/x"; done
  mkdir -p "$dest/lib" "$dest/include"
  for d in "$tmp"/x/*.data/data; do
    [ -d "$d/lib" ] && cp -r "$d/lib/." "$dest/lib/"
    [ -d "$d/include" ] && cp -r "$d/include/." "$dest/include/"
  done
  rm -rf "$tmp"
}
peer=$root/onednn
[ -f "$peer/lib/libdnnl.so" ] || unpack_wheels "$peer" onednn-cpu-gomp==2023.2.0 onednn-devel-cpu-gomp==2023.2.0
# oneMKL beside it (PyPI's mkl + mkl-include), for cblas_gemm_bf16bf16f32.
mkl=$root/mkl
if [ ! -f "$mkl/lib/libmkl_rt.so" ]; then
  unpack_wheels "$mkl" mkl==2026.2.1 mkl-include==2026.2.1
  ln -sf libmkl_rt.so.3 "$mkl/lib/libmkl_rt.so"
fi
cmake -S . -B build-onednn -DCMAKE_BUILD_TYPE=RelWithDebInfo -DOKV_ONEDNN_DIR="$peer" -DOKV_MKL_DIR="$mkl" >/dev/null
cmake --build build-onednn --target bench_kernels -j2 >/dev/null
# passive: OpenMP's idle threads sleep instead of spinning on the 2 cores
# our pool's threads also run on; MKL on GNU OpenMP too, so both peers
# share one thread team.
OMP_WAIT_POLICY=passive MKL_THREADING_LAYER=GNU build-onednn/bench/kernels/bench_kernels onednn "$@"
