#!/usr/bin/env bash
# Packed chat data keeps its conversations apart (issue 48 item 6, docs/prep.md "Packing"):
# `tessera prep --format chat --pack T` through a ChatML-style template that writes no end-of-text
# token records where each conversation starts (has_mask 2, docs/data-format.md "Segments"), and
# model.attn_mask = "document" attends within a conversation only, whatever the template's tokens.
# Two datasets hold one packed sample each: a user-only conversation (no targets) of different
# text and length, then the same second conversation. Checks:
#  - verify-data says the datasets record their segment starts;
#  - a tiny document-masked model trained on them scores the second conversation the same after
#    either first one (tessera eval's loss, which only the second one's targets count);
#  - a causal one scores them differently (the construction can tell), and its training warns that
#    packed data trains with a causal mask, naming model.attn_mask = "document".
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
[[ -n ${KEEP:-} ]] && trap - EXIT
tap_plan 4
printf 'the cat sat on the mat and the dog ran in the fog over the hill to the mill\n%.0s' {1..20} >"$TMP/text.txt"
cat >"$TMP/tokenizer_config.json" <<'EOF'
{"chat_template": "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"}
EOF
conv() { printf '{"messages": [{"role": "user", "content": "%s"}]}\n' "$1"
         printf '{"messages": [{"role": "user", "content": "the dog ran"}, {"role": "assistant", "content": "over the hill to the mill"}]}\n'; }
conv "the cat sat on the mat" >"$TMP/a.jsonl"
conv "fog hill mill dog the the cat" >"$TMP/b.jsonl"
"$TOOL" tokenizer train -q --vocab-size 300 --special '<|endoftext|>' --special '<|im_start|>' \
    --special '<|im_end|>' -o "$TMP/tok.bin" "$TMP/text.txt" &&
for d in a b; do
    "$TOOL" prep -q --out "$TMP/$d" --tokenizer "$TMP/tok.bin" --format chat --pack 64 \
        --chat-template "$TMP/tokenizer_config.json" --val-fraction 0 "$TMP/$d.jsonl" || exit 1
    "$TOOL" verify-data -T 64 "$TMP/$d/train" || exit 1
done >"$TMP/prep.txt" 2>&1
rc=$?
sed 's/^/# /' "$TMP/prep.txt" | grep verify -i
grep -c "segment starts" "$TMP/prep.txt" | grep -qx 2
tap_check $((rc || $?)) "prep --pack of chat through a template without end-of-text records the segment starts (verify-data)"

# a tiny Llama-style model (RoPE: positions restart in each segment), 3 steps on a, then eval on
# both; eot_token is <|endoftext|> (id 290: the specials take the last ids), which the template
# never writes: without the recorded starts the document mask would not split the sample at all
train() { # NAME MASK
    "$TRAIN" --config "$TSR_ROOT/configs/tiny-llama.cfg" --set model.vocab_size=300 --set model.vocab_multiple=64 \
        --set data.tokenizer= --set sample.tokens=0 --set data.train="$TMP/a/train" --set data.val= \
        --set eval_interval=0ba --set model.n_layer=1 --set model.d_model=32 --set model.n_head=2 \
        --set model.n_kv_head=1 --set model.intermediate_size=48 --set seq_len=64 --set model.max_seq_len=64 \
        --set global_batch=1 --set micro_batch=1 --set threads=1 --set optim.warmup=1ba --set max_duration=3ba \
        --set watchdog.window=0 --set model.attn_mask="$2" --set model.eot_token=290 --set run_dir="$TMP/$1" >"$TMP/$1.txt" 2>&1
}
score() { # NAME DATASET: the mean validation loss tessera eval reports
    "$TOOL" eval --ckpt "$TMP/$1" --val "$TMP/$2/train" -o "$TMP/$1-$2.json" >/dev/null 2>"$TMP/$1-$2.err" &&
    "$PY3" -c 'import json, sys; print(json.load(open(sys.argv[1]))["val"][0]["loss"])' "$TMP/$1-$2.json"
}
same() { "$PY3" -c 'import sys; a, b = map(float, sys.argv[1:]); sys.exit(0 if abs(a - b) <= 1e-6 * abs(a) else 1)' "$@"; }
da= db= ca= cb=
train doc document && da=$(score doc a) && db=$(score doc b)
rc=$?
tap_diag "document mask: the second conversation's loss after a $da, after b $db"
[[ $rc == 0 ]] && same "$da" "$db"
tap_check $? "attn_mask = document: the second conversation's loss does not depend on the first"
train causal causal && ca=$(score causal a) && cb=$(score causal b)
rc=$?
tap_diag "causal mask: after a $ca, after b $cb"
[[ $rc == 0 ]] && ! same "$ca" "$cb"
tap_check $? "attn_mask = causal: it does (the check can tell)"
grep -F 'holds packed examples (tessera prep --pack) and model.attn_mask = "causal"' "$TMP/causal.txt" |
    grep -qF 'set model.attn_mask = "document"'
tap_check $? "training packed data with a causal mask warns, naming model.attn_mask = \"document\""
tap_done
