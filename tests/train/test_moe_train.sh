#!/usr/bin/env bash
# Mixture-of-experts models through the real trainer on MPI ranks (docs/moe.md), 10 steps of a tiny
# Llama-style MoE (4 experts, top 2, aux and z losses on) on the synthetic corpus:
#  - it trains on 2 ranks: the loss falls, the banner names the experts, metrics.jsonl has the aux
#    and z losses and each layer's expert load;
#  - the expert load in metrics.jsonl: every layer's assignments sum to global_batch x seq_len x
#    top_k at every step (dropless by construction; test_ops_moe and the reference test check that
#    every assignment's output arrives);
#  - the same global batch gives the same losses (and aux/z) on 1, 2 and 4 ranks within 1e-6, and
#    with zero1, zero3 and hsdp (2x2);
#  - rank 1 SIGKILLed after step 6: the rerun resumes from step 4 and every later record and the
#    final weights equal the uninterrupted run bit for bit;
#  - activation checkpointing (block, mlp) gives the same bits as none;
#  - every second layer MoE, a shared expert, unnormalised weights: zero3 equals ddp (losses within
#    1e-6, grad norms within 1e-5: zero3 reduce-scatters each micro-batch, ddp sums a rank's two
#    micro-batches first, and AdamW's division by sqrt(v) magnifies that last-bit difference in
#    the near-zero gradients into ~3e-6 of the norm by step 10; with one micro-batch per rank the
#    two sum in the same order and give the same bits), and block checkpointing of a MoE and a
#    dense layer gives the same bits;
#  - a diverging run keeps metrics.jsonl JSON (non-finite figures null);
#  - the checkpoint stores the experts at global shape (LM, E, ...) and verifies;
#  - generation with the KV cache equals the no-cache reference (ids and every probability);
#  - --init-from a checkpoint whose MoE layers sit elsewhere (same shapes) is refused;
#  - a bad MoE key is refused before any work, naming it, nothing written;
#  - gpt-oss's experts (router and expert biases, the clamped unit, q/k/v/o biases: docs/moe.md;
#    their numbers are tests/reference/test_gptoss.py's): trains on 2 ranks, block checkpointing
#    gives the same bits, generation with the KV cache equals the no-cache reference; a resume
#    with moe_act = "swiglu" and the Hugging Face export are refused naming the key; device =
#    "cuda" and a dense model with one of the keys are refused before any work;
#  - Qwen3-Next's shared-expert gate (model.moe_shared_gate): a resume of the shared-expert run
#    with it is refused naming it (the checkpoint has no shgatew), as device = "cuda" with it and
#    the gate without a shared expert (exit 1, nothing written; its maths: test_reference.py's
#    moe-shgate case).
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 17
make_synth "$TMP/data"
tiny_moe_args "$TMP/data/train"
# moe_lines DIR: each step's MoE figures (its last record's), what a resumed run must reproduce
moe_lines() {
    /usr/bin/python3 -c '
import json, sys
last = {r["step"]: (r["moe_aux"], r["moe_z"], r["moe_load"]) for r in map(json.loads, open(sys.argv[1])) if "lr" in r}
for s in sorted(last): print(s, json.dumps(last[s]))' "$TMP/$1/metrics.jsonl"
}
run() { local dir=$1 np=$2; shift 2; ranks "$np" "$TRAIN" "${args[@]}" --set run_dir="$TMP/$dir" "$@" >"$TMP/$dir.txt" 2>&1; }
close() { metrics_close "$TMP/$1/metrics.jsonl" "$TMP/$2/metrics.jsonl" 1 1e-6 1e-6; }
# the aux and z losses of two runs within 1e-6 (relative) at every step
aux_close() {
    /usr/bin/python3 - "$TMP/$1/metrics.jsonl" "$TMP/$2/metrics.jsonl" <<'PY'
import json, sys
a, b = ([r for r in map(json.loads, open(p)) if "lr" in r] for p in sys.argv[1:3])
bad = [(x["step"], k, x[k], y[k]) for x, y in zip(a, b) for k in ("moe_aux", "moe_z")
       if abs(x[k] - y[k]) > 1e-6 * max(abs(x[k]), 1e-30)]
sys.exit(1 if bad or len(a) != len(b) or not a else 0)
PY
}

run A 2
rc=$?
first=$(json_field "$TMP/A/metrics.jsonl" 1 loss) last=$(json_field "$TMP/A/metrics.jsonl" 10 loss)
aux=$(json_field "$TMP/A/metrics.jsonl" 10 moe_aux)
tap_diag "MoE, 2 ranks: loss $first at step 1, $last at step 10; aux $aux"
[[ $rc == 0 && -n $first && -n $last && -n $aux ]] &&
    /usr/bin/python3 -c "import sys; sys.exit(0 if $last < $first - 0.2 else 1)" &&
    grep -q "moe: experts=4 top_k=2 width=48 layers=2/2" "$TMP/A.txt" &&
    grep -q "active per token (2 of 4 experts)" "$TMP/A.txt" && grep -q "| aux " "$TMP/A.txt"
