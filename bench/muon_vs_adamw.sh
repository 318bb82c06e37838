#!/usr/bin/env bash
# muon_vs_adamw.sh — optim.name = muon against adamw on the tiny recipe (configs/tiny.cfg: GPT-2
# style, 4 layers, d_model 192, GPT-2's BPE) on the Brown corpus (`make demo` prepares
# data/brown), each with a learning-rate sweep of three values (docs/benchmarks.md "Muon").
#
#   bash bench/muon_vs_adamw.sh          (after make and make data/brown/train/index.tsv)
#
# Every run: STEPS steps of 16 x 128 tokens on NP ranks (ddp), warmup WARMUP steps, cosine to
# 0.1 x lr, validation (eval_samples 32) every EVAL steps. Muon runs use optim.muon.scale = rms
# (Moonlight's RMS matching) with optim.muon.lr = 0, i.e. the swept optim.lr for the matrices and
# AdamW's lr for the rest, and optim.muon.weight_decay = optim.weight_decay (0.1).
# Reported per run: the final validation loss, the tokens each run needed to reach the target (the
# best AdamW run's final validation loss; the first evaluation at or below it), and the average
# step time (tessera-train's "done" line: the steps after the first; on a loaded machine mostly
# load). The iteration's cost: TIME_ROUNDS alternating TIME_STEPS-step runs of each optimizer on
# one rank and one thread (below); beside it the Newton-Schulz FLOPs per step,
# sum over matrices of ns_steps x (4 r^2 c + 2 r^3) (r <= c the matrix's sides), against the
# model's 6N FLOPs per token x 16 x 128 tokens.
#
# Environment: STEPS=40 WARMUP=4 EVAL=5 NP=2 LRS="1e-3 3e-3 1e-2" TIME_ROUNDS=3 TIME_STEPS=12
#              SKIP_SWEEP=0 SKIP_TIMING=0 (1: report that part of an earlier OUT again, not run it)
#              BUILD=build OUT=/tmp/...
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${STEPS:-40} WARMUP=${WARMUP:-4} EVAL=${EVAL:-5} NP=${NP:-2} BUILD=${BUILD:-build}
LRS=${LRS:-1e-3 3e-3 1e-2} TIME_ROUNDS=${TIME_ROUNDS:-3} TIME_STEPS=${TIME_STEPS:-12}
SKIP_SWEEP=${SKIP_SWEEP:-0} SKIP_TIMING=${SKIP_TIMING:-0}
TRAIN=$BUILD/tessera-train
[[ -x $TRAIN ]] || { echo "muon_vs_adamw: $TRAIN not built (run make)" >&2; exit 2; }
[[ -f data/brown/train/index.tsv ]] || { echo "muon_vs_adamw: no data/brown (make data/brown/train/index.tsv)" >&2; exit 2; }
OUT=${OUT:-$(mktemp -d /tmp/tessera-muon.XXXXXX)}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
args=(--config configs/tiny.cfg --set max_duration="${STEPS}ba" --set optim.warmup="${WARMUP}ba"
      --set eval_interval="${EVAL}ba" --set eval_samples=32 --set save_interval=0ba --set save_final=false
      --set sample.tokens=0 --set log_interval=10 --set watchdog.window=0)
for opt in adamw muon; do
    for lr in $LRS; do
        ((SKIP_SWEEP)) && continue # (the runs of an earlier OUT are reported again)
        extra=()
        [[ $opt == muon ]] && extra=(--set optim.name=muon --set optim.muon.weight_decay=0.1)
        echo "run $opt lr=$lr" >&2
        mpirun --oversubscribe -np "$NP" "$TRAIN" "${args[@]}" --set optim.lr="$lr" "${extra[@]}" \
            --set run_dir="$OUT/$opt-$lr" >"$OUT/$opt-$lr.txt" 2>&1
    done
done
# the step time: TIME_ROUNDS rounds of a TIME_STEPS-step run of each optimizer, alternating, one
# rank and one thread, no evaluation (on a loaded machine the minimum over steps 3.. of every run is
# the figure that load disturbs least; the median beside it)
for ((r = 1; r <= TIME_ROUNDS; r++)); do
    for opt in adamw muon; do
        ((SKIP_TIMING)) && continue
        extra=()
        [[ $opt == muon ]] && extra=(--set optim.name=muon --set optim.muon.weight_decay=0.1)
        echo "timing round $r: $opt" >&2
        "$TRAIN" "${args[@]}" --set max_duration="${TIME_STEPS}ba" --set eval_interval=0ba \
            --set data.val= --set threads=1 --set log_interval=1 "${extra[@]}" \
            --set run_dir="$OUT/time-$opt-$r" >"$OUT/time-$opt-$r.txt" 2>&1
    done
done
NP=$NP TIME_ROUNDS=$TIME_ROUNDS /usr/bin/python3 - "$OUT" "$LRS" <<'PY'
import json, os, re, sys
out, lrs = sys.argv[1], sys.argv[2].split()
TOK = 16 * 128
def run(name):
    ev = [(j["step"], j["val_loss"]) for j in map(json.loads, open(f"{out}/{name}/metrics.jsonl"))
          if "val_loss" in j]
    txt = open(f"{out}/{name}.txt").read()
    ms = float(re.search(r"done: .* ([0-9.]+) ms/step average", txt).group(1))
    return ev, ms
runs = {(o, lr): run(f"{o}-{lr}") for o in ("adamw", "muon") for lr in lrs}
target = min(runs[("adamw", lr)][0][-1][1] for lr in lrs)
print(f"target: the best AdamW run's final validation loss, {target:.4f}")
print("| optimizer | lr | final val loss | tokens to reach the target | ms/step |")
print("|---|---|---|---|---|")
for (o, lr), (ev, ms) in runs.items():
    hit = next((s for s, v in ev if v <= target), None)
    reach = f"{hit * TOK:,} (step {hit})" if hit else "not reached"
    print(f"| {o} | {lr} | {ev[-1][1]:.4f} | {reach} | {ms:.1f} |")
# the iteration's FLOPs: tiny.cfg's matrices (d_model 192, 4 layers, MLP 768; q, k, v, o, fc, proj)
C, F, L, ns = 192, 768, 4, 5
mats = L * ([(C, C)] * 4 + [(F, C), (C, F)])
nsf = sum(ns * (4 * min(r, c) ** 2 * max(r, c) + 2 * min(r, c) ** 3) for r, c in mats)
txt = open(f"{out}/adamw-{lrs[0]}.txt").read()
fpt = float(re.search(r"FLOPs/token = [^=]*= ([0-9.e+]+)", txt).group(1))
np_ = int(os.environ.get("NP", "2"))
for ranks in sorted({1, np_}):
    print(f"Newton-Schulz: {nsf:.3e} FLOP per step on every rank (ddp: each rank all matrices), "
          f"{100 * nsf / (fpt * TOK / ranks):.1f}% of a rank's {fpt * TOK / ranks:.3e} training "
          f"FLOPs per step on {ranks} rank(s)")
PY
echo "runs in $OUT" >&2
