#!/usr/bin/env bash
# Tensor parallelism's compositions with the modes it was refused with at first (issue 81;
# docs/parallelism.md "What composes with tensor parallelism"), through the real trainer on MPI
# ranks, tiny models (2 layers of width 64, 8 query and 2 key/value heads) on 32-token rows of the
# synthetic corpus, 6 steps, fp32 on the CPU:
#  - LoRA (docs/lora.md "Tensor parallelism"): adapters on q, k, v, o, gate, up and down with
#    dropout over a trained base, each computed as its base's split (B's rows of a column-parallel
#    target's output, A's columns of a row-parallel one's input): T = 2, T = 4 (each key/value
#    head on 2 ranks, its adapter's rows on both) and T 2 x zero3 2 equal one rank within 1e-6;
#  - the T = 2 run's checkpoint exported merged (`ckpt export --merge`): o_proj and down_proj are
#    PEFT's W + (alpha / r) B A of the base's export and the checkpoint's adapters, and the whole
#    export equals one rank's within 1e-5;
#  - resume: rank 1 SIGKILLed at a random step of a T = 2 LoRA run; the rerun equals the
#    uninterrupted run bit for bit (losses and checkpoints);
#  - QK-norm over the projection (model.qk_norm_scope = "projection": OLMo 2's), its sums over the
#    tensor group: T = 2, T = 4 (key/value heads replicated, sequence parallelism off), T 2 x
#    zero3 2 and T 2 x zero1 2 with block checkpointing equal one rank within 1e-6; the bytes the
#    T = 4 and zero1 runs' tensor groups sent equal the plan's formula x ranks x steps;
#  - expert parallelism: a MoE (4 experts, gpt-oss's unit, biases, a gated shared expert) at
#    T 2 x expert 2 (each rank 2 experts, each split inside): top 4 equals one rank within 1e-6
#    over 6 steps; top 2 step 0's gradients within 1e-5 (a near tie may flip a routing); its
#    checkpoint resumed on one rank and one rank's at T 2 x expert 2 within 1e-6, the experts'
#    tensors at global shapes; --init-from a Hugging Face export at T 2 x expert 2;
#  - GRPO (docs/rl.md "Under tensor parallelism"): a fresh tiny GPT-2 on grpo_prompts' arithmetic
#    prompts, rewarded by a regular expression (a digit: about one completion in 5), with the KL
#    term to the initial weights, 2 updates a step, 4 steps: T = 2 equals one rank, and T 2 x data
#    2 and T 2 x zero3 2 equal 2 data ranks: the same completions token for token at every step
#    (their rewards the same, their rollout log-probabilities within 1e-5), the loss (a sum of
#    terms that cancel over each group's advantages, ~1e-5 here) within 1e-7 absolute, the
#    gradient norm within 1e-6 and the KL within 1e-5 relative; LoRA (q, k, v, o, down; dropout
#    0.1; the base reference) at T = 2 likewise (the KL, ~7e-7, within 1e-4); the initial
#    reference's file written at T = 2 resumes on one rank, one rank's at T = 2, both within those
#    bounds of the uninterrupted run;
#  - refused with exit 1 naming both keys, nothing written: LoRA on a linear_attention layer's
#    projections under tensor parallelism.
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 10
parallel_args 2 4 2 6ba
wide=("${llama[@]}" --set model.n_head=8) # head size 8: 8 query, 2 key/value heads
# run DIR NP T MODEL-ARRAY-NAME ARGS...
run() {
    local dir=$1 np=$2 t=$3 m="$4[@]"; shift 4
    ranks "$np" "$TRAIN" "${!m}" --set parallel.tensor="$t" --set run_dir="$TMP/$dir" "$@" \
        >"$TMP/$dir.txt" 2>&1
}

# ---- LoRA ------------------------------------------------------------------------------------
run base 1 1 wide --set max_duration=4ba --set save_final=true || tap_diag "base: $(tail -3 "$TMP/base.txt")"
lora=(--set lora.rank=4 --set lora.alpha=8 --set lora.dropout=0.1 --set optim.lr=1e-2
      --set lora.targets=q,k,v,o,gate,up,down --init-from "$TMP/base" --set save_final=true)
run L1 1 1 wide "${lora[@]}" && run L2 2 2 wide "${lora[@]}" && run L4 4 4 wide "${lora[@]}" &&
    run L22 4 2 wide "${lora[@]}" --set parallel.sharding=zero3 && runs_exact L1 L2 L4 L22
tap_check $? "LoRA (q, k, v, o, gate, up, down; dropout 0.1) at T = 2, T = 4 (key/value heads replicated) and T 2 x zero3 2 equals one rank within 1e-6"

