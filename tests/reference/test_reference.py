#!/usr/bin/env python3
"""test_reference.py — tessera's fp32 CPU trainer against an independent float64 PyTorch model.

For a GPT-2-style and an MPT-style tiny model (tests/reference/torch_gpt.py), on a random dataset
written with `tessera shard` (vocab 100, so Vp = 128 padding rows; a loss mask with zeros, so
ignored targets), and for both again with model.attn_mask = "document" on a dataset with
end-of-text tokens inside the rows (torch: DocGPT below, the block-diagonal mask and positions
restarting after each end-of-text token):
  step 0 (build/tests/ref_dump's /step0): logits, loss and every parameter gradient at tessera's
          initial weights, torch run in float64 from the dumped /params;
  training: 10 AdamW steps (warmup + cosine lr, weight decay groups, global-norm clipping,
          2 microbatches of gradient accumulation): each step's lr, loss and gradient norm, and the
          parameters after the last step (/final).
Metric, per tensor: relative error ||tessera - torch||_2 / ||torch||_2 (|a-b|/|b| for scalars),
torch in float64 taken as exact. Tolerances and their reasons are at TOL_* below and in
docs/reference-test.md. Exact checks: padded logit columns, padded rows of the wte gradient and of
the final wte are exactly 0.

Run: TESTS=reference bash tests/run.sh   (needs build/tests/ref_dump and build/tessera: `make`)
Prints TAP; exits 1 if a check fails, 77 (skip) without torch/h5py or the binaries.
"""
import math
import os
import subprocess
import sys
import tempfile
import traceback


def skip(reason):
    print(f"1..0 # SKIP {reason}")
    sys.exit(77)


try:
    import numpy as np
    import torch
    import torch.nn.functional as F
    import h5py
except ImportError as e:  # Debian: apt-get install python3-torch python3-h5py
    skip(f"cannot import {e.name} ({e}); the reference test needs torch, h5py and numpy")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.environ.get("TSR_ROOT") or os.path.dirname(os.path.dirname(HERE))
BUILD = os.path.join(ROOT, os.environ.get("BUILD", "build"))
REF_DUMP = os.path.join(BUILD, "tests", "ref_dump")
TESSERA = os.path.join(BUILD, "tessera")
for exe in (REF_DUMP, TESSERA):
    if not os.access(exe, os.X_OK):
        skip(f"{exe} is missing (run make first)")

sys.path.insert(0, HERE)
import torch_gpt  # noqa: E402

# ---- tolerances (torch float64 is the exact reference; docs/reference-test.md has the numbers) --
# Step 0, relative per tensor. fp32 unit roundoff is 2^-24 = 6e-8; a tiny model's forward and
# backward is a few dozen dependent ops with dot products of length <= 4C = 192, so errors stay
# within ~10 units of roundoff (measured 2e-7 .. 7e-7). 1e-5 leaves more than 10x margin, while
# the smallest injected mistake (GELU tanh <-> exact, LayerNorm eps 1e-6) gives >= 3.6e-4 and
# others (head layout, slopes, mask, scale, loss normalisation) 1e-2 .. 1.
TOL_STEP0 = 1e-5        # logits, loss, every gradient, and the step-0 gradient norm
TOL_TRAIN_LOSS = 1e-5   # each training step's loss (measured <= 3e-8)
# Both sides compute the schedule in double from the same formula: only libm rounding can differ.
TOL_LR = 1e-12
# After step 0 the two runs no longer share their weights. AdamW divides each gradient element by
# its own RMS plus eps = 1e-8, so an element whose gradient is near eps turns fp32 noise of ~1e-9
# into a few-percent difference of its update (d/dg g/(|g|+eps) = eps/(|g|+eps)^2); that weight
# difference then moves the next steps' gradients. Measured: <= 7e-7 on final weights here; with
# init_std 0.02 up to 5e-6 on weights and 1e-5 on a late gradient norm, while torch's norms computed
# AT tessera's own weights after each step agreed to <= 4e-7 (so: drift, not a wrong step). 1e-4
# keeps 10x over the worst seen; each bug injected into the reference (no clipping, decay groups,
# warmup off by one, Adam eps or beta2, per-microbatch mean, GELU form, slopes, scale, layout)
# moves the final weights by >= 3e-4, most by 1e-2 .. 1.
TOL_TRAJ = 1e-4         # gradient norms of steps 1.., and the parameters after the last step
# The k block of qkvb (GPT-2 only) has a gradient that is exactly zero: a bias added to every key
# adds the same q.b to a query's scores, which softmax ignores. torch's float64 gradient there is
# ~1e-18, tessera's fp32 one is rounding noise of ~1e-9 (about 1e-8 of the qkvb gradient, checked at
# step 0), which Adam scales up by 1/eps: after 10 steps tessera's k bias is ~1e-3 where torch's
# is ~1e-11. A relative error of a zero is meaningless, so that block is checked with an absolute
# bound instead: 1e-2, about 10x the measured drift and well under the ~sum(lr) = 0.064 a real
# (consistently signed) gradient would move it.
TOL_K_BIAS = 1e-2

