#!/usr/bin/env bash
# optim.name = muon with device = cuda in every sharding mode (docs/training.md "Muon",
# src/gpu/gpu_muon.h): the momentum in fp32 on the device, the Newton-Schulz products through the
# backend's bf16 matmul (tcu_matmul_forward / tcu_matmul_backward), the element-wise steps of
# cuda_muon.cu; under zero1, zero3 and hsdp the owners' exchange of the CPU's plan (two
# all-to-all-v), under parallel.expert the experts' store on every rank that holds it. A tiny
# Llama mixture of experts (GQA's q, k and v, the dense layer's and the shared expert's gate and
# up, each expert's projections and the router each a matrix of its own; 8 steps), against the
# CPU's fp32 Muon on the same runs:
#  - one GPU: every step's loss and gradient norm within the tolerance of the CPU's Muon run,
#    and farther than that from the same run on AdamW (so the device ran Muon, not AdamW);
#  - 2 ranks: ddp, zero1 and zero3, each mode within the CPU run's tolerance and zero1 / zero3
#    within the CUDA sharding tests' tolerance of the device's ddp (test_cuda_train.sh);
#  - 4 ranks: hsdp 2 x 2 with parallel.expert = 2 and zero3 with parallel.expert = 4, the same;
#    zero3's exchange sent the formula's bytes each step (the CPU's muon_plan_step_bytes); the
#    device allocator's peak within the device plan, which counts Muon's buffers;
#  - checkpoints across devices, modes and rank counts: the GPU's step-4 checkpoint (the momentum
#    in optim/m) resumed on the CPU and the CPU's on the GPU; the GPU's zero3 checkpoint of 4
#    ranks (parallel.expert = 4) resumed by ddp on 2 CPU ranks: steps 5-8 within the tolerance.
# It runs twice, as test_cuda_train.sh: on the host emulator of the CUDA backend (the trainer's GPU
# path, bf16 products and all, not the CUDA kernels) and on the real backend when a GPU is present
# (skipped loudly otherwise).
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/gpu_lib.sh"
tsr_tmpdir
PER=8
tap_plan $((2 * PER + 1))
gpu_llama_args 8 4 --set watchdog.window=0 --set model.moe_experts=4 --set model.moe_top_k=2 \
    --set model.moe_intermediate_size=32 --set model.moe_every=2 --set model.moe_shared_size=32
mu=(--set optim.name=muon --set optim.muon.weight_decay=0.1)
run() {
    local bin=$1 dir=$2 np=$3; shift 3
    ranks "$np" "$bin" "${args[@]}" --set run_dir="$TMP/$dir" "$@" >"$TMP/$dir.txt" 2>&1
}
close() { metrics_close "$TMP/$1/metrics.jsonl" "$TMP/$2/metrics.jsonl" "$3" "$LOSS_TOL" "$NORM_TOL"; }
# modes REF LABELS...: each run within the tolerance of the CPU's Muon run and, the sharded ones,
# within the CUDA sharding tests' of the device's ddp run REF; prints the differences
modes() {
    local ref=$1 r ok=0 a b
    shift
    for r in "$@"; do
        a=$(close cpu "$r" 1) || ok=1
        b=$(metrics_close "$TMP/$ref/metrics.jsonl" "$TMP/$r/metrics.jsonl" 1 "$SHARD_LOSS_TOL" \
            "$SHARD_NORM_TOL") || ok=1
        printf '%s: CPU %s; ddp %s. ' "${r##*.}" "$a" "$b"
    done
    return $ok
}
# exchanged RUN: the bytes the ranks counted in the owners' exchange = the formula's x steps x
# groups (and some were sent)
exchanged() {
    local line
    line=$(grep "muon exchange:" "$TMP/$1.txt")
    [[ $line =~ ^muon\ exchange:\ ([0-9]+)\ bytes.*\ ([0-9]+)\ steps.*formula:\ ([0-9]+)\ per\ step.*\ ([0-9]+)\ groups ]] &&
        ((BASH_REMATCH[1] == BASH_REMATCH[3] * BASH_REMATCH[2] * BASH_REMATCH[4] && BASH_REMATCH[1] > 0))
}

MPI_OK=0
mpi_ok "$TRAIN" && MPI_OK=1
run "$TRAIN" cpu 1 "${mu[@]}" && run "$TRAIN" cpu_adamw 1
tap_check $? "CPU: the Muon reference run and the same run on AdamW"

