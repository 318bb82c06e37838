#!/usr/bin/env bash
# parallel.gpu_comm = "mpi" (src/gpu/gpu_comm_staged.c: device -> pinned host copies on the
# communication stream, MPI on the host by one communication thread, copies back) on the CUDA
# emulator, against the emulator's direct transport (gpu_comm_mpi.c: MPI in place), which stands
# in for NCCL there; both sum in the same order, so every step must have the same bits:
#  - ddp on 2 ranks sharing one device (TSR_EMU_DEVICES=1) against 2 ranks on devices of their
#    own: the per-layer all-reduces; the banner names the fallback transport, the device line the
#    sharing; the same 2 ranks on one device with the default transport refused at start (NCCL
#    cannot share a GPU), naming parallel.gpu_comm, no run_dir;
#  - a MoE with parallel.expert = 2 under hsdp (2 x 2) on 4 ranks sharing one device, against 4
#    on devices of their own: the all-to-all-v of the expert exchange, hsdp's zero3 within the
#    groups (reduce-scatter, all-gather), the replicas' all-reduce, the group's and the replica
#    set's communicators, all through one communication thread;
#  - the memory plan divides the device among the ranks sharing it: on a device that holds the
#    plan once but not twice (TSR_EMU_MEM), one rank starts, two sharing it are refused at start,
#    each rank's share named.
# gpu_comm.h's ordering contract as the emulator can check it: a collective sees the compute
# stream's work queued before the call (the gradients, the packed units), the compute stream's
# later work sees the result where the contract says it waits (gpu_comm_wait before the norm and
# AdamW, at once after an all-to-all-v), and collectives on two communicators run in the order
# they were called on every rank (one thread per process): any of them broken changes the bits
# of some step or hangs the 4 ranks. What the emulator cannot show (its streams are synchronous:
# every copy and host function has run when its call returns): whether the events order the communication stream against the
# compute stream on a real GPU, and a staging buffer reused before its copy ran. The real
# backend's half (a GPU: tests/gpu/device.sh's `multirank` stage, docs/cuda.md "Several ranks on
# one GPU"), every rank on the one GPU with parallel.gpu_comm = mpi:
#  - a 2-rank run SIGKILLed after its step-10 checkpoint resumes at 1 rank and at 4 ranks: steps
#    11-20 within test_cuda_train.sh's GPU tolerance (0.5% loss, 5% norm) of the 2-rank run that
#    never stopped, and the run that never stopped within it of a 1-rank run.
# (TSR_TEST_STAGED_HALF=BIN runs that half with BIN, e.g. the emulator's trainer, where there is no
# GPU: how the half itself is checked here.)
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/gpu_lib.sh"
tsr_tmpdir
tap_plan 6
mpi_needed "the staged transport"
emulator_built
make_synth "$TMP/data" 512 60000
tiny_args "$TMP/data/train"
base=("${args[@]}" --set model.n_layer=2 --set model.n_head=2 --set global_batch=8
      --set micro_batch=2 --set max_duration=3ba --set save_interval=0ba --set device=cuda)
BIN=$EMU
run() { # run NP DIR ARGS...: $BIN (the emulator's trainer, or the real one), output in DIR.txt
    local np=$1 dir=$2; shift 2
    "${MPIRUN[@]}" -np "$np" "$BIN" "${base[@]}" --set run_dir="$TMP/$dir" "$@" >"$TMP/$dir.txt" 2>&1
}
# same A B: runs A and B logged the same 3 steps, loss, lr and gradient norm the same bits
same() {
    final_lines "$TMP/$1/metrics.jsonl" >"$TMP/$1.bits" && (($(wc -l <"$TMP/$1.bits") == 3)) &&
        final_lines "$TMP/$2/metrics.jsonl" | cmp -s - "$TMP/$1.bits"
}
staged='by MPI staged through pinned host memory (parallel.gpu_comm = "mpi": the fallback transport'

if emulator_half 4; then
run 2 ddp && TSR_EMU_DEVICES=1 run 2 ddp_mpi --set parallel.gpu_comm=mpi && same ddp ddp_mpi &&
    grep -q "^gradients: summed per layer during backward $staged" "$TMP/ddp_mpi.txt" &&
    grep -q '^device: .*(CUDA device 0, shared by 2 ranks: 4.00 GiB each)$' "$TMP/ddp_mpi.txt"
tap_check $? "ddp, 2 ranks sharing one device with parallel.gpu_comm = mpi: all 3 steps the bits of 2 ranks on their own devices with the direct transport; the banner names the fallback transport, the device line the sharing"

TSR_EMU_DEVICES=1 run 2 ddp_nccl
rc=$?
((rc == 1)) && [[ ! -e $TMP/ddp_nccl ]] &&
    grep -q 'rank 0 shares a node.s 1 GPU(s) with more ranks: NCCL needs one rank per GPU .*or set parallel.gpu_comm = "mpi" to share them' "$TMP/ddp_nccl.txt"
tap_check $? "2 ranks on one device with the default transport (nccl): refused at start naming parallel.gpu_comm, no run_dir (exit $rc, want 1)"

moe=(--set model.norm=rmsnorm --set model.pos=rope --set model.mlp=swiglu --set model.bias=false
     --set model.intermediate_size=96 --set model.moe_experts=4 --set model.moe_top_k=2
     --set model.moe_intermediate_size=48 --set model.moe_aux_loss_coef=0.01
     --set model.moe_z_loss_coef=0.001 --set parallel.expert=2 --set parallel.sharding=hsdp
     --set parallel.replica_group=2)
