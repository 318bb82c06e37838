#!/usr/bin/env bash
# device = cuda through the trainer (docs/cuda.md), against the CPU backend on the same runs:
#  - a tiny GPT-2 (learned positions, biases, tanh GELU) and a tiny MPT (ALiBi, no biases, exact
#    GELU, document mask): the loss of step 1 and of each of 20 steps within 0.5% of the CPU run's;
#  - 2 ranks with gradient accumulation (the per-layer gradient sums during backward);
#  - a checkpoint written by the GPU run resumes on the CPU, and one written on the CPU resumes on
#    the GPU: the next steps within 0.5% of the CPU run that never stopped;
#  - what device = cuda does not do yet (zero3, activation checkpointing) is refused at start
#    naming the key; a missing CUDA library is refused naming it (once, on tessera-train).
# It runs twice: on the host emulator of the CUDA backend (build/tests/tessera-train-cuemu,
# kernels/cuda_emu/: every machine; it checks the trainer's GPU path, bf16 activations and all,
# not the CUDA kernels) and on the real backend when a GPU is present (skipped loudly otherwise).
source "$(dirname "$0")/lib.sh"
tsr_tmpdir
PER=9
tap_plan $((2 * PER + 4))
make_synth "$TMP/data" 512 80000

tiny_args "$TMP/data/train"
base=("${args[@]}" --set model.n_layer=2 --set model.n_head=2 --set global_batch=8
      --set micro_batch=4 --set model.eot_token=7 --set max_duration=20ba --set save_interval=10ba)
mpt=(--set model.pos=alibi --set model.bias=false --set model.gelu=exact
     --set model.attn_mask=document)
# run BIN NP DIR ARGS...: trains, output in DIR.txt
run() {
    local bin=$1 np=$2 dir=$3; shift 3
    "${MPIRUN[@]}" -np "$np" "$bin" "${base[@]}" --set run_dir="$TMP/$dir" "$@" >"$TMP/$dir.txt" 2>&1
}
# close A B FROM: every step of run B from FROM has its loss within $LOSS_TOL (relative) of run
# A's and its gradient norm within $NORM_TOL; prints the largest differences
close() { metrics_close "$TMP/$1/metrics.jsonl" "$TMP/$2/metrics.jsonl" "$3" "$LOSS_TOL" "$NORM_TOL"; }

# the CPU reference runs, shared by both suites (each keeps its step-10 checkpoint)
run "$TRAIN" 1 cpu_gpt2 && run "$TRAIN" 1 cpu_mpt "${mpt[@]}" && run "$TRAIN" 2 cpu_ddp --set micro_batch=2
tap_check $? "CPU reference runs: GPT-2, MPT, 2 ranks"
TESSERA_CUDA_LIB=$TMP/nowhere.so run "$TRAIN" 1 nolib --set device=cuda
rc=$?
((rc == 1)) && grep -q "cannot load $TMP/nowhere.so" "$TMP/nolib.txt"
tap_check $? "device = cuda without its library: exit $rc (want 1), naming the library"

# suite BIN LABEL: the checks on one backend
suite() {
    local bin=$1 l=$2 d
    LOSS_TOL=$3 NORM_TOL=$4
    run "$bin" 1 "$l.gpt2" --set device=cuda
    tap_check $? "$l: tiny GPT-2, 20 steps with device = cuda"
    grep -q "device memory per rank (cuda" "$TMP/$l.gpt2.txt" && grep -q "^device: " "$TMP/$l.gpt2.txt"
    tap_check $? "$l: the device memory plan and the device are printed"
    d=$(close cpu_gpt2 "$l.gpt2" 1)
    tap_check $? "$l: GPT-2 loss within $LOSS_TOL of the CPU at every step ($d)"
    run "$bin" 1 "$l.mpt" --set device=cuda "${mpt[@]}" && d=$(close cpu_mpt "$l.mpt" 1)
    tap_check $? "$l: tiny MPT (ALiBi, no bias, exact GELU, document mask) within $LOSS_TOL of the CPU ($d)"
    run "$bin" 2 "$l.ddp" --set device=cuda --set micro_batch=2 && d=$(close cpu_ddp "$l.ddp" 1)
    tap_check $? "$l: 2 ranks, 2 microbatches each: within $LOSS_TOL of the CPU's 2 ranks ($d)"
    # GPU -> CPU: the GPU run's step-10 checkpoint, resumed on the CPU to step 20
    run "$TRAIN" 1 "$l.g2c" --resume "$TMP/$l.gpt2/step-00000010.h5" &&
        grep -q "resume" "$TMP/$l.g2c.txt" && d=$(close cpu_gpt2 "$l.g2c" 11)
    tap_check $? "$l: checkpoint of the GPU run at step 10 resumed on the CPU: steps 11-20 within $LOSS_TOL ($d)"
    # CPU -> GPU
    run "$bin" 1 "$l.c2g" --set device=cuda --resume "$TMP/cpu_gpt2/step-00000010.h5" &&
        grep -q "resume" "$TMP/$l.c2g.txt" && d=$(close cpu_gpt2 "$l.c2g" 11)
    tap_check $? "$l: a CPU checkpoint at step 10 resumed with device = cuda: steps 11-20 within $LOSS_TOL ($d)"
    run "$bin" 1 "$l.z3" --set device=cuda --set parallel.sharding=zero3
    local rc=$?
    ((rc == 1)) && grep -q 'device = "cuda".*(parallel.sharding)' "$TMP/$l.z3.txt"
    tap_check $? "$l: parallel.sharding = zero3 with device = cuda refused (exit $rc, want 1) naming the key"
    run "$bin" 1 "$l.ac" --set device=cuda --set model.activation_checkpointing=block
    rc=$?
    ((rc == 1)) && grep -q '(model.activation_checkpointing)' "$TMP/$l.ac.txt"
    tap_check $? "$l: activation checkpointing with device = cuda refused (exit $rc, want 1) naming the key"
}

