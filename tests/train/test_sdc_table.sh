#!/usr/bin/env bash
# The detection table of docs/health.md ("The detection table, measured") against the trainer:
# bench/sdc_detection.py --ci runs one cell per injection site (every site on ddp: weights, moments
# at rest, gradients before and after the reduction, the reduction's data as a rank sends and
# receives it, a wrong product once and from a step on, an activation, the read path of a resume,
# a checkpoint file flipped on disk) and one per mode (weights at rest under zero1, zero3, hsdp,
# context, expert, Muon, LoRA, DPO, GRPO, tensor, pipeline), and every row it measures must be
# a row of the table: the generated table stays what the trainer does.
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 2
/usr/bin/python3 -c 'import h5py' 2>/dev/null || { echo "# no h5py in /usr/bin/python3: skipped"; exit 77; }
BUILD=$BUILD /usr/bin/python3 "$TSR_ROOT/bench/sdc_detection.py" --ci --check "$TSR_ROOT/docs/health.md" >"$TMP/out.txt" 2>&1
rc=$?
grep '^# ' "$TMP/out.txt"
rows=$(grep -c '^# | ' "$TMP/out.txt")   # (one line per cell as it ends)
[[ $rows == 23 ]]
tap_check $? "23 cells measured: 12 sites on ddp, 11 other modes ($rows)"
((rc == 0))
tap_check $? "each measured row is a row of docs/health.md's detection table (exit $rc)"
tap_done
