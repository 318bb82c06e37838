#!/usr/bin/env bash
# tokenizer_encode.sh — encode throughput (MB/s) of `tessera tokenizer encode` vs the reference JS
# encoders on the Brown corpus, same machine, one run each; checks that both print identical ids.
# GPT-2: npm gpt-3-encoder's Encoder.js under node. Llama 3 and Qwen 3 (tokenizer.json):
# transformers.js (npm @lenml/tokenizers) through tests/tokenizer/ref_hf_encode.js. Results in
# docs/benchmarks.md ("Tokenizer: encode throughput"). HF_MODELS="llama3 qwen3 llama2 gemma3" (empty: GPT-2 only).
#
#   bash bench/tokenizer_encode.sh        (after make and ./INSTALL --ensure, which fetches the corpus)
#
# Runs (wall time of the whole command: process start and loading the vocabulary included):
#   js encode()   node tests/tokenizer/ref_encode.js --exact: Encoder.js's own encode(), per file
#   js loop       node tests/tokenizer/ref_encode.js: encode()'s loop with push instead of its
#                 quadratic concat (same regex and bpe())
#   tessera       tessera tokenizer encode on the 500 files (one line each), and on one file
#                 holding them all (1 thread; tessera encodes on one core)
# Environment: BUILD=build, TSR_TESSERA (default $BUILD/tessera), TSR_DATA_DIR (default data/npm),
# BENCH_OUT=build/bench.
set -euo pipefail
source "$(dirname "$0")/tool_paths.sh"
REF=$ROOT/tests/tokenizer/ref_encode.js
mkdir -p "$OUT"
files=("$NPM_DIR"/brown/c[a-r][0-9][0-9])
((${#files[@]} == 500)) || { echo "expected 500 Brown files under $NPM_DIR/brown (./INSTALL --ensure)" >&2; exit 1; }
cat "${files[@]}" > "$OUT/brown.txt"
bytes=$(stat -c %s "$OUT/brown.txt")

# time_run NAME OUTFILE CMD...: wall seconds of CMD, stdout to OUTFILE
time_run() {
    local name=$1 out=$2 t0 t1; shift 2
    t0=$(date +%s.%N); "$@" > "$out"; t1=$(date +%s.%N)
    local s; s=$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')
    awk -v n="$name" -v s="$s" -v B="$bytes" 'BEGIN { printf "%-34s %8.2f s  %8.2f MB/s\n", n, s, B / 1e6 / s }'
    echo "$s" > "$out.time"
}

echo "Brown corpus: ${#files[@]} files, $bytes bytes; $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores"
echo "node $(node --version), gpt-3-encoder 1.1.4 (pinned in INSTALL)"
time_run "js Encoder.js encode() per file" "$OUT/js_exact.ids" node "$REF" --exact "$NPM_DIR/gpt2" "${files[@]}"
time_run "js loop (push) per file" "$OUT/js_loop.ids" node "$REF" "$NPM_DIR/gpt2" "${files[@]}"
time_run "tessera per file" "$OUT/tsr.ids" "$TESSERA" tokenizer encode --tokenizer "$NPM_DIR/gpt2" "${files[@]}"
time_run "tessera one file" "$OUT/tsr_all.ids" "$TESSERA" tokenizer encode --tokenizer "$NPM_DIR/gpt2" "$OUT/brown.txt"
if cmp -s "$OUT/js_exact.ids" "$OUT/tsr.ids" && cmp -s "$OUT/js_loop.ids" "$OUT/tsr.ids"; then
    echo "identical ids: $(wc -w < "$OUT/tsr.ids") tokens"
else
    echo "ids DIFFER between tessera and the JS encoder" >&2; exit 1
fi
awk -v e="$(cat "$OUT/js_exact.ids.time")" -v l="$(cat "$OUT/js_loop.ids.time")" -v t="$(cat "$OUT/tsr.ids.time")" \
    'BEGIN { printf "speed-up: tessera per file vs js encode() %.0fx, vs js loop %.0fx\n", e / t, l / t }'

# Hugging Face tokenizer.json models: the 500 files, one process each side, ids compared
HFJS=$NPM_DIR/hf-tokenizers
for m in ${HF_MODELS-llama3 qwen3 llama2 gemma3}; do
    J=$NPM_DIR/chat/$m/tokenizer.json
    [[ -f $J && -f $HFJS/dist/main.js ]] || { echo "$m: $J or $HFJS missing (./INSTALL --ensure)" >&2; exit 1; }
    time_run "js transformers.js $m per file" "$OUT/js_$m.ids" node "$ROOT/tests/tokenizer/ref_hf_encode.js" "$HFJS" "$NPM_DIR/chat/$m" "${files[@]}"
    time_run "tessera $m per file" "$OUT/tsr_$m.ids" "$TESSERA" tokenizer encode --special --tokenizer "$J" "${files[@]}"
    cmp -s "$OUT/js_$m.ids" "$OUT/tsr_$m.ids" || { echo "$m: ids DIFFER between tessera and transformers.js" >&2; exit 1; }
    awk -v j="$(cat "$OUT/js_$m.ids.time")" -v t="$(cat "$OUT/tsr_$m.ids.time")" -v n="$(wc -w < "$OUT/tsr_$m.ids")" -v m="$m" \
        'BEGIN { printf "%s: identical ids (%d tokens); speed-up tessera vs transformers.js %.0fx\n", m, n, j / t }'
done
