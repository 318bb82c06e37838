#!/usr/bin/env bash
# The job hook's reading of a step's end (jobs/lib/tessera-job.sh, tsr_run): srun reports 128+n when
# --kill-on-bad-exit SIGTERMed the other ranks after one exited with an error, so the hook reads
# srun's own per-task lines to tell "every rank chose exit 1 (or 2)" from a crash. A config error
# must stop the job; a crash must requeue it. The step here is a stand-in for srun that prints the
# lines Slurm's srun prints and exits as it does (no Slurm needed); TSR_REQUEUE=exit makes the
# requeue decision visible as the exit status (the crash's code) instead of a call to scontrol.
# Then stop signals that arrive before the step starts (a short --time's --signal, a preemption's
# TERM during the preflight): kept, the sweep stopped, the job requeued without running the step.
# Then exit 87 (silent data corruption, docs/health.md): the culprit nodes of the run's
# sdc-culprit.json drained through the checker (--sdc-report FILE --drain on each, by srun) and
# excluded from the requeued job (stand-in srun, checker and scontrol that log their calls); an
# unattributed record requeues without excluding; srun's 143 over ranks that all chose 87 is 87.
# shellcheck source=../lib.sh
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 11
HOOK=$TSR_ROOT/jobs/lib/tessera-job.sh

