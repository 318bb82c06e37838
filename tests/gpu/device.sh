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
#   there:  bash tests/gpu/device.sh check          the GPU op test, tests/gpu/test_cuda_train.sh and test_cuda_lora.sh
#                                                   (its GPU half and the emulator's), ~5 min
#           bash tests/gpu/device.sh bench [MODEL...]   bench/gpu/run.sh (tessera vs PyTorch) for
#                                                   MODELs (default gpt2-124m); its settings from
#                                                   the environment (TESSERA_ARGS, MICRO_BATCH, ...)
#           bash tests/gpu/device.sh profile [MODEL]    per-kernel times of tessera's steps (ncu)
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

# Libraries the GPU machine provides itself (C runtime, CUDA toolkit and driver; NCCL comes from
# PyTorch's wheels there): never carried. Everything else a program loads is.
SKIP_RE='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|librt\.so|libpthread\.so|libgcc_s\.so|libstdc\+\+\.so|libresolv\.so|libutil\.so|libcuda\.so|libnvidia-|libcudart\.so|libcublas|libcublasLt|libnccl|libcudnn|libnvrtc|libnvJitLink)'

pack() {
    command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]] ||
        die "pack needs nvcc (the CUDA toolkit) to build the GPU library"
    local b=build-device stage
    local progs=("$b/tessera-train" "$b/tessera" "$b/libtessera-cuda-train.so" "$b/tests/test_gpu_ops"
                 "$b/tests/tessera-train-cuemu")
    make NO_MPI=1 ARCH=x86-64-v3 BUILD="$b" -j"$(nproc)" "${progs[@]}"
    stage=$(mktemp -d)
    mkdir -p "$stage/build/tests" "$stage/lib"
    local p name path
    for p in "${progs[@]}"; do
        cp -L "$p" "$stage/build/${p#"$b"/}"
        strip --strip-debug "$stage/build/${p#"$b"/}"
        while read -r name path; do
            [[ $name =~ $SKIP_RE ]] || cp -Ln "$path" "$stage/lib/$name"
        done < <(ldd "$p" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}')
        if ldd "$p" | grep -q 'not found'; then die "$p has libraries missing here: $(ldd "$p" | grep 'not found')"; fi
    done
    local version
    version="$(git describe --always --dirty 2>/dev/null || echo unknown) $(date -u +%FT%TZ)"
    echo "$version" >"$stage/VERSION"
    mkdir -p .devbundle
    tar -C "$stage" -cJf "$BUNDLE.tmp" . && mv "$BUNDLE.tmp" "$BUNDLE"
    rm -rf "$stage"
    echo "packed $version: $(du -h "$BUNDLE" | cut -f1) in $BUNDLE"
    tar -tJf "$BUNDLE" | grep -v '/$' | sed 's/^\.\//  /'
    echo "next: a device run with carry [\".devbundle\"] and the command 'bash tests/gpu/device.sh check'"
}

# Unpacks the bundle (python's tarfile when there is no xz) and sets up the environment: the
# carried libraries first, then the machine's CUDA toolkit and PyTorch's nvidia-* wheels (NCCL).
setup() {
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
    mkdir -p "$OUTDIR"
    {
        echo "bundle $(cat "$UNPACKED/VERSION"), tree $(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo '?'), $(date -u +%FT%TZ)"
        nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 || echo "nvidia-smi failed"
        local f
        for f in "$BUILD"/tessera-train "$BUILD"/libtessera-cuda-train.so "$BUILD"/tests/test_gpu_ops; do
            if ldd "$f" | grep -q 'not found'; then echo "MISSING for $f: $(ldd "$f" | grep 'not found' | tr -s ' \n' ' ')"; fi
        done
        echo "libnccl: $(ldconfig -p 2>/dev/null | grep -c libnccl) in ldconfig; $(IFS=:; for d in $LD_LIBRARY_PATH; do ls "$d"/libnccl.so* 2>/dev/null; done | head -1)"
    } | tee "$OUTDIR/probe.txt"
}

