#!/usr/bin/env python3
"""real_clients.py — tessera's outputs read by the real clients: transformers and TensorBoard.

    real_clients.py CLIENTS_DIR OUT_DIR [--perturb NAME] [--torch-only]

CLIENTS_DIR is what tests/gpu/clients_prep.py made (device.sh pack-clients: .devbundle/clients).
  (a) each exported model (GPT-2, MPT, Llama, Qwen 2, Qwen 3) loads with transformers'
      AutoModelForCausalLM.from_pretrained as the class the manifest names, and its fp32 logits
      (CPU, eager attention) on the rows of tokens.npy equal tessera's own (logits.npy, ref_dump)
      to max |diff| <= 1e-4;
  (b) the run's tb/ read by TensorBoard's EventAccumulator: every scalar tag is one tessera documents
      (docs/tracking.md), and every (step, value) equals metrics.jsonl's within float32 rounding,
      each step of metrics.jsonl present; a copy of metrics.jsonl with one loss moved by 1e-4
      must fail the same comparison;
  (c) tiny random transformers models (FIXTURES: GPT2LMHeadModel, MptForCausalLM,
      LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM; vocabulary 500, hidden 64, fp32) written
      with save_pretrained, each with its logits on fixed token ids (logits.npy, fixture.json), into
      OUT_DIR/hf-transformers.tar.gz, for tests/fixtures/hf-transformers/ (the CPU-side import test
      tests/reference/test_hf_transformers.py).
--perturb NAME adds 1e-3 to one of tessera's logits of model NAME: that model's check must fail
(device.sh clients runs it so, to show the comparison can fail with the real client).
--torch-only runs the checks that need only torch and numpy, the others reported as SKIP lines;
without it, a machine lacking transformers or tensorboard skips the whole test (exit 77).
TAP; exit 0 all passed, 1 a check failed, 77 skipped. Summary in OUT_DIR/clients.txt.
"""
import json
import math
import os
import sys
import tarfile
import time
import traceback

try:
    import numpy as np
except ImportError:
    print("1..0 # SKIP real_clients.py: numpy not installed (the lent GPU machine's python3 has it with torch)")
    sys.exit(77)

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(TESTS, "train"), os.path.join(TESTS, "reference")]
from tb_events import last_lines  # noqa: E402  (metrics.jsonl as test_tensorboard.sh reads it)
from tap import Tap  # noqa: E402  (the Python tests' TAP lines)

TOL_LOGITS = 1e-4  # fp32 both sides; measured differences are ~1e-6 (a few dozen fp32 ops)
BUMP = 1e-3        # --perturb and the negative controls: 10x the tolerance

# tag -> metrics.jsonl key and how closely it must match: "ulp" (printed with 9 significant
# digits: the float32 of the printed value within 1 ulp), "rel" (6+ digits: 1e-5 relative),
# "exact" (integers: the float32 rounding of the integer), None (no metrics.jsonl key: checked alone)
TRAIN_TAGS = {"train/loss": ("loss", "ulp"), "train/lr": ("lr", "ulp"), "train/grad_norm": ("grad_norm", "ulp"),
              "train/tokens_per_s": ("tokens_per_s", "rel"), "train/mfu": ("mfu", "rel"),
              "train/step_time_s": ("step_time_s", "rel"), "train/tokens": ("tokens", "exact"),
              "memory/peak_bytes": ("peak_mem_bytes", "exact"),
              "memory/peak_rss_bytes": ("peak_rss_bytes", "exact"), "memory/planned_bytes": (None, None)}
EVAL_TAGS = {"eval/val_loss": ("val_loss", "ulp"), "eval/val_ppl": ("val_ppl", "ulp")}

