#!/usr/bin/env bash
# Expert parallelism (parallel.expert, docs/moe.md) through the real trainer on 4 MPI ranks, 10
# steps of the tiny Llama-style MoE of test_moe_train.sh (4 experts, top 2, aux and z losses):
#  - EP = 1, 2 and 4 give the same losses, grad norms and aux/z losses within 1e-6, every layer
#    routing exactly global_batch x seq_len x top_k assignments per step (none dropped);
#  - EP = 2 with zero1, zero3 and hsdp (2x2) for the dense tensors, EP = 4 with zero3: the same;
#  - the checkpoints keep the experts at global shape and equal EP = 1's within float noise (a
#    misplaced expert would differ by the weights' own size);
#  - rank 1 SIGKILLed after step 6 at EP = 2: the rerun resumes bit for bit;
#  - a checkpoint saved at EP = 4 resumes at EP = 2 on 4 ranks and at EP = 1 on 2 ranks, the same
#    losses within 1e-6 as the uninterrupted run;
#  - evaluation (through the exchange, ranks with 2 and 3 forwards) and the end-of-run sample
#    (every expert gathered), activation checkpointing (the
#    exchange recomputed: the same bits as none), --init-from a checkpoint and a Hugging Face
#    export at EP = 2;
#  - bad settings refused before anything is written; with device = cuda, the device plan counts
#    the experts' store.
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 12
make_synth "$TMP/data"
tiny_moe_args "$TMP/data/train"
run() { local dir=$1 np=$2; shift 2; ranks "$np" "$TRAIN" "${args[@]}" --set run_dir="$TMP/$dir" "$@" >"$TMP/$dir.txt" 2>&1; }
close() { metrics_close "$TMP/$1/metrics.jsonl" "$TMP/$2/metrics.jsonl" "${3:-1}" 1e-6 1e-6; }
# aux_close A B [FROM]: the aux and z losses of two runs within 1e-6 (relative) from step FROM on
aux_close() {
    /usr/bin/python3 - "$TMP/$1/metrics.jsonl" "$TMP/$2/metrics.jsonl" "${3:-1}" <<'PY'
import json, sys
lo = int(sys.argv[3])
a, b = ({r["step"]: r for r in map(json.loads, open(p)) if "lr" in r and r["step"] >= lo}
        for p in sys.argv[1:3])
bad = [(s, k) for s in a for k in ("moe_aux", "moe_z")
       if s not in b or abs(a[s][k] - b[s][k]) > 1e-6 * max(abs(a[s][k]), 1e-30)]
sys.exit(1 if bad or len(a) != len(b) or not a else 0)
PY
}
# experts_close A.h5 B.h5: the expert tensors (weights and moments) of two checkpoints at the same
# global shape and within float noise of each other (2e-5 absolute, the weights are ~0.1)
experts_close() {
    /usr/bin/python3 - "$1" "$2" <<'PY'
import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
ok = a["model/expw1"].shape == (2, 4, 96, 64) and a["model/expw2"].shape == (2, 4, 64, 48)
worst = 0.0
for s in ("model/", "optim/m/", "optim/v/"):
    for n in ("expw1", "expw2"):
        x, y = a[s + n][()], b[s + n][()]
        ok &= x.shape == y.shape
        if x.shape == y.shape:
            worst = max(worst, float(np.abs(x - y).max()))
print(f"# experts: largest difference {worst:.2e}")
sys.exit(0 if ok and worst <= 2e-5 else 1)
PY
}

