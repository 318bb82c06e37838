#!/usr/bin/env python3
"""LoRA against a float64 PyTorch reference (docs/lora.md; issue 27).

A tiny Llama-style model (test_reference.py's LLAMA: GQA, RoPE with Llama 3.1 scaling, RMSNorm,
SwiGLU, untied head) with adapters on every target (q, k, v, o, gate, up, down), r = 4,
alpha = 8, through build/tests/ref_dump (the real trainer; the base is the seed's weights, B drawn
non-zero by ref_dump so that step 0's A gradients are not all zero). The reference wraps each of
torch_llama.py's projections (nn.Linear, as in transformers) the way PEFT's LoRA layer does:
y = base(x) + (alpha / r) * (x @ A^T) @ B^T, the base frozen.

Checks:
  - step 0: the loss, and the gradient of every adapter tensor (14), rel err <= TOL_STEP0;
  - 10 AdamW steps (warmup, cosine, clipping, weight decay on the adapters, 2 microbatches):
    every step's loss and gradient norm, and every final adapter tensor, rel err <= TOL_TRAJ;
  - the base's every tensor after the 10 steps equals its start bit for bit (frozen);
  - the adapters moved (the final B differs from the start): the comparison is not of zeros.
Tolerances: test_reference.py's (docs/reference-test.md).

Run: TESTS=test_lora bash tests/run.sh   (needs build/tests/ref_dump and build/tessera: `make`)
"""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_reference as R  # noqa: E402  (its constants, fixtures and torch models)

np, torch, h5py = R.np, R.torch, R.h5py
nn = torch.nn

TARGETS = ["q", "k", "v", "o", "gate", "up", "down"]
RANK, ALPHA = 4, 8.0
CFG = dict(name="lora", grad_clip=R.LLAMA_CLIP, model=R.LLAMA)


class LoraLinear(nn.Module):
    """PEFT's LoRA layer without dropout: base(x) + scale * (x A^T) B^T, the base frozen."""

    def __init__(self, base, A, B, scale):
        super().__init__()
        self.base = base
        for p in base.parameters():
            p.requires_grad_(False)
        self.A = nn.Parameter(torch.as_tensor(A, dtype=torch.float64).clone())
        self.B = nn.Parameter(torch.as_tensor(B, dtype=torch.float64).clone())
        self.scale = scale

    def forward(self, x):
        return self.base(x) + self.scale * ((x @ self.A.t()) @ self.B.t())


def module_of(layer, t):
    return {"q": (layer.self_attn, "q_proj"), "k": (layer.self_attn, "k_proj"),
            "v": (layer.self_attn, "v_proj"), "o": (layer.self_attn, "o_proj"),
            "gate": (layer.mlp, "gate_proj"), "up": (layer.mlp, "up_proj"),
            "down": (layer.mlp, "down_proj")}[t]


def attach(model, lora, scale):
    """Wraps every target of every layer; returns name -> per-layer adapter parameters."""
    for p in model.parameters():
        p.requires_grad_(False)
    adapters = {}
    for t in TARGETS:
        for li, layer in enumerate(model.layers):
            parent, attr = module_of(layer, t)
            m = LoraLinear(getattr(parent, attr), lora[t + "_A"][li], lora[t + "_B"][li], scale)
            setattr(parent, attr, m)
            adapters.setdefault(t + "_A", []).append(m.A)
            adapters.setdefault(t + "_B", []).append(m.B)
    return adapters


def stacked(adapters, grads=False):
    return {n: torch.stack([(p.grad if grads else p).detach() for p in ps]).numpy()
            for n, ps in adapters.items()}


def lora_block(rank, alpha, targets="all-linear"):
    """the config's lora group: adapters of rank and alpha on targets"""
    return f'lora = {{\n  rank = {rank};\n  alpha = {alpha};\n  targets = "{targets}";\n}};\n'


def read(path):
    d = {}
    with h5py.File(path, "r") as f:
        d["attrs"] = {k: float(v) for k, v in f.attrs.items()}
        for g in ("params", "final", "lora", "step0/lora_grads", "final_lora"):
            d[g] = {k: f[g][k][()] for k in f[g].keys()}
        d["step0/loss"] = float(f["step0"].attrs["loss"])
        for k in ("inputs", "targets"):
            d["step0/" + k] = f["step0"][k][()]
        for k in ("inputs", "targets", "loss", "lr", "grad_norm"):
            d["train/" + k] = f["train"][k][()]
    return d


PLAN = 1 + 1 + 1 + 14 + 2 + 14 + 1 + 1


def main():
    torch.set_default_dtype(torch.float64)
    return R.Tap(PLAN).run_all(run)


