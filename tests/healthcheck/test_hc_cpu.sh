#!/usr/bin/env bash
# tessera-healthcheck, CPU mode, end to end on 2 (and 4) MPI ranks posing as nodes hc-n0, hc-n1...:
# a healthy run passes; each injected fault (TSR_HC_FAULT) gives exactly the right FAIL lines and
# exit 1; bad configs, faults and options exit 2 naming the problem; --json is valid JSON; --drain
# and --resume-own call a fake scontrol by the rules (never a real one). No timing assertions
# beyond healthcheck.cfg's generous CPU thresholds.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/hc_lib.sh"
tsr_tmpdir
tap_plan 13
# short measurements: membw 16 MiB arrays, 4 MiB all-reduces (the shipped thresholds)
sed -e 's/membw_mib = 128;/membw_mib = 16;/' -e 's/allreduce_mib = 16;/allreduce_mib = 4;/' "$HC_CFG" >"$TMP/small.cfg"
export HC_TEST_CFG=$TMP/small.cfg
# a fake scontrol: logs its argv; `show node` prints $FAKE_SHOW
cat >"$TMP/scontrol" <<'SH'
#!/bin/sh
echo "$*" >>"$FAKE_LOG"
[ "$1" = show ] && printf '%b\n' "$FAKE_SHOW"
exit 0
SH
chmod +x "$TMP/scontrol"
export TSR_HC_SCONTROL=$TMP/scontrol FAKE_LOG=$TMP/scontrol.log FAKE_SHOW="NodeName=x State=IDLE"

hc_run 2 --quick --burn 0.4
((HC_RC == 0)) && [[ $(grep -c ' OK ' "$TMP/out.txt") == 8 && -z $(fails) ]] && grep -q '^# .*0 unhealthy' "$TMP/out.txt"
r=$?; ((r)) && hc_show; tap_check $r "healthy --quick on 2 ranks: 8 OK lines (4 checks x 2 nodes), exit 0"

hc_run 2 --full --burn 0.4 --json "$TMP/report.json"
((HC_RC == 0)) && [[ $(grep -c ' OK ' "$TMP/out.txt") == 12 && -z $(fails) ]]
r=$?; ((r)) && hc_show; tap_check $r "healthy --full on 2 ranks: 12 OK lines (sgemm, dgemm, verifies, membw, allreduce), exit 0"
"$PYTHON" -m json.tool "$TMP/report.json" >/dev/null && grep -q '"nodes": 2' "$TMP/report.json" \
    && grep -q '"node": "hc-n1"' "$TMP/report.json"
tap_check $? "--json writes valid JSON (python3 -m json.tool) with both nodes"

expect_fails() { # expect_fails "NODE CHECK,..." what NP ARGS...: exactly these FAIL lines, exit 1
    local want=$1 what=$2
    shift 2
    hc_run "$@"
    [[ $HC_RC == 1 && $(fails) == "$want" ]]
    local r=$?; ((r)) && { tap_diag "want FAIL lines: $want; got: $(fails)"; hc_show; }
    tap_check $r "$what"
}
TSR_HC_FAULT=slow_gemm:hc-n1 expect_fails "hc-n1 dgemm,hc-n1 sgemm" \
    "slow_gemm on hc-n1: its sgemm and dgemm FAIL, nothing else, exit 1" 2 --quick --burn 0.4
TSR_HC_FAULT=corrupt_gemm:rank=0 expect_fails "hc-n0 dgemm_verify,hc-n0 sgemm_verify" \
    "corrupt_gemm on rank 0: its sgemm_verify and dgemm_verify FAIL, exit 1" 2 --quick --burn 0.4
TSR_HC_FAULT=low_membw:hc-n1 expect_fails "hc-n1 membw" "low_membw on hc-n1: its membw FAILs, exit 1" \
    2 --full --burn 0.2
