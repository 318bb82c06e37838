#!/usr/bin/env bash
# One writer per run directory and per prep output (src/base/runlock.c; docs/tessera-train.md "The
# run directory lock"). Two trainers on one run_dir both trained, wrote checkpoints and mixed
# metrics.jsonl; two preps into one --out published a corrupt dataset. Now:
#  - a trainer holds RUN_DIR/tessera.lock (host, PID, start time, Slurm job) for its life; a second
#    one, on 1 and on 2 ranks, is refused at start with exit 2 naming the holder's PID and host,
#    and run_dir stays byte for byte as it was (the first is stopped with SIGSTOP meanwhile, so
#    nothing changes it either); the first, continued, finishes and removes the lock;
#  - a SIGKILLed holder leaves the file: the next trainer finds no process with its PID, takes the
#    lock over (saying so), resumes and exits 0;
#  - lock files written here as other holders would leave them: this host's PID alive but started
#    at another time (the PID was reused), another boot of this host and a zombie (ended, not yet
#    reaped, as a SIGKILLed job's MPI rank is for seconds after mpirun returns): stale, taken; another
#    host without Slurm: refused, nothing written; an earlier run of this Slurm job (a requeue:
#    the same SLURM_JOB_ID, a higher SLURM_RESTART_COUNT) on another host: taken; the same run of
#    the job (a second trainer inside it): refused; another job that squeue reports COMPLETED:
#    taken, RUNNING: refused, and one squeue cannot reach the controller for: refused (whether it
#    ended cannot be told). squeue is a stub on PATH printing what Slurm's prints (no controller
#    runs for this test; tests/slurm has the real one);
#  - prep: a second prep into the --out of one that holds OUT.lock (stopped with SIGSTOP) is
#    refused with exit 2 naming its PID, and writes nothing; the first, continued, publishes a
#    dataset that verifies; a SIGKILLed prep's lock and OUT.tmp are taken over by the next.
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 16
synth_tiny_args 1 4 4 --set save_interval=2ba --set run_dir="$TMP/run"
LOCK=$TMP/run/tessera.lock
HOST=$(hostname)
snapshot() { (cd "$1" && find . -type f -printf '%p %s %T@\n' | sort && find . -type f -print0 | sort -z | xargs -0 sha256sum); }
# wait_for FILE: until FILE exists (60 s at most)
wait_for() { local i; for ((i = 0; i < 600; i++)); do [[ -e $1 ]] && return 0; sleep 0.1; done; return 1; }
field() { awk -v k="$2" '$1 == k {print $2}' "$1"; }

# ---- a live holder: the second trainer is refused, writing nothing ----
"$TRAIN" "${args[@]}" --set max_duration=100000ba >"$TMP/a.txt" 2>&1 &
A=$!
wait_for "$TMP/run/metrics.jsonl" && wait_for "$LOCK" && sleep 1
kill -STOP $A
snapshot "$TMP/run" >"$TMP/before.txt"
[[ $(field "$LOCK" pid) == "$A" && $(field "$LOCK" host) == "$HOST" && $(field "$LOCK" what) == tessera-train ]]
tap_check $? "the running trainer holds run_dir/tessera.lock naming its PID ($A) and host"
"$TRAIN" "${args[@]}" --set max_duration=4ba >"$TMP/b.txt" 2>&1
rc=$?
"${MPIRUN[@]}" -np 2 "$TRAIN" "${args[@]}" --set max_duration=4ba --set micro_batch=2 >"$TMP/b2.txt" 2>&1
rc2=$?
snapshot "$TMP/run" >"$TMP/after.txt"
tap_diag "$(grep error "$TMP/b.txt" | head -1)"
((rc == 2 && rc2 == 2)) && diff -q "$TMP/before.txt" "$TMP/after.txt" >/dev/null &&
    grep -q "tessera.lock: held by tessera-train, PID $A on $HOST" "$TMP/b.txt" &&
    grep -q "held by tessera-train, PID $A on $HOST" "$TMP/b2.txt" && ! grep -q "^step 1" "$TMP/b.txt"
tap_check $? "a second trainer on run_dir (1 rank: exit $rc, 2 ranks: exit $rc2) is refused naming the holder; run_dir byte for byte unchanged"
kill -CONT $A
kill -TERM $A
wait $A
rc=$?
((rc == 85)) && [[ ! -e $LOCK ]]
tap_check $? "the holder, continued and stopped (exit $rc: a checkpoint, requeue), removes its lock"

