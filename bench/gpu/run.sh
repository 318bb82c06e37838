#!/usr/bin/env bash
# bench/gpu/run.sh — training throughput of tessera vs PyTorch on one GPU, side by side.
#
#   bash bench/gpu/run.sh                                   (on the GPU machine, after building)
#   DEVICE=cpu TINY=1 PYTHON=/usr/bin/python3 bash bench/gpu/run.sh     (the CPU self-check, seconds)
#
# For each model (configs/<name>.cfg, T = its seq_len): first the PyTorch peer
# (bench/gpu/torch_peer.py: the same model in PyTorch, bf16 autocast, SDPA, torch.compile, fused
# AdamW), then tessera (build/tessera-train --config configs/<name>.cfg --set device=cuda
# --set max_duration=<WARMUP+STEPS>ba ... on a synthetic corpus of the model's vocabulary, its
# metrics.jsonl read back). Both run the same micro batch B, global batch B x ACCUM, WARMUP
# untimed steps then STEPS timed ones. tokens/s = tokens/step / median step time; MFU by
# docs/mfu.md (6N + 12 L d T, the same N and peak for both). Then a markdown table, the exact
# command, date and device; the same with per-run details and every command in
# $BENCH_OUT/results.md, logs and JSON beside it. It builds nothing, and never prints a number a
# program did not measure: a run that fails gets a line saying so (tessera with device=cuda
# where its library is missing: "tessera: device=cuda not available in this build").
#
# Environment (all optional):
#   MODELS="gpt2-124m gpt2-350m mpt-1b"  recipes from configs/ (T = 1024, 1024, 2048)
#   STEPS=20 WARMUP=5     timed steps; untimed steps before them (torch.compile compiles in the first)
#   MICRO_BATCH="gpt2-124m=32 gpt2-350m=16 mpt-1b=8"   micro batch per model; the entries given
#                         replace those defaults, a model in neither takes its recipe's micro_batch
#   ACCUM=1               microbatches per optimizer step (global_batch = ACCUM x micro batch)
#   COMPILE=1             0: the PyTorch peer runs eagerly (--no-compile)
#   SETS=""               recipe settings for both programs, KEY=VALUE separated by spaces (each
#                         --set KEY=VALUE to both), e.g. "seq_len=2048 model.attn_mask=causal"
#                         for llama-3.2-1b (the peer models causal attention only)
#   PEER_ARGS=""          more torch_peer.py options, e.g. "--sdpa-backends efficient,cudnn,math"
#   TESSERA_ARGS=""       more tessera settings, KEY=VALUE separated by spaces, each given as
#                         --set KEY=VALUE: e.g. "parallel.sharding=zero3" (issue 8: zero3 against
#                         ddp on one GPU) or "model.activation_checkpointing=block"
#   DEVICE=cuda           cuda or cuda:N; cpu runs both programs on the CPU (the self-check)
#   TINY=0                1: toy dimensions of each recipe for both programs (torch_peer.py --tiny-sets)
#   CPU_THREADS=1         threads of each program with DEVICE=cpu (one: steady timings on a shared
#                         2-core machine; Debian's torch with 2 threads fights its own OpenBLAS)
#   PEAK_FLOPS            peak FLOP/s for MFU; default from the GPU's name (989.4e12 for H100/H200,
#                         312e12 for A100: docs/mfu.md), 172.5e9 x cores on the CPU
#   PYTHON=python3        the interpreter with PyTorch (on the GPU machine its plain python3)
#   BUILD=build           where tessera-train and tessera are
#   BENCH_OUT=$BUILD/bench-gpu   logs, JSON, results.md (~14 files per model: on the device
#                         machine copy results.md and a tarball of the folder to $OUT, which
#                         brings back 8 files at most: bench/gpu/README.md)
#
# The default micro batches, for one 80 GB GPU (H100; an H200 has 141 GB). The PyTorch peer's
# peak is about 16 bytes/parameter (fp32 weights, grads, AdamW m and v) + activations of
# ~36 x d bytes per token per layer (bf16 autocast, no T x T matrix with flash/efficient
# attention) + ~12 bytes per logit (bf16 logits, fp32 cross-entropy and its gradient):
#   gpt2-124m B=32, T=1024: 2.0 + 10.9 + 19.8 = ~33 GB. 32 x 1024 = 32k tokens per microbatch
#     keeps every matmul large (M = 32768); B=64 would fit the peer too (~63 GB) but not
#     tessera's present plan (its fp32 CPU plan alone is 10.9 GiB of activations per 8 sequences).
#   gpt2-350m B=16, T=1024: 5.7 + 14.5 + 9.9 = ~30 GB (the recipe's own micro batch).
#   mpt-1b B=8, T=2048: 21.0 + 29.0 + 9.9 = ~60 GB + the 128 MiB ALiBi bias; twice the
#     recipe's micro batch of 4. The peer's ALiBi bias keeps SDPA off its flash kernel (and off
#     the math fallback, which would need B x NH x T x T probabilities: 70+ GB here).
# tessera's figures depend on its CUDA path (issue 7); if one runs out of memory, lower its
# entry, e.g. MICRO_BATCH="mpt-1b=4".
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
MODELS=${MODELS:-gpt2-124m gpt2-350m mpt-1b}
STEPS=${STEPS:-20}
WARMUP=${WARMUP:-5}
MICRO_BATCH=${MICRO_BATCH:-}
ACCUM=${ACCUM:-1}
COMPILE=${COMPILE:-1}
PEER_ARGS=${PEER_ARGS:-}
SETS=${SETS:-}
TESSERA_ARGS=${TESSERA_ARGS:-}
DEVICE=${DEVICE:-cuda}
TINY=${TINY:-0}
CPU_THREADS=${CPU_THREADS:-1}
PEAK_FLOPS=${PEAK_FLOPS:-}
PYTHON=${PYTHON:-python3}
BUILD=${BUILD:-build}
BENCH_OUT=${BENCH_OUT:-$BUILD/bench-gpu}
TRAIN=$BUILD/tessera-train
TOOL=$BUILD/tessera
PEER=bench/gpu/torch_peer.py
export PYTHONDONTWRITEBYTECODE=1
UTIL=(env -u PYTHONPATH "$PYTHON" bench/bench_util.py)
# tessera's programs run with this script's library path, even when started by a helper under
# $PYTHON: on the GPU machine PYTHON is device.sh's python3-machine wrapper, which puts the
# machine's own LD_LIBRARY_PATH back for PyTorch, and the bundle's libconfig, HDF5, OpenBLAS and
# libgomp would be lost to tessera-train (exit 127)
if [[ -n ${LD_LIBRARY_PATH+set} ]]; then TESSERA_ENV=(env "LD_LIBRARY_PATH=$LD_LIBRARY_PATH")
else TESSERA_ENV=(env -u LD_LIBRARY_PATH); fi

