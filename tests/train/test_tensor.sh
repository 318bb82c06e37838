#!/usr/bin/env bash
# Tensor and sequence parallelism (parallel.tensor = T, parallel.sequence; docs/parallelism.md
# "Tensor parallelism") through the real trainer on MPI ranks, tiny models (2 layers of width 64)
# on 32-token rows of the synthetic corpus, 6 steps, fp32 on the CPU:
#  - exactness: tiny-llama's style (RMSNorm, RoPE, SwiGLU, GQA 4:2, untied head) at T = 2 and a
#    GPT-2 style model (LayerNorm, biases: the ones added after a sum by one rank, learned
#    positions, GELU, tied embeddings) at T = 2, with sequence parallelism; 8 query and 2
#    key/value heads at T = 4 (each key/value head held by 2 ranks), with and without sequence
#    parallelism; T 2 x data 2 with ddp and zero1; Gemma's and OLMo 2's variants at T = 2
#    (sandwich and post norms, embedding scale, GeGLU, both soft caps, sliding windows, sinks,
#    the gated output, QK-norm, the document mask) with block activation checkpointing: the
#    losses of one rank within 1e-6 relative at every step (gradient norms 1e-5);
#  - compositions: T 2 x zero3 2 and T 2 x hsdp; T 2 x context 2 (learned positions, the document
#    mask across chunks); a hybrid's Gated DeltaNet layers at T = 2 and T 2 x context 2; DPO at
#    T = 2 (1e-5, as test_dpo.sh's data ranks); Muon (its matrices orthogonalised whole) at T = 2
#    and T 2 x zero3 2; a MoE (experts split inside each expert, a gated shared expert, biases,
#    gpt-oss's unit) at T = 2 with every expert a token (a top-k routing can flip at a near tie
#    under another summation order: docs/parallelism.md), and with top 2 step 0's gradients at
#    T = 2 and T 2 x zero3 2 within 1e-5;
#  - evaluation at T = 2: the validation loss within 1e-6 and the ICL results (greedy choices
#    over the vocabulary-parallel logits) equal to one rank's; the end-of-run sample the same
#    tokens;
#  - the bytes: each run's count of what its tensor groups sent (the decoder's collectives and
#    the partial gradients' sums) equals the plan's formula (model_tp.h tp_step_bytes, printed
#    exactly by --dry-run) x ranks x steps, for ddp, zero1, sequence parallelism off and
#    activation checkpointing;
#  - resume: rank 1 SIGKILLed at a random step of a T 2 x data 2 run; the rerun equals the
#    uninterrupted run bit for bit (losses and checkpoints); the same checkpoint resumed at T = 4,
#    at data 4, on one rank and at T 2 x zero3 2 within 1e-6; a one-rank checkpoint resumed at
#    T 2 x zero3 2; the
#    checkpoint's tensors at their global shapes, `tessera ckpt export --format hf` of it;
#  - refused with exit 1 and nothing written: heads, key/value heads, MLP width, padded
#    vocabulary, seq_len that T does not split (the valid values named), T across nodes without
#    parallel.tensor_across_nodes, and each mode tensor parallelism does not run with yet
#    (multi-head latent attention; device = cuda at start; LoRA's, QK-norm over the projection's,
#    expert parallelism's and GRPO's compositions: test_tensor_modes.sh).
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 16
parallel_args 2 4 2 6ba
wide=("${llama[@]}" --set model.n_head=8) # head size 8: 8 query, 2 key/value heads
gemma=("${llama[@]}" --set model.norm_placement=sandwich --set model.embed_scale=sqrt_d_model
       --set model.mlp=geglu_tanh --set model.final_logit_softcapping=30
       --set model.attn_logit_softcapping=50 --set model.sliding_window=8
       --set model.query_pre_attn_scalar=16 --set model.layer_types=sliding_attention,full_attention
       --set model.activation_checkpointing=block)
olmo=("${llama[@]}" --set model.norm_placement=post --set model.qk_norm=true
      --set model.attn_sinks=true --set model.attn_output_gate=true --set model.attn_mask=document
      --set model.eot_token=8 --set model.qkv_bias=true --set model.activation_checkpointing=block)
# run DIR NP T MODEL-ARRAY-NAME ARGS...
run() {
    local dir=$1 np=$2 t=$3 m="$4[@]"; shift 4
    ranks "$np" "$TRAIN" "${!m}" --set parallel.tensor="$t" --set run_dir="$TMP/$dir" "$@" \
        >"$TMP/$dir.txt" 2>&1
}
source "$(dirname "$0")/tensor_lib.sh" # (bytes_match, refused)

# ---- exactness, 6 steps ------------------------------------------------------------------------
run L1 1 1 llama && run L2 2 2 llama && run G1 1 1 gpt && run G2 2 2 gpt &&
    runs_exact L1 L2 && runs_exact G1 G2
