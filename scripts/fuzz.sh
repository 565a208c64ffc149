#!/usr/bin/env bash
# scripts/fuzz.sh [SECONDS] — builds the libFuzzer targets (clang, ASan +
# UBSan, build-fuzz/) and runs every target in fuzz/ for SECONDS each
# (default 60), one after another. Fails on the first crash, sanitizer
# report, leak, timeout (one input > OKV_FUZZ_TIMEOUT s, default 10) or OOM
# (RSS > 2 GiB); the input that did it is left in build-fuzz/artifacts/<t>/.
# Each target starts from its committed seeds (fuzz/corpus/<t>) and its
# regression inputs (fuzz/regress/<t>); what it learns stays in
# build-fuzz/work/<t> for the next run. Single allocations over 1 GiB fail
# (malloc returns NULL) instead of being reported, so "refuse cleanly when
# memory runs out" is what is tested. OKV_FUZZ_TARGETS="a b" picks targets.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
./scripts/setup.sh --fuzz
cc=clang-14; command -v "$cc" >/dev/null || cc=clang
CC=$cc cmake -S . -B build-fuzz -DOKV_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-fuzz -j"$(nproc)" --target fuzz_all

targets=${OKV_FUZZ_TARGETS:-$(ls build-fuzz/fuzz | sed -n 's/^fuzz_\([a-z0-9]*\)$/\1/p' | grep -v '^all$' | sort)}
declare -A max_len=([seqstate]=16384 [program]=65536 [tokenizer]=65536 [chat]=32768 [config]=8192 [safetensors]=16384 [gguf]=65536)
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1:max_allocation_size_mb=1024}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
failed=()
for t in $targets; do
  work=build-fuzz/work/$t art=build-fuzz/artifacts/$t
  mkdir -p "$work" "$art"
  dict=()
  [ -f "fuzz/dict/$t.dict" ] && dict=(-dict="fuzz/dict/$t.dict")
  seeds=(fuzz/corpus/"$t")
  [ -d "fuzz/regress/$t" ] && seeds+=(fuzz/regress/"$t")
  echo "== fuzz_$t for ${secs}s"
  if ! build-fuzz/fuzz/fuzz_"$t" "${dict[@]}" -max_total_time="$secs" -timeout="${OKV_FUZZ_TIMEOUT:-10}" \
        -rss_limit_mb=2048 -malloc_limit_mb=2048 -max_len="${max_len[$t]:-65536}" -error_exitcode=77 \
        -timeout_exitcode=78 -print_final_stats=1 -artifact_prefix="$art/" \
        "$work" "${seeds[@]}" >"build-fuzz/fuzz_$t.log" 2>&1; then
    tail -n 40 "build-fuzz/fuzz_$t.log"
    echo "fuzz_$t FAILED: input in $art/ (log build-fuzz/fuzz_$t.log)"
    failed+=("$t")
  fi
  grep -E '^#[0-9]+ +DONE|stat::number_of_executed_units' "build-fuzz/fuzz_$t.log" | tail -n 2 || true
done
if [ ${#failed[@]} -gt 0 ]; then echo "fuzzing failed: ${failed[*]}"; exit 1; fi
echo "fuzzing: all targets clean for ${secs}s each"
