#!/usr/bin/env bash
# The recipes in configs/ say true things (issue 21: stale comments):
#  - each loads and plans (tessera-train --config FILE --dry-run, exit 0, the plan printed; --plan
#    N as well where the recipe splits sequences over N ranks; tests/train/test_train_cli.sh ran
#    the same dry runs again one after another until 2026-11-29);
#  - every value the comment of `sharding` lists is accepted by that recipe (--set
#    parallel.sharding=V --dry-run) and together they are all of ddp, zero1, zero3, hsdp;
#  - no recipe comment promises what exists already ("not yet", "arrive with", "tessera shard
#    now, tessera prep" of the time before prep existed);
#  - a recipe that reads data/brown (or the demo's data/brown-bpe) says, in its data block, how
#    to make it (issue 48);
#  - the Gemma 3 recipes (head size 256) load and plan on 8 ranks with device = "cuda" (issue 67:
#    the GPU's attention takes hs 256), while an odd head size (96) is still refused at load;
#  - the plan's model line names each recipe's variants (issue 79, item 13; docs/planning.md "The
#    model line"): windows and their pattern, sinks, soft caps, norm placement, the RoPE scalings
#    (Llama 3.1's, YaRN), partial rotary, NoPE layers, "36 linear + 12 full", gpt-oss's experts;
#    a model without them gets none;
#  - the start says when no Hugging Face class holds the model (issue 79, item 12): of the recipes
#    only dbrx-132b (LayerNorm: no class tessera exports), and SmolLM3 shrunk by --set without its
#    head_dim, once, naming model.head_dim (the DeepSeek-V3-architecture recipes export as their
#    own classes);
#  - configs/tiny-deepseek.cfg (MLA, DeepSeekMoE, MTP; issue 84 item 8) trains 3 steps on a
#    synthetic corpus: every step's loss and MTP loss finite, the correction bias moved.
# The sizes of one issue-67 family (gemma3-*, gpt-oss-*, olmo2-*, olmo3-*) share every key but
# the sizes: the family's first recipe (in glob order) dry-runs each of its sharding values, the
# others their own setting only (sizes do not change which shardings load; CI's time).
# The dry runs (about 100) are independent processes that mostly wait on their start (MPI_Init, loading
# the libraries): they run four at a time, each with its own output and status files, and are
# judged after all have ended, in the order of the recipes.
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
recipes=("$TSR_ROOT"/configs/*.cfg)
tap_plan 11
# dry NAME ARGS...: tessera-train ARGS... --dry-run in the background (at most four at once); its
# exit status goes to $TMP/NAME.rc
dry() {
    local name=$1
    shift
    while (($(jobs -rp | wc -l) >= 4)); do wait -n; done
    { "$TRAIN" "$@" --dry-run >"$TMP/$name.out" 2>&1; echo $? >"$TMP/$name.rc"; } &
}
ran() { [[ $(cat "$TMP/$1.rc" 2>/dev/null) == 0 ]]; }   # ran NAME: that dry run exited 0
planned() { ran "$1" && grep -q "FLOPs/token" "$TMP/$1.out"; } # planned NAME: and printed its plan
declare -A first_of   # family -> its first recipe
# later_size FILE: FILE is a later size of an issue-67 family (its sharding values not dry-run)
later_size() {
    local r=${1##*/} fam
    fam=$(sed -nE 's/^(gemma3|gpt-oss|olmo2|olmo3)-.*/\1/p' <<<"$r")
    [[ -z $fam ]] && return 1
    [[ -z ${first_of[$fam]:-} ]] && first_of[$fam]=$r
    [[ ${first_of[$fam]} != "$r" ]]
}

