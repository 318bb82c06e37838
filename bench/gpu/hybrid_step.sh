#!/usr/bin/env bash
# A hybrid training step on one GPU (issue 68): tessera-train with device = "cuda" on a small
# Qwen3-Next-like model, three linear_attention (Gated DeltaNet) layers and one gated full
# attention layer over packed documents (docs/deltanet.md "The layer on CUDA"), beside
# transformers' Qwen3NextForCausalLM of the same sizes (bench/gpu/hybrid_torch.py: its own torch
# chunked Gated DeltaNet where flash-linear-attention is absent, bf16, AdamW), in one call. The
# device tool's `hybrid` stage (tests/gpu/device.sh); tests/gpu/test_hybrid_bench.sh runs it on
# the emulator (a dry path: the times say nothing there).
# Usage: bash bench/gpu/hybrid_step.sh
# Knobs: BENCH_TRAIN ($BUILD/tessera-train), PYTHON (python3), PEER_DEVICE (cuda), STEPS (12),
# SIZE ("1024 4 4096 1 32000": d_model, layers, T, micro-batch, vocabulary; the last layer full,
# the others linear), HEADS ("4 8 128 128 8 2 2816": linear key/query heads, value heads, d_k,
# d_v; full layers' heads, KV heads; the MLP's width).
# Prints one markdown table: the median step of each over steps 3..STEPS (the first two warm up:
# cuBLASLt's plans, torch's allocator), tokens/s, and torch / tessera. A peer that SKIPs (no
# transformers with Qwen3Next, no device) leaves its cells "skip". Exit 0 when tessera's run did,
# 2 on bad knobs.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/lib.sh
BENCH_TRAIN=${BENCH_TRAIN:-$TRAIN} PYTHON=${PYTHON:-python3} PEER_DEVICE=${PEER_DEVICE:-cuda}
STEPS=${STEPS:-12}
read -r C L T MB V rest <<<"${SIZE:-1024 4 4096 1 32000}"
read -r HK HV DK DV NH KVH F rest2 <<<"${HEADS:-4 8 128 128 8 2 2816}"
for v in C L T MB V HK HV DK DV NH KVH F STEPS; do
    [[ ${!v:-} =~ ^[1-9][0-9]*$ ]] || { echo "hybrid_step.sh: $v = '${!v:-}': expected a positive integer (SIZE, HEADS, STEPS)" >&2; exit 2; }
done
[[ -z $rest && -z $rest2 && $L -ge 2 && $STEPS -ge 3 ]] ||
    { echo "hybrid_step.sh: SIZE takes 5 numbers, HEADS 7, layers >= 2, STEPS >= 3" >&2; exit 2; }
[[ -x $BENCH_TRAIN ]] || { echo "hybrid_step.sh: $BENCH_TRAIN missing: run make" >&2; exit 1; }
tsr_tmpdir
types=$(printf 'linear_attention,%.0s' $(seq 2 "$L"))full_attention
make_synth "$TMP/data" "$V" $(((STEPS + 2) * T * MB + 1000))
args=(--config configs/tiny-llama.cfg --set data.tokenizer= --set sample.tokens=0
      --set data.train="$TMP/data/train" --set data.val= --set eval_interval=0ba
      --set model.vocab_size="$V" --set model.d_model="$C" --set model.n_layer="$L"
      --set model.n_head="$NH" --set model.n_kv_head="$KVH" --set model.intermediate_size="$F"
      --set seq_len="$T" --set global_batch="$MB" --set micro_batch="$MB"
      --set max_duration="${STEPS}ba" --set save_interval=100000ba --set log_interval=1
      --set watchdog.window=0 --set device=cuda --set model.layer_types="$types"
      --set model.linear_num_key_heads="$HK" --set model.linear_num_value_heads="$HV"
      --set model.linear_key_head_dim="$DK" --set model.linear_value_head_dim="$DV"
      --set model.attn_output_gate=true --set model.qk_norm=true
      --set model.partial_rotary_factor=0.25 --set model.attn_mask=document --set model.eot_token=7)
rc=0
OMPI_MCA_ess_singleton_isolated=1 "$BENCH_TRAIN" "${args[@]}" --set run_dir="$TMP/run" \
    >"$TMP/train.txt" 2>&1 || rc=$?
((rc == 0)) || { echo "hybrid_step.sh: tessera-train failed (exit $rc):" >&2; tail -5 "$TMP/train.txt" >&2; }
ts=$("$PY3" -c '
import json, statistics, sys
s = [j["step_time_s"] for j in map(json.loads, open(sys.argv[1])) if "step_time_s" in j and j.get("step", 0) >= 3]
print("%.3f" % (1e3 * statistics.median(s)) if s else "-")' "$TMP/run/metrics.jsonl" 2>/dev/null || echo -)
pt=skip what=skip prc=0
p=$("$PYTHON" bench/gpu/hybrid_torch.py "$C" "$L" "$T" "$MB" "$V" "$HK" "$HV" "$DK" "$DV" "$NH" "$KVH" "$F" "$STEPS" "$PEER_DEVICE" 2>"$TMP/peer.txt") || prc=$?
if ((prc != 0 && prc != 77)); then
    pt=failed what="failed (exit $prc): $(tail -1 "$TMP/peer.txt" | tr '|' '/' | cut -c1-120)"
elif ((prc == 77)); then
    what="skip: $("$PY3" -c 'import json, sys; print(json.loads(sys.argv[1])["skip"][:100])' "$p" | tr '|' '/')"
else
    pt=$("$PY3" -c 'import json, sys; print("%.3f" % (1e3 * json.loads(sys.argv[1])["step_s"]))' "$p")
    what=$("$PY3" -c 'import json, sys; j = json.loads(sys.argv[1]); print("torch %s, transformers %s, %s, %s" % (j["torch"], j["transformers"], j["device"], "fla kernels" if j["fast_path"] else "torch chunked"))' "$p")
fi
tok() { "$PY3" -c 'import sys; a, n = sys.argv[1:]; print("%.0f" % (float(n) / float(a) * 1e3) if a.replace(".", "", 1).isdigit() and float(a) > 0 else "-")' "$1" $((T * MB)); }
ratio() { "$PY3" -c 'import sys; a, b = sys.argv[1:]; ok = all(x.replace(".", "", 1).isdigit() for x in (a, b)); print("%.2f" % (float(a) / float(b)) if ok and float(b) > 0 else "-")' "$1" "$2"; }
echo "| model (C L T MB; linear HK HV dk dv; full NH KVH) | tessera ms/step | torch ms/step | torch / tessera | tessera tok/s | torch tok/s | peer |"
echo "|---|---|---|---|---|---|---|"
echo "| $C $L $T $MB; $HK $HV $DK $DV; $NH $KVH | $ts | $pt | $(ratio "$pt" "$ts") | $(tok "$ts") | $(tok "$pt") | $what |"
exit $rc
