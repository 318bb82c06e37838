#!/usr/bin/python3
"""torch_gpt.py — tessera's GPT-2-style model in PyTorch (CPU, float32), timed like tessera-train.

The peer of bench/cpu_vs_torch.sh. The model is tessera's `pos = "learned"`, `bias = true`,
`gelu = "tanh"` decoder (src/model/model.h): learned positions, biases, LayerNorm (eps 1e-5), fused
qkv Linear, causal attention written out as in nanoGPT's slow path (PyTorch 1.13 has no
scaled_dot_product_attention), tanh GELU, tied embeddings with the vocabulary padded to a multiple
of `--vocab-multiple` and cross entropy over the real V only.

One optimizer step is what tessera's trainer_step does (src/train/trainer.c): gradients of the mean
loss over the whole global batch, accumulated over global_batch / micro_batch microbatches (each
microbatch's summed loss scaled by 1 / counted targets), global-norm clipping, AdamW with weight
decay on matrices only and tessera's warmup + cosine schedule. Each step is timed with
time.perf_counter from the batch fetch to the end of optimizer.step().

Tokens are uniform random ids from a seeded generator (the data cannot change the FLOPs or the
time of a dense step); they are generated before the timed loop.

Run with /usr/bin/python3 (Debian's python3-torch). Set OPENBLAS_CORETYPE before starting Python if
OpenBLAS must be told the core type: it is read when the library loads.
Output: one JSON object per step on stdout, then one summary object ("summary": true).
"""
import argparse
import ctypes
import json
import math
import os
import statistics
import sys
import time


def training_parser(description):
    """The options every PyTorch peer shares: the transformer's common sizes, batch, optimizer,
    schedule and timing (bench/torch_llama.py adds its own to this parser)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--n-layer", type=int, required=True)
    p.add_argument("--d-model", type=int, required=True)
    p.add_argument("--n-head", type=int, required=True)
    p.add_argument("--vocab", type=int, required=True, help="real vocabulary V")
    p.add_argument("--vocab-multiple", type=int, default=128, help="wte rows padded to a multiple")
    p.add_argument("--seq-len", type=int, required=True)
    p.add_argument("--global-batch", type=int, required=True)
    p.add_argument("--micro-batch", type=int, required=True)
    p.add_argument("--steps", type=int, default=15)
    p.add_argument("--skip", type=int, default=2, help="leading steps left out of the summary")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--beta1", type=float, default=0.9)
    p.add_argument("--beta2", type=float, default=0.95)
    p.add_argument("--eps", type=float, default=1e-8)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--warmup", type=int, default=20, help="warmup steps of the lr schedule")
    p.add_argument("--total-steps", type=int, default=200, help="S of the cosine schedule")
    p.add_argument("--alpha-f", type=float, default=0.1)
    p.add_argument("--init-std", type=float, default=0.02)
    p.add_argument("--seed", type=int, default=42)
    return p


def check_args(p, a):
    """Refuses option combinations no peer can run (p.error exits)."""
    if a.global_batch % a.micro_batch:
        p.error("--global-batch must be a multiple of --micro-batch")
    if a.d_model % a.n_head:
        p.error("--d-model must be a multiple of --n-head")
    if a.skip >= a.steps:
        p.error("--skip must be smaller than --steps")
    return a


def parse_args(argv):
    p = training_parser(__doc__.split("\n")[0])
    p.add_argument("--max-seq-len", type=int, default=0, help="position table rows (0 = seq_len)")
    p.add_argument("--expansion", type=float, default=4.0)
    return check_args(p, p.parse_args(argv))


def proc_status_kib(field):
    """VmRSS / VmHWM of this process in KiB (Linux), or -1."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return -1


def openblas_core():
    """The OpenBLAS kernel set in use (the library torch's BLAS calls resolve to on Debian)."""
    for name in ("libopenblas.so.0", "libblas.so.3"):
        try:
            lib = ctypes.CDLL(name)
            lib.openblas_get_corename.restype = ctypes.c_char_p
            return lib.openblas_get_corename().decode()
        except (OSError, AttributeError):
            continue
    return "unknown"


