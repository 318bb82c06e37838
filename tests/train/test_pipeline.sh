#!/usr/bin/env bash
# Pipeline parallelism (parallel.pipeline = P; docs/pipeline.md) through the real trainer on MPI
# ranks, tiny models (4 layers of width 64) on 32-token rows of the synthetic corpus, 4 steps of
# 8 microbatches of one sequence, fp32 on the CPU:
#  - exactness at P = 2, each schedule (1f1b, interleaved with 2 chunks a rank: 4 stages, zb):
#    tiny-llama's style (GQA 4:2, RMSNorm, RoPE, SwiGLU, untied head), GPT-2's (tied embeddings:
#    the first and the last stage's copies summed; learned positions, biases) with a hand cut,
#    a MoE (4 experts, a shared one) with every expert a token, a hybrid (Gated DeltaNet and
#    attention layers): every step's loss within 1e-6 of one rank's (gradient norms 1e-5); the
#    MoE at top 2, step 0's gradients within 1e-5 (a routing may flip at a near tie under another
#    summation order);
#  - compositions at 4 ranks: P 2 x data 2 (ddp with zb, zero1), P 2 x context 2 (the document
#    mask across chunks), a hybrid at P 2 x context 2, block activation checkpointing with the
#    interleaved schedule, attention checkpointing with zb;
#  - evaluation: the validation loss and the ICL results through the stages equal one rank's;
#  - the bytes the stages sent (activations and their gradients) equal 2 M (S - 1) B T C 4 a step
#    and data rank; the end-of-run bubble line measured beside the table's (P - 1)/(M + P - 1),
#    and each stage's idle share (its own timer), their mean the bubble;
#    the plan's line: the cut (balanced, or the hand layout's) and the table's bubble;
#  - resume: a P 2 run killed mid-run resumes bit-identical; its checkpoint is the one-rank run's,
#    bit for bit, and resumes on one rank, a one-rank checkpoint at P 2 (zb), within 1e-6;
#  - bad layouts exit 1 naming the key and a valid value; a mode the pipeline does not run with yet
#    is refused naming its key;
#  - a hang: stage 1 frozen (TSR_FAULT=stall_pipeline, its own watchdog idle), stage 0's wait for
#    it is the hang watchdog's line naming the neighbour's stage and world rank, exit 3.
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 15
parallel_args 4 8 1 4ba
doc=(--set model.attn_mask=document --set model.eot_token=8)
moe=("${llama[@]}" --set model.moe_experts=4 --set model.moe_intermediate_size=48
     --set model.moe_shared_size=32)
hyb=("${llama[@]}" --set model.layer_types=linear_attention,full_attention
     --set model.linear_num_key_heads=2 --set model.linear_num_value_heads=4
     --set model.linear_key_head_dim=8 --set model.linear_value_head_dim=8
     --set model.linear_conv_kernel_dim=4 "${doc[@]}")
il=(--set parallel.pipeline_schedule=interleaved --set parallel.pipeline_virtual=2)
zb=(--set parallel.pipeline_schedule=zb)
# run DIR NP P MODEL-ARRAY-NAME ARGS...
run() {
    local dir=$1 np=$2 p=$3 m="$4[@]"; shift 4
    ranks "$np" "$TRAIN" "${!m}" --set parallel.pipeline="$p" --set run_dir="$TMP/$dir" "$@" \
        >"$TMP/$dir.txt" 2>&1 || { tap_diag "$dir: exit $?: $(grep -m1 -i error "$TMP/$dir.txt")"; return 1; }
}
# schedules NAME MODEL ARGS...: NAME1 on one rank, NAME-f (1f1b), NAME-i (interleaved), NAME-z
# (zb) at P = 2, all within 1e-6 of NAME1
schedules() {
    local n=$1 m=$2; shift 2
    run "${n}1" 1 1 "$m" "$@" && run "$n-f" 2 2 "$m" "$@" && run "$n-i" 2 2 "$m" "${il[@]}" "$@" &&
        run "$n-z" 2 2 "$m" "${zb[@]}" "$@" && runs_exact "${n}1" "$n-f" "$n-i" "$n-z"
}

