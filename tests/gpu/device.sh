#!/usr/bin/env bash
# device.sh — what issues 7 and 8 still have to run on a GPU, packed for the lent GPU machine (the
# device tool: one H100 or H200, CUDA 13 and its driver, PyTorch with NCCL and cuBLAS in its
# wheels, python3; no MPI, HDF5, libconfig or OpenBLAS, no network; files under $OUT come back).
#
#   here:   bash tests/gpu/device.sh pack
#             a NO_MPI=1 build (CUDA for sm_90a + sm_80, ARCH=x86-64-v3: any x86-64 with AVX2) in
#             build-device/, and its programs with every library they load that the GPU machine
#             does not have in .devbundle/bundle.tar.xz (git-ignored, ~15 MB; the working tree
#             and it travel together: a device run with carry [".devbundle"])
#           bash tests/gpu/device.sh pack-clients
#             tests/gpu/clients_prep.py with this checkout's build/ (MPI, HDF5): tiny models
#             trained, exported for transformers (GPT-2, MPT, Llama, Qwen 2, Qwen 3 and the issue
#             67/68 families tessera exports: OLMo 2, OLMo 3, Gemma 2, Gemma 3, SmolLM3; gpt-oss
#             and Qwen3-Next once it exports them), tessera's logits on fixed rows, one run's tb/
#             and metrics.jsonl, in .devbundle/clients/ (~5 MB; no bundle needed for `clients`)
#   there:  bash tests/gpu/device.sh check [STAGE...]   in this order (default: all of them):
#             memcheck   the GPU op test under compute-sanitizer's memcheck (leaks too), every case
#             racecheck  the op test's reduced case set (TSR_GPU_OPS_QUICK=1) under racecheck
#                        (hazards inside NVIDIA's cuBLASLt kernels alone are named, not failed:
#                        race_vendor_only below)
#             synccheck  the same under synccheck; all three with CUDA_LAUNCH_BLOCKING=1
#             ops        the op test as it runs in a training step (no sanitizer, asynchronous)
#             train      tests/gpu/test_cuda_train.sh, test_cuda_lora.sh, test_cuda_dpo.sh, test_cuda_moe_ep.sh,
#                        test_cuda_muon.sh, test_cuda_context.sh, test_cuda_fp8.sh,
#                        test_cuda_families.sh (issue 67/68's variants), test_cuda_sdc.sh: their GPU halves
#                        (the emulator's with TSR_TEST_EMULATOR=1; CI runs them); TRAIN_TESTS="..."
#                        names others
#             ckpt       tests/gpu/ckpt_async_gpu.sh: gpt2-124m on the GPU with save_async and without
#                        (issue 53): the same checkpoints and steps, the host copy pinned; the
#                        blocking and background seconds per save, the pinned device-to-host GB/s
#                        and the step time during a background write, measured (~90 s)
#             ring       build/bench/ring_bench (bench/gpu/ring_bench.c, ~30 s): context
#                        parallelism's blocks of a ring of 2 and of 4 ranks, 8192 local positions,
#                        Llama 3.1 8B's heads, against the one-GPU attention kernel at that
#                        shape, forward and backward TFLOP/s, and PyTorch's fused attention at
#                        that shape beside them (bench/gpu/ring_torch.py) (a table; the goal:
#                        the blocks within 10% of the kernel; docs/benchmarks.md). Not yet run
#                        on a GPU
#             sdc        bench/sdc_overhead.sh with DEVICE=cuda (~2 min): gpt2-124m's step with the
#                        fingerprints off, at the default interval and at every step, side by
#                        side (the device-to-host copy and the hash; docs/health.md "On the GPU")
#             account    tests/gpu/test_account_gpu.sh: a run's GPU energy from NVML (the cost
#                        accounting, docs/site.md), its average power in range, the rank's GPU
#                        in the banner (~30 s)
#           bash tests/gpu/device.sh bench MODEL     bench/gpu/run.sh (tessera vs PyTorch) for one
#                                                   model (default gpt2-124m); its settings from
#                                                   the environment (TESSERA_ARGS, MICRO_BATCH, ...)
#           bash tests/gpu/device.sh profile [MODEL]    per-op device times of tessera's steps
#                                                   (TSR_PROFILE=1: CUDA events, no counters;
#                                                   again with each measurement switch:
#                                                   TSR_GRAD_OVERWRITE=0, TSR_DGELU_FUSION=0,
#                                                   TSR_GEMM_REDUCTION=none and =any,
#                                                   TSR_ATT_WARP_ROWS=32, TSR_XENT_RESIDENT=1,
#                                                   TSR_ATT_DQ_FUSED=1, alone and with 32 rows,
#                                                   TSR_NORM_HOLD=1), then
#                                                   ncu's per-kernel table where it runs
#           bash tests/gpu/device.sh gen            batched decoding (issue 54): GRPO's rollouts on
#                                                   the CUDA decode kernels against transformers'
#                                                   generate, batch 1, 16 and 64, the same model
#                                                   dimensions (bench/gpu/gen_vs_hf.sh; knobs from
#                                                   the environment: BATCHES, NEW, DIMS, ...); about
#                                                   3 minutes on an H100 by estimate (never run yet)
#           bash tests/gpu/device.sh attn           the attention kernel, mma.sync and wgmma, and
#                                                   PyTorch's SDPA at T = 2048, 4096, 8192 (ring_bench's
#                                                   one-GPU row; ATTN_T to choose; ~40 s); with
#                                                   WINDOW=W (issue 67) the sliding-window kernel
#                                                   beside it instead of the rings, and torch's
#                                                   flex_attention (or SDPA with a boolean mask)
#                                                   at that window: ATTN_T=8192 WINDOW=1024;
#                                                   ATT_HEADS=NH/KVH/HS other heads (issue 67:
#                                                   Gemma 3 12B's 16/8/256), into attn-16-8-256.txt
#           bash tests/gpu/device.sh deltanet       the Gated DeltaNet core (issue 68; cuda_deltanet.cu)
#                                                   against the PyTorch peer of the same chunked
#                                                   algorithm (torch.compile, bf16 inputs, fp32
#                                                   state), Qwen3-Next's heads at T = 4096 and
#                                                   16384 (DN_T to choose): one markdown table in
#                                                   $OUT/deltanet.md (~3 min by estimate: two
#                                                   compilations of the peer; limit 450 s)
#           bash tests/gpu/device.sh hybrid         a hybrid training step (issue 68: 3 Gated DeltaNet
#                                                   layers + 1 gated full one, device = cuda,
#                                                   d_model 1024, T 4096) beside transformers'
#                                                   Qwen3NextForCausalLM at the same sizes
#                                                   (bench/gpu/hybrid_step.sh; HYB_STEPS, 12): one
#                                                   table in $OUT/hybrid.md (~90 s by estimate;
#                                                   limit 120 s)
#           bash tests/gpu/device.sh hc             the health checker's GPU mode: the GPU half of
#                                                   tests/gpu/test_hc_gpu.sh, then --quick and --full
#                                                   with the shipped thresholds, timed, --json kept
#           bash tests/gpu/device.sh clients        tests/gpu/real_clients.py over .devbundle/clients
#                                                   (transformers' from_pretrained and logits,
#                                                   TensorBoard's EventAccumulator, save_pretrained
#                                                   fixtures of the five classes and of the issue
#                                                   67/68 families -> $OUT/hf-transformers.tar.gz),
#                                                   then the exports' check again with --perturb
#                                                   gpt2, which must fail (~60 s by estimate)
#           bash tests/gpu/device.sh multirank      issue 52: several ranks on the one GPU through
#                                                   parallel.gpu_comm = "mpi" (the bundle's MPI
#                                                   trainer and OpenMPI), compute-sanitizer on 2
#                                                   ranks, the health checker's one-rank NCCL
#                                                   self-test; MULTIRANK_S=300, timeout_s 360
#                                                   (stages and limits: at multirank() below)
#           bash tests/gpu/device.sh race-verdict LOG   (anywhere) exit 0 when a racecheck log's
#                                                   hazards are all in NVIDIA's kernels (above)
#           bash tests/gpu/device.sh firstlight [STAGE...]   the first call of a session: ops,
#                                                   train (GPU halves), bench and profile of
#                                                   gpt2-124m, clients, in one call of 420 s
#                                                   (stages and limits: at firstlight() below;
#                                                   issue 66's one call: its stages attn, fp8, gen)
#   Time: the device tool stops a command at 10 minutes, and a session has 15 device minutes, the
#   machine's start included (docs/cuda.md, "The first-light session"). Every step runs under `timeout` (STEP_LIMIT_S, default 540 s) and a call starts no step once less
#   than 30 s of CALL_LIMIT_S (default 570 s) are left: it says which stages were not run and the
#   command that runs them, so a slow or hung step leaves its logs instead of nothing.
#   Each leaves its logs and a summary under $OUT (else /tmp/device-out) and prints the summary
#   last. The bundle is unpacked once per machine into /tmp/tessera-device.
#
# A NO_MPI build runs one process: the test checks that need several ranks (or GPUs) skip, and
# checkpoints are written with serial HDF5 (the same files as the MPI build's).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
BUNDLE=$ROOT/.devbundle/bundle.tar.xz
UNPACKED=/tmp/tessera-device
OUTDIR=${OUT:-/tmp/device-out}

