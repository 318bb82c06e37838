#!/usr/bin/env bash
# tests/slurm/cluster.sh -- a real Slurm cluster on this host for the tests: munge, slurmctld and two
# slurmd (nodes n1, n2) on 127.0.0.1. Adapted from ../shared/tools/slurm-ci.sh; the gotchas it
# works around are in ../shared/tools/slurm-ci-notes.md (TmpFS per node, short cred_expire so a
# requeued job runs again within ~12 s, no OpenMPI shared memory across the two virtual nodes).
#
#   bash tests/slurm/cluster.sh up [PROLOG EPILOG HEALTHCHECK]   stop what an earlier `up` started,
#        wipe Slurm state, write /etc/slurm/slurm.conf, start the daemons, wait until both nodes are
#        idle. The three optional paths become Prolog=, Epilog=, HealthCheckProgram= (the test
#        points them at the installed jobs/slurm wrappers).
#   bash tests/slurm/cluster.sh down   cancel jobs, stop slurmd/slurmctld (and munged if `up`
#        started it) by the PID in their pid files, checked against /proc/PID/comm. Never by name.
#   bash tests/slurm/cluster.sh env    print the environment a job spanning both nodes needs.
#   bash tests/slurm/cluster.sh can    exit 0 if this machine can run the cluster (root + packages).
# Needs root and Debian's slurmctld, slurmd, slurm-client, munge (./INSTALL installs them).
set -euo pipefail

NODES=(n1 n2)
NCPU=${SLURM_TEST_CPUS:-$(nproc)}
CRED_EXPIRE=${SLURM_TEST_CRED_EXPIRE:-10}
HC_INTERVAL=${SLURM_TEST_HC_INTERVAL:-30}   # HealthCheckInterval, seconds
CONF_DIR=/etc/slurm
RUN_DIR=/run/tessera-slurm-test          # what this script started (munged pid)

