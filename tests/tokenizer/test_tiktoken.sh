#!/usr/bin/env bash
# test_tiktoken.sh — tokenizers in tiktoken's format (Kimi K2's and Moonlight's tiktoken.model, OpenAI's
# o200k_base.tiktoken; issue 84 item 6): tessera's ids are identical to tiktoken's own encoder (npm
# tiktoken: the Rust tiktoken built to WebAssembly, run by tests/tokenizer/ref_tiktoken_encode.js)
# on the same ranks, pattern and special tokens. Kimi's and Moonlight's files cannot be fetched here,
# so the test writes such files from the o200k ranks npm tiktoken ships: o200k_base.tiktoken (OpenAI's
# name: o200k's pattern and special tokens), and a Kimi directory (those ranks as tiktoken.model,
# a tokenizer_config.json naming TikTokenTokenizer and Kimi K2's special tokens at Kimi's offsets
# after the ranks: Kimi's pattern). A third tokenizer, "pairs", makes the pre-tokenizer's pieces
# visible in the ids: its ranks are the 256 bytes and every byte prefix of every pair of code points
# of the random texts' pool, so two neighbouring code points of one piece always merge and of two
# pieces never (with o200k's ranks most piece boundaries change no id). Compared: Brown (every 20th
# file), the adversarial and random texts of hf_texts.sh, the texts of hf_tiktoken_texts (where
# tiktoken's regex engine differs from JavaScript's, Kimi's Han runs, the special tokens, 8 random
# files) and its "large" file of about 1 MB; special tokens as text without --special (tiktoken's
# encode_ordinary); decode(encode(x)) == x; the directory, its tiktoken.model and a copy with CRLF
# line ends give the same ids; prep over two Brown files ends each document with the config's
# eos_token [EOS]; malformed files are refused with exit 2 naming the file and line or key.
# Skips (77) without node or the npm files ./INSTALL fetches (tiktoken, brown).
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/hf_texts.sh"
TT=$NPM_DIR/tiktoken
REF=$TSR_ROOT/tests/tokenizer/ref_tiktoken_encode.js
hf_needs "(npm tiktoken@1.0.22)" "$TT"/lite/tiktoken{.cjs,_bg.wasm} "$TT"/encoders/o200k_base.json
"$PY3" -c 'import numpy' 2>/dev/null || { echo "skip: $PY3 has no numpy"; exit 77; }
tsr_tmpdir
tap_plan 20

O=$TMP/o200k K=$TMP/kimi P=$TMP/pairs
mkdir -p "$O" "$K" "$P"
# o200k's ranks as a tiktoken file (the package keeps them as "! FIRST_RANK TOKEN TOKEN ..." runs);
# Kimi K2's special tokens at their offsets after the ranks (163584 + k in Kimi K2's own config)
node - "$TT" "$O/o200k_base.tiktoken" "$K" <<'JS' || { echo "Bail out! writing the ranks failed"; exit 1; }
const fs = require("fs"); const path = require("path");
const [pkg, out, kdir] = process.argv.slice(2);
const o = require(path.resolve(pkg, "encoders", "o200k_base.json"));
const lines = [];
for (const l of o.bpe_ranks.split("\n")) {
  const p = l.split(" ");
  if (p[0] === "!") { let r = +p[1]; for (const t of p.slice(2)) lines.push(`${t} ${r++}`); }
  else if (l) lines.push(l);
}
fs.writeFileSync(out, lines.join("\n") + "\n");
fs.writeFileSync(path.join(kdir, "tiktoken.model"), lines.join("\n") + "\n");
const names = { 0: "[BOS]", 1: "[EOS]", 2: "<|im_end|>", 3: "<|im_user|>", 4: "<|im_assistant|>",
  6: "<|start_header_id|>", 7: "<|end_header_id|>", 9: "[EOT]", 10: "<|im_system|>",
  11: "<|tool_calls_section_begin|>", 12: "<|tool_calls_section_end|>", 13: "<|tool_call_begin|>",
  14: "<|tool_call_argument_begin|>", 15: "<|tool_call_end|>", 17: "<|im_middle|>", 254: "[UNK]", 255: "[PAD]" };
const dec = {};
for (const [k, c] of Object.entries(names))
  dec[lines.length + +k] = { content: c, lstrip: false, normalized: false, rstrip: false, single_word: false, special: true };