# suite BIN LABEL LOSS_TOL NORM_TOL MEM_SLACK: the PER checks on one backend (tolerances against
# the CPU's fp32; the sharded modes against the device's ddp within test_cuda_train.sh's)
suite() {
    local bin=$1 l=$2 d="" e=""
    LOSS_TOL=$3 NORM_TOL=$4 SHARD_LOSS_TOL=$3 SHARD_NORM_TOL=$5
    local slack=$6 near far gpu=(--set device=cuda "${mu[@]}")
    run "$bin" "$l.g1" 1 "${gpu[@]}" && d=$(close cpu "$l.g1" 1)
    near=$?
    e=$(close cpu_adamw "$l.g1" 1)
    far=$?
    ((near == 0 && far != 0))
    tap_check $? "$l: Muon on one GPU: every step within $LOSS_TOL (loss) and $NORM_TOL (norm) of the CPU's Muon run ($d); not the AdamW run's ($e)"
    run "$TRAIN" "$l.g2c" 1 "${mu[@]}" --resume "$TMP/$l.g1/step-00000004.h5" &&
        grep -q "resume" "$TMP/$l.g2c.txt" && d=$(close cpu "$l.g2c" 5)
    tap_check $? "$l: the GPU run's step-4 checkpoint (weights, momentum) resumed on the CPU: steps 5-8 within the tolerance ($d)"
    run "$bin" "$l.c2g" 1 "${gpu[@]}" --resume "$TMP/cpu/step-00000004.h5" &&
        grep -q "resume" "$TMP/$l.c2g.txt" && d=$(close cpu "$l.c2g" 5)
    tap_check $? "$l: the CPU run's step-4 checkpoint resumed with device = cuda: steps 5-8 within the tolerance ($d)"
    if gpus 2 "$l: Muon on 2 ranks under ddp, zero1 and zero3"; then
        run "$bin" "$l.ddp" 2 "${gpu[@]}" &&
            run "$bin" "$l.zero1" 2 "${gpu[@]}" --set parallel.sharding=zero1 &&
            run "$bin" "$l.zero3" 2 "${gpu[@]}" --set parallel.sharding=zero3 &&
            d=$(modes "$l.ddp" "$l.ddp" "$l.zero1" "$l.zero3")
        tap_check $? "$l: 2 ranks, ddp, zero1 and zero3: within the CPU run's tolerance, the sharded within $SHARD_LOSS_TOL (loss) and $SHARD_NORM_TOL (norm) of the device's ddp ($d)"
    fi
    if ! gpus 4 "$l: Muon on 4 ranks: hsdp and zero3 with expert parallelism"; then
        for d in exchange "peak within the plan" "zero3 to the CPU's ddp"; do
            _tap_n=$((_tap_n + 1)); echo "ok $_tap_n - $l: 4 ranks: $d # SKIP needs 4 GPUs"
        done
    else
        run "$bin" "$l.hsdp" 4 "${gpu[@]}" --set parallel.sharding=hsdp \
            --set parallel.replica_group=2 --set parallel.expert=2 &&
            run "$bin" "$l.z3ep" 4 "${gpu[@]}" --set parallel.sharding=zero3 --set parallel.expert=4 &&
            grep -q "into hsdp shards (groups of 2)" "$TMP/$l.hsdp.txt" &&
            d=$(modes "$l.ddp" "$l.hsdp" "$l.z3ep")
        tap_check $? "$l: 4 ranks, hsdp 2 x 2 with parallel.expert = 2 and zero3 with parallel.expert = 4: the same tolerances ($d)"
        exchanged "$l.z3ep" && exchanged "$l.hsdp"
        tap_check $? "$l: the owners' exchange sent the formula's bytes each step (zero3 on 4: $(grep -o 'muon exchange: [0-9]* bytes' "$TMP/$l.z3ep.txt"); hsdp: $(grep -o 'muon exchange: [0-9]* bytes' "$TMP/$l.hsdp.txt"))"
        d=$(peak_in_plan "$l.z3ep" "$slack" "zero3") && grep -q "Muon [0-9.]* [KM]iB (the iteration, the owned matrices and the exchange)" "$TMP/$l.z3ep.txt"
        tap_check $? "$l: zero3: the device's peak within the device plan, Muon's buffers in it ($d)"
        run "$TRAIN" "$l.z3cpu" 2 "${mu[@]}" --resume "$TMP/$l.z3ep/step-00000004.h5" &&
            grep -q "resume" "$TMP/$l.z3cpu.txt" && d=$(close cpu "$l.z3cpu" 5)
        tap_check $? "$l: the GPU's zero3 checkpoint of 4 ranks (parallel.expert = 4) resumed by ddp on 2 CPU ranks: steps 5-8 within the tolerance ($d)"
    fi
}

if emulator_half "$PER"; then
    GPUS=$((MPI_OK ? 8 : 1))
    # bf16 products and weights against the CPU's fp32: test_cuda_lora.sh's emulator tolerances;
    # the sharded modes against the device's ddp: test_cuda_train.sh's (3e-4, 5e-3)
    suite "$BUILD/tests/tessera-train-cuemu" emulator 3e-4 2e-2 5e-3 0
    emulator_half_end
fi

real_backend
if [[ -z $why ]]; then
    ((MPI_OK)) || GPUS=1
    suite "$TRAIN" cuda 5e-3 5e-2 5e-2 $((64 << 20))
else
    for ((i = 0; i < PER; i++)); do
        _tap_n=$((_tap_n + 1)); echo "ok $_tap_n - cuda check $((i + 1)) of $PER # SKIP $why"
    done
fi
tap_done