die() { echo "device.sh: $*" >&2; exit 2; }

STEP_LIMIT_S=${STEP_LIMIT_S:-540}
CALL_LIMIT_S=${CALL_LIMIT_S:-570}
for v in STEP_LIMIT_S CALL_LIMIT_S; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v='${!v}': expected a whole number of seconds"
done
T0=$SECONDS
# limited LOG CMD...: CMD under `timeout` for the smallest of STEP_LIMIT_S, what is left of
# CALL_LIMIT_S (less 5 s to write the logs) and what is left until STAGE_END (SECONDS at which
# firstlight's stage ends, when set), its output into LOG and on stdout. Returns CMD's status,
# 124 when the limit stopped it, or 125 when less than 30 s were left (CMD not started).
limited() {
    local log=$1 left limit rc=0
    shift
    left=$((CALL_LIMIT_S - (SECONDS - T0) - 5))
    ((left >= 25)) || { echo "not started: ${left}s left of CALL_LIMIT_S=$CALL_LIMIT_S" >"$log"; return 125; }
    limit=$((left < STEP_LIMIT_S ? left : STEP_LIMIT_S))
    if [[ -n ${STAGE_END:-} ]]; then # firstlight: what is left of the stage's own limit
        left=$((STAGE_END - SECONDS))
        ((left >= 10)) || { echo "not started: ${left}s left of the stage's limit" >"$log"; return 125; }
        ((left >= limit)) || limit=$left
    fi
    timeout --kill-after=10 "$limit" "$@" 2>&1 | tee "$log" || rc=${PIPESTATUS[0]}
    ((rc != 124 && rc != 137)) || { echo "stopped by its ${limit}s limit" | tee -a "$log"; rc=124; }
    return "$rc"
}