# ---- exactness at P = 2 ----------------------------------------------------------------------
schedules L llama
tap_check $? "Llama style (GQA 4:2, RMSNorm, RoPE, SwiGLU, untied head) at P = 2 with 1f1b, interleaved (2 chunks a rank, 4 stages) and zb equals one rank within 1e-6"
schedules G gpt && run G-h 2 2 gpt --set parallel.pipeline_layout="Et*3|tL" &&
    grep -q "cut Et\*3|tL (parallel.pipeline_layout)" "$TMP/G-h.txt" && runs_exact G1 G-h
tap_check $? "GPT-2 style (tied embeddings: the first and last stages' copies summed, learned positions, biases) at P = 2 with each schedule, and with the hand cut Et*3|tL, equals one rank within 1e-6"
g0=(--set max_duration=1ba --set save_final=true --set optim.grad_clip=0)
schedules E moe --set model.moe_top_k=4 && run e1 1 1 moe --set model.moe_top_k=2 "${g0[@]}" &&
    run e2 2 2 moe --set model.moe_top_k=2 "${g0[@]}" &&
    run e2z 2 2 moe --set model.moe_top_k=2 "${g0[@]}" "${zb[@]}" && moments_close e1 e2 e2z &&
    cmp -s <(grep -o '"moe_z": [^,]*' "$TMP/E1/metrics.jsonl") <(grep -o '"moe_z": [^,]*' "$TMP/E-f/metrics.jsonl")
tap_check $? "MoE (4 experts and a shared one in every layer): every expert a token at P = 2 with each schedule equals one rank within 1e-6, the routing statistics of every layer logged alike; top 2: step 0's gradients at P = 2 (1f1b, zb) within 1e-5"
schedules H hyb
tap_check $? "a hybrid (Gated DeltaNet and attention layers, the document mask) at P = 2 with each schedule equals one rank within 1e-6"

# ---- compositions at 4 ranks -------------------------------------------------------------------
run D1 1 1 gpt "${doc[@]}" && run Dd 4 2 llama "${zb[@]}" && run Dz 4 2 llama --set parallel.sharding=zero1 &&
    run Dc 4 2 gpt "${doc[@]}" --set parallel.context=2 && run Hc 4 2 hyb --set parallel.context=2 &&
    runs_exact L1 Dd Dz && runs_exact D1 Dc && runs_exact H1 Hc
tap_check $? "P 2 x data 2 (ddp with zb, zero1), P 2 x context 2 (GPT-2 style, the document mask across chunks) and a hybrid at P 2 x context 2 equal one rank within 1e-6"
ck=(--set model.activation_checkpointing=block --set model.activation_checkpointing_layers=3)
run C1 1 1 llama "${ck[@]}" && run Ci 2 2 llama "${ck[@]}" "${il[@]}" &&
    run Cz 2 2 llama --set model.activation_checkpointing=attention "${zb[@]}" &&
    runs_exact C1 Ci && runs_exact L1 Cz
tap_check $? "activation checkpointing: block on layers 0-2 with the interleaved schedule, attention with zb, equal one rank within 1e-6"

# ---- evaluation --------------------------------------------------------------------------------
icl=(--config "$TMP/icl.cfg" "${base[@]}" --set model.vocab_size=320 --set model.vocab_multiple=64
     --set data.train="$TMP/data/train" --set data.tokenizer="$TMP/tok.tok"
     --set data.val="$TMP/data/val" --set eval_interval=4ba --set eval_samples=16)
run I1 1 1 icl && run I2 2 2 icl "${il[@]}" && runs_exact I1 I2
ok=$?
vl() { grep -o '"val_loss": [0-9.e-]*' "$TMP/$1/metrics.jsonl" | grep -o '[0-9.e-]*$'; }
ic() { grep -o '"tasks": {.*}, "gauntlet": [^,]*' "$TMP/$1/metrics.jsonl"; }
tap_diag "val $(vl I1) vs $(vl I2); ICL through the stages: $(ic I2 | tail -1)"
((ok == 0)) && "$PY3" -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(abs(a - b) > 1e-6 * a)" \
    "$(vl I1)" "$(vl I2)" && [[ $(ic I1 | wc -l) == 1 ]] && cmp -s <(ic I1) <(ic I2)
