#!/usr/bin/env bash
# test_hf_cli.sh — a Hugging Face tokenizer.json through the command line (issue 24): `tessera prep
# --tokenizer .../qwen3/tokenizer.json` over a few Brown files writes a uint32 dataset (Qwen 3's
# vocabulary is over 65,536) whose documents are `tessera tokenizer encode`'s ids plus <|endoftext|>
# and decode (`tessera tokenizer decode`) back to the files; the directory form equals the file form;
# added tokens match only with --special; a tokenizer.json with an unknown pre-tokenizer exits 2
# naming the file, and prep then writes nothing; the trainer (data.tokenizer = the tokenizer.json)
# trains 2 steps on the dataset and generate turns a text prompt with <|im_end|> into its ids; a
# document that is one 1 MB run of letters (one pre-token: byte-level BPE was quadratic in it, hours)
# preps within 60 s of CPU and decodes back. Skips (77) without the npm files ./INSTALL fetches.
# CI time: Qwen 3's tokenizer.json takes tessera about 0.5 CPU-s to load: the short texts are
# encoded in one run with --special (<|endoftext|>, the prompt, <|im_end|>, "a<|im_end|>b",
# decode_lines's separator) and one without (the Brown files and "a<|im_end|>b"), the dataset's
# documents decoded in one run (decode_lines of hf_texts.sh), the bad tokenizer.json written by
# replacing the pre_tokenizer's value in the text (python parsing all 11 MB took a second): 6
# fewer tessera runs (here, loaded: 26 -> 25 CPU-s; most of it is prep, training and generate).
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/hf_texts.sh"
Q=$NPM_DIR/chat/qwen3
[[ -f $Q/tokenizer.json ]] || { echo "$Q/tokenizer.json missing: run ./INSTALL --ensure"; exit 77; }
[[ -f $BROWN/ca01 && -f $BROWN/cb02 && -f $BROWN/cr09 ]] || { echo "$BROWN: Brown corpus missing: run ./INSTALL --ensure"; exit 77; }
[[ -x $TOOL ]] || { echo "$TOOL missing: run make"; exit 77; }
"$PY3" -c 'import numpy' 2>/dev/null || { echo "skip: $PY3 has no numpy"; exit 77; }
tsr_tmpdir
tap_plan 11

