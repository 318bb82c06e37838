#!/usr/bin/env bash
# test_refusals.sh — the refusals of docs/limits.md that no other test shows, one check each: the
# program exits with the row's status and prints the row's message, and a refused trainer start
# leaves no run directory. Most are config combinations, caught by `tessera-train --dry-run` (or
# `--plan RANKS` for the layout's rules), so a recipe that would be refused is caught on a login
# node; then starts on a tiny synthetic dataset (the data's checks), the CUDA library's absence,
# the options of `tessera generate`, the export of models no transformers class holds, files over
# their size bound (a Hugging Face config.json, tokenizer encode's input, a dataset's index.tsv,
# GRPO's prompts.jsonl),
# tessera-job's sweeps and the health checker's thresholds. Each case is one row of a table:
# what, the expected exit, the message (a fixed string, grep -F), the command.
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 65

make_synth "$TMP/data" 512 20000
"$TOOL" synth --out "$TMP/short" --vocab 512 --tokens 20 --seed 1 >/dev/null
tiny_args "$TMP/data/train"
base=("${args[@]}" --set model.n_head=2 --set run_dir="$TMP/run")
llama=(--set model.pos=rope --set model.norm=rmsnorm --set model.mlp=swiglu --set model.bias=false)
linear=("${llama[@]}" --set "model.layer_types=linear_attention,full_attention" --set device=cuda)
moe=("${llama[@]}" --set model.moe_experts=4 --set model.moe_top_k=2)

# refused WHAT RC MESSAGE CMD...: CMD exits RC, says MESSAGE, and leaves no $TMP/run
refused() {
    local what=$1 want=$2 msg=$3 rc
    shift 3
    "$@" >"$TMP/out.txt" 2>&1
    rc=$?
    # (the first error is the refusal: the rest of each case's settings are valid)
    ((rc == want)) && grep -m1 "error" "$TMP/out.txt" | grep -qF -- "$msg" && [[ ! -e $TMP/run ]]
    tap_check $? "$what: exit $rc (want $want), \"$msg\""
    grep -m2 -i "error" "$TMP/out.txt" | cut -c1-300 | sed 's/^/#   /'
    rm -rf "$TMP/run"
}
# dry WHAT MESSAGE --set ...: the trainer's dry run of the tiny recipe with the settings refuses
# them with exit 1 (a config error) and MESSAGE
dry() { local what=$1 msg=$2; shift 2; refused "$what" 1 "$msg" "$TRAIN" "${base[@]}" "$@" --dry-run; }
# warned WHAT MESSAGE CMD...: CMD (a plan) exits 0 and warns MESSAGE: what a start would refuse
warned() {
    local what=$1 msg=$2 rc
    shift 2
    "$@" >"$TMP/out.txt" 2>&1
    rc=$?
    ((rc == 0)) && grep "warning" "$TMP/out.txt" | grep -qF -- "$msg"
    tap_check $? "$what: exit $rc (want 0, a plan), warned \"$msg\""
}

# ---- config and model ----
dry "model.vocab_size padded past 2^31 - 1 rows" "rows: lower vocab_multiple" \
    --set model.vocab_size=2147483600
dry "an MLP wider than 2^30 - 1 (SwiGLU's fused projection)" \
    "SwiGLU's fused gate and up projection is twice as wide" "${llama[@]}" \
    --set model.intermediate_size=1100000000
dry "a string key longer than its size" "too long, at most 1023 characters" \
    --set run_dir="$TMP/$(printf 'r%.0s' {1..2995})"
dry "model.norm_placement = post with LayerNorm" 'needs model.norm = "rmsnorm"' \
    --set model.norm_placement=post
dry "model.embed_scale with learned positions" "Gemma scales the token embedding alone" \
    --set model.embed_scale=sqrt_d_model
moe8=("${llama[@]}" --set model.moe_experts=8 --set model.moe_top_k=2)
dry "DeepSeek's router: chosen groups with fewer than top_k experts" \
    "the chosen groups must hold at least" "${moe8[@]}" --set model.moe_topk_method=noaux_tc \
    --set model.moe_scoring=sigmoid --set model.moe_n_group=4 --set model.moe_topk_group=1 \
    --set model.moe_top_k=3
