# shellcheck shell=bash
# hc_lib.sh — sourced by the health checker's shell tests (after tests/lib.sh).
# hc_run NP ARGS...: tessera-healthcheck on NP MPI ranks of this host, rank r posing as Slurm node
# hc-nR (an MPMD launch sets SLURMD_NODENAME per rank). Output in $TMP/out.txt, status in $HC_RC.
HC=$BUILD/tessera-healthcheck
HC_CFG=$TSR_ROOT/healthcheck/healthcheck.cfg
hc_run() {
    local np=$1 r app=()
    shift
    for ((r = 0; r < np; r++)); do
        ((r)) && app+=(:)
        app+=(-np 1 env "SLURMD_NODENAME=hc-n$r" "$HC" --config "${HC_TEST_CFG:-$HC_CFG}" "$@")
    done
    HC_RC=0
    "${MPIRUN[@]}" "${app[@]}" >"$TMP/out.txt" 2>"$TMP/err.txt" || HC_RC=$?
}
# hc_show: the last run's output, as TAP comments (on failure)
hc_show() { tap_diag "exit $HC_RC; stdout:"; sed 's/^/#   /' "$TMP/out.txt" | tail -15; tap_diag "stderr:"; grep -v '^ *$' "$TMP/err.txt" | sed 's/^/#   /' | tail -8; }
# fails: the "NODE CHECK" pairs of the FAIL lines, sorted, on one line
fails() { awk '$3 == "FAIL" { print $1, $2 }' "$TMP/out.txt" | sort | paste -sd, -; }
