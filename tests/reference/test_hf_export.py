#!/usr/bin/env python3
"""test_hf_export.py — `tessera ckpt export --format hf` and `tessera-train --init-from HF_DIR`.

For a tiny GPT-2-style model (learned positions, biases, tanh GELU; GPT-2's 50257-token vocabulary
padded to 50304 rows, and GPT-2's BPE files when ./INSTALL fetched them) and a tiny MPT-style one
(ALiBi, no biases, exact GELU, 3 heads so the slopes take MPT's non-power-of-two path; vocabulary
100 padded to 128), trained 6 steps on 2 MPI ranks:
  - export in fp32 and bf16; model.safetensors parsed by hand here (no `safetensors` package):
    header length, JSON object, 8-byte alignment, __metadata__ format "pt", the reference's member
    order, contiguous offsets that tile the buffer, sizes; names, shapes, dtypes; config.json;
  - fp32 tensors equal the checkpoint's (after the Conv1D transposes; wte's V real rows) bit for bit;
    bf16 tensors equal torch's own fp32 -> bf16 rounding of them bit for bit;
  - logits of a transformers-style forward written here (HF names, Conv1D / Linear, MPT's ALiBi
    bias built as transformers builds it) from the export vs torch_gpt.py's model from the
    checkpoint (the reference test_reference.py holds to tessera's own logits), and the loss on the
    first batch vs tessera's own forward: step 1's loss of `--init-from CKPT`;
  - import: `--init-from OUT_fp32` reproduces `--init-from CKPT` bit for bit (step 1's loss and
    grad norm, the weights after step 1); `--init-from OUT_bf16` gives the loss of the forward above
    on the bf16 weights;
  - refusals with their exit codes: a corrupt header length, overlapping offsets, an unknown dtype,
    a duplicate name, trailing bytes, a missing tensor, an lm_head that is not wte (2); a
    config.json with another n_layer (1); an unknown --dtype (1); transformers' other spellings
    accepted (names without "transformer.", h.N.attn.bias mask buffers, lm_head.weight = wte).
Run: TESTS=hf_export bash tests/run.sh   (needs `make`). TAP; exit 1 on failure, 77 without torch.
"""
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile

from ref_env import HERE, MPIRUN, ROOT, BUILD, TESSERA, TRAIN, need_programs, skip

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
    import h5py
except ImportError as e:  # Debian: apt-get install python3-torch python3-h5py
    skip(f"cannot import {e.name} ({e}); this test needs torch, h5py and numpy")

MPIRUN = MPIRUN + ["-np", "2"]
need_programs(TESSERA, TRAIN)
DATA_DIR = os.environ.get("TSR_DATA_DIR") or os.path.join(ROOT, "data", "npm")
BPE = os.path.join(DATA_DIR, "gpt2")
HAS_BPE = all(os.path.exists(os.path.join(BPE, f)) for f in ("encoder.json", "vocab.bpe"))

sys.path.insert(0, HERE)
import torch_gpt  # noqa: E402
from tap import Tap  # noqa: E402

# ---- tolerances: relative, ||a - b||_2 / ||b||_2 --------------------------------------------------
# Export (fp32) vs the checkpoint through torch_gpt: both forwards run in float64 on the same fp32
# values, so only float64 rounding in a different op order separates them (measured ~1e-16). Any
# mapping mistake (a missing transpose, a swapped bias, wrong slopes) gives >= 1e-2.
TOL_SAME = 1e-12
# tessera's fp32 forward (its step-1 loss) vs the float64 forward here: fp32 roundoff 6e-8 over a
# few dozen dependent ops, as in test_reference.py (TOL_STEP0; measured there 2e-7 .. 7e-7).
TOL_FP32 = 1e-5
# bf16 keeps 8 significant bits: each weight moves by up to 2^-9 = 2e-3 relative (rms ~1e-3).
# Logits of the bf16 export vs fp32 weights: measured 1.6e-3 (GPT-2) and 3.0e-3 (MPT) here; 1e-2
# gives 3x margin, while a wrong tensor or layout is >= 1e-1. (Rounding itself is checked exactly.)
TOL_BF16 = 1e-2

STEPS, SEQ_LEN, GLOBAL_BATCH, MICRO_BATCH = 6, 16, 4, 2
DATA_VOCAB, N_TOKENS, DATA_SEED = 100, 4000, 20240612
ARCHS = [
    dict(name="gpt2", V=50257, Vp=50304, tokenizer="gpt2" if HAS_BPE else "",
         model=dict(n_layer=2, d_model=32, n_head=4, vocab_size=50257, vocab_multiple=128,
                    max_seq_len=16, pos='"learned"', bias="true", gelu='"tanh"', init_std=0.1)),
    dict(name="mpt", V=100, Vp=128, tokenizer="",
         model=dict(n_layer=2, d_model=48, n_head=3, vocab_size=100, vocab_multiple=128,
                    max_seq_len=32, pos='"alibi"', bias="false", gelu='"exact"', init_std=0.1)),
]
CHECKS_PER_ARCH = 14
N_ERROR_CHECKS = 11