# (c): the fixtures. tessera's --set keys of the same model ride along in fixture.json.
FX_V, FX_B, FX_T, FX_C, FX_L, FX_NH, FX_POS = 500, 2, 16, 64, 2, 4, 64
ROPE_SETS = {"model.pos": "rope", "model.norm": "rmsnorm", "model.mlp": "swiglu", "model.bias": "false",
             "model.n_kv_head": "2", "model.intermediate_size": "128", "model.norm_eps": "1e-06",
             "model.rope_theta": "10000.0"}
FIXTURES = [
    ("gpt2", "GPT2LMHeadModel", {"model.pos": "learned", "model.bias": "true", "model.gelu": "tanh"}),
    ("mpt", "MptForCausalLM", {"model.pos": "alibi", "model.bias": "false", "model.gelu": "exact"}),
    ("llama", "LlamaForCausalLM", dict(ROPE_SETS, **{"model.tie_embeddings": "false"})),
    ("qwen2", "Qwen2ForCausalLM", dict(ROPE_SETS, **{"model.qkv_bias": "true", "model.tie_embeddings": "true"})),
    ("qwen3", "Qwen3ForCausalLM", dict(ROPE_SETS, **{"model.qk_norm": "true", "model.head_dim": "32",
                                                    "model.tie_embeddings": "true"})),
]


# ---- the comparisons (torch-free: tests/reference/test_hf_clients.py calls them too) -------------

def compare_logits(got, want, tol=TOL_LOGITS):
    """(ok, message): got and want (B, T, V) equal within tol absolute; NaN or Inf fail."""
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        return False, f"shape {got.shape} vs tessera's {want.shape}"
    d = np.abs(got - want)
    if not np.all(np.isfinite(got)) or not np.all(np.isfinite(want)):
        return False, f"{int(np.sum(~np.isfinite(got)))} non-finite values (client), {int(np.sum(~np.isfinite(want)))} (tessera)"
    i = np.unravel_index(int(np.argmax(d)), d.shape)
    m = float(d[i])
    return (m <= tol), f"max |diff| {m:.3g} at {tuple(int(x) for x in i)} ({got[i]:.7g} vs {want[i]:.7g}), tol {tol:g}"


def f32(x):
    return float(np.float32(x))


def ulps(a, b):
    ia, ib = (int(np.array([v], dtype=np.float32).view(np.int32)[0]) for v in (a, b))
    return abs(ia - ib)


def compare_scalars(scalars, train, ev):
    """scalars: {tag: [(step, value)]} as a reader found them; train, ev: tb_events.last_lines(). Returns the
    problems (empty: every tag known, every point equal to metrics.jsonl, every logged step present)."""
    bad = []
    for tag in sorted(scalars):
        if tag not in TRAIN_TAGS and tag not in EVAL_TAGS:
            bad.append(f"{tag}: not a tag tessera documents (docs/tracking.md)")
    for tags, lines in ((TRAIN_TAGS, train), (EVAL_TAGS, ev)):
        for tag, (key, how) in tags.items():
            pts = scalars.get(tag, [])
            steps = [s for s, _ in pts]
            want = sorted(s for s, d in lines.items() if key is None or
                          (d.get(key) is not None and math.isfinite(d[key])))
            if sorted(steps) != want:
                bad.append(f"{tag}: steps {sorted(steps)} != metrics.jsonl's {want}")
            for s, v in pts:
                d = lines.get(s)
                if d is None or key is None:
                    continue
                m = d.get(key)
                if m is None:
                    bad.append(f"step {s} {tag}: {v!r} but metrics.jsonl's {key} is null")
                    continue
                good = {"ulp": lambda: ulps(v, f32(m)) <= 1, "rel": lambda: abs(v - m) <= 1e-5 * abs(m),
                        "exact": lambda: v == f32(m)}[how]()
                if not good:
                    bad.append(f"step {s} {tag}: {v!r} vs metrics.jsonl {key} {m!r}")
    plan = {v for _, v in scalars.get("memory/planned_bytes", [])}
    if len(plan) != 1 or not min(plan) > 0:
        bad.append(f"memory/planned_bytes: {sorted(plan)} (expected one positive value)")
    return bad


