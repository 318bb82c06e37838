#!/usr/bin/env bash
# The asynchronous checkpoint save against the synchronous one (issue 53; docs/benchmarks.md,
# "Asynchronous checkpoint save"). For each recipe, on 2 MPI ranks, in one script run, the same
# steps and saves in each of VARIANTS: `sync` (save_async = false), `background` and `step`
# (save_async with save_async_copy = background / step: where the copy into the snapshot runs),
# and each again with the disk throttled for this script's processes (a blkio cgroup of its own with write_bps_device on
# the run directory's disk: O_DIRECT writes, the bulk of a save, go at THROTTLE_MBS MB/s; root and
# cgroup v1 blkio only, else skipped with a note). From each run's metrics.jsonl:
#   blocking   the seconds training stood still per save (median, max): blocking_s; of it the
#              snapshot's (median): snapshot_s
#   write      the writers' seconds per save (median): write_s; the CPU seconds the busiest
#              writer thread used (median): write_cpu_s (copies and CRC: what a background write
#              takes from the training's cores), of it the copy into the snapshot's
#              (write_cpu_copy_s), and its I/O threads' (write_cpu_io_s); MB bounced
#              (write_bounced_bytes)
#   step       the median step time of the steps that ran while a background write was in flight
#              (steps s+1 .. committed_step of each background save), and of the others (first
#              step left out), and their ratio: the background write's cost to a step
# Usage: bash bench/ckpt_async.sh [RECIPE...]   (default: gpt2-124m, then qwen2.5-0.5b under zero3)
#   STEPS=40 EVERY=12 (a save every EVERY steps, none at the end), SEQ=64, THROTTLE_MBS=100,
#   VARIANTS="sync background step", THROTTLE=1 (0: no throttled runs), DIR (default /tmp).
#   NP=2 ranks (NP=1: one rank on one core of 2, the writer with a core of its own), SHARDING
#   (default ddp for gpt2-124m and tiny, zero3 for the others).
#   `tiny` (configs/tiny.cfg) is a smoke test of the script. A recipe whose plan (2 ranks, snapshot included) does not fit MemAvailable
#   is skipped, saying so.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
STEPS=${STEPS:-40} EVERY=${EVERY:-12} SEQ=${SEQ:-64} THROTTLE_MBS=${THROTTLE_MBS:-100} NP=${NP:-2}
read -ra variants <<<"${VARIANTS:-sync background step}"
for v in "${variants[@]}"; do
    [[ $v == @(sync|background|step) ]] || { echo "VARIANTS: \"$v\" is not sync, background or step" >&2; exit 1; }