STEPS = 10
SEQ_LEN = 16
GLOBAL_BATCH = 4
MICRO_BATCH = 2
VOCAB = 100                    # padded to Vp = 128 (vocab_multiple = 128)
N_SAMPLES = STEPS * GLOBAL_BATCH  # exactly one epoch: the 40 training rows are a permutation
DATA_SEED = 20240611
EOT = VOCAB - 1                # model.eot_token of the document-mask cases
EOT_RATE = 1 / 6               # ~2.7 end-of-text tokens per row of 16 in their dataset

# Larger than GPT-2's 0.02 so that activations reach the range where the nonlinearities differ:
# at 0.02 the fc inputs are ~0.1 and GELU tanh vs exact changes the step-0 gradients by only 2e-5
# relative; at 0.1 by 4e-4 (40x TOL_STEP0), and attention is far from uniform.
INIT_STD = 0.1
COMMON_OPTIM = dict(lr=1e-2, warmup='"3ba"', schedule='"cosine"', alpha_f=0.1, weight_decay=0.1,
                    beta1=0.9, beta2=0.95, eps=1e-8)
# grad_clip is chosen per model from the measured norms so that some steps clip and some do not.
GPT2_DOC_CLIP = 1.4
MPT_DOC_CLIP = 1.8
CONFIGS = [
    dict(name="gpt2", grad_clip=1.4,
         model=dict(n_layer=2, d_model=32, n_head=4, vocab_size=VOCAB, vocab_multiple=128,
                    max_seq_len=16, pos='"learned"', bias="true", gelu='"tanh"',
                    init_std=INIT_STD)),
    dict(name="mpt", grad_clip=1.8,
         model=dict(n_layer=2, d_model=48, n_head=3, vocab_size=VOCAB, vocab_multiple=128,
                    pos='"alibi"', bias="false", gelu='"exact"', init_std=INIT_STD)),
    # block-diagonal attention: learned positions restart per document, ALiBi needs the mask only
    dict(name="gpt2-doc", grad_clip=GPT2_DOC_CLIP, data="doc",
         model=dict(n_layer=2, d_model=32, n_head=4, vocab_size=VOCAB, vocab_multiple=128,
                    max_seq_len=16, pos='"learned"', bias="true", gelu='"tanh"',
                    init_std=INIT_STD, attn_mask='"document"', eot_token=EOT)),
    dict(name="mpt-doc", grad_clip=MPT_DOC_CLIP, data="doc",
         model=dict(n_layer=2, d_model=48, n_head=3, vocab_size=VOCAB, vocab_multiple=128,
                    pos='"alibi"', bias="false", gelu='"exact"', init_std=INIT_STD,
                    attn_mask='"document"', eot_token=EOT)),
]


# ---- TAP ---------------------------------------------------------------------------------------

from tap import Tap  # noqa: E402  (the script's own directory is on sys.path)


