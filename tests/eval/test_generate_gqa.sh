#!/usr/bin/env bash
# tessera generate (docs/generate.md) on the Llama / Qwen block: two tiny models trained here with 2
# MPI ranks on the synthetic corpus,
#   llama: RoPE (theta 500000, Llama 3.1 scaling), RMSNorm, SwiGLU, 4 query heads on 2 key/value
#          heads (GQA), no biases, untied LM head;
#   qwen:  RoPE (theta 1e6), RMSNorm, SwiGLU, 4 query heads on 1 key/value head (MQA) of head_dim
#          32 (not d_model / n_head = 16), QK-norm, a q/k/v bias, tied embeddings;
# and checks, as tests/eval/test_generate.sh does for GPT-2 and MPT:
#  - greedy with the KV cache == greedy without it (model_forward over the whole context), token for
#    token, 20 + 130 tokens: past the 64 positions trained on (RoPE at unseen angles);
#  - every next-token probability of the cached path equals model_forward's within 1e-6 + 1e-4 p;
#  - sampling (temperature 1, top-k 40): the cache and no cache draw the same tokens;
#  - the banner names KVH and hs, and the cache size is 2 L cap KVH hs floats (model_kv_bytes).
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 7
source "$(dirname "$0")/generate_lib.sh"

make_synth "$TMP/data" 512 200000
# watchdog.window=0: no straggler exit (86) on a loaded machine (tests/lib.sh, tiny_args)
common=(--config "$TSR_ROOT/configs/tiny.cfg" --set watchdog.window=0 --set eval_interval=0ba --set data.val= --set threads=1
        --set model.vocab_size=512 --set data.tokenizer= --set data.train="$TMP/data/train" --set max_duration=240ba
        --set sample.tokens=0 --set seq_len=64 --set model.max_seq_len=0 --set model.n_layer=2 --set model.d_model=64
        --set model.n_head=4 --set global_batch=8 --set micro_batch=4 --set model.pos=rope --set model.norm=rmsnorm
        --set model.mlp=swiglu --set model.intermediate_size=160 --set model.bias=false)
"${MPIRUN[@]}" -np 2 "$TRAIN" "${common[@]}" --set model.n_kv_head=2 --set model.rope_theta=500000 \
    --set model.rope_scaling=llama3 --set model.rope_original_max_pos=32 --set model.tie_embeddings=false \
    --set run_dir="$TMP/llama" >"$TMP/llama.txt" 2>&1 &&
"${MPIRUN[@]}" -np 2 "$TRAIN" "${common[@]}" --set model.n_kv_head=1 --set model.head_dim=32 --set model.qk_norm=true \
    --set model.qkv_bias=true --set model.rope_theta=1000000 --set run_dir="$TMP/qwen" >"$TMP/qwen.txt" 2>&1
tap_check $? "train a tiny Llama-style (GQA 4:2, untied) and Qwen-3-style (MQA 4:1, head_dim 32, QK-norm, qkv bias) model, 240 steps each"

for m in llama qwen; do
    greedy "$m" "$m" --max-tokens 130 && same_ids "$TMP/$m.c" "$TMP/$m.n" 130 && grep -q "RoPE.*extrapolating" "$TMP/$m.c.err"
    tap_check $? "$m: greedy, 20 + 130 tokens (past the 64 trained positions): KV cache == no cache, token for token"
    probs_close "$TMP/$m.c.probs" "$TMP/$m.n.probs"
    tap_check $? "$m: next-token probabilities with the cache == model_forward's within 1e-6 + 1e-4 p"
done

s1=$("${GEN[@]}" --ckpt "$TMP/qwen" --prompt-ids "$PROMPT" --max-tokens 100 --no-eos-stop --ids --seed 7 --temperature 1 --top-k 40 2>/dev/null)
s2=$("${GEN[@]}" --ckpt "$TMP/qwen" --prompt-ids "$PROMPT" --max-tokens 100 --no-eos-stop --ids --seed 7 --temperature 1 --top-k 40 --no-cache 2>/dev/null)
g=$(cat "$TMP/qwen.c")
[[ $(wc -w <<<"$s1") == 100 && $s1 == "$s2" && $s1 != "$(cut -d' ' -f1-100 <<<"$g")" ]]
tap_check $? "qwen: sampling (T 1, top-k 40, seed 7): KV cache == no cache, 100 tokens, not the greedy ones"

# the banner: KVH, hs, the kind, and the cache's bytes: 2 L cap KVH hs * 4, cap = 20 + 130 - 1
ok=0
for spec in "llama:2:16:rope rmsnorm swiglu untied no-bias" "qwen:1:32:rope rmsnorm swiglu qkv-bias qk-norm no-bias"; do
    IFS=: read -r m kvh hs kind <<<"$spec"
    want=$("$PY3" -c 'import sys; b = 2 * 2 * 149 * int(sys.argv[1]) * int(sys.argv[2]) * 4
u = ["B", "KiB", "MiB"]; i = 0
while b >= 1024 and i < 2: b /= 1024; i += 1
print("%.1f %s" % (b, u[i]))' "$kvh" "$hs")
    line=$(grep -m1 "^generate: .* KV cache" "$TMP/$m.c.err")
    tap_diag "$line"
    [[ $line == *"L=2 C=64 NH=4 KVH=$kvh hs=$hs V=512 $kind | threads 1 | KV cache 149 positions, $want" ]] || ok=1
done
tap_check $ok "the banner: NH=4 KVH=2 hs=16 (llama), KVH=1 hs=32 (qwen), the kind, the cache's 2 L cap KVH hs floats"
tap_done
