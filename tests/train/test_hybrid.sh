#!/usr/bin/env bash
# Hybrid linear attention through the real trainer and tessera generate (docs/deltanet.md
# "Wiring"; the maths against float64 PyTorch: tests/reference/test_hybrid.py; decoding and
# checkpointing in-process: build/tests/test_hybrid_decode):
#  - a tiny 4-layer model with three linear_attention layers (Gated DeltaNet) and one full one
#    with Qwen3-Next's gated attention (3 : 1, model.attn_output_gate) trains 4 steps; its
#    checkpoint holds the DeltaNet's tensors over the 3 linear layers and the attention's and the
#    gate's (attngatew) over the 1 full one, and verifies; ddp on 2 ranks, and zero3 on 2 ranks
#    equals it within 1e-6 at every step (the new tensors are ordinary units of the shards);
#  - tessera generate from it, greedy, 100 tokens: the cache (the linear layers' state and
#    convolution tail) gives the no-cache forward's ids and probabilities (1e-6 + 1e-4 p);
#  - tessera generate --prompts (batched decoding: each slot its own state and convolution tail),
#    3 prompts of different lengths, 2 samples each (a prompt's slot copied) at batch 4 (slots
#    reused), greedy, 30 tokens: each completion the ids of its prompt generated alone;
#  - GRPO (objective = grpo) on a tiny hybrid from scratch, 2 steps: the rollouts decoded by the
#    batched path (4 prompts x 4 samples of 6 tokens a step) are logged with finite
#    log-probabilities, and the run ends with its checkpoint (rewards are 0 from random weights:
#    a smoke run, the maths being check 5's and the reference tests');
#  - device = "cuda" with parallel.context = 2 is refused at start naming parallel.context (exit
#    1, a config error: the state passing between ranks is the CPU's; CUDA trains the linear
#    layers: tests/gpu/test_cuda_families.sh), nothing written in run_dir (parallel.context > 1
#    runs them on the CPU: tests/train/test_hybrid_context.sh); so is precision.fp8 (the linear
#    layers' projections have no FP8 path: docs/deltanet.md "CUDA"); lora.rank > 0 is planned
#    with the DeltaNet's and the gate's targets (LoRA's runs: test_lora_hybrid.sh);
#  - the Hugging Face export (Qwen3NextForCausalLM, the class of linear_attention layers) is
#    refused naming model.qk_norm, which that class needs and this tiny model lacks, no weights
#    written (tests/reference/test_hf_qwen3next.py exports the models it holds);
#  - a resume whose model.layer_types holds as many linear and full layers in another order
#    (full first) is refused naming model.layer_types (exit 1), the checkpoints untouched: the
#    stacked tensors carry no layer index, so it would load the weights into the wrong layers;
#    --init-from that checkpoint with that order too, nothing written in the new run_dir.
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
source "$(dirname "$0")/../eval/generate_lib.sh"
tap_plan 11
tiny_gqa_args 4 --set model.n_layer=4 \
    --set model.layer_types=linear_attention,linear_attention,linear_attention,full_attention \
    --set model.linear_num_key_heads=2 --set model.linear_num_value_heads=4 \
    --set model.linear_key_head_dim=16 --set model.linear_value_head_dim=16 \
    --set model.attn_output_gate=true

"${MPIRUN[@]}" -np 2 "$TRAIN" "${args[@]}" --set run_dir="$TMP/D" >"$TMP/D.txt" 2>&1
rc=$?
tap_diag "train: exit $rc, step-4 loss $(json_field "$TMP/D/metrics.jsonl" 4 loss)"
((rc == 0)) && "$TOOL" ckpt verify "$TMP/D/step-00000004.h5" >"$TMP/verify.txt" 2>&1 &&
    /usr/bin/python3 - "$TMP/D/step-00000004.h5" <<'PY'
import sys, h5py
shapes = {}
h5py.File(sys.argv[1], "r").visititems(
    lambda n, o: shapes.__setitem__(n.split("/")[-1], o.shape) if isinstance(o, h5py.Dataset) else None)
print("# dnqkvw", shapes.get("dnqkvw"), "dnow", shapes.get("dnow"), "qkvw", shapes.get("qkvw"),
      "attngatew", shapes.get("attngatew"))
sys.exit(0 if shapes.get("dnqkvw", (0,))[0] == 3 and shapes.get("dnow", (0,))[0] == 3
         and shapes.get("qkvw", (0,))[0] == 1 and shapes.get("attngatew") == (1, 64, 64) else 1)
PY
tap_check $? "a 3 linear + 1 full hybrid trains 4 steps on 2 ranks; its checkpoint holds dnqkvw .. dnow over 3 layers, qkvw and attngatew over 1, and verifies"

