#!/usr/bin/env bash
# test_hf_identity.sh — Hugging Face tokenizer.json (Llama 3, Qwen 3, gpt-oss: byte-level BPE; Llama 2,
# Gemma 3: SentencePiece-style BPE with byte fallback): our encoder is token-for-token
# identical to the reference (transformers.js as npm @lenml/tokenizers, run by node through
# tests/tokenizer/ref_hf_encode.js) on the Brown corpus (each model on a quarter of its files, so that
# every file meets one of the four and every genre all four: Llama 3 the files 0, 4, 8, ..., Qwen 3
# 1, 5, ..., Gemma 3 2, 6, ..., Llama 2 3, 7, ...; gpt-oss every 20th, 25 files; CI time: the
# reference's encoding of half the corpus per model took 20 CPU-s of node each), adversarial text (mixed scripts, CJK, emoji
# with ZWJ sequences, digit runs of 1-7, whitespace and newline runs, tabs, contractions in both
# cases, punctuation runs, combining marks, added tokens inside text, invalid UTF-8) and seeded random
# text, for gpt-oss also its pattern's own cases (hf_o200k_texts: case changes inside words, marks,
# "/", harmony's special tokens); decode(encode(x)) == x; added tokens not marked special (Gemma 3's
# HTML tags, Qwen 3's <think>) split out without --special too, a special one then text. Skips (77) without node or the npm files ./INSTALL fetches into
# ${TSR_DATA_DIR:-data/npm}: hf-tokenizers (@lenml/tokenizers: dist/main.js) and
# chat/{llama3,qwen3,llama2,gemma3,gptoss} (tokenizer.json + tokenizer_config.json of @lenml/tokenizer-*).
# The encoder run is `tessera tokenizer encode --special --tokenizer FILE` (one line of ids per file);
# build/tests/test_hf_tok does the NFC check. CI time: tessera loads each tokenizer.json once for all
# its --special encodes (the compared files, the round trip's, decode_lines's separator, the special
# token of the check of added tokens; <|eot_id|> and harmony's tokens are read off the compared
# lines) and once more for its decodes: the test started 29 tessera runs (12 CPU-s of loading
# 0.1-1.4 CPU-s each) where 11 now do the same work; python reads only the added_tokens of three
# tokenizer.json files (9 CPU-s to parse them whole): 91 -> 79 CPU-s here (a loaded 2-core box), the
# rest node's reference (each model's load 0.7-4.5 CPU-s and its encoding: kept whole).
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/hf_texts.sh"
HFJS=$NPM_DIR/hf-tokenizers MODELS=$NPM_DIR/chat
REF=$TSR_ROOT/tests/tokenizer/ref_hf_encode.js
HFT=$BUILD/tests/test_hf_tok
enc() { local j=$1; shift; "$TOOL" tokenizer encode --special --tokenizer "$j" "$@"; }
hf_needs "(npm @lenml/tokenizers@3.7.2, @lenml/tokenizer-MODEL@3.7.2)" "$HFJS/dist/main.js" \
    "$MODELS"/{llama3,qwen3,llama2,gemma3,gptoss}/tokenizer{,_config}.json
[[ -x $HFT ]] || { echo "$HFT missing: run make"; exit 77; }
tsr_tmpdir
tap_plan 25

