#!/usr/bin/env bash
# bench/gpu/hybrid_step.sh (device.sh's hybrid stage: a hybrid training step on the GPU beside
# transformers' Qwen3NextForCausalLM) on the host emulator of the CUDA backend
# (build/tests/tessera-train-cuemu) at a tiny size, the peer asked for the CPU: the script runs to
# the end and prints its table, tessera's median step positive, the peer's cells "skip" where
# transformers is absent (as here) or a time where it is there; bad knobs refused (exit 2) before
# anything runs. Times say nothing (the emulator is not a GPU); docs/deltanet.md "The layer on
# CUDA" has what is measured where.
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 2
emu=$BUILD/tests/tessera-train-cuemu
[[ -x $emu ]] || { echo "$emu not built (make)"; exit 77; }
BENCH_TRAIN=$emu SIZE="64 2 64 1 512" HEADS="1 2 16 16 2 1 96" STEPS=4 PEER_DEVICE=cpu \
    PYTHON=$PY3 bash bench/gpu/hybrid_step.sh >"$TMP/out.txt" 2>&1
rc=$?
sed 's/^/# /' "$TMP/out.txt"
((rc == 0)) && awk -F'|' '
    /^\| 64 2 64 1; 1 2 16 16; 2 1 \|/ { rows++; if ($3 + 0 <= 0 || $6 + 0 <= 0) bad = 1
        if ($4 !~ /skip/ && $4 + 0 <= 0) bad = 1 }
    END { exit !(rows == 1 && !bad) }' "$TMP/out.txt"
tap_check $? "hybrid_step.sh on the emulator: its row, tessera's median step and tokens/s positive, the peer's a time or skip (exit $rc)"
SIZE="64 2 64" bash bench/gpu/hybrid_step.sh >"$TMP/bad.txt" 2>&1
rc=$?
((rc == 2)) && grep -q "SIZE" "$TMP/bad.txt"
tap_check $? "hybrid_step.sh refuses a SIZE of 3 numbers (exit $rc: $(head -c 120 "$TMP/bad.txt"))"
tap_done
