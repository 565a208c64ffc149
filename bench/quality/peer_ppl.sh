#!/usr/bin/env bash
# Perplexity of the real GGUFs (SmolLM2-135M Q4_1, Gemma-3 270M Q4_K_M) in
# offkv and in llama.cpp's own perplexity tool, on the same texts and
# windows: --ctx 512, BOS at the start of every window, the second half of
# each window scored (the scheme both tools use). offkv runs the program
# exported with the file's blocks kept (the default for .gguf input) and the
# fp32 program dequantized from it (--dequantize: the oracle-exact path).
# llama.cpp is the peer bench/peer/llamacpp.sh builds (with llama-perplexity).
#   bench/quality/peer_ppl.sh [WORKDIR]        (default build/peer-ppl)
# Env: TEXTS (default "/usr/share/common-licenses/MPL-2.0 /usr/share/common-licenses/GPL-3").
set -euo pipefail
cd "$(dirname "$0")/../.."
work=${1:-build/peer-ppl}
texts=${TEXTS:-/usr/share/common-licenses/MPL-2.0 /usr/share/common-licenses/GPL-3}
models=${OKV_CACHE:-$HOME/.cache/offkv}/models
peer=${OKV_PEER_DIR:-$HOME/.cache/offkv/peer}
if grep -qw avx512_bf16 /proc/cpuinfo; then isa=avx512; else isa=avx2; fi
lcpp=$peer/llama.cpp/build-$isa/bin/llama-perplexity
[ -x "$lcpp" ] || { echo "no $lcpp: build the peer first (bench/peer/llamacpp.sh)" >&2; exit 1; }
cmake --build build -j2 --target offkv >/dev/null
mkdir -p "$work"
ppl_of() { sed -n 's/^perplexity \([0-9.]*\) over.*/\1/p'; }
printf '%-26s %-10s %10s %10s %10s %8s\n' model text "offkv" "offkv fp32" "llama.cpp" "ratio"
for m in SmolLM2-135M-Instruct.Q4_1 gemma-3-270m-q4_k_m; do
  g=$models/$m.gguf
  [ -f "$g" ] || { echo "$g missing: scripts/fetch-models.sh" >&2; exit 1; }
  [ -f "$work/$m.okv" ] || ./build/src/cli/offkv export "$g" -o "$work/$m.okv" 2>/dev/null
  [ -f "$work/$m-fp32.okv" ] || ./build/src/cli/offkv export "$g" -o "$work/$m-fp32.okv" --dtype fp32 --dequantize 2>/dev/null
  for t in $texts; do
    a=$(./build/src/cli/offkv perplexity "$work/$m.okv" --file "$t" --ctx 512 --threads 2 2>/dev/null | ppl_of)
    b=$(./build/src/cli/offkv perplexity "$work/$m-fp32.okv" --file "$t" --ctx 512 --threads 2 2>/dev/null | ppl_of)
    c=$("$lcpp" -m "$g" -f "$t" -c 512 -t 2 2>&1 | sed -n 's/.*Final estimate: PPL = \([0-9.]*\).*/\1/p')
    printf '%-26s %-10s %10s %10s %10s %8s\n' "$m" "$(basename "$t")" "$a" "$b" "${c:--}" \
      "$(awk -v a="$a" -v c="$c" 'BEGIN { if (c > 0) printf "%.4f", a / c; else print "-" }')"
  done
done
