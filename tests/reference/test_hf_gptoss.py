#!/usr/bin/env python3
"""test_hf_gptoss.py — Hugging Face import and export of gpt-oss (GptOssForCausalLM, model_type
gpt_oss; docs/hf.md "gpt-oss").

Fixtures: hf_fixture_gptoss.py's two SCRIPT-WRITTEN directories of one tiny model (4 layers
alternating sliding / full, sinks, q/k/v/o biases, YaRN, 4 experts top 2 with router and expert
biases, gate/up interleaved, the clamped unit at swiglu_limit 1.5): gptoss_bf16 (the unquantised
layout, BF16) and gptoss_mxfp4 (the experts as MXFP4 _blocks / _scales written by the fixture's
own quantiser from the OCP MX spec; the bf16 form holds their dequantised values), with the logits
of a float64 forward written after transformers' modeling_gpt_oss.py.
Checks:
  - `tessera ckpt import` of each: exit 0; the MXFP4 one says on stderr that it dequantised, the
    bf16 one does not; both checkpoints hold the same tensors bit for bit;
  - ref_dump --init-from each checkpoint: tessera's fp32 logits against the float64 forward (max
    |diff| <= 1e-5 x max(1, max |logit|)), the MXFP4 import's equal to the bf16 import's bit for bit;
  - `tessera-train --init-from DIR` (each form; the MXFP4 one with parallel.expert = 2, each rank
    reading its experts' part of the tensors) with a recipe WITHOUT a model block: step-1 loss =
    the mean cross-entropy of the fixture's logits (rel <= 1e-5);
  - `tessera ckpt export --format hf --dtype bf16` of each checkpoint: the bf16 fixture's tensors
    byte for byte (gate/up re-interleaved, the transposes), no _blocks/_scales, config.json's model
    keys equal to the fixture's and no quantization_config;
  - import -> export -> import: the second checkpoint's tensors equal the first's bit for bit;
    2 steps trained from the import (fp32 values), exported in fp32 as shards, imported back:
    bit for bit;
  - refused at import, exit 2, naming the tensor or key, no checkpoint written: gate_up_proj_blocks
    of another block shape, down_proj_scales of another shape, a scale byte of 255, rope_type
    "dynamic", quantization_config quant_method "fp8", swiglu_alpha 1.5, rope_scaling null;
  - a gpt-oss-shaped tessera model without the expert biases is refused by the export (exit 1,
    naming model.moe_expert_bias, nothing written);
  - a gpt-oss model without YaRN exports rope_scaling {"rope_type": "default"} and imports back;
  - the recipes configs/gpt-oss-{20b,120b}.cfg against the published config.json
    (hf_fixture_gptoss.published_config): no disagreement or warning, only the (tiny) weights stop
    them.
Run: TESTS=hf_gptoss bash tests/run.sh   (needs `make`). TAP; exit 1 on failure, 77 without torch.
"""
import json
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_hf_export as hfe  # noqa: E402  (skips with 77 without torch/h5py or the programs)
import test_hf_families as fam  # noqa: E402  (ref_logits, bare_cfg, xent_of, st_of, run_keys)
import hf_fixture as fxm  # noqa: E402
import hf_fixture_gptoss as oss  # noqa: E402
import h5py  # noqa: E402
import numpy as np  # noqa: E402
from tap import Tap  # noqa: E402

TOL = 1e-5
N_CHECKS = 15
CONFIG_KEYS = ["model_type", "architectures", "vocab_size", "hidden_size", "intermediate_size",
               "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
               "hidden_act", "rms_norm_eps", "rope_theta", "rope_scaling", "attention_bias",
               "sliding_window", "layer_types", "swiglu_limit", "num_local_experts",
               "num_experts_per_tok", "tie_word_embeddings", "max_position_embeddings"]
# router_aux_loss_coef is the run's model.moe_aux_loss_coef converted (docs/moe.md), which a
# standalone import leaves at its default (a training choice: test_hf_moe.py's NOT_COMPARED)


def tensors(h5):
    with h5py.File(h5, "r") as f:
        return {k: f["model"][k][()] for k in f["model"].keys()}


