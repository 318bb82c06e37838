#!/usr/bin/env python3
"""test_deepseek_moe.py — DeepSeekMoE's router (docs/moe.md "DeepSeek's router") on tessera's fp32
CPU trainer against the float64 PyTorch reference (tests/reference/torch_moe.py's route_ds, written
from the equations of docs/moe.md, DeepSeek-V3's and V2's definitions).

Two tiny models, 3 layers of which the first is dense (model.moe_dense_layers = 1, DeepSeek's
first_k_dense_replace), 8 routed experts in 4 groups of 2, top 3 from the best 2 groups, an
ungated shared expert (DeepSeek's n_shared_experts x moe_intermediate_size):
  v3: sigmoid scores, noaux_tc (the correction bias routercorr added for the choice, a group
      ranked by its two best), normalised and scaled by 2.5, the bias moved after every step at
      rate 0.02 by the step's expert loads (auxiliary-loss-free balancing), a small aux loss over
      the scores normalised per row;
  v2: softmax scores, group_limited_greedy (a group ranked by its best), unnormalised, scaled by
      1.5, the aux and z losses.
With test_reference.py's data, optimizer and tolerances: ref_dump's step 0 (logits, loss, every
gradient <= 1e-5 relative; routercorr's gradient is 0 on both sides), 10 AdamW steps with the bias
update after each (losses <= 1e-5, norms and every final tensor, routercorr included, <= 1e-4),
the aux and z losses and every layer's expert loads per step, no routing near-tie (at the K-th
expert nor at the last chosen group); in v3 the bias has moved (|bias| = steps x rate for some
expert) and each piece (the bias, the groups, the scale) moves torch's logits by > 1e-4.

Run: TESTS=test_deepseek_moe bash tests/run.sh   (needs build/tests/ref_dump and build/tessera)
Prints TAP; exits 1 if a check fails, 77 without torch/h5py or the binaries.
"""
import dataclasses
import sys
import tempfile

import test_reference as R  # the harness (skips with 77 without torch, h5py or the binaries)
import ref_cases as RC  # noqa: E402
from test_reference import np, torch, rel_err, torch_moe  # noqa: E402

BASE = dict(n_layer=3, d_model=32, n_head=4, n_kv_head=2, vocab_size=R.VOCAB, vocab_multiple=128,
            norm='"rmsnorm"', norm_eps=1e-5, pos='"rope"', rope_theta=10000.0, mlp='"swiglu"',
            intermediate_size=48, bias="false", tie_embeddings="false", init_std=R.INIT_STD,
            moe_experts=8, moe_top_k=3, moe_intermediate_size=16, moe_shared_size=32,
            moe_dense_layers=1, moe_n_group=4, moe_topk_group=2)
# The routing margin (test_reference.py's TOL_MARGIN), as test_gptoss.py has it: with 8 experts
# over ~1300 routed rows a layer the smallest gap at the K-th choice lands between 1e-5 and 1e-4
# for most seeds (v2 seed 3: 5.3e-5); tessera's and torch's scores differ by <= 1e-7, so 1e-5 keeps
# 100x. (v3 seed 4: > 1e-4.)
R.TOL_MARGIN = 1e-5
CASES = [
    dict(name="v3", grad_clip=2.5, seed=4,
         model=dict(BASE, moe_scoring='"sigmoid"', moe_topk_method='"noaux_tc"',
                    moe_norm_topk="true", moe_routed_scaling=2.5, moe_bias_update_rate=0.02,
                    moe_aux_loss_coef=0.001, moe_z_loss_coef=0.0)),
    dict(name="v2", grad_clip=2.5, seed=3,
         model=dict(BASE, moe_scoring='"softmax"', moe_topk_method='"group_limited_greedy"',
                    moe_norm_topk="false", moe_routed_scaling=1.5, moe_aux_loss_coef=0.01,
                    moe_z_loss_coef=0.001)),
]


def torch_config(a, m):
    """The torch model of the dump's attributes a and the case's model keys m (the router's keys
    are not among ref_dump's attributes)."""
    i = lambda k: int(round(a[k]))  # noqa: E731
    unq = lambda v: v.strip('"')  # noqa: E731
    return torch_moe.MoEConfig(
        V=i("V"), Vp=i("Vp"), C=i("C"), L=i("L"), NH=i("NH"), KVH=i("KVH"), hs=i("hs"),
        F=i("F"), norm_eps=a["norm_eps"], rope_theta=a["rope_theta"], rope_scaling=None,
        qkv_bias=False, qk_norm=False, tie_embeddings=False, E=i("E"), K=i("K"), FE=i("FE"),
        S=i("S"), moe_every=i("moe_every"), norm_topk=bool(a["moe_norm_topk"]),
        aux_coef=a["moe_aux_loss_coef"], z_coef=a["moe_z_loss_coef"],
        sigmoid=unq(m["moe_scoring"]) == "sigmoid", method=unq(m["moe_topk_method"]),
        n_group=m["moe_n_group"], topk_group=m["moe_topk_group"],
        scale=m["moe_routed_scaling"], bias_rate=m.get("moe_bias_update_rate", 0.0),
        dense_layers=m["moe_dense_layers"])


