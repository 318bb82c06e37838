# shellcheck shell=bash
# tessera-job.sh -- the requeue hook shared by the sbatch templates in jobs/. Source it from a bash
# batch script, then call:
#
#   tsr_setup                      log the job and its restart count, enforce MAX_RESTARTS
#   tsr_bind                       the srun binding options into TSR_BIND (--cpu-bind, --gpu-bind)
#   tsr_preflight                  node health check on every node of the job (if installed):
#                                  TSR_PREFLIGHT=full (default), quick or off
#   tsr_run srun ... tessera-train ...
#                                  run the step in the background, forward USR1/TERM to it as a stop
#                                  request, wait for it, then act on its exit code (never returns):
#     0   finished                        -> exit 0
#     85  checkpoint after a stop request -> scontrol requeue (the rerun resumes from `latest`)
#     86  checkpoint because the run got slow -> node sweep, exclude the bad nodes, requeue
#     87  silent data corruption (docs/health.md) -> the culprit nodes of RUN_DIR/sdc-culprit.json
#         drained through the health checker (as root) and excluded, requeue; the rerun resumes
#         from the newest checkpoint whose fingerprints agreed
#     1,2 config or data/checkpoint error -> exit with it; requeueing cannot help
#     other (a rank crashed, was killed, srun failed)
#         -> requeue too (TSR_ON_CRASH=requeue, the default): the run resumes from its last
#            committed checkpoint; TSR_ON_CRASH=exit leaves it to Slurm (a node failure requeues a
#            --requeue job by itself; so does a site's RequeueExit= list).
#
# Settings (environment, all optional): TSR_PREFLIGHT (full|quick|off: tsr_preflight's mode,
# default full), TSR_HC_LIMIT (seconds a health check may take, 300),
# MAX_RESTARTS (default 20; the job stops with exit 3 once
# SLURM_RESTART_COUNT exceeds it), TSR_ON_CRASH (requeue|exit), TSR_REQUEUE (scontrol, the default:
# the hook requeues; exit: it exits 85/86 for a slurm.conf RequeueExit=85,86), TSR_HEALTHCHECK
# (default: tessera-healthcheck on PATH), TSR_CPU_BIND / TSR_GPU_BIND (tsr_bind: cores, closest;
# none = the site's default).
# Exit codes of the batch script: those of tessera-train, plus 3 when MAX_RESTARTS stopped it.
# The requeue loop: docs/slurm.md "3. The requeue loop" (exit codes: docs/architecture.md).

# tsr_bind: the srun options that bind each rank (docs/site.md "Binding"), into the array TSR_BIND:
# --cpu-bind=$TSR_CPU_BIND (default cores: each rank on the cores Slurm gave its task) and, where
# the job has GPUs, --gpu-bind=$TSR_GPU_BIND (default closest: the GPU nearest those cores); none
# for either leaves it to the site. tessera-train's threads = auto is one thread per core of the
# rank's CPU set (or SLURM_CPUS_PER_TASK where the site's task plugin does not bind). OpenMP's own
# pinning (OMP_PLACES, OMP_PROC_BIND) is left to the environment: under a task plugin that does not
# bind, pinned ranks would pile onto the node's first cores.
tsr_bind() {
    TSR_BIND=()
    local cpu=${TSR_CPU_BIND:-cores} gpu=${TSR_GPU_BIND:-closest}
    [[ $cpu == none ]] || TSR_BIND+=(--cpu-bind="$cpu")
    if [[ ${SLURM_GPUS_ON_NODE:-0} =~ [1-9] || ${SLURM_GPUS_PER_NODE:-0} =~ [1-9] ]]; then
        [[ $gpu == none ]] || TSR_BIND+=(--gpu-bind="$gpu")
    fi
    tsr_log "binding: srun ${TSR_BIND[*]:-(none)}"
}

tsr_log() { printf '[tessera-job %(%F %T)T] %s\n' -1 "$*"; }

