#!/usr/bin/env bash
# test_prep_chat_template.sh — `tessera prep --format chat` with the model's own chat template
# (Llama 3, Qwen 3: the tokenizer_config.json beside --tokenizer .../tokenizer.json) on the 24
# conversations of tests/chat/conversations (system prompts, multi-turn, unicode, white space,
# reasoning in <think>, tool calls and results, content parts, null content):
#  - ids equal to the reference, conversation by conversation: @huggingface/jinja renders the
#    template, transformers.js encodes the text (tests/prep/ref_chat_prep.cjs); the lines prep skips
#    are exactly those whose template render fails in the reference too;
#  - the loss mask, checked independently of how prep places it: the runs of targets decode to the
#    assistant turns' answers (the text after a </think>, white space aside), each closed by the
#    template's end-of-turn token (unless tool calls follow it), one run per turn, nothing else;
#  - --target-prompts, --chat-template none / PATH, the errors, and Llama 3's eos_token ending plain
#    documents when the vocabulary has no <|endoftext|>;
#  - a template is untrusted input: a 400 KB tokenizer_config.json whose expression chains 100,000
#    additions is refused at its line:column (it ended the C stack: exit 139), a namespace holding
#    itself skips the lines naming the cycle, a loop past the render budget stops prep (exit 2)
#    naming the template and --template-steps / --template-memory.
# Skips (77) without node or the npm files ./INSTALL fetches.
source "$(dirname "$0")/../lib.sh"
NPM_DIR=${TSR_DATA_DIR:-$TSR_ROOT/data/npm}
HFJS=$NPM_DIR/hf-tokenizers JINJA=$NPM_DIR/hf-jinja MODELS=$NPM_DIR/chat
REF=$TSR_ROOT/tests/prep/ref_chat_prep.cjs
command -v node >/dev/null || { echo "node not found (Debian: nodejs; ./INSTALL)"; exit 77; }
for f in "$HFJS/dist/main.js" "$JINJA/dist/index.cjs" "$MODELS"/{llama3,qwen3}/tokenizer{,_config}.json; do
    [[ -f $f ]] || { echo "$f missing: run ./INSTALL --ensure"; exit 77; }
done
[[ -x $TOOL ]] || { echo "$TOOL missing: run make"; exit 77; }
tsr_tmpdir
tap_plan 16
"$PY3" - "$TSR_ROOT/tests/chat/conversations" "$TMP/conv.jsonl" <<'PY'
import glob, json, os, sys
with open(sys.argv[2], "w") as out:
    for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
        c = json.load(open(f))
        c.pop("add_generation_prompt", None)      # prep renders a whole conversation
        out.write(json.dumps(c, ensure_ascii=False) + "\n")
PY
prep() { "$TOOL" prep --val-fraction 0 --format chat "$@"; }

# check_mask MODEL CLOSER DATASET: the independent mask check (see the header); prints a summary
check_mask() {
    "$PY3" - "$TMP/ref-$1.txt" "$TMP/conv.jsonl" "$TSR_ROOT/tests/prep" "$3" "$TMP/runs-$1" <<'PY' || return 1
import json, sys
sys.path.insert(0, sys.argv[3])
from prep_check import read_dataset
ref = [l.split() for l in open(sys.argv[1]).read().splitlines()]
conv = [json.loads(l) for l in open(sys.argv[2])]
t, m = read_dataset(sys.argv[4])
pos, runs, want = 0, [], []
for r, c in zip(ref, conv):
    if r[0] == "error:":
        continue
    mm = m[pos:pos + len(r)]
    k = 0
    while k < len(r):                      # maximal runs of targets
        if mm[k]:
            e = k
            while e < len(r) and mm[e]: e += 1
            runs.append(" ".join(r[k:e])); k = e
        else:
            k += 1
    for msg in c["messages"]:
        if msg.get("role") == "assistant" and isinstance(msg.get("content"), str):
            a = msg["content"].split("</think>")[-1]
            if a.strip():
                want.append({"answer": a.strip(), "before": msg["content"][:-len(a)] if a != msg["content"] else "",
                             "tools": bool(msg.get("tool_calls"))})
    want.append(None)                      # the end of a conversation
    runs.append("")
    pos += len(r)
open(sys.argv[5], "w").write("\n".join(x for x in runs if x) + "\n")
json.dump(want, open(sys.argv[5] + ".want", "w"))
print(pos, len(t))
sys.exit(0 if pos == len(t) else 1)
PY
    node "$REF" "$HFJS" "$JINJA" "$MODELS/$1" decode "$TMP/runs-$1" >"$TMP/runs-$1.txt" || return 1
    "$PY3" - "$TMP/runs-$1.txt" "$TMP/runs-$1.want" "$2" <<'PY'
import json, sys
got = [json.loads(l) for l in open(sys.argv[1]).read().splitlines()]
want = [w for w in json.load(open(sys.argv[2])) if w is not None]
closer, bad = sys.argv[3], []
if len(got) != len(want):
    bad.append(f"{len(got)} runs of targets for {len(want)} assistant answers")
for g, w in zip(got, want):
    # closed by the end-of-turn token; a turn with tool calls goes on with them (template text)
    body = g[:-len(closer)] if g.endswith(closer) else None if not w["tools"] else g
    # the run may start inside a token that also holds the content's reasoning ("</think>\n\n")
    k = body.strip().find(w["answer"]) if body is not None else -1
    extra = body.strip()[:k] if k >= 0 else None
    if k < 0 or body.strip()[k + len(w["answer"]):] or (extra and not w["before"].rstrip().endswith(extra.rstrip())):
        bad.append(f"run {g[:60]!r} for answer {w['answer'][:40]!r}")
print(f"{len(got)} runs of targets = {len(want)} answers, each closed by {closer}" if not bad else "; ".join(bad[:3]))
sys.exit(1 if bad else 0)
PY
}

