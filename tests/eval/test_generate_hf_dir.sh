#!/usr/bin/env bash
# test_generate_hf_dir.sh — tessera reads back every tokenizer it exports (docs/hf.md "Tokenizer
# files", docs/tokenizer.md "A directory"; issue 65 item 8). A tiny model trained 2 steps with GPT-2's
# tokenizer (exported as vocab.json + merges.txt + tokenizer_config.json) and one with Qwen 3's
# tokenizer.json (exported as byte copies) are exported with `tessera ckpt export --format hf`; then
#  - `generate --ckpt HF_DIR` (its tokenizer found in the directory: no "data.tokenizer is empty")
#    and `generate --ckpt CKPT --tokenizer HF_DIR` print the same text and ids as `generate --ckpt
#    CKPT` with the checkpoint's own data.tokenizer (greedy);
#  - a checkpoint whose data.tokenizer is an exported directory exports again: the same files;
#  - --init-from an exported directory with data.tokenizer "auto" and a dataset that records no
#    tokenizer: the directory's tokenizer is the run's data.tokenizer;
#  - a directory with no tokenizer files is refused, exit 2, naming every file looked for.
# Skips (77) without the npm files ./INSTALL fetches.
source "$(dirname "$0")/../lib.sh"
NPM_DIR=${TSR_DATA_DIR:-$TSR_ROOT/data/npm}
QWEN=$NPM_DIR/chat/qwen3
needs_installed "$NPM_DIR"/gpt2/{encoder.json,vocab.bpe} "$QWEN"/tokenizer{,_config}.json
needs_built "$TOOL" "$TRAIN"
tsr_tmpdir
tap_plan 9
export TSR_DATA_DIR=$NPM_DIR

# gen NAME OUT ARGS...: a greedy completion (text, then ids) of the prompt into NAME/OUT.{txt,ids}
PROMPT='Hello, world! The tokenizer reads'
gen() {
    local d=$TMP/$1 o=$2; shift 2
    "$TOOL" generate --set threads=1 --temperature 0 --no-eos-stop --max-tokens 12 --prompt "$PROMPT" \
        "$@" >"$d/$o.txt" 2>"$d/$o.err" &&
    "$TOOL" generate --set threads=1 --temperature 0 --no-eos-stop --max-tokens 12 --prompt "$PROMPT" \
        --ids "$@" >"$d/$o.ids" 2>>"$d/$o.err" || { tail -3 "$d/$o.err"; return 1; }
}
# same NAME A B: A's and B's text and ids are the same, 12 ids after the prompt's
same() {
    local d=$TMP/$1
    tap_diag "$1 $3: $(tr '\n' ' ' <"$d/$3.ids" | cut -c1-120)"
    cmp -s "$d/$2.txt" "$d/$3.txt" && cmp -s "$d/$2.ids" "$d/$3.ids" &&
        (($(wc -w <"$d/$2.ids") >= 12))
}

for spec in "gpt2:50257:gpt2" "qwen3:151669:$QWEN/tokenizer.json"; do
    IFS=: read -r name V tok <<<"$spec"
    d=$TMP/$name
    tiny_export "$d" "$V" "$tok" 2 && gen "$name" ckpt --ckpt "$d/run/latest" &&
        gen "$name" hfdir --ckpt "$d/hf" && gen "$name" tokdir --ckpt "$d/run/latest" --tokenizer "$d/hf"
    tap_check $? "$name: trained 2 steps, exported to HF, generated from the checkpoint and the directory"
    same "$name" ckpt hfdir
    tap_check $? "$name: generate --ckpt HF_DIR = --ckpt CKPT (the directory's tokenizer; same text and ids)"
    same "$name" ckpt tokdir
    tap_check $? "$name: generate --ckpt CKPT --tokenizer HF_DIR = --ckpt CKPT"
done
tap_diag "gpt2 export: $(ls "$TMP/gpt2/hf" | tr '\n' ' ')"

# a checkpoint trained with an exported directory as data.tokenizer exports the same files again
d=$TMP/gpt2
"$TRAIN" --config "$d/cfg" --set data.tokenizer="$d/hf" --set run_dir="$d/run2" >"$d/train2.log" 2>&1 &&
    "$TOOL" ckpt export --format hf "$d/run2/latest" "$d/hf2" >"$d/export2.log" 2>&1 &&
    cmp -s "$d/hf/vocab.json" "$d/hf2/vocab.json" && cmp -s "$d/hf/merges.txt" "$d/hf2/merges.txt" &&
    cmp -s "$d/hf/vocab.json" "$NPM_DIR/gpt2/encoder.json" &&
    cmp -s "$d/hf/tokenizer_config.json" "$d/hf2/tokenizer_config.json"
tap_check $? "data.tokenizer = an exported GPT-2 directory: exported again, the same vocab.json, merges.txt"

# --init-from the exported directory, data.tokenizer left to "auto", a dataset that records no
# tokenizer (tessera synth): the directory's tokenizer is the run's, and its checkpoint generates text
"$TRAIN" --config "$d/cfg" --set data.tokenizer=auto --init-from "$d/hf" --set run_dir="$d/run3" >"$d/train3.log" 2>&1 &&
    grep -qF "data.tokenizer = \"$d/hf\": the --init-from directory's (the dataset records none)" "$d/train3.log" &&
    grep -qF "tokenizer = \"$d/hf\"" "$d/run3/config.cfg" && gen gpt2 init --ckpt "$d/run3/latest" &&
    [[ -s $d/init.txt ]] && (($(wc -w <"$d/init.ids") >= 12))
tap_check $? "--init-from HF_DIR, data.tokenizer auto, a dataset without one: the directory's tokenizer is the run's"

# a directory without tokenizer files: refused, exit 2, naming what was looked for
mkdir -p "$TMP/empty" && printf 'x\n' >"$TMP/prompt.txt"
"$TOOL" tokenizer encode --tokenizer "$TMP/empty" "$TMP/prompt.txt" >"$TMP/empty.out" 2>&1
rc=$?
((rc == 2)) &&
    grep -q "tokenizer '$TMP/empty': the directory holds no tokenizer (expected encoder.json + vocab.bpe, tokenizer.json, tiktoken.model or vocab.json + merges.txt)" "$TMP/empty.out"
tap_check $? "a directory without tokenizer files: exit $rc, naming the files looked for"
tap_done
