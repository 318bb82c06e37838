#!/usr/bin/env bash
# The tiny recipes of the 2026 families (issue 79, items 12 and 15; docs/models.md "Tiny
# recipes"): configs/tiny-gemma3, tiny-gpt-oss, tiny-olmo2, tiny-olmo3, tiny-smollm3,
# tiny-qwen3-next, tiny-qwen3.5 and tiny-deepseek (issue 84), each its family's variants at a toy size on GPT-2's BPE:
#  - each trains one step from the recipe as it is (only where it runs and what it reads changed:
#    a text in GPT-2's BPE in place of data/brown, no evaluation, no sample, no warmup), its loss
#    about ln(50257) (an untrained model), with no warning at start; and `tessera ckpt export
#    --format hf` writes its family's class (config.json's model_type) with no warning;
#  - every tiny recipe of a family is in this test's list, and docs/models.md and README.md name
#    each;
#  - OLMo 3 shrunk by --set from configs/olmo3-7b.cfg without its head_dim (128 on d_model 64:
#    Olmo3Config has no head_dim): the trainer says once, at start, before step 1, that no
#    Hugging Face class holds the model and why; it trains; the export of its checkpoint is
#    refused (exit 1) for the same reason, nothing written;
#  - `tessera generate` on the exported tiny gpt-oss (router_aux_loss_coef 0.9 against the
#    default 0.01 of a run without a recipe) prints no aux-loss warning (a training choice; it
#    printed it three times), while `tessera-train --init-from` it with a recipe that keeps the
#    default says it once.
# One run per recipe, one step each (its loss is the step line's): about 2 s a recipe on one core.
# Skips (77) without GPT-2's tokenizer files (./INSTALL fetches them).
source "$(dirname "$0")/../lib.sh"
gpt2_dir
[[ -f $GPT2_DIR/encoder.json ]] || { echo "# GPT-2's tokenizer files missing ($GPT2_DIR): run ./INSTALL --ensure demo"; exit 77; }
tsr_tmpdir
# recipe -> the model_type its export writes
declare -A class=([tiny-gemma3]=gemma3_text [tiny-gpt-oss]=gpt_oss [tiny-olmo2]=olmo2
                  [tiny-olmo3]=olmo3 [tiny-smollm3]=smollm3 [tiny-qwen3-next]=qwen3_next
                  [tiny-qwen3.5]=qwen3_5_text [tiny-deepseek]=deepseek_v3)
names=(tiny-gemma3 tiny-gpt-oss tiny-olmo2 tiny-olmo3 tiny-smollm3 tiny-qwen3-next tiny-qwen3.5
       tiny-deepseek)
