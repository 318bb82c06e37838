#!/usr/bin/env bash
# sdc_overhead.sh — what the silent-data-corruption checks cost (docs/health.md "What it costs",
# "Deterministic replay"), side by side with them off: configs/tiny.cfg as it is (4 layers,
# d_model 192, GPT-2's vocabulary: 11.5M parameters; 16 sequences of 128 a step in microbatches of
# 4) on the synthetic corpus, 2 ranks of ddp, one thread each, STEPS steps, no evaluation, no save,
# in four settings run in turn REPS times:
#   off       health.fingerprint_interval = 0, health.replay_interval = 0
#   default   the defaults: fingerprints every 10 steps ("auto" on the CPU), replay every 100
#   fp1       fingerprints every step, no replay (the worst case of the hashing)
#   replay10  no fingerprints, replay every 10 steps
# For each: the median over the repetitions of the mean step time (steps 2..STEPS, metrics.jsonl's
# step_time_s), against off's; and from the run's own figures (its {"event": "health"} record and
# its account's health_s) the seconds the checks took inside the steps, a measure a loaded
# machine disturbs less than a difference of two step times. Replay's prediction: one microbatch's
# forward and backward of a rank's m per replay step, plus two hashes of the gradients: 1 / (m k)
# of the compute at interval k.
#
#   bash bench/sdc_overhead.sh                (after make; STEPS=101 REPS=3 by default)
#
# DEVICE=cuda (tests/gpu/device.sh's sdc stage, docs/health.md "On the GPU"): the same with
# device = cuda on CONFIG (default configs/gpt2-124m.cfg there: a step long enough to weigh a
# copy against), micro_batch MICRO (default 4), on RANKS ranks (default 2; 1 where MPI is
# missing), in the settings off, default (there "auto": at start and at saves only, none here),
# fp10 (every 10 steps) and fp1 (replay is not built on the GPU): what the fingerprints cost
# there, the device-to-host copy of the state included.
# Results: docs/benchmarks.md "Silent data corruption: the checks' cost".
set -uo pipefail
TSR_ROOT=$(cd "$(dirname "$0")/.." && pwd)
source "$TSR_ROOT/tests/lib.sh"
STEPS=${STEPS:-101} REPS=${REPS:-3}
TMP=$(mktemp -d /tmp/tessera-sdc-overhead.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
DEVICE=${DEVICE:-cpu} RANKS=${RANKS:-2} TRAIN=${BENCH_TRAIN:-$TRAIN} # (the emulator's, to try it)
make_synth "$TMP/data" 50257 2000000
if [[ $DEVICE == cuda ]]; then
    CONFIG=${CONFIG:-$TSR_ROOT/configs/gpt2-124m.cfg}
    dev=(--set device=cuda --set micro_batch="${MICRO:-4}")
    mpi_ok() { command -v mpirun >/dev/null && [[ $(ldd "$1" 2>/dev/null) == *libmpi* ]]; }
    mpi_ok "$TRAIN" || RANKS=1
else
    CONFIG=${CONFIG:-$TSR_ROOT/configs/tiny.cfg} dev=()
fi
base=(--config "$CONFIG" --set data.tokenizer= --set data.train="$TMP/data/train"
      --set data.val= --set sample.tokens=0 --set eval_interval=0ba --set save_interval=0ba
      --set save_final=false --set threads=1 --set watchdog.window=0 --set log_interval=1000
      --set max_duration="${STEPS}ba" "${dev[@]}")
declare -A sets=(
    [off]="--set health.fingerprint_interval=0 --set health.replay_interval=0"
    [default]=""
    [fp10]="--set health.fingerprint_interval=10 --set health.replay_interval=0"
    [fp1]="--set health.fingerprint_interval=1 --set health.replay_interval=0"
    [replay10]="--set health.fingerprint_interval=0 --set health.replay_interval=10"
)
order=(off default fp1 replay10)
[[ $DEVICE == cuda ]] && order=(off default fp10 fp1)
echo "# $DEVICE, $RANKS ranks, $(basename "$CONFIG"), $STEPS steps, $REPS repetitions" >&2
# figures RUN_DIR: "mean_step_ms health_s_share hash_s replay_s" of one run
figures() {
    "$PY3" - "$1/metrics.jsonl" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
steps = [l["step_time_s"] for l in lines if "step_time_s" in l and l["step"] > 1]
acc = [l for l in lines if l.get("event") == "account"][-1]
h = [l for l in lines if l.get("event") == "health"]
h = h[-1] if h else {}
print("%.3f %.6f %.6f %.6f" % (1e3 * sum(steps) / len(steps), acc.get("health_s", 0) / acc["steps_s"],
                               h.get("hash_s", 0), h.get("replay_s", 0)))
PY
}
for rep in $(seq 1 "$REPS"); do
    for k in "${order[@]}"; do
        # shellcheck disable=SC2086
        ranks "$RANKS" "$TRAIN" "${base[@]}" ${sets[$k]} --set run_dir="$TMP/$k-$rep" >"$TMP/$k-$rep.txt" 2>&1 ||
            { echo "bench: $k run $rep failed:"; tail -5 "$TMP/$k-$rep.txt"; exit 1; }
        echo "# $k run $rep: $(figures "$TMP/$k-$rep")" >&2
    done
done
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
off_ms=$(for r in $(seq 1 "$REPS"); do figures "$TMP/off-$r" | cut -d' ' -f1; done | median)
echo "| setting | mean step (ms, median of $REPS) | vs off | the checks' share of the steps (account health_s) |"
echo "|---|---|---|---|"
for k in "${order[@]}"; do
    ms=$(for r in $(seq 1 "$REPS"); do figures "$TMP/$k-$r" | cut -d' ' -f1; done | median)
    share=$(for r in $(seq 1 "$REPS"); do figures "$TMP/$k-$r" | cut -d' ' -f2; done | median)
    awk -v k="$k" -v ms="$ms" -v off="$off_ms" -v sh="$share" \
        'BEGIN { printf "| %s | %.1f | %+.1f%% | %.2f%% |\n", k, ms, 100 * (ms / off - 1), 100 * sh }'
done
[[ $DEVICE == cuda ]] ||
    echo "replay's prediction: m = 16 / 2 ranks / 4 = 2 microbatches a rank, k = 10: 1 / (m k) = 5.0% of the compute, plus the hashes"