fs.writeFileSync(path.join(kdir, "tokenizer_config.json"), JSON.stringify({
  added_tokens_decoder: dec, auto_map: { AutoTokenizer: ["tokenization_kimi.TikTokenTokenizer", null] },
  bos_token: "[BOS]", eos_token: "[EOS]", pad_token: "[PAD]", unk_token: "[UNK]",
  tokenizer_class: "TikTokenTokenizer" }, null, 2));
JS
NB=$(grep -c . "$K/tiktoken.model")

brown=("$BROWN"/c[a-r][0-9][0-9])
mb=()
for ((i = 3; i < ${#brown[@]}; i += 20)); do mb+=("${brown[i]}"); done
E=$TMP/edge R=$TMP/rand
hf_edge_texts "$E"
hf_random_texts "$R"
edge=("$E"/*) rand=("$R"/*)
hf_tiktoken_texts "$TMP/own_o" '<|endoftext|>' '<|endofprompt|>' -- "${mb[@]:0:4}"
hf_tiktoken_texts "$TMP/own_k" '[BOS]' '<|im_end|>' '<|im_middle|>' "<|reserved_token_$((NB + 100))|>" '[EOS]' -- "${mb[@]:0:4}"
own_o=("$TMP"/own_o/*) own_k=("$TMP"/own_k/*)

# "pairs": the pool of hf_tiktoken_texts's random files (its code points, read back from them), every
# pair's byte prefixes as tokens, the shorter ones first; then every run of 3 to 16 code points of
# its handmade files, so that a piece of those is one token whole (tiktoken's whole-piece rule) and a
# wrong cut inside it (a contraction 'ſ, a Han run) shows; Kimi's pattern and special tokens
node - "$P" "$TMP"/own_k/{r0,r1,r2,r3,r4,r5,r6,r7} -- "$TMP"/own_k/{han,engine,o200k} <<'JS' || { echo "Bail out! writing the pairs ranks failed"; exit 1; }
const fs = require("fs"); const [dir, ...args] = process.argv.slice(2);
const files = args.slice(0, args.indexOf("--")), whole = args.slice(args.indexOf("--") + 1);
const pool = [...new Set(files.flatMap(f => [...fs.readFileSync(f, "utf8")]))];
const toks = new Map();
const add = b => toks.set(b.toString("hex"), b);
for (let b = 0; b < 256; b++) add(Buffer.from([b]));
for (const a of pool) for (const c of pool) {
  const s = Buffer.from(a + c);
  for (let k = 2; k <= s.length; k++) add(s.subarray(0, k));
}
for (const f of whole) {
  const cps = [...fs.readFileSync(f, "utf8")];
  for (let i = 0; i < cps.length; i++)
    for (let k = 3; k <= 16 && i + k <= cps.length; k++) add(Buffer.from(cps.slice(i, i + k).join("")));
}
const all = [...toks.values()].sort((x, y) => x.length - y.length || Buffer.compare(x, y));
fs.writeFileSync(dir + "/tiktoken.model", all.map((b, r) => `${b.toString("base64")} ${r}`).join("\n") + "\n");
fs.writeFileSync(dir + "/tokenizer_config.json", JSON.stringify({ tokenizer_class: "TikTokenTokenizer",
  added_tokens_decoder: { [all.length + 2]: { content: "<|im_end|>" } }, eos_token: "[EOS]" }));
JS
pool_n=$(grep -c . "$P/tiktoken.model")

# the references (three node runs, in the background) while tessera encodes the same files
all_o=("${mb[@]}" "${edge[@]}" "${rand[@]}" "${own_o[@]}")
all_k=("${mb[@]}" "${edge[@]}" "${rand[@]}" "${own_k[@]}")
pair_files=("${own_k[@]}" "${rand[@]}")
{
    node "$REF" "$TT" --o200k "$O/o200k_base.tiktoken" "${all_o[@]}" >"$TMP/o.ref" 2>"$TMP/o.err"
    node "$REF" "$TT" --kimi "$K" "${all_k[@]}" >"$TMP/k.ref" 2>"$TMP/k.err"
    node "$REF" "$TT" --kimi "$P" "${pair_files[@]}" >"$TMP/p.ref" 2>"$TMP/p.err"
    node "$REF" --ordinary "$TT" --kimi "$K" "$TMP/own_k/specials" "$TMP/own_k/r0" >"$TMP/k_plain.ref" 2>>"$TMP/k.err"
} &
refs=$!
enc() { local j=$1; shift; "$TOOL" tokenizer encode --special --tokenizer "$j" "$@"; }
enc "$O/o200k_base.tiktoken" "${all_o[@]}" >"$TMP/o.tsr"
enc "$K" "${all_k[@]}" >"$TMP/k.tsr"
enc "$P" "${pair_files[@]}" >"$TMP/p.tsr"
"$TOOL" tokenizer encode --tokenizer "$K" "$TMP/own_k/specials" "$TMP/own_k/r0" >"$TMP/k_plain.tsr"
wait "$refs"
for x in o k p; do [[ -s $TMP/$x.err ]] && sed "s/^/# $x: node: /" "$TMP/$x.err"; done

nb=${#mb[@]} ne=${#edge[@]} nr=${#rand[@]}
for x in o k; do
    [[ $x == o ]] && own=("${own_o[@]}") name="o200k_base.tiktoken" || own=("${own_k[@]}") name="Kimi (tiktoken.model)"
    for y in ref tsr; do split_parts "$TMP/$x.$y" "$TMP/$x.%s.$y" "$nb" "$ne" "$nr" "${#own[@]}"; done
    same_lines "$x brown" "$TMP/$x.brown.ref" "$TMP/$x.brown.tsr" "${mb[@]}"
    tap_check $? "$name: Brown corpus, $nb files, $(wc -w <"$TMP/$x.brown.ref") tokens identical to tiktoken"
    same_lines "$x edge" "$TMP/$x.edge.ref" "$TMP/$x.edge.tsr" "${edge[@]}"
    tap_check $? "$name: adversarial text ($ne files: scripts, emoji, CJK, digits, whitespace, contractions, invalid UTF-8) identical"
    same_lines "$x rand" "$TMP/$x.rand.ref" "$TMP/$x.rand.tsr" "${rand[@]}"
    tap_check $? "$name: random text ($nr files, seed 4242) identical"
    same_lines "$x own" "$TMP/$x.own.ref" "$TMP/$x.own.tsr" "${own[@]}"
    tap_check $? "$name: the tiktoken cases (U+0085, U+FEFF, 'ſ, Unicode 16/17, Han runs, specials, 8 random) and 1 MB large: $(wc -w <"$TMP/$x.own.ref") tokens identical"
done
same_lines pairs "$TMP/p.ref" "$TMP/p.tsr" "${pair_files[@]}"
tap_check $? "pairs ($pool_n ranks: piece boundaries show in the ids), Kimi's pattern: the tiktoken cases, large and random identical"
ntok=$(awk '{ n += NF } END { print n }' "$TMP/p.ref")
[[ $ntok -gt 100000 ]]
tap_check $? "pairs: the comparison covers $ntok tokens"
same_lines "kimi plain" "$TMP/k_plain.ref" "$TMP/k_plain.tsr" "$TMP/own_k/specials" "$TMP/own_k/r0"
tap_check $? "Kimi without --special: special tokens are text, as tiktoken's encode_ordinary"

# the special tokens: one id each, where the config puts them; reserved ones named as Kimi names them
printf '[BOS]<|im_end|>[EOS]<|im_middle|><|reserved_token_%d|>[PAD]' $((NB + 5)) >"$TMP/sp.txt"
got=$(enc "$K" "$TMP/sp.txt")
want="$NB $((NB + 2)) $((NB + 1)) $((NB + 17)) $((NB + 5)) $((NB + 255))"
[[ $got == "$want" ]]
tap_check $? "Kimi's special tokens: [BOS] <|im_end|> [EOS] <|im_middle|> <|reserved_token_$((NB + 5))|> [PAD] = $got (want $want)"
printf '<|endoftext|><|endofprompt|>' >"$TMP/sp_o.txt"
got=$(enc "$O/o200k_base.tiktoken" "$TMP/sp_o.txt")
[[ $got == "199999 200018" ]]
tap_check $? "o200k_base.tiktoken: <|endoftext|> <|endofprompt|> = $got (tiktoken's 199999 200018)"

# round trips, through decode_lines (one tessera decode for all)
rt=("${mb[@]:0:5}" "$TMP/own_k/han" "$TMP/own_k/engine" "$TMP/own_k/specials" "$TMP/own_k/large" "$E/emoji" "$E/whitespace")
sep_text "$TMP/sep.txt"
enc "$K" "${rt[@]}" >"$TMP/rt.ids"
decode_lines "$TMP/rt.ids" "$TMP/rt" "$K" "${rt[@]}"
round_trips "" "$TMP/rt" "${rt[@]}"
tap_check $? "Kimi: decode(encode(x)) == x (5 Brown files, Han, engine cases, specials, 1 MB large, emoji, whitespace)"

# the same tokenizer by its tiktoken.model, and with CRLF line ends
mkdir -p "$TMP/crlf"
sed 's/$/\r/' "$K/tiktoken.model" >"$TMP/crlf/tiktoken.model"
cp "$K/tokenizer_config.json" "$TMP/crlf/"
a=$(enc "$K/tiktoken.model" "${mb[0]}" "$TMP/own_k/han" | md5sum) b=$(enc "$TMP/crlf" "${mb[0]}" "$TMP/own_k/han" | md5sum)
c=$(enc "$K" "${mb[0]}" "$TMP/own_k/han" | md5sum)
[[ $a == "$b" && $a == "$c" ]]
tap_check $? "the directory, its tiktoken.model and a CRLF copy give the same ids"

# prep: Kimi's documents end with its eos_token [EOS] (no <|endoftext|>), vocabulary = ranks + 256
mkdir -p "$TMP/in"
cp "${mb[0]}" "${mb[1]}" "$TMP/in/"
"$TOOL" prep --tokenizer "$K" --quiet --val-fraction 0 --out "$TMP/ds" "$TMP/in" >"$TMP/prep.log" 2>&1
tap_check $? "prep --tokenizer KIMI_DIR over 2 Brown files: exit 0 $(head -c 300 "$TMP/prep.log")"
enc "$K" "$TMP"/in/* >"$TMP/in.ids"
out=$(cd "$TSR_ROOT/tests/prep" && "$PY3" - "$TMP/ds/train" "$TMP/in.ids" "$((NB + 1))" <<'PY'
import sys
from prep_check import read_documents
d, ids_file, eos = sys.argv[1], sys.argv[2], int(sys.argv[3])
meta, _, docs, cur = read_documents(d, eos)
want = [[int(v) for v in l.split()] for l in open(ids_file)]
print(meta["vocab_size"], len(docs), "same" if not cur and sorted(docs) == sorted(want) else "differ")
PY
)
read -r vocab ndocs same <<<"$out"
[[ $vocab == $((NB + 256)) && $ndocs == 2 && $same == same ]]
tap_check $? "prep's dataset: vocabulary $vocab (ranks + 256), 2 documents, each the encode ids + [EOS] ($out)"

# malformed files: exit 2, a message naming the file and the line or key
bad() { # bad NAME EXPECTED_MESSAGE_PART: the tokenizer $TMP/bad/NAME (a directory or a file) is refused
    local rc
    "$TOOL" tokenizer encode --tokenizer "$TMP/bad/$1" "$TMP/sp.txt" >"$TMP/bad.out" 2>&1
    rc=$?
    ((rc == 2)) && grep -qF -- "$2" "$TMP/bad.out" || { tap_diag "$1: exit $rc: $(head -c 300 "$TMP/bad.out")"; return 1; }
}
mkbad() { # mkbad NAME: a copy of the pairs directory to spoil
    mkdir -p "$TMP/bad/$1"; cp "$P/tiktoken.model" "$P/tokenizer_config.json" "$TMP/bad/$1/"
}
mkbad b64; sed -i '300s/^[^ ]*/@@@@/' "$TMP/bad/b64/tiktoken.model"
mkbad dup_rank; sed -i '300s/ [0-9]*$/ 7/' "$TMP/bad/dup_rank/tiktoken.model"
mkbad gap; sed -i '300s/ [0-9]*$/ 99999999/' "$TMP/bad/gap/tiktoken.model"
mkbad no_byte; awk 'NR != 66 { if (NR > 66) $2 = $2 - 1; print }' "$P/tiktoken.model" >"$TMP/bad/no_byte/tiktoken.model"
mkbad dup_tok; sed -i "300s/^[^ ]*/$(sed -n '301s/ .*//p' "$P/tiktoken.model")/" "$TMP/bad/dup_tok/tiktoken.model"
mkbad long; printf '%s %d\n' "$(head -c 1100 /dev/zero | base64 -w0)" "$pool_n" >>"$TMP/bad/long/tiktoken.model"
mkbad class; echo '{"tokenizer_class": "PreTrainedTokenizerFast"}' >"$TMP/bad/class/tokenizer_config.json"
mkbad sp_id; echo '{"tokenizer_class": "TikTokenTokenizer", "added_tokens_decoder": {"5": {"content": "<x>"}}}' >"$TMP/bad/sp_id/tokenizer_config.json"
mkbad sp_dup; echo "{\"tokenizer_class\": \"TikTokenTokenizer\", \"added_tokens_decoder\": {\"$((pool_n + 1))\": {\"content\": \"<|reserved_token_$((pool_n + 2))|>\"}}}" >"$TMP/bad/sp_dup/tokenizer_config.json"
mkbad norank; sed -i '300s/ [0-9]*$//' "$TMP/bad/norank/tiktoken.model"
mkbad cfg_json; echo '{"tokenizer_class": "TikTokenTokenizer",' >"$TMP/bad/cfg_json/tokenizer_config.json"
mkbad dec_type; echo '{"tokenizer_class": "TikTokenTokenizer", "added_tokens_decoder": []}' >"$TMP/bad/dec_type/tokenizer_config.json"
mkbad sp_empty; echo "{\"tokenizer_class\": \"TikTokenTokenizer\", \"added_tokens_decoder\": {\"$pool_n\": {\"content\": \"\"}}}" >"$TMP/bad/sp_empty/tokenizer_config.json"
mkbad no_cfg; rm "$TMP/bad/no_cfg/tokenizer_config.json"
mkdir -p "$TMP/bad/name" && cp "$P/tiktoken.model" "$TMP/bad/name/cl100k_base.tiktoken"
mkdir -p "$TMP/bad/count" && cp "$P/tiktoken.model" "$TMP/bad/count/o200k_base.tiktoken"
b=0
bad b64 "tiktoken.model: line 300: the token '@@@@': expected 1 to 1024 bytes in standard base64" || b=1
bad dup_rank "line 300: rank 7 given twice (line 8 too)" || b=1
bad gap "line 300: the rank '99999999': expected a number below $pool_n" || b=1
bad no_byte "no token for the byte 0x41 (byte-level BPE needs all 256)" || b=1
bad dup_tok "lines 300 and 301 give the same token" || b=1
bad long "expected 1 to 1024 bytes" || b=1
bad class "tokenizer_config.json: tokenizer_class / auto_map.AutoTokenizer: expected TikTokenTokenizer" || b=1
bad sp_id "added_tokens_decoder: id '5': expected $pool_n..$((pool_n + 255))" || b=1
bad sp_dup "added_tokens_decoder: '<|reserved_token_$((pool_n + 2))|>' names both $((pool_n + 1)) and $((pool_n + 2))" || b=1
bad norank "tiktoken.model: line 300: expected a token in base64, a space, its rank" || b=1
bad cfg_json "tokenizer_config.json: not valid JSON at byte" || b=1
bad dec_type "tokenizer_config.json: added_tokens_decoder: expected an object" || b=1
bad sp_empty "added_tokens_decoder.$pool_n.content: expected a string of 1 to 256 bytes" || b=1
bad no_cfg "tokenizer_config.json" || b=1
bad name/cl100k_base.tiktoken "unknown tiktoken encoding 'cl100k_base'" || b=1
bad count/o200k_base.tiktoken "expected the 199,998 tokens of o200k_base" || b=1
tap_check $b "16 malformed tiktoken tokenizers refused (exit 2, naming the file and the line or key)"
mkdir -p "$TMP/bad/empty" && : >"$TMP/bad/empty/tiktoken.model" && cp "$P/tokenizer_config.json" "$TMP/bad/empty/"
bad empty "tiktoken.model: no tokens"
tap_check $? "an empty tiktoken.model is refused"
rm -rf "$TMP/ds2"
"$TOOL" prep --tokenizer "$TMP/bad/b64" --quiet --out "$TMP/ds2" "$TMP/in" >"$TMP/prep2.log" 2>&1
rc=$?
[[ $rc == 2 && ! -e $TMP/ds2 ]]
tap_check $? "prep with a malformed tiktoken.model exits 2 and writes nothing (exit $rc)"
tap_done
