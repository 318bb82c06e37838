#!/usr/bin/env bash
# Pipeline parallelism with device = cuda (docs/parallelism.md "Pipeline parallelism", docs/cuda.md
# "In the trainer"): a tiny Llama (GQA 2:1, RoPE, the document mask over a 64-token corpus whose
# token 8 ends a document every ~20 tokens), 4 layers, trained 6 steps with device = cuda, the
# validation loss every 3:
#  - parallel.pipeline = 2 on 2 ranks, 1f1b, micro_batch = 1 (4 microbatches a step, more than the
#    stages), gives every step of the 1-rank device run within 2e-4 (loss) and 2e-3 (norm),
#    relative, test_cuda_context.sh's tolerances (measured on the emulator: the losses and the
#    validation losses equal, the norm within 2.6e-8: the stages' squared norms summed in another
#    order), and the same validation losses within 2e-4 (the stages in turn); the device plan holds
#    this stage's weights only (half the 1-rank run's: 409.5 KiB against 819.4) and a microbatch's
#    activations of its layers (the pipeline line counts those in flight, as on the CPU; the
#    device's free memory is checked against them all at start);
#  - the interleaved schedule, 2 model chunks a rank (4 stages, a layer each, on 2 ranks), likewise
#    (measured: the losses equal, the norm within 2.6e-8);
#  - the 1f1b run's step-3 checkpoint (the stages' parts written as one layout-free file) resumes
#    on one rank with device = cuda, steps 4-6 within the same tolerances of the 1-rank run;
#  - 2 stages x 2 data ranks on 4 (global_batch 8: 4 microbatches a rank), the stages' gradients
#    summed over their data ranks by the stage group's communicator (the emulator: the host-staged
#    transport, 4 ranks on one device), gives the 1-rank run's steps within the same tolerances
#    (measured: the losses equal, the norm within 1.7e-8) and its validation losses;
#  - with tied embeddings (the two ends' copies' gradients summed, the copy counted once in the
#    norm), block activation checkpointing, compressed (fp8) activations and Muon together, P 2
#    on 2 ranks gives the 1-rank run's steps within the same tolerances (measured: loss 2.3e-5,
#    norm 1.5e-4: the tied gradients' two halves summed in another order than one rank's);
#  - what the GPU's pipeline does not run yet is refused when the config loads, exit 1, nothing
#    written, naming both keys: parallel.pipeline_schedule = "zb", parallel.sharding = "zero3".
# It runs on the host emulator of the CUDA backend (build/tests/tessera-train-cuemu: the trainer's
# GPU path and bf16 activations, not the kernels), and on the real backend with 2 GPUs, or 2
# ranks sharing one under TSR_TEST_GPU_COMM=mpi (tests/gpu/device.sh multirank); skipped loudly
# otherwise.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/gpu_lib.sh"
tsr_tmpdir
PER=6
tap_plan $((2 * PER))
# (the config's warmup of 20 steps, not tiny_llama_args' 2: the measures above were taken with it)
gpu_tiny_args 64 60000 --set data.val="$TMP/data/val" --set eval_interval=3ba --set eval_samples=8 \
    --set model.n_layer=4 --set seq_len=64 --set model.max_seq_len=64 --set model.attn_mask=document \
    --set model.eot_token=8 --set global_batch=4 --set micro_batch=1 --set max_duration=6ba \
    --set save_interval=3ba --set keep_last=5 --set save_async=false --set save_final=false \
    --set optim.warmup=20ba --set watchdog.window=0 --set device=cuda
