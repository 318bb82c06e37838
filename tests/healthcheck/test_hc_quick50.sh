#!/usr/bin/env bash
# 50 quick health checks (the prolog's mode, with its default burn) on 2 MPI ranks of this small,
# shared machine: zero FAIL lines. Guards healthcheck.cfg's CPU thresholds against false alarms on
# a healthy but busy node: a checker that drains healthy nodes is worse than none.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/hc_lib.sh"
tsr_tmpdir
tap_plan 1
runs=50 bad=0 worst=
for _ in $(seq $runs); do
    hc_run 2 --quick
    if ((HC_RC != 0)) || [[ -n $(fails) ]]; then bad=$((bad + 1)); hc_show; fi
    worst+="$(awk '$2 == "sgemm" { print $4 }' "$TMP/out.txt" | sort -g | head -1) "
done
tap_diag "lowest sgemm GFLOP/s per run: $worst"
((bad == 0))
tap_check $? "$runs quick runs on 2 ranks: no FAIL line, every exit 0 ($bad bad)"
tap_done