die() { echo "run.sh: $*" >&2; exit 1; }
for v in STEPS ACCUM; do [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v=${!v}: a whole number >= 1"; done
[[ $WARMUP =~ ^[0-9]+$ ]] || die "WARMUP=$WARMUP: a whole number >= 0"
[[ $COMPILE == [01] && $TINY == [01] ]] || die "COMPILE and TINY take 0 or 1"
[[ $CPU_THREADS =~ ^[1-9][0-9]*$ ]] || die "CPU_THREADS=$CPU_THREADS: a whole number >= 1"
[[ $DEVICE == cpu || $DEVICE == cuda || $DEVICE == cuda:[0-9]* ]] || die "DEVICE=$DEVICE: cuda, cuda:N or cpu"
command -v "$PYTHON" >/dev/null || die "PYTHON=$PYTHON not found"
for m in $MODELS; do [[ -f configs/$m.cfg ]] || die "configs/$m.cfg not found (MODELS=$MODELS)"; done
TDEV=${DEVICE%%:*}  # tessera's device key

# the tables and summaries (standard library only)
read -r -d '' HELPER <<'PY' || true
import json, os, statistics, sys

def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None

def last_json(path):
    """The last JSON object line of a file, or None."""
    out = None
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("{"):
                    try:
                        out = json.loads(line)
                    except ValueError:
                        pass
    except OSError:
        pass
    return out

def gpu_mem(samples):
    """Peak device memory.used (nvidia-smi, MiB samples) over the idle baseline, in bytes."""
    try:
        with open(samples + ".base") as f:
            base = float(f.read().split()[0])
        with open(samples) as f:
            v = [float(x) for x in f.read().split() if x.replace(".", "", 1).isdigit()]
    except (OSError, ValueError, IndexError):
        return None
    return (max(v) - base) * 2**20 if v else None

def cmd_get(path, key):
    d = last_json(path) or {}
    v = d.get(key)
    print("" if v is None else v)

def cmd_peer(raw, out, samples):
    d = last_json(raw) or {"framework": "torch", "error": "no JSON line from torch_peer.py"}
    d["gpu_mem_bytes"] = gpu_mem(samples)
    with open(out, "w") as f:
        json.dump(d, f)

def cmd_tessera(base_json, metrics, plan, warmup, peak, samples, out):
    """tessera's summary from bench_util.py tessera-result (step times after the warm-up) and
    the run's metrics.jsonl; FLOPs/token from the shape both programs run (torch_peer.py
    --dry-run: docs/mfu.md's formula, the Llama form's heads x head_dim and untied head included;
    the table warns when tessera's N differs from it)."""
    d = load(base_json)
    ts = d["step_times"]
    med = statistics.median(ts)
    tps = d["tokens_per_step"] / med
    fpt = load(plan)["flops_per_token"]
    peak = float(peak or 0)
    mfu_own, mem = [], []
    with open(metrics) as f:
        for line in f:
            m = json.loads(line)
            if "step_time_s" in m:
                mfu_own.append(m.get("mfu"))
                if "peak_mem_bytes" in m:  # the device allocator's peak so far (tcu_mem_stats)
                    mem.append(m["peak_mem_bytes"])
    own = [x for x in mfu_own[int(warmup):] if x is not None]
    r = {"framework": "tessera", "params": d["params"], "tokens_per_step": d["tokens_per_step"],
         "flops_per_token": fpt, "steps": len(ts), "step_ms": med * 1e3,
         "step_ms_min": min(ts) * 1e3, "step_ms_max": max(ts) * 1e3,
         "tokens_per_s": tps, "tokens_per_s_mean": d["tokens_per_step"] / statistics.fmean(ts),
         "mfu": fpt * tps / peak if peak > 0 else None, "peak_flops": peak or None,
         "mfu_reported": statistics.median(own) if own else None,
         "peak_mem_bytes": max(mem) if mem else None, "gpu_mem_bytes": gpu_mem(samples),
         "maxrss_kib": d["proc"]["maxrss_kib"]}
    with open(out, "w") as f:
        json.dump(r, f)

def gib(b):
    if b is None:
        return "—"
    return "%.1f GiB" % (b / 2**30) if b >= 2**30 else "%.0f MiB" % (b / 2**20)

def count(n):
    if not n:
        return "—"
    return "%.2fB" % (n / 1e9) if n >= 1e9 else "%.1fM" % (n / 1e6) if n >= 1e6 else "%.1fK" % (n / 1e3)

def cmd_table(out_dir, device, *models):
    cpu = device == "cpu"
    rows, notes, details = [], [], []
    for m in models:
        to = load(os.path.join(out_dir, m + "-torch.json")) or {"error": "no result"}
        te = load(os.path.join(out_dir, m + "-tessera.json")) or {"error": "no result"}
        ok_o, ok_e = "error" not in to, "error" not in te
        for who, d, ok in (("PyTorch", to, ok_o), ("tessera", te, ok_e)):
            if not ok:
                notes.append("%s: %s" % (m, d["error"]) if d.get("line") else "%s: %s: %s" % (m, who, d["error"]))
        plan = load(os.path.join(out_dir, m + "-plan.json")) or {}
        shape = "%d × %d" % (plan.get("B", 0), plan.get("T", 0)) + (
            " × %d" % plan["grad_accum"] if plan.get("grad_accum", 1) > 1 else "")
        n = plan.get("params")
        def cell(d, ok, key, fmt):
            return fmt(d[key]) if ok and d.get(key) is not None else "—"
        tok = lambda v: "%.0f" % v
        ms = lambda v: "%.1f" % v
        pct = lambda v: "%.1f%%" % (100 * v)
        if cpu:
            mem_o = cell(to, ok_o, "peak_mem_bytes", gib)
            mem_e = gib(te["maxrss_kib"] * 1024) if ok_e else "—"
        else:
            mem_o = (cell(to, ok_o, "peak_mem_bytes", gib) + " (%s)" % gib(to.get("gpu_mem_bytes"))) if ok_o else "—"
            mem_e = ((gib(te["peak_mem_bytes"]) + " " if te.get("peak_mem_bytes") else "")
                     + "(%s)" % gib(te.get("gpu_mem_bytes"))) if ok_e else "—"
        ratio = "%.2f×" % (te["tokens_per_s"] / to["tokens_per_s"]) if ok_o and ok_e else "—"
        rows.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            m, count(n), shape,
            cell(to, ok_o, "tokens_per_s", tok), cell(te, ok_e, "tokens_per_s", tok), ratio,
            cell(to, ok_o, "step_ms", ms), cell(te, ok_e, "step_ms", ms),
            cell(to, ok_o, "mfu", pct), cell(te, ok_e, "mfu", pct), mem_o, mem_e))
        if ok_o:
            details.append("- %s PyTorch: %d steps, median %.1f ms (min %.1f, max %.1f), %.0f tok/s over the "
                           "wall time; %s; %s; attention: %s; kernels seen: %s; compile: %s; loss %.3f → %.3f; "
                           "attention check rel L2 %s" % (
                m, to["steps"], to["step_ms"], to["step_ms_min"], to["step_ms_max"], to["tokens_per_s_wall"],
                to["dtype"], to["optimizer"], to["attention"],
                ", ".join(to["attention_ops"]) if isinstance(to["attention_ops"], list) and to["attention_ops"]
                else to["attention_ops"] or "none recorded", to["compile"] or to.get("compile_note", "off"),
                to["loss_first"], to["loss_last"],
                "%.2g" % to["attention_check"]["rel_l2"] if "attention_check" in to else "skipped"))
        if ok_e:
            details.append("- %s tessera: %d steps, median %.1f ms (min %.1f, max %.1f), %.0f tok/s from the mean "
                           "step; MFU it reports itself %s; peak host RSS %s" % (
                m, te["steps"], te["step_ms"], te["step_ms_min"], te["step_ms_max"], te["tokens_per_s_mean"],
                "%.1f%%" % (100 * te["mfu_reported"]) if te.get("mfu_reported") is not None else "—",
                gib(te["maxrss_kib"] * 1024)))
            if ok_o and te["params"] != to["params"]:
                details.append("- WARNING %s: tessera counts %d parameters, the peer %d" % (m, te["params"], to["params"]))
    print("| model | N | B × T | PyTorch tok/s | tessera tok/s | tessera / PyTorch | PyTorch ms/step "
          "| tessera ms/step | PyTorch MFU | tessera MFU | PyTorch peak mem | tessera peak mem |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    print("\n".join(rows))
    print()
    for line in notes:
        print(line)
    if notes:
        print()
    if cpu:
        print("Peak mem: the process's peak RSS (PyTorch VmHWM, tessera getrusage).")
    else:
        print("Peak mem: PyTorch torch.cuda.max_memory_allocated; tessera the peak_mem_bytes of its "
              "metrics.jsonl (its device allocator's peak, cuBLASLt workspace included). In parentheses, for both: the peak of the GPU's "
              "memory.used (nvidia-smi every 0.25 s) over the idle baseline: the whole process, CUDA "
              "context and allocator cache included.")
    print("tokens/s = tokens per step / median step time of the timed steps; MFU = (6N + "
          "12·L·(heads·head_dim)·T) × tokens/s / peak (docs/mfu.md: an untied model's input embedding "
          "left out of N), N and peak the same for both.")
    print()
    print("\n".join(details))

cmds = {"get": cmd_get, "peer": cmd_peer, "tessera": cmd_tessera, "table": cmd_table}
cmds[sys.argv[1]](*sys.argv[2:])
PY
helper() { env -u PYTHONPATH "$PYTHON" -c "$HELPER" "$@"; }

# micro batch of model $1: MICRO_BATCH's entry, else the default, else "" (the recipe's own)
micro_batch() {
    local kv mb=""
    case $1 in gpt2-124m) mb=32 ;; gpt2-350m) mb=16 ;; mpt-1b) mb=8 ;; esac
    ((TINY)) && mb=4
    for kv in $MICRO_BATCH; do
        [[ $kv == *=* ]] || die "MICRO_BATCH: '$kv' is not NAME=B"
        [[ ${kv#*=} =~ ^[1-9][0-9]*$ ]] || die "MICRO_BATCH: '$kv': B must be a whole number >= 1"
        [[ ${kv%%=*} == "$1" ]] && mb=${kv#*=}
    done
    echo "$mb"
}
# run.sh --micro-batch MODEL: the micro batch MODEL gets here, printed (device.sh's profile runs
# the bench's shapes), and nothing run
if [[ ${1:-} == --micro-batch ]]; then micro_batch "${2:?usage: run.sh --micro-batch MODEL}"; exit 0; fi
for m in $MODELS; do micro_batch "$m" >/dev/null; done  # validate MICRO_BATCH before any run

# device description and peak FLOP/s
GPU_ID=${CUDA_VISIBLE_DEVICES:-0}
GPU_ID=${GPU_ID%%,*}
[[ $DEVICE == cuda:* ]] && GPU_ID=${DEVICE#cuda:}
HAVE_SMI=0
if [[ $TDEV == cuda ]] && command -v nvidia-smi >/dev/null && nvidia-smi -i "$GPU_ID" >/dev/null 2>&1; then
    HAVE_SMI=1
    DEVICE_DESC=$(nvidia-smi -i "$GPU_ID" --query-gpu=name,memory.total,driver_version --format=csv,noheader)
    GPU_NAME=${DEVICE_DESC%%,*}
    case $GPU_NAME in *H100* | *H200*) PEAK_FLOPS=${PEAK_FLOPS:-989.4e12} ;; *A100*) PEAK_FLOPS=${PEAK_FLOPS:-312e12} ;; esac
    DEVICE_DESC="GPU $GPU_ID: $DEVICE_DESC (name, memory, driver); host $(nproc) CPUs"
elif [[ $TDEV == cuda ]]; then
    DEVICE_DESC="no GPU answers nvidia-smi on this host ($(hostname)); $(nproc) CPUs"
else
    DEVICE_DESC="CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) CPUs, $CPU_THREADS thread(s) per program (the self-check: not a benchmark)"
    PEAK_FLOPS=${PEAK_FLOPS:-$(awk -v n="$CPU_THREADS" 'BEGIN { printf "%.6g", 172.5e9 * n }')}
fi
PEAK_FLOPS=${PEAK_FLOPS:-0}
TORCH_DESC=$("$PYTHON" -c 'import sys, torch; print("PyTorch %s (CUDA %s), %s" % (torch.__version__, torch.version.cuda, sys.executable))' 2>/dev/null) ||
    TORCH_DESC="PyTorch: $PYTHON cannot import torch"
if [[ -x $TRAIN ]]; then
    TESSERA_DESC="$("$TRAIN" --version 2>/dev/null || echo 'tessera-train (version unknown)') ($TRAIN)"
else
    TESSERA_DESC="tessera: $TRAIN not found"
fi
TESSERA_DESC+="; tree $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD 2>/dev/null || echo ' + local changes')"
MB_DESC=$(for m in $MODELS; do printf '%s=%s ' "$m" "$(micro_batch "$m")"; done)
COMMAND="MODELS=\"$MODELS\" STEPS=$STEPS WARMUP=$WARMUP MICRO_BATCH=\"${MB_DESC% }\" ACCUM=$ACCUM COMPILE=$COMPILE DEVICE=$DEVICE TINY=$TINY${SETS:+ SETS=\"$SETS\"}${PEER_ARGS:+ PEER_ARGS=\"$PEER_ARGS\"}${TESSERA_ARGS:+ TESSERA_ARGS=\"$TESSERA_ARGS\"} PEAK_FLOPS=$PEAK_FLOPS bash bench/gpu/run.sh"
DATE=$(date -u '+%Y-%m-%d %H:%M:%S UTC')

TMP=$(mktemp -d /tmp/tessera-gpu-bench.XXXXXX)
MEM_PID=
cleanup() {
    [[ -z $MEM_PID ]] || kill "$MEM_PID" 2>/dev/null || true
    rm -rf "$TMP"
}
trap cleanup EXIT
mkdir -p "$BENCH_OUT"
rm -f "$BENCH_OUT"/*-torch.* "$BENCH_OUT"/*-tessera.* "$BENCH_OUT"/*-plan.json "$BENCH_OUT/results.md"

# nvidia-smi samples of the GPU's memory.used (MiB) into $1 while a run lasts; $1.base: idle
mem_start() {
    MEM_PID=
    : >"$1"
    ((HAVE_SMI)) || return 0
    nvidia-smi -i "$GPU_ID" --query-gpu=memory.used --format=csv,noheader,nounits >"$1.base" 2>/dev/null || return 0
    nvidia-smi -i "$GPU_ID" --query-gpu=memory.used --format=csv,noheader,nounits -lms 250 >"$1" 2>/dev/null &
    MEM_PID=$!
}
mem_stop() {
    [[ -n $MEM_PID ]] || return 0
    kill "$MEM_PID" 2>/dev/null || true
    wait "$MEM_PID" 2>/dev/null || true
    MEM_PID=
}
cmdline() { local s; s=$(printf '%q ' "$@"); echo "${s% }"; }

read -r -a BOTH_SETS <<<"$SETS"
THREADS=()
[[ $TDEV == cpu ]] && THREADS=(--threads "$CPU_THREADS")

echo "$COMMAND"
echo "$DATE | $DEVICE_DESC"
echo "$TORCH_DESC | $TESSERA_DESC"
for m in $MODELS; do
    cfg=configs/$m.cfg
    sets=()
    if ((TINY)); then  # the recipe's toy keys (the Llama form has more); the batch from MICRO_BATCH / ACCUM
        mapfile -t tiny < <(env -u PYTHONPATH "$PYTHON" "$PEER" --config "$cfg" --tiny-sets |
                            grep -vE '^(micro|global)_batch=')
        for s in "${tiny[@]}"; do sets+=(--set "$s"); done
    fi
    for s in "${BOTH_SETS[@]}"; do sets+=(--set "$s"); done
    mb=$(micro_batch "$m")
    if [[ -n $mb ]]; then sets+=(--set "micro_batch=$mb" --set "global_batch=$((mb * ACCUM))"); fi
    base=$BENCH_OUT/$m
    # the resolved shape (and N) of this recipe with these settings, for the data and the table
    env -u PYTHONPATH "$PYTHON" "$PEER" --config "$cfg" --label "$m" "${sets[@]}" --dry-run >"$base-plan.json" ||
        die "torch_peer.py --dry-run refused $cfg: $(helper get "$base-plan.json" error)"
    if [[ -z $mb ]]; then  # the recipe's micro batch, ACCUM of them per step
        mb=$(helper get "$base-plan.json" B)
        sets+=(--set "micro_batch=$mb" --set "global_batch=$((mb * ACCUM))")
        env -u PYTHONPATH "$PYTHON" "$PEER" --config "$cfg" --label "$m" "${sets[@]}" --dry-run >"$base-plan.json"
    fi
    T=$(helper get "$base-plan.json" T)
    V=$(helper get "$base-plan.json" V)

    # ---- PyTorch ----
    peer=("$PYTHON" "$PEER" --config "$cfg" --label "$m" --device "$DEVICE" "${sets[@]}"
          --steps "$STEPS" --warmup "$WARMUP" "${THREADS[@]}")
    [[ $PEAK_FLOPS == 0 ]] || peer+=(--peak-flops "$PEAK_FLOPS")
    ((COMPILE)) || peer+=(--no-compile)
    read -r -a extra <<<"$PEER_ARGS"
    peer+=("${extra[@]}")
    cmdline "${peer[@]}" >"$base-torch.cmd"
    echo "== $m: PyTorch, B=$mb T=$T x $ACCUM microbatches, $WARMUP + $STEPS steps ($base-torch.log)"
    mem_start "$base-torch.mem"
    rc=0
    "${peer[@]}" >"$base-torch.raw" 2>"$base-torch.log" || rc=$?
    mem_stop
    helper peer "$base-torch.raw" "$base-torch.json" "$base-torch.mem"
    if ((rc)); then
        echo "   PyTorch failed (exit $rc): $(helper get "$base-torch.json" error)"
    else
        echo "   PyTorch: $(helper get "$base-torch.json" tokens_per_s | cut -d. -f1) tok/s," \
             "$(helper get "$base-torch.json" step_ms | cut -c1-7) ms/step"
    fi

    # ---- tessera ----
    echo "== $m: tessera, device=$TDEV ($base-tessera.log)"
    run_dir=$TMP/run-$m
    fail=
    if [[ ! -x $TRAIN || ! -x $TOOL ]]; then
        fail="tessera: $TRAIN or $TOOL not found (build tessera first; this script builds nothing)"
    else
        data=$TMP/data-$m
        "$TOOL" synth --out "$data" --vocab "$V" --val-tokens 0 --seed 1 --quiet \
            --tokens $(((WARMUP + STEPS + 2) * mb * ACCUM * (T + 1) + 4096)) >"$base-tessera.log" 2>&1 ||
            fail="tessera synth failed: $(tail -1 "$base-tessera.log")"
    fi
    if [[ -z $fail ]]; then
        train_dir=$data
        [[ -f $data/train/index.tsv ]] && train_dir=$data/train
        tess=("$TRAIN" --config "$cfg" "${sets[@]}" --set "device=\"$TDEV\""
              --set "max_duration=\"$((WARMUP + STEPS))ba\"" --set "data.train=\"$train_dir\""
              --set 'data.val=""' --set 'eval_interval="0ba"' --set 'save_interval="0ba"'
              --set save_final=false --set log_interval=1 --set "run_dir=\"$run_dir\"")
        [[ $TDEV == cpu ]] && tess+=(--set "threads=$CPU_THREADS")
        read -r -a more <<<"$TESSERA_ARGS"
        for a in "${more[@]}"; do tess+=(--set "$a"); done
        cmdline "${tess[@]}" >"$base-tessera.cmd"
        mem_start "$base-tessera.mem"
        rc=0
        "${UTIL[@]}" rss "$base-tessera.rss" -- "${TESSERA_ENV[@]}" "${tess[@]}" >>"$base-tessera.log" 2>&1 || rc=$?
        mem_stop
        if ((rc)); then
            why=$(grep -m1 -i 'error' "$base-tessera.log" || tail -1 "$base-tessera.log")
            if grep -qiE 'libtessera-cuda-train.so|no CUDA backend' "$base-tessera.log"; then
                fail="tessera: device=$TDEV not available in this build [exit $rc: $why]"
            else
                fail="tessera: device=$TDEV run failed (exit $rc): $why"
            fi
        elif ! "${UTIL[@]}" tessera-result "$base-tessera.log" "$run_dir/metrics.jsonl" "$WARMUP" \
                "$base-tessera.rss" >"$base-tessera.steps.json" 2>"$TMP/result.err"; then
            fail="tessera: ran, but its log or metrics.jsonl could not be read: $(tail -1 "$TMP/result.err")"
        else
            cp "$run_dir/metrics.jsonl" "$base-tessera.metrics.jsonl"
            if helper tessera "$base-tessera.steps.json" "$run_dir/metrics.jsonl" "$base-plan.json" \
                    "$WARMUP" "$PEAK_FLOPS" "$base-tessera.mem" "$base-tessera.json" 2>"$TMP/result.err"; then
                echo "   tessera: $(helper get "$base-tessera.json" tokens_per_s | cut -d. -f1) tok/s," \
                     "$(helper get "$base-tessera.json" step_ms | cut -c1-7) ms/step"
            else
                fail="tessera: ran, but its metrics could not be summarised: $(tail -1 "$TMP/result.err")"
            fi
        fi
    fi
    if [[ -n $fail ]]; then
        echo "   $fail"
        env -u PYTHONPATH "$PYTHON" -c 'import json, sys; json.dump({"error": sys.argv[1], "line": True}, open(sys.argv[2], "w"))' \
            "$fail" "$base-tessera.json"
    fi
    rm -rf "$run_dir" "$TMP/data-$m"
done

echo
{
    if [[ $TDEV == cpu ]]; then echo "## tessera vs PyTorch: the CPU self-check of bench/gpu/run.sh"
    else echo "## tessera vs PyTorch, one GPU"; fi
    echo
    echo "- command: \`$COMMAND\`"
    echo "- date: $DATE"
    echo "- device: $DEVICE_DESC"
    echo "- $TORCH_DESC"
    echo "- $TESSERA_DESC"
    echo "- $WARMUP untimed + $STEPS timed optimizer steps per run; global batch = $ACCUM x B; random tokens (PyTorch), synthetic corpus (tessera)"
    echo
    # shellcheck disable=SC2086  # MODELS is a list of words
    helper table "$BENCH_OUT" "$TDEV" $MODELS
    echo
    echo "Commands:"
    echo
    echo '```'
    for m in $MODELS; do
        for p in torch tessera; do
            if [[ -f $BENCH_OUT/$m-$p.cmd ]]; then cat "$BENCH_OUT/$m-$p.cmd"; fi
        done
    done
    echo '```'
} | tee "$BENCH_OUT/results.md"
