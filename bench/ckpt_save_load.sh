#!/usr/bin/env bash
# Checkpoint save and load of the gpt2-124m recipe (fp32 weights + AdamW m and v, ~1.5 GB) on 2 MPI
# ranks, next to dd writing (with fsync) and reading the same number of bytes on the same
# filesystem, in one run. Usage: bash bench/ckpt_save_load.sh [DIR]  (default: a temp dir in /tmp)
# tessera: one training step (seq_len 64, 2 sequences) then the end-of-run save; a second run with
# the same run_dir resumes (load + CRC32C verification) and stops. Times come from the trainer's
# own "checkpoint save/resume" lines (wall time of the whole collective save incl. commit + fsync).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
DIR=$(mktemp -d "${1:-/tmp}/tessera-ckbench.XXXXXX")
trap 'rm -rf "$DIR"' EXIT
[[ -f data/brown/train/index.tsv ]] || { echo "run make demo first (needs data/brown)" >&2; exit 1; }
args=(--config configs/gpt2-124m.cfg --set data.train=data/brown/train --set data.val=
      --set seq_len=64 --set global_batch=2 --set micro_batch=1 --set max_duration=1ba
      --set eval_interval=0ba --set run_dir="$DIR/run" --set threads=1)
bash tests/mpi_env.sh mpirun -np 2 "$BUILD/tessera-train" "${args[@]}" >"$DIR/save.txt" 2>&1
save=$(grep '^checkpoint save' "$DIR/save.txt")
bytes=$(sed -E 's/.*\| ([0-9.]+) MB \|.*/\1/' <<<"$save")
sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true
bash tests/mpi_env.sh mpirun -np 2 "$BUILD/tessera-train" "${args[@]}" >"$DIR/load.txt" 2>&1
load=$(grep '^checkpoint resume' "$DIR/load.txt")
count=$(awk -v mb="$bytes" 'BEGIN { printf "%d", mb * 1e6 / 1048576 + 0.5 }')
dd_w=$( { /usr/bin/time -f %e dd if=/dev/zero of="$DIR/dd.bin" bs=1M count="$count" conv=fsync status=none; } 2>&1 )
sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true
dd_r=$( { /usr/bin/time -f %e dd if="$DIR/dd.bin" of=/dev/null bs=1M status=none; } 2>&1 )
echo "filesystem: $(df -h "$DIR" | awk 'NR==2 {print $1, $2}'), page cache dropped before reads: $( [[ -w /proc/sys/vm/drop_caches ]] && echo yes || echo no)"
echo "tessera save: $save"
echo "tessera load: $load"
echo "dd write+fsync ${count} MiB: ${dd_w} s; dd read: ${dd_r} s"