done
DIR=$(mktemp -d "${DIR:-/tmp}/tessera-ckasync.XXXXXX")
CG="" RUNPID=""
# on exit, an interrupt or a kill: the run in progress stopped (mpirun passes it on to the ranks)
# before its cgroup can go, then the run directories
cleanup() {
    set +e # (every step is tried)
    [[ -n $RUNPID ]] && kill "$RUNPID" 2>/dev/null && wait "$RUNPID" 2>/dev/null
    [[ -n $CG && -d $CG ]] && rmdir "$CG" 2>/dev/null
    rm -rf "$DIR"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
recipes=("$@")
((${#recipes[@]})) || recipes=(gpt2-124m qwen2.5-0.5b)
"$BUILD/tessera" synth --out "$DIR/data" --vocab 50257 --tokens 2000000 --seed 1 >/dev/null

# a blkio cgroup of this script's own (removed on exit) limiting writes to the run dir's disk
majmin=$(findmnt -no MAJ:MIN --target "$DIR" | head -1 | tr -d ' ')
if [[ ${THROTTLE:-1} != 0 && $(id -u) == 0 && -w /sys/fs/cgroup/blkio && -n $majmin ]]; then
    CG=/sys/fs/cgroup/blkio/tessera-ckasync-$$
    mkdir "$CG" && echo "$majmin $((THROTTLE_MBS * 1000000))" >"$CG/blkio.throttle.write_bps_device" || CG=""
fi
[[ -n $CG || ${THROTTLE:-1} == 0 ]] ||
    echo "note: no blkio cgroup here (root and cgroup v1 blkio needed): the throttled runs are skipped"

variant_args() { # VARIANT: its settings
    case $1 in
        sync) echo --set save_async=false ;;
        *) echo --set save_async=true --set save_async_copy="$1" ;;
    esac
}
args_of() { # RECIPE: the run's settings (device = cpu: qwen2.5-0.5b's recipe names cuda)
    local extra=()
    [[ $1 == gpt2-124m || $1 == tiny ]] || extra=(--set parallel.sharding=zero3)
    [[ -z ${SHARDING:-} ]] || extra=(--set parallel.sharding="$SHARDING")
    echo --config "configs/$1.cfg" --set data.train="$DIR/data/train" --set data.val= \
         --set data.tokenizer= --set sample.tokens=0 --set seq_len="$SEQ" --set global_batch=2 \
         --set micro_batch=1 --set max_duration="${STEPS}ba" --set save_interval="${EVERY}ba" \
         --set save_final=false --set eval_interval=0ba --set keep_last=2 --set threads=1 \
         --set watchdog.window=0 --set device=cpu "${extra[@]}"
}
# run NAME THROTTLED ARGS...: one training run into $DIR/NAME
run() {
    local name=$1 throttled=$2
    shift 2
    rm -rf "$DIR/$name"
    # (in the background, waited for: a signal to this script is handled at once, not after the run)
    if ((throttled)); then
        (echo "$BASHPID" >"$CG/cgroup.procs" && exec bash tests/mpi_env.sh mpirun -np "$NP" \
            "$BUILD/tessera-train" "$@" --set run_dir="$DIR/$name") >"$DIR/$name.txt" 2>&1 &
    else
        bash tests/mpi_env.sh mpirun -np "$NP" "$BUILD/tessera-train" "$@" --set run_dir="$DIR/$name" \
            >"$DIR/$name.txt" 2>&1 &
    fi
    RUNPID=$!
    local rc=0
    wait "$RUNPID" || rc=$?
    RUNPID=""
    return "$rc"
}
saves_of() { # NAME: its save lines, shortened
    grep -E '^checkpoint save step' "$DIR/$1.txt" | sed -E 's/ \| [^|]*\.h5 \|/ |/' | sed 's/^/    /'
}
summary() { # NAME: one line of figures from its metrics.jsonl
    /usr/bin/python3 - "$DIR/$1/metrics.jsonl" "$1" <<'PY'
import json, statistics as st, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
saves = [d for d in lines if d.get("checkpoint") == "save"]
steps = {d["step"]: d["step_time_s"] for d in lines if "loss" in d and "step_time_s" in d}
busy = set()
for s in saves:
    if s.get("async"):
        busy.update(range(s["step"] + 1, s["committed_step"] + 1))
first = min(steps)
during = [t for k, t in steps.items() if k in busy]
other = [t for k, t in steps.items() if k not in busy and k != first]
b = [s["blocking_s"] for s in saves]
sn = [s["snapshot_s"] for s in saves if "snapshot_s" in s]
cpu = [s["write_cpu_s"] for s in saves if "write_cpu_s" in s]
copy = [s["write_cpu_copy_s"] for s in saves if "write_cpu_copy_s" in s]
io = [s["write_cpu_io_s"] for s in saves if "write_cpu_io_s" in s]
bounced = [s["write_bounced_bytes"] for s in saves if "write_bounced_bytes" in s]
w = [s["write_s"] for s in saves]
rss = max((d["peak_rss_bytes"] for d in lines if "peak_rss_bytes" in d), default=0)
med = lambda v: st.median(v) if v else float("nan")
snap = f" (snapshot {med(sn):.3f})" if sn else ""
print(f"{sys.argv[2]:<28} saves {len(saves)}  blocking median {med(b):7.3f} s{snap}  max {max(b):7.3f} s  "
      f"write median {med(w):6.2f} s (writer CPU {med(cpu):.2f} s, of it the copy {med(copy):.2f} s; "
      f"I/O threads {med(io):.2f} s; {med(bounced) / 1e6:.0f} MB bounced)  {saves[0]['bytes'] / 1e9:.2f} GB  "
      f"step {med(other):.3f} s without a write, {med(during):.3f} s during one "
      f"({len(during)} steps): x{med(during) / med(other):.3f}; resident peak {rss / 2**20:.0f} MiB")
PY
}

# one rank: not bound to a core (OpenMPI binds 1-2 ranks to a core each), so its writer has the other
((NP > 1)) || export OMPI_MCA_hwloc_base_binding_policy=none
echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)," \
     "load $(cut -d' ' -f1-3 /proc/loadavg); run dir on $(findmnt -no FSTYPE,SOURCE --target "$DIR" | head -1);" \
     "$NP rank(s), $STEPS steps, a save every $EVERY (none at the end), seq_len $SEQ, 2 sequences a step, 1 thread per rank"
for r in "${recipes[@]}"; do
    read -ra a <<<"$(args_of "$r")"
    plan=$("$BUILD/tessera-train" "${a[@]}" --plan "$NP" 2>&1 | sed -nE 's/^memory per rank.*; total ([0-9.]+) GiB$/\1/p')
    avail=$(awk '/MemAvailable/ {printf "%.1f", $2 / 1048576}' /proc/meminfo)
    if [[ -n $plan ]] && ! /usr/bin/python3 -c "import sys; sys.exit(0 if $NP * $plan + 1 < $avail else 1)"; then
        echo "$r: skipped: $NP ranks x $plan GiB (the plan, snapshot included) + 1 GiB > $avail GiB available"
        continue
    fi
    echo "$r: plan ${plan:-?} GiB per rank (snapshot included)"
    for throttled in 0 1; do
        ((throttled == 0)) || [[ -n $CG ]] || continue
        for v in "${variants[@]}"; do
            name=$r-$v
            ((throttled == 0)) || name+=-${THROTTLE_MBS}MBs
            read -ra va <<<"$(variant_args "$v")"
            if ! run "$name" "$throttled" "${a[@]}" "${va[@]}"; then
                echo "$name: the run failed; the end of its log:"
                tail -n 15 "$DIR/$name.txt"
                exit 1
            fi
            summary "$name"
            saves_of "$name"
        done
    done
done
