#!/usr/bin/env bash
# The command line of every tessera program, from the outside (docs/cli.md): one long name per
# option letter across tessera-train, tessera's subcommands, tessera-healthcheck and tessera-job
# (read from their --help); usage errors exit 1 and start with the program's name; every --help
# lists the exit codes (86 for tessera-train); the internal "from src/..." lines only with TSR_DEBUG=1;
# tessera-train's --help, its man page and docs/tessera-train.md name the recipe features (GRPO,
# DPO, LoRA, Muon, context parallelism, FP8, Prometheus, ...) and `tessera config-doc`, each key the
# help names being one the parser knows, and the man page and the doc carry the same date.
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 12
HC=$BUILD/tessera-healthcheck
JOB=$TSR_ROOT/jobs/tessera-job

# every help text: "NAME<TAB>COMMAND..." (subcommands from the exported table, ckpt's from its help)
progs=("tessera-train	$TRAIN" "tessera-healthcheck	$HC" "tessera-job	$JOB" "tessera	$TOOL"
       "tessera tokenizer	$TOOL tokenizer" "tessera ckpt	$TOOL ckpt")
while IFS= read -r sub; do progs+=("tessera $sub	$TOOL $sub"); done < <("$BUILD/tests/test_cli" --list)
while read -r sub _; do progs+=("tessera ckpt $sub	$TOOL ckpt $sub"); done < <(
    "$TOOL" ckpt --help | sed -n '/^commands:/,/^$/p' | sed '1d;/^$/d')
n_help=0
for p in "${progs[@]}"; do
    name=${p%%	*}
    read -ra cmd <<<"${p#*	}"
    "${cmd[@]}" --help >"$TMP/help.txt" 2>&1 || echo "$name --help: exit $?" >>"$TMP/help-fail.txt"
    sed -nE "s/^ +-([A-Za-z0-9]), --([a-z0-9-]+).*/\1 \2 $name/p" "$TMP/help.txt" >>"$TMP/letters.txt"
    cp "$TMP/help.txt" "$TMP/help-$n_help.txt"
    n_help=$((n_help + 1))
done

# 1: a letter with two long names anywhere is a conflict (case matters: -s and -S differ)
LC_ALL=C sort -u -k1,2 "$TMP/letters.txt" | awk '{ n[$1]++; l[$1] = l[$1] " --" $2 " (" $3 " " $4 ")" }
    END { for (c in n) if (n[c] > 1) { print "-" c ":" l[c]; bad++ } exit bad > 0 }' >"$TMP/conflicts.txt"
r=$?
((r)) && sed 's/^/# /' "$TMP/conflicts.txt"
tap_check $r "one long name per option letter across ${#progs[@]} help texts ($(wc -l <"$TMP/letters.txt") options)"

# 2: the collection is real: every program answered --help with exit 0, and tessera-train's -c is there
[[ ! -s $TMP/help-fail.txt ]] && grep -qx "c config tessera-train" "$TMP/letters.txt" &&
    grep -qx "h help tessera prep" "$TMP/letters.txt" && grep -q "^h help tessera ckpt export" "$TMP/letters.txt"
r=$?
((r)) && sed 's/^/# /' "$TMP/help-fail.txt" 2>/dev/null
tap_check $r "every program's --help exits 0 and lists its options (tessera config-doc --help too)"

# 3: every --help but tessera-job's (the ops helper's, a script) has its exit codes; train's has 86
miss=""
for ((k = 0; k < n_help; k++)); do
    [[ ${progs[k]%%	*} == tessera-job ]] && continue
    grep -q "exit codes:" "$TMP/help-$k.txt" || miss+=" '${progs[k]%%	*}'"
done
[[ -z $miss ]] && grep -q "86 checkpoint" <<<"$("$TRAIN" --help)"
r=$?
((r)) && tap_diag "no exit codes in the --help of:$miss"
tap_check $r "every --help lists the exit codes; tessera-train's has 86"

# 4: usage errors: exit 1, first line "PROGRAM: error: ..." (PROGRAM = the executable's name)
bad=""
for p in "${progs[@]}"; do
    name=${p%%	*}
    [[ $name == tessera-job ]] && continue
    read -ra cmd <<<"${p#*	}"
    "${cmd[@]}" --bogus-option >/dev/null 2>"$TMP/err.txt"
    rc=$?
    exe=${name%% *}
    ((rc == 1)) && head -1 "$TMP/err.txt" | grep -q "^$exe: error: .*bogus-option" ||
        bad+=" '$name' (exit $rc: $(head -1 "$TMP/err.txt"))"
