#!/usr/bin/env bash
# cpu_vs_torch.sh — training throughput of tessera vs the same model in PyTorch on the CPU.
#
#   make bench                       (builds first; this script builds nothing)
#   bash bench/cpu_vs_torch.sh       (after make)
#
# For each model config ("tiny" = configs/tiny.cfg's model and batch; "20m" = a ~23M-parameter
# GPT-2-style model; "llama-tiny" and "llama-20m" = Llama-style models of the same sizes: RoPE,
# RMSNorm, SwiGLU, grouped-query attention 4:1; "moe-tiny" = llama-tiny with a DBRX-shaped mixture
# of experts in every layer, 16 experts choosing 4; see below) it trains ROUNDS times alternately
# tessera-train (one process, threads = THREADS) and the same model in PyTorch, bench/torch_gpt.py,
# bench/torch_llama.py or bench/torch_moe.py (Debian's python3-torch, float32,
# torch.set_num_threads(THREADS)), for
# the same number of optimizer steps each, and reports
# tokens/s = tokens / time of the steps after the first SKIP of every run (pooled over the rounds),
# the ratio and the peak RSS of each process. For the dense models it then times the step's matmuls
# alone through tessera's CPU backend (bench/matmul_floor.c, the linear layers from
# bench_util.py linears) and the machine's fp32 FMA peak: PyTorch's step over that floor is the
# highest ratio any work outside the matmuls can give. Results and logs: $BENCH_OUT.
#
# Environment (all optional):
#   STEPS (per run; default 30 for the tiny models, 15 for the 20m ones) SKIP=3 ROUNDS=3 THREADS=2
#   CONFIGS="tiny 20m llama-tiny llama-20m" (moe-tiny on request) BUILD=build BENCH_OUT=build/bench
#   QUIET_WAIT=60: before each run, wait up to this many seconds for the CPUs to go idle (a shared
#     machine); every run also reports how much CPU other processes used while it ran
#   PYTHON=/usr/bin/python3 (the interpreter with torch)
#   CHECK_PEER=1: after the rounds of a Llama-style or MoE config, show that bench/torch_llama.py
#     or bench/torch_moe.py is tessera's model (build/tests/ref_dump's initial weights loaded into
#     it, step 0's loss and gradients compared by bench/check_llama_peer.py or
#     bench/check_moe_peer.py); the benchmark fails if not. 0 = skip
#   OPENBLAS_CORETYPE: unset = SkylakeX on AVX-512 CPUs, Haswell on AVX2 CPUs, for both programs
#     (Debian's OpenBLAS may pick generic kernels on new CPUs; torch's matmuls go through the same
#     library, so both must load it with the same core: docs/decisions.md, "OpenBLAS core")
#   TORCH_ENV: extra environment of the PyTorch runs only; unset = PyTorch's fastest settings
#     measured on the 2-core machines (docs/benchmarks.md): OMP_WAIT_POLICY=PASSIVE when torch
#     loads the pthread OpenBLAS (Debian's default alternative; its threads fight spinning OpenMP
#     workers for the cores) but not with the OpenMP build (one shared pool: passive waiting costs
#     torch 1.1-1.8x there),
#     ATEN_CPU_CAPABILITY=avx512 on AVX-512 CPUs (torch 1.13 picks AVX2), and tcmalloc preloaded
#     (Debian's libtcmalloc-minimal4, which ./INSTALL installs) or, without it, glibc malloc
#     tunables that keep freed activation buffers in the heap instead of unmapping them every step.
#     TORCH_ENV=" " (a space) runs torch with Debian's defaults.
#   tessera runs as shipped (its own thread and BLAS choices: docs/decisions.md).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
BUILD=${BUILD:-build}
STEPS_SET=${STEPS:-}
SKIP=${SKIP:-3}
ROUNDS=${ROUNDS:-3}
THREADS=${THREADS:-2}
CONFIGS=${CONFIGS:-tiny 20m llama-tiny llama-20m}
BENCH_OUT=${BENCH_OUT:-$BUILD/bench}
QUIET_WAIT=${QUIET_WAIT:-60}
PYTHON=${PYTHON:-/usr/bin/python3}
CHECK_PEER=${CHECK_PEER:-1}
TRAIN=$BUILD/tessera-train
TOOL=$BUILD/tessera
FLOOR=$BUILD/bench/matmul_floor
UTIL=(env -u PYTHONPATH "$PYTHON" "$ROOT/bench/bench_util.py")

