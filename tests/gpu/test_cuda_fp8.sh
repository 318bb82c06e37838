#!/usr/bin/env bash
# precision.fp8 (issue 51; docs/cuda.md "FP8"): the refusals, each with exit 1, the key named and
# no run_dir written:
#  - device = cpu (the CPU is the fp32 oracle);
#  - an unknown mode (the key table's enum check);
#  - rowwise (not built yet);
#  - a GPU older than compute capability 8.9: the emulator reporting 8.0 (TSR_EMU_SM=80);
# and training with precision.fp8 = tensorwise on the emulator (FP8 linear forwards through
# tcu_matmul_forward_fp8: E4M3 as tcu_fp8.h defines it, the GEMM as cuBLASLt's up to the fp32
# summation order), a tiny GPT-2 and a tiny Llama for 60 steps:
#  - every step's loss within 2% of the bf16 run's, gradient norms within 10%, and not the bf16
#    run's bits (the FP8 path ran), the start saying which layers;
#  - GPT-2 twice: the same bits (deterministic);
#  - GPT-2 with precision.fp8_skip = first_last (both of its 2 layers kept in bf16): the bf16 run's
#    bits;
#  - (emulator) the FP8 operands' scratch in the device memory plan: --plan shows it in the
#    activations' line, in bytes, and it is what the run allocates: the FP8 run's allocator peak is
#    the bf16 run's plus exactly that figure; fp8_skip covering both layers plans and allocates none.
# and precision.fp8_allgather (zero3 / hsdp, the forward's gathers moving the FP8 linear weights
# as E4M3 with the whole tensor's scale) on the emulator, 4 layers so that layers 0 and 1 gather
# in E4M3 (the last two stay bf16 for the backward to reuse), 6 steps:
#  - zero3 on 2 ranks (GPT-2) and hsdp on 2 x 2 (Llama): the bits of the same run with bf16
#    gathers (fp8_allgather = false), the start line giving fewer gathered bytes than bf16's.
#    A per-shard scale (no MAX all-reduce of the amax) fails both.
# The same training checks run on the real backend where a GPU is present (cuBLASLt's FP8 GEMM;
# skipped loudly otherwise).
# The casts and the FP8 GEMM themselves: build/tests/test_gpu_ops_emu (and test_gpu_ops on a
# GPU) and tests/reference/test_fp8_formats.py.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/gpu_lib.sh"
tsr_tmpdir
tap_plan 15
make_synth "$TMP/data" 512 80000
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
refused "$TRAIN" bogus 'precision.fp8=e4m3: accepted: none | tensorwise | rowwise' --set precision.fp8=e4m3
tap_check $? "precision.fp8 = e4m3 (unknown): exit 1 naming the key and the accepted modes, no run_dir"
refused "$TRAIN" rowwise 'precision.fp8 = "rowwise" is not built yet' --set device=cuda \
    --set precision.fp8=rowwise