# (the EP = 1 run evaluates and samples as well: it is also the reference of the evaluation check
# below; an evaluation changes no training step, so its steps stand for a run without one)
ev=(--set data.val="$TMP/data/val" --set eval_interval=5ba --set eval_samples=18 --set sample.tokens=6)
run P1 4 "${ev[@]}" && run P2 4 --set parallel.expert=2 && run P4 4 --set parallel.expert=4
tap_diag "EP 2 vs 1: $(close P1 P2); EP 4 vs 1: $(close P1 P4); $(grep '^expert exchange' "$TMP/P4.txt")"
close P1 P2 >/dev/null && close P1 P4 >/dev/null && aux_close P1 P2 && aux_close P1 P4 &&
    grep -q "expert parallelism: 2 ranks per group share the 4 experts, 2 on each; 2 copies of each" "$TMP/P2.txt" &&
    grep -q "expert parallelism: 4 ranks per group share the 4 experts, 1 on each; 1 copy of each" "$TMP/P4.txt" &&
    grep -qE "^expert exchange: [1-9][0-9]* bytes sent between ranks in 10 steps" "$TMP/P4.txt" &&
    ! grep -q "^expert exchange" "$TMP/P1.txt" &&
    /usr/bin/python3 - "$TMP/P2/metrics.jsonl" "$TMP/P4/metrics.jsonl" <<'PY'
import json, sys
for p in sys.argv[1:]:
    recs = [r for r in map(json.loads, open(p)) if "lr" in r]
    if len(recs) != 10 or any(ld["tokens"] != 8 * 32 * 2 for r in recs for ld in r["moe_load"]):
        sys.exit(1)
PY
tap_check $? "EP = 1, 2, 4 on 4 ranks: losses, grad norms, aux and z within 1e-6; every layer routes 8 x 32 x 2 assignments per step (none dropped); the banner and the exchange's byte count"

run Z1 4 --set parallel.expert=2 --set parallel.sharding=zero1 &&
    run Z3 4 --set parallel.expert=2 --set parallel.sharding=zero3 &&
    run H4 4 --set parallel.expert=2 --set parallel.sharding=hsdp --set parallel.replica_group=2 &&
    run Z34 4 --set parallel.expert=4 --set parallel.sharding=zero3
tap_diag "vs EP 1 ddp: EP 2 + zero1 $(close P1 Z1); + zero3 $(close P1 Z3); + hsdp $(close P1 H4); EP 4 + zero3 $(close P1 Z34)"
close P1 Z1 >/dev/null && close P1 Z3 >/dev/null && close P1 H4 >/dev/null &&
    close P1 Z34 >/dev/null && aux_close P1 Z1 && aux_close P1 Z3 && aux_close P1 H4 &&
    aux_close P1 Z34
tap_check $? "EP = 2 with zero1, zero3 and hsdp (2x2), EP = 4 with zero3: equal EP = 1 ddp within 1e-6 at all 10 steps"

"$TOOL" ckpt verify "$(ck "$TMP/P2" 10)" >"$TMP/verify.txt" 2>&1 &&
    "$TOOL" ckpt verify "$(ck "$TMP/H4" 10)" >>"$TMP/verify.txt" 2>&1 &&
    experts_close "$(ck "$TMP/P1" 10)" "$(ck "$TMP/P2" 10)" &&
    experts_close "$(ck "$TMP/P1" 10)" "$(ck "$TMP/P4" 10)" &&
    experts_close "$(ck "$TMP/P1" 10)" "$(ck "$TMP/H4" 10)"
tap_check $? "the EP checkpoints verify, hold the experts (weights, AdamW moments) at global shape (LM, E, ...) and equal EP = 1's within 2e-5"

# (save_async = false in the killed run: its step-4 save is committed before the kill; a
# background save may still be in flight two steps later: tests/ckpt/test_ckpt_async_kill.sh)
TSR_FAULT=kill:6:1 run B 4 --set parallel.expert=2 --set save_async=false
rc=$?
run B 4 --set parallel.expert=2
rc2=$?
[[ $rc != 0 && $rc2 == 0 ]] && grep -q "checkpoint resume step 4" "$TMP/B.txt" &&
    cmp -s <(final_lines "$TMP/P2/metrics.jsonl") <(final_lines "$TMP/B/metrics.jsonl") &&
    same_tensors "$(ck "$TMP/P2" 10)" "$(ck "$TMP/B" 10)"
