#!/usr/bin/env python3
"""test_ckpt_h5py.py — tessera checkpoints read with h5py alone, checked against the format page
(docs/checkpoint-format.md) and against values from outside the checkpoint library.

Runs (synthetic corpus, vocab 500, so the embedding is padded to Vp = 512):
  gpt/w1      GPT-2 style (learned positions, biases, max_seq_len 48 != seq_len 32, MLP ratio 3),
              3 steps on 1 MPI rank, a checkpoint after every step
  gpt/w2z     the same run on 2 ranks with ZeRO-1 (each rank writes its shard of the moments)
  gpt/w2d     the same run on 2 ranks with DDP
  mpt/w2      MPT style (ALiBi: no wpe; no biases; vocab_multiple 96 -> Vp 576; ratio 2), 2 steps
              on 2 ranks
  ref_dump    build/tests/ref_dump with gpt's config: the initial weights (/params), the first
              batch's gradient (/step0/grads) and the weights after 3 trainer steps (/final),
              written with plain H5Dwrite, without the checkpoint library

Checks, per checkpoint file (gpt/w1, gpt/w2z and mpt/w2 at their last step):
  - every root attribute of the format page, with its HDF5 type (int64 scalar, variable-length
    UTF-8 string) and value: format, version, step, tokens = step * global_batch * seq_len,
    data_cursor = step * global_batch, world_size, global_batch, seed, the config text (each key
    this test set, with its value; and the text loads back: tessera-train --dry-run), the program
    version (= tessera-train --version), created (ISO 8601 UTC), rng;
  - the datasets are exactly model/<p>, optim/m/<p>, optim/v/<p> for the parameters the config
    defines, each float32 little-endian, contiguous, of the shape derived here from the config
    (expected_tensors below: written from the model's definition, not read from any file);
  - each dataset's crc32c attribute (uint32) equals a CRC32C computed here (table-driven,
    Castagnoli, reflected 0x82F63B78) over the tensor's bytes, row-major little-endian;
  - `tessera ckpt verify` accepts it.
Values:
  - gpt/w1 step 3: every model/ tensor equals ref_dump's /final bit for bit (same trainer code,
    one process, one thread: there is nothing to round differently);
  - gpt/w1 step 1: ref_dump's initial weights plus one AdamW step computed here in float64 from
    ref_dump's step-0 gradient (clipped as the trainer does): weights within 1e-3 * lr absolute,
    m and v within 1e-6 relative (TOL_* below);
  - gpt/w2z (ZeRO-1) step 3 equals gpt/w2d (DDP) step 3 bit for bit, all 48 tensors;
  - gpt/w2z step 3 vs gpt/w1 step 3: NOT bit-identical (2 ranks sum the gradient in another order),
    so within TOL_WORLD relative per tensor (the zero-gradient k block of qkvb separately, as in
    test_reference.py);
  - negative control: a copy of gpt/w1 step 3 with one byte flipped inside optim/v/fcw: this
    test's CRC check names exactly that tensor, and `tessera ckpt verify` exits 2.

Run: TESTS=ckpt_h5py bash tests/run.sh   (needs `make`: build/tessera-train, build/tessera,
build/tests/ref_dump). Prints TAP; exits 1 if a check fails, 77 (skip) without h5py/numpy.
"""
import datetime
import os
import re
import shutil
import subprocess
import sys
import tempfile

from ref_env import MPIRUN, ROOT, TESSERA, TRAIN, REF_DUMP, need_programs, skip

try:
    import numpy as np
    import h5py
except ImportError as e:  # Debian: apt-get install python3-h5py python3-numpy
    skip(f"cannot import {e.name} ({e}); this test needs h5py and numpy")

BASE_CFG = os.path.join(ROOT, "configs", "tiny.cfg")
need_programs(TRAIN, TESSERA, REF_DUMP)

