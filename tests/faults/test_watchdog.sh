#!/usr/bin/env bash
# The trainer's watchdogs (2 MPI ranks, test-only TSR_FAULT injections):
#  - a straggler (rank 1 sleeps in every step's compute) -> checkpoint + exit 86, naming the rank and
#    its host, logged in metrics.jsonl; the rerun without the fault resumes and finishes;
#  - a healthy run with the same settings never trips it;
#  - an MFU floor nobody reaches -> exit 86 naming the MFU;
#  - a rank stuck in a step (hang_timeout) -> every rank names its phase, the run aborts (exit 3);
#  - stop requests still reach the trainer while the hang thread runs; bad settings exit 1;
#  - a SIGTERM to a rank waiting for a hung peer: exit 143 after the stop's grace time (5 s);
#  - under GRPO (docs/rl.md "Watchdogs"; tiny steps of a fresh model on the arithmetic prompts): the
#    straggler watchdog times the training part only: a rank computing 200 ms longer per step is
#    named (exit 86 after 2 windows of 1 step, its checkpoint committed) while a rank decoding
#    200 ms longer is not; the rerun resumes from that checkpoint; a rank stuck decoding is
#    reported "stuck in rollout generation" (exit 3); a reward program that hangs under a
#    hang_timeout below reward.timeout: warned at start, "stuck in reward scoring" (exit 3), the
#    program (a shell's child) killed with the run.
# shellcheck source=../lib.sh
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 12
make_synth "$TMP/data"
args=(--config "$TSR_ROOT/configs/tiny.cfg" --set model.vocab_size=512 --set data.tokenizer=
      --set sample.tokens=0 --set data.train="$TMP/data/train" --set data.val=
      --set model.n_layer=2 --set model.d_model=64 --set model.n_head=4 --set seq_len=32
      --set global_batch=8 --set micro_batch=4 --set max_duration=60ba --set eval_interval=0ba
      --set save_interval=0ba --set threads=1 --set log_interval=10
      --set watchdog.window=5 --set watchdog.patience=2 --set watchdog.slow_factor=10)
# slow_factor 10, not the default 2: a step here computes in about a millisecond, so a rank the host
# delays by a few ms (CI's 2 cores shared with other work) would trip 2x in a healthy run; the
# injected straggler's 60 ms is still far over 10x
run() { local dir=$1; shift; "${MPIRUN[@]}" -np 2 "$TRAIN" "${args[@]}" --set run_dir="$dir" "$@"; }

TSR_FAULT=slow:60:1 run "$TMP/S" >"$TMP/S1.txt" 2>&1
rc=$?
grep -q "watchdog: rank 1 on .* computes .* ms per step, .*x the ranks' median" "$TMP/S1.txt" &&
    [[ $rc == 86 && -f $TMP/S/step-00000010.h5 ]] && grep -q '"event": "watchdog", "slow_rank": 1' "$TMP/S/metrics.jsonl"
tap_check $? "straggler (rank 1 +60 ms per step): exit $rc after 2 windows of 5 steps, rank and host named, checkpoint of step 10, JSONL event"
"$TOOL" ckpt verify "$TMP/S/step-00000010.h5" >/dev/null 2>&1 && run "$TMP/S" >"$TMP/S2.txt" 2>&1 &&
    grep -q 'checkpoint resume step 10' "$TMP/S2.txt" && [[ -f $TMP/S/step-00000060.h5 ]]
tap_check $? "the watchdog's checkpoint verifies; the rerun without the fault resumes from step 10 and finishes"

run "$TMP/H" >"$TMP/H.txt" 2>&1
rc=$?
[[ $rc == 0 ]] && ! grep -q 'watchdog:' "$TMP/H.txt"
tap_check $? "a healthy run with the same watchdog settings finishes (exit $rc), no watchdog line"

run "$TMP/M" --set watchdog.min_mfu=0.99 --set peak_flops=1e12 --set watchdog.slow_factor=1e6 >"$TMP/M.txt" 2>&1
rc=$?
[[ $rc == 86 ]] && grep -q 'watchdog: MFU .*% under watchdog.min_mfu 99.0%' "$TMP/M.txt"
tap_check $? "MFU under watchdog.min_mfu for 2 windows: exit $rc with the MFU named"