dry "DeepSeek's router: groups with greedy" "groups need model.moe_topk_method" "${moe8[@]}" \
    --set model.moe_n_group=2
dry "DeepSeek's router: noaux_tc's groups of one expert" "at least 2 experts a group" \
    "${moe8[@]}" --set model.moe_topk_method=noaux_tc --set model.moe_scoring=sigmoid \
    --set model.moe_n_group=8 --set model.moe_topk_group=2
dry "DeepSeek's router: a z-loss with sigmoid scores" "the z-loss is over softmax's logsumexp" \
    "${moe8[@]}" --set model.moe_scoring=sigmoid --set model.moe_z_loss_coef=0.001
dry "DeepSeek's router: no MoE layer after the dense ones" "no MoE layer is left after the dense ones" \
    "${moe8[@]}" --set model.n_layer=2 --set model.moe_dense_layers=2
dry "model.layer_types longer than model.n_layer" "entries with model.n_layer" \
    --set model.layer_types=full_attention,full_attention,full_attention,full_attention,full_attention
more=()
for i in $(seq 257); do more+=(--set "seed=$i"); done
dry "257 --set options" "more than 256 --set options" "${more[@]}"

# ---- a recipe with data.mix (17 streams: one too many; 1 stream for the objectives) ----
recipe() { # recipe FILE N: a tiny recipe training on data.mix of N streams of the synthetic data
    local s="" i
    for ((i = 0; i < $2; i++)); do s+="{ name = \"s$i\"; path = \"$TMP/data/train\"; proportion = 1.0; },"; done
    cat >"$1" <<CFG
seed = 1; max_duration = "1ba"; global_batch = 4; micro_batch = 2; seq_len = 32; eval_interval = "0ba";
model = { n_layer = 1; d_model = 64; n_head = 2; vocab_size = 512; max_seq_len = 32; };
optim = { lr = 1e-3; };
data = { mix = ( ${s%,} ); val = ""; tokenizer = ""; };
sample = { tokens = 0; };
CFG
}
recipe "$TMP/mix17.cfg" 17
recipe "$TMP/mix1.cfg" 1
over=(--set run_dir="$TMP/run")
refused "data.mix of 17 streams" 1 "expected a list of 1 to 16 groups" \
    "$TRAIN" --config "$TMP/mix17.cfg" "${over[@]}" --dry-run
refused "objective = dpo with data.mix" 1 'objective = "dpo": data.mix is not supported with it yet' \
    "$TRAIN" --config "$TMP/mix1.cfg" "${over[@]}" --set objective=dpo --set micro_batch=2 --dry-run
refused "objective = grpo with data.mix" 1 'objective = "grpo": data.mix is not supported' \
    "$TRAIN" --config "$TMP/mix1.cfg" "${over[@]}" --set objective=grpo --dry-run

# an ICL generation task scored by the trainer under zero3 (its generator reads full weights)
cat >"$TMP/icl.cfg" <<CFG
seed = 1; max_duration = "1ba"; global_batch = 4; micro_batch = 2; seq_len = 32; eval_interval = "0ba";
model = { n_layer = 1; d_model = 64; n_head = 2; vocab_size = 512; max_seq_len = 32; };
optim = { lr = 1e-3; };
data = { train = "$TMP/data/train"; val = ""; tokenizer = ""; };
sample = { tokens = 0; };
parallel = { sharding = "zero3"; };
icl_tasks = ( { label = "g"; type = "generation_task_with_answers"; path = "$TMP/none.jsonl"; } );
CFG
refused "a generation_task_with_answers ICL task under zero3" 1 \
    "generation_task_with_answers is scored by the trainer on the CPU with full weights only" \
    "$TRAIN" --config "$TMP/icl.cfg" "${over[@]}"

