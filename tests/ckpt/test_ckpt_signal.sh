#!/usr/bin/env bash
# Signals that arrive while a checkpoint is being written (2 MPI ranks, ZeRO-1, 4 steps,
# checkpoints every 2, synchronous: save_async = false; the background save's signals and kills
# are tests/ckpt/test_ckpt_async_kill.sh's):
#  B - a stop request (SIGUSR1 on rank 0 after step 3, TSR_FAULT) starts the save of step 3; in the
#      middle of it a second SIGUSR1 and a SIGTERM reach both ranks: the save completes (once),
#      exit 85, `tessera ckpt verify` accepts the file, `latest` names it, no *.tmp is left, and
#      the rerun resumes from step 3 and ends bit for bit like the uninterrupted run A (every
#      step's loss, lr and grad norm; every tensor of the final checkpoint);
#  D - SIGUSR1 + SIGTERM in the middle of the periodic save of step 2: that save completes and is
#      the stop checkpoint (exit 85, step 2 written once, not a second time), the rerun is
#      bit-identical;
#  C - SIGKILL in the middle of the save of step 4 (the only way to interrupt a save): `latest`
#      still names step 2, which verifies; the rerun resumes from step 2 (the half-written .tmp
#      is no candidate, and the next save removes it) and ends bit for bit like run A.
# "In the middle of the save" without a hook in the checkpoint library: a checkpoint of this model
# is 21 MB and its .tmp grows as the tensors are written, so a poller (1 ms) waits until the .tmp
# holds a quarter of a checkpoint's bytes, SIGSTOPs both ranks, waits until both are stopped, and
# only then checks that the .tmp is still there and its final name is not: rank 0 renames only at
# the end of the save and the other ranks leave it after that, so both are inside ckpt_save.
# The signals are sent to the stopped ranks (they stay pending) and SIGCONT delivers them there.
# If the save was over before the ranks stopped (a very slow poll), that run is repeated (3 times
# at most); no timing is asserted.
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
STARTED=()  # mpirun pids of this test: on exit, their ranks are continued and killed
cleanup() {
    local p c
    for p in "${STARTED[@]}"; do
        for c in $(pgrep -P "$p" 2>/dev/null); do kill -CONT "$c" 2>/dev/null; kill -KILL "$c" 2>/dev/null; done
        kill -KILL "$p" 2>/dev/null
    done
    rm -rf "$TMP"
}
trap cleanup EXIT
tap_plan 9
make_synth "$TMP/data"
args=(--config "$TSR_ROOT/configs/tiny.cfg" --set model.vocab_size=512 --set data.tokenizer=
      --set sample.tokens=0 --set data.train="$TMP/data/train" --set data.val="$TMP/data/val"
      --set model.n_layer=2 --set model.d_model=256 --set model.n_head=4 --set seq_len=32
      --set global_batch=8 --set micro_batch=2 --set max_duration=4ba --set eval_interval=0ba
      --set save_interval=2ba --set keep_last=3 --set threads=1 --set log_interval=1
      --set parallel.sharding=zero1 --set save_async=false)
