#!/usr/bin/env bash
# device = cuda on issue 67/68's model families (docs/cuda.md "Model variants" and "Attention
# variants"), against the CPU backend on the same 10 steps:
#  - OLMo 2-like: post-norms inside the residual, QK-norm over the whole projections;
#  - Gemma-like: sandwich norms, the embedding times sqrt(d_model), GeGLU-tanh, the final-logit
#    and the attention soft-caps, query_pre_attn_scalar, a sliding layer (window 5) and a full one
#    with RoPE's local base on the sliding one and linear scaling on the full one;
#  - SmolLM3-like: a NoPE layer (model.no_rope_layers);
#  - gpt-oss-like MoE: attention sinks on a sliding and a full layer, router and expert biases,
#    the clamped unit, YaRN;
#  - Qwen3-Next-like with full-attention layers only: the attention output gate, partial rotary,
#    QK-norm per head, a shared expert with its gate;
#  - Qwen3-Next-like hybrid: the same with one linear_attention (Gated DeltaNet) layer before the
#    full one, over packed documents (the document mask: the layer's convolution and state reset
#    at each document start; docs/deltanet.md "CUDA"); and, on the emulator, its device memory
#    plan holding the allocator's peak at 4 x 256 (the linear layers' backward slot counted).
# Every step's loss within LOSS_TOL of the CPU run's, the gradient norms of steps 1-5 within
# NORM_TOL (later ones drift apart with the bf16 weights: measured 17% at step 10 of the post-norm
# model while its losses stay within 5e-5), and every parameter tensor's 10-step update within
# UPD_TOL of the CPU's (|w - w_cpu| <= UPD_TOL |w_cpu - w_0|, w_0 the common initialisation: a
# parameter whose gradient is lost, such as the gates', moves differently though the loss barely
# does). It runs on the host emulator of the CUDA backend
# (build/tests/tessera-train-cuemu: the trainer's GPU path with the emulator's stand-ins) and on
# the real backend when a GPU is present (tests/gpu/device.sh's train stage; skipped loudly
# otherwise). The real kernels are checked op by op by tests/gpu/gpu_ops_variants.c.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/gpu_lib.sh"
emulator_built
tsr_tmpdir
FAMILIES=(olmo gemma smol gptoss qnext hybrid)
PER=${#FAMILIES[@]}
tap_plan $((1 + 2 * PER + 2))
make_synth "$TMP/data" 512 30000

tiny_llama_args "$TMP/data/train"
# head size 32: a size the GPU's attention kernels have
args+=(--set model.n_head=2 --set model.n_kv_head=1 --set max_duration=10ba --set save_interval=10ba
       --set watchdog.window=0 "${GPU_COMM_ARGS[@]}")
olmo=(--set model.norm_placement=post --set model.qk_norm=true --set model.qk_norm_scope=projection)
gemma=(--set model.norm_placement=sandwich --set model.embed_scale=sqrt_d_model
       --set model.mlp=geglu_tanh --set model.final_logit_softcapping=2.0
       --set model.rope_theta=1000000 --set model.rope_scaling=linear --set model.rope_factor=8
       --set model.rope_local_theta=10000 --set model.attn_logit_softcapping=20.0
       --set model.query_pre_attn_scalar=24
       --set model.layer_types=sliding_attention,full_attention --set model.sliding_window=5)
smol=(--set "model.no_rope_layers=1, 0")
moe=(--set model.moe_experts=4 --set model.moe_top_k=2 --set model.moe_intermediate_size=64)
gptoss=("${moe[@]}" --set model.moe_router_bias=true --set model.moe_expert_bias=true
        --set 'model.moe_act="gptoss"' --set model.swiglu_limit=0.5 --set model.bias=true
        --set model.rope_scaling=yarn --set model.rope_factor=32 --set model.rope_beta_fast=32
        --set model.rope_beta_slow=1 --set model.rope_original_max_pos=4096
        --set model.attn_sinks=true --set model.layer_types=sliding_attention,full_attention
        --set model.sliding_window=7)
qnext=("${moe[@]}" --set model.attn_output_gate=true --set model.partial_rotary_factor=0.25
       --set model.moe_shared_size=32 --set model.moe_shared_gate=true --set model.qk_norm=true)
# one linear layer (2 key and 8 value heads of 16: the CUDA core's sizes; b and a projections of
# 8 columns, a width cuBLASLt's bf16 GEMM takes whole) and one full one, packed
hybrid=("${qnext[@]}" --set model.layer_types=linear_attention,full_attention
        --set model.linear_num_key_heads=2 --set model.linear_num_value_heads=8
        --set model.linear_key_head_dim=16 --set model.linear_value_head_dim=16
        --set model.attn_mask=document --set model.eot_token=7)
# near A B: every step's loss of run B within LOSS_TOL of run A's, the norms of steps 1-5 within
# NORM_TOL; prints the largest differences
near() {
    "$PY3" - "$TMP/$1/metrics.jsonl" "$TMP/$2/metrics.jsonl" "$LOSS_TOL" "$NORM_TOL" <<'PY'
import json, sys
st = lambda p: {j["step"]: (j["loss"], j["grad_norm"]) for j in map(json.loads, open(p)) if "grad_norm" in j}
a, b = st(sys.argv[1]), st(sys.argv[2])
if sorted(a) != list(range(1, 11)) or sorted(b) != sorted(a):
    print(f"steps {sorted(a)} vs {sorted(b)}"); sys.exit(1)
wl = max(abs(b[k][0] - a[k][0]) / a[k][0] for k in a)
wn = max(abs(b[k][1] - a[k][1]) / a[k][1] for k in a if k <= 5)
print(f"loss {wl:.1e} over steps 1..10, norm {wn:.1e} over 1..5")
sys.exit(0 if wl <= float(sys.argv[3]) and wn <= float(sys.argv[4]) else 1)
PY
}

ok=0
for f in "${FAMILIES[@]}"; do
    fam "$f"
    # the initial weights: one step at a rate that moves nothing
    run "$TRAIN" "cpu_$f" "${opts[@]}" && run "$TRAIN" "init_$f" "${opts[@]}" --set optim.lr=1e-30 \
        --set max_duration=1ba --set save_interval=1ba || ok=1
done
tap_check $ok "CPU reference runs and initial weights: ${FAMILIES[*]}"

# suite BIN LABEL: each family with device = cuda on BIN against its CPU run
suite() {
    local bin=$1 l=$2 f d
    for f in "${FAMILIES[@]}"; do
        fam "$f"
        run "$bin" "$l.$f" "${opts[@]}" --set device=cuda && d=$(near "cpu_$f" "$l.$f") &&
            d="$d; $(updates "init_$f" "cpu_$f" "$l.$f")"
        tap_check $? "$l: $f-like (${opts[*]}) within the CPU's tolerance: $d"
    done
}

# the emulator: the losses as test_cuda_train.sh's MoE (gpt-oss-like measured 3.6e-4), the norms
# as its Llama block's doubled (the post-norm model measured 8.2e-3 at step 4), the updates at
# 0.4 (measured at most 0.26: the gpt-oss-like model's qkvb, a bias whose update is small; a lost
# gradient gives 1)
# and the device memory plan of the hybrid: its linear layers' one backward slot (a layer's
# activation gradients and the core's scratch: 3.4 MiB at 4 x 256, of a 22.6 MiB plan) is in the
# plan's activations, so the allocator's peak over 2 steps is within the plan (peak_in_plan;
# before the slot was planned the backward allocated it beyond: peak 23.7 MB, plan 20.2 MB)
if emulator_half $((PER + 1)); then
    LOSS_TOL=5e-4 NORM_TOL=1e-2 UPD_TOL=0.4 suite "$EMU" emulator
    fam hybrid
    run "$EMU" emu_mem "${opts[@]}" --set device=cuda --set seq_len=256 --set micro_batch=4 \
        --set global_batch=4 --set max_duration=2ba --set save_interval=0ba &&
        d=$(peak_in_plan emu_mem)
    tap_check $? "emulator: hybrid at 4 x 256, peak_mem_bytes (the device allocator's peak) within the device plan, the linear layers' backward slot in it ($d)"
    emulator_half_end
fi

# the real backend: the issue's 0.5% on the loss, test_cuda_train.sh's 5e-2 on the norm
real_backend
if [[ -z $why ]]; then
    LOSS_TOL=5e-3 NORM_TOL=5e-2 UPD_TOL=0.5 suite "$TRAIN" cuda
    _tap_n=$((_tap_n + 1)); echo "ok $_tap_n - the real library without a GPU # SKIP there is a GPU"
else
    fam qnext
    without_gpu "loads for a Qwen3-Next-like run and reports no CUDA device" "$PER" \
        run "$TRAIN" nodev "${opts[@]}" --set device=cuda
fi
tap_done
