#!/usr/bin/env bash
# test_hf_export_tokjson.sh — `tessera ckpt export --format hf` of a model trained with a Hugging Face
# tokenizer.json (data.tokenizer = .../tokenizer.json: Llama 3, Qwen 3): OUT gets byte copies of the
# tokenizer.json and of the tokenizer_config.json beside it, config.json's eos_token_id is that
# config's eos_token, and a real client loads the exported directory: transformers.js (npm
# @lenml/tokenizers, tests/tokenizer/ref_hf_encode.js) encodes text exactly as tessera does and
# reports the same eos id. Skips (77) without node or the npm files ./INSTALL fetches.
# CI time: one node per model loads the exported files, for both the eos id and the encoding
# (ref_hf_encode.js --eos-to): a 9-11 MB tokenizer.json took node 2 CPU-s to load each time, and
# the test 14 CPU-s in CI (here, loaded: 21 -> 14 CPU-s).
source "$(dirname "$0")/../lib.sh"
NPM_DIR=${TSR_DATA_DIR:-$TSR_ROOT/data/npm}
HFJS=$NPM_DIR/hf-tokenizers MODELS=$NPM_DIR/chat
REF=$TSR_ROOT/tests/tokenizer/ref_hf_encode.js
command -v node >/dev/null || { echo "node not found (Debian: nodejs; ./INSTALL)"; exit 77; }
for f in "$HFJS/dist/main.js" "$MODELS"/{llama3,qwen3}/tokenizer{,_config}.json; do
    [[ -f $f ]] || { echo "$f missing: run ./INSTALL --ensure"; exit 77; }
done
for x in "$TOOL" "$TRAIN"; do [[ -x $x ]] || { echo "$x missing: run make"; exit 77; }; done
tsr_tmpdir
tap_plan 8
printf 'Hello, world! Ünïcödé 日本語 🎉 <|eot_id|> x<|im_end|>\n  tabs\tand 12345 digits\n' >"$TMP/text"

for mv in llama3:128256 qwen3:151669; do
    m=${mv%%:*} V=${mv#*:} d=$TMP/${mv%%:*}
    tiny_export "$d" "$V" "$MODELS/$m/tokenizer.json" 1
    cmp -s "$MODELS/$m/tokenizer.json" "$d/hf/tokenizer.json" &&
        cmp -s "$MODELS/$m/tokenizer_config.json" "$d/hf/tokenizer_config.json" &&
        [[ ! -e $d/hf/vocab.json && ! -e $d/hf/merges.txt ]] && grep -q "wrote .*tokenizer.json" "$d/export.log"
    tap_check $? "$m: tokenizer.json and tokenizer_config.json exported as byte copies, no GPT-2 files"
    # transformers.js on the exported directory: its eos_token_id and its ids of the text
    ref=$(node "$REF" --eos-to "$d/js_eos" "$HFJS" "$d/hf" "$TMP/text" 2>/dev/null)
    eos=$("$PY3" -c 'import json,sys; print(json.load(open(sys.argv[1]))["eos_token_id"])' "$d/hf/config.json" 2>/dev/null)
    js=$(cat "$d/js_eos" 2>/dev/null)
    [[ -n $eos && $eos == "$js" ]]
    tap_check $? "$m: config.json eos_token_id ${eos:-?} = transformers.js's eos_token_id of the exported files (${js:-?})"
    ours=$("$TOOL" tokenizer encode --special --tokenizer "$d/hf/tokenizer.json" "$TMP/text" 2>&1)
    [[ -n $ours && $ours == "$ref" ]]
    tap_check $? "$m: transformers.js loads the exported directory and encodes like tessera ($(wc -w <<<"$ours") ids)"
done
# a directory as --tokenizer works the same; a tokenizer.json larger than the model's vocabulary is refused
"$TOOL" ckpt export --format hf --tokenizer "$MODELS/llama3" "$TMP/llama3/run/latest" "$TMP/dirspec" >/dev/null 2>&1 &&
    cmp -s "$MODELS/llama3/tokenizer.json" "$TMP/dirspec/tokenizer.json"
tap_check $? "--tokenizer DIR holding tokenizer.json: the same copies"
"$TOOL" ckpt export --format hf --tokenizer "$MODELS/qwen3/tokenizer.json" "$TMP/llama3/run/latest" "$TMP/toobig" >"$TMP/toobig.log" 2>&1
rc=$?
((rc == 1)) && grep -q "151669 tokens, the model's vocabulary only 128256" "$TMP/toobig.log" && [[ ! -e $TMP/toobig ]]
tap_check $? "Qwen 3's tokenizer.json on a 128256-token model: refused, exit $rc, nothing written"
tap_done
