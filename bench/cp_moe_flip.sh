#!/usr/bin/env bash
# cp_moe_flip.sh — why context parallelism with top-k MoE can differ from one rank by more than the
# 1e-6 of docs/parallelism.md (issue 64, finding 9), measured on the real trainer.
#
#   bash bench/cp_moe_flip.sh            (after make; results in docs/parallelism.md, "Exactness")
#   SEEDS="1 2 3 4 5 6" STEPS=6 bash bench/cp_moe_flip.sh
#
# configs/tiny-llama.cfg (4 layers, d_model 192, 128-token rows, 16 a step) with MoE layers (4
# experts, the auxiliary losses off) on the synthetic corpus, for each seed: one rank, and
# parallel.context = 2 on 2 ranks; once with top 2 of the 4 experts and once with all 4 (top 4: the
# same experts for every token whatever the router's scores, so the routing has no threshold). It
# prints each step's relative difference of the loss. The ring sums a row's attention in another
# order (~1e-8 relative, the expected part); a router's top-k turns that into a different choice
# of expert for a token whose two best scores are closer than the rounding, and the losses then
# differ by what that token's other expert makes of it: a jump, not a drift.
set -uo pipefail
cd "$(dirname "$0")/.."
source tests/lib.sh
tsr_tmpdir
make_synth "$TMP/data"
SEEDS=${SEEDS:-4} STEPS=${STEPS:-6}
args=(--config configs/tiny-llama.cfg --set model.vocab_size=512 --set data.tokenizer=
      --set sample.tokens=0 --set data.train="$TMP/data/train" --set data.val= --set eval_interval=0ba
      --set threads=1 --set log_interval=1 --set model.moe_experts=4 --set model.moe_aux_loss_coef=0
      --set model.moe_z_loss_coef=0 --set max_duration="${STEPS}ba" --set save_interval=0ba
      --set save_final=false --set watchdog.window=0)
losses() { "$PY3" -c 'import json, sys
print(" ".join(repr(json.loads(l)["loss"]) for l in open(sys.argv[1]) if "\"loss\"" in l and "eval" not in l))' "$1"; }
echo "seed top_k  relative difference of each step's loss, context 2 vs one rank"
for s in $SEEDS; do
    for k in 2 4; do
        a=(--set seed="$s" --set model.moe_top_k="$k")
        "$TRAIN" "${args[@]}" "${a[@]}" --set run_dir="$TMP/one$s$k" >/dev/null 2>&1 || { echo "seed $s top $k: one rank failed"; exit 1; }
        "${MPIRUN[@]}" -np 2 "$TRAIN" "${args[@]}" "${a[@]}" --set parallel.context=2 \
            --set run_dir="$TMP/cp$s$k" >/dev/null 2>&1 || { echo "seed $s top $k: context 2 failed"; exit 1; }
        "$PY3" -c 'import sys
a, b = (list(map(float, x.split())) for x in sys.argv[3:5])
print("%4s %5s  %s" % (sys.argv[1], sys.argv[2], " ".join("%.1e" % (abs(x - y) / abs(x)) for x, y in zip(a, b))))' \
            "$s" "$k" "$(losses "$TMP/one$s$k/metrics.jsonl")" "$(losses "$TMP/cp$s$k/metrics.jsonl")"
    done
done