# (the two runs that end in MPI_Abort: mpirun ends the other rank at once, not after its 2 s of
# SIGCONT, sleep, SIGTERM, sleep: odls_base_sigkill_timeout; no rank is left to release anything)
TSR_FAULT=hang:5:1 OMPI_MCA_odls_base_sigkill_timeout=0 timeout 60 "${MPIRUN[@]}" -np 2 "$TRAIN" "${args[@]}" --set run_dir="$TMP/G" \
    --set watchdog.hang_timeout=3 >"$TMP/G.txt" 2>&1
rc=$?
[[ $rc != 0 && $rc != 124 ]] && grep -q '\[rank 1 .*\] watchdog: step 5 stuck in forward/backward for [0-9]* s' "$TMP/G.txt"
tap_check $? "rank 1 stuck in step 5: it names its phase (forward/backward) and the run aborts (exit $rc, not the 60 s timeout)"
# the rank waiting for it in the gradient reduction waits 2 s longer (docs/tessera-train.md "Hang"):
# the first watchdog line is the stuck rank's, whatever Open MPI prints of the abort
first=$(grep -m1 -o '\[rank [0-9]* [^]]*\] watchdog: step 5 stuck in [a-z/ ]*' "$TMP/G.txt")
[[ $first == "[rank 1 "* ]]
tap_check $? "the stuck rank reports first, not the waiting one (first line: ${first:-none})"

# A SIGTERM to a rank that waits in a collective for a peer that never comes (rank 1 hangs in step
# 5, no hang_timeout): it cannot reach a step boundary, so after the stop's grace time (5 s here) it
# exits 143 instead of hanging until a SIGKILL (under Slurm: KillWait later, which outlived
# slurmctld's MessageTimeout, and the retried signal cancelled the requeued start's step).
TSR_FAULT=hang:5:1 "${MPIRUN[@]}" -np 2 "$TRAIN" "${args[@]}" --set run_dir="$TMP/T" --set log_interval=1 \
    >"$TMP/T.txt" 2>&1 &
mp=$!
r0=
for _ in $(seq 600); do # rank 0's pid (its environment names its rank) once it logged step 4
    for p in $(pgrep -P "$mp" tessera-train); do
        tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=0 && r0=$p
    done
    [[ -n $r0 ]] && grep -q '^{"step": 4,' "$TMP/T/metrics.jsonl" 2>/dev/null && break
    sleep 0.1
done
sleep 1 # rank 0 is in step 5's gradient reduction, waiting for rank 1
kill -TERM "$r0" 2>/dev/null
for _ in $(seq 600); do kill -0 "$r0" 2>/dev/null || break; sleep 0.1; done
gone=$(kill -0 "$r0" 2>/dev/null && echo "still running after 60 s" || echo "exited")
kill -9 "$mp" "$r0" 2>/dev/null
wait "$mp" 2>/dev/null
[[ -n $r0 && $gone == exited ]] && grep -q 'SIGTERM and no step boundary reached within the stop.s grace time' "$TMP/T.txt"
tap_check $? "SIGTERM to rank 0 (pid ${r0:-?}) waiting for a hung peer: $gone, exit 143 saying why, no SIGKILL needed"

TSR_FAULT=usr1:5:0 run "$TMP/U" --set watchdog.hang_timeout=30 >"$TMP/U.txt" 2>&1
tap_check $(($? != 85)) "SIGUSR1 with the hang thread running: still a stop request (exit 85)"

run "$TMP/B" --set watchdog.slow_factor=1 >"$TMP/B.txt" 2>&1
rc=$?
[[ $rc == 1 ]] && grep -q 'watchdog.slow_factor' "$TMP/B.txt"
tap_check $? "watchdog.slow_factor = 1 is refused (exit $rc) naming the key"

