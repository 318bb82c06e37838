"""torch_moe.py — a mixture-of-experts Llama/Qwen decoder in PyTorch, for the reference test.
Written from docs/moe.md (and the published Mixtral / Qwen3-MoE / Switch / ST-MoE definitions),
not from tessera's C code; the attention, norms, dense MLP, RoPE and loss are torch_llama.py's.
Run in float64 by the test.

Layer l is MoE when (l + 1) % moe_every == 0; its MLP is replaced by, for the N = B*T rows x:
  logits = x @ router^T (N,E);  probs = softmax(logits);  lse = logsumexp(logits)
  idx    = the K experts of highest probability, descending, ties to the lower expert index
  wts    = probs[idx], divided by their sum with norm_topk
  out[n] = shared(x[n]) (S > 0) + sum_j wts[n,j] * expert_idx[n,j](x[n])   (every token: dropless)
           with shared_gate (Qwen2-MoE, Qwen3-Next's shared_expert_gate) the shared term is
           sigmoid(x[n] . shgatew) * shared(x[n]), shgatew (1, C) per MoE layer
  expert e / shared = SwiGLU down(silu(gate(x)) * up(x)), w1 = [gate rows | up rows], no biases
  aux = E * sum_e f_e P_e,  f_e = count_e / (N*K) (a constant: no gradient),
        P_e = mean_n probs[n,e]
  z   = mean_n lse[n]^2
The experts run as the plain PyTorch loop over experts (Hugging Face's Mixtral): each expert on the
rows routed to it, weighted and added back with index_add.

Parameters at tessera's layout (docs/moe.md "Parameters"), one MoE layer's slice each:
router (E,C) = routerw, w1 (E,2FE,C) = expw1, w2 (E,C,FE) = expw2, shw1 (2S,C), shw2 (C,S),
shgatew (1,C).

gpt-oss (docs/moe.md "gpt-oss's experts"), written from transformers' modeling_gpt_oss.py
(GptOssTopKRouter, GptOssExperts, GptOssAttention), with tessera's [gate rows | up rows] in place
of Hugging Face's interleaved gate/up columns:
  router_bias:  logits = x @ router^T + routerb (E,);  topk_softmax: the K largest logits, then
                wts = softmax over those K logits (GptOssTopKRouter; the aux and z losses keep the
                full softmax of the logits)
  expert_bias:  h = x @ w1[e]^T + b1[e] (2FE,),  y = a @ w2[e]^T + b2[e] (C,): the down bias is
                added per expert before the routing weight
  gptoss:       gate = min(gate, limit), up = clamp(up, -limit, limit),
                a = (up + 1) * gate * sigmoid(1.702 gate)
  attn_bias:    q, k, v and o projections with biases (tessera's model.bias with RMSNorm and no
                dense MLP: qkvb and attprojb)
"""
import math
import types
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_llama

# tessera names of the MoE tensors, in tessera's order (src/model/model.h), after the dense MLP's
MOE_NAMES = ("routerw", "routerb", "routercorr", "expw1", "expb1", "expw2", "expb2", "shw1", "shw2",
             "shgatew")
GPTOSS_ALPHA = 1.702  # GptOssExperts.alpha (fixed in transformers)


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
    router_bias: bool = False   # gpt-oss (above)
    expert_bias: bool = False
    gptoss: bool = False
    limit: float = 7.0          # gptoss's clamp (swiglu_limit)
    topk_softmax: bool = False  # GptOssTopKRouter's softmax over the K chosen logits
    attn_bias: bool = False     # o_proj's bias (q, k, v: qkv_bias)
    shared_gate: bool = False   # the shared expert times sigmoid(x . shgatew) (Qwen3-Next)
    # DeepSeek's router (docs/moe.md "DeepSeek's router"; route_ds below)
    sigmoid: bool = False       # scores sigmoid(logits), else softmax
    method: str = "greedy"      # greedy, group_limited_greedy or noaux_tc
    n_group: int = 1
    topk_group: int = 1
    scale: float = 1.0          # routed_scaling_factor
    bias_rate: float = 0.0      # noaux_tc: the correction bias's step after each optimizer step
    dense_layers: int = 0       # the first this many layers dense (first_k_dense_replace)


def is_moe_layer(cfg, l):
    return l >= getattr(cfg, "dense_layers", 0) and (l + 1) % cfg.moe_every == 0