# Stop signals before the step runs. Slurm's --signal=B:USR1@N, a preemption's TERM or an scancel
# may arrive while the module loads or the preflight runs; bash's default action for both would end
# the batch shell at once (job FAILED, no requeue). From here on (and from the templates' first line,
# which sets the same variable) such a signal is kept in TSR_STOP_SIG: a running sweep is abandoned,
# and the job is requeued without starting the step (tsr_stop_if_asked). While the step runs,
# tsr_run forwards the signals to it instead.
TSR_STOP_SIG=${TSR_STOP_SIG:-}
tsr_hold_stops() { trap 'TSR_STOP_SIG=USR1' USR1; trap 'TSR_STOP_SIG=TERM' TERM; }
tsr_hold_stops
tsr_stop_if_asked() {
    [[ -n $TSR_STOP_SIG ]] || return 0
    tsr_log "received SIG$TSR_STOP_SIG before the step started: requeueing without starting it (the run resumes from its latest checkpoint)"
    tsr_requeue 85
}

# The id `scontrol requeue` needs: ARRAYJOB_TASK for an array task, else the job id.
tsr_job_id() {
    if [[ -n ${SLURM_ARRAY_JOB_ID:-} && -n ${SLURM_ARRAY_TASK_ID:-} ]]; then
        printf '%s_%s\n' "$SLURM_ARRAY_JOB_ID" "$SLURM_ARRAY_TASK_ID"
    else
        printf '%s\n' "${SLURM_JOB_ID:?tessera-job.sh: not inside a Slurm job (SLURM_JOB_ID unset)}"
    fi
}

tsr_setup() {
    local restarts=${SLURM_RESTART_COUNT:-0} max=${MAX_RESTARTS:-20}
    tsr_log "job $(tsr_job_id) (${SLURM_JOB_NAME:-?}) on ${SLURM_JOB_NODELIST:-?}: start $((restarts + 1)), SLURM_RESTART_COUNT=$restarts, MAX_RESTARTS=$max"
    if ((restarts > max)); then
        tsr_log "ERROR: this job was requeued $restarts times, more than MAX_RESTARTS=$max: not starting again."
        tsr_log "Read the earlier entries of this log for why each run stopped, fix the cause (or raise MAX_RESTARTS), then resubmit: the run resumes from its latest checkpoint."
        exit 3
    fi
    command -v tessera-train >/dev/null || { tsr_log "ERROR: tessera-train is not on PATH: module load tessera first"; exit 1; }
    tsr_log "tessera-train: $(command -v tessera-train) ($(tessera-train --version 2>&1 | head -1))"
}

# The health checker, if installed: TSR_HEALTHCHECK or tessera-healthcheck on PATH.
tsr_hc_cmd() {
    local hc=${TSR_HEALTHCHECK:-}
    [[ -n $hc ]] || hc=$(command -v tessera-healthcheck || true)
    [[ -n $hc && -x $hc ]] && printf '%s\n' "$hc"
}

# Check every node before the run, in TSR_PREFLIGHT mode: full (default: GEMM burn, memory
# bandwidth, all-reduce between node pairs over the allocation; minutes on GPUs), quick (seconds:
# what the prolog runs) or off. Every start checks, requeued ones too: a requeue may land on other
# nodes. An unhealthy node ends this start with a requeue that excludes it (the checker drained it
# if run as root).
tsr_preflight() {
    local hc mode=${TSR_PREFLIGHT:-full}
    tsr_stop_if_asked
    case $mode in
        full | quick) ;;
        off) tsr_log "preflight: TSR_PREFLIGHT=off: skipped"; return 0 ;;
        *) tsr_log "ERROR: TSR_PREFLIGHT=$mode: expected full, quick or off"; exit 1 ;;
    esac
    hc=$(tsr_hc_cmd) || { tsr_log "preflight: tessera-healthcheck not installed: skipped"; return 0; }
    tsr_log "preflight: $hc --$mode on every node (TSR_PREFLIGHT=$mode)"
    tsr_sweep "$hc" "--$mode"
    if [[ -n $TSR_BAD_NODES ]]; then
        tsr_log "preflight: unhealthy: $TSR_BAD_NODES"
        tsr_requeue_excluding "$TSR_BAD_NODES"
    fi
    tsr_stop_if_asked
}