# ---- a SIGKILLed holder: its lock is stale ----
"$TRAIN" "${args[@]}" --set max_duration=100000ba >"$TMP/c.txt" 2>&1 &
C=$!
wait_for "$LOCK" && sleep 1
kill -KILL $C
wait $C 2>/dev/null
[[ -e $LOCK ]]
left=$?
"$TRAIN" "${args[@]}" --set max_duration=1ba >"$TMP/d.txt" 2>&1 # resumes past step 1: done at once
rc=$?
((left == 0 && rc == 0)) && [[ ! -e $LOCK ]] &&
    grep -q "taking over the lock of tessera-train, PID $C on $HOST: process $C on $HOST has ended" "$TMP/d.txt"
tap_check $? "a SIGKILLed holder's lock is left, then taken over by the next trainer (exit $rc), which says whose"

# ---- lock files as other holders leave them ----
# lockfile HOST PID START BOOT JOB RESTART [STEP]: writes run_dir/tessera.lock
lockfile() {
    printf 'tessera-lock 1\nwhat tessera-train\nhost %s\nboot %s\npid %s\nstart %s\njob %s\nstep %s\nrestart %s\nsince 1795000000\n' \
        "$1" "$4" "$2" "$3" "$5" "${7:--}" "$6" >"$LOCK"
}
BOOT=$(cat /proc/sys/kernel/random/boot_id)
# try WHAT WANT PATTERN [ENV...]: a restart under ENV that has nothing left to train (it resumes
# past max_duration); WANT 0: it takes the lock, saying PATTERN, and exits 0 (the lock removed);
# 2: refused naming PATTERN, run_dir byte for byte unchanged
try() {
    local what=$1 want=$2 pat=$3; shift 3
    snapshot "$TMP/run" >"$TMP/before.txt"
    env "$@" "$TRAIN" "${args[@]}" --set max_duration=1ba >"$TMP/t.txt" 2>&1
    local rc=$?
    if ((want == 2)); then
        snapshot "$TMP/run" >"$TMP/after.txt"
        ((rc == 2)) && diff -q "$TMP/before.txt" "$TMP/after.txt" >/dev/null && grep -q -- "$pat" "$TMP/t.txt"
    else
        ((rc == 0)) && [[ ! -e $LOCK ]] && grep -q -- "$pat" "$TMP/t.txt"
    fi
    tap_check $? "$what: exit $rc"
    grep -E "error|warning" "$TMP/t.txt" | head -1 | sed 's/^/#   /'
}
sleep 30 & # a live process of this host whose start time the lock does not know
LIVE=$!
lockfile "$HOST" "$LIVE" 1 "$BOOT" - -1
try "this host's PID alive but started at another time (reused): taken" 0 "PID $LIVE on $HOST is another process now"
lockfile "$HOST" "$LIVE" 1 "00000000-0000-0000-0000-000000000000" - -1
try "this host, another boot: taken" 0 "$HOST has booted since"
kill $LIVE
# a zombie holder: ended but not yet reaped (an MPI rank is one for a few seconds after mpirun
# returns; the rerun of a SIGKILLed job met it and was refused): its PID is in /proc, state Z
/usr/bin/python3 -c 'import os, time
p = os.fork()
if p == 0: os._exit(0)
print(p, flush=True); time.sleep(30)' >"$TMP/zombie.txt" &
PARENT=$!
wait_for "$TMP/zombie.txt" && sleep 0.5
Z=$(cat "$TMP/zombie.txt")
ZSTART=$(awk '{sub(/.*\) /, ""); print $20}' "/proc/$Z/stat")
lockfile "$HOST" "$Z" "$ZSTART" "$BOOT" - -1
try "this host's holder is a zombie (ended, not reaped): taken" 0 "process $Z on $HOST has ended"
kill $PARENT
lockfile node-b 4242 99 x - -1
try "another host without Slurm: refused, nothing written" 2 "held by tessera-train, PID 4242 on node-b.*another host without Slurm"
lockfile node-b 4242 99 x 777 0 0
try "an earlier run of this Slurm job on another host (requeued: restart 1 > 0): taken" 0 \
    "earlier run of this Slurm job 777 (restart 0; this is restart 1" SLURM_JOB_ID=777 SLURM_RESTART_COUNT=1 SLURM_STEP_ID=0