run() { local dir=$1; shift; "${MPIRUN[@]}" -np 2 "$TRAIN" "${args[@]}" --set run_dir="$dir" "$@"; }
bit_identical() { # RUN_DIR: every step's loss/lr/norm and the final checkpoint equal run A's
    cmp -s <(final_lines "$TMP/A/metrics.jsonl") <(final_lines "$1/metrics.jsonl") &&
        same_tensors "$(ck "$TMP/A" 4)" "$(ck "$1" 4)"
}
ranks_of() { pgrep -P "$1" -x tessera-train; }  # mpirun starts the ranks as its children
# wait_run PID: waits up to 120 s for a background mpirun of this shell; sets rc to its status
wait_run() {
    local pid=$1 c
    for _ in $(seq 1 1200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
        tap_diag "mpirun $pid still running after 120 s: killed"
        for c in $(ranks_of "$pid"); do kill -CONT "$c" 2>/dev/null; kill -KILL "$c" 2>/dev/null; done
        kill -KILL "$pid" 2>/dev/null
    fi
    wait "$pid"
    rc=$?
}
# freeze_in_save TMPFILE MIN_BYTES PID...: when TMPFILE holds MIN_BYTES, SIGSTOP the PIDs; exit 0
# if, once every PID is stopped, TMPFILE is still there and its final name is not
freeze_in_save() {
    /usr/bin/python3 - "$@" <<'PY'
import os, signal, sys, time
tmp, need, pids = sys.argv[1], int(sys.argv[2]), [int(p) for p in sys.argv[3:]]
final = tmp[:-len(".tmp")]
def alive():
    try:
        for p in pids: os.kill(p, 0)
        return True
    except ProcessLookupError:
        return False
def state(p):
    try:
        with open(f"/proc/{p}/stat") as f: return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"
deadline = time.monotonic() + 60
size = 0
while time.monotonic() < deadline:
    try: size = os.stat(tmp).st_size
    except FileNotFoundError: size = 0
    if size >= need or os.path.exists(final) or not alive(): break
    time.sleep(0.001)
if size < need:
    print(f"# {os.path.basename(tmp)} never held {need} bytes (final file there: "
          f"{os.path.exists(final)}, ranks alive: {alive()})")
    sys.exit(1)
for p in pids: os.kill(p, signal.SIGSTOP)
while any(state(p) not in ("T", "t", "gone") for p in pids) and time.monotonic() < deadline:
    time.sleep(0.001)
states = [state(p) for p in pids]
try: size = os.stat(tmp).st_size
except FileNotFoundError: size = -1
inside = states == ["T"] * len(pids) and size >= 0 and not os.path.exists(final)
print(f"# ranks {pids} in state {states} with {os.path.basename(tmp)} at {size} bytes; final "
      f"name {'absent' if not os.path.exists(final) else 'present'}: "
      f"{'inside the save' if inside else 'missed the save'}")
sys.exit(0 if inside else 1)
PY
}
# scenario DIR STEP SIGNAL...: starts a run into DIR (TSR_FAULT=$FAULT), stops both ranks in the
# middle of the save of STEP, sends each SIGNAL to both, continues them, waits; sets rc and
# attempts. A run whose save was not caught in progress is repeated in a fresh DIR (3 at most).
scenario() {
    local dir=$1 step=$2 pid r s min
    shift 2
    min=$(($(stat -c %s "$(ck "$TMP/A" 2)") / 4))
    for attempts in 1 2 3; do
        rm -rf "$dir"
        # started directly (not through a function: a subshell), so $! is mpirun itself
        TSR_FAULT=${FAULT:-} "${MPIRUN[@]}" -np 2 "$TRAIN" "${args[@]}" --set run_dir="$dir" >"$dir.txt" 2>&1 &
        pid=$!
        STARTED+=("$pid")
        r=$(started_ranks "$pid" 2)
        if [[ $(wc -w <<<"$r") == 2 ]] && freeze_in_save "$(ck "$dir" "$step").tmp" "$min" $r; then
            for s in "$@"; do kill -"$s" $r; done
            kill -CONT $r 2>/dev/null
            wait_run "$pid"
            return 0
        fi
        tap_diag "attempt $attempts: the save of step $step was not caught in progress (ranks: '$(echo $r)')"
        kill -CONT $r 2>/dev/null
        wait_run "$pid"
    done
    rc=-1
    return 1
}
no_tmp() { ! compgen -G "$1/*.tmp" >/dev/null; }
saves_of() { grep -c "^checkpoint save step $2 " "$1"; }  # LOG STEP: saves of that step logged

run "$TMP/A" >"$TMP/A.txt" 2>&1
rc=$?
[[ $rc == 0 && -f $(ck "$TMP/A" 2) && -f $(ck "$TMP/A" 4) ]]
tap_check $? "A, uninterrupted: 4 steps on 2 ranks (ZeRO-1), checkpoints of steps 2 and 4 (exit $rc)"

# B: the stop request's own save gets a second SIGUSR1 and a SIGTERM
FAULT=usr1:3:0 scenario "$TMP/B" 3 USR1 TERM
tap_check $? "B: stop request after step 3; both ranks caught in the middle of its save and sent SIGUSR1 + SIGTERM (attempts: $attempts)"
[[ $rc == 85 ]] && grep -q "stop requested" "$TMP/B.txt" && [[ $(saves_of "$TMP/B.txt" 3) == 1 ]]
tap_check $? "B: the save of step 3 completed (once) and the run exited 85 (got $rc)"
[[ $(cat "$TMP/B/latest" 2>/dev/null) == step-00000003.h5 ]] && no_tmp "$TMP/B" &&
    "$TOOL" ckpt verify "$(ck "$TMP/B" 3)" >"$TMP/B.verify" 2>&1
tap_check $? "B: tessera ckpt verify accepts step-00000003.h5, latest names it, no *.tmp is left"
run "$TMP/B" >"$TMP/B2.txt" 2>&1 && grep -q "checkpoint resume step 3" "$TMP/B2.txt" && bit_identical "$TMP/B"
tap_check $? "B: the rerun resumes from step 3 and ends bit for bit like the uninterrupted run"

# D: the stop signals arrive during a periodic save, which then is the stop checkpoint
FAULT= scenario "$TMP/D" 2 USR1 TERM
ok=$?
[[ $ok == 0 && $rc == 85 && $(cat "$TMP/D/latest" 2>/dev/null) == step-00000002.h5 ]] &&
    [[ $(saves_of "$TMP/D.txt" 2) == 1 ]] && grep -q "stop requested" "$TMP/D.txt" && no_tmp "$TMP/D" &&
    "$TOOL" ckpt verify "$(ck "$TMP/D" 2)" >"$TMP/D.verify" 2>&1
tap_check $? "D: SIGUSR1 + SIGTERM in the middle of the periodic save of step 2: it completes, is the stop checkpoint (written once, verifies, latest), exit 85 (got $rc, attempts $attempts)"
run "$TMP/D" >"$TMP/D2.txt" 2>&1 && grep -q "checkpoint resume step 2" "$TMP/D2.txt" && bit_identical "$TMP/D"
tap_check $? "D: the rerun resumes from step 2 and ends bit for bit like the uninterrupted run"

# C: SIGKILL in the middle of the save of step 4: step 2 stays the checkpoint
FAULT= scenario "$TMP/C" 4 KILL
ok=$?
[[ $ok == 0 && $rc != 0 && $rc != 85 && $(cat "$TMP/C/latest" 2>/dev/null) == step-00000002.h5 ]] &&
    [[ -f $(ck "$TMP/C" 4).tmp && ! -e $(ck "$TMP/C" 4) ]] &&
    "$TOOL" ckpt verify "$(ck "$TMP/C" 2)" >"$TMP/C.verify" 2>&1
tap_check $? "C: SIGKILL in the middle of the save of step 4 (exit $rc): latest still names step 2, which verifies; step 4 is only a .tmp"
run "$TMP/C" >"$TMP/C2.txt" 2>&1 && grep -q "checkpoint resume step 2" "$TMP/C2.txt" && no_tmp "$TMP/C" &&
    bit_identical "$TMP/C"
tap_check $? "C: the rerun resumes from step 2 (the .tmp ignored, then removed) and ends bit for bit like the uninterrupted run"
tap_done
