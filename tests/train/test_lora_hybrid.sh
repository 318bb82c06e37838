#!/usr/bin/env bash
# LoRA on the hybrid layers of issue 68 (docs/lora.md "Hybrid models"): a tiny base with a Gated
# DeltaNet layer and a gated full-attention layer (linear_attention, full_attention;
# model.attn_output_gate) trained 4 steps, then adapters on it:
#  - all-linear resolves to q, k, v, o, gate, up, down and the new in_proj_qkvz, in_proj_ba,
#    out_proj (the DeltaNet's projections, PEFT's Qwen3-Next names) and attn_gate (the gate);
#    the checkpoint holds them stacked per layer kind: the attention targets over the 1 full
#    layer, the DeltaNet's over the 1 linear one, the MLP's over both; in_proj_qkvz's B has the
#    qkv and z rows (2 HK dk + 2 HV dv), in_proj_ba's 2 HV;
#  - each new target alone, on a dataset small enough that its batches repeat, lowers the loss of
#    the same batch over 16 steps (only its adapter trains); all-linear with dropout too;
#  - the base checkpoint is untouched (its bytes), and `tessera eval` of the base gives its loss;
#  - the merged model equals base + adapters: `tessera eval` of the LoRA checkpoint (the adapters
#    merged into the base's tensors, both parts of the fused targets) gives the trainer's
#    evaluation (the adapters beside the base, through the layer's hooks) within 1e-5, and differs
#    from the base's;
#  - refused (exit 1, naming lora.targets): in_proj_qkvz on a model without linear layers,
#    attn_gate without model.attn_output_gate; nothing written.
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 7
make_synth "$TMP/data" 512 30000
"$TOOL" synth --out "$TMP/small" --vocab 512 --tokens 400 --seed 3 >/dev/null
tiny_llama_args "$TMP/data/train"
args+=(--set model.n_head=4 --set model.n_kv_head=2 --set micro_batch=4 --set watchdog.window=0
       --set model.layer_types=linear_attention,full_attention --set model.attn_output_gate=true
       --set model.linear_num_key_heads=2 --set model.linear_num_value_heads=4
       --set model.linear_key_head_dim=16 --set model.linear_value_head_dim=16)
lora=(--init-from "$TMP/base" --set lora.rank=4 --set lora.alpha=8 --set optim.lr=3e-2
      --set save_interval=0ba)

"$TRAIN" "${args[@]}" --set run_dir="$TMP/base" --set max_duration=4ba >"$TMP/base.txt" 2>&1
rc=$?
sum=$(cd "$TMP/base" && sha256sum step-*.h5)
"$TRAIN" "${args[@]}" "${lora[@]}" --set run_dir="$TMP/A" --set max_duration=8ba \
    --set lora.dropout=0.1 --set data.val="$TMP/data/train" --set eval_interval=8ba \
    --set eval_samples=16 >"$TMP/A.txt" 2>&1
rc2=$?
tap_diag "$(grep -m1 '^lora:' "$TMP/A.txt")"
((rc == 0 && rc2 == 0)) && grep -q "^lora: r=4 alpha=8 dropout=0.1 targets=q,k,v,o,gate,up,down,in_proj_qkvz,in_proj_ba,out_proj,attn_gate; " "$TMP/A.txt" &&
    "$PY3" - "$TMP/A/step-00000008.h5" <<'PY'
import sys, h5py
shapes = {}
h5py.File(sys.argv[1], "r").visititems(
    lambda n, o: shapes.__setitem__(n, o.shape) if isinstance(o, h5py.Dataset) and "lora" in n else None)
want = {"q_A": (1, 4, 64), "attn_gate_B": (1, 64, 4), "in_proj_qkvz_A": (1, 4, 64),
        "in_proj_qkvz_B": (1, 2 * 2 * 16 + 2 * 4 * 16, 4), "in_proj_ba_B": (1, 8, 4),
        "out_proj_A": (1, 4, 64), "out_proj_B": (1, 64, 4), "down_A": (2, 4, 96)}
got = {k: shapes.get(n) for k in want for n in shapes if n.endswith("/" + k)}
print("#", got)
sys.exit(0 if got == want else 1)
PY
tap_check $? "all-linear on the hybrid: the new targets with the old, stacked per layer kind in the checkpoint (exits $rc $rc2)"

