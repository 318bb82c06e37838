#!/usr/bin/env python3
"""real_clients.py — tessera's outputs read by the real clients: transformers and TensorBoard.

    real_clients.py CLIENTS_DIR OUT_DIR [--perturb NAME] [--torch-only]

CLIENTS_DIR is what tests/gpu/clients_prep.py made (device.sh pack-clients: .devbundle/clients).
  (a) each exported model (GPT-2, MPT, Llama, Qwen 2, Qwen 3, and the families of issue 67:
      OLMo 2, OLMo 3, Gemma 2, Gemma 3, SmolLM3; manifest "tol": "rel" for those) loads with transformers'
      AutoModelForCausalLM.from_pretrained as the class the manifest names, and its fp32 logits
      (CPU, eager attention) on the rows of tokens.npy equal tessera's own (logits.npy, ref_dump)
      to max |diff| <= 1e-4 (the families: 1e-4 x max(1, max |logit|)); a model clients_prep.py
      could not export (manifest "left_out": gpt-oss and Qwen3-Next until tessera exports them)
      is a SKIP line naming tessera's reason;
  (b) the run's tb/ read by TensorBoard's EventAccumulator: every scalar tag is one tessera documents
      (docs/tracking.md), and every (step, value) equals metrics.jsonl's within float32 rounding,
      each step of metrics.jsonl present; a copy of metrics.jsonl with one loss moved by 1e-4
      must fail the same comparison;
  (c) tiny random transformers models (FIXTURES: GPT2LMHeadModel, MptForCausalLM,
      LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM; vocabulary 500, hidden 64, fp32) written
      with save_pretrained, each with its logits on fixed token ids (logits.npy, fixture.json), into
      OUT_DIR/hf-transformers.tar.gz, for tests/fixtures/hf-transformers/ (the CPU-side import test
      tests/reference/test_hf_transformers.py).
  (d) the same for the families of issues 67 and 68 (FAMILIES: Olmo2ForCausalLM, Olmo3ForCausalLM
      with sliding layers, Gemma2ForCausalLM, Gemma3ForCausalLM (text: sliding + global layers,
      linear scaling, its local base), SmolLM3ForCausalLM (NoPE layers), GptOssForCausalLM (small
      experts, sinks, YaRN), Qwen3NextForCausalLM (linear + full layers, MoE with a shared
      expert), Qwen3_5ForCausalLM and Qwen3_5MoeForCausalLM (the same layers, unfused
      projections, stacked experts)), each built in its own try from transformers' own config class: a class this
      transformers lacks is a SKIP line, any other error fails that family alone. Their
      fixture.json has no tessera keys: the CPU side imports them with `tessera ckpt import`.
--perturb NAME adds 1e-3 to one of tessera's logits of model NAME and runs (a) alone: that model's
check must fail (device.sh clients runs it so, to show the comparison can fail with the real
client; (b) has its own negative control, and the fixtures are made once, by the first run).
--torch-only runs the checks that need only torch and numpy, the others reported as SKIP lines;
without it, a machine lacking transformers or tensorboard skips the whole test (exit 77).
TAP; exit 0 all passed, 1 a check failed, 77 skipped. Summary in OUT_DIR/clients.txt.
"""
import json
import math
import os
import shutil
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

# (d): the families of issues 67 and 68 (vocabulary FX_V, hidden FX_C, FX_NH heads, fp32). Each:
# name, model class, config class, config kwargs (transformers' names), and its RoPE in both of
# transformers' forms: 5.x's rope_parameters, and 4.x's rope_theta + rope_scaling (+ a local base);
# family_config tries them in that order. Numbers have the types transformers 5's strict config
# dataclasses declare (Gemma2Config: query_pre_attn_scalar: int, the soft caps float | None).
SW, FULL = "sliding_attention", "full_attention"


def _fam(L, **kw):
    base = dict(vocab_size=FX_V, hidden_size=FX_C, intermediate_size=128, num_hidden_layers=L,
                num_attention_heads=FX_NH, num_key_value_heads=2, max_position_embeddings=FX_POS,
                rms_norm_eps=1e-6, attention_dropout=0.0, tie_word_embeddings=False)
    return dict(base, **kw)


