#!/usr/bin/env python3
"""test_mtp.py — tessera's multi-token prediction (model.num_nextn_predict_layers = D > 0:
DeepSeek-V3's MTP modules; src/model/mtp.h, docs/models.md "Multi-token prediction") against the
float64 PyTorch model of tests/reference/torch_mtp.py, written from the equations, with
test_reference.py's machinery: a random dataset written with `tessera shard`, build/tests/ref_dump's
step 0 and 20 AdamW steps.

Cases (2 layers of a Llama-style model: RMSNorm, RoPE, SwiGLU, GQA):
  mtp-doc:  D = 2 (depth 2 reads depth 1's output), an untied head, mtp_loss_weight 0.5, and
            model.attn_mask = "document" on a dataset with end-of-text tokens inside the rows
            (the depths' targets past a document's end are not counted);
  mtp-tied: D = 1, the head tied to the embedding, the default weight (0.3).
Checks per case: the step-0 logits, main loss and the gradient of every parameter (the modules'
own, and the embedding's and the head's that they add to) <= 1e-5 relative; the MTP loss of step
0 <= 1e-5; the 20 steps' lr, clipping, main losses <= 1e-5, MTP losses <= 1e-4 and gradient norms
<= 1e-4; the parameters after the last step <= 1e-4; and that MTP matters: without its modules
torch's step-0 gradient of the main model's first layer moves by more than 1e-4, and with the
document mask taken from the depths' targets only the MTP loss moves by more than 1e-4.

Run: TESTS=test_mtp bash tests/run.sh   (needs build/tests/ref_dump and build/tessera)
Prints TAP; exits 1 if a check fails, 77 (skip) without torch/h5py or the binaries.
"""
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_reference as R  # noqa: E402  (skips, exit 77, without torch, h5py or the binaries)
import h5py  # noqa: E402
import torch  # noqa: E402
import torch_llama  # noqa: E402
import torch_mtp  # noqa: E402
import ref_cases as RC  # noqa: E402
from tap import Tap  # noqa: E402

R.STEPS = 20  # (the dataset: one epoch of 20 steps of the global batch)
R.N_SAMPLES = R.STEPS * R.GLOBAL_BATCH
TOL_MTP_TRAIN = 1e-4  # the MTP losses of steps 1..: as the gradient norms (TOL_TRAJ's reasons)

BASE = dict(n_layer=2, d_model=32, n_head=4, n_kv_head=2, vocab_size=R.VOCAB, vocab_multiple=128,
            norm='"rmsnorm"', norm_eps=1e-5, pos='"rope"', rope_theta=10000.0, mlp='"swiglu"',
            intermediate_size=48, bias="false", init_std=R.INIT_STD)
CASES = [
    dict(name="mtp-doc", grad_clip=2.2, data="doc", seed=1234,
         model=dict(BASE, tie_embeddings="false", num_nextn_predict_layers=2,
                    mtp_loss_weight=0.5, attn_mask='"document"', eot_token=R.EOT)),
    dict(name="mtp-tied", grad_clip=2.2, seed=1234,
         model=dict(BASE, tie_embeddings="true", num_nextn_predict_layers=1)),
]


def torch_cfg(case):
    m = case["model"]
    return torch_llama.LlamaConfig(V=R.VOCAB, Vp=128, C=m["d_model"], L=m["n_layer"],
                                   NH=m["n_head"], KVH=m["n_kv_head"],
                                   hs=m["d_model"] // m["n_head"], F=m["intermediate_size"],
                                   norm_eps=m["norm_eps"], rope_theta=m["rope_theta"],
                                   rope_scaling=None, qkv_bias=False, qk_norm=False,
                                   tie_embeddings=m["tie_embeddings"] == "true")


def names_of(tc):
    return torch_llama.param_names(tc) + torch_mtp.MTP_NAMES


def checks(case):
    n = len(names_of(torch_cfg(case)))
    # ref_dump, the names; step 0: logits, pad columns, loss, grads, pad rows (two untied); the
    # MTP loss; MTP matters (1, 2 with the document mask); schedule and norms 4; MTP losses;
    # final: every tensor and the pad rows
    pads = 1 if case["model"]["tie_embeddings"] == "true" else 2
    return 2 + 3 + n + pads + 1 + 1 + ("data" in case) + 4 + 1 + n + pads


def read_layout(path, D):
    """ref_dump's /mtp_layout: (d, name) -> (block, offset, numel), and the blocks' rows"""
    out = {}
    with h5py.File(path, "r") as f:
        for d in range(D):
            for n, v in f["mtp_layout"][str(d)].items():
                out[(d, n)] = tuple(int(x) for x in v[()])
        out["PW"], out["PN"] = f["params"]["mtp_layer_w"].shape[1], f["params"]["mtp_layer_n"].shape[1]
        out["step0"] = float(f["step0"].attrs["mtp_loss"])
        out["train"] = f["train"]["mtp_loss"][()]
    return out