# run BIN DIR NP P ARGS...: output in DIR.txt
run() {
    local bin=$1 dir=$2 np=$3 p=$4; shift 4
    ranks "$np" "$bin" "${args[@]}" --set parallel.pipeline="$p" \
        --set run_dir="$TMP/$dir" "$@" >"$TMP/$dir.txt" 2>&1
}
close() { metrics_close "$TMP/$1/metrics.jsonl" "$TMP/$2/metrics.jsonl" "${3:-1}" 2e-4 2e-3; }
# the validation losses of a run's metrics, one a line
val() { "$PY3" -c 'import json, sys
for l in open(sys.argv[1]):
    j = json.loads(l)
    if "val_loss" in j: print(j["step"], j["val_loss"])' "$TMP/$1/metrics.jsonl"; }
# the two runs' validation losses at the same steps, within 2e-4 relative
val_close() {
    local a b
    a=$(val "$1") && b=$(val "$2") && [[ -n $a ]] &&
        paste <(echo "$a") <(echo "$b") | awk '$1 != $3 || ($2 - $4) ^ 2 > (2e-4 * $2) ^ 2 { bad = 1 } END { exit bad }'
}
# the device plan's weights (fp32 master + bf16 copy) in KiB
weights() { sed -n 's/^device memory per rank.*weights \([0-9.]*\) KiB (fp32 master.*$/\1/p' "$TMP/$1.txt"; }

# suite BIN LABEL: the checks on one backend
suite() {
    local bin=$1 l=$2 d="" w1="" w2="" rc=0 i
    if ((GPUS < 2)); then
        for ((i = 1; i < PER; i++)); do gpus 2 "$l: parallel.pipeline = 2, check $i of $PER"; done
    else
        run "$bin" "$l.1" 1 1 && run "$bin" "$l.2" 2 2 && d=$(close "$l.1" "$l.2") &&
            val_close "$l.1" "$l.2" &&
            grep -q "^pipeline: 2 stages on the device, 1f1b" "$TMP/$l.2.txt" &&
            grep -q "^device memory per rank (cuda.*per microbatch of 1 x 64 (this stage's 2 layers; the microbatches it holds at once: the pipeline line)" "$TMP/$l.2.txt" &&
            w1=$(weights "$l.1") && w2=$(weights "$l.2") &&
            awk -v a="$w1" -v b="$w2" 'BEGIN { exit !(b < 0.55 * a && b > 0.45 * a) }'
        tap_check $? "$l: parallel.pipeline = 2, 1f1b, 4 microbatches: every step within 2e-4 (loss), 2e-3 (norm) of one rank's ($d), the validation losses within 2e-4; the device plan holds the stage's weights ($w2 KiB of $w1)"
        run "$bin" "$l.i" 2 2 --set parallel.pipeline_schedule=interleaved \
            --set parallel.pipeline_virtual=2 && d=$(close "$l.1" "$l.i") && val_close "$l.1" "$l.i" &&
            grep -q "^pipeline: 4 stages on the device, interleaved (2 model chunks a rank)" "$TMP/$l.i.txt"
        tap_check $? "$l: interleaved, 2 chunks a rank (4 stages of a layer each): every step within the tolerances of one rank's ($d), the validation losses within 2e-4"
        run "$bin" "$l.r" 1 1 --resume "$(ck "$TMP/$l.2" 3)" && d=$(close "$l.1" "$l.r" 4) &&
            grep -q "checkpoint resume step 3" "$TMP/$l.r.txt"
        tap_check $? "$l: the 2 stages' step-3 checkpoint resumes on one rank: steps 4-6 within the tolerances of the 1-rank run ($d)"
        local modes=(--set model.tie_embeddings=true --set model.activation_checkpointing=block
                     --set model.activation_compression=fp8 --set optim.name=muon)
        run "$bin" "$l.m1" 1 1 "${modes[@]}" && run "$bin" "$l.m2" 2 2 "${modes[@]}" &&
            d=$(close "$l.m1" "$l.m2")
        tap_check $? "$l: P 2 with tied embeddings, block activation checkpointing, fp8-compressed activations and Muon: every step within the tolerances of one rank's ($d)"
        run "$bin" "$l.zb" 2 2 --set parallel.pipeline_schedule=zb
        rc=$?
        ((rc == 1)) && [[ ! -e $TMP/$l.zb ]] &&
            grep -qF 'parallel.pipeline = 2 with device = "cuda" and parallel.pipeline_schedule = "zb": pipeline parallelism on the GPU does not run with it yet' "$TMP/$l.zb.txt" &&
            { run "$bin" "$l.z3" 2 2 --set parallel.sharding=zero3; rc=$?; ((rc == 1)); } &&
            [[ ! -e $TMP/$l.z3 ]] &&
            grep -qF 'parallel.pipeline = 2 with device = "cuda" and parallel.sharding = "zero3": pipeline parallelism on the GPU does not run with it yet (docs/parallelism.md "Pipeline parallelism"): change parallel.sharding, or set device = "cpu"' "$TMP/$l.z3.txt"
        tap_check $? "$l: parallel.pipeline_schedule = \"zb\" and parallel.sharding = \"zero3\" refused when the config loads, exit 1 (got $rc), naming both keys, nothing written"
    fi
    if gpus 4 "$l: 2 stages x 2 data ranks"; then
        # the emulator's 4 ranks share one device through the host-staged transport
        local staged=()
        [[ $l == emulator ]] && staged=(--set parallel.gpu_comm=mpi)
        run "$bin" "$l.d1" 1 1 --set global_batch=8 && run "$bin" "$l.d4" 4 2 --set global_batch=8 "${staged[@]}" &&
            d=$(close "$l.d1" "$l.d4") && val_close "$l.d1" "$l.d4" &&
            grep -q "^pipeline: 2 stages on the device, 1f1b .*; gradients summed over the stage's data ranks after the schedule by " "$TMP/$l.d4.txt"
        tap_check $? "$l: 2 stages x 2 data ranks on 4 ranks: every step within the tolerances of one rank's ($d), the validation losses within 2e-4, the stages' gradients summed over their data ranks"
    fi
}

both_halves "$PER" "" ""
tap_done
