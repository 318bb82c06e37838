#!/usr/bin/env bash
# test_gpt2_identity.sh — `tessera tokenizer encode` (gpt2) is token-for-token identical to the
# reference encoder (npm gpt-3-encoder's Encoder.js run by node) on half the Brown corpus (the
# even-indexed 250 files, from all 15 genres: the whole corpus took 40 CPU-s of CI), edge cases
# (Unicode classes, emoji, CJK, whitespace runs, contractions, invalid UTF-8, empty input,
# <|endoftext|>) and seeded random byte strings; decode(encode(x)) == x for valid UTF-8 and == the
# U+FFFD-replaced text for invalid UTF-8. Skips (77) without node or the npm files (./INSTALL).
# CI time: one node run for the reference's ids of all the files and one encode (the Brown files
# first, then edge, random bytes, random UTF-8: split by line), and the round trips decode the ids
# the identity checks compared (decode_lines of hf_texts.sh: three tessera runs, not an encode and
# a decode per file, and one node for the U+FFFD-replaced texts, not one per file): it took 40 CPU-s,
# most of them in 130 tessera and 26 node starts.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/hf_texts.sh"
TESSERA=${TSR_TESSERA:-$TOOL}
GPT2=$NPM_DIR/gpt2
REF=$TSR_ROOT/tests/tokenizer/ref_encode.js
command -v node >/dev/null || { echo "node not found (Debian: nodejs; ./INSTALL)"; exit 77; }
for f in encoder.json vocab.bpe Encoder.js; do
    [[ -f $GPT2/$f ]] || { echo "$GPT2/$f missing: run ./INSTALL --ensure (fetches it with npm)"; exit 77; }
done
compgen -G "$BROWN/c[a-r][0-9][0-9]" >/dev/null || { echo "$BROWN: Brown corpus missing: run ./INSTALL --ensure"; exit 77; }
"$TESSERA" tokenizer encode --help >/dev/null 2>&1 || { echo "$TESSERA has no 'tokenizer' command"; exit 77; }
export TSR_DATA_DIR=$NPM_DIR
tsr_tmpdir
tap_plan 9