for f in "${recipes[@]}"; do
    r=${f##*/}
    # a recipe that splits its sequences over N ranks (parallel.context, docs/parallelism.md)
    # plans on N ranks: one process cannot hold its context group
    ctx=$(sed -nE 's/^\s*context\s*=\s*([0-9]+);.*/\1/p' "$f")
    plan=()
    [[ -n $ctx ]] && plan=(--plan "$ctx")
    dry "$r" --config "$f" "${plan[@]}"
    line=$(grep -E '^\s*sharding\s*=' "$f") || continue
    later_size "$f" && continue
    for v in $(echo "${line#*#}" | grep -oE '\b(ddp|zero1|zero3|hsdp)\b' | sort -u); do
        dry "$r.$v" --config "$f" --set parallel.sharding="$v" "${plan[@]}"
    done
done
gemma=("$TSR_ROOT"/configs/gemma3-*.cfg)
for f in "${gemma[@]}"; do dry "${f##*/}.cuda" --config "$f" --set device=cuda --plan 8; done
dry hs96.cuda --config "${gemma[0]}" --set device=cuda --set model.head_dim=96 --plan 8
# variants no recipe has: a Llama with YaRN, Gemma 2's soft caps
dry llama-yarn --config "$TSR_ROOT/configs/tiny-llama.cfg" --set model.rope_scaling=yarn \
    --set model.rope_factor=4 --set model.rope_original_max_pos=64
dry softcaps --config "$TSR_ROOT/configs/gemma3-1b.cfg" --set model.attn_logit_softcapping=50 \
    --set model.final_logit_softcapping=30
# layers that repeat no shorter pattern: their runs in order, where the counts do not tell it
dry nope-order --config "$TSR_ROOT/configs/smollm3-3b.cfg" --set model.n_layer=4
dry full-first --config "$TSR_ROOT/configs/olmo3-7b.cfg" --set model.n_layer=4 \
    --set model.layer_types=full_attention,sliding_attention,sliding_attention,sliding_attention
# SmolLM3 shrunk keeping its head_dim of 128 (SmolLM3Config has none: hidden / heads)
dry smollm3-shrunk --config "$TSR_ROOT/configs/smollm3-3b.cfg" --set model.n_layer=4 \
    --set model.d_model=64 --set model.n_head=4 --set model.n_kv_head=1 --set model.intermediate_size=128
wait

bad=()
for f in "${recipes[@]}"; do planned "${f##*/}" || bad+=("${f##*/}"); done
((${#bad[@]} == 0))
tap_check $? "all ${#recipes[@]} recipes load and plan with --dry-run, printing the plan (FLOPs/token) (failed: ${bad[*]:-none})"

bad=()
for f in "${recipes[@]}"; do
    line=$(grep -E '^\s*sharding\s*=' "$f") || continue
    vals=$(echo "${line#*#}" | grep -oE '\b(ddp|zero1|zero3|hsdp)\b' | sort | tr '\n' ' ')
    [[ $vals == "ddp hsdp zero1 zero3 " ]] || bad+=("${f##*/}: lists '$vals'")
    [[ ${line#*#} == *"not yet"* ]] && bad+=("${f##*/}: says not yet")
    later_size "$f" && continue
    for v in $vals; do
        ran "${f##*/}.$v" || bad+=("${f##*/}: $v refused")
    done
done
((${#bad[@]} == 0))
tap_check $? "the sharding comments list ddp, zero1, zero3, hsdp, each accepted (${bad[*]:-ok})"

stale=$(grep -nE 'not yet|arrive with|tessera shard now' "${recipes[@]}")
[[ -z $stale ]]
tap_check $? "no stale promise in the recipes' comments"
[[ -z $stale ]] || echo "$stale" | sed "s#$TSR_ROOT/##; s/^/#   /"

# a recipe that reads data/brown (installed too: share/tessera/configs) says how to get it: the
# checkout's make target, and the prep command of an installed tessera, in its data block
bad=() n=0
for f in "${recipes[@]}"; do
    grep -q '^ *train = "data/brown/train";' "$f" || continue
    n=$((n + 1))
    block=$(sed -n '/^data = {/,/^};/p' "$f")
    grep -q 'make data/brown/train/index.tsv' <<<"$block" && grep -q '#   tessera prep --out data/brown --tokenizer gpt2 ' <<<"$block" ||
        bad+=("${f##*/}")
done
((n >= 4 && ${#bad[@]} == 0))
tap_check $? "the $n recipes reading data/brown say how to make it (silent: ${bad[*]:-none})"
# and the demo's, data/brown-bpe: its make target, and the tokenizer and prep commands behind it
bad=() n=0
for f in "${recipes[@]}"; do
    grep -q '^ *train = "data/brown-bpe/train";' "$f" || continue
    n=$((n + 1))
    block=$(sed -n '/^data = {/,/^};/p' "$f")
    grep -q 'make data/brown-bpe/train/index.tsv' <<<"$block" &&
        grep -q "#   tessera tokenizer train --vocab-size 8192 --special '<|endoftext|>' --out data/brown-bpe.tok " <<<"$block" &&
        grep -q '#   tessera prep --out data/brown-bpe --tokenizer data/brown-bpe.tok ' <<<"$block" || bad+=("${f##*/}")
done
((n >= 1 && ${#bad[@]} == 0))
tap_check $? "the $n recipes reading data/brown-bpe say how to make it (silent: ${bad[*]:-none})"

bad=()
for f in "${gemma[@]}"; do ran "${f##*/}.cuda" || bad+=("${f##*/}"); done
((${#gemma[@]} == 4 && ${#bad[@]} == 0))
tap_check $? "the ${#gemma[@]} Gemma 3 recipes (hs 256) plan on 8 ranks with --set device=cuda --dry-run (refused: ${bad[*]:-none})"
[[ $(cat "$TMP/hs96.cuda.rc") == 1 ]] &&
    grep -q -- '--set model.head_dim=96: device = "cuda": head size model.head_dim = 96 has no attention kernel on the GPU: it must be 32, 64, 128 or 256' "$TMP/hs96.cuda.out"
tap_check $? "a Gemma 3 recipe with head size 96 and device = cuda: refused at load, exit 1, naming model.head_dim and the sizes (exit $(cat "$TMP/hs96.cuda.rc"))"

# the model line of dry run NAME: its variants, after "; " (docs/planning.md "The model line")
variants() { sed -nE 's/^model: [^;]*(; (.*))?$/\2/p' "$TMP/$1.out"; }
declare -A want=(
    [gemma3-1b.cfg]="layers: 22 sliding (window 512) + 4 full (repeating 5 sliding, 1 full); sandwich norms; embedding x sqrt(d_model); sliding layers' RoPE theta 10000"
    [gemma3-27b.cfg]="layers: 52 sliding (window 1024) + 10 full (repeating 5 sliding, 1 full); scores / sqrt(168); sandwich norms; embedding x sqrt(d_model); RoPE linear x8 (full layers); sliding layers' RoPE theta 10000"
    [gpt-oss-20b.cfg]="layers: 12 sliding (window 128) + 12 full (repeating 1 sliding, 1 full); attention sinks; RoPE yarn x32 (original 4096 positions, beta 32/1, not truncated); router bias; expert biases; gptoss unit (limit 7)"
    [qwen3-next-80b-a3b.cfg]="layers: 36 linear + 12 full (repeating 3 linear, 1 full); gated attention output; RoPE on 64 of 256 head dims (partial rotary); gated shared expert"
    [olmo2-1b.cfg]="post norms; qk_norm over the projection"
    [olmo3-7b.cfg]="layers: 24 sliding (window 4096) + 8 full (repeating 3 sliding, 1 full); post norms; qk_norm over the projection"
    [smollm3-3b.cfg]="no RoPE in 9 of 36 layers (repeating 3 rope, 1 none)"
    [llama-3.1-8b.cfg]="RoPE llama3 x8 (original 8192 positions)"
    [llama-yarn]="RoPE yarn x4 (original 64 positions, beta 32/1)"
    [softcaps]="layers: 22 sliding (window 512) + 4 full (repeating 5 sliding, 1 full); sandwich norms; embedding x sqrt(d_model); attention soft cap 50; final soft cap 30; sliding layers' RoPE theta 10000"
    [nope-order]="no RoPE in 1 of 4 layers (3 rope, 1 none)"
    [full-first]="layers: 3 sliding (window 4096) + 1 full (1 full, 3 sliding); post norms; qk_norm over the projection"
    [gpt2-124m.cfg]="" [mixtral-8x7b.cfg]="" [qwen3-8b.cfg]="")
bad=()
for k in "${!want[@]}"; do
    got=$(variants "$k")
    [[ $got == "${want[$k]}" ]] || bad+=("$k: '$got'")
done
((${#bad[@]} == 0))
tap_check $? "the model line names the variants of ${#want[@]} models (gemma3, gpt-oss, qwen3-next, olmo2/3, smollm3, llama3 and YaRN scaling, soft caps, layers in an order of their own; none for gpt2, mixtral, qwen3) (${bad[*]:-ok})"

# the start's no-class warning (docs/hf.md "Export"): which recipes say it
warned=()
for f in "${recipes[@]}"; do
    grep -q 'no Hugging Face class holds this model' "$TMP/${f##*/}.out" && warned+=("${f##*/}"); done
[[ ${warned[*]} == dbrx-132b.cfg ]] &&
    grep -q 'which needs model.norm = "rmsnorm" and a gated MLP' "$TMP/dbrx-132b.cfg.out"
tap_check $? "of the recipes only dbrx-132b says that no Hugging Face class holds its model (${warned[*]:-none})"
n=$(grep -c 'no Hugging Face class holds this model' "$TMP/smollm3-shrunk.out")
ran smollm3-shrunk && ((n == 1)) && grep -q 'model.no_rope_layers exports as SmolLM3ForCausalLM (model_type "smollm3"), which needs model.head_dim = d_model / n_head' "$TMP/smollm3-shrunk.out"
tap_check $? "smollm3-3b shrunk by --set without its head_dim: --dry-run says once ($n) that no Hugging Face class holds it, naming model.head_dim"

# the tiny DeepSeek recipe trains: 3 steps on a synthetic corpus of 512 ids, its own model block
make_synth "$TMP/ds" 512 20000
"$TRAIN" --config "$TSR_ROOT/configs/tiny-deepseek.cfg" --set data.train="$TMP/ds/train" \
    --set data.val= --set data.tokenizer= --set model.vocab_size=512 --set max_duration=3ba \
    --set optim.warmup=1ba --set eval_interval=0ba --set save_interval=3ba --set sample.tokens=0 \
    --set log_interval=1 --set global_batch=4 --set micro_batch=4 \
    --set run_dir="$TMP/tiny-ds" >"$TMP/tiny-ds.out" 2>&1
rc=$?
n=$(grep -cE '^step +[1-3]/3 \| loss [0-9]+\.[0-9]+ \| mtp [0-9]+\.[0-9]+ \|' "$TMP/tiny-ds.out")
"$PY3" - "$(ck "$TMP/tiny-ds" 3)" <<'PY'
import sys, h5py, numpy as np
f = h5py.File(sys.argv[1], "r")
found = []
f.visititems(lambda n, o: found.append(o[()]) if n.endswith("routercorr") else None)
b = found[0] if found else np.zeros(1)
print(f"# routercorr {b.shape}: {np.abs(b).max() if b.size else 0}")
sys.exit(0 if found and b.shape == (3, 16) and np.abs(b).max() > 0 else 1)
PY
b=$?
((rc == 0 && n == 3 && b == 0))
tap_check $? "tiny-deepseek trains 3 steps (exit $rc): $n step lines with a finite loss and MTP loss; its 3 MoE layers' correction bias moved"
tap_done
