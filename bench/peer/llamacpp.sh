#!/usr/bin/env bash
# Side-by-side benchmark against llama.cpp, the established CPU runtime, on
# the same weights: the Llama-3.2-1B-shaped random checkpoint of
# bench/llama1b.sh is written as a GGUF (bench/peer/hf_to_gguf.py, same
# bf16 weights, llama.cpp's q/k row order), quantized by llama.cpp's own
# llama-quantize to Q8_0 and Q4_0, and timed with llama-bench (pp512, tg128,
# 2 threads) alternately with offkv's bench_model on the programs exported
# from the same checkpoint (bf16, --qlinear 8w, --qlinear 4w). Each pair runs
# back to back, ROUNDS times, so drift of the VM hits both alike; medians.
#
# llama.cpp's source comes from PyPI (the llama-cpp-python sdist vendors it)
# and is built once into ~/.cache/offkv/peer for this CPU's ISA (below): a
# GGML_NATIVE build also compiles its AMX code, whose Q8_0/Q4_0
# kernels died with SIGILL on this VM's Sapphire Rapids (first run,
# 2026-12-01), so that row would have no peer.
#   bench/peer/llamacpp.sh [WORKDIR] [ROUNDS]     (default build/bench-llama1b, 3)
# Env: VARIANTS (default "bf16 q8 q4 gguf-Q8_0 gguf-Q4_0 gguf-Q4_K_M").
set -euo pipefail
cd "$(dirname "$0")/../.."
work=${1:-build/bench-llama1b}
rounds=${2:-3}
peer=${OKV_PEER_DIR:-$HOME/.cache/offkv/peer}
version=0.3.36

# The peer is built for the ISA this CPU reports: its AVX-512 (BF16, VNNI)
# paths where avx512_bf16 exists, else AVX2/FMA/F16C only (an AVX-512 build
# dies with SIGILL on an AVX2-only CPU such as the AMD Zen 3 seen 2026-12-02).
if grep -qw avx512_bf16 /proc/cpuinfo; then
  isa=avx512
  isa_flags="-DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON"
else
  isa=avx2
  isa_flags=""
fi
build_llamacpp() {
  [ -x "$peer/llama.cpp/build-$isa/bin/llama-bench" ] && return
  mkdir -p "$peer"
  if [ ! -d "$peer/llama.cpp" ]; then
    pip download --no-deps --no-binary :all: -d "$peer" "llama-cpp-python==$version" >&2
    tar xzf "$peer/llama_cpp_python-$version.tar.gz" -C "$peer"
    mv "$peer/llama_cpp_python-$version/vendor/llama.cpp" "$peer/llama.cpp"
    rm -rf "$peer/llama_cpp_python-$version"
  fi
  # shellcheck disable=SC2086
  cmake -S "$peer/llama.cpp" -B "$peer/llama.cpp/build-$isa" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF \
    -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON $isa_flags \
    -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_OPENSSL=OFF -DBUILD_SHARED_LIBS=OFF >&2
  cmake --build "$peer/llama.cpp/build-$isa" -j"$(nproc)" --target llama-bench llama-quantize llama-perplexity >&2
}

build_llamacpp
bin=$peer/llama.cpp/build-$isa/bin
export LD_LIBRARY_PATH=$bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}   # a shared-library build from before
bench/llama1b.sh "$work" checkpoint >/dev/null   # builds offkv and writes the checkpoint only
[ -f "$work/ckpt/model.safetensors" ] || { echo "no checkpoint in $work/ckpt" >&2; exit 1; }

# llama.cpp side: the same weights as GGUF, then its own quantizations.
[ -f "$work/llama1b-bf16.gguf" ] || python3 bench/peer/hf_to_gguf.py "$work/ckpt" "$work/llama1b-bf16.gguf"
for q in Q8_0 Q4_0 Q4_K_M; do
  [ -f "$work/llama1b-$q.gguf" ] || "$bin/llama-quantize" "$work/llama1b-bf16.gguf" "$work/llama1b-$q.gguf" "$q" >/dev/null 2>&1
