#!/usr/bin/env bash
# Llama- and Qwen-style models through the real trainer on MPI ranks (docs/models.md), 12 steps of
# tiny models on the synthetic corpus:
#  - Llama style (RMSNorm, RoPE with Llama 3.1 scaling, SwiGLU, 4 query heads on 2 key/value heads,
#    an untied head, the document mask) trains on 2 ranks: the loss falls;
#  - rank 1 SIGKILLed after step 6: the rerun resumes from step 4 and every later loss, lr and grad
#    norm, and the final weights, equal the uninterrupted run bit for bit;
#  - zero3 on 2 ranks, and zero3 and hsdp (2 groups of 2) on 4 ranks, equal ddp within 1e-6 at
#    every step;
#  - Qwen 3 style (QK-norm, head_dim not d_model / n_head, multi-query attention, q/k/v biases,
#    tied embeddings): zero3 equals ddp within 1e-6 and block activation checkpointing gives the
#    same bits as none;
#  - a resume with another Llama 3.1 RoPE scaling factor is refused naming the key;
#  - --init-from a GQA checkpoint into a model with other n_kv_head is refused (exit 2, the
#    checkpoint error) naming the tensor and both shapes, nothing written.
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 10
make_synth "$TMP/data"
tiny_llama_args "$TMP/data/train"
args+=(--set model.n_head=4 --set model.n_kv_head=2 --set model.rope_scaling=llama3
       --set model.rope_original_max_pos=16 --set model.rope_factor=4 --set model.attn_mask=document
       --set model.eot_token=0 --set max_duration=12ba --set save_interval=4ba --set keep_last=3)
qwen=(--set model.n_head=4 --set model.n_kv_head=1 --set model.head_dim=24 --set model.qk_norm=true
      --set model.qkv_bias=true --set model.tie_embeddings=true --set model.norm_eps=1e-6
      --set model.rope_scaling=none --set model.rope_theta=1000000)
run() { local dir=$1 np=$2; shift 2; ranks "$np" "$TRAIN" "${args[@]}" --set run_dir="$TMP/$dir" "$@" >"$TMP/$dir.txt" 2>&1; }
close() { metrics_close "$TMP/$1/metrics.jsonl" "$TMP/$2/metrics.jsonl" 1 1e-6 1e-6; }

run A 2
rc=$?
first=$(json_field "$TMP/A/metrics.jsonl" 1 loss) last=$(json_field "$TMP/A/metrics.jsonl" 12 loss)
tap_diag "Llama style, 2 ranks: loss $first at step 1, $last at step 12"
[[ $rc == 0 && -n $first && -n $last ]] && /usr/bin/python3 -c "import sys; sys.exit(0 if $last < $first - 0.2 else 1)" &&
    grep -q "kv_heads=2 .*pos=rope norm=rmsnorm .*untied" "$TMP/A.txt"
tap_check $? "Llama style (GQA 4:2, RoPE + llama3 scaling, RMSNorm, SwiGLU, untied, document mask) trains on 2 ranks: the loss falls"

killed_resumes B
tap_check $? "rank 1 SIGKILLed after step 6 (exit $rc); the rerun resumed from step 4 and finished (exit $rc2)"
cmp -s <(final_lines "$TMP/A/metrics.jsonl") <(final_lines "$TMP/B/metrics.jsonl") &&
    same_tensors "$TMP/A/step-00000012.h5" "$TMP/B/step-00000012.h5"
tap_check $? "after the crash: every loss, lr, grad norm and the final weights equal the uninterrupted run bit for bit"

run Z2 2 --set parallel.sharding=zero3
tap_diag "zero3 vs ddp, 2 ranks: $(close A Z2)"
close A Z2 >/dev/null
tap_check $? "Llama style: zero3 on 2 ranks equals ddp within 1e-6 at all 12 steps"

run D4 4 && run Z4 4 --set parallel.sharding=zero3 &&
    run H4 4 --set parallel.sharding=hsdp --set parallel.replica_group=2
tap_diag "4 ranks: zero3 vs ddp: $(close D4 Z4); hsdp vs ddp: $(close D4 H4)"
close D4 Z4 >/dev/null && close D4 H4 >/dev/null
tap_check $? "Llama style: zero3 and hsdp (2x2) on 4 ranks equal ddp within 1e-6 at all 12 steps"

run QD 2 "${qwen[@]}" && run QZ 2 "${qwen[@]}" --set parallel.sharding=zero3
tap_diag "Qwen 3 style: zero3 vs ddp: $(close QD QZ)"
close QD QZ >/dev/null && grep -q "kv_heads=1 head_dim=24 .*qkv_bias qk_norm" "$TMP/QD.txt"
tap_check $? "Qwen 3 style (QK-norm, head_dim 24 at d_model 64, MQA, q/k/v biases, tied): zero3 equals ddp within 1e-6"

run QK 2 "${qwen[@]}" --set model.activation_checkpointing=block
cmp -s <(final_lines "$TMP/QD/metrics.jsonl") <(final_lines "$TMP/QK/metrics.jsonl") &&
    (($(final_lines "$TMP/QK/metrics.jsonl" | wc -l) == 12))
tap_check $? "Qwen 3 style: activation_checkpointing = block gives the same bits as none"

"$TOOL" ckpt verify "$TMP/QD/step-00000012.h5" >"$TMP/verify.txt" 2>&1 &&
    "$TOOL" ckpt verify "$TMP/A/step-00000012.h5" >>"$TMP/verify.txt" 2>&1
tap_check $? "the Llama- and Qwen-style checkpoints verify (lm_head, qnormw, knormw included)"

run I 1 --init-from "$TMP/A/step-00000012.h5" --set model.n_kv_head=4
rc=$?
[[ $rc == 2 ]] && grep -q "tensor model/qkvw: shape (2, 128, 64) in the file, expected (2, 192, 64)" "$TMP/I.txt" &&
    [[ ! -e $TMP/I/metrics.jsonl ]]
tap_check $? "--init-from a GQA checkpoint into a model with other n_kv_head: exit 2 (got $rc) naming qkvw and both shapes, nothing written"

run A 2 --set model.rope_factor=8 --set max_duration=14ba
rc=$?
[[ $rc == 1 ]] && grep -q "differs from the checkpoint's: rope_factor 8 vs 4" "$TMP/A.txt" &&
    [[ -z $(json_field "$TMP/A/metrics.jsonl" 13 loss) ]]
tap_check $? "a resume with another llama3 rope_factor (every frequency changes): exit 1 (got $rc) naming it"
tap_done
