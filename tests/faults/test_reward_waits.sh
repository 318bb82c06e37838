#!/usr/bin/env bash
# Waits and codes that misled (issue 64 finding 7), each checked on a tiny GRPO run:
#  - a reward program that closes its stdout but stays alive is seen at once ("it closed its
#    output"), not after reward.timeout (set to 600 s here: the old trainer waited for it, as
#    its shell held the pipe open; a simple command now runs as `exec COMMAND`);
#  - a reward.command naming a missing file, a directory, a file that is not executable or a
#    program not in PATH: exit 2 at start naming reward.command and the path, before any rollout,
#    run_dir not created (it was noticed after the first step's rollouts, as exit status 127);
#  - the reward program's exit message adds the memory bound only when it may be the cause: not
#    for exit 0 or 127, still for a SIGKILLed program;
#  - a negative size in config.json (`num_attention_heads: -4`): exit 2 (it was 1), with no
#    second "missing required key ... --set" error;
#  - a run refused at start for its memory (TSR_FAULT=oom: the activations of micro_batch = 4 do
#    not fit): exit 1 and no run_dir (it left config.cfg, metrics.jsonl and tb/ there).
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 6
grpo_prompts "$TMP/rl" 300
grpo_small_args "$TMP/rl"
small+=(--set max_duration=1ba)
reward() { # reward NAME COMMAND [--set ...]: a run with that reward.command, its output in NAME.txt
    local name=$1 cmd=$2; shift 2
    timeout -s KILL 300 "$TRAIN" "${small[@]}" --set run_dir="$TMP/$name" --set reward.kind=command \
        --set reward.command="$cmd" "$@" >"$TMP/$name.txt" 2>&1
}
cat >"$TMP/close.py" <<'PY'
import os, time
os.close(1)
time.sleep(900)
PY
reward close "$PY3 $TMP/close.py" --set reward.timeout=600
rc=$?
tap_diag "$(grep -m1 'error: ' "$TMP/close.txt" | cut -c1-200)"
((rc == 2)) && grep -q "error: reward.command \"$PY3 $TMP/close.py\": it closed its output (it is still running)" "$TMP/close.txt" &&
    ! grep -q "no answer within" "$TMP/close.txt" && ! pgrep -f "$TMP/close.py" >/dev/null
tap_check $? "a program that closes its stdout and sleeps: exit $rc at once, 'it closed its output', not reward.timeout's; nothing left running"

