#!/usr/bin/env bash
# tessera-train's contract at the edges: exit codes and messages for bad usage, bad configs and
# bad data; --dry-run prints the published parameter counts of GPT-2's recipes; data files are
# never modified. (That every shipped recipe dry-runs and prints its plan is
# tests/train/test_recipes.sh's first check: this test ran the same 46 dry runs again, one at a
# time, until 2026-11-29.)
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 10
make_synth "$TMP/data" 512 50000
# one thread: the valid run's 2 steps, eval and sample took 89 s of a 103 s test for 14 CPU-s in CI
# (2026-11-29) with the default (2 threads a rank), each parallel region waiting for the thread the
# other lane's test had descheduled; threading is not what this test is about
base=(--config "$TSR_ROOT/configs/tiny.cfg" --set model.vocab_size=512 --set data.train="$TMP/data/train"
      --set data.val="$TMP/data/val" --set run_dir="$TMP/run" --set max_duration=2ba --set threads=1)

expect() { # expect RC PATTERN what CMD...: exit code RC and stderr/stdout containing PATTERN
    local want=$1 pat=$2 what=$3; shift 3
    "$@" >"$TMP/o.txt" 2>&1
    local rc=$?
    [[ $rc == "$want" ]] && grep -qE -- "$pat" "$TMP/o.txt"
    local ok=$?
    ((ok)) && { tap_diag "exit $rc, output:"; sed 's/^/#   /' "$TMP/o.txt" | tail -5; }
    tap_check $ok "$what (exit $rc)"
}

expect 1 "^tessera-train: error: unknown option: --bogus \(see 'tessera-train --help'\)" "unknown option -> exit 1" "$TRAIN" --bogus
expect 1 "--config FILE is required" "missing --config -> exit 1" "$TRAIN"
expect 1 "unknown key 'model.n_layers'" "unknown --set key -> exit 1" "$TRAIN" "${base[@]}" --set model.n_layers=2
expect 1 "vocab_size = 100" "dataset vocabulary larger than the model -> exit 1" "$TRAIN" "${base[@]}" --set model.vocab_size=100
expect 2 "$TMP/nodata" "missing dataset -> exit 2 naming it" "$TRAIN" "${base[@]}" --set data.train="$TMP/nodata"
# corrupt one payload byte of a copy of the dataset
cp -r "$TMP/data/train" "$TMP/bad"
shard=$(ls "$TMP/bad"/*.bin | head -1)
sum_before=$(md5sum "$shard")
printf '\x07' | dd of="$shard" bs=1 seek=5000 conv=notrunc status=none
sum_corrupt=$(md5sum "$shard")
expect 2 "$(basename "$shard").*(checksum|crc)" "corrupt shard -> exit 2 naming the file" "$TRAIN" "${base[@]}" --set data.train="$TMP/bad"
[[ $(md5sum "$shard") == "$sum_corrupt" && $sum_before != "$sum_corrupt" ]]
tap_check $? "the trainer did not modify the data file"
expect 0 "step 2/2" "a valid run still works" "$TRAIN" "${base[@]}"
# published parameter counts (untied padding rows excluded): GPT-2 124M = 124,439,808
expect 0 "params: 124439808 trainable" "gpt2-124m dry run prints the published 124,439,808 parameters" \
    "$TRAIN" --config "$TSR_ROOT/configs/gpt2-124m.cfg" --dry-run
expect 0 "params: 1557611200 trainable" "gpt2-1558m dry run prints 1,557,611,200 parameters" \
    "$TRAIN" --config "$TSR_ROOT/configs/gpt2-1558m.cfg" --dry-run
tap_done