tap_check $? "precision.fp8 = rowwise on device = cuda: exit 1, not built yet, no run_dir"
# suite BIN TAG: the training checks on BIN (the emulator, or tessera-train on a GPU)
suite() {
    local bin=$1 tag=$2
    # train DIR ARGS...: 60 steps, output in DIR.txt
    train() {
        local dir=$tag.$1; shift
        "$bin" "${args[@]}" --set device=cuda --set max_duration=60ba --set save_final=false \
            --set run_dir="$TMP/$dir" "$@" >"$TMP/$dir.txt" 2>&1 ||
            { sed 's/^/# /' "$TMP/$dir.txt" | tail -5; return 1; }
    }
    # fp8_close BF16 FP8: within 2% (loss) and 10% (norm) at every step, and not the same bits
    fp8_close() {
        local a=$TMP/$tag.$1 b=$TMP/$tag.$2
        metrics_close "$a/metrics.jsonl" "$b/metrics.jsonl" 1 0.02 0.1 &&
            ! cmp -s <(final_lines "$a/metrics.jsonl") <(final_lines "$b/metrics.jsonl") &&
            grep -q 'precision.fp8 = "tensorwise": the linear layers of decoder layers 0 to 1 forward in FP8' "$b.txt"
    }
    same() { cmp -s <(final_lines "$TMP/$tag.$1/metrics.jsonl") <(final_lines "$TMP/$tag.$2/metrics.jsonl"); }
    gpt
    train gpt_bf16 && train gpt_fp8 --set precision.fp8=tensorwise && fp8_close gpt_bf16 gpt_fp8
    tap_check $? "$tag: GPT-2, 60 steps with precision.fp8 = tensorwise: every loss within 2% of bf16's, norms within 10%, not bf16's bits"
    train gpt_fp8b --set precision.fp8=tensorwise && same gpt_fp8 gpt_fp8b
    tap_check $? "$tag: GPT-2 with FP8 twice: the same bits"
    train gpt_skip --set precision.fp8=tensorwise --set precision.fp8_skip=first_last && same gpt_bf16 gpt_skip
    tap_check $? "$tag: GPT-2 with precision.fp8_skip = first_last (both layers kept in bf16): the bf16 run's bits"
    llama
    train llama_bf16 && train llama_fp8 --set precision.fp8=tensorwise && fp8_close llama_bf16 llama_fp8
    tap_check $? "$tag: Llama (RMSNorm, RoPE, SwiGLU), 60 steps with precision.fp8 = tensorwise: every loss within 2% of bf16's, norms within 10%, not bf16's bits"
}
gpt() {
    tiny_args "$TMP/data/train"
    args+=(--set model.n_layer=2 --set model.n_head=2 --set global_batch=8 --set micro_batch=4)
}
llama() {
    tiny_llama_args "$TMP/data/train"
    args+=(--set watchdog.window=0 --set model.n_head=2 --set model.n_kv_head=1)
}
# the FP8 scratch's bytes in a device plan line (empty: none); runs' allocator peaks, one a line
fp8_plan() { sed -nE "s/^device memory per rank .*FP8 operands' scratch [^(]*\(([0-9]+) B\) in them.*/\1/p" "$1"; }
peaks() { "$PY3" -c 'import json, sys
for a in sys.argv[1:]: print(max(json.loads(l).get("peak_mem_bytes", -1) for l in open(a + "/metrics.jsonl")))' "$@"; }
# the emulator's half (skipped on the lent GPU machine, TSR_TEST_EMULATOR=0: CI runs it)
# allgather NP TAG ARGS...: the emulator with fp8_allgather true and false: the same bits, and
# the start line (true only) with fewer bytes a forward than bf16's
allgather() {
    local np=$1 tag=$2 ag a b; shift 2
    for ag in true false; do
        "${MPIRUN[@]}" -np "$np" "$EMU" "${args[@]}" --set device=cuda --set model.n_layer=4 \
            --set precision.fp8=tensorwise --set precision.fp8_allgather=$ag --set max_duration=6ba \
            --set save_final=false --set run_dir="$TMP/$tag.$ag" "$@" >"$TMP/$tag.$ag.txt" 2>&1 ||
            { sed 's/^/# /' "$TMP/$tag.$ag.txt" | tail -5; return 1; }
    done
    read -r a b < <(sed -n 's/^precision.fp8_allgather: the forward gathers decoder layers 0 to 1 .* in E4M3: \([0-9]*\) bytes .* instead of \([0-9]*\) in bf16.*/\1 \2/p' "$TMP/$tag.true.txt")
    [[ -n $b ]] && ((a < b)) && ! grep -q '^precision.fp8_allgather:' "$TMP/$tag.false.txt" &&
        cmp -s <(final_lines "$TMP/$tag.true/metrics.jsonl") <(final_lines "$TMP/$tag.false/metrics.jsonl") ||
        { echo "# bytes: ${a:-none} against ${b:-none}"; return 1; }
}
# the emulator's half (skipped on the lent GPU machine, TSR_TEST_EMULATOR=0: CI runs it)
if emulator_half 8; then
    TSR_EMU_SM=80 refused "$EMU" sm80 'precision.fp8 = "tensorwise": FP8 matmuls need a GPU of compute capability 8.9 or newer .*rank 0 has an older one (rank 0: tessera CUDA emulator (host memory), sm 8.0)' \
        --set device=cuda --set precision.fp8=tensorwise
    tap_check $? "precision.fp8 = tensorwise on a GPU of compute capability 8.0 (the emulator's TSR_EMU_SM=80): exit 1 naming the device, no run_dir"
    suite "$EMU" emulator
    gpt
    "$EMU" "${args[@]}" --set device=cuda --set precision.fp8=tensorwise --plan 1 >"$TMP/plan_fp8.txt" 2>&1
    e=$TMP/emulator s=$(fp8_plan "$TMP/plan_fp8.txt")
    { read -r pb && read -r pf && read -r ps; } < <(peaks "$e.gpt_bf16" "$e.gpt_fp8" "$e.gpt_skip")
    [[ -n $s && $s == "$(fp8_plan "$e.gpt_fp8.txt")" && -z $(fp8_plan "$e.gpt_skip.txt") ]] &&
        ((pb > 0 && pf - pb == s && ps == pb))
    tap_check $? "emulator: --plan with precision.fp8 shows the FP8 operands' scratch ($s B), the FP8 run allocates exactly that beyond bf16's peak ($pf - $pb), fp8_skip = first_last neither"
    allgather 2 ag_zero3 --set parallel.sharding=zero3
    tap_check $? "emulator: precision.fp8_allgather under zero3 on 2 ranks (GPT-2, layers 0-1 gathered in E4M3): the bits of bf16 gathers, fewer bytes a forward"
    llama
    allgather 4 ag_hsdp --set parallel.sharding=hsdp --set parallel.replica_group=2 \
        --set micro_batch=1
    tap_check $? "emulator: precision.fp8_allgather under hsdp on 2 x 2 ranks (Llama, layers 0-1 gathered in E4M3): the bits of bf16 gathers, fewer bytes a forward"
    emulator_half_end
fi
# the real backend (the next GPU call): the same checks on cuBLASLt's FP8 GEMM
real_backend
if [[ -z $why ]]; then
    suite "$TRAIN" cuda
else
    for what in "GPT-2 FP8 within 2% of bf16" "GPT-2 FP8 twice the same bits" \
                "GPT-2 fp8_skip = first_last gives bf16's bits" "Llama FP8 within 2% of bf16"; do
        tap_skip "cuda: $what" "$why"
    done
fi
tap_done