tap_check $? "Llama style (GQA 4:2, RMSNorm, RoPE, SwiGLU, untied head) and GPT-2 style (LayerNorm, biases, learned positions, GELU, tied embeddings) at T = 2 with sequence parallelism equal one rank within 1e-6"
run W1 1 1 wide && run W4 4 4 wide && run W4n 4 4 wide --set parallel.sequence=false &&
    run W22 4 2 wide && run W22z 4 2 wide --set parallel.sharding=zero1 &&
    runs_exact W1 W4 W4n W22 W22z
tap_check $? "8 query and 2 key/value heads: T = 4 (each key/value head on 2 ranks) with and without sequence parallelism, T 2 x data 2 with ddp and with zero1 equal one rank within 1e-6"
run M1 1 1 gemma && run M2 2 2 gemma && run O1 1 1 olmo && run O2 2 2 olmo && runs_exact M1 M2 &&
    runs_exact O1 O2
tap_check $? "Gemma's variants (sandwich norms, embedding scale, GeGLU, both soft caps, sliding windows, query_pre_attn_scalar) and OLMo 2's (post norms, QK-norm, sinks, gated output, document mask, qkv biases) with block activation checkpointing at T = 2 equal one rank within 1e-6"

# ---- compositions ----------------------------------------------------------------------------
run W22Z 4 2 wide --set parallel.sharding=zero3 && run W22H 4 2 wide --set parallel.sharding=hsdp \
    --set parallel.replica_group=1 --set micro_batch=1 && runs_exact W1 W22Z W22H
tap_check $? "T 2 x zero3 over 2 ranks, and T 2 x hsdp (groups of 1, 2 replicas), equal one rank within 1e-6"
doc=(--set model.attn_mask=document --set model.eot_token=8)
hyb=("${llama[@]}" --set model.layer_types=linear_attention,full_attention
     --set model.linear_num_key_heads=2 --set model.linear_num_value_heads=4
     --set model.linear_key_head_dim=8 --set model.linear_value_head_dim=8
     --set model.linear_conv_kernel_dim=4 "${doc[@]}")
run D1 1 1 gpt "${doc[@]}" && run D22 4 2 gpt "${doc[@]}" --set parallel.context=2 &&
    run H1 1 1 hyb && run H2 2 2 hyb && run H22 4 2 hyb --set parallel.context=2 &&
    runs_exact D1 D22 && runs_exact H1 H2 H22
tap_check $? "T 2 x context 2 (GPT-2 style, learned positions, the document mask across chunks), and a hybrid's Gated DeltaNet layers (2 key, 4 value heads) at T = 2 and T 2 x context 2, equal one rank within 1e-6"
pairs=$("$PY3" "$TSR_ROOT/tests/reference/dpo_pairs.py" "$TMP")
dpo=(--set objective=dpo --set data.train="$pairs" --set data.val="$pairs" --set eval_interval=3ba
     --set eval_samples=16 --set model.vocab_size=100 --set seq_len=16 --set model.max_seq_len=16
     --set global_batch=8 --set micro_batch=4 --set dpo.beta=0.5 --set optim.lr=1e-2)
run P1 1 1 llama "${dpo[@]}" && run P2 2 2 llama "${dpo[@]}" &&
    metrics_close "$TMP/P1/metrics.jsonl" "$TMP/P2/metrics.jsonl" 1 1e-5 1e-5 &&
    [[ $(grep -c '"val_dpo_accuracy"' "$TMP/P1/metrics.jsonl") == 2 ]] &&
    cmp -s <(grep -o '"val_dpo_accuracy": [0-9.]*' "$TMP/P1/metrics.jsonl") \
           <(grep -o '"val_dpo_accuracy": [0-9.]*' "$TMP/P2/metrics.jsonl")
tap_check $? "DPO (its reference's log-probabilities and the weighted backward over the vocabulary-parallel logits) at T = 2 equals one rank within 1e-5 (as test_dpo.sh's ranks), the same validation accuracy"

moe=(--set model.moe_experts=4 --set model.moe_intermediate_size=48 --set model.moe_shared_size=32
     --set model.moe_shared_gate=true --set model.moe_router_bias=true
     --set model.moe_expert_bias=true --set model.moe_act=gptoss)
g0=(--set max_duration=1ba --set save_final=true --set optim.grad_clip=0)
run E1 1 1 llama "${moe[@]}" --set model.moe_top_k=4 && run E2 2 2 llama "${moe[@]}" --set model.moe_top_k=4 &&
    runs_exact E1 E2 && run e1 1 1 llama "${moe[@]}" --set model.moe_top_k=2 "${g0[@]}" &&
    run e2 2 2 llama "${moe[@]}" --set model.moe_top_k=2 "${g0[@]}" &&
    run e22 4 2 llama "${moe[@]}" --set model.moe_top_k=2 "${g0[@]}" --set parallel.sharding=zero3 &&
    moments_close e1 e2 e22