die() { echo "cpu_vs_torch: $*" >&2; exit 1; }
for b in "$TRAIN" "$TOOL" "$FLOOR"; do
    [[ -x $b ]] || die "$b not found: run 'make' first (or 'make bench')"
done
[[ -x $PYTHON ]] || die "$PYTHON not found: PYTHON= must name an interpreter with torch"
"$PYTHON" -c 'import torch' 2>/dev/null ||
    die "$PYTHON cannot import torch: install Debian's python3-torch (apt-get install python3-torch)"
[[ -z $STEPS_SET ]] || ((SKIP < STEPS_SET)) || die "SKIP=$SKIP must be smaller than STEPS=$STEPS_SET"

if [[ -z ${OPENBLAS_CORETYPE:-} ]]; then
    if grep -qw avx512f /proc/cpuinfo; then export OPENBLAS_CORETYPE=SkylakeX
    elif grep -qw avx2 /proc/cpuinfo; then export OPENBLAS_CORETYPE=Haswell
    fi
fi
# the OpenBLAS build Debian's torch loads (the libblas.so.3 alternative): pthread or openmp
TORCH_BLAS=$(env -u PYTHONPATH "$PYTHON" -c 'import sys; sys.path.insert(0, sys.argv[1]); import torch, torch_gpt
print(" ".join(torch_gpt.blas_libraries()))' "$ROOT/bench")
if [[ -z ${TORCH_ENV:-} ]]; then
    TORCH_ENV=
    [[ $TORCH_BLAS == *openmp* ]] || TORCH_ENV="OMP_WAIT_POLICY=PASSIVE"
    grep -qw avx512f /proc/cpuinfo && TORCH_ENV+=" ATEN_CPU_CAPABILITY=avx512"
    # tcmalloc (./INSTALL installs it) when present, else glibc's malloc tuned to keep freed
    # buffers; glibc maps every block over 32 MiB (its largest threshold) afresh, and the page
    # faults of those cost torch 1.2-1.3x at the 20m sizes on a VM where faults are slow
    TCMALLOC=/usr/lib/$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)/libtcmalloc_minimal.so.4
    if [[ -f $TCMALLOC ]]; then TORCH_ENV+=" LD_PRELOAD=$TCMALLOC"
    else TORCH_ENV+=" GLIBC_TUNABLES=glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=68719476736:glibc.malloc.top_pad=268435456"
    fi
fi
read -r -a torch_env <<<"$TORCH_ENV"

# The Llama-style block (docs/models.md): RoPE (theta 10000), RMSNorm (eps 1e-5), SwiGLU, no
# biases, embeddings tied as Llama 3.2 1B/3B; grouped-query attention 4:1 is set per config
LLAMA=(model.pos='"rope"' model.norm='"rmsnorm"' model.mlp='"swiglu"' model.bias=false
       model.tie_embeddings=true)