def param_names(cfg):
    """tessera parameter names present in a model of this config, in tessera's order."""
    dense = any(not is_moe_layer(cfg, l) for l in range(cfg.L))
    names = [n for n in torch_llama.param_names(cfg)
             if dense or n not in ("fcw", "fcprojw")]
    if getattr(cfg, "attn_bias", False):
        names.insert(names.index("attprojw") + 1, "attprojb")
    absent = set() if cfg.S > 0 else {"shw1", "shw2"}
    absent |= set() if cfg.S > 0 and getattr(cfg, "shared_gate", False) else {"shgatew"}
    absent |= set() if getattr(cfg, "router_bias", False) else {"routerb"}
    absent |= set() if getattr(cfg, "method", "greedy") == "noaux_tc" else {"routercorr"}
    absent |= set() if getattr(cfg, "expert_bias", False) else {"expb1", "expb2"}
    moe = [n for n in MOE_NAMES if n not in absent]
    at = names.index("lnfw")
    return names[:at] + moe + names[at:]


def swiglu(x, w1, w2):
    """down(silu(gate(x)) * up(x)) with w1 = [gate rows | up rows] (2F, C) and w2 (C, F)."""
    gate, up = w1.chunk(2)
    return F.linear(F.silu(F.linear(x, gate)) * F.linear(x, up), w2)


def expert(x, w1, b1, w2, b2, gptoss, limit):
    """One routed expert on x (n, C): SwiGLU, or with gptoss GptOssExperts' unit; b1, b2 None
    without biases."""
    gate, up = F.linear(x, w1, b1).chunk(2, dim=-1)
    if gptoss:
        gate = gate.clamp(min=None, max=limit)
        up = up.clamp(min=-limit, max=limit)
        act = (up + 1) * (gate * torch.sigmoid(gate * GPTOSS_ALPHA))
    else:
        act = F.silu(gate) * up
    return F.linear(act, w2, b2)


def route_topk_softmax(logits, K):
    """GptOssTopKRouter: (idx, wts) = torch.topk of the logits, softmax over the K values."""
    top, idx = torch.topk(logits, K, dim=-1)
    return idx, F.softmax(top, dim=-1)


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


def route_ds(logits, K, c, bias):
    """DeepSeek's router (docs/moe.md "DeepSeek's router", from DeepSeek-V3's and V2's
    definitions): -> scores (N,E), idx (N,K), wts (N,K), margin (N,).
      s      = sigmoid(logits) or softmax(logits)
      choice = s + bias (noaux_tc) or s, no gradient
      groups (method != greedy): E/G experts each, a group's score its best choice (V2's
             group_limited_greedy) or the sum of its two best (noaux_tc); the topk_group best
             groups (ties to the lower group) stay, the others' experts are out (-inf)
      idx    = the K best choices left, descending, ties to the lower expert
      wts    = s[idx] (the unbiased scores), / (their sum (+ 1e-20 with sigmoid)) when norm_topk,
               then times scale
    margin: the smallest gap at a choice (K-th vs (K+1)-th expert, topk_group-th vs next group)"""
    s = torch.sigmoid(logits) if c.sigmoid else F.softmax(logits, dim=-1)
    choice = s.detach() + (bias if c.method == "noaux_tc" else 0.0)
    N, E = s.shape
    margin = torch.full((N,), math.inf, dtype=s.dtype)
    if c.method != "greedy" and c.n_group > 1:
        per = E // c.n_group
        g = choice.view(N, c.n_group, per)
        gs = g.topk(2, dim=-1).values.sum(-1) if c.method == "noaux_tc" else g.max(-1).values
        granked, gorder = torch.sort(gs, dim=-1, descending=True, stable=True)
        keep = torch.zeros(N, c.n_group, dtype=torch.bool)
        keep.scatter_(1, gorder[:, :c.topk_group], True)
        choice = choice.masked_fill(~keep.repeat_interleave(per, dim=1), -math.inf)
        if c.topk_group < c.n_group:
            margin = granked[:, c.topk_group - 1] - granked[:, c.topk_group]
    ranked, order = torch.sort(choice, dim=-1, descending=True, stable=True)
    idx = order[:, :K]
    wts = s.gather(1, idx)
    if c.norm_topk:
        wts = wts / (wts.sum(dim=-1, keepdim=True) + (1e-20 if c.sigmoid else 0.0))
    wts = wts * c.scale
    if K < E:
        margin = torch.minimum(margin, ranked[:, K - 1] - ranked[:, K])
    return s, idx, wts, margin


def router_losses(logits, probs, idx):
    """(aux, z, counts): Switch's load-balancing loss with Megatron's normalisation and ST-MoE's
    z-loss over the rows; the counts per expert enter aux as constants."""
    N, E = probs.shape
    K = idx.shape[1]
    counts = torch.bincount(idx.reshape(-1), minlength=E).to(probs.dtype)
    aux = E * torch.sum(counts / (N * K) * probs.mean(dim=0))
    z = torch.logsumexp(logits, dim=-1).pow(2).mean()
    return aux, z, counts