tap_check $? "MoE (4 experts split inside each expert, the shared expert and its gate, router and expert biases, gpt-oss's unit, the auxiliary losses once): every expert a token (top 4) at T = 2 equals one rank within 1e-6 over 6 steps; top 2: step 0's gradients at T = 2 and T 2 x zero3 2 within 1e-5"
run U1 1 1 wide --set optim.name=muon && run U2 2 2 wide --set optim.name=muon &&
    run U22 4 2 wide --set optim.name=muon --set parallel.sharding=zero3 && runs_exact U1 U2 U22
tap_check $? "Muon (each split matrix orthogonalised whole: its slices all-reduced over the tensor group) at T = 2 and T 2 x zero3 2 equals one rank within 1e-6"

# ---- evaluation and the sample ---------------------------------------------------------------
icl=(--config "$TMP/icl.cfg" "${base[@]}" --set model.vocab_size=320 --set model.vocab_multiple=64
     --set data.train="$TMP/data/train" --set data.tokenizer="$TMP/tok.tok"
     --set data.val="$TMP/data/val" --set eval_interval=6ba --set eval_samples=16
     --set sample.tokens=8)
run I1 1 1 icl && run I2 2 2 icl && runs_exact I1 I2 &&
    metrics_close "$TMP/I1/metrics.jsonl" "$TMP/I2/metrics.jsonl" 1 1e-6 1e-5 >/dev/null
ok=$?
vl() { grep -o '"val_loss": [0-9.e-]*' "$TMP/$1/metrics.jsonl"; }
ic() { grep -o '"tasks": {.*}, "gauntlet": [^,]*' "$TMP/$1/metrics.jsonl"; }
sm() { sed -n '/^sample (/{n;p}' "$TMP/$1.txt"; }
tap_diag "val $(vl I1) vs $(vl I2); ICL at T = 2: $(ic I2 | tail -1)"
((ok == 0)) && "$PY3" -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(abs(a - b) > 1e-6 * a)" \
    "$(vl I1 | grep -o '[0-9.e-]*$')" "$(vl I2 | grep -o '[0-9.e-]*$')" &&
    [[ $(ic I1 | wc -l) == 1 ]] && cmp -s <(ic I1) <(ic I2) && [[ -n $(sm I1) ]] && cmp -s <(sm I1) <(sm I2)
tap_check $? "T = 2: the validation loss within 1e-6 of one rank's, the ICL results (2 tasks) and the end-of-run sample's tokens the same"

# ---- the bytes -------------------------------------------------------------------------------
bytes_match W4 4 4 wide && bytes_match W4n 4 4 wide --set parallel.sequence=false &&
    bytes_match W22z 4 2 wide --set parallel.sharding=zero1 && bytes_match M2 2 2 gemma
tap_check $? "the bytes each run's tensor groups sent (counted by the collectives) equal the plan's formula x ranks x steps: T = 4 with and without sequence parallelism, T 2 x data 2 zero1, T = 2 with sandwich norms and block checkpointing"

# ---- resume ----------------------------------------------------------------------------------
k=$((RANDOM % 3 + 3))
OMPI_MCA_odls_base_sigkill_timeout=0 TSR_FAULT=kill:$k:1 run K22 4 2 wide --set save_interval=2ba \
    --set keep_last=5 --set save_async=false --set save_final=true
rc=$?
run U22 4 2 wide --set save_interval=2ba --set keep_last=5 --set save_final=true &&
    run K22 4 2 wide --set save_interval=2ba --set keep_last=5 --set save_final=true && rc2=0 || rc2=1
[[ $rc != 0 && $rc2 == 0 ]] && grep -q "checkpoint resume step $((k / 2 * 2))" "$TMP/K22.txt" &&
    cmp -s <(final_lines "$TMP/U22/metrics.jsonl") <(final_lines "$TMP/K22/metrics.jsonl") &&
    same_tensors "$TMP/U22/step-00000006.h5" "$TMP/K22/step-00000006.h5"
tap_check $? "rank 1 SIGKILLed after step $k of a T 2 x data 2 run (exit $rc): the rerun resumes from step $((k / 2 * 2)) and equals the uninterrupted run bit for bit"
ck2=$(ck "$TMP/U22" 2)
run R4 4 4 wide --resume "$ck2" && run RD 4 1 wide --set micro_batch=1 --resume "$ck2" &&
    run R1 1 1 wide --resume "$ck2" && run RZ 4 2 wide --set parallel.sharding=zero3 --resume "$ck2" &&
    run S1 1 1 wide --set save_interval=2ba --set keep_last=5 &&
    run Q2 4 2 wide --set parallel.sharding=zero3 --resume "$(ck "$TMP/S1" 2)" &&
    for d in R4 RD R1 RZ; do metrics_close "$TMP/U22/metrics.jsonl" "$TMP/$d/metrics.jsonl" 3 1e-6 1e-5 || exit 1; done &&
    metrics_close "$TMP/S1/metrics.jsonl" "$TMP/Q2/metrics.jsonl" 3 1e-6 1e-5
