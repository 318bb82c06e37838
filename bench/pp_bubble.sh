#!/usr/bin/env bash
# pp_bubble.sh — the pipeline's bubble measured on the CPU against the schedule's formula
# (docs/benchmarks.md "The pipeline's bubble on the CPU"; issue 82's acceptance).
#
#   bash bench/pp_bubble.sh          (after make; STEPS=5 MS="4 8 16" by default)
#
# Tests-sized runs (configs/tiny-llama.cfg with 8 layers of width 256, 4 heads, 2 key/value heads,
# an MLP of 768, a 64-token vocabulary, sequences of 256, microbatches of one sequence, fp32, one
# thread a rank) at parallel.pipeline = 2 and 4, each schedule (1f1b; interleaved with 2 chunks a
# rank; zb), M microbatches a step (global_batch = M), STEPS steps. From each run's own timers
# (src/train/pipeline_exec.c: every action's compute timed on its rank, the step's wall the slowest
# rank's, the first step left out): the bubble (the idle share of all stages' time) and each
# rank's idle share, beside the formula at equal action times: (P-1)/(M+P-1) for 1F1B,
# (P-1)/(V M+P-1) interleaved, and the zero-bubble table's (the plan's `bubble ... by its table`;
# ZB-H1: a third of 1F1B's idle ticks). A backward costs about twice a forward here, which the
# formulas' equal times do not say: the 1F1B and interleaved formulas hold at any costs, the
# zero-bubble table's does not (its W half fills the bubble only where W is as long as F).
# P = 4 runs 4 ranks on this machine's cores: oversubscribed when the machine has fewer than 4.
set -uo pipefail
TSR_ROOT=$(cd "$(dirname "$0")/.." && pwd)
source "$TSR_ROOT/tests/lib.sh"
STEPS=${STEPS:-5} MS=${MS:-"4 8 16"}
TMP=$(mktemp -d /tmp/tessera-pp-bubble.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
make_synth "$TMP/d" 64 200000
args=(--config "$TSR_ROOT/configs/tiny-llama.cfg" --set model.vocab_size=64 --set data.tokenizer=
      --set sample.tokens=0 --set data.train="$TMP/d/train" --set data.val= --set eval_interval=0ba
      --set seq_len=256 --set model.max_seq_len=256 --set model.n_layer=8 --set model.d_model=256
      --set model.n_head=4 --set model.n_kv_head=2 --set model.intermediate_size=768
      --set micro_batch=1 --set max_duration="${STEPS}ba" --set save_interval=0ba
      --set save_final=false --set threads=1 --set log_interval=1000 --set watchdog.window=0)
echo "# pp_bubble: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); load $(cut -d' ' -f1-3 /proc/loadavg); $STEPS steps (the first not measured); $(date -u)"
echo "| P | schedule | M | formula | table | measured bubble | idle per rank | ms/step |"
echo "|---|---|---|---|---|---|---|---|"
for P in 2 4; do
    for sched in 1f1b interleaved zb; do
        V=1
        [[ $sched == interleaved ]] && V=2
        for M in $MS; do
            ((M >= P)) || continue
            [[ $sched == interleaved ]] && ((M % P)) && continue
            log=$TMP/$P-$sched-$M.txt
            bash "$TSR_ROOT/tests/mpi_env.sh" mpirun -np "$P" --mca mpi_yield_when_idle 1 \
                "$TRAIN" "${args[@]}" --set parallel.pipeline="$P" \
                --set parallel.pipeline_schedule="$sched" --set parallel.pipeline_virtual="$V" \
                --set global_batch="$M" --set run_dir="$TMP/run-$P-$sched-$M" >"$log" 2>&1 ||
                { echo "| $P | $sched | $M | run failed: $(grep -m1 -i error "$log") |"; continue; }
            "$PY3" - "$log" "$P" "$sched" "$M" "$V" <<'PY'
import re, sys
log, P, sched, M, V = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
text = open(log).read()
m = re.search(r"pipeline: bubble ([0-9.]+) measured over \d+ steps .*?, ([0-9.]+) by the", text)
idle = re.search(r"pipeline: idle per rank \([^)]*\):((?: [0-9.]+)+)", text)
step = re.search(r"done: .* ([0-9.]+) ms/step average", text)
formula = {"1f1b": (P - 1) / (M + P - 1), "interleaved": (P - 1) / (V * M + P - 1),
           "zb": float("nan")}[sched]
f = "-" if sched == "zb" else f"{formula:.4f}"
print(f"| {P} | {sched}{' V 2' if V > 1 else ''} | {M} | {f} | {m.group(2)} | {m.group(1)} | "
      f"{idle.group(1).strip()} | {step.group(1) if step else '-'} |")
PY
        done
    done
done
