#!/usr/bin/env python3
"""test_hf_clients.py — the CPU half of the real-client checks (tests/gpu/real_clients.py).

tests/gpu/clients_prep.py (device.sh pack-clients) runs into a temporary directory, and what the GPU
machine will read is checked here without transformers or TensorBoard:
  - the prep ends (exit 0) under 5 MB with the five models and the tb run in its manifest;
  - each export's model.safetensors parses (test_hf_export.py's reader) and config.json names the
    manifest's class; a float64 forward written after transformers' code (test_hf_export.py's
    GPT-2/MPT, hf_fixture.py's Llama family) on the export's weights gives tessera's dumped logits
    to <= 1e-4 under real_clients.compare_logits, which fails on a copy with one logit moved 1e-3;
  - the run's tb/ read by tests/train/tb_events.py (test_tensorboard.sh's reader: TFRecord and protobuf by hand) passes
    real_clients.compare_scalars against metrics.jsonl, which fails with one loss moved 1e-4;
  - real_clients.py itself: without transformers and tensorboard it skips (exit 77) naming them;
    with --torch-only it runs its torch-only checks and reports the others as SKIP lines;
  - test_hf_transformers.py over fixtures made from these exports (tessera's logits standing in
    for transformers') passes: the import path the committed fixtures will take;
  - test_hf_transformers.py's path for the families (`tessera ckpt import`, no tessera keys), over
    directories in real_clients.py's layout made from hf_fixture.py's FAMILY_FIXTURES (OLMo 2,
    OLMo 3, Gemma 3, Gemma 2, SmolLM3: script-written, their float64 logits standing in for
    transformers'): each passes; Gemma 3's with its RoPE in transformers 5's per-type
    rope_parameters passes or is skipped with tessera's reason; a model_type tessera does not
    import (falcon_h1) is skipped naming it; a copy with one logit moved 10x the tolerance fails.
Run: TESTS=hf_clients bash tests/run.sh (needs make). TAP; exit 1 on failure, 77 without torch.
"""
import json
import os
import runpy
import shutil
import subprocess
import sys
import tempfile
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_hf_export as hfe  # noqa: E402  (skips with 77 without torch/h5py or the programs)
import hf_fixture as fxm  # noqa: E402
import hf_fixture_deepseek as fxd  # noqa: E402  (DeepSeek-V3's float64 forward)
import hf_fixture_gptoss as fxo  # noqa: E402
import hf_fixture_qwen35 as fxq  # noqa: E402  (Qwen3-Next's and Qwen 3.5's float64 forward)
import numpy as np  # noqa: E402
import torch  # noqa: E402
from tap import Tap  # noqa: E402

ROOT = hfe.ROOT
GPU = os.path.join(ROOT, "tests", "gpu")
sys.path.insert(0, GPU)
import clients_prep  # noqa: E402
import real_clients as rcl  # noqa: E402

N_MODELS = len(clients_prep.MODELS)
N_FAMILY_CHECKS = 5
PLAN = 1 + 2 * N_MODELS + 1 + 2 + 1 + N_FAMILY_CHECKS


def tb_reader():
    """tests/train/tb_events.py (test_tensorboard.sh's reader), loaded as a module."""
    return runpy.run_path(os.path.join(ROOT, "tests", "train", "tb_events.py"))


def reference_logits(hf_dir, tokens):
    problems, meta, names, ents = hfe.parse_st(os.path.join(hf_dir, "model.safetensors"))
    cj = json.load(open(os.path.join(hf_dir, "config.json")))
    sd = {n: torch.from_numpy(hfe.as_f32(*ents[n]).astype(np.float64)) for n in names}
    idx = torch.as_tensor(tokens, dtype=torch.long)
    with torch.no_grad():
        fwd = (hfe.hf_forward if cj["model_type"] in ("gpt2", "mpt")
               else fxo.forward if cj["model_type"] == "gpt_oss"
               else fxd.forward if cj["model_type"] == "deepseek_v3"
               else fxq.forward_hf if cj["model_type"].startswith(("qwen3_next", "qwen3_5"))
               else fxm.forward)
        return problems, cj, fwd(sd, cj, idx).numpy()