tap_check $? "evaluation through the stages (interleaved, P = 2): the validation loss within 1e-6 of one rank's, the ICL results (2 tasks) the same"

# ---- the bytes, the bubble, the plan --------------------------------------------------------------
# a step's messages: every microbatch's activation forward and its gradient back over each of the
# S - 1 stage boundaries of each of the D pipelines: 2 M (S - 1) D x B T C 4 bytes
sent() { grep -o 'pipeline: [0-9]* bytes sent between stages' "$TMP/$1.txt" | grep -o '[0-9]*'; }
msg=$((1 * 32 * 64 * 4))
[[ $(sent L-f) == $((4 * 2 * 8 * 1 * 1 * msg)) && $(sent L-i) == $((4 * 2 * 8 * 3 * 1 * msg)) &&
   $(sent Dd) == $((4 * 2 * 4 * 1 * 2 * msg)) ]]
tap_check $? "the bytes the stages sent (counted by the sends) equal 2 M (S - 1) D B T C 4 a step: P 2 (M 8, S 2), interleaved (S 4), P 2 x data 2 (M 4): $(sent L-f), $(sent L-i), $(sent Dd)"
grep -qE "pipeline: bubble [0-9.]+ measured over 3 steps .*, 0\.1111 by the 1f1b schedule's table at equal action times \(P 2, V 1, M 8\)" "$TMP/L-f.txt" &&
    grep -qE "pipeline: bubble [0-9.]+ measured over 3 steps .*, 0\.0588 by the interleaved schedule's table .*\(P 2, V 2, M 8\)" "$TMP/L-i.txt" &&
    "$PY3" - "$TMP/L-f.txt" <<'PY'
import re, sys
t = open(sys.argv[1]).read()
b = float(re.search(r"pipeline: bubble ([0-9.]+) measured", t)[1])
idle = [float(x) for x in re.search(r"pipeline: idle per rank \(stage order[^)]*\):((?: [0-9.]+)+)", t)[1].split()]
assert len(idle) == 2 and all(0 <= x <= 1 for x in idle), idle
assert abs(sum(idle) / len(idle) - b) < 2e-4, (idle, b)  # the stages' mean idle is the bubble
PY
tap_check $? "the end-of-run line: the bubble measured from the step's own timers beside the table's, (P-1)/(M+P-1) = 1/9 for 1f1b and 1/17 interleaved, and each stage's idle share, whose mean is the bubble: $(grep -o 'bubble [0-9.]* measured' "$TMP/L-f.txt")"
plan=$("$TRAIN" "${llama[@]}" --set parallel.pipeline=2 "${il[@]}" --plan 4 2>&1) &&
    grep -qF "pipeline: 2 ranks a pipeline (each stage on 2 ranks), 2 model chunks a rank, 4 stages cut Et|t|t|tL (balanced by cost); 4 microbatches a step, schedule interleaved: bubble 0.1111 by its table" <<<"$plan" &&
    grep -qF "batch: global 8 = 2 data ranks x 4 per rank" <<<"$plan"
tap_check $? "--plan 4 at P 2 interleaved: the cut balanced by cost (Et|t|t|tL), 4 microbatches a step, the table's bubble 1/9, 2 data ranks"

# ---- resume --------------------------------------------------------------------------------------
sv=(--set save_interval=2ba --set keep_last=5 --set save_async=false --set save_final=true)
k=3
OMPI_MCA_odls_base_sigkill_timeout=0 TSR_FAULT=kill:$k:1 run KP 2 2 llama "${sv[@]}"
rc=$?
run UP 2 2 llama "${sv[@]}" && run KP 2 2 llama "${sv[@]}" && rc2=0 || rc2=1
[[ $rc != 0 && $rc2 == 0 ]] && grep -q "checkpoint resume step $((k / 2 * 2))" "$TMP/KP.txt" &&
    cmp -s <(final_lines "$TMP/UP/metrics.jsonl") <(final_lines "$TMP/KP/metrics.jsonl") &&
    same_tensors "$(ck "$TMP/UP" 4)" "$(ck "$TMP/KP" 4)"