enc() { "$TESSERA" tokenizer encode --tokenizer "$GPT2" "$@"; }
# ---- the Brown files (half), edge cases, random inputs ----
all_brown=("$BROWN"/c[a-r][0-9][0-9]) brown=()
for ((i = 0; i < ${#all_brown[@]}; i += 2)); do brown+=("${all_brown[i]}"); done
# ---- edge cases ----
E=$TMP/edge; mkdir -p "$E"
printf 'Ünïcödé Ελληνικά Русский العربية हिन्दी ١٢٣ ४५६ Ⅻ ½ ²³ 𝟘𝟙 ǅ ʰ 〇' > "$E/unicode"
printf '🎉👍🏽 👨‍👩‍👧 ❤️ 🇫🇷 a🎉b 1🎉2 ©®™' > "$E/emoji"
printf '日本語のテキスト。中文文本，한국어 텍스트 ｆｕｌｌｗｉｄｔｈ１２３' > "$E/cjk"
printf 'a  b   c\t\td\n\ne \n \n\r\n  \xc2\xa0\xe3\x80\x80x \xe2\x80\x83 y\xe2\x80\xa8z\xef\xbb\xbfw   ' > "$E/whitespace"
printf '   leading\n\n\n' > "$E/leading"
printf '  \n\t ' > "$E/only_space"
printf "it's they're we've I'm you'll he'd can't IT'S THEY'RE WE'VE I'M YOU'LL HE'D CAN'T 'sup 'S 'll'll ''s x'd 're're 'Ve" > "$E/contractions"
printf '12345678901234567890 3.14159 1,000,000 0x1F +-*/ ==== ...... !!!??? ([{<>}])' > "$E/numbers_punct"
printf '["a","b"],["c"] ",," x,,"y" ]],[[ "),,"' > "$E/json_commas"
printf 'Hello<|endoftext|>World <|endoftext|> x<|endoftext|>' > "$E/endoftext"
printf '\xef\xbb\xbfBOM first' > "$E/bom"
: > "$E/empty"
printf 'ok\xff\xfe \xc0\xaf \xed\xa0\x80 \xf0\x90 \x80\x80 \xe0\x80\x80 \xf4\x90\x80\x80 \xef\xbf\xbd a\xe2\x82' > "$E/invalid_utf8"
printf 'caf\xe9 na\xefve \xa0x' > "$E/latin1"
edge=("$E"/*)

# ---- seeded random inputs: raw bytes (mostly invalid UTF-8) and random valid UTF-8 ----
R=$TMP/rand; mkdir -p "$R/bytes" "$R/utf8"
node -e '
const fs = require("fs"); let s = 12345;
const rnd = n => { s = (s * 1103515245 + 12345) % 2147483648; return s % n; };
const pool = [..." \t\n\r  aAzZ09'"'"'sdlmtrev.,;:!?-\"()[]{}<>|@#$%^&*_+=~`/\\"].map(c => c.codePointAt(0))
  .concat([0xa0, 0x3000, 0x2003, 0xfeff, 0xe9, 0x3b1, 0x416, 0x5d0, 0x627, 0x661, 0x966, 0x4e2d, 0x65e5,
           0xac00, 0x1f389, 0x1f44d, 0x1f3fd, 0x200d, 0x2764, 0xfe0f, 0x2167, 0xbd, 0x1d7d8, 0xfffd, 0x10ffff]);
for (let f = 0; f < 24; f++) {
  const n = 1 + rnd(3000), b = Buffer.alloc(n);
  for (let i = 0; i < n; i++) b[i] = rnd(4) ? 32 + rnd(95) : rnd(256);
  fs.writeFileSync(process.argv[1] + "/bytes/r" + f, b);
  let t = ""; const m = 1 + rnd(2000);
  for (let i = 0; i < m; i++) t += String.fromCodePoint(pool[rnd(pool.length)]);
  fs.writeFileSync(process.argv[1] + "/utf8/u" + f, t);
}
// long pieces (tessera merges pieces of 96+ bytes with a heap): punctuation, letters, digits
const runs = { punct: "!\"#$%&()*+,-./:;<=>?@[]^_`{|}~", alpha: "etaoinshrdlucmfwyp", digit: "0123456789" };
for (const [name, cs] of Object.entries(runs)) {
  let t = ""; for (let i = 0; i < 4000; i++) t += cs[rnd(cs.length)];
  fs.writeFileSync(process.argv[1] + "/utf8/long_" + name, t);
}' "$R"
rb=("$R"/bytes/*) ru=("$R"/utf8/*)

# ---- the reference and tessera on all of them, each in one run; split by line ----
node "$REF" "$GPT2" "${brown[@]}" "${edge[@]}" "${rb[@]}" "${ru[@]}" > "$TMP/all.ref"
enc "${brown[@]}" "${edge[@]}" "${rb[@]}" "${ru[@]}" > "$TMP/all.tsr"
first=1
for g in brown:${#brown[@]} edge:${#edge[@]} rb:${#rb[@]} ru:${#ru[@]}; do
    for x in ref tsr; do sed -n "$first,$((first + ${g#*:} - 1))p" "$TMP/all.$x" > "$TMP/${g%%:*}.$x"; done
    first=$((first + ${g#*:}))
done
[[ $(wc -l < "$TMP/all.ref") == $((first - 1)) ]] || tap_diag "node wrote $(wc -l < "$TMP/all.ref") lines for $((first - 1)) files"
same_lines brown "$TMP/brown.ref" "$TMP/brown.tsr" "${brown[@]}"
tap_check $? "Brown corpus: ${#brown[@]} files, $(wc -w < "$TMP/brown.ref") tokens identical to the JS encoder"
same_lines edge "$TMP/edge.ref" "$TMP/edge.tsr" "${edge[@]}"
tap_check $? "edge cases (${#edge[@]} files: Unicode, emoji, CJK, whitespace, contractions, invalid UTF-8, empty, <|endoftext|>) identical"
same_lines random-bytes "$TMP/rb.ref" "$TMP/rb.tsr" "${rb[@]}"
tap_check $? "random byte strings (${#rb[@]} files, seed 12345) identical"
same_lines random-utf8 "$TMP/ru.ref" "$TMP/ru.tsr" "${ru[@]}"
tap_check $? "random valid UTF-8 (${#ru[@]} files incl. 4000-byte pieces, seed 12345) identical"

# ---- the fast reference loop equals Encoder.js's own encode() ----
node "$REF" --exact "$GPT2" "${edge[@]}" "${rb[@]}" "${ru[@]}" > "$TMP/exact.ref"
cat "$TMP/edge.ref" "$TMP/rb.ref" "$TMP/ru.ref" | cmp -s - "$TMP/exact.ref"
tap_check $? "ref_encode.js's loop gives the ids of Encoder.js's encode() (edge + random files)"

# ---- round trips ----
cat "${brown[@]}" > "$TMP/brown.txt"
enc "$TMP/brown.txt" | "$TESSERA" tokenizer decode --tokenizer "$GPT2" - | cmp -s - "$TMP/brown.txt"
tap_check $? "Brown corpus (all files concatenated): decode(encode(x)) == x"
# decode of the ids compared above (edge, random bytes, random UTF-8: one decode run); the
# expected text of an invalid UTF-8 file is node's reading of it (one node for all)
cat "$TMP/edge.tsr" "$TMP/rb.tsr" "$TMP/ru.tsr" > "$TMP/rt.ids"
TOOL=$TESSERA decode_lines "$TMP/rt.ids" "$TMP/rt" "$GPT2" "${edge[@]}" "${rb[@]}" "${ru[@]}"
rt_ok=0
for f in "${edge[@]}" "${ru[@]}"; do
    [[ $f == */invalid_utf8 || $f == */latin1 ]] && continue
    cmp -s "$TMP/rt/${f##*/}" "$f" || { tap_diag "round trip differs: $f"; rt_ok=1; }
done
tap_check $rt_ok "valid UTF-8 edge cases and random text: decode(encode(x)) == x"
bad=("$E/invalid_utf8" "$E/latin1" "${rb[@]}")
mkdir -p "$TMP/fixed"
node -e 'const fs = require("fs"), path = require("path");
for (const f of process.argv.slice(2)) fs.writeFileSync(path.join(process.argv[1], path.basename(f)), fs.readFileSync(f, "utf8"));' \
    "$TMP/fixed" "${bad[@]}"
rt_ok=0
for f in "${bad[@]}"; do
    cmp -s "$TMP/rt/${f##*/}" "$TMP/fixed/${f##*/}" || { tap_diag "invalid UTF-8 round trip differs: $f"; rt_ok=1; }
done
tap_check $rt_ok "invalid UTF-8: decode(encode(x)) == x with each maximal ill-formed subpart as U+FFFD (node's reading)"

# ---- special tokens ----
n_eot=$(enc --special "$E/endoftext" | tr ' ' '\n' | grep -c '^50256$')
n_plain=$(enc "$E/endoftext" | tr ' ' '\n' | grep -c '^50256$')
[[ $n_eot == 3 && $n_plain == 0 ]]
tap_check $? "--special: <|endoftext|> -> 50256 (3 of 3; without --special: $n_plain)"
tap_done
