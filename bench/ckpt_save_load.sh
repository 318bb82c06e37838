#!/usr/bin/env bash
# Checkpoint save and load of the gpt2-124m recipe (fp32 weights + AdamW m and v, ~1.5 GB) on 2 MPI
# ranks, next to dd writing (with fsync) and reading the same number of bytes on the same
# filesystem, in one run. Usage: bash bench/ckpt_save_load.sh [DIR]  (default: a temp dir in /tmp)
# REPS=3 (default) rounds, each: tessera save, tessera load, dd write + fsync, dd read, and dd
# with O_DIRECT in 32 MiB blocks (the disk without the page cache, as tessera moves the bulk of
# the data; for reference); the page cache is dropped before every read (as root). Prints every
# round, then the median of each column and the ratios of the medians (the goal: tessera <= 1.2x
# dd, save and load). Results: docs/benchmarks.md, "Checkpoint save and load".
# tessera: one training step (seq_len 64, 2 sequences) then the end-of-run save; a second run with
# the same run_dir resumes (load + CRC32C verification) and stops. Times come from the trainer's
# own "checkpoint save/resume" lines: the whole collective save incl. commit + fsync, or the whole
# load incl. verification, from the moment both ranks have entered it (ckpt_stats in ckpt.h).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
REPS=${REPS:-3}
DIR=$(mktemp -d "${1:-/tmp}/tessera-ckbench.XXXXXX")
trap 'rm -rf "$DIR"' EXIT
[[ -f data/brown/train/index.tsv ]] || { echo "run make demo first (needs data/brown)" >&2; exit 1; }
args=(--config configs/gpt2-124m.cfg --set data.train=data/brown/train --set data.val=
      --set seq_len=64 --set global_batch=2 --set micro_batch=1 --set max_duration=1ba
      --set eval_interval=0ba --set run_dir="$DIR/run" --set threads=1)
drop() { sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true; }
secs() { { /usr/bin/time -f %e "$@"; } 2>&1; } # wall seconds of a command that prints nothing
field() { sed -E "s/.*\\| ([0-9.]+) $1 \\|.*/\\1/"; } # "| 1.234 s |" -> 1.234

cols=(save dd_write dd_direct_write load dd_read dd_direct_read)
declare -A v
for ((r = 1; r <= REPS; r++)); do
    rm -rf "$DIR/run"
    bash tests/mpi_env.sh mpirun -np 2 "$BUILD/tessera-train" "${args[@]}" >"$DIR/save.txt" 2>&1
    line=$(grep '^checkpoint save' "$DIR/save.txt")
    v[save,$r]=$(field s <<<"$line")
    mb=$(field MB <<<"$line")
    drop
    bash tests/mpi_env.sh mpirun -np 2 "$BUILD/tessera-train" "${args[@]}" >"$DIR/load.txt" 2>&1
    v[load,$r]=$(grep '^checkpoint resume' "$DIR/load.txt" | field s)
    count=$(awk -v mb="$mb" 'BEGIN { printf "%d", mb * 1e6 / 1048576 + 0.5 }') # MiB
    v[dd_write,$r]=$(secs dd if=/dev/zero of="$DIR/dd.bin" bs=1M count="$count" conv=fsync status=none)
    drop
    v[dd_read,$r]=$(secs dd if="$DIR/dd.bin" of=/dev/null bs=1M status=none)
    rm -f "$DIR/dd.bin"
    v[dd_direct_write,$r]=$(secs dd if=/dev/zero of="$DIR/dd.bin" bs=32M iflag=count_bytes \
                            count=$((count * 1048576)) oflag=direct conv=fsync status=none)
    drop
    v[dd_direct_read,$r]=$(secs dd if="$DIR/dd.bin" of=/dev/null bs=32M iflag=direct status=none)
    rm -f "$DIR/dd.bin"
    printf 'round %d:' "$r"
    for c in "${cols[@]}"; do printf ' %s %s s' "$c" "${v[$c,$r]}"; done
    echo
done
median() { local c=$1; for ((r = 1; r <= REPS; r++)); do echo "${v[$c,$r]}"; done | sort -g |
           awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
declare -A m
for c in "${cols[@]}"; do m[$c]=$(median "$c"); done
echo "filesystem: $(df -h "$DIR" | awk 'NR==2 {print $1, $2}'), page cache dropped before reads:" \
     "$( [[ -w /proc/sys/vm/drop_caches ]] && echo yes || echo no), $count MiB ($mb MB), $REPS rounds"
echo "median of $REPS:   seconds   GB/s   tessera / this"
for c in "${cols[@]}"; do
    case $c in save | dd*write) ref=save ;; *) ref=load ;; esac
    awk -v c="$c" -v s="${m[$c]}" -v mb="$mb" -v t="${m[$ref]}" 'BEGIN {
        printf "  %-16s %6.2f  %5.2f   %s\n", c, s, mb / 1e3 / s, c ~ /^dd/ ? sprintf("%.2fx", t / s) : "" }'
done
awk -v s="${m[save]}" -v l="${m[load]}" -v w="${m[dd_write]}" -v rd="${m[dd_read]}" 'BEGIN {
    printf "goal (<= 1.2x dd): save %.2fx %s, load %.2fx %s\n", s / w, s / w <= 1.2 ? "met" : "NOT met",
           l / rd, l / rd <= 1.2 ? "met" : "NOT met" }'