tap_check $? "MoE (4 experts, top 2, aux + z losses) trains on 2 ranks: the loss falls; banner, step line and metrics name the experts"

/usr/bin/python3 - "$TMP/A/metrics.jsonl" <<'PY'
import json, sys
recs = [r for r in map(json.loads, open(sys.argv[1])) if "lr" in r]
want = 8 * 32 * 2
ok = len(recs) == 10 and all(len(r["moe_load"]) == 2 for r in recs)
for r in recs:
    for ld in r["moe_load"]:
        ok &= ld["tokens"] == want and 0 <= ld["min"] <= ld["max"] <= want and ld["cv"] >= 0
        ok &= ld["min"] * 4 <= want <= ld["max"] * 4
    ok &= r["moe_aux"] > 0 and r["moe_z"] > 0
sys.exit(0 if ok else 1)
PY
tap_check $? "the expert load in metrics.jsonl: each layer's assignments sum to 8 x 32 x 2 = 512 at every step (dropless by construction: test_ops_moe and the reference test check every assignment's output); min <= mean <= max"

run D1 1 && run D4 4
tap_diag "1 vs 2 ranks: $(close D1 A); 4 vs 2 ranks: $(close D4 A)"
close D1 A >/dev/null && close D4 A >/dev/null && aux_close D1 A && aux_close D4 A
tap_check $? "the same global batch on 1, 2 and 4 ranks: losses, grad norms and aux/z losses equal within 1e-6"

run Z1 2 --set parallel.sharding=zero1 && run Z3 2 --set parallel.sharding=zero3 &&
    run Z4 4 --set parallel.sharding=zero3 &&
    run H4 4 --set parallel.sharding=hsdp --set parallel.replica_group=2
tap_diag "vs ddp: zero1 $(close A Z1); zero3 $(close A Z3); zero3x4 $(close A Z4); hsdp 2x2 $(close A H4)"
close A Z1 >/dev/null && close A Z3 >/dev/null && close A Z4 >/dev/null && close A H4 >/dev/null &&
    aux_close A Z3 && aux_close A H4
tap_check $? "zero1 and zero3 on 2 ranks, zero3 and hsdp (2x2) on 4: equal ddp within 1e-6 at all 10 steps"

# (the killed run: mpirun ends the surviving rank at once, not after its 2 s of SIGCONT, sleep,
# SIGTERM, sleep (odls_base_sigkill_timeout): that rank waits for the dead one in an all-reduce
# and has nothing to finish; 3.8 -> 1.6 s wall measured)
OMPI_MCA_odls_base_sigkill_timeout=0 killed_resumes B
tap_check $? "rank 1 SIGKILLed after step 6 (exit $rc); the rerun resumed from step 4 and finished (exit $rc2)"
cmp -s <(final_lines "$TMP/A/metrics.jsonl") <(final_lines "$TMP/B/metrics.jsonl") &&
    cmp -s <(moe_lines A) <(moe_lines B) && (($(moe_lines B | wc -l) == 10)) &&
    same_tensors "$TMP/A/step-00000010.h5" "$TMP/B/step-00000010.h5"
tap_check $? "after the crash: every record (loss, aux, expert load) and the final weights equal the uninterrupted run bit for bit"

run KB 2 --set model.activation_checkpointing=block && run KM 2 --set model.activation_checkpointing=mlp
cmp -s <(final_lines "$TMP/A/metrics.jsonl") <(final_lines "$TMP/KB/metrics.jsonl") &&
    cmp -s <(final_lines "$TMP/A/metrics.jsonl") <(final_lines "$TMP/KM/metrics.jsonl") &&
    cmp -s <(moe_lines A) <(moe_lines KB) && cmp -s <(moe_lines A) <(moe_lines KM) &&
    same_tensors "$TMP/A/step-00000010.h5" "$TMP/KB/step-00000010.h5" &&
    same_tensors "$TMP/A/step-00000010.h5" "$TMP/KM/step-00000010.h5"
tap_check $? "activation checkpointing block and mlp (the router and experts recomputed) give the same bits as none (records and final weights)"

alt=(--set model.n_layer=3 --set model.moe_every=2 --set model.moe_shared_size=32
     --set model.moe_norm_topk=false)
