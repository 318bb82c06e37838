#!/usr/bin/env bash
# test_init_from_tokenizer.sh — --init-from HF_DIR together with --config RECIPE: the directory
# supplies the tokenizer (docs/hf.md "Import", issue 67 item 2; as issue 65 item 8 decided for
# generate). A tiny GPT-2-tokenizer model trained 2 steps and exported (`ckpt export --format hf`:
# vocab.json + merges.txt); then one step --init-from that directory with a recipe whose
# data.tokenizer is named, on a dataset that records no tokenizer (tessera synth):
#  - a recipe's `tokenizer = ""` (the shipped family recipes' placeholder) and a recipe's
#    `tokenizer = "gpt2"` both give way: the run's data.tokenizer is HF_DIR, the start says so
#    naming the recipe's value, and the run's config.cfg records HF_DIR;
#  - an explicit --set data.tokenizer="" still wins: the run has none (config.cfg: "");
#  - without --init-from the recipe's "" is kept (nothing changes for a plain run).
# Skips (77) without GPT-2's npm files (./INSTALL).
source "$(dirname "$0")/../lib.sh"
NPM_DIR=${TSR_DATA_DIR:-$TSR_ROOT/data/npm}
needs_installed "$NPM_DIR"/gpt2/{encoder.json,vocab.bpe}
needs_built "$TOOL" "$TRAIN"
tsr_tmpdir
tap_plan 5
export TSR_DATA_DIR=$NPM_DIR
d=$TMP/m
tiny_export "$d" 50257 gpt2 2
tap_check $? "a tiny GPT-2-tokenizer model trained 2 steps and exported to $d/hf"

# run NAME RECIPE_TOKENIZER ARGS...: one step with the recipe's data.tokenizer set in its file
run() {
    local name=$1 tok=$2; shift 2
    sed -e "s|tokenizer = \"gpt2\"|tokenizer = \"$tok\"|" -e 's|max_duration = "2ba"|max_duration = "1ba"|' \
        -e 's|save_interval = "2ba"|save_interval = "1ba"|' "$d/cfg" >"$d/cfg.$name"
    "$TRAIN" --config "$d/cfg.$name" --set run_dir="$d/$name" "$@" >"$d/$name.log" 2>&1 ||
        { tail -3 "$d/$name.log"; return 1; }
}
took_dir() { # NAME RECIPE_TOKENIZER: the directory's tokenizer replaced the recipe's, and said so
    grep -qF "data.tokenizer = \"$d/hf\": the --init-from directory's (the dataset records none); the recipe's \"$2\" gives way to it" "$d/$1.log" &&
        grep -qF "tokenizer = \"$d/hf\"" "$d/$1/config.cfg"
}

run empty "" --init-from "$d/hf" && took_dir empty ""
tap_check $? "--init-from HF_DIR, the recipe's data.tokenizer = \"\": the directory's tokenizer is the run's (the start names the recipe's value)"
run named gpt2 --init-from "$d/hf" && took_dir named gpt2
tap_check $? "--init-from HF_DIR, the recipe's data.tokenizer = \"gpt2\": the directory's tokenizer is the run's"
run set "" --init-from "$d/hf" --set data.tokenizer= &&
    grep -q '^ *tokenizer = "";' "$d/set/config.cfg" && ! grep -q "the --init-from directory's" "$d/set.log"
tap_check $? "--init-from HF_DIR with --set data.tokenizer=\"\": the --set wins (no tokenizer)"
run plain "" && grep -q '^ *tokenizer = "";' "$d/plain/config.cfg"
tap_check $? "no --init-from: the recipe's data.tokenizer = \"\" is kept"
tap_done
