#!/usr/bin/env bash
# Multi-head latent attention (model.kv_lora_rank > 0, DeepSeek-V2/V3; docs/models.md "DeepSeek")
# through the real trainer and tessera generate (the maths against float64 PyTorch:
# tests/reference/test_mla.py; the compressed cache in-process: build/tests/test_mla_decode):
#  - a tiny 2-layer MLA model (the queries' low-rank path, interleaved RoPE) trains 4 steps on 2
#    ranks; its checkpoint holds the MLA tensors at their shapes and no attention tensor, and
#    verifies; zero3 on 2 ranks equals it within 1e-6 at every step;
#  - tessera generate from it, greedy, 100 tokens: the compressed cache (the latent and the RoPE
#    key, kv_b_proj absorbed) gives the no-cache forward's ids and probabilities (1e-6 + 1e-4 p);
#  - tessera generate --prompts (batched decoding, a latent cache per slot), 3 prompts x 2 samples
#    at batch 4, greedy, 30 tokens: each completion the ids of its prompt generated alone;
#  - GRPO (objective = grpo) on a tiny MLA model, 2 steps: the rollouts decoded by the batched
#    path are logged with finite log-probabilities, the run ends with its checkpoint;
#  - what MLA does not run with yet is refused at start (exit 1), naming both keys, nothing written
#    in run_dir: parallel.tensor = 2 (MLA on device = "cuda", its decoding included:
#    tests/gpu/test_cuda_mla.sh; LoRA on MLA: test_lora_mla.sh); an attention setting MLA does not
#    take (model.qk_norm) and an
#    MLA key without MLA (model.q_lora_rank with kv_lora_rank 0) name their key.
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
source "$(dirname "$0")/../eval/generate_lib.sh"
tap_plan 7
make_synth "$TMP/data" 512 60000
tiny_llama_args "$TMP/data/train"
mla=(--set model.n_head=4 --set model.n_kv_head=0 --set model.kv_lora_rank=32 --set model.q_lora_rank=24
     --set model.qk_nope_head_dim=16 --set model.qk_rope_head_dim=8 --set model.v_head_dim=12
     --set model.rope_interleave=true)
args+=("${mla[@]}" --set max_duration=4ba --set save_interval=4ba --set watchdog.window=0)

"${MPIRUN[@]}" -np 2 "$TRAIN" "${args[@]}" --set run_dir="$TMP/D" >"$TMP/D.txt" 2>&1
rc=$?
tap_diag "train: exit $rc, step-4 loss $(json_field "$TMP/D/metrics.jsonl" 4 loss)"
((rc == 0)) && "$TOOL" ckpt verify "$TMP/D/step-00000004.h5" >"$TMP/verify.txt" 2>&1 &&
    "$PY3" - "$TMP/D/step-00000004.h5" <<'PY'
import sys, h5py
shapes = {}
h5py.File(sys.argv[1], "r").visititems(
    lambda n, o: shapes.__setitem__(n.split("/")[-1], o.shape) if isinstance(o, h5py.Dataset) else None)
want = {"mlaqaw": (2, 24, 64), "mlaqanormw": (2, 24), "mlaqw": (2, 4 * 24, 24),
        "mlakvaw": (2, 32 + 8, 64), "mlakvanormw": (2, 32), "mlakvbw": (2, 4 * (16 + 12), 32),
        "mlaow": (2, 64, 4 * 12)}
got = {k: shapes.get(k) for k in want}
print("#", got, "qkvw", shapes.get("qkvw"), "attprojw", shapes.get("attprojw"))
sys.exit(0 if got == want and "qkvw" not in shapes and "attprojw" not in shapes else 1)
PY
tap_check $? "a 2-layer MLA model trains 4 steps on 2 ranks; its checkpoint holds mlaqaw .. mlaow at their shapes, no qkvw or attprojw, and verifies"

zero3_as_ddp D
tap_check $? "the MLA model under zero3 on 2 ranks equals ddp within 1e-6 at every step"

cached_as_uncached D 100
tap_check $? "generate, greedy 20 + 100 tokens: the compressed cache (latent and RoPE key, kv_b absorbed) == no cache, ids and probabilities"

batched_as_alone D
tap_check $? "generate --prompts, 3 prompts x 2 samples at batch 4, greedy 30 tokens: each completion the ids of its prompt generated alone (exit $rc)"

grpo_smoke 1 --set model.pos=rope --set model.norm=rmsnorm --set model.mlp=swiglu \
    --set model.bias=false --set model.kv_lora_rank=16 --set model.qk_nope_head_dim=16 \
    --set model.qk_rope_head_dim=8 --set model.v_head_dim=16
tap_check $? "GRPO on a tiny MLA model, 2 steps: 32 rollouts of 6 tokens through the compressed cache logged with finite log-probabilities, checkpoint written (exit $rc)"

start_refused T 'parallel.tensor = 2 with model.kv_lora_rank > 0 (multi-head latent attention): tensor parallelism does not run with it yet' \
    --set parallel.tensor=2
tap_check $? "parallel.tensor = 2 with MLA: exit 1 naming parallel.tensor and model.kv_lora_rank, nothing written"
start_refused Q 'model.qk_norm with model.kv_lora_rank = 32 (multi-head latent attention): expected false' \
    --set model.qk_norm=true
q=$?
start_refused R 'model.q_lora_rank is set, but model.kv_lora_rank = 0 (no multi-head latent attention)' \
    --set model.kv_lora_rank=0
tap_check $(( q | $? )) "model.qk_norm with MLA, and model.q_lora_rank without it: exit 1 naming the key, nothing written"
tap_done