brown=("$BROWN"/c[a-r][0-9][0-9])
E=$TMP/edge R=$TMP/rand
hf_edge_texts "$E"
edge=("$E"/*)
hf_random_texts "$R"
rand=("$R"/*)
O=$TMP/o200k
hf_o200k_texts "$O"
o200k=("$O"/*)

models=(llama3 qwen3 llama2 gemma3 gptoss)
# brown_of MODEL: sets `mb`, MODEL's quarter of the Brown files (gpt-oss: every 20th), `own`, the
# texts of its pattern alone (gpt-oss's), and `all`, every file it encodes
brown_of() {
    local i first=0 step=4
    case $1 in qwen3) first=1 ;; gemma3) first=2 ;; llama2) first=3 ;; gptoss) first=2 step=20 ;; esac
    mb=() own=()
    for ((i = first; i < ${#brown[@]}; i += step)); do mb+=("${brown[i]}"); done
    [[ $1 == gptoss ]] && own=("${o200k[@]}")
    all=("${mb[@]}" "${edge[@]}" "${rand[@]}" "${own[@]}")
}
# the reference (transformers.js) for every model on all the files, in the background, two node
# processes at a time (each writes only its own $TMP/all.MODEL.ref, so the order they run in changes
# nothing); the longest first: llama2, gemma3, qwen3, llama3, gptoss
ref_queue() {
    local m
    for m in "$@"; do
        while (($(jobs -rp | wc -l) >= 2)); do wait -n; done
        brown_of "$m"
        node "$REF" "$HFJS" "$MODELS/$m" "${all[@]}" >"$TMP/all.$m.ref" 2>"$TMP/all.$m.err" &
    done
    wait
}
ref_queue llama2 gemma3 qwen3 llama3 gptoss &
queue=$!
# meanwhile tessera, one encode per model (its tokenizer.json loaded once: 0.1-1.4 CPU-s each time):
# the files node encodes (one line per file as node's), then the files of the round trip
# decode(encode(x)) == x and decode_lines's separator, then (Gemma 3, Qwen 3) the text of a special
# added token; the decodes of the round trip in one more run per model. SentencePiece-style: Gemma
# 3 as is, Llama 2 with its prepended space stripped again by the decoder's Strip; not over added
# tokens for them (Llama 2 prepends a space to the text after each one, as transformers.js does)
rt_models=(llama3 gemma3 llama2 gptoss)
rt_files() { # rt_files MODEL: sets `rt`, the files of MODEL's round trip (none: not in rt_models), and `extra`, the last one
    extra=$E/added rt=()
    [[ " ${rt_models[*]} " == *" $1 "* ]] || return 0
    [[ $1 == llama3 || $1 == gptoss ]] || extra=$E/contractions
    rt=("${brown[@]:0:20}" "$E/scripts" "$E/emoji" "$E/cjk" "$E/whitespace" "$extra")
}
sep_text "$TMP/sep.txt"
# from the added_tokens of tokenizer.json (one python run; the array only, cut at the "normalizer" key
# that follows it: parsing the whole 11-33 MB file took 2-4.6 CPU-s each): $TMP/sp.MODEL, the text
# of the first special added token starting with "<" of Gemma 3 and Qwen 3 (the check of added
# tokens not special below); $TMP/harmony.want, the ids of gpt-oss's harmony tokens
"$PY3" - "$TMP" "$MODELS" <<'PY'
import json, os, sys
tmp, models = sys.argv[1], sys.argv[2]
def added_tokens(path):
    b = open(path, "rb").read()
    i = b.find(b'"added_tokens"')
    if i >= 0:
        j, k = b.find(b"[", i), b.find(b'"normalizer"', i)
        try:
            return json.JSONDecoder().raw_decode(b[j:k].decode("utf-8"))[0]
        except ValueError:
            pass
    return json.loads(b)["added_tokens"]
for m in "gemma3", "qwen3":
    a = added_tokens(os.path.join(models, m, "tokenizer.json"))
    sp = next(t["content"] for t in a if t["special"] and t["content"].startswith("<"))
    open(os.path.join(tmp, "sp." + m), "w", encoding="utf-8").write(sp)
a = {t["content"]: t["id"] for t in added_tokens(os.path.join(models, "gptoss", "tokenizer.json"))}
ids = sorted({a["<|" + n + "|>"] for n in "start message end channel return constrain call endoftext".split()})
open(os.path.join(tmp, "harmony.want"), "w").write(" ".join(map(str, ids)) + " ")
PY
# sp_of MODEL: sets `sp`, $TMP/sp.MODEL (Gemma 3, Qwen 3), else none
sp_of() {
    sp=()
    [[ $1 == gemma3 || $1 == qwen3 ]] && sp=("$TMP/sp.$1")
    return 0
}
for model in "${models[@]}"; do
    brown_of "$model"; rt_files "$model"; sp_of "$model"
    ((${#rt[@]})) && rt_sep=("$TMP/sep.txt") || rt_sep=()
    enc "$MODELS/$model/tokenizer.json" "${all[@]}" "${rt[@]}" "${rt_sep[@]}" "${sp[@]}" > "$TMP/all.$model.tsr"
    ((${#rt[@]})) || continue
    sed -n "$((${#all[@]} + 1)),$((${#all[@]} + ${#rt[@]}))p" "$TMP/all.$model.tsr" > "$TMP/rt.$model.ids"
    sed -n "$((${#all[@]} + ${#rt[@]} + 1))p" "$TMP/all.$model.tsr" > "$TMP/rt.$model.sep"
    decode_lines --sep-ids "$TMP/rt.$model.sep" "$TMP/rt.$model.ids" "$TMP/rt.$model" "$MODELS/$model/tokenizer.json" "${rt[@]}"
done
wait "$queue"

# the first lines of all.MODEL.* are its Brown files, then the adversarial, then the random ones
ne=${#edge[@]} nr=${#rand[@]}
for model in "${models[@]}"; do
    brown_of "$model"
    nb=${#mb[@]}
    [[ -s $TMP/all.$model.err ]] && sed "s/^/# $model: node: /" "$TMP/all.$model.err"
    for x in ref tsr; do
        split_parts "$TMP/all.$model.$x" "$TMP/%s.$model.$x" "$nb" "$ne" "$nr" "${#own[@]}"
    done
    [[ $(wc -l < "$TMP/all.$model.ref") == ${#all[@]} ]] ||
        tap_diag "$model: node wrote $(wc -l < "$TMP/all.$model.ref") lines for ${#all[@]} files"
    same_lines "$model brown" "$TMP/brown.$model.ref" "$TMP/brown.$model.tsr" "${mb[@]}"
    tap_check $? "$model: Brown corpus, $nb of its ${#brown[@]} files, $(wc -w < "$TMP/brown.$model.ref") tokens identical to transformers.js"
    same_lines "$model edge" "$TMP/edge.$model.ref" "$TMP/edge.$model.tsr" "${edge[@]}"
    tap_check $? "$model: adversarial text (${#edge[@]} files: scripts, emoji/ZWJ, CJK, digit runs, whitespace, contractions, punctuation, combining marks, added tokens, invalid UTF-8) identical"
    same_lines "$model random" "$TMP/rand.$model.ref" "$TMP/rand.$model.tsr" "${rand[@]}"
    tap_check $? "$model: random text (${#rand[@]} files incl. 4000-code-point pieces, seed 4242) identical"
    ((${#own[@]})) || continue
    same_lines "$model own" "$TMP/own.$model.ref" "$TMP/own.$model.tsr" "${own[@]}"
    tap_check $? "$model: its pattern's cases (${#own[@]} files: case changes in words, marks, '/', harmony tokens, random over its classes, seed 67) identical"
done

for model in "${rt_models[@]}"; do
    rt_files "$model"
    round_trips "$model" "$TMP/rt.$model" "${rt[@]}"
    tap_check $? "$model: decode(encode(x)) == x (Brown files, scripts, emoji, CJK, whitespace, ${extra##*/})"
