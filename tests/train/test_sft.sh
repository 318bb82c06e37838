#!/usr/bin/env bash
# Finetuning (configs/tiny-sft.cfg, docs/finetune.md): pretrain on the colors text, finetune on
# prompt/response pairs prepped with `tessera prep --format sft`, evaluate:
#  - the loss mask is honoured by the loss's token count: step 1's counted targets equal the
#    response (+ end-of-text) tokens of its samples, computed here from the shard file; with
#    --target-prompts every token counts;
#  - --init-from the pretrained run directory starts the finetune at step 1 from its weights;
#  - the finetuned model answers the prompts (tessera eval, language_modeling on the pairs);
#  - so does one finetuned on the pairs packed whole (prep --pack) with document attention.
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 7
TASKS=$TSR_ROOT/eval/tasks
# prompt/response pairs about the colors: "q: what colour is the apple ?\na:" -> " red"
/usr/bin/python3 - "$TASKS/colors_lm.jsonl" "$TMP/pairs.jsonl" "$TMP/pairs_lm.jsonl" "$TMP/text.txt" <<'PY'
import json, sys
facts = [json.loads(l) for l in open(sys.argv[1])]
with open(sys.argv[2], "w") as f, open(sys.argv[3], "w") as g, open(sys.argv[4], "w") as t:
    for rep in range(8):
        for x in facts:
            thing = x["context"][len("the "):-len(" is")]
            f.write(json.dumps({"prompt": f"q: what colour is the {thing} ?\na:", "response": " " + x["continuation"]}) + "\n")
    for x in facts:
        thing = x["context"][len("the "):-len(" is")]
        g.write(json.dumps({"context": f"q: what colour is the {thing} ?\na:", "continuation": x["continuation"]}) + "\n")
        t.write(f"q: what colour is the {thing} ?\n")
PY
cat "$TASKS/colors_corpus.txt" "$TMP/text.txt" >"$TMP/all.txt"
"$TOOL" tokenizer train --vocab-size 340 --special '<|endoftext|>' --out "$TMP/tok.tok" -q "$TMP/all.txt" &&
"$TOOL" prep --out "$TMP/pre" --tokenizer "$TMP/tok.tok" --format text --doc-sep '\n' --val-fraction 0.1 -q "$TASKS/colors_corpus.txt" &&
"$TOOL" prep --out "$TMP/sft" --tokenizer "$TMP/tok.tok" --format sft --val-fraction 0.1 -q "$TMP/pairs.jsonl" &&
"$TOOL" prep --out "$TMP/sftall" --tokenizer "$TMP/tok.tok" --format sft --target-prompts --val-fraction 0.1 -q "$TMP/pairs.jsonl"
tap_check $? "a tokenizer, the pretraining text and the prompt/response pairs prepped (with and without prompt targets)"

# watchdog.window=0: no straggler exit (86) on a loaded machine (tests/lib.sh, tiny_args)
common=(--set watchdog.window=0 --set model.vocab_size=340 --set model.vocab_multiple=64 --set data.tokenizer="$TMP/tok.tok"
        --set sample.tokens=0 --set model.n_layer=2 --set model.d_model=64 --set model.n_head=4
        --set seq_len=32 --set model.max_seq_len=32 --set micro_batch=8 --set threads=1 --set log_interval=10)
"${MPIRUN[@]}" -np 2 "$TRAIN" --config "$TSR_ROOT/configs/tiny.cfg" "${common[@]}" --set global_batch=16 \
    --set data.train="$TMP/pre/train" --set data.val="$TMP/pre/val" --set max_duration=300ba \
    --set eval_interval=0ba --set run_dir="$TMP/P" >"$TMP/P.txt" 2>&1
tap_check $? "pretrained 300 steps on the colors text"

sft=(--config "$TSR_ROOT/configs/tiny-sft.cfg" "${common[@]}" --set global_batch=16 --set data.shuffle=false)
"${MPIRUN[@]}" -np 2 "$TRAIN" "${sft[@]}" --set data.train="$TMP/sft/train" --set data.val="$TMP/sft/val" \
    --set max_duration=1ba --set run_dir="$TMP/M1" >"$TMP/M1.txt" 2>&1 &&
"${MPIRUN[@]}" -np 2 "$TRAIN" "${sft[@]}" --set data.train="$TMP/sftall/train" --set data.val="$TMP/sftall/val" \
    --set max_duration=1ba --set run_dir="$TMP/M2" >"$TMP/M2.txt" 2>&1 &&
