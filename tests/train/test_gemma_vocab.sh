#!/usr/bin/env bash
# test_gemma_vocab.sh — Gemma 3 trained on its own tokenizer's data (issue 79 items 10 and 11), on
# a tiny Gemma-3-shaped directory (tests/train/gemma_vocab_fixture.py): a model of V = 320 rows
# whose tokenizer.json has V + 1 ids (its last, <image_soft_token>, a special token text never
# encodes to: google/gemma-3-1b-pt's 262,145 ids over 262,144 rows) and an instruct
# tokenizer_config.json (eos_token <end_of_turn>, bos_token <bos>).
#  - prep ends each document with the family's end of a document, <eos> (1), not the config's
#    <end_of_turn> (5); --bos writes <bos> (2); --eos TOKEN picks another; the index records the
#    document end (document_end) and the largest id (max_token_id < V) beside vocab_size V + 1; a
#    tokenizer with no end of a document needs --eos or --no-eos, one with no start refuses --bos;
#  - tessera-train --init-from DIR on that data trains (it stopped with exit 1: the dataset's
#    vocabulary V + 1 > model.vocab_size) and says in one line the id the model cannot produce;
#    data holding id V is refused (exit 1) naming both; without the max_token_id note the ids
#    read by data.verify decide, and with neither the vocabulary's bound (refused); tessera eval
#    checks the same (it read ids past the embedding's rows and printed a loss);
#  - the document mask's token (model.eot_token) against the data's document end: another one is
#    refused (exit 1) naming both ids and tokens, before the run directory is made;
#  - ckpt export --format hf of the run carries the V + 1 tokenizer (byte copy), saying which id
#    is beyond the rows (it stopped with exit 1); a tokenizer whose extra id is an ordinary token
#    is still refused (exit 1); a generation_config.json beside it over its 1 MiB is refused
#    (exit 2) before a file is written;
#  - with Gemma 3's own files (data/npm/chat/gemma3, an IT config), prep's document end is
#    configs/gemma3-1b.cfg's eot_token.
# Skips (77) without torch (the fixture's weights).
source "$(dirname "$0")/../lib.sh"
for x in "$TOOL" "$TRAIN"; do [[ -x $x ]] || { echo "$x missing: run make"; exit 77; }; done
"$PY3" -c 'import torch, numpy' 2>/dev/null || { echo "torch/numpy missing: the fixture needs them"; exit 77; }
tsr_tmpdir
tap_plan 17
G=$TMP/g/model
"$PY3" "$TSR_ROOT/tests/train/gemma_vocab_fixture.py" "$TMP/g" >/dev/null &&
    "$PY3" "$TSR_ROOT/tests/train/gemma_vocab_fixture.py" "$TMP/o" --ordinary >/dev/null ||
    { echo "# the fixture could not be written"; exit 1; }
mkdir -p "$TMP/text"
for k in 1 2 3 4 5 6; do
    for j in $(seq 1 40); do printf 'the cat sat on the mat and the dog ate %d of the nine ants\n' $((j * k)); done >"$TMP/text/doc$k.txt"
done
ids() { "$PY3" -c 'import sys; sys.path.insert(0, sys.argv[1]); from prep_check import read_dataset; print(*read_dataset(sys.argv[2])[0])' "$TSR_ROOT/tests/prep" "$1"; }
note() { sed -n "s/^# $2\t\([0-9]*\)\t.*/\1/p" "$1/index.tsv"; }

# ---- prep: the document end and start, and what the index records (item 11) ----
"$TOOL" prep --quiet --val-fraction 0 --tokenizer "$G/tokenizer.json" --out "$TMP/d" "$TMP/text" &&
    t=($(ids "$TMP/d/train")) && ends=$(printf '%s\n' "${t[@]}" | grep -cx 1)
[[ ${t[-1]} == 1 && $ends == 6 && $(note "$TMP/d/train" document_end) == 1 &&
   $(printf '%s\n' "${t[@]}" | grep -cx 5) == 0 ]]
