#!/usr/bin/env bash
# s3_stream.sh — datasets on an object store (docs/object-storage.md, docs/benchmarks.md "Object
# store"), against a private s3rver on 127.0.0.1 (npm s3rver in data/npm/s3rver):
#  1. start-up: the wall time of a 1-step tiny run over a dataset of N_SMALL shards (default 10000),
#     from s3:// (index fetch + the first window's shards) and from the local copy;
#  2. fetch throughput: 16 shards of ~4 MB fetched by the stager (the first window's wait_s, all 16
#     shards in it) against curl fetching the same objects (one at a time, and 8 at once).
# Usage: bash bench/s3_stream.sh [N_SMALL]   (prints a table; nothing is asserted)
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
source "$ROOT/bench/s3_server.sh"
N_SMALL=${1:-10000}
s3_server_up tessera-s3bench
now() { date +%s.%N; }
since() { echo "$(now) - $1" | bc; }
args=(--config "$ROOT/configs/tiny.cfg" --set model.vocab_size=512 --set data.tokenizer= --set sample.tokens=0
      --set data.val= --set eval_interval=0ba --set model.n_layer=2 --set model.d_model=64 --set model.n_head=4
      --set seq_len=32 --set global_batch=8 --set micro_batch=2 --set threads=1 --set watchdog.window=0
      --set data.stage_window=10)

# 1. start-up over N_SMALL shards of 101 tokens (3 samples each)
"$TOOL" synth --out "$TMP/small" --vocab 512 --tokens $((N_SMALL * 101)) --shard-tokens 101 --val-tokens 1000 --seed 1 >/dev/null
t0=$(now); "$TOOL" data push "$TMP/small/train" s3://tsr-bench/small >/dev/null || exit 1; push_s=$(since "$t0")
t0=$(now); "${MPIRUN[@]}" -np 1 "$TRAIN" "${args[@]}" --set data.train="$TMP/small/train" --set max_duration=1ba --set run_dir="$TMP/r1" >/dev/null 2>&1; local_s=$(since "$t0")
t0=$(now); "${MPIRUN[@]}" -np 1 "$TRAIN" "${args[@]}" --set data.train=s3://tsr-bench/small --set data.stage_to="$TMP/st1" --set max_duration=1ba --set run_dir="$TMP/r2" >/dev/null 2>&1; s3_s=$(since "$t0")
fetched=$(ls "$TMP"/st1/*/ | grep -c '^shard-')
printf 'start-up, %d shards: push %.1f s; 1-step run from local %.2f s, from s3:// %.2f s (%d shards fetched)\n' \
    "$N_SMALL" "$push_s" "$local_s" "$s3_s" "$fetched"

# 2. throughput: 16 shards of 2,000,000 tokens (4 MB each)
"$TOOL" synth --out "$TMP/big" --vocab 512 --tokens 32000000 --shard-tokens 2000000 --val-tokens 1000 --seed 1 >/dev/null
"$TOOL" data push "$TMP/big/train" s3://tsr-bench/big >/dev/null || exit 1
bytes=$(cat "$TMP"/big/train/shard-* | wc -c)
"${MPIRUN[@]}" -np 1 "$TRAIN" "${args[@]}" --set data.train=s3://tsr-bench/big --set data.stage_to="$TMP/st2" --set max_duration=1ba --set run_dir="$TMP/r3" >/dev/null 2>&1
wait_s=$(grep '"staging"' "$TMP/r3/metrics.jsonl" | head -1 | sed 's/.*"wait_s": \([0-9.]*\).*/\1/')
n2=$(ls "$TMP"/st2/*/ | grep -c '^shard-')
get() { curl -s -o /dev/null --aws-sigv4 aws:amz:us-east-1:s3 --user S3RVER:S3RVER -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' "$AWS_ENDPOINT_URL/b/big/$1"; }
export -f get; export AWS_ENDPOINT_URL
t0=$(now); for f in "$TMP"/big/train/shard-*; do get "$(basename "$f")"; done; c1=$(since "$t0")
t0=$(now); ls "$TMP"/big/train | grep '^shard-' | xargs -P 8 -I{} bash -c 'get {}'; c8=$(since "$t0")
mb=$(echo "$bytes / 1048576" | bc -l)
printf 'throughput, %d shards, %.0f MB: tessera stager (first window wait, %d shards, 8 connections) %.2f s = %.0f MB/s; curl one at a time %.2f s = %.0f MB/s; curl 8 at once %.2f s = %.0f MB/s\n' \
    16 "$mb" "$n2" "$wait_s" "$(echo "$mb * $n2 / 16 / $wait_s" | bc -l)" "$c1" "$(echo "$mb / $c1" | bc -l)" "$c8" "$(echo "$mb / $c8" | bc -l)"