def _rope(theta, scaling=None, **extra):
    """({rope_parameters: ...}, {rope_theta, rope_scaling}) of one RoPE for every layer."""
    return ({"rope_parameters": dict({"rope_type": "default", "rope_theta": theta}, **(scaling or {}), **extra)},
            {"rope_theta": theta, "rope_scaling": scaling})


GEMMA = dict(head_dim=16, hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True)
YARN = {"rope_type": "yarn", "factor": 4.0, "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
        "original_max_position_embeddings": 16}
QWEN35_KW = dict(head_dim=16, linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=16,
                 linear_num_key_heads=2, linear_num_value_heads=4,
                 layer_types=["linear_attention"] * 3 + [FULL])
QWEN35_ROPE = dict(partial_rotary_factor=0.25, mrope_section=[1, 1, 0], mrope_interleaved=True)
FAMILIES = [
    ("olmo2", "Olmo2ForCausalLM", "Olmo2Config", _fam(2), _rope(500000.0)),
    ("olmo3", "Olmo3ForCausalLM", "Olmo3Config", _fam(4, sliding_window=5, layer_types=[SW] * 3 + [FULL]),
     _rope(500000.0)),
    # both soft caps at values that bite; every other layer sliding
    ("gemma2", "Gemma2ForCausalLM", "Gemma2Config",
     _fam(4, query_pre_attn_scalar=32, sliding_window=5, layer_types=[SW, FULL] * 2,
          attn_logit_softcapping=0.5, final_logit_softcapping=2.0, **GEMMA), _rope(10000.0)),
    # Gemma 3 4B-27B's RoPE: the full layer rope_theta with linear scaling by 8, the sliding ones
    # their local base unscaled
    ("gemma3", "Gemma3ForCausalLM", "Gemma3TextConfig",
     _fam(3, num_key_value_heads=1, query_pre_attn_scalar=24, sliding_window=6, layer_types=[SW, SW, FULL],
          **GEMMA),
     ({"rope_parameters": {FULL: {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
                           SW: {"rope_type": "default", "rope_theta": 10000.0}}},
      {"rope_theta": 1000000.0, "rope_scaling": {"rope_type": "linear", "factor": 8.0},
       "rope_local_base_freq": 10000.0})),
    ("smollm3", "SmolLM3ForCausalLM", "SmolLM3Config",
     _fam(4, no_rope_layers=[1, 1, 1, 0], use_sliding_window=False, tie_word_embeddings=True), _rope(2000000.0)),
    # 4 experts of width 32, top 2, a sink per head, YaRN over an original context of 16
    ("gpt_oss", "GptOssForCausalLM", "GptOssConfig",
     _fam(2, intermediate_size=32, head_dim=16, num_local_experts=4, num_experts_per_tok=2, sliding_window=5,
          layer_types=[SW, FULL], rms_norm_eps=1e-5), _rope(150000.0, YARN)),
    # 3 Gated DeltaNet layers + 1 gated full one; every layer MoE (4 experts of 32, top 2) with a
    # shared expert of 32; partial rotary 0.25 (4 of head_dim 16)
    ("qwen3_next", "Qwen3NextForCausalLM", "Qwen3NextConfig",
     _fam(4, head_dim=16, partial_rotary_factor=0.25, linear_conv_kernel_dim=4, linear_key_head_dim=16,
          linear_value_head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4, decoder_sparse_step=1,
          moe_intermediate_size=32, shared_expert_intermediate_size=32, num_experts=4, num_experts_per_tok=2,
          norm_topk_prob=True, mlp_only_layers=[], layer_types=["linear_attention"] * 3 + [FULL]),
     _rope(10000.0, partial_rotary_factor=0.25)),
    # Qwen 3.5's text classes (Qwen3-Next's layers, the unfused DeltaNet projections): 3 linear + 1
    # full layer, dense, and every layer MoE (4 stacked experts of 32, top 2, shared expert of 32);
    # RoPE in rope_parameters with an mrope_section over its 2 rotary frequencies (text: plain RoPE)
    ("qwen3_5_text", "Qwen3_5ForCausalLM", "Qwen3_5TextConfig", _fam(4, **QWEN35_KW),
     _rope(10000.0, **QWEN35_ROPE)),
    ("qwen3_5_moe_text", "Qwen3_5MoeForCausalLM", "Qwen3_5MoeTextConfig",
     _fam(4, moe_intermediate_size=32, shared_expert_intermediate_size=32, num_experts=4,
          num_experts_per_tok=2, **QWEN35_KW), _rope(10000.0, **QWEN35_ROPE)),
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


def compare_logits_rel(got, want, tol=TOL_LOGITS):
    """compare_logits at tol relative to the logits' scale: max |diff| <= tol x max(1, max |want|)
    (the families' check: Gemma's scaled embeddings and the soft caps move the scale)."""
    scale = max(1.0, float(np.max(np.abs(np.asarray(want, dtype=np.float64))))) if np.size(want) else 1.0
    good, msg = compare_logits(got, want, tol * scale)
    return good, f"{msg} (= {tol:g} x max(1, max |logit|) {scale:.3g})"


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
    cpu_paths(model)
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
        import transformers as tr
        missing = lacks(tr, m["class"])
        if missing:  # a class newer than this transformers (Qwen 3.5: 5.x with qwen3_5): said, not failed
            tap.ok(False, what, skip=f"transformers {tr.__version__}: {missing}")
            continue
        try:
            cls, got = hf_logits(os.path.join(d, "hf"), tokens)
            good, msg = (compare_logits_rel if m.get("tol") == "rel" else compare_logits)(got, want)
            tap.ok(cls == m["class"] and good, f"{what}: class {cls}, {msg}")
        except Exception:
            tap.diag(traceback.format_exc())
            tap.ok(False, f"{what}: raised")
    for m in manifest.get("left_out", []):  # what tessera cannot export yet: said, not failed
        tap.ok(False, f"{m['name']}: AutoModelForCausalLM.from_pretrained of tessera's {m['class']} export",
               skip=f"not exported by this tessera: {m['why']}")


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


def randomise(model, seed, around_init=False):
    """Weights ~ N(0, 0.1), norm scales 1 + N(0, 0.1): logits far from uniform, so a mapping
    mistake shows (transformers' own init, std 0.02 and unit norms, gives near-zero logits).
    around_init (the families): norm scales are their init + N(0, 0.1), so Gemma's and
    Qwen3-Next's zero-centred (1 + w) norms get w near 0 and the plain ones w near 1."""
    import torch
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            r = torch.randn(p.shape, generator=g, dtype=torch.float32)
            norm = p.dim() == 1 and any(k in name for k in ("ln", "norm")) and not name.endswith("bias")
            base = p.detach().clone() if around_init else 1.0
            p.copy_(base + 0.1 * r if norm else 0.1 * r)


def write_fixture(root, name, cls, model, seed, meta, compare):
    """model.save_pretrained into root/name, then fixture.json (tokens, B, T, V, meta) and
    logits.npy: the reloaded model's logits (eager attention, as the note says) on the fixed rows.
    The model that was saved ran transformers' default attention (SDPA), whose sums differ in
    rounding (1.5e-6 to 2.5e-6 on the H200 machine, 2026-11-26): compare(reloaded, saved) at 1e-5.
    Returns (ok, message)."""
    import torch
    import transformers as tr
    d = os.path.join(root, name)
    model.save_pretrained(d, safe_serialization=True)
    toks = np.random.RandomState(seed).randint(0, FX_V, size=FX_B * FX_T + 1)
    idx = torch.as_tensor(toks[:FX_B * FX_T].reshape(FX_B, FX_T), dtype=torch.long)
    with torch.no_grad():
        logits = model(idx).logits.float().numpy()
    with open(os.path.join(d, "fixture.json"), "w") as f:
        json.dump(dict({"name": name, "class": cls, "B": FX_B, "T": FX_T, "V": FX_V,
                        "tokens": [int(t) for t in toks],
                        "note": "rows k = tokens[k*T : k*T+T]; logits.npy (B, T, V) float32 of them, "
                                "transformers' forward on CPU, eager attention",
                        "made_with": {"transformers": tr.__version__, "torch": torch.__version__,
                                      "by": "tests/gpu/real_clients.py",
                                      "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}}, **meta),
                  f, indent=1)
    _, again = hf_logits(d, idx.numpy())
    np.save(os.path.join(d, "logits.npy"), again)
    good, msg = compare(again, logits, tol=1e-5)
    size = sum(os.path.getsize(os.path.join(d, x)) for x in os.listdir(d))
    return good and size < 4e6, f"{msg}; {size / 1e6:.2f} MB"


def make_fixtures(tap, out, have_tf):
    """(c) and (d): the fixtures, then the tarball of those written. Returns the names written."""
    root = os.path.join(out, "hf-transformers")
    what = "save_pretrained of a tiny random {} (fp32): from_pretrained of it (eager attention) gives its logits within 1e-5, saved beside it"
    if not have_tf:
        for _, cls, *_ in FIXTURES + FAMILIES:
            tap.ok(False, what.format(cls), skip="needs transformers (not installed)")
        tap.ok(False, "hf-transformers.tar.gz written", skip="needs transformers (not installed)")
        return []
    os.makedirs(root, exist_ok=True)
    written = []
    for k, (name, cls, sets) in enumerate(FIXTURES):
        try:
            model = fixture_model(name, cls)
            randomise(model, 1000 + k)
            model.eval()
            tessera_sets = dict(sets, **{"model.n_layer": str(FX_L), "model.d_model": str(FX_C),
                                          "model.n_head": str(FX_NH), "model.vocab_size": str(FX_V),
                                          "model.max_seq_len": str(FX_POS)})
            good, msg = write_fixture(root, name, cls, model, 2000 + k, {"sets": tessera_sets}, compare_logits)
            written += [name] if good else discard(root, name)
            tap.ok(good, f"{what.format(cls)}: {msg}")
        except Exception:
            tap.diag(traceback.format_exc())
            tap.ok(False, f"{what.format(cls)}: raised")
            discard(root, name)
    for k, fam in enumerate(FAMILIES):
        written += make_family(tap, root, k, fam, what.format(fam[1]))
    tgz = os.path.join(out, "hf-transformers.tar.gz")
    with tarfile.open(tgz, "w:gz") as t:
        t.add(root, arcname="hf-transformers")
    names = tarfile.open(tgz).getnames()
    tap.ok(written and all(f"hf-transformers/{n}/logits.npy" in names for n in written),
           f"hf-transformers.tar.gz written: {len(written)} fixtures ({', '.join(written)}), {len(names)} entries, "
           f"{os.path.getsize(tgz) / 1e6:.2f} MB")
    return written


# ---- (d) the families of issues 67 and 68 ----------------------------------------------------------

def takes_rope_parameters(cls):
    """Whether a config class declares rope_parameters (transformers 5). A 4.x class would keep an
    unknown rope_parameters as a plain attribute and silently use its default RoPE."""
    import dataclasses
    import inspect
    if dataclasses.is_dataclass(cls) and any(f.name == "rope_parameters" for f in dataclasses.fields(cls)):
        return True
    try:
        return "rope_parameters" in inspect.signature(cls.__init__).parameters
    except (TypeError, ValueError):
        return False


def family_config(tr, cfg_name, kw, rope):
    """cfg_name's config from kw and the RoPE in the form its class declares (transformers 5's
    rope_parameters, 4.x's rope_theta + rope_scaling), the other form if that one raises:
    (config, the form taken, the errors of the forms refused)."""
    cls = getattr(tr, cfg_name)
    forms = list(zip(("rope_parameters", "rope_theta + rope_scaling"), rope))
    if not takes_rope_parameters(cls):
        forms.reverse()
    errors = []
    for form, r in forms:
        try:
            return cls(**kw, **r), form, errors
        except Exception as e:  # a strict dataclass's validation error, TypeError, ValueError...
            errors.append(f"{form}: {type(e).__name__}: {e}")
    raise ValueError(f"{cfg_name} took neither RoPE form: {'; '.join(errors)}")


def cpu_paths(model):
    """Qwen3-Next's and Qwen 3.5's linear layers take flash-linear-attention's and causal-conv1d's
    kernels when those packages are installed (Triton: GPU only); these fixtures run on the CPU, so
    every module holding them gets transformers' own torch forms (from the module's own modeling
    file: modeling_qwen3_next, modeling_qwen3_5, modeling_qwen3_5_moe). Returns how many were
    replaced."""
    n = 0
    for m in model.modules():
        mod = sys.modules.get(type(m).__module__)
        for attr, torch_form in (("chunk_gated_delta_rule", "torch_chunk_gated_delta_rule"),
                                 ("recurrent_gated_delta_rule", "torch_recurrent_gated_delta_rule")):
            if hasattr(m, attr) and hasattr(mod, torch_form) and getattr(m, attr) is not getattr(mod, torch_form):
                setattr(m, attr, getattr(mod, torch_form))
                n += 1
        if getattr(m, "causal_conv1d_fn", None) is not None:
            m.causal_conv1d_fn = None  # the module's own conv1d then SiLU
            n += 1
    return n


def make_family(tap, root, k, fam, what):
    """One family's fixture (one TAP line): a SKIP line when this transformers lacks its classes,
    not ok (with the traceback) when anything else fails. Returns [name] when written."""
    import transformers as tr
    name, cls, cfg_name, kw, rope = fam
    missing = [why for why in (lacks(tr, c) for c in (cls, cfg_name)) if why]
    if missing:
        tap.ok(False, what, skip=f"transformers {tr.__version__}: {'; '.join(missing)}")
        return []
    try:
        cfg, form, refused = family_config(tr, cfg_name, kw, rope)
        for e in refused:
            tap.diag(f"{name}: {e}")
        differ = [f"{key} {getattr(cfg, key, None)!r} (asked {kw[key]!r})" for key in
                  ("layer_types", "sliding_window", "no_rope_layers", "num_local_experts", "num_experts")
                  if key in kw and getattr(cfg, key, None) != kw[key]]
        for x in differ:
            tap.diag(f"{name}: the config holds {x}")
        model = getattr(tr, cls)(cfg)
        cpu_paths(model)
        randomise(model, 3000 + k, around_init=True)
        model.eval()
        good, msg = write_fixture(root, name, cls, model, 4000 + k,
                                  {"model_type": cfg.model_type, "rope_form": form,
                                   "import": "tessera ckpt import (no tessera keys: config.json gives the model)"},
                                  compare_logits_rel)
        tap.ok(good, f"{what}: RoPE as {form}; {msg}")
        return [name] if good else discard(root, name)
    except Exception:
        tap.diag(traceback.format_exc())
        tap.ok(False, f"{what}: raised")
        return discard(root, name)


def lacks(tr, name):
    """None when transformers has the class name, else why not (missing, or failing to import)."""
    try:
        getattr(tr, name)
        return None
    except AttributeError:
        return f"no {name}"
    except Exception as e:  # a lazy import that fails (a dependency the class needs)
        return f"{name} does not import ({type(e).__name__}: {e})"


def discard(root, name):
    """A fixture not written whole leaves nothing in the tarball. Returns []."""
    shutil.rmtree(os.path.join(root, name), ignore_errors=True)
    return []


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
    exports_only = perturb is not None  # the perturbed run shows that (a) can fail: it runs (a) alone
    plan = 2 * len(manifest["models"]) + len(manifest.get("left_out", []))
    plan += 0 if exports_only else 3 + len(FIXTURES) + len(FAMILIES) + 1
    tap = Tap(plan)
    tap.diag(f"exports made by tessera {manifest['made']['tessera']} at {manifest['made']['time']}")
    for m, h in (("transformers", have_tf), ("tensorboard", have_tb)):
        if h:
            tap.diag(f"{m} {__import__(m).__version__}")
    check_exports(tap, root, manifest, perturb, have_tf)
    if not exports_only:
        tap.tb_end = tap.n + 3
        check_tb(tap, root, manifest, have_tb)
        make_fixtures(tap, out, have_tf)
    with open(os.path.join(out, "clients.txt"), "w") as f:
        f.write("\n".join(tap.lines) + f"\n{tap.n - tap.failed} ok, {tap.failed} not ok of {plan}\n")
    return tap.status()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
