#!/usr/bin/env bash
# Deterministic replay (docs/health.md "Deterministic replay"), on real MPI ranks:
#  - at once after the spike guard's outlier, before its response: a real spike (garbage data on
#    every rank) is "the data": every rank's batch recomputed by its neighbour agrees, the guard
#    skips the step as it would without replay, and the run ends with the weights of a run with
#    replay off, bit for bit (under guard.action = warn too, which applies it: the step is
#    computed again after the replay used the buffers); a wrong product on the spike step is named (transient: the guard's
#    response follows; in every product: persistent, exit 87); a NaN one rank put into its
#    gradients is that rank's transient fault;
#  - under zero3 and hsdp every rank recomputes in lockstep (the layers' gathers are the group's),
#    the layers' gradients fingerprinted before their reduce-scatter: a clean replay agrees and
#    changes no bit; a wrong product once is transient (the rank computes again: the clean run's
#    weights), in every product persistent;
#  - under context, expert and tensor parallelism (2 groups of 2) each group recomputes the group
#    before it's first microbatches together, position for position: a clean replay agrees and
#    changes no bit; a wrong product once is a transient fault of rank 1's group (its members whose
#    results differ named); in every product, with no third group, unattributed (exit 87); one
#    group alone (world = parallel.tensor) is refused at start with the reason; after the spike
#    guard's outlier (context) every group's batch is recomputed by the group before it;
#  - DPO (LoRA with dropout, 3 ranks): each rank's pass over its pairs recomputed by its neighbour
#    (with the dropout of the original's rows): a clean replay agrees and changes no bit; a NaN
#    rank 1 put into its gradients is its transient fault;
#  - pipeline (2 stages x 2 data pipelines): each pipeline recomputes the other's batch through the
#    schedule, every rank at once: a clean replay agrees and changes no bit; a wrong product once
#    is a transient fault of rank 1's pipeline (ranks 1, 3 named); after the spike guard's outlier
#    every pipeline's batch is recomputed by the one before it; one pipeline alone, or a pipeline
#    with tensor groups, is refused at start with the reason;
#  - GRPO: each rank's pass over its completions recomputed by its neighbour (no rows sent: every
#    rank holds the step's completions, rewards and advantages): a clean replay changes no bit
#    (nor the pass's statistics); a NaN rank 1 put into its gradients is its transient fault;
#  - the replay holds no second copy of the gradients: the memory plan counts two batches' tokens.
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 24
synth_tiny_args 2 24 2 --set max_duration=12ba --set save_interval=6ba --set optim.warmup=2ba --set keep_last=3
source "$(dirname "$0")/sdc_lib.sh"
skipped9() { grep -q '"event": "guard", "action": "skip", "step": 9,' "$TMP/$1/metrics.jsonl"; }

# the guard judges from step 5 (a window of 4); garbage in data batch 8 makes step 9 a spike
g=(--set guard.window=4 --set guard.threshold=3 --set guard.action=skip)
TSR_FAULT=garbage:8:9 run 3 D "${g[@]}"
rc=$?
TSR_FAULT=garbage:8:9 run 3 Doff "${g[@]}" --set health.replay_interval=0
rc2=$?
[[ $rc == 0 && $rc2 == 0 && $(health D replays) == 1 && $(health D replay_mismatches) == 0 ]] && skipped9 D && skipped9 Doff &&
    grep -q "^health: replay of step 9 after the spike guard's outlier: every rank's batch recomputed by its neighbour gives the same gradients: the data, not the hardware; the guard's response follows" "$TMP/D.txt" &&
    grep -q '"event": "replay", "step": 9, "trigger": "outlier", "verdict": "data"' "$TMP/D/metrics.jsonl" &&
    same_tensors "$(ck "$TMP/D" 12)" "$(ck "$TMP/Doff" 12)"
tap_check $? "a real spike (garbage in step 9 on every rank): replayed at once, every recomputation agrees: the data; the guard skips the step, and the weights equal a run with replay off bit for bit (exit $rc, $rc2)"

