# gpu_lib.sh — helpers shared by the tests of the GPU paths (tests/gpu/test_cuda_*.sh, test_hc_gpu.sh).
# Needs lib.sh sourced first ($PY3, $TMP).

# peak_in_plan RUN [SLACK [WHAT]]: the device allocator's peak (the largest peak_mem_bytes in
# RUN/metrics.jsonl) against the device plan RUN.txt printed (its "device memory per rank (cuda,
# bf16 activations, ...)" line, whose parenthesis must contain WHAT when given): at least 95% of
# the plan's total (less its rounding to 0.1 of a unit), at most 10% over it plus SLACK bytes
# (default 0: what the plan leaves out, cuBLASLt's workspace and the ops' scratch). Prints
# "peak P B, plan Q B"; fails when the line or the peak is missing.
peak_in_plan() {
    "$PY3" - "$TMP/$1.txt" "$TMP/$1/metrics.jsonl" "${2:-0}" "${3:-}" <<'PY'
import json, re, sys
what = re.escape(sys.argv[4])
m = re.search(r"^device memory per rank \(cuda, bf16 activations[^)]*" + what +
              r"[^)]*\).* total ([0-9.]+) (B|KiB|MiB|GiB)", open(sys.argv[1]).read(), re.M)
unit = 1024 ** ["B", "KiB", "MiB", "GiB"].index(m.group(2)) if m else 0
plan = float(m.group(1)) * unit if m else -1
peak = max((j.get("peak_mem_bytes", -1) for j in map(json.loads, open(sys.argv[2]))), default=-1)
print(f"peak {peak:.0f} B, plan {plan:.0f} B")
sys.exit(0 if m and 0.95 * plan - 0.05 * unit <= peak <= 1.10 * plan + float(sys.argv[3]) else 1)
PY
}

# mpi_ok BIN: whether BIN can start several ranks here: mpirun is found and BIN is an MPI build
# (not a NO_MPI=1 one; the lent GPU machine has no MPI, tests/gpu/device.sh). Not `ldd | grep -q`:
# under pipefail, grep leaving early can fail the pipe and skip the MPI checks.
mpi_ok() { command -v mpirun >/dev/null && [[ $(ldd "$1" 2>/dev/null) == *libmpi* ]]; }
# mpi_needed WHAT: skips the test (exit 77, saying WHAT needs them) unless tessera-train can start
# several ranks here (mpi_ok)
mpi_needed() { mpi_ok "$TRAIN" || { echo "$1 needs MPI ranks: no mpirun, or a NO_MPI=1 build"; exit 77; }; }

# gpu_tiny_args VOCAB TOKENS [SETTINGS...]: TOKENS synthetic tokens of a VOCAB-token vocabulary in
# $TMP/data and `args` for tiny_llama_args on its train split with 2 heads on 1 KV head and the
# ranks' GPU transport (GPU_COMM_ARGS), then SETTINGS (the GPU tests' tiny Llama: test_cuda_context.sh,
# test_cuda_pipeline.sh, test_cuda_mla_context.sh, test_cuda_moe_ep.sh, test_cuda_moe_bias.sh)
gpu_tiny_args() {
    make_synth "$TMP/data" "$1" "$2"
    tiny_llama_args "$TMP/data/train" "$1"
    args+=(--set model.n_head=2 --set model.n_kv_head=1 "${GPU_COMM_ARGS[@]}" "${@:3}")
}
# gpu_llama_args STEPS SAVE [SETTINGS...]: gpu_tiny_args on make_synth's default corpus (200000
# tokens of 512), STEPS steps saved every SAVE, then SETTINGS (test_cuda_lora.sh, test_cuda_muon.sh)
gpu_llama_args() {
    gpu_tiny_args 512 200000 --set max_duration="${1}ba" --set save_interval="${2}ba" "${@:3}"
}

# the host emulator's trainer (kernels/cuda_emu/: the trainer's GPU path on the CPU)
EMU=$BUILD/tests/tessera-train-cuemu
# emulator_built: skips the test (exit 77) unless $EMU is built; not needed where the emulator's
# half is skipped (TSR_TEST_EMULATOR=0, emulator_half)
emulator_built() { [[ -x $EMU || ${TSR_TEST_EMULATOR:-1} == 0 ]] || { echo "no $EMU (make builds it)"; exit 77; }; }

