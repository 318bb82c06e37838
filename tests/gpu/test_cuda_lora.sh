#!/usr/bin/env bash
# LoRA with device = cuda (docs/lora.md, "On the GPU"), against the CPU backend's LoRA run: a
# tiny Llama base (RMSNorm, RoPE, SwiGLU, GQA 2:1, head size 32) trained on the CPU, then adapters
# on all seven targets (q, k, v, o, gate, up, down) with lora.dropout 0.1:
#  - one rank: every step's loss and gradient norm within the tolerance of the CPU run (the
#    dropout masks are computed on the device from the CPU's hash: a different mask moves the
#    gradients by far more); the device plan names the frozen bf16 base, and the device
#    allocator's peak stays within it;
#  - the base stays the base: its checkpoint file is the same bytes after the runs, the GPU
#    run's checkpoints hold the 14 adapters and their moments only, and name the base's checksum,
#    the same as the CPU run's;
#  - 2 ranks (ddp; zero1, which is the same under LoRA): every step within the tolerance of the
#    CPU's 1-rank run (the adapters' gradients summed over the ranks);
#  - the base sharded: zero3 on 2 ranks and hsdp on 2 x 2 (a frozen bf16 shard gathered unit by
#    unit) within the tolerance of the CPU's 1-rank run, zero3's peak memory within its plan;
#  - a checkpoint of the GPU run at step 6 resumed on the CPU, and one of the CPU run resumed
#    with device = cuda: steps 7-12 within the tolerance of the CPU run that never stopped;
#  - evaluation on the device (with the adapters, no dropout) within the tolerance of the CPU's,
#    and the end-of-run sample runs; block activation checkpointing (the adapter path recomputed
#    with the same masks) gives every step the same bits as none;
#  - a mixture-of-experts base (4 experts, top 2) with adapters on the attention targets:
#    every step within the tolerance of the CPU;
#  - without a GPU, the real library still loads for a LoRA run (the lora_* functions it calls
#    are exported by tessera-train: src/gpu/exports.list) and reports no CUDA device.
# It runs on the host emulator of the CUDA backend (build/tests/tessera-train-cuemu: the
# trainer's GPU path with bf16 activations and the frozen bf16 base, not the CUDA kernels) and
# again on the real backend when a GPU is present (skipped loudly otherwise), with the
# tolerances of tests/gpu/test_cuda_train.sh.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/gpu_lib.sh"
tsr_tmpdir
PER=9
tap_plan $((2 * PER + 2))
gpu_llama_args 12 6
lora=(--set lora.rank=4 --set lora.alpha=8 --set lora.dropout=0.1 --set optim.lr=1e-2)
moe=(--set model.moe_experts=4 --set model.moe_top_k=2 --set model.moe_intermediate_size=64)
mlora=("${lora[@]}" --set lora.targets=q,k,v,o --init-from "$TMP/mbase" "${moe[@]}")
# train BIN DIR NP ARGS...: output in DIR.txt
train() {
    local bin=$1 dir=$2 np=$3; shift 3
    ranks "$np" "$bin" "${args[@]}" --set run_dir="$TMP/$dir" "$@" >"$TMP/$dir.txt" 2>&1
}
# run BIN DIR NP ARGS...: a LoRA run over the base
run() { local bin=$1 dir=$2 np=$3; shift 3; train "$bin" "$dir" "$np" "${lora[@]}" --init-from "$TMP/base" "$@"; }
# close A B FROM: every step of B from FROM within $LOSS_TOL (loss) and $NORM_TOL (norm) of A's
close() { metrics_close "$TMP/$1/metrics.jsonl" "$TMP/$2/metrics.jsonl" "$3" "$LOSS_TOL" "$NORM_TOL"; }
# adapters_only CKPT CONFIG: the checkpoint's tensor table (tessera ckpt inspect: no h5py, which
# the lent GPU machine lacks) holds the 14 adapters and their moments, nothing of the base;
# prints the config's base checksum
adapters_only() {
    "$TOOL" ckpt inspect "$1" >"$TMP/inspect.txt" 2>&1 || return 1
    "$PY3" - "$TMP/inspect.txt" "$2" <<'PY'
import re, sys
t = open(sys.argv[1]).read().split("\ntensors (", 1)
names = {l.split()[0] for l in t[1].splitlines()[2:] if l.strip()} if len(t) == 2 else set()
want = {f"{p}lora/{n}_{ab}" for p in ("", "optim/m/", "optim/v/")
        for n in ("q", "k", "v", "o", "gate", "up", "down") for ab in "AB"}
crc = re.search(r'base_checksum = "(crc32c:[0-9a-f]{8})"', open(sys.argv[2]).read())
print(crc.group(1) if crc else "none")
sys.exit(0 if names == want and crc else 1)
PY
}

ev=(--set data.val="$TMP/data/val" --set eval_interval=6ba --set eval_samples=16 --set sample.tokens=8)

MPI_OK=0
mpi_ok "$TRAIN" && MPI_OK=1
train "$TRAIN" base 1 && run "$TRAIN" cpu 1 && run "$TRAIN" cpu_ev 1 "${ev[@]}" &&
    train "$TRAIN" mbase 1 "${moe[@]}" && train "$TRAIN" cpu_moe 1 "${mlora[@]}"
tap_check $? "CPU: the bases (tiny Llama, and with 4 experts) and the LoRA reference runs (all seven targets, dropout 0.1; one with evaluation; attention targets on the MoE)"
sum0=$(sha256sum <"$TMP/base/step-00000012.h5")
crc_cpu=$(adapters_only "$TMP/cpu/step-00000012.h5" "$TMP/cpu/config.cfg")

