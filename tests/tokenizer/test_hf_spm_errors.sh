#!/usr/bin/env bash
# test_hf_spm_errors.sh — SentencePiece-style tokenizer.json files (model.byte_fallback) that tessera
# does not implement are refused, naming the file and the key, exit 2, and nothing is written by
# prep: Metaspace pre-tokenizers outside what test_hf_spm_metaspace.sh checks (split true, another
# replacement or prepend_scheme, after a normalizer, inside a Sequence; a Metaspace decoder with
# another replacement), a normalizer other than [Prepend,] Replace, a decoder without ByteFallback,
# ignore_merges with byte fallback. The accepted Llama 2 file itself
# loads (its ids are tests/tokenizer/test_hf_identity.sh's). Skips (77) without the npm files.
source "$(dirname "$0")/../lib.sh"
NPM_DIR=${TSR_DATA_DIR:-$TSR_ROOT/data/npm}
SRC=$NPM_DIR/chat/llama2/tokenizer.json
[[ -f $SRC ]] || { echo "$SRC missing: run ./INSTALL --ensure"; exit 77; }
[[ -x $TOOL ]] || { echo "$TOOL missing: run make"; exit 77; }
tsr_tmpdir
tap_plan 10
printf 'Hello world\n' >"$TMP/text"
# variant NAME PYTHON-EDIT: a copy of Llama 2's tokenizer.json with one edit applied to t
variant() {
    "$PY3" - "$SRC" "$TMP/$1.json" "$2" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
exec(sys.argv[3])
json.dump(t, open(sys.argv[2], "w"))
PY
}
"$TOOL" tokenizer encode --tokenizer "$SRC" "$TMP/text" >"$TMP/ok.ids" 2>&1
[[ $(cat "$TMP/ok.ids") =~ ^[0-9\ ]+$ ]]
tap_check $? "Llama 2's tokenizer.json loads and encodes ($(cat "$TMP/ok.ids"))"
refused() { # refused NAME EDIT KEY WHAT
    variant "$1" "$2"
    "$TOOL" tokenizer encode --tokenizer "$TMP/$1.json" "$TMP/text" >/dev/null 2>"$TMP/$1.err"
    local rc=$?
    "$TOOL" prep --tokenizer "$TMP/$1.json" --out "$TMP/out-$1" "$TMP/text" >/dev/null 2>&1
    ((rc == 2)) && grep -q "$1.json: $3" "$TMP/$1.err" && [[ ! -e $TMP/out-$1 ]]
    tap_check $? "$4: exit $rc, '$(head -c 150 "$TMP/$1.err")', prep writes nothing"
}
MS='t["normalizer"] = None; t["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": False}'
refused ms_split "$MS"'; t["pre_tokenizer"]["split"] = True' "pre_tokenizer.split: true is not supported" \
    "Metaspace with split true (HF tokenizers and transformers.js differ)"
refused ms_repl "$MS"'; t["pre_tokenizer"]["replacement"] = "_"' "pre_tokenizer.replacement: expected" \
    "Metaspace with replacement '_'"
refused ms_scheme "$MS"'; t["pre_tokenizer"]["prepend_scheme"] = "sometimes"' "pre_tokenizer.prepend_scheme: 'sometimes'" \
    "Metaspace with prepend_scheme 'sometimes'"
refused ms_norm "$MS"'; t["normalizer"] = {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}' \
    "normalizer: expected null with a Metaspace" "Metaspace after a Replace normalizer"
refused ms_dec "$MS"'; t["decoder"] = {"type": "Metaspace", "replacement": " ", "add_prefix_space": True}' \
    "decoder.replacement: expected" "a Metaspace decoder with replacement ' '"
refused ms_seq 't["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [{"type": "Metaspace", "replacement": "\u2581"}]}' \
    "pre_tokenizer: expected null or Split" "Metaspace inside a Sequence pre-tokenizer"
refused nfkc 't["normalizer"] = {"type": "NFKC"}' "normalizer: expected Replace" "an NFKC normalizer"
refused nofallback 't["decoder"]["decoders"] = [d for d in t["decoder"]["decoders"] if d["type"] != "ByteFallback"]' \
    "decoder: expected Sequence" "a decoder without ByteFallback"
refused ignore 't["model"]["ignore_merges"] = True' "model.ignore_merges: true is not supported" \
    "ignore_merges with byte fallback"
tap_done