# TSR_TEST_GPU_COMM=mpi (tests/gpu/device.sh multirank, docs/cuda.md "Several ranks on one
# GPU"): every run gets GPU_COMM_ARGS, parallel.gpu_comm = "mpi" (the CPU's runs ignore it), and
# the real backend counts 4 GPUs wherever it has one (real_backend): the ranks of the multi-rank
# checks share it. Unset (CI, a node with a GPU per rank): NCCL, and the GPUs nvidia-smi lists.
GPU_COMM_ARGS=()
case ${TSR_TEST_GPU_COMM:-} in
    "" | nccl) ;;
    mpi) GPU_COMM_ARGS=(--set parallel.gpu_comm=mpi) ;;
    *) echo "gpu_lib.sh: TSR_TEST_GPU_COMM='$TSR_TEST_GPU_COMM': expected nccl or mpi" >&2; exit 2 ;;
esac
# the transport's name in the banner lines of the real backend's runs
GPU_COMM_NAME="NCCL"
((${#GPU_COMM_ARGS[@]})) && GPU_COMM_NAME="MPI staged through pinned host memory"

# real_backend: whether the real CUDA backend can run here. Sets `why` ("" when it can, else the
# reason to print with the skips) and `GPUS` (the GPUs nvidia-smi lists, 4 ranks' worth of one
# under TSR_TEST_GPU_COMM=mpi; 0 when it cannot).
real_backend() {
    why="" GPUS=0
    [[ -f $BUILD/libtessera-cuda-train.so ]] || why="no $BUILD/libtessera-cuda-train.so (built where nvcc is)"
    [[ -z $why && ! -e /dev/nvidiactl ]] && why="no GPU on this machine (no /dev/nvidiactl)"
    [[ -z $why ]] && GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
    ((GPUS >= 1 && ${#GPU_COMM_ARGS[@]} > 0 && GPUS < 4)) && GPUS=4
    return 0
}

# gpus N WHAT: true when the suite's backend has N GPUs (GPUS, set by the test: one rank each),
# else WHAT is counted as skipped, saying so
gpus() {
    ((GPUS >= $1)) && return 0
    _tap_n=$((_tap_n + 1)); echo "ok $_tap_n - $2 # SKIP needs $1 GPUs, this machine has $GPUS"
    return 1
}

# without_gpu WHAT PER CMD...: the checks of a machine without a GPU (why set by real_backend).
# When the real library was built, CMD runs the trainer with device = cuda, its output in
# $TMP/nodev.txt: it must load and say there is no device (exit 1), checked as "the library
# WHAT"; then the PER checks that need the GPU are counted as skipped.
without_gpu() {
    local what=$1 per=$2 rc i
    shift 2
    if [[ -f $BUILD/libtessera-cuda-train.so ]]; then
        "$@"
        rc=$?
        ((rc == 1)) && grep -q 'device = "cuda": rank 0 sees no CUDA device' "$TMP/nodev.txt"
        tap_check $? "$BUILD/libtessera-cuda-train.so $what (exit $rc, want 1)"
    else
        _tap_n=$((_tap_n + 1)); echo "ok $_tap_n - the real library without a GPU # SKIP $why"
    fi
    for ((i = 0; i < per; i++)); do
        _tap_n=$((_tap_n + 1)); echo "ok $_tap_n - cuda check $((i + 1)) of $per # SKIP $why"
    done
}

# emulator_half N: whether the emulator's checks of a GPU test run here. With
# TSR_TEST_EMULATOR=0 (tests/gpu/device.sh sets it on the lent GPU machine, whose minutes are few:
# these checks need no GPU and run in CI on every submission) its N checks are counted as skipped,
# saying so, and it returns 1. The half ends with emulator_half_end, which checks N where the half
# runs (CI), so that a check added to the half without N following fails here, not as a short TAP
# plan on the GPU machine.
emulator_half() {
    local i
    _emu_from=$_tap_n _emu_n=$1
    [[ ${TSR_TEST_EMULATOR:-1} == 0 ]] || return 0
    for ((i = 0; i < $1; i++)); do
        _tap_n=$((_tap_n + 1))
        echo "ok $_tap_n - emulator check $((i + 1)) of $1 # SKIP TSR_TEST_EMULATOR=0 (the GPU machine's run: CI runs the emulator's half)"
    done
    return 1
}
# both_halves PER "EMU_ARGS" "CUDA_ARGS": a multi-rank GPU test's two halves, the test's
# `suite BIN LABEL ARGS...`: on the host emulator (its devices as many as MPI starts ranks: 8, or
# 1 without MPI), then on the real backend (its GPUs; one process without MPI), whose PER checks
# are skipped, saying why, where it cannot run. The ARGS are words. Sets MPI_OK (1 where
# tessera-train can start several ranks here: mpi_ok), which the test may read after.
both_halves() {
    local per=$1 i emu cuda
    MPI_OK=0
    mpi_ok "$TRAIN" && MPI_OK=1
    read -ra emu <<<"${2:-}"
    read -ra cuda <<<"${3:-}"
    if emulator_half "$per"; then
        GPUS=$((MPI_OK ? 8 : 1))
        suite "$EMU" emulator "${emu[@]}"
        emulator_half_end
    fi
    real_backend
    if [[ -z $why ]]; then
        ((MPI_OK)) || GPUS=1 # one process without MPI, whatever the GPUs
        suite "$TRAIN" cuda "${cuda[@]}"
        return
    fi
    for ((i = 0; i < per; i++)); do
        _tap_n=$((_tap_n + 1)); echo "ok $_tap_n - cuda check $((i + 1)) of $per # SKIP $why"
    done
}
# real_half SUITE_ARGS...: the real backend's half of a test whose other branch is without_gpu:
# where real_backend finds a GPU, the test's `suite "$TRAIN" cuda SUITE_ARGS...` (one process
# without MPI: MPI_OK set by the test) and without_gpu's check counted as skipped; returns 1 (why
# set) where it cannot run
real_half() {
    real_backend
    [[ -z $why ]] || return 1
    ((MPI_OK)) || GPUS=1 # one process without MPI, whatever the GPUs
    suite "$TRAIN" cuda "$@"
    tap_skip "the real library without a GPU" "there is a GPU"
}
# fam NAME: the family's options (the array NAME) into `opts` (the family tests)
fam() { local -n f=$1; opts=("${f[@]}"); }
# run BIN DIR OPTIONS...: one rank of BIN with the test's `args` and OPTIONS, output in $TMP/DIR.txt
# (test_cuda_families.sh, test_cuda_mla.sh; a test with runs of its own defines its own run)
run() {
    local bin=$1 dir=$2; shift 2
    OMPI_MCA_ess_singleton_isolated="${OMPI_MCA_ess_singleton_isolated:-1}" \
        "$bin" "${args[@]}" --set run_dir="$TMP/$dir" "$@" >"$TMP/$dir.txt" 2>&1
}
# family_real_half WHAT PER THEN...: the real backend's half of a family test against the CPU
# (test_cuda_mla.sh, test_cuda_mtp.sh): where real_backend finds a GPU, the test's
# `suite "$TRAIN" cuda` at the issue's 0.5% on the loss and test_cuda_train.sh's 5e-2 on the norm
# (updates within 0.5), then `THEN... "$TRAIN" cuda`; else without_gpu WHAT PER with the test's
# `run "$TRAIN" nodev` (the test's plan counts without_gpu's own check only where why is set)
family_real_half() {
    local what=$1 per=$2
    shift 2
    real_backend
    if [[ -z $why ]]; then
        UPD_TOL=0.5 suite "$TRAIN" cuda 5e-3 5e-2
        "$@" "$TRAIN" cuda
    else
        without_gpu "$what" "$per" run "$TRAIN" nodev --set device=cuda
    fi
}
# emulator_half_end: the last line of a half that ran; one more, failing, check when it did not run
# the N checks emulator_half was given (the plan then fails too)
emulator_half_end() {
    local ran=$((_tap_n - _emu_from))
    ((ran == _emu_n)) ||
        tap_check 1 "emulator_half $_emu_n: the half ran $ran checks; with TSR_TEST_EMULATOR=0 it would skip $_emu_n"
}

# evals_close A B: both runs evaluated at the same steps, B's validation losses within $LOSS_TOL
# (test_cuda_train.sh, test_cuda_lora.sh: the test sets LOSS_TOL)
evals_close() {
    "$PY3" - "$TMP/$1/metrics.jsonl" "$TMP/$2/metrics.jsonl" "$LOSS_TOL" <<'PY'
import json, sys
ev = lambda p: {j["step"]: j["val_loss"] for j in map(json.loads, open(p)) if "val_loss" in j}
a, b = ev(sys.argv[1]), ev(sys.argv[2])
w = max((abs(b[k] - a[k]) / a[k] for k in a if k in b), default=1.0)
print(f"val loss {w:.1e} at steps {sorted(b)}")
sys.exit(0 if a and sorted(a) == sorted(b) and w <= float(sys.argv[3]) else 1)
PY
}
# device_acts FILE: the device plan's activations figure (a start's or --plan's), in bytes
device_acts() {
    "$PY3" - "$1" <<'PY'
import re, sys
m = re.search(r"^device memory per rank.*activations ([0-9.]+) (B|KiB|MiB|GiB) per microbatch",
              open(sys.argv[1]).read(), re.M)
print(int(float(m.group(1)) * 1024 ** ["B", "KiB", "MiB", "GiB"].index(m.group(2))) if m else -1)
PY
}

# ---- bench/gpu/torch_peer.py's tests (test_torch_peer.sh, test_torch_peer_families.sh) --------
# Need $PEER (the peer's path) and $TRAIN.

# peer_needs_torch WHAT...: without PyTorch for $PY3, each WHAT a skipped check and the test ends
# (exit 0); without tessera-train, exit 77
peer_needs_torch() {
    if ! "$PY3" -c 'import torch' 2>/dev/null; then
        local w
        for w in "$@"; do tap_skip "$w" "no PyTorch for $PY3"; done
        tap_done
        exit
    fi
    [[ -x $TRAIN ]] || { echo "$TRAIN missing: run make"; exit 77; }
}

# peer_field FILE KEY: KEY of the last JSON line of FILE
peer_field() { "$PY3" -c 'import json, sys; print(json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]).get(sys.argv[2]))' "$@"; }

# peer_same_n TAG CONFIG SETS...: the peer's dry-run N and FLOPs/token against tessera-train
# --plan's for configs/CONFIG.cfg, both given causal attention, no activation checkpointing and
# SETS; a mismatch appended to $bad. tessera prints FLOPs/token to 4 digits: the peer's rounded
# the same way.
peer_same_n() {
    local tag=$1 cfg=$TSR_ROOT/configs/$2.cfg n f want wantf gotf
    local both=(--set model.attn_mask=causal --set model.activation_checkpointing=none "${@:3}")
    "$PY3" "$PEER" --config "$cfg" "${both[@]}" --dry-run >"$TMP/$tag.json" 2>/dev/null
    "$TRAIN" --config "$cfg" "${both[@]}" --plan 1 >"$TMP/$tag.plan" 2>&1
    n=$(peer_field "$TMP/$tag.json" params) f=$(peer_field "$TMP/$tag.json" flops_per_token)
    want=$(sed -n 's/^params: \([0-9]*\) trainable.*/\1/p' "$TMP/$tag.plan")
    wantf=$(sed -n 's/^params: .*FLOPs\/token = .* = \([0-9.e+]*\) (docs.*/\1/p' "$TMP/$tag.plan")
    gotf=$("$PY3" -c "print('%.4g' % float('$f'))" 2>/dev/null)
    [[ -n $want && $n == "$want" && $gotf == "$("$PY3" -c "print('%.4g' % float('${wantf:-0}'))")" ]] ||
        bad+=" $tag (peer N $n F $gotf, tessera N ${want:-?} F ${wantf:-?})"
}

# peer_refused WHAT ARGS...: the peer's dry run with ARGS exits 2, WHAT named in its JSON error
peer_refused() {
    local r=0
    "$PY3" "$PEER" "${@:2}" --dry-run >"$TMP/refused.json" 2>/dev/null || r=$?
    ((r == 2)) && grep -q "$1" "$TMP/refused.json" || { echo "# $*: exit $r: $(cat "$TMP/refused.json")"; return 1; }
}

# peer_row_ok ROW: run.sh's table row has positive PyTorch and tessera tok/s (columns 4 and 5)
peer_row_ok() {
    awk -F'|' '{ gsub(/ /, ""); exit !($5 ~ /^[0-9.]+$/ && $6 ~ /^[0-9.]+$/ && $5 + 0 > 0 && $6 + 0 > 0) }' <<<"$1"
}

# updates INIT A B: every parameter tensor of B's checkpoint of step UPD_STEP (default 10) within
# UPD_TOL of A's, relative to A's update from INIT's weights (INIT's step-1 checkpoint, the
# initialisation); prints the largest (test_cuda_families.sh, test_cuda_mla.sh)
updates() {
    "$PY3" - "$TMP/$1/step-00000001.h5" "$TMP/$2/step-$(printf %08d "${UPD_STEP:-10}").h5" \
        "$TMP/$3/step-$(printf %08d "${UPD_STEP:-10}").h5" \
        "$UPD_TOL" <<'PY'
import sys, h5py, numpy as np
z, a, b = (h5py.File(p, "r") for p in sys.argv[1:4])
names = []
a.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) and n.startswith("model/") else None)
worst, wn = 0.0, "-"
for n in names:
    w0, wa, wb = (np.asarray(f[n][()], dtype=np.float64) for f in (z, a, b))
    u, d = np.linalg.norm(wa - w0), np.linalg.norm(wb - wa)
    r = d / u if u > 0 else (0.0 if d == 0 else np.inf)
    if r > worst: worst, wn = r, n
print(f"updates: worst {worst:.2g} of the CPU's ({wn}) over {len(names)} tensors")
sys.exit(0 if names and worst <= float(sys.argv[4]) else 1)
PY
}
