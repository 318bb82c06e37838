#!/usr/bin/env bash
# test_prep.sh — `tessera prep` end to end with the GPT-2 tokenizer: text directories, JSONL with
# bad lines, sft and chat masks, the seeded train/val split, --strict, thread-count independence,
# --pack (whole examples per sample window, checked against an unpacked prep of the same file).
# Expected documents come from tests/prep/prep_check.py (fixtures + an independent shard reader);
# expected token ids from `tessera tokenizer encode`, one segment file at a time.
source "$(dirname "$0")/../lib.sh"
PY=${PYTHON:-/usr/bin/python3}
CHECK=$TSR_ROOT/tests/prep/prep_check.py

if ! "$TOOL" prep --help >/dev/null 2>&1; then echo "skip: $TOOL has no 'prep' command"; exit 77; fi
if ! "$TOOL" tokenizer encode --help >/dev/null 2>&1; then
    echo "skip: $TOOL has no 'tokenizer encode' command (needed for the expected token ids)"; exit 77
fi
gpt2_dir
if [[ ! -f $GPT2_DIR/encoder.json || ! -f $GPT2_DIR/vocab.bpe ]]; then
    echo "skip: no GPT-2 tokenizer files in $GPT2_DIR (./INSTALL fetches them)"; exit 77
fi
if ! "$PY" -c 'import numpy' 2>/dev/null; then echo "skip: $PY has no numpy"; exit 77; fi
EOS=50256
tsr_tmpdir
F=$TMP/fx
"$PY" "$CHECK" gen "$F" || { echo "Bail out! fixture generator failed"; exit 1; }
# expected ids of every segment, one line per segment file
"$TOOL" tokenizer encode --tokenizer "$GPT2_DIR" "$F"/seg/seg-*.txt >"$F/ids.txt" ||
    { echo "Bail out! tokenizer encode failed"; exit 1; }
nseg=$(ls "$F"/seg | wc -l)
prep() { "$TOOL" prep --tokenizer "$GPT2_DIR" --quiet "$@"; }
# check OUT SPEC... [flags]: the datasets match the expected documents exactly
check() { local out=$1; shift; "$PY" "$CHECK" check "$out" "$F/ids.txt" "$EOS" "$@"; }
spec() { echo "$F/spec-$1.json"; }

tap_plan 51

# ---- usage errors: exit 1
"$TOOL" prep "$F/corpus.jsonl" >/dev/null 2>"$TMP/err"; rc=$?
((rc == 1)) && grep -q -- "--out DIR is required" "$TMP/err"; tap_check $? "no --out: exit 1 with a message (rc=$rc)"
"$TOOL" prep --out "$TMP/x" --format yaml "$F/corpus.jsonl" 2>"$TMP/err"; rc=$?
((rc == 1)) && grep -q "auto, text, jsonl, sft, chat, preference or prompts" "$TMP/err"; tap_check $? "bad --format: exit 1, the formats listed (rc=$rc)"
"$TOOL" prep --out "$TMP/x" --val-fraction 1.5 "$F/corpus.jsonl" 2>/dev/null; rc=$?
"$TOOL" prep --out "$TMP/x" --threads 0 "$F/corpus.jsonl" 2>/dev/null; rc2=$?
((rc == 1 && rc2 == 1)) && [[ ! -e $TMP/x ]]; tap_check $? "out-of-range --val-fraction / --threads: exit 1, nothing written"
"$TOOL" prep --out "$TMP/x" "$F/does-not-exist.txt" 2>"$TMP/err"; rc=$?
((rc == 2)) && grep -q "does-not-exist.txt" "$TMP/err" && [[ ! -e $TMP/x && ! -e $TMP/x.tmp ]]
tap_check $? "missing input: exit 2 naming it, nothing written"
echo x >"$TMP/data.jsonl.gz"
"$TOOL" prep --out "$TMP/x" "$TMP/data.jsonl.gz" 2>"$TMP/err"; rc=$?
((rc == 2)) && grep -q "data.jsonl.gz: compressed" "$TMP/err" && [[ ! -e $TMP/x ]]
tap_check $? "compressed input: exit 2 naming it (rc=$rc)"
grep -q -- "--val-fraction" <<<"$("$TOOL" prep --help)"; tap_check $? "--help lists the options"