def model_of(case, tc, lay, d, eot, weight=None):
    m = case["model"]
    D = int(m["num_nextn_predict_layers"])
    w = float(m.get("mtp_loss_weight", 0.3)) if weight is None else weight
    model = torch_mtp.MTPLlama(tc, eot, D, w, lay).double()
    model.load_tessera(d["params"])
    return model


def first_layer_grad(model, d):
    model.zero_grad(set_to_none=False)
    R.global_batch_backward(model, d["step0/inputs"], d["step0/targets"], R.MICRO_BATCH)
    return model.tessera_tensors(grads=True)["qkvw"][0].numpy()


def check_matters(tap, name, case, tc, lay, d, eot):
    """MTP's gradient reaches the model (its first layer's gradient moves without the modules'
    loss), and (document mask) the depths' targets stop at a document's end"""
    with_mtp = first_layer_grad(model_of(case, tc, lay, d, eot), d)
    without = first_layer_grad(model_of(case, tc, lay, d, eot, weight=0.0), d)
    e = R.rel_err(without, with_mtp)
    tap.ok(e > R.MIN_SWITCH_EFFECT, f"{name}: the MTP loss moves the first layer's step-0 "
                                    f"gradient by {e:.1e} > {R.MIN_SWITCH_EFFECT:g}")
    if eot is None:
        return
    model = model_of(case, tc, lay, d, eot)
    inputs = torch.as_tensor(d["step0/inputs"], dtype=torch.long)
    targets = torch.as_tensor(d["step0/targets"], dtype=torch.long)
    with torch.no_grad():
        model(inputs, targets)
        masked = float(model.mtp_sum)
        keep = torch_mtp.depth_rows
        torch_mtp.depth_rows = lambda i, t, k, doc: keep(i, t, k, torch.zeros_like(doc))
        try:
            model(inputs, targets)
        finally:
            torch_mtp.depth_rows = keep
        crossing = float(model.mtp_sum)
    e = abs(crossing - masked) / abs(masked)
    tap.ok(e > R.MIN_SWITCH_EFFECT, f"{name}: counting the depths' targets past a document's "
                                    f"end moves the MTP loss by {e:.1e} > {R.MIN_SWITCH_EFFECT:g}")


def mtp_losses(model, d, first):
    """the MTP loss of each step the model's log holds from index first on: the sum of its
    microbatches' depth sums / D / the step's counted targets"""
    per = R.GLOBAL_BATCH // R.MICRO_BATCH
    out = []
    for s in range(int(d["attrs"]["steps"])):
        counted = int((d["train/targets"][s] >= 0).sum())
        out.append(sum(model.mtp_log[first + s * per:first + (s + 1) * per]) / model.D / counted)
    return out


def run_case(tap, case, tmp, data_dir):
    name, tc = case["name"], torch_cfg(case)
    names = names_of(tc)
    d = RC.ref_dump(tap, case, tmp, data_dir, names)
    if d is None:
        return
    D = int(case["model"]["num_nextn_predict_layers"])
    lay = read_layout(os.path.join(tmp, name + ".h5"), D)
    eot = R.EOT if "data" in case else None
    shapes = {n: tuple(d["params"][n].shape) for n in names}
    model = model_of(case, tc, lay, d, eot)
    R.check_step0(tap, name, d, tc, names, shapes, model)
    counted = int((d["step0/targets"] >= 0).sum())
    want = sum(model.mtp_log) / D / counted
    e = abs(lay["step0"] - want) / abs(want)
    tap.ok(e <= R.TOL_STEP0, f"{name}: step-0 MTP loss {lay['step0']:.7f} vs torch {want:.7f}: "
                             f"rel err {e:.2e} <= {R.TOL_STEP0:g}")
    check_matters(tap, name, case, tc, lay, d, eot)
    model = model_of(case, tc, lay, d, eot)
    hist = R.torch_train(model, d)
    R.check_schedule_and_norms(tap, name, d, hist)
    got = mtp_losses(model, d, 0)
    el = [abs(a - b) / abs(b) for a, b in zip(lay["train"], got)]
    tap.diag(f"{name}: MTP loss " + " ".join(f"{x:.5f}" for x in lay["train"]))
    tap.ok(max(el) <= TOL_MTP_TRAIN, f"{name}: {len(el)} steps' MTP losses, max rel err "
                                     f"{max(el):.2e} <= {TOL_MTP_TRAIN:g}")
    R.check_final(tap, name, d, tc, names, model)


def main():
    torch.set_default_dtype(torch.float64)
    tap = Tap(2 + sum(checks(c) for c in CASES))
    with tempfile.TemporaryDirectory(prefix="tsr-mtp-") as tmp:
        data = {}
        for dname, eot in (("plain", None), ("doc", R.EOT)):
            data_dir, _, _, r = R.make_dataset(tmp, dname, eot)
            if tap.ok(r.returncode == 0, f"tessera shard --mask writes the {dname} dataset"):
                data[dname] = data_dir
        for case in CASES:
            dname = case.get("data", "plain")
            tap.section(checks(case), f"{case['name']} stopped early", run_case,
                        tap, case, tmp, data.get(dname), when=dname in data)
    return tap.status()


if __name__ == "__main__":
    sys.exit(main())
