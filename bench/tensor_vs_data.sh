#!/usr/bin/env bash
# tensor_vs_data.sh — tensor parallelism against data parallelism on this machine, side by side
# in one run (docs/benchmarks.md "Tensor parallelism"), and the time plan's Llama-3-70B steps.
#
#   bash bench/tensor_vs_data.sh            (after make)
#
# 1. llama-20m (configs/tiny-llama.cfg: 20.9M parameters, 4 layers of width 192, 6 query and 2
#    key/value heads, GPT-2's vocabulary of 50257 padded to 50304) on 2 MPI ranks, fp32 on the CPU,
#    one thread a rank: parallel.tensor = 2 (sequence parallelism on, and off) against
#    parallel.tensor = 1 (data parallelism, ddp), the same global batch of 16 sequences of 128
#    tokens in microbatches of 4. For each: the average step time of the steps after the first
#    (the trainer's "done:" line), and the bytes a rank puts on the wire per step, measured on the
#    loopback interface (OMPI_MCA_btl=self,tcp: every byte the ranks exchange crosses `lo`;
#    (bytes(S2) - bytes(S1)) / (S2 - S1) / 2, start-up cancelled) beside the formula (the plan's:
#    the tensor group's bytes, model_tp.h tp_step_bytes, and the data-parallel all-reduce of the
#    gradients, 2 (W-1)/W 4 P) and, for tensor parallelism, the trainer's own count.
# 2. The time plan (--time) of Llama-3-70B (80 layers of width 8192, 64 query and 8 key/value
#    heads, SwiGLU 28672, vocabulary 128256; sequences of 8192, global batch 128, micro_batch 1,
#    zero1 over the data ranks, every layer checkpointed) at parallel.tensor = 4 and 8 on 64 GPUs
#    (8 a node): the H200's per-op table (configs/profiles/H200.prof; no H100 table exists yet)
#    with the H100's link figures and its dense bf16 peak (989 TFLOP/s), beside Megatron-Bridge's
#    published 1,664 tokens/s/GPU (FP8, TP4 PP8 VP5 on 64 H100s).
#
# Environment: S1=2 S2=8 BUILD=build
set -euo pipefail
cd "$(dirname "$0")/.."
S1=${S1:-2} S2=${S2:-8} BUILD=${BUILD:-build}
TRAIN=$BUILD/tessera-train TOOL=$BUILD/tessera
[[ -x $TRAIN ]] || { echo "tensor_vs_data: $TRAIN not built (run make)" >&2; exit 2; }
grep -q '^ *lo:' /proc/net/dev || { echo "tensor_vs_data: no loopback counters" >&2; exit 2; }
TMP=$(mktemp -d /tmp/tessera-tvd.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
"$TOOL" synth --out "$TMP/data" --vocab 50257 --tokens 400000 --seed 1 >/dev/null

lo_tx() { awk '$1 == "lo:" { print $10 }' /proc/net/dev; }
args=(--config configs/tiny-llama.cfg --set data.tokenizer= --set sample.tokens=0
      --set data.train="$TMP/data/train" --set data.val= --set eval_interval=0ba --set threads=1
      --set log_interval=1000 --set save_interval=0ba --set save_final=false
      --set watchdog.window=0)
# run MODE STEPS: one whole run of MODE ("tp2", "tp2-nosp", "dp2"); prints its loopback bytes
run() {
    local mode=$1 steps=$2 extra=() b0 b1
    case $mode in
    tp2) extra=(--set parallel.tensor=2) ;;
    tp2-nosp) extra=(--set parallel.tensor=2 --set parallel.sequence=false) ;;
    esac
    rm -rf "$TMP/run"
    b0=$(lo_tx)
    OMPI_MCA_btl=self,tcp OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo \
        bash tests/mpi_env.sh mpirun -np 2 "$TRAIN" "${args[@]}" --set run_dir="$TMP/run" \
        "${extra[@]}" --set max_duration="${steps}ba" >"$TMP/$mode.$steps.txt" 2>&1 ||
        { echo "tensor_vs_data: $mode, $steps steps failed:" >&2; tail -20 "$TMP/$mode.$steps.txt" >&2; exit 1; }
    b1=$(lo_tx)
    echo $((b1 - b0))
}
P=$("$TRAIN" "${args[@]}" --set run_dir="$TMP/dry" --dry-run | awk '$1 == "params:" && !n { n = $2 } END { print n }')
echo "# tensor_vs_data: llama-20m ($P parameters) on 2 ranks of $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); steps $S1 and $S2; $(date -u)"
echo "| mode | ms/step | measured bytes/step/rank | formula | trainer's count (tensor group) | plan: memory per rank |"
echo "|---|---|---|---|---|---|"
for mode in dp2 tp2 tp2-nosp; do
    a=$(run "$mode" "$S1") b=$(run "$mode" "$S2")
    ms=$(sed -nE 's/^done: .* ([0-9.]+) ms\/step average.*/\1/p' "$TMP/$mode.$S2.txt")
    mem=$(sed -nE 's/^memory per rank \(fp32\).*; total (.*)$/\1/p' "$TMP/$mode.$S2.txt")
    tpb=$(sed -nE 's/.*sends [^(]*\(([0-9]+) B\) over its tensor group.*/\1/p' "$TMP/$mode.$S2.txt")
    n=$(sed -nE 's/^tensor parallelism: ([0-9]+) bytes sent.*/\1/p' "$TMP/$mode.$S2.txt")
    m=$(sed -nE 's/^tensor parallelism: ([0-9]+) bytes sent.*/\1/p' "$TMP/$mode.$S1.txt")
    python3 - "$mode" "$a" "$b" "$S1" "$S2" "$P" "${tpb:-0}" "${n:-0}" "${m:-0}" "$ms" "$mem" <<'PY'
