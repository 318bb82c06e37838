#!/usr/bin/env bash
# The same config and seed on 1, 2 and 4 MPI ranks gives the same loss curve (within 1e-6 relative:
# only the summation order of the gradient all-reduce differs), and the rank count never changes
# which samples make a global batch. Also: an indivisible batch is refused with exit 1, and the
# reason is printed once (by rank 0), not once per rank.
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 6
make_synth "$TMP/data"
cfg=$TMP/mpi.cfg
cat >"$cfg" <<CFG
run_dir = "$TMP/run";  seed = 7;  max_duration = "12ba";
global_batch = 8;  micro_batch = 2;  seq_len = 32;  eval_interval = "6ba";  eval_samples = 16;
model = { n_layer = 2; d_model = 64; n_head = 4; vocab_size = 512; };
optim = { lr = 3e-3; warmup = "3ba"; weight_decay = 0.1; grad_clip = 1.0; };
data = { train = "$TMP/data/train"; val = "$TMP/data/val"; };
CFG
for np in 1 2 4; do
    "${MPIRUN[@]}" -np $np "$TRAIN" --config "$cfg" --set run_dir="$TMP/run$np" --set threads=1 \
        >"$TMP/out$np.txt" 2>&1
    tap_check $? "mpirun -np $np trains ($(grep -c '^step' "$TMP/out$np.txt") step lines)"
done
# compare every train loss and val loss of np=2 and np=4 against np=1
records_equal run1 run2; tap_check $? "np=2 loss curve equals np=1 within 1e-6 relative"
records_equal run1 run4; tap_check $? "np=4 loss curve equals np=1 within 1e-6 relative"
"${MPIRUN[@]}" -np 3 "$TRAIN" --config "$cfg" --set run_dir="$TMP/run3" >"$TMP/out3.txt" 2>&1
rc=$?
n_msg=$(grep -c "global_batch = 8 is not divisible by the 3 ranks" "$TMP/out3.txt")
[[ $rc == 1 && $n_msg == 1 ]]
tap_check $? "np=3 with global_batch 8 is refused with exit 1 (got $rc), the reason printed once (got $n_msg)"
tap_done
