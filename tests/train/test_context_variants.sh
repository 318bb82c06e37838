#!/usr/bin/env bash
# Context parallelism (parallel.context = N, docs/parallelism.md "Attention variants in the ring")
# with the 2026 decoder variants, through the real trainer on MPI ranks: tiny Llama-style models
# (2 layers, d_model 64, 4 heads of 16 on 2 key/value heads) on 32-token rows, one microbatch of 4
# sequences a step, 4 steps; the losses of N = 1 within 1e-6 relative at every step, the gradient
# norms within 1e-5 (as tests/train/test_context.sh compares):
#  - sliding windows (layer_types sliding,full) of W = 3 with the document mask at N = 2 and 4:
#    W is smaller than a rank's chunk (8 and 4 positions), so blocks wholly outside the band are
#    skipped (the run's "context ring" line counts them: > 0), the others masked;
#  - attention sinks (N = 2), their gradients: every tensor's Adam first moments after 4 steps
#    within 1e-5 of the tensor's largest (a sink gradient not summed over the context ranks, or
#    counted once per block, would show);
#  - the attention and final-logit soft caps, and query_pre_attn_scalar (N = 2);
#  - OLMo 2's post norms with QK-norm over the projection, with Qwen3-Next's gated attention output
#    (model.attn_output_gate) (N = 2);
#  - a Gemma-3-like model (sandwich norms, the embedding scale, GeGLU-tanh, QK-norm per head,
#    query_pre_attn_scalar, sliding and full layers with their RoPE bases, multi-query, tied
#    head, the document mask) at N = 4 and data x context = 2 x 2 under zero3;
#  - a gpt-oss-like model (sinks, sliding and full layers, YaRN, attention biases, 4 experts top 2
#    with router and expert biases and the clamped unit, the auxiliary losses off, the document
#    mask) at N = 2, blocks skipped;
#  (the linear_attention layers under the ring: tests/train/test_hybrid_context.sh).
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 9
make_synth "$TMP/d" 64 20000
tiny_llama_args "$TMP/d/train"
args+=(--set model.vocab_size=64 --set model.n_head=4 --set model.n_kv_head=2
       --set global_batch=4 --set micro_batch=4 --set max_duration=4ba --set save_interval=0ba
       --set save_final=false --set watchdog.window=0)
doc=(--set model.attn_mask=document --set model.eot_token=8)
# run DIR NP N ARGS...
run() {
    local dir=$1 np=$2 n=$3; shift 3
    ranks "$np" timeout -k 5 300 "$TRAIN" "${args[@]}" --set parallel.context="$n" \
        --set run_dir="$TMP/$dir" "$@" >"$TMP/$dir.txt" 2>&1
}
# skipped DIR: the blocks the ring skipped outside the windows' bands, from its end-of-run line
skipped() { sed -n 's/^context ring: .*), \([0-9]*\) attention blocks outside.*/\1/p' "$TMP/$1.txt"; }

win=(--set model.layer_types=sliding_attention,full_attention --set model.sliding_window=3 "${doc[@]}"
     --set sample.tokens=6 --set sample.top_k=1)
run W1 1 1 "${win[@]}" && run W2 2 2 "${win[@]}" && run W4 4 4 "${win[@]}" && runs_exact W1 W2 W4
rc=$?
s2=$(skipped W2) s4=$(skipped W4)
tap_diag "blocks skipped outside the band: ${s2:-none} at N = 2, ${s4:-none} at N = 4"
((rc == 0)) && ((${s2:-0} > 0 && ${s4:-0} > 0))
tap_check $? "sliding windows of 3 (< a rank's chunk), document mask: N = 2 and 4 equal N = 1 within 1e-6, whole blocks outside the band skipped ($s2, $s4)"

# the end-of-run sample (greedy, 6 tokens) under the ring: every rank of the context group runs
# the forwards, the rank holding the last position picks (it hung before: rank 0 alone went round
# the ring); the same tokens as one rank's
sample_of() { grep -A1 '^sample' "$TMP/$1.txt" | tail -1; }
s1=$(sample_of W1) s2=$(sample_of W2) s4=$(sample_of W4)
tap_diag "samples: N = 1 '$s1', N = 2 '$s2', N = 4 '$s4'"
[[ -n $s1 && $(wc -w <<<"$s1") == 6 && $s2 == "$s1" && $s4 == "$s1" ]]
tap_check $? "the end-of-run sample at N = 2 and 4 (greedy, 6 tokens) ends and equals N = 1's"

