#!/usr/bin/env bash
# install_beside.sh — the tests' part of ./INSTALL beside the build (make check, check-gpu, bench).
#   bash tools/install_beside.sh start BUILD   after ./INSTALL --ensure demo (the build's and the
#       demo's dependencies, in the foreground): ./INSTALL --ensure all in the background, its
#       output into BUILD/install-tests.log, so that its downloads (the tests' npm packages, the
#       unpacked .debs: network waits, about 30 CPU-s) overlap the compilers instead of coming
#       before them (docs/benchmarks.md "CI time: the tests' downloads beside the build")
#   bash tools/install_beside.sh wait BUILD    before the tests: waits for it, prints its output,
#       and exits with its status (1: the build lacks something; a missing test-only tool is a
#       warning and status 0, as in the foreground)
# The background INSTALL holds BUILD/install-tests.lock (flock) while it runs; `wait` takes it, so
# it returns at once when none was started or it has ended. Without flock (util-linux), `start`
# runs INSTALL in the foreground.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
what=${1:-} build=${2:-build}
log=$build/install-tests.log rc_file=$build/install-tests.rc lock=$build/install-tests.lock

start() {
    mkdir -p "$build"
    rm -f "$rc_file"
    if ! command -v flock >/dev/null; then
        ./INSTALL --ensure all
        return
    fi
    echo "INSTALL: the tests' part (./INSTALL --ensure all) runs beside the build: $log"
    # the lock is taken here, before the background INSTALL starts, and handed to it: it holds the
    # lock (the same open file) until it has ended and its status is written, so a `wait` right
    # after this cannot pass before it
    exec 9>"$lock"
    flock 9
    (
        ./INSTALL --ensure all >"$log" 2>&1 </dev/null
        echo $? >"$rc_file"
    ) &
    exec 9>&-
}

wait_done() {
    [[ -e $lock ]] || return 0
    command -v flock >/dev/null && flock "$lock" true
    [[ -e $log ]] && cat "$log"
    local rc=1
    if [[ -s $rc_file ]]; then
        read -r rc <"$rc_file"
    else
        echo "install_beside.sh: the background ./INSTALL --ensure all ended without a status (killed?): see $log" >&2
    fi
    rm -f "$lock" "$rc_file"
    return "$rc"
}

case $what in
    start) start ;;
    wait) wait_done ;;
    *) echo "install_beside.sh: '$what': expected start or wait (and the build directory)" >&2; exit 2 ;;
esac