w=(--set guard.window=4 --set guard.threshold=3 --set guard.action=warn)
TSR_FAULT=garbage:8:9 run 3 DW "${w[@]}"
rc=$?
TSR_FAULT=garbage:8:9 run 3 DWoff "${w[@]}" --set health.replay_interval=0
rc2=$?
[[ $rc == 0 && $rc2 == 0 && $(health DW replays) -ge 1 && $(health DW replay_mismatches) == 0 ]] && grep -q '"event": "guard", "action": "warn", "step": 9,' "$TMP/DW/metrics.jsonl" &&
    grep -q '"event": "replay", "step": 9, "trigger": "outlier", "verdict": "data"' "$TMP/DW/metrics.jsonl" &&
    same_tensors "$(ck "$TMP/DW" 12)" "$(ck "$TMP/DWoff" 12)"
tap_check $? "guard.action = warn applies the spike's update after its replay: the step computed again, the weights equal a run with replay off bit for bit, and the replay's comparison raises no false alarm at rest (exit $rc, $rc2)"

TSR_FAULT=garbage:8:9,matmul:9:1 run 3 DM "${g[@]}"
rc=$?
[[ $rc == 0 && $(health DM replay_transients) == 1 ]] && skipped9 DM &&
    grep -q "warning: replay of step 9 after the spike guard's outlier: rank 1's batch gives gradients 0x[0-9a-f]* on rank 1 (node .*), 0x[0-9a-f]* recomputed by rank 0 (node .*); rank 2's 0x[0-9a-f]*; rank 1's second try 0x[0-9a-f]*: a transient fault of rank 1 (node .*): its second try agrees; the guard's response to the step as computed follows" "$TMP/DM.txt" &&
    grep -q '"event": "sdc", "step": 9, "check": "replay", "verdict": "transient", "tensor": "grads/batch-of-rank-1"' "$TMP/DM/metrics.jsonl" &&
    ! grep -q '"verdict": "data"' "$TMP/DM/metrics.jsonl"
tap_check $? "a wrong product of rank 1 on the spike step: the replay names rank 1 (transient), not the data; the guard skips the step (exit $rc)"

TSR_FAULT=garbage:8:9,matmul:9:1:every run 3 DP "${g[@]}"
rc=$?
[[ $rc == 87 && $(culprit DP check) == replay && $(culprit DP verdict) == persistent && $(culprit DP ranks) == 1 &&
   $(culprit DP tensor) == grads/batch-of-rank-1 ]] && ! grep -q '"event": "guard"' "$TMP/DP/metrics.jsonl"
tap_check $? "rank 1's products wrong from the spike step on: persistent, exit 87 before the guard responds, culprit rank 1 (exit $rc)"

TSR_FAULT=nan:9:2 run 3 DN "${g[@]}"
rc=$?
[[ $rc == 0 && $(health DN replay_transients) == 1 ]] && skipped9 DN &&
    grep -q "rank 2's batch gives gradients .*: a transient fault of rank 2" "$TMP/DN.txt"
tap_check $? "a NaN rank 2 put into its gradients in step 9: replayed at once, rank 2's transient fault; the step is skipped (exit $rc)"

# zero3 (3 ranks) and hsdp (2 x 2): a replay at step 7, every rank recomputing in lockstep
rp=(--set health.replay_interval=7)
run 3 Z "${rp[@]}" --set parallel.sharding=zero3
rc=$?
run 3 Zoff --set health.replay_interval=0 --set parallel.sharding=zero3
rc2=$?
[[ $rc == 0 && $rc2 == 0 && $(health Z replays) == 1 && $(health Z replay_mismatches) == 0 && $(health Zoff replay_interval) == 0 ]] &&
    same_tensors "$(ck "$TMP/Z" 12)" "$(ck "$TMP/Zoff" 12)"
tap_check $? "zero3: each rank's first microbatch recomputed by its neighbour at step 7, all agree; the weights equal a run without replay bit for bit (exit $rc, $rc2)"

TSR_FAULT=matmul:7:1 run 3 ZM "${rp[@]}" --set parallel.sharding=zero3
rc=$?
[[ $rc == 0 && $(health ZM replay_transients) == 1 ]] && same_tensors "$(ck "$TMP/Z" 12)" "$(ck "$TMP/ZM" 12)" &&
    grep -q "replay of step 7: rank 1's first microbatch gives gradients .* rank 2's 0x[0-9a-f]*; rank 1's second try 0x[0-9a-f]*: a transient fault of rank 1 (node .*): its second try agrees; it computes its microbatches again" "$TMP/ZM.txt"
tap_check $? "zero3: rank 1's product wrong once in step 7: transient, rank 1 named; the run ends with the clean run's weights bit for bit (exit $rc)"

