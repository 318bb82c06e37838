#!/usr/bin/env bash
# Context parallelism (parallel.context = N, docs/parallelism.md) through the real trainer on MPI
# ranks, tiny models (2 layers) on 32-token rows. The synthetic corpus of 64 tokens (token 8, ~5%
# of the tokens, ends a document: a row holds several, straddling the 4- and 8-token chunks of
# N = 4 and 2) for the document-masked models; the ICL tasks' corpus for the GPT-2 style one.
# Every feature rides in as few runs as it can (the CI budget: each launch costs seconds):
#  - exactness, 20 steps: GPT-2 style (learned positions, causal; validation loss and ICL scoring
#    at the end) at N = 4; Llama style (GQA 4:2, RoPE with Llama 3.1 scaling, the document
#    mask) at N = 2 and data x context = 2 x 2 with zero3, and with hsdp plus block activation
#    checkpointing and micro_batch = auto; Qwen 3 style (QK-norm, multi-query, head_dim 24, document
#    mask) at N = 4: the losses of N = 1 within 1e-6 relative (the gradient norms within 1e-5); at
#    the end N = 1's validation loss within 1e-6 and its ICL results exactly; the Llama style
#    model with ALiBi instead of RoPE and MoE layers (4 experts, top 2, the auxiliary losses off,
#    as they balance each rank's share) with expert parallelism 2 on 2 x 2, 6 steps, within 1e-6;
#  - step 0's gradients (the AdamW first moments after one step without clipping: (1 - beta1) g)
#    of every tensor equal N = 1's within 1e-5 of the tensor's largest (GPT-2 N = 4, Llama 2 x 2
#    zero3, Qwen N = 2);
#  - DPO with LoRA adapters (dropout 0.1: the masks follow the whole sequence's rows; pairs whole in
#    a context group) on 2 x 2 with zero3, 6 steps: N = 1 within 1e-5 (as test_dpo.sh's ranks), the
#    same validation accuracy;
#  - resume: rank 1 SIGKILLed at a random step of an N = 2 run; the rerun at N = 2 equals the
#    uninterrupted run bit for bit (losses and final weights), reruns at N = 1 and 4 from the same
#    checkpoint within 1e-6;
#  - long sequences' data: `tessera prep --pack 131072` of SFT examples of 20K to 150K tokens
#    (GPT-2's tokenizer) holds every example whole in a window (the one longer than a window
#    truncated), and verify-data counts the samples of seq_len 131072;
#  - refused with exit 1, naming the key, nothing written: seq_len not divisible by 2N (the
#    nearest valid values named).
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 11
# One microbatch a step (each of the ring's exchanges is a scheduling round trip on a loaded
# machine: they are what a run costs) but for the Llama style runs, whose two microbatches of 2
# sequences accumulate the gradients of several rings
parallel_args 2 4 4 20ba
# GPT-2 style on the ICL tasks' corpus and tokenizer (configs/tiny.cfg plus two colors tasks)
gpt=(--config "$TMP/icl.cfg" "${base[@]}" --set model.vocab_size=320 --set model.vocab_multiple=64
     --set data.train="$TMP/data/train" --set data.tokenizer="$TMP/tok.tok"
     --set data.val="$TMP/data/val" --set eval_interval=20ba --set eval_samples=24)
llama+=(--set model.rope_scaling=llama3 --set model.rope_original_max_pos=16
        --set model.rope_factor=4 --set model.attn_mask=document --set model.eot_token=8
        --set micro_batch=2)
qwen=("${llama[@]}" --set micro_batch=4 --set model.n_kv_head=1 --set model.head_dim=24
      --set model.qk_norm=true --set model.qkv_bias=true --set model.tie_embeddings=true
      --set model.rope_scaling=none --set model.rope_theta=1000000)
# run DIR NP N MODEL-ARRAY-NAME ARGS...
run() {
    local dir=$1 np=$2 n=$3 m="$4[@]"; shift 4
    ranks "$np" "$TRAIN" "${!m}" --set parallel.context="$n" \
        --set run_dir="$TMP/$dir" "$@" >"$TMP/$dir.txt" 2>&1
}

