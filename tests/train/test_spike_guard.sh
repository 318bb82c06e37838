#!/usr/bin/env bash
# The loss-spike and NaN guard (docs/spike-guard.md), on real MPI ranks and real checkpoints:
#  - a window of garbage data (TSR_FAULT=garbage:LO:HI replaces data batches LO..HI-1 by random
#    tokens) makes loss spikes: the outlier updates are skipped, after guard.patience of them the
#    run rolls back to the newest checkpoint before the spike, sets aside the newer checkpoint,
#    skips the data window, and ends within 2% of a clean run's validation loss;
#  - the log and the checkpoint record exactly what was skipped; a resume from a checkpoint after
#    the rollback continues the same trajectory bit for bit (the skip is part of the state);
#  - a NaN gradient on one rank is never applied: weights and moments after that step equal the
#    ones before it bit for bit;
#  - a stop request inside an outlier streak: the streak goes on after the resume (the guard's
#    window and streak are checkpointed), the rollback sets the streak-time checkpoint aside;
#  - no periodic save inside a streak, so retention never deletes the checkpoint a rollback needs;
#  - guard.action = skip skips, then takes a lasting level as the new normal; max_rollbacks used
#    up stops with exit 2 and run_dir/guard-report.json; no checkpoint before a finite spike:
#    the run goes on (rebaseline), before a NaN streak: exit 2;
#  - a curriculum switch to harder data restarts the window instead of looking like a spike;
#  - DDP as well as ZeRO-1; metrics.jsonl stays JSON (a NaN is null).
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 17
make_synth "$TMP/data"
common=(--set model.vocab_size=512 --set sample.tokens=0 --set model.n_layer=2
        --set model.d_model=64 --set model.n_head=4 --set seq_len=32 --set global_batch=8
        --set micro_batch=2 --set max_duration=60ba --set eval_interval=60ba --set eval_samples=64
        --set save_interval=5ba --set keep_last=20 --set threads=1 --set log_interval=1
        --set guard.window=10 --set parallel.sharding=zero1)
args=(--config "$TSR_ROOT/configs/tiny.cfg" --set data.tokenizer= --set data.train="$TMP/data/train"
      --set data.val="$TMP/data/val" "${common[@]}")
run() { local dir=$1; shift; "${MPIRUN[@]}" -np 2 "$TRAIN" "${args[@]}" --set run_dir="$dir" "$@"; }
attr() { # attr FILE NAME: a root attribute of a checkpoint
    /usr/bin/python3 -c 'import sys,h5py; v=h5py.File(sys.argv[1],"r").attrs[sys.argv[2]]; print(v.decode() if isinstance(v,bytes) else v)' "$1" "$2"
}
val_loss() { grep '"val_loss"' "$1" | tail -1 | sed -E 's/.*"val_loss": ([^,}]+).*/\1/'; }

run "$TMP/A" >"$TMP/A.txt" 2>&1
tap_check $? "clean run: 60 steps on 2 ranks"

# garbage in data batches 33..35: steps 34, 35, 36 are outliers; the step-35 checkpoint falls
# inside the streak, so the rollback goes to step 30 and sets step 35 aside
TSR_FAULT=garbage:33:36 run "$TMP/B" >"$TMP/B.txt" 2>&1
rc=$?
# what the guard did, as "action@step" (a later genuine outlier of this tiny, noisy run may add
# a skip: the rule is the configured one, so only the garbage window's steps are asserted)
actions() { grep '"event": "guard"' "$1" | sed -E 's/.*"action": "([a-z-]+)", "step": ([0-9]+).*/\1@\2/' | tr '\n' ' '; }
skips=$(actions "$TMP/B/metrics.jsonl")
[[ $rc == 0 && $skips == "skip@34 skip@35 rollback@36 "* ]] &&
    grep -q '"event": "rollback", "step": 36, "to_step": 30, .*"skipped_batches": \[30, 36\], "skipped_samples": \[240, 288\]' "$TMP/B/metrics.jsonl"
tap_check $? "garbage batches 33-35: steps 34, 35 skipped, rollback at step 36 to step 30, data batches [30, 36) skipped (guard: $skips; exit $rc)"
# a stop request after step 35, inside the streak: exit 85 with a step-35 checkpoint; the rerun
# continues the streak (window and streak restored), rolls back to 30 and sets step 35 aside
TSR_FAULT=garbage:33:36,usr1:35:0 run "$TMP/B2" >"$TMP/B2a.txt" 2>&1
rc=$?
TSR_FAULT=garbage:33:36 run "$TMP/B2" >"$TMP/B2b.txt" 2>&1 # (the new trajectory passes step 35 too)
rc2=$?
[[ $rc == 85 && $rc2 == 0 && -f $TMP/B2/step-00000035.h5.rolledback ]] &&
    cmp -s <(final_lines "$TMP/B/metrics.jsonl" | awk '$1 > 35 || $1 <= 30') <(final_lines "$TMP/B2/metrics.jsonl" | awk '$1 > 35 || $1 <= 30')
