#!/usr/bin/env bash
# A refused start writes nothing (docs/tessera-train.md "Start-up order"): config, data, tokenizer
# and checkpoint are all validated before run_dir is touched. A tiny run trains 4 steps (2 layers,
# checkpoints at 2 and 4); then each of these restarts on the same run_dir is refused, and run_dir
# stays byte for byte as it was (file list, sizes, SHA-256 and mtimes of every file):
#  - the config's model differs from the checkpoint's (n_layer 4 vs 2): exit 1 (a config error),
#    the message names the setting and both values;
#  - data.train points at no dataset: exit 2, the message names data.train; same for data.val;
#  - a bad config value (optim.lr = -1): exit 1;
#  - data.tokenizer names no tokenizer: exit 2 before the first step, naming data.tokenizer (it
#    was reported after the last step, when the sample was decoded);
#  - a FIFO in place of a shard of data.train: exit 2 at once naming it (open() blocked for ever,
#    and SIGTERM did not end it); a directory in place of the shard: exit 2 saying so;
# and a fresh run_dir with a missing tokenizer is not even created; the resume (and an init-from)
# read before run_dir is opened still reach metrics.jsonl.
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 12
synth_tiny_args 2 4 2 --set save_interval=2ba --set run_dir="$TMP/run"
"$TRAIN" "${args[@]}" --set max_duration=4ba >"$TMP/first.txt" 2>&1 || { cat "$TMP/first.txt"; exit 1; }
# every file under run_dir: path, size, mtime (ns) and SHA-256
snapshot() { (cd "$TMP/run" && find . -type f -printf '%p %s %T@\n' | sort && find . -type f -print0 | sort -z | xargs -0 sha256sum); }
snapshot >"$TMP/before.txt"
sleep 1 # a rewrite within the same second would still change the ns mtime; this makes it obvious
unchanged() { snapshot >"$TMP/after.txt"; diff "$TMP/before.txt" "$TMP/after.txt" >"$TMP/diff.txt"; }
refused() { # refused WHAT EXPECTED_RC PATTERN --set ...: the restart exits EXPECTED_RC, says PATTERN, changes nothing
    local what=$1 want=$2 pat=$3; shift 3
    "$TRAIN" "${args[@]}" --set max_duration=6ba "$@" >"$TMP/out.txt" 2>&1
    local rc=$?
    unchanged
    local same=$?
    [[ $rc == "$want" && $same == 0 ]] && grep -Eq "$pat" "$TMP/out.txt" && ! grep -q "^step 1/" "$TMP/out.txt"
    tap_check $? "$what: exit $rc (want $want), run_dir $( ((same)) && echo CHANGED || echo unchanged)"
    if ((same)); then sed 's/^/#   /' "$TMP/diff.txt" | head -8; snapshot >"$TMP/before.txt"; fi
    grep -E "error" "$TMP/out.txt" | head -3 | sed 's/^/#   /'
}

refused "model differs from the checkpoint's (n_layer 4 vs 2)" 1 \
    "the model in the config differs from the checkpoint's: n_layer 4 vs 2" \
    --set model.n_layer=4
refused "data.train names no dataset" 2 'data.train = ".*/nope"' --set data.train="$TMP/nope"
refused "data.val names no dataset" 2 'data.val = ".*/nope"' --set data.val="$TMP/nope"
refused "bad config value optim.lr = -1" 1 "optim.lr" --set optim.lr=-1
refused "data.tokenizer names no tokenizer" 2 'data.tokenizer = ".*/no-such-tokenizer"' \
    --set data.tokenizer="$TMP/no-such-tokenizer" --set sample.tokens=8

# a FIFO or a directory in place of a shard: refused at once (timeout: the old trainer blocked)
for kind in fifo dir; do
    cp -r "$TMP/data/train" "$TMP/$kind"
    shard=$(ls "$TMP/$kind"/shard-*.bin | head -1)
    rm "$shard"
    if [[ $kind == fifo ]]; then mkfifo "$shard"; else mkdir "$shard"; fi
    timeout -s KILL 120 "$TRAIN" "${args[@]}" --set max_duration=6ba --set data.train="$TMP/$kind" >"$TMP/out.txt" 2>&1
    rc=$?
    unchanged
    same=$?
    what="a FIFO"; [[ $kind == dir ]] && what="a directory"
    [[ $rc == 2 && $same == 0 ]] && grep -q "$(basename "$shard"): is $what, not a regular file" "$TMP/out.txt"
    tap_check $? "$what in place of a shard of data.train: exit $rc at once, naming it; run_dir $( ((same)) && echo CHANGED || echo unchanged)"
    grep -E "error" "$TMP/out.txt" | head -2 | sed 's/^/#   /'
done

# nothing was created for a fresh run refused at start
"$TRAIN" "${args[@]}" --set max_duration=2ba --set run_dir="$TMP/fresh" --set data.tokenizer=gpt3 \
    --set sample.tokens=8 >"$TMP/fresh.txt" 2>&1
rc=$?
[[ $rc == 2 && ! -e $TMP/fresh ]] && grep -q 'data.tokenizer = "gpt3"' "$TMP/fresh.txt"
tap_check $? "fresh run with a missing tokenizer: exit $rc, run_dir not created"

# the accepted restart still resumes and writes (the checks above are no rubber stamp)
"$TRAIN" "${args[@]}" --set max_duration=6ba >"$TMP/ok.txt" 2>&1
rc=$?
unchanged
[[ $rc == 0 && $? != 0 ]] && grep -q "checkpoint resume step 4" "$TMP/ok.txt" && [[ -f $(ck "$TMP/run" 6) ]]
tap_check $? "an accepted restart resumes from step 4 and writes run_dir (exit $rc)"
# the checkpoint read at start is read before run_dir is opened; its record still reaches
# metrics.jsonl (it was lost when the opening moved after the resume)
grep -q "\"step\": 4, \"checkpoint\": \"resume\", \"path\": \"$TMP/run/step-00000004.h5\"" "$TMP/run/metrics.jsonl"
tap_check $? "the resume at step 4 is recorded in metrics.jsonl"
"$TRAIN" "${args[@]}" --set max_duration=2ba --set run_dir="$TMP/init" --init-from "$TMP/run" \
    >"$TMP/init.txt" 2>&1
rc=$?
[[ $rc == 0 ]] && grep -q '"step": 0, "checkpoint": "init-from"' "$TMP/init/metrics.jsonl"
tap_check $? "a fresh run --init-from records its init-from in metrics.jsonl (exit $rc)"
# and the fresh run with a good tokenizer creates run_dir
"$TRAIN" "${args[@]}" --set max_duration=2ba --set run_dir="$TMP/fresh" >"$TMP/fresh2.txt" 2>&1
[[ $? == 0 && -f $TMP/fresh/config.cfg && -f $TMP/fresh/metrics.jsonl ]]
tap_check $? "a fresh run that starts creates run_dir, config.cfg and metrics.jsonl"
tap_done