import sys
mode, a, b, s1, s2, P, tpb, n, m = sys.argv[1], *map(int, sys.argv[2:10])
ms, mem = sys.argv[10], sys.argv[11]
per = (b - a) / (s2 - s1) / 2
# data parallelism: the all-reduce of the gradients over 2 ranks (P floats); tensor
# parallelism: one data rank (nothing summed over data), the tensor group's bytes
f = 2 * (2 - 1) / 2 * 4 * P if mode == "dp2" else tpb
count = "-" if mode == "dp2" else f"{(n - m) / (s2 - s1) / 2 / 1e6:.3f} MB"
print(f"| {mode} | {ms} | {per / 1e6:.3f} MB | {f / 1e6:.3f} MB ({per / f:.2f}) | {count} | {mem} |")
PY
done

echo
echo "# the time plan of Llama-3-70B on 64 GPUs (8 a node): the H200's table, the H100's links and peak"
llama70=(--config configs/llama-3.1-8b.cfg --set model.n_layer=80 --set model.d_model=8192
         --set model.n_head=64 --set model.n_kv_head=8 --set model.intermediate_size=28672
         --set seq_len=8192 --set model.max_seq_len=8192 --set global_batch=128
         --set micro_batch=1 --set parallel.sharding=zero1 --set peak_flops=989e12)
for T in 4 8; do
    "$TRAIN" "${llama70[@]}" --set parallel.tensor=$T --plan 64/8 \
        --time=configs/profiles/H200.prof --link 460,350 2>/dev/null |
        awk -v T="$T" '/^ +W +nodes/ { print "# parallel.tensor = " T; print; on = 1; next }
                      on && /^ +[0-9]/ { print } on && !/^ +[0-9]/ { on = 0 }
                      /^tensor parallelism:/ { print "# " $0 }'
done
echo "# Megatron-Bridge, Llama-3-70B on 64 H100 (FP8, TP4 PP8 VP5): 1,664 tokens/s/GPU = $((1664 * 64)) tokens/s"
