#!/usr/bin/env bash
# test_prep_preference.sh — `tessera prep --format preference --pack T` (docs/prep.md "Preference
# pairs"): DPO pairs {"prompt", "chosen", "rejected"}, each example in a window of its own, so that
# read with seq_len = T sample 2i is pair i's chosen answer and sample 2i+1 its rejected one.
#  - GPT-2 (T = 16): the datasets checked token by token and mask byte by mask byte against the
#    layout tests/prep/pref_check.py builds from `tessera tokenizer encode` ids: padding, a full
#    window, truncation, a dropped pair (both examples gone), the split by pair (recomputed from
#    its SplitMix64 definition), shards of an even number of windows under a small --shard-tokens,
#    the two index.tsv comment lines, the summary; --target-prompts; bad lines and --strict; the
#    refusals (no --pack, --no-eos, --doc-sep, --shard-tokens below 2T + 1); auto never picks it.
#  - Qwen 3's chat template: each example equals what --format chat gives for the conversation
#    [user: prompt, assistant: answer], tokens and mask; --chat-template none gives the sft form.
source "$(dirname "$0")/../lib.sh"
PY=${PYTHON:-/usr/bin/python3}
CHECK=$TSR_ROOT/tests/prep/pref_check.py

if ! "$TOOL" prep --help >/dev/null 2>&1; then echo "skip: $TOOL has no 'prep' command"; exit 77; fi
gpt2_dir
if [[ ! -f $GPT2_DIR/encoder.json || ! -f $GPT2_DIR/vocab.bpe ]]; then
    echo "skip: no GPT-2 tokenizer files in $GPT2_DIR (./INSTALL fetches them)"; exit 77
fi
if ! "$PY" -c 'import numpy' 2>/dev/null; then echo "skip: $PY has no numpy"; exit 77; fi
QWEN=${TSR_DATA_DIR:-$TSR_ROOT/data/npm}/chat/qwen3
EOS=50256 QWEN_EOT=151643 # <|endoftext|> of GPT-2 and of Qwen 3 (docs/prep.md)
tsr_tmpdir
F=$TMP/fx
"$PY" "$CHECK" gen "$F" || { echo "Bail out! fixture generator failed"; exit 1; }
P=$F/pairs.jsonl
# ids_of PAIRS TOKENIZER OUT: the ids of every valid pair's prompt, chosen, rejected, one per line
ids_of() {
    "$PY" "$CHECK" segs "$1" "$TMP/segs-$3" >/dev/null &&
        "$TOOL" tokenizer encode --tokenizer "$2" "$TMP/segs-$3"/seg-*.txt >"$TMP/$3"
}
ids_of "$P" "$GPT2_DIR" ids.txt || { echo "Bail out! tokenizer encode failed"; exit 1; }
prep() { "$TOOL" prep --tokenizer "$GPT2_DIR" "$@"; }
layout() { "$PY" "$CHECK" layout "$1" "$TMP/ids.txt" 16 "$EOS" "${@:2}"; }

tap_plan 27

# ---- the refusals: exit 1, nothing written
prep --out "$TMP/x" --format preference "$P" >/dev/null 2>"$TMP/err"; rc=$?
((rc == 1)) && grep -q -- "--format preference needs --pack T" "$TMP/err" && [[ ! -e $TMP/x ]]
tap_check $? "--format preference without --pack: exit 1, says --pack is needed (rc=$rc)"
prep --out "$TMP/x" --format preference --pack 16 --no-eos "$P" >/dev/null 2>"$TMP/err"; rc=$?
((rc == 1)) && grep -q -- "drop --no-eos" "$TMP/err" && [[ ! -e $TMP/x ]]
tap_check $? "--no-eos: exit 1 (rc=$rc)"
prep --out "$TMP/x" --format preference --pack 16 --doc-sep '\n' "$P" >/dev/null 2>"$TMP/err"; rc=$?
((rc == 1)) && grep -q -- "--doc-sep applies to text inputs" "$TMP/err" && [[ ! -e $TMP/x ]]; tap_check $? "--doc-sep: exit 1 (rc=$rc)"
prep --out "$TMP/x" --format preference --pack 16 --shard-tokens 32 "$P" >/dev/null 2>"$TMP/err"; rc=$?
prep --out "$TMP/x" --format preference --pack 16 --shard-tokens 33 --val-fraction 0 --quiet "$P" 2>/dev/null; rc2=$?
((rc == 1 && rc2 == 0)) && grep -q "32 < 2 \* --pack + 1 = 33" "$TMP/err"
tap_check $? "--shard-tokens below 2T + 1 = 33: exit 1 ($rc); 33 is enough ($rc2)"
prep --out "$TMP/auto" --pack 16 --val-fraction 0 "$P" >/dev/null 2>"$TMP/err"; rc=$?
((rc == 2)) && grep -q 'pairs.jsonl:1: missing field "response"' "$TMP/err" && [[ ! -e $TMP/auto ]]
tap_check $? "auto never picks preference: the pairs read as sft lines lacking \"response\" (rc=$rc)"
grep -q "auto|text|jsonl|sft|chat|preference" <<<"$("$TOOL" prep --help)"; tap_check $? "--help lists --format preference"

