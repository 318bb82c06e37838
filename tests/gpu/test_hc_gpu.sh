#!/usr/bin/env bash
# tessera-healthcheck, GPU mode (docs/healthcheck.md "GPU checks"), end to end on this node.
# Part 1, on any machine: the GPU mode's plumbing without a GPU: --gpu on exits 2 naming why,
# --gpu auto falls back to the CPU checks, a bad --gpu-lib exits 2; then, through the CUDA-free
# stand-in library (healthcheck/mock/: canned H100 facts), everything on the executable's side for
# real: NVML-fact verdicts naming the GPU in the JSON, the FP8 burn's verdicts (a slow rate, a wrong
# element; not supported below compute capability 8.9), missing_gpu, the NCCL bootstrap over MPI and
# the node-pair culprit logic on 4 ranks, a GPU-less node in a GPU run, --gpu on on it.
# Part 2, on a node with an NVIDIA GPU (nvidia-smi lists one and libtessera-hc-gpu.so was built;
# elsewhere every check of it is reported "# SKIP" with the reason): --gpu on --quick is healthy
# against the shipped thresholds, --full adds hbm_bw (and nccl_node with >= 2 GPUs), --json holds
# every GPU, and each injected GPU fault gives exactly its FAIL lines and exit 1: slow_gemm,
# corrupt_gemm, low_membw, missing_gpu, and with >= 2 GPUs low_busbw and 2 ranks posing as 2 nodes
# (nccl_pairs). The shipped sections expect 8 GPUs; the test sets gpu_count to what nvidia-smi lists.
# shellcheck source=../lib.sh
source "$(dirname "$0")/../lib.sh"
# shellcheck source=gpu_lib.sh
source "$(dirname "$0")/gpu_lib.sh"
tsr_tmpdir
tap_plan 23
HC=$BUILD/tessera-healthcheck
PYTHON=${PYTHON:-/usr/bin/python3}
GPU_SO=$BUILD/libtessera-hc-gpu.so
MOCK=$BUILD/tests/libtessera-hc-gpu-mock.so # healthcheck/mock/: no CUDA, canned facts
CFG=$TSR_ROOT/healthcheck/healthcheck.cfg

# run ARGS...: the checker on this node posing as Slurm node hc-g0; stdout in $TMP/out.txt,
# stderr in $TMP/err.txt, exit status in $RC
run() {
    RC=0
    SLURMD_NODENAME=hc-g0 "$HC" "$@" >"$TMP/out.txt" 2>"$TMP/err.txt" || RC=$?
}
show() { tap_diag "exit $RC; stdout:"; sed 's/^/#   /' "$TMP/out.txt" | tail -25; tap_diag "stderr:"; grep -v '^ *$' "$TMP/err.txt" | sed 's/^/#   /' | tail -10; }
# fails: the "NODE CHECK" pairs of the FAIL lines, sorted, comma-separated
fails() { awk '$3 == "FAIL" { print $1, $2 }' "$TMP/out.txt" | sort | paste -sd, -; }
# expect RC PATTERN what: the last run exited RC and its stdout+stderr match PATTERN
expect() {
    [[ $RC == "$1" ]] && cat "$TMP/out.txt" "$TMP/err.txt" | grep -qE -- "$2"
    local r=$?; ((r)) && show
    tap_check $r "$3"
}

# ---- part 1: no GPU needed (CUDA_VISIBLE_DEVICES= hides any GPU from CUDA) ----
CUDA_VISIBLE_DEVICES='' run --config "$CFG" --gpu on --quick
expect 2 "--gpu on: no usable GPU on hc-g0: " "--gpu on where CUDA sees no GPU: exit 2 naming why"
TSR_HC_MOCK_GPUS=0 run --config "$CFG" --gpu auto --gpu-lib "$MOCK" --quick --burn 0.2
expect 0 "CPU checks \(rank 0: CUDA sees no GPU" "--gpu auto where CUDA sees no GPU: the CPU checks, exit 0"
grep -q '^hc-g0 sgemm OK ' "$TMP/out.txt" && ! grep -q ' gemm_bf16 ' "$TMP/out.txt"
r=$?; ((r)) && show; tap_check $r "--gpu auto without a GPU: CPU verdict lines (sgemm), no GPU ones"
run --config "$CFG" --gpu on --gpu-lib /nonexistent/libtessera-hc-gpu.so
expect 2 "cannot load /nonexistent/libtessera-hc-gpu.so" "--gpu on --gpu-lib MISSING: exit 2 naming the file"

