#!/usr/bin/env bash
# Expert parallelism (parallel.expert) with device = cuda (docs/moe.md, "On the GPU"): the tiny
# Llama-style MoE of tests/train/test_moe_ep.sh (4 experts, top 2, aux and z losses; 2 heads so
# that the head size, 32, has a GPU attention kernel) on 4 ranks, 8 steps:
#  - the CUDA emulator (build/tests/tessera-train-cuemu: the trainer's GPU path, bf16 rows moved
#    by gpu_comm_mpi.c's all-to-all-v) at EP = 1, 2 and 4: every step within the emulator's
#    tolerance of test_cuda_train.sh (loss 3e-4, norm 2 x 5e-3, its MoE case's) of the CPU's
#    EP = 1 run; every layer routes global_batch x seq_len x top_k assignments per step; the
#    exchange's banner and byte count;
#  - EP = 2 and 4 against EP = 1 on the emulator, tighter (measured: loss <= 3e-5, norm <= 9e-4
#    over 8 steps: bf16 rounding after sums taken in another order, an owner summing its
#    experts' weight gradients over all its sources' rows in one product), and activation
#    checkpointing (the exchange recomputed) at EP = 2 bit-identical to none: the emulator is
#    deterministic, so a rerun gives the same bits;
#  - EP = 2 under zero1, zero3 and hsdp (2 x 2) for the dense tensors: within the tolerance of the
#    CPU;
#  - the emulator's EP = 2 checkpoint has the experts at global shape, close to EP = 1's (relative
#    RMS <= 0.1; two experts swapped give 0.7 to 1), moments included; it resumes on the
#    CPU at EP = 4 on 4 ranks and at EP = 1 on 2, and a CPU EP = 2 checkpoint on the emulator at
#    EP = 4: the next steps within the tolerance of the CPU run that never stopped;
#  - evaluation (through the exchange, uneven forwards per rank) and the end-of-run sample at
#    EP = 2 under zero3: the validation losses within the tolerance of the CPU's, the sample's tokens those of
#    EP = 1 on the emulator, peak device memory within the plan;
#  - --init-from a checkpoint and from a Hugging Face export at EP = 2: within the tolerance of the
#    CPU from the same export;
#  - micro_batch = auto backs off for the exchange's buffers too;
#  - a degree that does not divide the experts refused with device = cuda, naming the key;
#  - the real backend (build/tessera-train) at EP = 2 on 2 GPUs and EP = 4 on 4 when there are
#    that many (skipped loudly otherwise): within test_cuda_train.sh's GPU tolerance (0.5% loss,
#    2 x 5% norm) of the CPU.
# CI time: the EP = 2 zero3 check reads the run with evaluation (e2ev: evaluations at steps 3, 6
# and 8 and the sample leave the training steps alone; its steps are checked against the CPU's
# EP = 1 as the other modes' are), instead of training the same 8 steps on 4 emulated ranks again
# without it (e2zero3): one 4-rank run of 25 fewer (41 CI CPU-s before).
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/gpu_lib.sh"
tsr_tmpdir
tap_plan 15
mpi_needed "expert parallelism"
emulator_built
gpu_tiny_args 512 80000 --set model.moe_experts=4 --set model.moe_top_k=2 \
    --set model.moe_intermediate_size=48 --set model.moe_aux_loss_coef=0.01 \
    --set model.moe_z_loss_coef=0.001 --set max_duration=8ba --set save_interval=4ba --set keep_last=2
# evaluations at steps 3 and 6, between the checkpoints (4, 8), and at the end: they run on the
# device's experts through the exchange, not on the host mirror a save fills; 26 samples on 4
# ranks: 3, 4, 3 and 4 forwards, the short ranks topping up with idle ones
evals=(--set data.val="$TMP/data/val" --set eval_interval=3ba --set eval_samples=26
       --set sample.tokens=8)