# ---- a directory of text files: one file = one document, sorted walk, hidden files skipped
prep --out "$TMP/text" --val-fraction 0 "$F/text" >/dev/null
tap_check $? "text directory: exit 0"
out=$(check "$TMP/text" "$(spec text)"); rc=$?
[[ $rc == 0 && $out == "docs 3 0 "* ]]; tap_check $? "text directory: 3 documents (empty + hidden files skipped), tokens exact: $out"
[[ ! -e $TMP/text/val && ! -e $TMP/text.tmp ]]; tap_check $? "--val-fraction 0: no val dataset, no staging dir left"
"$TOOL" verify-data "$TMP/text/train" | grep -q "loss mask no"; tap_check $? "verify-data: text dataset ok, no mask channel"

# ---- the directory walk shared with tokenizer train (fs_walk): a link to a directory is followed,
# a FIFO and a link loop beside it are skipped, each named in a warning
mkdir "$TMP/walk" && ln -s "$F/text" "$TMP/walk/text" && ln -s . "$TMP/walk/loop" && mkfifo "$TMP/walk/fifo"
prep --out "$TMP/walked" --val-fraction 0 "$TMP/walk" >/dev/null 2>"$TMP/err"; rc=$?
out=$(check "$TMP/walked" "$(spec text)")
[[ $rc == 0 && $out == "docs 3 0 "* ]] && grep -q "walk/fifo: a FIFO, skipped" "$TMP/err" &&
    grep -q "walk/loop: a symbolic link loop" "$TMP/err"
tap_check $? "a linked directory is walked, a FIFO and a link loop skipped with warnings (rc=$rc): $out"

# ---- JSONL with bad lines: skipped, reported as FILE:LINE, counted
"$TOOL" prep --tokenizer "$GPT2_DIR" --out "$TMP/corpus" --val-fraction 0.2 --seed 7 \
    "$F/corpus.jsonl" >"$TMP/sum" 2>"$TMP/err"; rc=$?
tap_check $rc "jsonl with bad lines: exit 0 by default"
ok=0
while IFS=$'\t' read -r no why; do
    grep -q "corpus.jsonl:$no: .*$why" "$TMP/err" || { ok=1; tap_diag "no report of line $no ($why)"; }
done <"$F/corpus-bad-lines.txt"
nbad=$(wc -l <"$F/corpus-bad-lines.txt")
((ok == 0)) && (($(grep -c "corpus.jsonl:" "$TMP/err") == nbad))
tap_check $? "each bad line reported once as FILE:LINE: reason ($nbad lines)"
grep -q "skipped $nbad bad lines, 1 empty document" "$TMP/sum"; tap_check $? "summary counts bad lines and empty documents"
out=$(check "$TMP/corpus" "$(spec corpus)" --assign "$TMP/assign7"); rc=$?
((rc == 0)); tap_check $? "jsonl: tokens of every valid line exact, each in train or val, in order: $out"
read -r _ dt dv _ tt tv _ <<<"$out"
grep -q "train $dt documents, $tt tokens; val $dv documents, $tv tokens" "$TMP/sum"
tap_check $? "the summary's document and token counts match the independent count"
((dv > 20 && dv < 100)); tap_check $? "val fraction 0.2 of 293 documents gives $dv (binomial: 20..100)"

# ---- the split: seeded, deterministic
prep --out "$TMP/corpus7b" --val-fraction 0.2 --seed 7 "$F/corpus.jsonl" 2>/dev/null
diff -r "$TMP/corpus" "$TMP/corpus7b" >/dev/null; tap_check $? "same seed: byte-identical datasets"
prep --out "$TMP/corpus8" --val-fraction 0.2 --seed 8 "$F/corpus.jsonl" 2>/dev/null
check "$TMP/corpus8" "$(spec corpus)" --assign "$TMP/assign8" >/dev/null &&
    ! cmp -s "$TMP/assign7" "$TMP/assign8"
tap_check $? "different seed: a different split, still exact"
prep --out "$TMP/corpus-j1" --val-fraction 0.2 --seed 7 --threads 1 "$F/corpus.jsonl" 2>/dev/null
prep --out "$TMP/corpus-j2" --val-fraction 0.2 --seed 7 --threads 2 "$F/corpus.jsonl" 2>/dev/null
diff -r "$TMP/corpus-j1" "$TMP/corpus-j2" >/dev/null && diff -r "$TMP/corpus-j1" "$TMP/corpus" >/dev/null
tap_check $? "--threads 1 and 2 (and the default): byte-identical output"

