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
# model.activation_compression = fp8 (docs/cuda.md "Compressed activations"), on the same runs'
# bf16 references:
#  - device = cpu refused (exit 1, the key and value named, no run_dir);
#  - --plan of Llama 3.2 1B at 4 x 4096: a decoder layer keeps >= 40% fewer bytes;
#  - GPT-2 and Llama 60 steps compressed: every loss within 2% of bf16's, not bf16's bits; Llama
#    twice: the same bits; Llama compressed with precision.fp8 and activation checkpointing
#    (attention): within 2% too (every Llama run accumulates 4 microbatches of 2 a step);
#  - a 4-layer Llama's device allocator peak falls by the plan's saving (the allocations follow
#    the plan).
# The same training checks run on the real backend where a GPU is present (cuBLASLt's FP8 GEMM;
# skipped loudly otherwise).
# The casts and the FP8 GEMM themselves: build/tests/test_gpu_ops_emu (and test_gpu_ops on a
# GPU) and tests/reference/test_fp8_formats.py.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/gpu_lib.sh"
tsr_tmpdir
tap_plan 27
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
refused "$TRAIN" cpu_comp 'model.activation_compression=fp8: model.activation_compression = "fp8" with device = "cpu": the CPU is the fp32 oracle' \
    --set model.activation_compression=fp8
tap_check $? "device = cpu with model.activation_compression = fp8: exit 1, the key and value named, no run_dir"
# plan NAME ARGS...: --plan 8 of Llama 3.2 1B (no tokenizer: the GPU machine's tree has no data/)
plan() {
    local n=$1; shift
    "$TRAIN" --config "$TSR_ROOT/configs/llama-3.2-1b.cfg" --set device=cuda \
        --set 'data.tokenizer=""' --plan 8 "$@" >"$TMP/$n.txt" 2>&1
}
plan plan1 --set model.activation_compression=fp8 && "$PY3" - "$TMP/plan1.txt" <<'PY'
import re, sys
k = re.search(r"^activations kept per decoder layer \(microbatch of 4 x 4096\): ([0-9.]+) GiB as "
              r"computed, ([0-9.]+) MiB with .*\(([0-9.]+)% less\); this run: fp8$", open(sys.argv[1]).read(), re.M)
print(f"# a layer keeps {k.group(1)} GiB, {k.group(2)} MiB compressed: {k.group(3)}% less" if k else "# no line")
sys.exit(0 if k and float(k.group(3)) >= 40 and float(k.group(2)) < 0.6 * 1024 * float(k.group(1)) else 1)
PY
tap_check $? "--plan 8 of Llama 3.2 1B (4 x 4096) with model.activation_compression = fp8: a decoder layer keeps >= 40% fewer bytes"
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
    # comp_close REF RUN: within 2% of REF (fp8_close's tolerances), the start saying fp8
    comp_close() {
        metrics_close "$TMP/$tag.$1/metrics.jsonl" "$TMP/$tag.$2/metrics.jsonl" 1 0.02 0.1 &&
            ! same "$1" "$2" && grep -q 'activations kept per decoder layer .*this run: fp8$' "$TMP/$tag.$2.txt"
    }
    # peak RUN: the device allocator's largest peak_mem_bytes
    peak() { grep -o '"peak_mem_bytes": *[0-9]*' "$TMP/$tag.$1/metrics.jsonl" | grep -o '[0-9]*$' | sort -n | tail -1; }
    same() { cmp -s <(final_lines "$TMP/$tag.$1/metrics.jsonl") <(final_lines "$TMP/$tag.$2/metrics.jsonl"); }
    gpt
    train gpt_bf16 && train gpt_fp8 --set precision.fp8=tensorwise && fp8_close gpt_bf16 gpt_fp8
    tap_check $? "$tag: GPT-2, 60 steps with precision.fp8 = tensorwise: every loss within 2% of bf16's, norms within 10%, not bf16's bits"
    train gpt_fp8b --set precision.fp8=tensorwise && same gpt_fp8 gpt_fp8b
    tap_check $? "$tag: GPT-2 with FP8 twice: the same bits"
    train gpt_skip --set precision.fp8=tensorwise --set precision.fp8_skip=first_last && same gpt_bf16 gpt_skip
    tap_check $? "$tag: GPT-2 with precision.fp8_skip = first_last (both layers kept in bf16): the bf16 run's bits"
    train gpt_comp --set model.activation_compression=fp8 && comp_close gpt_bf16 gpt_comp
    tap_check $? "$tag: GPT-2, 60 steps with model.activation_compression = fp8: every loss within 2% of bf16's, norms within 10%, not bf16's bits"
    llama
    train llama_bf16 && train llama_fp8 --set precision.fp8=tensorwise && fp8_close llama_bf16 llama_fp8
    tap_check $? "$tag: Llama (RMSNorm, RoPE, SwiGLU), 60 steps with precision.fp8 = tensorwise: every loss within 2% of bf16's, norms within 10%, not bf16's bits"
    train llama_comp --set model.activation_compression=fp8 && comp_close llama_bf16 llama_comp
    tap_check $? "$tag: Llama, 60 steps with model.activation_compression = fp8: every loss within 2% of bf16's, norms within 10%, not bf16's bits"
    train llama_comp2 --set model.activation_compression=fp8 && same llama_comp llama_comp2
    tap_check $? "$tag: Llama with model.activation_compression = fp8 twice: the same bits"
    train llama_mix --set model.activation_compression=fp8 --set precision.fp8=tensorwise \
        --set model.activation_checkpointing=attention &&
        comp_close llama_bf16 llama_mix
    tap_check $? "$tag: Llama compressed with precision.fp8 = tensorwise, activation_checkpointing = attention: every loss within 2% of bf16's"
    # 4 layers, where the E4M3 stacks outweigh the one layer of bf16 working copies
    train llama_m0 --set model.n_layer=4 --set max_duration=5ba &&
        train llama_m1 --set model.n_layer=4 --set max_duration=5ba --set model.activation_compression=fp8 &&
        "$PY3" - "$(peak llama_m0)" "$(peak llama_m1)" "$(device_acts "$TMP/$tag.llama_m0.txt")" \
            "$(device_acts "$TMP/$tag.llama_m1.txt")" <<'PY'
import sys
p0, p1, a0, a1 = map(int, sys.argv[1:])
print(f"# peak {p0} -> {p1} ({p0 - p1} less); plan's activations {a0} -> {a1} ({a0 - a1} less)")
# the plan rounds each buffer to 256 bytes and prints 0.1 KiB: 4 KiB of slack
sys.exit(0 if a1 < a0 and abs((p0 - p1) - (a0 - a1)) <= 4096 else 1)
PY
    tap_check $? "$tag: a 4-layer Llama's device peak with model.activation_compression = fp8 falls by the device plan's saving"
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
if emulator_half 13; then
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
                "GPT-2 fp8_skip = first_last gives bf16's bits" "GPT-2 compressed within 2% of bf16" \
                "Llama FP8 within 2% of bf16" "Llama compressed within 2% of bf16" \
                "Llama compressed twice the same bits" "Llama compressed with FP8 and checkpointing within 2%" \
                "4-layer Llama's peak falls by the plan's saving"; do
        tap_skip "cuda: $what" "$why"
    done
fi
tap_done