LOSS_TOL=3e-4 NORM_TOL=1e-2     # the emulator against the CPU (test_cuda_train.sh's MoE case)
EP_LOSS_TOL=1e-4 EP_NORM_TOL=2e-3 # the emulator's EP = 2, 4 against its EP = 1 (~3x the measured)
# run BIN NP DIR ARGS...: trains, output in DIR.txt
run() {
    local bin=$1 np=$2 dir=$3; shift 3
    "${MPIRUN[@]}" -np "$np" "$bin" "${args[@]}" --set run_dir="$TMP/$dir" "$@" >"$TMP/$dir.txt" 2>&1
}
close() { metrics_close "$TMP/$1/metrics.jsonl" "$TMP/$2/metrics.jsonl" "${3:-1}" "${4:-$LOSS_TOL}" "${5:-$NORM_TOL}"; }
# routed DIR...: every step's every MoE layer routed 8 x 32 x 2 assignments (none dropped)
routed() {
    "$PY3" - "${@/#/$TMP/}" <<'PY'
import json, sys
for d in sys.argv[1:]:
    recs = [r for r in map(json.loads, open(d + "/metrics.jsonl")) if "lr" in r]
    if len(recs) != 8 or any(len(r["moe_load"]) != 2 or any(x["tokens"] != 8 * 32 * 2 for x in r["moe_load"]) for r in recs):
        sys.exit(1)
PY
}
# experts_close A.h5 B.h5: the expert tensors (weights, AdamW moments) at global shape in both, and
# each within 10% of B's RMS of A's (relative RMS of the difference). Measured 3e-3 (weights) and
# 3e-2 (moments) at step 4: AdamW's steps of ~lr on gradients near 0 flip with tiny differences,
# so a largest element is no measure (1.8e-3 for weights of 0.08); two experts swapped give 0.7-1.
experts_close() {
    /usr/bin/python3 - "$1" "$2" <<'PY'
import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
ok, worst = True, 0.0
for s in ("model/", "optim/m/", "optim/v/"):
    for n, shape in (("expw1", (2, 4, 96, 64)), ("expw2", (2, 4, 64, 48))):
        x, y = a[s + n][()].astype(np.float64), b[s + n][()].astype(np.float64)
        ok &= x.shape == shape and y.shape == shape
        if x.shape == y.shape:
            worst = max(worst, float(np.sqrt(((x - y) ** 2).mean() / (x ** 2).mean())))
print(f"relative RMS difference {worst:.1e} at most")
sys.exit(0 if ok and worst <= 0.1 else 1)
PY
}
# bytes_ratio CPU EMU: the emulator's expert exchange bytes over the CPU's (bf16 rows against fp32:
# 1/2, up to the few rows that bf16 routes otherwise); prints it, fails beyond 2% of 1/2
bytes_ratio() {
    "$PY3" - "$TMP/$1.txt" "$TMP/$2.txt" <<'PY'
import re, sys
b = [re.search(r"^expert exchange: ([0-9]+) bytes", open(p).read(), re.M) for p in sys.argv[1:]]
r = int(b[1].group(1)) / int(b[0].group(1)) if all(b) else -1
print(f"{r:.4f}")
sys.exit(0 if abs(r - 0.5) <= 0.01 else 1)
PY
}

run "$TRAIN" 4 c1 && run "$TRAIN" 4 c2 --set parallel.expert=2 &&
    run "$TRAIN" 4 c2ev --set parallel.expert=2 "${evals[@]}"
tap_check $? "CPU references on 4 ranks: EP = 1, EP = 2, EP = 2 with evaluation"

cu=(--set device=cuda)
# the emulator's checks (skipped on the lent GPU machine, TSR_TEST_EMULATOR=0: CI runs them)
if emulator_half 12; then
run "$EMU" 4 e1 "${cu[@]}" && run "$EMU" 4 e2 "${cu[@]}" --set parallel.expert=2 &&
    run "$EMU" 4 e4 "${cu[@]}" --set parallel.expert=4
rc=$?
d="EP 1: $(close c1 e1); EP 2: $(close c1 e2); EP 4: $(close c1 e4)"
((rc == 0)) && close c1 e1 >/dev/null && close c1 e2 >/dev/null && close c1 e4 >/dev/null &&
    routed e1 e2 e4 &&
    grep -q "^experts: 2 per rank, rows exchanged within groups of 2 and gradients summed over 2 replicas by MPI" "$TMP/e2.txt" &&
    grep -q "^experts: 1 per rank, rows exchanged within groups of 4 and gradients summed over 1 replicas" "$TMP/e4.txt" &&
    grep -qE "^expert exchange: [1-9][0-9]* bytes sent between ranks in 8 steps" "$TMP/e4.txt" &&
    grep -q "experts' store .* (E/EP = 2)" "$TMP/e2.txt" && ! grep -q "^expert exchange" "$TMP/e1.txt" &&
    half=$(bytes_ratio c2 e2)
tap_check $? "emulator, EP = 1, 2, 4 on 4 ranks: every step within $LOSS_TOL (loss) and $NORM_TOL (norm) of the CPU's EP = 1 ($d); 8 x 32 x 2 assignments per layer and step; the banners; the exchange's bf16 bytes half the CPU's fp32 ones within 2% (${half:-?})"

d="EP 2: $(close e1 e2 1 $EP_LOSS_TOL $EP_NORM_TOL); EP 4: $(close e1 e4 1 $EP_LOSS_TOL $EP_NORM_TOL)"
close e1 e2 1 $EP_LOSS_TOL $EP_NORM_TOL >/dev/null && close e1 e4 1 $EP_LOSS_TOL $EP_NORM_TOL >/dev/null
tap_check $? "emulator: EP = 2 and 4 within $EP_LOSS_TOL (loss) and $EP_NORM_TOL (norm) of its EP = 1 ($d)"

