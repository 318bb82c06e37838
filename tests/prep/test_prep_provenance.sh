#!/usr/bin/env bash
# What a dataset says about where it came from (docs/prep.md, docs/data-format.md):
#  - tessera prep counts the invalid UTF-8 sequences it replaced by U+FFFD, per file: a file with
#    \xff, \xfe and \xc3( gets 3 (a literal U+FFFD is not counted), a clean file is not listed;
#  - the index records the tokenizer (tokenizer<TAB>gpt2; a tokenizer directory as its absolute
#    path), and the reader keeps datasets without that line loadable; a second tokenizer line is
#    refused naming the line;
#  - the trainer refuses (exit 1) a data.tokenizer that differs from the dataset's, naming the key
#    and both tokenizers, and with data.tokenizer_mismatch = "allow" warns and trains; no warning
#    when they agree (the same directory by another path) or when
#    the dataset records none (tessera synth, older datasets);
#  - the trainer's start with that warning is a short banner, the warning its last line.
source "$(dirname "$0")/../lib.sh"
gpt2_dir
if [[ ! -f $GPT2_DIR/encoder.json ]]; then echo "1..0 # SKIP no GPT-2 files (./INSTALL fetches them)"; exit 77; fi
tsr_tmpdir
tap_plan 10
mkdir -p "$TMP/in" "$TMP/tok"
printf 'hello \xff\xfe world \xc3\x28 ok \xef\xbf\xbd and more text to make a few samples\n' >"$TMP/in/bad.txt"
for i in $(seq 1 40); do echo "The quick brown fox number $i jumps over the lazy dog again and again."; done >"$TMP/in/good.txt"
cp "$GPT2_DIR/encoder.json" "$GPT2_DIR/vocab.bpe" "$TMP/tok/"

"$TOOL" prep --out "$TMP/d1" --tokenizer gpt2 --val-fraction 0 "$TMP/in" >"$TMP/p1.txt" 2>&1
rc=$?
sed 's/^/# /' "$TMP/p1.txt"
[[ $rc == 0 ]] && grep -qxF "prep: $TMP/in/bad.txt: 3 invalid UTF-8 sequences replaced by U+FFFD" "$TMP/p1.txt" &&
    ! grep -q "good.txt" "$TMP/p1.txt" && grep -q "invalid UTF-8: 3 sequences replaced by U+FFFD in 1 of 2 files" "$TMP/p1.txt"
tap_check $? "prep counts the invalid UTF-8 sequences it replaced, per file (3 in bad.txt, none in good.txt)"

grep -qxP 'tokenizer\tgpt2' "$TMP/d1/train/index.tsv"
tap_check $? "the index records tokenizer gpt2"

(cd "$TMP" && "$TOOL" prep --out "$TMP/d2" --tokenizer tok --val-fraction 0 --quiet "$TMP/in/good.txt")
grep -qxP "tokenizer\t$TMP/tok" "$TMP/d2/train/index.tsv"
tap_check $? "a tokenizer directory given relative to the cwd is recorded as its absolute path"

