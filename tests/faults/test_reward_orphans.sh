#!/usr/bin/env bash
# A reward program and everything it starts end with its rank, however the rank ends (docs/rl.md
# "The reward program"; src/posttrain/reward_keeper.c; issue 64 finding 2). The program led a process
# group of its own, which the trainer SIGKILLed when it stopped it: a SIGKILLed rank (or mpirun's
# job) never did, and the program ran on under init; a grandchild in a session of its own
# (setsid, Python's start_new_session=True) outlived even a clean run. Now a keeper, a subreaper
# tied to the rank by a lifeline pipe, ends them all. The reward program here (a shell script)
# starts, besides the answering program (tests/train/grpo_reward.py), a grandchild under setsid
# in the background and a daemon (setsid in a subshell that exits at once, so that it is orphaned
# from the start), each a sleeper whose command line holds this test's unique marker. Checked,
# for 1 and 2 ranks under GRPO: after
#  - a clean run (exit 0);
#  - SIGKILL of rank 1 of 2 in step 2's rollout (its reward program hanging there: mpirun ends
#    the job);
#  - SIGKILL of a 1-rank trainer in the same place;
#  - SIGTERM to mpirun (the job killed) in the same place,
# no process with the marker is left (within 5 s of the job's end). What the test started is
# killed on its way out in any case (found by the marker).
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
MARK=$TMP/orphan-mark
cleanup() { local p; p=$(pgrep -f "$MARK"); [[ -n $p ]] && kill -KILL $p 2>/dev/null; rm -rf "$TMP"; }
trap cleanup EXIT
tap_plan 4
grpo_prompts "$TMP/rl" 300
cat >"$TMP/reward.sh" <<SH
setsid $PY3 -c 'import time; time.sleep(600)' $MARK-session-\$TESSERA_RANK &
( setsid $PY3 -c 'import time; time.sleep(600)' $MARK-daemon-\$TESSERA_RANK & )
exec $PY3 $TSR_ROOT/tests/train/grpo_reward.py $MARK-program-\$TESSERA_RANK
SH
grpo_small_args "$TMP/rl"
small+=(--set reward.kind=command --set reward.timeout=120
       --set reward.command="sh $TMP/reward.sh")
# left: the number of marked processes still there, up to 5 s after the job ended (a keeper ends
# them within milliseconds of its rank); they are listed, then killed (the next case starts clean)
left() {
    local p
    for _ in $(seq 1 50); do p=$(pgrep -f "$MARK"); [[ -z $p ]] && return; sleep 0.1; done
    ps -o pid,ppid,sid,args -p "$(tr '\n' , <<<"$p" | sed 's/,$//')" | sed 's/^/#   /' >&2
    echo "$p" | wc -l
    kill -KILL $p 2>/dev/null
}
# wait_step FILE N: until the run's metrics.jsonl has step N (60 s at most)
wait_step() { for _ in $(seq 1 600); do grep -q "^{\"step\": $2," "$1" 2>/dev/null && return 0; sleep 0.1; done; return 1; }
# marked N: until N marked programs run (30 s at most)
marked() { for _ in $(seq 1 300); do (($(pgrep -fc "$MARK") >= $1)) && return 0; sleep 0.1; done; return 1; }

"$TRAIN" "${small[@]}" --set run_dir="$TMP/clean" --set max_duration=2ba >"$TMP/clean.log" 2>&1
rc=$?
n=$(left)
((rc == 0)) && [[ -z $n ]]
tap_check $? "a clean run (exit $rc): nothing of its reward program left, setsid grandchild and daemon included${n:+ ($n left)}"

# rank 1's program hangs from its 9th request (step 2: 8 a step per rank), rank 0 waits for it; a
# single rank's from its 17th (16 a step)
export GRPO_REWARD_MODE=hang GRPO_REWARD_AT=9
"${MPIRUN[@]}" -np 2 "$TRAIN" "${small[@]}" --set run_dir="$TMP/k2" --set max_duration=4ba >"$TMP/k2.log" 2>&1 &
M=$!
ranks=($(started_ranks $M 2))
wait_step "$TMP/k2/metrics.jsonl" 1 && marked 6 && sleep 1
R1=
for p in "${ranks[@]}"; do tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=1 && R1=$p; done
tap_diag "ranks ${ranks[*]}; rank 1 is PID ${R1:-?}"
if [[ -n $R1 ]]; then kill -KILL "$R1"; else kill -KILL $M; fi
timeout 60 tail --pid=$M -f /dev/null
wait $M
rc=$?
n=$(left)
[[ -n $R1 && $rc != 0 ]] && [[ -z $n ]]
tap_check $? "2 ranks, rank 1 SIGKILLed in step 2's rewards (mpirun exit $rc): nothing of either rank's reward program left${n:+ ($n left)}"

GRPO_REWARD_AT=17 "$TRAIN" "${small[@]}" --set run_dir="$TMP/k1" --set max_duration=4ba >"$TMP/k1.log" 2>&1 &
T=$!
wait_step "$TMP/k1/metrics.jsonl" 1 && marked 3 && sleep 1
kill -KILL $T
wait $T
rc=$?
n=$(left)
((rc == 137)) && [[ -z $n ]]
tap_check $? "1 rank SIGKILLed in step 2's rewards (exit $rc): nothing of its reward program left${n:+ ($n left)}"

"${MPIRUN[@]}" -np 2 "$TRAIN" "${small[@]}" --set run_dir="$TMP/j2" --set max_duration=4ba >"$TMP/j2.log" 2>&1 &
M=$!
wait_step "$TMP/j2/metrics.jsonl" 1 && marked 6 && sleep 1
kill -TERM $M
timeout 60 tail --pid=$M -f /dev/null
wait $M
rc=$?
n=$(left)
[[ $rc != 0 && -z $n ]]
tap_check $? "2 ranks, mpirun SIGTERMed in step 2's rewards (the job killed: exit $rc): nothing of the reward programs left${n:+ ($n left)}"
tap_done