# tsr_sweep HC ARGS...: run the checker once per node; sets TSR_BAD_NODES (comma list) from the
# verdict lines "NODE CHECK FAIL ...". Exit status 2 (could not run) marks nobody bad.
# A check that does not end within TSR_HC_LIMIT seconds (default 300) is abandoned: a hung checker
# must not eat the job's walltime, and it marks nobody bad. Nor must one that a stop signal
# interrupts (TSR_STOP_SIG): it is stopped and marks nobody bad.
TSR_BAD_NODES=
tsr_sweep() {
    local out rc pid f
    f=$(mktemp "${TMPDIR:-/tmp}/tessera-sweep.XXXXXX")
    # in the background, so that a trapped signal interrupts the wait instead of waiting for the end
    timeout "${TSR_HC_LIMIT:-300}" srun --mpi="${TSR_SRUN_MPI:-pmix}" --ntasks-per-node=1 \
        --kill-on-bad-exit=0 "$@" >"$f" 2>&1 &
    pid=$!
    while :; do
        rc=0
        wait "$pid" || rc=$?
        if ((rc > 128)) && kill -0 "$pid" 2>/dev/null; then
            [[ -n $TSR_STOP_SIG ]] && kill -TERM "$pid" 2>/dev/null
            continue
        fi
        break
    done
    out=$(<"$f")
    rm -f "$f"
    printf '%s\n' "$out" | sed 's/^/  hc| /'
    TSR_BAD_NODES=$(printf '%s\n' "$out" | awk '$3 == "FAIL" { print $1 }' | sort -u | paste -sd, -)
    [[ -n $TSR_STOP_SIG ]] && { TSR_BAD_NODES=; tsr_log "sweep: SIG$TSR_STOP_SIG arrived: abandoned (exit $rc), nobody marked bad"; return 0; }
    ((rc == 124)) && { TSR_BAD_NODES=; tsr_log "sweep: no answer within ${TSR_HC_LIMIT:-300} s: abandoned, nobody marked bad"; return 0; }
    tsr_log "sweep: exit $rc, unhealthy nodes: ${TSR_BAD_NODES:-none}"
}

# tsr_requeue CODE: put this job back in the queue. TSR_REQUEUE=exit leaves that to Slurm instead:
# the script exits CODE, which a site's slurm.conf RequeueExit=85,86 requeues.
tsr_requeue() {
    local id
    id=$(tsr_job_id)
    if [[ ${TSR_REQUEUE:-scontrol} == exit ]]; then
        tsr_log "requeue: TSR_REQUEUE=exit: exiting $1 for slurm.conf's RequeueExit"
        exit "$1"
    fi
    trap '' TERM USR1                 # requeueing sends this shell SIGTERM; finish first
    tsr_log "requeue: scontrol requeue $id"
    scontrol requeue "$id" || { tsr_log "ERROR: scontrol requeue $id failed: resubmit this script by hand (the run resumes from its latest checkpoint)"; exit "$1"; }
    exit 0
}

# tsr_requeue_excluding NODES [CODE]: requeue held, exclude the nodes while the job is pending,
# release it; on failure exit CODE (default 86), the step's.
tsr_requeue_excluding() {
    local id bad=$1 code=${2:-86} old
    id=$(tsr_job_id)
    trap '' TERM USR1
    old=$(scontrol show job -o "$id" | grep -o 'ExcNodeList=[^ ]*' | cut -d= -f2)
    [[ $old == "(null)" ]] && old=
    tsr_log "requeue excluding $bad: scontrol requeuehold $id; update ExcNodeList; release"
    if scontrol requeuehold "$id" && scontrol update jobid="$id" ExcNodeList="${old:+$old,}$bad"; then
        scontrol release "$id" && exit 0
    fi
    tsr_log "ERROR: could not requeue $id excluding $bad: release or resubmit it by hand"
    exit "$code"
}