def run(tap):
    with tempfile.TemporaryDirectory(prefix="tsr-lora-") as tmp:
        data_dir, _, _, r = R.make_dataset(tmp, "plain")
        if not tap.ok(r.returncode == 0, "the dataset is written (tessera shard)"):
            tap.diag(r.stderr[-2000:])
            return
        cfg_path, out = os.path.join(tmp, "lora.cfg"), os.path.join(tmp, "lora.h5")
        R.write_config(cfg_path, CFG, tmp, data_dir)
        with open(cfg_path, "a") as f:
            f.write(lora_block(RANK, ALPHA, ",".join(TARGETS)))
        r = subprocess.run([R.REF_DUMP, cfg_path, out], capture_output=True, text=True,
                           env=R.run_env())
        if not tap.ok(r.returncode == 0 and os.path.exists(out), f"ref_dump exits 0 (rc "
                                                                f"{r.returncode})"):
            tap.diag((r.stdout + r.stderr)[-3000:])
            return
        d = read(out)
        a = d["attrs"]
        tc = R.torch_config(a)
        scale = ALPHA / RANK

        def fresh():
            model = R.torch_model(tc, a)
            model.load_tessera(d["params"])
            return model, attach(model, d["lora"], scale)

        # step 0: the whole global batch in microbatches, as ref_dump ran it
        model, adapters = fresh()
        loss, _, _ = R.global_batch_backward(model, d["step0/inputs"], d["step0/targets"],
                                             R.MICRO_BATCH)
        e = abs(loss - d["step0/loss"]) / abs(loss)
        tap.ok(e <= R.TOL_STEP0, f"step 0 loss {d['step0/loss']:.6f} vs torch {loss:.6f}: "
                                 f"rel err {e:.2e} <= {R.TOL_STEP0:g}")
        want = stacked(adapters, grads=True)
        for n in sorted(want):
            e = R.rel_err(d["step0/lora_grads"][n], want[n])
            tap.ok(e <= R.TOL_STEP0 and np.abs(want[n]).max() > 0,
                   f"step 0 gradient of {n} {tuple(want[n].shape)}: rel err {e:.2e} <= "
                   f"{R.TOL_STEP0:g}")

        # 10 steps: AdamW on the adapters only, with tessera's schedule and clipping
        model, adapters = fresh()
        params = [p for ps in adapters.values() for p in ps]
        opt = torch.optim.AdamW([{"params": params, "weight_decay": a["weight_decay"]}],
                                lr=a["lr"], betas=(a["beta1"], a["beta2"]), eps=a["eps"])
        losses, norms = [], []
        for s in range(int(a["steps"])):
            lr = a["lr"] * R.torch_gpt.lr_multiplier(R.SCHEDULES[int(a["schedule"])],
                                                     a["alpha_f"], s, int(a["warmup_steps"]),
                                                     int(a["steps"]))
            for g in opt.param_groups:
                g["lr"] = lr
            opt.zero_grad(set_to_none=False)
            loss, _, _ = R.global_batch_backward(model, d["train/inputs"][s],
                                                 d["train/targets"][s], R.MICRO_BATCH)
            norm = float(sum(float((p.grad ** 2).sum()) for p in params)) ** 0.5
            R.clip_grads(params, norm, a["grad_clip"])
            opt.step()
            losses.append(loss)
            norms.append(norm)
        el = R.rel_err(d["train/loss"], losses)
        en = R.rel_err(d["train/grad_norm"], norms)
        tap.ok(el <= R.TOL_TRAJ, f"losses of {len(losses)} steps: rel err {el:.2e} <= "
                                 f"{R.TOL_TRAJ:g} ({losses[0]:.4f} -> {losses[-1]:.4f})")
        tap.ok(en <= R.TOL_TRAJ, f"gradient norms of {len(norms)} steps: rel err {en:.2e} <= "
                                 f"{R.TOL_TRAJ:g}")
        final = stacked(adapters)
        for n in sorted(final):
            e = R.rel_err(d["final_lora"][n], final[n])
            tap.ok(e <= R.TOL_TRAJ, f"final {n} after {len(losses)} steps: rel err {e:.2e} <= "
                                    f"{R.TOL_TRAJ:g}")
        same = all(np.array_equal(d["final"][n], d["params"][n]) and
                   d["final"][n].tobytes() == d["params"][n].tobytes() for n in d["params"])
        tap.ok(same, f"the base's {len(d['params'])} tensors after {len(losses)} steps equal their "
                     f"start bit for bit (frozen)")
        moved = float(np.abs(d["final_lora"]["q_B"] - d["lora"]["q_B"]).max())
        tap.ok(moved > 1e-4, f"the adapters trained: q_B moved by up to {moved:.2e}")


if __name__ == "__main__":
    sys.exit(main())
