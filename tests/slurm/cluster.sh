#!/usr/bin/env bash
# tests/slurm/cluster.sh -- a private Slurm cluster for the tests: its own munged, slurmctld and two
# slurmd (nodes n1, n2) on 127.0.0.1, everything they read or write in one instance directory, so
# that it runs beside a site's Slurm and munge on the same host without either noticing.
#
# The instance directory is $SLURM_TEST_DIR (default: build/slurm-test of this checkout). In it:
#   slurm.conf, plugstack.conf  the config; every client command needs SLURM_CONF=DIR/slurm.conf
#                               (`env` prints it), the daemons get -f DIR/slurm.conf
#   munge/                      munged's socket (AuthInfo=socket=...), pid and log file
#   munge-key/                  its own random key and seed (0700)
#   state/ spool/NODE/ tmp/NODE/   StateSaveLocation, SlurmdSpoolDir=spool/%n, TmpFS=tmp/%n
#   log/  *.pid                 the daemons' logs and pid files
#   hooks/                      Prolog=, Epilog=, HealthCheckProgram= wrappers that set SLURM_CONF
#                               (and the variables named in SLURM_TEST_HOOK_ENV) and exec the real one
#   ports                       the TCP ports picked at `up`: slurmctld, then one per slurmd
# Nothing outside that directory is written, read as configuration, signalled or removed: not
# /etc/slurm, /etc/munge, /var/spool/slurm*, /var/log/slurm*, /run/*.pid, nor jobs of another cluster.
# The ports are free ones picked at run time (not 6817/6818), so two instances (different
# SLURM_TEST_DIR) and a real Slurm coexist.
#
#   cluster.sh up [PROLOG EPILOG HEALTHCHECK]  create the instance directory (refused if it exists and
#        is not empty), write the config, start munged, slurmctld, slurmd -N n1/n2, wait until both
#        nodes are idle. The optional paths become the Prolog, Epilog and HealthCheckProgram (through
#        the hooks/ wrappers).
#   cluster.sh down   cancel this cluster's jobs, stop its slurmd, slurmctld and munged by the PIDs in
#        its own pid files, each checked against /proc/PID/comm and /proc/PID/cmdline (which must name
#        this directory), then remove the directory: only one `up` made (it holds up's marker file).
#   cluster.sh env    print the environment a client command or a job spanning both nodes needs.
#   cluster.sh can    exit 0 if this machine can run a private cluster; else print why, exit 1.
# Settings: SLURM_TEST_CPUS (per node; default the host's, more allowed), SLURM_TEST_CRED_EXPIRE,
# SLURM_TEST_HC_INTERVAL, SLURM_TEST_HOOK_ENV
# (space-separated VAR=VALUE words, no spaces in a value, exported to the three hooks).
# Exit status: 0 done; 1 a refusal or a failure, the message naming the directory, file or value
# (`can`: the reason on stdout, for the tests' exit-77 skip line).
# Needs root and Debian's slurmctld, slurmd, slurm-client, munge (./INSTALL installs them), and
# every directory above SLURM_TEST_DIR searchable by all (munged checks its socket's path).
# Plugins that touch nothing of the host: proctrack/linuxproc, task/none, jobacct_gather/none (no
# cgroups, so nothing conflicts with a real slurmd's cgroup tree); no accounting storage.
set -euo pipefail

