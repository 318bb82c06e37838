#!/usr/bin/env python3
"""LoRA on multi-head latent attention (issue 84; docs/lora.md "Multi-head latent attention")
against float64 PyTorch.

test_mla.py's two cases (2 layers of MLA, SwiGLU, untied head) with adapters on every target
lora.targets = "all-linear" gives there, r = 4, alpha = 8, through build/tests/ref_dump (the real
trainer; B drawn non-zero so that step 0's A gradients are not zero):
  mla-doc  (q_lora_rank 12, V3's): o, q_a_proj, q_b_proj, kv_a_proj_with_mqa, kv_b_proj and the
           MLP's gate, up, down; interleaved RoPE, YaRN, packed documents;
  mla-ckpt (no low-rank path, V2-Lite's): q (q_proj), o, kv_a_proj_with_mqa, kv_b_proj, gate,
           up, down; block activation checkpointing on layer 0 (its MLA, adapters included,
           reruns before its backward).
The reference wraps each of torch_mla.py's nn.Linear projections (the modules of transformers'
DeepseekV3Attention) as PEFT's LoRA layer does, y = x W^T + (alpha / r) (x A^T) B^T (test_lora.py's
LoraLinear); kv_a_proj_with_mqa's one adapter covers its latent's and its RoPE key's rows.

Checks per case: ref_dump exits 0; step 0's loss and the gradient of every adapter tensor within
test_reference.py's TOL_STEP0 (none all zero); the base's tensors after ref_dump's 10 steps equal
their start bit for bit (frozen).
Run: TESTS=test_lora_mla bash tests/run.sh   (needs build/tests/ref_dump and build/tessera)
"""
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_reference as R  # noqa: E402  (skips, exit 77, without torch, h5py or the binaries)
import ref_cases as RC  # noqa: E402
import test_lora as TL  # noqa: E402
import test_mla as TM  # noqa: E402
import torch  # noqa: E402
import torch_mla as M  # noqa: E402

np = R.np
RANK, ALPHA = 4, 8.0
# tessera's target -> (the parent's attribute, the module), for the layers' MLA and MLP
TARGETS = {"q": ("self_attn", "q_proj"), "q_a_proj": ("self_attn", "q_a_proj"),
           "q_b_proj": ("self_attn", "q_b_proj"),
           "kv_a_proj_with_mqa": ("self_attn", "kv_a_proj_with_mqa"),
           "kv_b_proj": ("self_attn", "kv_b_proj"), "o": ("self_attn", "o_proj"),
           "gate": ("mlp", "gate_proj"), "up": ("mlp", "up_proj"), "down": ("mlp", "down_proj")}


def targets_of(case):
    low = case["model"].get("q_lora_rank", 0) > 0
    return [t for t in TARGETS if not (t == "q" and low or t.startswith("q_") and not low)]


def attach(model, lora, scale, targets):
    """every target of every layer wrapped; returns name -> the per-layer adapter parameters"""
    for p in model.parameters():
        p.requires_grad_(False)
    adapters = {}
    for t in targets:
        parent, attr = TARGETS[t]
        for i, ly in enumerate(model.layers):
            owner = getattr(ly, parent)
            m = TL.LoraLinear(getattr(owner, attr), lora[t + "_A"][i], lora[t + "_B"][i], scale)
            setattr(owner, attr, m)
            adapters.setdefault(t + "_A", []).append(m.A)
            adapters.setdefault(t + "_B", []).append(m.B)
    return adapters


def dump(case):
    with tempfile.TemporaryDirectory(prefix="tsr-lora-mla-") as tmp:
        doc = case.get("data") == "doc"  # (ref_cases.py's datasets: "doc" with end-of-text)
        data_dir, _, _, _ = R.make_dataset(tmp, "doc" if doc else "plain", R.EOT if doc else None)
        out, r, ok = RC.run_ref_dump(case, tmp, data_dir, "c", TL.lora_block(RANK, ALPHA))
        return ok, (TL.read(out) if ok else None), r


def run_case(tap, case):
    ok, d, r = dump(case)
    if not RC.dump_ok(tap, case["name"], r, ok):
        return
    eot = R.EOT if case.get("data") else None
    model = M.DeepSeek(TM.torch_cfg(case), eot).double()
    model.load_tessera(d["params"])
    adapters = attach(model, d["lora"], ALPHA / RANK, targets_of(case))
    loss, _, _ = R.global_batch_backward(model, d["step0/inputs"], d["step0/targets"], R.MICRO_BATCH)
    e = abs(loss - d["step0/loss"]) / abs(loss)
    tap.ok(e <= R.TOL_STEP0, f"{case['name']}: step 0 loss {d['step0/loss']:.6f} vs torch "
                             f"{loss:.6f}: rel err {e:.2e} <= {R.TOL_STEP0:g}")
    want = TL.stacked(adapters, grads=True)
    got_names = sorted(d["step0/lora_grads"])
    for n in sorted(want):
        got = d["step0/lora_grads"].get(n)
        e = R.rel_err(got, want[n]) if got is not None and got.shape == want[n].shape else float("inf")
        tap.ok(e <= R.TOL_STEP0 and np.abs(want[n]).max() > 0,
               f"{case['name']}: step 0 gradient of {n} {tuple(want[n].shape)}: rel err {e:.2e} "
               f"<= {R.TOL_STEP0:g}")
    tap.ok(got_names == sorted(want), f"{case['name']}: the dump's adapters are the targets' "
                                      f"({len(got_names)})")
    same = all(d["final"][n].tobytes() == d["params"][n].tobytes() for n in d["params"])
    tap.ok(same, f"{case['name']}: the base's {len(d['params'])} tensors after the steps equal "
                 f"their start bit for bit (frozen)")


def run(tap):
    for case in TM.CASES:
        run_case(tap, case)


def main():
    torch.set_default_dtype(torch.float64)
    plan = sum(1 + 1 + 2 * len(targets_of(c)) + 1 + 1 for c in TM.CASES)
    return R.Tap(plan).run_all(run)


if __name__ == "__main__":
    sys.exit(main())
