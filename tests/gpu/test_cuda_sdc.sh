#!/usr/bin/env bash
# Fingerprints with device = cuda (docs/health.md "On the GPU"): every check copies the device's
# weights and AdamW moments (and ddp's reduced gradients) into the host mirror and hashes them
# there with the CPU's CRC32C. A tiny GPT-2 (2 layers, head size 32) on 2 ranks, fingerprints
# every 2 steps:
#  - ddp, clean: compared at start and after steps 2, 4, 6, all agreed (no false alarm), the
#    checkpoints say "fingerprints agreed"; and at the default ("auto": on the device, at start
#    and at every save only) compared 3 times (start, the saves of steps 4 and 6);
#  - a checkpoint the CPU wrote, resumed on the device: every tensor a rank holds whole, hashed
#    from the device after the load's upload, equals the file's crc32c (the CPU's fingerprint of
#    the same bytes); one bit of rank 1's wte flipped on the device after the load: named;
#  - a bit of rank 1's device qkvw flipped after step 2 (a fingerprint step): changed at rest,
#    rank 1 named before step 3's update; flipped after step 3: the replicas differ at step 4's
#    comparison (the host mirror is not refreshed between fingerprint steps: only a hash of the
#    device's copy sees it);
#  - zero3, clean: all agreed; a bit of rank 0's device shard of optim/m/wte flipped after step 2:
#    rank 0 named;
#  - the flips the device path cannot reach (the gradients; zero1's weights) refused at start.
# The flips go through the backend's copy (TSR_FAULT, pulled, flipped, pushed, the mirror
# restored: the device alone holds the flipped bit). On the host emulator of the CUDA backend
# (build/tests/tessera-train-cuemu) and on the real backend with 2 GPUs (skipped loudly otherwise).
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/gpu_lib.sh"
source "$(dirname "$0")/../train/sdc_lib.sh"
tsr_tmpdir
PER=6
tap_plan $((2 * PER))
make_synth "$TMP/data"
tiny_args "$TMP/data/train"
args+=(--set model.n_layer=2 --set model.n_head=2 --set global_batch=8 --set micro_batch=2
       --set max_duration=6ba --set save_interval=4ba --set health.fingerprint_interval=2)
# run BIN DIR ARGS...: 2 ranks with device = cuda, output in DIR.txt
run() {
    local bin=$1 dir=$2; shift 2
    ranks 2 "$bin" "${args[@]}" --set device=cuda --set run_dir="$TMP/$dir" "${GPU_COMM_ARGS[@]}" "$@" \
        >"$TMP/$dir.txt" 2>&1
}
agreed() { # agreed DIR N: exit 0, N comparisons, no mismatch, said so
    [[ $(health "$1" comparisons) == "$2" && $(health "$1" mismatches) == 0 ]] &&
        grep -q "^health: fingerprints compared $2 times .* all agreed" "$TMP/$1.txt"
}
# named DIR VERDICT RANKS TENSOR: the culprit file's
named() { [[ $(culprit "$1" verdict) == "$2" && $(culprit "$1" ranks) == "$3" && $(culprit "$1" tensor) == "$4" ]]; }

suite() {
    local bin=$1 l=$2 rc
    gpus 2 "$l: ddp clean" || { for ((i = 1; i < PER; i++)); do gpus 2 "$l: check $((i + 1))"; done; return; }
    run "$bin" "$l.ddp"
    rc=$?
    ((rc == 0)) && agreed "$l.ddp" 4 &&
        grep -q "fingerprints agreed)" <("$TOOL" ckpt verify "$TMP/$l.ddp" 2>&1) &&
        run "$bin" "$l.auto" --set health.fingerprint_interval=auto && agreed "$l.auto" 3 &&
        grep -q "(health.fingerprint_interval = auto: at start and every save)" "$TMP/$l.auto.txt"
    tap_check $? "$l: ddp, clean: compared at start and after steps 2, 4, 6 from the device's state, all agreed; the checkpoint says so; the default (\"auto\") on the device: at start and at the saves of steps 4 and 6 only (exit $rc)"

    ranks 2 "$TRAIN" "${args[@]}" --set max_duration=4ba --set run_dir="$TMP/$l.cpu" >"$TMP/$l.cpu.txt" 2>&1 &&
        cp -r "$TMP/$l.cpu" "$TMP/$l.cpuflip" && run "$bin" "$l.cpu"
    rc=$?
    ((rc == 0)) && grep -q "checkpoint resume step 4 " "$TMP/$l.cpu.txt" && agreed "$l.cpu" 2
    tap_check $? "$l: a CPU run's checkpoint resumed on the device: every tensor held whole, hashed from the device, equals the file's crc32c; compared after steps 4 and 6, agreed (exit $rc)"
    TSR_FAULT=flip:loaded:wte:3:1:4 run "$bin" "$l.cpuflip"
    rc=$?
    ((rc == 87)) && named "$l.cpuflip" read_path 1 model/wte &&
        grep -q "model/wte of rank 1 (node .*) differs, after the resume at step 4, from the checkpoint" "$TMP/$l.cpuflip.txt"
    tap_check $? "$l: a bit of rank 1's device wte flipped after the load: named against the file's crc32c (exit $rc)"

    TSR_FAULT=flip:weights:qkvw:20:1:2 run "$bin" "$l.rest"
    rc=$?
    ((rc == 87)) && named "$l.rest" changed_at_rest 1 model/qkvw &&
        grep -q '"event": "sdc", "step": 3, "check": "at_rest", "verdict": "changed_at_rest", "tensor": "model/qkvw"' "$TMP/$l.rest/metrics.jsonl" &&
        { TSR_FAULT=flip:weights:qkvw:20:1:3 run "$bin" "$l.rep"; rc=$?; ((rc == 87)); } &&
        named "$l.rep" unattributed 0,1 model/qkvw &&
        grep -q "silent data corruption after step 4: model/qkvw differs between the 2 ranks" "$TMP/$l.rep.txt"
    tap_check $? "$l: rank 1's device qkvw flipped after step 2: changed at rest, rank 1 named in step 3; after step 3: the copies differ at step 4's comparison (exit $rc)"

    run "$bin" "$l.z3" --set parallel.sharding=zero3 && agreed "$l.z3" 4 &&
        TSR_FAULT=flip:m:wte:25:0:2 run "$bin" "$l.z3f" --set parallel.sharding=zero3
    rc=$?
    ((rc == 87)) && named "$l.z3f" changed_at_rest 0 optim/m/wte
    tap_check $? "$l: zero3: clean, all agreed; rank 0's device shard of optim/m/wte flipped after step 2: rank 0 named (exit $rc)"

    TSR_FAULT=flip:rgrads:wte:3:1:2 run "$bin" "$l.grads"
    rc=$?
    TSR_FAULT=flip:weights:wte:3:1:2 run "$bin" "$l.z1w" --set parallel.sharding=zero1
    local rc2=$?
    ((rc == 1 && rc2 == 1)) && [[ ! -e $TMP/$l.grads/metrics.jsonl ]] &&
        grep -q "on device = cuda the flips reach the device's weights, m and v (and loaded)" "$TMP/$l.grads.txt" &&
        grep -q "under zero1 on device = cuda a rank's fp32 weights are its part: flip m or v" "$TMP/$l.z1w.txt"
    tap_check $? "$l: a flip of the gradients, and of zero1's weights, refused on the device: exit 1, nothing written (exit $rc, $rc2)"
}

both_halves "$PER" "" ""
tap_done
