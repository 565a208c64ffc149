#!/usr/bin/env bash
# Installs every Debian package the build, the tests and the benchmarks need.
# Safe to run repeatedly; used by README's two commands and by .ci/run.
# --fuzz also installs clang 14 and its libFuzzer/sanitizer runtimes
# (scripts/fuzz.sh).
set -euo pipefail
# nginx (+ its njs module), redis-server and libhiredis-dev: deploy/ and the replicas test
# (tests/server/test_server_replicas.py);
# hiredis is optional for the build (without it --prefix-cache-redis is compiled out).
pkgs=(build-essential cmake pkg-config libcjson-dev libutf8proc-dev libpcre2-dev libmicrohttpd-dev valgrind python3 python3-pip unzip
      nginx libnginx-mod-http-js redis-server libhiredis-dev)
if [ "${1:-}" = --fuzz ]; then pkgs+=(clang-14 libclang-rt-14-dev); fi
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
# Test tooling: llama.cpp's gguf-py (PyPI `gguf`, with numpy) is the independent
# reference our GGUF dequantization is compared with (tests/gguf).
if ! python3 -c 'import gguf, numpy' >/dev/null 2>&1; then
  python3 -m pip install -q gguf numpy >/dev/null 2>&1 ||
    python3 -m pip install -q --break-system-packages gguf numpy >/dev/null 2>&1 ||
    echo "setup: could not pip install gguf numpy; the GGUF dequantization reference tests will be skipped" >&2
fi
# The server tests talk to `offkv serve` with the openai client from PyPI too
# (tests/server; without it they run plain HTTP only and say so).
if ! python3 -c 'import openai' >/dev/null 2>&1; then
  python3 -m pip install -q openai >/dev/null 2>&1 ||
    python3 -m pip install -q --break-system-packages openai >/dev/null 2>&1 ||
    echo "setup: could not pip install openai; the server tests will use plain HTTP only" >&2
fi
# Structured output is checked with jsonschema from PyPI (tests/server/test_server_schema.py;
# without it the test's own validator runs and says so).
if ! python3 -c 'import jsonschema' >/dev/null 2>&1; then
  python3 -m pip install -q jsonschema >/dev/null 2>&1 ||
    python3 -m pip install -q --break-system-packages jsonschema >/dev/null 2>&1 ||
    echo "setup: could not pip install jsonschema; the structured-output test uses its own validator" >&2
fi
# The tool-call test renders the templates with Python Jinja2 (as HF's
# apply_chat_template does) to compare prompts (tests/server/test_server_tools.py;
# without it that comparison is skipped and says so).
if ! python3 -c 'import jinja2' >/dev/null 2>&1; then
  python3 -m pip install -q jinja2 >/dev/null 2>&1 ||
    python3 -m pip install -q --break-system-packages jinja2 >/dev/null 2>&1 ||
    echo "setup: could not pip install jinja2; the tool-call test skips its template comparison" >&2
fi
