#!/usr/bin/env bash
# NO_MPI=1 gives a single-process build that links neither MPI nor HDF5 and trains to the same
# bits as the MPI build run on one rank (same code paths; the all-reduces are no-ops on one rank).
source "$(dirname "$0")/lib.sh"
tsr_tmpdir
tap_plan 3
make -C "$TSR_ROOT" NO_MPI=1 BUILD="$TMP/b" -j2 "$TMP/b/tessera-train" >"$TMP/make.txt" 2>&1
tap_check $? "make NO_MPI=1 builds tessera-train"
! ldd "$TMP/b/tessera-train" | grep -qE 'libmpi|libhdf5'
tap_check $? "the NO_MPI binary links neither MPI nor HDF5"
make_synth "$TMP/data" 512 50000
args=(--config "$TSR_ROOT/configs/tiny.cfg" --set model.vocab_size=512 --set data.train="$TMP/data/train" --set data.val="$TMP/data/val"
      --set max_duration=3ba --set eval_interval=0ba --set data.val="" --set threads=1)
"$TMP/b/tessera-train" "${args[@]}" --set run_dir="$TMP/r1" >/dev/null 2>&1 &&
    "$TRAIN" "${args[@]}" --set run_dir="$TMP/r2" >/dev/null 2>&1 &&
    [[ $(losses "$TMP/r1/metrics.jsonl" | wc -l) -ge 3 ]] && cmp -s <(losses "$TMP/r1/metrics.jsonl") <(losses "$TMP/r2/metrics.jsonl")
tap_check $? "NO_MPI and MPI builds give bit-identical losses"
tap_done