/usr/bin/python3 - "$TMP/sft/train" "$TMP/M1/metrics.jsonl" "$TMP/M2/metrics.jsonl" <<'PY'
import json, os, struct, sys
d = sys.argv[1]
shards = sorted(f for f in os.listdir(d) if f.startswith("shard-"))
raw = open(os.path.join(d, shards[0]), "rb").read()
n = struct.unpack_from("<Q", raw, 32)[0]                  # header: n_tokens at byte 32
mask = raw[64 + 2 * n: 64 + 3 * n]                          # uint16 tokens, then n mask bytes
T, GB = 32, 16
want = sum(mask[k * T + j] for k in range(GB) for j in range(1, T + 1))   # targets of samples 0..15
got = [json.loads(l)["targets"] for l in open(sys.argv[2]) if '"loss"' in l and '"event"' not in l][0]
got_all = [json.loads(l)["targets"] for l in open(sys.argv[3]) if '"loss"' in l and '"event"' not in l][0]
print("# step 1 counted targets: masked", got, "expected", want, "of", GB * T, "; prompts too:", got_all)
sys.exit(0 if got == want and 0 < want < GB * T and got_all == GB * T and len(shards) == 1 else 1)
PY
tap_check $? "step 1 counts exactly the response and end-of-text targets of its 16 samples (from the shard's mask); with --target-prompts all 512"

"${MPIRUN[@]}" -np 2 "$TRAIN" "${sft[@]}" --set data.shuffle=true --set data.train="$TMP/sft/train" --set data.val="$TMP/sft/val" \
    --set max_duration=60ba --set eval_interval=60ba --set run_dir="$TMP/F" --init-from "$TMP/P" >"$TMP/F.txt" 2>&1
rc=$?
[[ $rc == 0 ]] && grep -q "checkpoint init-from step 0 | $TMP/P/step-00000300.h5" "$TMP/F.txt" && grep -q '"step": 1, "loss"' "$TMP/F/metrics.jsonl"
tap_check $? "finetuned 60 steps --init-from the pretrained run directory (its step-300 checkpoint; exit $rc)"

{ cat "$TSR_ROOT/configs/tiny-sft.cfg"; printf 'icl_tasks = ( { label = "pairs"; type = "language_modeling"; path = "%s"; } );\n' "$TMP/pairs_lm.jsonl"; } >"$TMP/eval.cfg"
for run in P F; do
    "$TOOL" eval --ckpt "$TMP/$run" --config "$TMP/eval.cfg" "${common[@]}" --set global_batch=16 \
        --set data.train="$TMP/sft/train" --set data.val="$TMP/sft/val" >"$TMP/$run.json" 2>"$TMP/$run.err" || echo "# eval $run failed"
done
/usr/bin/python3 - "$TMP/P.json" "$TMP/F.json" <<'PY'
import json, sys
p, f = (json.load(open(x)) for x in sys.argv[1:])
ap, af = p["icl"][0]["accuracy"], f["icl"][0]["accuracy"]
lp, lf = p["val"][0]["loss"], f["val"][0]["loss"]
print("# answers right: pretrained", ap, "finetuned", af, "; response loss", lp, "->", lf)
sys.exit(0 if af >= 0.9 and lf < lp else 1)
PY
tap_check $? "the finetuned model answers the prompts (>= 90%) and its loss on held-out responses fell"

"${MPIRUN[@]}" -np 2 "$TRAIN" "${sft[@]}" --set data.train="$TMP/sft/train" --set data.val="$TMP/sft/val" \
    --set max_duration=1ba --set run_dir="$TMP/X" --init-from "$TMP/nothing" >"$TMP/X.txt" 2>&1
rc=$?
[[ $rc == 2 ]] && grep -q "$TMP/nothing" "$TMP/X.txt"
tap_check $? "--init-from a path that does not exist: exit 2 naming it (got $rc)"

# packed: whole pairs per sample (prep --pack 32) and document attention, finetuned the same way
"$TOOL" prep --out "$TMP/sftp" --tokenizer "$TMP/tok.tok" --format sft --pack 32 --val-fraction 0.1 -q "$TMP/pairs.jsonl"
eot=$(printf '<|endoftext|>' | "$TOOL" tokenizer encode --tokenizer "$TMP/tok.tok" --special - | tr -s ' \n' ' ' | awk '{ print $1 }')
"${MPIRUN[@]}" -np 2 "$TRAIN" "${sft[@]}" --set data.shuffle=true --set data.train="$TMP/sftp/train" --set data.val="$TMP/sftp/val" \
    --set model.attn_mask=document --set model.eot_token="$eot" \
    --set max_duration=60ba --set eval_interval=60ba --set run_dir="$TMP/K" --init-from "$TMP/P" >"$TMP/K.txt" 2>&1
rc=$?
"$TOOL" eval --ckpt "$TMP/K" --config "$TMP/eval.cfg" "${common[@]}" --set global_batch=16 \
    --set data.train="$TMP/sftp/train" --set data.val="$TMP/sftp/val" >"$TMP/K.json" 2>"$TMP/K.err"
/usr/bin/python3 - "$TMP/K.json" "$TMP/sftp/train/index.tsv" "$rc" "$eot" <<'PY'
import json, sys
k = json.load(open(sys.argv[1]))
packed = any(l.startswith("# packed_seq_len\t32") for l in open(sys.argv[2]))
print("# packed + document mask (eot", sys.argv[4] + "): answers right", k["icl"][0]["accuracy"], "exit", sys.argv[3])
sys.exit(0 if sys.argv[3] == "0" and packed and k["icl"][0]["accuracy"] >= 0.9 else 1)
PY
tap_check $? "prep --pack 32 + model.attn_mask = document: the finetuned model answers the prompts (>= 90%)"