def same_tensors(a, b):
    return sorted(a) == sorted(b) and all(np.array_equal(a[k], b[k]) for k in a)


def imports(tap, dirs, tmp):
    """ckpt import of both forms: the MXFP4 line on stderr for that one only; the same tensors."""
    cks = {}
    for name, d in dirs.items():
        ck = cks[name] = os.path.join(tmp, name + ".h5")
        rc, out = hfe.run([hfe.TESSERA, "ckpt", "import", d, ck])
        said = "MXFP4" in out and "dequantised" in out
        if rc:
            tap.diag(out[-1500:])
        tap.ok(rc == 0 and said == (name == "gptoss_mxfp4"),
               f"{name}: tessera ckpt import: exit {rc}; the MXFP4 dequantisation said on stderr: "
               f"{said}")
    a, b = (tensors(cks[n]) for n in ("gptoss_bf16", "gptoss_mxfp4"))
    tap.ok(same_tensors(a, b), f"the MXFP4 import's {len(b)} tensors equal the bf16 form's bit for "
                               f"bit (the dequantised experts, the transposes, the interleave)")
    return cks


def logits(tap, dirs, cks, tmp):
    meta = json.load(open(os.path.join(dirs["gptoss_bf16"], "fixture.json")))
    want = np.load(os.path.join(dirs["gptoss_bf16"], "logits.npy"))
    data = fam.dataset(tmp, "oss", np.array(meta["tokens"]))
    got = {}
    for name, ck in cks.items():
        sets = dict(meta["sets"], **fam.run_keys(tmp, name, data))
        rc, out, got[name] = fam.ref_logits(tmp, name, ck, sets)
        if rc:
            tap.diag(out[-1500:])
    good, err = fam.logits_ok(got["gptoss_bf16"], want) if got["gptoss_bf16"] is not None else (False, -1)
    tap.ok(good, f"gptoss_bf16: tessera's fp32 logits from the import vs the float64 forward of "
                 f"GptOssForCausalLM: max |diff| {err:.2e} <= {TOL:g} x max(1, |logit|) "
                 f"(max |logit| {np.abs(want).max():.2f})")
    m = got["gptoss_mxfp4"]
    tap.ok(m is not None and got["gptoss_bf16"] is not None and np.array_equal(m, got["gptoss_bf16"]),
           "gptoss_mxfp4: the logits equal the bf16 form's bit for bit")
    return meta, want, data


def bare_runs(tap, dirs, meta, want, data, tmp):
    """A recipe without a model block --init-from each directory: step-1 loss vs the fixture's."""
    ref = fam.xent_of(want, np.array(meta["tokens"]))
    for name, d in dirs.items():
        cfg, run_dir = os.path.join(tmp, name + "_bare.cfg"), os.path.join(tmp, name + "_bare")
        fam.bare_cfg(cfg, run_dir, data)
        ep = name == "gptoss_mxfp4"  # each rank reads its own experts' rows of the blocks
        rc, out = hfe.run(hfe.MPIRUN + [hfe.TRAIN, "--config", cfg, "--init-from", d]
                          + (["--set", "parallel.expert=2"] if ep else []))
        s = hfe.step1(run_dir) if rc == 0 else None
        e = abs(s["loss"] - ref) / ref if s else float("inf")
        said = not ep or "2 ranks per group share the 4 experts, 2 on each" in out
        if rc or not said:
            tap.diag(out[-1500:])
        tap.ok(e <= TOL and said, f"{name}: a recipe without a model block --init-from the directory"
                                  f"{' (parallel.expert = 2)' if ep else ''}: step-1 loss "
                                  f"{s and s['loss']} vs the fixture's {ref:.8f}: rel err {e:.2e}")