for tg in in_proj_qkvz in_proj_ba out_proj attn_gate; do
    "$TRAIN" "${args[@]}" "${lora[@]}" --set run_dir="$TMP/T_$tg" --set max_duration=16ba \
        --set lora.targets=$tg --set data.train="$TMP/small/train" >"$TMP/T_$tg.txt" 2>&1 || echo "exit $?"
done >"$TMP/fall.err"
"$PY3" - "$TMP" <<'PY'
import json, sys
bad = 0
for tg in ("in_proj_qkvz", "in_proj_ba", "out_proj", "attn_gate"):
    try:
        loss = [json.loads(l)["loss"] for l in open(f"{sys.argv[1]}/T_{tg}/metrics.jsonl") if '"loss"' in l]
    except OSError:
        loss = []
    # the small dataset's batches come round again: compare a batch's first loss with its last
    first, last = (loss[0], loss[-2]) if len(loss) == 16 else (0, 0)
    print(f"# {tg}: step 1 {first:.5f}, step 15 (the same batch) {last:.5f}")
    bad += not (len(loss) == 16 and last < first)
sys.exit(bad)
PY
tap_check $? "each new target alone lowers the loss of a repeated batch ($(tr '\n' ' ' <"$TMP/fall.err"))"

[[ $sum == "$(cd "$TMP/base" && sha256sum step-*.h5)" ]]
tap_check $? "the base checkpoint is untouched"

vl=$(grep -o '"val_loss": [0-9.]*' "$TMP/A/metrics.jsonl" | tail -1 | awk '{print $2}')
"$TOOL" eval --ckpt "$TMP/base" --val "$TMP/data/train" -s eval_samples=16 -o "$TMP/W.json" >"$TMP/W.txt" 2>&1
wl=$(grep -o '"loss": [0-9.]*' "$TMP/W.json" | head -1 | awk '{print $2}')
"$TOOL" eval --ckpt "$TMP/A" --val "$TMP/data/train" -s eval_samples=16 -o "$TMP/M.json" >"$TMP/M.txt" 2>&1
ml=$(grep -o '"loss": [0-9.]*' "$TMP/M.json" | head -1 | awk '{print $2}')
tap_diag "validation loss: the trainer's (adapters beside the base) $vl, tessera eval merged $ml, the base $wl"
[[ -n $vl && -n $wl && -n $ml ]] &&
    "$PY3" -c "import sys; sys.exit(0 if abs($ml - $vl) <= 1e-5 * abs($vl) and abs($vl - $wl) > 1e-4 else 1)"
tap_check $? "the merged model (tessera eval of the LoRA checkpoint) equals base + adapters (the trainer's evaluation) within 1e-5, not the base"

refused() { # ARGS...: exit 1 naming lora.targets, nothing written
    "$TRAIN" "$@" --set run_dir="$TMP/R" --set lora.rank=4 >"$TMP/R.txt" 2>&1
    local rc=$?
    tap_diag "exit $rc: $(grep -m1 'lora.targets' "$TMP/R.txt" | head -c 300)"
    ((rc == 1)) && grep -q "lora.targets = .*the model has no such projection" "$TMP/R.txt" && [[ ! -e $TMP/R ]]
}
plain=("${args[@]}" --set model.layer_types=full_attention --set model.attn_output_gate=false)
refused "${plain[@]}" --set lora.targets=q,in_proj_qkvz
tap_check $? "in_proj_qkvz on a model without linear_attention layers: refused naming lora.targets"
refused "${args[@]}" --set model.attn_output_gate=false --set lora.targets=attn_gate
tap_check $? "attn_gate without model.attn_output_gate: refused naming lora.targets"

"$TRAIN" "${plain[@]}" --set lora.rank=4 --set run_dir="$TMP/P" --plan 1 >"$TMP/P.txt" 2>&1
grep -q "^lora: r=4 alpha=16 dropout=0 targets=q,k,v,o,gate,up,down; " "$TMP/P.txt"
tap_check $? "all-linear on a model without the hybrid layers: the targets of before"
tap_done