run SD 2 "${alt[@]}" && run SZ 2 "${alt[@]}" --set parallel.sharding=zero3 &&
    run SK 2 "${alt[@]}" --set model.activation_checkpointing=block \
        --set model.activation_checkpointing_range=1-2 &&
    run S1D 2 "${alt[@]}" --set micro_batch=4 &&
    run S1Z 2 "${alt[@]}" --set micro_batch=4 --set parallel.sharding=zero3
sclose() { metrics_close "$TMP/SD/metrics.jsonl" "$TMP/SZ/metrics.jsonl" 1 1e-6 1e-5; }
tap_diag "every second layer MoE, shared expert, unnormalised: zero3 vs ddp: $(sclose)"
sclose >/dev/null && aux_close SD SZ && grep -q "layers=1/3 shared=32 unnormalised" "$TMP/SD.txt" &&
    cmp -s <(final_lines "$TMP/S1D/metrics.jsonl") <(final_lines "$TMP/S1Z/metrics.jsonl") &&
    cmp -s <(moe_lines S1D) <(moe_lines S1Z) &&
    [[ $(json_field "$TMP/SD/metrics.jsonl" 10 loss) != "" ]] &&
    cmp -s <(final_lines "$TMP/SD/metrics.jsonl") <(final_lines "$TMP/SK/metrics.jsonl") &&
    cmp -s <(moe_lines SD) <(moe_lines SK)
tap_check $? "moe_every = 2 (1 of 3 layers), a shared expert, unnormalised top-k: trains; zero3 equals ddp (loss, aux, z within 1e-6, grad norm 1e-5; the same bits at one micro-batch per rank); block checkpointing of the MoE layer and a dense one gives the same bits"

"$TOOL" ckpt verify "$TMP/A/step-00000010.h5" >"$TMP/verify.txt" 2>&1 &&
    "$TOOL" ckpt verify "$TMP/SD/step-00000010.h5" >>"$TMP/verify.txt" 2>&1 &&
    /usr/bin/python3 - "$TMP/A/step-00000010.h5" "$TMP/SD/step-00000010.h5" <<'PY'
import sys
try:
    import h5py
except ImportError:
    sys.exit(0)  # checked by `ckpt verify` alone where h5py is missing
a, b = (h5py.File(p, "r") for p in sys.argv[1:3])
ok = a["model/expw1"].shape == (2, 4, 96, 64) and a["model/expw2"].shape == (2, 4, 64, 48)
ok &= a["model/routerw"].shape == (2, 4, 64) and "model/fcw" not in a
ok &= b["model/expw1"].shape == (1, 4, 96, 64) and b["model/fcw"].shape == (2, 192, 64)
ok &= b["model/shw1"].shape == (1, 64, 64) and b["model/shw2"].shape == (1, 64, 32)
sys.exit(0 if ok else 1)
PY
tap_check $? "the checkpoints verify and hold the experts at global shape: expw1 (LM, E, 2FE, C), routerw (LM, E, C); dense layers' fcw (LD, ...)"

# generation (tests/eval/generate_lib.sh): 120 greedy tokens with the KV cache and without it, the
# next-token probabilities of every step compared
GEN=("$TOOL" generate -t '' --max-tokens 120) PROMPT="1 2 3 4 5"
source "$TSR_ROOT/tests/eval/generate_lib.sh"
greedy A/step-00000010.h5 ga && greedy SD/step-00000010.h5 gs &&
    probs_close "$TMP/ga.c.probs" "$TMP/ga.n.probs" && probs_close "$TMP/gs.c.probs" "$TMP/gs.n.probs" &&
    cmp -s "$TMP/ga.c" "$TMP/ga.n" && cmp -s "$TMP/gs.c" "$TMP/gs.n"
tap_check $? "tessera generate: the KV-cache decode of both MoE models (routing per chunk) equals the no-cache reference: 120 greedy tokens, every step's probabilities within 1e-6 + 1e-4 p"

# a diverging run (lr 1e6): the records stay JSON (non-finite figures are null)
run NAN 1 --set optim.lr=1e6 --set optim.grad_clip=0 --set max_duration=4ba
/usr/bin/python3 -c '
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
steps = [r for r in recs if "lr" in r]
sys.exit(0 if steps and any(r["loss"] is None or r["moe_aux"] is None for r in steps) else 1)' "$TMP/NAN/metrics.jsonl"
tap_check $? "a diverging MoE run (lr 1e6): every metrics.jsonl line parses as JSON, the non-finite loss and aux are null"

run IM 1 "${alt[@]}" --set model.moe_every=3 --init-from "$TMP/SD/step-00000010.h5"
rc=$?
[[ $rc == 1 ]] && grep -q "layer 1 is a mixture of experts in the checkpoint but dense in this run" "$TMP/IM.txt" &&
    [[ ! -e $TMP/IM/metrics.jsonl ]]
