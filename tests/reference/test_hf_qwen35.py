#!/usr/bin/env python3
"""test_hf_qwen35.py — Hugging Face import and export of Qwen 3.5 (issue 68; docs/hf.md "Qwen 3.5"):
model_type qwen3_5_text (Qwen3_5ForCausalLM) and qwen3_5_moe (Qwen3_5MoeForConditionalGeneration,
the vision-language class the hub ships: the decoder under model.language_model., config.json's
text keys in text_config, model.visual.* and mtp.* beside it).

Fixtures: hf_fixture_qwen35.py's, tiny directories written BY SCRIPT in the layout of transformers'
modular_qwen3_5.py (transformers is not on this machine) with the logits of the float64 forward of
hf_fixture_qwen3next.py on the same weights re-laid: a dense text model (3 Gated DeltaNet + 1 full
layer, F32) and a VL MoE (a linear and a full layer, every layer MoE with stacked experts, BF16).
For each:
  - `tessera ckpt import DIR OUT.h5`: exit 0; the VL's note names the model.visual.* and mtp.*
    tensors it did not read;
  - ref_dump --init-from OUT.h5: tessera's fp32 logits against the float64 ones (1e-5 x max, or,
    where the model amplifies fp32 rounding more than that, within twice the error of PyTorch's
    own fp32 forward of the same tensors: the text fixture's sequence 1 at positions 6-7, where
    PyTorch fp32 is 1.3e-4 (OpenBLAS's SkylakeX kernels) to 2.5e-4 (Haswell's) off float64 and
    tessera 1.8e-4 and 1.0e-4);
  - `tessera ckpt export --format hf` of OUT.h5 with no --arch (--dtype as stored): the same
    model_type (model.hf_model_type, set by the import), config.json nested for the VL; every text
    tensor's bytes identical (in_proj_qkv, _z, _b, _a and the stacked experts as they were),
    nothing else written; and the export imported again gives the same checkpoint bit for bit.
The VL MoE also: a recipe WITHOUT a model block `tessera-train --init-from DIR`: step 1's loss is
the fixture's mean cross-entropy (rel <= 1e-5).
Then: configs/qwen3.5-27b.cfg --init-from a directory holding the published 27B text_config
(model_type qwen3_5_text, full_attention_interval, rope_parameters with mrope_section), and
configs/qwen3-next-80b-a3b.cfg from the published 80B config.json, pass every config check and
stop only at the weights (there are none; the recipes' layer_types pattern is the fill's); bad input, exit 2 with nothing
written, naming what is wrong: an mrope_section that is not ordinary RoPE for text, a missing
tensor (in_proj_z), a VL config.json without text_config; an unknown model_type gets the list.
Run: TESTS=hf_qwen35 bash tests/run.sh   (needs `make`). TAP; exit 1 on failure, 77 without torch.
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
import test_hf_qwen3next as t3n  # noqa: E402  (ckpt_params)
import hf_fixture_qwen35 as fxq  # noqa: E402
import numpy as np  # noqa: E402
from tap import Tap  # noqa: E402

CHECKS = {"qwen35_text": 4, "qwen35_vl_moe": 5}
PEER_FACTOR = 2.0  # tessera's fp32 logits within this many times PyTorch fp32's own error
N_OTHER = 8


def import_ok(tap, name, fdir, ck, meta):
    rc, out = hfe.run([hfe.TESSERA, "ckpt", "import", fdir, ck])
    skipped = meta["skipped"]
    vis = sum(n.startswith("model.visual.") for n in skipped)
    note = (f"{vis} tensors of model.visual.*" in out and
            f"{len(skipped) - vis} of mtp.*" in out) if skipped else "not read" not in out
    if rc or not note:
        tap.diag(out[-1500:])
    tap.ok(rc == 0 and note, f"{name}: tessera ckpt import: exit {rc}; "
                             f"{'the note names the skipped tensors' if skipped else 'no note'}")


def export_ok(tap, name, fdir, ck, tmp, meta):
    rc, exp, a, diff, extra = t3n.export_diff(tap, name, fdir, ck, tmp, meta["dtype"],
                                              meta["skipped"])
    cj = json.load(open(os.path.join(exp, "config.json"))) if rc == 0 else {}
    src = json.load(open(os.path.join(fdir, "config.json")))
    nested = ("text_config" in cj) == ("text_config" in src)
    tc = cj.get("text_config", cj)
    same_type = cj.get("model_type") == meta["model_type"] and tc.get("model_type") == \
        src.get("text_config", src)["model_type"]
    tap.ok(rc == 0 and a and not diff and not extra and same_type and nested,
           f"{name}: export with no --arch: model_type {cj.get('model_type')!r} (want "
           f"{meta['model_type']!r}), text_config {'nested' if 'text_config' in cj else 'flat'} "
           f"as the source; the {len(a)} text tensors byte for byte; different: {diff[:3]}, "
           f"extra: {extra[:3]}")
    return exp if rc == 0 else None


def reimport_ok(tap, name, ck, exp, tmp):
    ck2 = os.path.join(tmp, name + "_again.h5")
    rc2, out2 = hfe.run([hfe.TESSERA, "ckpt", "import", exp, ck2]) if exp else (-1, "")
    p1 = t3n.ckpt_params(ck)
    p2 = t3n.ckpt_params(ck2) if rc2 == 0 else {}
    same = p1.keys() == p2.keys() and all(np.array_equal(p1[k], p2[k]) for k in p1)
    if rc2:
        tap.diag(out2[-1500:])
    tap.ok(rc2 == 0 and same, f"{name}: import -> export -> import: the same {len(p1)} "
                              f"checkpoint datasets bit for bit")


def train_ok(tap, name, fdir, tmp, toks, want):
    t3n.init_from_ok(tap, name, fdir, tmp, fam.dataset(tmp, name + "_tr", toks), toks, want)


def peer_ok(got, want, fp32):
    """(good, max |got - want|, max |fp32 - want|): each position's (row of logits') largest error
    within the families' bound (TOL x max(1, |logit|)) or within PEER_FACTOR times PyTorch's own
    fp32 error at that position"""
    if got is None:
        return False, float("inf"), float("nan")
    V = want.shape[-1]
    err = np.abs(got - want).reshape(-1, V).max(1)
    peer = np.abs(fp32 - want).reshape(-1, V).max(1)
    bound = np.maximum(fam.TOL * max(1.0, float(np.abs(want).max())), PEER_FACTOR * peer)
    return bool(np.all(err <= bound)), float(err.max()), float(peer.max())


def run_fixture(tap, name, fdir, tmp):
    meta = json.load(open(os.path.join(fdir, "fixture.json")))
    toks = np.array(meta["tokens"])
    want = np.load(os.path.join(fdir, "logits.npy"))
    ck = os.path.join(tmp, name + ".h5")
    import_ok(tap, name, fdir, ck, meta)
    data = fam.dataset(tmp, name, toks)
    sets = dict(meta["sets"], **fam.run_keys(tmp, name, data))
    rc, out, got = fam.ref_logits(tmp, name, ck, sets)
    good, err, peer = peer_ok(got, want, np.load(os.path.join(fdir, "logits_fp32.npy")))
    if rc:
        tap.diag(out[-1500:])
    tap.ok(good, f"{name}: tessera's fp32 logits from the import vs the float64 forward: "
                 f"max |diff| {err:.2e}; each position's <= {fam.TOL:g} x max(1, |logit|) or "
                 f"{PEER_FACTOR:g} x PyTorch's own fp32 forward's there (its worst {peer:.2e})")
    exp = export_ok(tap, name, fdir, ck, tmp, meta)
    reimport_ok(tap, name, ck, exp, tmp)
    if CHECKS[name] == 5:
        train_ok(tap, name, fdir, tmp, toks, want)


def edited(tmp, src, name, edit):
    d = os.path.join(tmp, name)
    shutil.copytree(src, d)
    p = os.path.join(d, "config.json")
    cj = json.load(open(p))
    edit(cj)
    json.dump(cj, open(p, "w"), indent=2)
    return d


def without_tensor(tmp, src, name, tensor):
    d = os.path.join(tmp, name)
    shutil.copytree(src, d)
    p = os.path.join(d, "model.safetensors")
    _, meta, names, ents = hfe.parse_st(p)
    from hf_fixture import write_safetensors
    write_safetensors(p, [(n,) + tuple(ents[n]) for n in names if n != tensor], meta)
    return d


NEXT_80B = {"architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next",
            "vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 5120,
            "num_hidden_layers": 48, "num_attention_heads": 16, "num_key_value_heads": 2,
            "head_dim": 256, "linear_num_key_heads": 16, "linear_num_value_heads": 32,
            "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
            "full_attention_interval": 4, "rms_norm_eps": 1e-6, "rope_theta": 10000000,
            "partial_rotary_factor": 0.25, "max_position_embeddings": 262144,
            "num_experts": 512, "num_experts_per_tok": 10, "moe_intermediate_size": 512,
            "shared_expert_intermediate_size": 512, "decoder_sparse_step": 1,
            "norm_topk_prob": True, "mlp_only_layers": [], "router_aux_loss_coef": 0.001,
            "tie_word_embeddings": False, "hidden_act": "silu"}


def recipe_check(tap, tmp, recipe, name, cj, sets=(), how=""):
    """recipe --init-from a directory holding a published config.json and no weights: every
    config check passes (the layer_types pattern included), it stops at the weights (exit 2)."""
    d = os.path.join(tmp, name)
    os.makedirs(d)
    json.dump(cj, open(os.path.join(d, "config.json"), "w"))
    run_dir = os.path.join(tmp, name + ".run")
    extra = [a for kv in sets for a in ("--set", kv)]
    rc, out = hfe.run([hfe.TRAIN, "--config", os.path.join(hfe.ROOT, "configs", recipe),
                       "--set", f'run_dir="{run_dir}"'] + extra + ["--init-from", d, "--dry-run"])
    ok = rc == 2 and "model.safetensors" in out and "describes the model" not in out
    tap.ok(ok and not os.path.exists(run_dir),
           f"configs/{recipe}{how} --init-from the published {cj['model_type']} config.json: exit {rc} "
           f"(want 2) at the weights only (no config disagreement); no run directory")
    if not ok:
        tap.diag(out[-1500:])


def published_27b():
    """The published 27B text_config's keys (64 layers)."""
    return {"architectures": ["Qwen3_5ForCausalLM"], "model_type": "qwen3_5_text",
          "vocab_size": 248320, "hidden_size": 5120, "intermediate_size": 17408,
          "num_hidden_layers": 64, "num_attention_heads": 24, "num_key_value_heads": 4,
          "head_dim": 256, "linear_num_key_heads": 16, "linear_num_value_heads": 48,
          "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
          "full_attention_interval": 4, "rms_norm_eps": 1e-6, "max_position_embeddings": 262144,
          "tie_word_embeddings": False, "hidden_act": "silu", "attention_bias": False,
          "rope_parameters": {"rope_type": "default", "rope_theta": 10000000,
                              "partial_rotary_factor": 0.25, "mrope_section": [11, 11, 10],
                              "mrope_interleaved": True}}


