#!/usr/bin/env bash
# Waiting for a window's shards (docs/object-storage.md "A slow store", docs/tessera-train.md STOP
# REQUESTS), against a private s3rver behind tests/s3/flaky_proxy.py's "slow" mode (the first
# FLAKY_SLOW_AFTER shard GETs pass, every later one trickles 2 bytes every 0.9 s, as the slow store
# of issue 79 did):
#  A - the first window waits on the trickle with watchdog.hang_timeout = 2: the hang watchdog fires
#      (exit 3) naming the data source, the window and how many of its shards are committed;
#  B - 2 ranks wait for the first window, SIGTERM to rank 1 only: both ranks stop together, exit 85,
#      nothing saved (no step ran), nothing written into run_dir's checkpoints, no temporary file
#      of the stager left;
#  C - 1 rank waits for window 2 (at step 10; windows of 5 steps): a progress line names the source
#      and the window while it waits, then SIGUSR1 stops it with the checkpoint of step 10 (exit
#      85), and the rerun resumes there and ends bit for bit like an uninterrupted local run;
#  D - a local dataset staged with data.stage_wait whose copies are slow (TSR_FAULT=stage_slow):
#      the hang watchdog fires naming the dataset's directory;
#  E - a requeued run whose prefix got another dataset pushed to it: exit 2 naming it (the
#      identities of tests/resume/test_data_sources.sh, on the store).
# Each run has a time-out of its own (60 s) far above what it needs: before these fixes A, B and C
# waited for the trickle (hours) and were killed by it (exit 137), D waited out data.stage_wait and
# trained on (exit 0), E resumed on the other dataset without a word (exit 0). No time is asserted
# (B's time from the signal to the exit is printed as a diagnostic).
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
source "$TSR_ROOT/tests/s3/s3lib.sh"
tap_plan 9
s3rver_up
trap cleanup EXIT

# 20 shards of 10 samples of seq_len + 1 = 33 tokens: a window of 5 steps of 8 samples reads 4 shards
"$TOOL" synth --out "$TMP/data" --vocab 512 --tokens 6600 --shard-tokens 330 --seed 1 >/dev/null &&
    "$TOOL" data push "$TMP/data/train" s3://tsr/ds >"$TMP/push.txt" 2>&1 || {
    echo "Bail out! fixture: $(cat "$TMP/push.txt")"
    exit 1
}
args=(--config "$TSR_ROOT/configs/tiny.cfg" --set model.vocab_size=512 --set data.tokenizer=
      --set sample.tokens=0 --set data.val= --set model.n_layer=1 --set model.d_model=32
      --set model.n_head=2 --set seq_len=32 --set global_batch=8 --set micro_batch=4
      --set max_duration=15ba --set eval_interval=0ba --set threads=1 --set log_interval=1
      --set data.shuffle=false --set data.stage_window=5 --set watchdog.window=0
      --set save_async=false)