tap_check $? "--init-from a checkpoint whose MoE layer sits elsewhere (moe_every 2 vs 3, same shapes): exit 1 (got $rc) naming the layer, nothing written"

run E 1 --set model.moe_top_k=5
rc=$?
[[ $rc == 1 ]] && grep -q "model.moe_top_k = 5 is more than model.moe_experts = 4" "$TMP/E.txt" &&
    [[ ! -e $TMP/E ]]
tap_check $? "moe_top_k above moe_experts: exit 1 (got $rc) naming both keys, nothing written"

gpt=(--set model.moe_router_bias=true --set model.moe_expert_bias=true --set 'model.moe_act="gptoss"'
     --set model.swiglu_limit=0.5 --set model.bias=true)
run GA 2 "${gpt[@]}" && run GK 2 "${gpt[@]}" --set model.activation_checkpointing=block
rc=$?
[[ $rc == 0 ]] && cmp -s <(final_lines "$TMP/GA/metrics.jsonl") <(final_lines "$TMP/GK/metrics.jsonl") &&
    cmp -s <(moe_lines GA) <(moe_lines GK) && (($(moe_lines GK | wc -l) == 10)) &&
    same_tensors "$TMP/GA/step-00000010.h5" "$TMP/GK/step-00000010.h5" &&
    "$PY3" - "$TMP/GA/step-00000010.h5" <<'PY'
import sys, h5py
f = h5py.File(sys.argv[1], "r")["model"]
want = {"routerb": (2, 4), "expb1": (2, 4, 96), "expb2": (2, 4, 64), "attprojb": (2, 64)}
sys.exit(0 if all(n in f and f[n].shape == s and abs(f[n][()]).max() > 0 for n, s in want.items()) else 1)
PY
[[ $? == 0 ]] && greedy GA/step-00000010.h5 gg && probs_close "$TMP/gg.c.probs" "$TMP/gg.n.probs" &&
    cmp -s "$TMP/gg.c" "$TMP/gg.n"
tap_check $? "gpt-oss's experts train on 2 ranks (exit $rc); routerb, expb1, expb2, attprojb in the checkpoint at their shapes, trained away from 0; block checkpointing gives the same bits; the KV-cache decode equals the no-cache one"

cp -r "$TMP/GA" "$TMP/GR"
run GR 2 "${gpt[@]}" --set 'model.moe_act="swiglu"' --set max_duration=12ba
rc=$?
"$TOOL" ckpt export --format hf "$(ck "$TMP/GA" 10)" "$TMP/ghf" >"$TMP/ghf.txt" 2>&1
rc2=$?
[[ $rc == 1 ]] && grep -q 'moe_act "swiglu" vs "gptoss"' "$TMP/GR.txt" &&
    [[ $rc2 == 1 ]] && grep -q "model.moe_router_bias" "$TMP/ghf.txt" && [[ ! -e $TMP/ghf ]]
tap_check $? "a resume with moe_act = \"swiglu\" is refused naming it (exit $rc), the Hugging Face export names model.moe_router_bias (exit $rc2), writes nothing"

run GD 1 --set model.moe_experts=0 --set model.moe_intermediate_size=0 --set model.moe_z_loss_coef=0 \
    --set model.moe_expert_bias=true
rc2=$?
[[ $rc2 == 1 ]] &&
    grep -q "model.moe_expert_bias is set, but model.moe_experts = 0" "$TMP/GD.txt" && [[ ! -e $TMP/GD ]]
tap_check $? "moe_expert_bias on a dense model (exit $rc2): refused naming the key, nothing written (device = \"cuda\" runs gpt-oss's keys: tests/gpu/test_cuda_families.sh)"
cp -r "$TMP/SD" "$TMP/SG"
before=$(ls "$TMP/SG")
run SG 2 "${alt[@]}" --set model.moe_shared_gate=true --set max_duration=12ba
rc=$?
run SN 1 --set model.moe_shared_gate=true
rc3=$?
[[ $rc == 1 ]] && grep -q "moe_shared_gate true vs false" "$TMP/SG.txt" && [[ $(ls "$TMP/SG") == "$before" ]] &&
    [[ $rc3 == 1 ]] &&
    grep -q "model.moe_shared_gate = true gates the shared expert, but model.moe_shared_size = 0" "$TMP/SN.txt" &&
    [[ ! -e $TMP/SN ]]
tap_check $? "model.moe_shared_gate: a resume that adds it (exit $rc) and no shared expert (exit $rc3) refused naming it, nothing written (device = \"cuda\" runs it: tests/gpu/test_cuda_families.sh)"
tap_done