# ---- objectives, LoRA ----
dry "LoRA on a MoE model's MLP" "gate, up and down are not targets in a mixture-of-experts model yet" \
    "${moe[@]}" --set lora.rank=4 --set lora.targets=gate
dry "objective = grpo with micro_batch = auto" '"auto" is not supported' \
    --set objective=grpo --set micro_batch=auto
dry "objective = grpo with expert parallelism" \
    'objective = "grpo" with expert parallelism is not supported yet' \
    "${moe[@]}" --set objective=grpo --set parallel.expert=2
dry "grpo.reference = base without LoRA" 'grpo.reference = "base" needs LoRA' \
    --set objective=grpo --set grpo.reference=base
dry "grpo.overlong_buffer past grpo.max_new_tokens" \
    "grpo.overlong_buffer is longer than grpo.max_new_tokens" \
    --set objective=grpo --set grpo.max_new_tokens=8 --set grpo.overlong_buffer=9
dry "GRPO's KL term on device = cuda" "a KL term to the initial weights is not supported there yet" \
    --set objective=grpo --set device=cuda --set grpo.kl_coef=0.1

# ---- parallelism ----
dry "parallel.expert = 2 with a dense model" "expert parallelism needs a mixture-of-experts model" \
    --set parallel.expert=2

refused "parallel.pipeline = 3 on 4 ranks (--plan 4)" 1 "does not divide the 4 ranks" "$TRAIN" \
    "${base[@]}" "${llama[@]}" --set parallel.pipeline=3 --set model.n_layer=3 \
    --set sample.tokens=0 --plan 4

warned "one layer's experts past MPI's int counts under expert parallelism (--plan 2)" \
    "more than MPI's int counts" "$TRAIN" "${base[@]}" "${llama[@]}" --set model.d_model=8192 \
    --set model.n_head=64 --set model.moe_experts=64 --set model.moe_intermediate_size=8192 \
    --set parallel.expert=2 --plan 2

# ---- CUDA ----
dry "precision.fp8 with device = cpu" "the CPU is the fp32 oracle and trains in fp32 only" \
    --set precision.fp8=tensorwise
dry "model.activation_compression = fp8 with device = cpu" \
    "the CPU is the fp32 oracle and trains in fp32 only" --set model.activation_compression=fp8
dry "precision.fp8 = rowwise" 'precision.fp8 = "rowwise" is not built yet' \
    --set device=cuda --set precision.fp8=rowwise
for k in "parallel.context=2" "objective=grpo" "lora.rank=4" "precision.fp8=tensorwise"; do
    dry "linear_attention layers on CUDA with $k" "${k%%=*}: device = \"cuda\" with linear_attention layers (model.layer_types) does not run this yet" \
        "${linear[@]}" --set "$k"
done
dry "linear_attention layers on CUDA with a key head of 24" \
    "runs the Gated DeltaNet core at head sizes" "${linear[@]}" --set model.linear_key_head_dim=24
refused "device = cuda without the CUDA library" 1 '(device); or use device = "cpu"' \
    env TESSERA_CUDA_LIB="$TMP/no/libtessera-cuda-train.so" "$TRAIN" "${base[@]}" --set device=cuda \
    --set max_duration=1ba

# ---- data (starts, not dry runs: the dataset is opened) ----
refused "a dataset whose ids pass model.vocab_size" 1 "the model must cover every token id" \
    "$TRAIN" "${base[@]}" --set model.vocab_size=256 --set max_duration=1ba
refused "a dataset too short for one sample" 2 "hold no sample of seq_len + 1" \
    "$TRAIN" "${base[@]}" --set data.train="$TMP/short/train" --set max_duration=1ba

# ---- tessera generate's options (refused before the checkpoint is read) ----
refused "generate --batch 5000" 1 "expected an integer in [1, 4096]" \
    "$TOOL" generate --ckpt "$TMP/none" --prompts "$TMP/none.jsonl" --batch 5000
stops=()
for i in $(seq 17); do stops+=(--stop "s$i"); done
refused "generate with 17 --stop strings" 1 "more than 16 --stop strings" \
    "$TOOL" generate --ckpt "$TMP/none" --prompts "$TMP/none.jsonl" "${stops[@]}"
