#!/usr/bin/env python3
"""test_hf_qwen3next.py — Hugging Face import and export of Qwen3NextForCausalLM (model_type
"qwen3_next"; issue 68 item 3; docs/hf.md "Qwen3-Next").

Fixtures: hf_fixture_qwen3next.py's, tiny directories written BY SCRIPT from the published
formats (transformers is not on this machine) with the logits of a float64 forward written from
modeling_qwen3_next.py: 3 Gated DeltaNet + 1 gated full layer with a MoE of a gated shared expert
in every other layer (full_attention_interval, F32), and a full layer first with layer_types,
every layer MoE, a tied head, BF16. For each:
  - `tessera ckpt import DIR OUT.h5` (stderr says the (1 + w) norms were imported as w + 1);
  - ref_dump --init-from OUT.h5: tessera's fp32 logits on the fixture's rows against the float64
    ones, max |diff| <= 1e-5 x max(1, max |logit|);
  - `tessera-train --init-from DIR` with a recipe WITHOUT a model block: step 1's loss = the mean
    cross-entropy of the fixture's logits (rel <= 1e-5);
  - `tessera ckpt export --format hf` of OUT.h5 (--dtype as stored): every tensor's bytes identical
    to the fixture's (in_proj_qkvz, in_proj_ba and q_proj split and joined back, the norms through
    + 1 then - 1), and its config.json imported again gives the same checkpoint bit for bit.
Then bad input, exit 2 with nothing written, naming what is wrong: a tensor of the wrong shape
(in_proj_qkvz), mlp_only_layers not empty, a layer type tessera does not hold, rope_scaling yarn.
Run: TESTS=hf_qwen3next bash tests/run.sh   (needs `make`). TAP; exit 1 on failure, 77 without
torch.
"""
import json
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_hf_export as hfe  # noqa: E402  (skips with 77 without torch/h5py or the programs)
import test_hf_families as fam  # noqa: E402
import hf_fixture_qwen3next as fxm  # noqa: E402
import h5py  # noqa: E402
import numpy as np  # noqa: E402
from tap import Tap  # noqa: E402

CHECKS_PER_FIXTURE = 5
N_REFUSALS = 4


def ckpt_params(path):
    with h5py.File(path, "r") as f:
        g = f["model"] if "model" in f else f
        out = {}
        g.visititems(lambda n, o: out.__setitem__(n, o[()]) if isinstance(o, h5py.Dataset) else None)
        return out


def import_refusals(tap, tmp, cases):
    """Each (what, directory, needles) of cases: `ckpt import` exits 2 naming every needle and
    writes no checkpoint (test_hf_qwen35.py too)."""
    for what, d, needles in cases:
        out_h5 = os.path.join(tmp, "refused.h5")
        rc, out = hfe.run([hfe.TESSERA, "ckpt", "import", d, out_h5])
        missing = [n for n in needles if n not in out]
        tap.ok(rc == 2 and not missing and not os.path.exists(out_h5),
               f"refused at import: {what}: exit {rc} (want 2), names {needles} (missing "
               f"{missing}), no checkpoint written")
        if missing or rc != 2:
            tap.diag(out[-800:])


def export_diff(tap, name, fdir, ck, tmp, dtype, skipped=()):
    """`ckpt export --format hf` of ck in the fixture's dtype, against the fixture's tensors
    (those in skipped left out): (rc, export dir, fixture tensors, differing names, extra names);
    test_hf_qwen35.py too."""
    exp = os.path.join(tmp, name + "_export")
    dt = "bf16" if dtype == "BF16" else "fp32"
    rc, out = hfe.run([hfe.TESSERA, "ckpt", "export", "--format", "hf", "--dtype", dt,
                       "--tokenizer", "none", ck, exp])
    if rc:
        tap.diag(out[-1500:])
    a = {n: v for n, v in fam.st_of(fdir).items() if n not in skipped}
    b = fam.st_of(exp) if rc == 0 else {}
    diff = sorted(n for n in a if n not in b or a[n] != b[n])
    return rc, exp, a, diff, sorted(set(b) - set(a))


def init_from_ok(tap, name, fdir, tmp, data, toks, want):
    """A recipe without a model block --init-from the directory: step 1's loss equals the
    fixture's cross-entropy (test_hf_qwen35.py too)."""
    cfg, run_dir = os.path.join(tmp, name + "_bare.cfg"), os.path.join(tmp, name + "_bare")
    fam.bare_cfg(cfg, run_dir, data)
    rc, out = hfe.run(hfe.MPIRUN + [hfe.TRAIN, "--config", cfg, "--init-from", fdir])
    s = hfe.step1(run_dir) if rc == 0 else None
    ref = fam.xent_of(want, toks)
    e = abs(s["loss"] - ref) / ref if s else float("inf")
    if rc:
        tap.diag(out[-1500:])
    tap.ok(e <= fam.TOL, f"{name}: a recipe without a model block --init-from the directory: "
                         f"step-1 loss {s and s['loss']} vs the fixture's {ref:.8f}: rel err {e:.2e}")


