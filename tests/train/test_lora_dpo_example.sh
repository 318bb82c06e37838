#!/usr/bin/env bash
# The worked example of docs/finetune.md ("LoRA, then DPO", examples/lora-dpo/run.sh) end to end:
# pretrain a tiny Llama-style model, SFT with LoRA on chat data, merge, DPO with LoRA on preference
# pairs, evaluate, report, export. Checks: every stage exits 0; the PEFT directory, the merged
# model and the report's dpo.png exist; DPO raises the share of validation pairs whose chosen
# answer is the more likely one by at least 0.15 over the SFT model (the full-length run: 0.447 ->
# 0.750, docs/finetune.md); the spike guard judged the SFT stage (as at full length) and the packed
# chat data trained with document attention (no causal-mask warning).
# Lengths: pretraining and SFT at a quarter (150 and 75 steps), DPO at its full 600 (it takes off
# only after 200-400 steps: at half length the pairs' accuracy stayed at 0.50 on one machine, a coin
# toss). At a quarter the spike guard's window of 100 never fills in SFT, which is how CI passed while
# the full-length example failed, the guard stopping SFT (issue 48 item 7). So the SFT stage runs
# again at its full 300 steps from the same base, with the config it recorded (run_dir/config.cfg):
# the guard judges 200 of its steps and acts as in the full run (4 outliers on this machine), and it
# must end. (DPO after that 300-step SFT on the quarter-length base does not take off: accuracy 0.47
# -> 0.49 in 600 steps; after the full 600-step pretraining it does, as docs/finetune.md shows: the
# full example would add about 30 s of CI.) One thread a run (THREADS=1; the example's default is one
# per core): beside another test two threads wait for each other at every parallel region (34-39
# CI CPU-s; 24 with one; DPO 0.434 -> 0.947 on this machine).
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 4
SCALE=0.25 DPO_SCALE=1 THREADS=1 BIN="$BUILD" bash "$TSR_ROOT/examples/lora-dpo/run.sh" "$TMP/ex" >"$TMP/ex.txt" 2>&1
rc=$?
tail -3 "$TMP/ex.txt" | sed 's/^/# /'
tap_check $rc "examples/lora-dpo/run.sh (SCALE=0.25, DPO_SCALE=1) runs every stage (exit $rc)"
"$TRAIN" --config "$TMP/ex/sft/config.cfg" --init-from "$TMP/ex/base" --set run_dir="$TMP/ex/sft-full" \
    --set max_duration=300ba >"$TMP/sft-full.txt" 2>&1 &&
"$PY3" - "$TMP/ex/sft-full/metrics.jsonl" <<'PY' && ! grep -q "model.attn_mask = \"causal\" lets each attend" "$TMP/ex.txt"
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if '"event"' not in l and '"loss"' in l]
acted = [l for l in open(sys.argv[1]) if '"event": "guard"' in l]
print(f"# SFT: {len(steps)} step lines, last step {steps[-1]['step']}; the guard acted {len(acted)} times")
sys.exit(0 if steps[-1]["step"] == 300 else 1)
PY
tap_check $? "the SFT stage at its full 300 steps (its recorded config) ends, the guard judging past its window of 100; the example's SFT has document attention (no causal-mask warning)"
[[ -s $TMP/ex/dpo-adapter/adapter_model.safetensors && -s $TMP/ex/dpo-adapter/adapter_config.json &&
   -s $TMP/ex/dpo-merged/model.safetensors && -s $TMP/ex/dpo-merged/config.json &&
   ( -s $TMP/ex/report-dpo/dpo.png || ! -x "$(command -v gnuplot)" ) ]]
tap_check $? "the PEFT adapter, the merged model and the DPO report exist"
/usr/bin/python3 - "$TMP/ex" <<'PY'
import json, sys
a, b = (json.load(open(f"{sys.argv[1]}/eval-{s}.json"))["val"][0]["preference_accuracy"] for s in ("sft", "dpo"))
print(f"# preference accuracy on the validation pairs: SFT {a:.3f}, after DPO {b:.3f}")
sys.exit(0 if b >= a + 0.15 else 1)
PY
tap_check $? "DPO raises the validation pairs' preference accuracy by at least 0.15 over the SFT model"
tap_done