def rel_err(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        return math.inf
    nb, d = np.linalg.norm(b), np.linalg.norm(a - b)
    return d / nb if nb > 0 else (0.0 if d == 0 else math.inf)


def env():
    return dict(os.environ, TSR_DATA_DIR=DATA_DIR)


def shard_tokens(tmp, name, toks, vocab):
    """toks written as text ids, 16 a line, and `tessera shard`ed into tmp/NAME_data:
    (exit, output, the dataset's directory)."""
    txt, data = os.path.join(tmp, name + ".txt"), os.path.join(tmp, name + "_data")
    with open(txt, "w") as f:
        for i in range(0, len(toks), 16):
            f.write(" ".join(str(t) for t in toks[i:i + 16]) + "\n")
    rc, out = run([TESSERA, "shard", "--out", data, "--vocab", str(vocab), "--quiet", txt])
    return rc, out, data


def run(cmd, cwd=None):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env(), cwd=cwd)
    return r.returncode, r.stdout + r.stderr


# ---- safetensors by hand ---------------------------------------------------------------------------

SIZES = {"F32": 4, "BF16": 2, "F16": 2}


def parse_st(path):
    """-> (problems, meta, names in header order, {name: (dtype, shape, raw bytes)})."""
    raw = open(path, "rb").read()
    problems = []
    n = struct.unpack("<Q", raw[:8])[0]
    if n % 8:
        problems.append(f"header length {n} is not a multiple of 8: data not 8-byte aligned")
    text = raw[8:8 + n]
    if text.rstrip(b" ")[-1:] != b"}":
        problems.append("header padding is not spaces after the closing brace")
    pairs = json.loads(text.decode("utf-8"), object_pairs_hook=lambda kv: kv)
    if not isinstance(pairs, list):
        return [f"header is a JSON {type(pairs).__name__}, not an object"], {}, [], {}
    names = [k for k, _ in pairs]
    if len(set(names)) != len(names):
        problems.append("duplicate member names")
    hdr = dict(pairs)
    meta = dict(hdr.pop("__metadata__", []))
    if names and names[0] == "__metadata__":
        names = names[1:]
    elif "__metadata__" in names:
        problems.append("__metadata__ is not the first member (the reference writes it first)")
    if meta.get("format") != "pt":
        problems.append(f"__metadata__ format is {meta.get('format')!r}, transformers wants 'pt'")
    dtypes = {dict(v)["dtype"] for v in hdr.values()}
    if len(dtypes) == 1 and names != sorted(names):  # one dtype: the reference orders by name
        problems.append("tensors are not in name order")
    data = raw[8 + n:]
    ents, at = {}, 0
    for name in sorted(hdr, key=lambda k: tuple(dict(hdr[k])["data_offsets"])):
        e = dict(hdr[name])
        b, en = e["data_offsets"]
        want = int(np.prod(e["shape"], dtype=np.int64)) * SIZES.get(e["dtype"], 0)
        if b != at:
            problems.append(f"{name}: begins at {b}, previous tensor ends at {at}")
        if en - b != want:
            problems.append(f"{name}: {en - b} bytes, {e['dtype']} x {e['shape']} needs {want}")
        at = en
        ents[name] = (e["dtype"], tuple(e["shape"]), data[b:en])
    if at != len(data):
        problems.append(f"tensors end at {at}, the data buffer has {len(data)} bytes")
    return problems, meta, names, ents


def as_f32(dtype, shape, buf):
    if dtype == "F32":
        return np.frombuffer(buf, dtype="<f4").reshape(shape)
    u = np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16
    return u.view(np.float32).reshape(shape)


def write_st(path, pairs, data, pad=True):
    """A safetensors file from (name, entry) pairs (any JSON) and a data buffer."""
    text = ("{" + ",".join(json.dumps(k) + ":" + json.dumps(v) for k, v in pairs) + "}").encode()
    if pad:
        text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