NODES=(n1 n2)
NCPU=${SLURM_TEST_CPUS:-$(nproc)}
# cred_expire: a requeued job waits this long before it may start again; 5 is Slurm's minimum
# (4 or less: "AuthInfo=cred_expire=4 invalid" in the logs, and the default 120 instead)
CRED_EXPIRE=${SLURM_TEST_CRED_EXPIRE:-5}
HC_INTERVAL=${SLURM_TEST_HC_INTERVAL:-30}   # HealthCheckInterval, seconds
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
DIR=${SLURM_TEST_DIR:-$ROOT/build/slurm-test}
[[ $DIR == /* ]] || DIR=$PWD/$DIR
CONF=$DIR/slurm.conf
MARK=$DIR/.tessera-slurm-test           # written first by `up`: `down` removes only such a directory
MSOCK=$DIR/munge/munge.socket
export SLURM_CONF=$CONF                 # every client command below talks to this cluster only

log() { printf '[cluster %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { log "FATAL: $*"; exit 1; }

# can_run: root, the packages, and what privacy needs: munged's --socket/--key-file/--pid-file
# options, Slurm's AuthInfo=socket= (every version since 2.x; 22.05 is what Debian 12 ships) and
# SLURM_CONF honoured by the clients (>= 20.02 is what this was written and tested against).
can_run() {
    [[ $(id -u) == 0 ]] || { echo "not root"; return 1; }
    local c v
    for c in slurmctld slurmd sbatch scontrol squeue sinfo scancel munged munge; do
        command -v "$c" >/dev/null || [[ -x /usr/sbin/$c ]] || { echo "$c not installed"; return 1; }
    done
    for c in --socket --key-file --pid-file --log-file --seed-file; do
        munged_bin --help 2>&1 | grep -q -- "$c=" ||
            { echo "munged has no $c option: cannot run a private munged"; return 1; }
    done
    v=$(slurmctld_bin -V 2>/dev/null | grep -o '[0-9][0-9]*\.[0-9][0-9]*' | head -1)
    if [[ -z $v ]] || ((10#${v%.*} < 20 || (10#${v%.*} == 20 && 10#${v#*.} < 2))); then
        echo "Slurm ${v:-of unknown version} is older than 20.02: not known to keep a cluster private"; return 1
    fi
}
# check_dir: what the instance directory must be: munged wants o+x on every directory above its
# socket, and the sockets under it (munge/, spool/NODE/) must fit in sun_path (108 bytes)
check_dir() {
    local d=$DIR
    ((${#DIR} <= 60)) || die "SLURM_TEST_DIR=$DIR is longer than 60 bytes: its sockets would not fit a unix socket path"
    while [[ ! -e $d ]]; do d=$(dirname "$d"); done
    while [[ $d != / ]]; do
        [[ $(stat -c %A "$d") == ?????????[xt] ]] ||
            die "$d (above SLURM_TEST_DIR=$DIR) is not searchable by others: munged refuses a socket there (chmod o+x $d)"
        d=$(dirname "$d")
    done
}
munged_bin() { if [[ -x /usr/sbin/munged ]]; then /usr/sbin/munged "$@"; else munged "$@"; fi; }
slurmctld_bin() { if [[ -x /usr/sbin/slurmctld ]]; then /usr/sbin/slurmctld "$@"; else slurmctld "$@"; fi; }
slurmd_bin() { if [[ -x /usr/sbin/slurmd ]]; then /usr/sbin/slurmd "$@"; else slurmd "$@"; fi; }

# our_pid COMM PIDFILE: print the pid in PIDFILE if it is a live COMM whose command line names this
# instance's directory (so a stale or foreign pid file never reaches another process)
our_pid() {
    local pid
    [[ -s $2 ]] || return 1
    pid=$(tr -dc 0-9 <"$2")
    [[ -n $pid && $(cat "/proc/$pid/comm" 2>/dev/null) == "$1" ]] || return 1
    tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -qF -- "$DIR/" || return 1
    echo "$pid"
}
# stop_pidfiles COMM:PIDFILE...: SIGTERM our COMM of each PIDFILE, all at once (each takes about
# 2 s to stop), wait, SIGKILL after 20 s
stop_pidfiles() {
    local cf pid pids=() comms=()
    for cf in "$@"; do
        pid=$(our_pid "${cf%%:*}" "${cf#*:}") || continue
        log "stopping ${cf%%:*} pid $pid"
        kill "$pid" 2>/dev/null || true
        pids+=("$pid") comms+=("${cf%%:*}")
    done
    for cf in "${!pids[@]}"; do
        pid=${pids[$cf]}
        for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || continue 2; sleep 0.2; done
        log "${comms[$cf]} $pid still alive: SIGKILL"
        kill -9 "$pid" 2>/dev/null || true
    done
}

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

# free_ports N: tests/ports.sh (shared with the monitoring test's node exporter)
# shellcheck source=../ports.sh
source "$(dirname "${BASH_SOURCE[0]}")/../ports.sh"

start_munge() {
    install -d -m 0755 "$DIR/munge"
    install -d -m 0700 "$DIR/munge-key"
    (umask 077 && head -c 1024 /dev/urandom >"$DIR/munge-key/munge.key")
    chmod 0400 "$DIR/munge-key/munge.key"
    munged_bin --socket="$MSOCK" --key-file="$DIR/munge-key/munge.key" --pid-file="$DIR/munge/munged.pid" \
        --log-file="$DIR/munge/munged.log" --seed-file="$DIR/munge-key/munged.seed" ||
        { cat "$DIR/munge/munged.log" >&2 || true; die "the private munged did not start"; }
    for _ in $(seq 1 40); do
        munge --socket="$MSOCK" -n | unmunge --socket="$MSOCK" >/dev/null 2>&1 && return 0
        sleep 0.25
    done
    die "the private munged on $MSOCK does not answer"
}

# write_hook NAME TARGET: DIR/hooks/NAME runs TARGET with this cluster's SLURM_CONF (slurmd gives
# Prolog, Epilog and HealthCheckProgram almost no environment, so their scontrol would otherwise read
# /etc/slurm/slurm.conf) and the VAR=VALUE words of SLURM_TEST_HOOK_ENV
write_hook() {
    local kv
    {
        echo '#!/bin/sh'
        echo "# written by tessera tests/slurm/cluster.sh: the $1 of the private cluster in $DIR"
        printf 'SLURM_CONF=%q; export SLURM_CONF\n' "$CONF"
        for kv in ${SLURM_TEST_HOOK_ENV:-}; do
            [[ $kv =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || die "SLURM_TEST_HOOK_ENV: '$kv' is not VAR=VALUE"
            printf '%s=%q; export %s\n' "${kv%%=*}" "${kv#*=}" "${kv%%=*}"
        done
        printf 'exec %q "$@"\n' "$2"
    } >"$DIR/hooks/$1"
    chmod 0755 "$DIR/hooks/$1"
}

write_config() {
    local prolog=$1 epilog=$2 hc=$3 n i nodelines="" mem ports
    mapfile -t ports < <(free_ports $((1 + ${#NODES[@]})))
    ((${#ports[@]} == 1 + ${#NODES[@]})) || die "no free TCP ports for the cluster"
    printf '%s\n' "${ports[@]}" >"$DIR/ports"
    install -d "$DIR/state" "$DIR/log" "$DIR/hooks"
    # memory is not a consumable (CR_Core); advertise 90% of RAM, never more than slurmd detects
    mem=$(awk '/^MemTotal:/ {printf "%d", $2 / 1024 * 0.9}' /proc/meminfo)
    for i in "${!NODES[@]}"; do
        n=${NODES[$i]}
        install -d "$DIR/spool/$n" "$DIR/tmp/$n"
        nodelines+="NodeName=$n NodeHostname=localhost NodeAddr=127.0.0.1 Port=${ports[$((i + 1))]} CPUs=$NCPU RealMemory=$mem State=UNKNOWN"$'\n'
    done
    : >"$DIR/plugstack.conf"    # no SPANK plugin of the site's /etc/slurm/plugstack.conf
    [[ -n $prolog ]] && write_hook prolog "$prolog"
    [[ -n $epilog ]] && write_hook epilog "$epilog"
    [[ -n $hc ]] && write_hook healthcheck "$hc"
    {
        cat <<CONF
# written by tessera tests/slurm/cluster.sh: a private test cluster, everything under $DIR
ClusterName=tessera-test
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=${ports[0]}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# the private munged; a requeued job is eligible again after cred_expire + 1 s (default 120)
AuthInfo=socket=$MSOCK,cred_expire=$CRED_EXPIRE
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
PlugStackConfig=$DIR/plugstack.conf
# per node, or a 2-node srun --mpi=pmix fails on the shared spmix_appdir
TmpFS=$DIR/tmp/%n
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
# a node is what this file says (SLURM_TEST_CPUS may advertise more CPUs than the host has: jobs
# that wait more than they compute then fit beside each other); without it, fewer detected CPUs
# than configured make the node INVALID
SlurmdParameters=config_overrides
CONF
        [[ -n $prolog ]] && printf 'Prolog=%s\nPrologFlags=Alloc\n' "$DIR/hooks/prolog"
        [[ -n $epilog ]] && printf 'Epilog=%s\n' "$DIR/hooks/epilog"
        [[ -n $hc ]] && printf 'HealthCheckProgram=%s\nHealthCheckInterval=%s\nHealthCheckNodeState=ANY\n' "$DIR/hooks/healthcheck" "$HC_INTERVAL"
        printf '%s' "$nodelines"
        echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
    } >"$CONF"
}

# cancel_ours: cancel every job of this cluster (SLURM_CONF is ours), wait up to 30 s for the queue
cancel_ours() {
    our_pid slurmctld "$DIR/slurmctld.pid" >/dev/null || return 0
    local ids end
    ids=$(squeue -h -o %A 2>/dev/null || true)
    [[ -n $ids ]] || return 0
    log "cancelling this cluster's jobs: $(echo "$ids" | tr '\n' ' ')"
    # shellcheck disable=SC2086
    scancel $ids 2>/dev/null || true
    end=$((SECONDS + 30))
    while ((SECONDS < end)) && [[ -n $(squeue -h -t R,CG -o %A 2>/dev/null) ]]; do sleep 0.5; done
}

do_up() {
    local t0=$SECONDS n why
    why=$(can_run) || die "cannot run a private Slurm cluster here: $why"
    check_dir
    if [[ -e $DIR ]]; then
        [[ -d $DIR && -z $(ls -A "$DIR") ]] || die "$DIR exists and is not empty (another instance, or not ours): not touching it; run down or pick another SLURM_TEST_DIR"
    fi
    install -d -m 0755 "$DIR"
    echo "tessera tests/slurm/cluster.sh instance, up at $(date -u +%FT%TZ) by pid $$" >"$MARK"
    write_config "${1:-}" "${2:-}" "${3:-}"
    start_munge
    slurmctld_bin -f "$CONF"
    for n in "${NODES[@]}"; do slurmd_bin -f "$CONF" -N "$n"; done
    if ! wait_idle 60; then
        sinfo -N -l >&2 || true
        tail -n 20 "$DIR"/log/*.log >&2 || true
        die "nodes not idle after 60 s"
    fi
    log "private cluster up in $((SECONDS - t0)) s in $DIR, slurmctld port $(head -1 "$DIR/ports"): $(sinfo -h -N -o '%N=%T' | tr '\n' ' ')"
}

do_down() {
    [[ -e $DIR ]] || { log "no instance in $DIR: nothing to do"; return 0; }
    [[ -f $MARK ]] || die "$DIR has no $(basename "$MARK"): not made by cluster.sh up, not touching it"
    cancel_ours
    local f daemons=("slurmctld:$DIR/slurmctld.pid" "munged:$DIR/munge/munged.pid")
    for f in "$DIR"/slurmd-*.pid; do daemons+=("slurmd:$f"); done
    stop_pidfiles "${daemons[@]}"       # (its jobs are gone: nothing left for them to do)
    rm -rf -- "$DIR"
    log "down: $DIR removed"
}

do_env() {
    printf 'export SLURM_CONF=%q\n' "$CONF"
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
    *) die "usage: $0 up [PROLOG EPILOG HEALTHCHECK] | down | env | can (instance directory: SLURM_TEST_DIR)" ;;
esac