# ---- part 1b: the host side of the GPU mode through the stand-in library (2 GPUs per rank) ----
sed -E "s/gpu_count( *)= \{ expected = [0-9.]+;/gpu_count\1= { expected = 2;/" "$CFG" >"$TMP/mock.cfg"
M=(--config "$TMP/mock.cfg" --gpu-lib "$MOCK")
# mpi_run NP ARGS...: NP ranks posing as nodes hc-n0.., each with its own environment prefix
# MOCK_ENV_r (e.g. MOCK_ENV_1="TSR_HC_MOCK_GPUS=0"); stdout, stderr and status as run()
mpi_run() {
    local np=$1 r app=()
    shift
    for ((r = 0; r < np; r++)); do
        local extra="MOCK_ENV_$r"
        ((r)) && app+=(:)
        # shellcheck disable=SC2206 # the per-rank settings are meant to split into VAR=value words
        app+=(-np 1 env "SLURMD_NODENAME=hc-n$r" ${!extra:-} "$HC" "$@")
    done
    RC=0
    "${MPIRUN[@]}" "${app[@]}" >"$TMP/out.txt" 2>"$TMP/err.txt" || RC=$?
}
TSR_HC_MOCK_FACT=remap_pending=1@1 run "${M[@]}" --gpu on --full --json "$TMP/mock.json"
[[ $RC == 1 && $(fails) == "hc-g0 remap_pending" ]] && grep -q '^hc-g0 remap_pending FAIL 1 0 GPUs$' "$TMP/out.txt" \
    && (( $(grep -c '^hc-g0 .* OK ' "$TMP/out.txt") == 15 )) \
    && "$PYTHON" -c 'import json, sys
r = json.load(open(sys.argv[1]))["results"][0]
c = {x["check"]: x for x in r["checks"]}
assert c["remap_pending"]["gpu"] == 1 and r["gpus"][1]["remap_pending"] == 1 and r["gpus"][0]["remap_pending"] == 0
assert "retired_pages" not in c
assert c["gemm_fp8"]["gpu"] == 1 and c["gemm_fp8_verify"]["actual"] == 0, c["gemm_fp8"]
assert all(g["gemm_fp8"] > 1000 and g["fp8_iters"] == 10 and g["compute_capability"] == 90 for g in r["gpus"])' "$TMP/mock.json"
r=$?; ((r)) && show; tap_check $r "stand-in library: a pending row remap on GPU 1 -> exactly 'remap_pending FAIL 1 0 GPUs', JSON names GPU 1; retired pages n/a; the FP8 burn's rate and count per GPU in the JSON"
# the FP8 burn (compute capability >= 8.9): a slow FP8 rate on one GPU and a wrong FP8 element on
# the other fail exactly their checks; an A100 (8.0) has no FP8: not measured, said, not failed
TSR_HC_MOCK_FACT=gemm_fp8=500@1,gemm_fp8_verify=2@0 run "${M[@]}" --gpu on --quick --json "$TMP/fp8.json"
[[ $RC == 1 && $(fails) == "hc-g0 gemm_fp8,hc-g0 gemm_fp8_verify" ]] && grep -q '^hc-g0 gemm_fp8 FAIL 500.0 910.0 TFLOP/s$' "$TMP/out.txt" \
    && grep -q '^hc-g0 gemm_fp8_verify FAIL 2 0 errors$' "$TMP/out.txt" && grep -q '^hc-g0 gemm_bf16 OK ' "$TMP/out.txt" \
    && "$PYTHON" -c 'import json, sys
c = {x["check"]: x for x in json.load(open(sys.argv[1]))["results"][0]["checks"]}
assert c["gemm_fp8"]["gpu"] == 1 and not c["gemm_fp8"]["ok"] and c["gemm_fp8_verify"]["gpu"] == 0' "$TMP/fp8.json"
r=$?; ((r)) && show; tap_check $r "stand-in library: FP8 burn slow on GPU 1, one wrong FP8 element on GPU 0 -> exactly gemm_fp8 and gemm_fp8_verify FAIL (bf16 OK), JSON names the GPUs"
TSR_HC_MOCK_CC=80 run "${M[@]}" --gpu on --quick
[[ $RC == 0 && -z $(fails) ]] && ! grep -q '^hc-g0 gemm_fp8' "$TMP/out.txt" && grep -q '^hc-g0 gemm_bf16 OK ' "$TMP/out.txt" \
    && grep -q '^# not measured: .*gemm_fp8, gemm_fp8_verify (2 of 2 GPUs: compute capability 8.0, FP8 needs 8.9; not supported)' "$TMP/out.txt"
