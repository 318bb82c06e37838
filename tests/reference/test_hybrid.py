#!/usr/bin/env python3
"""test_hybrid.py — tessera's hybrid linear-attention decoder (model.layer_types with
"linear_attention" layers: Hugging Face Qwen3-Next's Gated DeltaNet in a block's attention place;
docs/deltanet.md "Wiring") against the float64 PyTorch model of tests/reference/torch_hybrid.py
(torch_llama.py's blocks and torch_deltanet.py's layer), with test_reference.py's machinery
(ref_cases.py): a random dataset written with `tessera shard`, build/tests/ref_dump's step 0 and 10
AdamW steps.

Cases (4 layers, 3 linear + 1 full, Qwen3-Next's 3 : 1; grouped DeltaNet heads HK 2, HV 4;
QK-norm on the full layer):
  hybrid-doc:  the full layer with Qwen3-Next's gated attention (model.attn_output_gate: its
               output times sigmoid(gate) before o_proj, tensor attngatew), and
               model.attn_mask = "document" on a dataset with end-of-text tokens inside the rows
               (packed documents: torch runs the DeltaNet on each document alone, so tessera's
               packed rows must restart the convolution and the state at each document);
  hybrid-ckpt: block activation checkpointing on the first 2 layers (a linear layer recomputes its
               DeltaNet before its backward), the full layer first (a 1 : 3 pattern repeated).
Checks per case: the step-0 logits, loss and the gradient of every parameter (every DeltaNet
tensor, stacked over the linear layers only; the attention tensors over the full one) <= 1e-5
relative; the 10 steps' lr, clipping, losses <= 1e-5 and gradient norms <= 1e-4; the parameters
after the last step <= 1e-4 (test_reference.py's tolerances and their reasons); with documents
also that the document mask changes the logits (torch without it differs), and, in torch alone,
that a packed row's logits equal each of its documents run alone.

Run: TESTS=test_hybrid bash tests/run.sh   (needs build/tests/ref_dump and build/tessera)
Prints TAP; exits 1 if a check fails, 77 (skip) without torch/h5py or the binaries.

Not a test: `test_hybrid.py --drift STD` prints, for the hybrid-ckpt case at init_std STD, the
step-0 gradient error of every tensor (tessera fp32 and torch float32 against float64) and the
10-step trajectory's drift from float64 of tessera fp32, torch float32 (the DeltaNet core in
float32 too) and float64 runs whose initial weights are perturbed by 6e-8 relative noise (the
model's own conditioning): docs/deltanet.md "Tests".
"""
import functools
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_reference as R  # noqa: E402  (skips, exit 77, without torch, h5py or the binaries)
import torch  # noqa: E402
import torch_hybrid as H  # noqa: E402
import torch_llama  # noqa: E402
import ref_cases as RC  # noqa: E402

# Qwen3-Next's initializer_range. At test_reference.py's 0.1 the 10-step trajectory drifts to
# 1e-3 .. 1e-1 from float64: the model's conditioning (a float64 run from weights 6e-8 apart drifts
# as far; --drift 0.1 shows it), not tessera's fp32: docs/deltanet.md "Tests".
INIT_STD = 0.02
HYBRID = dict(n_layer=4, d_model=24, n_head=4, n_kv_head=2, head_dim=8, vocab_size=R.VOCAB,
              vocab_multiple=128, norm='"rmsnorm"', norm_eps=1e-6, pos='"rope"',
              rope_theta=10000.0, mlp='"swiglu"', intermediate_size=40, bias="false",
              qk_norm="true", tie_embeddings="false", init_std=INIT_STD,
              linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8,
              linear_value_head_dim=6, linear_conv_kernel_dim=4)
LINEAR3 = '"linear_attention, linear_attention, linear_attention, full_attention"'
CASES = [
    dict(name="hybrid-doc", grad_clip=1.3, data="doc", seed=1234,
         model=dict(HYBRID, layer_types=LINEAR3, attn_mask='"document"', eot_token=R.EOT,
                    attn_output_gate="true"),
         linear=(True, True, True, False), gate=True),
    dict(name="hybrid-ckpt", grad_clip=1.4, seed=1234,
         model=dict(HYBRID, layer_types='"full_attention, linear_attention, linear_attention, '
                                        'linear_attention"',
                    activation_checkpointing='"block"', activation_checkpointing_layers=2),
         linear=(False, True, True, True)),
]