TSR_FAULT=matmul:7:1:every run 3 ZP "${rp[@]}" --set parallel.sharding=zero3
rc=$?
[[ $rc == 87 && $(culprit ZP check) == replay && $(culprit ZP verdict) == persistent && $(culprit ZP ranks) == 1 ]]
tap_check $? "zero3: rank 1's products wrong from step 7 on: persistent, exit 87, culprit rank 1 (exit $rc)"

h=(--set parallel.sharding=hsdp --set parallel.replica_group=2 --set max_duration=8ba)
TSR_FAULT=matmul:7:3 run 4 HM "${rp[@]}" "${h[@]}"
rc=$?
[[ $rc == 0 && $(health HM replay_transients) == 1 ]] &&
    grep -q "replay of step 7: rank 3's first microbatch gives gradients .*: a transient fault of rank 3" "$TMP/HM.txt"
tap_check $? "hsdp 2 x 2: rank 3's product wrong once in step 7: recomputed by rank 2, transient, rank 3 named (exit $rc)"

TSR_FAULT=matmul:7:2:every run 4 HP "${rp[@]}" "${h[@]}"
rc=$?
[[ $rc == 87 && $(culprit HP verdict) == persistent && $(culprit HP ranks) == 2 ]]
tap_check $? "hsdp 2 x 2: rank 2's products wrong from step 7 on: persistent, exit 87, culprit rank 2 (exit $rc)"

# context, expert, tensor: 2 groups of 2 on 4 ranks, a replay at step 7 (rank 1's group: 0, 1)
m=(--set global_batch=8 --set max_duration=8ba --set save_interval=4ba)
moe=(--config "$TSR_ROOT/configs/tiny-llama.cfg" --set model.n_kv_head=2 --set model.intermediate_size=96
     --set model.moe_experts=4 --set model.moe_top_k=2 --set model.moe_intermediate_size=48)
group_mode() { # group_mode NAME SETTINGS...: a clean replay and one with rank 1's product wrong once
    local n=$1; shift
    run 4 "$n" "${rp[@]}" "${m[@]}" "$@"
    local rc=$?
    TSR_FAULT=matmul:7:1 run 4 "${n}M" "${rp[@]}" "${m[@]}" "$@"
    local rc2=$?
    [[ $rc == 0 && $rc2 == 0 && $(health "$n" replays) == 1 && $(health "$n" replay_mismatches) == 0 &&
       $(health "${n}M" replay_transients) == 1 ]] &&
        grep -q '"event": "sdc", "step": 7, "check": "replay", "verdict": "transient", "tensor": "grads/microbatch-0-of-rank-[01]", "mismatches": 2, "ranks": \[0, 1\]' "$TMP/${n}M/metrics.jsonl" &&
        grep -q "replay of step 7: rank [01]'s first microbatch gives gradients .* recomputed by rank [23] .*: a transient fault of ranks 0, 1 (whose results differ) of rank [01]'s group, a microbatch being the group's collective computation (node .*): its second try agrees" "$TMP/${n}M.txt" &&
        same_tensors "$(ck "$TMP/$n" 8)" "$(ck "$TMP/${n}M" 8)"
}
group_mode C --set parallel.context=2
tap_check $? "context 2 x 2: each context group recomputes the other's first microbatch at step 7, all agree; rank 1's product wrong once: a transient fault of its group (ranks 0, 1 differ: the ring carries it), the run ends with the clean run's weights bit for bit"
TSR_FAULT=garbage:8:9 run 4 CG "${g[@]}" --set global_batch=8 --set max_duration=10ba --set parallel.context=2
rc=$?
TSR_FAULT=garbage:8:9,matmul:9:1 run 4 CGM "${g[@]}" --set global_batch=8 --set max_duration=10ba --set parallel.context=2
rc2=$?
[[ $rc == 0 && $rc2 == 0 ]] && skipped9 CG && skipped9 CGM &&
    grep -q '"event": "replay", "step": 9, "trigger": "outlier", "verdict": "data"' "$TMP/CG/metrics.jsonl" &&
    grep -q '"event": "sdc", "step": 9, "check": "replay", "verdict": "transient", "tensor": "grads/batch-of-rank-0", "mismatches": 2, "ranks": \[0, 1\]' "$TMP/CGM/metrics.jsonl" &&
    ! grep -q '"verdict": "data"' "$TMP/CGM/metrics.jsonl"