r=$?; ((r)) && show; tap_check $r "stand-in library, compute capability 8.0: no FP8 verdict, 'not supported' in the not-measured line, exit 0"
# a site config written before the FP8 burn (no gemm_fp8 groups) still loads: no FP8 burn, said;
# half a pair is refused (exit 2, naming both keys)
grep -v 'gemm_fp8' "$TMP/mock.cfg" >"$TMP/nofp8.cfg"
run --config "$TMP/nofp8.cfg" --gpu-lib "$MOCK" --gpu on --quick
[[ $RC == 0 && -z $(fails) ]] && ! grep -q '^hc-g0 gemm_fp8' "$TMP/out.txt" && grep -q '^hc-g0 gemm_bf16 OK ' "$TMP/out.txt" \
    && grep -q '^# not measured: .*gemm_fp8, gemm_fp8_verify (section "[^"]*" gives no thresholds for them)' "$TMP/out.txt"
r1=$?
grep -v 'gemm_fp8_verify' "$TMP/mock.cfg" >"$TMP/halffp8.cfg"
run --config "$TMP/halffp8.cfg" --gpu-lib "$MOCK" --gpu on --quick
[[ $r1 == 0 && $RC == 2 ]] && grep -q 'gemm_fp8 and gemm_fp8_verify go together' "$TMP/err.txt"
r=$?; ((r)) && show; tap_check $r "a config without gemm_fp8 thresholds: no FP8 burn, said in the not-measured line, exit 0; gemm_fp8 without gemm_fp8_verify: exit 2 naming both"
TSR_HC_FAULT=missing_gpu run "${M[@]}" --gpu on --quick
[[ $RC == 1 && $(fails) == "hc-g0 gpu_count" ]] && grep -q '^hc-g0 gpu_count FAIL 1 2 GPUs$' "$TMP/out.txt"
r=$?; ((r)) && show; tap_check $r "stand-in library: missing_gpu -> 'gpu_count FAIL 1 2 GPUs', exit 1"
# one GPU, --full: no bus to measure, but NCCL's one-rank all-reduce as a self-test (issue 52
# item 4), named in the "not measured" line with its algorithm bandwidth, not judged
TSR_HC_MOCK_GPUS=1 run "${M[@]}" --gpu on --full --burn 0.2
grep -q '^# not measured: nccl_node (1 GPU: a one-rank NCCL all-reduce ran, its sums right, 470 GB/s algorithm bandwidth; bus bandwidth needs 2 GPUs)' "$TMP/out.txt" &&
    ! grep -q '^hc-g0 nccl_node ' "$TMP/out.txt"
r=$?; ((r)) && show; tap_check $r "stand-in library, one GPU, --full: the one-rank NCCL all-reduce self-test said in the not-measured line, no nccl_node verdict"
if mpi_ok "$HC"; then
    TSR_HC_FAULT=low_busbw:hc-n1 mpi_run 4 "${M[@]}" --gpu on --full
    [[ $RC == 1 && $(fails) == "hc-n1 nccl_node,hc-n1 nccl_pairs" ]] && (( $(grep -c ' nccl_pairs OK ' "$TMP/out.txt") == 3 ))
    r=$?; ((r)) && show; tap_check $r "stand-in library, 4 ranks: low_busbw on hc-n1 -> only its nccl_node and nccl_pairs FAIL (MPI-carried NCCL ids, slowest-node timing, pairs)"
    MOCK_ENV_1="TSR_HC_MOCK_GPUS=0" mpi_run 2 "${M[@]}" --gpu auto --full
    [[ $RC == 1 && $(fails) == "hc-n0 nccl_pairs,hc-n1 gpu_count,hc-n1 nccl_pairs" ]] && grep -q '^hc-n1 gpu_count FAIL 0 2 GPUs$' "$TMP/out.txt"
    r=$?; ((r)) && show; tap_check $r "stand-in library, --gpu auto, hc-n1 without GPU: GPU checks for both, hc-n1 fails gpu_count, the pair measures 0"
    MOCK_ENV_1="TSR_HC_MOCK_GPUS=0" mpi_run 2 "${M[@]}" --gpu on --quick
    expect 2 "--gpu on: no usable GPU on hc-n1: CUDA sees no GPU" "stand-in library, --gpu on, hc-n1 without GPU: every rank exits 2 naming hc-n1"
