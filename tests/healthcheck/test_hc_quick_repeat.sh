#!/usr/bin/env bash
# Repeated quick health checks (the prolog's mode, with its default burn) on 2 MPI ranks of this
# small, shared machine: zero FAIL lines, and every measured figure at least twice its threshold.
# Guards healthcheck.cfg's CPU thresholds against false alarms on a healthy but busy node: a checker
# that drains healthy nodes is worse than none. The margin check says more than more runs would:
# quick mode measures sgemm and dgemm (the verify checks are exact), and 50 runs in CI (2026-11-25)
# never came below 8x their thresholds (lowest sgemm 84.7 GFLOP/s against 10); a threshold or a
# checker change that brings a figure within 2x of its limit fails here before it drains nodes.
# So 5 runs by default (HC_QUICK_RUNS; 20 until 2026-11-25 and 10 until 2026-11-29, for CI time:
# 2.6 s a run, both cores).
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/hc_lib.sh"
tsr_tmpdir
tap_plan 2
runs=${HC_QUICK_RUNS:-5} bad=0 worst= ratios=
for _ in $(seq "$runs"); do
    hc_run 2 --quick
    if ((HC_RC != 0)) || [[ -n $(fails) ]]; then bad=$((bad + 1)); hc_show; fi
    worst+="$(awk '$2 == "sgemm" { print $4 }' "$TMP/out.txt" | sort -g | head -1) "
    # "NODE CHECK OK VALUE THRESHOLD UNIT": value / threshold of the measured (non-verify) checks
    ratios+="$(awk '$3 == "OK" && $2 !~ /_verify$/ && $5 > 0 { print $2, $4 / $5 }' "$TMP/out.txt")"$'\n'
done
tap_diag "lowest sgemm GFLOP/s per run: $worst"
((bad == 0))
tap_check $? "$runs quick runs on 2 ranks: no FAIL line, every exit 0 ($bad bad)"
low=$(grep . <<<"$ratios" | sort -k2 -g | head -1)
[[ -n $low ]] && awk -v r="${low#* }" 'BEGIN { exit !(r >= 2) }'
tap_check $? "every measured figure of every run is at least 2x its threshold (lowest: ${low:-none} x, $(grep -c . <<<"$ratios") figures)"
tap_done
