#!/usr/bin/env bash
# The installed module stands alone (README "Slurm", docs/training.md "Recipes by name"):
# `make install PREFIX=<temp>` (the build as it is), then, from a directory with no data/, no
# configs/, and TSR_ROOT / TSR_DATA_DIR unset:
#  - `tessera tokenizer encode --tokenizer gpt2` gives the ids of the checkout's build;
#  - `tessera prep --tokenizer gpt2` writes a dataset;
#  - `tessera-train --config tiny --dry-run --time` finds the installed recipe by name (and says
#    which) and the installed per-op table of the H200 (docs/planning.md);
#  - `tessera-train` trains on that dataset with data.tokenizer = "gpt2" and `tessera generate
#    --tokenizer gpt2 --prompt ...` completes text from its checkpoint;
#  - with the installed GPT-2 files moved away, `--config tiny --dry-run` stops at once (exit 2)
#    naming data.tokenizer and the places looked in, and so does `tessera prep --tokenizer gpt2`.
source "$(dirname "$0")/../lib.sh"
GPT2=$TSR_ROOT/data/npm/gpt2
if [[ ! -f $GPT2/encoder.json ]]; then echo "1..0 # SKIP no GPT-2 files in data/npm (./INSTALL fetches them)"; exit 77; fi
tsr_tmpdir
tap_plan 7
P=$TMP/prefix
make --no-print-directory -C "$TSR_ROOT" BUILD="$BUILD" install PREFIX="$P" MODULEDIR="$P/mod" \
    MODULEDIR_TCL="$P/mod-tcl" >"$TMP/install.txt" 2>&1 || { tail -20 "$TMP/install.txt"; echo "Bail out! make install failed"; exit 1; }
mkdir -p "$TMP/elsewhere"
printf 'Hello, world! Standalone tokenizers work.\n' >"$TMP/elsewhere/hello.txt"
for i in $(seq 1 60); do echo "Line $i of a small corpus that the installed prep tokenizes with GPT-2's BPE."; done >"$TMP/elsewhere/corpus.txt"
# away: run "$@" in $TMP/elsewhere with no TSR_ROOT / TSR_DATA_DIR and the installed bin first
away() { (cd "$TMP/elsewhere" && env -u TSR_ROOT -u TSR_DATA_DIR PATH="$P/bin:$PATH" "$@"); }

want=$("$TOOL" tokenizer encode --tokenizer "$GPT2" "$TMP/elsewhere/hello.txt")
got=$(away tessera tokenizer encode --tokenizer gpt2 hello.txt 2>"$TMP/enc.err")
[[ -n $want && $got == "$want" ]]
tap_check $? "installed tessera tokenizer encode --tokenizer gpt2 from elsewhere: '$got'"
sed 's/^/#   /' "$TMP/enc.err" | head -3

away tessera prep --out ds --tokenizer gpt2 --val-fraction 0 corpus.txt >"$TMP/prep.txt" 2>&1
tap_check $? "installed tessera prep --tokenizer gpt2 from elsewhere"

away tessera-train --config tiny --dry-run --time >"$TMP/dry.txt" 2>&1
[[ $? == 0 ]] && grep -qF -- "--config tiny: the recipe $P/bin/../share/tessera/configs/tiny.cfg" "$TMP/dry.txt" &&
    grep -qF -- "time plan (--time; docs/planning.md): H200, per-op table $P/bin/../share/tessera/profiles/H200.prof" "$TMP/dry.txt"
tap_check $? "installed tessera-train --config tiny --dry-run --time finds the installed recipe by name and the H200's per-op table"
grep -E "error|recipe" "$TMP/dry.txt" | head -3 | sed 's/^/#   /'

away tessera-train --config tiny --set data.train=ds/train --set data.val= --set run_dir=run \
    --set model.n_layer=1 --set model.d_model=64 --set model.n_head=4 --set seq_len=16 \
    --set model.max_seq_len=16 --set global_batch=2 --set micro_batch=2 --set max_duration=1ba \
    --set eval_interval=0ba --set sample.tokens=4 --set threads=1 >"$TMP/train.txt" 2>&1
rc=$?
away tessera generate --ckpt run --tokenizer gpt2 --prompt "Line 3 of" --max-tokens 4 --temperature 0 >"$TMP/gen.txt" 2>"$TMP/gen.err"
rc2=$?
[[ $rc == 0 && $rc2 == 0 && -s $TMP/gen.txt ]]
tap_check $? "installed tessera-train (data.tokenizer gpt2, exit $rc) and tessera generate --tokenizer gpt2 (exit $rc2) from elsewhere"
tail -2 "$TMP/gen.err" | sed 's/^/#   /'

mv "$P/share/tessera/gpt2" "$P/share/tessera/gpt2.away"
away tessera-train --config tiny --dry-run >"$TMP/missing.txt" 2>&1
rc=$?
[[ $rc == 2 ]] && grep -q 'data.tokenizer = "gpt2": cannot load it' "$TMP/missing.txt" &&
    grep -qF "$P/bin/../share/tessera/gpt2" "$TMP/missing.txt" && ! grep -q "^model:" "$TMP/missing.txt"
tap_check $? "without the installed GPT-2 files: exit $rc at start naming data.tokenizer and the places looked in"
grep error "$TMP/missing.txt" | head -2 | sed 's/^/#   /'

away tessera prep --out ds2 --tokenizer gpt2 corpus.txt >"$TMP/prep2.txt" 2>&1
rc=$?
[[ $rc == 2 && ! -e $TMP/elsewhere/ds2 ]] && grep -q "GPT-2's files" "$TMP/prep2.txt"
tap_check $? "without them tessera prep --tokenizer gpt2 exits 2 and writes nothing"

# TSR_DATA_DIR still points elsewhere explicitly
mkdir -p "$TMP/dd" && cp -r "$P/share/tessera/gpt2.away" "$TMP/dd/gpt2"
got=$(cd "$TMP/elsewhere" && env -u TSR_ROOT TSR_DATA_DIR="$TMP/dd" "$P/bin/tessera" tokenizer encode --tokenizer gpt2 hello.txt 2>/dev/null)
[[ $got == "$want" ]]
tap_check $? "TSR_DATA_DIR/gpt2 is found too"
tap_done