def rel_err(a, b):
    """||a - b||_2 / ||b||_2 in float64; inf for NaN/Inf (so `not err <= tol` fails)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        return math.inf
    nb = np.linalg.norm(b)
    d = np.linalg.norm(a - b)
    return d / nb if nb > 0 else (0.0 if d == 0 else math.inf)


# ---- fixtures ----------------------------------------------------------------------------------

def make_dataset(tmp, name, eot=None):
    """Random ids in [0, VOCAB) with a loss mask (about 1 in 5 targets masked out), written with
    `tessera shard --mask` as ID:M. With eot: ids in [0, VOCAB-1) and about EOT_RATE of them
    replaced by eot (so rows hold several documents). Returns (dir, tokens, mask)."""
    rng = np.random.RandomState(DATA_SEED + (1 if eot is not None else 0))
    n = N_SAMPLES * SEQ_LEN + 1
    tokens = rng.randint(0, VOCAB if eot is None else VOCAB - 1, size=n)
    mask = (rng.random_sample(n) >= 0.2).astype(np.int64)
    if eot is not None:
        tokens[rng.random_sample(n) < EOT_RATE] = eot
    txt = os.path.join(tmp, name + ".txt")
    with open(txt, "w") as f:
        for i in range(0, n, 16):
            f.write(" ".join(f"{t}:{m}" for t, m in zip(tokens[i:i + 16], mask[i:i + 16])) + "\n")
    out = os.path.join(tmp, "data-" + name)
    r = subprocess.run([TESSERA, "shard", "--out", out, "--vocab", str(VOCAB), "--mask", txt],
                       capture_output=True, text=True)
    return out, tokens, mask, r


def write_config(path, cfg, tmp, data_dir):
    model = "\n".join(f"  {k} = {v};" for k, v in cfg["model"].items())
    optim = dict(COMMON_OPTIM, grad_clip=cfg["grad_clip"])
    optim = "\n".join(f"  {k} = {v!r};" if isinstance(v, float) else f"  {k} = {v};"
                      for k, v in optim.items())
    with open(path, "w") as f:
        f.write(f"""# {cfg['name']}: written by tests/reference/test_reference.py
