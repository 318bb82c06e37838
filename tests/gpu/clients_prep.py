#!/usr/bin/env python3
"""clients_prep.py — what tests/gpu/real_clients.py checks, made where tessera builds (MPI, HDF5).

    clients_prep.py OUT_DIR        (device.sh pack-clients: OUT_DIR = .devbundle/clients)

For each tiny model of MODELS (GPT-2, MPT, Llama, Qwen 2, Qwen 3; d_model 48-64, 2 layers; then
the families of issues 67 and 68: OLMo 2, OLMo 3 with sliding layers, Gemma 3 (sliding + global,
linear scaling, local base), Gemma 2 (soft caps), SmolLM3 (NoPE layers) with the keys of
tests/reference/hf_fixture.py's FAMILY_FIXTURES, the models test_hf_families.py imports and exports,
and gpt-oss (experts, sinks, YaRN), Qwen3-Next (Gated DeltaNet + gated full layers, MoE with a
shared expert), Qwen 3.5's text classes (the same layers, dense, and MoE with stacked experts) and
DeepSeek-V3 (multi-head latent attention, the DeepSeekMoE router with groups and its bias);
a 250-token synthetic vocabulary padded to 256 rows), trained STEPS steps on the
synthetic corpus by tessera-train (one process):
  OUT_DIR/NAME/hf/          `tessera ckpt export --format hf --tokenizer none` of the last checkpoint
  OUT_DIR/NAME/tokens.npy   (B, T) int64: the token rows of ref_dump's first batch
  OUT_DIR/NAME/logits.npy   (B, T, V) float32: tessera's own fp32 logits of those rows at the
                            checkpoint's weights (ref_dump --init-from CKPT; the V real columns)
  OUT_DIR/tb-run/           the GPT-2 run's metrics.jsonl and tb/ (eval every 2 steps)
  OUT_DIR/manifest.json     {"models": [{name, class, model_type, V, B, T, sets, tol}], "tb_run": ...,
                            "left_out": [{name, class, why}], "made": {"tessera": git describe, "time": ...}}
A model of OPTIONAL (gpt-oss, Qwen3-Next, Qwen 3.5, DeepSeek-V3: the newest exporters) whose export tessera
refuses is left out, with tessera's error line as "why" (real_clients.py says it as a SKIP line);
any other failure fails. tol "rel": real_clients.py compares at 1e-4 x max(1, max |logit|).
About 8 MB in all. Needs h5py and numpy; BUILD (default build) holds tessera, tessera-train and
tests/ref_dump. Exit 0 made, 1 a step failed (its output printed).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import h5py
import numpy as np

ROOT = os.environ.get("TSR_ROOT") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.join(ROOT, os.environ.get("BUILD", "build"))
TESSERA, TRAIN = os.path.join(BUILD, "tessera"), os.path.join(BUILD, "tessera-train")
REF_DUMP = os.path.join(BUILD, "tests", "ref_dump")
MPIRUN1 = ["bash", os.path.join(ROOT, "tests", "mpi_env.sh"), "mpirun", "-np", "1"]

V, VOCAB_MULTIPLE, STEPS, T, B = 250, 128, 4, 16, 4
BASE = {"seed": "7", "global_batch": str(B), "micro_batch": "2", "seq_len": str(T), "threads": "1",
        "max_duration": f"{STEPS}ba", "save_interval": f"{STEPS}ba", "eval_interval": "0ba",
        "sample.tokens": "0", "data.tokenizer": "", "data.val": "", "data.shuffle": "false", "optim.lr": "1e-2",
        "optim.warmup": "1ba", "model.vocab_size": str(V), "model.vocab_multiple": str(VOCAB_MULTIPLE),
        "model.n_layer": "2", "model.init_std": "0.1"}
ROPE = {"model.pos": "rope", "model.norm": "rmsnorm", "model.mlp": "swiglu", "model.bias": "false",
        "model.d_model": "64", "model.n_head": "4", "model.n_kv_head": "2", "model.intermediate_size": "96",
        "model.max_seq_len": str(T)}
# name, transformers class, the model's --set keys
MODELS = [
    ("gpt2", "GPT2LMHeadModel", {"model.pos": "learned", "model.bias": "true", "model.gelu": "tanh",
                                 "model.d_model": "64", "model.n_head": "4", "model.max_seq_len": "32"}),
    # 3 heads: the ALiBi slopes of a head count that is not a power of two
    ("mpt", "MptForCausalLM", {"model.pos": "alibi", "model.bias": "false", "model.gelu": "exact",
                               "model.d_model": "48", "model.n_head": "3", "model.max_seq_len": "32"}),
    ("llama", "LlamaForCausalLM", dict(ROPE, **{"model.tie_embeddings": "false"})),
    ("qwen2", "Qwen2ForCausalLM", dict(ROPE, **{"model.qkv_bias": "true", "model.tie_embeddings": "true"})),
    ("qwen3", "Qwen3ForCausalLM", dict(ROPE, **{"model.qk_norm": "true", "model.head_dim": "24",
                                                "model.tie_embeddings": "true"})),
]

def family_models():
    """hf_fixture.py's FAMILY_FIXTURES as MODELS rows: their tessera keys (the vocabulary BASE's)."""
    sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
    import hf_fixture
    rows = []
    for fx in hf_fixture.FAMILY_FIXTURES:
        keys = {k: v for k, v in hf_fixture.family_sets(fx).items() if k not in ("model.vocab_size", "model.vocab_multiple")}
        rows.append((fx["name"], hf_fixture.CLASS[fx["model_type"]], dict(keys, **{"model.max_seq_len": str(T)})))
    return rows


MOE = {"model.moe_experts": "4", "model.moe_top_k": "2", "model.moe_intermediate_size": "32", "model.moe_every": "1",
       "model.moe_norm_topk": "true", "model.moe_aux_loss_coef": "0.01"}
QWEN35 = {"model.n_layer": "2", "model.head_dim": "16", "model.partial_rotary_factor": "0.25",
          "model.qk_norm": "true", "model.layer_types": "linear_attention,full_attention",
          "model.linear_num_key_heads": "2", "model.linear_num_value_heads": "4", "model.linear_key_head_dim": "16",
          "model.linear_value_head_dim": "16", "model.linear_conv_kernel_dim": "4", "model.attn_output_gate": "true",
          "model.tie_embeddings": "false", "model.hf_model_type": "qwen3_5_text"}
OPTIONAL = [
    # 4 experts of 32 (top 2, router and expert biases, the clamped gated unit), a sink per head,
    # YaRN over an original context of 8, every other layer sliding (configs/gpt-oss-20b.cfg's keys)
    ("gpt_oss", "GptOssForCausalLM", dict(ROPE, **MOE, **{
        "model.head_dim": "16", "model.bias": "true", "model.norm_eps": "1e-05", "model.rope_theta": "150000.0",
        "model.rope_scaling": "yarn", "model.rope_factor": "4.0", "model.rope_beta_fast": "32.0",
        "model.rope_beta_slow": "1.0", "model.rope_truncate": "false", "model.rope_original_max_pos": "8",
        "model.attn_sinks": "true", "model.layer_types": "sliding_attention,full_attention",
        "model.sliding_window": "5", "model.tie_embeddings": "false", "model.moe_router_bias": "true",
        "model.moe_expert_bias": "true", "model.moe_act": "gptoss", "model.swiglu_limit": "7.0"})),
    # 3 Gated DeltaNet layers + 1 gated full one, MoE with a shared expert of 32, partial rotary 0.25
    # (configs/qwen3-next-80b-a3b.cfg's keys)
    ("qwen3_next", "Qwen3NextForCausalLM", dict(ROPE, **MOE, **{
        "model.n_layer": "4", "model.head_dim": "16", "model.partial_rotary_factor": "0.25", "model.qk_norm": "true",
        "model.layer_types": "linear_attention,linear_attention,linear_attention,full_attention",
        "model.linear_num_key_heads": "2", "model.linear_num_value_heads": "4", "model.linear_key_head_dim": "16",
        "model.linear_value_head_dim": "16", "model.linear_conv_kernel_dim": "4", "model.attn_output_gate": "true",
        "model.moe_shared_size": "32", "model.moe_shared_gate": "true", "model.tie_embeddings": "false"})),
    # Qwen 3.5's text classes: the same layers (a linear and a full one: small), the unfused DeltaNet
    # projections (model.hf_model_type picks the class, as configs/qwen3.5-*.cfg do): dense, and
    # every layer MoE with stacked experts
    ("qwen3_5_text", "Qwen3_5ForCausalLM", dict(ROPE, **QWEN35)),
    ("qwen3_5_moe_text", "Qwen3_5MoeForCausalLM", dict(ROPE, **MOE, **dict(QWEN35, **{
        "model.moe_shared_size": "32", "model.moe_shared_gate": "true",
        "model.hf_model_type": "qwen3_5_moe_text"}))),
]
# DeepSeek-V3's family (configs/tiny-deepseek.cfg's keys at this size): multi-head latent attention
# (heads of 16 + 8, values of 12, the queries through a latent of 24, interleaved RoPE with YaRN
# over an original context of 8), the first layer dense, the second DeepSeekMoE (8 routed experts of
# 32, 2 a token, sigmoid scores with the correction bias, moved during the steps, in 4 groups of
# which 2 are kept, times 2.5; a shared expert of 32)
DEEPSEEK = {"model.n_kv_head": "0", "model.kv_lora_rank": "32", "model.q_lora_rank": "24",
            "model.qk_nope_head_dim": "16", "model.qk_rope_head_dim": "8", "model.v_head_dim": "12",
            "model.rope_interleave": "true", "model.rope_scaling": "yarn", "model.rope_factor": "4.0",
            "model.rope_beta_fast": "32.0", "model.rope_beta_slow": "1.0", "model.rope_original_max_pos": "8",
            "model.rope_mscale": "1.0", "model.rope_mscale_all_dim": "1.0", "model.norm_eps": "1e-06",
            "model.moe_experts": "8", "model.moe_top_k": "2", "model.moe_intermediate_size": "32",
            "model.moe_every": "1", "model.moe_dense_layers": "1", "model.moe_shared_size": "32",
            "model.moe_scoring": "sigmoid", "model.moe_topk_method": "noaux_tc", "model.moe_n_group": "4",
            "model.moe_topk_group": "2", "model.moe_norm_topk": "true", "model.moe_routed_scaling": "2.5",
            "model.moe_bias_update_rate": "0.01", "model.moe_aux_loss_coef": "0.001",
            "model.tie_embeddings": "false"}
OPTIONAL.append(("deepseek_v3", "DeepseekV3ForCausalLM", dict(ROPE, **DEEPSEEK)))
FAMILIES = [m[0] for m in family_models() + OPTIONAL]  # compared at a tolerance relative to the logits
MODELS += family_models() + OPTIONAL
TB_MODEL = "gpt2"  # its run's tb/ and metrics.jsonl go to tb-run/ (with eval every 2 steps)


class Refused(Exception):
    """An optional model's export refused by tessera: its error line."""