def model_of(tc, params):
    model = torch_moe.MoELlama(tc).double()
    model.load_tessera(params)
    return model


def step0_logits(tc, params, inputs, **change):
    model = model_of(dataclasses.replace(tc, **change), params)
    with torch.no_grad():
        return model(torch.as_tensor(inputs[:R.MICRO_BATCH], dtype=torch.long))[0]


def check_v3(tap, tc, d):
    """the bias moved, by whole steps of the rate, and each piece matters at the final weights"""
    final, inputs = d["final"], d["step0/inputs"]
    bias = final["routercorr"]
    steps = int(d["attrs"]["steps"])
    top = float(np.abs(bias).max())
    k = bias.astype(np.float64) / tc.bias_rate
    whole = float(np.abs(k - np.round(k)).max())
    base = step0_logits(tc, final, inputs)
    fx = {"the correction bias = 0": rel_err(step0_logits(
              tc, dict(final, routercorr=np.zeros_like(bias)), inputs), base),
          "no groups": rel_err(step0_logits(tc, final, inputs, n_group=1, topk_group=1), base),
          "scale 1": rel_err(step0_logits(tc, final, inputs, scale=1.0), base)}
    tap.ok(0 < top <= steps * tc.bias_rate + 1e-6 and whole < 1e-4 and
           all(e > R.MIN_SWITCH_EFFECT for e in fx.values()),
           f"v3: the bias moved (max |bias| {top:.4g} <= {steps} steps x {tc.bias_rate}, every "
           f"element a whole number of steps to {whole:.1e}); each piece "
           f"moves torch's logits by > {R.MIN_SWITCH_EFFECT:g}: "
           + ", ".join(f"{w} {e:.1e}" for w, e in fx.items()))


def run_case(tap, case, tmp, data_dir):
    name = case["name"]
    out, r, ok = RC.run_ref_dump(case, tmp, data_dir)
    if not RC.dump_ok(tap, name, r, ok):
        return
    d = R.read_dump(out)
    tc = torch_config(d["attrs"], case["model"])
    names = torch_moe.param_names(tc)
    tap.ok(sorted(d["params"]) == sorted(names),
           f"{name}: the dump holds the model's tensors {', '.join(names)}")
    model = torch_moe.MoELlama(tc).double()
    shapes = {n: tuple(t.shape) for n, t in model.tessera_tensors().items()}
    _, moe0 = R.check_step0(tap, name, d, tc, names, shapes, model)
    margin0 = model.min_margin()
    model = model_of(tc, d["params"])
    hist = R.torch_train(model, d, lambda mdl, moe: mdl.balance(moe))
    R.check_moe_run(tap, name, d, moe0, hist, min(margin0, model.min_margin()))
    R.check_schedule_and_norms(tap, name, d, hist)
    R.check_final(tap, name, d, tc, names, model)
    if name == "v3":
        check_v3(tap, tc, d)


def n_names(case):
    m = case["model"]
    return len(torch_moe.param_names(torch_moe.MoEConfig(
        V=1, Vp=1, C=1, L=m["n_layer"], NH=1, KVH=1, hs=1, F=1, norm_eps=0, rope_theta=0,
        rope_scaling=None, qkv_bias=False, qk_norm=False, tie_embeddings=False, E=1, K=1, FE=1,
        S=1, moe_every=1, norm_topk=True, aux_coef=0, z_coef=0,
        method=m["moe_topk_method"].strip('"'), dense_layers=m["moe_dense_layers"])))


def n_checks(case):
    # ref_dump 1, names 1, step 0 (3 + names + 2 pad rows), moe run 3, schedule 4,
    # final (names + 2 pad rows), v3's bias and pieces 1
    n = n_names(case)
    return 1 + 1 + 3 + n + 2 + 3 + 4 + n + 2 + (case["name"] == "v3")


def main():
    torch.set_default_dtype(torch.float64)
    total = sum(n_checks(c) for c in CASES)
    tap = R.Tap(total)
    with tempfile.TemporaryDirectory(prefix="tsr-dsmoe-") as tmp:
        data_dir, _, _, r = R.make_dataset(tmp, "plain")
        if r.returncode:
            tap.diag((r.stdout + r.stderr)[-2000:])
        for c in CASES:
            tap.section(n_checks(c), f"{c['name']} stopped early", run_case, tap, c, tmp,
                        data_dir, when=r.returncode == 0)
    return tap.status()


if __name__ == "__main__":
    sys.exit(main())