for mc in "llama3:<|eot_id|>" "qwen3:<|im_end|>"; do
    m=${mc%%:*} closer=${mc#*:}
    node "$REF" "$HFJS" "$JINJA" "$MODELS/$m" encode "$TMP/conv.jsonl" >"$TMP/ref-$m.txt"
    prep --tokenizer "$MODELS/$m/tokenizer.json" --out "$TMP/$m" "$TMP/conv.jsonl" >"$TMP/$m.log" 2>&1
    rc=$?
    skipped=$(grep -o 'conv.jsonl:[0-9]*' "$TMP/$m.log" | cut -d: -f2 | paste -sd' ')
    referr=$(grep -n '^error:' "$TMP/ref-$m.txt" | cut -d: -f1 | paste -sd' ')
    ours=$("$PY3" -c 'import sys; sys.path.insert(0, sys.argv[1]); from prep_check import read_dataset; print(" ".join(map(str, read_dataset(sys.argv[2])[0].tolist())))' "$TSR_ROOT/tests/prep" "$TMP/$m/train" 2>/dev/null)
    ref=$(grep -v '^error:' "$TMP/ref-$m.txt" | paste -sd' ')
    ((rc == 0)) && [[ -n $ours && $ours == "$ref" && $skipped == "$referr" ]] && grep -q "the chat template of $MODELS/$m/tokenizer_config.json" "$TMP/$m.log"
    tap_check $? "$m: ids of every conversation equal @huggingface/jinja + transformers.js ($(wc -w <<<"$ours") ids); skipped lines ($skipped) = the reference's failing renders ($referr)"
    out=$(check_mask "$m" "$closer" "$TMP/$m/train")
    tap_check $? "$m: the targets are the assistant answers and their closing token: $(tail -1 <<<"$out")"
done

# --target-prompts: every token a target; --chat-template PATH = the automatic choice
prep --tokenizer "$MODELS/qwen3/tokenizer.json" --out "$TMP/tp" --target-prompts "$TMP/conv.jsonl" >/dev/null 2>&1
"$PY3" -c 'import sys; sys.path.insert(0, sys.argv[1]); from prep_check import read_dataset; t, m = read_dataset(sys.argv[2]); sys.exit(0 if len(m) and m.all() else 1)' "$TSR_ROOT/tests/prep" "$TMP/tp/train"
tap_check $? "--target-prompts: every token a target"
prep --tokenizer "$MODELS/qwen3/tokenizer.json" --out "$TMP/explicit" --chat-template "$MODELS/qwen3/tokenizer_config.json" "$TMP/conv.jsonl" >/dev/null 2>&1 &&
    cmp -s "$TMP/qwen3/train/shard-00000.bin" "$TMP/explicit/train/shard-00000.bin"
tap_check $? "--chat-template PATH: the same dataset as the tokenizer's own template"

# --chat-template none: the "ROLE: content" format, every line kept
prep --tokenizer "$MODELS/qwen3/tokenizer.json" --out "$TMP/none" --chat-template none "$TMP/conv.jsonl" >"$TMP/none.log" 2>&1
rc=$?
text=$("$PY3" -c 'import sys; sys.path.insert(0, sys.argv[1]); from prep_check import read_dataset; print(" ".join(map(str, read_dataset(sys.argv[2])[0][:12].tolist())))' "$TSR_ROOT/tests/prep" "$TMP/none/train" 2>/dev/null)
((rc == 0)) && ! grep -q "chat template" "$TMP/none.log" &&
    [[ $("$TOOL" tokenizer decode --tokenizer "$MODELS/qwen3/tokenizer.json" <(echo "$text") 2>/dev/null) == user:* ]]
tap_check $? "--chat-template none: the ROLE: content format (the first document starts \"user:\")"

# errors: nothing written. refused NAME WANT PATTERN CONFIG [OPTION...]: prep with --chat-template
# CONFIG exits WANT, its stderr ($TMP/NAME.err) says PATTERN (grep -E), nothing is written
refused() {
    local name=$1 want=$2 pat=$3 cfg=$4
    shift 4
    prep --tokenizer "$MODELS/qwen3/tokenizer.json" --out "$TMP/$name" --chat-template "$cfg" "$@" \
        "$TMP/conv.jsonl" >/dev/null 2>"$TMP/$name.err"
    rc=$?
    ((rc == want)) && grep -Eq -- "$pat" "$TMP/$name.err" && [[ ! -e $TMP/$name ]]
}
printf '{"eos_token": "<|im_end|>"}\n' >"$TMP/notpl.json"
refused e1 1 "notpl.json: the file has no chat_template" "$TMP/notpl.json"
tap_check $? "--chat-template with no chat_template: exit $rc, says so, nothing written"
printf '{"chat_template": "{%% for m in messages %%}{{ m.content }"}\n' >"$TMP/broken.json"
refused e2 2 "syntax" "$TMP/broken.json"
tap_check $? "a chat_template with a syntax error: exit $rc, says where, nothing written"
refused e3 2 "missing.json" "$TMP/missing.json"
tap_check $? "--chat-template FILE that does not exist: exit $rc, names it, nothing written"

# untrusted templates: bounded depth, values and work (docs/chat-templates.md "Limits")
"$PY3" -c 'import json, sys; json.dump({"chat_template": "{{ " + " + ".join(["1"] * 100000) + " }}"}, open(sys.argv[1], "w"))' "$TMP/chain.json"
refused e4 2 "chain.json: chat_template, line 1:1026: expression nested too deeply" "$TMP/chain.json"
tap_check $? "a 400 KB template chaining 100,000 additions (the evaluator ran out of stack: exit 139): exit $rc at line 1:1026, nothing written"
printf '{"chat_template": "{%% set ns = namespace(a=1) %%}{%% set ns.a = ns %%}{{ ns.a }}"}\n' >"$TMP/cycle.json"
refused e5 2 "conv.jsonl:1: chat template, line 1:[0-9]*: Converting circular structure" "$TMP/cycle.json"
tap_check $? "a namespace holding itself: each line skipped naming the cycle, exit $rc (no document)"
printf '{"chat_template": "{%% for i in range(1000000) %%}{%% endfor %%}{%% for i in range(1000000) %%}{%% endfor %%}"}\n' >"$TMP/loop.json"
refused e6 2 "conv.jsonl:1: chat template, line 1:[0-9]*: the render went over its budget of 10000000 steps.*loop.json.*--template-steps" "$TMP/loop.json"
rc6=$?
tap_diag "$(head -c 400 "$TMP/e6.err")"
printf '{"chat_template": "{%% set ns = namespace(l=[]) %%}{%% for i in range(100000) %%}{%% set ns.l = ns.l + [i] %%}{%% endfor %%}"}\n' >"$TMP/keep.json"
refused e7 2 "budget of 1048576 bytes.*keep.json.*--template-memory" "$TMP/keep.json" --template-memory 1M
((rc6 == 0 && $? == 0))
tap_check $? "ten million loop iterations, a loop keeping what it builds: prep stops at the render budget (exit 2) naming the template and the limit"

# a template that rewrites the content: the line is skipped with the reason, never mis-masked
printf '{"chat_template": "{%% for m in messages %%}{{ m.role }}: {{ m.content | upper }}\\n{%% endfor %%}"}\n' >"$TMP/upper.json"
prep --tokenizer "$MODELS/qwen3/tokenizer.json" --out "$TMP/up" --chat-template "$TMP/upper.json" "$TMP/conv.jsonl" >/dev/null 2>"$TMP/up.err"
grep -q "conv.jsonl:2: the chat template leaves out or rewrites the content of messages\[2\]" "$TMP/up.err"
tap_check $? "a template that rewrites the answer (| upper): the line is skipped, saying which message"

# Llama 3 has no <|endoftext|>: plain documents end with its eos_token <|end_of_text|> (128001)
printf '{"text": "one document"}\n' >"$TMP/text.jsonl"
"$TOOL" prep --val-fraction 0 --tokenizer "$MODELS/llama3/tokenizer.json" --out "$TMP/l3text" "$TMP/text.jsonl" >/dev/null 2>&1
last=$("$PY3" -c 'import sys; sys.path.insert(0, sys.argv[1]); from prep_check import read_dataset; print(read_dataset(sys.argv[2])[0][-1])' "$TSR_ROOT/tests/prep" "$TMP/l3text/train" 2>/dev/null)
[[ $last == 128001 ]]
tap_check $? "Llama 3 plain text: each document ends with the tokenizer_config's eos_token <|end_of_text|> (${last:-none})"
"$TOOL" prep --val-fraction 0 --tokenizer "$MODELS/llama3/tokenizer.json" --out "$TMP/l3none" --chat-template none "$TMP/text.jsonl" >/dev/null 2>&1 &&
    [[ -d $TMP/l3none/train ]]
tap_check $? "--chat-template none still reads the eos_token (plain documents need it)"
tap_done
