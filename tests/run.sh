#!/usr/bin/env bash
# run.sh — tessera's test runner (make check). Runs every test program and script, reads their TAP
# lines ("ok N - ...", "not ok N - ...", "# SKIP"), and ends with "N passed, N failed, N skipped".
#   C tests:      build/tests/test_*           shell tests: tests/**/test_*.sh
#   python tests: tests/**/test_*.py (Debian's /usr/bin/python3, for torch and h5py)
# A test program that exits non-zero, or runs fewer checks than its plan, adds one failure.
# Exit 77 without TAP output counts as one skip. TESTS="name ..." runs only those (substring).
set -uo pipefail
cd "$(dirname "$0")/.."
export TSR_ROOT=$PWD BUILD=${BUILD:-build} PYTHON=${PYTHON:-/usr/bin/python3}
# torch in the reference tests loads Debian's OpenBLAS, which mis-detects this CPU (tessera's own
# programs fix that themselves, src/base/blas_env.c); python has no such hook, so set it here when the
# CPU has AVX-512 and nobody chose a core.
if [[ -z ${OPENBLAS_CORETYPE:-} ]] && grep -qw avx512f /proc/cpuinfo 2>/dev/null; then
    export OPENBLAS_CORETYPE=SkylakeX
fi
TIMEOUT=${TEST_TIMEOUT:-900}
logdir=$BUILD/test-logs
mkdir -p "$logdir"

tests=()
for f in "$BUILD"/tests/test_*; do [[ -x $f ]] && tests+=("$f"); done
while IFS= read -r f; do tests+=("$f"); done < <(find tests -name 'test_*.sh' -o -name 'test_*.py' | sort)

passed=0 failed=0 skipped=0
for t in "${tests[@]}"; do
    name=${t#"$BUILD"/}
    if [[ -n ${TESTS:-} ]]; then
        match=0
        for want in $TESTS; do [[ $name == *"$want"* ]] && match=1; done
        ((match)) || continue
    fi
    log=$logdir/$(echo "$name" | tr '/' '_').log
    start=$SECONDS
    case $t in
        *.py) timeout "$TIMEOUT" "$PYTHON" "$t" >"$log" 2>&1 ;;
        *.sh) timeout "$TIMEOUT" bash "$t" >"$log" 2>&1 ;;
        *)    timeout "$TIMEOUT" "$t" >"$log" 2>&1 ;;
    esac
    rc=$?
    p=$(grep -cE '^ok [0-9]+' "$log" | tr -d ' ')
    s=$(grep -cE '^ok [0-9]+.*# SKIP' "$log" | tr -d ' ')
    f=$(grep -cE '^not ok [0-9]+' "$log" | tr -d ' ')
    plan=$(grep -oE '^1\.\.[0-9]+' "$log" | head -1 | cut -d. -f3)
    p=$((p - s))
    extra=""
    if ((rc == 77 && p + f + s == 0)); then
        s=1; extra=" (skipped: $(tail -1 "$log"))"
    elif ((rc != 0)); then
        f=$((f + 1)); extra=" (exit $rc$( ((rc == 124)) && echo ", timed out after ${TIMEOUT}s"))"
    elif [[ -z $plan ]]; then
        f=$((f + 1)); extra=" (no TAP plan)"
    elif ((p + s + f != plan)); then
        f=$((f + 1)); extra=" (planned $plan, ran $((p + s + f)))"
    fi
    passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
    status=PASS; ((f > 0)) && status=FAIL
    printf '%-4s %-44s %3d passed %2d failed %2d skipped %4ds%s\n' "$status" "$name" "$p" "$f" "$s" $((SECONDS - start)) "$extra"
    if ((f > 0)); then
        grep -E '^not ok' "$log" | sed 's/^/       /' | head -20
        echo "       log: $log (last lines below)"
        tail -15 "$log" | sed 's/^/       | /'
    fi
    grep -E '^ok [0-9]+.*# SKIP' "$log" | sed 's/^/       /' | head -5
done
echo "$passed passed, $failed failed, $skipped skipped"
((failed == 0))