# the exchange is recomputed before a checkpointed layer's backward: the same rows, the same bits
run "$EMU" 4 e2ac "${cu[@]}" --set parallel.expert=2 --set model.activation_checkpointing=block &&
    final_lines "$TMP/e2/metrics.jsonl" >"$TMP/e2.loss" &&
    final_lines "$TMP/e2ac/metrics.jsonl" | cmp -s - "$TMP/e2.loss" && (($(wc -l <"$TMP/e2.loss") == 8))
tap_check $? "emulator, EP = 2: activation checkpointing block (the exchange recomputed) bit-identical to none at all 8 steps"

# (zero3: the run with evaluation, e2ev, also read by the evaluation check further down)
run "$EMU" 4 e2ev "${cu[@]}" --set parallel.expert=2 --set parallel.sharding=zero3 "${evals[@]}"
rc_e2ev=$?
for mode in zero1 zero3 hsdp; do
    extra=(--set "parallel.sharding=$mode")
    [[ $mode == hsdp ]] && extra+=(--set parallel.replica_group=2)
    dir=e2$mode
    if [[ $mode == zero3 ]]; then dir=e2ev; ((rc_e2ev == 0)); else run "$EMU" 4 "$dir" "${cu[@]}" --set parallel.expert=2 "${extra[@]}"; fi &&
        grep -q "into $mode shards" "$TMP/$dir.txt" && d=$(close c1 "$dir") && routed "$dir"
    tap_check $? "emulator, EP = 2 with parallel.sharding = $mode: every step within the tolerance of the CPU ($d)"
done

experts_close "$TMP/e1/step-00000004.h5" "$TMP/e2/step-00000004.h5" >"$TMP/ex.txt"
tap_check $? "emulator: the EP = 2 checkpoint at step 4 has the experts at global shape, each tensor within 10% relative RMS of EP = 1's, moments included ($(cat "$TMP/ex.txt"))"

run "$TRAIN" 4 r4 --set parallel.expert=4 --resume "$TMP/e2/step-00000004.h5" &&
    run "$TRAIN" 2 r1 --resume "$TMP/e2/step-00000004.h5" &&
    run "$EMU" 4 ec4 "${cu[@]}" --set parallel.expert=4 --resume "$TMP/c2/step-00000004.h5" &&
    grep -q "checkpoint resume step 4" "$TMP/r4.txt" && grep -q "checkpoint resume step 4" "$TMP/ec4.txt" &&
    d="CPU EP 4: $(close c1 r4 5); CPU EP 1 on 2 ranks: $(close c1 r1 5); emulator EP 4: $(close c1 ec4 5)" &&
    close c1 r4 5 >/dev/null && close c1 r1 5 >/dev/null && close c1 ec4 5 >/dev/null
tap_check $? "the emulator's EP = 2 checkpoint resumed on the CPU at EP = 4 (4 ranks) and EP = 1 (2 ranks), a CPU EP = 2 checkpoint on the emulator at EP = 4: steps 5-8 within the tolerance ($d)"

# (e2evd: the same under ddp, where only the experts' exchange makes a forward collective)
((rc_e2ev == 0)) && # (e2ev: run before the sharding modes' checks)
    run "$EMU" 4 e2evd "${cu[@]}" --set parallel.expert=2 "${evals[@]}" &&
    run "$EMU" 4 e1ev "${cu[@]}" --set parallel.sharding=zero3 "${evals[@]}" &&
    d=$(close c2ev e2ev) && d="$d; ddp: $(close c2ev e2evd); $(peak_in_plan e2ev)" &&
    "$PY3" - "$TMP/c2ev/metrics.jsonl" "$TMP/e2ev/metrics.jsonl" "$LOSS_TOL" "$TMP/e2evd/metrics.jsonl" <<'PY' &&
import json, sys
ev = lambda p: {j["step"]: j["val_loss"] for j in map(json.loads, open(p)) if "val_loss" in j}
a, b, c = ev(sys.argv[1]), ev(sys.argv[2]), ev(sys.argv[4])
sys.exit(0 if all(sorted(x) == [3, 6, 8] for x in (a, b, c)) and all(abs(x[k] - a[k]) <= float(sys.argv[3]) * a[k] for x in (b, c) for k in a) else 1)
PY
    s2=$(grep -A1 '^sample (8 tokens' "$TMP/e2ev.txt" | tail -1) && [[ $s2 =~ ^[0-9]+( [0-9]+){7}$ ]] &&
    [[ $s2 == "$(grep -A1 '^sample (8 tokens' "$TMP/e1ev.txt" | tail -1)" ]]