run_dir = "{os.path.join(tmp, 'run_' + cfg['name'])}";
seed = 1234;
max_duration = "{STEPS}ba";
global_batch = {GLOBAL_BATCH};
micro_batch = {MICRO_BATCH};
seq_len = {SEQ_LEN};
model = {{
{model}
}};
optim = {{
{optim}
}};
data = {{
  train = "{data_dir}";
  shuffle = true;
}};
""")


def run_env():
    env = dict(os.environ)
    if os.geteuid() == 0:  # ref_dump calls MPI_Init; OpenMPI refuses root without these
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return env


def read_dump(path):
    d = {}
    with h5py.File(path, "r") as f:
        d["attrs"] = {k: float(v) for k, v in f.attrs.items()}
        for g in ("params", "step0/grads", "final"):
            d[g] = {k: f[g][k][()] for k in f[g].keys()}
        for k in ("inputs", "targets", "logits"):
            d["step0/" + k] = f["step0"][k][()]
        d["step0/loss"] = float(f["step0"].attrs["loss"])
        for k in ("inputs", "targets", "loss", "lr", "grad_norm"):
            d["train/" + k] = f["train"][k][()]
    return d


# ---- the torch side ----------------------------------------------------------------------------

def torch_config(a):
    i = lambda k: int(round(a[k]))  # noqa: E731
    return torch_gpt.GPTConfig(V=i("V"), Vp=i("Vp"), C=i("C"), L=i("L"), NH=i("NH"), F=i("F"),
                               max_T=i("T"), alibi=bool(a["alibi"]), bias=bool(a["bias"]),
                               gelu_exact=bool(a["gelu_exact"]))


class DocGPT(torch_gpt.GPT):
    """model.attn_mask = "document": a document ends with (and includes) an eot token; a token
    sees the earlier tokens of its own document only (MPT's attn_uses_sequence_id mask), and
    learned positions count from the document's first token."""

    def __init__(self, cfg, eot):
        super().__init__(cfg)
        self.eot = eot

    def forward(self, idx, targets=None):
        B, T = idx.shape
        is_eot = (idx == self.eot).long()
        doc = torch.cumsum(is_eot, dim=1) - is_eot          # eot tokens strictly before t
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        allowed = (doc[:, :, None] == doc[:, None, :]) & causal  # (B,T,T)
        pos = allowed.sum(dim=-1) - 1                        # earlier tokens of the document
        x = self.wte(idx)
        if self.wpe is not None:
            x = x + self.wpe(pos)
        for blk in self.blocks:
            x = x + blk.attn(blk.ln1(x), allowed)
            x = x + blk.mlp(blk.ln2(x))
        logits = F.linear(self.lnf(x), self.wte.weight)
        if targets is None:
            return logits, None
        V = self.cfg.V
        loss_sum = F.cross_entropy(logits[..., :V].reshape(-1, V), targets.reshape(-1),
                                   ignore_index=-1, reduction="sum")
        return logits, loss_sum


def torch_model(tc, a):
    """The float64 torch model of a dump: DocGPT when it has the document mask."""
    if a.get("doc_mask"):
        return DocGPT(tc, int(round(a["eot_token"]))).double()
    return torch_gpt.GPT(tc).double()


def global_batch_backward(model, inputs, targets, micro):
    """Loss = sum of the counted targets' losses / their count over the WHOLE global batch,
    accumulated microbatch by microbatch as trainer_step does. Returns (loss, logits)."""
    inputs = torch.as_tensor(inputs, dtype=torch.long)
    targets = torch.as_tensor(targets, dtype=torch.long)
    counted = int((targets >= 0).sum())
    loss, logits = 0.0, []
    for b in range(0, inputs.shape[0], micro):
        lg, loss_sum = model(inputs[b:b + micro], targets[b:b + micro])
        (loss_sum / counted).backward()
        loss += loss_sum.item() / counted
        logits.append(lg.detach())
    return loss, torch.cat(logits)


def grad_norm(model):
    return math.sqrt(sum(float((p.grad ** 2).sum()) for p in model.parameters()))


SCHEDULES = {0: "cosine", 1: "linear", 2: "constant"}  # tsr_sched_kind


def torch_train(model, d):
    """STEPS AdamW steps on the dumped batches. Returns per-step (loss, grad_norm, lr, clipped)."""
    a = d["attrs"]
    groups = model.param_groups(a["weight_decay"], bool(a["decay_norms_biases"]),
                                bool(a["decay_embeddings"]))
    opt = torch.optim.AdamW(groups, lr=a["lr"], betas=(a["beta1"], a["beta2"]), eps=a["eps"])
    clip = a["grad_clip"]
    hist = []
    for s in range(int(a["steps"])):
        lr = a["lr"] * torch_gpt.lr_multiplier(SCHEDULES[int(a["schedule"])], a["alpha_f"], s,
                                               int(a["warmup_steps"]), int(a["steps"]))
        for g in opt.param_groups:
            g["lr"] = lr
        opt.zero_grad(set_to_none=False)
        loss, _ = global_batch_backward(model, d["train/inputs"][s], d["train/targets"][s],
                                        MICRO_BATCH)
        norm = grad_norm(model)
        # trainer.c: coef = clip / (norm + 1e-6), applied only when norm > clip (clip 0 = off).
        # torch.nn.utils.clip_grad_norm_ uses the same coefficient clamped to <= 1.
        clipped = clip > 0 and norm > clip
        if clipped:
            with torch.no_grad():
                for p in model.parameters():
                    p.grad.mul_(clip / (norm + 1e-6))
        opt.step()
        hist.append((loss, norm, lr, clipped))
    return hist


# ---- checks ------------------------------------------------------------------------------------

def checks_per_config(cfg):
    learned = cfg["model"]["pos"] == '"learned"'
    bias = cfg["model"]["bias"] == "true"
    n = len(torch_gpt.param_names(torch_gpt.GPTConfig(V=1, Vp=1, C=1, L=1, NH=1, F=1, max_T=1,
                                                      alibi=not learned, bias=bias,
                                                      gelu_exact=False)))
    return 12 + 2 * n + (1 if cfg.get("data") == "doc" else 0)


def check_data(tap, name, d, tokens, mask):
    """Every dumped row is sample k of the token stream (inputs tokens[kT:kT+T], targets the next
    T tokens, -1 where the mask is 0); one epoch's rows are a permutation of the samples; the step-0
    batch is the first training batch."""
    T = SEQ_LEN
    index = {tuple(tokens[k * T:k * T + T]): k for k in range(N_SAMPLES)}
    problems, seen = [], []
    rows = [(f"train step {s} row {b}", d["train/inputs"][s][b], d["train/targets"][s][b])
            for s in range(STEPS) for b in range(GLOBAL_BATCH)]
    for where, inp, tgt in rows:
        k = index.get(tuple(int(x) for x in inp))
        if k is None:
            problems.append(f"{where}: inputs are no sample of the token stream")
            continue
        want = np.where(mask[k * T + 1:k * T + T + 1] == 1, tokens[k * T + 1:k * T + T + 1], -1)
        if not np.array_equal(tgt, want):
            problems.append(f"{where} (sample {k}): targets differ from tokens/mask")
        seen.append(k)
    if sorted(seen) != list(range(N_SAMPLES)) and not problems:
        problems.append(f"one epoch of training rows is not a permutation of the {N_SAMPLES} "
                        f"samples: {sorted(seen)}")
    if not (np.array_equal(d["step0/inputs"], d["train/inputs"][0])
            and np.array_equal(d["step0/targets"], d["train/targets"][0])):
        problems.append("the step-0 batch differs from training step 0's batch")
    masked = int((d["step0/targets"] < 0).sum())
    if masked == 0:
        problems.append("no masked target in the step-0 batch: ignore_index is not exercised")
    tap.diag(f"{name}: step-0 batch has {masked} of {d['step0/targets'].size} targets masked; "
             f"sample order of step 0: {seen[:GLOBAL_BATCH]}")
    for p in problems[:5]:
        tap.diag(p)
    tap.ok(not problems, f"{name}: dumped batches are the dataset's samples with the loss mask, "
                         f"one epoch = a permutation of the {N_SAMPLES} samples")


def run_config(tap, cfg, tmp, data_dir, tokens, mask):
    name = cfg["name"]
    cfg_path = os.path.join(tmp, name + ".cfg")
    out = os.path.join(tmp, name + ".h5")
    write_config(cfg_path, cfg, tmp, data_dir)
    r = subprocess.run([REF_DUMP, cfg_path, out], capture_output=True, text=True, env=run_env())
    if not tap.ok(r.returncode == 0 and os.path.exists(out),
                  f"{name}: ref_dump {os.path.basename(cfg_path)} exits 0 (rc {r.returncode})"):
        tap.diag((r.stdout + r.stderr)[-3000:])
        return False
    d = read_dump(out)
    a = d["attrs"]
    tc = torch_config(a)
    names = torch_gpt.param_names(tc)

    # -- the dump describes the model the config asked for --
    m = cfg["model"]
    want = dict(V=VOCAB, Vp=128, C=m["d_model"], L=m["n_layer"], NH=m["n_head"],
                F=4 * m["d_model"], T=SEQ_LEN, alibi=float(m["pos"] == '"alibi"'),
                bias=float(m["bias"] == "true"), gelu_exact=float(m["gelu"] == '"exact"'),
                global_batch=GLOBAL_BATCH, steps=STEPS, warmup_steps=3,
                grad_clip=cfg["grad_clip"], weight_decay=COMMON_OPTIM["weight_decay"],
                doc_mask=float(m.get("attn_mask") == '"document"'))
    if "eot_token" in m:
        want["eot_token"] = m["eot_token"]
    bad = [f"{k} = {a.get(k)} (want {v})" for k, v in want.items() if a.get(k) != v]
    for g in ("params", "step0/grads", "final"):
        if sorted(d[g]) != sorted(names):
            bad.append(f"/{g} holds {sorted(d[g])}, want {sorted(names)}")
    model = torch_model(tc, a)
    shapes = {n: tuple(t.shape) for n, t in model.tessera_tensors().items()}
    for g in ("params", "step0/grads", "final"):
        for n in names:
            if n in d[g] and d[g][n].shape != shapes[n]:
                bad.append(f"/{g}/{n} has shape {d[g][n].shape}, want {shapes[n]}")
    for b in bad[:8]:
        tap.diag(b)
    tap.ok(not bad, f"{name}: dump attributes, tensor names and shapes match the config")

    check_data(tap, name, d, tokens, mask)

    # -- step 0: forward and backward at the initial weights --
    model.load_tessera(d["params"])
    model.zero_grad(set_to_none=False)
    loss, logits = global_batch_backward(model, d["step0/inputs"], d["step0/targets"], MICRO_BATCH)
    V = tc.V
    e = rel_err(d["step0/logits"], logits.numpy())
    tap.ok(e <= TOL_STEP0, f"{name}: step-0 logits (B,T,Vp) rel err {e:.2e} <= {TOL_STEP0:g}")
    pad = d["step0/logits"][..., V:]
    tap.ok(pad.size > 0 and not np.any(pad != 0),
           f"{name}: the {tc.Vp - V} padded logit columns are exactly 0 "
           f"(max |x| {np.abs(pad).max() if pad.size else float('nan'):g})")
    e = abs(d["step0/loss"] - loss) / abs(loss)
    tap.ok(e <= TOL_STEP0, f"{name}: step-0 loss {d['step0/loss']:.7f} vs torch {loss:.7f}: "
                           f"rel err {e:.2e} <= {TOL_STEP0:g}")
    grads = {k: v.numpy() for k, v in model.tessera_tensors(grads=True).items()}
    worst = (0.0, "")
    for n in names:
        e = rel_err(d["step0/grads"][n], grads[n])
        worst = max(worst, (e, n))
        tap.ok(e <= TOL_STEP0, f"{name}: step-0 grad {n} {shapes[n]} rel err {e:.2e} "
                               f"(|g| {np.linalg.norm(grads[n]):.3g}) <= {TOL_STEP0:g}")
    tap.diag(f"{name}: worst step-0 gradient: {worst[1]} at {worst[0]:.2e}")
    if "qkvb" in names:  # the k block's gradient is exactly zero (TOL_K_BIAS)
        kb = slice(tc.C, 2 * tc.C)
        tap.diag(f"{name}: step-0 k-bias gradient norm: tessera "
                 f"{np.linalg.norm(d['step0/grads']['qkvb'][:, kb]):.2e}, torch "
                 f"{np.linalg.norm(grads['qkvb'][:, kb]):.2e} (whole qkvb "
                 f"{np.linalg.norm(grads['qkvb']):.2e})")
    padg = d["step0/grads"]["wte"][V:]
    tap.ok(not np.any(padg != 0), f"{name}: padded rows {V}..{tc.Vp - 1} of the wte gradient "
                                  f"are exactly 0 (max |g| {np.abs(padg).max():g})")

    if a["doc_mask"]:  # the case exercises the mask: documents inside rows change the logits
        inner = int((d["step0/inputs"][:, :-1] == EOT).sum())
        plain = torch_gpt.GPT(tc).double()
        plain.load_tessera(d["params"])
        with torch.no_grad():
            causal_logits, _ = plain(torch.as_tensor(d["step0/inputs"], dtype=torch.long))
        e = rel_err(causal_logits.numpy(), logits.numpy())
        tap.ok(inner > 0 and e > 1e-2, f"{name}: the step-0 batch has {inner} end-of-text tokens "
                                       f"inside rows; plain causal logits differ from the "
                                       f"document-mask ones by {e:.2e} > 1e-2")

    # -- 10 training steps --
    model = torch_model(tc, a)
    model.load_tessera(d["params"])
    hist = torch_train(model, d)
    lr_t = d["train/lr"]
    e = max(abs(lr_t[s] - h[2]) / h[2] for s, h in enumerate(hist))
    tap.diag(f"{name}: lr per step " + " ".join(f"{x:.5g}" for x in lr_t))
    tap.ok(e <= TOL_LR, f"{name}: lr schedule (warmup 3, cosine to alpha_f 0.1) matches "
                        f"lr_multiplier's formula: max rel err {e:.1e} <= {TOL_LR:g}")
    clip = a["grad_clip"]
    norms_t = d["train/grad_norm"]
    clipped_t = [bool(x > clip) for x in norms_t]
    clipped_torch = [h[3] for h in hist]
    margin = min(abs(x - clip) / clip for x in norms_t)
    tap.diag(f"{name}: grad norms " + " ".join(f"{x:.4f}" for x in norms_t) +
             f" (clip {clip:g}; closest norm {margin:.1%} away from it)")
    tap.ok(any(clipped_t) and not all(clipped_t) and clipped_t == clipped_torch,
           f"{name}: clipping exercised: {sum(clipped_t)} of {len(norms_t)} steps clipped, "
           f"the same steps as torch's")
    el = [abs(lt - h[0]) / abs(h[0]) for lt, h in zip(d["train/loss"], hist)]
    tap.diag(f"{name}: train loss " + " ".join(f"{x:.5f}" for x in d["train/loss"]))
    tap.diag(f"{name}: train loss rel err per step " + " ".join(f"{x:.1e}" for x in el))
    e = max(el) if all(math.isfinite(x) for x in el) else math.inf
    tap.ok(e <= TOL_TRAIN_LOSS, f"{name}: {len(el)} training losses, max rel err {e:.2e} "
                                f"<= {TOL_TRAIN_LOSS:g}")
    en = [abs(nt - h[1]) / h[1] for nt, h in zip(norms_t, hist)]
    en = [x if math.isfinite(x) else math.inf for x in en]
    tap.diag(f"{name}: grad norm rel err per step " + " ".join(f"{x:.1e}" for x in en))
    e0, e1 = en[0], max(en[1:])
    tap.ok(e0 <= TOL_STEP0 and e1 <= TOL_TRAJ,
           f"{name}: gradient norms: step 0 rel err {e0:.2e} <= {TOL_STEP0:g}, "
           f"steps 1..{len(en) - 1} max {e1:.2e} <= {TOL_TRAJ:g}")
    final = {k: v.numpy() for k, v in model.tessera_tensors().items()}
    worst = (0.0, "")
    for n in names:
        got, want, extra, ok = d["final"][n], final[n], "", True
        if n == "qkvb":  # the k block: absolute bound (TOL_K_BIAS); q and v blocks: relative
            C = tc.C
            kdev = float(np.abs(got[:, C:2 * C] - want[:, C:2 * C]).max())
            ok = kdev <= TOL_K_BIAS
            extra = f" (q,v blocks); k block max |diff| {kdev:.1e} <= {TOL_K_BIAS:g}"
            got = np.concatenate([got[:, :C], got[:, 2 * C:]], axis=1)
            want = np.concatenate([want[:, :C], want[:, 2 * C:]], axis=1)
        e = rel_err(got, want)
        worst = max(worst, (e, n))
        tap.ok(ok and e <= TOL_TRAJ, f"{name}: final {n} after {STEPS} steps rel err {e:.2e} "
                                     f"<= {TOL_TRAJ:g}{extra}")
    tap.diag(f"{name}: worst final parameter: {worst[1]} at {worst[0]:.2e}")
    padp = d["final"]["wte"][V:]
    tap.ok(not np.any(padp != 0), f"{name}: padded rows of the final wte are still exactly 0")
    return True


def main():
    torch.set_default_dtype(torch.float64)
    datasets = {"plain": None, "doc": EOT}  # dataset name -> eot id inside its rows (or none)
    plan = len(datasets) + sum(checks_per_config(c) for c in CONFIGS)
    tap = Tap(plan)
    with tempfile.TemporaryDirectory(prefix="tsr-ref-") as tmp:
        data = {}
        for dname, eot in datasets.items():
            data_dir, tokens, mask, r = make_dataset(tmp, dname, eot)
            inner = f", {int((tokens == eot).sum())} of them end-of-text" if eot is not None else ""
            if not tap.ok(r.returncode == 0, f"tessera shard --mask writes the {dname} dataset "
                                             f"({len(tokens)} tokens{inner}, vocab {VOCAB})"):
                tap.diag((r.stdout + r.stderr)[-2000:])
                continue
            data[dname] = (data_dir, tokens, mask)
        for cfg in CONFIGS:
            end = tap.n + checks_per_config(cfg)
            dname = cfg.get("data", "plain")
            try:
                if dname in data:
                    run_config(tap, cfg, tmp, *data[dname])
            except Exception:  # report, then account for the checks that did not run
                tap.diag(traceback.format_exc())
            tap.fail_until(end, f"{cfg['name']} stopped early" if dname in data else
                           f"{cfg['name']}: no {dname} dataset")
    if tap.n != plan:
        tap.diag(f"planned {plan} checks, ran {tap.n}")
        return 1
    return 1 if tap.failed else 0


if __name__ == "__main__":
    sys.exit(main())