def blas_libraries():
    """The BLAS shared objects mapped into this process (which OpenBLAS build torch calls)."""
    libs = set()
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1]
                if "blas" in path.rsplit("/", 1)[-1]:
                    libs.add(os.path.realpath(path))
    except OSError:
        pass
    return sorted(libs)


def lr_multiplier(s, warmup, total, alpha_f):
    """tessera's schedule (src/train/trainer.c lr_multiplier), cosine."""
    if s < warmup:
        return (s + 1) / warmup
    p = min(1.0, (s - warmup) / max(1, total - warmup))
    return alpha_f + (1.0 - alpha_f) * 0.5 * (1.0 + math.cos(math.pi * p))


def lm_loss(x, head, V, targets, scale):
    """The LM head's loss as tessera's: logits x head^T (B, T, Vp) cut to the real V, summed cross
    entropy over the targets (-1: not counted); returns (loss * scale, the summed loss detached)."""
    import torch.nn.functional as F

    logits = F.linear(x, head)
    if head.shape[0] != V:
        logits = logits[..., :V]
    loss = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), ignore_index=-1,
                           reduction="sum")
    return loss * scale, loss.detach()


def build(a):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Block(nn.Module):
        def __init__(self, C, NH, Fdim, T):
            super().__init__()
            self.nh = NH
            self.ln_1 = nn.LayerNorm(C, eps=1e-5)
            self.c_attn = nn.Linear(C, 3 * C)
            self.c_proj = nn.Linear(C, C)
            self.ln_2 = nn.LayerNorm(C, eps=1e-5)
            self.c_fc = nn.Linear(C, Fdim)
            self.mlp_proj = nn.Linear(Fdim, C)
            self.register_buffer("mask", torch.tril(torch.ones(T, T, dtype=torch.bool)).view(1, 1, T, T),
                                 persistent=False)

        def attn(self, x):
            B, T, C = x.shape
            q, k, v = self.c_attn(x).split(C, dim=2)
            hs = C // self.nh
            q = q.view(B, T, self.nh, hs).transpose(1, 2)
            k = k.view(B, T, self.nh, hs).transpose(1, 2)
            v = v.view(B, T, self.nh, hs).transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
            att = att.masked_fill(~self.mask[:, :, :T, :T], float("-inf"))
            att = F.softmax(att, dim=-1)
            y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
            return self.c_proj(y)

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            C = a.d_model
            self.V = a.vocab
            self.Vp = (a.vocab + a.vocab_multiple - 1) // a.vocab_multiple * a.vocab_multiple
            self.padding = (self.Vp - self.V) * C
            maxT = a.max_seq_len or a.seq_len
            Fdim = int(round(a.expansion * C))
            self.wte = nn.Embedding(self.Vp, C)
            self.wpe = nn.Embedding(maxT, C)
            self.h = nn.ModuleList(Block(C, a.n_head, Fdim, a.seq_len) for _ in range(a.n_layer))
            self.ln_f = nn.LayerNorm(C, eps=1e-5)
            self.register_buffer("pos", torch.arange(a.seq_len), persistent=False)
            # tessera's GPT-2 init: N(0, std), residual projections std / sqrt(2L), biases 0,
            # LayerNorm 1/0, padded vocab rows 0
            g = torch.Generator().manual_seed(a.seed)
            with torch.no_grad():
                for name, p in self.named_parameters():
                    if name.endswith("bias"):
                        p.zero_()
                    elif ".ln_" in name or name.startswith("ln_f"):
                        p.fill_(1.0)
                    else:
                        std = a.init_std
                        if name.endswith("c_proj.weight") or name.endswith("mlp_proj.weight"):
                            std /= math.sqrt(2 * a.n_layer)
                        p.normal_(0.0, std, generator=g)
                self.wte.weight[self.V:].zero_()

        def forward(self, idx, targets, scale):
            x = self.wte(idx) + self.wpe(self.pos[: idx.shape[1]])
            for blk in self.h:
                x = blk(x)
            return lm_loss(self.ln_f(x), self.wte.weight, self.V, targets, scale)  # tied LM head

    return GPT()