def torch_cfg(case):
    m = case["model"]
    return H.HybridConfig(V=R.VOCAB, Vp=128, C=m["d_model"], L=m["n_layer"], NH=m["n_head"],
                          KVH=m["n_kv_head"], hs=m["head_dim"], F=m["intermediate_size"],
                          norm_eps=m["norm_eps"], rope_theta=m["rope_theta"], rope_scaling=None,
                          qkv_bias=False, qk_norm=True, tie_embeddings=False,
                          linear=case["linear"], HKl=m["linear_num_key_heads"],
                          HVl=m["linear_num_value_heads"], dkl=m["linear_key_head_dim"],
                          dvl=m["linear_value_head_dim"], Kc=m["linear_conv_kernel_dim"],
                          gate=case.get("gate", False))


def checks(case):
    n = len(H.param_names(torch_cfg(case)))
    # ref_dump, the names; step 0: logits, pad columns, loss, grads, two pad rows; the document
    # mask matters; schedule_and_norms 4; final: every tensor and two pad rows
    return 2 + 3 + n + 2 + ("data" in case) + 4 + n + 2


def check_doc_mask_matters(tap, name, d, tc, eot, logits):
    """the document case: torch without the mask differs from its step-0 logits by > 1e-3"""
    plain = RC.model_of(H.Hybrid, tc, None, d["params"])
    with torch.no_grad():
        other, _ = plain(torch.as_tensor(d["step0/inputs"][:R.MICRO_BATCH]))
    e = R.rel_err(other.numpy(), logits[:R.MICRO_BATCH].numpy())
    tap.ok(e > 1e-3, f"{name}: the document mask matters: torch without it differs by {e:.1e}")


def drift_model(tc, d, dt, eps=0.0, seed=0):
    """the torch model in dt (its DeltaNet core too) at the dump's initial weights, perturbed by
    eps relative Gaussian noise"""
    torch.set_default_dtype(dt)
    m = H.Hybrid(tc).to(dt)
    m.load_tessera(d["params"])
    for mod in m.modules():
        if isinstance(mod, H.DeltaNet):
            mod.kw["form"] = functools.partial(mod.kw["form"], dtype=dt)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in m.parameters():
            p.mul_(1 + eps * torch.randn(p.shape, generator=g, dtype=torch.float64).to(dt))
    return m


def drift_step0(tc, d, names):
    grads = {}
    for dt in (torch.float64, torch.float32):
        m = drift_model(tc, d, dt)
        R.global_batch_backward(m, d["step0/inputs"], d["step0/targets"], R.MICRO_BATCH)
        grads[dt] = {k: v.double().numpy() for k, v in m.tessera_tensors(grads=True).items()}
    g64, g32 = grads[torch.float64], grads[torch.float32]
    for n in names:
        print(f"step-0 grad {n:9s} rel err: tessera fp32 {R.rel_err(d['step0/grads'][n], g64[n]):.1e}"
              f", torch float32 {R.rel_err(g32[n], g64[n]):.1e}")


def drift_trajectories(tc, d):
    h64 = R.torch_train(drift_model(tc, d, torch.float64), d)
    runs = [("tessera fp32", list(zip(d["train/loss"], d["train/grad_norm"])))]
    runs += [(lab, [h[:2] for h in R.torch_train(drift_model(tc, d, *a), d)]) for lab, a in (
        ("torch float32", (torch.float32,)), ("float64, w(1+6e-8 n) s1", (torch.float64, 6e-8, 1)),
        ("float64, w(1+6e-8 n) s2", (torch.float64, 6e-8, 2)))]
    for lab, h in runs:
        for i, what in ((0, "loss"), (1, "grad norm")):
            print(f"{lab:24s} {what:9s} rel diff from float64 per step: " +
                  " ".join(f"{abs(x[i] - r[i]) / abs(r[i]):.1e}" for x, r in zip(h, h64)))


def drift(std):
    """the --drift report (no checks)"""
    torch.set_default_dtype(torch.float64)
    case = dict(CASES[1], model=dict(CASES[1]["model"], init_std=std))
    with tempfile.TemporaryDirectory(prefix="tsr-hybrid-drift-") as tmp:
        data_dir, _, _, _ = R.make_dataset(tmp, "plain", None)
        cfg_path, out = os.path.join(tmp, "c.cfg"), os.path.join(tmp, "c.h5")
        R.write_config(cfg_path, case, tmp, data_dir)
        R.subprocess.run([*R.WRAP, R.REF_DUMP, cfg_path, out], check=True, env=R.run_env())
        d = R.read_dump(out)
    tc = torch_cfg(case)
    drift_step0(tc, d, H.param_names(tc))
    drift_trajectories(tc, d)
    return 0


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--drift":
        return drift(float(sys.argv[2]))
    mixer = RC.Mixer(H.Hybrid, torch_cfg, H.param_names, check_doc_mask_matters)
    return RC.main("tsr-hybrid-", mixer, "a hybrid model", CASES, checks)


if __name__ == "__main__":
    sys.exit(main())