tap_check $? "stop request inside the streak (exit $rc): the resumed run continues the streak, rolls back to 30, sets step 35 aside as .rolledback, and ends like the uninterrupted one bit for bit"
[[ $(attr "$TMP/B/step-00000060.h5" skipped_batches) == "30-36" && $(attr "$TMP/B/step-00000060.h5" rollbacks) == 1 &&
   $(attr "$TMP/B/step-00000060.h5" data_cursor) == $(( (60 + 6) * 8 )) && $(attr "$TMP/B/step-00000030.h5" skipped_batches) == "30-36" ]]
tap_check $? "the checkpoints record it: skipped_batches = 30-36, rollbacks = 1, data_cursor = 66 batches at step 60 (step 30 re-committed with the skip)"
a=$(val_loss "$TMP/A/metrics.jsonl") b=$(val_loss "$TMP/B/metrics.jsonl")
awk -v a="$a" -v b="$b" 'BEGIN { d = (a > b ? a - b : b - a) / a; print "# val loss clean", a, "guarded", b, "rel", d; exit !(d < 0.02) }'
tap_check $? "final validation loss within 2% of the clean run ($b vs $a)"

"${MPIRUN[@]}" -np 2 "$TRAIN" "${args[@]}" --set run_dir="$TMP/C" --resume "$TMP/B/step-00000045.h5" >"$TMP/C.txt" 2>&1 &&
    cmp -s <(final_lines "$TMP/B/metrics.jsonl" | awk '$1 > 45') <(final_lines "$TMP/C/metrics.jsonl")
tap_check $? "resumed from the step-45 checkpoint (after the rollback, no fault set): steps 46-60 equal the guarded run bit for bit"

# NaN at step 5 with a stop request right after it: the step-5 checkpoint shows what step 5 did
TSR_FAULT=nan:5:1,usr1:5:0 run "$TMP/N" --set max_duration=8ba --set save_interval=1ba >"$TMP/N.txt" 2>&1
rc=$?
TSR_FAULT=nan:5:1 run "$TMP/N" --set max_duration=8ba --set save_interval=1ba >"$TMP/N2.txt" 2>&1
rc2=$?
nan_check() { # nan_check RUN_DIR: step 5 == step 4 in every tensor, finite and trained at 8
/usr/bin/python3 - "$1/step-00000004.h5" "$1/step-00000005.h5" "$1/step-00000008.h5" <<'PY'
import sys, h5py, numpy as np
a, b, c = (h5py.File(p, "r") for p in sys.argv[1:])
names = [g + "/" + n for g in ("model", "optim/m", "optim/v") for n in a[g].keys()]
same = all(np.array_equal(a[n][()], b[n][()]) for n in names)
finite = all(np.isfinite(c[n][()]).all() for n in names)
moved = not all(np.array_equal(b[n][()], c[n][()]) for n in names)
print("# %d tensors: step 5 == step 4: %s, finite at 8: %s, trained after: %s" % (len(names), same, finite, moved))
sys.exit(0 if same and finite and moved and a.attrs["optim_step"] == 4 and b.attrs["optim_step"] == 4 and c.attrs["optim_step"] == 7 else 1)
PY
}
nan_check "$TMP/N" && [[ $rc == 85 && $rc2 == 0 ]] && grep -q '"action": "skip", "step": 5,.*not finite' "$TMP/N/metrics.jsonl"
tap_check $? "ZeRO-1, NaN in rank 1's gradient at step 5: skipped; weights and moments after step 5 equal step 4's bit for bit; training goes on (optim_step 7 at step 8)"
TSR_FAULT=nan:5:1,usr1:5:0 run "$TMP/Nd" --set parallel.sharding=ddp --set max_duration=8ba --set save_interval=1ba >/dev/null 2>&1
TSR_FAULT=nan:5:1 run "$TMP/Nd" --set parallel.sharding=ddp --set max_duration=8ba --set save_interval=1ba >/dev/null 2>&1 &&
    nan_check "$TMP/Nd" && /usr/bin/python3 -c '
import json, sys
[json.loads(l) for f in sys.argv[1:] for l in open(f)]' "$TMP/N/metrics.jsonl" "$TMP/Nd/metrics.jsonl"
tap_check $? "DDP, the same NaN: never applied; and every metrics.jsonl line is JSON (the NaN step logs null)"

TSR_FAULT=garbage:33:36 run "$TMP/Bd" --set parallel.sharding=ddp >"$TMP/Bd.txt" 2>&1
rc=$?
skips=$(actions "$TMP/Bd/metrics.jsonl")
[[ $rc == 0 && $skips == "skip@34 skip@35 rollback@36 "* ]] && grep -q '"event": "rollback", "step": 36, "to_step": 30' "$TMP/Bd/metrics.jsonl"
tap_check $? "DDP, the garbage window: the same skips and rollback to step 30 ($skips; exit $rc)"

