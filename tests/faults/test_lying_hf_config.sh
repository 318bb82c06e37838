#!/usr/bin/env bash
# A Hugging Face directory whose config.json lies about its weights is refused before any model
# memory is allocated (issue 64 finding 3; docs/hf.md "Import"): a tiny Llama (4 layers, d_model
# 64, MLP 96, vocabulary 512) exported with `tessera ckpt export --format hf`, then config.json
# rewritten to num_hidden_layers 300, num_hidden_layers 1000, hidden_size 1e9 and
# intermediate_size 1e7. Each is refused by tessera-train --init-from, tessera generate --ckpt,
# tessera eval --ckpt and tessera ckpt import with exit 2, naming config.json, the key, its value and
# what the weights say, under a `ulimit -v` of 1 GiB (the old trainer allocated and initialised
# 300 layers for 19 s and 1.8 GB, and asked for 11 TB at hidden_size 1e9: exit 3), and the run
# directory is not created. The true directory still starts a run.
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 5
make_synth "$TMP/data"
tiny_llama_args "$TMP/data/train"
args+=(--set model.n_head=4 --set model.n_kv_head=2 --set model.n_layer=4 --set save_interval=1ba
       --set max_duration=1ba --set run_dir="$TMP/A")
"$TRAIN" "${args[@]}" >"$TMP/a.txt" 2>&1 &&
    "$TOOL" ckpt export --format hf --tokenizer none "$(ck "$TMP/A" 1)" "$TMP/hf" >"$TMP/x.txt" 2>&1 ||
    { cat "$TMP/a.txt" "$TMP/x.txt"; exit 1; }
# a recipe with no model.* keys: config.json gives them all
cat >"$TMP/recipe.cfg" <<EOF
max_duration = "1ba"; global_batch = 2; micro_batch = 1; seq_len = 32; threads = 1;
sample = { tokens = 0; };
optim = { lr = 1e-3; };
data = { train = "$TMP/data/train"; val = ""; tokenizer = ""; };
EOF
# refused KEY VALUE WEIGHTS: every command refuses the directory whose config.json says KEY = VALUE
refused() {
    local key=$1 value=$2 got=$3 bad="" rc
    rm -rf "$TMP/lie" "$TMP/run" "$TMP/out.h5"
    cp -r "$TMP/hf" "$TMP/lie"
    sed -i "s/\"$key\": [0-9]*/\"$key\": $value/" "$TMP/lie/config.json"
    grep -q "\"$key\": $value," "$TMP/lie/config.json" || { tap_check 1 "$key = $value: config.json rewritten"; return; }
    local pat="lie/config.json: $key = $value, but the weights \(.*model.safetensors\) say $got"
    for cmd in train generate eval import; do
        case $cmd in
        train) set -- "$TRAIN" --config "$TMP/recipe.cfg" --set run_dir="$TMP/run" --init-from "$TMP/lie" ;;
        generate) set -- "$TOOL" generate --ckpt "$TMP/lie" --prompt-ids "1 2" ;;
        eval) set -- "$TOOL" eval --ckpt "$TMP/lie" --val "$TMP/data/val" ;;
        import) set -- "$TOOL" ckpt import "$TMP/lie" "$TMP/out.h5" ;;
        esac
        (ulimit -v 1048576; timeout -s KILL 120 "$@") >"$TMP/$cmd.txt" 2>&1
        rc=$?
        if [[ $rc != 2 ]] || ! grep -Eq "$pat" "$TMP/$cmd.txt" || [[ -e $TMP/run || -e $TMP/out.h5 ]]; then
            bad+=" $cmd(exit $rc)"
            grep -E "error|fatal" "$TMP/$cmd.txt" | head -2 | sed 's/^/#   /'
        fi
    done
    [[ -z $bad ]]
    tap_check $? "config.json $key = $value on weights with $got: train --init-from, generate, eval, ckpt import exit 2 naming the key, its value and the weights, before allocating (under ulimit -v 1 GiB), nothing written${bad:+; failed:$bad}"
    grep -h "error" "$TMP/train.txt" | head -1 | sed 's/^/#   /'
}
refused num_hidden_layers 300 4
refused num_hidden_layers 1000 4
refused hidden_size 1000000000 64
refused intermediate_size 10000000 96
# the true directory is accepted (the check is no blanket refusal)
"$TRAIN" --config "$TMP/recipe.cfg" --set run_dir="$TMP/ok" --init-from "$TMP/hf" >"$TMP/ok.txt" 2>&1
rc=$?
[[ $rc == 0 ]] && grep -q '"checkpoint": "init-from"' "$TMP/ok/metrics.jsonl"
tap_check $? "the true directory starts a run --init-from it (exit $rc)"
tap_done