def others(tap, tmp, dirs):
    recipe_check(tap, tmp, "qwen3.5-27b.cfg", "q35_27b", published_27b())
    recipe_check(tap, tmp, "qwen3-next-80b-a3b.cfg", "q3n_80b", NEXT_80B)
    # model.layer_types compared by what it makes of each layer, not as text (before 2026-11-29
    # a pattern written with spaces after its commas, or as the whole list, was a disagreement)
    pattern = ["linear_attention"] * 3 + ["full_attention"]
    recipe_check(tap, tmp, "qwen3-next-80b-a3b.cfg", "q3n_80b_spaces", NEXT_80B,
                 [f'model.layer_types="{", ".join(pattern)}"'], " with layer_types written with spaces")
    recipe_check(tap, tmp, "qwen3-next-80b-a3b.cfg", "q3n_80b_list", NEXT_80B,
                 [f'model.layer_types="{",".join(pattern * 12)}"'], " with layer_types as all 48 entries")
    text, vl = dirs["qwen35_text"], dirs["qwen35_vl_moe"]
    t = "model.layers.0.linear_attn.in_proj_z.weight"

    def mrope(cj):
        cj["rope_parameters"]["mrope_section"] = [2, 2, 2]

    cases = [
        ("an mrope_section over 6 frequencies of 4", edited(tmp, text, "q_mrope", mrope),
         ["mrope_section", "adding up to 6"]),
        (f"no {t}", without_tensor(tmp, text, "q_missing", t), [t]),
        ("a qwen3_5_moe config.json without text_config",
         edited(tmp, vl, "q_notext", lambda cj: cj.pop("text_config")), ["text_config"]),
        ("model_type falcon", edited(tmp, text, "q_falcon", lambda cj: cj.update(model_type="falcon")),
         ['model_type = "falcon"', '"qwen3_5_moe_text", ']),
    ]
    t3n.import_refusals(tap, tmp, cases)


def main():
    tap = Tap(sum(CHECKS.values()) + N_OTHER)
    if not os.access(fam.REF_DUMP, os.X_OK):
        hfe.skip(f"{fam.REF_DUMP} is missing (run make first)")
    with tempfile.TemporaryDirectory(prefix="tessera-hfq35.") as tmp:
        dirs = fxq.make_all(os.path.join(tmp, "fx"))
        for name, n in CHECKS.items():
            tap.section(n, f"{name} stopped early", run_fixture, tap, name, dirs[name], tmp)
        tap.section(N_OTHER, "the other checks stopped early", others, tap, tmp, dirs)
    return 1 if tap.failed else 0


if __name__ == "__main__":
    sys.exit(main())
