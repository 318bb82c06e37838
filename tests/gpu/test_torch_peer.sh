#!/usr/bin/env bash
# The PyTorch peer of bench/gpu/run.sh for the Llama-style recipes (issue 25's llama-3.2-1b rows):
# bench/gpu/torch_peer.py builds tests/reference/torch_llama.py's Llama (RoPE with Llama 3.1's
# scaling, grouped-query attention, SwiGLU, qkv biases, QK-norm, tied or untied head) with its
# attention through SDPA. Checked here without a GPU:
#  - its N and FLOPs/token equal tessera-train --plan's for Llama 3.2 1B, Qwen 3 0.6B, Qwen 2.5
#    0.5B (qkv biases) and Llama 3.1 8B (untied head), so both programs' MFU use one figure;
#  - what it does not model is refused with exit 2 and the key named: a document mask, an MoE
#    recipe, the Llama-only keys on a GPT-2 recipe;
#  - run.sh's CPU self-check (DEVICE=cpu TINY=1, SETS for both programs) gives a llama-3.2-1b row
#    with both programs' numbers, no run failed; the peer's SDPA attention within 1e-4 of the
#    explicit one and its whole fp32 forward of torch_llama's (the checks it runs before timing).
# Needs Debian's python3-torch (skips loudly without it).
# shellcheck source=../lib.sh
source "$(dirname "$0")/../lib.sh"
# shellcheck source=gpu_lib.sh
source "$(dirname "$0")/gpu_lib.sh"
tsr_tmpdir
tap_plan 4
PEER=$TSR_ROOT/bench/gpu/torch_peer.py
peer_needs_torch "N and FLOPs/token as tessera's" "refusals" "the Llama self-check row" "its attention check"

bad=""
for m in llama-3.2-1b qwen3-0.6b qwen2.5-0.5b llama-3.1-8b; do peer_same_n "$m" "$m"; done
[[ -z $bad ]]
tap_check $? "the peer's N and FLOPs/token equal tessera-train --plan's for llama-3.2-1b, qwen3-0.6b, qwen2.5-0.5b, llama-3.1-8b${bad:+:$bad}"

peer_refused model.attn_mask --config "$TSR_ROOT/configs/llama-3.2-1b.cfg" &&
    peer_refused model.moe_experts --config "$TSR_ROOT/configs/qwen3-30b-a3b.cfg" --set model.attn_mask=causal --set model.activation_checkpointing=none &&
    peer_refused "in the Llama form (model.pos = rope) only" --config "$TSR_ROOT/configs/gpt2-124m.cfg" --set model.n_kv_head=4 &&
    peer_refused "model.pos/norm/mlp/bias" --config "$TSR_ROOT/configs/llama-3.2-1b.cfg" --set model.attn_mask=causal --set model.mlp=gelu
tap_check $? "refused with exit 2, the key named: a document mask, an MoE recipe, GQA on a GPT-2 recipe, RoPE with a GELU MLP"

DEVICE=cpu TINY=1 MODELS=llama-3.2-1b SETS="model.attn_mask=causal" PYTHON=$PY3 STEPS=2 WARMUP=1 \
    BENCH_OUT=$TMP/bench BUILD=$BUILD bash "$TSR_ROOT/bench/gpu/run.sh" >"$TMP/run.txt" 2>&1
r=$?
row=$(grep '^| llama-3.2-1b |' "$TMP/run.txt")
((r == 0)) && [[ -n $row ]] && ! grep -q 'failed' "$TMP/run.txt" &&
    peer_row_ok "$row" &&
    grep -q 'SETS="model.attn_mask=causal"' "$TMP/run.txt"
tap_check $? "run.sh's CPU self-check of llama-3.2-1b (TINY=1, SETS for both): PyTorch and tessera tok/s in its row (exit $r: ${row:-no row})"
[[ $(peer_field "$TMP/bench/llama-3.2-1b-torch.json" attention) == *"grouped-query 4:2"* ]] &&
    "$PY3" -c 'import json, sys
j = json.load(open(sys.argv[1]))
sys.exit(not all(c["rel_l2"] <= c["tol"] <= 1e-4 for c in (j["attention_check"], j["model_check"])))' \
        "$TMP/bench/llama-3.2-1b-torch.json"
tap_check $? "the peer's grouped-query SDPA attention within 1e-4 of torch_llama's explicit one, and its whole forward (RoPE angles, layers, head) of torch_llama's"
tap_done
