#!/usr/bin/env bash
# hf_bpe_long.sh — byte-level BPE on one long pre-token (issue 49 item 4): a run of letters without
# spaces is one piece of Llama 3's Split pattern, merged whole. CPU seconds (user + sys, from
# /usr/bin/time) of `tessera tokenizer encode` vs transformers.js (npm @lenml/tokenizers through
# tests/tokenizer/ref_hf_encode.js) on pieces of 10 KB, 100 KB and 1 MB, ids checked identical.
# With TSR_TESSERA_OLD set to a tessera built before the heap (a scan of the piece per merge), that
# one is timed too, under a CPU limit of OLD_LIMIT seconds (default 120): it is quadratic.
# Results: docs/benchmarks.md ("Hugging Face BPE: one long pre-token").
#
#   bash bench/hf_bpe_long.sh        (after make and ./INSTALL --ensure)
set -euo pipefail
source "$(dirname "$0")/tool_paths.sh"
MODEL=$NPM_DIR/chat/${HF_MODEL:-llama3}
mkdir -p "$OUT"
[[ -f $MODEL/tokenizer.json && -f $NPM_DIR/hf-tokenizers/dist/main.js ]] ||
    { echo "missing $MODEL/tokenizer.json or transformers.js: ./INSTALL --ensure" >&2; exit 1; }
# cpu OUTFILE CMD...: CPU seconds of CMD (stdout to OUTFILE), or "killed" past the limit
cpu() {
    local out=$1; shift
    if /usr/bin/time -f "%U %S %M" -o "$OUT/time.txt" "$@" >"$out" 2>/dev/null; then
        awk '{ printf "%.2f s (%d MB)", $1 + $2, $3 / 1024 }' "$OUT/time.txt"
    else
        echo "killed"
    fi
}
printf '%-8s %-22s %-22s %-22s %s\n' piece transformers.js tessera "tessera (old)" ids
for kb in 10 100 1000; do
    f=$OUT/piece-$kb.txt
    python3 -c 'import sys; open(sys.argv[1], "w").write("abcdefghij" * (100 * int(sys.argv[2])))' "$f" "$kb"
    ref=$(cpu "$OUT/ref-$kb.ids" node "$ROOT/tests/tokenizer/ref_hf_encode.js" "$NPM_DIR/hf-tokenizers" "$MODEL" "$f")
    new=$(cpu "$OUT/new-$kb.ids" "$TESSERA" tokenizer encode --special --tokenizer "$MODEL/tokenizer.json" "$f")
    old=-
    if [[ -n ${TSR_TESSERA_OLD:-} ]]; then
        old=$(ulimit -t "${OLD_LIMIT:-120}"; cpu "$OUT/old-$kb.ids" "$TSR_TESSERA_OLD" tokenizer encode --special \
            --tokenizer "$MODEL/tokenizer.json" "$f")
    fi
    same=$(cmp -s "$OUT/ref-$kb.ids" "$OUT/new-$kb.ids" && echo "identical ($(wc -w <"$OUT/new-$kb.ids"))" || echo DIFFER)
    printf '%-8s %-22s %-22s %-22s %s\n' "$kb KB" "$ref" "$new" "$old" "$same"
done
