#!/usr/bin/env bash
# test_hf_export_tokjson.sh — `tessera ckpt export --format hf` of a model trained with a Hugging Face
# tokenizer.json (data.tokenizer = .../tokenizer.json: Llama 3, Qwen 3): OUT gets byte copies of the
# tokenizer.json and of the tokenizer_config.json beside it, config.json's eos_token_id is that
# config's eos_token, and a real client loads the exported directory: transformers.js (npm
# @lenml/tokenizers, tests/tokenizer/ref_hf_encode.js) encodes text exactly as tessera does and
# reports the same eos id. Skips (77) without node or the npm files ./INSTALL fetches.
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

# export_with MODEL VOCAB: train one step of a tiny GPT-2 with that tokenizer, export it to OUT
export_with() {
    local m=$1 V=$2 d=$TMP/$1
    mkdir -p "$d"
    "$TOOL" synth --out "$d/data" --vocab "$V" --tokens 4000 --seed 1 >/dev/null || return 1
    cat >"$d/cfg" <<CFG
seed = 1; max_duration = "1ba"; global_batch = 2; micro_batch = 2; seq_len = 16; eval_interval = "0ba";
save_interval = "1ba"; log_interval = 1; threads = 1;
model = { n_layer = 1; d_model = 32; n_head = 2; vocab_size = $V; max_seq_len = 16; };
optim = { lr = 0.001; };
data = { train = "$d/data/train"; val = ""; tokenizer = "$MODELS/$m/tokenizer.json"; };
sample = { tokens = 0; };
CFG
    "$TRAIN" --config "$d/cfg" --set run_dir="$d/run" >"$d/train.log" 2>&1 || { tail -5 "$d/train.log"; return 1; }
    "$TOOL" ckpt export --format hf "$d/run/latest" "$d/out" >"$d/export.log" 2>&1 || { cat "$d/export.log"; return 1; }
}
# js_eos DIR: transformers.js's eos_token_id for the tokenizer files in DIR
js_eos() {
    node -e '
const path = require("path"), fs = require("fs");
const { TokenizerLoader } = require(path.resolve(process.argv[1], "dist", "main.js"));
const j = f => JSON.parse(fs.readFileSync(path.join(process.argv[2], f), "utf8"));
const t = TokenizerLoader.fromPreTrained({ tokenizerJSON: j("tokenizer.json"), tokenizerConfig: j("tokenizer_config.json") });
console.log(t.eos_token_id);' "$HFJS" "$1"
}
for mv in llama3:128256 qwen3:151669; do
    m=${mv%%:*} V=${mv#*:} d=$TMP/${mv%%:*}
    export_with "$m" "$V"
    cmp -s "$MODELS/$m/tokenizer.json" "$d/out/tokenizer.json" &&
        cmp -s "$MODELS/$m/tokenizer_config.json" "$d/out/tokenizer_config.json" &&
        [[ ! -e $d/out/vocab.json && ! -e $d/out/merges.txt ]] && grep -q "wrote .*tokenizer.json" "$d/export.log"
    tap_check $? "$m: tokenizer.json and tokenizer_config.json exported as byte copies, no GPT-2 files"
    eos=$("$PY3" -c 'import json,sys; print(json.load(open(sys.argv[1]))["eos_token_id"])' "$d/out/config.json" 2>/dev/null)
    js=$(js_eos "$d/out" 2>/dev/null)
    [[ -n $eos && $eos == "$js" ]]
    tap_check $? "$m: config.json eos_token_id ${eos:-?} = transformers.js's eos_token_id of the exported files (${js:-?})"
    ours=$("$TOOL" tokenizer encode --special --tokenizer "$d/out/tokenizer.json" "$TMP/text" 2>&1)
    ref=$(node "$REF" "$HFJS" "$d/out" "$TMP/text" 2>/dev/null)
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
