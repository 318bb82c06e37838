#!/usr/bin/env python3
"""test_hf_moe.py — Hugging Face import and export of the mixtures of experts (MixtralForCausalLM,
Qwen3MoeForCausalLM) through tessera's programs.

Fixtures: hf_fixture.py's MOE_FIXTURES, written BY SCRIPT from the published formats (not
transformers' save_pretrained, which this machine lacks): Mixtral, 4 experts, top 2, GQA 4:2,
untied, one model.safetensors; Qwen3-MoE, 4 experts, top 2, QK-norm, head_dim 16 at hidden 32,
decoder_sparse_step 2 (layer 0 dense, layer 1 MoE), norm_topk_prob false, 5 shards + index. Each
with the logits of a float64 forward written after transformers' modeling code.
For each fixture (2 MPI ranks, the fixture's token rows as the first global batch, optim.lr 1e-30
so that step 1 leaves every fp32 weight as it was):
  - `tessera-train --init-from FIXTURE` reads it (config.json and every tensor accepted);
  - then: the step-1 loss = the mean cross-entropy of the fixture's logits (rel err
    <= 1e-5); `tessera ckpt export --format hf` of the step-1 checkpoint has the fixture's tensor
    names (safetensors header rules as in test_hf_export.py); every tensor equals the fixture's bit
    for bit in fp32 (the round trip); config.json equals the fixture's key by key (but the
    run-side keys listed in NOT_COMPARED), router_aux_loss_coef = model.moe_aux_loss_coef x MoE layers / top_k.
Refusals through tessera-train (the import runs before the first step, so these run today): a
router of 3 rows for 4 experts, a missing expert tensor, a fifth expert's tensor, mlp_only_layers
not empty, a run with another moe_top_k, a MoE directory into a dense run; and a run whose
model.moe_aux_loss_coef is not router_aux_loss_coef x top_k / MoE layers imports with a warning saying both.
Run: TESTS=hf_moe bash tests/run.sh   (needs `make`). TAP; exit 1 on failure, 77 without torch.
"""
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_hf_export as hfe  # noqa: E402  (skips with 77 without torch/h5py or the programs)
import test_hf_llama as thl  # noqa: E402
import hf_fixture as fxm  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from tap import Tap  # noqa: E402

TOL_FP32 = thl.TOL_FP32  # fp32 forward vs float64, as test_hf_llama.py
LR = "optim.lr=1e-30"    # |lr x update| < half an ulp of every weight: step 1 changes no bit
SHARD = {"qwen3_moe_sparse2": 30000}
# Written from the run, not the model: the position count (RoPE has no table), the init std, the
# tokenizer's ids (exported with --tokenizer none), Qwen's unused window when use_sliding_window
# is false.
NOT_COMPARED = {"max_position_embeddings", "initializer_range", "bos_token_id", "eos_token_id",
                "sliding_window"}
CHECKS_PER_FIXTURE = 5
N_REFUSALS = 7