sets=()
for i in $(seq 65); do sets+=(--set "seed=$i"); done
refused "generate with 65 --set" 1 "too many --set options" "$TOOL" generate --ckpt "$TMP/none" "${sets[@]}"
refused "generate --top-k with --temperature 0" 1 "have no effect with --temperature 0" \
    "$TOOL" generate --ckpt "$TMP/none" --temperature 0 --top-k 5

# ---- ckpt export --format hf of models no class holds (a 1-step tiny run each) ----
export_refused() { # export_refused NAME WHAT MESSAGE --set ...: the export exits 1, writes nothing
    local d=$TMP/$1 what=$2 msg=$3 rc
    shift 3
    "$TRAIN" "${args[@]}" --set model.n_layer=1 --set model.d_model=32 --set model.n_head=1 \
        --set max_duration=1ba --set global_batch=2 --set micro_batch=2 --set save_interval=1ba \
        --set run_dir="$d/run" "$@" >"$d.train.txt" 2>&1 || { tail -3 "$d.train.txt"; }
    "$TOOL" ckpt export --format hf --tokenizer none "$d/run/latest" "$d/hf" >"$d.txt" 2>&1
    rc=$?
    ((rc == 1)) && grep -qF -- "$msg" "$d.txt" && [[ ! -e $d/hf ]]
    tap_check $? "ckpt export --format hf of $what: exit $rc (want 1), \"$msg\", nothing written"
    grep -m1 "error" "$d.txt" | cut -c1-300 | sed 's/^/#   /'
}
export_refused softcap "a learned-position model with a soft cap" \
    "which GPT2LMHeadModel and MptForCausalLM do not" --set model.final_logit_softcapping=30
export_refused alibi "an ALiBi model with biases" "exports as MptForCausalLM, which has no biases" \
    --set model.pos=alibi --set model.bias=true --set model.gelu=exact

# ---- a checkpoint of a format version this program does not read (h5py edits the attribute) ----
cks=("$TMP"/softcap/run/step-*.h5)
ck=${cks[0]}
if [[ -f $ck ]] && "$PY3" -c "import h5py" 2>/dev/null; then
    cp "$ck" "$TMP/v4.h5"
    "$PY3" -c "import h5py, sys; f = h5py.File(sys.argv[1], 'r+'); f.attrs['format_version'] = 4; f.close()" "$TMP/v4.h5"
    refused "a checkpoint of format_version 4" 2 "format_version = 4, this program reads versions 1 to 3" \
        "$TOOL" ckpt verify "$TMP/v4.h5"
else
    tap_skip "a checkpoint of format_version 4" "no checkpoint above, or no h5py in $PY3"
fi

# ---- dataset indexes past the format's bounds (tessera verify-data) ----
index() { # index NAME VOCAB SHARDS [LINE]: a dataset index claiming these, with LINE before `end`
    mkdir -p "$TMP/$1"
    printf 'tessera-dataset\t1\nvocab_size\t%s\ntoken_width\t2\nhas_mask\t0\nn_shards\t%s\nn_tokens\t0\n%send\n' \
        "$2" "$3" "${4:+$4\n}" >"$TMP/$1/index.tsv"
}
index vocab 4294967296 0
refused "an index with vocab_size 2^32" 2 "out of range [1, 2147483648]" "$TOOL" verify-data "$TMP/vocab"
index shards 512 10000001
refused "an index with 10000001 shards" 2 "exceeds the limit 10000000" "$TOOL" verify-data "$TMP/shards"
index tokname 512 0 "tokenizer	$(printf 't%.0s' {1..1100})"
refused "an index naming a tokenizer of 1100 bytes" 2 "a name without spaces, at most 1023 bytes" \
    "$TOOL" verify-data "$TMP/tokname"

refused "TSR_PREP_PART_BYTES = 0" 1 "expected bytes from 1 to 1073741824" \
    env TSR_PREP_PART_BYTES=0 "$TOOL" prep --out "$TMP/run" "$TSR_ROOT/README.md"