tap_check $? "prep: each of the 6 documents ends with <eos> (1), not the config's eos_token <end_of_turn> (5); index.tsv notes document_end 1"
max=$(note "$TMP/d/train" max_token_id)
[[ -n $max ]] && ((max < 320)) && grep -q "^vocab_size	321$" "$TMP/d/train/index.tsv"
tap_check $? "the index records the largest id ($max < 320) beside the tokenizer's vocab_size 321"
"$TOOL" prep --quiet --val-fraction 0 --bos --tokenizer "$G/tokenizer.json" --out "$TMP/db" "$TMP/text" &&
    t=($(ids "$TMP/db/train"))
[[ ${t[0]} == 2 && ${t[-1]} == 1 && $(printf '%s\n' "${t[@]}" | grep -cx 2) == 6 ]]
tap_check $? "prep --bos: each document starts with <bos> (2) (it was the eos_token, <end_of_turn>)"
"$TOOL" prep --quiet --val-fraction 0 --eos '<end_of_turn>' --tokenizer "$G/tokenizer.json" --out "$TMP/de" "$TMP/text" &&
    t=($(ids "$TMP/de/train"))
[[ ${t[-1]} == 5 && $(note "$TMP/de/train" document_end) == 5 ]]
"$TOOL" prep --quiet --eos '<nope>' --tokenizer "$G/tokenizer.json" --out "$TMP/dn" "$TMP/text" 2>"$TMP/dn.err"
rc=$?
[[ $rc == 1 && ! -e $TMP/dn ]] && grep -q "\-\-eos '<nope>': the tokenizer .* has no such special token" "$TMP/dn.err"
tap_check $? "prep --eos '<end_of_turn>' ends documents with 5 and notes it; an unknown --eos is exit 1 ($rc), nothing written"

# a tokenizer with neither an end nor a start of a document (no special token at all)
"$TOOL" tokenizer train --quiet --vocab-size 300 --out "$TMP/plain.tsr" "$TMP/text"
"$TOOL" prep --quiet --tokenizer "$TMP/plain.tsr" --out "$TMP/p1" "$TMP/text" 2>"$TMP/p1.err"
rc1=$?
"$TOOL" prep --quiet --no-eos --bos --tokenizer "$TMP/plain.tsr" --out "$TMP/p2" "$TMP/text" 2>"$TMP/p2.err"
rc2=$?
((rc1 == 1 && rc2 == 1)) && grep -q "has no end of a document .* (name one with --eos TOKEN, or pass --no-eos)" "$TMP/p1.err" &&
    grep -q "\-\-bos: tokenizer .* has no start of a document .*: drop --bos" "$TMP/p2.err" &&
    [[ ! -e $TMP/p1 && ! -e $TMP/p2 ]] &&
    "$TOOL" prep --quiet --val-fraction 0 --no-eos --tokenizer "$TMP/plain.tsr" --out "$TMP/p3" "$TMP/text" &&
    [[ -z $(note "$TMP/p3/train" document_end) ]]
tap_check $? "a tokenizer with no end of a document needs --eos or --no-eos (exit $rc1), one with no start refuses --bos (exit $rc2), nothing written; --no-eos notes no document_end"

# ---- training --init-from the directory (items 10, 11) ----
recipe() { # NAME DATA [EOT]: a recipe without the model's sizes (config.json gives them)
    cat >"$TMP/$1.cfg" <<CFG
run_dir = "$TMP/run-$1"; seed = 1; max_duration = "1ba"; global_batch = 2; micro_batch = 1;
seq_len = 16; eval_interval = "0ba"; save_interval = "1ba"; threads = 1;
model = { attn_mask = "document"; eot_token = ${3:-1}; };
optim = { lr = 1e-3; warmup = "0ba"; };
data = { train = "$2"; verify = ${VERIFY:-true}; };
sample = { tokens = 0; };
CFG
}
recipe ok "$TMP/d/train"
ranks 1 "$TRAIN" --config "$TMP/ok.cfg" --init-from "$G" >"$TMP/ok.log" 2>&1
rc=$?
((rc == 0)) && [[ -e $TMP/run-ok/latest ]] &&
    grep -q "its vocabulary has 321 ids, the model 320 (model.vocab_size): the model cannot produce id 320 (<image_soft_token>), which the data never holds (its largest id: $max, " "$TMP/ok.log"