tap_plan $((${#names[@]} + 4))

"$TOOL" prep -q --out "$TMP/data" --tokenizer gpt2 --val-fraction 0 "$TSR_ROOT/README.md" || exit 1
# the recipe's own keys but where it runs and reads, and one step: what a test can afford
run=(--set data.train="$TMP/data/train" --set data.val= --set eval_interval=0ba --set sample.tokens=0
     --set max_duration=1ba --set optim.warmup=0ba --set threads=1 --set watchdog.window=0)
# loss_of LOG: step 1's loss
loss_of() { sed -nE 's/^step 1\/1 \| loss ([^ ]+) .*/\1/p' "$1"; }

for r in "${names[@]}"; do
    "$TRAIN" --config "$TSR_ROOT/configs/$r.cfg" "${run[@]}" --set run_dir="$TMP/$r" >"$TMP/$r.log" 2>&1
    trc=$?
    "$TOOL" ckpt export --format hf "$TMP/$r" "$TMP/$r.hf" >"$TMP/$r.export" 2>&1
    xrc=$?
    loss=$(loss_of "$TMP/$r.log")
    mt=$(sed -nE 's/^ *"model_type": "([^"]+)".*/\1/p' "$TMP/$r.hf/config.json" 2>/dev/null)
    ((trc == 0 && xrc == 0)) && [[ $mt == "${class[$r]}" ]] &&
        awk -v l="$loss" 'BEGIN { exit !(l >= 9.8 && l <= 11.8) }' &&
        ! grep -q 'warning' "$TMP/$r.log" "$TMP/$r.export"
    tap_check $? "configs/$r.cfg: one step (exit $trc, loss ${loss:-none}, no warning at start); ckpt export --format hf: model_type \"${mt:-none}\" (exit $xrc, no warning)"
    ((trc == 0)) || tail -3 "$TMP/$r.log" | sed 's/^/#   /'
    grep -h 'warning' "$TMP/$r.log" "$TMP/$r.export" | head -2 | sed 's/^/#   /'
done

bad=()
for f in "$TSR_ROOT"/configs/tiny-*.cfg; do
    r=${f##*/} r=${r%.cfg}
    case $r in tiny-llama | tiny-muon | tiny-sft) continue ;; esac # not a family's (test_llama_train, ...)
    [[ -n ${class[$r]:-} ]] || bad+=("$r: not run here")
    grep -q "\`$r\`" "$TSR_ROOT/docs/models.md" || bad+=("$r: not in docs/models.md")
    grep -q "\`$r\`" "$TSR_ROOT/README.md" || bad+=("$r: not in README.md")
done
((${#bad[@]} == 0))
tap_check $? "every family's tiny recipe is run here and named by docs/models.md and README.md (${bad[*]:-ok})"

# OLMo 3 7B cut down by --set as a newcomer would, keeping its head_dim of 128
shrunk=(--config "$TSR_ROOT/configs/olmo3-7b.cfg" "${run[@]}" --set run_dir="$TMP/shrunk"
        --set model.n_layer=4 --set model.d_model=64 --set model.n_head=4 --set model.n_kv_head=4
        --set model.intermediate_size=128 --set model.vocab_size=50257 --set model.eot_token=50256
        --set model.sliding_window=32 --set model.activation_checkpointing=none --set seq_len=64
        --set global_batch=2 --set micro_batch=2 --set parallel.sharding=ddp --set data.tokenizer=gpt2)
"$TRAIN" "${shrunk[@]}" >"$TMP/shrunk.log" 2>&1
trc=$?
"$TOOL" ckpt export --format hf "$TMP/shrunk" "$TMP/shrunk.hf" >"$TMP/shrunk.export" 2>&1
xrc=$?
n=$(grep -c 'no Hugging Face class holds this model' "$TMP/shrunk.log")
why=$(sed -nE 's/.*no Hugging Face class holds this model: `tessera ckpt export --format hf` will refuse its checkpoints: (.*) \(docs\/hf.md "Export"\)$/\1/p' "$TMP/shrunk.log")
tap_diag "start: ${why:-none}"
((trc == 0 && xrc == 1 && n == 1)) && [[ $why == *'needs model.head_dim = d_model / n_head'* ]] &&
    sed '/^step 1\/1/,$d' "$TMP/shrunk.log" | grep -q 'no Hugging Face class' &&
    grep -qF "export --format hf: $why; this model has no transformers equivalent" "$TMP/shrunk.export" &&
    [[ ! -e $TMP/shrunk.hf ]]
tap_check $? "olmo3-7b shrunk without head_dim: said once at start, before step 1 ($n), naming model.head_dim; trains (exit $trc); its export refused for the same reason (exit $xrc), nothing written"

# the aux-loss warning is a training run's: not generate's
"$TOOL" generate --ckpt "$TMP/tiny-gpt-oss.hf" --prompt "The" --max-tokens 2 --temperature 0 \
    --set threads=1 >"$TMP/gen.out" 2>"$TMP/gen.err"
grc=$?
cat >"$TMP/init.cfg" <<CFG
run_dir = "$TMP/init"; max_duration = "1ba"; global_batch = 2; micro_batch = 2; seq_len = 32;
eval_interval = "0ba"; save_interval = "0ba"; threads = 1;
optim = { lr = 1e-4; };
data = { train = "$TMP/data/train"; val = ""; };
sample = { tokens = 0; };
CFG
"$TRAIN" --config "$TMP/init.cfg" --init-from "$TMP/tiny-gpt-oss.hf" >"$TMP/init.log" 2>&1
irc=$?
ng=$(grep -c router_aux_loss_coef "$TMP/gen.err") ni=$(grep -c router_aux_loss_coef "$TMP/init.log")
((grc == 0 && irc == 0 && ng == 0 && ni == 1)) && [[ -s $TMP/gen.out ]]
tap_check $? "generate on the exported tiny gpt-oss: no aux-loss warning ($ng; exit $grc); --init-from it with the default coefficient: the warning once ($ni; exit $irc)"
# the exported tiny DeepSeek (MLA, DeepSeekMoE, MTP) read back: greedy generation from the HF
# directory equals the tessera checkpoint's token for token (the same model after import), and
# --init-from it with no model block trains a step at an untrained loss
gen_of() { "$TOOL" generate --ckpt "$1" --prompt "The" --max-tokens 8 --temperature 0 --set threads=1 2>/dev/null; }
ga=$(gen_of "$TMP/tiny-deepseek") gb=$(gen_of "$TMP/tiny-deepseek.hf")
sed -e "s|$TMP/init\"|$TMP/init-ds\"|" "$TMP/init.cfg" >"$TMP/init-ds.cfg"
"$TRAIN" --config "$TMP/init-ds.cfg" --init-from "$TMP/tiny-deepseek.hf" >"$TMP/init-ds.log" 2>&1
drc=$? dl=$(loss_of "$TMP/init-ds.log")
tap_diag "generate: tessera '$ga', HF '$gb'; --init-from: exit $drc, loss ${dl:-none}"
[[ -n $ga && $ga == "$gb" ]] && ((drc == 0)) && grep -q 'kv_lora_rank' "$TMP/init-ds/config.cfg" &&
    awk -v l="$dl" 'BEGIN { exit !(l >= 9.8 && l <= 11.8) }'
tap_check $? "the exported tiny DeepSeek: generate from its HF directory equals the checkpoint's (8 greedy tokens); --init-from it with no model block takes MLA's keys and trains a step (exit $drc)"
tap_done
