#!/usr/bin/env bash
# context_plan.sh — the longest context llama-3.1-8b can train on W GPUs of 80 GB, by the trainer's
# own memory plan (tessera-train --plan W, device = cuda: no GPU needed, the CUDA library must be
# built), without context parallelism (parallel.context = 1) and with the N that reaches furthest
# (docs/parallelism.md; results in docs/benchmarks.md).
#
#   bash bench/context_plan.sh                  (after make; W in 8 32 64)
#
# The recipe is configs/llama-3.1-8b-long.cfg (zero3 over all W GPUs, every block checkpointed,
# micro_batch 1, the document mask) with one sequence per data rank (global_batch = W / N). For
# each W and each N = 1, 2, 4 .. W, seq_len doubles from 8192 while the plan's device total
# ("device memory per rank (cuda, ...) ... total X") stays within BUDGET_GIB (default 78: what an
# 80 GB H100 leaves after the CUDA context and NCCL; the trainer itself keeps 2% free) and up to
# MAX_T (default 1048576, the largest seq_len the key accepts: a length marked "+" reached it and
# the plan still fitted).
#
# Environment: BUILD=build GPUS="8 32 64" BUDGET_GIB=78 MAX_T=1048576
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build} GPUS=${GPUS:-8 32 64} BUDGET_GIB=${BUDGET_GIB:-78} MAX_T=${MAX_T:-1048576}
TRAIN=$BUILD/tessera-train
[[ -x $TRAIN ]] || { echo "context_plan: $TRAIN not built (run make)" >&2; exit 2; }
[[ -f $BUILD/libtessera-cuda-train.so ]] ||
    { echo "context_plan: $BUILD/libtessera-cuda-train.so not built (needs nvcc): the device plan comes from it" >&2; exit 2; }

# gib W N T: the plan's device total per GPU in GiB, or nothing when the plan is refused
gib() {
    "$TRAIN" --config configs/llama-3.1-8b-long.cfg --plan "$1" --set parallel.context="$2" \
        --set seq_len="$3" --set global_batch=$(($1 / $2)) 2>/dev/null |
        awk '/^device memory per rank \(cuda/ { for (i = 1; i < NF; i++) if ($i == "total") {
                 v = $(i + 1); u = $(i + 2); sub(/[;,]$/, "", u)
                 print v * (u == "TiB" ? 1024 : u == "GiB" ? 1 : u == "MiB" ? 1 / 1024 : 0) } }' ||
        true # (a refused plan prints no total: nothing)
}
# longest W N: "T GiB" of the longest seq_len that fits (seq_len doubling from 8192), or "0 -"
longest() {
    local T=8192 best="0 -" g
    while ((T <= MAX_T)); do
        g=$(gib "$1" "$2" "$T")
        [[ -n $g ]] && awk -v g="$g" -v b="$BUDGET_GIB" 'BEGIN { exit !(g <= b) }' || break
        best="$T $g"
        T=$((T * 2))
    done
    echo "$best"
}
human() {
    awk -v t="$1" -v m="$MAX_T" 'BEGIN { if (t >= 1048576) printf "%gM", t / 1048576; else printf "%gK", t / 1024
                                        if (t == m) printf "+" }'
}
echo "# context_plan: llama-3.1-8b (configs/llama-3.1-8b-long.cfg: zero3 over all GPUs, block checkpointing, micro_batch 1), budget $BUDGET_GIB GiB per GPU, seq_len doubling from 8K up to $(MAX_T=0 human "$MAX_T")"
echo "| GPUs | N = 1: longest seq_len | its plan per GPU | best N | longest seq_len | its plan per GPU | every N tried |"
echo "|---|---|---|---|---|---|---|"
for W in $GPUS; do
    read -r t1 g1 < <(longest "$W" 1)
    bestN=1 bestT=$t1 bestG=$g1 all="1: $(human "$t1")"
    for ((N = 2; N <= W; N *= 2)); do
        read -r t g < <(longest "$W" "$N")
        all+=", $N: $(human "$t")"
        if ((t > bestT)); then bestN=$N bestT=$t bestG=$g; fi
    done
    echo "| $W | $(human "$t1") | $g1 GiB | $bestN | $(human "$bestT") | $bestG GiB | $all |"
done
