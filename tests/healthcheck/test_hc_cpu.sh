#!/usr/bin/env bash
# tessera-healthcheck, CPU mode, end to end on 2 (and 4) MPI ranks posing as nodes hc-n0, hc-n1...:
# a healthy run passes; each injected fault (TSR_HC_FAULT) gives exactly the right FAIL lines and
# exit 1; bad configs, faults and options exit 2 naming the problem; --json is valid JSON; --drain
# and --resume-own call a fake scontrol by the rules (never a real one). No timing assertions
# beyond healthcheck.cfg's generous CPU thresholds.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/hc_lib.sh"
tsr_tmpdir
tap_plan 18
# short measurements: membw 16 MiB arrays, 4 MiB all-reduces (the shipped thresholds)
sed -e 's/membw_mib = 128;/membw_mib = 16;/' -e 's/allreduce_mib = 16;/allreduce_mib = 4;/' "$HC_CFG" >"$TMP/small.cfg"
export HC_TEST_CFG=$TMP/small.cfg
# a fake scontrol: logs its argv; `-o show node` prints $FAKE_SHOW the first time and $FAKE_SHOW2
# (default: $FAKE_SHOW again) every later time, as if someone changed the node in between
cat >"$TMP/scontrol" <<'SH'
#!/bin/sh
echo "$*" >>"$FAKE_LOG"
if [ "$1 $2" = "-o show" ]; then
    if grep -q show "$FAKE_LOG.seen" 2>/dev/null; then printf '%b\n' "${FAKE_SHOW2:-$FAKE_SHOW}"
    else printf '%b\n' "$FAKE_SHOW"; fi
    echo show >>"$FAKE_LOG.seen"
fi
exit 0
SH
chmod +x "$TMP/scontrol"
export TSR_HC_SCONTROL=$TMP/scontrol FAKE_LOG=$TMP/scontrol.log FAKE_SHOW="NodeName=x State=IDLE"

hc_run 2 --quick --burn 0.4
((HC_RC == 0)) && [[ $(grep -c ' OK ' "$TMP/out.txt") == 8 && -z $(fails) ]] && grep -q '^# .*0 unhealthy' "$TMP/out.txt"
r=$?; ((r)) && hc_show; tap_check $r "healthy --quick on 2 ranks: 8 OK lines (4 checks x 2 nodes), exit 0"

# a symlink planted where the old code put its temp file (REPORT.tmp), pointing at a file of ours:
# the report must not go through it (rank 0 may be root in a directory others can write)
printf 'precious\n' >"$TMP/victim"
ln -s "$TMP/victim" "$TMP/report.json.tmp"
hc_run 2 --full --burn 0.4 --json "$TMP/report.json"
((HC_RC == 0)) && [[ $(grep -c ' OK ' "$TMP/out.txt") == 12 && -z $(fails) ]]
r=$?; ((r)) && hc_show; tap_check $r "healthy --full on 2 ranks: 12 OK lines (sgemm, dgemm, verifies, membw, allreduce), exit 0"
"$PYTHON" -m json.tool "$TMP/report.json" >/dev/null && grep -q '"nodes": 2' "$TMP/report.json" \
    && grep -q '"node": "hc-n1"' "$TMP/report.json"
tap_check $? "--json writes valid JSON (python3 -m json.tool) with both nodes"
[[ $(cat "$TMP/victim") == precious && -f $TMP/report.json && ! -L $TMP/report.json &&
    $(readlink "$TMP/report.json.tmp") == "$TMP/victim" && -z $(find "$TMP" -name 'report.json.??????') ]]
tap_check $? "--json does not follow a symlink planted at REPORT.tmp: its target untouched, the report a plain file, no temp left"

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
# the faults below are not about GEMM rates: judge those against near-zero rates, so that a machine
# shared with other work (6 jobs on 2 cores) cannot add sgemm/dgemm FAIL lines to the ones expected
sed -E 's/(sgemm|dgemm)( *= \{ expected = )[0-9.]+;/\1\20.001;/' "$TMP/small.cfg" >"$TMP/gemm-lenient.cfg"
HC_TEST_CFG=$TMP/gemm-lenient.cfg TSR_HC_FAULT=corrupt_gemm:rank=0 expect_fails "hc-n0 dgemm_verify,hc-n0 sgemm_verify" \
    "corrupt_gemm on rank 0: its sgemm_verify and dgemm_verify FAIL, exit 1" 2 --quick --burn 0.4
HC_TEST_CFG=$TMP/gemm-lenient.cfg TSR_HC_FAULT=low_membw:hc-n1 expect_fails "hc-n1 membw" "low_membw on hc-n1: its membw FAILs, exit 1" \
    2 --full --burn 0.2