train1() { # train1 DATASET TOKENIZER OUT: one step on DATASET with data.tokenizer = TOKENIZER
    tiny_args "$1"
    "$TRAIN" "${args[@]}" --set model.vocab_size="${4:-50257}" --set model.n_layer=1 --set model.n_head=4 \
        --set seq_len=8 --set model.max_seq_len=8 --set global_batch=2 --set micro_batch=2 \
        --set max_duration=1ba --set optim.warmup=0ba --set data.tokenizer="$2" --set run_dir="$TMP/run-$3" "${extra[@]}" >"$TMP/$3.txt" 2>&1
}
extra=()
train1 "$TMP/d2/train" gpt2 refused
rc1=$?
extra=(--set data.tokenizer_mismatch=allow)
train1 "$TMP/d2/train" gpt2 mismatch
rc=$?
extra=()
[[ $rc1 == 1 && ! -e $TMP/run-refused ]] && grep -q "error: data.tokenizer = \"gpt2\", but $TMP/d2/train was made with the tokenizer \"$TMP/tok\"" "$TMP/refused.txt" &&
[[ $rc == 0 ]] && grep -q "warning: data.train = \"$TMP/d2/train\" was made with the tokenizer \"$TMP/tok\", but data.tokenizer = \"gpt2\"" "$TMP/mismatch.txt"
tap_check $? "a data.tokenizer other than the dataset's is refused (exit $rc1, nothing written); with data.tokenizer_mismatch = allow the trainer warns and trains (exit $rc)"
grep warning "$TMP/mismatch.txt" | sed 's/^/#   /'
# the start's banner (docs/tessera-train.md "OUTPUT"): short, where the effective config is, the
# warning last before the first step; the whole config in run_dir/config.cfg, not on the screen
start=$(sed '/^step 1\//,$d' "$TMP/mismatch.txt")
n=$(wc -l <<<"$start")
((n <= 16)) && grep -qxF "effective config (every key): $TMP/run-mismatch/config.cfg" <<<"$start" &&
    tail -1 <<<"$start" | grep -q "warning: data.train = .* was made with the tokenizer" &&
    grep -q '^tessera-train .* | 1 rank | ' <<<"$start" && grep -q '^rank 0 on ' <<<"$start" &&
    ! grep -q 'tokenizer_mismatch' <<<"$start" && grep -q '^  tokenizer_mismatch = "allow";' "$TMP/run-mismatch/config.cfg" &&
    (($(grep -c ' = ' "$TMP/run-mismatch/config.cfg") > 60))
tap_check $? "the start is a short banner ($n lines before step 1: version, where, plan, config.cfg's path), the warning last; every key in run_dir/config.cfg"

train1 "$TMP/d2/train" "$TMP/./tok/" samepath
[[ $? == 0 ]] && ! grep -q "was made with the tokenizer" "$TMP/samepath.txt"
tap_check $? "no warning for the same tokenizer directory by another path"

train1 "$TMP/d1/train" gpt2 same
[[ $? == 0 ]] && ! grep -q "was made with the tokenizer" "$TMP/same.txt" &&
    "$TOOL" prep --out "$TMP/d5" --tokenizer "$GPT2_DIR" --val-fraction 0 --quiet "$TMP/in/good.txt" &&
    train1 "$TMP/d5/train" gpt2 gpt2path && ! grep -q "was made with the tokenizer" "$TMP/gpt2path.txt"
tap_check $? "no warning when both say gpt2, nor for a dataset made with gpt2's directory trained with gpt2"

make_synth "$TMP/syn"
! grep -q tokenizer "$TMP/syn/train/index.tsv" && train1 "$TMP/syn/train" gpt2 synth 512 &&
    ! grep -q "was made with the tokenizer" "$TMP/synth.txt"
tap_check $? "a dataset without a tokenizer line (tessera synth, older datasets) loads, no warning"

# the reader: an index with the line removed still verifies; one with two tokenizer lines does not
cp -r "$TMP/d1" "$TMP/d3" && sed -i '/^tokenizer/d' "$TMP/d3/train/index.tsv"
"$TOOL" verify-data "$TMP/d3/train" >/dev/null 2>&1
tap_check $? "the same dataset without its tokenizer line verifies (old format still read)"
cp -r "$TMP/d1" "$TMP/d4" && sed -i 's/^tokenizer\tgpt2$/tokenizer\tgpt2\ntokenizer\tgpt2/' "$TMP/d4/train/index.tsv"
"$TOOL" verify-data "$TMP/d4/train" >"$TMP/v4.txt" 2>&1
rc=$?
second=$(grep -n "^tokenizer" "$TMP/d4/train/index.tsv" | sed -n 2p | cut -d: -f1) # (after the notes)
[[ $rc == 2 && -n $second ]] && grep -q "index.tsv:$second: expected one 'tokenizer <name>' line" "$TMP/v4.txt"
tap_check $? "two tokenizer lines are refused naming the line (exit $rc)"
tap_done
