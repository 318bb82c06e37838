"""torch_moe.py — a mixture-of-experts Llama/Qwen decoder in PyTorch, for the reference test.
Written from docs/moe.md (and the published Mixtral / Qwen3-MoE / Switch / ST-MoE definitions),
not from tessera's C code; the attention, norms, dense MLP, RoPE and loss are torch_llama.py's.
Run in float64 by the test.

Layer l is MoE when (l + 1) % moe_every == 0; its MLP is replaced by, for the N = B*T rows x:
  logits = x @ router^T (N,E);  probs = softmax(logits);  lse = logsumexp(logits)
  idx    = the K experts of highest probability, descending, ties to the lower expert index
  wts    = probs[idx], divided by their sum with norm_topk
  out[n] = shared(x[n]) (S > 0) + sum_j wts[n,j] * expert_idx[n,j](x[n])   (every token: dropless)
  expert e / shared = SwiGLU down(silu(gate(x)) * up(x)), w1 = [gate rows | up rows], no biases
  aux = E * sum_e f_e P_e,  f_e = count_e / (N*K) (a constant: no gradient),
        P_e = mean_n probs[n,e]
  z   = mean_n lse[n]^2
The experts run as the plain PyTorch loop over experts (Hugging Face's Mixtral): each expert on the
rows routed to it, weighted and added back with index_add.

Parameters at tessera's layout (docs/moe.md "Parameters"), one MoE layer's slice each:
router (E,C) = routerw, w1 (E,2FE,C) = expw1, w2 (E,C,FE) = expw2, shw1 (2S,C), shw2 (C,S).
"""
import math
import types
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_llama

# tessera names of the MoE tensors, in tessera's order (src/model/model.h), after the dense MLP's
MOE_NAMES = ("routerw", "expw1", "expw2", "shw1", "shw2")


@dataclass
class MoEConfig(torch_llama.LlamaConfig):
    E: int             # routed experts per MoE layer
    K: int             # experts per token
    FE: int            # an expert's hidden width
    S: int             # the shared expert's hidden width; 0 = none
    moe_every: int     # layer l is MoE when (l + 1) % moe_every == 0
    norm_topk: bool    # the K weights divided by their sum
    aux_coef: float    # load-balancing loss weight, per MoE layer
    z_coef: float      # router z-loss weight, per MoE layer


def is_moe_layer(cfg, l):
    return (l + 1) % cfg.moe_every == 0


def param_names(cfg):
    """tessera parameter names present in a model of this config, in tessera's order."""
    dense = any(not is_moe_layer(cfg, l) for l in range(cfg.L))
    names = [n for n in torch_llama.param_names(cfg)
             if dense or n not in ("fcw", "fcprojw")]
    moe = [n for n in MOE_NAMES if cfg.S > 0 or n not in ("shw1", "shw2")]
    at = names.index("lnfw")
    return names[:at] + moe + names[at:]


def swiglu(x, w1, w2):
    """down(silu(gate(x)) * up(x)) with w1 = [gate rows | up rows] (2F, C) and w2 (C, F)."""
    gate, up = w1.chunk(2)
    return F.linear(F.silu(F.linear(x, gate)) * F.linear(x, up), w2)


def route(logits, K, norm_topk):
    """-> probs (N,E), idx (N,K), wts (N,K), margin (N,). idx: the K largest probabilities in
    descending order, ties to the lower index (a stable descending sort keeps equal values in
    index order). margin: probability of the K-th minus the (K+1)-th choice (inf when K = E), how
    far the row is from switching an expert."""
    probs = F.softmax(logits, dim=-1)
    ranked, order = torch.sort(probs.detach(), dim=-1, descending=True, stable=True)
    idx = order[:, :K]
    wts = probs.gather(1, idx)
    if norm_topk:
        wts = wts / wts.sum(dim=-1, keepdim=True)
    if K < probs.shape[1]:
        margin = ranked[:, K - 1] - ranked[:, K]
    else:
        margin = torch.full((probs.shape[0],), math.inf, dtype=probs.dtype)
    return probs, idx, wts, margin


def router_losses(logits, probs, idx):
    """(aux, z, counts): Switch's load-balancing loss with Megatron's normalisation and ST-MoE's
    z-loss over the rows; the counts per expert enter aux as constants."""
    N, E = probs.shape
    K = idx.shape[1]
    counts = torch.bincount(idx.reshape(-1), minlength=E).to(probs.dtype)
    aux = E * torch.sum(counts / (N * K) * probs.mean(dim=0))
    z = torch.logsumexp(logits, dim=-1).pow(2).mean()
    return aux, z, counts


