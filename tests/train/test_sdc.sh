#!/usr/bin/env bash
# Silent data corruption caught inside the job (docs/health.md), on real MPI ranks:
#  - fingerprints are on by default: a clean run compares (at start, every save, every
#    health.fingerprint_interval steps) and agrees, its checkpoints say "fingerprints agreed", and
#    its weights are those of a run with them off, bit for bit;
#  - a bit flipped at rest in one rank's weights, moments (ddp, zero1, zero3) is caught before the
#    next update changes it, naming the tensor, rank and node; exit 87, run_dir/sdc-culprit.json,
#    the checkpoint written from that state set aside; the restart resumes from the newest agreed
#    checkpoint and ends with the clean run's weights bit for bit;
#  - with three copies a flipped reduced gradient is outvoted (the majority named); a flip between
#    two fingerprint steps is caught at the next one; two copies (hsdp) cannot say which is right:
#    unattributed;
#  - after a resume, a rank's state is checked against the checkpoint's CRC32C (the read path);
#  - tensor parallelism (T 2 x data 2) and the pipeline (2 stages x data 2): only the ranks holding
#    the same part compare, a resume checks the tensors held whole against the file, a flip at rest
#    is caught, and a replay runs under tensor parallelism only (test_sdc_replay.sh);
#  - deterministic replay: one rank's matrix product wrong once in a replay step is a transient
#    fault (its second try agrees), the rank recomputes its microbatches and the run ends with the
#    clean run's weights bit for bit; wrong in every product from then on: persistent, exit 87;
#  - a resume takes the newest checkpoint whose fingerprints agreed; a malformed flip is refused.
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 22
synth_tiny_args 2 24 2 --set max_duration=12ba --set save_interval=5ba --set optim.warmup=2ba --set keep_last=3
source "$(dirname "$0")/sdc_lib.sh"

run 2 A
rc=$?
[[ $rc == 0 && $(health A comparisons) == 4 && $(health A rest_checks) == 4 && $(health A mismatches) == 0 ]] &&
    grep -q "^health: fingerprints compared 4 times and checked at rest 4 times (health.fingerprint_interval = 10), all agreed" "$TMP/A.txt" &&
    grep -q "every CRC32C matches; fingerprints agreed)" <("$TOOL" ckpt verify "$TMP/A" 2>&1)
tap_check $? "ddp on 2 ranks, fingerprints on by default: compared at start, the saves of steps 5 and 12 and step 10, all agreed; the checkpoint says so (exit $rc)"

run 2 Aoff --set health.fingerprint_interval=0
rc=$?
[[ $rc == 0 ]] && ! grep -q "^health: fingerprints" "$TMP/Aoff.txt" && same_tensors "$(ck "$TMP/A" 12)" "$(ck "$TMP/Aoff" 12)" &&
    grep -q "^fingerprints     not compared$" <("$TOOL" ckpt inspect "$TMP/Aoff")
tap_check $? "health.fingerprint_interval = 0: no checks, the checkpoint says not compared, and the weights equal the checked run's bit for bit (exit $rc)"

TSR_FAULT=flip:weights:qkvw:20:1:10 run 2 W
rc=$?
[[ $rc == 87 && $(culprit W verdict) == changed_at_rest && $(culprit W ranks) == 1 && $(culprit W tensor) == model/qkvw &&
   -n $(culprit W nodes) && $(culprit W set_aside_from) == 10 && -f $TMP/W/step-00000010.h5.sdc && ! -f $TMP/W/step-00000010.h5 &&
   $(cat "$TMP/W/latest") == step-00000005.h5 ]] &&
    grep -q "error: silent data corruption: model/qkvw of rank 1 (node .*) changed at rest between the fingerprints taken after step 10 and the next update" "$TMP/W.txt" &&
    grep -q '"event": "sdc", "step": 11, "check": "at_rest", "verdict": "changed_at_rest", "tensor": "model/qkvw"' "$TMP/W/metrics.jsonl"
tap_check $? "ddp: a bit of rank 1's qkvw flipped after step 10: caught before step 11's update, exit 87, the culprit recorded, the step-10 checkpoint set aside, latest back at step 5 (exit $rc)"

run 2 W
rc=$?
[[ $rc == 0 ]] && grep -q "checkpoint resume step 5 " "$TMP/W.txt" && same_tensors "$(ck "$TMP/A" 12)" "$(ck "$TMP/W" 12)"
tap_check $? "the restart resumes from step 5 (the newest agreed checkpoint left) and ends with the clean run's weights and moments bit for bit (exit $rc)"

