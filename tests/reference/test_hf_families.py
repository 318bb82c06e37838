#!/usr/bin/env python3
"""test_hf_families.py — Hugging Face import and export of the issue-67 families: OLMo 2
(Olmo2ForCausalLM), OLMo 3 (Olmo3ForCausalLM, layer_types with sliding windows), Gemma 3 text
(Gemma3ForCausalLM, model_type gemma3_text: its sliding layers' own RoPE base, linear scaling on
the full ones), Gemma 2 (Gemma2ForCausalLM: both soft caps) and SmolLM3 (SmolLM3ForCausalLM:
no_rope_layers).

Fixtures: hf_fixture.py's FAMILY_FIXTURES, tiny HF directories written BY SCRIPT from the published
formats (transformers is not on this machine) with the logits of a float64 forward written after
modeling_olmo2 / modeling_olmo3 / modeling_gemma3 / modeling_gemma2 / modeling_smollm3
(hf_fixture.family_forward).
For each:
  - `tessera ckpt import DIR OUT.h5` (Gemma: stderr says the (1 + w) norms were imported as w + 1);
  - ref_dump --init-from OUT.h5 (the fixture's tessera keys): tessera's fp32 logits on the
    fixture's rows against the float64 ones, max |diff| <= 1e-5 x max(1, max |logit|);
  - `tessera-train --init-from DIR` with a recipe WITHOUT a model block (config.json gives the
    model): step 1's loss = the mean cross-entropy of the fixture's logits (rel <= 1e-5);
  - `tessera ckpt export --format hf` of OUT.h5: the fixture's tensor names, every tensor's bytes
    identical to the fixture's (Gemma's norms through + 1 then - 1: the fixture's w are multiples
    of 2^-20, exact both ways), and config.json's keys equal to the fixture's.
Then config.json keys tessera cannot represent yet are refused at import, exit 2, naming key and
value (Gemma 3's and OLMo 3's rope_scaling yarn,
Gemma 2's negative cap), Gemma 3's older sliding_window_pattern form imports the model the
layer_types list gives and SmolLM3's no_rope_layer_interval the model of its no_rope_layers list
(same logits bit for bit).
Run: TESTS=hf_families bash tests/run.sh   (needs `make`). TAP; exit 1 on failure, 77 without torch.
"""
import json
import os
import shutil
import sys
import tempfile
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_hf_export as hfe  # noqa: E402  (skips with 77 without torch/h5py or the programs)
import hf_fixture as fxm  # noqa: E402
import h5py  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from tap import Tap  # noqa: E402

TOL = 1e-5  # fp32 (tessera) against float64 (the fixture), as test_hf_llama.py's TOL_FP32
REF_DUMP = os.path.join(hfe.BUILD, "tests", "ref_dump")
CHECKS_PER_FIXTURE = 5
N_REFUSALS = 8
CONFIG_KEYS = ["model_type", "architectures", "vocab_size", "hidden_size", "intermediate_size",
               "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "rms_norm_eps",
               "rope_theta", "rope_scaling", "tie_word_embeddings", "layer_types", "sliding_window",
               "head_dim", "query_pre_attn_scalar", "hidden_activation", "hidden_act",
               "rope_local_base_freq", "attn_logit_softcapping", "final_logit_softcapping",
               "no_rope_layers", "use_sliding_window", "mlp_bias", "attention_bias"]


def dataset(tmp, name, toks):
    rc, out, data = hfe.shard_tokens(tmp, name, toks, fxm.V)
    if rc:
        raise RuntimeError(out)
    return data


def run_keys(tmp, name, data):
    return {"run_dir": os.path.join(tmp, name + "_refrun"), "data.train": data, "data.val": "",
            "data.tokenizer": "", "data.shuffle": "false", "global_batch": str(fxm.B),
            "micro_batch": "1", "seq_len": str(fxm.T), "max_duration": "1ba",
            "eval_interval": "0ba", "save_interval": "0ba", "sample.tokens": "0", "threads": "1"}


