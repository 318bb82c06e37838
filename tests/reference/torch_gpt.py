"""torch_gpt.py — tessera's decoder written independently in PyTorch, for the reference test
(and a benchmark later). Written from the definitions (GPT-2 / nanoGPT, MPT / llm-foundry), not from
tessera's C code, using torch's own ops (F.layer_norm, F.linear, F.gelu, F.cross_entropy).

Dimensions as in kernels/ops.h: B batch, T sequence, C d_model, NH heads, hs = C/NH,
F = MLP hidden, V real vocabulary, Vp padded vocabulary (>= V), L layers.

  x = wte[idx] (+ wpe[t] with learned positions)
  per block: x = x + attproj(attn(ln1(x)));  x = x + fcproj(gelu(fc(ln2(x))))
  logits = lnf(x) @ wte^T       (B,T,Vp): tied head over all Vp rows
  loss   = cross-entropy over the first V logits only, targets -1 ignored

Attention is causal on a fused qkv projection laid out [q | k | v] (each head h at columns
h*hs..), scores scaled by 1/sqrt(hs); with ALiBi the MPT bias is added to the scores.

Parameter names and shapes follow tessera's dumps (tessera stacks per-layer tensors, e.g.
qkvw (L, 3C, C)); `load_tessera`, `tessera_tensors` of TesseraLayout (shared with
torch_llama.py) translate between the two layouts.
"""
import math
import os
import sys
from dataclasses import dataclass

# lr_schedule.py lies beside this file, which bench/gpu/torch_peer.py loads by its path (no
# tests/reference on sys.path there)
_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from lr_schedule import lr_multiplier  # noqa: F401,E402 (the schedule, torch-free: tests/train/test_schedule.sh)
import torch
import torch.nn as nn
import torch.nn.functional as F

LN_EPS = 1e-5  # GPT-2 and MPT LayerNorm epsilon

# tessera name -> (kind, per_layer), in tessera's order (src/model/model.h). Kind decides weight
# decay: "weight" always decays, "norm"/"bias" only with decay_norms_biases, "embedding" only with
# decay_embeddings (MPT / llm-foundry conventions, as in trainer.c's param_decays). Shared with
# torch_llama.py, whose models have qnormw, knormw and lm_head.
PARAMS = {
    "wte": ("embedding", False),
    "wpe": ("embedding", False),
    "ln1w": ("norm", True),
    "ln1b": ("norm", True),
    "qkvw": ("weight", True),
    "qkvb": ("bias", True),
    "qnormw": ("norm", True),
    "knormw": ("norm", True),
    "sinks": ("bias", True),      # attention sinks (torch_llama.py), no weight decay as biases
    "postattnw": ("norm", True),  # sandwich norms (torch_llama.py)
    "postmlpw": ("norm", True),
    "attprojw": ("weight", True),
    "attprojb": ("bias", True),
    "ln2w": ("norm", True),
    "ln2b": ("norm", True),
    "fcw": ("weight", True),
    "fcb": ("bias", True),
    "fcprojw": ("weight", True),
    "fcprojb": ("bias", True),
    "routerw": ("weight", True),  # the MoE tensors (torch_moe.py), stacked over the MoE layers
    "routerb": ("bias", True),    # gpt-oss's router and expert biases
    "expw1": ("weight", True),
    "expb1": ("bias", True),
    "expw2": ("weight", True),
    "expb2": ("bias", True),
    "shw1": ("weight", True),
    "shw2": ("weight", True),
    "shgatew": ("weight", True),
    "routercorr": ("state", True),  # DeepSeek's correction bias: no gradient, no optimizer
    "lnfw": ("norm", False),
    "lnfb": ("norm", False),
    "lm_head": ("weight", False),
}
GPT_BIASES = ("ln1b", "qkvb", "attprojb", "ln2b", "fcb", "fcprojb", "lnfb")
GPT_NAMES = ("wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb", "ln2w", "ln2b",
             "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb")


@dataclass
class GPTConfig:
    V: int            # real vocabulary
    Vp: int           # padded vocabulary (rows of wte)
    C: int
    L: int
    NH: int
    F: int
    max_T: int        # rows of wpe (learned positions)
    alibi: bool       # False: learned positions (GPT-2); True: ALiBi (MPT)
    bias: bool        # biases in linears and LayerNorms
    gelu_exact: bool  # False: tanh approximation (GPT-2); True: erf form (MPT)


