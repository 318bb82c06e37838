#!/usr/bin/env bash
# comm_volume.sh — bytes on the wire per training step for parallel.sharding = ddp | zero1 | zero3 |
# hsdp, measured, against the formula of docs/sharding.md; for expert parallelism
# (parallel.expert = 1, 2, 4 of a MoE model: modes ep1 ep2 ep4, when named in MODES); and for
# context parallelism (parallel.context = 2, 4: modes cp2 cp4, when named in MODES).
#
#   bash bench/comm_volume.sh                      (after make; results in docs/benchmarks.md)
#   MODES="zero3 muon-zero3 hsdp muon-hsdp" bash bench/comm_volume.sh   (Muon's exchange)
#   MODES="ep1 ep2 ep4" bash bench/comm_volume.sh  (expert parallelism)
#   MODES="cp2 cp4" bash bench/comm_volume.sh      (context parallelism)
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
# Muon (muon-zero3, muon-hsdp: optim.name = muon under that mode; src/optim/muon.h): the mode's
# traffic plus the owners' exchange, each matrix's other pieces of u to its owner and its
# orthogonalised pieces back, 2 x 4 x sum over matrices of (numel - the owner's piece) bytes per
# step and sharding group (the trainer prints that figure at the end of the run: "muon exchange:
# ... the formula: X per step and sharding group"), X / G per rank. ddp and zero1 add nothing
# (each matrix is orthogonalised where its whole gradient already is).
#
# Expert parallelism (epN: parallel.expert = N, dense part parallel.sharding = ddp; src/model/model_ep.h):
# a Llama-style MoE model (configs/tiny-llama.cfg, n_layer = LAYERS MoE layers (LM), d_model C =
# DMODEL, E experts of width FE, top K; vocabulary 512, the same synthetic data and sampler as the
# modes above), MB rows of 32 tokens per microbatch, one microbatch per rank per step (M = 1).
# The world splits into EP groups of N ranks, each holding every expert once (E/N per rank); the
# expert-data-parallel group of a rank has R = W/N members. One rank per step sends
#   2 (W-1)/W 4 P_dense               all-reduce of the dense gradients (router included)
# + 2 (R-1)/R 4 P_expert_local        all-reduce of its experts' gradients over the R ranks
# + X                                 the exchange: routed rows to their experts' ranks and the
#                                     outputs back (forward), d(output) there and d(input) back
# with P_expert_local = LM (E/N) 3 FE C, P_dense = P - LM E 3 FE C (P from --dry-run). ep1 is the
# same model without expert parallelism: everything in the flat buffer (R = W, X = 0).
# X is data dependent: the table takes it from the trainer's count (its end-of-run line "expert
# exchange: B bytes sent between ranks", all ranks; (B(S2) - B(S1)) / (S2 - S1) / W) and shows
# beside it the expectation under uniform routing, 4 LM M (MB 32 K) (N-1)/N C 4 bytes.
# Not in the formula: each MoE layer's all-gather of the (E+1) int32 expert offsets per forward
# and the per-step scalar all-reduces (tens of bytes each, plus their headers).
#
# Context parallelism (cpN: parallel.context = N, parallel.sharding = ddp; docs/parallelism.md): the
# GPT-2-style model of the dense modes with sequences of CP_T tokens, one microbatch of 2 sequences
# per data rank and step (global batch 2 W/N). One rank per step sends
#   2 (W-1)/W 4 P                     the all-reduce of the gradients over all W ranks
# + L (2 (N-1) + N) blk 4             the ring: each layer's keys and values N-1 hops forward
#                                     and again backward, their fp32 gradients N hops
# with blk = 2 (CP_T/N) 2 C the elements of one key/value block (the CPU's fp32; KVH = NH) and P
# from --dry-run (the learned position table grows with CP_T). The ring's part is also the
# trainer's own count (its end-of-run line "context ring: B bytes sent between ranks").
#
# Environment: W=4 G=2 (hsdp group) S1=2 S2=12 LAYERS=4 DMODEL=128 BUILD=build MODES="ddp zero1 zero3 hsdp"
#              E=8 K=2 FE=64 MB=8 (ep modes) CP_T=256 (cp modes)
set -euo pipefail
cd "$(dirname "$0")/.."
W=${W:-4} G=${G:-2} S1=${S1:-2} S2=${S2:-12} LAYERS=${LAYERS:-4} DMODEL=${DMODEL:-128}
BUILD=${BUILD:-build} MODES=${MODES:-ddp zero1 zero3 hsdp}
E=${E:-8} K=${K:-2} FE=${FE:-64} MB=${MB:-8} CP_T=${CP_T:-256}
TRAIN=$BUILD/tessera-train TOOL=$BUILD/tessera
[[ -x $TRAIN ]] || { echo "comm_volume: $TRAIN not built (run make)" >&2; exit 2; }
grep -q '^ *lo:' /proc/net/dev || { echo "comm_volume: no loopback counters in /proc/net/dev" >&2; exit 2; }
dense_modes=() ep_modes=() cp_modes=()
for mode in $MODES; do
    if [[ $mode =~ ^cp([0-9]+)$ ]]; then
        n=${BASH_REMATCH[1]}
        ((n >= 2 && W % n == 0 && CP_T % (2 * n) == 0)) ||
            { echo "comm_volume: $mode: the context degree must divide W=$W, 2N CP_T=$CP_T" >&2; exit 2; }
        cp_modes+=("$mode")
    elif [[ $mode =~ ^ep([0-9]+)$ ]]; then
        n=${BASH_REMATCH[1]}
        ((n >= 1 && W % n == 0 && E % n == 0)) ||
            { echo "comm_volume: $mode: the expert degree must divide W=$W and E=$E" >&2; exit 2; }
        ep_modes+=("$mode")
    else
        dense_modes+=("$mode")
    fi
