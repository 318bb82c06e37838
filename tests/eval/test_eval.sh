#!/usr/bin/env bash
# `tessera eval` (docs/eval.md) on a model trained for the shipped "colors" task set
# (eval/tasks/, written by eval/tasks/make_colors.py): a tokenizer trained on the task set's text,
# the text prepped, a tiny model trained on 2 MPI ranks, then:
#  - the trained model knows every answer (multiple_choice, language_modeling, schema), a model
#    with random weights scores about the random baseline;
#  - validation loss equals the trainer's own final evaluation; the rescaled accuracies and the
#    gauntlet average follow their formulas;
#  - 2 ranks give the same report as 1; --out writes the same JSON;
#  - bad task files, a missing checkpoint and a task list without a tokenizer are refused;
#  - long operations say how long they took (issue 48 item 12): the trainer's evaluation line,
#    eval's line per dataset and for the tasks, ckpt export's last line; stdout is line-buffered
#    (export's first line is in a log before an error that came after it).
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 14
colors_icl 0.1
tap_check $? "tokenizer trained on the colors text (320 tokens), the text prepped (one line = one document)"
# watchdog.window=0: no straggler exit (86) on a loaded machine (tests/lib.sh, tiny_args)
colors_args
args+=(--set watchdog.window=0 --set eval_interval=100ba)
"${MPIRUN[@]}" -np 2 "$TRAIN" --config "$TSR_ROOT/configs/tiny.cfg" "${args[@]}" --set max_duration=300ba --set run_dir="$TMP/A" >"$TMP/A.txt" 2>&1 &&
"${MPIRUN[@]}" -np 2 "$TRAIN" --config "$TSR_ROOT/configs/tiny.cfg" "${args[@]}" --set max_duration=1ba --set optim.lr=1e-12 --set run_dir="$TMP/R" >"$TMP/R.txt" 2>&1
tap_check $? "trained a tiny model 300 steps, and one for 1 step at lr 1e-12 (random weights)"

# the recipe: tiny.cfg plus its evaluation tasks
colors_tasks_cfg "$TMP/eval.cfg"
"$TOOL" eval --ckpt "$TMP/A" --config "$TMP/eval.cfg" "${args[@]}" --out "$TMP/A.json" >"$TMP/A.out" 2>"$TMP/A.err" &&
"$TOOL" eval --ckpt "$TMP/R" --config "$TMP/eval.cfg" "${args[@]}" >"$TMP/R.out" 2>"$TMP/R.err"
rc=$?
sed 's/^/# /' "$TMP/A.out" | grep -E 'label|gauntlet'
/usr/bin/python3 - "$TMP/A.out" "$TMP/R.out" <<'PY'
import json, sys
a, r = (json.load(open(p)) for p in sys.argv[1:])
acc = lambda rep: {t["label"]: t["accuracy"] for t in rep["icl"]}
A, R = acc(a), acc(r)
print("# trained", A, "\n# random", R)
ok = A["colors_mc"] == 1 and A["colors_lm"] == 1 and A["colors_schema"] >= 0.9
ok &= R["colors_mc"] <= 0.5 and R["colors_schema"] <= 0.7 and R["colors_lm"] <= 0.1
sys.exit(0 if ok else 1)
PY
tap_check $? "trained: every colour right (multiple_choice, language_modeling, schema); random weights: near the baselines 0.2 / 0 / 0.33 (exit $rc)"

/usr/bin/python3 - "$TMP/A.out" "$TMP/A/metrics.jsonl" <<'PY'
import json, math, sys
rep = json.load(open(sys.argv[1]))
last = [json.loads(l) for l in open(sys.argv[2]) if '"val_loss"' in l][-1]
v = rep["val"][0]
ok = abs(v["loss"] - last["val_loss"]) <= 1e-6 * last["val_loss"] and abs(v["perplexity"] - math.exp(v["loss"])) < 1e-6 * v["perplexity"]
res = [(t["accuracy"] - t["random_baseline"]) / (1 - t["random_baseline"]) for t in rep["icl"]]
ok &= all(abs(x - t["rescaled"]) < 1e-9 for x, t in zip(res, rep["icl"]))
ok &= abs(rep["gauntlet"]["average_rescaled_accuracy"] - sum(res) / len(res)) < 1e-9 and rep["gauntlet"]["tasks"] == 4
ok &= rep["step"] == 300 and all(t["examples"] == 30 for t in rep["icl"])
print("# val loss", v["loss"], "trainer", last["val_loss"], "gauntlet", rep["gauntlet"])
sys.exit(0 if ok else 1)
PY
tap_check $? "validation loss equals the trainer's final eval; rescaled = (acc - baseline) / (1 - baseline); gauntlet = their mean"