def moe_forward(x, router, w1, w2, shw1, shw2, K, norm_topk, routerb=None, b1=None, b2=None,
                gptoss=False, limit=7.0, topk_softmax=False, shgatew=None, ds=None, corr=None):
    """One MoE MLP on x (N,C). shw1/shw2 None without a shared expert, shgatew (1,C) None without
    its gate; routerb (E,), b1 (E,2FE),
    b2 (E,C) None without biases; gptoss, limit, topk_softmax as in MoEConfig. Returns
    (out, aux, z, info) with info.idx, info.wts, info.margin, info.counts."""
    logits = F.linear(x, router, routerb)
    if ds is not None:  # DeepSeek's router (the aux loss over the scores normalised per row)
        probs, idx, wts, margin = route_ds(logits, K, ds, corr)
        q = probs / probs.sum(dim=-1, keepdim=True) if ds.sigmoid else probs
        aux, z, counts = router_losses(logits, q, idx)
    else:
        probs, idx, wts, margin = route(logits, K, norm_topk)
    if topk_softmax:
        idx2, wts = route_topk_softmax(logits, K)
        if not torch.equal(idx2, idx):  # torch.topk's order on a tie (margin 0) is unspecified
            margin = torch.zeros_like(margin)
        idx = idx2
    if ds is None:
        aux, z, counts = router_losses(logits, probs, idx)
    out = swiglu(x, shw1, shw2) if shw1 is not None else torch.zeros_like(x)
    if shgatew is not None:
        out = torch.sigmoid(F.linear(x, shgatew)) * out
    for e in range(router.shape[0]):
        n, j = torch.nonzero(idx == e, as_tuple=True)
        if len(n):
            y = expert(x[n], w1[e], None if b1 is None else b1[e], w2[e],
                       None if b2 is None else b2[e], gptoss, limit)
            out = out.index_add(0, n, wts[n, j, None] * y)
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
        self.shgatew = nn.Parameter(torch.empty(1, c.C)) if c.S and c.shared_gate else None
        self.routerb = nn.Parameter(torch.zeros(c.E)) if c.router_bias else None
        self.b1 = nn.Parameter(torch.zeros(c.E, 2 * c.FE)) if c.expert_bias else None
        self.b2 = nn.Parameter(torch.zeros(c.E, c.C)) if c.expert_bias else None
        ds = c.sigmoid or c.method != "greedy" or c.scale != 1.0
        self.ds = c if ds else None
        self.corr = nn.Parameter(torch.zeros(c.E), requires_grad=False) \
            if c.method == "noaux_tc" else None
        self.min_margin = math.inf

    def forward(self, x):
        B, T, C = x.shape
        c = self.cfg
        out, self.aux, self.z, info = moe_forward(
            x.reshape(B * T, C), self.router, self.w1, self.w2, self.shw1, self.shw2, c.K,
            c.norm_topk, self.routerb, self.b1, self.b2, c.gptoss, c.limit, c.topk_softmax,
            self.shgatew, self.ds, self.corr)
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
            if cfg.attn_bias:  # GptOssAttention's o_proj (bias=True)
                ly.self_attn.o_proj = nn.Linear(cfg.NH * cfg.hs, cfg.C, bias=True)

    def moe_layers(self):
        return [ly.mlp for ly in self.layers if isinstance(ly.mlp, MoE)]

    def router_loss(self):
        c = self.cfg
        return sum(c.aux_coef * m.aux + c.z_coef * m.z for m in self.moe_layers())

    @torch.no_grad()
    def balance(self, moe):
        """auxiliary-loss-free balancing after an optimizer step: each layer's correction bias
        += bias_rate sign(mean load - load), moe the step's [aux, z, load (E)] per MoE layer"""
        if self.cfg.method != "noaux_tc":
            return
        for m, row in zip(self.moe_layers(), moe):
            load = torch.as_tensor(row[2:], dtype=torch.float64)
            m.corr += self.cfg.bias_rate * torch.sign(load.mean() - load)

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
            "attprojb": [[ly.self_attn.o_proj.bias] for ly in self.layers],
            "routerw": [[m.router] for m in moe],
            "routerb": [[m.routerb] for m in moe],
            "routercorr": [[m.corr] for m in moe],
            "expw1": [[m.w1] for m in moe],
            "expb1": [[m.b1] for m in moe],
            "expw2": [[m.w2] for m in moe],
            "expb2": [[m.b2] for m in moe],
            "shw1": [[m.shw1] for m in moe],
            "shw2": [[m.shw2] for m in moe],
            "shgatew": [[m.shgatew] for m in moe],
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