tap_check $? "context 2 x 2 after the spike guard's outlier: every group's batch recomputed by the group before it: the data (garbage), or with rank 1's product wrong on that step its group's transient fault; the guard skips the step (exit $rc, $rc2)"
run 4 Coff --set health.replay_interval=0 "${m[@]}" --set parallel.context=2
rc=$?
[[ $rc == 0 ]] && same_tensors "$(ck "$TMP/C" 8)" "$(ck "$TMP/Coff" 8)"
tap_check $? "context 2 x 2: the replay changes no bit: the weights equal a run without replay (exit $rc)"

group_mode E "${moe[@]}" --set parallel.expert=2
tap_check $? "expert 2 x 2: each expert group recomputes the other's first microbatch (the experts' exchange its own), all agree; rank 1's product wrong once: a transient fault of its group, the clean run's weights bit for bit"

group_mode T --set parallel.tensor=2
tap_check $? "tensor 2 x 2: each tensor group recomputes the other's first microbatch, its shards', all agree; rank 1's product wrong once: a transient fault of its group, the clean run's weights bit for bit"

TSR_FAULT=matmul:7:1:every run 4 TP "${rp[@]}" "${m[@]}" --set parallel.tensor=2
rc=$?
[[ $rc == 87 && $(culprit TP check) == replay && $(culprit TP verdict) == unattributed && $(culprit TP ranks) == 0,1,2,3 ]] &&
    grep -q "unattributed (no result is held by two of three computations)" "$TMP/TP.txt"
tap_check $? "tensor 2 x 2: rank 1's products wrong from step 7 on, each group repeating its own result and no third group: unattributed, exit 87, both groups' ranks suspects (exit $rc)"

run 2 T1 "${rp[@]}" "${m[@]}" --set parallel.tensor=2
rc=$?
[[ $rc == 0 && $(health T1 replays) == 0 ]] &&
    grep -q "^health: no deterministic replay in this run (health.replay_interval = 7): one replica group (the world is one tensor, context or expert group): no other group holds the same positions to recompute its microbatch; the fingerprints' comparisons still run" "$TMP/T1.txt"
tap_check $? "tensor with world = parallel.tensor: one replica group, no replay, the reason said at start; the run goes on (exit $rc)"

# DPO: the pass over a rank's pairs (LoRA with dropout) recomputed by its neighbour at step 7
pairs=$("$PY3" "$TSR_ROOT/tests/reference/dpo_pairs.py" "$TMP")
dbase=(--config "$TSR_ROOT/configs/tiny-llama.cfg" --set model.vocab_size=100 --set data.tokenizer=
       --set sample.tokens=0 --set data.train="$pairs" --set data.val= --set eval_interval=0ba
       --set model.n_layer=2 --set model.d_model=64 --set model.n_head=4 --set model.n_kv_head=2
       --set model.intermediate_size=96 --set seq_len=16 --set global_batch=12 --set micro_batch=2
       --set save_interval=4ba --set threads=1 --set log_interval=1 --set optim.warmup=2ba
       --set watchdog.window=0)
dpo=(--set objective=dpo --set lora.rank=4 --set lora.alpha=8 --set lora.dropout=0.1
     --set optim.lr=1e-2 --set dpo.beta=0.5 --set max_duration=8ba --init-from "$TMP/dbase")
drun() { local np=$1 dir=$2; shift 2; ranks "$np" "$TRAIN" "${dbase[@]}" --set run_dir="$TMP/$dir" "$@" >"$TMP/$dir.txt" 2>&1; }
drun 1 dbase --set max_duration=3ba
drun 3 DPO "${dpo[@]}" "${rp[@]}"
rc=$?
drun 3 DPOoff "${dpo[@]}" --set health.replay_interval=0
rc2=$?
[[ -n $pairs && $rc == 0 && $rc2 == 0 && $(health DPO replays) == 1 && $(health DPO replay_mismatches) == 0 ]] &&
    same_tensors "$(ck "$TMP/DPO" 8)" "$(ck "$TMP/DPOoff" 8)"
tap_check $? "DPO (LoRA, dropout 0.1, 3 ranks): each rank's pass over its pairs recomputed by its neighbour at step 7 with the original's dropout, all agree; the weights equal a run without replay bit for bit (exit $rc, $rc2)"

