#!/usr/bin/env bash
# The arithmetic GRPO example (examples/grpo/run.sh, docs/rl.md "The arithmetic example") end to
# end at SCALE=0.02 (every stage's steps at their floor of 4: pretraining, SFT, GRPO on 2 ranks
# with the reward program examples/grpo/reward.py): every stage and tool the script calls exits 0
# (synth, tokenizer train, prep of the four files, the three training runs, tessera eval of the SFT
# and GRPO checkpoints as a generation task, tessera report), its summary lines come out, and the
# run records GRPO's figures. What the example teaches (held-out pass@1 0.556 -> 1.000 at full
# length) is not judged at 4 steps: tests/train/test_grpo.sh judges the same pipeline's learning.
# This keeps the script, its config and its reward program from drifting (the LoRA/DPO example
# failed at full length while CI passed: issue 48 item 7); about 7 s. It runs as the README writes
# it, its default launcher a bare mpirun (no MPIRUN, no tests/mpi_env.sh): as root (CI) Open MPI
# refuses to start without OMPI_ALLOW_RUN_AS_ROOT*, which the script sets and says it set
# (issue 65 item 6: the GRPO stage failed as root). Run again into the same folder (issue 65 item
# 7: synth refused the existing raw/), it picks up the finished stages (the data kept, each training
# stage exits at its last step) and prints the same held-out line; with another SCALE, or into a
# folder it did not make, it refuses (exit 2) and touches nothing there. About 10 s more.
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 7
cmd=$(grep -m1 '^bash examples/grpo/run.sh ' "$TSR_ROOT/examples/grpo/README.md" | sed 's/ *#.*//')
[[ $cmd == "bash examples/grpo/run.sh runs/grpo-example" ]] || tap_diag "the README's command changed: '$cmd'"
(cd "$TMP" && mkdir -p examples && ln -s "$TSR_ROOT/examples/grpo" examples/grpo && ln -s "$BUILD" build &&
    env -u MPIRUN -u OMPI_ALLOW_RUN_AS_ROOT -u OMPI_ALLOW_RUN_AS_ROOT_CONFIRM SCALE=0.02 \
        BIN="$BUILD" bash -c "${cmd/runs\/grpo-example/ex}") >"$TMP/ex.txt" 2>&1
rc=$?
tail -2 "$TMP/ex.txt" | sed 's/^/# /'
tap_check $rc "the README's '$cmd' (SCALE=0.02: 4 steps a stage, GRPO on 2 ranks with the reward program, a bare mpirun) runs every stage (exit $rc)"
if [[ $(id -u) == 0 ]] && mpirun --version 2>/dev/null | grep -q 'Open MPI'; then
    grep -q '^run.sh: for mpirun (Open MPI): OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 (running as root)' "$TMP/ex.txt"
    tap_check $? "as root it set OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 for mpirun and said so"
else
    tap_skip "as root: the OMPI_ALLOW_RUN_AS_ROOT pair set and said" "not root, or not Open MPI"
fi

grep -qE '^held-out pass@1 \(greedy, [0-9]+ problems GRPO never trained on\): SFT [0-9.]+ -> GRPO [0-9.]+$' "$TMP/ex.txt" &&
    grep -qE "^GRPO's 4 steps: rollouts [0-9.]+ s \([0-9]+%\), training [0-9.]+ s \([0-9]+%\); generation [0-9]+ tokens/s" "$TMP/ex.txt" &&
    [[ -s $TMP/ex/eval-sft.json && -s $TMP/ex/eval-grpo.json ]]
tap_check $? "its summary: the held-out pass@1 before and after (tessera eval of both checkpoints), the rollout/training split"
"$PY3" - "$TMP/ex/grpo/metrics.jsonl" <<'PY' && [[ -s $TMP/ex/report-grpo/grpo.png || ! -x "$(command -v gnuplot)" ]]
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
steps = [r for r in recs if "grpo_reward_mean" in r]
print(f"# GRPO: {len(steps)} step records, last step {steps[-1]['step'] if steps else None}")
sys.exit(0 if len(steps) == 4 and steps[-1]["step"] == 4 else 1)
PY
tap_check $? "the GRPO run logged its 4 steps' figures (grpo_reward_mean ...) and tessera report drew grpo.png"

# again into the same folder: the finished stages picked up
run_again() { (cd "$TMP" && env -u MPIRUN BIN="$BUILD" "$@" bash examples/grpo/run.sh "${dir:-ex}") >"$TMP/again.txt" 2>&1; }
listing() { (cd "$TMP/ex" && find . -type f "$@" -printf '%p %s %T@\n' | sort); }
made_args=( '(' -path './raw/*' -o -path './data/*' -o -name tok.tsr -o -name '*.h5' ')' )
made=$(listing "${made_args[@]}")
run_again SCALE=0.02
rc=$?
[[ $rc == 0 ]] && grep -q "^run.sh: ex exists (SCALE=0.02 NP=2): picking up" "$TMP/again.txt" &&
    grep -q "^run.sh: the data of the last run are complete: kept" "$TMP/again.txt" &&
    [[ $(grep '^held-out pass@1' "$TMP/again.txt") == "$(grep '^held-out pass@1' "$TMP/ex.txt")" ]] &&
    [[ $(listing "${made_args[@]}") == "$made" && $made == *./grpo/step-* ]]
tap_check $? "run.sh again into the same folder: exit $rc, the data and the checkpoints kept as they were, the same held-out line"
tail -3 "$TMP/again.txt" | sed 's/^/# /'
before=$(listing)
run_again SCALE=0.5
rc=$?
[[ $rc == 2 ]] && grep -q "was made with SCALE=0.02 NP=2, this run asks SCALE=0.5 NP=2" "$TMP/again.txt" && [[ $(listing) == "$before" ]]
tap_check $? "with another SCALE it refuses (exit $rc) naming both settings, the folder untouched"
mkdir "$TMP/mine" && echo keep >"$TMP/mine/notes.txt"
dir=mine run_again SCALE=0.02
rc=$?
[[ $rc == 2 ]] && grep -q "not a run.sh output folder" "$TMP/again.txt" && [[ $(ls -A "$TMP/mine") == notes.txt ]]
tap_check $? "into a non-empty folder it did not make it refuses (exit $rc), writing nothing there"
tap_done