tap_check $? "EP = 2: rank 1 SIGKILLed after step 6 (exit $rc), the rerun resumed from step 4 (exit $rc2): every record and the final weights equal the uninterrupted run bit for bit"

run R2 4 --set parallel.expert=2 --resume "$(ck "$TMP/P4" 4)" &&
    run R1 2 --resume "$(ck "$TMP/P4" 4)" && run R22 2 --set parallel.expert=2 --resume "$(ck "$TMP/P4" 4)"
tap_diag "resumed from EP 4's step 4: EP 2 on 4 ranks $(close P4 R2 5); EP 1 on 2 ranks $(close P4 R1 5); EP 2 on 2 ranks $(close P4 R22 5)"
grep -q "checkpoint resume step 4" "$TMP/R2.txt" && close P4 R2 5 >/dev/null &&
    close P4 R1 5 >/dev/null && close P4 R22 5 >/dev/null && aux_close P4 R2 5 && aux_close P4 R1 5
tap_check $? "a checkpoint saved at EP = 4 resumes at EP = 2 (4 and 2 ranks) and without EP (2 ranks): steps 5-10 equal the EP = 4 run within 1e-6"

# 18 samples on 4 ranks: 2, 3, 2 and 3 forwards (the exchange pairs up: idle forwards top up);
# EP = 1's evaluations and sample are P1's
run V2 4 "${ev[@]}" --set parallel.expert=2 &&
    run VK 4 "${ev[@]}" --set parallel.expert=2 --set model.activation_checkpointing=block
/usr/bin/python3 - "$TMP/P1/metrics.jsonl" "$TMP/V2/metrics.jsonl" <<'PY'
import json, sys
a, b = ([r["val_loss"] for r in map(json.loads, open(p)) if "val_loss" in r] for p in sys.argv[1:])
sys.exit(0 if len(a) == 2 and len(b) == 2 and all(abs(x - y) <= 1e-6 * abs(x) for x, y in zip(a, b)) else 1)
PY
ok=$?
s1=$(grep -A1 "^sample (6 tokens" "$TMP/P1.txt" | tail -1) s2=$(grep -A1 "^sample (6 tokens" "$TMP/V2.txt" | tail -1)
tap_diag "samples: EP 1 '$s1', EP 2 '$s2'"
# the evaluations' exchange is left out of the count: V2 reports P2's bytes (the same steps)
x2=$(grep '^expert exchange' "$TMP/P2.txt") xv=$(grep '^expert exchange' "$TMP/V2.txt")
tap_diag "without evaluation: '$x2'; with: '$xv'"
((ok == 0)) && [[ -n $s2 && $s1 == "$s2" && -n $x2 && $x2 == "$xv" ]] &&
    cmp -s <(losses "$TMP/V2/metrics.jsonl") <(losses "$TMP/VK/metrics.jsonl") &&
    same_tensors "$(ck "$TMP/V2" 10)" "$(ck "$TMP/VK" 10)"
tap_check $? "EP = 2: validation losses (through the exchange, uneven forwards per rank) equal EP = 1's within 1e-6, the exchange line counts the steps only, and the end-of-run sample is the same (every expert gathered); block activation checkpointing (the exchange recomputed) gives the same bits as none"