# find_tool NAME: the CUDA toolkit's NAME (compute-sanitizer, ncu) that runs, or nothing
find_tool() {
    local t
    for t in "$(command -v "$1" || true)" "/usr/local/cuda/bin/$1" /usr/local/cuda/compute-sanitizer/"$1" \
        /opt/nvidia/nsight-compute/*/"$1"; do
        [[ -n $t && -x $t ]] && "$t" --version >/dev/null 2>&1 && { echo "$t"; return; }
    done
    return 0
}

# Libraries the GPU machine provides itself (C runtime, CUDA toolkit and driver; NCCL comes from
# PyTorch's wheels there): never carried. Everything else a program loads is.
SKIP_RE='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|librt\.so|libpthread\.so|libgcc_s\.so|libstdc\+\+\.so|libresolv\.so|libutil\.so|libcuda\.so|libnvidia-|libcudart\.so|libcublas|libcublasLt|libnccl|libcudnn|libnvrtc|libnvJitLink)'

pack() {
    command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]] ||
        die "pack needs nvcc (the CUDA toolkit) to build the GPU library"
    local b=build-device stage
    local progs=("$b/tessera-train" "$b/tessera" "$b/libtessera-cuda-train.so" "$b/tests/test_gpu_ops" "$b/tests/test_wgmma_gpu"
                 "$b/bench/ring_bench" "$b/bench/deltanet_gpu"
                 "$b/tests/tessera-train-cuemu" "$b/tessera-healthcheck" "$b/libtessera-hc-gpu.so"
                 "$b/tests/libtessera-hc-gpu-mock.so"
                 "$b/tests/test_cudnn_attn") # the probe's cuDNN version line (its loader's view)
    # one version for both builds (the CUDA library refuses a trainer of another), read once:
    # the tree may change while they build
    PACK_VERSION=$(make -s -f /dev/null -f Makefile --eval 'print-version: ; @echo $(VERSION)' print-version 2>/dev/null | tail -1)
    [[ -n $PACK_VERSION ]] || die "cannot read the version from the Makefile"
    make NO_MPI=1 ARCH=x86-64-v3 BUILD="$b" VERSION="$PACK_VERSION" -j"$(nproc)" "${progs[@]}"
    stage=$(mktemp -d)
    mkdir -p "$stage/build/tests" "$stage/build/bench" "$stage/lib"
    local p name path
    for p in "${progs[@]}"; do
        cp -L "$p" "$stage/build/${p#"$b"/}"
        strip --strip-debug "$stage/build/${p#"$b"/}"
        while read -r name path; do
            [[ $name =~ $SKIP_RE ]] || cp -Ln "$path" "$stage/lib/$name"
        done < <(ldd "$p" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}')
        if ldd "$p" | grep -q 'not found'; then die "$p has libraries missing here: $(ldd "$p" | grep 'not found')"; fi
    done
    pack_mpi "$stage"
    local version
    version="$(git describe --always --dirty 2>/dev/null || echo unknown) $(date -u +%FT%TZ)"
    echo "$version" >"$stage/VERSION"
    mkdir -p .devbundle
    tar -C "$stage" -cJf "$BUNDLE.tmp" .
    rm -rf "$stage"
    local mib
    mib=$(du -m "$BUNDLE.tmp" | cut -f1)
    if ((mib > BUNDLE_LIMIT_MIB)); then
        rm -f "$BUNDLE.tmp"
        die "the bundle is $mib MiB, over BUNDLE_LIMIT_MIB=$BUNDLE_LIMIT_MIB (the device tool carries 64 MiB with the working tree)"
    fi
    mv "$BUNDLE.tmp" "$BUNDLE"
    echo "packed $version: $(du -h "$BUNDLE" | cut -f1) in $BUNDLE"
    tar -tJf "$BUNDLE" | grep -v '/$' | sed 's/^\.\//  /'
    echo "next: a device run with carry [\".devbundle\"] and the command 'bash tests/gpu/device.sh check'"
}

# the packed bundle's limit: what the device tool carries (64 MiB) less the working tree (~11 MiB)
# and .devbundle/clients (~2 MiB), with room to spare
BUNDLE_LIMIT_MIB=${BUNDLE_LIMIT_MIB:-44}

# pack_mpi STAGE: the MPI trainer (issue 52): tessera-train and tessera built with MPI and parallel
# HDF5 (build-device-mpi/), OpenMPI's runtime for them (tests/gpu/mpi_bundle.sh: mpirun, orted,
# the plugins of the shared-memory and self transports, relocated with OPAL_PREFIX) in
# STAGE/mpi/, with the NO_MPI build's libtessera-cuda-train.so beside them (the same sources: the
# library calls MPI through the trainer only). Libraries the NO_MPI programs carry too are links
# to STAGE/lib/'s.
pack_mpi() {
    local stage=$1 b=build-device-mpi f n
    command -v mpicc >/dev/null || die "pack needs MPI here (mpicc) to build the MPI trainer"
    make ARCH=x86-64-v3 BUILD="$b" VERSION="$PACK_VERSION" -j"$(nproc)" "$b/tessera-train" "$b/tessera"
    bash tests/gpu/mpi_bundle.sh "$stage/mpi" "$b/tessera-train" "$b/tessera"
    cp "$stage/build/libtessera-cuda-train.so" "$stage/mpi/bin/"
    for f in "$stage"/mpi/lib/*; do
        n=$(basename "$f")
        if cmp -s "$f" "$stage/lib/$n"; then rm "$f" && ln -s "../../lib/$n" "$f"; fi
    done
}

# mpi_setup (after setup): the bundle's MPI trainer and OpenMPI runtime (pack_mpi) for the
# multi-rank checks: BUILD its programs, mpirun on PATH
mpi_setup() {
    [[ -f $UNPACKED/mpi/env.sh ]] || die "the bundle has no MPI trainer (packed before issue 52): pack again"
    # shellcheck disable=SC1091 # made by tests/gpu/mpi_bundle.sh
    source "$UNPACKED/mpi/env.sh"
    export BUILD=$UNPACKED/mpi/bin
    { echo "MPI: $(mpirun --version 2>&1 | head -1) from $OPAL_PREFIX"
      if ldd "$BUILD/tessera-train" | grep -q 'not found'; then echo "MISSING for the MPI trainer: $(ldd "$BUILD/tessera-train" | grep 'not found' | tr -s ' \n' ' ')"; fi
    } | tee -a "$OUTDIR/probe.txt"
}

# Unpacks the bundle (python's tarfile when there is no xz) and sets up the environment: the
# carried libraries first, then the machine's CUDA toolkit and PyTorch's nvidia-* wheels (NCCL).
setup() {
    [[ -z ${SETUP_DONE:-} ]] || return 0
    SETUP_DONE=1
    [[ -f $BUNDLE ]] || die "no $BUNDLE: run 'bash tests/gpu/device.sh pack' where the project builds, then carry .devbundle"
    if ! cmp -s <(tar -xJOf "$BUNDLE" ./VERSION 2>/dev/null || echo x) "$UNPACKED/VERSION" 2>/dev/null; then
        rm -rf "$UNPACKED" && mkdir -p "$UNPACKED"
        if command -v xz >/dev/null; then
            tar -C "$UNPACKED" -xJf "$BUNDLE"
        else
            python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$BUNDLE" "$UNPACKED"
        fi
    fi
    local cuda_dirs="" py_dirs d
    for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
        [[ -d $d ]] && cuda_dirs+="${cuda_dirs:+:}$d"
    done
    py_dirs=$(python3 -c 'import glob, os, site
roots = site.getsitepackages() + [site.getusersitepackages()]
print(":".join(sorted({d for r in roots for d in glob.glob(os.path.join(r, "nvidia", "*", "lib"))})))' 2>/dev/null || true)
    ORIG_LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}
    export LD_LIBRARY_PATH="$UNPACKED/lib:$cuda_dirs:$py_dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export BUILD=$UNPACKED/build TSR_ROOT=$ROOT
    # python3-machine: python3 with the machine's library path back, for PyTorch: the bundle's
    # Debian libraries (libz, libssl, libgomp, ...) are for tessera's programs only
    # shellcheck disable=SC2016 # the $ lines are the wrapper's own, expanded when it runs
    printf '#!/usr/bin/env bash\nexport LD_LIBRARY_PATH=%q\n[[ -n $LD_LIBRARY_PATH ]] || unset LD_LIBRARY_PATH\nexec %q "$@"\n' \
        "$ORIG_LD_LIBRARY_PATH" "$(command -v python3)" >"$UNPACKED/python3-machine"
    chmod +x "$UNPACKED/python3-machine"
    mkdir -p "$OUTDIR"
    {
        echo "bundle $(cat "$UNPACKED/VERSION"), tree $(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo '?'), $(date -u +%FT%TZ)"
        nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 || echo "nvidia-smi failed"
        local f
        for f in "$BUILD"/tessera-train "$BUILD"/libtessera-cuda-train.so "$BUILD"/tests/test_gpu_ops; do
            if ldd "$f" | grep -q 'not found'; then echo "MISSING for $f: $(ldd "$f" | grep 'not found' | tr -s ' \n' ' ')"; fi
        done
        echo "libnccl: $(ldconfig -p 2>/dev/null | grep -c libnccl) in ldconfig; $(IFS=:; for d in $LD_LIBRARY_PATH; do ls "$d"/libnccl.so* 2>/dev/null; done | head -1)"
        # cuDNN's fused attention (TSR_ATTENTION=cudnn) opens libcudnn.so.9 from this path
        local cudnn
        # (|| true: head leaving early kills the loop's next ls by SIGPIPE, and under set -e and
        # pipefail an assignment of that status would end the script)
        cudnn=$(IFS=:; for d in $LD_LIBRARY_PATH; do ls "$d"/libcudnn.so.9 2>/dev/null; done | head -1 || true)
        # (awk reads to the end: an early exit could SIGPIPE ldconfig, as above)
        [[ -n $cudnn ]] || cudnn=$(ldconfig -p 2>/dev/null | awk '!f && /libcudnn\.so\.9 /{print $NF; f = 1}' || true)
        # and its version as tessera's loader sees it (cudnnGetVersion, or why it cannot load):
        # the test's whole output first (a grep -m1 on its pipe would SIGPIPE the test's next line)
        local cudnn_test
        cudnn_test=$("$BUILD"/tests/test_cudnn_attn 2>/dev/null || true)
        echo "libcudnn: $(ldconfig -p 2>/dev/null | grep -c libcudnn.so.9 || true) in ldconfig; ${cudnn:-none}${cudnn:+ -> $(readlink -f "$cudnn")}; $(grep -m1 '^# cuDNN' <<<"$cudnn_test" || echo "# cuDNN: no line from test_cudnn_attn")"
    } | tee "$OUTDIR/probe.txt"
}

# op_test LOG [SANITIZER TOOL]: the GPU op test (alone, or under compute-sanitizer's TOOL); a
# sanitizer's finding fails the run as a wrong result does. Alone, wgmma's layouts first
# (test_wgmma_gpu, its log beside LOG as *-wgmma.txt, its outcome line at LOG's end): a failure
# there fails the stage and names the layout before the op test's wgmma attention cases, and its
# swap diagnosis lines follow the outcome line
op_test() {
    local log=$1 san=${2:-} tool=${3:-} wlog=${1%.txt}-wgmma.txt wrc=0 rc=0
    if [[ -z $san ]]; then
        if [[ -x $BUILD/tests/test_wgmma_gpu ]]; then
            limited "$wlog" "$BUILD/tests/test_wgmma_gpu" || wrc=$?
            ((wrc == 77)) && wrc=0
        fi
        limited "$log" "$BUILD/tests/test_gpu_ops" || rc=$?
        [[ -f $wlog ]] && echo "# wgmma layouts (test_wgmma_gpu, exit $wrc): $(outcome "$wlog" | head -1)" >>"$log"
        # which swap, if a check failed, and the program's own errors (a launch, a copy back)
        [[ -f $wlog ]] && { grep -E '^# (diagnosis|  )|^wgmma_(kernel|layouts):|^# a launch failed' \
            "$wlog" >>"$log" || true; }
        ((rc != 0)) && return "$rc"
        return "$wrc"
    else
        local leaks=()
        [[ $tool == memcheck ]] && leaks=(--leak-check full)
        limited "$log" "$san" --tool "$tool" --error-exitcode 99 --print-limit 100 "${leaks[@]}" \
            "$BUILD/tests/test_gpu_ops"
    fi
}

# outcome LOG: one line of what LOG says: TAP counts (ok / not ok of the plan), the sanitizer's
# ERROR SUMMARY, tests/run.sh's last line; then the first failing checks
outcome() {
    local plan
    plan=$(grep -m1 -oE '^1\.\.[0-9]+' "$1" | cut -c4- || true)
    if [[ -n $plan ]]; then
        printf '%s ok, %s not ok of %s planned' "$(grep -c '^ok ' "$1" || true)" \
            "$(grep -c '^not ok ' "$1" || true)" "$plan"
    fi
    { grep -hoE 'ERROR SUMMARY: [0-9]+ errors?|^racecheck: .*|^[0-9]+ passed, [0-9]+ failed.*' "$1" || true; } |
        tail -2 | sed 's/^/; /' | tr -d '\n'
    echo
    { grep -m5 -E '^not ok |^FAIL ' "$1" || true; } | sed 's/^/    /'
    grep -m1 -E '^# SKIP|^1\.\.0' "$1" || true
}

# race_vendor_only LOG: true when racecheck's exit 99 in LOG came from hazards in NVIDIA's library
# kernels alone, on an op test that ran to its end and passed. On the H200 (2026-11-26) racecheck
# reported 4 hazards, every one inside cuBLASLt's nvjet_sm90_* GEMM kernels (NVIDIA's closed code:
# not ours to change, and its products are checked against the CPU in the same run), none in
# tessera's kernels. Those fail the stage; these are named in the line it prints. It fails when:
# an op check failed or the plan was not completed (the run stopped early), the summary's
# hazard count is not the number of reports it read (an error of another kind, a line it could
# not parse), or a report names a kernel it does not know as NVIDIA's (counted as ours).
VENDOR_KERNELS='^(nvjet_|sm[0-9]+_xmma|cutlass_|splitKreduce_kernel)'
race_vendor_only() {
    local plan names ours n shown
    plan=$(grep -m1 -oE '^1\.\.[0-9]+' "$1" | cut -c4-)
    [[ -n $plan ]] && ((plan > 0)) || return 1
    grep -q '^not ok ' "$1" && return 1
    [[ $(grep -c '^ok ' "$1") == "$plan" ]] || return 1
    n=$(grep -c 'Race reported between' "$1")
    shown=$(sed -nE 's/.*RACECHECK SUMMARY: ([0-9]+) hazards? displayed.*/\1/p' "$1" | tail -1)
    ((n > 0)) && [[ $shown == "$n" ]] || return 1
    # one name per report line ("between R/W access at KERNEL+0x..", "and R/W access at KERNEL+0x.."),
    # a demangled one cut to its bare name ("void f<(int)4>(float *)" -> f)
    names=$(sed -nE 's/.*(Race reported between|and) (Read|Write) access at (.*)\+0x[0-9a-f]+.*/\3/p' "$1" |
                sed -E 's/^void //; s/[<( ].*//')
    [[ $(wc -l <<<"$names") == $((2 * n)) ]] || return 1
    names=$(sort -u <<<"$names")
    ours=$(grep -vE "$VENDOR_KERNELS" <<<"$names" || true)
    [[ -z $ours ]] || return 1
    echo "racecheck: $n hazard report(s), all inside NVIDIA's library kernels ($(paste -sd' ' <<<"$names")), none in tessera's"
}

