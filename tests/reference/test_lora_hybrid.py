#!/usr/bin/env python3
"""LoRA on the hybrid layers (issue 68; docs/lora.md "Hybrid models") against float64 PyTorch.

test_hybrid.py's hybrid-doc model (3 Gated DeltaNet layers and 1 full layer with Qwen3-Next's
gated attention, packed documents) with adapters on every target (lora.targets = all-linear: q, k,
v, o, gate, up, down, in_proj_qkvz, in_proj_ba, out_proj, attn_gate), r = 4, alpha = 8, through
build/tests/ref_dump (the real trainer; B drawn non-zero so that step 0's A gradients are not
zero). The reference adds each adapter as PEFT's LoRA layer does, y = x W^T + s (x A^T) B^T,
s = alpha / r: on torch_hybrid.py's nn.Linear projections (q, k, v, o, the gate, the MLP's) by
wrapping them, and on the DeltaNet's weights as W + s B A, which is the same function of x and the
same gradient in A and B: in_proj_qkvz's B rows [qkv (2 HK dk + HV dv) | z (HV dv)] over wqkv
and wz with one A, in_proj_ba's [b | a] over wb and wa, out_proj over wo. Adapters of the
attention targets are stacked over the 1 full layer, the DeltaNet's over the 3 linear ones.

Checks: ref_dump exits 0; step 0's loss and the gradient of every adapter tensor (22) within
test_reference.py's TOL_STEP0; the base's tensors after ref_dump's 10 steps equal their start
bit for bit (frozen).
Run: TESTS=test_lora_hybrid bash tests/run.sh   (needs build/tests/ref_dump and build/tessera)
"""
import os
import sys
import tempfile
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_reference as R  # noqa: E402  (skips, exit 77, without torch, h5py or the binaries)
import ref_cases as RC  # noqa: E402
import test_hybrid as TH  # noqa: E402
import test_lora as TL  # noqa: E402
import torch  # noqa: E402
import torch_deltanet  # noqa: E402

np = R.np
RANK, ALPHA = 4, 8.0
CASE = dict(TH.CASES[0], name="lora-hybrid")
ATTN = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "o_proj", "attn_gate": "gate_proj"}
MLP = {"gate": "gate_proj", "up": "up_proj", "down": "down_proj"}
# DeltaNet target -> its B's row blocks, each (weight, rows)
DN = {"in_proj_qkvz": ("wqkv", "wz"), "in_proj_ba": ("wb", "wa"), "out_proj": ("wo",)}
PLAN = 1 + 1 + 22 + 1


def dn_forward(self, x, cos, sin, allowed):
    """torch_hybrid.DeltaNet.forward with the adapters added into the weights: W + s B A"""
    P = dict(self.P)
    for t, (A, B) in self.lora.items():
        r0 = 0
        for w in DN[t]:
            rows = P[w].shape[0]
            P[w] = P[w] + self.scale * (B[r0: r0 + rows] @ A)
            r0 += rows
    out, _ = torch_deltanet.layer_packed(x, P, TH.H.documents_of(allowed), **self.kw)
    return out


def attach(model, lora, scale, linear):
    """adapters on every target; returns name -> the per-slot adapter parameters"""
    for p in model.parameters():
        p.requires_grad_(False)
    adapters = {}

    def param(name, i):
        p = torch.nn.Parameter(torch.as_tensor(lora[name][i], dtype=torch.float64).clone())
        adapters.setdefault(name, []).append(p)
        return p
    full = [ly for ly, k in zip(model.layers, linear) if not k]
    lin = [ly for ly, k in zip(model.layers, linear) if k]
    for t, attr in ATTN.items():
        for i, ly in enumerate(full):
            m = TL.LoraLinear(getattr(ly.self_attn, attr), lora[t + "_A"][i], lora[t + "_B"][i], scale)
            setattr(ly.self_attn, attr, m)
            adapters.setdefault(t + "_A", []).append(m.A)
            adapters.setdefault(t + "_B", []).append(m.B)
    for t, attr in MLP.items():
        for i, ly in enumerate(model.layers):
            m = TL.LoraLinear(getattr(ly.mlp, attr), lora[t + "_A"][i], lora[t + "_B"][i], scale)
            setattr(ly.mlp, attr, m)
            adapters.setdefault(t + "_A", []).append(m.A)
            adapters.setdefault(t + "_B", []).append(m.B)
    for i, ly in enumerate(lin):
        dn = ly.self_attn
        dn.scale = scale
        dn.lora = {t: (param(t + "_A", i), param(t + "_B", i)) for t in DN}
        dn.forward = types.MethodType(dn_forward, dn)
    return adapters


def run(tap):
    with tempfile.TemporaryDirectory(prefix="tsr-lora-hybrid-") as tmp:
        data_dir, _, _, r = R.make_dataset(tmp, CASE["data"], R.EOT)
        out, r, ok = RC.run_ref_dump(CASE, tmp, data_dir, "c", TL.lora_block(RANK, ALPHA))
        if not RC.dump_ok(tap, None, r, ok):
            return
        d = TL.read(out)
    tc = TH.torch_cfg(CASE)
    model = TH.H.Hybrid(tc, R.EOT).double()
    model.load_tessera(d["params"])
    adapters = attach(model, d["lora"], ALPHA / RANK, CASE["linear"])
    loss, _, _ = R.global_batch_backward(model, d["step0/inputs"], d["step0/targets"], R.MICRO_BATCH)
    e = abs(loss - d["step0/loss"]) / abs(loss)
    tap.ok(e <= R.TOL_STEP0, f"step 0 loss {d['step0/loss']:.6f} vs torch {loss:.6f}: rel err "
                             f"{e:.2e} <= {R.TOL_STEP0:g}")
    want = TL.stacked(adapters, grads=True)
    for n in sorted(want):
        got = d["step0/lora_grads"].get(n)
        e = R.rel_err(got, want[n]) if got is not None and got.shape == want[n].shape else float("inf")
        tap.ok(e <= R.TOL_STEP0 and np.abs(want[n]).max() > 0,
               f"step 0 gradient of {n} {tuple(want[n].shape)}: rel err {e:.2e} <= {R.TOL_STEP0:g}")
    same = all(d["final"][n].tobytes() == d["params"][n].tobytes() for n in d["params"])
    tap.ok(same, f"the base's {len(d['params'])} tensors after the steps equal their start bit for "
                 f"bit (frozen)")


def main():
    torch.set_default_dtype(torch.float64)
    return R.Tap(PLAN).run_all(run)


if __name__ == "__main__":
    sys.exit(main())