tap_check $? "the T 2 x data 2 checkpoint of step 2 resumed at T = 4, at data 4, on one rank and at T 2 x zero3 2, and a one-rank checkpoint resumed at T 2 x zero3 2, continue within 1e-6"
/usr/bin/python3 - "$ck2" "$(ck "$TMP/S1" 2)" <<'PY'
import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
names = []
a.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
bad = [n for n in names if a[n].shape != b[n].shape]
worst = max(float(np.max(np.abs(a[n][()] - b[n][()]))) / max(float(np.max(np.abs(b[n][()]))), 1e-30)
            for n in names if n.startswith("model/"))
print(f"# {len(names)} tensors, shapes differing: {bad}; weights within {worst:.1e} of one rank's")
sys.exit(0 if names and not bad and worst < 1e-4 else 1)
PY
ok=$?
((ok == 0)) && "$TOOL" ckpt export --format hf "$ck2" "$TMP/hf" >"$TMP/export.txt" 2>&1 &&
    [[ -s $TMP/hf/model.safetensors && -s $TMP/hf/config.json ]] &&
    run F1 1 1 wide --init-from "$TMP/hf" && run F2 2 2 wide --init-from "$TMP/hf" &&
    run F4 4 2 wide --set parallel.sharding=zero3 --init-from "$ck2" && runs_exact F1 F2 F4
tap_check $? "a T 2 x data 2 checkpoint holds every tensor at its global shape, the weights those of one rank's run (1e-4 after 2 AdamW steps); ckpt export --format hf writes it, and --init-from that export at T = 2 and from the checkpoint at T 2 x zero3 2 train as one rank from the export"

# ---- refusals --------------------------------------------------------------------------------
refused X1 4 4 "the query heads, model.n_head = 6, do not split over parallel.tensor = 4 ranks (each rank holds whole heads, rows or tokens of model.n_head); the values of parallel.tensor that split this model: 1, 2" --set model.n_head=6 --set model.head_dim=8 &&
    refused X2 4 4 "key/value heads (a multiple of them is a multiple of T, or they divide T: replicated), model.n_kv_head = 3" --set model.n_head=12 --set model.d_model=96 --set model.n_kv_head=3 &&
    refused X3 4 4 "the MLP width, model.intermediate_size = 90, do not split over parallel.tensor = 4" --set model.intermediate_size=90 &&
    refused X4 2 2 "model.vocab_multiple = " --set model.vocab_size=63 --set model.vocab_multiple=1 &&
    refused X5 4 4 "seq_len = 30, do not split over parallel.tensor = 4" --set seq_len=30 --set model.max_seq_len=30
tap_check $? "refused with exit 1, nothing written, the valid values named: 6 heads, 3 key/value heads at T = 4, an MLP width of 90 and a seq_len of 30 at T = 4, a padded vocabulary of 63 at T = 2"
span=$("$TRAIN" "${llama[@]}" --set parallel.tensor=2 --plan 4/1 2>&1)
r1=$?
"$TRAIN" "${llama[@]}" --set parallel.tensor=2 --set parallel.tensor_across_nodes=true --plan 4/1 >/dev/null 2>&1
r2=$?
[[ $r1 == 1 && $r2 == 0 ]] && grep -qF "a tensor group of 2 consecutive ranks would span nodes (1 rank on this node" <<<"$span" &&
    grep -qF "parallel.tensor_across_nodes = true" <<<"$span"
tap_check $? "a tensor group of 2 over nodes of 1 rank (--plan 4/1) refused with exit 1 naming parallel.tensor_across_nodes; accepted with it (exit $r1, $r2)"
bad=0
refused Y 2 2 "parallel.tensor = 2 with model.kv_lora_rank > 0 (multi-head latent attention): tensor parallelism does not run with it yet" \
    --set model.n_kv_head=0 --set model.kv_lora_rank=32 --set model.qk_rope_head_dim=8 || bad=1
refused Yc 2 2 'parallel.tensor = 2 with device = "cuda" and parallel.sharding other than "ddp": tensor parallelism on the GPU does not run with it yet' \
    --set device=cuda --set model.n_head=2 --set parallel.sharding=zero1 || bad=1
((bad == 0))
tap_check $? "refused with exit 1 naming both keys, nothing written: parallel.tensor with multi-head latent attention, and (at start) device = cuda with zero1 (tests/gpu/test_cuda_tensor.sh runs ddp)"
tap_done
