#!/usr/bin/env bash
# Ranks die with their launcher (docs/tessera-train.md "When the launcher dies"): 2 ranks under
# mpirun train a long tiny run (a checkpoint every 5 steps); mpirun is SIGKILLed (no signal reaches
# the ranks: nothing forwards it); then
#  - both ranks are gone within 5 s (they trained on for ~20 s, writing checkpoints);
#  - no checkpoint is committed after the SIGKILL (they went on committing them);
#  - a rank started by hand with no launcher (a singleton, as under nohup) is not tied to its parent:
#    its parent shell exits and it still finishes its run;
#  - mpirun as pid 1 (its own PID namespace, as in a container without --init) is a launcher like
#    any other: the ranks train (they exited 3 at once, taking pid 1 for "the launcher is gone").
source "$(dirname "$0")/../lib.sh"
command -v mpirun >/dev/null || { echo "1..0 # SKIP no mpirun"; exit 77; }
tsr_tmpdir
tap_plan 4
synth_tiny_args 1 4 2 --set save_interval=5ba --set keep_last=1000 --set max_duration=1000000ba \
    --set log_interval=1000
ranks=()
cleanup() { for p in "${ranks[@]}"; do kill -KILL "$p" 2>/dev/null; done; rm -rf "$TMP"; }
trap cleanup EXIT

# every step of rank 0 takes >= 50 ms (TSR_FAULT=slow): a checkpoint every 250 ms or so
TSR_FAULT=slow:50:0 "${MPIRUN[@]}" -np 2 "$TRAIN" "${args[@]}" --set run_dir="$TMP/run" >"$TMP/run.txt" 2>&1 &
launcher=$!  # mpi_env.sh execs mpirun: this is mpirun's pid
for _ in $(seq 1 600); do # until a few checkpoints were written (at most 60 s)
    (($(ls "$TMP/run" 2>/dev/null | grep -c '^step-') >= 3)) && break
    sleep 0.1
done
mapfile -t ranks < <(pgrep -P "$launcher" -f tessera-train)
tap_diag "mpirun $launcher, ranks: ${ranks[*]}; checkpoints so far: $(ls "$TMP/run" | grep -c '^step-')"
kill -KILL "$launcher"
t_kill=$(date +%s.%N)
before=$(ls "$TMP/run" | grep '^step-.*h5$')
gone=0
for _ in $(seq 1 50); do
    alive=0
    # a killed rank is a zombie until its new parent reaps it: that counts as gone
    for p in "${ranks[@]}"; do
        [[ -r /proc/$p/stat && $(awk '{print $3}' "/proc/$p/stat" 2>/dev/null) != Z ]] && alive=$((alive + 1))
    done
    ((alive == 0)) && { gone=1; break; }
    sleep 0.1
done
t_gone=$(date +%s.%N)
[[ ${#ranks[@]} == 2 && $gone == 1 ]]
tap_check $? "both ranks (${#ranks[*]} found) are gone within 5 s of mpirun's SIGKILL ($(echo "$t_gone - $t_kill" | bc) s)"

sleep 1
after=$(ls "$TMP/run" | grep '^step-.*h5$')
[[ -n $before && $before == "$after" ]]
tap_check $? "no checkpoint committed after mpirun's SIGKILL ($(echo "$before" | wc -l) before, $(echo "$after" | wc -l) after)"

# no launcher: a rank whose parent shell exits keeps running to its end (nohup-style use)
bash -c "\"$TRAIN\" $(printf '%q ' "${args[@]}") --set max_duration=40ba --set run_dir=\"$TMP/alone\" >\"$TMP/alone.txt\" 2>&1 & echo \$! >\"$TMP/alone.pid\""
for _ in $(seq 1 300); do grep -q "^done:" "$TMP/alone.txt" 2>/dev/null && break; sleep 0.1; done
grep -q "^done: 40 steps" "$TMP/alone.txt"
tap_check $? "without a launcher a rank outlives its parent shell and finishes"
if unshare --pid --fork --mount-proc true 2>/dev/null; then
    timeout 120 unshare --pid --fork --mount-proc "${MPIRUN[@]}" -np 2 "$TRAIN" "${args[@]}" \
        --set max_duration=4ba --set run_dir="$TMP/pid1" >"$TMP/pid1.txt" 2>&1
    rc=$?
    [[ $rc == 0 ]] && grep -q "^done: 4 steps" "$TMP/pid1.txt"
    tap_check $? "mpirun as pid 1 of a PID namespace: the ranks train to the end (exit $rc)"
    grep -E "error" "$TMP/pid1.txt" | head -2 | sed 's/^/#   /'
else
    tap_check 0 "mpirun as pid 1 # SKIP unshare --pid not permitted here (needs root or user namespaces)"
fi
tap_done