TSR_FAULT=flip:m:wte:25:0:10 run 2 Z1 --set parallel.sharding=zero1
rc=$?
[[ $rc == 87 && $(culprit Z1 ranks) == 0 && $(culprit Z1 tensor) == optim/m/wte ]] && grep -q "optim/m/wte of rank 0 (node .*) changed at rest" "$TMP/Z1.txt"
tap_check $? "zero1: rank 0's first moment (its own part, no replica) flipped at rest: its stored fingerprint catches it (exit $rc)"

TSR_FAULT=flip:v:fcw:3:1:10 run 2 Z3 --set parallel.sharding=zero3
rc=$?
[[ $rc == 87 && $(culprit Z3 ranks) == 1 && $(culprit Z3 tensor) == optim/v/fcw ]]
tap_check $? "zero3: a flip in rank 1's shard of the second moment: caught at rest (exit $rc)"

TSR_FAULT=flip:rgrads:wte:22:2:10 run 3 G3
rc=$?
[[ $rc == 87 && $(culprit G3 verdict) == outvoted && $(culprit G3 ranks) == 2 && $(culprit G3 tensor) == grads/wte ]] &&
    grep -q "silent data corruption after step 10: grads/wte differs between the 3 ranks that hold it: rank 2 (node .*) 0x[0-9a-f]*; the other 2 ranks agree on 0x[0-9a-f]* (the majority)" "$TMP/G3.txt"
tap_check $? "ddp on 3 ranks: rank 2's reduced gradient flipped in step 10: outvoted by the other two, named first (exit $rc)"

TSR_FAULT=flip:weights:lnfw:27:1:7 run 3 L3
rc=$?
[[ $rc == 87 && $(culprit L3 verdict) == outvoted && $(culprit L3 ranks) == 1 && $(culprit L3 step) == 10 ]] &&
    grep -q '"event": "sdc", "step": 10, "check": "replicas", "verdict": "outvoted", "tensor": "model/lnfw"' "$TMP/L3/metrics.jsonl"
tap_check $? "ddp on 3 ranks: a flip after step 7, between fingerprint steps: the copies differ at step 10, rank 1 outvoted (3 steps to detection; exit $rc)"

TSR_FAULT=flip:rgrads:wpe:22:3:10 run 4 H --set parallel.sharding=hsdp --set parallel.replica_group=2
rc=$?
[[ $rc == 87 && $(culprit H verdict) == unattributed && $(culprit H ranks) == 1,3 && -z $(culprit H nodes) && -n $(culprit H suspects) ]] &&
    grep -q "grads/wpe differs between the 2 ranks that hold it, with no majority: rank 1 (node .*) 0x[0-9a-f]*, rank 3" "$TMP/H.txt"
tap_check $? "hsdp 2 x 2: rank 3's reduced gradient shard differs from its replica's (rank 1): two copies, unattributed, both suspects (exit $rc)"

cp -r "$TMP/A" "$TMP/R"
rm -f "$TMP/R/step-00000012.h5"
echo step-00000010.h5 >"$TMP/R/latest"
TSR_FAULT=flip:loaded:fcprojw:21:0:10 run 2 R
rc=$?
[[ $rc == 87 && $(culprit R check) == load && $(culprit R verdict) == read_path && $(culprit R ranks) == 0 ]] &&
    grep -q "model/fcprojw of rank 0 (node .*) differs, after the resume at step 10, from the checkpoint it was read from" "$TMP/R.txt"
tap_check $? "a resume whose loaded weights differ on rank 0 from the checkpoint's CRC32C (the read path): caught before the first step (exit $rc)"

# tensor parallelism (T 2 x data 2) and the pipeline (2 stages of one layer x data 2): rank 1 holds
# the same split or layers as rank 0 (pipeline) or rank 3 (tensor) only
for mode in tensor pipeline; do
    d=${mode:0:1}P
    run 4 "$d" --set parallel.$mode=2 --set max_duration=6ba --set health.replay_interval=4
    rc=$?
    n=4 rpi=4 # (a replay at step 4, each tensor group or pipeline recomputing the other's work, compares first)
    [[ $rc == 0 && $(health "$d" comparisons) == "$n" && $(health "$d" mismatches) == 0 && $(health "$d" replay_interval) == "$rpi" &&
       $(health "$d" replay_mismatches) == 0 ]] &&
        grep -q "^health: fingerprints compared $n times .*, all agreed" "$TMP/$d.txt"
    tap_check $? "parallel.$mode = 2 on 4 ranks (ddp): each rank compared with the one holding the same part only, at start, the saves of steps 5 and 6 and the replay at step 4 (which agrees), all agreed (exit $rc)"
    TSR_FAULT=flip:weights:wpe:20:1:10 run 4 "$d" --set parallel.$mode=2
    rc=$?
    [[ $rc == 87 && $(culprit "$d" verdict) == changed_at_rest && $(culprit "$d" ranks) == 1 && $(culprit "$d" tensor) == model/wpe ]] &&
        grep -q "checkpoint resume step 6 " "$TMP/$d.txt" && ! grep -q "from the checkpoint it was read from" "$TMP/$d.txt" &&
        grep -q "model/wpe of rank 1 (node .*) changed at rest between the fingerprints taken after step 10" "$TMP/$d.txt"
    tap_check $? "parallel.$mode = 2: the resume at step 6 agrees with the file (a divided tensor is not held whole), step 10 compares clean, a flip of rank 1's wpe after it (the first stage's alone under the pipeline: every rank accepts the flip) is caught at rest (exit $rc)"