# ---- sft: prompt 0, response 1, EOS 1
prep --out "$TMP/sft" --val-fraction 0.1 "$F/sft.jsonl" >/dev/null
out=$(check "$TMP/sft" "$(spec sft)"); rc=$?
((rc == 0)); tap_check $? "sft: tokens and loss mask exact (response + EOS are the targets): $out"
"$TOOL" verify-data "$TMP/sft/train" | grep -q "loss mask yes"; tap_check $? "verify-data: sft dataset has a mask channel"
prep --out "$TMP/sft-tp" --val-fraction 0.1 --target-prompts --bos "$F/sft.jsonl" >/dev/null
check "$TMP/sft-tp" "$(spec sft)" --target-prompts --bos >/dev/null; tap_check $? "sft --target-prompts --bos: every mask byte 1, BOS before each document"
prep --out "$TMP/sft-bos" --val-fraction 0 --bos --no-eos "$F/sft.jsonl" >/dev/null
check "$TMP/sft-bos" "$(spec sft)" --bos --no-eos >/dev/null; tap_check $? "sft --bos --no-eos: BOS (mask 0), no EOS"

# ---- chat: "ROLE: " + content + "\n" per turn; assistant turns are the targets
prep --out "$TMP/chat" --val-fraction 0.1 "$F/chat.jsonl" >/dev/null
out=$(check "$TMP/chat" "$(spec chat)"); rc=$?
((rc == 0)); tap_check $? "chat: template tokens and mask exact (assistant turns only): $out"
prep --out "$TMP/chat-tp" --val-fraction 0 --target-prompts "$F/chat.jsonl" >/dev/null
check "$TMP/chat-tp" "$(spec chat)" --target-prompts >/dev/null; tap_check $? "chat --target-prompts: all targets"
prep --out "$TMP/chat-f" --val-fraction 0 --format chat "$F/chat.jsonl" >/dev/null
prep --out "$TMP/chat-a" --val-fraction 0 "$F/chat.jsonl" >/dev/null
diff -r "$TMP/chat-f" "$TMP/chat-a" >/dev/null; tap_check $? "--format chat = auto-detected chat"

# ---- several inputs of mixed kinds: one dataset, mask channel, plain text all targets
prep --out "$TMP/mixed" --val-fraction 0.3 "$F/text" "$F/sft.jsonl" "$F/corpus.jsonl" "$F/chat.jsonl" 2>/dev/null
check "$TMP/mixed" "$(spec text)" "$(spec sft)" "$(spec corpus)" "$(spec chat)" >/dev/null
tap_check $? "mixed inputs in argument order: text as all-target, sft/chat masked"

# ---- --doc-sep: split text files into documents
prep --out "$TMP/paras" --val-fraction 0 --doc-sep '\n\n' "$F/paras.txt" >/dev/null
out=$(check "$TMP/paras" "$(spec paras)"); rc=$?
((rc == 0)) && [[ $out == "docs 25 0 "* ]]; tap_check $? "--doc-sep '\\n\\n': 25 documents, no empty ones: $out"

# ---- --strict: exit 2, nothing written
"$TOOL" prep --tokenizer "$GPT2_DIR" --out "$TMP/strict" --strict "$F/corpus.jsonl" >/dev/null 2>"$TMP/err"; rc=$?
((rc == 2)); tap_check $? "--strict with a bad line: exit 2 (rc=$rc)"
grep -q "corpus.jsonl:5: invalid JSON at column 10: unterminated string" "$TMP/err"
tap_check $? "--strict names the first bad line and column"
[[ ! -e $TMP/strict && ! -e $TMP/strict.tmp ]]; tap_check $? "--strict: no DIR and no DIR.tmp left"
prep --out "$TMP/strict-ok" --strict --val-fraction 0 "$F/sft.jsonl" >/dev/null; tap_check $? "--strict on a clean file: exit 0"