def param_names(cfg):
    """tessera parameter names present in a model of this config, in tessera's order."""
    return [n for n in GPT_NAMES
            if (cfg.bias or n not in GPT_BIASES) and (not cfg.alibi or n != "wpe")]


def alibi_slopes(n_heads, alibi_bias_max=8):
    """MPT's ALiBi slopes (llm-foundry gen_slopes): for the next power of two n >= n_heads,
    slope_i = 1 / 2^(i * alibi_bias_max / n), i = 1..n; if n != n_heads, take the slopes at odd
    0-based positions then those at even positions (slopes[1::2] + slopes[::2]), first n_heads."""
    n = 2 ** math.ceil(math.log2(n_heads))
    m = torch.arange(1, n + 1, dtype=torch.float64) * (alibi_bias_max / n)
    slopes = 1.0 / torch.pow(2.0, m)
    if n != n_heads:
        slopes = torch.cat([slopes[1::2], slopes[::2]])[:n_heads]
    return slopes


def alibi_bias(n_heads, T, dtype):
    """MPT's non-full ALiBi bias (llm-foundry gen_alibi_bias, full=False): key j gets
    slope_h * (j - (T-1)), the same for every query row. It differs from -slope_h * (i - j) by
    slope_h * (T-1-i), a constant per row that softmax ignores. Shape (NH, 1, T)."""
    rel = torch.arange(1 - T, 1, dtype=torch.float64).view(1, 1, T)
    return (alibi_slopes(n_heads).view(n_heads, 1, 1) * rel).to(dtype)


def summed_loss(logits, targets, V):
    """The SUM of the cross-entropy of logits (B,T,Vp: the first V columns count) over the targets
    (B,T) that are not -1 (the caller divides by the global count); None without targets."""
    if targets is None:
        return None
    return F.cross_entropy(logits[..., :V].reshape(-1, V), targets.reshape(-1), ignore_index=-1, reduction="sum")


class LayerNorm(nn.Module):
    """LayerNorm with an optional bias (torch 1.13's nn.LayerNorm has no bias=False)."""

    def __init__(self, C, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(C))
        self.bias = nn.Parameter(torch.zeros(C)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, (x.shape[-1],), self.weight, self.bias, LN_EPS)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.qkv = nn.Linear(cfg.C, 3 * cfg.C, bias=cfg.bias)
        self.proj = nn.Linear(cfg.C, cfg.C, bias=cfg.bias)

    def forward(self, x, allowed=None):
        """allowed (B,T,T) bool: query i may see key j; None = causal. ALiBi is relative, so it is
        the same within a document as in a sequence of its own."""
        B, T, C = x.shape
        NH = self.cfg.NH
        hs = C // NH
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, NH, hs).transpose(1, 2) for t in (q, k, v))  # (B,NH,T,hs)
        s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))               # (B,NH,T,T)
        if self.cfg.alibi:
            s = s + alibi_bias(NH, T, s.dtype).to(s.device)
        if allowed is None:
            causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            s = s.masked_fill(~causal, float("-inf"))
        else:
            s = s.masked_fill(~allowed[:, None], float("-inf"))
        y = F.softmax(s, dim=-1) @ v                                         # (B,NH,T,hs)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.fc = nn.Linear(cfg.C, cfg.F, bias=cfg.bias)
        self.proj = nn.Linear(cfg.F, cfg.C, bias=cfg.bias)
        self.approximate = "none" if cfg.gelu_exact else "tanh"

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x), approximate=self.approximate))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln1 = LayerNorm(cfg.C, cfg.bias)
        self.attn = Attention(cfg)
        self.ln2 = LayerNorm(cfg.C, cfg.bias)
        self.mlp = MLP(cfg)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TesseraLayout:
    """Translation between a torch model and tessera's stacked parameter layout. The model defines
    tessera_views(): tessera name -> one entry per layer for a per-layer tensor (PARAMS), or a
    single entry otherwise; an entry is the list of the model's tensors whose concatenation along
    rows is that slice (one tensor, or e.g. [q_proj, k_proj, v_proj] for qkvw of a model with
    separate projections, torch_llama.py)."""

    @torch.no_grad()
    def load_tessera(self, params):
        """Copies tessera-layout arrays (name -> numpy array at tessera's shape) into the model."""
        for name, entries in self.tessera_views().items():
            src = torch.as_tensor(params[name])
            if not PARAMS[name][1]:
                src = src.unsqueeze(0)
            rows = sum(t.shape[0] for t in entries[0])
            if src.shape[0] != len(entries) or src.shape[1] != rows or \
                    tuple(src.shape[2:]) != tuple(entries[0][0].shape[1:]):
                raise ValueError(f"{name}: tessera shape {tuple(params[name].shape)} does not fit "
                                 f"{len(entries)} x {[tuple(t.shape) for t in entries[0]]}")
            for parts, s in zip(entries, src):
                for dst, piece in zip(parts, s.split([t.shape[0] for t in parts])):
                    dst.copy_(piece)

    @torch.no_grad()
    def tessera_tensors(self, grads=False):
        """name -> stacked tensor (parameters, or their gradients) at tessera's shape."""
        out = {}
        for name, entries in self.tessera_views().items():
            def value(t):
                if not grads:
                    return t
                return t.grad if t.grad is not None else torch.zeros_like(t)
            slices = [torch.cat([value(t) for t in parts]) for parts in entries]
            out[name] = torch.stack(slices) if PARAMS[name][1] else slices[0].clone()
        return out

    def param_groups(self, weight_decay, decay_norms_biases=False, decay_embeddings=False):
        """AdamW groups: decay on "weight" kinds, on norms/biases and embeddings only if asked."""
        decay, no_decay = [], []
        for name, entries in self.tessera_views().items():
            kind = PARAMS[name][0]
            d = (kind == "weight" or (kind in ("norm", "bias") and decay_norms_biases)
                 or (kind == "embedding" and decay_embeddings))
            (decay if d else no_decay).extend(t for parts in entries for t in parts)
        return [{"params": decay, "weight_decay": weight_decay},
                {"params": no_decay, "weight_decay": 0.0}]


