#!/usr/bin/env bash
# Llama-3.2-1B-shaped benchmark: writes a random-weight checkpoint with the
# real geometry (hidden 2048, 16 layers, 32 heads, 8 KV heads, head_dim 64,
# intermediate 8192, vocab 128256, tied), exports it at fp32, bf16, q8
# (--qlinear 8w --qembedding 8w) and q4 (--qlinear 4w --qembedding 8w: the
# tied table is also the LM head, see README), and reports export time,
# program size, prefill tok/s (512-token prompt), decode tok/s (128 tokens),
# decode bytes per token and the share of measured memory bandwidth, with 2
# threads.
#   bench/llama1b.sh [WORKDIR] [VARIANT...]   (default build/bench-llama1b, all variants; needs ~12 GB)
set -euo pipefail
cd "$(dirname "$0")/.."
work=${1:-build/bench-llama1b}
shift || true
variants=${*:-fp32 bf16 q8 q4}
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" --target offkv okv-mkckpt bench_model >/dev/null
mkdir -p "$work"
if [ ! -f "$work/ckpt/model.safetensors" ]; then
  ./build/tools/mkckpt/okv-mkckpt --out "$work/ckpt" --arch llama --hidden 2048 --layers 16 --heads 32 \
    --kv-heads 8 --head-dim 64 --intermediate 8192 --vocab 128256 --tied --rope-scaling llama3 \
    --rope-factor 32 --rope-original-max 8192 --rope-theta 500000 --bos 128000 --eos 128009 --dtype bf16
fi
flags_of() {
  case $1 in
    fp32) echo "--dtype fp32" ;;
    bf16) echo "--dtype bf16" ;;
    q8) echo "--dtype bf16 --qlinear 8w --qembedding 8w" ;;
    q4) echo "--dtype bf16 --qlinear 4w --qembedding 8w" ;;
    q4e4) echo "--dtype bf16 --qlinear 4w --qembedding 4w" ;;
    *) echo "unknown variant $1" >&2; exit 2 ;;
  esac
}
[ "$variants" = checkpoint ] && exit 0   # bench/peer/llamacpp.sh only wants the checkpoint
for dt in $variants; do
  start=$(date +%s.%N)
  # shellcheck disable=SC2046
  ./build/src/cli/offkv export "$work/ckpt" -o "$work/llama1b-$dt.okv" $(flags_of "$dt") --max-ctx-len 4096 2>/dev/null
  end=$(date +%s.%N)
  echo "== $dt ($(flags_of "$dt")): export $(awk -v a="$start" -v b="$end" 'BEGIN{printf "%.1f", b-a}') s, $(du -h "$work/llama1b-$dt.okv" | cut -f1)"
  ./build/bench/runtime/bench_model "$work/llama1b-$dt.okv" --prompt 512 --decode 128 --threads 2 | grep -v '^program'
done