else # a NO_MPI=1 build (the lent GPU machine): the multi-rank half runs in CI's MPI build
    for what in "low_busbw on hc-n1 (4 ranks)" "--gpu auto, hc-n1 without GPU (2 ranks)" \
        "--gpu on, hc-n1 without GPU (2 ranks)"; do
        tap_skip "stand-in library, $what" "no MPI: mpirun missing or $HC is a NO_MPI=1 build"
    done
fi

# ---- part 2: on a GPU node ----
why=""
if ! command -v nvidia-smi >/dev/null 2>&1; then why="no GPU here: nvidia-smi not found"
elif [[ ! -f $GPU_SO ]]; then why="$GPU_SO not built (no nvcc under CUDA_HOME at build time)"
else
    n_gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
    ((n_gpus > 0)) || why="nvidia-smi lists no GPU"
fi
if [[ -n $why ]]; then
    echo "# SKIP GPU checks: $why"
    for what in "healthy --gpu on --quick" "healthy --full" "--json lists every GPU" "slow_gemm" \
        "corrupt_gemm" "low_membw" "missing_gpu" "low_busbw (>= 2 GPUs)" "2 ranks as 2 nodes (>= 2 GPUs)" \
        "CUDA_VISIBLE_DEVICES subset"; do
        tap_check 0 "$what # SKIP $why"
    done
    tap_done
    exit
fi
tap_diag "$n_gpus GPU(s): $(nvidia-smi -L | head -1)"
# the FP8 burn runs where the compute capability is >= 8.9 (GPU 0's; a node's GPUs are alike)
cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
fp8=0; ((${cc:-0} >= 89)) && fp8=1
# expect this node's GPU count; shorter full-mode measurements (the burn is set with --burn)
sed -E -e "s/gpu_count( *)= \{ expected = [0-9.]+;/gpu_count\1= { expected = $n_gpus;/" \
    -e 's/membw_mib = 4096;/membw_mib = 1024;/' -e 's/allreduce_mib = (16384|4096|1024);/allreduce_mib = 256;/' \
    -e 's/allreduce_iters = 20;/allreduce_iters = 5;/' "$CFG" >"$TMP/gpu.cfg"
G=(--config "$TMP/gpu.cfg" --gpu on)

run "${G[@]}" --quick --burn 2
((RC == 0)) && [[ -z $(fails) ]] && grep -q "^hc-g0 gpu_count OK $n_gpus " "$TMP/out.txt" \
    && grep -q '^hc-g0 gemm_bf16 OK ' "$TMP/out.txt" && grep -q '^hc-g0 gemm_fp32_verify OK 0 0 errors' "$TMP/out.txt" \
    && (( $(grep -c '^hc-g0 gemm_fp8_verify OK 0 0 errors' "$TMP/out.txt") == fp8 )) \
    && grep -q '^# tessera-healthcheck quick (GPU): 1 node' "$TMP/out.txt"
r=$?; show; tap_check $r "healthy --gpu on --quick: gpu_count, GEMM burns (FP8 where compute capability $cc >= 89) and their exact checks OK, exit 0"

run "${G[@]}" --full --burn 2 --json "$TMP/report.json"
want_node=0; ((n_gpus >= 2)) && want_node=1
((RC == 0)) && [[ -z $(fails) ]] && grep -q '^hc-g0 hbm_bw OK ' "$TMP/out.txt" \
    && (( $(grep -c '^hc-g0 nccl_node OK ' "$TMP/out.txt") == want_node )) \
    && { ((n_gpus >= 2)) || grep -q '^# not measured: nccl_node (1 GPU: a one-rank NCCL all-reduce ran, its sums right, [0-9]* GB/s' "$TMP/out.txt"; }
