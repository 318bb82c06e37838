#!/usr/bin/env bash
# Values that were accepted and should not be (issue 64 finding 6), each refused now, naming it:
#  - a reward program answering a reward of 1e308 (finite, but its advantages and the loss are
#    not: the loss went NaN and the spike guard was blamed): exit 2 naming the program, the bound
#    |reward| <= 1e6 and the answer (src/posttrain/reward_proc.c; docs/rl.md);
#  - `tessera-job sweep --grid` with a value holding a newline (the rest of it and every later
#    value silently dropped, exit 0): exit 1 naming the value, nothing printed (jobs/tessera-job);
#  - `tessera generate --prompts` with "id": 1e999 (written back as `"id": inf`, not JSON): exit 1
#    naming the line (src/generate/gen_prompts.c);
#  - `tessera prep --format prompts` with "answer": 1e999 (kept, never to be matched): the line
#    refused naming FILE:LINE (src/prep/prep_doc.c).
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 4
grpo_prompts "$TMP/rl" 300
grpo_small_args "$TMP/rl"
small+=(--set max_duration=1ba)
cat >"$TMP/huge.py" <<'PY'
import json, sys
for line in sys.stdin:
    print(json.dumps({"id": json.loads(line)["id"], "reward": 1e308}), flush=True)
PY
"$TRAIN" "${small[@]}" --set run_dir="$TMP/r" --set reward.kind=command \
    --set reward.command="$PY3 $TMP/huge.py" >"$TMP/r.txt" 2>&1
rc=$?
tap_diag "$(grep -m1 'error: ' "$TMP/r.txt" | cut -c1-300)"
((rc == 2)) && grep -q "error: reward.command \"$PY3 $TMP/huge.py\": a reward beyond the bound |reward| <= 1e6.*it answered: {\"id\": [0-9]*, \"reward\": 1e+308}" "$TMP/r.txt" &&
    ! grep -q '^step 1' "$TMP/r.txt" && ! grep -q 'spike guard' "$TMP/r.txt"
tap_check $? "a reward of 1e308: exit $rc naming the program, the bound and its answer; no step logged, the spike guard not blamed"

"$TSR_ROOT/jobs/tessera-job" sweep pretrain NODES=1 TASKS_PER_NODE=2 GPUS_PER_NODE=0 CPUS_PER_TASK=1 \
    WALLTIME=0:10:00 RUN_DIR="$TMP/sw" CONFIG="$TSR_ROOT/configs/tiny.cfg" --grid "$(printf 'optim.lr=1e-3,2e-3\nseed=5')" --grid seed=1,2 \
    >"$TMP/s.sbatch" 2>"$TMP/s.err"
rc=$?
tap_diag "$(cat "$TMP/s.err")"
((rc == 1)) && [[ ! -s $TMP/s.sbatch ]] && grep -q "sweep setting 'optim.lr=1e-3,2e-3\\\\nseed=5': a value holds a newline" "$TMP/s.err"
tap_check $? "tessera-job sweep --grid with a newline in a value: exit $rc naming it, nothing printed"

# a checkpoint to generate from: one step of GRPO with the built-in reward
"$TRAIN" "${small[@]}" --set run_dir="$TMP/g" --set reward.compare=exact >"$TMP/g.txt" 2>&1 || { cat "$TMP/g.txt"; exit 1; }
printf '{"prompt": "1+1=", "id": "a"}\n{"prompt": "2+2=", "id": 1e999}\n' >"$TMP/p.jsonl"
"$TOOL" generate --ckpt "$TMP/g" --prompts "$TMP/p.jsonl" --out "$TMP/o.jsonl" --temperature 0 >"$TMP/o.txt" 2>&1
rc=$?
tap_diag "$(grep -m1 'error' "$TMP/o.txt")"
((rc == 1)) && grep -q "line 2.*\"id\" is a number beyond a double's range" "$TMP/o.txt" && [[ ! -e $TMP/o.jsonl ]]
tap_check $? "generate --prompts with \"id\": 1e999: exit $rc naming line 2, no output written"

printf '{"prompt": "1+1=", "answer": 2}\n{"prompt": "2+2=", "answer": 1e999}\n{"prompt": "3+3=", "answer": "6"}\n' >"$TMP/a.jsonl"
"$TOOL" prep --out "$TMP/ap" --val-fraction 0 --tokenizer "$TMP/rl/tok.tsr" --format prompts --pack 8 \
    "$TMP/a.jsonl" >"$TMP/a.txt" 2>&1
rc=$?
tap_diag "$(grep -m1 'answer' "$TMP/a.txt")"
grep -q "$TMP/a.jsonl:2: field \"answer\" is a number beyond a double's range" "$TMP/a.txt" &&
    ! grep -q '1e999\|inf' "$TMP/ap/train/prompts.jsonl" 2>/dev/null
tap_check $? "prep with \"answer\": 1e999: the line refused naming FILE:2 (exit $rc), not kept"
tap_done