done
# line_of FILE: the line of FILE in the encode of the current `all`
line_of() { local k; for k in "${!all[@]}"; do [[ ${all[k]} == "$1" ]] && echo $((k + 1)); done; }
brown_of llama3
n_eot=$(sed -n "$(line_of "$E/added")p" "$TMP/all.llama3.tsr" | tr ' ' '\n' | grep -c '^128009$')
[[ $n_eot == 3 ]]
tap_check $? "llama3: <|eot_id|> inside text -> 128009 (3 of 3, got $n_eot)"
# added tokens that are not special (Gemma 3's HTML tags, Qwen 3's <think>) are split out without
# --special too, as transformers.js and HF tokenizers do; a special one stays text. With --special,
# the special one's ids are the last line of the model's encode above; without, one run for both
for model in gemma3 qwen3; do
    brown_of "$model"; sp_of "$model"
    want=$(sed -n "$(line_of "$E/plain_added")p" "$TMP/all.$model.ref")
    sp_id=$(tail -n 1 "$TMP/all.$model.tsr")
    { read -r got; read -r sp_text; } < <("$TOOL" tokenizer encode --tokenizer "$MODELS/$model/tokenizer.json" "$E/plain_added" "${sp[0]}")
    [[ -n $want && $got == "$want" && $sp_text != "$sp_id" && -n $sp_id && $sp_id != *" "* ]]
    tap_check $? "$model: added tokens not special split out without --special, as transformers.js ($(wc -w <<<"$got") ids); special $(cat "${sp[0]}") stays text ($sp_text, with --special $sp_id)"