before=$(cd "$TMP/D" && cat latest && sha256sum step-*.h5)
"$TRAIN" "${args[@]}" --set run_dir="$TMP/D" --set max_duration=6ba \
    --set model.layer_types=full_attention,linear_attention,linear_attention,linear_attention \
    >"$TMP/order.txt" 2>&1
rc=$?
tap_diag "reordered resume: $(grep -m1 -o 'differs.*' "$TMP/order.txt" | head -c 300)"
((rc == 1)) && grep -q 'layer_types at layer 0: "full_attention" vs "linear_attention"' "$TMP/order.txt" &&
    [[ $before == "$(cd "$TMP/D" && cat latest && sha256sum step-*.h5)" ]]
tap_check $? "resume with the same 3 linear + 1 full layers in another order: refused (exit $rc) naming model.layer_types, checkpoints untouched"

mkdir -p "$TMP/I"
"$TRAIN" "${args[@]}" --set run_dir="$TMP/I/run" --init-from "$TMP/D/step-00000004.h5" \
    --set model.layer_types=full_attention,linear_attention,linear_attention,linear_attention \
    >"$TMP/init.txt" 2>&1
rc=$?
tap_diag "reordered --init-from: $(grep -m1 -o 'layer 0 is.*' "$TMP/init.txt" | head -c 300)"
((rc == 1)) && grep -q "layer 0 is linear_attention in the checkpoint but an attention layer in this run (model.layer_types)" "$TMP/init.txt" &&
    [[ -z $(ls -A "$TMP/I") ]]
tap_check $? "--init-from with the layer kinds in another order: refused (exit $rc) naming model.layer_types, nothing written"

zero3_as_ddp D
tap_check $? "the hybrid under zero3 on 2 ranks equals ddp within 1e-6 at every step"

cached_as_uncached D 100
tap_check $? "generate, greedy 20 + 100 tokens: the linear layers' state in the cache == no cache, ids and probabilities"

batched_as_alone D
tap_check $? "generate --prompts, 3 prompts x 2 samples at batch 4, greedy 30 tokens: each completion the ids of its prompt generated alone (exit $rc)"

grpo_smoke 6 --set model.n_layer=4 --set model.pos=rope --set model.norm=rmsnorm \
    --set model.mlp=swiglu --set model.layer_types=linear_attention,linear_attention,linear_attention,full_attention \
    --set model.linear_num_key_heads=2 --set model.linear_num_value_heads=4 \
    --set model.linear_key_head_dim=16 --set model.linear_value_head_dim=16 \
    --set model.attn_output_gate=true
tap_check $? "GRPO on a 3 linear + 1 full hybrid, 2 steps: 32 rollouts of 6 tokens logged with finite log-probabilities, checkpoint written (exit $rc)"

start_refused R 'parallel.context: device = "cuda" with linear_attention layers' --set device=cuda \
    --set parallel.context=2
tap_check $? "device = cuda with linear_attention layers and parallel.context = 2: exit 1 naming parallel.context, nothing written (the CPU runs them: test_hybrid_context.sh)"
# precision.fp8 would leave the linear layers' projections in bf16 (they are not dec_linear's)
start_refused F 'precision.fp8: device = "cuda" with linear_attention layers.*or precision.fp8 = "none"' \
    --set device=cuda --set precision.fp8=tensorwise
tap_check $? "device = cuda with linear_attention layers and precision.fp8 = tensorwise: exit 1 naming precision.fp8 (the layers' projections have no FP8 path), nothing written"

mkdir -p "$TMP/L"
"$TRAIN" "${args[@]}" --set run_dir="$TMP/L/run" --set lora.rank=4 --plan 1 >"$TMP/lora.txt" 2>&1
rc=$?
tap_diag "lora: $(grep -m1 '^lora:' "$TMP/lora.txt")"
((rc == 0)) && grep -q "^lora: r=4 .* targets=q,k,v,o,gate,up,down,in_proj_qkvz,in_proj_ba,out_proj,attn_gate; " "$TMP/lora.txt" &&
    [[ -z $(ls -A "$TMP/L") ]]
tap_check $? "lora.rank > 0 with linear_attention layers: planned (exit $rc), all-linear adapting the DeltaNet's projections and the gate too (the runs: test_lora_hybrid.sh), nothing written"

export_refused "$TMP/D/step-00000004.h5" "$TMP/hf" "Qwen3NextForCausalLM" &&
    grep -q "model.qk_norm = true" "$TMP/export.txt"
tap_check $? "ckpt export --format hf of the hybrid without QK-norm: refused (exit $rc) naming Qwen3NextForCausalLM's model.qk_norm, no weights written"
tap_done