# tsr_sdc_response: after exit 87, silent data corruption (docs/health.md): the culprit nodes that
# $RUN_DIR/sdc-culprit.json names (its "nodes", set by the template) are drained through the
# health checker's own path (tessera-healthcheck --sdc-report FILE --drain, on each: as root with a
# "tessera-hc: sdc ..." reason, which its --resume-own never lifts; not as root it says what it
# would run) and excluded from the requeued job, which resumes from the newest checkpoint whose
# fingerprints agreed. A verdict that blames no node (two copies disagreed: "unattributed")
# requeues as it is, on the same nodes; MAX_RESTARTS bounds a loop of those.
tsr_sdc_response() {
    local f=${RUN_DIR:-.}/sdc-culprit.json nodes hc node
    nodes=$({ sed -n 's/^  "nodes": "\([A-Za-z0-9._,-]*\)",$/\1/p' "$f" 2>/dev/null || true; } | head -1)
    if [[ -z $nodes ]]; then
        tsr_log "no culprit node in $f (unattributed, or no record): requeueing without excluding any node"
        tsr_requeue 87
    fi
    tsr_log "culprit node(s) of $f: $nodes"
    if hc=$(tsr_hc_cmd); then
        for node in ${nodes//,/ }; do
            tsr_log "drain: srun -w $node $hc --sdc-report $f --drain"
            timeout "${TSR_HC_LIMIT:-300}" srun --mpi="${TSR_SRUN_MPI:-pmix}" -N1 -n1 -w "$node" \
                --kill-on-bad-exit=0 "$hc" --sdc-report "$f" --drain 2>&1 | sed 's/^/  hc| /' || true
        done
    else
        tsr_log "tessera-healthcheck not installed: $nodes excluded, not drained"
    fi
    tsr_requeue_excluding "$nodes" 87
}

TSR_STEP_PID=
tsr_forward() {
    tsr_log "received SIG$1: asking the step to checkpoint and stop (SIGUSR1 to pid $TSR_STEP_PID)"
    kill -USR1 "$TSR_STEP_PID" 2>/dev/null || true
}

# tsr_task_exit FILE: srun's stderr of the step. When srun ended with a signal's status (>128), the
# exit status the ranks themselves chose, if they chose one: with --kill-on-bad-exit, rank 0 exiting
# 1 on a config error gets its peers SIGTERMed before they exit 1 too, and srun then reports 143.
# Prints X when every "task(s) N: Exited with exit code X" line of srun names the same X, that X is
# 1 or 2 (errors that a requeue cannot fix) or 87 (a corruption every rank agreed on: its culprit
# is to be excluded), and no task ended by a signal other than srun's own Terminated/Killed; prints
# nothing otherwise (a crash stays a crash).
tsr_task_exit() {
    local f=$1 line codes="" other=0
    [[ -r $f ]] || return 0
    while IFS= read -r line; do
        if [[ $line =~ tasks?\ [0-9,-]+:\ Exited\ with\ exit\ code\ ([0-9]+) ]]; then
            [[ " $codes " == *" ${BASH_REMATCH[1]} "* ]] || codes+="${codes:+ }${BASH_REMATCH[1]}"
        elif [[ $line =~ tasks?\ [0-9,-]+:\ (.*)$ ]]; then
            case ${BASH_REMATCH[1]} in Terminated|Killed) ;; *) other=1 ;; esac
        fi
    done < <(grep -E '^srun: error: .*: tasks? [0-9,-]+: ' "$f")
    if ((other == 0)) && [[ $codes == 1 || $codes == 2 || $codes == 87 ]]; then printf '%s\n' "$codes"; fi
}