# ---- tolerances --------------------------------------------------------------------------------
# One AdamW step recomputed in float64 from the same float32 gradient: the trainer rounds each of
# a handful of float32 operations (2^-24 = 6e-8 relative each); measured <= 3e-7 relative on m
# and v, <= 6e-8 absolute on weights (one ulp of the LayerNorm weights near 1). The step itself
# moves every element by about lr, so 1e-3 * lr on the weights still catches a wrong update by
# far, and so does 1e-6 on the moments (a wrong beta or a missed clip is >= 1e-2).
TOL_STEP1_W_ABS = 1e-3   # times lr
TOL_STEP1_MOMENT = 1e-6  # max |diff| / max |reference| per tensor
# 1 rank vs 2 ranks: the gradient is the same sum in a different order, so it differs in the last
# bits and AdamW carries that on. Measured after 3 steps: <= 2.3e-6 relative (L2) per tensor.
TOL_WORLD = 1e-5
# The k block of qkvb has a gradient that is exactly zero in exact arithmetic (a bias on every
# key shifts all scores of a query alike); in fp32 it is roundoff noise of ~1e-12, independent
# in the two runs, so its values are noise too (~5e-6 here). Checked with an absolute bound:
# at most the sum of the step sizes (what a real, consistently signed gradient would move it).

# ---- the runs ----------------------------------------------------------------------------------
VOCAB = 500
COMMON = {
    "seed": 7, "global_batch": 8, "micro_batch": 2, "seq_len": 32, "threads": 1,
    "save_interval": "1ba", "keep_last": 5, "eval_interval": "0ba", "log_interval": 1,
    "sample.tokens": 0, "data.tokenizer": "", "optim.lr": 3e-3, "optim.warmup": "1ba",
    "optim.schedule": "cosine", "optim.alpha_f": 0.1, "optim.beta1": 0.9, "optim.beta2": 0.95,
    "optim.eps": 1e-8, "optim.weight_decay": 0.1, "optim.grad_clip": 1.0,
    "optim.decay_norms_biases": "false", "optim.decay_embeddings": "false",
}
GPT = {"model.n_layer": 2, "model.d_model": 64, "model.n_head": 4, "model.vocab_size": VOCAB,
       "model.vocab_multiple": 128, "model.max_seq_len": 48, "model.pos": "learned",
       "model.bias": "true", "model.expansion_ratio": 3.0, "model.gelu": "tanh"}
MPT = {"model.n_layer": 2, "model.d_model": 48, "model.n_head": 3, "model.vocab_size": VOCAB,
       "model.vocab_multiple": 96, "model.max_seq_len": 0, "model.pos": "alibi",
       "model.bias": "false", "model.expansion_ratio": 2.0, "model.gelu": "exact"}
GPT_STEPS, MPT_STEPS = 3, 2
# name -> (model settings, steps, ranks, sharding)
RUNS = {
    "gpt/w1": (GPT, GPT_STEPS, 1, "ddp"),
    "gpt/w2z": (GPT, GPT_STEPS, 2, "zero1"),
    "gpt/w2d": (GPT, GPT_STEPS, 2, "ddp"),
    "mpt/w2": (MPT, MPT_STEPS, 2, "ddp"),
}
CHECKED_FILES = ["gpt/w1", "gpt/w2z", "mpt/w2"]  # full format checks on their last checkpoint
CHECKS_PER_FILE = 4
PLAN = 2 + len(RUNS) + 1 + CHECKS_PER_FILE * len(CHECKED_FILES) + 5

ROOT_INT_ATTRS = ["format_version", "step", "tokens", "data_cursor", "world_size",
                  "global_batch", "seed"]
ROOT_STR_ATTRS = ["format", "config", "program_version", "created", "rng", "data_sources"]


def settings(run):
    model, steps, ranks, sharding = RUNS[run]
    s = dict(COMMON)
    s.update(model)
    s["max_duration"] = f"{steps}ba"
    s["parallel.sharding"] = sharding
    return s


# ---- the model's tensors, from the config alone ------------------------------------------------