done
TMP=$(mktemp -d /tmp/tessera-comm.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
"$TOOL" synth --out "$TMP/data" --vocab 512 --tokens 200000 --seed 1 >/dev/null

lo_tx() { awk '$1 == "lo:" { print $10 }' /proc/net/dev; }
args=(--config configs/tiny.cfg --set model.vocab_size=512 --set data.tokenizer= --set sample.tokens=0
      --set data.train="$TMP/data/train" --set data.val= --set eval_interval=0ba
      --set model.n_layer="$LAYERS" --set model.d_model="$DMODEL" --set model.n_head=4 --set seq_len=32
      --set model.max_seq_len=32 --set global_batch=$((2 * W)) --set micro_batch=2 --set threads=1
      --set log_interval=1000 --set save_interval=0ba)
# the ep modes' MoE model: the same data, sampler, sequence length and run keys; tiny-llama's
# 2 key/value heads; every layer MoE; MB rows per microbatch, one microbatch per rank
moe_args=(--config configs/tiny-llama.cfg --set model.vocab_size=512 --set data.tokenizer=
          --set sample.tokens=0 --set data.train="$TMP/data/train" --set data.val=
          --set eval_interval=0ba --set model.n_layer="$LAYERS" --set model.d_model="$DMODEL"
          --set model.n_head=4 --set seq_len=32 --set model.max_seq_len=32
          --set global_batch=$((MB * W)) --set micro_batch="$MB" --set threads=1
          --set log_interval=1000 --set save_interval=0ba --set model.moe_experts="$E"
          --set model.moe_top_k="$K" --set model.moe_intermediate_size="$FE" --set model.moe_every=1)
# the cp modes: the dense modes' model on sequences of CP_T tokens
cp_args=("${args[@]}" --set seq_len="$CP_T" --set model.max_seq_len="$CP_T")
# bytes MODE STEPS: loopback bytes of one whole run (its output in $TMP/MODE.STEPS.txt)
bytes() {
    local mode=$1 steps=$2 run=("${args[@]}") extra=() b0 b1
    if [[ $mode =~ ^ep([0-9]+)$ ]]; then
        run=("${moe_args[@]}") extra=(--set parallel.expert="${BASH_REMATCH[1]}")
    fi
    if [[ $mode =~ ^cp([0-9]+)$ ]]; then
        local n=${BASH_REMATCH[1]}
        run=("${cp_args[@]}") extra=(--set parallel.context="$n" --set global_batch=$((2 * W / n)))
    fi
    local sharding=$mode
    [[ $mode == ep* || $mode == cp* ]] && sharding=ddp
    [[ $mode == muon-* ]] && sharding=${mode#muon-} extra+=(--set optim.name=muon)
    [[ $sharding == hsdp ]] && extra+=(--set parallel.replica_group="$G")
    rm -rf "$TMP/run"
    b0=$(lo_tx)
    OMPI_MCA_btl=self,tcp OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo \
        bash tests/mpi_env.sh mpirun -np "$W" "$TRAIN" "${run[@]}" --set run_dir="$TMP/run" \
        --set parallel.sharding="$sharding" "${extra[@]}" --set max_duration="${steps}ba" >"$TMP/$mode.$steps.txt" 2>&1 ||
        { echo "comm_volume: $mode, $steps steps failed:" >&2; tail -20 "$TMP/$mode.$steps.txt" >&2; exit 1; }
    b1=$(lo_tx)
    echo $((b1 - b0))
}
# the Muon exchange's formula of run MODE STEPS, bytes per step and group (0 without Muon)
muonx() {
    local n
    n=$(sed -nE 's/^muon exchange: .*the formula: ([0-9]+) per step.*/\1/p' "$TMP/$1.$2.txt")
    echo "${n:-0}"
}
# counted WHAT MODE STEPS: the bytes of the trainer's end-of-run line "WHAT: B bytes sent" of run
# MODE STEPS ("expert exchange", "context ring"; 0 where the run has none)
counted() {
    local n
    n=$(sed -nE "s/^$1: ([0-9]+) bytes sent.*/\1/p" "$TMP/$2.$3.txt")
    echo "${n:-0}"
}
# measure MODE WHAT: runs MODE for S1 and S2 steps; into m: MODE, each run's loopback bytes, the
# trainer's count of WHAT in each (counted), S1, S2 and W (the ep and cp formulas' first arguments)
measure() {
    local a b
    a=$(bytes "$1" "$S1")
    b=$(bytes "$1" "$S2")
    m=("$1" "$a" "$b" "$(counted "$2" "$1" "$S1")" "$(counted "$2" "$1" "$S2")" "$S1" "$S2" "$W")
}
idle0=$(lo_tx); sleep 2; idle=$(($(lo_tx) - idle0))
if ((${#dense_modes[@]})); then
# P: the parameters (vocabulary 512 is a multiple of 128: no padded rows, so the flat buffer's
# size); P_layer of a GPT-2 block with biases: 12 C^2 + 13 C
P=$("$TRAIN" "${args[@]}" --set run_dir="$TMP/dry" --dry-run | sed -nE 's/^params: ([0-9]+) trainable.*/\1/p')
PL=$((12 * DMODEL * DMODEL + 13 * DMODEL))
echo "# comm_volume: W=$W ranks (hsdp: groups of G=$G), model n_layer=$LAYERS d_model=$DMODEL: P = $P parameters, $PL per layer; steps $S1 and $S2"
echo "# loopback traffic while idle: $idle bytes in 2 s"
echo "| mode | measured bytes/step/rank | formula (ring) | measured / formula |"
echo "|---|---|---|---|"
for mode in "${dense_modes[@]}"; do
    a=$(bytes "$mode" "$S1") b=$(bytes "$mode" "$S2")
    python3 - "$mode" "$a" "$b" "$S1" "$S2" "$W" "$G" "$P" "$PL" "$LAYERS" "$(muonx "$mode" "$S2")" <<'PY'
import sys
mode, a, b, s1, s2, W, G, P, PL, L, X = sys.argv[1], *map(int, sys.argv[2:])
per = (b - a) / (s2 - s1) / W
B = 4 * P
base = mode.removeprefix("muon-")
if base == "zero3":
    G = W
muon = X / G  # the Muon exchange per rank (0 without Muon)
if base in ("ddp", "zero1"):
    f = 2 * (W - 1) / W * B
elif base == "zero3":
    f = (W - 1) / W * 4 * (2 * P + (L - 2) * PL)
else:
    R = W // G
    f = (G - 1) / G * 4 * (2 * P + (L - 2) * PL) + 2 * (R - 1) / R * B / G
f += muon
print(f"| {mode} | {per / 1e6:.3f} MB | {f / 1e6:.3f} MB | {per / f:.2f} |")
PY
done
fi
if ((${#ep_modes[@]})); then
# P of the MoE model without expert parallelism (all in the flat buffer; vocabulary 512: no
# padding; the banner's first params line, read to the end: an early quit would give the
# trainer SIGPIPE, and pipefail would end the script); the experts' part LM E 3 FE C
PM=$("$TRAIN" "${moe_args[@]}" --set run_dir="$TMP/dry" --dry-run |
    awk '$1 == "params:" && !n { n = $2 } END { print n }')
[[ $PM =~ ^[0-9]+$ ]] || { echo "comm_volume: no params line in the MoE model's --dry-run" >&2; exit 1; }
PX=$((LAYERS * E * 3 * FE * DMODEL))
echo "# comm_volume, expert parallelism: W=$W ranks, dense part ddp; MoE model n_layer=$LAYERS (all MoE) d_model=$DMODEL, E=$E experts of width $FE, top $K; microbatch $MB x 32 tokens, 1 per rank per step: P = $PM parameters, $PX in the experts, $((PM - PX)) dense; steps $S1 and $S2"
echo "# loopback traffic while idle: $idle bytes in 2 s"
echo "| mode | measured bytes/step/rank | dense all-reduce | expert all-reduce | exchange: trainer's count | exchange: uniform routing | formula | measured / formula |"
echo "|---|---|---|---|---|---|---|---|"
for mode in "${ep_modes[@]}"; do
    measure "$mode" "expert exchange"
    python3 - "${m[@]}" "$PM" "$PX" "$LAYERS" "$E" "$K" "$FE" "$DMODEL" "$MB" <<'PY'
import sys
mode = sys.argv[1]
a, b, xa, xb = map(int, sys.argv[2:6])
s1, s2, W, P, PX, LM, E, K, FE, C, MB = map(int, sys.argv[6:])
EP = int(mode[2:])
R = W // EP
per = (b - a) / (s2 - s1) / W
x = (xb - xa) / (s2 - s1) / W
uniform = 4 * LM * 1 * (MB * 32 * K) * (EP - 1) / EP * C * 4
dense = 2 * (W - 1) / W * 4 * (P - PX)
expert = 2 * (R - 1) / R * 4 * (LM * (E // EP) * 3 * FE * C)
f = dense + expert + x
mb = lambda v: f"{v / 1e6:.3f} MB"
print(f"| {mode} | {mb(per)} | {mb(dense)} | {mb(expert)} | {mb(x)} | {mb(uniform)} | {mb(f)} "
      f"| {per / f:.2f} |")
PY
done
fi
if ((${#cp_modes[@]})); then
PC=$("$TRAIN" "${cp_args[@]}" --set run_dir="$TMP/dry" --dry-run | sed -nE 's/^params: ([0-9]+) trainable.*/\1/p')
echo "# comm_volume, context parallelism: W=$W ranks, ddp; model n_layer=$LAYERS d_model=$DMODEL, sequences of $CP_T tokens, 2 per data rank and step: P = $PC parameters; steps $S1 and $S2"
echo "# loopback traffic while idle: $idle bytes in 2 s"
echo "| mode | measured bytes/step/rank | gradient all-reduce | ring: formula | ring: trainer's count | formula | measured / formula |"
echo "|---|---|---|---|---|---|---|"
for mode in "${cp_modes[@]}"; do
    measure "$mode" "context ring"
    python3 - "${m[@]}" "$PC" "$LAYERS" "$DMODEL" "$CP_T" <<'PY'
import sys
mode = sys.argv[1]
a, b, ra, rb = map(int, sys.argv[2:6])
s1, s2, W, P, L, C, T = map(int, sys.argv[6:])
N = int(mode[2:])
per = (b - a) / (s2 - s1) / W
count = (rb - ra) / (s2 - s1) / W
blk = 2 * (T // N) * 2 * C
ring = L * (2 * (N - 1) + N) * blk * 4
dense = 2 * (W - 1) / W * 4 * P
f = dense + ring
mb = lambda v: f"{v / 1e6:.3f} MB"
print(f"| {mode} | {mb(per)} | {mb(dense)} | {mb(ring)} | {mb(count)} | {mb(f)} | {per / f:.2f} |")
PY
done
fi