"${MPIRUN[@]}" -np 2 "$TOOL" eval --ckpt "$TMP/A" --config "$TMP/eval.cfg" "${args[@]}" >"$TMP/A2.out" 2>"$TMP/A2.err" &&
/usr/bin/python3 - "$TMP/A.out" "$TMP/A2.out" "$TMP/A.json" <<'PY'
import json, sys
a, b, c = (json.load(open(p)) for p in sys.argv[1:])
same = a["icl"] == b["icl"] and a["gauntlet"] == b["gauntlet"] and abs(a["val"][0]["loss"] - b["val"][0]["loss"]) < 1e-9 * a["val"][0]["loss"]
sys.exit(0 if same and a == c else 1)
PY
tap_check $? "2 MPI ranks give the same report as 1 (val loss within 1e-9); --out holds the same JSON"

# durations (issue 48 item 12): the evaluation inside training, eval's datasets and tasks, export
grep -qE '^eval step 300 \| val loss [0-9.]+ \| val ppl [0-9.]+ \| [0-9]+\.[0-9]{2} s$' "$TMP/A.txt" &&
    grep -qE "^eval: $TMP/data/val: loss [0-9.]+ over [0-9]+ samples in [0-9]+\.[0-9]{2} s$" "$TMP/A.err" &&
    grep -E '^eval: icl_tasks: 4 tasks, gauntlet [0-9.]+ in [0-9]+\.[0-9]{2} s$' "$TMP/A.err" | sed 's/^/# /'
tap_check $? "durations: the trainer's eval line ends in its seconds; eval says each dataset's and the tasks' time on stderr"
"$TOOL" ckpt export --format hf "$TMP/A" "$TMP/hf" >"$TMP/exp.txt" 2>&1 && touch "$TMP/file" &&
    ! "$TOOL" ckpt export --format hf "$TMP/A" "$TMP/file/hf" >"$TMP/exp2.txt" 2>&1
rc=$?
tail -1 "$TMP/exp.txt" | sed 's/^/# /'
((rc == 0)) && grep -qE "^exporting $TMP/A/step-0*300.h5 \(read in [0-9]+\.[0-9]{2} s\)$" "$TMP/exp.txt" &&
    tail -1 "$TMP/exp.txt" | grep -qE "^exported $TMP/A/step-0*300.h5 to $TMP/hf in [0-9]+\.[0-9]{2} s$" &&
    head -1 "$TMP/exp2.txt" | grep -q "^exporting " && grep -q "cannot create the output directory" "$TMP/exp2.txt"
tap_check $? "ckpt export: 'exporting' with the read time, last line 'exported ... in N s'; line-buffered (a log holds 'exporting' before the later error)"

# the dataset's tokenizer is the run's: data.tokenizer left out ("auto") takes the one prep recorded
# in data.train's index; a recipe naming another is refused unless data.tokenizer_mismatch = "allow"
noks=()
for x in "${args[@]}"; do [[ $x == data.tokenizer=* ]] && noks=("${noks[@]:0:${#noks[@]}-1}") || noks+=("$x"); done
grep -v "^  tokenizer = " "$TSR_ROOT/configs/tiny.cfg" >"$TMP/notok.cfg" # tiny.cfg names gpt2
"$TRAIN" --config "$TMP/notok.cfg" "${noks[@]}" --set max_duration=1ba --dry-run >"$TMP/tok1.txt" 2>&1
r1=$?
"$TRAIN" --config "$TSR_ROOT/configs/tiny.cfg" "${noks[@]}" --set max_duration=1ba --set data.tokenizer=gpt2 --dry-run >"$TMP/tok2.txt" 2>&1
r2=$?
"$TRAIN" --config "$TSR_ROOT/configs/tiny.cfg" "${noks[@]}" --set max_duration=1ba --set data.tokenizer=gpt2 \
    --set data.tokenizer_mismatch=allow --dry-run >"$TMP/tok3.txt" 2>&1
r3=$?
grep "error\|data.tokenizer =" "$TMP/tok1.txt" "$TMP/tok2.txt" | sed 's/^/# /'
[[ $r1 == 0 && $r2 == 1 && $r3 == 0 ]] && grep -q "^data.tokenizer = \"$TMP/tok.tok\": the dataset's" "$TMP/tok1.txt" &&
    grep -q "^  tokenizer = \"$TMP/tok.tok\";" "$TMP/tok1.txt" &&
    grep -q "data.tokenizer = \"gpt2\", but $TMP/data/train was made with the tokenizer \"$TMP/tok.tok\"" "$TMP/tok2.txt" &&
    grep -q 'data.tokenizer_mismatch = "allow"' "$TMP/tok2.txt"
tap_check $? "data.tokenizer left out takes the dataset's (exit $r1); another is refused naming both and data.tokenizer_mismatch (exit $r2); allowed with it (exit $r3)"

