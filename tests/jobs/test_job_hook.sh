#!/usr/bin/env bash
# The job hook's reading of a step's end (jobs/lib/tessera-job.sh, tsr_run): srun reports 128+n when
# --kill-on-bad-exit SIGTERMed the other ranks after one exited with an error, so the hook reads
# srun's own per-task lines to tell "every rank chose exit 1 (or 2)" from a crash. A config error
# must stop the job; a crash must requeue it. The step here is a stand-in for srun that prints the
# lines Slurm's srun prints and exits as it does (no Slurm needed); TSR_REQUEUE=exit makes the
# requeue decision visible as the exit status (the crash's code) instead of a call to scontrol.
# shellcheck source=../lib.sh
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 5
HOOK=$TSR_ROOT/jobs/lib/tessera-job.sh

# step RC LINE...: run tsr_run on a stand-in step that prints LINEs on stderr and exits RC;
# sets $got (the hook's exit status) and leaves its output in $TMP/out.txt
step() {
    local rc=$1; shift
    local lines
    lines=$(printf 'echo %q >&2; ' "$@")
    SLURM_JOB_ID=7 TSR_REQUEUE=exit bash -c "source '$HOOK'; tsr_run bash -c '$lines exit $rc'" \
        >"$TMP/out.txt" 2>&1
    got=$?
}

step 143 "srun: error: n1: task 0: Exited with exit code 1" "srun: error: n2: task 1: Terminated"
((got == 1)) && grep -q "not requeued" "$TMP/out.txt" && grep -q "the ranks exited 1" "$TMP/out.txt"
tap_check $? "rank 0 exit 1, rank 1 SIGTERMed by srun (143): a config error, not requeued (exit $got)"

step 137 "srun: error: n1: tasks 0-2: Exited with exit code 2" "srun: error: n2: task 3: Killed"
((got == 2)) && grep -q "not requeued" "$TMP/out.txt"
tap_check $? "ranks 0-2 exit 2, rank 3 killed (137): a data error, not requeued (exit $got)"

step 139 "srun: error: n2: task 1: Segmentation fault" "srun: error: n1: task 0: Exited with exit code 1"
((got == 139)) && grep -q "requeue" "$TMP/out.txt" && ! grep -q "not requeued" "$TMP/out.txt"
tap_check $? "a rank's segfault is a crash even when another exited 1: requeued (exit $got)"

step 143 "srun: error: n1: task 0: Exited with exit code 1" "srun: error: n2: task 1: Exited with exit code 3"
((got == 143)) && grep -q "requeue" "$TMP/out.txt" && ! grep -q "not requeued" "$TMP/out.txt"
tap_check $? "ranks that disagree (1 and 3): a crash, requeued (exit $got)"

step 143
((got == 143)) && grep -q "requeue" "$TMP/out.txt" && ! grep -q "not requeued" "$TMP/out.txt" &&
    ! compgen -G "${TMPDIR:-/tmp}/tessera-step.*" >/dev/null
tap_check $? "srun killed with no task lines: a crash, requeued (exit $got); no stderr copy left behind"
tap_done
