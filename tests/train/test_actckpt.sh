#!/usr/bin/env bash
# Activation checkpointing through the trainer (docs/model.md), 2 MPI ranks, 10 steps of a tiny
# model on the synthetic corpus:
#  - model.activation_checkpointing = block gives the same loss, lr and grad norm at every step as
#    none, bit for bit (the recomputation runs the same ops on the same inputs), with and without
#    model.attn_mask = document;
#  - the same for attention checkpointing on a layer range (activation_checkpointing_range = 1-2);
#  - the memory plan rank 0 prints shows a smaller activations figure (model_acts_bytes);
#  - activation_checkpointing_layers above model.n_layer is refused with exit 1 naming the key.
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 6
make_synth "$TMP/data" 512 60000
tap_check $? "synthetic corpus made"
tiny_args "$TMP/data/train"
args+=(--set model.n_layer=3 --set model.n_head=4 --set global_batch=8 --set micro_batch=2
       --set max_duration=10ba --set model.eot_token=7)
run() { local dir=$1; shift; "${MPIRUN[@]}" -np 2 "$TRAIN" "${args[@]}" --set run_dir="$TMP/$dir" "$@" >"$TMP/$dir.txt" 2>&1; }
# acts FILE: the activations figure of the printed memory plan, in bytes
acts() {
    /usr/bin/python3 - "$1" <<'PY'
import re, sys
m = re.search(r"activations ([0-9.]+) (B|KiB|MiB|GiB) per microbatch", open(sys.argv[1]).read())
print(int(float(m.group(1)) * 1024 ** ["B", "KiB", "MiB", "GiB"].index(m.group(2))) if m else -1)
PY
}

run N && run K --set model.activation_checkpointing=block &&
    run ND --set model.attn_mask=document &&
    run KD --set model.attn_mask=document --set model.activation_checkpointing=block \
        --set model.activation_checkpointing_layers=2
tap_check $? "4 runs of 10 steps: none and block, causal and document mask (block on the first 2 of 3 layers)"

final_lines "$TMP/N/metrics.jsonl" >"$TMP/N.loss" && final_lines "$TMP/K/metrics.jsonl" >"$TMP/K.loss" &&
    final_lines "$TMP/ND/metrics.jsonl" >"$TMP/ND.loss" && final_lines "$TMP/KD/metrics.jsonl" >"$TMP/KD.loss"
tap_diag "none:  $(tail -1 "$TMP/N.loss")"
tap_diag "block: $(tail -1 "$TMP/K.loss")"
(($(wc -l <"$TMP/N.loss") == 10)) && cmp -s "$TMP/N.loss" "$TMP/K.loss" &&
    (($(wc -l <"$TMP/ND.loss") == 10)) && cmp -s "$TMP/ND.loss" "$TMP/KD.loss" &&
    ! cmp -s "$TMP/N.loss" "$TMP/ND.loss"
tap_check $? "loss, lr and grad norm of all 10 steps bit-identical to none, causal and document (which differ from each other)"

run KR --set model.activation_checkpointing=attention --set model.activation_checkpointing_range=1-2 &&
    final_lines "$TMP/KR/metrics.jsonl" >"$TMP/KR.loss" && cmp -s "$TMP/N.loss" "$TMP/KR.loss" &&
    (($(acts "$TMP/KR.txt") < $(acts "$TMP/N.txt")))
tap_check $? "attention checkpointing on the layer range 1-2: all 10 steps bit-identical to none, smaller plan"

an=$(acts "$TMP/N.txt") ak=$(acts "$TMP/K.txt") and=$(acts "$TMP/ND.txt") akd=$(acts "$TMP/KD.txt")
tap_diag "activations per microbatch: none $an B, block $ak B; document: none $and B, block (2 of 3) $akd B"
((an > 0 && ak > 0 && ak < an && akd > 0 && akd < and))
tap_check $? "the printed memory plan's activations figure is smaller with block"

"${MPIRUN[@]}" -np 1 "$TRAIN" "${args[@]}" --set run_dir="$TMP/bad" --set model.activation_checkpointing=mlp \
    --set model.activation_checkpointing_layers=4 >"$TMP/bad.txt" 2>&1
rc=$?
((rc == 1)) && grep -q "model.activation_checkpointing_layers = 4 with model.n_layer = 3" "$TMP/bad.txt"
tap_check $? "activation_checkpointing_layers = 4 with n_layer = 3 refused (exit $rc, want 1) naming the key"
tap_done