def family_dir(src, dst, name, cls, config=None, bump=0.0):
    """hf_fixture.py's directory src as real_clients.py writes a family's: config.json and the
    weights, fixture.json without tessera keys, logits.npy float32 (one logit moved by bump)."""
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("fixture.json", "logits.npy"))
    meta = json.load(open(os.path.join(src, "fixture.json")))
    logits = np.load(os.path.join(src, "logits.npy")).astype(np.float32)
    logits[0, 0, 0] += bump
    np.save(os.path.join(dst, "logits.npy"), logits)
    B, T = logits.shape[:2]
    with open(os.path.join(dst, "fixture.json"), "w") as f:
        json.dump({"name": name, "class": cls, "B": B, "T": T, "V": logits.shape[2],
                   "tokens": meta["tokens"][:B * T + 1], "note": "from hf_fixture.py (test_hf_clients.py)"}, f)
    if config:
        json.dump(config, open(os.path.join(dst, "config.json"), "w"), indent=2)


def transformers5_rope(cj):
    """Gemma 3's config.json with its RoPE as transformers 5 writes it: rope_parameters per layer type."""
    cj = dict(cj)
    full = dict({"rope_type": "default"}, **(cj.pop("rope_scaling") or {}), rope_theta=cj.pop("rope_theta"))
    cj["rope_parameters"] = {"full_attention": full, "sliding_attention": {
        "rope_type": "default", "rope_theta": cj.pop("rope_local_base_freq")}}
    return cj


def bad_rope5(tap, fx, tmp):
    """rope_parameters tessera cannot hold, refused at import (exit 2, naming the entry): Gemma 3's
    sliding layers scaled, and OLMo 3's sliding and full layers turning otherwise (one RoPE there)"""
    got = []
    for name, entry, want in (("gemma3_text", dict(rope_type="linear", factor=2.0, rope_theta=10000.0),
                               "rope_parameters.sliding_attention.rope_type = \"linear\""),
                              ("olmo3_swa", dict(rope_type="default", rope_theta=1234.0),
                               "rope_parameters: the sliding_attention layers turn otherwise")):
        d = os.path.join(tmp, "rope5-" + name)
        shutil.copytree(fx[name], d)
        cj = json.load(open(os.path.join(d, "config.json")))
        if name == "gemma3_text":
            cj = transformers5_rope(cj)
            cj["rope_parameters"]["sliding_attention"] = entry
        else:
            theta = cj.pop("rope_theta", 10000.0)
            cj["rope_parameters"] = {"full_attention": dict(rope_type="default", rope_theta=theta),
                                     "sliding_attention": entry}
        json.dump(cj, open(os.path.join(d, "config.json"), "w"))
        r = subprocess.run([hfe.TESSERA, "ckpt", "import", d, os.path.join(d, "out.h5")], capture_output=True,
                           text=True)
        got.append((name, r.returncode, want in r.stderr, os.path.exists(os.path.join(d, "out.h5"))))
    tap.ok(all(rc == 2 and said and not wrote for _, rc, said, wrote in got),
           f"rope_parameters tessera cannot hold refused at import, exit 2 naming it, nothing written: {got}")