TSR_FAULT=nan:7:1 drun 3 DPON "${dpo[@]}" "${rp[@]}"
rc=$?
[[ $rc == 0 && $(health DPON replay_transients) == 1 ]] &&
    grep -q '"event": "sdc", "step": 7, "check": "replay", "verdict": "transient", "tensor": "grads/microbatch-0-of-rank-1", "mismatches": 1, "ranks": \[1\]' "$TMP/DPON/metrics.jsonl" &&
    grep -q "replay of step 7: rank 1's first microbatch gives gradients .* recomputed by rank 0 .*; rank 2's 0x[0-9a-f]*; rank 1's second try 0x[0-9a-f]*: a transient fault of rank 1 (node .*): its second try agrees" "$TMP/DPON.txt"
tap_check $? "DPO: a NaN rank 1 put into its pass's gradients in step 7: its neighbour's and rank 2's recomputations agree, its second try too: a transient fault of rank 1 (exit $rc)"

# pipeline 2 stages x 2 data pipelines on 4 ranks (stage 0: ranks 0, 1; stage 1: 2, 3; rank 1's
# pipeline: 1, 3): each pipeline recomputes the other's batch through the schedule at step 7
pp=(--set parallel.pipeline=2 "${m[@]}")
run 4 PP "${rp[@]}" "${pp[@]}"
rc=$?
run 4 PPoff --set health.replay_interval=0 "${pp[@]}"
rc2=$?
TSR_FAULT=matmul:7:1 run 4 PPM "${rp[@]}" "${pp[@]}"
rc3=$?
[[ $rc == 0 && $rc2 == 0 && $rc3 == 0 && $(health PP replays) == 1 && $(health PP replay_mismatches) == 0 &&
   $(health PPM replay_transients) == 1 ]] &&
    grep -q '"event": "sdc", "step": 7, "check": "replay", "verdict": "transient", "tensor": "grads/batch-of-rank-1", "mismatches": 2, "ranks": \[1, 3\]' "$TMP/PPM/metrics.jsonl" &&
    grep -q "replay of step 7: rank 1's batch gives gradients .* recomputed by rank 0 .*; rank 1's second try 0x[0-9a-f]*: a transient fault of ranks 1, 3 (whose results differ) of rank 1's pipeline, a batch being the pipeline's collective computation (node .*): its second try agrees" "$TMP/PPM.txt" &&
    same_tensors "$(ck "$TMP/PP" 8)" "$(ck "$TMP/PPoff" 8)" && same_tensors "$(ck "$TMP/PP" 8)" "$(ck "$TMP/PPM" 8)"
tap_check $? "pipeline 2 x 2: each pipeline recomputes the other's batch at step 7 through the schedule, all agree, the weights equal a run without replay bit for bit; rank 1's product wrong once: a transient fault of its pipeline (ranks 1, 3 differ), the clean run's weights (exit $rc, $rc2, $rc3)"

pg=(--set parallel.pipeline=2 --set global_batch=8 --set max_duration=10ba)
TSR_FAULT=garbage:8:9 run 4 PGW "${w[@]}" "${pg[@]}"
rc=$?
TSR_FAULT=garbage:8:9 run 4 PGWoff "${w[@]}" "${pg[@]}" --set health.replay_interval=0
rc2=$?
TSR_FAULT=garbage:8:9,matmul:9:1 run 4 PGM "${g[@]}" "${pg[@]}"
rc3=$?
[[ $rc == 0 && $rc2 == 0 && $rc3 == 0 ]] && skipped9 PGM &&
    grep -q '"event": "replay", "step": 9, "trigger": "outlier", "verdict": "data"' "$TMP/PGW/metrics.jsonl" &&
    grep -q '"event": "guard", "action": "warn", "step": 9,' "$TMP/PGW/metrics.jsonl" &&
    same_tensors "$(ck "$TMP/PGW" 10)" "$(ck "$TMP/PGWoff" 10)" &&
    grep -q '"event": "sdc", "step": 9, "check": "replay", "verdict": "transient", "tensor": "grads/batch-of-rank-1", "mismatches": 2, "ranks": \[1, 3\]' "$TMP/PGM/metrics.jsonl" &&
    ! grep -q '"verdict": "data"' "$TMP/PGM/metrics.jsonl"