def compare_config(fcj, cj):
    fcj = dict(fcj)  # the export always writes head_dim; the fixture when it is not the default
    fcj.setdefault("head_dim", fcj["hidden_size"] // fcj["num_attention_heads"])
    keys = (set(fcj) | set(cj)) - NOT_COMPARED
    bad = [f"{k} = {cj.get(k)!r}, fixture {fcj.get(k)!r}" for k in sorted(keys) if cj.get(k) != fcj.get(k)]
    if fcj.get("use_sliding_window", True) and cj.get("sliding_window") != fcj.get("sliding_window"):
        bad.append(f"sliding_window = {cj.get('sliding_window')!r}, fixture {fcj.get('sliding_window')!r}")
    return bad


def fixture_tensors(fdir):
    out = {}
    for f in os.listdir(fdir):
        if f.endswith(".safetensors"):
            out.update({n: hfe.as_f32(*e) for n, e in hfe.parse_st(os.path.join(fdir, f))[3].items()})
    return out


def run_fixture(tap, name, fdir, tmp):
    fx = json.load(open(os.path.join(fdir, "fixture.json")))
    fcj = json.load(open(os.path.join(fdir, "config.json")))
    toks = np.array(fx["tokens"])
    rc, out, data = hfe.shard_tokens(tmp, name, toks, fxm.V)
    if rc:
        tap.diag(out)
    cfg = os.path.join(tmp, name + ".cfg")
    thl.write_cfg(cfg, os.path.join(tmp, "unused"), data)
    fx.update(cfg=cfg, dir=fdir)

    r0 = os.path.join(tmp, name + "_init")
    rc, out, s = thl.init_run(fx, cfg, r0, fdir, LR)
    read = f"checkpoint init-from step 0 | {fdir}" in out and "error:" not in out
    if not read or rc:
        tap.diag(out[-2500:])
    tap.ok(read and rc == 0, f"{name}: --init-from the fixture: config.json and every tensor "
                             f"accepted, one step trained (exit {rc})")
    what = [f"{name}: step-1 loss = the float64 forward's (rel err <= {TOL_FP32:g})",
            f"{name}: export: the safetensors header rules, the fixture's tensor names",
            f"{name}: every exported tensor = the fixture's bit for bit (fp32 round trip)",
            f"{name}: config.json = the fixture's key by key (but {sorted(NOT_COMPARED)})"]

    ref = thl.xent_of(np.load(os.path.join(fdir, "logits.npy")), toks)
    e = abs(s["loss"] - ref) / ref if s else math.inf
    tap.ok(e <= TOL_FP32, f"{what[0]}: {s and s['loss']} vs {ref:.8f}: rel err {e:.2e}")

    exp = os.path.join(tmp, name + "_export")
    cmd = [hfe.TESSERA, "ckpt", "export", "--format", "hf", "--tokenizer", "none",
           os.path.join(r0, "step-00000001.h5"), exp]
    envx = dict(hfe.env(), TSR_HF_MAX_SHARD=str(SHARD[name])) if name in SHARD else hfe.env()
    r = subprocess.run(cmd, capture_output=True, text=True, env=envx)
    if r.returncode:
        tap.diag(r.stdout + r.stderr)
    problems, ents = thl.read_export(exp) if r.returncode == 0 else (["export failed"], {})
    want = fixture_tensors(fdir)
    if set(ents) != set(want):
        problems.append(f"names differ from the fixture's: {sorted(set(ents) ^ set(want))[:4]}")
    for p in problems[:5]:
        tap.diag(p)
    tap.ok(not problems, f"{what[1]} ({len(want)} tensors)")

    diff = [n for n in want if n not in ents or ents[n].shape != want[n].shape
            or not np.array_equal(ents[n], want[n])]
    tap.ok(bool(ents) and not diff, f"{what[2]}; different: {diff[:3]}")

    cj = json.load(open(os.path.join(exp, "config.json"))) if r.returncode == 0 else {}
    bad = compare_config(fcj, cj) if cj else ["no config.json"]
    for b in bad:
        tap.diag(b)
    tap.ok(not bad, f"{what[3]}: router_aux_loss_coef {cj.get('router_aux_loss_coef')}")
    return fx


def rewrite_st(d, fn):
    """Rewrites d/model.safetensors: fn edits {name: (dtype, shape, raw)} (an ordered dict)."""
    p = os.path.join(d, "model.safetensors")
    pairs, data = hfe.read_pairs(p)
    ents = {k: (v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]])
            for k, v in pairs if k != "__metadata__"}
    fn(ents)
    out, buf = [("__metadata__", dict(pairs)["__metadata__"])], b""
    for k, (dt, sh, raw) in ents.items():
        out.append((k, {"dtype": dt, "shape": list(sh), "data_offsets": [len(buf), len(buf) + len(raw)]}))
        buf += raw
    hfe.write_st(p, out, buf)


