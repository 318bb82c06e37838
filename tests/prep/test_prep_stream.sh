#!/usr/bin/env bash
# test_prep_stream.sh — `tessera prep` streams a large text file (issue 48 item 11): a document is
# read 1 MiB at a time and tokenized in parts cut where the tokenizer allows
# (tokenizer_stream_cut), so memory does not grow with the file. Checked: the datasets equal, byte
# for byte, those of the same documents given as JSON Lines {"text"} (each line tokenized whole, in
# one call: the non-streamed result), with --doc-sep separators across read boundaries and a
# document of several parts (--bos: the BOS on its first part only, the EOS on its last); the same
# for SentencePiece-style tokenizers (Llama 2's Prepend normalizer, Mistral's Metaspace
# pre-tokenizer, built from Llama 2's file as test_hf_spm_metaspace.sh does; and one whose vocab
# has an entry "e\u2581", which must not be cut) and GPT-2's with parts of 997 bytes
# (TSR_PREP_PART_BYTES) against the documents read whole, text starting with spaces, double spaces
# and non-ASCII text included; a bad TSR_PREP_PART_BYTES refused (exit 1, nothing written); the
# peak RSS (getrusage of the child) of a prep of a file three times the bound stays under the bound
# (GPT-2), and of one the bound's size (Llama 2); and the plain progress lines of a log (stderr not a
# terminal) come while it runs, one per batch with TSR_PREP_PROGRESS_S = 0.
source "$(dirname "$0")/../lib.sh"
PY=${PYTHON:-/usr/bin/python3}
if ! "$TOOL" prep --help >/dev/null 2>&1; then echo "skip: $TOOL has no 'prep' command"; exit 77; fi
gpt2_dir
BROWN=$TSR_ROOT/data/npm/brown
if [[ ! -f $GPT2_DIR/encoder.json || ! -f $BROWN/ca01 ]]; then
    echo "skip: no GPT-2 tokenizer or Brown corpus under data/npm (./INSTALL fetches them)"; exit 77
fi
tsr_tmpdir
BOUND_MIB=48

LLAMA2=$TSR_ROOT/data/npm/chat/llama2
[[ -f $LLAMA2/tokenizer.json ]] || { echo "skip: no Llama 2 tokenizer under data/npm/chat (./INSTALL fetches it)"; exit 77; }

tap_plan 12

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
# SentencePiece-style tokenizers from Llama 2's (tokenizer_config.json beside: its </s> ends documents):
# mistral (normalizer null, Metaspace pre-tokenizer, prepend_scheme first), cross (Llama 2 with a
# vocab entry "e\u2581" and its merge first: BPE joins across the space after an "e"); and a
# corpus of documents for parts of 997 bytes: spaces first, double spaces, non-ASCII, U+2581
"$PY" - "$LLAMA2" "$BROWN" "$TMP" <<'EOF' || { echo "Bail out! SentencePiece variants failed"; exit 1; }
import glob, json, os, shutil, sys
llama2, brown, tmp = sys.argv[1:4]
for name in ("mistral", "cross"):
    t = json.load(open(os.path.join(llama2, "tokenizer.json"), encoding="utf-8"))
    if name == "mistral":
        t["normalizer"] = None
        t["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first",
                              "split": False}
    else:
        t["model"]["vocab"]["e\u2581"] = len(t["model"]["vocab"])
        t["model"]["merges"].insert(0, "e \u2581")
    os.makedirs(os.path.join(tmp, name))
    json.dump(t, open(os.path.join(tmp, name, "tokenizer.json"), "w", encoding="utf-8"), ensure_ascii=False)
    shutil.copy(os.path.join(llama2, "tokenizer_config.json"), os.path.join(tmp, name))
files = sorted(glob.glob(os.path.join(brown, "c[a-r][0-9][0-9]")))[:12]
texts = [open(f, encoding="utf-8").read().replace("\t", " ") for f in files]
texts[3] = "  two spaces first, then  double  spaces: caf\u00e9 \u65e5\u672c x\u2581y " + texts[3]
texts[7] = texts[7].replace(" the ", "  the  ")
texts[5] += "".join("def f%d(x):\n%sreturn x  +   %d\n" % (k, " " * (k % 9), k) for k in range(300))
with open(os.path.join(tmp, "spm.txt"), "w", encoding="utf-8") as f:
    f.write("\n@@@\n".join([" ".join(texts[:8])] + texts[8:]))
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

