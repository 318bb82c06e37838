#!/usr/bin/env bash
# test_parser_bounds.sh — faults of the fuzzing work, as plain checks of the programs users run
# (no clang needed): a small file that claims a huge count is refused by name with exit 2, quickly,
# under a 2 GiB address-space limit, instead of allocating what it claims (or dying with exit 3).
# GPT-2's encoder.json ids: tests/tokenizer/test_gpt2_bounds.sh.
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 2

# limited CMD...: runs CMD with 2 GiB of address space and 60 s at most, output in $TMP/out
limited() { (ulimit -v 2097152; timeout 60 "$@") > "$TMP/out" 2>&1; }

# dataset index: n_shards sized the row table; 10000000 in a 90-byte index asked for 2.7 GB (seen
# while writing fuzz_dataset, replayed through it: tests/fuzz/corpus/dataset/oom-n-shards)
mkdir -p "$TMP/ds"
printf 'tessera-dataset 1\nvocab_size 64\ntoken_width 2\nhas_mask 0\nn_shards 10000000\nn_tokens 0\nend\n' > "$TMP/ds/index.tsv"
limited "$TOOL" verify-data "$TMP/ds"
rc=$?
tap_diag "$(head -2 "$TMP/out")"
[[ $rc == 2 ]] && grep -q "index.tsv:6: n_shards 10000000, but only 2 lines follow" "$TMP/out"
tap_check $? "an index.tsv claiming 10000000 shards in 2 lines exits 2 naming the count (got exit $rc)"

# the same count with its rows present still opens (the bound is the lines, not a constant)
"$TOOL" synth --out "$TMP/s" --vocab 64 --tokens 3000 --seed 1 >/dev/null &&
    "$TOOL" verify-data "$TMP/s/train" > "$TMP/out" 2>&1
tap_check $? "a real dataset still verifies ($(tail -1 "$TMP/out"))"
tap_done
