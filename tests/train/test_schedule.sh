#!/usr/bin/env bash
# test_schedule.sh — the learning-rate schedule's changes and its wsd kind (issue 48 item 13):
#  - optim.schedule = "wsd": the lr of every step (metrics.jsonl) equals a float64 Python formula
#    of warmup-stable-decay (tests/reference/lr_schedule.py, torch_gpt's), optim.decay as a
#    fraction of the run and, after a resume, as a duration;
#  - a resume that extends max_duration and changes the decay says so, with the lr of its first
#    step under the checkpoint's schedule and under the new one (both checked against the formula);
#    --init-from beside a run directory that has a checkpoint is said to be ignored;
#  - a warmup longer than the run (or warmup + decay) is exit 1, nothing written (a --set
#    max_duration that cuts a recipe short: a warning); a decay that is neither a fraction nor a
#    duration is exit 1.
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 8
make_synth "$TMP/data" 512 20000
tiny_args "$TMP/data/train"
args+=(--set model.n_layer=1 --set model.n_head=4 --set global_batch=4 --set micro_batch=4 --set optim.lr=1e-3 --set optim.alpha_f=0.1
       --set optim.warmup=2ba --set optim.schedule=wsd --set save_interval=0ba)
# lrs METRICS FROM TO: "step lr" of steps FROM..TO
lrs() { grep '"lr"' "$1" | sed -E 's/.*"step": ([0-9]+),.*"lr": ([^,]+),.*/\1 \2/' | awk -v a="$2" -v b="$3" '$1 >= a && $1 <= b'; }
# formula TOTAL DECAY FROM TO: the float64 reference's "step lr" for steps FROM..TO (1-based)
formula() {
    PYTHONPATH=$TSR_ROOT/tests/reference "$PY3" -c '
import sys
from lr_schedule import lr_multiplier
total, decay, a, b = map(int, sys.argv[1:])
for s in range(a, b + 1):
    print(s, repr(1e-3 * lr_multiplier("wsd", 0.1, s - 1, 2, total, decay)))' "$@"
}
# same_lrs GOT WANT: each lr within 1e-8 (metrics.jsonl prints 9 significant digits)
same_lrs() {
    paste -d' ' <(echo "$1") <(echo "$2") | awk 'NF != 4 || $1 != $3 || ($2 - $4) > 1e-8 * $4 || ($4 - $2) > 1e-8 * $4 { bad = 1 } END { exit bad || NR == 0 }'
}

"$TRAIN" "${args[@]}" --set max_duration=8ba --set optim.decay=0.25 --set run_dir="$TMP/A" >"$TMP/A1.txt" 2>&1
rc=$?
got=$(lrs "$TMP/A/metrics.jsonl" 1 8)
want=$(formula 8 2 1 8)
tap_diag "wsd lr: $(echo $got)"
((rc == 0)) && same_lrs "$got" "$want"
tap_check $? "wsd, warmup 2, decay 0.25 of 8 steps: every step's lr is the float64 formula's (exit $rc)"

# extend the run to 16 steps with a decay of 4ba; --init-from names a checkpoint, but A has its own
"$TRAIN" "${args[@]}" --set max_duration=16ba --set optim.decay=4ba --set run_dir="$TMP/A" \
    --init-from "$TMP/A/latest" >"$TMP/A2.txt" 2>&1
rc=$?
line=$(grep '^resume: the learning-rate schedule changes' "$TMP/A2.txt")
tap_diag "$line"
old=$(formula 8 2 9 9 | cut -d' ' -f2)
new=$(formula 16 4 9 9 | cut -d' ' -f2)
"$PY3" -c '
import re, sys
line, old, new = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
m = re.search(r"lr of step 9 \(the first this run makes\): (\S+) under the checkpoint.s schedule, (\S+) under this one$", line)
ok = m and abs(float(m[1]) - old) <= 1e-5 * old and abs(float(m[2]) - new) <= 1e-5 * new
ok = ok and "max_duration \"8ba\" (8 steps) -> \"16ba\" (16 steps)" in line and "the wsd decay 2 steps -> 4 steps" in line
sys.exit(0 if ok else 1)' "$line" "$old" "$new"
tap_check $? "resume to 16 steps, decay 4ba: says what changes, the lr of step 9 under each schedule (formula: $old, $new)"
grep -q "warning: --init-from $TMP/A/latest is ignored: the run resumes from its own checkpoint $TMP/A/step-0*8.h5" "$TMP/A2.txt"
tap_check $? "--init-from beside a run directory with a checkpoint: a warning says it is ignored"
got=$(lrs "$TMP/A/metrics.jsonl" 9 16)
want=$(formula 16 4 9 16)
((rc == 0)) && same_lrs "$got" "$want"
tap_check $? "steps 9..16 follow the new schedule's formula (exit $rc)"

# refused starts: a recipe (max_duration in the file) whose warmup, or warmup + decay, is longer
# than its run: exit 1, nothing written; the same cut short with --set max_duration: a warning
sed 's/^max_duration = .*/max_duration = "8ba";/' "$TSR_ROOT/configs/tiny.cfg" >"$TMP/short.cfg"
short=("${args[@]}")
short[1]=$TMP/short.cfg
"$TRAIN" "${short[@]}" --set optim.schedule=cosine --set optim.warmup=9ba --set run_dir="$TMP/W" >"$TMP/W.txt" 2>&1
r1=$?
"$TRAIN" "${short[@]}" --set optim.decay=7ba --set run_dir="$TMP/W" >"$TMP/W2.txt" 2>&1
r2=$?
grep -h error "$TMP/W.txt" "$TMP/W2.txt" | sed 's/^/# /'
[[ $r1 == 1 && $r2 == 1 && ! -e $TMP/W ]] &&
    grep -q 'optim.warmup = "9ba" (9 steps) is longer than the run, max_duration = "8ba" (8 steps)' "$TMP/W.txt" &&
    grep -q 'optim.warmup = "2ba" (2 steps) and optim.decay = "7ba" (7 steps) are longer than the run' "$TMP/W2.txt"
tap_check $? "recipe of 8 steps with warmup 9, and with warmup 2 + decay 7: exit 1 ($r1, $r2) naming both, nothing written"
"$TRAIN" "${args[@]}" --set max_duration=1ba --set optim.schedule=cosine --set run_dir="$TMP/T" >"$TMP/T.txt" 2>&1
rc=$?
((rc == 0)) && grep -q 'warning: --set max_duration=1ba (1 steps) is shorter than optim.warmup = "2ba" (2 steps): a trial run' "$TMP/T.txt"
tap_check $? "--set max_duration=1ba below the warmup (a trial run): a warning, the run goes on (exit $rc)"
"$TRAIN" "${args[@]}" --set max_duration=8ba --set optim.decay=1.5 --set run_dir="$TMP/W" >"$TMP/D2.txt" 2>&1
rc=$?
[[ $rc == 1 && ! -e $TMP/W ]] && grep -q 'optim.decay = "1.5": expected a fraction of max_duration in (0, 1]' "$TMP/D2.txt"
tap_check $? "optim.decay = 1.5: exit 1 ($rc) saying what is expected"
"$TRAIN" "${args[@]}" --set max_duration=16ba --set optim.decay=4ba --set run_dir="$TMP/A" >"$TMP/A3.txt" 2>&1 &&
    grep -q "step-0*16.h5" "$TMP/A3.txt" && ! grep -q "schedule changes\|is ignored" "$TMP/A3.txt"
tap_check $? "the finished run started again with the same schedule: it resumes and says nothing of a change"
tap_done
