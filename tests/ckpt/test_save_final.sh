#!/usr/bin/env bash
# save_final = false (benchmarks and throwaway runs: a 7B model's end-of-run checkpoint is 80 GB,
# and the GPU bench of mpt-7b failed on it for want of disk, 2026-11-26): one rank, 4 steps:
#  - the default with save_interval = 3ba writes step 3 and, at the end, step 4 (the control);
#  - save_final = false with save_interval = 3ba: step 3 only, `latest` names it, exit 0 (a periodic
#    save that falls on the last step is still written: save_final is the end's extra one only);
#  - save_final = false with no periodic save: a stop request (SIGUSR1 after step 1, TSR_FAULT)
#    still commits its checkpoint (exit 85), as requeueing needs;
#  - save_final = false and nothing else: an empty run_dir of checkpoints, exit 0.
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 4
synth_tiny_args 1 4 2 --set max_duration=4ba
run() { local dir=$1; shift; timeout 300 "${MPIRUN[@]}" -np 1 "$TRAIN" "${args[@]}" --set run_dir="$dir" "$@"; }
ckpts() { (cd "$1" && ls step-*.h5 2>/dev/null | tr '\n' ' '); }

run "$TMP/default" --set save_interval=3ba >"$TMP/default.txt" 2>&1
rc=$?
got=$(ckpts "$TMP/default") latest=$(cat "$TMP/default/latest")
[[ $rc == 0 && $got == "step-00000003.h5 step-00000004.h5 " && $latest == step-00000004.h5 ]]
tap_check $? "default, save_interval = 3ba: exit $rc, checkpoints [$got] (want steps 3 and 4), latest $latest"

run "$TMP/nofinal" --set save_interval=3ba --set save_final=false >"$TMP/nofinal.txt" 2>&1
rc=$?
got=$(ckpts "$TMP/nofinal") latest=$(cat "$TMP/nofinal/latest")
[[ $rc == 0 && $got == "step-00000003.h5 " && $latest == step-00000003.h5 ]]
tap_check $? "save_final = false, save_interval = 3ba: exit $rc, checkpoints [$got] (want step 3 only), latest $latest"

TSR_FAULT=usr1:1:0 run "$TMP/stop" --set save_final=false >"$TMP/stop.txt" 2>&1
rc=$?
got=$(ckpts "$TMP/stop")
[[ $rc == 85 && $got == "step-00000001.h5 " ]] && "$TOOL" ckpt verify "$TMP/stop/step-00000001.h5" >/dev/null
tap_check $? "save_final = false, a stop request after step 1: exit $rc (want 85), checkpoints [$got], it verifies"

run "$TMP/none" --set save_final=false >"$TMP/none.txt" 2>&1
rc=$?
got=$(ckpts "$TMP/none")
[[ $rc == 0 && -z $got && ! -e $TMP/none/latest && -s $TMP/none/metrics.jsonl ]]
tap_check $? "save_final = false alone: exit $rc, no checkpoint ([$got]), no latest, metrics written"