def exports(tap, dirs, cks, tmp):
    """Each checkpoint exported in bf16: the bf16 fixture's bytes; then imported back."""
    a = fam.st_of(dirs["gptoss_bf16"])
    fcj = json.load(open(os.path.join(dirs["gptoss_bf16"], "config.json")))
    outs = {}
    for name, ck in cks.items():
        exp = outs[name] = os.path.join(tmp, name + "_export")
        rc, out = hfe.run([hfe.TESSERA, "ckpt", "export", "--format", "hf", "--dtype", "bf16",
                           "--tokenizer", "none", ck, exp])
        if rc:
            tap.diag(out[-1500:])
        b = fam.st_of(exp) if rc == 0 else {}
        diff = sorted(n for n in a if n not in b or a[n] != b[n])
        extra = sorted(set(b) - set(a))
        cj = json.load(open(os.path.join(exp, "config.json"))) if rc == 0 else {}
        bad = [f"{k} = {cj.get(k)!r}, fixture {fcj.get(k)!r}" for k in CONFIG_KEYS if cj.get(k) != fcj.get(k)]
        for x in bad:
            tap.diag(x)
        tap.ok(rc == 0 and a and not diff and not extra and not bad and "quantization_config" not in cj,
               f"{name}: export --dtype bf16: the bf16 fixture's {len(a)} tensors byte for byte "
               f"(different: {diff[:3]}, extra: {extra[:3]}), config.json's {len(CONFIG_KEYS)} model "
               f"keys (differ: {len(bad)}), no quantization_config")
    again = os.path.join(tmp, "again.h5")
    rc, out = hfe.run([hfe.TESSERA, "ckpt", "import", outs["gptoss_bf16"], again])
    tap.ok(rc == 0 and same_tensors(tensors(cks["gptoss_bf16"]), tensors(again)),
           f"import -> export -> import: the checkpoints' tensors are identical bit for bit (exit {rc})")


def broken(tmp, name, change_packed=None, **cfg_changes):
    """The MXFP4 fixture rewritten with its packed experts or config.json changed."""
    sd, packed = oss.weights()
    if change_packed:
        change_packed(packed)
    d = os.path.join(tmp, name)
    oss.write_dir(d, sd, packed, True)
    p = os.path.join(d, "config.json")
    cj = json.load(open(p))
    cj.update(cfg_changes)
    json.dump(cj, open(p, "w"), indent=2)
    return d


def refusals(tap, tmp):
    L0 = "model.layers.0.mlp.experts."

    def fewer_groups(pk):
        b, s = pk[L0 + "gate_up_proj"]
        pk[L0 + "gate_up_proj"] = (b[:, :, :1, :].copy(), s[:, :, :1].copy())

    def bad_scales(pk):
        b, s = pk[L0 + "down_proj"]
        pk[L0 + "down_proj"] = (b, s[:, :-1, :].copy())

    def nan_scale(pk):
        b, s = pk[L0 + "down_proj"]
        s = s.copy()
        s[1, 2, 0] = 255
        pk[L0 + "down_proj"] = (b, s)

    yarn = dict(oss.config_json()["rope_scaling"], rope_type="dynamic")
    cases = [
        ("gate_up_proj_blocks of 1 block per row (the config's hidden size needs 2)",
         broken(tmp, "r_groups", fewer_groups), [L0 + "gate_up_proj_blocks", "[4, 64, 2, 16]"]),
        ("down_proj_scales of another shape than its blocks",
         broken(tmp, "r_scales", bad_scales), [L0 + "down_proj_scales", "MXFP4 scales"]),
        ("a scale byte of 255 (NaN in the OCP MX format)",
         broken(tmp, "r_nan", nan_scale), [L0 + "down_proj_blocks", "255"]),
        ("rope_scaling.rope_type \"dynamic\"",
         broken(tmp, "r_rope", rope_scaling=yarn), ["rope_scaling.rope_type = \"dynamic\"", "gpt-oss"]),
        ("quantization_config.quant_method \"fp8\"",
         broken(tmp, "r_quant", quantization_config={"quant_method": "fp8"}),
         ["quantization_config.quant_method = \"fp8\""]),
        ("swiglu_alpha = 1.5", broken(tmp, "r_alpha", swiglu_alpha=1.5), ["swiglu_alpha = 1.5"]),
        ("rope_scaling null (GptOssConfig's YaRN default differs by version)",
         broken(tmp, "r_null", rope_scaling=None), ["rope_scaling (or rope_parameters) is absent or null"]),
    ]
    bad = []
    for what, d, needles in cases:
        out_h5 = os.path.join(tmp, "refused.h5")
        rc, out = hfe.run([hfe.TESSERA, "ckpt", "import", d, out_h5])
        missing = [n for n in needles if n not in out]
        if rc != 2 or missing or os.path.exists(out_h5):
            bad.append(what)
            tap.diag(f"{what}: exit {rc}, missing {missing}: {out[-600:]}")
    tap.ok(not bad, f"refused at import with exit 2 naming the tensor or key, no checkpoint "
                    f"written: {len(cases) - len(bad)} of {len(cases)} ({'; '.join(c[0] for c in cases)})")


