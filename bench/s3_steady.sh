#!/usr/bin/env bash
# s3_steady.sh — the steady state of a dataset streamed from an object store (issue 69's benchmark,
# docs/benchmarks.md "Steady state, streamed vs local"): the same 2-rank run of configs/tiny.cfg (and a
# wider variant, d_model 384 x 6 layers) from a local copy and from s3:// on a private s3rver
# (127.0.0.1, npm s3rver in data/npm/s3rver), ROUNDS rounds interleaved (local, s3, local, s3, ...)
# so that both see the same machine load. A dataset of 32 shards of 16,384 tokens (synthetic ids),
# data.stage_window 10: each window of a streamed run fetches the shards of the next one while it
# trains (docs/object-storage.md). Per run: the median step time over steps 2..STEPS, the sum of
# the steps' data_wait_s (time a step waited for its shards), the wall time of the whole run.
# Usage: bash bench/s3_steady.sh [STEPS [ROUNDS]]   (prints a table; nothing is asserted)
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
source "$ROOT/bench/s3_server.sh"
STEPS=${1:-60} ROUNDS=${2:-2}
s3_server_up tessera-s3steady

"$TOOL" synth --out "$TMP/d" --vocab 50257 --tokens $((32 * 16384)) --shard-tokens 16384 --val-tokens 1000 --seed 1 >/dev/null &&
    "$TOOL" data push "$TMP/d/train" s3://tsr-bench/d >/dev/null || exit 1
base=(--config "$ROOT/configs/tiny.cfg" --set data.tokenizer= --set sample.tokens=0 --set data.val=
      --set eval_interval=0ba --set save_interval=0ba --set log_interval=1 --set max_duration="${STEPS}ba"
      --set data.stage_window=10 --set watchdog.window=0)
wide=(--set model.d_model=384 --set model.n_layer=6)
# run NAME WHERE ARGS...: one 2-rank run; prints "median_step_s wait_sum_s wall_s"
run() {
    local name=$1 where=$2; shift 2
    local src=(--set data.train="$TMP/d/train")
    [[ $where == s3 ]] && src=(--set data.train=s3://tsr-bench/d --set data.stage_to="$TMP/st-$name")
    local t0; t0=$(date +%s.%N)
    "${MPIRUN[@]}" -np 2 "$TRAIN" "${base[@]}" "$@" "${src[@]}" --set run_dir="$TMP/$name" >"$TMP/$name.log" 2>&1 ||
        { echo "run $name failed: $(tail -2 "$TMP/$name.log")" >&2; return 1; }
    local wall; wall=$(echo "$(date +%s.%N) - $t0" | bc)
    python3 - "$TMP/$name/metrics.jsonl" "$wall" <<'PY'
import json, statistics, sys
st = [json.loads(l) for l in open(sys.argv[1])]
st = [r for r in st if "step_time_s" in r and r["step"] >= 2]
print("%.4f %.3f %.2f" % (statistics.median(r["step_time_s"] for r in st),
                          sum(r.get("data_wait_s", 0) for r in st), float(sys.argv[2])))
PY
    rm -rf "$TMP/st-$name" "$TMP/$name"
}
printf '%-6s %-5s %5s | %14s %12s %9s\n' model from round "median step s" "data wait s" "wall s"
for r in $(seq 1 "$ROUNDS"); do
    for m in tiny wide; do
        extra=(); [[ $m == wide ]] && extra=("${wide[@]}")
        for where in local s3; do
            read -r med wait wall < <(run "$m-$where-$r" "$where" "${extra[@]}") || exit 1
            printf '%-6s %-5s %5d | %14s %12s %9s\n' "$m" "$where" "$r" "$med" "$wait" "$wall"
        done
    done
done
