#!/usr/bin/env bash
# Llama-3.2-1B-shaped benchmark: writes a random-weight checkpoint with the
# real geometry (hidden 2048, 16 layers, 32 heads, 8 KV heads, head_dim 64,
# intermediate 8192, vocab 128256, tied), exports it at fp32 and bf16, and
# reports export time, prefill tok/s (512-token prompt), decode tok/s
# (128 tokens), decode bytes per token and the share of measured memory
# bandwidth, with 2 threads.
#   bench/llama1b.sh [WORKDIR]   (default build/bench-llama1b; needs ~10 GB)
set -euo pipefail
cd "$(dirname "$0")/.."
work=${1:-build/bench-llama1b}
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" --target offkv okv-mkckpt bench_model >/dev/null
mkdir -p "$work"
if [ ! -f "$work/ckpt/model.safetensors" ]; then
  ./build/tools/mkckpt/okv-mkckpt --out "$work/ckpt" --arch llama --hidden 2048 --layers 16 --heads 32 \
    --kv-heads 8 --head-dim 64 --intermediate 8192 --vocab 128256 --tied --rope-scaling llama3 \
    --rope-factor 32 --rope-original-max 8192 --rope-theta 500000 --bos 128000 --eos 128009 --dtype bf16
fi
for dt in fp32 bf16; do
  start=$(date +%s.%N)
  ./build/src/cli/offkv export "$work/ckpt" -o "$work/llama1b-$dt.okv" --dtype "$dt" --max-ctx-len 4096 2>/dev/null
  end=$(date +%s.%N)
  echo "== $dt: export $(awk -v a="$start" -v b="$end" 'BEGIN{printf "%.1f", b-a}') s, $(du -h "$work/llama1b-$dt.okv" | cut -f1)"
  ./build/bench/runtime/bench_model "$work/llama1b-$dt.okv" --prompt 512 --decode 128 --threads 2 | grep -v '^program'
done
