#!/usr/bin/env python3
"""LoRA checkpoints out of tessera (docs/lora.md; issue 27): the PEFT directory, the merged export
and their agreement, without peft installed (the layout is checked field by field against what
PEFT's save_pretrained writes for a LoraConfig; its merge rule W + (lora_alpha / r) B A is applied
here by hand, in float64).

A tiny Llama-style base is trained (6 steps), then adapters on all seven targets (r 4, alpha 8,
6 steps) from it; then
  - `ckpt export --adapter`: adapter_config.json's every field (peft_type, r, lora_alpha,
    lora_dropout, target_modules, task_type, bias, fan_in_fan_out, base_model_name_or_path, ...),
    adapter_model.safetensors: format "pt", exactly the names
    base_model.model.model.layers.<l>.<self_attn|mlp>.<q..down>_proj.lora_<A|B>.weight, shapes
    (r, in) and (out, r), values equal the checkpoint's lora/ tensors bit for bit;
  - `ckpt export --merge` vs the base's own export: each target weight equals base + (alpha / r)
    B A computed from the PEFT files (rel err <= 1e-6: fp32 rounding of the merge); every other
    tensor bit for bit the base's; config.json the same;
  - refusals (exit 1, nothing written): a LoRA checkpoint without --adapter or --merge, both, and
    --adapter on a checkpoint without adapters;
  - `--init-from` the PEFT directory (lora.base the base) on 2 ranks: its evaluation after one
    step at lr 1e-30 equals `tessera eval` of the exported checkpoint within 1e-6; `tessera eval` and
    `generate --ckpt PEFT_DIR` (base from base_model_name_or_path, adapters merged) give the LoRA
    checkpoint's loss and greedy ids; an adapter of
    another rank, and a run without LoRA, are refused (exit 1, nothing written).
Run: TESTS=test_lora_peft bash tests/run.sh
"""
import json
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_hf_export as X  # noqa: E402  (paths, runs, safetensors by hand)

np, h5py = X.np, X.h5py
TARGETS = [("q", "self_attn", "q_proj"), ("k", "self_attn", "k_proj"),
           ("v", "self_attn", "v_proj"), ("o", "self_attn", "o_proj"),
           ("gate", "mlp", "gate_proj"), ("up", "mlp", "up_proj"), ("down", "mlp", "down_proj")]
R, ALPHA, DROPOUT, L = 4, 8.0, 0.05, 2
LLAMA = dict(name="llama", tokenizer="",
             model=dict(n_layer=L, d_model=48, n_head=4, n_kv_head=2, vocab_size=100,
                        vocab_multiple=128, norm='"rmsnorm"', pos='"rope"', mlp='"swiglu"',
                        intermediate_size=80, bias="false", tie_embeddings="false",
                        init_std=0.1))
PLAN = 2 + 5 + 3 + 4 + 7


def main():
    tap = X.Tap(PLAN)
    try:
        run(tap)
    except Exception:
        import traceback
        tap.diag(traceback.format_exc())
    tap.fail_until(PLAN, "stopped early")
    return 1 if tap.failed else 0