done
[[ -z $bad ]]
r=$?
((r)) && tap_diag "wrong usage error from:$bad"
tap_check $r "--bogus-option: exit 1 and 'PROGRAM: error: ...' from every program (healthcheck too)"

# 5: a letter an option lost says which long option it belongs to
"$TOOL" prep -s 5 x >/dev/null 2>"$TMP/err.txt"
rc=$?
((rc == 1)) && grep -q "^tessera: error: prep: unknown option: -s (it has no short form here: use --shard-tokens)" "$TMP/err.txt"
tap_check $? "prep -s: exit 1, the hint '--shard-tokens'"
"$TOOL" ckpt export -d bf16 x >/dev/null 2>"$TMP/err.txt" # a ckpt subcommand: the same hint
rc=$?
((rc == 1)) && grep -q "^tessera: error: ckpt export: unknown option: -d (it has no short form here: use --dtype)" "$TMP/err.txt"
tap_check $? "ckpt export -d: exit 1, the hint '--dtype' ($(head -c 120 "$TMP/err.txt"))"

# 5b: one wording for each usage fault, from every program and subcommand with options (one parse
# loop: src/base/cli.c): "PREFIX unknown option: --bogus-option (see 'NAME --help')" and, for its
# first option that takes a value, "PREFIX option --OPT needs a value (see 'NAME --help')"
bad="" n_cmd=0 names=""
for ((k = 0; k < n_help; k++)); do
    name=${progs[k]%%	*}
    opt=$(sed -nE 's/^  (-[A-Za-z0-9],|   ) --([a-z0-9-]+) [^[ ].*/\2/p' "$TMP/help-$k.txt" | head -1)
    [[ $name == tessera-job || -z $opt ]] && continue
    read -ra cmd <<<"${progs[k]#*	}"
    exe=${name%% *}
    prefix="$exe: error:"
    [[ $name != "$exe" ]] && prefix+=" ${name#tessera }:"
    "${cmd[@]}" --bogus-option >/dev/null 2>"$TMP/err.txt"
    rc=$?
    want="$prefix unknown option: --bogus-option (see '$name --help')"
    ((rc == 1)) && [[ $(<"$TMP/err.txt") == "$want" ]] || bad+=" [$name --bogus-option: exit $rc: $(head -c 200 "$TMP/err.txt")]"
    "${cmd[@]}" "--$opt" >/dev/null 2>"$TMP/err.txt"
    rc=$?
    want="$prefix option --$opt needs a value (see '$name --help')"
    ((rc == 1)) && [[ $(<"$TMP/err.txt") == "$want" ]] || bad+=" [$name --$opt: exit $rc: $(head -c 200 "$TMP/err.txt")]"
    n_cmd=$((n_cmd + 1)) names+=" $name"
done
[[ -z $bad ]] && ((n_cmd >= 13))
r=$?
((r)) && tap_diag "other wordings:$bad"
tap_diag "commands:$names"
tap_check $r "one wording from $n_cmd commands: 'unknown option: --bogus-option', 'option --OPT needs a value', each with its program, subcommand and '(see ... --help)'"

# 5c: under mpirun every rank parses the same argv and rank 0 alone reports: one help, one error
ranks 2 "$TRAIN" --help >"$TMP/mh.txt" 2>&1
rc=$?
ranks 2 "$TRAIN" --config >"$TMP/me.txt" 2>&1
rc2=$?
ranks 2 "$HC" --help >"$TMP/mhc.txt" 2>&1
rc3=$?
((rc == 0 && rc2 == 1 && rc3 == 0)) && [[ $(grep -c '^usage: tessera-train' "$TMP/mh.txt") == 1 &&
    $(grep -c 'option --config needs a value' "$TMP/me.txt") == 1 &&
    $(grep -c '^usage: tessera-healthcheck' "$TMP/mhc.txt") == 1 ]]
tap_check $? "2 ranks: tessera-train --help and tessera-healthcheck --help print one help (exit $rc, $rc3), --config without a value one error (exit $rc2)"

# 6, 7: a data error relayed through TSR_CHECK: the internal locations only with TSR_DEBUG=1
args=(--config "$TSR_ROOT/configs/tiny.cfg" --set data.train="$TMP/nodata" --set run_dir="$TMP/run"
      --set max_duration=1ba)
