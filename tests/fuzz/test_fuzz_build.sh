#!/usr/bin/env bash
# test_fuzz_build.sh — the parsers' libFuzzer harnesses build (make fuzz-build: clang, ASan + UBSan,
# the NO_MPI variant with serial HDF5; docs/fuzzing.md), each harness an executable. The build that
# test_fuzz_regress.sh runs them from: tests/run.sh starts this one beside the tests run alone
# (its IDLE list, under nice 19) and test_fuzz_regress.sh last, so that the 48 s of the build
# (CI of 2026-11-28, 2 cores) leave the alone phase. Skips (77) where clang cannot link a
# libFuzzer program.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/fuzz_lib.sh"
tsr_tmpdir
fuzz_probe
tap_plan 2
fuzz_build
tap_check 0 "make fuzz-build"
names=$(sed -n 's/^FUZZ_NAMES *:\?= *//p' "$TSR_ROOT/tests/fuzz/fuzz.mk")
missing=()
for h in $names; do [[ -x $BUILD/fuzz/fuzz_$h ]] || missing+=("$h"); done
[[ -n $names && ${#missing[@]} == 0 ]]
tap_check $? "every harness of tests/fuzz/fuzz.mk built: $(echo $names | wc -w) (missing: ${missing[*]:-none})"
tap_done