# ---- GRPO (objective = "grpo", docs/rl.md "Watchdogs"): a fresh model, the arithmetic prompts,
# 4 prompts x 4 samples of up to 6 tokens a step, 1 update ----
grpo_prompts "$TMP/rl" 300
grpo_small_args "$TMP/rl"
# The straggler watchdog times the training part only (equal work on every rank), not the
# rollouts (whose lengths differ by rank): rank 1 computes 200 ms longer per step and rank 0
# decodes 200 ms longer; windows of 1 step, 2 in a row: exit 86 at step 2 naming rank 1 (counting
# the rollouts, both ranks would be as slow and the run would go on), its checkpoint committed
TSR_FAULT=slow:200:1,slow_rollout:200:0 "${MPIRUN[@]}" -np 2 "$TRAIN" "${small[@]}" --set run_dir="$TMP/ws" \
    --set max_duration=8ba --set watchdog.window=1 --set watchdog.patience=2 \
    --set watchdog.slow_factor=4 >"$TMP/ws1.log" 2>&1
rc=$?
((rc == 86)) && grep -q "watchdog: rank 1 on .* computes .* ms per step" "$TMP/ws1.log" &&
    [[ $(cat "$TMP/ws/latest") == *step-00000002.h5 ]] &&
    grep -q '"event": "watchdog", "slow_rank": 1' "$TMP/ws/metrics.jsonl"
tap_check $? "straggler under GRPO (rank 1 computes +200 ms per step, rank 0 decodes +200 ms): exit $rc at step 2 naming rank 1, not the slow decoder; the checkpoint of step 2 committed"
# the rerun resumes from it and trains step 3; rank 1 then stops for good in step 4's decoding: the
# hang watchdog names the phase (rank 0, waiting for its rollouts, "rollout exchange") and aborts
TSR_FAULT=hang_rollout:4:1 OMPI_MCA_odls_base_sigkill_timeout=0 timeout 60 "${MPIRUN[@]}" -np 2 "$TRAIN" "${small[@]}" --set run_dir="$TMP/ws" \
    --set max_duration=8ba --set watchdog.hang_timeout=2 >"$TMP/ws2.log" 2>&1
rc=$?
tap_diag "$(grep -o '\[rank 0 [^]]*\] watchdog: step 4 stuck in [a-z ]*' "$TMP/ws2.log" || echo 'rank 0: the abort from rank 1 came first')"
((rc == 3)) && grep -q 'checkpoint resume step 2 ' "$TMP/ws2.log" && grep -q '^{"step": 3,' "$TMP/ws/metrics.jsonl" &&
    grep -q '\[rank 1 .*\] watchdog: step 4 stuck in rollout generation for [0-9]* s' "$TMP/ws2.log"
tap_check $? "the rerun resumes from step 2 and trains step 3; rank 1 stuck decoding in step 4: 'stuck in rollout generation', exit $rc (watchdog.hang_timeout = 2)"
# a reward program that hangs, with hang_timeout under reward.timeout: warned at start; the watchdog
# names the reward phase, aborts, and the program (a shell's child) does not outlive the abort
GRPO_REWARD_MODE=hang GRPO_REWARD_AT=1 "$TRAIN" "${small[@]}" --set run_dir="$TMP/wr" --set max_duration=1ba \
    --set watchdog.hang_timeout=2 --set reward.kind=command --set reward.timeout=60 \
    --set reward.command="$PY3 $TSR_ROOT/tests/train/grpo_reward.py $TMP/wr-marker; :" >"$TMP/wr.log" 2>&1
rc=$?
left=$(pgrep -f "$TMP/wr-marker" || true)
[[ -z $left ]] || kill $left
((rc == 3)) && [[ -z $left ]] && grep -q 'watchdog: step 1 stuck in reward scoring' "$TMP/wr.log" &&
    grep -q 'warning: watchdog.hang_timeout = 2 s is not above reward.timeout = 60 s' "$TMP/wr.log"
tap_check $? "the reward program hangs in step 1 under watchdog.hang_timeout = 2 < reward.timeout = 60: warned at start, 'stuck in reward scoring', exit $rc, nothing of the program left running${left:+ (left: $left)}"
tap_done
