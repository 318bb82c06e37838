#!/usr/bin/env bash
# The PyTorch peer of bench/gpu/run.sh for the 2026 families (issue 67): bench/gpu/torch_peer.py
# builds tests/reference/torch_llama.py's Llama with the variants a recipe sets (OLMo 2's post
# norms and QK-norm over the projection, SmolLM3's NoPE layers, Gemma's sandwich norms, embedding
# scale, GeGLU-tanh, query_pre_attn_scalar). Checked here without a GPU:
#  - its N and FLOPs/token equal tessera-train --plan's for olmo2-1b, smollm3-3b and gemma3-1b
#    (the latter with every layer full attention: the peer refuses windows), full size and at the
#    --tiny size, so both programs' MFU use one figure;
#  - what it does not model is refused with exit 2 and the key named (Gemma 3's sliding layers,
#    gpt-oss's sinks, the attention soft-cap, a variant on a GPT-2 recipe), never run as another model;
#  - run.sh's CPU self-check (DEVICE=cpu TINY=1) gives olmo2-1b, smollm3-3b and gemma3-1b (every
#    layer full attention) rows with both
#    programs' numbers; the peer's SDPA attention and its whole fp32 forward within 1e-4 of
#    torch_llama's explicit ones (the checks it runs before timing; for smollm3 with a NoPE layer),
#    and its first loss finite and within 0.2 of ln V (random init; the peer's data and
#    weights are not tessera's, so the two losses are not compared to each other).
# Needs Debian's python3-torch (skips loudly without it).
# shellcheck source=../lib.sh
source "$(dirname "$0")/../lib.sh"
# shellcheck source=gpu_lib.sh
source "$(dirname "$0")/gpu_lib.sh"
tsr_tmpdir
tap_plan 4
PEER=$TSR_ROOT/bench/gpu/torch_peer.py
peer_needs_torch "N and FLOPs/token as tessera's" "refusals" "the families' self-check rows" "their checks and losses"

BOTH=(--set model.attn_mask=causal --set model.activation_checkpointing=none)
GEMMA_FULL=(--set model.layer_types=full_attention --set model.sliding_window=0)
bad=""
peer_same_n olmo2 olmo2-1b
peer_same_n smollm3 smollm3-3b
peer_same_n gemma3 gemma3-1b "${GEMMA_FULL[@]}"
for m in olmo2-1b smollm3-3b gemma3-1b; do  # the --tiny size run.sh's TINY=1 gives both programs
    mapfile -t tiny < <("$PY3" "$PEER" --config "$TSR_ROOT/configs/$m.cfg" --tiny-sets)
    peer_same_n "$m-tiny" "$m" "${tiny[@]/#/--set=}" "${GEMMA_FULL[@]}"
done
[[ -z $bad ]]
tap_check $? "the peer's N and FLOPs/token equal tessera-train --plan's for olmo2-1b, smollm3-3b, gemma3-1b (full attention), full size and tiny${bad:+:$bad}"

peer_refused model.layer_types --config "$TSR_ROOT/configs/gemma3-1b.cfg" "${BOTH[@]}" &&
    peer_refused model.sliding_window --config "$TSR_ROOT/configs/olmo2-1b.cfg" "${BOTH[@]}" --set model.sliding_window=128 &&
    peer_refused model.attn_sinks --config "$TSR_ROOT/configs/olmo2-1b.cfg" "${BOTH[@]}" --set model.attn_sinks=true &&
    peer_refused model.attn_logit_softcapping --config "$TSR_ROOT/configs/olmo2-1b.cfg" "${BOTH[@]}" --set model.attn_logit_softcapping=50 &&
    peer_refused model.norm_placement --config "$TSR_ROOT/configs/olmo2-1b.cfg" "${BOTH[@]}" --set model.norm_placement=peri &&
    peer_refused model.no_rope_layers --config "$TSR_ROOT/configs/smollm3-3b.cfg" "${BOTH[@]}" --set model.no_rope_layers=1,2 &&
    peer_refused "in the Llama form (model.pos = rope) only" --config "$TSR_ROOT/configs/gpt2-124m.cfg" --set model.norm_placement=post
tap_check $? "refused with exit 2, the key named: sliding layers, a window, sinks, the attention soft-cap, an unknown placement, a bad NoPE list, a variant on a GPT-2 recipe"

# (Gemma 3 with every layer full attention: the settings are harmless to the other two)
DEVICE=cpu TINY=1 MODELS="olmo2-1b smollm3-3b gemma3-1b" \
    SETS="model.attn_mask=causal model.activation_checkpointing=none model.layer_types=full_attention model.sliding_window=0" \
    PYTHON=$PY3 STEPS=2 WARMUP=1 BENCH_OUT=$TMP/bench BUILD=$BUILD bash "$TSR_ROOT/bench/gpu/run.sh" >"$TMP/run.txt" 2>&1
r=$?
ok=0
for m in olmo2-1b smollm3-3b gemma3-1b; do
    row=$(grep "^| $m |" "$TMP/run.txt")
    peer_row_ok "$row" ||
        { ok=1; echo "# $m: ${row:-no row}"; }
done
((r == 0 && ok == 0)) && ! grep -q 'failed' "$TMP/run.txt"
tap_check $? "run.sh's CPU self-check of olmo2-1b, smollm3-3b and gemma3-1b (TINY=1, full attention): PyTorch and tessera tok/s in their rows (exit $r)"
"$PY3" - "$TMP/bench" <<'EOF'
import json, math, sys
bad = []
for m, want in (("olmo2-1b", ("post", "projection")), ("smollm3-3b", ("pre", "head")),
                ("gemma3-1b", ("sandwich", "head"))):
    j = json.load(open("%s/%s-torch.json" % (sys.argv[1], m)))
    plan = json.load(open("%s/%s-plan.json" % (sys.argv[1], m)))
    checks = [j["attention_check"], j["model_check"]]
    if not all(c["rel_l2"] <= c["tol"] <= 1e-4 for c in checks):
        bad.append("%s checks %s" % (m, checks))
    if (plan["placement"], plan["qk_scope"]) != want:
        bad.append("%s modelled as %s/%s" % (m, plan["placement"], plan["qk_scope"]))
    if m == "smollm3-3b" and plan["ropes"] != [1, 0]:
        bad.append("smollm3 tiny NoPE pattern %s" % plan["ropes"])
    if m == "gemma3-1b" and not (plan["geglu"] and plan["embed_scale"] == "sqrt_d_model" and plan["qpas"] == 256):
        bad.append("gemma3 modelled without GeGLU, the embedding scale or query_pre_attn_scalar: %s" % plan)
    if not abs(j["loss_first"] - math.log(plan["V"])) < 0.2:
        bad.append("%s first loss %s, ln V %.4f" % (m, j["loss_first"], math.log(plan["V"])))
print("# " + "; ".join(bad) if bad else "# ok")
sys.exit(1 if bad else 0)
EOF
tap_check $? "the tiny OLMo 2 (post norms, projection QK-norm), SmolLM3 (layer 1 NoPE) and Gemma 3 (sandwich norms, embedding scale, GeGLU-tanh, query_pre_attn_scalar): SDPA attention and whole forward within 1e-4 of torch_llama's, first loss within 0.2 of ln V"
tap_done