def ref_logits(tmp, name, src, sets):
    """(exit, output, tessera's fp32 logits (B, T, V)) of ref_dump --init-from src."""
    h5 = os.path.join(tmp, name + "_ref.h5")
    shutil.rmtree(sets["run_dir"], ignore_errors=True)
    rc, out = hfe.run([REF_DUMP, os.path.join(hfe.ROOT, "configs", "tiny.cfg"), h5, "--init-from", src]
                      + [f"{k}={v}" for k, v in sets.items()])
    if rc:
        return rc, out, None
    with h5py.File(h5, "r") as f:
        return rc, out, f["step0/logits"][()][..., :fxm.V].astype(np.float64)


def xent_of(logits, toks):
    tgt = torch.as_tensor(np.stack([toks[k * fxm.T + 1:k * fxm.T + fxm.T + 1] for k in range(fxm.B)]))
    return float(F.cross_entropy(torch.as_tensor(logits).reshape(-1, logits.shape[-1]), tgt.reshape(-1)))


def bare_cfg(path, run_dir, data):
    """A recipe without a model block: config.json gives the model."""
    fxm.write_recipe(path, "test_hf_families.py", run_dir, data, "0ba", 'lr = 1e-30; warmup = "0ba";')


def st_of(d):
    ents = {}
    for f in sorted(os.listdir(d)):
        if f.endswith(".safetensors"):
            ents.update(hfe.parse_st(os.path.join(d, f))[3])
    return ents


def logits_ok(got, want):
    err = float(np.abs(got - want).max())
    return err <= TOL * max(1.0, float(np.abs(want).max())), err


def run_fixture(tap, fx, fdir, tmp, keys=CONFIG_KEYS):
    """The five checks of a fixture; keys: the config.json keys the export must give back."""
    name = fx["name"]
    meta = json.load(open(os.path.join(fdir, "fixture.json")))
    fcj = json.load(open(os.path.join(fdir, "config.json")))
    toks = np.array(meta["tokens"])
    want = np.load(os.path.join(fdir, "logits.npy"))
    data = dataset(tmp, name, toks)
    sets = dict(meta["sets"], **run_keys(tmp, name, data))

    ck = os.path.join(tmp, name + ".h5")
    rc, out = hfe.run([hfe.TESSERA, "ckpt", "import", fdir, ck])
    said = "(1 + w)" in out and "w + 1" in out
    gemma = fx["model_type"] in fxm.GEMMA
    if rc:
        tap.diag(out[-1500:])
    tap.ok(rc == 0 and said == gemma, f"{name}: tessera ckpt import: exit {rc}"
                                      f"{', says the (1 + w) norms became w + 1' if gemma else ''}")

    rc, out, got = ref_logits(tmp, name, ck, sets)
    good, err = logits_ok(got, want) if got is not None else (False, float("inf"))
    if rc:
        tap.diag(out[-1500:])
    tap.ok(good, f"{name}: tessera's fp32 logits from the import vs the float64 forward of "
                 f"{fxm.CLASS[fx['model_type']]}: max |diff| {err:.2e} <= {TOL:g} x max(1, |logit|)")

    cfg, run_dir = os.path.join(tmp, name + "_bare.cfg"), os.path.join(tmp, name + "_bare")
    bare_cfg(cfg, run_dir, data)
    rc, out = hfe.run(hfe.MPIRUN + [hfe.TRAIN, "--config", cfg, "--init-from", fdir])
    s = hfe.step1(run_dir) if rc == 0 else None
    ref = xent_of(want, toks)
    e = abs(s["loss"] - ref) / ref if s else float("inf")
    if rc:
        tap.diag(out[-1500:])
    tap.ok(e <= TOL, f"{name}: a recipe without a model block --init-from the directory: step-1 "
                     f"loss {s and s['loss']} vs the fixture's {ref:.8f}: rel err {e:.2e}")

    exp = os.path.join(tmp, name + "_export")
    rc, out = hfe.run([hfe.TESSERA, "ckpt", "export", "--format", "hf", "--tokenizer", "none", ck, exp])
    if rc:
        tap.diag(out[-1500:])
    a, b = st_of(fdir), st_of(exp) if rc == 0 else {}
    diff = sorted(n for n in a if n not in b or a[n] != b[n])
    extra = sorted(set(b) - set(a))
    tap.ok(rc == 0 and a and not diff and not extra,
           f"{name}: import -> export: the fixture's {len(a)} tensors byte for byte (dtype, shape, "
           f"data); different: {diff[:3]}, extra: {extra[:3]}")

    cj = json.load(open(os.path.join(exp, "config.json"))) if rc == 0 else {}
    bad = [f"{k} = {cj.get(k)!r}, fixture {fcj.get(k)!r}" for k in keys if cj.get(k) != fcj.get(k)]
    for x in bad:
        tap.diag(x)
    tap.ok(rc == 0 and not bad, f"{name}: the export's config.json has the fixture's "
                                f"{len([k for k in keys if k in fcj])} model keys")