mkdir -p "$TMP/in" "$TMP/txt"
cp "$BROWN/ca01" "$BROWN/cb02" "$BROWN/cr09" "$TMP/in/"
# the short texts: with --special, one line each (EOT, pids, with, im_end, sep_ids below)
prompt='The jury said<|im_end|>'
printf '<|endoftext|>' > "$TMP/txt/eot"
printf '%s' "$prompt" > "$TMP/txt/prompt"
printf 'a<|im_end|>b' > "$TMP/added"
printf '<|im_end|>' > "$TMP/txt/im_end"
sep_text "$TMP/txt/sep"
"$TOOL" tokenizer encode --special --tokenizer "$Q/tokenizer.json" "$TMP/txt/eot" "$TMP/txt/prompt" "$TMP/added" \
    "$TMP/txt/im_end" "$TMP/txt/sep" > "$TMP/special.ids"
{ read -r EOT; read -r pids; read -r with; read -r im_end; } < "$TMP/special.ids"
tail -n 1 "$TMP/special.ids" > "$TMP/sep.ids"
# without --special: the Brown files (ids.txt), then "a<|im_end|>b"
"$TOOL" tokenizer encode --tokenizer "$Q/tokenizer.json" "$TMP"/in/* "$TMP/added" > "$TMP/plain.ids"
tap_check $? "tokenizer encode --tokenizer qwen3/tokenizer.json: exit 0"
head -n 3 "$TMP/plain.ids" > "$TMP/ids.txt"
without=$(sed -n 4p "$TMP/plain.ids")
"$TOOL" tokenizer encode --tokenizer "$Q" "$TMP"/in/* | cmp -s - "$TMP/ids.txt"
tap_check $? "a directory holding tokenizer.json (no encoder.json) gives the same ids as the file"

"$TOOL" prep --tokenizer "$Q/tokenizer.json" --quiet --val-fraction 0 --out "$TMP/ds" "$TMP/in" >/dev/null
tap_check $? "prep --tokenizer qwen3/tokenizer.json over 3 Brown files: exit 0"
# the dataset: width and vocab from the index and shard headers, its documents (split at
# <|endoftext|>) are exactly the encode lines, each decoded back to its file
out=$(cd "$TSR_ROOT/tests/prep" && "$PY3" - "$TMP/ds/train" "$TMP/ids.txt" "$EOT" "$TMP/docs" <<'PY'
import sys, os
import numpy as np
from prep_check import read_documents
d, ids_file, eot, docs_dir = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
meta, t, docs, cur = read_documents(d, eot)
assert not cur, "tokens after the last <|endoftext|>"
want = [[int(v) for v in l.split()] for l in open(ids_file)]
os.makedirs(docs_dir)
for i, doc in enumerate(docs):
    open(os.path.join(docs_dir, "doc%d" % i), "w").write(" ".join(map(str, doc)))
same = sorted(docs) == sorted(want)
print(meta["token_width"], meta["vocab_size"], len(docs), int(t.max()), "same" if same else "differ")
PY
)
read -r width vocab ndocs maxid same <<< "$out"
[[ $width == 4 && $vocab -gt 65536 && $maxid == "$EOT" && $EOT -gt 65535 ]]
tap_check $? "dataset: uint32 tokens (width $width), vocab $vocab > 65536, <|endoftext|> = $EOT stored whole (max id $maxid)"
[[ $ndocs == 3 && $same == same ]]
tap_check $? "dataset: 3 documents, each exactly the encode ids of one file ($out)"
rt=0
docs=("$TMP"/docs/doc*)
for f in "${docs[@]}"; do cat "$f"; echo; done > "$TMP/docs.ids"
decode_lines --sep-ids "$TMP/sep.ids" "$TMP/docs.ids" "$TMP/docs.txt" "$Q/tokenizer.json" "${docs[@]}"
for f in "${docs[@]}"; do
    f=$TMP/docs.txt/${f##*/}
    [[ -f $f ]] || rt=1
    found=0
    for b in "$TMP"/in/*; do cmp -s "$f" "$b" && found=1; done
    ((found)) || { tap_diag "$f does not decode to any input file"; rt=1; }
done
tap_check $rt "tokenizer decode of each dataset document gives its Brown file back byte for byte"

# the trainer takes the tokenizer.json as data.tokenizer; generate encodes the prompt with it
# (added tokens matched) and prints text
"${MPIRUN[@]}" -np 1 "$TRAIN" --config "$TSR_ROOT/configs/tiny.cfg" --set eval_interval=0ba --set data.val= \
    --set threads=1 --set model.vocab_size="$vocab" --set data.tokenizer="$Q/tokenizer.json" \
    --set data.train="$TMP/ds/train" --set max_duration=2ba --set sample.tokens=0 --set seq_len=64 \
    --set model.n_layer=1 --set run_dir="$TMP/run" >"$TMP/train.txt" 2>&1 || tap_diag "$(tail -3 "$TMP/train.txt")"
gen=("$TOOL" generate --set threads=1 --ckpt "$TMP/run" --seed 5 --max-tokens 4)
a=$("${gen[@]}" --prompt "$prompt" --ids 2>"$TMP/gen.err")
b=$("${gen[@]}" --prompt-ids "$pids" --ids 2>/dev/null)
[[ $(wc -w <<< "$pids") == 4 && " $pids" == *" 151645" && -n $a && $a == "$b" ]] && grep -q "prompt 4 tokens" "$TMP/gen.err"
tap_check $? "trainer with data.tokenizer = qwen3/tokenizer.json, then generate: prompt \"$prompt\" = ids $pids (4 prompt tokens, same output $a as --prompt-ids)"

# added tokens: matched with --special, plain text without (as for GPT-2)
[[ $(wc -w <<< "$with") == 3 && " $with " == *" $im_end "* && " $without " != *" $im_end "* && $(wc -w <<< "$without") -gt 3 ]]
tap_check $? "<|im_end|> is one id ($im_end) with --special ($with), plain text without ($without)"

# a tokenizer.json with a pre-tokenizer tessera does not implement: exit 2 naming the file
# (the pre_tokenizer's value replaced in the text: the object after the first "pre_tokenizer" key,
# which comes before the model's vocabulary in tokenizer.json; one JSON value for another)
"$PY3" - "$Q/tokenizer.json" "$TMP/bad/tokenizer.json" <<'PY'
import json, os, sys
b = open(sys.argv[1], "rb").read()
k = b.index(b'"pre_tokenizer"') + len(b'"pre_tokenizer"')
i = b.index(b"{", k)
assert b[k:i].strip() == b":", "pre_tokenizer is not an object"
text = b[i:i + (1 << 20)].decode("utf-8", "ignore")
end = i + len(text[:json.JSONDecoder().raw_decode(text)[1]].encode("utf-8"))
out = b[:i] + b'{"type": "Whitespace"}' + b[end:]
os.makedirs(os.path.dirname(sys.argv[2]))
open(sys.argv[2], "wb").write(out)
PY
"$TOOL" tokenizer encode --tokenizer "$TMP/bad/tokenizer.json" "$TMP/added" >/dev/null 2>"$TMP/err"; rc=$?
((rc == 2)) && grep -q "bad/tokenizer.json" "$TMP/err" && grep -qi "pre_tokenizer" "$TMP/err"
tap_check $? "unknown pre-tokenizer: tokenizer encode exits 2 naming the file and the key (rc=$rc: $(head -c 300 "$TMP/err"))"
"$TOOL" prep --tokenizer "$TMP/bad" --quiet --out "$TMP/bad_ds" "$TMP/in" >/dev/null 2>"$TMP/err"; rc=$?
((rc == 2)) && grep -q "bad/tokenizer.json" "$TMP/err" && [[ ! -e $TMP/bad_ds && ! -e $TMP/bad_ds.tmp ]]
tap_check $? "unknown pre-tokenizer: prep --tokenizer DIR exits 2 naming the file, nothing written (rc=$rc)"
# one pre-token of 1 MB: merged with a heap (O(n log n)), not a scan per merge (it took hours)
"$PY3" -c 'import sys; open(sys.argv[1], "w").write("abcdefghij" * 100000)' "$TMP/run.txt"
(ulimit -t 60; "$TOOL" prep --tokenizer "$Q/tokenizer.json" --quiet --threads 1 --val-fraction 0 --no-eos \
    --out "$TMP/onepiece" "$TMP/run.txt") >"$TMP/run.log" 2>&1
rc=$?
"$PY3" -c 'import sys; sys.path.insert(0, sys.argv[1]); from prep_check import read_dataset; print(" ".join(map(str, read_dataset(sys.argv[2])[0].tolist())))' \
    "$TSR_ROOT/tests/prep" "$TMP/onepiece/train" >"$TMP/run.ids" 2>/dev/null
"$TOOL" tokenizer decode --tokenizer "$Q/tokenizer.json" "$TMP/run.ids" 2>/dev/null | cmp -s - "$TMP/run.txt"
cmpd=$?
((rc == 0 && cmpd == 0))
tap_check $? "a 1 MB run of letters (one pre-token): prep within 60 s of CPU (exit $rc), $(wc -w <"$TMP/run.ids") ids that decode back"
tap_done
