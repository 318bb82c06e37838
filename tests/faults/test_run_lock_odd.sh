#!/usr/bin/env bash
# Odd files at a lock's name (src/base/runlock.c; issue 64 finding 5). A FIFO at
# run_dir/tessera.lock hung the trainer in open(2), beyond SIGTERM's and SIGUSR1's reach, and left
# its RUN_DIR/tessera.lock.HOST.PID.tmp behind; a dangling symbolic link there was reported as "the
# lock file changed hands 5 times ... several writers are starting at once". Now every name that is
# not a regular file (a FIFO, a dangling or a live symbolic link, a directory, a socket) is refused
# at once with exit 2 naming the path, what it is and what was expected, nothing else written (no
# .tmp left; the odd file left as it was); prep's OUT.lock the same. Each run is bounded by timeout
# (a hang is exit 124, not a stuck CI).
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 6
synth_tiny_args 1 4 4 --set save_interval=0ba --set max_duration=1ba --set run_dir="$TMP/run"
mkdir -p "$TMP/run"
LOCK=$TMP/run/tessera.lock
# odd KIND WANT: the trainer on a run_dir whose lock name is KIND (made by the caller): exit 2 within
# 20 s naming the path and WANT, no .tmp left, the name still what it was
odd() {
    local kind=$1 want=$2 before after
    before=$(stat -c %F "$LOCK" 2>/dev/null || echo "(dangling) $(readlink "$LOCK")")
    timeout -s KILL 20 "$TRAIN" "${args[@]}" >"$TMP/t.txt" 2>&1
    local rc=$?
    after=$(stat -c %F "$LOCK" 2>/dev/null || echo "(dangling) $(readlink "$LOCK")")
    tap_diag "$(grep -m1 'error: ' "$TMP/t.txt")"
    ((rc == 2)) && grep -q "error: $LOCK: is $want, expected a tessera lock file" "$TMP/t.txt" &&
        ! grep -q "changed hands" "$TMP/t.txt" && ! grep -q '^step 1' "$TMP/t.txt" &&
        [[ -z $(find "$TMP/run" -name '*.tmp') && $before == "$after" ]]
    tap_check $? "$kind at run_dir/tessera.lock: exit $rc (124/137: it hung), naming it as $want; no .tmp left, the file as it was"
    rm -rf "$LOCK"
}
mkfifo "$LOCK"
odd "a FIFO" "a FIFO"
ln -s "$TMP/nowhere" "$LOCK"
odd "a dangling symbolic link" "a symbolic link"
echo x >"$TMP/plain"
ln -s "$TMP/plain" "$LOCK"
odd "a symbolic link to a regular file" "a symbolic link"
mkdir "$LOCK"
odd "a directory" "a directory"
"$PY3" -c 'import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' "$LOCK"
odd "a socket" "a socket"

# prep's OUT.lock: a FIFO there is refused the same way
echo "a small document" >"$TMP/small.txt"
mkfifo "$TMP/ds.lock"
timeout -s KILL 20 "$TOOL" prep -q --val-fraction 0 --threads 1 --out "$TMP/ds" "$TMP/small.txt" >"$TMP/p.txt" 2>&1
rc=$?
tap_diag "$(grep -m1 'error: ' "$TMP/p.txt")"
((rc == 2)) && grep -q "$TMP/ds.lock: is a FIFO, expected a tessera lock file" "$TMP/p.txt" &&
    [[ -p $TMP/ds.lock && ! -e $TMP/ds && -z $(find "$TMP" -maxdepth 1 -name 'ds.lock*.tmp') ]]
tap_check $? "prep with a FIFO at OUT.lock: exit $rc naming it, nothing written"
tap_done