# ---- exactness, 20 steps --------------------------------------------------------------------
run G1 1 1 gpt && run G4 4 4 gpt && runs_exact G1 G4
tap_check $? "GPT-2 style, causal: N = 4 equals N = 1 within 1e-6 at all 20 steps"
/usr/bin/python3 - "$TMP/G1/metrics.jsonl" "$TMP/G4/metrics.jsonl" <<'PY'
import json, sys
a, b = ([json.loads(l)["val_loss"] for l in open(p) if "val_loss" in l] for p in sys.argv[1:])
print(f"# val losses {a} vs {b}")
sys.exit(0 if len(a) == 1 and len(b) == 1 and all(abs(x - y) <= 1e-6 * abs(x) for x, y in zip(a, b)) else 1)
PY
val=$?
icl() { grep -o '"tasks": {.*}, "gauntlet": [^,]*' "$TMP/$1/metrics.jsonl"; }
tap_diag "ICL at N = 4: $(icl G4 | tail -1)"
((val == 0)) && [[ $(icl G1 | wc -l) == 1 ]] && cmp -s <(icl G1) <(icl G4)
tap_check $? "GPT-2 style at N = 4: the validation loss (24 samples) and the ICL results (2 tasks of 30 examples) after 20 steps equal N = 1's"
run L1 1 1 llama && run L2 2 2 llama --set save_interval=4ba --set keep_last=5 &&
    run LZ 4 2 llama --set parallel.sharding=zero3 &&
    run LH 4 2 llama --set parallel.sharding=hsdp --set parallel.replica_group=2 \
        --set model.activation_checkpointing=block --set micro_batch=auto &&
    runs_exact L1 L2 LZ LH
tap_check $? "Llama style (GQA, RoPE + llama3 scaling, document mask): N = 2, 2 x 2 with zero3, and with hsdp, block activation checkpointing and micro_batch = auto equal N = 1 within 1e-6"
run Q1 1 1 qwen && run Q4 4 4 qwen && runs_exact Q1 Q4
tap_check $? "Qwen 3 style (QK-norm, MQA, head_dim 24, document mask): N = 4 equals N = 1 within 1e-6"
moe=(--set model.pos=alibi --set model.moe_experts=4 --set model.moe_top_k=2
     --set model.moe_intermediate_size=48 --set model.moe_aux_loss_coef=0
     --set model.moe_z_loss_coef=0 --set max_duration=6ba)
run E1 1 1 llama "${moe[@]}" && run E2 4 2 llama "${moe[@]}" --set parallel.expert=2 &&
    runs_exact E1 E2
tap_check $? "Llama style with ALiBi, the document mask and MoE (4 experts, top 2), expert parallelism 2 on 2 x 2, 6 steps: equals N = 1 within 1e-6"

# ---- step 0's gradients ---------------------------------------------------------------------
grad0() { run "$1" "$2" "$3" "$4" --set max_duration=1ba --set save_final=true \
              --set optim.grad_clip=0 --set eval_interval=0ba "${@:5}"; }
grad0 g1 1 1 gpt && grad0 g4 4 4 gpt && moments_close g1 g4 &&
    grad0 l1 1 1 llama && grad0 lz 4 2 llama --set parallel.sharding=zero3 && moments_close l1 lz &&
    grad0 q1 1 1 qwen && grad0 q2 2 2 qwen && moments_close q1 q2
tap_check $? "step 0's gradients of every tensor (GPT-2 causal N = 4; Llama document 2 x 2 zero3; Qwen N = 2) equal N = 1's within 1e-5"

# ---- DPO with LoRA ----------------------------------------------------------------------------
pairs=$("$PY3" "$TSR_ROOT/tests/reference/dpo_pairs.py" "$TMP")
dpo=(--set objective=dpo --set data.train="$pairs" --set data.val="$pairs" --set eval_interval=3ba
     --set eval_samples=16 --set model.vocab_size=100 --set seq_len=16 --set global_batch=8
     --set micro_batch=4 --set max_duration=6ba --set dpo.beta=0.5 --set model.attn_mask=causal --set lora.rank=4
     --set lora.alpha=8 --set lora.dropout=0.1 --set optim.lr=1e-2)
run P1 1 1 llama "${dpo[@]}" && run P2 4 2 llama "${dpo[@]}" --set parallel.sharding=zero3 &&
    metrics_close "$TMP/P1/metrics.jsonl" "$TMP/P2/metrics.jsonl" 1 1e-5 1e-5 >/dev/null &&
    [[ $(grep -c '"val_dpo_accuracy"' "$TMP/P1/metrics.jsonl") == 2 ]] &&
    cmp -s <(grep -o '"val_dpo_accuracy": [0-9.]*' "$TMP/P1/metrics.jsonl") \
           <(grep -o '"val_dpo_accuracy": [0-9.]*' "$TMP/P2/metrics.jsonl")
tap_check $? "DPO on LoRA adapters with dropout 0.1, 6 steps: 2 x 2 with zero3 equals N = 1 within 1e-5 (as test_dpo.sh's ranks), the same validation accuracy"