run 4 ep "${moe[@]}" && TSR_EMU_DEVICES=1 run 4 ep_mpi "${moe[@]}" --set parallel.gpu_comm=mpi && same ep ep_mpi &&
    grep -q "^experts: 2 per rank, rows exchanged within groups of 2 and gradients summed over 2 replicas $staged" "$TMP/ep_mpi.txt" &&
    grep -q '^device: .*(CUDA device 0, shared by 4 ranks: 2.00 GiB each)$' "$TMP/ep_mpi.txt"
tap_check $? "MoE, parallel.expert = 2 under hsdp 2 x 2 on 4 ranks sharing one device, parallel.gpu_comm = mpi: all 3 steps the bits of 4 ranks on their own devices with the direct transport (the exchange, zero3 in the groups, the replica sums, two communicators on one thread)"

# the plan (2.8 MiB here) fits a 4 MiB device once, not two halves of it
cap=$((4 << 20))
TSR_EMU_DEVICES=1 TSR_EMU_MEM=$cap run 1 one --set parallel.gpu_comm=mpi --set max_duration=1ba
rc1=$?
TSR_EMU_DEVICES=1 TSR_EMU_MEM=$cap run 2 two --set parallel.gpu_comm=mpi
rc2=$?
((rc1 == 0 && rc2 == 1)) && [[ ! -e $TMP/two ]] &&
    grep -q '^device: .*(CUDA device 0, shared by 2 ranks: .* GiB each)$' "$TMP/two.txt" &&
    grep -q 'the plan needs .* GiB per rank, .* GiB more than a rank has free: .*, fewer ranks per GPU or a smaller model' "$TMP/two.txt"
tap_check $? "a device of $cap bytes: the plan fits one rank (exit $rc1, want 0), not two sharing it (exit $rc2, want 1: refused at start, each rank's share named, no run_dir)"
emulator_half_end
fi

# The real backend's half: SIGKILL of a 2-rank run on one GPU, resumed at 1 and 4 ranks
half=${TSR_TEST_STAGED_HALF:-}
if [[ -z $half ]]; then
    real_backend
    [[ -z $why ]] && half=$TRAIN
fi
if [[ -n $half ]]; then
    BIN=$half
    LOSS_TOL=5e-3 NORM_TOL=5e-2
    long=(--set parallel.gpu_comm=mpi --set max_duration=20ba --set save_interval=5ba)
    # killed DIR: a 2-rank run SIGKILLed (mpirun and its ranks) once its step-10 checkpoint is
    # the latest; 0 when it was killed there
    killed() {
        "${MPIRUN[@]}" -np 2 "$BIN" "${base[@]}" "${long[@]}" --set run_dir="$TMP/$1" >"$TMP/$1.txt" 2>&1 &
        local pid=$! i
        for ((i = 0; i < 1200; i++)); do
            grep -qs 'step-00000010.h5' "$TMP/$1/latest" && break
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        pkill -KILL -P "$pid" 2>/dev/null; kill -KILL "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
        grep -qs 'step-00000010.h5' "$TMP/$1/latest" && ! grep -q '^step 20/20' "$TMP/$1.txt"
    }
    d=""
    run 2 k_ref "${long[@]}" && run 1 k_one "${long[@]}" && d="1 rank: $(metrics_close "$TMP/k_one/metrics.jsonl" "$TMP/k_ref/metrics.jsonl" 1 "$LOSS_TOL" "$NORM_TOL")"
    tap_check $? "$(basename "$BIN"), parallel.gpu_comm = mpi: 2 ranks on one GPU, 20 steps, within $LOSS_TOL of 1 rank ($d)"
    d=""
    killed k_kill && cp -r "$TMP/k_kill" "$TMP/k_r1" && cp -r "$TMP/k_kill" "$TMP/k_r4" &&
        run 1 k_r1 "${long[@]}" && run 4 k_r4 "${long[@]}" &&
        grep -q 'resume' "$TMP/k_r1.txt" && grep -q 'resume' "$TMP/k_r4.txt" &&
        d="at 1: $(metrics_close "$TMP/k_ref/metrics.jsonl" "$TMP/k_r1/metrics.jsonl" 11 "$LOSS_TOL" "$NORM_TOL"); at 4: $(metrics_close "$TMP/k_ref/metrics.jsonl" "$TMP/k_r4/metrics.jsonl" 11 "$LOSS_TOL" "$NORM_TOL")" &&
        metrics_close "$TMP/k_ref/metrics.jsonl" "$TMP/k_r1/metrics.jsonl" 11 "$LOSS_TOL" "$NORM_TOL" >/dev/null &&
        metrics_close "$TMP/k_ref/metrics.jsonl" "$TMP/k_r4/metrics.jsonl" 11 "$LOSS_TOL" "$NORM_TOL" >/dev/null
    tap_check $? "$(basename "$BIN"), parallel.gpu_comm = mpi: a 2-rank run SIGKILLed after its step-10 checkpoint resumes at 1 and at 4 ranks, steps 11-20 within $LOSS_TOL of the run that never stopped ($d)"
else
    tap_skip "2 ranks on one GPU against 1 rank" "$why"
    tap_skip "a 2-rank run on one GPU SIGKILLed, resumed at 1 and 4 ranks" "$why"
fi
tap_done