r=$?; show; tap_check $r "healthy --full: hbm_bw OK, nccl_node OK with >= 2 GPUs (one GPU: its one-rank NCCL all-reduce right, said), exit 0"
"$PYTHON" - "$TMP/report.json" "$n_gpus" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); n = int(sys.argv[2])
node = r["results"][0]
assert r["backend"] == "gpu" and len(node["gpus"]) == n, (r["backend"], len(node["gpus"]))
assert all(g["gemm_bf16_verify"] == 0 and g["bus_id"] for g in node["gpus"])
PY
tap_check $? "--json: backend gpu, one entry per GPU with its bus id and facts"

expect_fails() { # expect_fails "NODE CHECK,..." what ARGS...: exactly these FAIL lines, exit 1
    local want=$1 what=$2
    shift 2
    run "${G[@]}" "$@"
    [[ $RC == 1 && $(fails) == "$want" ]]
    local r=$?; ((r)) && { tap_diag "want FAIL lines: $want; got: $(fails)"; show; }
    tap_check $r "$what"
}
slow=(gemm_bf16 gemm_fp32) wrong=(gemm_bf16_verify gemm_fp32_verify)
((fp8)) && slow+=(gemm_fp8) wrong+=(gemm_fp8_verify)
TSR_HC_FAULT=slow_gemm expect_fails "$(printf 'hc-g0 %s\n' "${slow[@]}" | sort | paste -sd, -)" \
    "slow_gemm: ${slow[*]} FAIL, nothing else" --quick --burn 3
TSR_HC_FAULT=corrupt_gemm:hc-g0 expect_fails "$(printf 'hc-g0 %s\n' "${wrong[@]}" | sort | paste -sd, -)" \
    "corrupt_gemm: ${wrong[*]} FAIL (one wrong element each)" --quick --burn 3
TSR_HC_FAULT=low_membw expect_fails "hc-g0 hbm_bw" "low_membw: hbm_bw FAILs, nothing else" --full --burn 1
TSR_HC_FAULT=missing_gpu expect_fails "hc-g0 gpu_count" "missing_gpu: gpu_count FAILs ($((n_gpus - 1)) < $n_gpus)" --quick --burn 1
if ((n_gpus >= 2)); then
    TSR_HC_FAULT=low_busbw expect_fails "hc-g0 nccl_node" "low_busbw: nccl_node FAILs" --full --burn 1
    # two ranks posing as two nodes, half of the GPUs each: round 1 pairs them (nccl_pairs)
    half=$((n_gpus / 2)) vis0=$(seq -s, 0 $((n_gpus / 2 - 1))) vis1=$(seq -s, $((n_gpus / 2)) $((2 * (n_gpus / 2) - 1)))
    sed -E "s/gpu_count( *)= \{ expected = [0-9.]+;/gpu_count\1= { expected = $half;/" "$TMP/gpu.cfg" >"$TMP/half.cfg"
    RC=0
    "${MPIRUN[@]}" -np 1 env SLURMD_NODENAME=hc-g0 CUDA_VISIBLE_DEVICES="$vis0" "$HC" --config "$TMP/half.cfg" --gpu on --full --burn 1 : \
        -np 1 env SLURMD_NODENAME=hc-g1 CUDA_VISIBLE_DEVICES="$vis1" "$HC" --config "$TMP/half.cfg" --gpu on --full --burn 1 \
        >"$TMP/out.txt" 2>"$TMP/err.txt" || RC=$?
    ((RC == 0)) && [[ -z $(fails) ]] && (( $(grep -c ' nccl_pairs OK ' "$TMP/out.txt") == 2 ))
    r=$?; show; tap_check $r "2 ranks as 2 nodes with $half GPU(s) each: nccl_pairs OK on both, exit 0"
else
    tap_check 0 "low_busbw (>= 2 GPUs) # SKIP one GPU: no NCCL all-reduce within the node"
    tap_check 0 "2 ranks as 2 nodes (>= 2 GPUs) # SKIP one GPU: cannot split it between two ranks"
fi
CUDA_VISIBLE_DEVICES=0 run "${G[@]}" --quick --burn 1
grep -qE '^hc-g0 gpu_count (OK|FAIL) 1 ' "$TMP/out.txt"
r=$?; ((r)) && show; tap_check $r "CUDA_VISIBLE_DEVICES=0: the checker measures the one GPU CUDA shows"
tap_done
