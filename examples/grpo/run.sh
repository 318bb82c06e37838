#!/usr/bin/env bash
# run.sh OUT_DIR — reinforcement learning on a verifiable reward, end to end (docs/rl.md, "The
# arithmetic example"): a synthetic arithmetic corpus (`tessera synth --task arithmetic`: sums and
# differences of 0..12), a character-level tokenizer, a small Llama-style model pretrained on the
# problems and SFT'd on answers that half the time run on after the number ("19 because 12+7=19"),
# then GRPO on 2 ranks with a reward program (reward.py: the answer and nothing else) on the
# training prompts; the held-out prompts (problems GRPO never trains on) scored greedily before and
# after by `tessera eval` as a generation task; plots by `tessera report`.
# SCALE (default 1) multiplies the pretraining's and GRPO's step counts, and below 0.5 the SFT's too
# (SFT's 300 steps teach the run-on answers GRPO then removes: halved, the SFT model seldom runs on,
# and GRPO had nothing to teach: docs/rl.md "The arithmetic example" gives each scale's figures); NP (default 2) is the GRPO stage's ranks, started
# by $MPIRUN (default mpirun). An Open MPI mpirun gets, as make demo's does (docs/slurm.md "Running
# without Slurm"), OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 as root (it refuses
# root without them: the GRPO stage failed there) and OMPI_MCA_rmaps_base_oversubscribe=1 when NP
# outnumbers the cores; the script says what it set. A value already in the environment is kept.
# Re-run into the same OUT_DIR with the same SCALE and NP, it picks up where the last run stopped
# (killed, failed, or finished): the data are made once (OUT/data.done), each training stage resumes
# from its latest checkpoint (a finished one exits at once), the evals and the report are redone.
# Other settings are refused (exit 2), and so is a non-empty OUT_DIR that run.sh did not make (no
# OUT/run.sh.conf): nothing there is touched.
# Needs `make` only (and python3 for reward.py).
set -euo pipefail
OUT=${1:?usage: run.sh OUT_DIR}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
EX=$ROOT/examples/grpo
BIN=${BIN:-$ROOT/build}
SCALE=${SCALE:-1} NP=${NP:-2}
read -ra MPIRUN <<<"${MPIRUN:-mpirun}" # e.g. MPIRUN="srun" or "mpirun --oversubscribe"
if [[ $(basename "${MPIRUN[0]}") == mpirun ]] && "${MPIRUN[0]}" --version 2>/dev/null | grep -q 'Open MPI'; then
    set_mpi=()
    if [[ $(id -u) == 0 && -z ${OMPI_ALLOW_RUN_AS_ROOT:-} ]]; then
        export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
        set_mpi+=(OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "(running as root)")
    fi
    if ((NP > $(nproc))) && [[ -z ${OMPI_MCA_rmaps_base_oversubscribe:-} ]]; then
        export OMPI_MCA_rmaps_base_oversubscribe=1
        set_mpi+=(OMPI_MCA_rmaps_base_oversubscribe=1 "($NP ranks on $(nproc) cores: mpirun --oversubscribe)")
    fi
    ((${#set_mpi[@]} == 0)) || echo "run.sh: for ${MPIRUN[*]} (Open MPI): ${set_mpi[*]}; docs/slurm.md \"Running without Slurm\""
fi
steps() { /usr/bin/python3 -c "print(max(4, int($1 * $SCALE)))"; }
conf="SCALE=$SCALE NP=$NP"
if [[ -f $OUT/run.sh.conf ]]; then
    if [[ $(<"$OUT/run.sh.conf") != "$conf" ]]; then
        echo "run.sh: $OUT was made with $(<"$OUT/run.sh.conf"), this run asks $conf: a run picks up only" \
             "with the same settings (choose another OUT_DIR, or remove $OUT)" >&2
        exit 2
    fi
    echo "run.sh: $OUT exists ($conf): picking up where the last run stopped"
elif [[ -e $OUT && ( ! -d $OUT || -n $(ls -A "$OUT") ) ]]; then
    echo "run.sh: $OUT exists and is not a run.sh output folder (no run.sh.conf): refusing to write into it" \
         "(choose another OUT_DIR)" >&2
    exit 2
fi
mkdir -p "$OUT"
echo "$conf" >"$OUT/run.sh.conf"
train() { "$BIN/tessera-train" --config "$EX/arith.cfg" --set data.tokenizer="$OUT/tok.tsr" "$@"; }

# 0. the corpus; a character-level tokenizer (no merges: every byte is a token, <|endoftext|> 256);
#    made again from the start unless a run finished it (data.done)
make_data() {
    rm -rf "$OUT/raw" "$OUT/data" "$OUT/tok.tsr"
    "$BIN/tessera" synth --task arithmetic --out "$OUT/raw" --examples 20000 --max-operand 12 --seed 1 -q
    /usr/bin/python3 -c '
import json, sys
with open(sys.argv[2], "w") as f:
    for l in open(sys.argv[1]): f.write(json.loads(l)["text"] + "\n")' "$OUT/raw/pretrain.jsonl" "$OUT/raw/text.txt"
    "$BIN/tessera" tokenizer train --quiet --vocab-size 258 --min-frequency 1000000000 \
        --special '<|endoftext|>' -o "$OUT/tok.tsr" "$OUT/raw/text.txt" 2>&1 | { grep -v "0 merges" || true; }
    prep() { "$BIN/tessera" prep --quiet --tokenizer "$OUT/tok.tsr" --val-fraction 0 "$@"; }
    prep --out "$OUT/data/pretrain" --format jsonl "$OUT/raw/pretrain.jsonl"
    prep --out "$OUT/data/sft" --format sft --pack 32 "$OUT/raw/sft.jsonl"
    prep --out "$OUT/data/prompts" --format prompts --pack 16 "$OUT/raw/prompts.jsonl"
    prep --out "$OUT/data/heldout" --format prompts --pack 16 "$OUT/raw/heldout.jsonl"
    # the held-out prompts as a generation task for tessera eval (stage 4)
    /usr/bin/python3 -c '
import json, sys
with open(sys.argv[2], "w") as f:
    for l in open(sys.argv[1]):
        j = json.loads(l)
        f.write(json.dumps({"context": j["prompt"], "answer": str(j["answer"])}) + "\n")' \
        "$OUT/raw/heldout.jsonl" "$OUT/raw/heldout-gen.jsonl"
    touch "$OUT/data.done"
}
if [[ -e $OUT/data.done ]]; then echo "run.sh: the data of the last run are complete: kept"; else make_data; fi

# 1. pretrain on "a+b=c" lines; 2. SFT on the prompt/response pairs (each stage, re-run, resumes
#    from its run directory's latest checkpoint; a finished one exits at once)
train --set run_dir="$OUT/base" --set data.train="$OUT/data/pretrain/train" \
    --set max_duration="$(steps 600)ba"
train --set run_dir="$OUT/sft" --set data.train="$OUT/data/sft/train" --init-from "$OUT/base" \
    --set optim.lr=1e-3 --set max_duration="$(/usr/bin/python3 -c "print(300 if $SCALE >= 0.5 else $(steps 300))")ba"

# 3. GRPO on NP ranks: the rollouts decoded on every rank, scored by reward.py beside it; the
#    held-out pass@1 at every 10th step (data.val: the held-out prompts)
"${MPIRUN[@]}" -np "$NP" "$BIN/tessera-train" --config "$EX/arith.cfg" --set data.tokenizer="$OUT/tok.tsr" \
    --init-from "$OUT/sft" --set run_dir="$OUT/grpo" --set objective=grpo \
    --set data.train="$OUT/data/prompts/train" --set data.val="$OUT/data/heldout/train" \
    --set global_batch=16 --set micro_batch=8 --set optim.lr=5e-5 --set optim.warmup=0ba \
    --set optim.schedule=constant --set max_duration="$(steps 40)ba" \
    --set eval_interval="$(steps 10)ba" --set save_interval="$(steps 10)ba" --set log_interval=5 \
    --set reward.kind=command --set reward.command="/usr/bin/python3 -u $EX/reward.py"

# 4. the held-out prompts as a generation task (LLM Foundry's generation_task_with_answers) before
#    and after GRPO; the plots (grpo.png: reward, pass rate, held-out pass@1)
{ cat "$EX/arith.cfg"; cat <<CFG
icl_tasks = ( { label = "heldout"; type = "generation_task_with_answers";
                path = "$OUT/raw/heldout-gen.jsonl"; continuation_delimiter = ""; } );
CFG
} >"$OUT/eval.cfg"
for stage in sft grpo; do
    "$BIN/tessera" eval --ckpt "$OUT/$stage" --config "$OUT/eval.cfg" \
        --set data.tokenizer="$OUT/tok.tsr" --set micro_batch=16 -o "$OUT/eval-$stage.json" >/dev/null
done
"$BIN/tessera" report "$OUT/grpo" -o "$OUT/report-grpo"
/usr/bin/python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
acc = {s: json.load(open(f"{out}/eval-{s}.json"))["icl"][0] for s in ("sft", "grpo")}
print(f"held-out pass@1 (greedy, {acc['sft']['examples']:.0f} problems GRPO never trained on): "
      f"SFT {acc['sft']['accuracy']:.3f} -> GRPO {acc['grpo']['accuracy']:.3f}")
# a step redone after a resume is logged again: its last record counts
steps = list({j["step"]: j for j in map(json.loads, open(f"{out}/grpo/metrics.jsonl")) if "grpo_rollout_s" in j}.values())
roll, train = sum(j["grpo_rollout_s"] for j in steps), sum(j["grpo_train_s"] for j in steps)
tps = sorted(j["grpo_rollout_tokens_per_s"] for j in steps)[len(steps) // 2]
print(f"GRPO's {len(steps)} steps: rollouts {roll:.1f} s ({100 * roll / (roll + train):.0f}%), "
      f"training {train:.1f} s ({100 * train / (roll + train):.0f}%); generation {tps:.0f} "
      f"tokens/s (median over the steps, all ranks)")
PY