# step RC LINE...: run tsr_run on a stand-in step that prints LINEs on stderr and exits RC;
# sets $got (the hook's exit status) and leaves its output in $TMP/out.txt. The hook's stderr copy
# goes to a TMPDIR of the test's own: other tests' jobs may hold /tmp/tessera-step.* meanwhile.
step() {
    local rc=$1; shift
    local lines
    lines=$(printf 'echo %q >&2; ' "$@")
    mkdir -p "$TMP/steptmp"
    SLURM_JOB_ID=7 TSR_REQUEUE=exit TMPDIR="$TMP/steptmp" bash -c "source '$HOOK'; tsr_run bash -c '$lines exit $rc'" \
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
    ! compgen -G "$TMP/steptmp/tessera-step.*" >/dev/null
tap_check $? "srun killed with no task lines: a crash, requeued (exit $got); no stderr copy left behind"
# A stand-in srun (drops its own --options, runs the rest) and a health checker that hangs: it
# records its pid and sleeps far longer than the test waits.
mkdir -p "$TMP/bin"
cat >"$TMP/bin/srun" <<'SH'
#!/bin/bash
while [[ $1 == --* ]]; do shift; done
exec "$@"
SH
cat >"$TMP/hc" <<SH
#!/bin/bash
echo \$\$ >"$TMP/hc.pid"
exec sleep 300
SH
chmod +x "$TMP/bin/srun" "$TMP/hc"
# prestep SIG WHEN: a batch shell that sources the hook, runs the preflight, then the step (which
# would print STEP-RAN); SIG reaches it WHEN=early (before the preflight) or during the sweep
prestep() {
    rm -f "$TMP/hc.pid"
    local early=:
    [[ $2 == early ]] && early="kill -$1 \$\$"
    PATH=$TMP/bin:$PATH SLURM_JOB_ID=7 TSR_REQUEUE=exit TSR_HEALTHCHECK=$TMP/hc TSR_PREFLIGHT=quick \
        bash -c "set -euo pipefail; source '$HOOK'; $early; tsr_preflight; tsr_run bash -c 'echo STEP-RAN'" \
        >"$TMP/out.txt" 2>&1 &
    local pid=$! i
    if [[ $2 == during ]]; then
        for ((i = 0; i < 100; i++)); do [[ -s $TMP/hc.pid ]] && break; sleep 0.1; done
        kill -"$1" "$pid"
    fi
    got=0
    wait "$pid" || got=$?
}
prestep USR1 during
hcpid=$(cat "$TMP/hc.pid" 2>/dev/null)
((got == 85)) && grep -q "received SIGUSR1 before the step started: requeueing" "$TMP/out.txt" &&
    grep -q "sweep: SIGUSR1 arrived: abandoned" "$TMP/out.txt" && ! grep -q STEP-RAN "$TMP/out.txt" &&
    [[ -n $hcpid ]] && ! kill -0 "$hcpid" 2>/dev/null
tap_check $? "SIGUSR1 during the preflight sweep: the sweep (pid ${hcpid:-none}) stopped, requeued without starting the step (exit $got)"
[[ -n $hcpid ]] && kill "$hcpid" 2>/dev/null   # a hook that left it running: not left behind
prestep TERM early
((got == 85)) && grep -q "received SIGTERM before the step started" "$TMP/out.txt" &&
    ! grep -q "preflight:" "$TMP/out.txt" && ! grep -q STEP-RAN "$TMP/out.txt" && [[ ! -e $TMP/hc.pid ]]
tap_check $? "SIGTERM before the preflight: no sweep, requeued without starting the step (exit $got)"
# the templates keep a signal from their first command on, before the module system loads
bad=
for t in pretrain finetune eval; do
    sed -n '/^set -euo pipefail$/,/^type module/p' "$TSR_ROOT/jobs/$t.sbatch" | grep -q "^trap 'TSR_STOP_SIG=USR1' USR1; trap 'TSR_STOP_SIG=TERM' TERM$" || bad+=" $t"
done
[[ -z $bad ]]
tap_check $? "pretrain, finetune and eval templates set the keeping traps before 'module load'${bad:+ (missing in:$bad)}"

# exit 87: stand-ins that log their calls into $TMP/calls.txt
mkdir -p "$TMP/bin87" "$TMP/run"
cat >"$TMP/bin87/srun" <<SH
#!/bin/bash
echo "srun \$*" >>"$TMP/calls.txt"
while [[ \$1 == -* ]]; do [[ \$1 == -[Nnw] ]] && shift; shift; done
exec "\$@"
SH
printf '#!/bin/bash\necho "hc $*" >>"%s"\nexit 1\n' "$TMP/calls.txt" >"$TMP/hc87"
# (scontrol show job -o prints ExcNodeList=(null) for a job that excludes nothing, as Slurm does)
printf '#!/bin/bash\necho "scontrol $*" >>"%s"\n[[ $1 == show ]] && echo "JobId=7 ExcNodeList=(null)"\nexit 0\n' \
    "$TMP/calls.txt" >"$TMP/bin87/scontrol"
chmod +x "$TMP/bin87/srun" "$TMP/bin87/scontrol" "$TMP/hc87"
# step87 NODES RC LINE...: tsr_run (RUN_DIR=$TMP/run, its culprit record naming NODES) on a
# stand-in step exiting RC after printing LINEs; $got, $TMP/out.txt, $TMP/calls.txt
step87() {
    local nodes=$1 rc=$2; shift 2
    printf '{\n  "step": 11,\n  "verdict": "changed_at_rest",\n  "nodes": "%s",\n  "suspects": ""\n}\n' \
        "$nodes" >"$TMP/run/sdc-culprit.json"
    rm -f "$TMP/calls.txt"
    local lines
    lines=$(printf 'echo %q >&2; ' "$@")
    PATH=$TMP/bin87:$PATH SLURM_JOB_ID=7 TSR_REQUEUE=exit TSR_HEALTHCHECK=$TMP/hc87 RUN_DIR=$TMP/run \
        TMPDIR="$TMP/steptmp" bash -c "set -euo pipefail; source '$HOOK'; tsr_run bash -c '$lines exit $rc'" \
        >"$TMP/out.txt" 2>&1
    got=$?
}
step87 n2,n3 87
((got == 0)) && grep -qx "hc --sdc-report $TMP/run/sdc-culprit.json --drain" "$TMP/calls.txt" &&
    grep -q "^srun .*-w n2 .*--sdc-report" "$TMP/calls.txt" && grep -q "^srun .*-w n3 .*--sdc-report" "$TMP/calls.txt" &&
    grep -qx "scontrol update jobid=7 ExcNodeList=n2,n3" "$TMP/calls.txt" && grep -qx "scontrol release 7" "$TMP/calls.txt"
r=$?; ((r)) && sed 's/^/#   /' "$TMP/calls.txt" "$TMP/out.txt"
tap_check $r "exit 87 naming n2 and n3: each drained by the checker (--sdc-report FILE --drain, srun -w NODE), the job requeued held, ExcNodeList=n2,n3, released (exit $got)"
step87 "" 87
((got == 87)) && grep -q "no culprit node in .*unattributed.*requeueing without excluding any node" "$TMP/out.txt" &&
    ! grep -q "hc \|update" "$TMP/calls.txt" 2>/dev/null
tap_check $? "exit 87 with no culprit node (unattributed): requeued as it is, nothing drained (exit $got)"
step87 n2 143 "srun: error: n1: task 0: Exited with exit code 87" "srun: error: n2: task 1: Exited with exit code 87"
((got == 0)) && grep -q "the ranks exited 87" "$TMP/out.txt" && grep -qx "scontrol update jobid=7 ExcNodeList=n2" "$TMP/calls.txt"
tap_check $? "srun's 143 after every rank chose 87: read as 87, n2 excluded (exit $got)"
tap_done
