#!/usr/bin/env bash
# test_fuzz_regress.sh — every libFuzzer harness of tests/fuzz/ over its committed corpus (the seeds
# from the repository's real files and every crash a fuzzer ever found), then a few seconds of
# fuzzing from it: a parser change that brings back a saved crash fails here (docs/fuzzing.md).
# One TAP line per harness, plus one that the harnesses left no scratch file behind. Builds them
# (make fuzz-build: clang, ASan + UBSan, the NO_MPI variant with serial HDF5); skips (77), loudly,
# where clang cannot link a libFuzzer program. After its corpus, each harness runs
# FUZZ_REGRESS_RUNS (default 1000) mutations from a fixed seed, at most FUZZ_REGRESS_SECONDS (10).
# The build is test_fuzz_build.sh's too (one at a time, fuzz_lib.sh): tests/run.sh builds them
# beside the tests run alone and runs this one last, which then finds them built.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/fuzz_lib.sh"
tsr_tmpdir
SECS=${FUZZ_REGRESS_SECONDS:-10}
RUNS=${FUZZ_REGRESS_RUNS:-1000}
NAMES=(config dataset gpt2 tokfile bpe jsonl safetensors ckpt hftok chat hfdir peft chatcfg)

fuzz_probe # (fuzz_lib.sh: skips, 77, where clang cannot link a libFuzzer program)
tap_plan $((${#NAMES[@]} + 1))

fuzz_build

mkdir -p "$TMP/scratch"
export TMPDIR=$TMP/scratch LSAN_OPTIONS=suppressions=$TSR_ROOT/tests/fuzz/lsan.supp
# fuzz_one H: harness H over its corpus, then RUNS mutations; its exit status into $TMP/H.rc
fuzz_one() {
    local h=$1 rc=0 dict=$TSR_ROOT/tests/fuzz/fuzz.dict extra=()
    # as make fuzz runs them (tests/fuzz/fuzz.mk): the chat harnesses with their own dictionary
    # and inputs up to 128 KB
    case $h in chat | chatcfg) dict=$TSR_ROOT/tests/fuzz/chat.dict extra=(-max_len=131072) ;; esac
    mkdir -p "$TMP/new/$h" "$TMP/crash/$h"
    # new inputs go to the first (scratch) directory, never into the committed corpus
    # -seed and -runs fixed: the same mutations on every machine, so a failure reproduces (a
    # time limit would make the count depend on the machine's speed); -max_total_time caps it
    nice -n 10 "$BUILD/fuzz/fuzz_$h" -seed=1 -runs="$RUNS" -max_total_time="$SECS" -timeout=10 \
        -print_final_stats=1 -dict="$dict" "${extra[@]}" -artifact_prefix="$TMP/crash/$h/" \
        "$TMP/new/$h" "$TSR_ROOT/tests/fuzz/corpus/$h" >"$TMP/$h.log" 2>&1 || rc=$?
    echo "$rc" >"$TMP/$h.rc"
}
# two harnesses at a time (each is one single-threaded process: a core each, so the same runs
# within the same time cap as one at a time), then the checks in order
for h in "${NAMES[@]}"; do
    while (($(jobs -rp | wc -l) >= 2)); do wait -n; done
    fuzz_one "$h" &
done
wait
for h in "${NAMES[@]}"; do
    corpus=$TSR_ROOT/tests/fuzz/corpus/$h
    n=$(find "$corpus" -type f | wc -l)
    rc=$(cat "$TMP/$h.rc" 2>/dev/null || echo "none")
    runs=$(grep -oE 'stat::number_of_executed_units: [0-9]+' "$TMP/$h.log" | grep -oE '[0-9]+$')
    cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+' "$TMP/$h.log" | tail -1)
    if [[ $rc != 0 ]]; then
        mkdir -p "$BUILD/fuzz/regress-crashes/$h" && cp "$TMP/crash/$h/"* "$BUILD/fuzz/regress-crashes/$h/" 2>/dev/null
        grep -E 'ERROR|SUMMARY|^    #[0-9] ' "$TMP/$h.log" | head -12 | sed 's/^/# /'
        tap_diag "the input is kept in $BUILD/fuzz/regress-crashes/$h/"
    fi
    [[ $rc == 0 && $n -gt 0 ]]
    tap_check $? "fuzz_$h: its $n corpus files, then $RUNS mutations (seed 1): no crash, hang, leak or UB (exit $rc; ${runs:-?} runs, ${cov:-no coverage line})"
done
left=$(find "$TMP/scratch" -mindepth 1 | head -3)
[[ -z $left ]]
tap_check $? "the harnesses removed their scratch files (left: ${left:-none})"
tap_done
