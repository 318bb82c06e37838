#!/usr/bin/env bash
# Node-local staging through the trainer (data.stage_to; docs/staging.md), 2 MPI ranks on one node:
#  - after the first window every sample is read from a staged copy (counted), only one rank per
#    node copies, and the run is bit for bit the unstaged run (copy path and hard-link path);
#  - data.cache_limit is respected at every window, shards are evicted and the rest is read in
#    place, still bit for bit;
#  - a staged file deleted during the run: the run goes on unchanged and the file is staged again;
#  - a stage_to that cannot be used stops the run before training with exit 1 naming it.
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 8
"$TOOL" synth --out "$TMP/data" --vocab 512 --tokens 40000 --shard-tokens 3300 --seed 1 >/dev/null
args=(--config "$TSR_ROOT/configs/tiny.cfg" --set model.vocab_size=512 --set data.tokenizer=
      --set sample.tokens=0 --set data.train="$TMP/data/train" --set data.val="$TMP/data/val"
      --set model.n_layer=2 --set model.d_model=64 --set model.n_head=4 --set seq_len=32
      --set global_batch=8 --set micro_batch=2 --set max_duration=60ba --set eval_interval=0ba
      --set threads=1 --set log_interval=1 --set data.stage_window=10
      --set watchdog.window=0) # bit-for-bit checks: no straggler exit 86 on a loaded machine (a
                               # 300-step run has 6 watchdog windows: patience 3 can trip)
run() { local dir=$1; shift; "${MPIRUN[@]}" -np 2 "$TRAIN" "${args[@]}" --set run_dir="$dir" "$@"; }
events() { # events METRICS: the staging lines as "window staged in_place files ranks evicted skipped cache"
    /usr/bin/python3 -c '
import json, sys
for l in open(sys.argv[1]):
    d = json.loads(l)
    if d.get("event") == "staging":
        print(d["window"], d["staged_reads"], d["in_place_reads"], d["files_staged"], d["ranks_staging"], d["files_evicted"], d["skipped_for_space"], d["cache_bytes"])' "$1"
}
n_shards=$(ls "$TMP/data/train" | grep -c '^shard-')
echo "# $n_shards training shards"

run "$TMP/R" >"$TMP/R.txt" 2>&1 && run "$TMP/Rs" --set data.shuffle=false >"$TMP/Rs.txt" 2>&1
tap_check $? "reference runs without staging (shuffled and in order)"

# data.stage_wait: windows after the first start with their copies committed (without it the count
# below depends on how fast this machine's disk syncs: staging lagging is read in place)
TSR_STAGE_NO_LINK=1 run "$TMP/S" --set data.stage_to="$TMP/stage1" --set data.stage_wait=300 >"$TMP/S.txt" 2>&1
rc=$?
events "$TMP/S/metrics.jsonl" >"$TMP/S.ev"; sed 's/^/# window staged in_place files ranks evicted skipped cache: /' "$TMP/S.ev"
[[ $rc == 0 ]] && cmp -s <(final_lines "$TMP/R/metrics.jsonl") <(final_lines "$TMP/S/metrics.jsonl")
tap_check $? "staged by copying: every step bit for bit the unstaged run (exit $rc)"
awk -v n="$n_shards" '$1 >= 1 && ($3 != 0 || $2 != 80) { bad++ } $5 != 1 { bad++ } END { exit !(NR == 6 && bad == 0) }' "$TMP/S.ev"
tap_check $? "after the first window all 80 samples per window come from staged copies, none in place; one rank per node copies"
dir=$(ls -d "$TMP"/stage1/*/); ok=1
for f in "$TMP"/data/train/shard-*; do
    s=$dir/$(basename "$f"); cmp -s "$f" "$s" && [[ $(stat -c %i "$f") != $(stat -c %i "$s") ]] || ok=0
done
[[ $ok == 1 && $(ls "$dir" | grep -c '^shard-') == "$n_shards" && -z $(ls "$dir" | grep tmp) ]]
tap_check $? "the node-local directory holds a verified copy of each of the $n_shards shards (own inodes, no temporary files left)"

run "$TMP/L" --set data.stage_to="$TMP/stage2" >"$TMP/L.txt" 2>&1 &&
    cmp -s <(final_lines "$TMP/R/metrics.jsonl") <(final_lines "$TMP/L/metrics.jsonl")
rc=$?
d2=$(ls -d "$TMP"/stage2/*/)
[[ $rc == 0 && $(stat -c %i "$TMP/data/train/shard-00000.bin") == $(stat -c %i "$d2/shard-00000.bin") ]]
tap_check $? "on the dataset's own filesystem the shards are hard-linked (same inode), still bit for bit"