# ---- tokenizer training ----
specials=()
for i in $(seq 1025); do specials+=(--special "<s$i>"); done
refused "tokenizer train with 1025 --special" 1 "too many --special (max 1024)" \
    "$TOOL" tokenizer train --vocab-size 300 --out "$TMP/run" "${specials[@]}" "$TMP/data"

# ---- Hugging Face config.json and safetensors that tessera does not import (ckpt import) ----
hf_refused() { # hf_refused WHAT MESSAGE CONFIG_JSON: ckpt import exits 2, writes no checkpoint
    mkdir -p "$TMP/hf"
    printf '%s\n' "$3" >"$TMP/hf/config.json"
    refused "ckpt import of $1" 2 "$2" "$TOOL" ckpt import "$TMP/hf" "$TMP/run" # (no $TMP/run)
}
hfllama='"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 2,
 "num_key_value_heads": 2, "vocab_size": 512, "rms_norm_eps": 1e-5, "max_position_embeddings": 64,
 "tie_word_embeddings": true, "rope_theta": 10000.0'
hf_refused "DBRX" 'model_type = "dbrx": tessera imports' '{"model_type": "dbrx"}'
hf_refused "a SwiGLU gated by gelu" "tessera's SwiGLU gates with silu only" \
    "{$hfllama, \"num_hidden_layers\": 2, \"hidden_act\": \"gelu\"}"
hf_refused "2000 layers" "num_hidden_layers = 2000: expected 1 to 1024" \
    "{$hfllama, \"num_hidden_layers\": 2000, \"hidden_act\": \"silu\"}"
hf_refused "MPT with biases" "tessera imports MPT without biases only" \
    '{"model_type": "mpt", "d_model": 64, "n_heads": 2, "n_layers": 2, "vocab_size": 512, "max_seq_len": 64, "expansion_ratio": 4, "no_bias": false}'
mpt='"model_type": "mpt", "d_model": 64, "n_heads": 2, "n_layers": 2, "vocab_size": 512,
 "max_seq_len": 64, "expansion_ratio": 4, "no_bias": true'
hf_refused "MPT with logit_scale" "tessera has no logit scaling" "{$mpt, \"logit_scale\": 2.0}"
hf_refused "MPT with clip_qkv" "tessera's attention has none of them" \
    "{$mpt, \"attn_config\": {\"clip_qkv\": 8}}"
hf_refused "GPT-2 with a ReLU MLP" "tessera has the tanh GELU" \
    '{"model_type": "gpt2", "n_embd": 64, "n_head": 2, "n_layer": 2, "vocab_size": 512, "n_positions": 64, "activation_function": "relu"}'
hf_refused "gpt-oss with YaRN's own attention_factor" "is set: not supported (tessera's YaRN scales attention" \
    '{"model_type": "gpt_oss", "hidden_size": 64, "intermediate_size": 64, "num_attention_heads": 2,
      "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 512, "rms_norm_eps": 1e-5,
      "max_position_embeddings": 64, "head_dim": 32, "num_local_experts": 4, "num_experts_per_tok": 2,
      "tie_word_embeddings": false, "rope_theta": 10000.0, "rope_scaling": {"rope_type": "yarn",
      "factor": 4.0, "beta_fast": 32.0, "beta_slow": 1.0, "original_max_position_embeddings": 16,
      "truncate": false, "attention_factor": 1.5}}'
# a tensor of 9 dimensions (at most 8)
"$PY3" - "$TMP/hf/model.safetensors" <<'PY'
import json, struct, sys
h = json.dumps({"t": {"dtype": "F32", "shape": [1] * 9, "data_offsets": [0, 4]}}).encode()
h += b" " * (-len(h) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + b"\0" * 4)
PY
hf_refused "a safetensors tensor of 9 dimensions" "is not an array of at most 8 dimensions" \
    "{$hfllama, \"num_hidden_layers\": 2, \"hidden_act\": \"silu\"}"