run S1 1 1 --set model.attn_sinks=true --set save_final=true &&
    run S2 2 2 --set model.attn_sinks=true --set save_final=true && runs_exact S1 S2 &&
    MOMENTS_STEP=4 MOMENTS_NEED=sinks moments_close S1 S2
tap_check $? "attention sinks, causal: N = 2 equals N = 1 within 1e-6, and every tensor's first moments (the sinks' too) within 1e-5"

cap=(--set model.attn_logit_softcapping=0.5 --set model.final_logit_softcapping=3.0)
run C1 1 1 "${cap[@]}" && run C2 2 2 "${cap[@]}" && runs_exact C1 C2
tap_check $? "attention and final-logit soft caps: N = 2 equals N = 1 within 1e-6"

run Q1 1 1 --set model.query_pre_attn_scalar=7 "${doc[@]}" &&
    run Q2 2 2 --set model.query_pre_attn_scalar=7 "${doc[@]}" && runs_exact Q1 Q2
tap_check $? "query_pre_attn_scalar = 7 (head size 16), document mask: N = 2 equals N = 1 within 1e-6"

olmo=(--set model.norm_placement=post --set model.qk_norm=true --set model.qk_norm_scope=projection
      --set model.attn_output_gate=true)
run O1 1 1 "${olmo[@]}" && run O2 2 2 "${olmo[@]}" && runs_exact O1 O2
tap_check $? "OLMo 2's post norms with QK-norm over the projection, and Qwen3-Next's gated attention output: N = 2 equals N = 1 within 1e-6"

gemma=(--set model.norm_placement=sandwich --set model.embed_scale=sqrt_d_model
       --set model.mlp=geglu_tanh --set model.qk_norm=true --set model.n_kv_head=1
       --set model.query_pre_attn_scalar=12 --set model.tie_embeddings=true
       --set model.layer_types=sliding_attention,full_attention --set model.sliding_window=5
       --set model.rope_theta=1000000 --set model.rope_local_theta=10000 "${doc[@]}")
run G1 1 1 "${gemma[@]}" && run G4 4 4 "${gemma[@]}" &&
    run GZ 4 2 "${gemma[@]}" --set micro_batch=2 --set parallel.sharding=zero3 && runs_exact G1 G4 GZ
tap_check $? "Gemma-3-like (sandwich, embedding scale, GeGLU-tanh, QK-norm, query_pre_attn_scalar, window 5 and local RoPE, MQA, document mask): N = 4 and 2 x 2 under zero3 equal N = 1 within 1e-6"

oss=(--set model.attn_sinks=true --set model.layer_types=sliding_attention,full_attention
     --set model.sliding_window=3 --set model.bias=true --set model.rope_scaling=yarn
     --set model.rope_factor=4 --set model.rope_original_max_pos=8 --set model.moe_experts=4
     --set model.moe_top_k=2 --set model.moe_intermediate_size=32 --set model.moe_router_bias=true
     --set model.moe_expert_bias=true --set model.moe_act=gptoss --set model.moe_aux_loss_coef=0
     --set model.moe_z_loss_coef=0 "${doc[@]}")
run X1 1 1 "${oss[@]}" && run X2 2 2 "${oss[@]}" && runs_exact X1 X2
rc=$?
s2=$(skipped X2)
((rc == 0)) && ((${s2:-0} > 0))
tap_check $? "gpt-oss-like (sinks, window 3, YaRN, biases, 4 experts top 2 with the clamped unit, document mask): N = 2 equals N = 1 within 1e-6 ($s2 blocks skipped)"

# ---- the skip is real: the count is zero without a window ------------------------------------
s=$(skipped C2)
[[ $s == 0 ]]
tap_check $? "without a window the ring skips no block (C2: ${s:-no line})"
tap_done