# parts of 997 bytes (TSR_PREP_PART_BYTES): the datasets of the documents read whole (each < 1 MiB)
for tok in "$LLAMA2" "$TMP/mistral" "$TMP/cross" "$GPT2_DIR"; do
    name=$(basename "$tok")
    "$TOOL" prep --tokenizer "$tok" --quiet --bos --doc-sep '\n@@@\n' --val-fraction 0.2 \
        --out "$TMP/whole-$name" "$TMP/spm.txt" &&
        TSR_PREP_PART_BYTES=997 "$TOOL" prep --tokenizer "$tok" --quiet --bos --doc-sep '\n@@@\n' \
            --val-fraction 0.2 --out "$TMP/parts-$name" "$TMP/spm.txt" &&
        same "$TMP/parts-$name" "$TMP/whole-$name"
    tap_check $? "$name: documents in parts of 997 bytes give byte for byte the datasets of the whole documents"
done
TSR_PREP_PART_BYTES=0 "$TOOL" prep --tokenizer "$GPT2_DIR" --quiet --out "$TMP/knob" "$TMP/spm.txt" 2>"$TMP/knob.err"
rc=$?
((rc == 1)) && grep -q 'TSR_PREP_PART_BYTES = "0": expected bytes' "$TMP/knob.err" && [[ ! -e $TMP/knob ]]
tap_check $? "TSR_PREP_PART_BYTES=0: exit 1 (got $rc), the variable named, nothing written"

# peak MIB TOKENIZER FILE OUT [ENV...]: prep (progress in $TMP/prep.err); sets rc, kib, secs (float)
peak() {
    local mib=$1 tok=$2 in=$3 out=$4
    shift 4
    read -r rc kib secs < <(env "$@" "$PY" - "$TMP/prep.err" "$TOOL" prep --tokenizer "$tok" \
        --val-fraction 0 --out "$out" "$in" <<'EOF'
import resource, subprocess, sys, time
t0 = time.monotonic()
with open(sys.argv[1], "w") as err:
    rc = subprocess.call(sys.argv[2:], stdout=subprocess.DEVNULL, stderr=err)
kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(rc, kib, "%.2f" % (time.monotonic() - t0))
EOF
    )
    tap_diag "prep of $(($(stat -c %s "$in") >> 20)) MiB ($(basename "$tok")): peak RSS $((kib >> 10)) MiB in ${secs} s"
    ((rc == 0 && kib < BOUND_MIB * 1024))
    tap_check $? "$(basename "$tok"): peak RSS $((kib >> 10)) MiB < $BOUND_MIB MiB for a $mib MiB file (rc=$rc)"
}
# memory: a file three times the bound, its peak RSS (getrusage of the child) under the bound
"$PY" -c 'import sys; l = b"the quick brown fox 42 jumps over the lazy dog\n"
sys.stdout.buffer.write(l * (3 * int(sys.argv[1]) * 2**20 // len(l)))' $BOUND_MIB >"$TMP/big.txt"
# Llama 2 (its parts cut before a space): a file the size of the bound (the build that held its
# document whole: 205 MB for it)
head -c $((BOUND_MIB << 20)) "$TMP/big.txt" >"$TMP/spm-big.txt"
peak $BOUND_MIB "$LLAMA2" "$TMP/spm-big.txt" "$TMP/spm-big"
rm -f "$TMP/spm-big.txt"
peak $((3 * BOUND_MIB)) "$GPT2_DIR" "$TMP/big.txt" "$TMP/big" TSR_PREP_PROGRESS_S=0
((rc == 0)) && "$TOOL" verify-data "$TMP/big/train" >/dev/null
tap_check $? "prep of the large file: exit 0, verify-data accepts it (rc=$rc)"
# plain progress lines (a log, not a terminal) while the one file is read: with TSR_PREP_PROGRESS_S
# = 0 one after each batch (4 to 5 MiB of input: 32 for 144 MiB), so at least 20 however fast the
# machine (a check of lines per 5 s, or per 0.2 s, has nothing to count in a run under a second)
lines=$(grep -c '^prep: [0-9.]*% of ' "$TMP/prep.err")
((lines >= 20)); tap_check $? "progress: $lines plain lines in $secs s (one per batch: >= 20)"
rm -f "$TMP/big.txt"
tap_done