# tsr_comment FILE: the job's comment set to the run's cost line the trainer wrote into FILE
# (TSR_COMMENT_FILE; docs/site.md "What a run cost"), so that squeue -o %k, scontrol show job and
# sacct --format=JobID,Comment show what the run cost. TSR_JOB_COMMENT=0 leaves the comment alone.
tsr_comment() {
    local line id
    [[ ${TSR_JOB_COMMENT:-1} == 1 && -s $1 ]] || return 0
    line=$(head -c 1000 "$1" | head -1)
    id=$(tsr_job_id)
    if scontrol update JobId="$id" Comment="$line"; then
        tsr_log "comment of $id: $line"
    else
        tsr_log "WARNING: scontrol update JobId=$id Comment=... failed: the job's comment is not set"
    fi
}

tsr_run() {
    local rc step_err
    tsr_stop_if_asked
    # a sweep's array task (tessera-job sweep) adds its settings to the step's command
    set -- "$@" ${TSR_SWEEP_SETS[@]+"${TSR_SWEEP_SETS[@]}"}
    tsr_log "step: $*"
    # srun's stderr goes to the job's log as always, and to a copy that tsr_task_exit reads
    step_err=$(mktemp "${TMPDIR:-/tmp}/tessera-step.XXXXXX")
    TSR_COMMENT_FILE=$(mktemp "${TMPDIR:-/tmp}/tessera-comment.XXXXXX")
    export TSR_COMMENT_FILE
    "$@" 2> >(tee -a "$step_err" >&2) &
    TSR_STEP_PID=$!
    trap 'tsr_forward USR1' USR1
    trap 'tsr_forward TERM' TERM
    # one that came between the start of the step and these traps is forwarded now
    [[ -n $TSR_STOP_SIG ]] && tsr_forward "$TSR_STOP_SIG"
    while :; do
        rc=0
        wait "$TSR_STEP_PID" || rc=$?
        # a trapped signal interrupts `wait` with 128+n while the step still runs: wait again
        if ((rc > 128)) && kill -0 "$TSR_STEP_PID" 2>/dev/null; then continue; fi
        break
    done
    tsr_hold_stops
    tsr_log "step exited with $rc"
    tsr_comment "$TSR_COMMENT_FILE"
    rm -f "$TSR_COMMENT_FILE"
    if ((rc > 128)); then
        local chosen
        chosen=$(tsr_task_exit "$step_err")
        if [[ -n $chosen ]]; then
            tsr_log "srun's $rc is its kill of the other ranks (--kill-on-bad-exit): the ranks exited $chosen"
            rc=$chosen
        fi
    fi
    rm -f "$step_err"
    case $rc in
        0) tsr_log "finished"; exit 0 ;;
        85) tsr_log "checkpoint committed after a stop request"; tsr_requeue 85 ;;
        86)
            tsr_log "checkpoint committed because the run got slow: sweeping the nodes"
            local hc
            if hc=$(tsr_hc_cmd); then
                tsr_sweep "$hc" --full
                [[ -n $TSR_BAD_NODES ]] && tsr_requeue_excluding "$TSR_BAD_NODES"
            else
                tsr_log "tessera-healthcheck not installed: requeueing without excluding any node"
            fi
            tsr_requeue 86 ;;
        87) tsr_log "silent data corruption found by the run (exit 87): excluding its culprit"; tsr_sdc_response ;;
        1) tsr_log "stopped: usage or configuration error (exit 1; the reason is above); not requeued"; exit 1 ;;
        2) tsr_log "stopped: data or checkpoint error (exit 2; the reason is above); not requeued"; exit 2 ;;
        *)
            if [[ ${TSR_ON_CRASH:-requeue} == requeue ]]; then
                tsr_log "the step crashed (exit $rc): requeueing to resume from the last committed checkpoint"
                tsr_requeue "$rc"
            fi
            tsr_log "the step crashed (exit $rc); TSR_ON_CRASH=exit: leaving it to Slurm"
            exit "$rc" ;;
    esac
}