# The emulator computes each op in fp32 and rounds where the GPU rounds, so it stays far closer to
# the CPU than the issue's 0.5% (measured: loss 6e-5, norm 4e-4): its tolerances are tight enough
# that a dropped gradient term (wpe's: loss 9e-4 off) fails. The GPU gets the issue's 0.5% on the
# loss, 5% on the gradient norm.
suite "$BUILD/tests/tessera-train-cuemu" emulator 3e-4 3e-3

# micro_batch = auto on a device that holds the activations of 2 sequences but not of 4: the
# emulator's capacity (TSR_EMU_MEM) set between the two from the plan the GPT-2 run printed
cap=$(/usr/bin/python3 - "$TMP/emulator.gpt2.txt" <<'PY'
import re, sys
t = open(sys.argv[1]).read()
u = lambda v, s: float(v) * 1024 ** ["B", "KiB", "MiB", "GiB"].index(s)
a = re.search(r"device memory per rank.*activations ([0-9.]+) (\w+) per microbatch of 4 x.*total ([0-9.]+) (\w+)", t)
print(int(u(a.group(3), a.group(4)) - u(a.group(1), a.group(2)) / 4) if a else 0)
PY
)
TSR_EMU_MEM=$cap run "$BUILD/tests/tessera-train-cuemu" 1 auto --set device=cuda --set micro_batch=auto &&
    run "$BUILD/tests/tessera-train-cuemu" 1 micro2 --set device=cuda --set micro_batch=2 &&
    grep -q '"event": "micro_batch"' "$TMP/auto/metrics.jsonl" &&
    final_lines "$TMP/auto/metrics.jsonl" >"$TMP/auto.loss" &&
    final_lines "$TMP/micro2/metrics.jsonl" >"$TMP/micro2.loss" && cmp -s "$TMP/auto.loss" "$TMP/micro2.loss" &&
    grep -E '"event": "micro_batch"' "$TMP/auto/metrics.jsonl" | tail -1 | grep -q '"micro_batch": 2'
tap_check $? "emulator: micro_batch = auto with room for 2 sequences ($cap bytes) halves 8 -> 4 -> 2 and all 20 steps equal micro_batch = 2 bit for bit"

# the real backend: a GPU, its driver and the library built beside tessera-train
why=""
[[ -f $BUILD/libtessera-cuda-train.so ]] || why="no $BUILD/libtessera-cuda-train.so (built where nvcc is)"
[[ -z $why && ! -e /dev/nvidiactl ]] && why="no GPU on this machine (no /dev/nvidiactl)"
if [[ -z $why ]]; then
    suite "$TRAIN" cuda 5e-3 5e-2
    _tap_n=$((_tap_n + 1)); echo "ok $_tap_n - the real library without a GPU # SKIP there is a GPU"
else
    # without a GPU the real library still loads (dlopen, the trainer's symbols from the
    # executable, cuBLASLt) and says there is no device
    if [[ -f $BUILD/libtessera-cuda-train.so ]]; then
        run "$TRAIN" 1 nodev --set device=cuda
        rc=$?
        ((rc == 1)) && grep -q 'device = "cuda": rank 0 sees no CUDA device' "$TMP/nodev.txt"
        tap_check $? "$BUILD/libtessera-cuda-train.so loads and reports no CUDA device (exit $rc, want 1)"
    else
        _tap_n=$((_tap_n + 1)); echo "ok $_tap_n - the real library without a GPU # SKIP $why"
    fi
    for ((i = 0; i < PER; i++)); do
        _tap_n=$((_tap_n + 1)); echo "ok $_tap_n - cuda check $((i + 1)) of $PER # SKIP $why"
    done
fi
tap_done