done
# offkv side: the programs bench/llama1b.sh exports.
declare -A okv_flags=([bf16]="--dtype bf16" [q8]="--dtype bf16 --qlinear 8w --qembedding 8w"
                      [q4]="--dtype bf16 --qlinear 4w --qembedding 8w")
declare -A gguf_of=([bf16]=bf16 [q8]=Q8_0 [q4]=Q4_0 [gguf-Q8_0]=Q8_0 [gguf-Q4_0]=Q4_0 [gguf-Q4_K_M]=Q4_K_M)
variants=${VARIANTS:-bf16 q8 q4 gguf-Q8_0 gguf-Q4_0 gguf-Q4_K_M}
for v in $variants; do
  [ -f "$work/llama1b-$v.okv" ] && continue
  if [ "${v#gguf-}" != "$v" ]; then # the GGUF llama.cpp runs, its blocks kept
    ./build/src/cli/offkv export "$work/llama1b-${v#gguf-}.gguf" -o "$work/llama1b-$v.okv" --max-ctx-len 4096 2>/dev/null
  else
    # shellcheck disable=SC2086
    ./build/src/cli/offkv export "$work/ckpt" -o "$work/llama1b-$v.okv" ${okv_flags[$v]} --max-ctx-len 4096 2>/dev/null
  fi
done

median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
echo "llama.cpp $version ($isa build) vs offkv, 2 threads, $rounds rounds, medians"
printf '%-11s %-28s %10s %10s | %-10s %10s %10s | %7s %7s\n' "" "offkv path" "pp512" "tg128" "llama.cpp" "pp512" "tg128" "pp x" "tg x"
for v in $variants; do
  : >"$work/peer-$v.okv.txt"; : >"$work/peer-$v.lcpp.txt"
  for _ in $(seq "$rounds"); do
    ./build/bench/runtime/bench_model "$work/llama1b-$v.okv" --prompt 512 --decode 128 --threads 2 >>"$work/peer-$v.okv.txt"
    { "$bin/llama-bench" -m "$work/llama1b-${gguf_of[$v]}.gguf" -p 512 -n 128 -t 2 -r 1 -o csv 2>/dev/null ||
      echo "llama-bench failed on ${gguf_of[$v]} (exit $?)" >&2; } | tail -n +2 >>"$work/peer-$v.lcpp.txt"
  done
  path=$(sed -n 's/^kernels: \(.*\), [0-9]* threads$/\1/p' "$work/peer-$v.okv.txt" | head -1)
  opp=$(sed -n 's/^prefill: .* = \([0-9.]*\) tok\/s$/\1/p' "$work/peer-$v.okv.txt" | median)
  otg=$(sed -n 's/^decode: .* = \([0-9.]*\) tok\/s.*/\1/p' "$work/peer-$v.okv.txt" | median)
  # llama-bench csv: n_prompt, n_gen and avg_ts are named in its header line
  hdr=$("$bin/llama-bench" -m "$work/llama1b-${gguf_of[$v]}.gguf" -p 0 -n 1 -t 2 -r 1 -o csv 2>/dev/null | head -1)
  col() { tr ',' '\n' <<<"$hdr" | tr -d '"' | grep -nx "$1" | cut -d: -f1; }
  cp=$(col n_prompt); cg=$(col n_gen); ct=$(col avg_ts)
  lpp=$(tr -d '"' <"$work/peer-$v.lcpp.txt" | awk -F, -v p="$cp" -v t="$ct" '$p == 512 {print $t}' | median)
  ltg=$(tr -d '"' <"$work/peer-$v.lcpp.txt" | awk -F, -v g="$cg" -v t="$ct" '$g == 128 {print $t}' | median)
  ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else print "-" }'; }
  printf '%-11s %-28s %10.1f %10.1f | %-10s %10.1f %10.1f | %7s %7s\n' "$v" "$path" "$opp" "$otg" \
    "${gguf_of[$v]}" "${lpp:-0}" "${ltg:-0}" "$(ratio "$opp" "${lpp:-0}")" "$(ratio "$otg" "${ltg:-0}")"
done