def check_families(tap, tmp):
    """test_hf_transformers.py's `ckpt import` path over family directories made here."""
    fx = fxm.make_all(os.path.join(tmp, "fam-src"), fxm.FAMILY_FIXTURES)
    root = os.path.join(tmp, "fam-fixtures")
    names = []
    for f in fxm.FAMILY_FIXTURES:
        family_dir(fx[f["name"]], os.path.join(root, f["name"]), f["name"], fxm.CLASS[f["model_type"]])
        names.append(f["name"])
    g = json.load(open(os.path.join(fx["gemma3_text"], "config.json")))
    family_dir(fx["gemma3_text"], os.path.join(root, "gemma3_rope5"), "gemma3_rope5", "Gemma3ForCausalLM",
               config=transformers5_rope(g))
    o = json.load(open(os.path.join(fx["olmo2_post"], "config.json")))
    family_dir(fx["olmo2_post"], os.path.join(root, "falcon"), "falcon", "FalconH1ForCausalLM",
               config=dict(o, model_type="falcon_h1", architectures=["FalconH1ForCausalLM"]))
    scale = max(1.0, float(np.abs(np.load(os.path.join(fx["olmo2_post"], "logits.npy"))).max()))
    family_dir(fx["olmo2_post"], os.path.join(root, "olmo2_moved"), "olmo2_moved", "Olmo2ForCausalLM",
               bump=10 * rcl.TOL_LOGITS * scale)
    r = subprocess.run([sys.executable, os.path.join(HERE, "test_hf_transformers.py")], capture_output=True,
                       text=True, env=dict(os.environ, TSR_HF_TRANSFORMERS_FIXTURES=root))
    lines = r.stdout.splitlines()

    def of(name):
        return [x for x in lines if f" - {name}: " in x]
    good = [n for n in names if len(of(n)) == 2 and all(x.startswith("ok ") and "# SKIP" not in x for x in of(n))]
    if len(good) < len(names) or r.returncode != 1:
        tap.diag(r.stdout[-3000:] + r.stderr[-1000:])
    tap.ok(len(good) == len(names), f"test_hf_transformers.py, `ckpt import` path: {len(good)} of {len(names)} "
                                    f"families in real_clients.py's layout pass ({', '.join(good)})")
    g5 = of("gemma3_rope5")
    passed = len(g5) == 2 and all(x.startswith("ok ") and "# SKIP" not in x for x in g5)
    said = len(g5) == 2 and all("# SKIP tessera cannot import it yet: " in x and "rope_parameters" in x for x in g5)
    tap.ok(passed, "Gemma 3 with transformers 5's per-type rope_parameters (full_attention: theta and the "
                   "linear scaling; sliding_attention: the local base): imports and passes "
                   + ("" if passed else f"(skipped: {said}; {g5[:1]})"))
    bad_rope5(tap, fx, tmp)
    fl = of("falcon")
    tap.ok(len(fl) == 2 and all('# SKIP tessera cannot import it yet: ' in x and 'model_type = "falcon_h1"' in x
                                for x in fl), f"model_type falcon_h1: two SKIP lines naming it ({fl[:1]})")
    mv = of("olmo2_moved")
    tap.ok(r.returncode == 1 and len(mv) == 2 and mv[0].startswith("ok ") and mv[1].startswith("not ok "),
           f"a copy with one logit moved 10x the tolerance fails its logits check, exit {r.returncode} "
           f"({mv[1:] or 'no line'})")