# ---- resume ---------------------------------------------------------------------------------
k=$((RANDOM % 11 + 5))
# (save_async = false in the killed run: its last periodic save is committed before the kill;
# a background save may still be in flight then: tests/ckpt/test_ckpt_async_kill.sh)
# (the killed run: mpirun ends the surviving rank at once, not after its 2 s of SIGCONT, sleep,
# SIGTERM, sleep (odls_base_sigkill_timeout): that rank waits for the dead one in an all-reduce
# and has nothing to finish; 3.8 -> 1.6 s wall measured)
OMPI_MCA_odls_base_sigkill_timeout=0 TSR_FAULT=kill:$k:1 run K2 2 2 llama --set save_interval=4ba --set keep_last=5 --set save_async=false
rc=$?
cp -r "$TMP/K2" "$TMP/K1" && cp -r "$TMP/K2" "$TMP/K4"
run K2 2 2 llama --set save_interval=4ba --set keep_last=5 && rc2=0 || rc2=1
[[ $rc != 0 && $rc2 == 0 ]] && grep -q "checkpoint resume step $((k / 4 * 4))" "$TMP/K2.txt" &&
    cmp -s <(final_lines "$TMP/L2/metrics.jsonl") <(final_lines "$TMP/K2/metrics.jsonl") &&
    same_tensors "$TMP/L2/step-00000020.h5" "$TMP/K2/step-00000020.h5"
tap_check $? "rank 1 SIGKILLed after step $k at N = 2 (exit $rc): the rerun resumes from step $((k / 4 * 4)) and equals the uninterrupted run bit for bit"
run K1 1 1 llama --set save_interval=4ba --set keep_last=5 &&
    run K4 4 4 llama --set save_interval=4ba --set keep_last=5 &&
    metrics_close "$TMP/L2/metrics.jsonl" "$TMP/K1/metrics.jsonl" $((k / 4 * 4 + 1)) 1e-6 1e-6 &&
    metrics_close "$TMP/L2/metrics.jsonl" "$TMP/K4/metrics.jsonl" $((k / 4 * 4 + 1)) 1e-6 1e-6
tap_check $? "the same checkpoint resumed at N = 1 and at N = 4 continues within 1e-6 of the N = 2 run"

# ---- refusals -------------------------------------------------------------------------------
refused() { # DIR NP N WANT ARGS...: exit 1, WANT in the output, no DIR
    local dir=$1 np=$2 n=$3 want=$4; shift 4
    run "$dir" "$np" "$n" llama "$@"
    local rc=$?
    [[ $rc == 1 && ! -e $TMP/$dir ]] && grep -qF -- "$want" "$TMP/$dir.txt" ||
        { tap_diag "$dir: exit $rc; $(grep -m1 error "$TMP/$dir.txt")"; return 1; }
}
# (N not dividing the ranks and a global batch the data ranks do not divide go through the same
# check, before anything is written: tests/unit/test_config.c has their messages)
refused X2 2 2 "seq_len = 30 is not divisible by 2 x parallel.context = 4 (each of the 2 ranks of a context group holds 2 of the sequence's 4 chunks): the nearest valid values are 28 and 32" --set seq_len=30
tap_check $? "refused with exit 1 and nothing written: seq_len 30 at N = 2 (28 and 32 named)"

# ---- long sequences' data ---------------------------------------------------------------------
GPT2_DIR=${TSR_DATA_DIR:-$TSR_ROOT/data/npm}/gpt2
if [[ -f $GPT2_DIR/encoder.json ]]; then
    "$PY3" - "$TMP/long.jsonl" <<'PY'
import json, random, sys
r, words = random.Random(5), ["the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "far"]
with open(sys.argv[1], "w") as f:
    for k, n in enumerate([40000, 70000, 100000, 150000, 20000, 60000]):
        f.write(json.dumps({"prompt": f"Q{k}: summarise",
                            "response": " " + " ".join(r.choice(words) for _ in range(n))}) + "\n")
PY
    "$TOOL" prep --tokenizer "$GPT2_DIR" --out "$TMP/lp" --pack 131072 --val-fraction 0 -q "$TMP/long.jsonl" 2>/dev/null &&
        "$TOOL" prep --tokenizer "$GPT2_DIR" --out "$TMP/lu" --val-fraction 0 -q "$TMP/long.jsonl" &&
        out=$(/usr/bin/python3 "$TSR_ROOT/tests/prep/prep_check.py" pack "$TMP/lp" "$TMP/lu" 131072 50256) &&
        tap_diag "$out" && [[ $out == "train windows 4 examples 6 truncated 1 "* ]] &&
        "$TOOL" verify-data --seq-len 131072 "$TMP/lp/train" | grep -q "4 samples of length 131072"
    tap_check $? "prep --pack 131072: 6 examples of 20K..150K tokens whole in 4 windows (one truncated), verify-data counts 4 samples of seq_len 131072"
else
    tap_skip "prep --pack 131072" "no GPT-2 tokenizer files in $GPT2_DIR (./INSTALL fetches them)"
fi
tap_done
