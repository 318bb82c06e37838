#!/usr/bin/env bash
# tessera-healthcheck --sdc-report FILE (docs/healthcheck.md "Silent data corruption found by a
# run"): a training run's culprit record (run_dir/sdc-culprit.json, docs/health.md) judged for this
# node without a burn: named -> "NODE sdc FAIL", exit 1, and with --drain (as root, the fake
# scontrol of test_hc_cpu.sh) drained with a "tessera-hc: sdc ..." reason by the usual rules;
# not named -> OK, exit 0, nothing changed; an sdc drain is never resumed by --resume-own nor
# replaced by a failed check's reason; a record that is not one (missing, not JSON, wrong types,
# too large, a directory) exits 2; options that measure do not go with it (a usage error, exit 1).
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/hc_lib.sh"
tsr_tmpdir
tap_plan 9
cat >"$TMP/scontrol" <<'SH'
#!/bin/sh
echo "$*" >>"$FAKE_LOG"
[ "$1 $2" = "-o show" ] && printf '%b\n' "$FAKE_SHOW"
exit 0
SH
chmod +x "$TMP/scontrol"
export TSR_HC_SCONTROL=$TMP/scontrol FAKE_LOG=$TMP/scontrol.log
# rates a loaded machine always reaches: healthy or not is the injected fault's doing alone
sed -E 's/(sgemm|dgemm|membw|allreduce)( *= \{ expected = )[0-9.]+;/\1\20.001;/' "$HC_CFG" >"$TMP/lenient.cfg"
rec() { printf 'NodeName=hc-n2 Arch=x86_64 State=%s ThreadsPerCore=1%s' "$1" "${2:+ $2}"; }
cat >"$TMP/culprit.json" <<'JSON'
{
  "step": 11,
  "check": "at_rest",
  "verdict": "changed_at_rest",
  "tensor": "model/qkvw",
  "ranks": [1],
  "nodes": "hc-n1,hc-n2",
  "suspects": "",
  "set_aside_from": 10
}
JSON
# sdc NODE ARGS...: the checker as NODE with the fake scontrol; stdout, stderr, exit in RC
sdc() {
    local node=$1
    shift
    rm -f "$FAKE_LOG"
    RC=0
    SLURMD_NODENAME=$node "$HC" "$@" >"$TMP/out.txt" 2>"$TMP/err.txt" || RC=$?
}

FAKE_SHOW=$(rec IDLE) sdc hc-n2 --sdc-report "$TMP/culprit.json" --drain
if [[ $(id -u) == 0 ]]; then
    [[ $RC == 1 ]] && grep -qx 'hc-n2 sdc FAIL 1 0 reports' "$TMP/out.txt" &&
        grep -qx 'update nodename=hc-n2 state=drain reason=tessera-hc: sdc step 11 model/qkvw changed_at_rest' "$FAKE_LOG"
    tap_check $? "a node the record names: FAIL line, exit 1, drained with 'tessera-hc: sdc step 11 model/qkvw changed_at_rest' (exit $RC)"
else
    [[ $RC == 1 ]] && grep -q "not root: --drain does nothing" "$TMP/err.txt"
    tap_check $? "a node the record names, not root: FAIL, exit 1, says what it would run (exit $RC)"
fi

FAKE_SHOW=$(rec IDLE) sdc hc-n0 --sdc-report "$TMP/culprit.json" --drain
[[ $RC == 0 ]] && grep -qx 'hc-n0 sdc OK 0 0 reports' "$TMP/out.txt" && [[ ! -s $FAKE_LOG ]]
tap_check $? "a node the record does not name (hc-n0): OK, exit 0, scontrol never called (exit $RC)"

FAKE_SHOW=$(rec IDLE) sdc hc-n12 --sdc-report "$TMP/culprit.json"
[[ $RC == 0 ]]
tap_check $? "names are matched whole: hc-n12 is not hc-n1 (exit $RC)"

if [[ $(id -u) == 0 ]]; then
    FAKE_SHOW=$(rec IDLE+DRAIN 'Reason=tessera-hc: sdc step 11 model/qkvw changed_at_rest [root@2024-01-01T00:00:00]')
    export FAKE_SHOW
    rm -f "$FAKE_LOG"
    SLURMD_NODENAME=hc-n2 "$HC" --quick --burn 0.1 --resume-own --config "$TMP/lenient.cfg" --gpu off >/dev/null 2>&1
    [[ $? == 0 && $(grep -c update "$FAKE_LOG") == 0 && $(grep -c '^-o show node hc-n2$' "$FAKE_LOG") == 1 ]]
    tap_check $? "--resume-own never resumes a node drained for a corruption a run found (the burn cannot clear it)"
    rm -f "$FAKE_LOG"
    SLURMD_NODENAME=hc-n2 TSR_HC_FAULT=corrupt_gemm "$HC" --quick --burn 0.1 --drain --config "$TMP/lenient.cfg" --gpu off >/dev/null 2>"$TMP/err.txt"
    [[ $? == 1 && $(grep -c update "$FAKE_LOG") == 0 ]] && grep -q "drained already for the corruption a run found" "$TMP/err.txt"
    tap_check $? "a failed check does not replace an sdc reason (it would be resumed later)"
    unset FAKE_SHOW
else
    tap_skip "--resume-own and an sdc reason" "not root"
    tap_skip "a failed check and an sdc reason" "not root"
fi

printf '{"step": 3, "tensor": "x", "verdict": "y"}' >"$TMP/nonodes.json"
sdc hc-n2 --sdc-report "$TMP/nonodes.json"
[[ $RC == 2 ]] && grep -q "\"nodes\" is missing, expected a string (tessera-train's sdc-culprit.json)" "$TMP/err.txt"
tap_check $? "a record without \"nodes\": exit 2, naming the field (exit $RC)"

printf '{"step": 3,' >"$TMP/bad.json"
sdc hc-n2 --sdc-report "$TMP/bad.json"
r1=$RC
head -c 70000 /dev/zero | tr '\0' ' ' >"$TMP/big.json"
sdc hc-n2 --sdc-report "$TMP/big.json"
r2=$RC
grep -q "70000 bytes, a culprit record holds at most 65536" "$TMP/err.txt"
r3=$?
sdc hc-n2 --sdc-report "$TMP"
[[ $r1 == 2 && $r2 == 2 && $r3 == 0 && $RC == 2 ]] && grep -q "not a regular file" "$TMP/err.txt"
tap_check $? "not JSON ($r1), over 64 KiB ($r2), a directory ($RC): exit 2, nothing judged"

sdc hc-n2 --sdc-report "$TMP/missing.json"
[[ $RC == 2 ]] && grep -q "missing.json: cannot open it" "$TMP/err.txt"
tap_check $? "a missing record: exit 2 (exit $RC)"

sdc hc-n2 --sdc-report "$TMP/culprit.json" --full
[[ $RC == 1 && ! -s $TMP/out.txt ]] && grep -q "sdc-report runs no checks: it does not go with --quick, --full" "$TMP/err.txt"
tap_check $? "--sdc-report with --full: a usage error (exit 1, no verdict line; exit $RC)"
tap_done