def expected_tensors(s):
    """Parameter name -> global shape, derived from the config the way the model is defined
    (GPT-2 / MPT, per-layer tensors stacked on a leading L axis, linear weights (out, in))."""
    L, C = int(s["model.n_layer"]), int(s["model.d_model"])
    V, mult = int(s["model.vocab_size"]), int(s["model.vocab_multiple"])
    Vp = -(-V // mult) * mult                       # rows padded up to a multiple
    F = int(round(float(s["model.expansion_ratio"]) * C))
    T_pos = int(s["model.max_seq_len"]) or int(s["seq_len"])
    learned = s["model.pos"] == "learned"
    bias = s["model.bias"] == "true"
    shapes = {"wte": (Vp, C)}
    if learned:
        shapes["wpe"] = (T_pos, C)
    shapes["ln1w"] = (L, C)
    if bias:
        shapes["ln1b"] = (L, C)
    shapes["qkvw"] = (L, 3 * C, C)
    if bias:
        shapes["qkvb"] = (L, 3 * C)
    shapes["attprojw"] = (L, C, C)
    if bias:
        shapes["attprojb"] = (L, C)
    shapes["ln2w"] = (L, C)
    if bias:
        shapes["ln2b"] = (L, C)
    shapes["fcw"] = (L, F, C)
    if bias:
        shapes["fcb"] = (L, F)
    shapes["fcprojw"] = (L, C, F)
    if bias:
        shapes["fcprojb"] = (L, C)
    shapes["lnfw"] = (C,)
    if bias:
        shapes["lnfb"] = (C,)
    return shapes


def expected_datasets(s):
    shapes = expected_tensors(s)
    return {prefix + n: shp for prefix in ("model/", "optim/m/", "optim/v/")
            for n, shp in shapes.items()}


def decays(name, s):
    """AdamW weight decay applies to linear weights; to embeddings and norms/biases only when
    optim.decay_embeddings / optim.decay_norms_biases say so (docs/config.md)."""
    if name in ("wte", "wpe"):
        return s["optim.decay_embeddings"] == "true"
    if name in ("qkvw", "attprojw", "fcw", "fcprojw"):
        return True
    return s["optim.decay_norms_biases"] == "true"


# ---- CRC32C ------------------------------------------------------------------------------------

def _crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
        table.append(c)
    return table


CRC_TABLE = _crc32c_table()


def crc32c(data):
    """CRC32C (Castagnoli, reflected polynomial 0x82F63B78, init and final xor 0xFFFFFFFF)."""
    t, c = CRC_TABLE, 0xFFFFFFFF
    for b in data:
        c = t[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def crc_problems(path):
    """Every dataset whose stored crc32c differs from the CRC32C of its bytes."""
    bad = []
    with h5py.File(path, "r") as f:
        def visit(name, obj):
            if not isinstance(obj, h5py.Dataset):
                return
            data = obj[...].astype("<f4", copy=False).tobytes(order="C")
            want = int(obj.attrs["crc32c"]) if "crc32c" in obj.attrs else None
            got = crc32c(data)
            if want != got:
                bad.append((name, got, want))
        f.visititems(visit)
    return bad


# ---- helpers -----------------------------------------------------------------------------------

from tap import Tap  # noqa: E402  (the script's own directory is on sys.path)


def run_env():
    env = dict(os.environ)
    if os.geteuid() == 0:  # ref_dump calls MPI_Init outside mpirun; OpenMPI refuses root without
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return env


def sh(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, env=run_env(), **kw)


def set_args(s):
    out = []
    for k, v in s.items():
        out += ["--set", f"{k}={v}"]
    return out


def ckpt_name(step):
    return f"step-{step:08d}.h5"


def read_all(path):
    with h5py.File(path, "r") as f:
        out = {}
        f.visititems(lambda n, o: out.__setitem__(n, o[...]) if isinstance(o, h5py.Dataset)
                     else None)
        return out


def parse_config_text(text):
    """The effective config as tessera prints it (`key = value;`, groups `name = {` ... `};`)
    -> {"group.key": "value"} with string quotes removed."""
    out, group = {}, None
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.match(r"^(\w+)\s*=\s*\{$", line)
        if m:
            group = m.group(1)
            continue
        if line == "};":
            group = None
            continue
        m = re.match(r'^(\w+)\s*=\s*(.*?);$', line)
        if m:
            v = m.group(2)
            if len(v) >= 2 and v[0] == v[-1] == '"':
                v = v[1:-1]
            out[(group + "." if group else "") + m.group(1)] = v
    return out


def same_value(got, want):
    if isinstance(want, (int, float)) and not isinstance(want, bool):
        try:
            return float(got) == float(want)
        except ValueError:
            return False
    return str(got) == str(want)


def rel_err(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    nb = np.linalg.norm(b)
    d = np.linalg.norm(a - b)
    if not np.isfinite(d):
        return float("inf")
    return d / nb if nb > 0 else (0.0 if d == 0 else float("inf"))


# ---- checks ------------------------------------------------------------------------------------

def check_root_attrs(tap, run, path, s, ranks, step, run_dir, version, tmp):
    bad = []
    with h5py.File(path, "r") as f:
        # format 3 (2's): strings are fixed-length (h5py gives bytes); meta_crc32c covers the others
        attrs = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f.attrs.items()}
        for k in ROOT_INT_ATTRS:
            if k not in attrs:
                bad.append(f"root attribute {k} is missing")
                continue
            a = f.attrs.get_id(k)
            if a.shape != () or a.dtype != np.dtype("<i8"):
                bad.append(f"{k}: shape {a.shape} type {a.dtype}, want a scalar int64 (<i8)")
        for k in ROOT_STR_ATTRS:
            if k not in attrs:
                bad.append(f"root attribute {k} is missing")
                continue
            a = f.attrs.get_id(k)
            info = h5py.check_string_dtype(a.dtype)
            if a.shape != () or info is None or info.encoding != "utf-8" or info.length is None:
                bad.append(f"{k}: shape {a.shape} type {a.dtype} ({info}), want a scalar "
                           f"fixed-length UTF-8 string")
        extra = sorted(set(attrs) - set(ROOT_INT_ATTRS) - set(ROOT_STR_ATTRS))
        if extra:
            tap.diag(f"{run}: root attributes not on the format page: {extra}")
    if bad:
        for b in bad[:10]:
            tap.diag(b)
        return tap.ok(False, f"{run}: root attributes and their HDF5 types")
    gb, T = int(s["global_batch"]), int(s["seq_len"])
    want = {"format": "tessera-checkpoint", "format_version": 3, "step": step,
            "tokens": step * gb * T, "data_cursor": step * gb, "world_size": ranks,
            "global_batch": gb, "seed": int(s["seed"]), "program_version": version}
    for k, v in want.items():
        if attrs[k] != v:
            bad.append(f"{k} = {attrs[k]!r}, want {v!r}")
    if not re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", attrs["created"]):
        bad.append(f"created = {attrs['created']!r} is not ISO 8601 UTC (YYYY-MM-DDTHH:MM:SSZ)")
    else:
        datetime.datetime.strptime(attrs["created"], "%Y-%m-%dT%H:%M:%SZ")
    if "SplitMix64" not in attrs["rng"]:
        bad.append(f"rng = {attrs['rng']!r} does not name the counter-based generator")
    # data_sources: a line per source, "KEY crc32c:X shards:N tokens:N PATH", data.train first
    lines = attrs["data_sources"].splitlines()
    for key, i in (("data.train", 0), ("data.val", 1)):
        pat = re.escape(key) + r" crc32c:[0-9a-f]{8} shards:\d+ tokens:\d+ " + re.escape(str(s[key]))
        if len(lines) != 2 or not re.fullmatch(pat, lines[i]):
            bad.append(f"data_sources = {attrs['data_sources']!r}: line {i + 1} is not {key}'s")
    # the config text: every key this test set, with its value, and it loads back
    cfg = parse_config_text(attrs["config"])
    expect_cfg = dict(s, run_dir=run_dir)
    for k, v in expect_cfg.items():
        if k not in cfg:
            bad.append(f"config text has no key {k}")
        elif not same_value(cfg[k], v):
            bad.append(f"config text: {k} = {cfg[k]!r}, this run set {v!r}")
    cfg_path = os.path.join(tmp, run.replace("/", "_") + ".from-ckpt.cfg")
    with open(cfg_path, "w") as g:
        g.write(attrs["config"])
    r = sh([TRAIN, "--config", cfg_path, "--dry-run"])
    if r.returncode != 0:
        bad.append(f"the stored config does not load back (tessera-train --dry-run exit "
                   f"{r.returncode}): {(r.stdout + r.stderr)[-300:]}")
    for b in bad[:10]:
        tap.diag(b)
    return tap.ok(not bad, f"{run}: root attributes: format, version, step {step}, tokens, "
                           f"data_cursor, world_size {ranks}, global_batch, seed, config text "
                           f"({len(expect_cfg)} keys as set; loads back), program_version, "
                           f"created, rng, data_sources; int64 / UTF-8 string types")


def check_datasets(tap, run, path, s):
    want = expected_datasets(s)
    bad, got = [], {}
    with h5py.File(path, "r") as f:
        def visit(name, obj):
            if isinstance(obj, h5py.Dataset):
                got[name] = obj
                if obj.dtype != np.dtype("<f4"):
                    bad.append(f"{name}: type {obj.dtype}, want float32 little-endian")
                if obj.chunks is not None or obj.compression is not None:
                    bad.append(f"{name}: chunked/compressed, want contiguous")
                if "crc32c" not in obj.attrs:
                    bad.append(f"{name}: no crc32c attribute")
                else:
                    a = obj.attrs.get_id("crc32c")
                    if a.shape != () or a.dtype != np.dtype("<u4"):
                        bad.append(f"{name}: crc32c is {a.dtype} {a.shape}, want a scalar uint32")
                if tuple(obj.shape) != want.get(name, tuple(obj.shape)):
                    bad.append(f"{name}: shape {tuple(obj.shape)}, the config defines "
                               f"{want[name]}")
        f.visititems(visit)
        missing = sorted(set(want) - set(got))
        extra = sorted(set(got) - set(want))
        if missing:
            bad.append(f"missing datasets: {missing}")
        if extra:
            bad.append(f"datasets the config does not define: {extra}")
    for b in bad[:10]:
        tap.diag(b)
    sh_ = expected_tensors(s)
    return tap.ok(not bad, f"{run}: exactly the {len(want)} datasets model|optim/m|optim/v of "
                           f"{len(sh_)} parameters, float32 LE, contiguous, shapes from the "
                           f"config (wte {sh_['wte']}, qkvw {sh_['qkvw']}, fcw {sh_['fcw']}"
                           f"{', wpe ' + str(sh_['wpe']) if 'wpe' in sh_ else ', no wpe'}), "
                           f"uint32 crc32c")


def check_crc(tap, run, path):
    bad = crc_problems(path)
    for name, got, want in bad[:10]:
        tap.diag(f"{name}: CRC32C of the bytes 0x{got:08x}, attribute "
                 f"{'missing' if want is None else f'0x{want:08x}'}")
    with h5py.File(path, "r") as f:
        n = []
        f.visititems(lambda name, o: n.append(name) if isinstance(o, h5py.Dataset) else None)
    return tap.ok(not bad and len(n) > 0,
                  f"{run}: the crc32c attribute of all {len(n)} datasets equals the CRC32C "
                  f"computed here over their bytes")


def check_verify(tap, run, path):
    r = sh([TESSERA, "ckpt", "verify", path])
    if r.returncode != 0:
        tap.diag((r.stdout + r.stderr)[-1000:])
    return tap.ok(r.returncode == 0, f"{run}: tessera ckpt verify accepts it "
                                     f"(exit {r.returncode})")


def check_vs_ref_final(tap, w1, ref, s):
    names = list(expected_tensors(s))
    diff = [n for n in names if not np.array_equal(w1["model/" + n], ref["final"][n])]
    for n in diff[:5]:
        tap.diag(f"model/{n}: max |diff| "
                 f"{np.abs(w1['model/' + n].astype(np.float64) - ref['final'][n]).max():.3g}")
    return tap.ok(not diff and len(ref["final"]) == len(names),
                  f"gpt/w1 step {GPT_STEPS}: all {len(names)} model/ tensors equal ref_dump's "
                  f"/final after {GPT_STEPS} steps bit for bit")


def check_step1(tap, c1, ref, s):
    """Step 1 from the initial weights by hand: clip, AdamW (bias-corrected, decoupled decay)."""
    lr0 = float(s["optim.lr"]) * 1.0  # warmup 1ba: the first step's multiplier is (0+1)/1
    b1, b2 = float(s["optim.beta1"]), float(s["optim.beta2"])
    eps, wd, clip = float(s["optim.eps"]), float(s["optim.weight_decay"]), float(s["optim.grad_clip"])
    norm = float(np.sqrt(sum(float((g.astype(np.float64) ** 2).sum())
                             for g in ref["grads"].values())))
    scale = clip / (norm + 1e-6) if clip > 0 and norm > clip else 1.0
    bad, worst = [], {"w": 0.0, "m": 0.0, "v": 0.0}
    for n in expected_tensors(s):
        p0 = ref["params"][n].astype(np.float64)
        g = ref["grads"][n].astype(np.float64) * scale
        m = (1 - b1) * g
        v = (1 - b2) * g * g
        mhat, vhat = m / (1 - b1), v / (1 - b2)
        p1 = p0 * (1 - lr0 * (wd if decays(n, s) else 0.0)) - lr0 * mhat / (np.sqrt(vhat) + eps)
        ew = float(np.abs(c1["model/" + n] - p1).max())
        em = float(np.abs(c1["optim/m/" + n] - m).max() / max(np.abs(m).max(), 1e-30))
        ev = float(np.abs(c1["optim/v/" + n] - v).max() / max(np.abs(v).max(), 1e-30))
        worst = {"w": max(worst["w"], ew), "m": max(worst["m"], em), "v": max(worst["v"], ev)}
        if not ew <= TOL_STEP1_W_ABS * lr0:
            bad.append(f"model/{n}: max |diff| {ew:.3g} > {TOL_STEP1_W_ABS * lr0:.3g}")
        if not em <= TOL_STEP1_MOMENT:
            bad.append(f"optim/m/{n}: rel {em:.3g} > {TOL_STEP1_MOMENT:g}")
        if not ev <= TOL_STEP1_MOMENT:
            bad.append(f"optim/v/{n}: rel {ev:.3g} > {TOL_STEP1_MOMENT:g}")
    for b in bad[:8]:
        tap.diag(b)
    tap.diag(f"step 1 by hand: gradient norm {norm:.6f} (clip {clip:g}: scale {scale:.6f}); worst: "
             f"weights {worst['w']:.2e} abs, m {worst['m']:.2e}, v {worst['v']:.2e} rel")
    return tap.ok(not bad, f"gpt/w1 step 1 = ref_dump's initial weights + one AdamW step computed "
                           f"here from its step-0 gradient: weights within "
                           f"{TOL_STEP1_W_ABS:g}*lr, m and v within {TOL_STEP1_MOMENT:g} relative")


def check_zero1_vs_ddp(tap, z, d):
    names = sorted(z)
    diff = [n for n in names if n not in d or not np.array_equal(z[n], d[n])]
    for n in diff[:5]:
        tap.diag(f"{n} differs")
    return tap.ok(not diff and sorted(d) == names and names,
                  f"gpt step {GPT_STEPS} on 2 ranks: ZeRO-1 (sharded moments) and DDP files are "
                  f"identical, all {len(names)} tensors bit for bit")


def check_world(tap, w2, w1, s):
    C = int(s["model.d_model"])
    lr_sum = float(s["optim.lr"]) * GPT_STEPS  # an upper bound of the steps' sum of lr
    names = sorted(w1)
    bad, exact, worst = [], 0, (0.0, "")
    for n in names:
        a, b = w2.get(n), w1[n]
        if a is None or a.shape != b.shape:
            bad.append(f"{n}: missing or of another shape in the 2-rank file")
            continue
        if np.array_equal(a, b):
            exact += 1
        if n.endswith("/qkvb"):
            k = slice(C, 2 * C)
            kdev = float(np.abs(a[:, k].astype(np.float64) - b[:, k]).max())
            if not kdev <= lr_sum:
                bad.append(f"{n}: k block max |diff| {kdev:.3g} > {lr_sum:g}")
            a = np.concatenate([a[:, :C], a[:, 2 * C:]], axis=1)
            b = np.concatenate([b[:, :C], b[:, 2 * C:]], axis=1)
        e = rel_err(a, b)
        worst = max(worst, (e, n))
        if not e <= TOL_WORLD:
            bad.append(f"{n}: relative error {e:.3g} > {TOL_WORLD:g}")
    for b in bad[:8]:
        tap.diag(b)
    tap.diag(f"1 vs 2 ranks: {exact} of {len(names)} tensors bit-identical; worst relative "
             f"error {worst[0]:.2e} ({worst[1]})")
    return tap.ok(not bad and len(names) > 0,
                  f"gpt step {GPT_STEPS}: the 2-rank ZeRO-1 file equals the 1-rank file within "
                  f"{TOL_WORLD:g} relative per tensor, all {len(names)} tensors (qkvb's "
                  f"zero-gradient k block: within the sum of lr)")


def check_negative(tap, src, tmp):
    """Flip one byte inside optim/v/fcw of a copy: the CRC check above must name that tensor."""
    path = os.path.join(tmp, "corrupt.h5")
    shutil.copyfile(src, path)
    target = "optim/v/fcw"
    with h5py.File(path, "r") as f:
        ds = f[target]
        off = ds.id.get_offset()
        nbytes = ds.id.get_storage_size()
    with open(path, "r+b") as g:
        g.seek(off + nbytes // 2)
        b = g.read(1)
        g.seek(off + nbytes // 2)
        g.write(bytes([b[0] ^ 0x08]))
    bad = [b[0] for b in crc_problems(path)]
    r = sh([TESSERA, "ckpt", "verify", path])
    tap.diag(f"corrupt copy: CRC check flags {bad}; tessera ckpt verify exit {r.returncode}: "
             f"{r.stderr.strip()[-200:]}")
    return tap.ok(bad == [target] and r.returncode == 2,
                  f"negative control: one byte flipped inside {target} of a copy is caught: this "
                  f"test's CRC check names exactly {target}, tessera ckpt verify exits 2")


# ---- main --------------------------------------------------------------------------------------

def main():
    tap = Tap(PLAN)
    with tempfile.TemporaryDirectory(prefix="tsr-ckpt-h5py-") as tmp:
        return tap.run_all(body, tmp)


def body(tap, tmp):
    data = os.path.join(tmp, "data")
    r = sh([TESSERA, "synth", "--out", data, "--vocab", str(VOCAB), "--tokens", "100000",
            "--seed", "1"])
    if not tap.ok(r.returncode == 0, f"synthetic corpus (vocab {VOCAB}) written"):
        tap.diag((r.stdout + r.stderr)[-2000:])
        tap.fail_until(PLAN, "no data")
        return 1
    data_sets = {"data.train": os.path.join(data, "train"), "data.val": os.path.join(data, "val")}
    r = sh([TRAIN, "--version"])
    version = r.stdout.split()[1] if r.returncode == 0 and len(r.stdout.split()) > 1 else "?"

    # ref_dump: the same config as gpt/*, single process
    ref_path = os.path.join(tmp, "ref.h5")
    s = dict(settings("gpt/w1"), **data_sets, run_dir=os.path.join(tmp, "ref_run"))
    r = sh([REF_DUMP, BASE_CFG, ref_path] + [f"{k}={v}" for k, v in s.items()])
    ref = None
    if tap.ok(r.returncode == 0 and os.path.exists(ref_path),
              f"ref_dump writes the initial weights, step-0 gradient and weights after "
              f"{GPT_STEPS} steps (exit {r.returncode})"):
        with h5py.File(ref_path, "r") as f:
            ref = {g: {k: f[g][k][...] for k in f[g].keys()}
                   for g in ("params", "final")}
            ref["grads"] = {k: f["step0/grads"][k][...] for k in f["step0/grads"].keys()}
    else:
        tap.diag((r.stdout + r.stderr)[-2000:])

    run_dirs, ok_runs = {}, set()
    for run, (_, steps, ranks, sharding) in RUNS.items():
        rd = os.path.join(tmp, run.replace("/", "_"))
        run_dirs[run] = rd
        s = dict(settings(run), **data_sets)
        r = sh(MPIRUN + ["-np", str(ranks), TRAIN, "--config", BASE_CFG] + set_args(s) +
               ["--set", f"run_dir={rd}"])
        files = sorted(x for x in os.listdir(rd) if x.startswith("step-")) if os.path.isdir(rd) else []
        want = [ckpt_name(i) for i in range(1, steps + 1)]
        latest = open(os.path.join(rd, "latest")).read() if os.path.exists(os.path.join(rd, "latest")) else None
        good = r.returncode == 0 and files == want and latest == ckpt_name(steps) + "\n"
        if not good:
            tap.diag(f"exit {r.returncode}; files {files}, want {want}; latest {latest!r}")
            tap.diag((r.stdout + r.stderr)[-1500:])
        else:
            ok_runs.add(run)
        tap.ok(good, f"{run}: {steps} steps on {ranks} rank(s) ({sharding}) exit 0, checkpoints "
                     f"{want[0]}..{want[-1]}, latest names the last, no .tmp")

    tap.ok(crc32c(b"123456789") == 0xE3069283 and crc32c(b"") == 0,
           f"this test's CRC32C: check value CRC32C(\"123456789\") = 0x{crc32c(b'123456789'):08x} "
           f"(want 0xe3069283)")

    for run in CHECKED_FILES:
        end = tap.n + CHECKS_PER_FILE
        _, steps, ranks, _ = RUNS[run]
        if run not in ok_runs:
            tap.fail_until(end, f"{run} did not train")
            continue
        path = os.path.join(run_dirs[run], ckpt_name(steps))
        s = dict(settings(run), **data_sets)
        check_root_attrs(tap, run, path, s, ranks, steps, run_dirs[run], version, tmp)
        check_datasets(tap, run, path, s)
        check_crc(tap, run, path)
        check_verify(tap, run, path)

    s = settings("gpt/w1")
    last = ckpt_name(GPT_STEPS)
    w1 = read_all(os.path.join(run_dirs["gpt/w1"], last)) if "gpt/w1" in ok_runs else None
    if w1 is not None and ref is not None:
        check_vs_ref_final(tap, w1, ref, s)
        check_step1(tap, read_all(os.path.join(run_dirs["gpt/w1"], ckpt_name(1))), ref, s)
    else:
        tap.fail_until(tap.n + 2, "gpt/w1 or ref_dump missing")
    if {"gpt/w2z", "gpt/w2d"} <= ok_runs:
        w2z = read_all(os.path.join(run_dirs["gpt/w2z"], last))
        check_zero1_vs_ddp(tap, w2z, read_all(os.path.join(run_dirs["gpt/w2d"], last)))
        if w1 is not None:
            check_world(tap, w2z, w1, s)
        else:
            tap.fail_until(tap.n + 1, "gpt/w1 missing")
    else:
        tap.fail_until(tap.n + 2, "gpt/w2z or gpt/w2d missing")
    if w1 is not None:
        check_negative(tap, os.path.join(run_dirs["gpt/w1"], last), tmp)
    else:
        tap.fail_until(tap.n + 1, "gpt/w1 missing")

    return tap.status()


if __name__ == "__main__":
    sys.exit(main())