# a safetensors header length of 200,000,000 bytes (the reference's limit is 100 MB)
printf '\x00\xc2\xeb\x0b\x00\x00\x00\x00{}' >"$TMP/hf/model.safetensors"
hf_refused "a safetensors header above 100 MB" "above the 100 MB limit" \
    "{$hfllama, \"num_hidden_layers\": 2, \"hidden_act\": \"silu\"}"

# ---- files over their size bound (sparse: refused by their size before a byte is read) ----
mkdir -p "$TMP/hfbig"
truncate -s $((4 * 1024 * 1024 + 1)) "$TMP/hfbig/config.json"
refused "ckpt import of a config.json of 4 MiB + 1" 2 \
    "config.json: 4194305 bytes, larger than 4194304 bytes, the most this file may hold" \
    "$TOOL" ckpt import "$TMP/hfbig" "$TMP/run"
truncate -s $((1024 * 1024 * 1024 + 1)) "$TMP/big.txt"
refused "tokenizer encode of a file of 1 GiB + 1" 2 \
    "big.txt: 1073741825 bytes, larger than 1073741824 bytes, the most this file may hold" \
    "$TOOL" tokenizer encode "$TMP/big.txt"
rm -f "$TMP/big.txt"
cp -r "$TMP/data/train" "$TMP/bigidx" && truncate -s $((256 * 1024 * 1024 + 1)) "$TMP/bigidx/index.tsv"
refused "a dataset whose index.tsv is 256 MiB + 1" 2 \
    "index.tsv: 268435457 bytes: index is larger than 268435456 bytes; not a tessera index" \
    "$TRAIN" "${base[@]}" --set data.train="$TMP/bigidx"
rm -rf "$TMP/bigidx"
# GRPO's prompts.jsonl of 16 GiB + 1 (sparse where the filesystem allows: no disk used)
grpo_prompts "$TMP/g" 8 >/dev/null 2>&1 || { echo "Bail out! grpo fixture"; exit 1; }
grpo_small_args "$TMP/g"
big=$TMP/g/prompts/train/prompts.jsonl
truncate -s $((16 * 1024 * 1024 * 1024 + 1)) "$big"
if (($(du -k "$big" | cut -f1) < 1024)); then
    # shellcheck disable=SC2154 # (small: grpo_small_args's)
    refused "objective = grpo on a prompts.jsonl of 16 GiB + 1" 2 \
        "prompts.jsonl: 17179869185 bytes, larger than 17179869184 bytes, the most this file may hold" \
        "$TRAIN" "${small[@]}" --set run_dir="$TMP/run"
else
    tap_skip "objective = grpo on a prompts.jsonl of 16 GiB + 1" "$(df -T "$TMP" | awk 'NR == 2 {print $2}') under $TMP holds no sparse file"
fi
rm -rf "$TMP/g"

# ---- tessera-job sweeps ----
J=$TSR_ROOT/jobs/tessera-job
slots=(CONFIG="$TSR_ROOT/configs/tiny.cfg" CPUS_PER_TASK=1 NODES=1 RUN_DIR="$TMP/sweep"
       TASKS_PER_NODE=1 WALLTIME=1:00:00)
refused "a sweep of 1001 tasks" 1 "more than 1000 tasks" \
    "$J" sweep pretrain "${slots[@]}" --grid "seed=$(seq -s, 1 1001)"
refused "a sweep value holding a newline" 1 "a value holds a newline" \
    "$J" sweep pretrain "${slots[@]}" --grid $'optim.lr=1e-3\n'

# ---- the health checker's thresholds ----
sed -E 's/gemm_fp8_verify +=/removed_check =/' "$TSR_ROOT/healthcheck/healthcheck.cfg" |
    grep -v removed_check >"$TMP/hc.cfg"
refused "a health-check section with gemm_fp8 but no gemm_fp8_verify" 2 \
    "gemm_fp8 and gemm_fp8_verify go together: give both or neither" \
    "$BUILD/tessera-healthcheck" --config "$TMP/hc.cfg" --gpu off
tap_done
