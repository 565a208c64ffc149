#!/usr/bin/env bash
# The main job on a bundled default: set up, build, generate a tiny
# random-weight Llama checkpoint with our own generator (no download),
# export it to a program, inspect it and generate greedily from it.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" --target offkv okv-mkckpt
demo=build/demo
./build/tools/mkckpt/okv-mkckpt --arch llama --out "$demo/tiny-llama" --seed 7 >/dev/null
./build/src/cli/offkv export "$demo/tiny-llama" -o "$demo/tiny-llama.okv" --dtype bf16 --max-ctx-len 512
./build/src/cli/offkv inspect "$demo/tiny-llama.okv" | head -12
echo "generate (greedy, token ids):"
./build/src/cli/offkv generate "$demo/tiny-llama.okv" --tokens "1 17 42 99" --max-new-tokens 16 --kv-storage-dtype bf16
