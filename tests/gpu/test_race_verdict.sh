#!/usr/bin/env bash
# device.sh's racecheck verdict (issue 22, item 5) on the log the lent H200 gave on 2026-11-26
# (tests/gpu/fixtures/racecheck-h200.txt: the op test's reduced cases under compute-sanitizer's
# racecheck, 273 ok, exit 99 for 4 hazards, every one inside cuBLASLt's nvjet_sm90_* kernels).
# Hazards only in NVIDIA's kernels are named and pass; one in a kernel of ours, a failed op check,
# an op test cut short, a summary counting more than the reports read, or an exit 99 with no
# hazard named fails; the log is read, never written.
# shellcheck source=../lib.sh
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 8
LOG=$TSR_ROOT/tests/gpu/fixtures/racecheck-h200.txt
verdict() { bash "$TSR_ROOT/tests/gpu/device.sh" race-verdict "$1"; }
sum0=$(sha256sum <"$LOG")

out=$(verdict "$LOG")
r=$?
((r == 0)) && [[ $out == "racecheck: 4 hazard report(s), all inside NVIDIA's library kernels ("*"), none in tessera's" ]] &&
    [[ $(grep -o 'nvjet_sm90_[A-Za-z0-9_]*' <<<"$out" | sort -u | wc -l) == 3 ]]
tap_check $? "the H200's log: exit 0, the 4 hazards named in their 3 cuBLASLt kernels (exit $r: $out)"

# one hazard moved into a kernel of ours (as racecheck prints a plain and a templated name)
sed '0,/access at nvjet_sm90_tst_64x136_64x8_4x2_h_bz_NNT+0x3440/s//access at attention_backward_dq_querytile_kernel+0x3440/' \
    "$LOG" >"$TMP/ours.txt"
sed '0,/Read access at nvjet_sm90_tss_32x64_64x16_2x1_v_bx_splitK_NTN+0xb30/s//Read access at void layernorm_backward_rows<(int)4>(float *, int)+0xb30/' \
    "$LOG" >"$TMP/ours_void.txt"
! cmp -s "$LOG" "$TMP/ours.txt" && ! cmp -s "$LOG" "$TMP/ours_void.txt" &&
    ! verdict "$TMP/ours.txt" >/dev/null && ! verdict "$TMP/ours_void.txt" >/dev/null
tap_check $? "a hazard in a tessera kernel (attention_backward_dq_querytile_kernel; void layernorm_backward_rows<...>(...)) fails"

sed '0,/^ok 5 - /s//not ok 5 - /' "$LOG" >"$TMP/notok.txt"
! cmp -s "$LOG" "$TMP/notok.txt" && ! verdict "$TMP/notok.txt" >/dev/null
tap_check $? "a failed op check fails, whatever the hazards"

grep -v 'Race reported\|and \(Read\|Write\) access' "$LOG" >"$TMP/none.txt"
! verdict "$TMP/none.txt" >/dev/null
tap_check $? "exit 99 with no hazard named (another sanitizer error) fails"

sed 's/^1\.\.273$/1..0 # SKIP no GPU/' "$LOG" >"$TMP/plan0.txt"
! verdict "$TMP/plan0.txt" >/dev/null
tap_check $? "a log whose op test planned nothing fails"

# the op test cut short (its last check missing: it stopped under the sanitizer)
last=$(grep -n '^ok ' "$LOG" | tail -1 | cut -d: -f1)
sed "${last}d" "$LOG" >"$TMP/short.txt"
! verdict "$TMP/short.txt" >/dev/null
tap_check $? "an op test that did not reach its plan (272 of 273) fails"

sed 's/RACECHECK SUMMARY: 4 hazards displayed (4 errors/RACECHECK SUMMARY: 5 hazards displayed (5 errors/' "$LOG" >"$TMP/more.txt"
! cmp -s "$LOG" "$TMP/more.txt" && ! verdict "$TMP/more.txt" >/dev/null
tap_check $? "a summary counting a hazard more than the reports it read fails"

[[ $(sha256sum <"$LOG") == "$sum0" ]]
tap_check $? "the fixture is unchanged"
tap_done
