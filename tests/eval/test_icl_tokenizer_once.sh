#!/usr/bin/env bash
# The tokenizer is read once per process when icl_tasks are scored: tessera-train loads
# data.tokenizer at start (samples, ICL) and hands that one to the ICL suite (train_icl_open), and
# `tessera eval` loads it once for its tasks (icl_suite_open tokenizes with the caller's tokenizer,
# it opens none). Counted from the outside: strace's openat calls on the tokenizer file, one
# process, a tiny model, 2 steps, the shipped "colors" tasks. Skips (77) without a working strace.
source "$(dirname "$0")/../lib.sh"
command -v strace >/dev/null || { echo "strace not found (Debian: strace)"; exit 77; }
strace -f -qq -e trace=openat -o /dev/null true 2>/dev/null || { echo "strace cannot trace here (ptrace refused)"; exit 77; }
tsr_tmpdir
tap_plan 3
colors_icl 0
tap_check $? "tokenizer trained on the colors text, the text prepped"
# opens COUNTFILE: the openat calls of the tokenizer file in an strace log
opens() { grep -c "openat(.*\"[^\"]*/tok\.tok\"" "$1"; }
strace -f -qq -e trace=openat -o "$TMP/train.trace" "$TRAIN" --config "$TMP/icl.cfg" \
    --set model.vocab_size=320 --set model.vocab_multiple=64 --set data.tokenizer="$TMP/tok.tok" \
    --set sample.tokens=0 --set data.train="$TMP/data/train" --set data.val= --set model.n_layer=1 \
    --set model.d_model=32 --set model.n_head=2 --set seq_len=32 --set model.max_seq_len=32 \
    --set global_batch=4 --set micro_batch=4 --set threads=1 --set eval_interval=2ba \
    --set max_duration=2ba --set run_dir="$TMP/run" >"$TMP/train.txt" 2>&1
rc=$? n=$(opens "$TMP/train.trace")
tap_diag "tessera-train: exit $rc, $(grep -c '| icl ' "$TMP/train.txt") icl lines, tokenizer file opened $n time(s)"
((rc == 0 && n == 1)) && grep -q '| icl ' "$TMP/train.txt"
tap_check $? "tessera-train with icl_tasks scores them and opens data.tokenizer once ($n)"
strace -f -qq -e trace=openat -o "$TMP/eval.trace" "$TOOL" eval --ckpt "$TMP/run" --set threads=1 >"$TMP/eval.txt" 2>&1
rc=$? n=$(opens "$TMP/eval.trace")
tap_diag "tessera eval: exit $rc, tokenizer file opened $n time(s)"
((rc == 0 && n == 1)) && grep -q '"colors_mc"' "$TMP/eval.txt"
tap_check $? "tessera eval of the checkpoint's icl_tasks opens data.tokenizer once ($n)"
tap_done