printf 'print(1)\n' >"$TMP/noexec.py"
mkdir "$TMP/adir"
bad=""
for c in "$TMP/nope.py --x|$TMP/nope.py: no such file" "$TMP/adir|$TMP/adir: a directory, not a program" \
         "$TMP/noexec.py|$TMP/noexec.py: not an executable file" "tessera-no-such-program --x|tessera-no-such-program: not found in PATH"; do
    cmd=${c%%|*} want=${c#*|}
    rm -rf "$TMP/m"
    reward m "$cmd"
    rc=$?
    if ((rc != 2)) || ! grep -qF "error: reward.command = \"$cmd\": $want" "$TMP/m.txt" ||
        grep -q '"step": 1' "$TMP/m.txt" || [[ -e $TMP/m ]]; then
        bad+=" [$cmd: exit $rc]"
        grep -m1 'error: ' "$TMP/m.txt" | cut -c1-200 | sed 's/^/#   /'
    fi
done
[[ -z $bad ]]
tap_check $? "reward.command naming a missing file, a directory, a non-executable file, a program not in PATH: exit 2 at start naming the key and the path, no rollout, no run_dir${bad:+; failed:$bad}"

bad=""
for c in "exit 0|it exited with status 0" "cd $TMP && tessera-no-such-program|it exited with status 127"; do
    cmd=${c%%|*} want=${c#*|}
    reward e "$cmd"
    rc=$?
    if ((rc != 2)) || ! grep -q "$want (0 of" "$TMP/e.txt"; then
        bad+=" [$cmd: exit $rc]"
        grep -m1 'error: ' "$TMP/e.txt" | cut -c1-240 | sed 's/^/#   /'
    fi
done
reward k "$PY3 -c 'import os; os.kill(os.getpid(), 9)'"
rc=$?
grep -q "(its memory is bounded by reward.memory_mib = 8192)" "$TMP/k.txt" || bad+=" [SIGKILLed: no bound named, exit $rc]"
[[ -z $bad ]]
tap_check $? "the exit message names the memory bound for a SIGKILLed program, not for exit 0 or 127${bad:+; failed:$bad}"

# a negative size in config.json: a Hugging Face export of a tiny Llama, num_attention_heads -4
make_synth "$TMP/data"
tiny_llama_args "$TMP/data/train"
"$TRAIN" "${args[@]}" --set model.n_head=4 --set save_interval=1ba --set max_duration=1ba \
    --set run_dir="$TMP/A" >"$TMP/A.txt" 2>&1 &&
    "$TOOL" ckpt export --format hf --tokenizer none "$(ck "$TMP/A" 1)" "$TMP/hf" >/dev/null 2>&1 ||
    { cat "$TMP/A.txt"; exit 1; }
sed -i 's/"num_attention_heads": 4/"num_attention_heads": -4/' "$TMP/hf/config.json"
cat >"$TMP/recipe.cfg" <<EOF
max_duration = "1ba"; global_batch = 2; micro_batch = 1; seq_len = 32; threads = 1;
sample = { tokens = 0; };
data = { train = "$TMP/data/train"; val = ""; tokenizer = ""; };
EOF
"$TRAIN" --config "$TMP/recipe.cfg" --set run_dir="$TMP/neg" --init-from "$TMP/hf" >"$TMP/neg.txt" 2>&1
rc=$?
"$TOOL" generate --ckpt "$TMP/hf" --prompt-ids "1 2" >"$TMP/negg.txt" 2>&1
rcg=$?
tap_diag "$(grep -m1 'error: ' "$TMP/neg.txt")"
((rc == 2 && rcg == 2)) && grep -q "config.json: num_attention_heads = -4: expected an integer >= 1" "$TMP/neg.txt" &&
    ! grep -q "missing required key" "$TMP/neg.txt" "$TMP/negg.txt" && [[ ! -e $TMP/neg ]]
tap_check $? "config.json num_attention_heads = -4: exit 2 from --init-from ($rc) and generate ($rcg), no second 'missing required key' error"

# refused at start for its memory: nothing in run_dir
tiny_args "$TMP/data/train"
args+=(--set model.n_layer=2 --set model.n_head=4 --set global_batch=4 --set max_duration=2ba)
TSR_FAULT=oom:2:0 "$TRAIN" "${args[@]}" --set micro_batch=4 --set run_dir="$TMP/oom" >"$TMP/oom.txt" 2>&1
rc=$?
tap_diag "$(grep -m1 'error: ' "$TMP/oom.txt")"
((rc == 1)) && grep -q "out of memory on 1 of 1 ranks allocating the activations for a microbatch of 4 x 32" "$TMP/oom.txt" &&
    [[ ! -e $TMP/oom ]]
tap_check $? "a run whose activations do not fit at start: exit $rc, run_dir not created (no config.cfg, metrics.jsonl, tb/)"
# and micro_batch = auto still halves under the same limit (the start's check tries 1 sequence)
TSR_FAULT=oom:2:0 "$TRAIN" "${args[@]}" --set micro_batch=auto --set run_dir="$TMP/auto" >"$TMP/auto.txt" 2>&1
rc=$?
((rc == 0)) && grep -q '"event": "micro_batch", "step": 0, "micro_batch": 2' "$TMP/auto/metrics.jsonl"
tap_check $? "micro_batch = auto under the same limit: exit $rc, halved to 2 at step 1 and logged in metrics.jsonl"
tap_done