tap_check $? "pipeline 2 x 2 after the spike guard's outlier: every pipeline's batch recomputed by the pipeline before it: the data (garbage; guard.action = warn applies the step, computed again: the weights of a run without replay bit for bit), or with rank 1's product wrong on that step its pipeline's transient fault, the step skipped (exit $rc, $rc2, $rc3)"

run 2 PP1 "${rp[@]}" "${pp[@]}"
rc=$?
run 4 PPT "${rp[@]}" "${pp[@]}" --set max_duration=2ba --set parallel.tensor=2
rc2=$?
[[ $rc == 0 && $rc2 == 0 && $(health PP1 replays) == 0 && $(health PPT replays) == 0 ]] &&
    grep -q "^health: no deterministic replay in this run (health.replay_interval = 7): one data-parallel pipeline (the world is parallel.pipeline ranks): no other pipeline holds the same stages to recompute its batch; the fingerprints' comparisons still run" "$TMP/PP1.txt" &&
    grep -q "^health: no deterministic replay in this run (health.replay_interval = 7): parallel.pipeline with a tensor, context or expert group or under zero3 or hsdp: their lockstep recomputation through the stages is not built; the fingerprints' comparisons still run" "$TMP/PPT.txt"
tap_check $? "pipeline with one data pipeline (world = parallel.pipeline), and pipeline with tensor groups: no replay, the reason said at start; the runs go on (exit $rc, $rc2)"

# GRPO (3 ranks, 2 prompts x 4 completions a rank, a reward that varies, a KL term, 2 updates a
# step, LoRA with dropout): each rank's pass over its completions recomputed by its neighbour at
# step 3 from the step's rows, which every rank holds
grpo_prompts "$TMP/rl" 200 && grpo_small_args "$TMP/rl"
grpo=(--set global_batch=6 --set max_duration=4ba --set save_interval=4ba --set reward.kind=regex
      --set 'reward.regex=[0-9]' --set grpo.kl_coef=0.04 --set optim.lr=1e-3 --set grpo.updates=2
      --set lora.rank=4 --set lora.alpha=8 --set lora.dropout=0.1)
grun() { local dir=$1; shift; ranks 3 "$TRAIN" "${small[@]}" "${grpo[@]}" --set run_dir="$TMP/$dir" "$@" >"$TMP/$dir.txt" 2>&1; }
grun G --set health.replay_interval=3
rc=$?
grun Goff --set health.replay_interval=0
rc2=$?
TSR_FAULT=nan:3:1 grun GN --set health.replay_interval=3
rc3=$?
[[ $rc == 0 && $rc2 == 0 && $rc3 == 0 && $(health G replays) == 1 && $(health G replay_mismatches) == 0 &&
   $(health GN replay_transients) == 1 ]] && same_tensors "$(ck "$TMP/G" 4)" "$(ck "$TMP/Goff" 4)" &&
    [[ $(grep -o '"grpo_kl": [^,]*, "grpo_clip_fraction": [^,]*' "$TMP/G/metrics.jsonl") == $(grep -o '"grpo_kl": [^,]*, "grpo_clip_fraction": [^,]*' "$TMP/Goff/metrics.jsonl") ]] &&
    grep -q '"event": "sdc", "step": 3, "check": "replay", "verdict": "transient", "tensor": "grads/microbatch-0-of-rank-1", "mismatches": 1, "ranks": \[1\]' "$TMP/GN/metrics.jsonl" &&
    grep -q "replay of step 3: rank 1's first microbatch gives gradients .* recomputed by rank 0 .*; rank 2's 0x[0-9a-f]*; rank 1's second try 0x[0-9a-f]*: a transient fault of rank 1 (node .*): its second try agrees" "$TMP/GN.txt"
tap_check $? "GRPO (3 ranks, LoRA with dropout, 2 updates a step): each rank's pass over its completions recomputed by its neighbour at step 3 from the step's rows, all agree, the weights and the pass's statistics equal a run without replay bit for bit; a NaN rank 1 put into its gradients: its transient fault (exit $rc, $rc2, $rc3)"

# 8 sequences of 32 a rank: 8 x 32 x (4 + 4 + 1) bytes, twice
grep -q "replay buffers 4.5 KiB (health.replay_interval)" "$TMP/D.txt" && ! grep -q "replay buffers" "$TMP/Doff.txt"
tap_check $? "the memory plan counts two batches' tokens for the replay (4.5 KiB a rank), no second copy of the gradients"
tap_done
