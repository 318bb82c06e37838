#!/usr/bin/env bash
# optim.name = muon with device = cuda (docs/training.md "Muon", src/gpu/gpu_train.c muon_update):
# the momentum in fp32 on the device, the Newton-Schulz products through the backend's bf16
# matmul (tcu_matmul_forward / tcu_matmul_backward), the element-wise steps of cuda_muon.cu.
# Against the CPU's fp32 Muon on the same runs (a tiny Llama: GQA's q, k, v and SwiGLU's gate and
# up each a matrix of their own; 8 steps):
#  - one GPU: every step's loss and gradient norm within the tolerance of the CPU's Muon run,
#    and farther than that from the same run on AdamW (so the device ran Muon, not AdamW);
#  - 2 ranks (ddp): within the tolerance of the CPU's 1-rank run;
#  - the GPU run's step-4 checkpoint (the momentum in optim/m) resumed on the CPU, and the CPU's
#    resumed on the GPU: steps 5-8 within the tolerance;
#  - zero1 / zero3 / hsdp with device = cuda are refused at start (exit 1, nothing written).
# It runs twice, as test_cuda_train.sh: on the host emulator of the CUDA backend (the trainer's GPU
# path, bf16 products and all, not the CUDA kernels) and on the real backend when a GPU is present
# (skipped loudly otherwise).
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/gpu_lib.sh"
tsr_tmpdir
PER=4
tap_plan $((2 * PER + 2))
make_synth "$TMP/data"
tiny_llama_args "$TMP/data/train"
args+=(--set model.n_head=2 --set model.n_kv_head=1 --set max_duration=8ba --set save_interval=4ba
       --set watchdog.window=0)
mu=(--set optim.name=muon --set optim.muon.weight_decay=0.1)
run() {
    local bin=$1 dir=$2 np=$3; shift 3
    "${MPIRUN[@]}" -np "$np" "$bin" "${args[@]}" --set run_dir="$TMP/$dir" "$@" >"$TMP/$dir.txt" 2>&1
}
close() { metrics_close "$TMP/$1/metrics.jsonl" "$TMP/$2/metrics.jsonl" "$3" "$LOSS_TOL" "$NORM_TOL"; }

MPI_OK=0
mpi_ok "$TRAIN" && MPI_OK=1
run "$TRAIN" cpu 1 "${mu[@]}" && run "$TRAIN" cpu_adamw 1
tap_check $? "CPU: the Muon reference run and the same run on AdamW"

suite() {
    local bin=$1 l=$2 d="" e=""
    LOSS_TOL=$3 NORM_TOL=$4
    local near far
    run "$bin" "$l.g1" 1 --set device=cuda "${mu[@]}" && d=$(close cpu "$l.g1" 1)
    near=$?
    e=$(close cpu_adamw "$l.g1" 1)
    far=$?
    ((near == 0 && far != 0))
    tap_check $? "$l: Muon on one GPU: every step within $LOSS_TOL (loss) and $NORM_TOL (norm) of the CPU's Muon run ($d); not the AdamW run's ($e)"
    if gpus 2 "$l: Muon on 2 ranks"; then
        run "$bin" "$l.g2" 2 --set device=cuda "${mu[@]}" && d=$(close cpu "$l.g2" 1)
        tap_check $? "$l: Muon on 2 ranks (ddp): every step within the tolerance of the CPU's 1-rank run ($d)"
    fi
    run "$TRAIN" "$l.g2c" 1 "${mu[@]}" --resume "$TMP/$l.g1/step-00000004.h5" &&
        grep -q "resume" "$TMP/$l.g2c.txt" && d=$(close cpu "$l.g2c" 5)
    tap_check $? "$l: the GPU run's step-4 checkpoint (weights, momentum) resumed on the CPU: steps 5-8 within the tolerance ($d)"
    run "$bin" "$l.c2g" 1 --set device=cuda "${mu[@]}" --resume "$TMP/cpu/step-00000004.h5" &&
        grep -q "resume" "$TMP/$l.c2g.txt" && d=$(close cpu "$l.c2g" 5)
    tap_check $? "$l: the CPU run's step-4 checkpoint resumed with device = cuda: steps 5-8 within the tolerance ($d)"
}

"$TRAIN" "${args[@]}" "${mu[@]}" --set run_dir="$TMP/z3" --set device=cuda \
    --set parallel.sharding=zero3 >"$TMP/z3.txt" 2>&1
rc=$?
((rc == 1)) && [[ ! -e $TMP/z3 ]] && grep -q 'runs under parallel.sharding = "ddp" only' "$TMP/z3.txt"
tap_check $? "Muon with device = cuda under zero3: refused at start (exit $rc), nothing written"

if emulator_half "$PER"; then
    GPUS=$((MPI_OK ? 8 : 1))
    # bf16 products and weights against the CPU's fp32: test_cuda_lora.sh's emulator tolerances
    suite "$BUILD/tests/tessera-train-cuemu" emulator 3e-4 2e-2
    emulator_half_end
fi

real_backend
if [[ -z $why ]]; then
    ((MPI_OK)) || GPUS=1
    suite "$TRAIN" cuda 5e-3 5e-2
else
    for ((i = 0; i < PER; i++)); do
        _tap_n=$((_tap_n + 1)); echo "ok $_tap_n - cuda check $((i + 1)) of $PER # SKIP $why"
    done
fi
tap_done