lockfile node-b 4242 99 x 777 0 0
try "the same run and step of this Slurm job on another host (a second trainer in it): refused" 2 \
    "Slurm job 777 step 0 is running" SLURM_JOB_ID=777 SLURM_RESTART_COUNT=0 SLURM_STEP_ID=0
mkdir -p "$TMP/bin"
stub() { printf '#!/bin/sh\necho "%s"\nexit %s\n' "$1" "${2:-0}" >"$TMP/bin/squeue" && chmod +x "$TMP/bin/squeue"; }
stub COMPLETED
lockfile node-b 4242 99 x 555 0 0
try "another Slurm job that squeue reports COMPLETED: taken" 0 "squeue says Slurm job 555 has ended" PATH="$TMP/bin:$PATH"
stub RUNNING
lockfile node-b 4242 99 x 555 0 0
try "another Slurm job that squeue reports RUNNING: refused" 2 "Slurm job 555 step 0 is running" PATH="$TMP/bin:$PATH"
stub "slurm_load_jobs error: Unable to contact slurm controller (connect failure)" 1
lockfile node-b 4242 99 x 555 0 0
try "another Slurm job, squeue cannot reach its controller: refused (cannot tell)" 2 \
    "squeue cannot say whether Slurm job 555" PATH="$TMP/bin:$PATH"
rm -f "$LOCK"

# ---- prep: one writer per --out ----
head -c 4000000 /dev/urandom | base64 -w 100 >"$TMP/big.txt"
"$TOOL" prep --val-fraction 0 --tokenizer "$TMP/no-tokenizer" --out "$TMP/ds" "$TMP/big.txt" >/dev/null 2>&1
[[ ! -e $TMP/ds.lock && ! -e $TMP/ds.tmp && ! -e $TMP/ds ]]
tap_check $? "a prep refused before it starts leaves no OUT.lock or OUT.tmp"
PREP=("$TOOL" prep -q --val-fraction 0 --threads 1 --doc-sep '\n')
"${PREP[@]}" --out "$TMP/ds" "$TMP/big.txt" >"$TMP/p1.txt" 2>&1 &
P=$!
wait_for "$TMP/ds.tmp"
kill -STOP $P
snapshot "$TMP/ds.tmp" >"$TMP/before.txt"
echo "a small document" >"$TMP/small.txt"
"${PREP[@]}" --out "$TMP/ds" "$TMP/small.txt" >"$TMP/p2.txt" 2>&1
rc=$?
snapshot "$TMP/ds.tmp" >"$TMP/after.txt"
kill -CONT $P
wait $P
rc1=$?
"$TOOL" verify-data "$TMP/ds/train" >"$TMP/v.txt" 2>&1
vrc=$?
tap_diag "$(cat "$TMP/p2.txt")"
((rc == 2 && rc1 == 0 && vrc == 0)) && grep -q "ds.lock: held by tessera prep, PID $P on $HOST" "$TMP/p2.txt" &&
    diff -q "$TMP/before.txt" "$TMP/after.txt" >/dev/null && [[ ! -e $TMP/ds.lock && ! -e $TMP/ds.tmp ]]
tap_check $? "a second prep into the same --out: exit $rc naming the first's PID, nothing written; the first publishes a dataset that verifies (exit $rc1, verify $vrc)"
"${PREP[@]}" --out "$TMP/ds2" "$TMP/big.txt" >"$TMP/p3.txt" 2>&1 &
P=$!
wait_for "$TMP/ds2.tmp"
kill -KILL $P
wait $P 2>/dev/null
"${PREP[@]}" --out "$TMP/ds2" "$TMP/small.txt" >"$TMP/p4.txt" 2>&1
rc=$?
((rc == 0)) && grep -q "taking over the lock of tessera prep, PID $P" "$TMP/p4.txt" &&
    "$TOOL" verify-data "$TMP/ds2/train" >/dev/null 2>&1 && [[ ! -e $TMP/ds2.lock && ! -e $TMP/ds2.tmp ]]
tap_check $? "a SIGKILLed prep's OUT.lock and OUT.tmp: the next prep takes them over and publishes (exit $rc)"
tap_done