# verdict RC: PASS (0), SKIP (77) or FAIL, for a summary line
verdict() { case $1 in 0) echo PASS ;; 77) echo SKIP ;; *) echo FAIL ;; esac; }

# recipe_int MODEL KEY: the whole number KEY = N; in configs/MODEL.cfg, or nothing
recipe_int() { sed -n "s/^ *$2 *= *\([0-9]*\);.*/\1/p" "configs/$1.cfg" | head -1; }

# ring_stage LOG: the ring stage: ring_bench, then its PyTorch peer at the same shape
# (bench/gpu/ring_torch.py under setup's python3-machine), one table in LOG; the peer's SKIP (no
# torch, or one without scaled_dot_product_attention) does not fail the stage
ring_stage() {
    local log=$1 rc=0 rt=0
    STEP_LIMIT_S=120 limited "$log" "$BUILD/bench/ring_bench" 8192 5 || rc=$?
    ((rc != 125)) || return 125
    STEP_LIMIT_S=120 limited "$log.torch" "$UNPACKED/python3-machine" bench/gpu/ring_torch.py 8192 5 || rt=$?
    cat "$log.torch" >>"$log" && rm -f "$log.torch"
    ((rc != 0 || rt == 0 || rt == 77)) || rc=$rt
    return "$rc"
}

# the stages of `check`, in their order
STAGES=(memcheck racecheck synccheck ops train ckpt ring account sdc)