# s3args NAME: the array S3A, a run NAME's dataset on the store, its stage and run directories
s3args() { S3A=(--set data.train=s3://tsr/ds --set data.stage_to="$TMP/stage-$1" --set run_dir="$TMP/$1"); }
# bg NAME NP [ARGS...]: a run through the proxy in the background; sets PID (mpirun's: the ranks
# are its children)
bg() {
    local name=$1 np=$2
    shift 2
    s3args "$name"
    AWS_ENDPOINT_URL=http://127.0.0.1:$PPORT "${MPIRUN[@]}" -np "$np" "$TRAIN" "${args[@]}" \
        "${S3A[@]}" "$@" >"$TMP/$name.txt" 2>&1 &
    PID=$!
    STARTED+=("$PID")
}
STARTED=()
cleanup() { # the runs of this test still there (a failed check) are killed, then the daemons
    local p
    for p in "${STARTED[@]}"; do pkill -KILL -P "$p" -x tessera-train; kill -KILL "$p"; done 2>/dev/null
    kill "$S3PID" $PROXYPID 2>/dev/null
    wait 2>/dev/null
    rm -rf "$TMP"
}
# finish: waits for the run PID, at most 60 s (then it is killed: exit 137); sets rc
finish() {
    for _ in $(seq 1 600); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$PID" 2>/dev/null && { pkill -KILL -P "$PID" -x tessera-train; kill -KILL "$PID"; }
    wait "$PID"
    rc=$?
}
# until_seen FILE PATTERN: waits (at most 60 s) until FILE holds a line matching PATTERN
until_seen() { for _ in $(seq 1 600); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done; return 1; }
tmp_left() { find "$@" -name '*.tmp*' 2>/dev/null | head -3; }

# A: the hang watchdog names what the rank waits for
start_proxy slow "$TMP/A.log"
bg A 1 --set watchdog.hang_timeout=2
finish
stop_proxy
[[ $rc == 3 ]] && grep -q 'watchdog: step 1 stuck in the wait for its data for [0-9]* s (watchdog.hang_timeout = 2 s): s3://tsr/ds, window 0 (steps 1-5): 0 of 4 shards committed on this node' "$TMP/A.txt"
tap_check $? "a window waiting on a trickling store: the hang watchdog aborts (exit 3) naming s3://tsr/ds, window 0 and its 0 of 4 shards (exit $rc)"
grep 'watchdog' "$TMP/A.txt" | head -1 | sed 's/^/# /'

# B: SIGTERM to one rank while both wait for the first window
start_proxy slow "$TMP/B.log"
bg B 2
until_seen "$TMP/B.log" ' slow$'
read -r -a pids <<<"$(started_ranks "$PID" 2)"
seen=0 # a trickled shard's temporary file, there when the signal comes
for _ in $(seq 1 300); do [[ -n $(tmp_left "$TMP/stage-B") ]] && seen=1 && break; sleep 0.1; done
t0=$(date +%s%N)
kill -TERM "${pids[1]}"
finish
tap_diag "B: exit $rc $((($(date +%s%N) - t0) / 1000000)) ms after the SIGTERM (not judged)"
stop_proxy
[[ $rc == 85 ]] && grep -q 'stop requested (SIGUSR1/SIGTERM) while waiting for the data of step 1, the first of this start: no step ran, no checkpoint written' "$TMP/B.txt"
tap_check $? "2 ranks waiting for the first window, SIGTERM to rank 1: both stop, exit 85 (exit $rc)"
# "at once, cleanly" (docs/tessera-train.md STOP REQUESTS): the run stopped by itself (exit 85, not
# the 60 s kill) before the store delivered the window (no shard of it committed: each trickles for
# an hour), run_dir holds only what the start wrote (config.cfg, metrics.jsonl without a step, tb/),
# and the stager's temporary file, there when the signal came, is gone
extra=$(find "$TMP/B" -mindepth 1 -maxdepth 1 ! -name config.cfg ! -name metrics.jsonl ! -name tb -printf '%f ')
committed=$(find "$TMP/stage-B" -type f ! -name '*.tmp.*' -printf '%f ')
[[ $rc == 85 && $seen == 1 && -z $extra$committed && -s $TMP/B/config.cfg && -z $(tmp_left "$TMP/B" "$TMP/stage-B") ]] &&
    ! grep -q '"loss"' "$TMP/B/metrics.jsonl"
tap_check $? "stopped at once, cleanly: exit 85 before any shard of the window arrived, run_dir only what the start wrote, no step logged, the stager's temporary file removed (exit $rc; seen before the signal: $seen; in run_dir besides: ${extra:-nothing}; committed: ${committed:-none})"

# C: SIGUSR1 while waiting for window 2, after its progress line
ranks 1 "$TRAIN" "${args[@]}" --set data.train="$TMP/data/train" --set run_dir="$TMP/L" >"$TMP/L.txt" 2>&1
FLAKY_SLOW_AFTER=8 start_proxy slow "$TMP/C.log"
bg C 1 --set save_interval=0ba
until_seen "$TMP/C.txt" 'staging: waiting [0-9]* s so far for window 2 '
kill -USR1 "$(started_ranks "$PID" 1)"
finish
stop_proxy
grep -q 'staging: waiting [0-9]* s so far for window 2 (steps 11-15) of s3://tsr/ds: [0-3] of 4 shards committed$' "$TMP/C.txt"
tap_check $? "a wait over 5 s prints progress lines while it lasts: source, window, shards committed"
grep 'waiting' "$TMP/C.txt" | head -1 | sed 's/^/# /'
[[ $rc == 85 && $(cat "$TMP/C/latest" 2>/dev/null) == step-00000010.h5 ]] && grep -q 'checkpoint of step 10 committed' "$TMP/C.txt"
tap_check $? "SIGUSR1 while waiting for window 2: the checkpoint of step 10, exit 85 (exit $rc)"
[[ -z $(tmp_left "$TMP/C" "$TMP/stage-C") ]]
tap_check $? "no temporary file left in run_dir or the stage directory"
s3args C
ranks 1 "$TRAIN" "${args[@]}" "${S3A[@]}" >>"$TMP/C.txt" 2>&1
rc=$?
[[ $rc == 0 ]] && grep -q 'resume step 10' "$TMP/C.txt" && cmp -s <(final_lines "$TMP/L/metrics.jsonl") <(final_lines "$TMP/C/metrics.jsonl")
tap_check $? "the rerun resumes at step 10 and ends bit for bit like the local run (exit $rc)"

# D: a local dataset, staged with data.stage_wait, whose copies are slow
TSR_STAGE_NO_LINK=1 TSR_FAULT=stage_slow:1000 timeout -k 5 60 "$TRAIN" "${args[@]}" --set data.train="$TMP/data/train" \
    --set data.stage_to="$TMP/stage-D" --set run_dir="$TMP/D" --set data.stage_wait=30 \
    --set watchdog.hang_timeout=2 >"$TMP/D.txt" 2>&1
rc=$?
[[ $rc == 3 ]] && grep -q 'warning: watchdog.hang_timeout = 2 s is not above data.stage_wait = 30 s' "$TMP/D.txt" &&
    grep -q "watchdog: step 6 stuck in the wait for its data for [0-9]* s (watchdog.hang_timeout = 2 s): $TMP/data/train, window 1 (steps 6-10): [0-3] of 4 shards committed on this node" "$TMP/D.txt"
tap_check $? "data.stage_wait on slow copies: warned at start (hang_timeout not above it), the hang watchdog aborts (exit 3) naming the directory and window 1 (exit $rc)"
grep 'watchdog' "$TMP/D.txt" | head -1 | sed 's/^/# /'

# E: a requeued run on another dataset pushed to the same prefix (not a wait: the requeue it ends in)
"$TOOL" data push "$TMP/data/train" s3://tsr/re >/dev/null 2>&1 &&
    "$TOOL" synth --out "$TMP/other" --vocab 512 --tokens 7000 --shard-tokens 330 --seed 2 >/dev/null
etrain() { ranks 1 "$TRAIN" "${args[@]}" --set data.train=s3://tsr/re --set data.stage_to="$TMP/stage-E" --set run_dir="$TMP/E" "$@" >>"$TMP/E.txt" 2>&1; }
etrain --set max_duration=5ba && "$TOOL" data push "$TMP/other/train" s3://tsr/re >/dev/null 2>&1 && etrain
rc=$?
[[ $rc == 2 ]] && grep -q 'error: data.train = "s3://tsr/re" is not the data .*/E/step-00000005.h5 was saved with: crc32c:[0-9a-f]* shards:22 tokens:7000 now, crc32c:[0-9a-f]* shards:20 tokens:6600 in the checkpoint' "$TMP/E.txt"
tap_check $? "a requeued run on another dataset pushed to the same prefix: exit 2 naming s3://tsr/re and both identities (exit $rc)"
tap_done
