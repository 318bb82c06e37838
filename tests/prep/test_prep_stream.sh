#!/usr/bin/env bash
# test_prep_stream.sh — `tessera prep` streams a large text file (issue 48 item 11): a document is
# read 1 MiB at a time and tokenized in parts cut where the tokenizer allows
# (tokenizer_stream_cut), so memory does not grow with the file. Checked: the datasets equal, byte
# for byte, those of the same documents given as JSON Lines {"text"} (each line tokenized whole, in
# one call: the non-streamed result), with --doc-sep separators across read boundaries and a
# document of several parts (--bos: the BOS on its first part only, the EOS on its last); the peak
# RSS (getrusage of the child) of a prep of a file three times the bound stays under the bound; and
# the plain progress lines of a log (stderr not a terminal) come while it runs.
source "$(dirname "$0")/../lib.sh"
PY=${PYTHON:-/usr/bin/python3}
if ! "$TOOL" prep --help >/dev/null 2>&1; then echo "skip: $TOOL has no 'prep' command"; exit 77; fi
GPT2_DIR=${TSR_DATA_DIR:-$TSR_ROOT/data/npm}/gpt2
[[ -f $GPT2_DIR/encoder.json ]] || GPT2_DIR=$TSR_ROOT/data/npm/gpt2
BROWN=$TSR_ROOT/data/npm/brown
if [[ ! -f $GPT2_DIR/encoder.json || ! -f $BROWN/ca01 ]]; then
    echo "skip: no GPT-2 tokenizer or Brown corpus under data/npm (./INSTALL fetches them)"; exit 77
fi
tsr_tmpdir
BOUND_MIB=48

tap_plan 6

# documents: a first one of 2^20 - 2 bytes (the separator straddles the first 1 MiB read), Brown
# files, one document of 2.5 MB (tokenized in parts), more Brown files; the same as JSON Lines
"$PY" - "$BROWN" "$TMP" <<'EOF' || { echo "Bail out! generator failed"; exit 1; }
import glob, json, os, sys
brown, tmp = sys.argv[1], sys.argv[2]
files = sorted(glob.glob(os.path.join(brown, "c[a-r][0-9][0-9]")))
texts = [open(f, encoding="utf-8").read() for f in files]
whole = "".join(texts)
docs = [whole[: (1 << 20) - 2]] + texts[:30] + [whole[:2_500_000]] + texts[30:60]
def write(name, ds, sep):
    with open(os.path.join(tmp, name + ".txt"), "w", encoding="utf-8") as f:
        f.write(sep.join(ds))
    with open(os.path.join(tmp, name + ".jsonl"), "w", encoding="utf-8") as f:
        for d in ds:
            f.write(json.dumps({"text": d}) + "\n")
write("docs", docs, "\n@@@\n")
write("one", [whole[:2_500_000]], "")
EOF
prep() { "$TOOL" prep --tokenizer "$GPT2_DIR" --quiet "$@"; }
# same A B: every file of dataset directory A equals B's (shards, index)
same() {
    local a=$1 b=$2 f
    [[ -d $a/train ]] || return 1
    for f in "$a"/*/*; do cmp -s "$f" "$b/${f#"$a"/}" || { echo "# $f differs"; return 1; }; done
    [[ $(ls "$a"/*/* | wc -l) == $(ls "$b"/*/* | wc -l) ]]
}
prep --out "$TMP/sep-text" --doc-sep '\n@@@\n' --val-fraction 0.1 "$TMP/docs.txt" &&
    prep --out "$TMP/sep-json" --val-fraction 0.1 "$TMP/docs.jsonl"
tap_check $? "prep of the documents as text (--doc-sep) and as JSON Lines: exit 0"
same "$TMP/sep-text" "$TMP/sep-json" && [[ -d $TMP/sep-text/val ]]
tap_check $? "--doc-sep: train and val byte for byte those of the JSON Lines (non-streamed) prep"
prep --out "$TMP/one-text" --bos --val-fraction 0 "$TMP/one.txt" &&
    prep --out "$TMP/one-json" --bos --val-fraction 0 "$TMP/one.jsonl" &&
    same "$TMP/one-text" "$TMP/one-json"
tap_check $? "one 2.5 MB document in parts, --bos: byte for byte the JSON Lines prep's (one BOS, one EOS)"

# memory: a file three times the bound, its peak RSS (getrusage of the child) under the bound
"$PY" -c 'import sys; l = b"the quick brown fox 42 jumps over the lazy dog\n"
sys.stdout.buffer.write(l * (3 * int(sys.argv[1]) * 2**20 // len(l)))' $BOUND_MIB >"$TMP/big.txt"
rss=$("$PY" - "$TMP/prep.err" "$TOOL" prep --tokenizer "$GPT2_DIR" --val-fraction 0 \
    --out "$TMP/big" "$TMP/big.txt" <<'EOF'
import resource, subprocess, sys, time
t0 = time.monotonic()
with open(sys.argv[1], "w") as err:
    rc = subprocess.call(sys.argv[2:], stdout=subprocess.DEVNULL, stderr=err)
kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(rc, kib, int(time.monotonic() - t0))
EOF
)
read -r rc kib secs <<<"$rss"
tap_diag "prep of $(($(stat -c %s "$TMP/big.txt") >> 20)) MiB: peak RSS $((kib >> 10)) MiB in ${secs} s"
((rc == 0)) && "$TOOL" verify-data "$TMP/big/train" >/dev/null
tap_check $? "prep of the large file: exit 0, verify-data accepts it (rc=$rc)"
((rc == 0 && kib < BOUND_MIB * 1024)); tap_check $? "peak RSS $((kib >> 10)) MiB < $BOUND_MIB MiB for a $((3 * BOUND_MIB)) MiB file"
# a plain progress line every 5 s (a log, not a terminal): at least one per full 5 s but the last
lines=$(grep -c '^prep: [0-9.]*% of ' "$TMP/prep.err")
((lines >= secs / 5 - 1)); tap_check $? "progress: $lines plain lines in ${secs} s (one every 5 s while it reads)"
rm -f "$TMP/big.txt"
tap_done