# 4 ranks: pairs (0,1), (2,3), then (0,2), (1,3): only hc-n1 is slow with both its partners
HC_TEST_CFG=$TMP/gemm-lenient.cfg TSR_HC_FAULT=low_busbw:hc-n1 expect_fails "hc-n1 allreduce" \
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
# one-line records as `scontrol -o show node` prints them (fields between NodeName= and State= cut)
rec() { printf 'NodeName=hc-n0 Arch=x86_64 OS=Linux 6.1.0 #1 SMP State=%s ThreadsPerCore=1 AveWatts=0%s' "$1" "${2:+ $2}"; }
# rates a loaded machine always reaches: healthy or not is the injected fault's doing alone
sed -E 's/(sgemm|dgemm|membw|allreduce)( *= \{ expected = )[0-9.]+;/\1\20.001;/' "$HC_CFG" >"$TMP/lenient.cfg"
# fake_hc ARGS...: one checker run on "hc-n0" with the fake scontrol; its calls in $FAKE_LOG
fake_hc() { rm -f "$FAKE_LOG" "$FAKE_LOG.seen"; SLURMD_NODENAME=hc-n0 "$HC" --config "$TMP/lenient.cfg" --quick --burn 0.2 "$@" >/dev/null 2>"$TMP/fake-err.txt"; }
no_update() { # what: passes when scontrol was asked to show hc-n0 but never to update it
    [[ $(grep -c update "$FAKE_LOG") == 0 && $(grep -c '^-o show node hc-n0$' "$FAKE_LOG") -ge 1 ]]
    local r=$?; ((r)) && { tap_diag "scontrol calls:"; sed 's/^/#   /' "$FAKE_LOG" "$TMP/fake-err.txt"; }
    tap_check $r "$1"
}
if [[ $(id -u) != 0 ]]; then
    for _ in 1 2 3 4 5 6 7; do tap_check 0 "drain rules # SKIP not root"; done
else
    FAKE_SHOW=$(rec IDLE) FAKE_SHOW2=$(rec MIXED) TSR_HC_FAULT=corrupt_gemm fake_hc --drain
    [[ $(grep -c '^-o show node hc-n0$' "$FAKE_LOG") == 2 ]] &&
        grep -qx 'update nodename=hc-n0 state=drain reason=tessera-hc: sgemm_verify 1>0 errors (+1 more)' "$FAKE_LOG"
    r=$?; ((r)) && { tap_diag "scontrol calls:"; sed 's/^/#   /' "$FAKE_LOG"; }
    tap_check $r "--drain on an unhealthy node: reads it twice (IDLE, then MIXED as a job starts), drains it with a tessera-hc: reason"
    FAKE_SHOW=$(rec IDLE+DRAIN 'Reason=bad DIMM [admin@2024-01-01T00:00:00]') TSR_HC_FAULT=corrupt_gemm fake_hc --drain
    no_update "--drain never overwrites another reason"
    FAKE_SHOW=$(rec IDLE+DRAIN 'Reason=tessera-hc: sgemm 1.0<10.0 GFLOP/s [root@2024-01-01T00:00:00]') \
        fake_hc --drain --resume-own
    grep -qx 'update nodename=hc-n0 state=resume' "$FAKE_LOG"
    tap_check $? "--resume-own on a healthy node drained by tessera-hc: resumes it"
    # the probe's cases: a human reason quoting one of ours, a Comment that looks like one, "none"
    FAKE_SHOW=$(rec IDLE+DRAIN 'Reason=fan noise; was Reason=tessera-hc: sgemm 1<2 GFLOP/s [bob@2024-01-01T00:00:00]') \
        fake_hc --resume-own
    no_update "--resume-own leaves a human reason that quotes 'Reason=tessera-hc:' (node stays drained)"
    FAKE_SHOW=$(rec IDLE+DRAIN 'Comment=x Reason=tessera-hc: old') fake_hc --resume-own
    no_update "--resume-own: a Comment containing 'Reason=tessera-hc:' is no reason of ours"
    FAKE_SHOW=$(rec IDLE+DRAIN 'Reason=none [bob@2024-01-01T00:00:00]') TSR_HC_FAULT=corrupt_gemm fake_hc --drain
    no_update "--drain keeps a human reason that reads 'none'"
    # someone drains the node between the checker's decision and its update
    FAKE_SHOW=$(rec IDLE) FAKE_SHOW2=$(rec IDLE+DRAIN 'Reason=admin: cable swap [bob@2024-01-01T00:00:00]') \
        TSR_HC_FAULT=corrupt_gemm fake_hc --drain
    no_update "--drain re-reads the node right before the update: a reason set meanwhile is kept"
fi
tap_done