# (from the checkpoint EP = 2 wrote, and from its export; 2 steps, no checkpoint: only their
# losses are read. EP = 2 under ddp reads the checkpoint (I2), under zero3 and hsdp the export (J2,
# J4): the ddp ranks' reading of the dense tensors from the export is J1's)
init=(--set max_duration=2ba --set save_final=false)
run I2 4 --set parallel.expert=2 "${init[@]}" --init-from "$(ck "$TMP/P2" 10)" &&
    run I1 4 "${init[@]}" --init-from "$(ck "$TMP/P2" 10)" &&
    "$TOOL" ckpt export --format hf "$(ck "$TMP/P2" 10)" "$TMP/hf" >"$TMP/export.txt" 2>&1 &&
    run J2 4 --set parallel.expert=2 --set parallel.sharding=zero3 "${init[@]}" --init-from "$TMP/hf" &&
    run J4 4 --set parallel.expert=2 --set parallel.sharding=hsdp --set parallel.replica_group=2 \
        "${init[@]}" --init-from "$TMP/hf" &&
    run J1 4 "${init[@]}" --init-from "$TMP/hf"
# (the grad norm within 1e-5: from trained weights the gradients are small sums of cancelling
# terms, and an owner sums its experts' rows from both ranks in one matmul where EP = 1 sums each
# rank's, then all-reduces; seen 1.2e-6)
cl() { metrics_close "$TMP/$1/metrics.jsonl" "$TMP/$2/metrics.jsonl" 1 1e-6 1e-5; }
tap_diag "--init-from at EP 2 vs 1: checkpoint $(cl I1 I2); Hugging Face (EP 2 + zero3) $(cl J1 J2), (EP 2 + hsdp 2 x 2) $(cl J1 J4)"
cl I1 I2 >/dev/null && cl J1 J2 >/dev/null && cl J1 J4 >/dev/null &&
    [[ $(json_field "$TMP/I1/metrics.jsonl" 1 loss) == "$(json_field "$TMP/J1/metrics.jsonl" 1 loss)" ]] &&
    /usr/bin/python3 -c "import sys; sys.exit(0 if $(json_field "$TMP/I2/metrics.jsonl" 1 loss) < $(json_field "$TMP/P1/metrics.jsonl" 1 loss) - 0.1 else 1)"
tap_check $? "--init-from a checkpoint at EP = 2 and from its Hugging Face export at EP = 2 with zero3 and with hsdp 2 x 2, whose second group reads only its experts (each rank reads its part of the dense tensors and its own experts): the same losses as without EP within 1e-6 (grad norms 1e-5), starting from the trained weights"

# every second of 4 layers MoE (the MoE index, the layer and its activation slot all differ),
# a shared expert, unnormalised weights; block checkpointing of layers 1-2 (a MoE and a dense
# layer share the recomputed slot)
alt=(--set model.n_layer=4 --set model.moe_every=2 --set model.moe_shared_size=32
     --set model.moe_norm_topk=false)
run S1 4 "${alt[@]}" && run S2 4 "${alt[@]}" --set parallel.expert=2 &&
    run S4 4 "${alt[@]}" --set parallel.expert=4 --set model.activation_checkpointing=block \
        --set model.activation_checkpointing_range=1-2 &&
    run S4N 4 "${alt[@]}" --set parallel.expert=4
tap_diag "moe_every 2 of 4 layers, shared expert, unnormalised: EP 2 $(close S1 S2); EP 4 $(close S1 S4N)"
close S1 S2 >/dev/null && close S1 S4N >/dev/null && aux_close S1 S2 && aux_close S1 S4N &&
    grep -q "layers=2/4 shared=32 unnormalised" "$TMP/S2.txt" &&
    cmp -s <(losses "$TMP/S4/metrics.jsonl") <(losses "$TMP/S4N/metrics.jsonl") &&
    same_tensors "$(ck "$TMP/S4" 10)" "$(ck "$TMP/S4N" 10)"
tap_check $? "every second of 4 layers MoE with a shared expert and unnormalised weights: EP 2 and 4 equal EP 1 within 1e-6; block checkpointing of a MoE and a dense layer at EP 4 gives the same bits as none"

run W3 4 --set parallel.expert=3 --set model.moe_experts=6
rc=$?
[[ $rc == 1 ]] && grep -q "parallel.expert = 3 does not divide the 4 ranks" "$TMP/W3.txt" && [[ ! -e $TMP/W3 ]]
tap_check $? "parallel.expert = 3 on 4 ranks: exit 1 (got $rc) naming the key, nothing written"

