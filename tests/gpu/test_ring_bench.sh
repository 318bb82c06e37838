#!/usr/bin/env bash
# bench/gpu/ring_bench.c (device.sh's ring stage) on the host emulator of the CUDA backend
# (build/tests/ring_bench_emu), at the smallest local length (128 positions, one rep): it runs to
# the end and prints its table, the one-GPU kernel's row and a rank's blocks for rings of 2 and 4,
# with a positive time in every cell. The emulator refuses, as CUDA does, the elapsed time of an
# event made without timing: the first GPU run of the bench stopped there (2026-11-27,
# "tcu_event_elapsed_ms: invalid resource handle"), which no run here had shown. Its times say
# nothing (the emulator is not a GPU); docs/benchmarks.md has the GPU's.
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 1
bin=$BUILD/tests/ring_bench_emu
[[ -x $bin ]] || { echo "$bin not built (make)"; exit 1; }
"$bin" 128 1 >"$TMP/out.txt" 2>&1
rc=$?
sed 's/^/# /' "$TMP/out.txt"
((rc == 0)) && awk -F'|' '
    /one-GPU kernel, T = 128 |ring, N = 2 \(T = 256\)|ring, N = 4 \(T = 512\)/ {
        rows++; if ($3 + 0 <= 0 || $5 + 0 <= 0) bad = 1 }
    END { exit !(rows == 3 && !bad) }' "$TMP/out.txt"
tap_check $? "ring_bench on the emulator: its three rows (the kernel, rings of 2 and 4), every time positive (exit $rc)"
tap_done
