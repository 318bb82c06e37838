#!/usr/bin/env bash
# Side-by-side single-process starts and OpenMPI's session directory (issue 64, finding 10: a CI
# flake where a test's MPI_Init could not mkdir its session directory). tests/ompi_session.sh says
# why; this test shows the two halves on real processes:
#  1. without the kept directory, an isolated singleton that ends removes the session directory of
#     another one still running (the race: a start in that moment fails);
#  2. in a base made by ompi_session_base the running one's directory survives the other's end;
#  3. the running one then ends normally (exit 0), and the base is still there for the next;
#  4. tests/run.sh gives each test such a base of its own (OMPI_MCA_orte_tmpdir_base is set, is not
#     /tmp, and holds the kept directory) when it runs this test.
# The running singleton is a tiny training run, stopped (SIGSTOP) once its session directory exists
# and continued (SIGCONT) after the other singleton has ended.
source "$(dirname "$0")/../lib.sh"
source "$TSR_ROOT/tests/ompi_session.sh"
tsr_tmpdir
tap_plan 4
export OMPI_MCA_ess_singleton_isolated=1

# survives BASE: 0 when a stopped singleton's session directory outlives another singleton's start
# and end in BASE, 1 when that end removed it, 2 when it was not there to begin with (the stopped
# one had not started or had ended: no answer); the stopped one is then continued and must end
# with exit 0 (status in $TMP/a.rc)
survives() {
    local base=$1 dir='' i kept=1 pid
    OMPI_MCA_orte_tmpdir_base=$base "$TRAIN" "${args[@]}" --set run_dir="$TMP/run.${base##*/}" >"$TMP/a.out" 2>&1 &
    pid=$!
    for ((i = 0; i < 400; i++)); do
        dir=$(find "$base" -path '*/jf.0/1/0' -type d 2>/dev/null | head -1)
        [[ -n $dir ]] && break
        sleep 0.05
    done
    kill -STOP "$pid"
    [[ -n $dir && -d $dir ]] || kept=2
    OMPI_MCA_orte_tmpdir_base=$base "$TRAIN" --version >/dev/null 2>&1
    ((kept == 1)) && [[ -d $dir ]] && kept=0
    kill -CONT "$pid"
    wait "$pid"
    echo $? >"$TMP/a.rc"
    return $kept
}

make_synth "$TMP/data"
tiny_args "$TMP/data/train"
args+=(--set model.n_layer=1 --set model.n_head=4 --set global_batch=4 --set micro_batch=4 --set max_duration=20ba --set save_interval=0ba)
mkdir "$TMP/bare"
survives "$TMP/bare"
tap_check $(($? != 1)) "without the kept directory, a singleton's end removes another's session directory (OpenMPI's last-one-out)"

ompi_session_base "$TMP/kept"
survives "$TMP/kept"
tap_check $? "in a base from ompi_session_base the running singleton's directory survives the other's end"

[[ $(cat "$TMP/a.rc") == 0 && -d $(find "$TMP/kept" -name .tessera-keep | head -1) ]]
tap_check $? "the stopped singleton then ends with exit $(cat "$TMP/a.rc"), the kept directory still there"

if [[ -n ${TSR_RUN_SH:-} ]]; then
    base=${OMPI_MCA_orte_tmpdir_base:-}
    [[ -n $base && $base != /tmp && -n $(find "$base" -name .tessera-keep 2>/dev/null) ]]
    tap_check $? "tests/run.sh gave this test a base of its own ($base)"
else
    tap_skip "tests/run.sh gave this test a base of its own" "not run by tests/run.sh"
fi
tap_done