class GPT(TesseraLayout, nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.Vp, cfg.C)
        self.wpe = None if cfg.alibi else nn.Embedding(cfg.max_T, cfg.C)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.L))
        self.lnf = LayerNorm(cfg.C, cfg.bias)

    def forward(self, idx, targets=None):
        """idx, targets (B,T) int64. Returns logits (B,T,Vp) and, with targets, the SUM of the
        cross-entropy over the targets that are not -1 (the caller divides by the global count)."""
        B, T = idx.shape
        x = self.wte(idx)
        if self.wpe is not None:
            x = x + self.wpe(torch.arange(T, device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        logits = F.linear(self.lnf(x), self.wte.weight)  # tied head, all Vp rows
        return logits, summed_loss(logits, targets, self.cfg.V)

    def tessera_views(self):
        """tessera name -> this model's tensors, one entry per layer for the stacked per-layer
        tensors (in layer order), each entry a list of one tensor (TesseraLayout)."""
        def per_layer(get):
            return [[get(b)] for b in self.blocks]
        v = {
            "wte": [[self.wte.weight]],
            "wpe": [[self.wpe.weight]] if self.wpe is not None else None,
            "ln1w": per_layer(lambda b: b.ln1.weight),
            "ln1b": per_layer(lambda b: b.ln1.bias),
            "qkvw": per_layer(lambda b: b.attn.qkv.weight),
            "qkvb": per_layer(lambda b: b.attn.qkv.bias),
            "attprojw": per_layer(lambda b: b.attn.proj.weight),
            "attprojb": per_layer(lambda b: b.attn.proj.bias),
            "ln2w": per_layer(lambda b: b.ln2.weight),
            "ln2b": per_layer(lambda b: b.ln2.bias),
            "fcw": per_layer(lambda b: b.mlp.fc.weight),
            "fcb": per_layer(lambda b: b.mlp.fc.bias),
            "fcprojw": per_layer(lambda b: b.mlp.proj.weight),
            "fcprojb": per_layer(lambda b: b.mlp.proj.bias),
            "lnfw": [[self.lnf.weight]],
            "lnfb": [[self.lnf.bias]],
        }
        return {n: v[n] for n in param_names(self.cfg)}