# ---- the layout, token by token: T = 16, shards of 1 + 2*floor(89/32)*16 = 65 tokens (2 pairs)
prep --out "$TMP/pf" --format preference --pack 16 --shard-tokens 90 --val-fraction 0.3 --seed 5 \
    "$P" >"$TMP/sum" 2>"$TMP/err"; rc=$?
tap_check $rc "--format preference --pack 16: exit 0 with bad lines skipped"
out=$(layout "$TMP/pf" 5 0.3 90); rc=$?
tap_check $rc "each pair's chosen/rejected example in samples 2i/2i+1, padded EOT/0, truncated, dropped pair gone, split by pair, shards of 65 tokens, index lines: ${out%%; assign*}"
read -r _ _ tp _ td _ tx _ tf _ tw _ ts _ tn _ _ vp _ vd _ vx _ vf _ vw _ vs _ vn _ assign <<<"${out//;/}"
((tx > 0 && td + vd == 1 && tf + vf > 0 && vp > 0 && tp > 0 && ts > 2 && vs > 1))
tap_check $? "the fixture covers truncation ($tx), one dropped pair ($td+$vd), full windows ($tf+$vf), both splits ($tp, $vp pairs), several shards ($ts, $vs)"
o1=$(layout "$TMP/pf" 6 0.3 90) o2=$(layout "$TMP/pf" 5 0.3 90 --target-prompts)
[[ $o1 == FAIL:* && $o2 == FAIL:* ]]; tap_check $? "the layout check can fail: another seed (${o1:0:70}...), other masks (${o2:0:70}...)"
windows=$("$PY" -c 'import sys; sys.path.insert(0, sys.argv[1]); from prep_check import read_shards
print(" ".join(str((len(t) - 1) // 16) for s in ("train", "val") for t, _ in read_shards(sys.argv[2] + "/" + s)[1]))' "$TSR_ROOT/tests/prep" "$TMP/pf")
[[ -n $windows ]] && ! grep -qE '(^| )[0-9]*[13579]( |$)' <<<"$windows" && [[ ${windows%% *} == 4 ]]
tap_check $? "every shard holds an even number of windows (--shard-tokens 90: 1 + 4*16 tokens, not 1 + 5*16): $windows"
grep -qF "preference pairs (samples 2i and 2i+1 of seq_len 16 are pair i's chosen and rejected answers): train $tp pairs written, $td pairs dropped, $tx truncated examples; val $vp pairs written, $vd pairs dropped, $vx truncated examples" "$TMP/sum" &&
    grep -q "train $((2 * tp)) documents, $tn tokens; val $((2 * vp)) documents, $vn tokens" "$TMP/sum" &&
    grep -q "train $tw windows, $((2 * tp)) examples, $tx truncated, $((2 * td)) dropped" "$TMP/sum"
tap_check $? "the summary: pairs written, pairs dropped, truncated examples per split, as counted independently"
nbad=$(wc -l <"$F/bad-lines.txt") ok=0
while IFS=$'\t' read -r no why; do
    grep -q "pairs.jsonl:$no: .*$why.*(line skipped)" "$TMP/err" || { ok=1; tap_diag "no report of line $no ($why)"; }
done <"$F/bad-lines.txt"
((ok == 0)) && grep -q "skipped $nbad bad lines" "$TMP/sum"; tap_check $? "bad lines reported as FILE:LINE and counted ($nbad), as for sft"
grep -q "pairs.jsonl:5: rejected example of 26 tokens is longer than --pack 16 and its first 15 tokens hold no target (the prompt fills the sample): pair dropped" "$TMP/err" &&
    ! grep -q "pairs.jsonl:5: chosen" "$TMP/err"
tap_check $? "the dropped pair is reported once, by the example that made it go (line 5's rejected; its chosen alone would be kept)"
grep -q "pairs.jsonl:3: chosen example of 34 tokens is longer than --pack 16: kept its first 15 tokens" "$TMP/err"
tap_check $? "a truncated example is reported as FILE:LINE with which answer"
"$TOOL" verify-data --seq-len 16 "$TMP/pf/train" | grep -q "loss mask yes, $tw samples of length 16" &&
    "$TOOL" verify-data --seq-len 16 "$TMP/pf/val" | grep -q "loss mask yes, $vw samples of length 16"
tap_check $? "verify-data: valid, $tw and $vw samples of seq_len 16 = 2 x ($tp, $vp) pairs"
# the split is by pair (both examples of a pair in one split: the layout check above placed each
# pair's two windows by u(seed, pair number) < fraction); another seed gives another split
prep --out "$TMP/pf8" --format preference --pack 16 --shard-tokens 90 --val-fraction 0.3 --seed 8 --quiet "$P" 2>/dev/null
assign8=$(layout "$TMP/pf8" 8 0.3 90) && assign8=${assign8##*assign }
[[ -n $assign && $assign == *1* && $assign == *0* && $assign8 == [01]* && $assign != "$assign8" ]]
tap_check $? "the split is by pair and follows the seed: seed 5 $assign, seed 8 ${assign8:0:60}"
prep --out "$TMP/pf2" --format preference --pack 16 --shard-tokens 90 --val-fraction 0.3 --seed 5 --threads 1 --quiet "$P" 2>/dev/null
diff -r "$TMP/pf" "$TMP/pf2" >/dev/null; tap_check $? "byte-identical across runs and --threads 1 vs default"
# (the line after "# packed_seq_len": the header comments, the writer's max_token_id among them)
after_packed() { grep -A1 "^# packed_seq_len	16	" "$1" | sed -n 2p; }
[[ $(after_packed "$TMP/pf/train/index.tsv") == "# preference_pairs	$tp	(tessera prep --format preference: samples 2i and 2i+1 are pair i's chosen and rejected answers; docs/prep.md)" &&
   $(after_packed "$TMP/pf/val/index.tsv") == "# preference_pairs	$vp	"* ]]
tap_check $? "index.tsv: '# preference_pairs<TAB>N<TAB>(...)' right after '# packed_seq_len', N per dataset ($tp, $vp)"

# --target-prompts: every token a target, so line 5's pair is kept (its rejected example truncated)
prep --out "$TMP/tp" --format preference --pack 16 --target-prompts --val-fraction 0 --quiet "$P" 2>/dev/null
out=$(layout "$TMP/tp" 1 0 134217728 --target-prompts); rc=$?
((rc == 0)) && [[ $out == "train pairs $((tp + vp + 1)) dropped 0 "* ]]
tap_check $? "--target-prompts: every mask byte of an example 1, no pair dropped: ${out%%; assign*}"

# --strict: the first bad line stops prep
prep --out "$TMP/st" --format preference --pack 16 --strict "$P" >/dev/null 2>"$TMP/err"; rc=$?
((rc == 2)) && grep -q 'pairs.jsonl:4: missing field "rejected" (--strict: stopping, nothing written)' "$TMP/err" &&
    [[ ! -e $TMP/st && ! -e $TMP/st.tmp ]]
tap_check $? "--strict: exit 2 at line 4, nothing written (rc=$rc)"
head -3 "$P" >"$TMP/clean.jsonl"
prep --out "$TMP/st-ok" --format preference --pack 16 --strict --val-fraction 0 --quiet "$TMP/clean.jsonl"
tap_check $? "--strict on clean pairs: exit 0"
# every pair dropped: nothing to write
sed -n 5p "$P" >"$TMP/dropped.jsonl"
prep --out "$TMP/dr" --format preference --pack 16 --val-fraction 0 "$TMP/dropped.jsonl" >/dev/null 2>"$TMP/err"; rc=$?
((rc == 2)) && grep -q "nothing written" "$TMP/err" && [[ ! -e $TMP/dr ]]; tap_check $? "only a dropped pair: exit 2, nothing written (rc=$rc)"

# ---- pairs that teach nothing: the same answer twice, an empty answer: written, with warnings
printf '%s\n' '{"prompt": "p", "chosen": "same", "rejected": "same"}' '{"prompt": "p", "chosen": " ", "rejected": "no"}' \
    '{"prompt": "p", "chosen": "yes", "rejected": ""}' '{"prompt": "p", "chosen": "a", "rejected": "b"}' >"$TMP/idle.jsonl"
prep --out "$TMP/idle" --format preference --pack 16 --val-fraction 0 "$TMP/idle.jsonl" >"$TMP/idle.out" 2>"$TMP/idle.err"; rc=$?
((rc == 0)) && grep -q 'idle.jsonl:1: "chosen" and "rejected" are the same text: the pair teaches nothing' "$TMP/idle.err" &&
    grep -q 'idle.jsonl:2: "chosen" or "rejected" is empty' "$TMP/idle.err" && grep -q 'idle.jsonl:3: "chosen" or "rejected" is empty' "$TMP/idle.err" &&
    ! grep -q 'idle.jsonl:4' "$TMP/idle.err" && grep -q "1 pairs with the same chosen and rejected text, 2 with an empty answer" "$TMP/idle.out"
tap_check $? "pairs with the same answer twice or an empty answer: written with a warning each, counted in the summary (exit $rc)"

# ---- with a chat template: each example is what --format chat makes of [user, assistant]
if [[ -f $QWEN/tokenizer.json && -f $QWEN/tokenizer_config.json ]]; then
    qprep() { "$TOOL" prep --tokenizer "$QWEN/tokenizer.json" --val-fraction 0 "$@"; }
    qprep --out "$TMP/qp" --format preference --pack 64 "$F/chat-pairs.jsonl" >"$TMP/qp.log" 2>&1; rc=$?
    qprep --out "$TMP/qc" --format chat --quiet "$F/chat-convs.jsonl" 2>/dev/null; rc2=$?
    out=$("$PY" "$CHECK" chat "$TMP/qp" "$TMP/qc" "$QWEN_EOT"); rc3=$?
    ((rc == 0 && rc2 == 0 && rc3 == 0)) && grep -q "chat template of $QWEN/tokenizer_config.json" "$TMP/qp.log"
    tap_check $? "Qwen 3 template: each example = its conversation [user, assistant] of --format chat (tokens, mask), then EOT/0 padding: $out"
    [[ $out == *" dropped 1" ]] && grep -q "chat-pairs.jsonl:5: rejected example of [0-9]* tokens holds no target: pair dropped" "$TMP/qp.log" &&
        grep -q "train 5 pairs written, 1 pairs dropped" "$TMP/qp.log"
    tap_check $? "Qwen 3: an empty answer, which the template gives no target, drops its pair (reported, counted)"
    ids_of "$F/chat-pairs.jsonl" "$QWEN/tokenizer.json" qids.txt &&
        qprep --out "$TMP/qn" --format preference --pack 64 --chat-template none --quiet "$F/chat-pairs.jsonl" &&
        "$PY" "$CHECK" layout "$TMP/qn" "$TMP/qids.txt" 64 "$QWEN_EOT" 1 0 134217728 >/dev/null
    tap_check $? "--chat-template none: the sft form (prompt 0, answer 1, <|endoftext|> 1), token by token"
else
    for _ in 1 2 3; do
        _tap_n=$((_tap_n + 1))
        echo "ok $_tap_n # SKIP no Qwen 3 tokenizer files in $QWEN (./INSTALL fetches them)"
    done
fi
tap_done