run WE 1 --set parallel.expert=3
rc=$?
run WD 1 --set parallel.expert=2 --set model.moe_experts=0
rc2=$?
[[ $rc == 1 && $rc2 == 1 ]] &&
    grep -q "parallel.expert=3: parallel.expert = 3: expert parallelism splits the experts over that many ranks, so model.moe_experts (4) must be a multiple of it" "$TMP/WE.txt" &&
    grep -q "needs a mixture-of-experts model (model.moe_experts > 0), and this one is dense" "$TMP/WD.txt" &&
    [[ ! -e $TMP/WE && ! -e $TMP/WD ]]
tap_check $? "parallel.expert not dividing moe_experts, or on a dense model: exit 1 (got $rc, $rc2) naming the keys, nothing written"

# --plan: Mixtral 8x7B on 8 ranks, ddp, EP 8: each rank holds the dense weights and 1 of the 8
# experts of each layer (hand count: 32 layers x 8 experts x 3 x 14336 x 4096 expert weights)
"$TRAIN" --config "$TSR_ROOT/configs/mixtral-8x7b.cfg" --set device=cpu --set parallel.sharding=ddp \
    --set parallel.expert=8 --plan 8 >"$TMP/plan.txt" 2>&1 &&
    /usr/bin/python3 - "$TMP/plan.txt" <<'PY'
import re, sys
t = open(sys.argv[1]).read()
total = int(re.search(r"^params: (\d+) trainable", t, re.M).group(1))
m = re.search(r"^memory per rank \(fp32\): weights ([\d.]+) GiB, grads ([\d.]+) GiB, AdamW ([\d.]+) GiB", t, re.M)
experts = 32 * 8 * 3 * 14336 * 4096
want = 4 * (total - experts + experts / 8) / 2**30
w, g, a = map(float, m.groups())
print(f"# weights {w} GiB per rank, hand count {want:.2f} GiB (without EP {4 * total / 2**30:.1f})")
ok = abs(w - want) <= 0.01 * want and g == w and abs(a - 2 * w) <= 0.1
ok &= "expert parallelism: 8 ranks per group share the 8 experts, 1 on each; 1 copy of each expert" in t
sys.exit(0 if ok else 1)
PY
tap_check $? "--plan with EP: Mixtral 8x7B on 8 ranks at EP = 8 holds the dense weights and 1/8 of the experts per rank (weights, grads, 2x AdamW), as the hand count says"

# device = cuda takes parallel.expert too (src/gpu/gpu_ep.c; tests/gpu/test_cuda_moe_ep.sh trains
# it): its device plan counts the experts' store, LM x E/EP x 3 FE x C floats x 18 bytes (fp32
# master, bf16 copy, gradients, 2 AdamW moments) = 2 x 2 x 3 x 48 x 64 x 18 B = 648 KiB (2 heads
# of 32: the GPU's attention has no kernel for this test's 16, refused at load)
if [[ -f $BUILD/libtessera-cuda-train.so ]]; then
    "$TRAIN" "${args[@]}" --set run_dir="$TMP/WC" --set parallel.expert=2 --set device=cuda \
        --set model.n_head=2 --set model.n_kv_head=1 --plan 4 >"$TMP/WC.txt" 2>&1
    rc=$?
    [[ $rc == 0 ]] && grep -q "experts' store 648.0 KiB (E/EP = 2)" "$TMP/WC.txt" && [[ ! -e $TMP/WC ]]
    tap_check $? "parallel.expert = 2 with device = cuda: --plan 4 (exit $rc, want 0) counts the experts' store on the device, 648.0 KiB, nothing written"
else
    tap_skip "parallel.expert = 2 with device = cuda: the device plan" "no $BUILD/libtessera-cuda-train.so (built where nvcc is)"
fi
tap_done