check() {
    setup
    local want=("$@") st rc=0 r logs=$OUTDIR/check-logs san="" t0 not_run=() summary=$OUTDIR/check.txt
    ((${#want[@]})) || want=("${STAGES[@]}")
    for st in "${want[@]}"; do
        [[ " ${STAGES[*]} " == *" $st "* ]] || die "check: unknown stage '$st' (stages: ${STAGES[*]})"
    done
    mkdir -p "$logs"
    : >"$summary"
    for st in "${STAGES[@]}"; do
        [[ " ${want[*]} " == *" $st "* ]] || continue
        t0=$SECONDS r=0
        case $st in
            memcheck | racecheck | synccheck)
                [[ -n $san ]] || san=$(find_tool compute-sanitizer)
                if [[ -z $san ]]; then
                    echo "FAIL $st: no working compute-sanitizer (CUDA toolkit) on this machine" | tee -a "$summary"
                    rc=1; continue
                fi
                if [[ $st == memcheck && ${MEMCHECK_ALL:-1} == 1 ]]; then
                    CUDA_LAUNCH_BLOCKING=1 op_test "$logs/$st.txt" "$san" "$st" || r=$?
                else
                    CUDA_LAUNCH_BLOCKING=1 TSR_GPU_OPS_QUICK=1 op_test "$logs/$st.txt" "$san" "$st" || r=$?
                fi
                if [[ $st == racecheck ]] && ((r == 99)) && race_vendor_only "$logs/$st.txt" >"$logs/race.txt"; then
                    cat "$logs/race.txt" >>"$logs/$st.txt" && r=0
                fi
                rm -f "$logs/race.txt" ;;
            ops) op_test "$logs/$st.txt" || r=$? ;;
            train) limited "$logs/$st.txt" env TSR_TEST_EMULATOR="${TSR_TEST_EMULATOR:-0}" \
                       TESTS="${TRAIN_TESTS:-test_cuda_train test_cuda_lora test_cuda_dpo test_cuda_moe_ep test_cuda_muon test_cuda_context test_cuda_fp8 test_cuda_families test_cuda_mla test_cuda_mtp test_cuda_sdc}" \
                       bash tests/run.sh || r=$? ;;
            ckpt) limited "$logs/$st.txt" bash tests/gpu/ckpt_async_gpu.sh || r=$? ;;
            ring) ring_stage "$logs/$st.txt" || r=$? ;;
            account) limited "$logs/$st.txt" env TESTS="test_account_gpu" bash tests/run.sh || r=$? ;;
            sdc) limited "$logs/$st.txt" env DEVICE=cuda STEPS=21 REPS=1 bash bench/sdc_overhead.sh || r=$? ;;
        esac
        if ((r == 125)); then not_run+=("$st"); continue; fi
        ((r == 0)) || rc=1
        { printf '%s %s (%ds, exit %d): ' "$(verdict "$r")" \
              "$st" $((SECONDS - t0)) "$r"
          outcome "$logs/$st.txt"
          # (an if, not `[[ ]] &&`: a false test ended the group with status 1, and set -e the
          # whole call after the first stage that is not ring: seen on the H200, 2026-11-27)
          if [[ $st == ring || $st == sdc ]]; then grep -E '^\|' "$logs/$st.txt" | sed 's/^/    /' || true; fi
        } | tee -a "$summary"
    done
    if ((${#not_run[@]})); then
        rc=1
        echo "NOT RUN (out of time): ${not_run[*]}; next call: bash tests/gpu/device.sh check ${not_run[*]}" | tee -a "$summary"
    fi
    [[ -d $BUILD/test-logs ]] && cp -r "$BUILD/test-logs" "$logs/"
    tar -C "$OUTDIR" -czf "$OUTDIR/check-logs.tar.gz" check-logs && rm -rf "$logs"
    echo "logs: $OUTDIR/check-logs.tar.gz; summary: $summary"
    return $rc
}

bench() {
    (($# <= 1)) || die "bench: one model per call, so that each run ends inside the device's 10 minutes (got: $*)"
    setup
    local models=${1:-gpt2-124m} tag rc=0
    # (TSR_ATT_WGMMA=1 in the tag: the same model and SETS with and without it in one call)
    tag=$(printf '%s' "$models${SETS:+ $SETS}${TESSERA_ARGS:+ $TESSERA_ARGS}${TSR_ATT_WGMMA:+ wgmma$TSR_ATT_WGMMA}" | tr -c 'A-Za-z0-9_.-' '_' | cut -c1-60)
    # PyTorch under setup's python3-machine (bench/gpu/run.sh starts tessera with its own path)
    local py=$UNPACKED/python3-machine
    MODELS=$models BENCH_OUT=/tmp/bench-$tag PYTHON=$py limited "$OUTDIR/bench-$tag.txt" bash bench/gpu/run.sh || rc=$?
    cp "/tmp/bench-$tag/results.md" "$OUTDIR/results-$tag.md" 2>/dev/null || true
    tar -C /tmp -czf "$OUTDIR/bench-$tag.tar.gz" "bench-$tag"
    return $rc
}

# attn: the one-GPU attention kernel at Llama 3.1 8B's heads (hs 128, GQA 32 on 8) at each local
# length of ATTN_T (default 2048 4096 8192), the mma.sync kernels and the wgmma ones
# (TSR_ATT_WGMMA=1), then PyTorch's SDPA at that length (issue 51 item 4: the wgmma kernels
# timed against the peer): ring_bench's and ring_torch.py's tables in $OUTDIR/attn.txt. WINDOW=W
# (issue 67's sliding windows): each of them with W too (ring_bench: the window's row instead of
# the rings'; ring_torch.py: a window row after its own; the band's FLOPs, W T - W (W - 1) / 2
# pairs; the compile of flex_attention inside the peer's step limit). ATT_HEADS=NH/KVH/HS (issue
# 67; both benches read it): other heads, e.g. Gemma 3 12B's 16/8/256, the table then in
# attn-16-8-256.txt; the wgmma run only where hs has those kernels (64, 128). Where hs is 32, 64
# or 128, also cuDNN's fused attention (issue 66 item 1; TSR_ATTENTION=cudnn ring_bench: its
# plans' engines, workspaces and build times, the plain row, the backward's bits twice); ATTN_CUDNN=0
# leaves it out, ATTN_CUDNN=only runs it alone (the other rows of those T already measured)
attn() {
    setup
    local t rc=0 log=$OUTDIR/attn.txt w=() hs=128
    if [[ -n ${WINDOW:-} ]]; then
        [[ $WINDOW =~ ^[1-9][0-9]*$ ]] || die "WINDOW='$WINDOW': expected a whole number of positions"
        w=("$WINDOW")
    fi
    if [[ -n ${ATT_HEADS:-} ]]; then
        [[ $ATT_HEADS =~ ^[1-9][0-9]*/[1-9][0-9]*/(32|64|128|256)$ ]] ||
            die "ATT_HEADS='$ATT_HEADS': expected NH/KVH/HS, hs 32, 64, 128 or 256"
        export ATT_HEADS
        hs=${ATT_HEADS##*/} log=$OUTDIR/attn-${ATT_HEADS//\//-}.txt
    fi
    [[ ${ATTN_CUDNN:-1} =~ ^(0|1|only)$ ]] || die "ATTN_CUDNN='$ATTN_CUDNN': expected 0, 1 or only"
    local only=0
    [[ ${ATTN_CUDNN:-1} != only ]] || only=1 log=$OUTDIR/attn-cudnn.txt
    ((!only)) || [[ $hs =~ ^(32|64|128)$ ]] ||
        die "ATTN_CUDNN=only with head size $hs: cuDNN's phase-1 graphs take 32, 64 and 128"
    : >"$log"
    for t in ${ATTN_T:-2048 4096 8192}; do
        : >"$log.1"
        if ((!only)); then
            STEP_LIMIT_S=60 limited "$log.1" "$BUILD/bench/ring_bench" "$t" 5 ${w[@]+"${w[@]}"} || rc=1
        fi
        : >"$log.2"
        if ((!only)) && [[ $hs == 64 || $hs == 128 ]]; then # (an if: set -e; the wgmma kernels' sizes)
            STEP_LIMIT_S=60 limited "$log.2" env TSR_ATT_WGMMA=1 "$BUILD/bench/ring_bench" "$t" 5 ${w[@]+"${w[@]}"} || rc=1
        fi
        : >"$log.c"
        if [[ ${ATTN_CUDNN:-1} != 0 && $hs =~ ^(32|64|128)$ ]]; then # phase 1's head sizes
            STEP_LIMIT_S=90 limited "$log.c" env TSR_ATTENTION=cudnn "$BUILD/bench/ring_bench" "$t" 5 || rc=1
        fi
        : >"$log.3"
        if ((!only)); then
            STEP_LIMIT_S=120 limited "$log.3" "$UNPACKED/python3-machine" bench/gpu/ring_torch.py "$t" 5 ${w[@]+"${w[@]}"} || rc=1
        fi
        cat "$log.1" "$log.2" "$log.c" "$log.3" >>"$log" && rm -f "$log".[123c]
    done
    return $rc
}

# bench_table NAME SCRIPT: setup, then bash SCRIPT (its settings in the environment) under
# limited, its log in $OUTDIR/NAME.txt and its table's rows in $OUTDIR/NAME.md
bench_table() {
    setup
    local rc=0
    limited "$OUTDIR/$1.txt" bash "$2" || rc=$?
    grep -E '^\|' "$OUTDIR/$1.txt" >"$OUTDIR/$1.md" || true
    return $rc
}

# deltanet: the Gated DeltaNet core (issue 68) against its PyTorch peer (bench/gpu/deltanet_gpu.sh,
# the peer under setup's python3-machine), its table in $OUTDIR/deltanet.md, its log deltanet.txt
deltanet() {
    BENCH=$BUILD/bench/deltanet_gpu PYTHON=$UNPACKED/python3-machine TS="${DN_T:-4096 16384}" \
        STEP_LIMIT_S=450 bench_table deltanet bench/gpu/deltanet_gpu.sh
}

# hybrid: a hybrid training step (issue 68) beside transformers' Qwen3NextForCausalLM
# (bench/gpu/hybrid_step.sh, the peer under setup's python3-machine), its table in
# $OUTDIR/hybrid.md, its log hybrid.txt
hybrid() {
    BENCH_TRAIN=$BUILD/tessera-train PYTHON=$UNPACKED/python3-machine STEPS="${HYB_STEPS:-12}" \
        STEP_LIMIT_S=120 bench_table hybrid bench/gpu/hybrid_step.sh
}

# GRPO's rollout decode against transformers' generate (bench/gpu/gen_vs_hf.sh), its table in
# $OUTDIR/results-gen.md and its logs in gen.tar.gz
gen() {
    setup
    local rc=0
    BENCH_OUT=/tmp/bench-gen PYTHON=$UNPACKED/python3-machine DECODE_GEMM="${DECODE_GEMM:-0 1}" \
        limited "$OUTDIR/gen.txt" bash bench/gpu/gen_vs_hf.sh || rc=$?
    cp /tmp/bench-gen/results.md "$OUTDIR/results-gen.md" 2>/dev/null || true
    tar -C /tmp --exclude=bench-gen/work -czf "$OUTDIR/gen.tar.gz" bench-gen
    return $rc
}

# the checker's GPU mode as a node runs it: the GPU half of test_hc_gpu.sh (with its injected
# faults), then the shipped healthcheck.cfg's --quick and --full on this GPU (gpu_count set to
# the GPUs present), each timed, with its --json report (the measured GEMM TFLOP/s, HBM GB/s and
# NCCL figures beside the thresholds)
hc() {
    setup
    local rc=0 r n mode cfg=$OUTDIR/hc-logs/healthcheck.cfg t0
    mkdir -p "$OUTDIR/hc-logs"
    limited "$OUTDIR/hc-logs/test_hc_gpu.txt" env TESTS=test_hc_gpu bash tests/run.sh || rc=1
    n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
    sed -E "s/gpu_count( *)= \{ expected = [0-9.]+;/gpu_count\1= { expected = ${n:-0}.0;/" \
        healthcheck/healthcheck.cfg >"$cfg"
    for mode in quick full; do
        t0=$SECONDS r=0
        SLURMD_NODENAME=gpu0 limited "$OUTDIR/hc-logs/$mode.txt" "$BUILD/tessera-healthcheck" \
            --config "$cfg" --gpu on "--$mode" --json "$OUTDIR/hc-logs/$mode.json" || r=$?
        ((r == 0)) || rc=1
        echo "$mode: exit $r in $((SECONDS - t0)) s (the target: quick <= 10 s, full <= 120 s)" \
            >>"$OUTDIR/hc-logs/summary.txt"
    done
    cp "$OUTDIR/hc-logs/summary.txt" "$OUTDIR/hc.txt"
    tar -C "$OUTDIR" -czf "$OUTDIR/hc-logs.tar.gz" hc-logs && rm -rf "$OUTDIR/hc-logs"
    cat "$OUTDIR/hc.txt"
    return $rc
}

# Per-op device times of MODEL's steps at the bench's shapes, each run limited (PROFILE_RUNS
# names the runs, default all of them: PROFILE_ALL and ncu):
#  base         TSR_PROFILE=1 (CUDA events around every op of the backend table, no hardware
#               counters): profile-MODEL.txt, steps 2-8 of 8, then the GEMMs' cuBLASLt algorithms
#               (tile, stages, split-K and its reduction: tcu_matmul_report);
#  the same with one measurement switch (issue 25; docs/cuda.md), profile-MODEL-NAME.txt:
#  accumulate   TSR_GRAD_OVERWRITE=0: input gradients zeroed, then accumulated (item 1);
#  unfused      TSR_DGELU_FUSION=0: the GELU backward as its own kernel (item 1);
#  splitk-none  TSR_GEMM_REDUCTION=none: no split-K GEMMs (item 4);
#  splitk-any   TSR_GEMM_REDUCTION=any: cuBLASLt's own split-K choice, bf16 partials allowed (item 4);
#  rows32       TSR_ATT_WARP_ROWS=32: 32 rows a warp in the attention kernels (item 2; hs <= 64);
#  xent-resident  TSR_XENT_RESIDENT=1: softmax + cross-entropy with each row in registers;
#  dq-fused     TSR_ATT_DQ_FUSED=1: dq added by the attention backward's dk/dv kernel;
#  dq-fused32   TSR_ATT_DQ_FUSED=1 TSR_ATT_WARP_ROWS=32: the same with 32 rows a warp (128-key
#               blocks: half the fp32 dq traffic per product);
#  norm-hold    TSR_NORM_HOLD=1: every held norm backward (item 1): RMSNorm's, and LayerNorm's at
#               768 < C <= 1024 (the default holds LayerNorm's rows up to C = 768 only);
#  norm-twice   TSR_NORM_HOLD=0: neither does (the old default, for LayerNorm's gain);
#  gemm-tune    TSR_GEMM_TUNE=$OUTDIR/gemm-tune-MODEL.txt (new each time): every GEMM shape timed
#               over cuBLASLt's first 8 answers on its first call (step 1, which the table drops),
#               the fastest kept, the choices written to that file (item 4);
#  wgmma        TSR_ATT_WGMMA=1: the attention kernels on wgmma (sm_90a, hs 64/128; issue 25 item 2);
#  again        the defaults once more, last: how far two runs of one build differ (the noise
#               that bench/gpu/profile_compare.py, printed at the end, marks each change against);
#  ncu          ncu's per-kernel summary (count, average duration) over 3 steps at the clocks and
#               with the caches as in a real run, where ncu runs and is allowed the counters:
#               profile-MODEL-ncu.txt.
# More settings for tessera-train: SETS="KEY=VALUE ..." (as bench's, e.g. seq_len=2048) and TESSERA_ARGS.
PROFILE_ALL="base accumulate unfused splitk-none splitk-any rows32 xent-resident dq-fused dq-fused32 norm-hold norm-twice gemm-tune wgmma again"
profile() {
    setup
    local model=${1:-gpt2-124m} ncu data=/tmp/profile-data V kv rc=0 ptag
    # the files' name: the model, and SETS when given (two profiles at different T in one call)
    ptag=$model${SETS:+_$(printf '%s' "$SETS" | tr -c 'A-Za-z0-9_.-' '_' | cut -c1-60)}
    V=$(recipe_int "$model" vocab_size)
    [[ -d $data/train ]] || "$BUILD/tessera" synth --out "$data" --vocab "${V:-50257}" --val-tokens 0 --seed 1 --quiet
    # the bench's shapes (bench/gpu/run.sh: its micro batch, else the recipe's; one microbatch a
    # step), so that the table accounts for its step time
    local mb
    mb=$(PYTHON=true bash bench/gpu/run.sh --micro-batch "$model")
    [[ -n $mb ]] || mb=$(recipe_int "$model" micro_batch)
    local run=("$BUILD/tessera-train" --config "configs/$model.cfg" --set device=cuda
               --set data.train="$data/train" --set data.val= --set eval_interval=0ba
               --set save_interval=0ba --set sample.tokens=0 --set run_dir=/tmp/profile-run)
    [[ -z $mb ]] || run+=(--set micro_batch="$mb" --set global_batch="$mb")
    for kv in ${SETS:-} ${TESSERA_ARGS:-}; do run+=(--set "$kv"); done
    # the runs PROFILE_RUNS names, each with its measurement switch (docs/cuda.md)
    local runs=" ${PROFILE_RUNS:-$PROFILE_ALL ncu} " kinds=() name sfx
    local -A switch=([base]="" [accumulate]=TSR_GRAD_OVERWRITE=0 [unfused]=TSR_DGELU_FUSION=0
                     [splitk-none]=TSR_GEMM_REDUCTION=none [splitk-any]=TSR_GEMM_REDUCTION=any
                     [rows32]=TSR_ATT_WARP_ROWS=32 [xent-resident]=TSR_XENT_RESIDENT=1
                     [dq-fused]=TSR_ATT_DQ_FUSED=1
                     [dq-fused32]="TSR_ATT_DQ_FUSED=1 TSR_ATT_WARP_ROWS=32"
                     [norm-hold]=TSR_NORM_HOLD=1 [norm-twice]=TSR_NORM_HOLD=0 [again]=""
                     [wgmma]=TSR_ATT_WGMMA=1
                     [gemm-tune]=TSR_GEMM_TUNE=$OUTDIR/gemm-tune-$ptag.txt)
    rm -f "$OUTDIR/gemm-tune-$ptag.txt" "$OUTDIR/profile-$ptag.txt" "$OUTDIR/profile-$ptag"-*.txt
    for name in $PROFILE_ALL; do
        [[ $runs == *" $name "* ]] || continue
        sfx=-$name && [[ $name != base ]] || sfx=""
        rm -rf /tmp/profile-run
        (export TSR_PROFILE=1 ${switch[$name]}
         limited "$OUTDIR/profile-$ptag$sfx.txt" "${run[@]}" --set max_duration=8ba) || rc=1
        kinds+=("$sfx")
    done
    rm -rf /tmp/profile-run
    ncu=$(find_tool ncu)
    if [[ $runs != *" ncu "* ]]; then
        :
    elif [[ -z $ncu ]]; then
        echo "no working ncu (Nsight Compute) on this machine: the event profile above stands alone" |
            tee "$OUTDIR/profile-$ptag-ncu.txt"
    else
        limited "$OUTDIR/profile-$ptag-ncu.txt" "$ncu" --metrics gpu__time_duration.sum \
            --print-summary per-kernel --clock-control none --cache-control none "${run[@]}" \
            --set max_duration=3ba >/dev/null || echo "ncu exited (see profile-$ptag-ncu.txt)"
        tail -60 "$OUTDIR/profile-$ptag-ncu.txt"
    fi
    for kv in "${kinds[@]}"; do
        echo "== profile-$ptag$kv.txt"
        awk '/TSR_PROFILE device time per op/ { on = 1 } on && n++ < 40' "$OUTDIR/profile-$ptag$kv.txt"
        # the GEMMs' algorithms (tcu_matmul_report): does the heuristic split K, and where
        grep -h '^cuBLASLt: \|^TSR_GEMM_TUNE: ' "$OUTDIR/profile-$ptag$kv.txt" || true
    done
    # the runs side by side, each against the defaults (and the noise, with `again`); the runs
    # without a table (failed, or not started for time) are left out
    local files=() table='TSR_PROFILE device time per op'
    for kv in "${kinds[@]}"; do
        [[ -n $kv ]] && grep -qs "$table" "$OUTDIR/profile-$ptag$kv.txt" &&
            files+=("$OUTDIR/profile-$ptag$kv.txt")
    done
    if grep -qs "$table" "$OUTDIR/profile-$ptag.txt" && ((${#files[@]})); then
        echo "== profile-$ptag-compare.txt"
        python3 bench/gpu/profile_compare.py "$OUTDIR/profile-$ptag.txt" "${files[@]}" \
            >"$OUTDIR/profile-$ptag-compare.txt" || rc=1
        cat "$OUTDIR/profile-$ptag-compare.txt"
    fi
    return $rc
}

# multirank: issue 52's checks of several ranks on the one GPU, through parallel.gpu_comm =
# "mpi" (the staged transport; docs/cuda.md "Several ranks on one GPU") with the bundle's MPI
# trainer and OpenMPI runtime, in one call of MULTIRANK_S (default 300 s; give the tool's
# timeout_s 360). Its steps, in this order, each limited, all together within their stage's
# limit, going on past a failure:
#   tests     (215 s) the GPU halves with TSR_TEST_GPU_COMM=mpi (ranks share the GPU), each test
#             on its own: test_gpu_comm_staged.sh (2 ranks against 1; a 2-rank run SIGKILLed after
#             its step-10 checkpoint, resumed at 1 and at 4 ranks), test_cuda_train.sh (ddp on 2,
#             zero1 and zero3 on 3, hsdp 2 x 2 against the CPU's ranks, checkpoints across modes
#             and rank counts, checkpointing under zero3 on 2), test_cuda_moe_ep.sh (EP = 2, 4),
#             test_cuda_lora.sh, test_cuda_dpo.sh (2 and 4 ranks), test_cuda_tensor.sh (TP 2, 2 x 2),
#             test_cuda_pipeline.sh (2 pipeline stages on the one GPU; 2 x 2 data ranks on 4),
#             test_cuda_mla_context.sh (MLA's latent ring, CP 2; 2 x 2 with zero3 on 4),
#             test_cuda_moe_bias.sh (DeepSeek's balancing step under zero1/zero3/hsdp on 2)
#             (MULTIRANK_TESTS: the tests to run, default these nine; empty: none)
#   sanitize  (50 s, MULTIRANK_SAN_S) a 2-rank training run on the GPU under compute-sanitizer:
#             memcheck, synccheck (tiny.cfg with 3 heads: head size 64, one the GPU's kernels have)
#   nccl      (25 s) the health checker's --full on the GPU, --burn 1: its one-rank NCCL
#             all-reduce (issue 52 item 4: what one GPU can say of NCCL)
# $OUT: multirank.txt (a line a step), multirank-logs.tar.gz, probe.txt.
multirank() {
    CALL_LIMIT_S=${MULTIRANK_S:-300}
    [[ $CALL_LIMIT_S =~ ^[1-9][0-9]*$ ]] || die "MULTIRANK_S='$CALL_LIMIT_S': expected a whole number of seconds"
    setup >/dev/null
    mpi_setup >/dev/null
    local logs=$OUTDIR/multirank-logs summary=$OUTDIR/multirank.txt rc=0 r t0 t st san
    mkdir -p "$logs"
    echo "multirank (MULTIRANK_S=$CALL_LIMIT_S) on $(sed -n 2p "$OUTDIR/probe.txt"); $(grep '^MPI: ' "$OUTDIR/probe.txt")" | tee "$summary"
    STAGE_END=$((SECONDS + 215))
    for t in ${MULTIRANK_TESTS-test_gpu_comm_staged test_cuda_train test_cuda_moe_ep test_cuda_lora test_cuda_dpo test_cuda_tensor test_cuda_pipeline test_cuda_mla_context test_cuda_moe_bias}; do
        t0=$SECONDS r=0
        limited "$logs/$t.txt" env TSR_TEST_EMULATOR=0 TSR_TEST_GPU_COMM=mpi TESTS="$t" bash tests/run.sh >/dev/null || r=$?
        [[ -f $BUILD/test-logs/tests_gpu_$t.sh.log ]] && cp "$BUILD/test-logs/tests_gpu_$t.sh.log" "$logs/"
        mr_line "$t" "$r" "$t0" "$logs/tests_gpu_$t.sh.log" | tee -a "$summary"
        ((r == 0 || r == 125)) || rc=1
    done
    STAGE_END=$((SECONDS + ${MULTIRANK_SAN_S:-50}))
    san=$(find_tool compute-sanitizer)
    local data=/tmp/multirank-data
    [[ -d $data/train ]] || "$BUILD/tessera" synth --out "$data" --vocab 512 --tokens 60000 --seed 1 --quiet
    for st in memcheck synccheck; do
        t0=$SECONDS r=0
        if [[ -z $san ]]; then
            echo "no working compute-sanitizer" >"$logs/$st.txt"
            r=2
        else
            rm -rf "/tmp/multirank-$st"
            limited "$logs/$st.txt" bash tests/mpi_env.sh mpirun -np 2 "$san" --tool "$st" --error-exitcode 99 \
                --print-limit 50 "$BUILD/tessera-train" --config configs/tiny.cfg --set device=cuda \
                --set parallel.gpu_comm=mpi --set model.vocab_size=512 --set data.tokenizer= \
                --set data.train="$data/train" --set data.val= --set eval_interval=0ba \
                --set sample.tokens=0 --set model.n_layer=2 --set model.n_head=3 --set seq_len=32 \
                --set model.max_seq_len=32 --set global_batch=8 --set micro_batch=2 \
                --set max_duration=3ba --set save_interval=3ba --set watchdog.window=0 \
                --set run_dir="/tmp/multirank-$st" >/dev/null || r=$?
        fi
        mr_line "sanitize $st (2 ranks, 3 steps)" "$r" "$t0" "$logs/$st.txt" | tee -a "$summary"
        ((r == 0 || r == 125)) || rc=1
    done
    STAGE_END=$((SECONDS + 25))
    t0=$SECONDS r=0
    local n
    n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
    sed -E -e "s/gpu_count( *)= \{ expected = [0-9.]+;/gpu_count\1= { expected = ${n:-0}.0;/" \
        -e 's/allreduce_mib = (16384|4096|1024);/allreduce_mib = 256;/' healthcheck/healthcheck.cfg >"$logs/hc.cfg"
    SLURMD_NODENAME=gpu0 limited "$logs/nccl.txt" "$UNPACKED/build/tessera-healthcheck" --config "$logs/hc.cfg" \
        --gpu on --full --burn 1 >/dev/null || r=$?
    { printf '%s nccl: the health checker --full --burn 1 (%ds, exit %d): ' "$(verdict "$r")" $((SECONDS - t0)) "$r"
      { grep -h '^# not measured: \|nccl_node' "$logs/nccl.txt" || true; } | head -2 | tr '\n' ' '; echo; } | tee -a "$summary"
    unset STAGE_END
    tar -C "$OUTDIR" -czf "$OUTDIR/multirank-logs.tar.gz" multirank-logs && rm -rf "$logs"
    echo "logs: $OUTDIR/multirank-logs.tar.gz; summary: $summary"
    return $rc
}

# mr_line WHAT RC T0 LOG: multirank's summary line of a step: verdict, seconds, exit, what LOG says
mr_line() {
    if (($2 == 125)); then echo "NOT RUN $1: out of time (the stage's or the call's limit)"; return; fi
    printf '%s %s (%ds, exit %d): ' "$(verdict "$2")" "$1" $((SECONDS - $3)) "$2"
    if [[ -f $4 ]]; then outcome "$4"; else echo "(no log)"; fi
}

pack_clients() {
    local b=${BUILD:-build}
    make BUILD="$b" -j"$(nproc)" "$b/tessera" "$b/tessera-train" "$b/tests/ref_dump"
    BUILD=$b python3_here tests/gpu/clients_prep.py .devbundle/clients
    echo "next: a device run with carry [\".devbundle\"] and the command 'bash tests/gpu/device.sh clients'"
}

# python3_here: Debian's (torch, h5py), else the first on PATH
python3_here() { if [[ -x /usr/bin/python3 ]]; then /usr/bin/python3 "$@"; else python3 "$@"; fi; }

# transformers and TensorBoard as clients of what pack-clients made (no tessera program runs here:
# the bundle is not needed). The perturbed run must fail, naming the model, or the check is blind.
clients() {
    local dir=$ROOT/.devbundle/clients logs=$OUTDIR/clients-logs rc=0 r=0
    [[ -f $dir/manifest.json ]] || die "no $dir: run 'bash tests/gpu/device.sh pack-clients' where tessera builds, then carry .devbundle"
    mkdir -p "$logs"
    # PyTorch with the machine's own libraries: after setup (firstlight) the bundle's Debian ones
    # come first on LD_LIBRARY_PATH
    local py=(python3)
    [[ -z ${SETUP_DONE:-} ]] || py=("$UNPACKED/python3-machine")
    limited "$logs/real_clients.txt" "${py[@]}" tests/gpu/real_clients.py "$dir" "$OUTDIR" || rc=$?
    limited "$logs/perturbed.txt" "${py[@]}" tests/gpu/real_clients.py "$dir" "$logs/perturbed-out" --perturb gpt2 || r=$?
    rm -rf "$logs/perturbed-out"
    local blind=1
    ((r == 1)) && grep -q '^not ok .* gpt2: AutoModel' "$logs/perturbed.txt" && blind=0
    {
        printf '%s real_clients (exit %d): ' "$( ((rc)) && echo FAIL || echo PASS)" "$rc"
        outcome "$logs/real_clients.txt"
        # what was skipped inside the run, with its reason (a family class this transformers
        # lacks, a model tessera does not export yet)
        { grep -E '^ok .* # SKIP ' "$logs/real_clients.txt" || true; } | head -12 | cut -c1-300 | sed 's/^/    /'
        if ((blind)); then
            echo "FAIL --perturb gpt2: exit $r, expected 1 with the gpt2 logits check failing"
        else
            echo "PASS --perturb gpt2 fails the gpt2 logits check (exit 1)"
        fi
    } | tee "$OUTDIR/clients.txt"
    tar -C "$OUTDIR" -czf "$OUTDIR/clients-logs.tar.gz" clients-logs && rm -rf "$logs"
    if [[ -f $OUTDIR/hf-transformers.tar.gz ]]; then
        echo "fixtures: $OUTDIR/hf-transformers.tar.gz (tar -C tests/fixtures -xzf it to commit them)"
    else
        echo "no hf-transformers.tar.gz written"
    fi
    ((rc == 0 && blind == 0))
}

# firstlight [STAGE...]: the device session in one call. The device tool lends 15 minutes a
# session, the machine's start (a minute or more) included: one call of FIRSTLIGHT_S (default
# 420 s; give the tool's timeout_s 480) leaves time to fix what it finds and run it again. The
# stages, in this order (default: the first five), each under its own limit (all its runs
# together: STAGE_END), going on past a failure; one not started for time is named with the
# command that runs it:
#   ops       the op test, every case (asynchronous, as in a step)                       90 s
#   train     test_cuda_train.sh, test_cuda_lora.sh, test_cuda_dpo.sh, test_cuda_muon.sh, test_cuda_fp8.sh,
#             test_cuda_families.sh: their GPU halves (TSR_TEST_EMULATOR=0)              180 s
#   bench     bench/gpu/run.sh for gpt2-124m (STEPS=10 WARMUP=3 unless set)               180 s
#   profile   TSR_PROFILE=1 for gpt2-124m, then with TSR_GRAD_OVERWRITE=0, TSR_DGELU_FUSION=0,
#             TSR_GEMM_REDUCTION=none and =any, TSR_ATT_WARP_ROWS=32, TSR_XENT_RESIDENT=1,
#             TSR_ATT_DQ_FUSED=1 alone and with TSR_ATT_WARP_ROWS=32, TSR_NORM_HOLD=1
#             and =0, TSR_GEMM_TUNE (twelve runs)                                    120 s
#   clients   real_clients.py over .devbundle/clients (pack-clients), the perturbed run  120 s
#             (25 s on the H200 for five exports and five fixtures; with the issue 67/68
#             families, ten exports and twelve fixtures, ~60 s by estimate, not yet measured)
#   sanitize  memcheck, racecheck and synccheck on the op test's reduced cases           240 s
#   hc        the health checker's GPU mode                                             150 s
#   attn      issue 66 item 1: `attn` (ATTN_T, default 2048 4096 8192): the own kernels,
#             wgmma, cuDNN (TSR_ATTENTION=cudnn) and SDPA at Llama 3.1 8B's heads          150 s
#   fp8       issue 66 item 2: `bench llama-3.2-1b` with precision.fp8 = "tensorwise"
#             beside PyTorch bf16 (SETS adds to it)                                        200 s
#   gen       issue 66 item 3: `gen` at BATCHES (default 16 64), TSR_DECODE_GEMM 0 and 1,
#             beside transformers' generate                                              150 s
# TRAIN_TESTS names the train stage's tests instead of its six. Issue 66's call, in one (item 4):
# `FIRSTLIGHT_S=480 TRAIN_TESTS=test_cuda_fp8 bash tests/gpu/device.sh firstlight ops train attn
# fp8 gen` (timeout_s 540; the stages in the order above: ops, train, then attn, fp8, gen).
# $OUT holds at most 5 files (8 with the issue 66 stages: results-attn.txt, results-fp8.md,
# results-gen.md), rewritten after every stage (a call cut off keeps what was done): probe.txt,
# firstlight.txt (a line or more a stage), firstlight-logs.tar.gz (every log and table),
# results-gpt2-124m.md and hf-transformers.tar.gz.

# bench_rows DIR: the bench's table (header and rows) and its lines about failed runs, from DIR's
# results-gpt2-124m*.md; fails when there is none or tessera measured nothing ("—")
bench_rows() {
    local md
    md=$(ls "$1"/results-gpt2-124m*.md 2>/dev/null | head -1)
    [[ -n $md ]] || { echo "no results table (see bench-*.txt in the logs)"; return 1; }
    grep -E '^\| model|^\| gpt2-124m|^gpt2-124m: ' "$md" || true
    awk -F'|' '$2 ~ /gpt2-124m/ { gsub(/ /, "", $6); if ($6 != "" && $6 != "—") ok = 1 } END { exit !ok }' "$md"
}

FL_STAGES=(ops train attn fp8 gen bench profile clients sanitize hc)
FL_DEFAULT=(ops train bench profile clients)
declare -A FL_LIMIT=([ops]=90 [train]=180 [bench]=180 [profile]=120 [clients]=120 [sanitize]=240 [hc]=150
                     [attn]=150 [fp8]=200 [gen]=150)
FL_TRAIN_TESTS="test_cuda_train test_cuda_lora test_cuda_dpo test_cuda_muon test_cuda_fp8 test_cuda_families"

# fl_issue66 STAGE WORK OUT: firstlight's issue 66 stages (attn, fp8, gen), their tables into OUT
fl_issue66() {
    local st=$1 work=$2 out=$3 r=0
    case $st in
        attn) ATTN_T=${ATTN_T:-2048 4096 8192} attn >/dev/null || r=$?
              # (attn.txt, or attn-NH-KVH-HS.txt / attn-cudnn.txt with ATT_HEADS / ATTN_CUDNN=only)
              cat "$work"/attn*.txt >"$out/results-attn.txt" 2>/dev/null || true ;;
        fp8) SETS="precision.fp8=tensorwise${SETS:+ $SETS}" STEPS=${STEPS:-10} WARMUP=${WARMUP:-3} \
                 bench llama-3.2-1b >/dev/null || r=$?
             cp "$(ls "$work"/results-llama-3.2-1b*.md 2>/dev/null | head -1)" "$out/results-fp8.md" 2>/dev/null || true ;;
        gen) BATCHES=${BATCHES:-16 64} gen >/dev/null || r=$?
             cp "$work/results-gen.md" "$out/" 2>/dev/null || true ;;
    esac
    return $r
}

firstlight() {
    local want=("$@") st r t0 out=$OUTDIR work=/tmp/firstlight-work not_run=() rc=0
    ((${#want[@]})) || want=("${FL_DEFAULT[@]}")
    for st in "${want[@]}"; do
        [[ -n $st && -n ${FL_LIMIT[$st]:-} ]] || die "firstlight: unknown stage '$st' (stages: ${FL_STAGES[*]})"
    done
    CALL_LIMIT_S=${FIRSTLIGHT_S:-420}
    [[ $CALL_LIMIT_S =~ ^[1-9][0-9]*$ ]] || die "FIRSTLIGHT_S='$CALL_LIMIT_S': expected a whole number of seconds"
    rm -rf "$work" && mkdir -p "$work" "$out"
    OUTDIR=$work
    setup >/dev/null
    cp "$work/probe.txt" "$out/probe.txt"
    local summary=$out/firstlight.txt
    # the logs so far into $OUT, replacing the last tarball whole
    pack_logs() {
        tar -C /tmp -czf "$out/firstlight-logs.tar.gz.tmp" firstlight-work &&
            mv "$out/firstlight-logs.tar.gz.tmp" "$out/firstlight-logs.tar.gz"
    }
    echo "firstlight: ${want[*]} (FIRSTLIGHT_S=$CALL_LIMIT_S) on $(head -2 "$work/probe.txt" | tail -1)" | tee "$summary"
    for st in "${FL_STAGES[@]}"; do
        [[ " ${want[*]} " == *" $st "* ]] || continue
        if ((CALL_LIMIT_S - (SECONDS - T0) < 40)); then not_run+=("$st"); continue; fi
        t0=$SECONDS r=0 STAGE_END=$((SECONDS + ${FL_LIMIT[$st]}))
        touch "$work/.stage-start"
        case $st in
            ops) op_test "$work/ops.txt" || r=$? ;;
            train) limited "$work/train.txt" env TSR_TEST_EMULATOR=0 TESTS="${TRAIN_TESTS:-$FL_TRAIN_TESTS}" \
                       bash tests/run.sh || r=$?
                   [[ -d $BUILD/test-logs ]] && cp -r "$BUILD/test-logs" "$work/" ;;
            bench) STEPS=${STEPS:-10} WARMUP=${WARMUP:-3} bench gpt2-124m >/dev/null || r=$?
                   bench_rows "$work" >"$work/bench-rows.txt" || ((r)) || r=1
                   cp "$work"/results-gpt2-124m*.md "$out/" 2>/dev/null || true ;;
            profile) PROFILE_RUNS=$PROFILE_ALL profile gpt2-124m >"$work/profile-tables.txt" || r=$? ;;
            clients) if [[ -f $ROOT/.devbundle/clients/manifest.json ]]; then
                         clients >/dev/null || r=$?
                         mv "$work/hf-transformers.tar.gz" "$out/" 2>/dev/null || true
                     else
                         echo "no .devbundle/clients: run 'bash tests/gpu/device.sh pack-clients' where tessera builds" >"$work/clients.txt"
                         r=2
                     fi ;;
            sanitize) MEMCHECK_ALL=0 check memcheck racecheck synccheck >/dev/null || r=$? ;;
            hc) hc >/dev/null || r=$? ;;
            attn | fp8 | gen) fl_issue66 "$st" "$work" "$out" || r=$? ;;
        esac
        unset STAGE_END
        if ((r == 125)); then not_run+=("$st"); continue; fi
        ((r == 0)) || rc=1
        { printf '%s %s (%ds, exit %d)' "$(verdict "$r")" \
              "$st" $((SECONDS - t0)) "$r"
          case $st in
              ops | train) printf ': '; outcome "$work/$st.txt" ;;
              bench) echo; sed 's/^/    /' "$work/bench-rows.txt" ;;
              profile) echo; { awk '/TSR_PROFILE device time per op/ { on = 1 } on && n++ < 14' \
                                   "$work/profile-gpt2-124m.txt" 2>/dev/null || true
                               cat "$work/profile-gpt2-124m-compare.txt" 2>/dev/null || true
                               grep -H '^cuBLASLt: ' "$work"/profile-gpt2-124m*.txt 2>/dev/null |
                                   sed "s|^$work/||" || true; } | sed 's/^/    /' ;;
              clients) echo; sed 's/^/    /' "$work/clients.txt" 2>/dev/null ;;
              sanitize) echo; sed 's/^/    /' "$work/check.txt" 2>/dev/null ;;
              hc) echo; sed 's/^/    /' "$work/hc.txt" 2>/dev/null ;;
              attn) echo; grep -iE 'cudnn|TFLOP|sdpa' "$out/results-attn.txt" 2>/dev/null | head -24 | sed 's/^/    /' ;;
              fp8) echo; grep -E '^\|' "$out/results-fp8.md" 2>/dev/null | sed 's/^/    /' ;;
              gen) echo; grep -E '^\|' "$work/results-gen.md" 2>/dev/null | sed 's/^/    /' ;;
          esac
          # a step of this stage its limit left out (limited's "not started" log, written since)
          { find "$work" -name '*.txt' -newer "$work/.stage-start" -exec grep -l '^not started: ' {} + 2>/dev/null || true; } |
              sed "s|^$work/|    not started for time: |"; } | tee -a "$summary" || true
        pack_logs
    done
    if ((${#not_run[@]})); then
        rc=1
        echo "NOT RUN (out of time): ${not_run[*]}; next call: bash tests/gpu/device.sh firstlight ${not_run[*]}" | tee -a "$summary"
    fi
    pack_logs
    echo "in \$OUT: $(cd "$out" && ls | tr '\n' ' ')"
    echo "== summary"
    cat "$summary"
    return $rc
}

case ${1:-} in
    pack) pack ;;
    pack-clients) pack_clients ;;
    clients) clients ;;
    check) shift; check "$@" ;;
    bench) shift; bench "$@" ;;
    hc) hc ;;
    gen) gen ;;
    attn) attn ;;
    deltanet) deltanet ;;
    hybrid) hybrid ;;
    profile) shift; profile "$@" ;;
    firstlight) shift; firstlight "$@" ;;
    multirank) multirank ;;
    race-verdict) (($# == 2)) || die "race-verdict: expected one racecheck log"; race_vendor_only "$2" ;;
    *) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