# model config -> tessera --set overrides on top of configs/tiny.cfg (same optimizer settings),
# plus the synthetic corpus' vocabulary and size
config_sets() {
    case $1 in
    # tiny.cfg's transformer with the synthetic corpus' vocabulary (the demo uses GPT-2's)
    tiny) SETS=(model.vocab_size=512 sample.tokens=0) VOCAB=512 TOKENS=300000 STEPS=${STEPS_SET:-30} ;;
    # ~23M parameters: 6 x 512, 8 heads (head size 64), vocab 8192, seq 256, 8 x 256 tokens/step in
    # one microbatch of 8
    20m) SETS=(model.n_layer=6 model.d_model=512 model.n_head=8 model.vocab_size=8192 sample.tokens=0
               model.max_seq_len=256 seq_len=256 global_batch=8 micro_batch=8)
         VOCAB=8192 TOKENS=600000 STEPS=${STEPS_SET:-15} ;;
    # tiny's sizes as a Llama: 8 query heads of 24 sharing 2 key/value heads, SwiGLU width 512
    # (8/3 x 192: the GELU MLP's 8 C^2 weights exactly)
    llama-tiny)
        config_sets tiny
        SETS+=("${LLAMA[@]}" model.n_head=8 model.n_kv_head=2 model.intermediate_size=512) ;;
    # 20m's sizes as a Llama: 8 query heads of 64 sharing 2 key/value heads, SwiGLU width 1344
    # (8/3 x 512 = 1365 rounded to the nearest multiple of 64)
    llama-20m)
        config_sets 20m
        SETS+=("${LLAMA[@]}" model.n_kv_head=2 model.intermediate_size=1344) ;;
    # llama-tiny with every MLP configs/dbrx-tiny.cfg's mixture: 16 SwiGLU experts 128 wide, 4 per
    # token (together as wide as llama-tiny's 512: the same FLOPs per token, 4x the MLP weights),
    # the load-balancing loss on (0.0125 = DBRX's 0.05 / 4 layers; docs/moe.md)
    moe-tiny)
        config_sets llama-tiny
        SETS+=(model.moe_experts=16 model.moe_top_k=4 model.moe_intermediate_size=128
               model.moe_aux_loss_coef=0.0125) ;;
    *) die "unknown config '$1' (known: tiny 20m llama-tiny llama-20m moe-tiny)" ;;
    esac
}