tap_check $? "tessera-train --init-from DIR on the tokenizer's data trains (exit $rc) and says the one id the model cannot produce"
grep "cannot produce" "$TMP/ok.log" | head -1 | sed 's/^/# /'

recipe eot5 "$TMP/d/train" 5
ranks 1 "$TRAIN" --config "$TMP/eot5.cfg" --init-from "$G" >"$TMP/eot5.log" 2>&1
rc=$?
((rc == 1)) && [[ ! -e $TMP/run-eot5 ]] &&
    grep -q "its documents end with id 1 (<eos>) (tessera prep's document end: the document_end of its index.tsv), but model.eot_token = 5 (<end_of_turn>) is where model.attn_mask = \"document\" splits them" "$TMP/eot5.log"
tap_check $? "the recipe's document-mask token (5) against the data's document end (1): exit 1 ($rc) naming both ids and tokens, no run directory"
recipe de "$TMP/de/train" 5
ranks 1 "$TRAIN" --config "$TMP/de.cfg" --init-from "$G" >"$TMP/de.log" 2>&1
tap_check $? "the same recipe on data prepped with --eos '<end_of_turn>' trains (the two agree)"

# data that holds id 320: refused, naming the largest id and model.vocab_size
printf '%s\n' "$(seq -s ' ' 0 15) 320 $(seq -s ' ' 16 40)" >"$TMP/hi.txt"
"$TOOL" shard --quiet --vocab 321 --out "$TMP/hi" "$TMP/hi.txt" &&
    recipe hi "$TMP/hi" && ranks 1 "$TRAIN" --config "$TMP/hi.cfg" --init-from "$G" >"$TMP/hi.log" 2>&1
rc=$?
((rc == 1)) && [[ ! -e $TMP/run-hi ]] &&
    grep -q "the dataset holds token ids up to 320 (.*its vocabulary has 321), but model.vocab_size = 320: the model must cover every token id the data holds" "$TMP/hi.log"
tap_check $? "data whose largest id is 320 >= model.vocab_size: exit 1 ($rc) naming both, no run directory"

ranks 1 "$TOOL" eval --ckpt "$TMP/run-ok" --val "$TMP/d/train" >"$TMP/ev.log" 2>&1 &&
    ranks 1 "$TOOL" eval --ckpt "$TMP/run-ok" --val "$TMP/hi" >"$TMP/evhi.log" 2>&1
rc=$?
((rc == 1)) && grep -q "hi: the dataset holds token ids up to 320 .* but model.vocab_size = 320" "$TMP/evhi.log"
tap_check $? "tessera eval scores the tokenizer's data and refuses data holding id 320 (exit $rc) before reading past the embedding's rows"

# an index written before the max_token_id note: the ids read by data.verify decide; with
# data.verify = false nothing tells, and the vocabulary's bound (321 ids) is refused
cp -r "$TMP/d" "$TMP/old" && sed -i '/^# max_token_id\t/d' "$TMP/old/train/index.tsv"
recipe old "$TMP/old/train"
ranks 1 "$TRAIN" --config "$TMP/old.cfg" --init-from "$G" >"$TMP/old.log" 2>&1 &&
    grep -q "its largest id: $max, every token read (data.verify)" "$TMP/old.log"
tap_check $? "no max_token_id note, data.verify = true: the ids read decide (largest $max), it trains"
VERIFY=false recipe oldnv "$TMP/old/train"
ranks 1 "$TRAIN" --config "$TMP/oldnv.cfg" --init-from "$G" >"$TMP/oldnv.log" 2>&1
rc=$?
((rc == 1)) && grep -q "holds token ids up to 320 (its vocab_size - 1: the index records no max_token_id and data.verify = false read no token" "$TMP/oldnv.log"
tap_check $? "no note and data.verify = false: the vocabulary's bound decides, refused (exit $rc)"