def moe_forward(x, router, w1, w2, shw1, shw2, K, norm_topk):
    """One MoE MLP on x (N,C). shw1/shw2 None without a shared expert. Returns (out, aux, z, info)
    with info.idx, info.wts, info.margin, info.counts."""
    logits = F.linear(x, router)
    probs, idx, wts, margin = route(logits, K, norm_topk)
    aux, z, counts = router_losses(logits, probs, idx)
    out = swiglu(x, shw1, shw2) if shw1 is not None else torch.zeros_like(x)
    for e in range(router.shape[0]):
        n, j = torch.nonzero(idx == e, as_tuple=True)
        if len(n):
            out = out.index_add(0, n, wts[n, j, None] * swiglu(x[n], w1[e], w2[e]))
    return out, aux, z, types.SimpleNamespace(idx=idx, wts=wts, margin=margin, counts=counts)


class MoE(nn.Module):
    """The MoE MLP of one layer. After each forward: aux, z (tensors, for the loss) and counts;
    min_margin is the smallest routing margin of all its forwards so far."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = c = cfg
        self.router = nn.Parameter(torch.empty(c.E, c.C))
        self.w1 = nn.Parameter(torch.empty(c.E, 2 * c.FE, c.C))
        self.w2 = nn.Parameter(torch.empty(c.E, c.C, c.FE))
        self.shw1 = nn.Parameter(torch.empty(2 * c.S, c.C)) if c.S else None
        self.shw2 = nn.Parameter(torch.empty(c.C, c.S)) if c.S else None
        self.min_margin = math.inf

    def forward(self, x):
        B, T, C = x.shape
        out, self.aux, self.z, info = moe_forward(x.reshape(B * T, C), self.router, self.w1,
                                                  self.w2, self.shw1, self.shw2, self.cfg.K,
                                                  self.cfg.norm_topk)
        self.counts = info.counts
        self.min_margin = min(self.min_margin, float(info.margin.min()))
        return out.view(B, T, C)


class MoELlama(torch_llama.Llama):
    """torch_llama's decoder with the MLP of every moe_every-th layer replaced by MoE. forward
    returns what Llama's does (logits, the language-model loss sum); router_loss() is then the
    auxiliary term of that forward, sum over MoE layers of aux_coef * aux + z_coef * z."""

    def __init__(self, cfg, eot=None):
        super().__init__(cfg, eot)
        for l, ly in enumerate(self.layers):
            if is_moe_layer(cfg, l):
                ly.mlp = MoE(cfg)

    def moe_layers(self):
        return [ly.mlp for ly in self.layers if isinstance(ly.mlp, MoE)]

    def router_loss(self):
        c = self.cfg
        return sum(c.aux_coef * m.aux + c.z_coef * m.z for m in self.moe_layers())

    def router_stats(self):
        """Per MoE layer [aux, z, tokens per expert (E)] of the last forward, (LM, 2+E) numpy."""
        return torch.stack([torch.cat([torch.stack([m.aux, m.z]).detach(), m.counts])
                            for m in self.moe_layers()]).numpy()

    def min_margin(self):
        """The smallest routing margin of every forward of every MoE layer so far."""
        return min(m.min_margin for m in self.moe_layers())

    def tessera_views(self):
        """torch_llama's views for the attention, norms and embeddings; fcw/fcprojw over the dense
        layers only, and the MoE tensors over the MoE layers (docs/moe.md "Parameters")."""
        views = torch_llama.Llama.tessera_views(_DenseShadow(self))
        dense = [ly.mlp for ly in self.layers if not isinstance(ly.mlp, MoE)]
        moe = self.moe_layers()
        own = {
            "fcw": [[m.gate_proj.weight, m.up_proj.weight] for m in dense],
            "fcprojw": [[m.down_proj.weight] for m in dense],
            "routerw": [[m.router] for m in moe],
            "expw1": [[m.w1] for m in moe],
            "expw2": [[m.w2] for m in moe],
            "shw1": [[m.shw1] for m in moe],
            "shw2": [[m.shw2] for m in moe],
        }
        return {n: own[n] if n in own else views[n] for n in param_names(self.cfg)}


class _DenseShadow:
    """The model as torch_llama.Llama.tessera_views reads it, with MoE layers' mlp replaced by a
    stand-in (that method reads fcw/fcprojw from every layer; MoELlama replaces those entries)."""
    _STAND_IN = types.SimpleNamespace(**{p: types.SimpleNamespace(weight=None)
                                         for p in ("gate_proj", "up_proj", "down_proj")})

    def __init__(self, model):
        self.cfg, self.embed_tokens, self.norm = model.cfg, model.embed_tokens, model.norm
        self.lm_head = model.lm_head
        self.layers = [types.SimpleNamespace(
            input_layernorm=ly.input_layernorm, self_attn=ly.self_attn,
            post_attention_layernorm=ly.post_attention_layernorm,
            mlp=self._STAND_IN if isinstance(ly.mlp, MoE) else ly.mlp) for ly in model.layers]