TMP=$(mktemp -d /tmp/tessera-bench.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
# every round runs the same binaries, whatever a concurrent 'make' does to $BUILD meanwhile
cp "$TRAIN" "$TOOL" "$FLOOR" "$TMP/"
TRAIN=$TMP/tessera-train TOOL=$TMP/tessera FLOOR=$TMP/matmul_floor
mkdir -p "$BENCH_OUT"
rm -f "$BENCH_OUT"/*-tessera-r* "$BENCH_OUT"/*-torch-r* "$BENCH_OUT"/*-peer-check.* "$BENCH_OUT"/*-floor.json \
    "$BENCH_OUT/results.md"

# check_peer CFG: tessera's ref_dump writes the initial weights, step 0's batch, loss and gradients
# of the config (the --set keys of array sets, one step); bench/check_llama_peer.py (torch_llama.py)
# or check_moe_peer.py (torch_moe.py) loads the weights into the PyTorch peer (options: array targs)
# and compares in float64
check_peer() {
    local cfg=$1 kv=() i log=$BENCH_OUT/$1-peer-check.log ref_dump=$BUILD/tests/ref_dump
    local kind=${peer#torch_}
    local checker=check_${kind%.py}_peer.py
    [[ -x $ref_dump ]] || die "$ref_dump not found (make builds it), or set CHECK_PEER=0"
    for ((i = 1; i < ${#sets[@]}; i += 2)); do kv+=("${sets[i]}"); done
    kv+=('max_duration="1ba"' "run_dir=\"$TMP/peer-$cfg\"")
    local mpi_root=()
    ((EUID != 0)) || mpi_root=(OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1)
    env "${mpi_root[@]}" "$ref_dump" configs/tiny.cfg "$TMP/peer-$cfg.h5" "${kv[@]}" >"$log" 2>&1 ||
        { tail -20 "$log" >&2; die "ref_dump failed ($log)"; }
    env -u PYTHONPATH "$PYTHON" "$ROOT/bench/$checker" "$TMP/peer-$cfg.h5" "${targs[@]}" \
        >>"$log" 2>&1 || { tail -20 "$log" >&2; die "$cfg: the PyTorch peer is not tessera's model ($log)"; }
    echo "== $cfg: PyTorch peer vs tessera at step 0: $(grep -E '^(loss|gradients|router statistics):' "$log" | tr '\n' ' ')"
}

load() { cut -d' ' -f1-3 /proc/loadavg; }
LOAD_START=$(load)
HEADER="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) CPUs online, load average $LOAD_START
$("$TRAIN" --version 2>/dev/null || echo 'tessera-train (version unknown)') (the binary; the tree is at $(git rev-parse --short HEAD 2>/dev/null || echo '?')), OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}, $THREADS threads
PyTorch $("$PYTHON" -c 'import torch; print(torch.__version__)') ($PYTHON, BLAS ${TORCH_BLAS:-?}), environment: ${torch_env[*]:-Debian defaults}
${STEPS_SET:-30 (tiny models) / 15 (20m models)} steps x $ROUNDS rounds per program and config, alternating; the first $SKIP steps of each run left out"
echo "$HEADER"
results=()
for cfg in $CONFIGS; do
    config_sets "$cfg"
    data=$TMP/data-$cfg
    "$TOOL" synth --out "$data" --vocab "$VOCAB" --tokens "$TOKENS" --seed 1 --quiet
    train_dir=$data
    [[ -f $data/train/index.tsv ]] && train_dir=$data/train
    sets=(--set "data.train=\"$train_dir\"" --set 'data.val=""' --set 'eval_interval="0ba"'
          --set 'save_interval="0ba"' --set "max_duration=\"${STEPS}ba\"" --set "threads=$THREADS")
    for s in "${SETS[@]}"; do sets+=(--set "$s"); done
    for ((r = 1; r <= ROUNDS; r++)); do
        base=$BENCH_OUT/$cfg-tessera-r$r
        run_dir=$TMP/run-$cfg-$r
        echo "== $cfg round $r: tessera-train: $("${UTIL[@]}" quiet "$QUIET_WAIT")"
        "${UTIL[@]}" rss "$base.rss" -- "$TRAIN" --config configs/tiny.cfg "${sets[@]}" \
            --set "run_dir=\"$run_dir\"" >"$base.log" 2>&1 ||
            { tail -20 "$base.log" >&2; die "tessera-train failed ($base.log)"; }
        cp "$run_dir/metrics.jsonl" "$base.metrics.jsonl"
        "${UTIL[@]}" tessera-result "$base.log" "$base.metrics.jsonl" "$SKIP" "$base.rss" >"$base.json"
        # the peer script (torch_gpt.py or torch_llama.py), then its options
        peer=$("${UTIL[@]}" torch-args "$run_dir/config.cfg") || die "no PyTorch peer for $cfg"
        read -r -a targs <<<"$peer"
        peer=${targs[0]} targs=("${targs[@]:1}")
        base=$BENCH_OUT/$cfg-torch-r$r
        echo "== $cfg round $r: PyTorch ($peer): $("${UTIL[@]}" quiet "$QUIET_WAIT")"
        "${UTIL[@]}" rss "$base.rss" -- env -u PYTHONPATH "${torch_env[@]}" "$PYTHON" "$ROOT/bench/$peer" \
            "${targs[@]}" --steps "$STEPS" --skip "$SKIP" >"$base.log" 2>&1 ||
            { tail -20 "$base.log" >&2; die "$peer failed ($base.log)"; }
        "${UTIL[@]}" torch-result "$base.log" "$base.rss" >"$base.json"
        results+=("$BENCH_OUT/$cfg-tessera-r$r.json" "$base.json")
    done
    [[ $CHECK_PEER != 1 || $peer == torch_gpt.py ]] || check_peer "$cfg"
    # the matmul floor: the step's matmuls alone through tessera's CPU backend (dense models)
    "${UTIL[@]}" linears "$run_dir/config.cfg" >"$TMP/linears-$cfg"
    if [[ -s $TMP/linears-$cfg ]]; then
        echo "== $cfg: matmul floor: $("${UTIL[@]}" quiet "$QUIET_WAIT")"
        "$FLOOR" "$THREADS" 5 <"$TMP/linears-$cfg" >"$BENCH_OUT/$cfg-floor.json" ||
            die "matmul_floor failed on $TMP/linears-$cfg"
        results+=("$BENCH_OUT/$cfg-floor.json")
    fi
done

echo
{
    echo "$HEADER"
    echo
    "${UTIL[@]}" table "${results[@]}"
    echo
    echo "load average: $LOAD_START at the start, $(load) at the end (it counts this benchmark's own threads)."
    echo "tokens/s = tokens / time of steps $((SKIP + 1)) to the last of every round, all rounds together;" \
         "ratio = tessera / PyTorch tokens/s."
} | tee "$BENCH_OUT/results.md"
