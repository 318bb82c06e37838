#!/usr/bin/env python3
"""test_mla.py — tessera's multi-head latent attention (model.kv_lora_rank > 0: DeepSeek-V2/V3's
MLA in every layer's attention place; src/model/mixer_mla.c, docs/models.md "DeepSeek") against
the float64 PyTorch model of tests/reference/torch_mla.py, with test_reference.py's machinery (ref_cases.py): a
random dataset written with `tessera shard`, build/tests/ref_dump's step 0 and 10 AdamW steps.

Cases (2 layers, 4 heads of query/key 8 + 8 (nope + rope) and value 6, a latent of 16, SwiGLU):
  mla-doc:  the queries' low-rank path (q_lora_rank 12, V3's), rope_interleave (DeepSeek's
            checkpoints), YaRN over the rope part with mscale 0.9 and mscale_all_dim 0.6 (cos and
            sin times m(0.9) / m(0.6), the scores times m(0.6)^2: DeepSeek's softmax scale), and
            model.attn_mask = "document" on a dataset with end-of-text tokens inside the rows;
  mla-ckpt: q_proj (no low-rank path: V2-Lite's), rotate-half pairs, no scaling, block activation
            checkpointing on layer 0 (its MLA reruns before its backward).
Checks per case: the step-0 logits, loss and the gradient of every parameter <= 1e-5 relative; the
10 steps' lr, clipping, losses <= 1e-5 and gradient norms <= 1e-4; the parameters after the last
step <= 1e-4 (test_reference.py's tolerances and their reasons); in mla-doc, each setting it turns on
(the interleaved pairs, YaRN, mscale_all_dim's scale, the document mask, the latent norms' own
eps 1e-6 against model.norm_eps, 1e-3 in mla-doc) moves torch's step-0 logits by more than 1e-4 when taken away, so the comparison sees it.
In torch alone (float64, 1e-12): the interleaved RoPE of transformers (de-interleave, then
rotate_half) gives the scores of the pairs (2i, 2i+1) turned in place, as tessera turns them; a
packed row of documents gives each document's logits alone.

Run: TESTS=test_mla bash tests/run.sh   (needs build/tests/ref_dump and build/tessera)
Prints TAP; exits 1 if a check fails, 77 (skip) without torch/h5py or the binaries.
"""
import dataclasses
import functools
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_reference as R  # noqa: E402  (skips, exit 77, without torch, h5py or the binaries)
import torch  # noqa: E402
import torch_llama  # noqa: E402
import torch_mla as M  # noqa: E402
import ref_cases as RC  # noqa: E402

MLA = dict(n_layer=2, d_model=32, n_head=4, vocab_size=R.VOCAB, vocab_multiple=128,
           norm='"rmsnorm"', norm_eps=1e-5, pos='"rope"', rope_theta=10000.0, mlp='"swiglu"',
           intermediate_size=48, bias="false", tie_embeddings="false", init_std=R.INIT_STD,
           kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=6)
YARN = dict(rope_scaling='"yarn"', rope_factor=4.0, rope_original_max_pos=64, rope_beta_fast=32.0,
            rope_beta_slow=1.0, rope_mscale=0.9, rope_mscale_all_dim=0.6)
CASES = [
    dict(name="mla-doc", grad_clip=2.2, data="doc", seed=1234,
         model=dict(MLA, q_lora_rank=12, rope_interleave="true", attn_mask='"document"',
                    eot_token=R.EOT, norm_eps=1e-3, **YARN)),
    dict(name="mla-ckpt", grad_clip=2.2, seed=1234,
         model=dict(MLA, activation_checkpointing='"block"', activation_checkpointing_layers=1)),
]


def torch_cfg(case):
    m = case["model"]
    yarn = None
    if m.get("rope_scaling") == '"yarn"':
        yarn = torch_llama.YarnScaling(m["rope_factor"], m["rope_beta_fast"], m["rope_beta_slow"],
                                       m["rope_original_max_pos"], True)
    return M.MLAConfig(V=R.VOCAB, Vp=128, C=m["d_model"], L=m["n_layer"], NH=m["n_head"],
                       KVH=m["n_head"], hs=m["qk_rope_head_dim"], F=m["intermediate_size"],
                       norm_eps=m["norm_eps"], rope_theta=m["rope_theta"], rope_scaling=yarn,
                       qkv_bias=False, qk_norm=False, tie_embeddings=False,
                       qr=m.get("q_lora_rank", 0), kvr=m["kv_lora_rank"],
                       dn=m["qk_nope_head_dim"], dr=m["qk_rope_head_dim"], dv=m["v_head_dim"],
                       interleave=m.get("rope_interleave") == "true",
                       mscale=m.get("rope_mscale", 0.0),
                       mscale_all_dim=m.get("rope_mscale_all_dim", 0.0))


