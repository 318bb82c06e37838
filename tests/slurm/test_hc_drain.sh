#!/usr/bin/env bash
# The health checker in the Slurm loop, on a real, private Slurm (tests/slurm/cluster.sh) with the
# installed wrappers as Prolog=, Epilog= and HealthCheckProgram=, and a fault injected on n1 through
# the wrappers' site file (the test's own $TMP/tessera-hc, handed to them as TESSERA_HC_DEFAULTS by
# the cluster's hooks: TSR_HC_FAULT=corrupt_gemm:n1):
#  - a job placed on n1: the prolog's quick check fails, n1 is drained with a "tessera-hc:" reason,
#    the job is requeued and finishes on n2;
#  - a node drained by hand with another reason keeps it: the checker neither overwrites nor resumes it;
#  - the fault cleared, the HealthCheckProgram's --resume-own returns n1 to service.
# Needs root and the Slurm packages; skips otherwise. Stops the cluster it started.
# shellcheck source=../lib.sh disable=SC2016
source "$(dirname "$0")/../lib.sh"
# shellcheck source=slurm_lib.sh
source "$(dirname "$0")/slurm_lib.sh"
slurm_require
tsr_tmpdir
trap 'slurm_down; rm -rf "$TMP"' EXIT
tap_plan 8

DEFAULTS=$TMP/tessera-hc    # = slurm_lib's HC_DEFAULTS: the hooks pass it as TESSERA_HC_DEFAULTS
export TESSERA_HC_LOG=$TMP/hc.log
# the wrappers' site file: where they log, and the injected fault (FAULT=... lines)
defaults() { printf 'export TESSERA_HC_LOG=%s\n%s\n' "$TESSERA_HC_LOG" "${1:-}" >"$DEFAULTS"; }
defaults
# HealthCheckProgram only at slurmd start (healthy then): this test runs it by hand when it wants it
slurm_install_up SLURM_TEST_HC_INTERVAL=3600
node() { sinfo -h -N -n "$1" -o "%$2" | head -1; }     # node N T: state; node N E: reason
wait_for() { local end=$((SECONDS + $1)); shift; until "$@"; do ((SECONDS < end)) || return 1; sleep 0.5; done; }
done_state() { [[ $(field "$1" JobState) =~ ^(COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL)$ ]]; }
# run the installed HealthCheckProgram wrapper as slurmd does: root, SLURMD_NODENAME, no job
# (the environment the cluster's hooks/healthcheck wrapper gives it: SLURM_CONF, the site file, thresholds)
hc_as_slurmd() {
    env -i PATH=/usr/bin:/bin:/usr/sbin:/sbin SLURMD_NODENAME="$1" SLURM_CONF="$SLURM_CONF" \
        TESSERA_HC_DEFAULTS="$DEFAULTS" TESSERA_HC_LOG="$TESSERA_HC_LOG" TESSERA_HC_CONFIG="$TESSERA_HC_CONFIG" \
        sh "$W/healthcheck.sh"
}
cd "$TMP" || exit 1

# 1. the fault on n1; n2 held by hand so that the job lands on n1 first
defaults 'export TSR_HC_FAULT=corrupt_gemm:n1'
scontrol update nodename=n2 state=drain reason="test: hold"
j=$(sbatch --parsable -N1 --requeue --open-mode=append -o drain-%j.log \
    --wrap 'echo "ran on $SLURMD_NODENAME restart=${SLURM_RESTART_COUNT:-0}"')
wait_for 60 grep -q "prolog node=n1 job=$j: unhealthy" "$TESSERA_HC_LOG"
scontrol update nodename=n2 state=resume
wait_for 90 done_state "$j"
reason=$(node n1 E)
tap_diag "n1: $(node n1 T) '$reason'; job $j: $(field "$j" JobState), $(cat "drain-$j.log" 2>/dev/null)"
[[ $(node n1 T) == drained && $reason == "tessera-hc: "* ]]
tap_check $? "the prolog's check failed on n1: drained with a tessera-hc: reason ('$reason')"
[[ $(field "$j" JobState) == COMPLETED ]] && grep -q 'ran on n2 restart=1' "drain-$j.log"
tap_check $? "the job was requeued off n1 and finished on n2 ($(tail -1 "drain-$j.log" 2>/dev/null))"

# 2. a foreign reason is never overwritten, and never resumed
defaults 'export TSR_HC_FAULT=corrupt_gemm:n1,corrupt_gemm:n2'
scontrol update nodename=n2 state=drain reason="admin: cable swap"
hc_as_slurmd n2
[[ $(node n2 E) == "admin: cable swap" ]] && grep -q 'healthcheck node=n2 job=none: unhealthy' "$TESSERA_HC_LOG"
tap_check $? "n2 drained by hand and unhealthy: the checker keeps the admin's reason ('$(node n2 E)')"
defaults
hc_as_slurmd n2
[[ $(node n2 T) == drained && $(node n2 E) == "admin: cable swap" ]]
tap_check $? "n2 healthy again: --resume-own leaves a node it did not drain drained"
scontrol update nodename=n2 state=resume

# 2b. human reasons that look empty, or quote the checker's own prefix, are still a person's: kept
#     by --drain and never resumed by --resume-own (the exact parse of `scontrol -o show node`)
kept=0 stayed=0
for r in "none" "(null)" "fan; was Reason=tessera-hc: sgemm 1<2 GFLOP/s"; do
    scontrol update nodename=n2 state=drain reason="$r"
    shown=$(node n2 E)                                # as Slurm shows it ("(null)" reads "none")
    defaults 'export TSR_HC_FAULT=corrupt_gemm:n2'
    hc_as_slurmd n2                                   # unhealthy: --drain must keep the reason
    after_bad=$(node n2 E)
    [[ $after_bad == "$shown" && $after_bad != tessera-hc:* ]] && kept=$((kept + 1))
    defaults
    hc_as_slurmd n2                                   # healthy: --resume-own must not resume
    [[ $(node n2 T) == drained && $(node n2 E) == "$shown" ]] && stayed=$((stayed + 1))
    tap_diag "reason '$r' (shown '$shown'): after the unhealthy check '$after_bad', after the healthy one $(node n2 T) '$(node n2 E)'"
    scontrol update nodename=n2 state=resume
done
((kept == 3))
tap_check $? "human reasons 'none', '(null)' and one quoting 'Reason=tessera-hc:' are never overwritten ($kept/3)"
((stayed == 3))
tap_check $? "...and never resumed by --resume-own ($stayed/3)"

# 3. the fault cleared: --resume-own returns n1
hc_as_slurmd n1
is_idle() { [[ $(node "$1" T) == idle ]]; }
wait_for 20 is_idle n1
tap_check $? "the fault cleared: the HealthCheckProgram wrapper resumed n1 ($(node n1 T))"
! grep -q 'could not run\|not judged' "$TESSERA_HC_LOG"
tap_check $? "every check by the wrappers ran and judged ($(wc -l <"$TESSERA_HC_LOG") log lines)"
tap_done
