#!/usr/bin/env bash
# What O_DIRECT writes cost CPU-bound processes on this machine (issue 53: the background save's
# step cost that the writer's own CPU does not explain; docs/benchmarks.md). For ROUNDS rounds:
# NPROC busy loops (one per core, python counting) for SECS seconds alone, then again beside a dd
# writing zeros with oflag=direct in 384 MiB runs into DIR for the whole window; prints the busy
# loops' summed counts and the ratio (1.0: the writes cost them nothing), and dd's own CPU
# seconds and MB/s for one 1.5 GiB write.
# Usage: bash bench/direct_io_cost.sh   (ROUNDS=3 SECS=10 DIR=/tmp NPROC=$(nproc))
set -euo pipefail
ROUNDS=${ROUNDS:-3} SECS=${SECS:-10} NPROC=${NPROC:-$(nproc)}
W=$(mktemp -d "${DIR:-/tmp}/tessera-dio.XXXXXX")
trap 'rm -rf "$W"' EXIT
busy() { # the NPROC loops' summed counts over SECS seconds
    local k
    for ((k = 0; k < NPROC; k++)); do
        /usr/bin/python3 -c 'import sys, time
end, n = time.time() + float(sys.argv[1]), 0
while time.time() < end:
    for _ in range(10000): n += 1
print(n)' "$SECS" &
    done | awk '{s += $1} END {print s}'
}
writes() { # dd with O_DIRECT for SECS + 1 seconds
    local end=$((SECONDS + SECS + 1))
    while ((SECONDS < end)); do dd if=/dev/zero of="$W/f" bs=16M count=24 oflag=direct 2>/dev/null; done
}
echo "machine: $NPROC busy loops on $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg);" \
     "writes to $(findmnt -no FSTYPE,SOURCE --target "$W" | head -1)"
for ((r = 1; r <= ROUNDS; r++)); do
    a=$(busy)
    writes &
    b=$(busy)
    wait
    echo "round $r: busy loops alone $a, beside O_DIRECT writes $b: x$(/usr/bin/python3 -c "print(f'{$b / $a:.3f}')")"
done
/usr/bin/time -f "dd alone: %e s wall, %U s user, %S s sys" dd if=/dev/zero of="$W/f" bs=16M count=96 oflag=direct 2>&1 | tail -2