"$TRAIN" "${args[@]}" >/dev/null 2>"$TMP/plain.txt"
rc=$?
((rc == 2)) && grep -q "^tessera-train: error: $TMP/nodata/index.tsv: cannot open" "$TMP/plain.txt" &&
    ! grep -q "from src/" "$TMP/plain.txt"
r=$?
((r)) && sed 's/^/# /' "$TMP/plain.txt"
tap_check $r "missing dataset: exit 2, 'tessera-train: error: ...', no 'from src/' line"
TSR_DEBUG=1 "$TRAIN" "${args[@]}" >/dev/null 2>"$TMP/debug.txt"
rc=$?
((rc == 2)) && grep -q "^tessera-train: debug: from src/data/dataloader.c:[0-9]*: " "$TMP/debug.txt"
tap_check $? "TSR_DEBUG=1: the same error plus 'tessera-train: debug: from src/data/dataloader.c:LINE'"
# 8: reference text tested against the code: `tessera --help` names every `tessera ckpt` command;
# tessera-train's --help and man page say what --init-from takes (Hugging Face and PEFT
# directories); the man page names every model family `ckpt export --arch` knows, GPT-2 and MPT
bad=""
line=$("$TOOL" --help | grep "^  ckpt ")
for c in $("$TOOL" ckpt --help | sed -n '/^commands:/,/^$/p' | sed '1d;/^$/d' | awk '{print $1}'); do
    [[ $line == *"$c"* ]] || bad+=" 'tessera --help' lacks ckpt $c;"
done
man_text=$(tr -d '\\' <"$TSR_ROOT/docs/man/tessera-train.1" | tr '\n' ' ')
for w in "Hugging Face" PEFT; do
    "$TRAIN" --help | grep -- "--init-from" | grep -q "$w" || bad+=" --help of --init-from lacks $w;"
    [[ $man_text == *"init-from"*"$w"* ]] || bad+=" man tessera-train's --init-from lacks $w;"
done
arches=$("$TOOL" ckpt export --help | grep -- "--arch" | grep -o "llama, [a-z0-9_, or]*" | tr -d ',' | sed 's/ or / /')
norm=$(echo "$man_text" | tr 'A-Z' 'a-z' | tr -d '_-')
for a in gpt2 mpt $arches; do
    [[ -n $arches && $norm == *"$(echo "$a" | tr -d '_-')"* ]] || bad+=" man tessera-train lacks the model family $a;"
done
[[ -z $bad ]]
r=$?
((r)) && tap_diag "reference text:$bad"
tap_check $r "tessera --help names every ckpt command; --init-from's --help and man page name Hugging Face and PEFT directories; the man page every model family (gpt2 mpt $arches)"

# the features since the man page's 2026-11-21 (issue 65 item 10)
bad=""
help=$("$TRAIN" --help)
doc_text=$(tr '\n' ' ' <"$TSR_ROOT/docs/tessera-train.md")
"$TOOL" config-doc | sed -n 's/^| `\([a-z0-9_.]*\)` .*/\1/p' >"$TMP/keys.txt"
for k in objective lora.rank optim.name parallel.sharding parallel.context parallel.expert precision.fp8 \
    model.activation_compression save_async metrics.prometheus_dir; do
    [[ $help == *"$k"* ]] || bad+=" --help lacks $k;"
    grep -qx "$k" "$TMP/keys.txt" || bad+=" $k is no config key;"
    [[ $man_text == *"$k"* ]] || bad+=" the man page lacks $k;"
    [[ $doc_text == *"$k"* ]] || bad+=" docs/tessera-train.md lacks $k;"
done
for w in grpo dpo muon prometheus "tessera config-doc"; do
    [[ ${help,,} == *"$w"* ]] || bad+=" --help lacks $w;"
    [[ ${man_text,,} == *"$w"* ]] || bad+=" the man page lacks $w;"
    [[ ${doc_text,,} == *"$w"* ]] || bad+=" docs/tessera-train.md lacks $w;"
done
mdate=$(sed -n '1s/^\.TH TESSERA-TRAIN 1 "\([0-9-]*\)".*/\1/p' "$TSR_ROOT/docs/man/tessera-train.1")
[[ -n $mdate && $doc_text == *"as of $mdate"* ]] || bad+=" the man page's date '$mdate' is not docs/tessera-train.md's;"
[[ -z $bad ]]
r=$?
((r)) && tap_diag "features:$bad"
tap_check $r "tessera-train --help, its man page ($mdate) and docs/tessera-train.md name GRPO, DPO, Muon, Prometheus, tessera config-doc and the keys that turn on each feature (all config keys)"
tap_done