"$TOOL" ckpt export --format hf "$TMP/base" "$TMP/hf.base" >"$TMP/export.txt" 2>&1 &&
    "$TOOL" ckpt export --format hf --merge "$TMP/L2" "$TMP/hf.L2" >>"$TMP/export.txt" 2>&1 &&
    "$TOOL" ckpt export --format hf --merge "$TMP/L1" "$TMP/hf.L1" >>"$TMP/export.txt" 2>&1 &&
    /usr/bin/python3 - "$TMP" <<'PY'
import sys, json, h5py, numpy as np
tmp = sys.argv[1]
def st(d):  # safetensors, fp32, without a library
    raw = open(f"{tmp}/{d}/model.safetensors", "rb").read()
    n = int.from_bytes(raw[:8], "little"); h = json.loads(raw[8:8 + n]); out = {}
    for k, v in h.items():
        if k == "__metadata__": continue
        a, b = v["data_offsets"]
        out[k] = np.frombuffer(raw[8 + n + a:8 + n + b], dtype=np.float32).reshape(v["shape"])
    return out
base, m2, m1 = st("hf.base"), st("hf.L2"), st("hf.L1")
ck = h5py.File(f"{tmp}/L2/step-00000006.h5", "r")
worst = 0.0
for l in range(2):
    for t, name in (("o", "self_attn.o_proj"), ("down", "mlp.down_proj")):
        A, B = ck[f"lora/{t}_A"][l], ck[f"lora/{t}_B"][l]
        key = f"model.layers.{l}.{name}.weight"
        want = base[key] + (8 / 4) * (B @ A)
        worst = max(worst, float(np.max(np.abs(m2[key] - want))))
d = max(float(np.max(np.abs(m2[k] - m1[k]))) / max(float(np.max(np.abs(m1[k]))), 1e-30) for k in m1)
moved = float(np.max(np.abs(m2["model.layers.0.self_attn.o_proj.weight"] - base["model.layers.0.self_attn.o_proj.weight"])))
print(f"# merged o_proj, down_proj vs W + (alpha/r) B A: {worst:.1e}; T = 2's export vs one rank's: {d:.1e}; the adapters moved o_proj by {moved:.1e}")
sys.exit(0 if sorted(m1) == sorted(m2) and worst < 1e-6 and d < 1e-5 and moved > 1e-4 else 1)
PY
tap_check $? "ckpt export --merge of the T = 2 LoRA checkpoint: o_proj and down_proj are PEFT's W + (alpha/r) B A, the export within 1e-5 of one rank's"

k=$((RANDOM % 3 + 3))
save=(--set save_interval=2ba --set keep_last=5)
OMPI_MCA_odls_base_sigkill_timeout=0 TSR_FAULT=kill:$k:1 run K2 2 2 wide "${lora[@]}" "${save[@]}" \
    --set save_async=false
rc=$?
run U2 2 2 wide "${lora[@]}" "${save[@]}" && run K2 2 2 wide "${lora[@]}" "${save[@]}" && rc2=0 || rc2=1
[[ $rc != 0 && $rc2 == 0 ]] && grep -q "checkpoint resume step $((k / 2 * 2))" "$TMP/K2.txt" &&
    cmp -s <(final_lines "$TMP/U2/metrics.jsonl") <(final_lines "$TMP/K2/metrics.jsonl") &&
    same_tensors "$TMP/U2/step-00000006.h5" "$TMP/K2/step-00000006.h5"
tap_check $? "LoRA at T = 2: rank 1 SIGKILLed after step $k (exit $rc): the rerun resumes from step $((k / 2 * 2)) and equals the uninterrupted run bit for bit"

# ---- QK-norm over the projection ---------------------------------------------------------------
source "$(dirname "$0")/tensor_lib.sh" # (bytes_match, refused)
qp=(--set model.qk_norm=true --set model.qk_norm_scope=projection --set model.norm_placement=post)
run Q1 1 1 wide "${qp[@]}" && run Q2 2 2 wide "${qp[@]}" &&
    run Q4 4 4 wide "${qp[@]}" --set parallel.sequence=false &&
    run Q22 4 2 wide "${qp[@]}" --set parallel.sharding=zero3 --set model.activation_checkpointing=block &&
    run Q22z 4 2 wide "${qp[@]}" --set parallel.sharding=zero1 --set model.activation_checkpointing=block &&
    runs_exact Q1 Q2 Q4 Q22 Q22z && bytes_match Q4 4 4 wide "${qp[@]}" --set parallel.sequence=false &&
    bytes_match Q22z 4 2 wide "${qp[@]}" --set parallel.sharding=zero1 --set model.activation_checkpointing=block