# the plan counts what trains: under LoRA the adapters, the base frozen
"$TRAIN" --config "$TSR_ROOT/configs/tiny.cfg" "${args[@]}" --set max_duration=1ba --set lora.rank=4 --dry-run >"$TMP/lora.txt" 2>&1
rc=$?
grep "^params:\|^lora:" "$TMP/lora.txt" | sed 's/^/# /'
n_ad=$(grep -o "; [0-9]* adapter parameters" "$TMP/lora.txt" | grep -o "[0-9]*")
[[ $rc == 0 && -n $n_ad ]] && grep -q "^params: $n_ad trainable (LoRA adapters), [0-9]* frozen (the base)" "$TMP/lora.txt"
tap_check $? "--dry-run with lora.rank = 4: the plan's trainable parameters are the $n_ad adapter parameters, the base frozen (exit $rc)"

# an evaluation's config holds what to evaluate only: the model and seq_len are the checkpoint's
cat >"$TMP/only.cfg" <<CFG
data = { val = "$TMP/data/val"; };
eval_samples = 0;
micro_batch = 4;
threads = 1;
icl_tasks = ( { label = "colors_mc"; type = "multiple_choice"; path = "$TASKS/colors_mc.jsonl"; } );
CFG
"$TOOL" eval --ckpt "$TMP/A" --config "$TMP/only.cfg" >"$TMP/only.out" 2>"$TMP/only.err"
rc=$?
sed 's/^/# /' "$TMP/only.err" | head -5
"$PY3" - "$TMP/only.out" "$TMP/A.json" <<'PY'
import json, sys
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
acc = lambda r: [t["accuracy"] for t in r["icl"] if t["label"] == "colors_mc"]
print("# val", a["val"][0]["loss"], b["val"][0]["loss"], "acc", acc(a), acc(b))
sys.exit(0 if abs(a["val"][0]["loss"] - b["val"][0]["loss"]) <= 1e-7 * b["val"][0]["loss"] and acc(a) == acc(b) != [] else 1)
PY
tap_check $(( rc || $? )) "eval --config with data.val, eval_samples, micro_batch and one ICL task only: exit $rc, the recipe's val loss (1e-7: micro_batch 4, not 8, sums in another order) and colors_mc accuracy"

cp -r "$TMP/data/val" "$TMP/packed" && sed -i "1a # packed_seq_len\t16\t(as tessera prep --pack 16 writes it)" "$TMP/packed/index.tsv"
"$TOOL" eval --ckpt "$TMP/A" --config "$TMP/only.cfg" --val "$TMP/packed" >/dev/null 2>"$TMP/packed.err"
rc=$?
sed 's/^/# /' "$TMP/packed.err"
[[ $rc == 1 ]] && grep -q "packed for seq_len 16" "$TMP/packed.err" && grep -q -- "--set seq_len=16" "$TMP/packed.err"
tap_check $? "data packed for seq_len 16, the checkpoint's is 32: exit 1 naming --set seq_len=16 (got $rc)"

printf '{"query": "the apple is", "choices": ["red"], "gold": 3}\n' >"$TMP/bad.jsonl"
sed "s|$TASKS/colors_lm.jsonl|$TMP/bad.jsonl|; s|\"language_modeling\"; path = \"$TMP/bad.jsonl\"|\"multiple_choice\"; path = \"$TMP/bad.jsonl\"|" "$TMP/eval.cfg" >"$TMP/bad.cfg"
"$TOOL" eval --ckpt "$TMP/A" --config "$TMP/bad.cfg" "${args[@]}" >/dev/null 2>"$TMP/bad.err"
rc=$?
sed 's/^/# /' "$TMP/bad.err"
[[ $rc == 2 ]] && grep -q "$TMP/bad.jsonl:1: multiple_choice example: \"gold\"" "$TMP/bad.err"
tap_check $? "a task line with gold out of range: exit 2 naming file:line and the field (got $rc)"

"$TOOL" eval --ckpt "$TMP/nothing" --config "$TMP/eval.cfg" >/dev/null 2>"$TMP/miss.err"
rc=$?
[[ $rc == 2 ]] && grep -q "$TMP/nothing" "$TMP/miss.err"
tap_check $? "a missing checkpoint: exit 2 naming it (got $rc)"

"$TOOL" eval --ckpt "$TMP/A" --config "$TMP/eval.cfg" "${args[@]}" --set data.tokenizer= >/dev/null 2>"$TMP/tok.err"
rc=$?
sed 's/^/# /' "$TMP/tok.err"
[[ $rc == 1 ]] && grep -q "icl_tasks need a tokenizer" "$TMP/tok.err"
tap_check $? "ICL tasks without a tokenizer: exit 1 saying so (got $rc)"
