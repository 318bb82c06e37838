#!/usr/bin/env bash
# comm_volume.sh — bytes on the wire per training step for parallel.sharding = ddp | zero1 | zero3 |
# hsdp, measured, against the formula of docs/sharding.md.
#
#   bash bench/comm_volume.sh        (after make; results in docs/benchmarks.md)
#
# W MPI ranks on this host talk over TCP on the loopback interface (OMPI_MCA_btl=self,tcp), so every
# byte the ranks exchange crosses `lo` and is counted by the kernel (/proc/net/dev, transmitted
# bytes, TCP/IP headers included: < 0.2% at loopback's 64 KiB segments). Each mode trains the same
# model for S1 and for S2 steps from scratch; (bytes(S2) - bytes(S1)) / (S2 - S1) / W is one rank's
# bytes per step, start-up and shutdown cancelled. Nothing else should use `lo` meanwhile (the
# script measures an idle interval first and reports it).
#
# The formula (P = parameters in the flat buffer, 4 bytes each; G = sharding group, R = W / G
# replicas; ring algorithms, i.e. the bytes one rank sends):
#   ddp    all-reduce of the gradients               2 (W-1)/W 4P
#   zero1  reduce-scatter + all-gather of the weights 2 (W-1)/W 4P
#   zero3  all-gather of every unit in forward (P), again in backward for the layers but the two
#          still in the prefetch slots and the root, which stays gathered ((L-2) P_layer), and a
#          reduce-scatter of every gradient (P): (G-1)/G 4 (2P + (L-2) P_layer)
#          (the textbook 3 (G-1)/G 4P, less what the slots keep: docs/sharding.md)
#   hsdp   zero3 inside groups of G + all-reduce of the shard across the R groups: + 2 (R-1)/R 4P/G
# MPI picks its own algorithms (OpenMPI's tuned module: recursive doubling or ring by size), so the
# measured bytes are the formula's up to the algorithm's factor; the table shows the ratio.
#
# Environment: W=4 G=2 (hsdp group) S1=2 S2=12 LAYERS=4 DMODEL=128 BUILD=build MODES="ddp zero1 zero3 hsdp"
set -euo pipefail
cd "$(dirname "$0")/.."
W=${W:-4} G=${G:-2} S1=${S1:-2} S2=${S2:-12} LAYERS=${LAYERS:-4} DMODEL=${DMODEL:-128}
BUILD=${BUILD:-build} MODES=${MODES:-ddp zero1 zero3 hsdp}
TRAIN=$BUILD/tessera-train TOOL=$BUILD/tessera
[[ -x $TRAIN ]] || { echo "comm_volume: $TRAIN not built (run make)" >&2; exit 2; }
grep -q '^ *lo:' /proc/net/dev || { echo "comm_volume: no loopback counters in /proc/net/dev" >&2; exit 2; }
TMP=$(mktemp -d /tmp/tessera-comm.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
"$TOOL" synth --out "$TMP/data" --vocab 512 --tokens 200000 --seed 1 >/dev/null

lo_tx() { awk '$1 == "lo:" { print $10 }' /proc/net/dev; }
args=(--config configs/tiny.cfg --set model.vocab_size=512 --set data.tokenizer= --set sample.tokens=0
      --set data.train="$TMP/data/train" --set data.val= --set eval_interval=0ba
      --set model.n_layer="$LAYERS" --set model.d_model="$DMODEL" --set model.n_head=4 --set seq_len=32
      --set model.max_seq_len=32 --set global_batch=$((2 * W)) --set micro_batch=2 --set threads=1
      --set log_interval=1000 --set save_interval=0ba)
# bytes MODE STEPS: loopback bytes of one whole run
bytes() {
    local mode=$1 steps=$2 extra=() b0 b1
    [[ $mode == hsdp ]] && extra=(--set parallel.replica_group="$G")
    rm -rf "$TMP/run"
    b0=$(lo_tx)
    OMPI_MCA_btl=self,tcp OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo \
        bash tests/mpi_env.sh mpirun -np "$W" "$TRAIN" "${args[@]}" --set run_dir="$TMP/run" \
        --set parallel.sharding="$mode" "${extra[@]}" --set max_duration="${steps}ba" >"$TMP/$mode.$steps.txt" 2>&1
    b1=$(lo_tx)
    echo $((b1 - b0))
}
# P: the parameters (vocabulary 512 is a multiple of 128: no padded rows, so the flat buffer's
# size); P_layer of a GPT-2 block with biases: 12 C^2 + 13 C
P=$("$TRAIN" "${args[@]}" --set run_dir="$TMP/dry" --dry-run | sed -nE 's/^params: ([0-9]+) trainable.*/\1/p')
PL=$((12 * DMODEL * DMODEL + 13 * DMODEL))
idle0=$(lo_tx); sleep 2; idle=$(($(lo_tx) - idle0))
echo "# comm_volume: W=$W ranks (hsdp: groups of G=$G), model n_layer=$LAYERS d_model=$DMODEL: P = $P parameters, $PL per layer; steps $S1 and $S2"
echo "# loopback traffic while idle: $idle bytes in 2 s"
echo "| mode | measured bytes/step/rank | formula (ring) | measured / formula |"
echo "|---|---|---|---|"
for mode in $MODES; do
    a=$(bytes "$mode" "$S1") b=$(bytes "$mode" "$S2")
    python3 - "$mode" "$a" "$b" "$S1" "$S2" "$W" "$G" "$P" "$PL" "$LAYERS" <<'PY'
import sys
mode, a, b, s1, s2, W, G, P, PL, L = sys.argv[1], *map(int, sys.argv[2:])
per = (b - a) / (s2 - s1) / W
B = 4 * P
if mode in ("ddp", "zero1"):
    f = 2 * (W - 1) / W * B
elif mode == "zero3":
    f = (W - 1) / W * 4 * (2 * P + (L - 2) * PL)
else:
    R = W // G
    f = (G - 1) / G * 4 * (2 * P + (L - 2) * PL) + 2 * (R - 1) / R * B / G
print(f"| {mode} | {per / 1e6:.3f} MB | {f / 1e6:.3f} MB | {per / f:.2f} |")
PY
done
