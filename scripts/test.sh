#!/usr/bin/env bash
# Sets up the machine, builds offkv and runs the whole test suite (ctest).
# OKV_SANITIZE=1 builds with ASan/UBSan into build-asan instead.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
dir=build; extra=()
if [ "${OKV_SANITIZE:-0}" = 1 ]; then dir=build-asan; extra=(-DOKV_SANITIZE=ON); fi
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "${extra[@]}" >/dev/null
cmake --build "$dir" -j"$(nproc)"
cd "$dir" && ctest --output-on-failure -j"$(nproc)"
