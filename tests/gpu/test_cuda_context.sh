#!/usr/bin/env bash
# Context parallelism with device = cuda (docs/parallelism.md, docs/cuda.md "In the trainer"): a
# tiny Llama (GQA 2:1, RoPE with Llama 3.1 scaling, head size 32, the document mask over a
# 64-token corpus whose token 8 ends a document every ~20 tokens: documents across the chunks and
# ranks) trained 6 steps with device = cuda:
#  - parallel.context = 2 on 2 ranks, and 2 x 2 with zero3 and block activation checkpointing
#    (the ring's forward rerun before the backward) on 4, give every step of the 1-rank device run
#    within 2e-4 (loss) and 2e-3 (norm), relative (measured 1.8e-5 and 1.6e-4: the ring's blocks
#    sum the attention in another order and round each block's output and gradients to bf16
#    before their fp32 sums); the ring's blocks moved through the context group's communicator
#    (NCCL send/recv; on the emulator the MPI stand-in, src/gpu/gpu_comm_mpi.c), said at start;
#  - the device plan prints the ring's share (T / N positions per rank).
# It runs on the host emulator of the CUDA backend (build/tests/tessera-train-cuemu: the trainer's
# GPU path, bf16 activations and the ring's transport, not the kernels: the blocks' kernels are
# checked against the CPU by test_gpu_ops, on the SIMT emulator and on a GPU), and on the real
# backend with as many GPUs as ranks (skipped loudly otherwise).
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/gpu_lib.sh"
tsr_tmpdir
PER=2
tap_plan $((2 * PER))
# (the config's warmup of 20 steps, not tiny_llama_args' 2: the bar above was measured with it)
gpu_tiny_args 64 60000 --set seq_len=64 --set model.max_seq_len=64 --set model.rope_scaling=llama3 \
    --set model.rope_original_max_pos=16 --set model.rope_factor=4 --set model.attn_mask=document \
    --set model.eot_token=8 --set global_batch=4 --set max_duration=6ba --set save_interval=0ba \
    --set save_final=false --set optim.warmup=20ba --set watchdog.window=0 --set device=cuda
# run BIN DIR NP N ARGS...: output in DIR.txt
run() {
    local bin=$1 dir=$2 np=$3 n=$4; shift 4
    ranks "$np" "$bin" "${args[@]}" --set parallel.context="$n" \
        --set run_dir="$TMP/$dir" "$@" >"$TMP/$dir.txt" 2>&1
}
close() { metrics_close "$TMP/$1/metrics.jsonl" "$TMP/$2/metrics.jsonl" 1 2e-4 2e-3; }

# suite BIN LABEL: the checks on one backend
suite() {
    local bin=$1 l=$2 d
    if gpus 2 "$l: parallel.context = 2 and 2 x 2 with zero3"; then
        run "$bin" "$l.1" 1 1 && run "$bin" "$l.2" 2 2 && d=$(close "$l.1" "$l.2") &&
            grep -q "context parallelism: the ring over .* 2 ranks a group" "$TMP/$l.2.txt"
        tap_check $? "$l: parallel.context = 2: every step within 2e-4 (loss), 2e-3 (norm) of one rank's ($d), the ring over the context group's communicator"
    fi
    if gpus 4 "$l: 2 x 2 with zero3 and activation checkpointing"; then
        # the emulator's 4 ranks share one device through the host-staged transport: the ring's
        # shift and zero3's collectives staged (parallel.gpu_comm = mpi; a GPU node keeps NCCL)
        local staged=()
        [[ $l == emulator ]] && staged=(--set parallel.gpu_comm=mpi)
        run "$bin" "$l.z" 4 2 --set parallel.sharding=zero3 "${staged[@]}" \
            --set model.activation_checkpointing=block && d=$(close "$l.1" "$l.z") &&
            grep -q "^device memory per rank (cuda.*per microbatch of 2 x 64 (this rank's 32 positions of each)" "$TMP/$l.z.txt" &&
            { [[ -z ${staged[*]} ]] || grep -q "MPI staged through pinned host memory" "$TMP/$l.z.txt"; }
        tap_check $? "$l: data x context = 2 x 2 with zero3 and block activation checkpointing: every step within the tolerance of one rank's ($d); the device plan names the rank's 32 positions (the emulator: 4 ranks on one device, the ring and zero3 staged through host memory)"
    fi
}

both_halves "$PER" "" ""
tap_done