check() {
    setup
    local rc=0
    TESTS="test_gpu_ops test_cuda_train test_cuda_lora" bash tests/run.sh 2>&1 | tee "$OUTDIR/check.txt" || rc=$?
    tar -C "$BUILD" -czf "$OUTDIR/check-logs.tar.gz" test-logs
    echo "logs: $OUTDIR/check-logs.tar.gz; summary: $OUTDIR/check.txt"
    tail -1 "$OUTDIR/check.txt"
    return $rc
}

bench() {
    setup
    local models=${*:-gpt2-124m} tag rc=0
    tag=$(printf '%s' "$models${TESSERA_ARGS:+ $TESSERA_ARGS}" | tr -c 'A-Za-z0-9_.-' '_' | cut -c1-60)
    # PyTorch gets the machine's library path back: the bundle's Debian libraries (libz, libssl,
    # libgomp, ...) are for tessera's programs only
    local py=$UNPACKED/python3-machine
    # shellcheck disable=SC2016 # the $ lines are the wrapper's own, expanded when it runs
    printf '#!/usr/bin/env bash\nexport LD_LIBRARY_PATH=%q\n[[ -n $LD_LIBRARY_PATH ]] || unset LD_LIBRARY_PATH\nexec %q "$@"\n' \
        "$ORIG_LD_LIBRARY_PATH" "$(command -v python3)" >"$py"
    chmod +x "$py"
    MODELS=$models BENCH_OUT=/tmp/bench-$tag PYTHON=$py bash bench/gpu/run.sh 2>&1 |
        tee "$OUTDIR/bench-$tag.txt" || rc=$?
    cp "/tmp/bench-$tag/results.md" "$OUTDIR/results-$tag.md" 2>/dev/null || true
    tar -C /tmp -czf "$OUTDIR/bench-$tag.tar.gz" "bench-$tag"
    return $rc
}

# ncu's per-kernel summary (count, average duration) over 3 steps of MODEL at the clocks and with
# the caches as in a real run; steps 2-3 repeat step 1's kernels, so the averages are per step's
# kernels. More settings for tessera-train: TESSERA_ARGS="KEY=VALUE ...".
profile() {
    setup
    local model=${1:-gpt2-124m} ncu data=/tmp/profile-data V kv
    ncu=$(command -v ncu || true)
    for kv in /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu; do
        [[ -z $ncu && -x $kv ]] && ncu=$kv
    done
    if [[ -z $ncu ]] || ! "$ncu" --version >/dev/null 2>&1; then
        die "no working ncu (Nsight Compute) on this machine"
    fi
    V=$(sed -n 's/^ *vocab_size *= *\([0-9]*\);.*/\1/p' "configs/$model.cfg" | head -1)
    [[ -d $data/train ]] || "$BUILD/tessera" synth --out "$data" --vocab "${V:-50257}" --val-tokens 0 --seed 1 --quiet
    local more=()
    for kv in ${TESSERA_ARGS:-}; do more+=(--set "$kv"); done
    "$ncu" --metrics gpu__time_duration.sum --print-summary per-kernel --clock-control none \
        --cache-control none "$BUILD/tessera-train" --config "configs/$model.cfg" --set device=cuda \
        --set data.train="$data/train" --set data.val= --set eval_interval=0ba --set save_interval=0ba \
        --set sample.tokens=0 --set max_duration=3ba --set run_dir=/tmp/profile-run "${more[@]}" \
        >"$OUTDIR/profile-$model.txt" 2>&1 || echo "ncu exited $? (see $OUTDIR/profile-$model.txt)"
    tail -80 "$OUTDIR/profile-$model.txt"
}

case ${1:-} in
    pack) pack ;;
    check) check ;;
    bench) shift; bench "$@" ;;
    profile) shift; profile "$@" ;;
    *) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
