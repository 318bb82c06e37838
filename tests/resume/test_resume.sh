#!/usr/bin/env bash
# Checkpoint/resume through the trainer (2 MPI ranks, ZeRO-1 and DDP):
#  - killed without warning (SIGKILL of one rank) and rerun: resumes from the newest checkpoint
#    and every later loss, lr and grad norm, and the final weights, equal the uninterrupted run
#    bit for bit;
#  - SIGUSR1 → checkpoint at the next step boundary → exit 85 → rerun finishes, bit for bit;
#  - a real SIGUSR1 from outside, through mpirun, ends a long run with exit 85 and a checkpoint;
#  - elastic: the step-4 checkpoint of 2 ranks resumed on 1 and on 4 ranks gives the same losses
#    within 1e-6 relative; a different global_batch is refused with exit 1;
#  - a corrupt newest checkpoint is skipped with a warning naming it, the previous one is used;
#  - SIGTERM is a stop request too; --init-from starts a new run (step 1) from trained weights;
#    it also takes a run directory (its `latest`); a directory without one exits 2 naming it.
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 15
make_synth "$TMP/data"
args=(--config "$TSR_ROOT/configs/tiny.cfg" --set model.vocab_size=512 --set data.tokenizer=
      --set sample.tokens=0 --set data.train="$TMP/data/train" --set data.val="$TMP/data/val"
      --set model.n_layer=2 --set model.d_model=64 --set model.n_head=4 --set seq_len=32
      --set global_batch=8 --set micro_batch=2 --set max_duration=12ba --set eval_interval=6ba
      --set eval_samples=16 --set save_interval=4ba --set threads=1 --set parallel.sharding=zero1)
run() { local dir=$1 np=$2; shift 2; "${MPIRUN[@]}" -np "$np" "$TRAIN" "${args[@]}" --set run_dir="$dir" "$@"; }
same_weights() { # exact equality of every model/ tensor of two checkpoint files
    /usr/bin/python3 - "$1" "$2" <<'PY'
import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
names = list(a["model"].keys())
bad = [n for n in names if not np.array_equal(a["model"][n][()], b["model"][n][()])]
print("# compared", len(names), "model tensors; different:", bad)
sys.exit(1 if bad or not names else 0)
PY
}

run "$TMP/A" 2 --set keep_last=3 >"$TMP/A.txt" 2>&1
tap_check $? "uninterrupted: 12 steps on 2 ranks, checkpoints at 4, 8, 12 (all kept)"

# (save_async = false in the killed run: its step-4 save is committed before the kill; a
# background save may still be in flight two steps later: tests/ckpt/test_ckpt_async_kill.sh)
TSR_FAULT=kill:6:1 run "$TMP/B" 2 --set save_async=false >"$TMP/B1.txt" 2>&1
rc=$?
run "$TMP/B" 2 >"$TMP/B2.txt" 2>&1
rc2=$?
[[ $rc != 0 && $rc2 == 0 ]] && grep -q "checkpoint resume step 4" "$TMP/B2.txt"
tap_check $? "rank 1 SIGKILLed after step 6 (exit $rc); the rerun resumed from step 4 and finished (exit $rc2)"
cmp -s <(final_lines "$TMP/A/metrics.jsonl") <(final_lines "$TMP/B/metrics.jsonl")
tap_check $? "after the crash: every step's loss, lr and grad norm equal the uninterrupted run bit for bit"
same_weights "$TMP/A/step-00000012.h5" "$TMP/B/step-00000012.h5"
tap_check $? "after the crash: final weights equal bit for bit"

TSR_FAULT=usr1:5:0 run "$TMP/C" 2 >"$TMP/C1.txt" 2>&1
rc=$?
[[ $rc == 85 && -f $TMP/C/step-00000005.h5 ]] && grep -q "stop requested" "$TMP/C1.txt"
tap_check $? "SIGUSR1 on rank 0 after step 5: checkpoint of step 5 committed, exit 85 (got $rc)"
run "$TMP/C" 2 >"$TMP/C2.txt" 2>&1 && cmp -s <(final_lines "$TMP/A/metrics.jsonl") <(final_lines "$TMP/C/metrics.jsonl") &&
    same_weights "$TMP/A/step-00000012.h5" "$TMP/C/step-00000012.h5"
tap_check $? "after exit 85 the rerun resumes at step 5 and ends bit for bit like the uninterrupted run"