def read_pairs(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    pairs = json.loads(raw[8:8 + n].decode(), object_pairs_hook=lambda kv: kv)
    return [(k, dict(v) if k != "__metadata__" else dict(v)) for k, v in pairs], raw[8 + n:]


def drop_tensor(pairs, data, name):
    """The (pairs, data) of a safetensors file (read_pairs) without the tensor name: the others'
    data packed again from offset 0."""
    out, at, buf = [], 0, b""
    for k, v in pairs:
        if k == name:
            continue
        if k == "__metadata__":
            out.append((k, v))
            continue
        b0, b1 = v["data_offsets"]
        out.append((k, dict(v, data_offsets=[at, at + b1 - b0])))
        buf += data[b0:b1]
        at += b1 - b0
    return out, buf


# ---- the transformers-style forward --------------------------------------------------------------

def hf_names(arch, L):
    p = "transformer."
    if arch == "gpt2":
        per = ["ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
               "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
               "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"]
        return ([p + "wte.weight", p + "wpe.weight", p + "ln_f.weight", p + "ln_f.bias"]
                + [f"{p}h.{i}.{s}" for i in range(L) for s in per])
    per = ["norm_1.weight", "attn.Wqkv.weight", "attn.out_proj.weight", "norm_2.weight",
           "ffn.up_proj.weight", "ffn.down_proj.weight"]
    return [p + "wte.weight", p + "norm_f.weight"] + [f"{p}blocks.{i}.{s}" for i in range(L) for s in per]


def attention(qkv, NH, bias):
    B, T, C3 = qkv.shape
    C = C3 // 3
    q, k, v = (t.reshape(B, T, NH, C // NH).transpose(1, 2) for t in qkv.split(C, dim=2))
    s = q @ k.transpose(-1, -2) / math.sqrt(C // NH)
    if bias is not None:
        s = s + bias
    s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    return (F.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(B, T, C)


def mpt_alibi(NH, max_seq_len, T):
    """transformers' build_alibi_bias: slope_h * (j - (S-1)) over S = max_seq_len keys, the last T
    of them kept (MptAttention slices the bias to the key length)."""
    n = 2 ** math.ceil(math.log2(NH))
    slopes = 1.0 / torch.pow(2.0, torch.arange(1, n + 1, dtype=torch.float64) * (8.0 / n))
    if n != NH:
        slopes = torch.cat([slopes[1::2], slopes[::2]])[:NH]
    rel = torch.arange(1 - max_seq_len, 1, dtype=torch.float64).view(1, 1, max_seq_len)
    return (slopes.view(NH, 1, 1) * rel)[:, :, -T:]


def hf_forward(sd, cj, idx):
    """Logits (B, T, vocab_size) of GPT2LMHeadModel / MptForCausalLM from HF-named tensors."""
    p, eps = "transformer.", cj["layer_norm_epsilon"]
    T = idx.shape[1]
    if cj["model_type"] == "gpt2":
        gelu = "tanh" if cj["activation_function"] == "gelu_new" else "none"
        C, NH = cj["n_embd"], cj["n_head"]
        x = sd[p + "wte.weight"][idx] + sd[p + "wpe.weight"][:T]
        for i in range(cj["n_layer"]):
            w = lambda s: sd[f"{p}h.{i}.{s}"]  # noqa: E731
            a = F.layer_norm(x, (C,), w("ln_1.weight"), w("ln_1.bias"), eps)
            y = attention(a @ w("attn.c_attn.weight") + w("attn.c_attn.bias"), NH, None)
            x = x + y @ w("attn.c_proj.weight") + w("attn.c_proj.bias")  # Conv1D: x W + b
            a = F.layer_norm(x, (C,), w("ln_2.weight"), w("ln_2.bias"), eps)
            h = F.gelu(a @ w("mlp.c_fc.weight") + w("mlp.c_fc.bias"), approximate=gelu)
            x = x + h @ w("mlp.c_proj.weight") + w("mlp.c_proj.bias")
        x = F.layer_norm(x, (C,), sd[p + "ln_f.weight"], sd[p + "ln_f.bias"], eps)
    else:
        C, NH = cj["d_model"], cj["n_heads"]
        alibi = mpt_alibi(NH, cj["max_seq_len"], T)
        x = sd[p + "wte.weight"][idx]
        for i in range(cj["n_layers"]):
            w = lambda s: sd[f"{p}blocks.{i}.{s}"]  # noqa: E731
            a = F.layer_norm(x, (C,), w("norm_1.weight"), None, eps)
            x = x + attention(a @ w("attn.Wqkv.weight").T, NH, alibi) @ w("attn.out_proj.weight").T
            a = F.layer_norm(x, (C,), w("norm_2.weight"), None, eps)
            x = x + F.gelu(a @ w("ffn.up_proj.weight").T) @ w("ffn.down_proj.weight").T
        x = F.layer_norm(x, (C,), sd[p + "norm_f.weight"], None, eps)
    return x @ sd[p + "wte.weight"].T  # tied head


def mean_xent(logits, targets):
    V = logits.shape[-1]
    return float(F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1)))


# ---- runs ------------------------------------------------------------------------------------------

def write_config(path, arch, run_dir, data_dir):
    model = "\n".join(f"  {k} = {v};" for k, v in arch["model"].items())
    with open(path, "w") as f:
        f.write(f"""# {arch['name']}: written by tests/reference/test_hf_export.py
run_dir = "{run_dir}";
seed = 7;
max_duration = "{STEPS}ba";
save_interval = "{STEPS}ba";
global_batch = {GLOBAL_BATCH};
micro_batch = {MICRO_BATCH};
seq_len = {SEQ_LEN};
threads = 1;
model = {{
{model}
}};
optim = {{ lr = 1e-2; warmup = "2ba"; weight_decay = 0.1; }};
data = {{ train = "{data_dir}"; shuffle = false; tokenizer = "{arch['tokenizer']}"; }};
sample = {{ tokens = 0; }};
""")


def train(cfg, run_dir, *sets):
    args = [TRAIN, "--config", cfg, "--set", f"run_dir={run_dir}"]
    for s in sets:
        args += ["--set", s]
    return run(MPIRUN + args)


def st_arrays(path):
    """A safetensors file's (problems, metadata, {name: float32 array})."""
    problems, meta, names, ents = parse_st(path)
    return problems, meta, {n: as_f32(*ents[n]) for n in names}


def base_and_lora(tmp, name, arch, *lora_sets):
    """The PEFT tests' two runs: N_TOKENS random ids (vocab 100, DATA_SEED) sharded into tmp/data,
    tmp/NAME.cfg for arch, a base run in tmp/base and a LoRA run on it in tmp/lora (lora_sets, then
    lora.base). Returns ((the shard's, the base's and the LoRA's exits), their output, cfg, data,
    base, lora)."""
    rng = np.random.RandomState(DATA_SEED)
    txt = os.path.join(tmp, "tokens.txt")
    with open(txt, "w") as f:
        f.write(" ".join(str(t) for t in rng.randint(0, 100, size=N_TOKENS)) + "\n")
    data = os.path.join(tmp, "data")
    rc, out = run([TESSERA, "shard", "--out", data, "--vocab", "100", "--quiet", txt])
    cfg = os.path.join(tmp, name + ".cfg")
    base, lora = os.path.join(tmp, "base"), os.path.join(tmp, "lora")
    write_config(cfg, arch, base, data)
    rc1, out1 = train(cfg, base)
    rc2, out2 = train(cfg, lora, *lora_sets, f"lora.base={base}")
    return (rc, rc1, rc2), out + out1 + out2, cfg, data, base, lora


def step1(run_dir):
    for line in open(os.path.join(run_dir, "metrics.jsonl")):
        d = json.loads(line)
        if d.get("step") == 1 and "loss" in d:
            return d
    return None


def model_tensors(h5path):
    with h5py.File(h5path, "r") as f:
        return {k: f["model"][k][()] for k in f["model"].keys()}


def expected_from_ckpt(arch, ck, names):
    """HF name -> the fp32 array the export must hold, from the checkpoint's model/ tensors."""
    V, out = arch["V"], {}
    gpt2 = arch["name"] == "gpt2"
    for n in names:
        s = n[len("transformer."):]
        parts = s.split(".")
        if s == "wte.weight":
            out[n] = ck["wte"][:V]
            continue
        if parts[0] in ("h", "blocks"):
            i, rest = int(parts[1]), ".".join(parts[2:])
        else:
            i, rest = None, s
        key = {"wpe.weight": "wpe", "ln_f.weight": "lnfw", "ln_f.bias": "lnfb", "norm_f.weight": "lnfw",
               "ln_1.weight": "ln1w", "ln_1.bias": "ln1b", "norm_1.weight": "ln1w",
               "attn.c_attn.weight": "qkvw", "attn.c_attn.bias": "qkvb", "attn.Wqkv.weight": "qkvw",
               "attn.c_proj.weight": "attprojw", "attn.c_proj.bias": "attprojb",
               "attn.out_proj.weight": "attprojw", "ln_2.weight": "ln2w", "ln_2.bias": "ln2b",
               "norm_2.weight": "ln2w", "mlp.c_fc.weight": "fcw", "mlp.c_fc.bias": "fcb",
               "ffn.up_proj.weight": "fcw", "mlp.c_proj.weight": "fcprojw",
               "mlp.c_proj.bias": "fcprojb", "ffn.down_proj.weight": "fcprojw"}[rest]
        a = ck[key] if i is None else ck[key][i]
        out[n] = a.T if (gpt2 and a.ndim == 2 and i is not None) else a  # Conv1D holds W^T
    return out


def run_arch(tap, arch, tmp, data_dir, tokens):
    name, V = arch["name"], arch["V"]
    T, L = SEQ_LEN, arch["model"]["n_layer"]
    cfg = os.path.join(tmp, name + ".cfg")
    run_dir = os.path.join(tmp, "run_" + name)
    write_config(cfg, arch, run_dir, data_dir)
    rc, out = train(cfg, run_dir)
    ckpt = os.path.join(run_dir, f"step-{STEPS:08d}.h5")
    if not tap.ok(rc == 0 and os.path.exists(ckpt), f"{name}: trained {STEPS} steps on 2 ranks (rc {rc})"):
        tap.diag(out[-3000:])
        return None
    outs, logs = {}, {}
    for dt in ("fp32", "bf16"):
        outs[dt] = os.path.join(tmp, f"hf_{name}_{dt}")
        logs[dt] = run([TESSERA, "ckpt", "export", "--format", "hf", "--dtype", dt, run_dir, outs[dt]])
    ok = all(r[0] == 0 and os.path.exists(os.path.join(outs[d], "model.safetensors")) and
             os.path.exists(os.path.join(outs[d], "config.json")) for d, r in logs.items())
    if not tap.ok(ok, f"{name}: ckpt export --format hf --dtype fp32|bf16 RUN_DIR exits 0, writes "
                      f"model.safetensors + config.json"):
        tap.diag(logs["fp32"][1][-2000:] + logs["bf16"][1][-2000:])
        return None
    tap.diag(logs["fp32"][1].strip())
    parsed = {dt: parse_st(os.path.join(outs[dt], "model.safetensors")) for dt in outs}
    for dt, want in (("fp32", "F32"), ("bf16", "BF16")):
        problems, meta, order, ents = parsed[dt]
        bad = problems + [f"{k} is {e[0]}" for k, e in ents.items() if e[0] != want]
        for b in bad[:5]:
            tap.diag(b)
        tap.ok(not bad, f"{name} {dt}: header rules (JSON object, 8-byte aligned data, metadata "
                        f"format pt, name order, contiguous offsets tiling the buffer, sizes), all {want}")
    names = hf_names(name, L)
    ck = model_tensors(ckpt)
    want = expected_from_ckpt(arch, ck, names)
    e32, e16 = parsed["fp32"][3], parsed["bf16"][3]
    bad = [f"{dt}: names {sorted(set(e) ^ set(names))[:4]}" for dt, e in (("fp32", e32), ("bf16", e16))
           if set(e) != set(names)]
    bad += [f"{n}: shape {e32[n][1]}, want {want[n].shape}" for n in names
            if n in e32 and e32[n][1] != want[n].shape]
    for b in bad[:5]:
        tap.diag(b)
    tap.ok(not bad, f"{name}: the {len(names)} tensors of {'GPT2LMHeadModel' if name == 'gpt2' else 'MptForCausalLM'}"
                    f" with HF names and shapes (wte {V} rows, no lm_head)")
    cj = json.load(open(os.path.join(outs["fp32"], "config.json")))
    m = arch["model"]
    if name == "gpt2":
        exp = dict(model_type="gpt2", architectures=["GPT2LMHeadModel"], n_layer=L, n_embd=m["d_model"],
                   n_head=m["n_head"], vocab_size=V, n_positions=m["max_seq_len"], n_inner=4 * m["d_model"],
                   activation_function="gelu_new", layer_norm_epsilon=1e-5, tie_word_embeddings=True)
    else:
        exp = dict(model_type="mpt", architectures=["MptForCausalLM"], n_layers=L, d_model=m["d_model"],
                   n_heads=m["n_head"], vocab_size=V, max_seq_len=m["max_seq_len"], expansion_ratio=4,
                   no_bias=True, layer_norm_epsilon=1e-5, tie_word_embeddings=True)
    bad = [f"{k} = {cj.get(k)!r}, want {v!r}" for k, v in exp.items() if cj.get(k) != v]
    if name == "mpt" and (cj.get("attn_config", {}).get("alibi") is not True):
        bad.append("attn_config.alibi is not true")
    for b in bad:
        tap.diag(b)
    tap.ok(not bad, f"{name}: config.json: {', '.join(f'{k}={v}' for k, v in list(exp.items())[:7])}")

    bad = [n for n in names if not np.array_equal(as_f32(*e32[n]), want[n])]
    tap.ok(not bad, f"{name}: fp32 tensors equal the checkpoint's bit for bit (Conv1D transposed, "
                    f"wte's first {V} of {arch['Vp']} rows); different: {bad[:3]}")
    bad = []
    for n in names:
        ref = torch.from_numpy(np.ascontiguousarray(want[n], dtype=np.float32)).to(torch.bfloat16)
        got = np.frombuffer(e16[n][2], dtype="<u2").reshape(e16[n][1])
        if not np.array_equal(ref.view(torch.int16).numpy().view(np.uint16), got):
            bad.append(n)
    tap.ok(not bad, f"{name}: bf16 tensors equal torch's fp32->bf16 (round to nearest even) bit for bit; "
                    f"different: {bad[:3]}")

    # logits: the HF-style forward from the export vs torch_gpt from the checkpoint, float64
    tc = torch_gpt.GPTConfig(V=V, Vp=arch["Vp"], C=m["d_model"], L=L, NH=m["n_head"], F=4 * m["d_model"],
                             max_T=m["max_seq_len"], alibi=name == "mpt", bias=name == "gpt2",
                             gelu_exact=name == "mpt")
    ref_model = torch_gpt.GPT(tc).double()
    ref_model.load_tessera(ck)
    idx = torch.as_tensor(np.stack([tokens[k * T:k * T + T] for k in range(GLOBAL_BATCH)]), dtype=torch.long)
    tgt = torch.as_tensor(np.stack([tokens[k * T + 1:k * T + T + 1] for k in range(GLOBAL_BATCH)]),
                          dtype=torch.long)
    with torch.no_grad():
        ref_logits = ref_model(idx)[0][..., :V]
        sd = {dt: {n: torch.from_numpy(as_f32(*ents[n]).astype(np.float64)) for n in names}
              for dt, ents in (("fp32", e32), ("bf16", e16))}
        lg = {dt: hf_forward(sd[dt], cj, idx) for dt in sd}
    e = rel_err(lg["fp32"].numpy(), ref_logits.numpy())
    tap.ok(e <= TOL_SAME, f"{name}: fp32 export, HF-style forward vs torch_gpt on the checkpoint: logits "
                          f"(B,T,V) rel err {e:.2e} <= {TOL_SAME:g}")
    e = rel_err(lg["bf16"].numpy(), ref_logits.numpy())
    tap.ok(e <= TOL_BF16, f"{name}: bf16 export: logits rel err {e:.2e} <= {TOL_BF16:g} (bf16 tolerance)")

    # tessera's own forward: step 1's loss from the checkpoint, and the imports
    runs = {}
    for key, src in (("ckpt", ckpt), ("fp32", outs["fp32"]), ("bf16", outs["bf16"])):
        d = os.path.join(tmp, f"init_{name}_{key}")
        rc, out = run(MPIRUN + [TRAIN, "--config", cfg, "--set", f"run_dir={d}", "--set", "max_duration=1ba",
                                "--set", "save_interval=1ba", "--init-from", src])
        runs[key] = (rc, out, step1(d) if rc == 0 else None, os.path.join(d, "step-00000001.h5"))
        if rc != 0 or f"checkpoint init-from step 0 | {src}" not in out:
            tap.diag(f"--init-from {src}: rc {rc}\n" + out[-2000:])
    hf_loss = {dt: mean_xent(lg[dt], tgt) for dt in lg}
    s_ck = runs["ckpt"][2]
    e = abs(s_ck["loss"] - hf_loss["fp32"]) / hf_loss["fp32"] if s_ck else math.inf
    tap.ok(e <= TOL_FP32, f"{name}: tessera's step-1 loss from the checkpoint {s_ck and s_ck['loss']} vs the "
                          f"HF-style forward on the fp32 export {hf_loss['fp32']:.8f}: rel err {e:.2e} <= {TOL_FP32:g}")
    s32 = runs["fp32"][2]
    same_w = False
    if s32 and s_ck:
        a, b = model_tensors(runs["fp32"][3]), model_tensors(runs["ckpt"][3])
        same_w = sorted(a) == sorted(b) and all(np.array_equal(a[k], b[k]) for k in a)
    tap.ok(bool(s32 and s_ck and s32["loss"] == s_ck["loss"] and s32["grad_norm"] == s_ck["grad_norm"]
                and same_w),
           f"{name}: --init-from the fp32 export = --init-from the checkpoint bit for bit: step-1 loss "
           f"{s32 and s32['loss']} vs {s_ck and s_ck['loss']}, grad norm, weights after step 1 "
           f"({'equal' if same_w else 'DIFFERENT'})")
    s16 = runs["bf16"][2]
    e = abs(s16["loss"] - hf_loss["bf16"]) / hf_loss["bf16"] if s16 else math.inf
    tap.ok(e <= TOL_FP32, f"{name}: --init-from the bf16 export: step-1 loss {s16 and s16['loss']} vs the "
                          f"HF-style forward on the bf16 weights {hf_loss['bf16']:.8f}: rel err {e:.2e} "
                          f"<= {TOL_FP32:g} (fp32 loss {hf_loss['fp32']:.8f})")

    # tokenizer files
    out_dir, log = outs["fp32"], logs["fp32"][1]
    if arch["tokenizer"] == "gpt2":
        tok_cfg = json.load(open(os.path.join(out_dir, "tokenizer_config.json")))
        same = (open(os.path.join(out_dir, "vocab.json"), "rb").read()
                == open(os.path.join(BPE, "encoder.json"), "rb").read()
                and open(os.path.join(out_dir, "merges.txt"), "rb").read()
                == open(os.path.join(BPE, "vocab.bpe"), "rb").read())
        tap.ok(same and tok_cfg.get("tokenizer_class") == "GPT2Tokenizer" and tok_cfg.get("eos_token") == "<|endoftext|>"
               and cj.get("eos_token_id") == 50256 and tok_cfg.get("model_max_length") == m["max_seq_len"],
               f"{name}: data.tokenizer = gpt2: vocab.json = encoder.json, merges.txt = vocab.bpe byte for "
               f"byte; tokenizer_config.json GPT2Tokenizer, eos <|endoftext|> = config.json eos_token_id 50256")
    else:
        files = [f for f in ("vocab.json", "merges.txt", "tokenizer_config.json")
                 if os.path.exists(os.path.join(out_dir, f))]
        tap.ok(not files and "no tokenizer files written" in log,
               f"{name}: no data.tokenizer{'' if name == 'mpt' else ' (GPT-2 files absent)'}: no tokenizer "
               f"files, and the export says so (found: {files})")
    return dict(cfg=cfg, out=outs["fp32"])


def error_checks(tap, tmp, cfg, good):
    """Damaged copies of a good fp32 export: each --init-from must fail with its exit code and name
    the fault. `cases` are (what, expected rc, strings the message must hold, how to damage)."""
    st = os.path.join(good, "model.safetensors")

    def damage_header_len(p):
        raw = bytearray(open(p, "rb").read())
        raw[:8] = struct.pack("<Q", len(raw))  # one header longer than the file
        open(p, "wb").write(bytes(raw))

    def rewrite(p, edit, pad=True, extra=b""):
        pairs, data = read_pairs(p)
        pairs, data = edit(pairs, data)
        write_st(p, pairs, data + extra, pad)

    def overlap(pairs, data):
        b = pairs[2][1]  # the second tensor moved 4 bytes back, into the first (sizes still right)
        b["data_offsets"] = [b["data_offsets"][0] - 4, b["data_offsets"][1] - 4]
        return pairs, data

    def unknown_dtype(pairs, data):
        pairs[3][1]["dtype"] = "F33"
        return pairs, data

    def duplicate(pairs, data):
        k, v = pairs[-1]
        off = len(data)
        dup = dict(v, data_offsets=[off, off + v["data_offsets"][1] - v["data_offsets"][0]])
        return pairs + [(k, dup)], data + data[v["data_offsets"][0]:v["data_offsets"][1]]

    def drop(pairs, data):
        return drop_tensor(pairs, data, "transformer.h.1.mlp.c_fc.bias")

    def nul_name(pairs, data):  # read as a C string it was the real name: it loaded before
        return [(k + "\0junk" if k == "transformer.h.1.mlp.c_fc.bias" else k, v) for k, v in pairs], data

    def n_layer(p):
        cj = json.load(open(os.path.join(os.path.dirname(p), "config.json")))
        cj["n_layer"] += 1
        json.dump(cj, open(os.path.join(os.path.dirname(p), "config.json"), "w"))

    cases = [
        ("a header length beyond the file", 2, ["header length", "beyond the end"], damage_header_len),
        ("overlapping data_offsets", 2, ["overlap"], lambda p: rewrite(p, overlap)),
        ("an unknown dtype F33", 2, ["unknown dtype", "F33"], lambda p: rewrite(p, unknown_dtype)),
        ("a duplicate tensor name", 2, ["named twice"], lambda p: rewrite(p, duplicate)),
        ("4 trailing bytes", 2, ["trailing bytes"], lambda p: rewrite(p, lambda a, b: (a, b), extra=b"\0" * 4)),
        ("a missing tensor", 2, ["no tensor", "transformer.h.1.mlp.c_fc.bias"], lambda p: rewrite(p, drop)),
        ("a tensor name holding \\u0000", 2, ["NUL character", "transformer.h.1.mlp.c_fc.bias"],
         lambda p: rewrite(p, nul_name)),
        ("config.json with n_layer = 3", 1, ["n_layer = 3", "model.n_layer = 2"], n_layer),
    ]
    for k, (what, want_rc, needles, damage) in enumerate(cases):
        bad_dir = os.path.join(tmp, f"bad{k}")
        shutil.copytree(good, bad_dir)
        damage(os.path.join(bad_dir, "model.safetensors"))
        rc, out = run(MPIRUN + [TRAIN, "--config", cfg, "--set", f"run_dir={tmp}/badrun{k}", "--set",
                                "max_duration=1ba", "--init-from", bad_dir])
        err = [l for l in out.splitlines() if "error" in l]
        found = all(n in out for n in needles) and (want_rc == 1 or "model.safetensors" in out)
        tap.ok(rc == want_rc and found, f"--init-from a copy with {what}: exit {rc} (want {want_rc}), "
                                        f"the message names {needles}")
        tap.diag(err[0] if err else out[-500:])
    # transformers' other spellings: names without "transformer." (GPT2Model, older hub files), the
    # causal-mask buffers h.N.attn.bias (4-D), an explicit lm_head.weight equal to wte: accepted,
    # same weights; an lm_head that differs from wte: refused (tessera ties them)
    pairs, data = read_pairs(st)
    wte = pairs[[k for k, _ in pairs].index("transformer.wte.weight")][1]
    head = data[wte["data_offsets"][0]:wte["data_offsets"][1]]
    mask = np.tril(np.ones((1, 1, SEQ_LEN, SEQ_LEN), dtype="<f4")).tobytes()
    results = []
    for k, diff in enumerate((False, True)):
        d = os.path.join(tmp, f"hub{k}")
        shutil.copytree(good, d)
        extra = [("h.0.attn.bias", dict(dtype="F32", shape=[1, 1, SEQ_LEN, SEQ_LEN])),
                 ("lm_head.weight", dict(dtype="F32", shape=wte["shape"]))]
        blobs = [mask, bytes([head[0] ^ (1 if diff else 0)]) + head[1:]]
        at, new_pairs = len(data), []
        for (n, e), blob in zip(extra, blobs):
            new_pairs.append((n, dict(e, data_offsets=[at, at + len(blob)])))
            at += len(blob)
        renamed = [(n.replace("transformer.", "", 1), e) for n, e in pairs] + new_pairs
        write_st(os.path.join(d, "model.safetensors"), renamed, data + b"".join(blobs))
        r = os.path.join(tmp, f"hubrun{k}")
        rc, out = run(MPIRUN + [TRAIN, "--config", cfg, "--set", f"run_dir={r}", "--set",
                                "max_duration=1ba", "--init-from", d])
        results.append((rc, out, step1(r) if rc == 0 else None))
    base = step1(os.path.join(tmp, "init_gpt2_fp32"))
    rc, out, s1 = results[0]
    tap.ok(rc == 0 and s1 is not None and base is not None and s1["loss"] == base["loss"],
           f"--init-from names without 'transformer.', with h.0.attn.bias and lm_head = wte: exit {rc}, "
           f"step-1 loss {s1 and s1['loss']} = {base and base['loss']}")
    if rc:
        tap.diag(out[-1500:])
    rc, out, _ = results[1]
    tap.ok(rc == 2 and "lm_head.weight differs" in out,
           f"--init-from with an lm_head.weight that differs from wte: exit {rc} (want 2), named")
    rc, out = run([TESSERA, "ckpt", "export", "--format", "hf", "--dtype", "fp16", good, os.path.join(tmp, "x")])
    tap.ok(rc == 1 and "--dtype fp16" in out, f"ckpt export --dtype fp16: exit {rc} (want 1), naming the value")


def main():
    torch.set_default_dtype(torch.float64)
    plan = 1 + CHECKS_PER_ARCH * len(ARCHS) + N_ERROR_CHECKS
    tap = Tap(plan)
    if not HAS_BPE:
        tap.diag(f"GPT-2's BPE files are not in {BPE} (./INSTALL --ensure fetches them): the GPT-2 "
                 f"model is exported without tokenizer files")
    with tempfile.TemporaryDirectory(prefix="tsr-hf-") as tmp:
        rng = np.random.RandomState(DATA_SEED)
        tokens = rng.randint(0, DATA_VOCAB, size=N_TOKENS)
        txt = os.path.join(tmp, "tokens.txt")
        with open(txt, "w") as f:
            for i in range(0, N_TOKENS, 16):
                f.write(" ".join(str(t) for t in tokens[i:i + 16]) + "\n")
        data_dir = os.path.join(tmp, "data")
        rc, out = run([TESSERA, "shard", "--out", data_dir, "--vocab", str(DATA_VOCAB), "--quiet", txt])
        if not tap.ok(rc == 0, f"tessera shard writes the dataset ({N_TOKENS} tokens, vocab {DATA_VOCAB})"):
            tap.diag(out)
            tap.fail_until(plan, "no dataset")
            return 1
        gpt2 = None
        for arch in ARCHS:
            r = tap.section(CHECKS_PER_ARCH, f"{arch['name']} stopped early", run_arch, tap, arch, tmp, data_dir,
                            tokens)
            if arch["name"] == "gpt2":
                gpt2 = r
        tap.section(N_ERROR_CHECKS, "no GPT-2 export to damage" if not gpt2 else "error checks stopped early",
                    lambda: error_checks(tap, tmp, gpt2["cfg"], gpt2["out"]), when=gpt2)
    return tap.status()


if __name__ == "__main__":
    sys.exit(main())