def train(a, build_model):
    """Builds build_model(a) and trains it a.steps steps as tessera's trainer_step does, printing
    one JSON line per step and the summary. The model has V, Vp, padding (the parameters in padded
    vocabulary rows, not counted) and forward(idx, targets, scale) -> (scaled loss, summed loss)."""
    rss_start = proc_status_kib("VmRSS")
    import torch

    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    torch.autograd.set_detect_anomaly(False)
    torch.manual_seed(a.seed)
    rss_import = proc_status_kib("VmRSS")

    model = build_model(a)
    n_all = sum(p.numel() for p in model.parameters())
    n_counted = n_all - model.padding  # padded rows are not parameters
    # weight decay on matrices (qkv, attproj, fc, fcproj, an untied lm_head); not on embeddings,
    # norms, biases, as tessera with decay_embeddings = decay_norms_biases = false
    decay = [p for n, p in model.named_parameters() if p.dim() == 2 and not n.startswith(("wte", "wpe"))]
    no_decay = [p for n, p in model.named_parameters() if not (p.dim() == 2 and not n.startswith(("wte", "wpe")))]
    kw = {}
    import inspect

    params = inspect.signature(torch.optim.AdamW.__init__).parameters
    if "foreach" in params:
        kw["foreach"] = True
    if "fused" in params:
        kw["fused"] = False
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(a.beta1, a.beta2), eps=a.eps, **kw)

    gen = torch.Generator().manual_seed(a.seed + 1)
    # seq_len + 1 tokens per sample: inputs and shifted targets, as tessera's samples
    data = torch.randint(0, a.vocab, (a.steps, a.global_batch, a.seq_len + 1), generator=gen)
    tokens_per_step = a.global_batch * a.seq_len
    times = []
    model.train()
    for s in range(a.steps):
        t0 = time.perf_counter()
        batch = data[s]
        inputs, targets = batch[:, :-1].contiguous(), batch[:, 1:].contiguous()
        counted = int((targets >= 0).sum())
        scale = 1.0 / counted
        opt.zero_grad(set_to_none=True)
        loss_sum = 0.0
        for b in range(0, a.global_batch, a.micro_batch):
            loss, raw = model(inputs[b:b + a.micro_batch], targets[b:b + a.micro_batch], scale)
            loss.backward()
            loss_sum += float(raw)
        norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), a.grad_clip))
        lr = a.lr * lr_multiplier(s, a.warmup, a.total_steps, a.alpha_f)
        for grp in opt.param_groups:
            grp["lr"] = lr
        opt.step()
        dt = time.perf_counter() - t0
        times.append(dt)
        print(json.dumps({"step": s + 1, "loss": loss_sum / counted, "grad_norm": norm, "lr": lr,
                          "tokens_per_s": tokens_per_step / dt, "step_time_s": dt}), flush=True)

    steady = times[a.skip:]
    med = statistics.median(steady)
    print(json.dumps({
        "summary": True, "framework": "torch", "model": type(model).__name__, "torch": torch.__version__,
        "threads": torch.get_num_threads(), "interop_threads": torch.get_num_interop_threads(),
        "openblas_core": openblas_core(), "blas_libraries": blas_libraries(),
        "env": {k: os.environ[k] for k in ("OPENBLAS_CORETYPE", "OMP_WAIT_POLICY", "ATEN_CPU_CAPABILITY",
                                             "LD_LIBRARY_PATH", "OMP_NUM_THREADS", "LD_PRELOAD",
                                             "GLIBC_TUNABLES") if k in os.environ},
        "foreach": kw.get("foreach", False),
        "params": n_counted, "params_with_padding": n_all, "tokens_per_step": tokens_per_step,
        "steps": a.steps, "skip": a.skip,
        "median_step_s": med, "mean_step_s": statistics.fmean(steady),
        "tokens_per_s": tokens_per_step / med,
        "rss_start_kib": rss_start, "rss_after_import_kib": rss_import,
        "vmhwm_kib": proc_status_kib("VmHWM"),
    }), flush=True)
    return 0


def main(argv):
    return train(parse_args(argv), build)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