def edited(tmp, src, name, **changes):
    d = os.path.join(tmp, name)
    shutil.copytree(src, d)
    p = os.path.join(d, "config.json")
    cj = json.load(open(p))
    for k, v in changes.items():
        if v is KeyError:
            cj.pop(k, None)
        else:
            cj[k] = v
    json.dump(cj, open(p, "w"), indent=2)
    return d


def refusals(tap, tmp, dirs):
    """Keys tessera cannot represent yet: exit 2 naming key and value; the older Gemma 3 form."""
    g, o3, g2 = dirs["gemma3_text"], dirs["olmo3_swa"], dirs["gemma2"]
    cases = [
        ("Gemma 3 rope_scaling yarn",
         edited(tmp, g, "g_yarn", rope_scaling={"rope_type": "yarn", "factor": 8.0}),
         ["rope_scaling.rope_type = \"yarn\"", "Gemma3ForCausalLM"]),
        ("Gemma 2 attn_logit_softcapping = -1",
         edited(tmp, g2, "g2_cap", attn_logit_softcapping=-1.0),
         ["attn_logit_softcapping = -1", "null or a cap > 0"]),
        ("OLMo 3 rope_scaling yarn",
         edited(tmp, o3, "o3_yarn", rope_scaling={"rope_type": "yarn", "factor": 8.0}),
         ["rope_scaling = ", "yarn"]),
    ]
    for what, d, needles in cases:
        rc, out = hfe.run([hfe.TESSERA, "ckpt", "import", d, os.path.join(tmp, "refused.h5")])
        missing = [n for n in needles if n not in out]
        tap.ok(rc == 2 and not missing and not os.path.exists(os.path.join(tmp, "refused.h5")),
               f"refused at import: {what}: exit {rc} (want 2), names {needles} (missing {missing}), "
               f"no checkpoint written")
        if missing or rc != 2:
            tap.diag(out[-800:])
    # Gemma 3 configs of transformers < 4.53 give sliding_window_pattern instead of layer_types
    old = edited(tmp, g, "g_pattern", layer_types=KeyError, sliding_window_pattern=3)
    meta = json.load(open(os.path.join(g, "fixture.json")))
    data = dataset(tmp, "g_pattern", np.array(meta["tokens"]))
    rc_a, out_a, a = ref_logits(tmp, "g_list", g, dict(meta["sets"], **run_keys(tmp, "g_list", data)))
    rc_b, out_b, b = ref_logits(tmp, "g_pattern", old, dict(meta["sets"], **run_keys(tmp, "g_pattern", data)))
    if rc_a or rc_b:
        tap.diag((out_a + out_b)[-1500:])
    tap.ok(a is not None and b is not None and np.array_equal(a, b),
           "gemma3_text with sliding_window_pattern = 3 (no layer_types) imports the model of "
           "layer_types [sliding, sliding, full]: the same logits bit for bit")
    # transformers 5 writes Gemma 3's RoPE as rope_parameters per layer type
    cj = json.load(open(os.path.join(g, "config.json")))
    per_type = {"full_attention": dict({"rope_type": "default"}, **(cj.get("rope_scaling") or {}),
                                       rope_theta=cj["rope_theta"]),
                "sliding_attention": {"rope_type": "default",
                                      "rope_theta": cj.get("rope_local_base_freq", 10000.0)}}
    newer = edited(tmp, g, "g_params", rope_scaling=KeyError, rope_theta=KeyError,
                   rope_local_base_freq=KeyError, rope_parameters=per_type)
    rc_c, out_c, c = ref_logits(tmp, "g_params", newer, dict(meta["sets"], **run_keys(tmp, "g_params", data)))
    if rc_c:
        tap.diag(out_c[-1500:])
    tap.ok(a is not None and c is not None and np.array_equal(a, c),
           f"gemma3_text with transformers 5's rope_parameters per layer type {per_type} imports the "
           "model of rope_theta, rope_scaling and rope_local_base_freq: the same logits bit for bit")
    same_model(tap, tmp, dirs["smollm3"], "s_interval", "smollm3 with no_rope_layer_interval = 4 "
               "(no no_rope_layers) imports the model of no_rope_layers [1, 1, 1, 0]",
               no_rope_layers=KeyError, no_rope_layer_interval=4)
    same_model(tap, tmp, g2, "g2_default", "gemma2 without layer_types imports Gemma2Config's "
               "default (layer 0 sliding, every other after it)", layer_types=KeyError)
    export_refusal(tap, tmp, g)