tap_check $? "QK-norm over the projection (its sums of squares and its backward's over the tensor group; OLMo 2's post norms) at T = 2, T = 4 (key/value heads replicated, no sequence parallelism), T 2 x zero3 2 and T 2 x zero1 2 with block checkpointing equal one rank within 1e-6; the bytes sent at T = 4 and T 2 x zero1 2 (the mixer rerun) equal the plan's formula"

# close3 A B: B's run (a resume of step 2) within 1e-6 of A's from step 3 on
close3() {
    local out rc
    out=$(metrics_close "$TMP/$1/metrics.jsonl" "$TMP/$2/metrics.jsonl" 3 1e-6 1e-5)
    rc=$?
    tap_diag "$2 vs $1: $out"
    return $rc
}

# ---- expert parallelism -----------------------------------------------------------------------
moe=(--set model.moe_experts=4 --set model.moe_intermediate_size=48 --set model.moe_shared_size=32
     --set model.moe_shared_gate=true --set model.moe_router_bias=true
     --set model.moe_expert_bias=true --set model.moe_act=gptoss)
ep=(--set parallel.expert=2)
sv=(--set save_interval=2ba --set keep_last=5 --set save_final=true)
g0=(--set max_duration=1ba --set save_final=true --set optim.grad_clip=0)
run E1 1 1 llama "${moe[@]}" --set model.moe_top_k=4 "${sv[@]}" &&
    run E22 4 2 llama "${moe[@]}" --set model.moe_top_k=4 "${ep[@]}" "${sv[@]}" && runs_exact E1 E22 &&
    run e1 1 1 llama "${moe[@]}" --set model.moe_top_k=2 "${g0[@]}" &&
    run e22 4 2 llama "${moe[@]}" --set model.moe_top_k=2 "${ep[@]}" "${g0[@]}" && moments_close e1 e22
tap_check $? "MoE at T 2 x expert 2 (each rank 2 of the 4 experts, each split inside; gpt-oss's unit, biases, a gated shared expert): every expert a token (top 4) equals one rank within 1e-6 over 6 steps; top 2: step 0's gradients within 1e-5"
run ER1 1 1 llama "${moe[@]}" --set model.moe_top_k=4 --resume "$(ck "$TMP/E22" 2)" &&
    run ER22 4 2 llama "${moe[@]}" --set model.moe_top_k=4 "${ep[@]}" --resume "$(ck "$TMP/E1" 2)" &&
    close3 E1 ER1 && close3 E1 ER22 &&
    /usr/bin/python3 - "$(ck "$TMP/E1" 6)" "$(ck "$TMP/E22" 6)" <<'PY'
import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
names = []
a.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
bad = [n for n in names if n not in b or a[n].shape != b[n].shape]
exp = [n for n in names if "/expw" in n and n not in bad]
worst = max(float(np.max(np.abs(a[n][()] - b[n][()]))) / max(float(np.max(np.abs(a[n][()]))), 1e-30) for n in exp)
print(f"# {len(names)} tensors, shapes differing: {bad}; the experts' {len(exp)} within {worst:.1e} of one rank's")
sys.exit(0 if names and not bad and len(exp) == 6 and worst < 1e-4 else 1)
PY
tap_check $? "T 2 x expert 2's checkpoint of step 2 resumed on one rank, and one rank's at T 2 x expert 2, continue within 1e-6; the experts' tensors (weights, moments) at global shapes within 1e-4 of one rank's after 6 steps"
plain=(--set model.moe_experts=4 --set model.moe_intermediate_size=48 --set model.moe_top_k=4)
run X1 1 1 llama "${plain[@]}" --set max_duration=2ba --set save_final=true &&
    "$TOOL" ckpt export --format hf "$TMP/X1" "$TMP/hf.moe" >"$TMP/export.moe.txt" 2>&1 &&
    run XF1 1 1 llama "${plain[@]}" --init-from "$TMP/hf.moe" &&
    run XF22 4 2 llama "${plain[@]}" "${ep[@]}" --init-from "$TMP/hf.moe" && runs_exact XF1 XF22
tap_check $? "--init-from a Hugging Face export of a MoE at T 2 x expert 2 (each rank's experts read whole, then split) trains as one rank within 1e-6"

# ---- GRPO ------------------------------------------------------------------------------------
grpo_prompts "$TMP/rl" 400 || tap_diag "grpo_prompts failed"
grpo_small_args "$TMP/rl"
rl=("${small[@]}" --set max_duration=4ba --set reward.kind=regex --set 'reward.regex=[0-9]'
    --set grpo.kl_coef=0.04 --set grpo.log_completions=64 --set optim.lr=1e-3 --set grpo.updates=2
    --set save_interval=2ba --set keep_last=5)