def run(cmd, may_refuse=False):
    env = dict(os.environ)
    if os.geteuid() == 0:  # ref_dump calls MPI_Init outside mpirun: OpenMPI refuses root without these
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode and may_refuse:
        said = [x for x in (r.stdout + r.stderr).splitlines() if "error:" in x]
        raise Refused(f"exit {r.returncode}: " + (said[0].split("error:", 1)[1].strip() if said else "no error line"))
    if r.returncode:
        sys.exit(f"clients_prep: exit {r.returncode}: {' '.join(cmd)}\n{(r.stdout + r.stderr)[-4000:]}")
    return r.stdout


def sets(d):
    out = []
    for k, v in d.items():
        out += ["--set", f"{k}={v}"]
    return out


def make_model(out, tmp, data, name, cls, model_sets):
    keys = dict(BASE, **model_sets)
    keys["data.train"] = os.path.join(data, "train")
    if name == TB_MODEL:
        keys.update({"data.val": os.path.join(data, "val"), "eval_interval": "2ba", "eval_samples": "8"})
    run_dir = os.path.join(tmp, name + "-run")
    cfg = os.path.join(ROOT, "configs", "tiny.cfg")
    run(MPIRUN1 + [TRAIN, "--config", cfg, "--set", f"run_dir={run_dir}"] + sets(keys))
    hf = os.path.join(out, name, "hf")
    optional = name in [m[0] for m in OPTIONAL]
    try:
        run([TESSERA, "ckpt", "export", "--format", "hf", "--tokenizer", "none", run_dir, hf], may_refuse=optional)
    except Refused as e:
        shutil.rmtree(os.path.join(out, name), ignore_errors=True)
        return {"name": name, "class": cls, "why": str(e), "left_out": True}
    dump = os.path.join(tmp, name + ".h5")
    keys.update({"run_dir": os.path.join(tmp, name + "-dump"), "max_duration": "1ba", "data.val": "",
                 "eval_interval": "0ba"})
    run([REF_DUMP, cfg, dump, "--init-from", run_dir] + [f"{k}={v}" for k, v in keys.items()])
    with h5py.File(dump, "r") as f:
        tokens = f["step0/inputs"][()].astype(np.int64)
        logits = f["step0/logits"][()][..., :V].astype(np.float32)
    np.save(os.path.join(out, name, "tokens.npy"), tokens)
    np.save(os.path.join(out, name, "logits.npy"), logits)
    if name == TB_MODEL:
        dst = os.path.join(out, "tb-run")
        os.makedirs(dst)
        shutil.copy(os.path.join(run_dir, "metrics.jsonl"), dst)
        shutil.copytree(os.path.join(run_dir, "tb"), os.path.join(dst, "tb"))
    cj = json.load(open(os.path.join(hf, "config.json")))
    return {"name": name, "class": cls, "model_type": cj.get("model_type"), "V": V, "B": B, "T": T,
            "sets": model_sets, "tol": "rel" if name in FAMILIES else "abs"}


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: clients_prep.py OUT_DIR")
    out = sys.argv[1]
    for exe in (TESSERA, TRAIN, REF_DUMP):
        if not os.access(exe, os.X_OK):
            sys.exit(f"clients_prep: {exe} is missing (run make first)")
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    with tempfile.TemporaryDirectory(prefix="tessera-clients.") as tmp:
        data = os.path.join(tmp, "data")
        run([TESSERA, "synth", "--out", data, "--vocab", str(V), "--tokens", "20000", "--seed", "1"])
        made = [make_model(out, tmp, data, *m) for m in MODELS]
    models = [m for m in made if not m.get("left_out")]
    left_out = [{k: m[k] for k in ("name", "class", "why")} for m in made if m.get("left_out")]
    describe = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"], capture_output=True,
                              text=True).stdout.strip() or "unknown"
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump({"models": models, "tb_run": "tb-run", "left_out": left_out,
                   "made": {"tessera": describe, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}},
                  f, indent=1)
    size = sum(os.path.getsize(os.path.join(d, x)) for d, _, fs in os.walk(out) for x in fs)
    print(f"clients_prep: {len(models)} models and the {TB_MODEL} run's tb/ in {out} ({size / 1e6:.1f} MB)")
    for m in left_out:
        print(f"clients_prep: {m['name']} left out: tessera's export refused it ({m['why']})")


if __name__ == "__main__":
    main()