# suite BIN LABEL LOSS_TOL NORM_TOL MEM_SLACK: the checks on one backend
suite() {
    local bin=$1 l=$2 d crc
    LOSS_TOL=$3 NORM_TOL=$4 MEM_SLACK=$5
    run "$bin" "$l.g1" 1 --set device=cuda && d=$(close cpu "$l.g1" 1) &&
        grep -q "gradients: the adapters', summed once after the backward pass, by" "$TMP/$l.g1.txt"
    tap_check $? "$l: LoRA on one GPU: every step within $LOSS_TOL (loss) and $NORM_TOL (norm) of the CPU's LoRA run ($d)"
    d=$(peak_in_plan "$l.g1" "$MEM_SLACK" lora)
    tap_check $? "$l: the device plan names the frozen bf16 base and the adapters; peak_mem_bytes within it ($d; slack $MEM_SLACK B)"
    crc=$(adapters_only "$TMP/$l.g1/step-00000012.h5" "$TMP/$l.g1/config.cfg") &&
        [[ $crc == "$crc_cpu" && $(sha256sum <"$TMP/base/step-00000012.h5") == "$sum0" ]]
    tap_check $? "$l: the GPU run's checkpoint holds the adapters and their moments only and names the base's $crc (the CPU run's: $crc_cpu); the base file unchanged"
    run "$bin" "$l.ev" 1 --set device=cuda "${ev[@]}" && d=$(evals_close cpu_ev "$l.ev") &&
        grep -q "^sample (8 tokens" "$TMP/$l.ev.txt" &&
        run "$bin" "$l.ac" 1 --set device=cuda --set model.activation_checkpointing=block &&
        cmp -s <(final_lines "$TMP/$l.g1/metrics.jsonl") <(final_lines "$TMP/$l.ac/metrics.jsonl")
    tap_check $? "$l: evaluation on the device within $LOSS_TOL of the CPU's ($d), the sample runs; block activation checkpointing: every step the same bits as none"
    train "$bin" "$l.moe" 1 "${mlora[@]}" --set device=cuda && d=$(close cpu_moe "$l.moe" 1)
    tap_check $? "$l: LoRA on the attention targets of a mixture-of-experts base: every step within the tolerance of the CPU ($d)"
    if gpus 2 "$l: LoRA on 2 ranks"; then
        run "$bin" "$l.g2" 2 --set device=cuda && d=$(close cpu "$l.g2" 1) &&
            run "$bin" "$l.z2" 2 --set device=cuda --set parallel.sharding=zero1 &&
            d="$d; zero1: $(close cpu "$l.z2" 1)"
        tap_check $? "$l: LoRA on 2 ranks (ddp, and zero1): every step within the tolerance of the CPU's 1-rank run ($d)"
    fi
    if gpus 4 "$l: LoRA over a sharded base (zero3 on 2, hsdp on 2 x 2)"; then
        run "$bin" "$l.z3" 2 --set device=cuda --set parallel.sharding=zero3 &&
            d=$(close cpu "$l.z3" 1) && d="$d; $(peak_in_plan "$l.z3" "$MEM_SLACK" lora)" &&
            run "$bin" "$l.hsdp" 4 --set device=cuda --set parallel.sharding=hsdp \
                --set parallel.replica_group=2 && d="$d; hsdp: $(close cpu "$l.hsdp" 1)"
        tap_check $? "$l: LoRA over a sharded frozen base, zero3 on 2 ranks and hsdp on 2 x 2: every step within the tolerance of the CPU's 1-rank run, zero3's peak within its plan ($d)"
    fi
    run "$TRAIN" "$l.g2c" 1 --resume "$TMP/$l.g1/step-00000006.h5" &&
        grep -q "resume" "$TMP/$l.g2c.txt" && d=$(close cpu "$l.g2c" 7)
    tap_check $? "$l: the GPU run's step-6 checkpoint resumed on the CPU: steps 7-12 within the tolerance ($d)"
    run "$bin" "$l.c2g" 1 --set device=cuda --resume "$TMP/cpu/step-00000006.h5" &&
        grep -q "resume" "$TMP/$l.c2g.txt" && d=$(close cpu "$l.c2g" 7)
    tap_check $? "$l: the CPU run's step-6 checkpoint resumed with device = cuda: steps 7-12 within the tolerance ($d)"
}

# The emulator: losses as test_cuda_train.sh's (3e-4); the norm at its Llama block's twice
# 5e-3 doubled again: the frozen base is bf16 here (the CPU's is fp32) and lr = 1e-2 on the
# adapters moves the norm faster (measured 9.2e-3 at step 6, loss 7e-5)
if emulator_half "$PER"; then
    GPUS=$((MPI_OK ? 8 : 1))
    suite "$BUILD/tests/tessera-train-cuemu" emulator 3e-4 2e-2 0
    emulator_half_end
fi

# the real backend: a GPU, its driver and the library built beside tessera-train; the issue's 0.5%
# on the loss, test_cuda_train.sh's 5e-2 on the norm; the plan leaves out the 32 MiB cuBLASLt
# workspace and the ops' scratch
if ! real_half 5e-3 5e-2 $((64 << 20)); then
    without_gpu "loads for a LoRA run and reports no CUDA device" "$PER" run "$TRAIN" nodev 1 --set device=cuda
fi
tap_done