tap_check $? "rank 1 SIGKILLed after step $k of a P 2 run (exit $rc): the rerun resumes from step $((k / 2 * 2)) and equals the uninterrupted run bit for bit (losses, checkpoint)"
run S1 1 1 llama "${sv[@]}" && same_tensors "$(ck "$TMP/S1" 2)" "$(ck "$TMP/UP" 2)" &&
    run R1 1 1 llama --resume "$(ck "$TMP/UP" 2)" && run Q2 2 2 llama "${zb[@]}" --resume "$(ck "$TMP/S1" 2)" &&
    metrics_close "$TMP/S1/metrics.jsonl" "$TMP/R1/metrics.jsonl" 3 1e-6 1e-5 &&
    metrics_close "$TMP/S1/metrics.jsonl" "$TMP/Q2/metrics.jsonl" 3 1e-6 1e-5
tap_check $? "layout-free checkpoints: P 2's step-2 checkpoint equals one rank's bit for bit; it resumes on one rank, and one rank's at P 2 with zb, within 1e-6"

# ---- refusals ----------------------------------------------------------------------------------
source "$(dirname "$0")/pipeline_lib.sh" # (refused, err)
refused B1 --set parallel.pipeline=8 && err B1 | grep -qF "makes 8 stages, more than the model's 4 layers (model.n_layer): every stage runs at least one; the most is parallel.pipeline = 4" &&
    refused B2 --set parallel.pipeline=2 --set "parallel.pipeline_layout=Et*2|tL" &&
    err B2 | grep -qF 'parallel.pipeline_layout = "Et*2|tL": it places 3 layers (t), the model has model.n_layer = 4; for example "Et*2|t*2L"' &&
    refused B3 --set parallel.pipeline=2 --set parallel.pipeline_schedule=interleaved &&
    err B3 | grep -qF 'set parallel.pipeline_virtual = 2 (or more)' &&
    "$TRAIN" "${llama[@]}" --set parallel.pipeline=2 --set global_batch=2 --set micro_batch=2 --plan 2 >"$TMP/B4.txt" 2>&1
rc=$?
((rc == 1)) && err B4 | grep -qF '1 microbatches for 2 stages: the 1f1b schedule needs at least as many microbatches as pipeline ranks (2)' &&
    err B4 | grep -qF 'change micro_batch or global_batch'
tap_check $? "bad layouts exit 1 naming the key and a valid value: more stages than layers, a hand cut short of a layer, interleaved with one chunk a rank, fewer microbatches than stages (exit $rc)"
refused B5 --set parallel.pipeline=2 --set objective=grpo &&
    err B5 | grep -qF 'parallel.pipeline = 2 with objective = "grpo": pipeline parallelism does not run with it yet (docs/pipeline.md "What composes with the pipeline"): set parallel.pipeline = 1, or change objective'
tap_check $? "a mode the pipeline does not run with yet (objective = grpo) exits 1 naming its key"

# ---- a stage waiting on a frozen neighbour ----------------------------------------------------------
# (the run ends in MPI_Abort: mpirun ends the other rank at once: odls_base_sigkill_timeout)
TSR_FAULT=stall_pipeline:2:1 OMPI_MCA_odls_base_sigkill_timeout=0 timeout 60 \
    "${MPIRUN[@]}" -np 2 "$TRAIN" "${llama[@]}" --set parallel.pipeline=2 --set run_dir="$TMP/W" \
    --set watchdog.hang_timeout=2 >"$TMP/W.txt" 2>&1
rc=$?
[[ $rc != 0 && $rc != 124 ]] &&
    grep -qE "\[rank 0 .*\] watchdog: step 2 stuck in the pipeline's wait for a neighbouring stage for [0-9]+ s \(watchdog.hang_timeout = 2 s\): waiting for stage 1 \(world rank 1\) to send microbatch [0-9]+'s gradient" "$TMP/W.txt" &&
    ! grep -q '\[rank 1 .*\] watchdog' "$TMP/W.txt"
tap_check $? "stage 1 frozen in step 2 (its own watchdog idle): stage 0's hang line names it (stage 1, world rank 1, the gradient it waits for), the run aborts (exit $rc): $(grep -o 'waiting for stage.*' "$TMP/W.txt" | head -1)"
tap_done