tap_check $? "emulator, EP = 2 under zero3 and under ddp with evaluation at steps 3, 6 and 8 (through the exchange, 3 or 4 forwards a rank) and the sample: validation losses within $LOSS_TOL of the CPU's, the sample the same tokens as EP = 1's on the emulator (${s2:-none}), peak device memory within the plan ($d)"

# --init-from: a checkpoint (the experts sent to their holders, then to the device) and its
# Hugging Face export (every rank reads its part of the dense tensors and its own experts), 2 steps at EP = 2
# on the emulator against the CPU's EP = 1 from the same export
"$TOOL" ckpt export --format hf "$TMP/c1/step-00000008.h5" "$TMP/hf" >"$TMP/export.txt" 2>&1 &&
    run "$TRAIN" 4 ih --set max_duration=2ba --init-from "$TMP/hf" &&
    run "$EMU" 4 eih "${cu[@]}" --set parallel.expert=2 --set max_duration=2ba --init-from "$TMP/hf" &&
    run "$EMU" 4 eic "${cu[@]}" --set parallel.expert=2 --set max_duration=2ba --init-from "$TMP/c1/step-00000008.h5" &&
    d="Hugging Face: $(close ih eih); checkpoint: $(close ih eic)" && close ih eih >/dev/null && close ih eic >/dev/null &&
    "$PY3" - "$TMP/ih/metrics.jsonl" "$TMP/c1/metrics.jsonl" <<'PY'
import json, sys
first = lambda p, s: next(j["loss"] for j in map(json.loads, open(p)) if j.get("step") == s and "loss" in j)
sys.exit(0 if first(sys.argv[1], 1) < first(sys.argv[2], 1) - 0.05 else 1)
PY
tap_check $? "emulator, EP = 2: --init-from a checkpoint and from its Hugging Face export, 2 steps within the tolerance of the CPU's from the export, from the trained weights ($d)"

# micro_batch = auto on a device 1000 bytes short of EP = 2's peak at microbatches of 2: the
# exchange's buffers (allocated by the first forward) count in the room a microbatch needs, so the
# run backs off to 1 before its first forward (it used to die there, out of device memory) and
# equals micro_batch = 1 bit for bit
cap=$("$PY3" -c 'import json, sys; print(max(j.get("peak_mem_bytes", 0) for j in map(json.loads, open(sys.argv[1]))) - 1000)' "$TMP/e2/metrics.jsonl")
TSR_EMU_MEM=$cap run "$EMU" 4 e2auto "${cu[@]}" --set parallel.expert=2 --set micro_batch=auto &&
    run "$EMU" 4 e2m1 "${cu[@]}" --set parallel.expert=2 --set micro_batch=1 &&
    grep -q "step 1 reruns with microbatches of 1" "$TMP/e2auto.txt" &&
    final_lines "$TMP/e2m1/metrics.jsonl" >"$TMP/e2m1.loss" && (($(wc -l <"$TMP/e2m1.loss") == 8)) &&
    final_lines "$TMP/e2auto/metrics.jsonl" | cmp -s - "$TMP/e2m1.loss"
tap_check $? "emulator, EP = 2, micro_batch = auto on a device of $cap bytes (1000 short of the peak at microbatches of 2): backs off to 1 before the exchange runs out of memory, all 8 steps equal micro_batch = 1 bit for bit"

run "$EMU" 4 bad "${cu[@]}" --set parallel.expert=3
rc=$?
((rc == 1)) && grep -q "parallel.expert = 3" "$TMP/bad.txt" && grep -q "model.moe_experts (4) must be a multiple of it" "$TMP/bad.txt" &&
    ! grep -q '^step ' "$TMP/bad.txt"
tap_check $? "device = cuda, parallel.expert = 3 with 4 experts: refused at load naming the key (exit $rc, want 1)"
emulator_half_end
fi

# the real backend: as many GPUs as ranks (TSR_TEST_GPU_COMM=mpi: the ranks share one)
real_backend
for ep in 2 4; do
    if [[ -n $why ]]; then
        tap_skip "cuda: EP = $ep on $ep GPUs" "$why"
    elif ((GPUS < ep)); then
        tap_skip "cuda: EP = $ep on $ep GPUs" "needs $ep GPUs (one rank each), this machine has $GPUS"
    else
        run "$TRAIN" "$ep" "g$ep" "${cu[@]}" --set parallel.expert=$ep &&
            d=$(close c1 "g$ep" 1 5e-3 1e-1) && routed "g$ep" && grep -q "gradients summed over .* by $GPU_COMM_NAME" "$TMP/g$ep.txt"
        tap_check $? "cuda: EP = $ep on $ep GPUs ($GPU_COMM_NAME all-to-all-v): every step within 5e-3 (loss) and 1e-1 (norm) of the CPU ($d)"
    fi
done
tap_done