done

cp -r "$TMP/A" "$TMP/N"
run 2 N --set max_duration=15ba --set health.fingerprint_interval=0
run 2 N --set max_duration=16ba
rc=$?
[[ $rc == 0 ]] && grep -q "checkpoint resume step 12 " "$TMP/N.txt" &&
    grep -q "the fingerprints of step-00000015.h5 were not compared when they were saved" "$TMP/N.txt"
tap_check $? "a resume takes the newest checkpoint whose fingerprints agreed (step 12), passing the newer step 15 saved with them off, and says so (exit $rc)"

rp=(--set health.replay_interval=7)
run 3 C3 "${rp[@]}"
rc=$?
[[ $rc == 0 && $(health C3 replays) == 1 && $(health C3 replay_mismatches) == 0 ]]
tap_check $? "ddp on 3 ranks with a replay at step 7: each rank's first microbatch recomputed by its neighbour, all agree (exit $rc)"
TSR_FAULT=matmul:7:1 run 3 M3 "${rp[@]}"
rc=$?
[[ $rc == 0 && $(health M3 replay_transients) == 1 ]] && same_tensors "$(ck "$TMP/C3" 12)" "$(ck "$TMP/M3" 12)" &&
    grep -q "warning: replay of step 7: rank 1's first microbatch gives gradients 0x[0-9a-f]* on rank 1 (node .*), 0x[0-9a-f]* recomputed by rank 0 (node .*); rank 2's 0x[0-9a-f]*; rank 1's second try 0x[0-9a-f]*: a transient fault of rank 1 (node .*): its second try agrees; it computes its microbatches again before the reduction" "$TMP/M3.txt" &&
    grep -q '"event": "sdc", "step": 7, "check": "replay", "verdict": "transient", "tensor": "grads/microbatch-0-of-rank-1"' "$TMP/M3/metrics.jsonl"
tap_check $? "rank 1's matrix product wrong once in step 7: the replay finds it, rank 2 sides with the replayer, rank 1's second try agrees: transient; rank 1 recomputes and the run ends with the clean run's weights bit for bit (exit $rc)"
TSR_FAULT=matmul:7:1:every run 3 P3 "${rp[@]}"
rc=$?
[[ $rc == 87 && $(culprit P3 check) == replay && $(culprit P3 verdict) == persistent && $(culprit P3 ranks) == 1 && -n $(culprit P3 nodes) ]] &&
    grep -q "a persistent fault of rank 1 (node .*): its second try disagrees again" "$TMP/P3.txt"
tap_check $? "rank 1's products wrong from step 7 on: its second try disagrees again: persistent, exit 87, culprit rank 1 (exit $rc)"
TSR_FAULT=matmul:7:0 run 2 M2 "${rp[@]}" --set parallel.sharding=zero1
rc=$?
[[ $rc == 0 && $(health M2 replay_transients) == 1 ]] && grep -q "rank 0's second try 0x[0-9a-f]*: a transient fault of rank 0" "$TMP/M2.txt"
tap_check $? "zero1 on 2 ranks (no third rank): rank 0's second try agrees with its replayer: transient (exit $rc)"

fault_refused flip:weights:nosuch:3:1:2 X "TSR_FAULT: flip:weights:nosuch:3:1:2: no such TENSOR in this model" \
    "a flip naming no tensor of the model is refused before anything is written"
fault_refused flip:grads:qkvw:3:1:2 X2 "under zero3 and hsdp a layer's gradients are reduce-scattered inside the backward" \
    "a flip of a layer's gradients before their reduction under zero3 is refused, saying why" --set parallel.sharding=zero3
fault_refused matmul:0:1 X3 "TSR_FAULT: matmul:0:1: expected matmul:STEP:WHO\[:every\] (STEP >= 1" \
    "a wrong product at step 0 (there is none) is refused before anything is written"
tap_done