# ---- (a) transformers -------------------------------------------------------------------------------

def hf_logits(model_dir, tokens):
    import torch
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32, attn_implementation="eager")
    model.eval()
    with torch.no_grad():
        out = model(torch.as_tensor(tokens, dtype=torch.long)).logits
    return type(model).__name__, out.float().numpy()


def check_exports(tap, root, manifest, perturb, have_tf):
    for m in manifest["models"]:
        d = os.path.join(root, m["name"])
        tokens, want = np.load(os.path.join(d, "tokens.npy")), np.load(os.path.join(d, "logits.npy")).copy()
        shapes = tokens.shape == (m["B"], m["T"]) and want.shape == (m["B"], m["T"], m["V"])
        tap.ok(shapes and tokens.min() >= 0 and tokens.max() < m["V"] and np.all(np.isfinite(want)),
               f"{m['name']}: tokens {tokens.shape} in [0, {m['V']}), tessera's logits {want.shape} finite")
        if perturb == m["name"]:
            want[0, 0, 0] += BUMP
            tap.diag(f"{m['name']}: --perturb: tessera's logit [0, 0, 0] moved by {BUMP:g}")
        what = f"{m['name']}: AutoModelForCausalLM.from_pretrained(hf/) is {m['class']}; fp32 logits vs tessera's"
        if not have_tf:
            tap.ok(False, what, skip="needs transformers (not installed)")
            continue
        try:
            cls, got = hf_logits(os.path.join(d, "hf"), tokens)
            good, msg = compare_logits(got, want)
            tap.ok(cls == m["class"] and good, f"{what}: class {cls}, {msg}")
        except Exception:
            tap.diag(traceback.format_exc())
            tap.ok(False, f"{what}: raised")


# ---- (b) TensorBoard ------------------------------------------------------------------------------

