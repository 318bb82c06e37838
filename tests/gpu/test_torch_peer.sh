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
tsr_tmpdir
tap_plan 4
PEER=$TSR_ROOT/bench/gpu/torch_peer.py
if ! "$PY3" -c 'import torch' 2>/dev/null; then
    for w in "N and FLOPs/token as tessera's" "refusals" "the Llama self-check row" "its attention check"; do
        tap_skip "$w" "no PyTorch for $PY3"
    done
    tap_done
    exit
fi
[[ -x $TRAIN ]] || { echo "$TRAIN missing: run make"; exit 77; }
field() { "$PY3" -c 'import json, sys; print(json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]).get(sys.argv[2]))' "$@"; }

bad=""
for m in llama-3.2-1b qwen3-0.6b qwen2.5-0.5b llama-3.1-8b; do
    "$PY3" "$PEER" --config "$TSR_ROOT/configs/$m.cfg" --set model.attn_mask=causal \
        --set model.activation_checkpointing=none --dry-run >"$TMP/$m.json" 2>/dev/null
    "$TRAIN" --config "$TSR_ROOT/configs/$m.cfg" --plan 1 >"$TMP/$m.plan" 2>&1
    n=$(field "$TMP/$m.json" params) f=$(field "$TMP/$m.json" flops_per_token)
    want=$(sed -n 's/^params: \([0-9]*\) trainable.*/\1/p' "$TMP/$m.plan")
    # tessera prints FLOPs/token to 4 digits: compare the peer's rounded the same way
    wantf=$(sed -n 's/^params: .*FLOPs\/token = .* = \([0-9.e+]*\) (docs.*/\1/p' "$TMP/$m.plan")
    gotf=$("$PY3" -c "print('%.4g' % float('$f'))")
    [[ -n $want && $n == "$want" && $gotf == "$("$PY3" -c "print('%.4g' % float('${wantf:-0}'))")" ]] ||
        bad+=" $m (peer N $n F $gotf, tessera N ${want:-?} F ${wantf:-?})"
done
[[ -z $bad ]]
tap_check $? "the peer's N and FLOPs/token equal tessera-train --plan's for llama-3.2-1b, qwen3-0.6b, qwen2.5-0.5b, llama-3.1-8b${bad:+:$bad}"

refused() { # refused WHAT ARGS...: exit 2, WHAT named in the JSON error
    local r=0
    "$PY3" "$PEER" "${@:2}" --dry-run >"$TMP/refused.json" 2>/dev/null || r=$?
    ((r == 2)) && grep -q "$1" "$TMP/refused.json" || { echo "# $*: exit $r: $(cat "$TMP/refused.json")"; return 1; }
}
refused model.attn_mask --config "$TSR_ROOT/configs/llama-3.2-1b.cfg" &&
    refused model.moe_experts --config "$TSR_ROOT/configs/qwen3-30b-a3b.cfg" --set model.attn_mask=causal --set model.activation_checkpointing=none &&
    refused "in the Llama form (model.pos = rope) only" --config "$TSR_ROOT/configs/gpt2-124m.cfg" --set model.n_kv_head=4 &&
    refused "model.pos/norm/mlp/bias" --config "$TSR_ROOT/configs/llama-3.2-1b.cfg" --set model.attn_mask=causal --set model.mlp=gelu
tap_check $? "refused with exit 2, the key named: a document mask, an MoE recipe, GQA on a GPT-2 recipe, RoPE with a GELU MLP"

DEVICE=cpu TINY=1 MODELS=llama-3.2-1b SETS="model.attn_mask=causal" PYTHON=$PY3 STEPS=2 WARMUP=1 \
    BENCH_OUT=$TMP/bench BUILD=$BUILD bash "$TSR_ROOT/bench/gpu/run.sh" >"$TMP/run.txt" 2>&1
r=$?
row=$(grep '^| llama-3.2-1b |' "$TMP/run.txt")
((r == 0)) && [[ -n $row ]] && ! grep -q 'failed' "$TMP/run.txt" &&
    awk -F'|' '{ gsub(/ /, ""); exit !($5 ~ /^[0-9.]+$/ && $6 ~ /^[0-9.]+$/ && $5 + 0 > 0 && $6 + 0 > 0) }' <<<"$row" &&
    grep -q 'SETS="model.attn_mask=causal"' "$TMP/run.txt"
tap_check $? "run.sh's CPU self-check of llama-3.2-1b (TINY=1, SETS for both): PyTorch and tessera tok/s in its row (exit $r: ${row:-no row})"
[[ $(field "$TMP/bench/llama-3.2-1b-torch.json" attention) == *"grouped-query 4:2"* ]] &&
    "$PY3" -c 'import json, sys
j = json.load(open(sys.argv[1]))
sys.exit(not all(c["rel_l2"] <= c["tol"] <= 1e-4 for c in (j["attention_check"], j["model_check"])))' \
        "$TMP/bench/llama-3.2-1b-torch.json"
tap_check $? "the peer's grouped-query SDPA attention within 1e-4 of torch_llama's explicit one, and its whole forward (RoPE angles, layers, head) of torch_llama's"
tap_done