def main():
    tap = Tap(PLAN)
    with tempfile.TemporaryDirectory(prefix="tessera-hfcl.") as tmp:
        out = os.path.join(tmp, "clients")
        r = subprocess.run([sys.executable, os.path.join(GPU, "clients_prep.py"), out], capture_output=True, text=True)
        size = sum(os.path.getsize(os.path.join(d, x)) for d, _, fs in os.walk(out) for x in fs) if os.path.isdir(out) else 0
        man = json.load(open(os.path.join(out, "manifest.json"))) if r.returncode == 0 else {"models": []}
        left = man.get("left_out", [])
        if r.returncode:
            tap.diag((r.stdout + r.stderr)[-3000:])
        for m in left:
            tap.diag(f"left out: {m['name']}: {m['why']}")
        optional = [m[0] for m in clients_prep.OPTIONAL]
        tap.ok(r.returncode == 0 and size < 8e6 and len(man["models"]) + len(left) == N_MODELS and man.get("tb_run")
               and all(m["name"] in optional and m["why"] for m in left),
               f"clients_prep.py (exit {r.returncode}): {len(man['models'])} models and a tb run, {size / 1e6:.2f} MB "
               f"(< 8); left out, with tessera's reason: {[m['name'] for m in left]} (only {optional} may be)")
        for m in man["models"] + [{"name": x["name"], "left_out": True} for x in left]:
            end = tap.n + 2
            if m.get("left_out"):  # the plan counts every model of MODELS
                for what in ("export parses", "logits"):
                    tap.ok(False, f"{m['name']}: {what}", skip="not exported by this tessera (said above)")
                continue
            try:
                d = os.path.join(out, m["name"])
                tokens, want = np.load(os.path.join(d, "tokens.npy")), np.load(os.path.join(d, "logits.npy"))
                problems, cj, got = reference_logits(os.path.join(d, "hf"), tokens)
                for p in problems:
                    tap.diag(p)
                tap.ok(not problems and cj["architectures"] == [m["class"]],
                       f"{m['name']}: model.safetensors parses; config.json architectures {cj['architectures']}")
                rel = m.get("tol") == "rel"
                compare = rcl.compare_logits_rel if rel else rcl.compare_logits
                good, msg = compare(got, want)
                bump = 10 * rcl.TOL_LOGITS * max(1.0, float(np.abs(want).max())) if rel else rcl.BUMP
                bumped = want.copy()
                bumped[1, 2, 3] += bump
                caught, msg2 = compare(got, bumped)
                tap.ok(good and not caught, f"{m['name']}: float64 forward of the export vs tessera's logits: {msg}; "
                                            f"one moved {bump:.3g} fails ({msg2})")
            except Exception:
                tap.diag(traceback.format_exc())
            tap.fail_until(end, f"{m['name']} stopped early")
        tap.fail_until(1 + 2 * N_MODELS, "no manifest")

        end = tap.n + 1
        try:
            tb = tb_reader()
            run = os.path.join(out, man["tb_run"])
            sc = {tag: sorted(pts.items()) for tag, pts in tb["scalars"](tb["event_files"](run)).items()}
            train, ev = rcl.last_lines(run)
            bad = rcl.compare_scalars(sc, train, ev)
            moved = {s: dict(x) for s, x in train.items()}
            moved[2]["loss"] += 1e-4
            bad2 = rcl.compare_scalars(sc, moved, ev)
            for b in bad[:10]:
                tap.diag(b)
            tap.ok(not bad and any("step 2 train/loss" in b for b in bad2),
                   f"tb/ by tests/train/tb_events.py: {len(sc)} tags equal metrics.jsonl under "
                   f"real_clients.compare_scalars; a loss moved 1e-4 fails ({'; '.join(bad2)[:120]})")
        except Exception:
            tap.diag(traceback.format_exc())
        tap.fail_until(end, "tb check stopped early")

        script = os.path.join(GPU, "real_clients.py")
        have = [m for m in ("transformers", "tensorboard") if rcl.have(m)]
        r = subprocess.run([sys.executable, script, out, os.path.join(tmp, "o1")], capture_output=True, text=True)
        if have:  # a machine with them: the whole script must run and pass
            tap.ok(r.returncode == 0, f"real_clients.py with {have} installed: exit {r.returncode}")
        else:
            tap.ok(r.returncode == 77 and "transformers and tensorboard not installed" in r.stdout,
                   f"real_clients.py without transformers and tensorboard: exit {r.returncode} (77), saying "
                   "they are not installed")
        r = subprocess.run([sys.executable, script, out, os.path.join(tmp, "o2"), "--torch-only"],
                           capture_output=True, text=True)
        lines = r.stdout.splitlines()
        skips = [x for x in lines if "# SKIP needs" in x]
        oks = [x for x in lines if x.startswith("ok ") and "# SKIP" not in x]
        want_skips = 0 if have else len(man["models"]) + 2 + len(rcl.FIXTURES) + len(rcl.FAMILIES) + 1
        if r.returncode:
            tap.diag(r.stdout[-2000:] + r.stderr[-2000:])
        tap.ok(r.returncode == 0 and len(skips) == want_skips and len(oks) == len(man["models"]) + 1,
               f"real_clients.py --torch-only: exit {r.returncode}, {len(oks)} torch-only checks ok, "
               f"{len(skips)} SKIP lines naming transformers/tensorboard")

        fake = os.path.join(tmp, "fake-fixtures")
        for m in man["models"]:
            d = os.path.join(fake, m["name"])
            shutil.copytree(os.path.join(out, m["name"], "hf"), d)
            shutil.copy(os.path.join(out, m["name"], "logits.npy"), d)
            rows = np.load(os.path.join(out, m["name"], "tokens.npy"))
            sets = {k: v for k, v in clients_prep.BASE.items() if k.startswith("model.")}
            sets.update(m["sets"])
            with open(os.path.join(d, "fixture.json"), "w") as f:
                json.dump({"name": m["name"], "class": m["class"], "B": m["B"], "T": m["T"], "V": m["V"],
                           "tokens": [int(t) for t in rows.reshape(-1)] + [0], "sets": sets}, f)
        r = subprocess.run([sys.executable, os.path.join(HERE, "test_hf_transformers.py")], capture_output=True,
                           text=True, env=dict(os.environ, TSR_HF_TRANSFORMERS_FIXTURES=fake))
        n_ok = sum(1 for x in r.stdout.splitlines() if x.startswith("ok "))
        if r.returncode:
            tap.diag(r.stdout[-2000:] + r.stderr[-1000:])
        tap.ok(r.returncode == 0 and n_ok == 2 * len(man["models"]),
               f"test_hf_transformers.py over fixtures made from these exports: exit {r.returncode}, {n_ok} ok")
        end = tap.n + N_FAMILY_CHECKS
        try:
            check_families(tap, tmp)
        except Exception:
            tap.diag(traceback.format_exc())
        tap.fail_until(end, "the families' import path stopped early")
    return tap.status()


if __name__ == "__main__":
    sys.exit(main())