# ---- export carries the tokenizer (item 10) ----
"$TOOL" ckpt export --format hf "$TMP/run-ok/latest" "$TMP/hf" >"$TMP/exp.log" 2>&1
rc=$?
((rc == 0)) && cmp -s "$G/tokenizer.json" "$TMP/hf/tokenizer.json" &&
    grep -q "(321 tokens, eos_token_id 5; 1 id beyond the model's 320 rows, 320 (<image_soft_token>), special tokens the model cannot produce" "$TMP/exp.log" &&
    "$PY3" -c 'import json, sys; sys.exit(json.load(open(sys.argv[1]))["vocab_size"] != 320)' "$TMP/hf/config.json"
tap_check $? "ckpt export --format hf: the 321-id tokenizer is copied byte for byte beside vocab_size 320 (exit $rc), the id beyond the rows said"
grep "beyond the model" "$TMP/exp.log" | sed 's/^/# /'
"$TOOL" ckpt export --format hf --tokenizer "$TMP/o/model/tokenizer.json" "$TMP/run-ok/latest" "$TMP/hf-o" >"$TMP/expo.log" 2>&1
rc=$?
((rc == 1)) && [[ ! -e $TMP/hf-o ]] &&
    grep -q "has 321 tokens, the model's vocabulary only 320 (model.vocab_size), and its id 320 ('zz') is an ordinary token" "$TMP/expo.log"
tap_check $? "a tokenizer whose id 320 is an ordinary token is still refused (exit $rc), nothing written"
mkdir -p "$TMP/gbig" && cp "$G/tokenizer.json" "$TMP/gbig/" && # its generation_config.json: 1 MiB + 1
    truncate -s $((1024 * 1024 + 1)) "$TMP/gbig/generation_config.json"
"$TOOL" ckpt export --format hf --tokenizer "$TMP/gbig/tokenizer.json" "$TMP/run-ok/latest" "$TMP/hf-big" >"$TMP/expbig.log" 2>&1
rc=$?
((rc == 2)) && [[ ! -e $TMP/hf-big ]] &&
    grep -qF "generation_config.json: 1048577 bytes, larger than 1048576 bytes, the most this file may hold" "$TMP/expbig.log"
tap_check $? "a generation_config.json of 1 MiB + 1 beside the tokenizer: refused (exit $rc) before anything is written"
"$TOOL" ckpt import "$TMP/hf" "$TMP/back.h5" >/dev/null 2>&1
tap_check $? "the export imports back (tessera ckpt import)"

# the real Gemma 3 files (an IT tokenizer_config.json) against the shipped recipe
REAL=${TSR_DATA_DIR:-$TSR_ROOT/data/npm}/chat/gemma3
if [[ -f $REAL/tokenizer.json ]]; then
    eot=$(sed -n 's/^ *eot_token = \([0-9]*\);.*/\1/p' "$TSR_ROOT/configs/gemma3-1b.cfg")
    "$TOOL" prep --quiet --val-fraction 0 --bos --tokenizer "$REAL/tokenizer.json" --out "$TMP/real" "$TMP/text/doc1.txt" &&
        t=($(ids "$TMP/real/train"))
    [[ -n $eot && $(note "$TMP/real/train" document_end) == "$eot" && ${t[-1]} == "$eot" && ${t[0]} == 2 ]]
    tap_check $? "Gemma 3's own files: prep's document end ($(note "$TMP/real/train" document_end)) is configs/gemma3-1b.cfg's eot_token ($eot), --bos writes <bos> (${t[0]})"
else
    tap_skip "Gemma 3's own files against configs/gemma3-1b.cfg" "$REAL absent (./INSTALL --ensure fetches it)"
fi
tap_done