# 4 ranks: pairs (0,1), (2,3), then (0,2), (1,3): only hc-n1 is slow with both its partners
TSR_HC_FAULT=low_busbw:hc-n1 expect_fails "hc-n1 allreduce" \
    "low_busbw on hc-n1 of 4: only its allreduce FAILs (its partners hc-n0, hc-n3 pass in their other pair)" \
    4 --full --burn 0.2 --threads 1

expect_rc() { # expect_rc RC PATTERN what CMD...: exit RC, stderr+stdout matching PATTERN
    local want=$1 pat=$2 what=$3
    shift 3
    local rc=0
    "$@" >"$TMP/o.txt" 2>&1 || rc=$?
    [[ $rc == "$want" ]] && grep -qE -- "$pat" "$TMP/o.txt"
    local r=$?; ((r)) && { tap_diag "exit $rc:"; sed 's/^/#   /' "$TMP/o.txt" | tail -5; }
    tap_check $r "$what (exit $rc)"
}
sed "s/tolerance = 0.0; };  # GB\/s, triad/tolerance = 2.0; };  # triad/" "$HC_CFG" >"$TMP/bad.cfg"
expect_rc 2 "bad.cfg:[0-9]+: devices.\[0\].membw.tolerance = 2: out of range" \
    "bad config: exit 2 naming file:line and key" "${MPIRUN[@]}" -np 2 "$HC" --config "$TMP/bad.cfg"
expect_rc 2 "TSR_HC_FAULT: unknown fault 'melt'" "unknown fault: exit 2" \
    env TSR_HC_FAULT=melt "$HC" --config "$HC_CFG"
expect_rc 1 "exclude each other" "--quick --full: a usage error, exit 1 (docs/cli.md)" "$HC" --quick --full

# drain rules, with the fake scontrol (as root only: without root --drain only says what it would do)
if [[ $(id -u) != 0 ]]; then
    for _ in 1 2 3; do tap_check 0 "drain rules # SKIP not root"; done
else
    rm -f "$FAKE_LOG"
    FAKE_SHOW="NodeName=hc-n0 State=IDLE" TSR_HC_FAULT=corrupt_gemm SLURMD_NODENAME=hc-n0 \
        "$HC" --config "$HC_CFG" --quick --burn 0.2 --drain >/dev/null 2>&1
    grep -qx 'update nodename=hc-n0 state=drain reason=tessera-hc: sgemm_verify 1>0 errors (+1 more)' "$FAKE_LOG"
    r=$?; ((r)) && { tap_diag "scontrol calls:"; sed 's/^/#   /' "$FAKE_LOG"; }
    tap_check $r "--drain on an unhealthy node: reads its state, drains it with a tessera-hc: reason"
    rm -f "$FAKE_LOG"
    FAKE_SHOW="NodeName=hc-n0 State=IDLE+DRAIN\n   Reason=bad DIMM [admin@2024-01-01T00:00:00]" \
        TSR_HC_FAULT=corrupt_gemm SLURMD_NODENAME=hc-n0 "$HC" --config "$HC_CFG" --quick --burn 0.2 --drain >/dev/null 2>&1
    [[ $(grep -c update "$FAKE_LOG") == 0 && $(grep -c 'show node hc-n0' "$FAKE_LOG") == 1 ]]
    tap_check $? "--drain never overwrites another reason (only 'show node' was run)"
    rm -f "$FAKE_LOG"
    FAKE_SHOW="NodeName=hc-n0 State=IDLE+DRAIN\n   Reason=tessera-hc: sgemm 1.0<10.0 GFLOP/s [root@2024-01-01T00:00:00]" \
        SLURMD_NODENAME=hc-n0 "$HC" --config "$HC_CFG" --quick --burn 0.2 --drain --resume-own >/dev/null 2>&1
    grep -qx 'update nodename=hc-n0 state=resume' "$FAKE_LOG"
    tap_check $? "--resume-own on a healthy node drained by tessera-hc: resumes it"
fi
tap_done