def refusals(tap, tmp, fixtures):
    mx, qm = fixtures["mixtral_gqa"], fixtures["qwen3_moe_sparse2"]
    router, w3 = "model.layers.1.block_sparse_moe.gate.weight", "model.layers.0.block_sparse_moe.experts.3.w3.weight"
    extra = "model.layers.0.block_sparse_moe.experts.4.w1.weight"

    def three_rows(ents):
        dt, sh, raw = ents[router]
        ents[router] = (dt, [3, sh[1]], raw[:3 * sh[1] * 4])

    def fifth(ents):
        ents[extra] = ents["model.layers.0.block_sparse_moe.experts.0.w1.weight"]

    cases = [
        ("a router of 3 rows for 4 experts", mx, 2, [router, "[3, 32]", "needs [4, 32]"],
         lambda d: rewrite_st(d, three_rows), []),
        ("a missing expert tensor", mx, 2, ["no tensor", w3], lambda d: rewrite_st(d, lambda e: e.pop(w3)), []),
        ("a fifth expert's tensor", mx, 2, ["unexpected tensor", extra], lambda d: rewrite_st(d, fifth), []),
        ("mlp_only_layers [0]", qm, 2, ["config.json", "mlp_only_layers is not empty"],
         thl.edit_cfg("mlp_only_layers", [0]), []),
        ("a run with moe_top_k 1", qm, 1, ["model.moe_top_k = 1, but config.json has num_experts_per_tok = 2",
                                           "--set model.moe_top_k=2"],
         lambda d: None, ["model.moe_top_k=1"]),
        ("a dense run", mx, 1, ["model.moe_experts = 0, but config.json has num_local_experts = 4",
                                 "--set model.moe_experts=4"],
         lambda d: None, ["model.moe_experts=0", "model.moe_intermediate_size=0", "model.moe_every=1"]),
    ]
    for k, (what, fx, want_rc, needles, damage, sets) in enumerate(cases):
        d = os.path.join(tmp, f"bad{k}")
        shutil.copytree(fx["dir"], d)
        damage(d)
        rc, out, _ = thl.init_run(fx, fx["cfg"], os.path.join(tmp, f"badrun{k}"), d, LR, *sets)
        err = [line for line in out.splitlines() if "error" in line]
        tap.ok(rc == want_rc and all(n in out for n in needles),
               f"--init-from {fx['name']} with {what}: exit {rc} (want {want_rc}), the message names {needles}")
        tap.diag(err[0] if err else out[-600:])
    # another aux coefficient: a training choice, said and not refused
    rc, out, _ = thl.init_run(mx, mx["cfg"], os.path.join(tmp, "auxrun"), mx["dir"], LR,
                              "model.moe_aux_loss_coef=0.05")
    warn = "router_aux_loss_coef = 0.02 is tessera's model.moe_aux_loss_coef x 2 MoE layers / top_k = 2"
    tap.ok(warn in out and "moe_aux_loss_coef=0.02 trains with the model's" in out
           and f"checkpoint init-from step 0 | {mx['dir']}" in out,
           f"--init-from {mx['name']} into a run with model.moe_aux_loss_coef 0.05: imported, with the "
           f"warning \"{warn} ... --set model.moe_aux_loss_coef=0.02\"")
    if warn not in out:
        tap.diag(out[-1200:])


def main():
    torch.set_default_dtype(torch.float64)
    plan = CHECKS_PER_FIXTURE * len(fxm.MOE_FIXTURES) + N_REFUSALS
    tap = Tap(plan)
    with tempfile.TemporaryDirectory(prefix="tsr-hf-moe-") as tmp:
        thl.fixtures_then_refusals(tap, tmp, fxm.MOE_FIXTURES, run_fixture, CHECKS_PER_FIXTURE, refusals,
                                   N_REFUSALS)
    return tap.status()


if __name__ == "__main__":
    sys.exit(main())