TSR_FAULT=garbage:33:36 run "$TMP/K" --set save_interval=1ba --set keep_last=2 >"$TMP/K.txt" 2>&1
rc=$?
[[ $rc == 0 ]] && grep -q '"event": "rollback", "step": 36, "to_step": 33, .*"skipped_batches": \[33, 36\]' "$TMP/K/metrics.jsonl"
tap_check $? "saving every step with keep_last = 2: no save inside the streak, so the step-33 checkpoint is still there to roll back to (exit $rc)"

TSR_FAULT=garbage:33:36 run "$TMP/S" --set guard.action=skip >"$TMP/S.txt" 2>&1
rc=$?
skips=$(actions "$TMP/S/metrics.jsonl") n=$(attr "$TMP/S/step-00000060.h5" updates_skipped)
[[ $rc == 0 && $skips == "skip@34 skip@35 skip@36 rebaseline@36 "* && $n == $(grep -o 'skip@' <<<"$skips" | wc -l) ]] &&
    ! grep -q rollback "$TMP/S/metrics.jsonl"
tap_check $? "guard.action = skip: the 3 garbage steps are skipped, then the window restarts (patience reached), no rollback, updates_skipped = $n ($skips; exit $rc)"

TSR_FAULT=garbage:33:36 run "$TMP/W" --set guard.action=warn >"$TMP/W.txt" 2>&1
[[ $? == 0 && $(grep -c '"action": "warn"' "$TMP/W/metrics.jsonl") -ge 1 && $(attr "$TMP/W/step-00000060.h5" updates_skipped) == 0 ]]
tap_check $? "guard.action = warn: outliers are logged and applied"

TSR_FAULT=garbage:33:1000 run "$TMP/M" --set guard.max_rollbacks=1 >"$TMP/M.txt" 2>&1
rc=$?
[[ $rc == 2 && -f $TMP/M/guard-report.json ]] && grep "rollback(s) allowed (guard.max_rollbacks) are used up" "$TMP/M.txt" | grep -q "raise guard.threshold (now 6), set guard.action to skip .*, or guard.window = 0 (no spike guard)" &&
    /usr/bin/python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print("#", r); sys.exit(0 if r["rollbacks"] == 1 and r["skipped_batches"] == [[30, 36]] else 1)' "$TMP/M/guard-report.json"
tap_check $? "endless garbage with max_rollbacks = 1: one rollback, then exit 2 with guard-report.json, the error naming guard.threshold, guard.action = skip and guard.window = 0 (got $rc)"

TSR_FAULT=garbage:33:36 run "$TMP/E" --set save_interval=0ba >"$TMP/E.txt" 2>&1
rc=$?
[[ $rc == 0 && $(actions "$TMP/E/metrics.jsonl") == "skip@34 skip@35 rollback@36 rebaseline@36 "* ]] && grep -q "no checkpoint before the spike to roll back to" "$TMP/E.txt"
tap_check $? "a finite spike with no checkpoint before it: the run goes on, the window restarts, said loudly (exit $rc)"
TSR_FAULT=nan:33-40:1 run "$TMP/E2" --set save_interval=0ba >"$TMP/E2.txt" 2>&1
rc=$?
[[ $rc == 2 && -f $TMP/E2/guard-report.json ]] && grep -q "no checkpoint at or before step 32 (before the first non-finite step)" "$TMP/E2.txt"
tap_check $? "NaN for 3 steps with no checkpoint before them: exit 2 saying so, with the report (got $rc)"

# a curriculum that switches to much harder data at 50%: the loss level rises for good; the
# window restarts at the switch, so this is not a spike
"$TOOL" synth --out "$TMP/easy" --vocab 16 --tokens 100000 --seed 3 >/dev/null
sed '/^data = {/,/^};/d' "$TSR_ROOT/configs/tiny.cfg" >"$TMP/cur.cfg"
cat >>"$TMP/cur.cfg" <<CFG
data = { tokenizer = ""; val = "$TMP/data/val";
  mix = ( { name = "easy"; path = "$TMP/easy/train"; proportion = 0.9; },
          { name = "hard"; path = "$TMP/data/train"; proportion = 0.1; } );
  curriculum = ( { at = "50%"; scale = { hard = 9.0; }; } ); };
CFG
"${MPIRUN[@]}" -np 2 "$TRAIN" --config "$TMP/cur.cfg" "${common[@]}" --set run_dir="$TMP/Q" >"$TMP/Q.txt" 2>&1
rc=$?
[[ $rc == 0 && " $(actions "$TMP/Q/metrics.jsonl")" == *" restart-window@31 "* ]] && ! grep -q 'rollback' "$TMP/Q/metrics.jsonl"
tap_check $? "a curriculum switch to harder data: the window restarts at step 31, no rollback, the run finishes ($(actions "$TMP/Q/metrics.jsonl"); exit $rc)"

run "$TMP/O" --set max_duration=20ba --set guard.window=0 >"$TMP/O.txt" 2>&1 &&
    cmp -s <(final_lines "$TMP/O/metrics.jsonl") <(final_lines "$TMP/A/metrics.jsonl" | awk '$1 <= 20')
tap_check $? "a clean run's steps do not depend on the guard (window 0 vs 10: first 20 steps bit for bit)"
