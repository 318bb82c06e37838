#!/usr/bin/env bash
# A checkpoint whose state is not finite is never committed (docs/checkpoint-format.md "A state
# that is not finite is never committed"; checkpoint/ckpt_writer.c; issue 64 finding 8). Muon at
# optim.lr = 1e300 with the spike guard's patience above the run ended with exit 0 and an all-NaN
# final checkpoint that `latest` named and `tessera ckpt verify` passed. Now, from a finite
# checkpoint of step 2 (lr 1e-3), the run resumed at lr = 1e300 (its weights NaN from step 3's
# update on; guard.action = warn, guard.patience = 100: the guard lets it run):
#  - its save of step 4, in the background and synchronous alike, fails: exit 2 naming the first
#    tensor that is not finite; `latest` still names step 2, no step-4 file, no .tmp;
#  - the same save written anyway (TSR_CKPT_FAULT=allow-nonfinite, as an older build wrote it):
#    `tessera ckpt verify` and `ckpt ls` report it invalid (exit 2), naming the tensor; step 2's
#    checkpoint verifies.
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 4
synth_tiny_args 1 4 4 --set optim.name=muon --set optim.warmup=0ba --set optim.schedule=constant \
    --set save_interval=2ba --set guard.window=0 --set guard.action=warn --set guard.patience=100
"$TRAIN" "${args[@]}" --set run_dir="$TMP/base" --set max_duration=2ba --set optim.lr=1e-3 >"$TMP/base.txt" 2>&1 ||
    { cat "$TMP/base.txt"; exit 1; }
# diverge MODE: the run resumed from step 2 at lr 1e300 to step 4, save_async = MODE
diverge() {
    rm -rf "$TMP/$1" && cp -r "$TMP/base" "$TMP/$1"
    "$TRAIN" "${args[@]}" --set run_dir="$TMP/$1" --set max_duration=4ba --set optim.lr=1e300 \
        --set save_async="$2" >"$TMP/$1.txt" 2>&1
}
for mode in true false; do
    diverge "d-$mode" "$mode"
    rc=$?
    tap_diag "$(grep -m1 'error: ' "$TMP/d-$mode.txt")"
    ((rc == 2)) && grep -q "step-00000004.h5 not written: tensor [a-z/_.0-9]* is not finite: [0-9]* of its values in \[[0-9]*, [0-9]*) are NaN or Inf" "$TMP/d-$mode.txt" &&
        grep -q '^step 4/4 | loss -*nan' "$TMP/d-$mode.txt" && [[ $(cat "$TMP/d-$mode/latest") == step-00000002.h5 ]] &&
        [[ ! -e $TMP/d-$mode/step-00000004.h5 && -z $(find "$TMP/d-$mode" -name '*.tmp') ]]
    tap_check $? "save_async = $mode: step 4's state is NaN (lr 1e300): its save is refused, exit $rc naming the tensor; latest still names step 2, nothing else left"
done
rm -rf "$TMP/w" && cp -r "$TMP/base" "$TMP/w"
TSR_CKPT_FAULT=allow-nonfinite "$TRAIN" "${args[@]}" --set run_dir="$TMP/w" --set max_duration=4ba \
    --set optim.lr=1e300 >"$TMP/w.txt" 2>&1
wrc=$?
"$TOOL" ckpt verify "$TMP/w" >"$TMP/v.txt" 2>&1
vrc=$?
"$TOOL" ckpt verify "$TMP/w/step-00000002.h5" >/dev/null 2>&1
v2=$?
tap_diag "$(cat "$TMP/v.txt")"
((wrc == 0 && vrc == 2 && v2 == 0)) && grep -q "step-00000004.h5: invalid: tensor [a-z/_.0-9]*: not finite: [0-9]* of its [0-9]* values are NaN or Inf" "$TMP/v.txt"
tap_check $? "a NaN checkpoint written anyway (as an older build did; the run exit $wrc): ckpt verify exit $vrc naming the tensor; step 2's verifies (exit $v2)"
"$TOOL" ckpt ls "$TMP/w" >"$TMP/ls.txt" 2>&1
tap_diag "$(cat "$TMP/ls.txt")"
grep -q "00000004.*invalid\|4 .*no" "$TMP/ls.txt"
tap_check $? "ckpt ls shows step 4 as not valid"
tap_done