lora_rl=(--set lora.rank=4 --set lora.alpha=8 --set lora.dropout=0.1 --set lora.targets=q,k,v,o,down)
# grpo_same REF DIR KL_TOL [FROM]: DIR's steps (from FROM on, default 1) as REF's: the completions
# (tokens, rewards; log-probabilities within 1e-5), the loss within 1e-7 absolute, the gradient norm
# within 1e-6 and the KL within KL_TOL relative
grpo_same() {
    "$PY3" - "$TMP/$1" "$TMP/$2" "$3" "${4:-1}" <<'PY'
import json, sys
a, b, kl_tol, lo = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
def steps(d): return {j["step"]: j for j in map(json.loads, open(d + "/metrics.jsonl")) if "loss" in j and j["step"] >= lo}
def comps(d): return {(j["step"], j["position"], j["sample"]): j for j in map(json.loads, open(d + "/completions.jsonl")) if j["step"] >= lo}
A, B, ca, cb = steps(a), steps(b), comps(a), comps(b)
rel = lambda x, y: abs(x - y) / max(abs(x), abs(y), 1e-300)
same = sorted(ca) == sorted(cb) and all(ca[k]["tokens"] == cb[k]["tokens"] and ca[k]["reward"] == cb[k]["reward"] and abs(ca[k]["logprob"] - cb[k]["logprob"]) <= 1e-5 for k in ca)
dl = max(abs(A[s]["loss"] - B[s]["loss"]) for s in A) if A and sorted(A) == sorted(B) else 1
dn = max(rel(A[s]["grad_norm"], B[s]["grad_norm"]) for s in A) if not isinstance(dl, int) else 1
dk = max(rel(A[s]["grpo_kl"], B[s]["grpo_kl"]) for s in A if s > 1) if not isinstance(dl, int) else 1
moved = len({tuple(ca[k]["tokens"]) for k in ca}) > 1 and any(A[s]["grpo_reward_std"] > 0 for s in A)
print(f"# {b.split('/')[-1]} vs {a.split('/')[-1]}: {len(cb)} completions the same: {same}; loss {dl:.1e} abs, grad norm {dn:.1e}, KL {dk:.1e}")
sys.exit(0 if same and moved and len(A) >= 2 and dl <= 1e-7 and dn <= 1e-6 and dk <= kl_tol else 1)
PY
}
run G1 1 1 rl && run G2 2 2 rl && run G21 2 1 rl && run G22 4 2 rl && run G22z 4 2 rl --set parallel.sharding=zero3 &&
    run GL1 1 1 rl "${lora_rl[@]}" && run GL2 2 2 rl "${lora_rl[@]}" &&
    grpo_same G1 G2 1e-5 && grpo_same G21 G22 1e-5 && grpo_same G21 G22z 1e-5 && grpo_same GL1 GL2 1e-4
tap_check $? "GRPO at T = 2 equals one rank, T 2 x data 2 and T 2 x zero3 2 equal 2 data ranks, LoRA at T = 2 one rank's: the same completions at every step, the loss within 1e-7 absolute, the gradient norm within 1e-6"
# resumed from step 2 in a copy of the run directory (the checkpoint and grpo-reference.bin)
resumed() { # SRC DIR NP T
    mkdir -p "$TMP/$2" && cp "$TMP/$1/grpo-reference.bin" "$TMP/$1/step-00000002.h5" "$TMP/$2/" &&
        run "$2" "$3" "$4" rl --resume "$TMP/$2/step-00000002.h5"
}
resumed G2 GR1 1 1 && resumed G1 GR2 2 2 && grpo_same G1 GR1 1e-5 3 && grpo_same G1 GR2 1e-5 3
tap_check $? "GRPO's initial reference at global shapes: T = 2's grpo-reference.bin resumes on one rank, one rank's at T = 2, and steps 3-4 equal the uninterrupted run's"

# ---- refusals --------------------------------------------------------------------------------
hyb=(--set model.layer_types=linear_attention,full_attention --set model.linear_num_key_heads=2
     --set model.linear_num_value_heads=4 --set model.linear_key_head_dim=8
     --set model.linear_value_head_dim=8 --set model.linear_conv_kernel_dim=4)
refused Y1 2 2 "parallel.tensor = 2 with lora.targets naming in_proj_qkvz, in_proj_ba or out_proj (a linear_attention layer's): tensor parallelism does not run with it yet" \
    "${hyb[@]}" --set lora.rank=4 --set lora.targets=q,out_proj
tap_check $? "refused with exit 1 naming both keys, nothing written: LoRA on a linear_attention layer's projections at T = 2"
tap_done
