#!/usr/bin/env bash
# dist_group_alltoallv (src/dist/dist.c), the expert exchange's and ZeRO-3's all-to-all-v, on real MPI
# ranks through build/tests/a2a_driver: rows of every size to every rank (itself included) arrive
# byte for byte; and one block of 2^31 + 4096 bytes, past MPI's int counts in bytes, goes through
# as 524,289 rows of 4 KiB (the exchange's counts are whole rows; before, any count over 2^31 - 1
# elements stopped the run). The large case needs ~4.3 GiB (rank 0's send and rank 1's receive
# buffer of 2 GiB) and skips, saying so, with less than 6 GiB available.
source "$(dirname "$0")/../lib.sh"
DRIVER=$BUILD/tests/a2a_driver
tap_plan 4

run() { # NP ROW BIG ELEM: sets out and rc
    out=$("${MPIRUN[@]}" -np "$1" "$DRIVER" "$2" "$3" "$4" 2>&1)
    rc=$?
    tap_diag "$(grep -E '^rank|error|exceeds' <<<"$out" | tr '\n' ';')"
}
# every rank's line says nothing was wrong
all_right() { (($(grep -c ', 0 wrong$' <<<"$out") == $1)); }

run 3 5 0 4
((rc == 0)) && all_right 3
tap_check $? "3 ranks, fp32 rows of 5 in blocks of 0-4 rows: every byte arrives"
run 2 3 7 8
((rc == 0)) && all_right 2
tap_check $? "2 ranks, 8-byte elements, one larger block from rank 0 to rank 1: every byte arrives"

avail_kib=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo)
if ((avail_kib < 6 * 1024 * 1024)); then
    tap_skip "2 ranks, a block of 2^31 + 4096 bytes" "$((avail_kib / 1024)) MiB available, 6 GiB needed"
    tap_skip "its bytes are right" "$((avail_kib / 1024)) MiB available, 6 GiB needed"
else
    run 2 4096 524289 1
    tap_check $rc "2 ranks, a block of 2^31 + 4096 bytes (524,289 rows of 4096 one-byte elements) goes through"
    all_right 2
    tap_check $? "its bytes are right on both ranks"
fi
tap_done
