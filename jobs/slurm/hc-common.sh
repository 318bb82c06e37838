# shellcheck shell=sh
# Shared by tessera's Slurm prolog, epilog and HealthCheckProgram wrappers (POSIX sh: slurmd runs
# them as root with a minimal environment). Contract, for every wrapper:
#   the checker is TESSERA_HEALTHCHECK, else the installed PREFIX/bin/tessera-healthcheck;
#   it runs in --quick mode with a time limit (TESSERA_HC_TIMEOUT, default 60 s) and --drain, so it
#   drains an unhealthy node itself with a "tessera-hc: <check> <actual> < <expected> <unit>" reason;
#   checker exit 0 (healthy) and 2 (could not run: missing GPU driver, timeout, its own bug) never
#   make a wrapper fail: a node is never taken out because the checker itself failed;
#   checker exit 1 with a "NODE CHECK FAIL ..." verdict line (unhealthy) makes the prolog exit 1 (Slurm requeues the job elsewhere), while
#   the epilog and the HealthCheckProgram exit 0 (the node is already drained with a precise reason).
# Every run appends one line to TESSERA_HC_LOG (default /var/log/tessera-hc.log) and, when a syslog
# socket exists, to syslog (tag tessera-hc).
# Site settings for slurmd's minimal environment: TESSERA_HC_DEFAULTS (default
# /etc/default/tessera-hc), a sh file that may set the TESSERA_HC* variables above and below and
# TESSERA_HC_CONFIG (the thresholds file); tests put their TSR_HC_FAULT injections there.
# TESSERA_HC_PROMETHEUS=DIR adds --prometheus DIR: the node's verdicts for node_exporter's textfile
# collector (docs/site.md "Monitoring").
TSR_HC_DEFAULTS=${TESSERA_HC_DEFAULTS:-/etc/default/tessera-hc}
# shellcheck disable=SC1090
[ -r "$TSR_HC_DEFAULTS" ] && . "$TSR_HC_DEFAULTS"
TSR_HC=${TESSERA_HEALTHCHECK:-@PREFIX@/bin/tessera-healthcheck}
TSR_HC_TIMEOUT=${TESSERA_HC_TIMEOUT:-60}
TSR_HC_LOG=${TESSERA_HC_LOG:-/var/log/tessera-hc.log}

tsr_hc_log() {
    printf '%s %s\n' "$(date '+%F %T')" "$*" >>"$TSR_HC_LOG" 2>/dev/null || echo "tessera-hc: $*" >&2
    if [ -S /dev/log ] && command -v logger >/dev/null 2>&1; then logger -t tessera-hc -- "$*" 2>/dev/null || true; fi
}

# tsr_hc_run WHO EXTRA-ARGS...: prints nothing, returns 0 healthy / 1 unhealthy / 2 could not run
tsr_hc_run() {
    who=$1
    shift
    if [ ! -x "$TSR_HC" ]; then
        tsr_hc_log "$who node=${SLURMD_NODENAME:-?} job=${SLURM_JOB_ID:-none}: $TSR_HC not installed: not checked"
        return 2
    fi
    rc=0
    out=$(timeout "$TSR_HC_TIMEOUT" "$TSR_HC" --quick --drain \
        ${TESSERA_HC_PROMETHEUS:+--prometheus "$TESSERA_HC_PROMETHEUS"} "$@" 2>&1) || rc=$?
    case $rc in
        0) verdict=healthy ;;
        1)
            # unhealthy means a FAIL verdict line; a bare exit 1 (e.g. an MPI library that aborted
            # during start-up) is a checker that could not run
            if printf '%s\n' "$out" | grep -q '^[^ ]* [^ ]* FAIL '; then verdict=unhealthy
            else verdict="exit 1 without a FAIL verdict line: not judged"; rc=2; fi ;;
        124) verdict="timed out after ${TSR_HC_TIMEOUT} s: not judged"; rc=2 ;;
        *) verdict="could not run (exit $rc): not judged"; rc=2 ;;
    esac
    tsr_hc_log "$who node=${SLURMD_NODENAME:-?} job=${SLURM_JOB_ID:-none}: $verdict"
    # why: the failing verdict lines, or the checker's last words when it could not run
    if [ "$rc" != 0 ]; then
        why=$(printf '%s\n' "$out" | grep ' FAIL ' || printf '%s\n' "$out" | tail -n 3)
        printf '%s\n' "$why" | while IFS= read -r l; do tsr_hc_log "  $l"; done
    fi
    return "$rc"
}
