#!/usr/bin/env bash
# run.sh OUT_DIR — the worked example of docs/finetune.md ("LoRA, then DPO"): a tiny Llama-style
# model is pretrained on text, finetuned with LoRA on a chat dataset (SFT), merged, then tuned with
# DPO on preference pairs (LoRA again, the SFT model as its base and reference), evaluated, plotted
# and exported. SCALE (default 1) multiplies every step count, SFT_SCALE and DPO_SCALE (default
# SCALE) the SFT and DPO stages' (the CI test runs a quarter, DPO at full length). THREADS, when
# set, is each training run's threads (default: the recipe's 0, one per core).
# Needs `make` only: the tokenizer is trained here on the example's text.
set -euo pipefail
OUT=${1:?usage: run.sh OUT_DIR}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${BIN:-$ROOT/build}
SCALE=${SCALE:-1} SFT_SCALE=${SFT_SCALE:-${SCALE:-1}} DPO_SCALE=${DPO_SCALE:-${SCALE:-1}}
steps() { /usr/bin/python3 -c "print(max(4, int($1 * ${2:-$SCALE})))"; }
mkdir -p "$OUT"
train() { "$BIN/tessera-train" --config "$ROOT/examples/lora-dpo/tiny.cfg" --set data.tokenizer="$OUT/tok.bin" \
                ${THREADS:+--set threads="$THREADS"} "$@"; }

# 0. the data and a small byte-level BPE tokenizer for it; chat lines in the `ROLE: content` form
/usr/bin/python3 "$ROOT/examples/lora-dpo/make_data.py" "$OUT/raw"
"$BIN/tessera" tokenizer train --quiet --vocab-size 400 --special '<|endoftext|>' -o "$OUT/tok.bin" "$OUT/raw/tok.txt"
prep() { "$BIN/tessera" prep --quiet --tokenizer "$OUT/tok.bin" "$@"; }
prep --out "$OUT/data/base" --format text --doc-sep '\n' "$OUT/raw/base.txt"
prep --out "$OUT/data/sft" --format chat --chat-template none --pack 32 "$OUT/raw/sft.jsonl"
prep --out "$OUT/data/pairs" --format preference --chat-template none --pack 32 --val-fraction 0.1 \
    "$OUT/raw/pairs.jsonl"

# 1. pretrain the base (every weight)
train --set run_dir="$OUT/base" --set data.train="$OUT/data/base/train" \
    --set max_duration="$(steps 600)ba"

# 2. SFT with LoRA on the chat data, from the base; document attention keeps the conversations
#    packed into one sample apart (prep recorded where each starts; eot_token: <|endoftext|>'s id)
EOT=$(printf '<|endoftext|>' | "$BIN/tessera" tokenizer encode --special -t "$OUT/tok.bin" -)
train --set run_dir="$OUT/sft" --set data.train="$OUT/data/sft/train" --init-from "$OUT/base" \
    --set model.attn_mask=document --set model.eot_token="$EOT" --set lora.rank=16 --set lora.alpha=32 --set optim.lr=1e-2 --set max_duration="$(steps 300 "$SFT_SCALE")ba"
# the SFT model as a plain model: the base (and so the DPO reference) of the next stage
"$BIN/tessera" ckpt export --format hf --merge --tokenizer none "$OUT/sft" "$OUT/sft-merged"

# 3. DPO with new adapters on the SFT model. The spike guard is off here: DPO's gradient norm grows
#    several-fold as the margins open, which its pretraining defaults read as spikes (docs/dpo.md)
train --set run_dir="$OUT/dpo" --set guard.window=0 --set data.train="$OUT/data/pairs/train" \
    --set data.val="$OUT/data/pairs/val" --set lora.base="$OUT/sft-merged" \
    --set objective=dpo --set dpo.beta=0.5 --set lora.rank=16 --set lora.alpha=32 \
    --set optim.lr=1e-3 --set max_duration="$(steps 600 "$DPO_SCALE")ba" \
    --set eval_interval="$(steps 200 "$DPO_SCALE")ba" --set eval_samples=0

# 4. the pairs before and after DPO; plots; the PEFT adapter and the merged model
"$BIN/tessera" eval --ckpt "$OUT/sft" --val "$OUT/data/pairs/val" -o "$OUT/eval-sft.json" >/dev/null
"$BIN/tessera" eval --ckpt "$OUT/dpo" --val "$OUT/data/pairs/val" -o "$OUT/eval-dpo.json" >/dev/null
"$BIN/tessera" report "$OUT/sft" -o "$OUT/report-sft"
"$BIN/tessera" report "$OUT/dpo" -o "$OUT/report-dpo"
"$BIN/tessera" ckpt export --format hf --adapter "$OUT/dpo" "$OUT/dpo-adapter"
"$BIN/tessera" ckpt export --format hf --merge --tokenizer none "$OUT/dpo" "$OUT/dpo-merged"
/usr/bin/python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
for stage in ("sft", "dpo"):
    v = json.load(open(f"{out}/eval-{stage}.json"))["val"][0]
    print(f"{stage}: the chosen answer is the more likely one in {v['preference_accuracy']:.3f} of "
          f"{v['preference_pairs']:.0f} validation pairs (mean log-prob margin "
          f"{v['preference_logp_margin']:.3f})")
PY
