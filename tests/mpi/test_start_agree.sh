#!/usr/bin/env bash
# Files each rank opens for itself at start (the data, the tokenizer) may differ between nodes:
# node-local copies, a mount missing on one node. The ranks agree on the outcome
# (trainer_init.c agree_start): when one rank cannot use its copy, every rank stops at once with the
# same status, rank 0 naming the rank and host that failed, and run_dir is not created. Before,
# the failing rank stopped alone with its message muted, and rank 0 waited in its next
# collective until the job's time ran out.
# Rank 1 (or 0) gets its own mount namespace in which a tmpfs hides the directory: what a node
# without the copy sees. Needs root and unshare(1); skips loudly without them.
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 3

if ((EUID != 0)) || ! unshare -m true 2>/dev/null; then
    for what in "data missing on rank 1" "data missing on rank 0" "tokenizer missing on rank 1"; do
        tap_skip "$what" "needs root and unshare -m (a mount namespace per rank)"
    done
    tap_done
    exit
fi

make_synth "$TMP/data"
tiny_args "$TMP/data/train"
args+=(--set model.n_head=4 --set max_duration=2ba --set run_dir="$TMP/run")
# run_hidden R DIR [SETS...]: two ranks, rank R's with DIR emptied (a tmpfs over it, in a mount
# namespace of its own): sets out and rc (a hang ends at the timeout: 124)
run_hidden() {
    local r=$1 dir=$2 a=() b=()
    shift 2
    a=("$TRAIN" "${args[@]}" "$@")
    # shellcheck disable=SC2016 # (sh expands them)
    b=(unshare -m sh -c 'mount -t tmpfs tsr-hide "$0" && exec "$@"' "$dir" "${a[@]}")
    if ((r == 1)); then
        out=$(timeout 120 "${MPIRUN[@]}" -np 1 "${a[@]}" : -np 1 "${b[@]}" 2>&1)
    else
        out=$(timeout 120 "${MPIRUN[@]}" -np 1 "${b[@]}" : -np 1 "${a[@]}" 2>&1)
    fi
    rc=$?
    tap_diag "exit $rc: $(grep -m3 'error' <<<"$out" | tr '\n' ' ')"
}

run_hidden 1 "$TMP/data/train"
[[ $rc == 2 && $out == *"1 of 2 ranks could not use the data that rank 0 opened, the first rank 1 on "* &&
    ! -e $TMP/run ]]
tap_check $? "data missing on rank 1: both ranks stop with exit 2 (not a hang), rank 0 names rank 1 and its host, run_dir not created"

run_hidden 0 "$TMP/data/train"
[[ $rc == 2 && $out == *"index.tsv: cannot open"* &&
    $out == *"rank 0 could not use its data (above), but 1 of the other 1 ranks could"* && ! -e $TMP/run ]]
tap_check $? "data missing on rank 0: exit 2 with rank 0's own error and that the other rank could, run_dir not created"

mkdir -p "$TMP/share"
cp -r "$TSR_ROOT/data/npm/gpt2" "$TMP/share/gpt2"
export TSR_DATA_DIR=$TMP/share
run_hidden 1 "$TMP/share/gpt2" --set data.tokenizer=gpt2
[[ $rc != 0 && $rc != 124 && $out == *"1 of 2 ranks could not use the GPU or tokenizer that rank 0 opened"* &&
    ! -e $TMP/run ]]
tap_check $? "the tokenizer's files missing on rank 1: both ranks stop (exit $rc), rank 0 says so, run_dir not created"
tap_done
