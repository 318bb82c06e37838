#!/usr/bin/env bash
# The injection sites of docs/health.md "Fault injection" built beside the state's flips, on real
# MPI ranks, and what catches each:
#  - an activation (a layer's output in a rank's first forward of a replay step): the replay, a
#    transient fault of that rank;
#  - the data a rank receives in the gradient reduction: the reduced gradients' fingerprints (the
#    majority names it); the data it sends: every rank sums the same wrong contribution, caught by
#    nothing (the detection table says so);
#  - tensor parallelism: a tensor every rank of a tensor group holds whole (the final norm) is
#    compared over the group too, so a flip in one rank's copy is outvoted and named;
#  - replay under a pipeline (2 x 2) at every step raises no false alarm;
#  - a malformed activation flip and a reduction flip in a mode without that reduction are refused.
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 7
synth_tiny_args 2 24 2 --set max_duration=11ba --set save_interval=0ba --set optim.warmup=2ba
source "$(dirname "$0")/sdc_lib.sh" # (run, fault_refused, culprit, health)

TSR_FAULT=flip:acts:layer1:20:1:7 run 3 A --set health.replay_interval=7
rc=$?
[[ $rc == 0 ]] && grep -q "TSR_FAULT: flipped bit 20 of layer 1's output element" "$TMP/A.txt" &&
    grep -q '"event": "sdc", "step": 7, "check": "replay", "verdict": "transient", "tensor": "grads/microbatch-0-of-rank-1"' "$TMP/A/metrics.jsonl"
tap_check $? "rank 1's layer 1 output flipped in its first forward of replay step 7: the replay names rank 1, its second try agrees: transient (exit $rc)"

TSR_FAULT=flip:received:wte:20:1:10 run 3 R
rc=$?
[[ $rc == 87 && $(culprit R check) == replicas && $(culprit R verdict) == outvoted && $(culprit R ranks) == 1 && $(culprit R tensor) == grads/wte ]] &&
    grep -q "TSR_FAULT: flipped bit 20 of wte element .* (received, step 10)" "$TMP/R.txt"
tap_check $? "a bit of wte's reduced gradients flipped as rank 1 receives them in step 10's reduction: the fingerprints outvote rank 1 (exit $rc)"

TSR_FAULT=flip:sent:wte:20:1:10 run 3 S
rc=$?
[[ $rc == 0 ]] && grep -q "TSR_FAULT: flipped bit 20 of wte element .* (sent, step 10)" "$TMP/S.txt" &&
    grep -q "^health: fingerprints compared .*, all agreed" "$TMP/S.txt"
tap_check $? "a bit flipped in what rank 1 sends into step 10's reduction: every rank sums it, the copies agree: not caught (exit $rc)"

TSR_FAULT=flip:weights:lnfw:20:1:7 run 4 T --set parallel.tensor=2
rc=$?
[[ $rc == 87 && $(culprit T verdict) == outvoted && $(culprit T ranks) == 1 && $(culprit T tensor) == model/lnfw ]]
tap_check $? "parallel.tensor = 2 on 4 ranks: rank 1's final norm flipped after step 7 differs at step 10 from the three other copies (its tensor group's and the other group's): outvoted, rank 1 named (exit $rc)"

run 4 P --set parallel.pipeline=2 --set max_duration=2ba --set health.replay_interval=1
rc=$?
[[ $rc == 0 && $(health P replays) == 2 && $(health P replay_mismatches) == 0 ]] &&
    ! grep -q "no deterministic replay" "$TMP/P.txt"
tap_check $? "replay under the pipeline (2 stages x 2) at every step: each pipeline recomputes the other's batch, all agree: no false alarm (exit $rc)"

fault_refused flip:acts:layer2:3:1:2 X "TSR_FAULT: flip:acts:layer2:3:1:2: acts' TENSOR is not layerL with L a layer of this model" \
    "an activation flip naming no layer of the model is refused before anything is written"
fault_refused flip:received:wte:3:1:2 X2 "sent and received act on the all-reduce of the flat gradients" \
    "a reduction flip under zero1 (a reduce-scatter) is refused, saying why" --set parallel.sharding=zero1
tap_done
