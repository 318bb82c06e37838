#!/usr/bin/env bash
# bench/gpu/ring_bench.c (device.sh's ring stage) on the host emulator of the CUDA backend
# (build/tests/ring_bench_emu), at the smallest local length (128 positions, one rep): it runs to
# the end and prints its table, the one-GPU kernel's row and a rank's blocks for rings of 2 and 4,
# with a positive time in every cell. The emulator refuses, as CUDA does, the elapsed time of an
# event made without timing: the first GPU run of the bench stopped there (2026-11-27,
# "tcu_event_elapsed_ms: invalid resource handle"), which no run here had shown. Its times say
# nothing (the emulator is not a GPU); docs/benchmarks.md has the GPU's.
# Then its sliding-window form (issue 67; device.sh attn with WINDOW=W): the kernel's row and the
# window's, its TFLOP/s counted over the band (W T - W (W - 1) / 2 pairs, which it prints); a bad
# W refused; and the PyTorch peer's (bench/gpu/ring_torch.py --cpu) window row, naming how it
# masked.
# Then at other heads (issue 67: ATT_HEADS=NH/KVH/HS, Gemma 3 4B's 8/4/256; device.sh attn with
# ATT_HEADS): both benches' rows name hs 256, a head size without a kernel refused.
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 7
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

"$bin" 256 1 64 >"$TMP/win.txt" 2>&1
rc=$?
sed 's/^/# /' "$TMP/win.txt"
# the pairs its TFLOP/s count: 64*256 - 64*63/2 = 14368 (the full kernel's 256^2 / 2 = 32768); no
# ring rows
((rc == 0)) && grep -q "the sliding window's pairs: 14368 (the full kernel's 32768)" "$TMP/win.txt" &&
    awk -F'|' '
    /one-GPU kernel, T = 256 / { rows++; if ($3 + 0 <= 0 || $5 + 0 <= 0) bad = 1 }
    /sliding window W = 64, T = 256 / { rows++; if ($3 + 0 <= 0 || $5 + 0 <= 0) bad = 1 }
    /ring, N/ { bad = 1 }
    END { exit !(rows == 2 && !bad) }' "$TMP/win.txt"
tap_check $? "ring_bench 256 1 64: the kernel's row and the sliding window's, its FLOPs the band's (exit $rc)"

"$bin" 256 1 0 >"$TMP/bad.txt" 2>&1
rc=$?
((rc == 1)) && grep -q 'usage: ring_bench .*W (1..TL' "$TMP/bad.txt"
tap_check $? "ring_bench 256 1 0: a window of 0 refused with the usage (exit $rc)"

py=${PYTHON:-/usr/bin/python3}
"$py" bench/gpu/ring_torch.py --cpu 128 1 32 >"$TMP/torch.txt" 2>&1
rc=$?
sed 's/^/# /' "$TMP/torch.txt"
((rc == 0)) && grep -Eq '^\| PyTorch .*(boolean mask|block mask).*, sliding window W = 32, T = 128 \|' "$TMP/torch.txt"
tap_check $? "ring_torch.py --cpu 128 1 32: the peer's sliding-window row, naming its mask (exit $rc)"

ATT_HEADS=8/4/256 "$bin" 128 1 64 >"$TMP/hs256.txt" 2>&1
rc=$?
sed 's/^/# /' "$TMP/hs256.txt"
((rc == 0)) && grep -q 'ATT_HEADS heads (8 on 4, hs 256)' "$TMP/hs256.txt" && awk -F'|' '
    /one-GPU kernel, T = 128, hs 256 / { rows++; if ($3 + 0 <= 0 || $5 + 0 <= 0) bad = 1 }
    /sliding window W = 64, T = 128, hs 256 / { rows++; if ($3 + 0 <= 0 || $5 + 0 <= 0) bad = 1 }
    END { exit !(rows == 2 && !bad) }' "$TMP/hs256.txt"
tap_check $? "ATT_HEADS=8/4/256 ring_bench 128 1 64: Gemma 3 4B's heads, the kernel's row and the window's at hs 256 (exit $rc)"

ATT_HEADS=8/4/96 "$bin" 128 1 >"$TMP/hs96.txt" 2>&1
rc=$?
((rc == 1)) && grep -q "ATT_HEADS='8/4/96': expected NH/KVH/HS" "$TMP/hs96.txt"
tap_check $? "ATT_HEADS=8/4/96: a head size without a kernel refused, naming ATT_HEADS (exit $rc)"

ATT_HEADS=8/4/256 "$py" bench/gpu/ring_torch.py --cpu 128 1 32 >"$TMP/torch256.txt" 2>&1
rc=$?
sed 's/^/# /' "$TMP/torch256.txt"
((rc == 0)) && grep -q '8 heads on 4, hs 256' "$TMP/torch256.txt" &&
    grep -Eq '^\| PyTorch SDPA, T = 128, hs 256 \|' "$TMP/torch256.txt" &&
    grep -Eq '^\| PyTorch .*, sliding window W = 32, T = 128, hs 256 \|' "$TMP/torch256.txt"
tap_check $? "ATT_HEADS=8/4/256 ring_torch.py --cpu 128 1 32: the peer's rows at Gemma 3 4B's heads, naming hs 256 (exit $rc)"
tap_done