# a real signal from outside: a long run, SIGUSR1 to mpirun once the first checkpoint exists
# (mpi_env.sh execs mpirun, so $! is mpirun itself)
"${MPIRUN[@]}" -np 2 "$TRAIN" "${args[@]}" --set run_dir="$TMP/D" --set max_duration=100000ba >"$TMP/D.txt" 2>&1 &
pid=$!
for _ in $(seq 1 300); do [[ -f $TMP/D/latest ]] && break; sleep 0.1; done
kill -USR1 "$pid" 2>/dev/null
wait "$pid"
rc=$?
[[ $rc == 85 ]] && grep -q "stop requested" "$TMP/D.txt" && [[ $(ls "$TMP/D"/step-*.h5 | wc -l) -ge 1 ]]
tap_check $? "SIGUSR1 sent to mpirun reaches the ranks: checkpoint and exit 85 (got $rc)"

for np in 1 4; do
    run "$TMP/E$np" $np --resume "$TMP/A/step-00000004.h5" >"$TMP/E$np.txt" 2>&1 &&
    /usr/bin/python3 - "$TMP/A/metrics.jsonl" "$TMP/E$np/metrics.jsonl" <<'PY'
import json, sys
def losses(p): return {d["step"]: d["loss"] for d in map(json.loads, open(p)) if "loss" in d}
a, b = losses(sys.argv[1]), losses(sys.argv[2])
assert sorted(b) == list(range(5, 13)), sorted(b)
worst = max(abs(a[k] - b[k]) / abs(a[k]) for k in b)
print(f"# max relative loss difference vs 2 ranks: {worst:.3g}")
sys.exit(0 if worst <= 1e-6 else 1)
PY
    tap_check $? "elastic: the 2-rank step-4 checkpoint resumed on $np rank(s) gives the same losses"
done

run "$TMP/F" 2 --resume "$TMP/A/step-00000004.h5" --set global_batch=16 >"$TMP/F.txt" 2>&1
rc=$?
[[ $rc == 1 ]] && grep -q "global_batch = 8, this run has global_batch = 16" "$TMP/F.txt"
tap_check $? "resuming with a different global_batch is refused with exit 1 (got $rc)"

# corrupt the newest checkpoint of a finished run, then extend the run: it must resume from step 8
cp -r "$TMP/A" "$TMP/G"
/usr/bin/python3 - "$TMP/G/step-00000012.h5" <<'PY'
import sys, h5py
f = h5py.File(sys.argv[1], "r"); off = f["model/wte"].id.get_offset(); f.close()
with open(sys.argv[1], "r+b") as g:
    g.seek(off + 100); b = g.read(1); g.seek(off + 100); g.write(bytes([b[0] ^ 0x40]))
PY
run "$TMP/G" 2 --set max_duration=14ba >"$TMP/G.txt" 2>&1
rc=$?
[[ $rc == 0 ]] && grep -q "step-00000012.h5" "$TMP/G.txt" && grep -qi "warning" "$TMP/G.txt" &&
    grep -q "checkpoint resume step 8" "$TMP/G.txt"
tap_check $? "a corrupt newest checkpoint is named in a warning and the run resumes from step 8 (exit $rc)"
TSR_FAULT=term:3:1 run "$TMP/H" 2 >"$TMP/H.txt" 2>&1
rc=$?
[[ $rc == 85 && -f $TMP/H/step-00000003.h5 ]]
tap_check $? "SIGTERM on rank 1 after step 3: checkpoint of step 3, exit 85 (got $rc)"
run "$TMP/I" 2 --init-from "$TMP/A/step-00000012.h5" --set max_duration=2ba >"$TMP/I.txt" 2>&1
rc=$?
fresh=$(json_field "$TMP/A/metrics.jsonl" 1 loss); init=$(json_field "$TMP/I/metrics.jsonl" 1 loss)
[[ $rc == 0 ]] && grep -q "checkpoint init-from step 0" "$TMP/I.txt" &&
    awk -v a="$init" -v b="$fresh" 'BEGIN { exit !(a < b - 0.1) }'
tap_check $? "--init-from: a new run at step 1 from trained weights (loss $init vs $fresh from scratch; exit $rc)"
run "$TMP/J" 2 --init-from "$TMP/A" --set max_duration=1ba >"$TMP/J.txt" 2>&1 &&
    grep -q "checkpoint init-from step 0 | $TMP/A/step-00000012.h5 " "$TMP/J.txt"
tap_check $? "--init-from RUN_DIR: the checkpoint its latest names (step-00000012.h5)"
mkdir -p "$TMP/empty"
run "$TMP/K" 2 --init-from "$TMP/empty" --set max_duration=1ba >"$TMP/K.txt" 2>&1
rc=$?
[[ $rc == 2 ]] && grep -q "$TMP/empty/latest: cannot be read" "$TMP/K.txt"
tap_check $? "--init-from a directory without latest: exit $rc naming $TMP/empty/latest"
tap_done