def trained_roundtrip(tap, dirs, cks, tmp):
    """Two AdamW steps from the bf16 import (fp32 weights no bf16 holds), exported in fp32 in
    shards of at most 60 kB (TSR_HF_MAX_SHARD), imported back: the same tensors bit for bit."""
    meta = json.load(open(os.path.join(dirs["gptoss_bf16"], "fixture.json")))
    data = fam.dataset(tmp, "trained", np.array(meta["tokens"]))
    sets = dict(meta["sets"], **fam.run_keys(tmp, "trained", data))
    sets.update({"max_duration": "2ba", "save_interval": "2ba", "optim.lr": "1e-3",
                 "optim.warmup": "0ba"})
    rc, out = hfe.run([hfe.TRAIN, "--config", os.path.join(hfe.ROOT, "configs", "tiny.cfg"),
                       "--init-from", cks["gptoss_bf16"]]
                      + [a for k, v in sets.items() for a in ("--set", f"{k}={v}")])
    cks2 = sorted(f for f in os.listdir(sets["run_dir"]) if f.endswith(".h5")) if rc == 0 else []
    ck = os.path.join(sets["run_dir"], cks2[-1]) if cks2 else ""
    exp, back = os.path.join(tmp, "trained_export"), os.path.join(tmp, "trained_back.h5")
    rc2, out2 = hfe.run(["env", "TSR_HF_MAX_SHARD=60000", hfe.TESSERA, "ckpt", "export", "--format",
                         "hf", "--tokenizer", "none", ck, exp]) if ck else (-1, out)
    shards = len([f for f in os.listdir(exp) if f.startswith("model-")]) if rc2 == 0 else 0
    rc3, out3 = hfe.run([hfe.TESSERA, "ckpt", "import", exp, back]) if rc2 == 0 else (-1, "")
    a = tensors(ck) if ck else {}
    moved = bool(a) and not np.array_equal(a["expw1"], tensors(cks["gptoss_bf16"])["expw1"])
    good = rc3 == 0 and shards > 1 and moved and same_tensors(a, tensors(back))
    if not good:
        tap.diag((out + out2 + out3)[-1500:])
    tap.ok(good, f"2 steps trained from the import (expw1 moved: {moved}), exported in fp32 as "
                 f"{shards} shards and imported back: every tensor bit for bit (exit {rc}/{rc2}/{rc3})")


def step_and_export(dirs, tmp, name, key, value):
    """The fixture's model with KEY = VALUE, one step from the seed (run NAME), exported by
    `tessera ckpt export --format hf` into TMP/NAME_export: (train's exit, its output, export's
    exit, its output (train's when no checkpoint was written), the export directory)."""
    meta = json.load(open(os.path.join(dirs["gptoss_bf16"], "fixture.json")))
    data = fam.dataset(tmp, name, np.array(meta["tokens"]))
    sets = dict(meta["sets"], **fam.run_keys(tmp, name, data))
    sets.update({key: value, "save_interval": "1ba"})
    rc, out = hfe.run([hfe.TRAIN, "--config", os.path.join(hfe.ROOT, "configs", "tiny.cfg")]
                      + [a for k, v in sets.items() for a in ("--set", f"{k}={v}")])
    cks = sorted(f for f in os.listdir(sets["run_dir"]) if f.endswith(".h5")) if rc == 0 else []
    exp = os.path.join(tmp, name + "_export")
    rc2, out2 = hfe.run([hfe.TESSERA, "ckpt", "export", "--format", "hf", "--tokenizer", "none",
                         os.path.join(sets["run_dir"], cks[-1]), exp]) if cks else (-1, out)
    return rc, out, rc2, out2, exp