# in order (no shuffle), 100 samples per shard, 80 per window: the windows walk through the shards;
# a cache of 2.5 shards must evict
shard_bytes=$(stat -c %s "$TMP/data/train/shard-00000.bin")
limit=$(( shard_bytes * 5 / 2 ))
TSR_STAGE_NO_LINK=1 run "$TMP/C" --set data.shuffle=false --set data.stage_to="$TMP/stage3" --set data.cache_limit="$limit" --set data.stage_wait=300 >"$TMP/C.txt" 2>&1
rc=$?
events "$TMP/C/metrics.jsonl" >"$TMP/C.ev"; sed 's/^/# window staged in_place files ranks evicted skipped cache: /' "$TMP/C.ev"
[[ $rc == 0 ]] && cmp -s <(final_lines "$TMP/Rs/metrics.jsonl") <(final_lines "$TMP/C/metrics.jsonl") &&
    awk -v lim="$limit" '$8 > lim { bad++ } { ev = $6 } END { exit !(bad == 0 && ev > 0) }' "$TMP/C.ev" &&
    (( $(find "$TMP/stage3" -type f -name 'shard-*' -printf '%s\n' | awk '{ n += $1 } END { print n + 0 }') <= limit ))
tap_check $? "cache_limit $limit bytes (2.5 shards): never exceeded (at each window and on disk at the end), shards evicted, still bit for bit"

# a staged file deleted while the run reads it
run "$TMP/R2" --set max_duration=300ba >"$TMP/R2.txt" 2>&1
rc2=$?
TSR_STAGE_NO_LINK=1 run "$TMP/D" --set max_duration=300ba --set data.stage_to="$TMP/stage4" --set data.stage_wait=300 >"$TMP/D.txt" 2>&1 &
pid=$!
victim=""
for _ in $(seq 1 600); do
    victim=$(ls "$TMP"/stage4/*/shard-00003.bin 2>/dev/null) && [[ -n $victim ]] && grep -q '"step": 20,' "$TMP/D/metrics.jsonl" 2>/dev/null && break
    sleep 0.05
done
[[ -n $victim ]] && rm -f "$victim" && echo "# deleted $victim at step $(grep -c '"loss"' "$TMP/D/metrics.jsonl")"
wait $pid
rc=$?
echo "# exit $rc; $victim present again: $([[ -f $victim ]] && echo yes || echo no)"
[[ $rc2 == 0 && $rc == 0 && -f $victim ]] && cmp -s <(final_lines "$TMP/R2/metrics.jsonl") <(final_lines "$TMP/D/metrics.jsonl")
tap_check $? "a staged shard deleted mid-run: the run finished bit for bit like the unstaged one and the shard was staged again (exit $rc, the reference's $rc2)"

touch "$TMP/notadir"
run "$TMP/E" --set data.stage_to="$TMP/notadir" >"$TMP/E.txt" 2>&1
rc=$?
sed 's/^/# /' "$TMP/E.txt" | grep -i "error" | head -3
[[ $rc == 1 ]] && grep -q "$TMP/notadir" "$TMP/E.txt" && ! grep -q '"step": 1,' "$TMP/E/metrics.jsonl" 2>/dev/null
tap_check $? "stage_to naming a regular file: exit 1 naming it, before any step (got $rc)"