# ---- --pack T: whole sft/chat examples in each sample window (docs/prep.md "Packing")
# refused for plain text (exit 1, nothing written), without EOS, with shards below one sample
"$TOOL" prep --tokenizer "$GPT2_DIR" --out "$TMP/x" --pack 32 --format jsonl "$F/corpus.jsonl" 2>"$TMP/err"; rc=$?
((rc == 1)) && grep -q -- "--pack places whole sft/chat examples.*--format jsonl" "$TMP/err" && [[ ! -e $TMP/x ]]
tap_check $? "--pack with --format jsonl: exit 1, nothing written (rc=$rc)"
"$TOOL" prep --tokenizer "$GPT2_DIR" --out "$TMP/x" --pack 32 "$F/sft.jsonl" "$F/corpus.jsonl" 2>"$TMP/err"; rc=$?
((rc == 1)) && grep -q "pack: .*corpus.jsonl is JSON Lines of {\"text\"}" "$TMP/err" && [[ ! -e $TMP/x && ! -e $TMP/x.tmp ]]
tap_check $? "--pack with an auto-detected text JSONL among the inputs: exit 1 naming it (rc=$rc)"
"$TOOL" prep --tokenizer "$GPT2_DIR" --out "$TMP/x" --pack 32 --no-eos "$F/sft.jsonl" 2>/dev/null; rc=$?
"$TOOL" prep --tokenizer "$GPT2_DIR" --out "$TMP/x" --pack 32 --shard-tokens 32 "$F/sft.jsonl" 2>"$TMP/err"; rc2=$?
((rc == 1 && rc2 == 1)) && grep -q "32 < --pack + 1 = 33" "$TMP/err" && [[ ! -e $TMP/x ]]
tap_check $? "--pack with --no-eos, or --shard-tokens below T+1: exit 1 ($rc, $rc2)"

# sft pairs of varied lengths, 3 samples per shard (--shard-tokens 100 -> 1 + 3*32 = 97 tokens)
P=$F/pack.jsonl
md5_before=$(md5sum <"$P")
"$TOOL" prep --tokenizer "$GPT2_DIR" --out "$TMP/pk" --pack 32 --shard-tokens 100 --val-fraction 0.2 \
    --seed 3 "$P" >"$TMP/sum" 2>"$TMP/err"; rc=$?
tap_check $rc "sft --pack 32: exit 0"
prep --out "$TMP/pk-plain" --val-fraction 0.2 --seed 3 "$P"
out=$("$PY" "$CHECK" pack "$TMP/pk" "$TMP/pk-plain" 32 "$EOS"); rc=$?
tap_check $rc "every window holds whole examples in order, masks as unpacked, padding EOT/0, shards of 1+m*T: $out"
read -r _ _ w _ e _ x _ d _ p _ n _ ex _ _ vw _ ve _ vx _ vd _ vp _ vn _ <<<"${out//;/}"
((x > 0 && d > 0 && ex > 0 && vx + vd > 0)); tap_check $? "the fixture covers truncated ($x), dropped ($d) examples and exactly filled windows ($ex)"
grep -qF "train $w windows, $e examples, $x truncated, $d dropped, padding $p of $n tokens" "$TMP/sum" &&
    grep -qF "val $vw windows, $ve examples, $vx truncated, $vd dropped, padding $vp of $vn tokens" "$TMP/sum" &&
    grep -q "packed for seq_len 32 (train with seq_len = 32)" "$TMP/sum" &&
    grep -q "train $e documents, $n tokens; val $ve documents, $vn tokens" "$TMP/sum"