def export_refusal(tap, tmp, g):
    """A Gemma 3 model with linear scaling, sliding layers and model.rope_local_theta = 0 (tessera
    scales its sliding layers too): the export refuses it naming the key, exit 1, nothing written."""
    meta = json.load(open(os.path.join(g, "fixture.json")))
    data = dataset(tmp, "g_theta0", np.array(meta["tokens"]))
    sets = dict(meta["sets"], **run_keys(tmp, "g_theta0", data))
    sets["model.rope_local_theta"] = "0"
    ck = os.path.join(tmp, "g_theta0.h5")
    rc, out = hfe.run([hfe.TESSERA, "ckpt", "import", g, ck])
    rc, out = hfe.run([hfe.TRAIN, "--config", os.path.join(hfe.ROOT, "configs", "tiny.cfg"), "--init-from", ck]
                      + [a for k, v in sets.items() for a in ("--set", f"{k}={v}")])
    cks = sorted(f for f in os.listdir(sets["run_dir"]) if f.endswith(".h5")) if rc == 0 else []
    exp = os.path.join(tmp, "g_theta0_export")
    rc2, out2 = hfe.run([hfe.TESSERA, "ckpt", "export", "--format", "hf", "--tokenizer", "none",
                         os.path.join(sets["run_dir"], cks[-1]), exp]) if cks else (-1, out)
    said = "model.rope_local_theta > 0" in out2
    if not said:
        tap.diag((out + out2)[-1500:])
    tap.ok(rc == 0 and rc2 == 1 and said and not os.path.exists(os.path.join(exp, "model.safetensors")),
           f"ckpt export of a Gemma 3 model with linear scaling, sliding layers and rope_local_theta "
           f"= 0: exit {rc2} (want 1) naming model.rope_local_theta, no weights written")


def same_model(tap, tmp, src, name, what, **changes):
    """The directory src with config.json changed gives src's logits bit for bit."""
    d = edited(tmp, src, name, **changes)
    meta = json.load(open(os.path.join(src, "fixture.json")))
    data = dataset(tmp, name, np.array(meta["tokens"]))
    rc_a, out_a, a = ref_logits(tmp, name + "_a", src, dict(meta["sets"], **run_keys(tmp, name + "_a", data)))
    rc_b, out_b, b = ref_logits(tmp, name + "_b", d, dict(meta["sets"], **run_keys(tmp, name + "_b", data)))
    if rc_a or rc_b:
        tap.diag((out_a + out_b)[-1500:])
    tap.ok(a is not None and b is not None and np.array_equal(a, b), what + ": the same logits bit for bit")


def main():
    tap = Tap(CHECKS_PER_FIXTURE * len(fxm.FAMILY_FIXTURES) + N_REFUSALS)
    if not os.access(REF_DUMP, os.X_OK):
        hfe.skip(f"{REF_DUMP} is missing (run make first)")
    with tempfile.TemporaryDirectory(prefix="tessera-hffam.") as tmp:
        dirs = fxm.make_all(os.path.join(tmp, "fx"), fxm.FAMILY_FIXTURES)
        for fx in fxm.FAMILY_FIXTURES:
            end = tap.n + CHECKS_PER_FIXTURE
            try:
                run_fixture(tap, fx, dirs[fx["name"]], tmp)
            except Exception:
                tap.diag(traceback.format_exc())
            tap.fail_until(end, f"{fx['name']} stopped early")
        end = tap.n + N_REFUSALS
        try:
            refusals(tap, tmp, dirs)
        except Exception:
            tap.diag(traceback.format_exc())
        tap.fail_until(end, "refusals stopped early")
    return 1 if tap.failed else 0


if __name__ == "__main__":
    sys.exit(main())