done
# harmony's special tokens are single ids, those tokenizer.json gives them (the line of $O/harmony
# in gpt-oss's encode above)
brown_of gptoss
h_ids=$(sed -n "$(line_of "$O/harmony")p" "$TMP/all.gptoss.tsr" | tr ' ' '\n' | sort -nu | awk '$1 >= 199998' | tr '\n' ' ')
h_want=$(<"$TMP/harmony.want")
[[ $h_ids == "$h_want" && $h_ids == *200006* ]]
tap_check $? "gptoss: harmony's <|start|> <|message|> <|channel|> <|end|> <|return|> <|constrain|> <|call|> <|endoftext|> are one id each (got: $h_ids; tokenizer.json: $h_want)"
# NFC (Qwen's normalizer) equals node's String.prototype.normalize("NFC"): every code point, and
# random sequences of composites, their decompositions, bases, marks and Hangul jamo
N=$TMP/nfc; mkdir -p "$N"
node -e '
const fs = require("fs"); const dir = process.argv[1];
const all = [];
for (let c = 0; c < 0x110000; c++) if (!(c >= 0xd800 && c <= 0xdfff)) all.push(String.fromCodePoint(c));
fs.writeFileSync(dir + "/all", all.join("\n"));
let s = 99; const rnd = n => { s = (s * 1103515245 + 12345) % 2147483648; return s % n; };
const marks = [], bases = [..."aeiouAEIOUnNcCsSwyzLRgk"];
for (let c = 0x300; c < 0x110000; c++) {
  if (c >= 0xd800 && c <= 0xdfff) continue;
  const ch = String.fromCodePoint(c);
  if (ch.normalize("NFD") !== ch) bases.push(ch, ch.normalize("NFD"));
  else if (/\p{M}/u.test(ch)) marks.push(ch);
}
for (let c = 0x1100; c < 0x1113; c++) bases.push(String.fromCodePoint(c));
for (let c = 0x1161; c < 0x1176; c++) marks.push(String.fromCodePoint(c));
for (let c = 0x11a8; c < 0x11c3; c++) marks.push(String.fromCodePoint(c));
let t = "";
for (let i = 0; i < 300000; i++) t += rnd(3) ? marks[rnd(marks.length)] : bases[rnd(bases.length)];
fs.writeFileSync(dir + "/mixed", t);
for (const f of ["all", "mixed"])
  fs.writeFileSync(dir + "/" + f + ".nfc", fs.readFileSync(dir + "/" + f, "utf8").normalize("NFC"));' "$N"
nfc_ok=0
for f in all mixed; do
    "$HFT" --nfc "$N/$f" | cmp -s - "$N/$f.nfc" || { tap_diag "NFC of $f differs from node's"; nfc_ok=1; }
done
tap_check $nfc_ok "NFC == node's normalize(\"NFC\") on all $(node -p 0x110000-0x800) code points and 300K random base/mark/jamo code points"
tap_done