def run(tap):
    with tempfile.TemporaryDirectory(prefix="tsr-peft-") as tmp:
        (rc, rc1, rc2), out, cfg, data, base, lora = X.base_and_lora(
            tmp, "llama", LLAMA, f"lora.rank={R}", f"lora.alpha={ALPHA}", f"lora.dropout={DROPOUT}")
        if not tap.ok(rc == 0 and rc1 == 0 and rc2 == 0, f"the base and the LoRA run train "
                                                          f"(exits {rc}, {rc1}, {rc2})"):
            tap.diag(out[-3000:])
            return
        peft, merged, plain = (os.path.join(tmp, d) for d in ("peft", "merged", "plain"))
        last_base = sorted(f for f in os.listdir(base) if f.startswith("step-"))[-1]
        exp = [X.TESSERA, "ckpt", "export", "--format", "hf", "--tokenizer", "none"]
        ra, oa = X.run(exp + ["--adapter", lora, peft])
        rm, om = X.run(exp + ["--merge", lora, merged])
        rp, op = X.run(exp + [base, plain])
        if not tap.ok(ra == 0 and rm == 0 and rp == 0, f"export --adapter, --merge and the base's "
                                                       f"export exit 0 ({ra}, {rm}, {rp})"):
            tap.diag((oa + om + op)[-3000:])
            return

        # adapter_config.json, field by field
        cj = json.load(open(os.path.join(peft, "adapter_config.json")))
        want = {"peft_type": "LORA", "r": R, "lora_alpha": ALPHA, "lora_dropout": DROPOUT,
                "task_type": "CAUSAL_LM", "bias": "none", "fan_in_fan_out": False,
                "inference_mode": True, "init_lora_weights": True, "modules_to_save": None,
                "layers_to_transform": None, "layers_pattern": None, "use_rslora": False,
                "use_dora": False, "rank_pattern": {}, "alpha_pattern": {}, "revision": None,
                "base_model_name_or_path": os.path.join(base, last_base)}
        bad = {k: cj.get(k, "<absent>") for k, v in want.items() if cj.get(k, "<absent>") != v}
        tap.ok(not bad, f"adapter_config.json: {len(want)} fields as PEFT writes them"
                        f"{'; differ: ' + str(bad) if bad else ''}")
        mods = [m for _, _, m in TARGETS]
        tap.ok(sorted(cj.get("target_modules", [])) == sorted(mods),
               f"target_modules = {cj.get('target_modules')}")

        # adapter_model.safetensors: names, shapes, values
        problems, meta, ad = X.st_arrays(os.path.join(peft, "adapter_model.safetensors"))
        tap.ok(not problems and meta.get("format") == "pt",
               f"adapter_model.safetensors is well formed, format pt {problems}")
        last = sorted(f for f in os.listdir(lora) if f.startswith("step-"))[-1]
        with h5py.File(os.path.join(lora, last), "r") as f:
            ck = {k: f["lora"][k][()] for k in f["lora"].keys()}
        names, same, shapes = set(), True, True
        for t, parent, mod in TARGETS:
            for l in range(L):
                for ab in "AB":
                    n = f"base_model.model.model.layers.{l}.{parent}.{mod}.lora_{ab}.weight"
                    names.add(n)
                    if n not in ad:
                        same = False
                        continue
                    shapes &= ad[n].shape == ck[f"{t}_{ab}"][l].shape and \
                        ad[n].shape[0 if ab == "A" else 1] == R
                    same &= np.array_equal(ad[n], ck[f"{t}_{ab}"][l])
        tap.ok(set(ad) == names, f"exactly the {len(names)} PEFT tensor names "
                                 f"(extra {sorted(set(ad) - names)[:3]}, missing "
                                 f"{sorted(names - set(ad))[:3]})")
        tap.ok(shapes and same, "lora_A (r, in), lora_B (out, r), equal to the checkpoint's "
                                "lora/ tensors bit for bit")

        # the merged export: base + (alpha / r) B A from the PEFT files, the rest the base's
        _, _, base_w = X.st_arrays(os.path.join(plain, "model.safetensors"))
        _, _, merged_w = X.st_arrays(os.path.join(merged, "model.safetensors"))
        worst, moved, others = 0.0, 0.0, True
        targets = {f"model.layers.{l}.{p}.{m}.weight": (l, p, m) for l in range(L)
                   for _, p, m in TARGETS}
        for n, w in base_w.items():
            if n not in targets:
                others &= n in merged_w and np.array_equal(merged_w[n], w)
                continue
            l, p, m = targets[n]
            pre = f"base_model.model.model.layers.{l}.{p}.{m}."
            delta = (ALPHA / R) * (ad[pre + "lora_B.weight"].astype(np.float64) @
                                   ad[pre + "lora_A.weight"].astype(np.float64))
            want = w.astype(np.float64) + delta
            worst = max(worst, X.rel_err(merged_w[n], want))
            moved = max(moved, float(np.abs(delta).max()))
        tap.ok(worst <= 1e-6 and moved > 1e-5,
               f"merged target weights = base + (alpha/r) B A from the PEFT files: worst rel err "
               f"{worst:.2e} <= 1e-6 (the adapters move weights by up to {moved:.2e})")
        tap.ok(others and set(merged_w) == set(base_w), "every other tensor of the merged export "
                                                        "equals the base's bit for bit")
        tap.ok(json.load(open(os.path.join(merged, "config.json"))) ==
               json.load(open(os.path.join(plain, "config.json"))),
               "the merged export's config.json is the base's")

        # --adapter reads the adapters alone: the base moved away, the same files
        away, peft2 = base + ".away", os.path.join(tmp, "peft2")
        os.rename(base, away)
        try:
            rb, ob = X.run(exp + ["--adapter", lora, peft2])
        finally:
            os.rename(away, base)
        same = rb == 0 and all(open(os.path.join(peft, n), "rb").read() ==
                               open(os.path.join(peft2, n), "rb").read()
                               for n in ("adapter_config.json", "adapter_model.safetensors"))
        tap.ok(same, f"export --adapter with the base not there (moved away): exit {rb}, the same "
                     f"adapter_config.json and adapter_model.safetensors")
        if rb != 0:
            tap.diag(ob[-1500:])

        # refusals
        r1, o1 = X.run(exp + [lora, os.path.join(tmp, "x1")])
        r2, o2 = X.run(exp + ["--adapter", "--merge", lora, os.path.join(tmp, "x2")])
        r3, o3 = X.run(exp + ["--adapter", base, os.path.join(tmp, "x3")])
        tap.ok(r1 == 1 and "give --adapter" in o1 and not os.path.exists(os.path.join(tmp, "x1")),
               f"a LoRA checkpoint without --adapter or --merge: exit {r1}, nothing written")
        tap.ok(r2 == 1 and "exclude each other" in o2, f"--adapter with --merge: exit {r2}")
        tap.ok(r3 == 1 and "holds no LoRA adapters" in o3 and
               not os.path.exists(os.path.join(tmp, "x3")),
               f"--adapter on a checkpoint without adapters: exit {r3}, nothing written")

        # --init-from the PEFT directory
        again = os.path.join(tmp, "again")
        lsets = [f"lora.rank={R}", f"lora.alpha={ALPHA}", f"lora.base={base}"]
        evs = [f"data.val={data}", "eval_interval=1ba", "eval_samples=8", "max_duration=1ba",
               "optim.lr=1e-30"]
        r4, o4 = X.run(X.MPIRUN + [X.TRAIN, "--config", cfg, "--init-from", peft, "--set",
                                   f"run_dir={again}"] + sum((["--set", s] for s in lsets + evs), []))
        got = None
        for line in open(os.path.join(again, "metrics.jsonl")) if r4 == 0 else []:
            d = json.loads(line)
            if "val_loss" in d:
                got = d["val_loss"]
        r5, o5 = X.run([X.TESSERA, "eval", "--ckpt", lora, "--val", data, "-s", "eval_samples=8",
                        "-o", os.path.join(tmp, "ev.json")])
        want = json.load(open(os.path.join(tmp, "ev.json")))["val"][0]["loss"] if r5 == 0 else None
        ok = got is not None and want is not None and abs(got - want) <= 1e-6 * abs(want)
        tap.ok(ok, f"--init-from the PEFT directory: val loss {got} after one step at lr 1e-30 vs "
                   f"tessera eval of the LoRA checkpoint {want} (within 1e-6)")
        if not ok:
            tap.diag((o4 + o5)[-2000:])
        # the PEFT directory used as it is: tessera eval and generate read its base (the adapter's
        # base_model_name_or_path) and merge its adapters: the LoRA checkpoint's loss, bit for bit
        r6, o6 = X.run([X.TESSERA, "eval", "--ckpt", peft, "--val", data, "-s", "eval_samples=8",
                        "-o", os.path.join(tmp, "evp.json")])
        gotp = json.load(open(os.path.join(tmp, "evp.json")))["val"][0]["loss"] if r6 == 0 else None
        r7, o7 = X.run([X.TESSERA, "generate", "--ckpt", peft, "--prompt-ids", "1 2 3", "--max-tokens",
                        "4", "--temperature", "0", "--ids"])
        r8, o8 = X.run([X.TESSERA, "generate", "--ckpt", lora, "--prompt-ids", "1 2 3", "--max-tokens",
                        "4", "--temperature", "0", "--ids"])
        ids = lambda o: [l for l in o.splitlines() if l and l.split()[0].isdigit()]
        ok = r6 == 0 and gotp == want and r7 == 0 and r8 == 0 and ids(o7) == ids(o8) != []
        tap.ok(ok, f"tessera eval --ckpt PEFT_DIR: loss {gotp} = the LoRA checkpoint's {want}; generate "
                   f"--ckpt PEFT_DIR: the checkpoint's greedy ids {ids(o7)} (exits {r6}, {r7})")
        if not ok:
            tap.diag((o6 + o7)[-2000:])
        # the same command again (a requeue): it resumes from the run's checkpoint, the base being
        # the one the checkpoint records (the PEFT directory is not a model)
        r8, o8 = X.run(X.MPIRUN + [X.TRAIN, "--config", cfg, "--init-from", peft, "--set",
                                   f"run_dir={again}"] + sum((["--set", s] for s in lsets + evs), []))
        tap.ok(r8 == 0 and "checkpoint resume" in o8, f"the same command again resumes from the "
                                                      f"run's checkpoint (exit {r8})")
        if r8 != 0:
            tap.diag(o8[-1500:])
        # no lora.base: the base is the adapter's base_model_name_or_path, a path here. Read when
        # every rank sees it; refused on all ranks at once when one does not (node-local storage:
        # rank 1's own mount namespace hides the base's directory under a tmpfs)
        sets = sum((["--set", s] for s in lsets + evs if not s.startswith("lora.base=")), [])
        named, hid = os.path.join(tmp, "named"), os.path.join(tmp, "hidden")
        r9, o9 = X.run(X.MPIRUN + [X.TRAIN, "--config", cfg, "--init-from", peft, "--set",
                                   f"run_dir={named}"] + sets)
        tap.ok(r9 == 0 and os.path.join(base, last_base) in open(
                   os.path.join(named, "config.cfg")).read() if r9 == 0 else False,
               f"--init-from the PEFT directory without lora.base on 2 ranks: the base is the "
               f"adapter's base_model_name_or_path (exit {r9})")
        if r9 != 0:
            tap.diag(o9[-1500:])
        cmd = [X.TRAIN, "--config", cfg, "--init-from", peft, "--set", f"run_dir={hid}"] + sets
        hide = ["unshare", "-m", "sh", "-c", 'mount -t tmpfs tsr-hide "$0" && exec "$@"', base]
        if os.geteuid() != 0 or not shutil.which("unshare"):
            print(f"ok {tap.n + 1} - a base seen by rank 0 only # SKIP needs root and unshare",
                  flush=True)
            tap.n += 1
        else:
            # (without the agreement rank 0 went on into a collective alone: a hang, hence timeout)
            r10, o10 = X.run(["timeout", "120"] + X.MPIRUN[:-2] + ["-np", "1"] + cmd +
                             [":", "-np", "1"] + hide + cmd)
            tap.ok(r10 == 1 and "is a path on some ranks and not on others" in o10 and
                   not os.path.exists(hid), f"a base that rank 1 cannot see (its mount namespace "
                                            f"hides it): every rank refuses, exit {r10}, nothing "
                                            f"written")
            if r10 != 1:
                tap.diag(o10[-1500:])
        bad = os.path.join(tmp, "bad")
        r6, o6 = X.run([X.TRAIN, "--config", cfg, "--init-from", peft, "--set", f"run_dir={bad}",
                        "--set", f"lora.rank={2 * R}", "--set", f"lora.alpha={ALPHA}",
                        "--set", f"lora.base={base}"])
        tap.ok(r6 == 1 and f"r = {R}, this run has lora.rank = {2 * R}" in o6 and
               not os.path.exists(bad), f"an adapter of another rank is refused: exit {r6}, "
                                        f"nothing written")
        r7, o7 = X.run([X.TRAIN, "--config", cfg, "--init-from", peft, "--set", f"run_dir={bad}"])
        tap.ok(r7 == 1 and "is a PEFT adapter directory" in o7 and not os.path.exists(bad),
               f"a run without LoRA --init-from the adapter is refused: exit {r7}, nothing written")


if __name__ == "__main__":
    sys.exit(main())