tap_check $? "the summary's windows, examples, truncated, dropped, padding and tokens match the independent count"
nrep=$(grep -c "pack.jsonl:[0-9]*: example of [0-9]* tokens is longer than --pack 32" "$TMP/err")
bad_n=$(grep -o "example of [0-9]* tokens" "$TMP/err" | awk '$3 <= 32' | wc -l)
((nrep == (x + d + vx + vd < 10 ? x + d + vx + vd : 10) && bad_n == 0)); tap_check $? "over-length examples reported as FILE:LINE with their length > 32 ($nrep shown)"
[[ $(md5sum <"$P") == "$md5_before" ]]; tap_check $? "the input file is not modified"
"$TOOL" verify-data --seq-len 32 "$TMP/pk/train" | grep -q "loss mask yes, $w samples of length 32"
tap_check $? "verify-data: the packed dataset is valid and holds exactly $w samples of seq_len 32"
"$TOOL" prep --tokenizer "$GPT2_DIR" --quiet --out "$TMP/pk2" --pack 32 --shard-tokens 100 --val-fraction 0.2 --seed 3 --threads 1 "$P" 2>/dev/null
diff -r "$TMP/pk" "$TMP/pk2" >/dev/null; tap_check $? "--pack: byte-identical datasets across runs (and --threads 1 vs default)"
# the checker can fail: the unpacked stream, presented as packed, is rejected
cp -r "$TMP/pk-plain" "$TMP/pk-forged"
sed -i '1a # packed_seq_len\t32' "$TMP/pk-forged/train/index.tsv" "$TMP/pk-forged/val/index.tsv"
out=$("$PY" "$CHECK" pack "$TMP/pk-forged" "$TMP/pk-plain" 32 "$EOS"); rc=$?
((rc != 0)) && [[ $out == FAIL:* ]]; tap_check $? "the --pack check rejects an unpacked stream: $out"
# chat conversations are examples too
prep --out "$TMP/ck" --pack 128 --val-fraction 0.1 "$F/chat.jsonl" && prep --out "$TMP/ck-plain" --val-fraction 0.1 "$F/chat.jsonl"
out=$("$PY" "$CHECK" pack "$TMP/ck" "$TMP/ck-plain" 128 "$EOS"); rc=$?
tap_check $rc "chat --pack 128: whole conversations per window, masks as unpacked: $out"
# --target-prompts: every token a target, so an over-length example is truncated, never dropped
prep --out "$TMP/pk-tp" --pack 32 --target-prompts --val-fraction 0 "$P" 2>/dev/null &&
    prep --out "$TMP/pk-tp-plain" --target-prompts --val-fraction 0 "$P"
out=$("$PY" "$CHECK" pack "$TMP/pk-tp" "$TMP/pk-tp-plain" 32 "$EOS"); rc=$?
((rc == 0)) && [[ $out == *" dropped 0 "* ]]; tap_check $? "--pack --target-prompts: nothing dropped: $out"
grep -q -- "--pack T" <<<"$("$TOOL" prep --help)"; tap_check $? "--help lists --pack"

# ---- existing DIR is never touched
mkdir -p "$TMP/exists" && echo keep >"$TMP/exists/file"
"$TOOL" prep --tokenizer "$GPT2_DIR" --out "$TMP/exists" "$F/sft.jsonl" 2>"$TMP/err"; rc=$?
((rc == 2)) && grep -q "exists.*already exists" "$TMP/err" && [[ $(cat "$TMP/exists/file") == keep ]]
tap_check $? "existing --out: exit 2 naming it, left as it was"

# ---- progress: plain lines (not a terminal), and the summary
"$TOOL" prep --tokenizer "$GPT2_DIR" --out "$TMP/prog" "$F/corpus.jsonl" >"$TMP/sum" 2>"$TMP/err"
grep -q "MB/s" "$TMP/sum" && ! grep -q $'\r' "$TMP/err"; tap_check $? "not a terminal: no carriage returns; the summary has MB/s"

# ---- a folder that holds an earlier dataset: its shards and index are skipped, not read as text
mkdir -p "$TMP/mixed/docs" && cp "$F/corpus.jsonl" "$TMP/mixed/docs/" && cp -r "$TMP/prog" "$TMP/mixed/old"
"$TOOL" prep --tokenizer "$GPT2_DIR" --out "$TMP/mixed-ds" "$TMP/mixed" >/dev/null 2>"$TMP/err"; rc=$?
"$TOOL" prep --tokenizer "$GPT2_DIR" --out "$TMP/mixed-ref" "$TMP/mixed/docs" >/dev/null 2>&1
"$TOOL" prep --tokenizer "$GPT2_DIR" --out "$TMP/mixed-bad" "$TMP/mixed/old/train/index.tsv" 2>"$TMP/err2"; rc2=$?
((rc == 0 && rc2 == 2)) && grep -q "old/train/shard-00000.bin: part of a tessera dataset (an earlier prep's output?): skipped" "$TMP/err" &&
    grep -q "old/train/index.tsv: part of a tessera dataset" "$TMP/err" &&
    cmp -s "$TMP/mixed-ds/train/shard-00000.bin" "$TMP/mixed-ref/train/shard-00000.bin" && [[ ! -e $TMP/mixed-bad ]]
tap_check $? "a folder holding an earlier dataset: its shards and index skipped with a warning (the dataset = the text's alone); naming one: exit $rc2"

tap_diag "$nseg segment files tokenized for the expected ids"
tap_done