def effects(tc):
    """the settings of a case taken away one at a time (check_settings_matter; the document mask
    and the latent norms' eps apart, in there)"""
    out = {}
    if tc.interleave:
        out["the interleaved RoPE pairs"] = dict(interleave=False)
    if tc.rope_scaling is not None:
        out["YaRN"] = dict(rope_scaling=None)
    if tc.mscale_all_dim:
        out["mscale_all_dim (scores and cos/sin)"] = dict(mscale_all_dim=0.0, mscale=0.0)
    return out


def has_settings(case):
    """the case turns on something check_settings_matter takes away: mla-doc does"""
    return "data" in case


def checks(case):
    n = len(M.param_names(torch_cfg(case)))
    # ref_dump, the names; step 0: logits, pad columns, loss, grads, two pad rows; the settings
    # matter; schedule_and_norms 4; final: every tensor and two pad rows
    return 2 + 3 + n + 2 + has_settings(case) + 4 + n + 2


model_of = functools.partial(RC.model_of, M.DeepSeek)


def check_interleave_torch(tap):
    """torch alone: transformers' interleaved RoPE (de-interleave, rotate_half) gives the scores
    of the pairs (2i, 2i+1) turned in place by frequency i"""
    g = torch.Generator().manual_seed(3)
    T, dr = 7, 8
    q, k = (torch.randn(1, 2, T, dr, generator=g, dtype=torch.float64) for _ in range(2))
    inv = torch_llama.rope_inv_freq(dr, 10000.0)
    cos, sin = torch_llama.rope_cos_sin(torch.arange(T)[None], inv)
    hf = M.rope(q, cos, sin, True) @ M.rope(k, cos, sin, True).transpose(-1, -2)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv          # (T, dr/2)

    def in_place(x):
        a, b = x[..., 0::2], x[..., 1::2]
        out = torch.empty_like(x)
        out[..., 0::2] = a * ang.cos() - b * ang.sin()
        out[..., 1::2] = b * ang.cos() + a * ang.sin()
        return out
    mine = in_place(q) @ in_place(k).transpose(-1, -2)
    plain = M.rope(q, cos, sin, False) @ M.rope(k, cos, sin, False).transpose(-1, -2)
    e, other = R.rel_err(mine.numpy(), hf.numpy()), R.rel_err(plain.numpy(), hf.numpy())
    tap.ok(e <= 1e-12 and other > 1e-3,
           f"torch: the interleaved RoPE's scores = the pairs (2i, 2i+1) turned in place: rel err "
           f"{e:.1e} <= 1e-12 (rotate-half pairs differ by {other:.1e})")


def check_settings_matter(tap, name, d, tc, eot, logits):
    """each setting of the case, taken away alone, moves torch's step-0 logits by > 1e-4"""
    inputs = torch.as_tensor(d["step0/inputs"], dtype=torch.long)
    got = {}
    for what, change in effects(tc).items():
        other = model_of(dataclasses.replace(tc, **change), eot, d["params"])
        with torch.no_grad():
            got[what] = R.rel_err(other(inputs)[0].numpy(), logits.numpy())
    if eot is not None:
        with torch.no_grad():
            got["the document mask"] = R.rel_err(model_of(tc, None, d["params"])(inputs)[0].numpy(),
                                                 logits.numpy())
    other = model_of(tc, eot, d["params"])  # the latents' norms with model.norm_eps, not 1e-6
    for ly in other.layers:
        ly.self_attn.kv_a_layernorm.eps = tc.norm_eps
        if tc.qr:
            ly.self_attn.q_a_layernorm.eps = tc.norm_eps
    with torch.no_grad():
        got[f"the latent norms' eps {tc.norm_eps:g}"] = R.rel_err(other(inputs)[0].numpy(),
                                                                 logits.numpy())
    tap.ok(got and all(e > R.MIN_SWITCH_EFFECT for e in got.values()),
           f"{name}: each setting moves the step-0 logits by > {R.MIN_SWITCH_EFFECT:g}: "
           + ", ".join(f"{w} {e:.1e}" for w, e in got.items()))


def main():
    mixer = RC.Mixer(M.DeepSeek, torch_cfg, M.param_names, check_settings_matter)
    return RC.main("tsr-mla-", mixer, "an MLA model", CASES, checks, [check_interleave_torch])


if __name__ == "__main__":
    sys.exit(main())