def export_refusal(tap, dirs, tmp):
    """The fixture's model without expert biases (one step from the seed): no class holds it."""
    rc, out, rc2, out2, exp = step_and_export(dirs, tmp, "noeb", "model.moe_expert_bias", "false")
    said = "GptOssForCausalLM" in out2 and "model.moe_expert_bias" in out2
    if not said:
        tap.diag((out + out2)[-1500:])
    tap.ok(rc == 0 and rc2 == 1 and said and not os.path.exists(os.path.join(exp, "model.safetensors")),
           f"ckpt export of a gpt-oss-shaped model without expert biases: exit {rc2} (want 1) "
           f"naming GptOssForCausalLM and model.moe_expert_bias, no weights written")


def no_yarn(tap, dirs, tmp):
    """A gpt-oss model without YaRN (one step from the seed): exported with rope_scaling
    {"rope_type": "default"} (GptOssConfig would put its YaRN in place of null), which imports."""
    rc, out, rc2, out2, exp = step_and_export(dirs, tmp, "noyarn", "model.rope_scaling", "none")
    back = os.path.join(tmp, "noyarn_back.h5")
    rs = json.load(open(os.path.join(exp, "config.json"))).get("rope_scaling") if rc2 == 0 else None
    rc3, out3 = hfe.run([hfe.TESSERA, "ckpt", "import", exp, back]) if rc2 == 0 else (-1, "")
    if rc3:
        tap.diag((out + out2 + out3)[-1500:])
    tap.ok(rc3 == 0 and rs == {"rope_type": "default"}, f"a gpt-oss model without YaRN exports "
           f"rope_scaling {rs} (not null) and imports back (exit {rc}/{rc2}/{rc3})")


def recipes(tap, dirs, tmp):
    """configs/gpt-oss-{20b,120b}.cfg --init-from a directory with the published config.json (and
    the tiny fixture's weights): every config.json check passes against the recipe's model block
    (no disagreement, exit 1) and only the weights check stops it (exit 2: 24 / 36 layers, the
    weights say 4), before any allocation."""
    bad = []
    for size, L in (("20b", 24), ("120b", 36)):
        d = os.path.join(tmp, "published_" + size)
        os.makedirs(d)
        shutil.copy(os.path.join(dirs["gptoss_mxfp4"], "model.safetensors"), d)
        json.dump(oss.published_config(size), open(os.path.join(d, "config.json"), "w"), indent=2)
        rc, out = hfe.run([hfe.TRAIN, "--config", os.path.join(hfe.ROOT, "configs", f"gpt-oss-{size}.cfg"),
                           "--init-from", d, "--set", f"run_dir={os.path.join(tmp, 'run_' + size)}"])
        want = f"num_hidden_layers = {L}, but the weights"
        if rc != 2 or want not in out or "warning" in out:
            bad.append(size)
            tap.diag(f"gpt-oss-{size}: exit {rc}: {out[-800:]}")
    tap.ok(not bad, "configs/gpt-oss-20b.cfg and -120b.cfg agree with the published config.json "
                    "(no disagreement, no warning; stopped by the weights check only, exit 2)")


def body(tap, tmp):
    dirs = oss.make_all(os.path.join(tmp, "fx"))
    cks = imports(tap, dirs, tmp)
    meta, want, data = logits(tap, dirs, cks, tmp)
    bare_runs(tap, dirs, meta, want, data, tmp)
    exports(tap, dirs, cks, tmp)
    refusals(tap, tmp)
    trained_roundtrip(tap, dirs, cks, tmp)
    export_refusal(tap, dirs, tmp)
    no_yarn(tap, dirs, tmp)
    recipes(tap, dirs, tmp)


def main():
    tap = Tap(N_CHECKS)
    if not os.access(fam.REF_DUMP, os.X_OK):
        hfe.skip(f"{fam.REF_DUMP} is missing (run make first)")
    with tempfile.TemporaryDirectory(prefix="tessera-hfoss.") as tmp:
        return tap.run_all(body, tmp)


if __name__ == "__main__":
    sys.exit(main())
