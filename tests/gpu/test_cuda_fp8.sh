#!/usr/bin/env bash
# precision.fp8 (issue 51; docs/cuda.md "FP8"): the refusals, each with exit 1, the key named and
# no run_dir written:
#  - device = cpu (the CPU is the fp32 oracle);
#  - an unknown mode (the key table's enum check);
#  - rowwise (not built yet);
#  - a GPU older than compute capability 8.9: the emulator reporting 8.0 (TSR_EMU_SM=80).
# The casts and the FP8 GEMM themselves: build/tests/test_gpu_ops_emu (and test_gpu_ops on a
# GPU) and tests/reference/test_fp8_formats.py.
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 4
make_synth "$TMP/data" 512 20000
tiny_args "$TMP/data/train"
args+=(--set model.n_layer=2 --set model.n_head=2 --set global_batch=8 --set micro_batch=4)
EMU=$BUILD/tests/tessera-train-cuemu
# refused BIN DIR PATTERN ARGS...: exit 1, PATTERN in the output, no DIR
refused() {
    local bin=$1 dir=$2 pat=$3 rc; shift 3
    "$bin" "${args[@]}" --set max_duration=2ba --set run_dir="$TMP/$dir" "$@" >"$TMP/$dir.txt" 2>&1
    rc=$?
    ((rc == 1)) && grep -q -- "$pat" "$TMP/$dir.txt" && [[ ! -e $TMP/$dir ]] ||
        { echo "# exit $rc"; sed 's/^/# /' "$TMP/$dir.txt" | tail -5; return 1; }
}
refused "$TRAIN" cpu 'precision.fp8=tensorwise: precision.fp8 = "tensorwise" with device = "cpu": the CPU is the fp32 oracle' \
    --set precision.fp8=tensorwise
tap_check $? "device = cpu with precision.fp8 = tensorwise: exit 1, the CPU named as the fp32 oracle, no run_dir"
refused "$TRAIN" bogus 'precision.fp8' --set precision.fp8=e4m3
tap_check $? "precision.fp8 = e4m3 (unknown): exit 1 naming the key, no run_dir"
refused "$EMU" rowwise 'precision.fp8 = "rowwise" is not built yet' --set device=cuda \
    --set precision.fp8=rowwise
tap_check $? "precision.fp8 = rowwise on device = cuda: exit 1, not built yet, no run_dir"
TSR_EMU_SM=80 refused "$EMU" sm80 'precision.fp8 = "tensorwise": FP8 matmuls need a GPU of compute capability 8.9 or newer .*rank 0 has an older one (rank 0: tessera CUDA emulator (host memory), sm 8.0)' \
    --set device=cuda --set precision.fp8=tensorwise
tap_check $? "precision.fp8 = tensorwise on a GPU of compute capability 8.0 (the emulator's TSR_EMU_SM=80): exit 1 naming the device, no run_dir"
tap_done