log() { printf '[cluster %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { log "FATAL: $*"; exit 1; }

can_run() {
    [[ $(id -u) == 0 ]] || { echo "not root"; return 1; }
    local c
    for c in slurmctld slurmd sbatch scontrol munged; do
        command -v "$c" >/dev/null || [[ -x /usr/sbin/$c ]] || { echo "$c not installed"; return 1; }
    done
}

# kill_pidfiles COMM FILE...: SIGTERM the pid in each FILE if /proc/PID/comm is COMM, wait, SIGKILL
# after 20 s. A stale pid file never hits another process.
kill_pidfiles() {
    local comm=$1 f pid pids=()
    shift
    for f in "$@"; do
        [[ -s $f ]] || { rm -f "$f"; continue; }
        pid=$(tr -dc 0-9 <"$f")
        if [[ -n $pid && $(cat "/proc/$pid/comm" 2>/dev/null) == "$comm" ]]; then
            log "stopping $comm pid $pid"
            kill "$pid" 2>/dev/null || true
            pids+=("$pid")
        fi
        rm -f "$f"
    done
    for pid in "${pids[@]}"; do
        for _ in $(seq 1 80); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
        kill -0 "$pid" 2>/dev/null && { log "$comm $pid still alive: SIGKILL"; kill -9 "$pid" 2>/dev/null || true; }
    done
    return 0
}
pid_alive() { local pid; [[ -s $1 ]] || return 1; pid=$(tr -dc 0-9 <"$1"); [[ -n $pid && $(cat "/proc/$pid/comm" 2>/dev/null) == "$2" ]]; }
nodestate() { sinfo -h -N -n "$1" -o '%T' 2>/dev/null | head -1; }
wait_idle() {
    local n end=$((SECONDS + ${1:-60}))
    for n in "${NODES[@]}"; do
        while [[ $(nodestate "$n") != idle ]]; do
            ((SECONDS < end)) || return 1
            sleep 0.25
        done
    done
}

start_munge() {
    install -d -o munge -g munge -m 0700 /etc/munge /var/log/munge
    install -d -o munge -g munge -m 0711 /var/lib/munge
    install -d -o munge -g munge -m 0755 /run/munge
    if [[ ! -s /etc/munge/munge.key ]]; then
        if command -v mungekey >/dev/null; then mungekey --create --keyfile=/etc/munge/munge.key --force
        else dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none; fi
    fi
    chown munge:munge /etc/munge/munge.key
    chmod 0400 /etc/munge/munge.key
    if pid_alive /run/munge/munged.pid munged && munge -n | unmunge >/dev/null 2>&1; then
        log "munged already running: reused"
        return 0
    fi
    rm -f /run/munge/munged.pid
    runuser -u munge -- /usr/sbin/munged
    mkdir -p "$RUN_DIR"
    cp /run/munge/munged.pid "$RUN_DIR/munged.pid"
    for _ in $(seq 1 40); do munge -n | unmunge >/dev/null 2>&1 && return 0; sleep 0.25; done
    die "munge does not work"
}

write_config() {
    local prolog=$1 epilog=$2 hc=$3 n port=6821 nodelines="" mem
    install -d "$CONF_DIR" /var/log/slurm /var/spool/slurmctld
    # memory is not a consumable (CR_Core); advertise 90% of RAM, never more than slurmd detects
    mem=$(awk '/^MemTotal:/ {printf "%d", $2 / 1024 * 0.9}' /proc/meminfo)
    for n in "${NODES[@]}"; do
        install -d "/var/spool/slurmd/$n" "/tmp/slurm-$n"
        nodelines+="NodeName=$n NodeHostname=localhost NodeAddr=127.0.0.1 Port=$port CPUs=$NCPU RealMemory=$mem State=UNKNOWN"$'\n'
        port=$((port + 1))
    done
    {
        cat <<CONF
# written by tessera tests/slurm/cluster.sh: one host, two slurmd, no cgroups, no accounting
ClusterName=tessera-test
SlurmctldHost=localhost(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# a requeued job is eligible again after cred_expire + 1 s (Slurm's default is 120)
AuthInfo=cred_expire=$CRED_EXPIRE
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd/%n
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd-%n.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd-%n.log
# per node, or a 2-node srun --mpi=pmix fails on the shared spmix_appdir
TmpFS=/tmp/slurm-%n
SlurmctldPort=6817
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MailProg=/bin/true
SchedulerType=sched/backfill
SchedulerParameters=nohold_on_prolog_fail,sched_interval=2,bf_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
JobRequeue=1
MinJobAge=600
KillWait=10
SlurmdTimeout=30
CONF
        [[ -n $prolog ]] && printf 'Prolog=%s\nPrologFlags=Alloc\n' "$prolog"
        [[ -n $epilog ]] && printf 'Epilog=%s\n' "$epilog"
        [[ -n $hc ]] && printf 'HealthCheckProgram=%s\nHealthCheckInterval=%s\nHealthCheckNodeState=ANY\n' "$hc" "$HC_INTERVAL"
        printf '%s' "$nodelines"
        echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
    } >"$CONF_DIR/slurm.conf"
}

stop_slurm() {
    if pid_alive /run/slurmctld.pid slurmctld; then
        local ids end
        ids=$(squeue -h -o %A 2>/dev/null || true)
        if [[ -n $ids ]]; then
            log "cancelling jobs: $(echo "$ids" | tr '\n' ' ')"
            # shellcheck disable=SC2086
            scancel $ids 2>/dev/null || true
            end=$((SECONDS + 30))
            while ((SECONDS < end)) && [[ -n $(squeue -h -o %A 2>/dev/null) ]]; do sleep 0.5; done
        fi
    fi
    local f
    for f in /run/slurmd-*.pid; do [[ -e $f ]] && kill_pidfiles slurmd "$f"; done
    kill_pidfiles slurmctld /run/slurmctld.pid
}

do_up() {
    local t0=$SECONDS n
    can_run >/dev/null || die "cannot run a Slurm cluster here: $(can_run)"
    stop_slurm
    rm -rf /var/spool/slurmctld /var/spool/slurmd /var/log/slurm/slurmctld.log /var/log/slurm/slurmd-*.log
    for n in "${NODES[@]}"; do rm -rf "/tmp/slurm-$n"; done
    write_config "${1:-}" "${2:-}" "${3:-}"
    start_munge
    slurmctld
    for n in "${NODES[@]}"; do slurmd -N "$n"; done
    if ! wait_idle 60; then
        sinfo -N -l >&2 || true
        tail -20 /var/log/slurm/*.log >&2 || true
        die "nodes not idle after 60 s"
    fi
    log "cluster up in $((SECONDS - t0)) s: $(sinfo -h -N -o '%N=%T' | tr '\n' ' ')"
}

do_down() {
    stop_slurm
    if [[ -s $RUN_DIR/munged.pid ]]; then
        kill_pidfiles munged "$RUN_DIR/munged.pid"
        rm -f /run/munge/munged.pid
    fi
    rm -rf "$RUN_DIR"
    log "down"
}

do_env() {
    cat <<'ENV'
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,tcp OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo OMPI_MCA_pml=ob1
export OMPI_MCA_rmaps_base_oversubscribe=1
ENV
}

case ${1:-} in
    up) shift; do_up "$@" ;;
    down) do_down ;;
    env) do_env ;;
    can) can_run ;;
    *) die "usage: $0 up [PROLOG EPILOG HEALTHCHECK] | down | env | can" ;;
esac