def tb_scalars(tb_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    ea = EventAccumulator(tb_dir, size_guidance={"scalars": 0})
    ea.Reload()
    return {tag: [(e.step, e.value) for e in ea.Scalars(tag)] for tag in ea.Tags()["scalars"]}


def check_tb(tap, root, manifest, have_tb):
    run = os.path.join(root, manifest["tb_run"])
    train, ev = last_lines(run)
    tap.ok(len(train) >= 2 and len(ev) >= 1, f"tb run: metrics.jsonl has {len(train)} step lines, {len(ev)} eval lines")
    what = "EventAccumulator(tb/): every scalar tag documented, every (step, value) = metrics.jsonl's (float32)"
    what2 = "the same comparison fails on a metrics.jsonl whose step-2 loss moved by 1e-4"
    if not have_tb:
        tap.ok(False, what, skip="needs tensorboard (not installed)")
        tap.ok(False, what2, skip="needs tensorboard (not installed)")
        return
    try:
        sc = tb_scalars(os.path.join(run, "tb"))
        bad = compare_scalars(sc, train, ev)
        tap.diag(f"tags: {', '.join(f'{t} ({len(p)})' for t, p in sorted(sc.items()))}")
        for b in bad[:10]:
            tap.diag(b)
        tap.ok(not bad, f"{what}: {len(sc)} tags, {sum(len(p) for p in sc.values())} points")
        moved = {s: dict(d) for s, d in train.items()}
        moved[2]["loss"] += 1e-4
        bad2 = compare_scalars(sc, moved, ev)
        tap.ok(any("step 2 train/loss" in b for b in bad2), f"{what2} ({'; '.join(bad2)[:160]})")
    except Exception:
        tap.diag(traceback.format_exc())
        while tap.n < tap.tb_end:
            tap.ok(False, "the tb check raised")


# ---- (c) fixtures -----------------------------------------------------------------------------------

def fixture_model(name, cls_name):
    import transformers as tr
    common = dict(vocab_size=FX_V, tie_word_embeddings=False)
    rope = dict(common, hidden_size=FX_C, intermediate_size=128, num_hidden_layers=FX_L,
                num_attention_heads=FX_NH, num_key_value_heads=2, max_position_embeddings=FX_POS,
                rms_norm_eps=1e-6, rope_theta=10000.0, attention_dropout=0.0)
    if name == "gpt2":
        cfg = tr.GPT2Config(vocab_size=FX_V, n_positions=FX_POS, n_embd=FX_C, n_layer=FX_L, n_head=FX_NH,
                            activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                            layer_norm_epsilon=1e-5)
    elif name == "mpt":
        cfg = tr.MptConfig(vocab_size=FX_V, d_model=FX_C, n_heads=FX_NH, n_layers=FX_L, expansion_ratio=4,
                           max_seq_len=FX_POS, no_bias=True, resid_pdrop=0.0, emb_pdrop=0.0, layer_norm_epsilon=1e-5,
                           attn_config={"alibi": True, "alibi_bias_max": 8, "attn_pdrop": 0})
    elif name == "llama":
        cfg = tr.LlamaConfig(**rope, attention_bias=False, mlp_bias=False)
    elif name == "qwen2":
        cfg = tr.Qwen2Config(**dict(rope, tie_word_embeddings=True), use_sliding_window=False)
    else:
        cfg = tr.Qwen3Config(**dict(rope, tie_word_embeddings=True), head_dim=32, attention_bias=False,
                             use_sliding_window=False)
    model = getattr(tr, cls_name)(cfg)
    return model


def randomise(model, seed):
    """Weights ~ N(0, 0.1), norm scales 1 + N(0, 0.1): logits far from uniform, so a mapping
    mistake shows (transformers' own init, std 0.02 and unit norms, gives near-zero logits)."""
    import torch
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            r = torch.randn(p.shape, generator=g, dtype=torch.float32)
            norm = p.dim() == 1 and any(k in name for k in ("ln", "norm")) and not name.endswith("bias")
            p.copy_(1.0 + 0.1 * r if norm else 0.1 * r)


def make_fixtures(tap, out, have_tf):
    root = os.path.join(out, "hf-transformers")
    what = "save_pretrained of a tiny random {} (fp32): from_pretrained of it (eager attention) gives its logits within 1e-5, saved beside it"
    if not have_tf:
        for _, cls, _ in FIXTURES:
            tap.ok(False, what.format(cls), skip="needs transformers (not installed)")
        tap.ok(False, "hf-transformers.tar.gz written", skip="needs transformers (not installed)")
        return
    import torch
    import transformers as tr
    os.makedirs(root, exist_ok=True)
    for k, (name, cls, sets) in enumerate(FIXTURES):
        try:
            model = fixture_model(name, cls)
            randomise(model, 1000 + k)
            model.eval()
            d = os.path.join(root, name)
            model.save_pretrained(d, safe_serialization=True)
            toks = np.random.RandomState(2000 + k).randint(0, FX_V, size=FX_B * FX_T + 1)
            idx = torch.as_tensor(toks[:FX_B * FX_T].reshape(FX_B, FX_T), dtype=torch.long)
            with torch.no_grad():
                logits = model(idx).logits.float().numpy()
            tessera_sets = dict(sets, **{"model.n_layer": str(FX_L), "model.d_model": str(FX_C),
                                          "model.n_head": str(FX_NH), "model.vocab_size": str(FX_V),
                                          "model.max_seq_len": str(FX_POS)})
            with open(os.path.join(d, "fixture.json"), "w") as f:
                json.dump({"name": name, "class": cls, "B": FX_B, "T": FX_T, "V": FX_V,
                           "tokens": [int(t) for t in toks], "sets": tessera_sets,
                           "note": "rows k = tokens[k*T : k*T+T]; logits.npy (B, T, V) float32 of them, "
                                   "transformers' forward on CPU, eager attention",
                           "made_with": {"transformers": tr.__version__, "torch": torch.__version__,
                                         "by": "tests/gpu/real_clients.py",
                                         "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}}, f, indent=1)
            # the fixture's logits are the reloaded model's, eager attention (as its note says); the
            # model that was saved ran transformers' default attention (SDPA), whose sums differ in
            # rounding (1.5e-6 to 2.5e-6 on the H200 machine, 2026-11-26): 1e-5
            _, again = hf_logits(d, idx.numpy())
            np.save(os.path.join(d, "logits.npy"), again)
            good, msg = compare_logits(again, logits, tol=1e-5)
            size = sum(os.path.getsize(os.path.join(d, x)) for x in os.listdir(d))
            tap.ok(good and size < 4e6, f"{what.format(cls)}: {msg}; {size / 1e6:.2f} MB")
        except Exception:
            tap.diag(traceback.format_exc())
            tap.ok(False, f"{what.format(cls)}: raised")
    tgz = os.path.join(out, "hf-transformers.tar.gz")
    with tarfile.open(tgz, "w:gz") as t:
        t.add(root, arcname="hf-transformers")
    names = tarfile.open(tgz).getnames()
    tap.ok(all(f"hf-transformers/{n}/logits.npy" in names for n, _, _ in FIXTURES),
           f"hf-transformers.tar.gz written: {len(names)} entries, {os.path.getsize(tgz) / 1e6:.2f} MB")


def have(mod):
    try:
        __import__(mod)
        return True
    except ImportError:
        return False


def main(argv):
    args = [a for a in argv if not a.startswith("--")]
    torch_only = "--torch-only" in argv
    perturb = None
    if "--perturb" in argv:
        i = argv.index("--perturb")
        perturb = argv[i + 1] if i + 1 < len(argv) else None
        args = [a for a in args if a != perturb]
    if len(args) != 2:
        print("usage: real_clients.py CLIENTS_DIR OUT_DIR [--perturb NAME] [--torch-only]", file=sys.stderr)
        return 2
    root, out = args
    have_tf, have_tb = have("transformers") and have("torch"), have("tensorboard")
    if not torch_only and not (have_tf and have_tb):
        missing = [m for m, h in (("transformers", have_tf), ("tensorboard", have_tb)) if not h]
        print(f"1..0 # SKIP real_clients.py: {' and '.join(missing)} not installed (the lent GPU machine has "
              "them: bash tests/gpu/device.sh clients)")
        return 77
    manifest_path = os.path.join(root, "manifest.json")
    if not os.path.exists(manifest_path):
        print(f"real_clients.py: no {manifest_path}: run 'bash tests/gpu/device.sh pack-clients' where "
              "tessera builds, then carry .devbundle", file=sys.stderr)
        return 2
    manifest = json.load(open(manifest_path))
    if perturb and perturb not in [m["name"] for m in manifest["models"]]:
        print(f"real_clients.py: --perturb {perturb}: no such model in the manifest", file=sys.stderr)
        return 2
    os.makedirs(out, exist_ok=True)
    plan = 2 * len(manifest["models"]) + 3 + len(FIXTURES) + 1
    tap = Tap(plan)
    tap.diag(f"exports made by tessera {manifest['made']['tessera']} at {manifest['made']['time']}")
    for m, h in (("transformers", have_tf), ("tensorboard", have_tb)):
        if h:
            tap.diag(f"{m} {__import__(m).__version__}")
    check_exports(tap, root, manifest, perturb, have_tf)
    tap.tb_end = tap.n + 3
    check_tb(tap, root, manifest, have_tb)
    make_fixtures(tap, out, have_tf)
    with open(os.path.join(out, "clients.txt"), "w") as f:
        f.write("\n".join(tap.lines) + f"\n{tap.n - tap.failed} ok, {tap.failed} not ok of {plan}\n")
    return tap.status()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