def run_fixture(tap, fx, fdir, tmp):
    name = fx["name"]
    meta = json.load(open(os.path.join(fdir, "fixture.json")))
    toks = np.array(meta["tokens"])
    want = np.load(os.path.join(fdir, "logits.npy"))
    data = fam.dataset(tmp, name, toks)
    sets = dict(meta["sets"], **fam.run_keys(tmp, name, data))

    ck = os.path.join(tmp, name + ".h5")
    rc, out = hfe.run([hfe.TESSERA, "ckpt", "import", fdir, ck])
    said = "(1 + w)" in out and "w + 1" in out
    if rc or not said:
        tap.diag(out[-1500:])
    tap.ok(rc == 0 and said, f"{name}: tessera ckpt import: exit {rc}, says the (1 + w) norms "
                             f"became w + 1")

    rc, out, got = fam.ref_logits(tmp, name, ck, sets)
    good, err = fam.logits_ok(got, want) if got is not None else (False, float("inf"))
    if rc:
        tap.diag(out[-1500:])
    tap.ok(good, f"{name}: tessera's fp32 logits from the import vs the float64 forward of "
                 f"Qwen3NextForCausalLM: max |diff| {err:.2e} <= {fam.TOL:g} x max(1, |logit|)")

    init_from_ok(tap, name, fdir, tmp, data, toks, want)

    rc, exp, a, diff, extra = export_diff(tap, name, fdir, ck, tmp, fx["dtype"])
    tap.ok(rc == 0 and a and not diff and not extra,
           f"{name}: import -> export: the fixture's {len(a)} tensors byte for byte (dtype, shape, "
           f"data); different: {diff[:3]}, extra: {extra[:3]}")

    ck2 = os.path.join(tmp, name + "_again.h5")
    rc2, out2 = hfe.run([hfe.TESSERA, "ckpt", "import", exp, ck2]) if rc == 0 else (-1, "")
    p1 = ckpt_params(ck)
    p2 = ckpt_params(ck2) if rc2 == 0 else {}
    same = p1.keys() == p2.keys() and all(np.array_equal(p1[k], p2[k]) for k in p1)
    if rc2:
        tap.diag(out2[-1500:])
    tap.ok(rc2 == 0 and same, f"{name}: import -> export -> import: the same {len(p1)} "
                              f"checkpoint datasets bit for bit")


def replace_tensor(tmp, src, name, tensor, value):
    """A copy of src (into tmp/name) whose tensor's (dtype, shape, raw bytes) are value(dtype,
    shape, raw)'s (test_hf_deepseek.py too)."""
    d = os.path.join(tmp, name)
    shutil.copytree(src, d)
    p = os.path.join(d, "model.safetensors")
    _, meta, names, ents = hfe.parse_st(p)
    tensors = []
    for n in names:
        dt, shp, raw = ents[n]
        if n == tensor:
            dt, shp, raw = value(dt, shp, raw)
        tensors.append((n, dt, shp, raw))
    from hf_fixture import write_safetensors
    write_safetensors(p, tensors, meta)
    return d


def with_tensor(tmp, src, name, tensor, shape):
    """src with tensor replaced by zeros of shape (F32 fixtures)."""
    return replace_tensor(tmp, src, name, tensor,
                          lambda dt, shp, raw: (dt, shape, bytes(4 * int(np.prod(shape)))))


def refusals(tap, tmp, src):
    """Bad input: exit 2, naming the tensor or key, no checkpoint written."""
    t = "model.layers.0.linear_attn.in_proj_qkvz.weight"
    cases = [
        (f"{t} of the wrong shape", with_tensor(tmp, src, "q_shape", t, (10, 32)), [t, "[10, 32]"]),
        ("mlp_only_layers = [1]", fam.edited(tmp, src, "q_mlponly", mlp_only_layers=[1]),
         ["mlp_only_layers"]),
        ("layer_types with sliding_attention",
         fam.edited(tmp, src, "q_types",
                    layer_types=["linear_attention", "sliding_attention", "linear_attention",
                                 "full_attention"]),
         ["layer_types", "linear_attention"]),
        ("rope_scaling yarn", fam.edited(tmp, src, "q_yarn", rope_scaling={"rope_type": "yarn",
                                                                            "factor": 4.0}),
         ["rope_scaling"]),
    ]
    import_refusals(tap, tmp, cases)


def main():
    tap = Tap(CHECKS_PER_FIXTURE * len(fxm.FIXTURES) + N_REFUSALS)
    if not os.access(fam.REF_DUMP, os.X_OK):
        hfe.skip(f"{fam.REF_DUMP} is missing (run make first)")
    with tempfile.TemporaryDirectory(prefix="tessera-hfq3n.") as tmp:
        dirs = fxm.make_all(os.path.join(tmp, "fx"))
        for fx in fxm.FIXTURES:
            tap.section(CHECKS_PER_FIXTURE, f"{fx['name']} stopped early", run_fixture,
                        tap, fx, dirs[fx["name"]], tmp)
        tap.section(N_REFUSALS, "refusals stopped early", refusals, tap, tmp, dirs[fxm.FIXTURES[0]["name"]])
    return 1 if tap.failed else 0


if __name__ == "__main__":
    sys.exit(main())
