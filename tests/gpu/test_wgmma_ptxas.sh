#!/usr/bin/env bash
# test_wgmma_ptxas.sh — the wgmma kernels as ptxas builds them for sm_90a (issue 25 item 2;
# docs/cuda.md, "Attention on Hopper's wgmma"). ptxas keeps wgmma asynchronous only when the code
# lets it; otherwise it serialises the products or injects waits and arrives of its own, and says
# so in advisories C75xx (C7515 serialised, C7517 a wait, C7519 an arrive). No GPU needed, only
# nvcc ($CUDA_HOME, default /usr/local/cuda); exit 77 (a loud skip) without it. Checks:
#  - the check can fail: a fixture with a conditional fence and an early read is flagged;
#  - kernels/cuda/cuda_attention.cu: its 6 wgmma kernels (forward, dk/dv, dq at hs 64 and 128)
#    compiled, no C75xx advisory, none spilling;
#  - tests/gpu/test_wgmma_gpu.cu (wgmma's layouts on the GPU): no advisory either, so that it
#    checks the products as the attention kernels run them.
source "$(dirname "$0")/../lib.sh"
NVCC=${CUDA_HOME:-/usr/local/cuda}/bin/nvcc
if [[ ! -x $NVCC ]]; then
    echo "# SKIP no nvcc at $NVCC (the CUDA toolkit): ptxas's view of the wgmma kernels needs it"
    exit 77
fi
tsr_tmpdir
tap_plan 3
cd "$TSR_ROOT" || exit 1

# ptxas_log FILE [KEPT]: ptxas -v's report of FILE into $TMP/NAME.log: the build's own (KEPT, the
# Makefile's OBJECT.ptxas, for sm_90a and sm_80) when it is there and newer than FILE, else FILE
# built here for sm_90a alone (the fixture; a build without the report)
ptxas_log() {
    local name
    name=$(basename "$1" .cu)
    if [[ -n ${2:-} && -s $2 && $2 -nt $1 ]]; then
        tap_diag "$1: ptxas's report from the build ($2)"
        cp "$2" "$TMP/$name.log"
        return 0
    fi
    "$NVCC" -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Ikernels -Ikernels/cuda -Isrc \
        -Isrc/base -Itests -Xptxas -v -c "$1" -o "$TMP/$name.o" >"$TMP/$name.log" 2>&1
}
# advisories LOG: ptxas's C75xx lines (wgmma serialised, waits or arrives injected)
advisories() { grep -E '\(C75[0-9][0-9]\)' "$1" || true; }
# entries LOG PATTERN: how many entry functions matching PATTERN ptxas compiled for sm_90a
entries() { grep -cE "Compiling entry function '[^']*$2[^']*' for 'sm_90a'" "$1"; }
# spills LOG PATTERN: "NAME: S stores, L loads" of the sm_90a entry functions matching PATTERN
# that spill
spills() {
    awk -v pat="$2" '/Compiling entry function/ { split($0, a, "'"'"'"); fn = /for .sm_90a./ ? a[2] : "" }
        /spill stores/ && fn != "" && fn ~ pat && ($5 != 0 || $9 != 0) { print fn ": " $5 " stores, " $9 " loads" }' "$1"
}

ptxas_log tests/gpu/fixtures/wgmma_serialized.cu
rc=$?
adv=$(advisories "$TMP/wgmma_serialized.log")
((rc == 0)) && grep -q 'C7517' <<<"$adv" && grep -q 'C7519' <<<"$adv"
tap_check $? "the fixture with a conditional fence and a read before the wait: ptxas built it (exit $rc) and its advisories are flagged ($(wc -l <<<"$adv") line(s), C7517 and C7519 among them)"
[[ -n $adv ]] || tap_diag "$(cat "$TMP/wgmma_serialized.log")"

ptxas_log kernels/cuda/cuda_attention.cu "$BUILD/obj/kernels/cuda/cuda_attention.cu.o.ptxas"
rc=$?
# the kernels' WG = true instances (mangled: <HS, 1, [FUSED = false,] WG = true>, hs 64 and 128)
wg='kernelILi(64|128)ELi1E(Lb0E)?Lb1EEv'
n=$(entries "$TMP/cuda_attention.log" "$wg")
adv=$(advisories "$TMP/cuda_attention.log")
sp=$(spills "$TMP/cuda_attention.log" "$wg")
((rc == 0 && n == 6)) && [[ -z $adv && -z $sp ]]
tap_check $? "cuda_attention.cu for sm_90a: $n of 6 wgmma kernels built (exit $rc), no ptxas advisory (${adv:-none}), none spilling (${sp:-none})"

ptxas_log tests/gpu/test_wgmma_gpu.cu "$BUILD/tests/test_wgmma_gpu.ptxas"
rc=$?
adv=$(advisories "$TMP/test_wgmma_gpu.log")
((rc == 0)) && [[ -z $adv ]]
tap_check $? "test_wgmma_gpu.cu for sm_90a: built (exit $rc), no ptxas advisory (${adv:-none})"
tap_done
