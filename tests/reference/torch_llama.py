"""torch_llama.py — Llama-3 and Qwen-2.5/3-style decoders in PyTorch, for the reference test.
Written from the published definitions (Hugging Face transformers' modeling_llama.py and
modeling_qwen3.py: LlamaRMSNorm, rotate_half / apply_rotary_pos_emb, repeat_kv, LlamaMLP,
Qwen3Attention's q_norm / k_norm, the "llama3" rope_type of modeling_rope_utils), not from
tessera's C code. Run in float64 by the test.

Dimensions as in kernels/ops.h: C d_model, NH query heads, KVH key/value heads (NH a multiple),
hs head size (need not be C/NH), F intermediate size, V real vocabulary, Vp padded (>= V).

  x = embed[idx]
  per layer: h = input_layernorm(x)
             q = q_proj(h), k = k_proj(h), v = v_proj(h)       (biases only with qkv_bias)
             q, k = q_norm(q), k_norm(k) per head                (qk_norm, Qwen 3; before RoPE)
             q, k = RoPE(q, k) at each token's position          (rotate_half pairing)
             x = x + o_proj(softmax(q k^T / sqrt(hs) + mask) v)  (k, v repeated NH/KVH times)
             x = x + down_proj(silu(gate_proj(h2)) * up_proj(h2)),  h2 = post_attention_layernorm(x)
  logits = norm(x) @ W^T over all Vp rows, W = lm_head (untied) or embed (tied)
  loss   = cross-entropy over the first V logits only, targets -1 ignored

The projections are separate modules, as in transformers; tessera fuses them: qkvw rows are
[q_proj | k_proj | v_proj], fcw rows [gate_proj | up_proj] (tessera_views says so, and
load_tessera of torch_gpt.TesseraLayout splits the rows accordingly).

With eot (model.attn_mask = "document"), a document ends with (and includes) an eot token: a
token attends to the earlier tokens of its own document only, and its RoPE position counts from
the document's first token.

Attention variants (docs/models.md), from transformers' masking_utils.sliding_window_overlay and
modeling_gpt_oss.eager_attention_forward:
  windows[l] = W > 0: layer l is sliding_attention, query i sees keys j with i - W < j <= i (on
               top of the causal and document masks); 0: full_attention;
  sinks:       a learned logit per head (self_attn.sinks, (NH,)) appended as one more column to
               every row's scores before the softmax, whose probability is then dropped;
  qpas:        Gemma's query_pre_attn_scalar, the scores scaled by qpas^-0.5 instead of hs^-0.5.

Positions and soft-capping (docs/models.md "Positions"), from transformers' modeling_rope_utils
(_compute_linear_scaling_rope_parameters, _compute_yarn_parameters), modeling_gemma2 /
modeling_gemma3 (attn_logit_softcapping, final_logit_softcapping, rope_local_base_freq),
modeling_qwen3_next's apply_rotary_pos_emb (partial rotary) and modeling_smollm3 (no_rope_layers):
  rope_scaling  LinearScaling (every frequency / factor) or YarnScaling (the ramp between the
                frequency and frequency / factor, cos and sin times 0.1 ln(factor) + 1);
  rope_local_theta  > 0: the sliding layers (windows[l] > 0) use this base, unscaled;
  partial:      RoPE over the first partial * hs dimensions of a head (rotate_half within them,
                frequencies over that size), the rest passed through;
  ropes:        per layer 1 (RoPE) or 0 (no positions); () = every layer;
  attn_softcap: scores = cap tanh(scores / cap) after the scale, before the mask;
  final_softcap: logits = cap tanh(logits / cap) before the loss.
"""
import dataclasses
import math
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from torch_gpt import TesseraLayout, summed_loss


@dataclass
class RopeScaling:
    """Llama 3.1's rope_scaling (rope_type "llama3")."""
    factor: float
    low_freq_factor: float
    high_freq_factor: float
    original_max_pos: int


@dataclass
class LinearScaling:
    """rope_type "linear": every frequency divided by factor (Gemma 3's full layers)."""
    factor: float


@dataclass
class YarnScaling:
    """rope_type "yarn" (gpt-oss): factor, beta_fast, beta_slow, original_max_position_embeddings,
    truncate."""
    factor: float
    beta_fast: float
    beta_slow: float
    original_max_pos: int
    truncate: bool


@dataclass
class LlamaConfig:
    V: int
    Vp: int
    C: int
    L: int
    NH: int
    KVH: int
    hs: int
    F: int
    norm_eps: float
    rope_theta: float
    rope_scaling: Optional[RopeScaling]
    qkv_bias: bool      # Qwen 2/2.5
    qk_norm: bool       # Qwen 3
    tie_embeddings: bool
    _: dataclasses.KW_ONLY  # the variants below: keyword-only, so subclasses add positional fields
    windows: tuple = ()  # per layer: the sliding window W, or 0 (full); () = every layer full
    sinks: bool = False  # gpt-oss's attention sinks
    qpas: float = 0.0    # Gemma's query_pre_attn_scalar: scores times qpas^-0.5; 0 = hs
    sandwich: bool = False  # Gemma 2/3's norm placement: a norm after the attention and the MLP
    post: bool = False   # OLMo 2's: a norm after the attention and the MLP, none before them
    qk_proj: bool = False  # OLMo 2's QK-norm: over the whole q and k projections, not per head
    embed_scale: bool = False  # Gemma's: the token embedding times sqrt(C)
    geglu: bool = False  # Gemma's MLP: gelu_pytorch_tanh(gate) * up in SwiGLU's place
    rope_local_theta: float = 0.0  # Gemma 3's rope_local_base_freq of the sliding layers; 0 = none
    partial: float = 1.0  # partial_rotary_factor
    ropes: tuple = ()    # SmolLM3's no_rope_layers: per layer 1 (RoPE) or 0; () = all RoPE
    attn_softcap: float = 0.0  # Gemma 2's attn_logit_softcapping; 0 = off
    final_softcap: float = 0.0  # Gemma 2's final_logit_softcapping; 0 = off


def param_names(cfg):
    """tessera parameter names present in a model of this config, in tessera's order."""
    post = getattr(cfg, "post", False)
    names = ["wte"] + ([] if post else ["ln1w"]) + ["qkvw"]
    names += ["qkvb"] if cfg.qkv_bias else []
    names += ["qnormw", "knormw"] if cfg.qk_norm else []
    names += ["sinks"] if getattr(cfg, "sinks", False) else []
    names += ["attprojw"]
    names += ["postattnw", "postmlpw"] if getattr(cfg, "sandwich", False) or post else []
    names += ([] if post else ["ln2w"]) + ["fcw", "fcprojw", "lnfw"]
    return names + ([] if cfg.tie_embeddings else ["lm_head"])


def yarn_inv_freq(dim, theta, y):
    """transformers' _compute_yarn_parameters in float64: (inv_freq (dim/2), attention_factor)."""
    def correction_dim(rotations):
        return (dim * math.log(y.original_max_pos / (rotations * 2 * math.pi))) \
            / (2 * math.log(theta))
    low, high = correction_dim(y.beta_fast), correction_dim(y.beta_slow)
    if y.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    pos_freqs = theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    extrapolation, interpolation = 1.0 / pos_freqs, 1.0 / (y.factor * pos_freqs)
    ramp = ((torch.arange(dim // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
    keep = 1 - ramp  # inv_freq_extrapolation_factor
    inv_freq = interpolation * (1 - keep) + extrapolation * keep
    return inv_freq, (0.1 * math.log(y.factor) + 1.0 if y.factor > 1 else 1.0)


def rope_params(hs, theta, scaling=None, partial=1.0):
    """(inv_freq (rot/2), attention factor) of a layer: rot = partial * hs rotary dimensions."""
    rot = int(round(hs * partial))
    if isinstance(scaling, YarnScaling):
        return yarn_inv_freq(rot, theta, scaling)
    if isinstance(scaling, LinearScaling):
        return rope_inv_freq(rot, theta) / scaling.factor, 1.0
    return rope_inv_freq(rot, theta, scaling), 1.0


def rope_inv_freq(hs, theta, scaling=None):
    """inv_freq[i] = theta^(-2i/hs), i < hs/2 (float64); with Llama 3.1's scaling, by wavelength
    2 pi / f: above original_max_pos / low_freq_factor divided by factor, below
    original_max_pos / high_freq_factor kept, in between (1 - s) f / factor + s f with
    s = (original_max_pos / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, hs, 2, dtype=torch.float64) / hs))
    if scaling is None:
        return inv_freq
    low_wavelen = scaling.original_max_pos / scaling.low_freq_factor
    high_wavelen = scaling.original_max_pos / scaling.high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_wavelen, inv_freq / scaling.factor, inv_freq)
    smooth = ((scaling.original_max_pos / wavelen - scaling.low_freq_factor)
              / (scaling.high_freq_factor - scaling.low_freq_factor))
    smoothed = (1 - smooth) * scaled / scaling.factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, scaled)


def rotate_half(x):
    x1, x2 = x[..., :x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rope_cos_sin(pos, inv_freq):
    """pos (B,T) -> cos, sin (B,1,T,hs) for heads laid out (B,H,T,hs)."""
    freqs = pos[..., None].to(inv_freq.dtype) * inv_freq          # (B,T,hs/2)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos()[:, None], emb.sin()[:, None]


def apply_rope(x, cos, sin):
    """Qwen3-Next's apply_rotary_pos_emb: RoPE on the first cos.shape[-1] dimensions, the rest
    passed through (all of them without partial rotary); None: no positions (a NoPE layer)."""
    if cos is None:
        return x
    rot = cos.shape[-1]
    xr, xp = x[..., :rot], x[..., rot:]
    return torch.cat((xr * cos + rotate_half(xr) * sin, xp), dim=-1)


def repeat_kv(x, n_rep):
    """(B,KVH,T,hs) -> (B,KVH*n_rep,T,hs): query head h reads key/value head h // n_rep."""
    B, KVH, T, hs = x.shape
    if n_rep == 1:
        return x
    return x[:, :, None].expand(B, KVH, n_rep, T, hs).reshape(B, KVH * n_rep, T, hs)


class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        var = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(var + self.eps))


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = c = cfg
        self.q_proj = nn.Linear(c.C, c.NH * c.hs, bias=c.qkv_bias)
        self.k_proj = nn.Linear(c.C, c.KVH * c.hs, bias=c.qkv_bias)
        self.v_proj = nn.Linear(c.C, c.KVH * c.hs, bias=c.qkv_bias)
        self.o_proj = nn.Linear(c.NH * c.hs, c.C, bias=False)
        self.qk_proj = c.qk_norm and c.qk_proj  # OLMo 2: over (NH hs) and (KVH hs)
        if c.qk_norm:
            self.q_norm = RMSNorm(c.NH * c.hs if self.qk_proj else c.hs, c.norm_eps)
            self.k_norm = RMSNorm(c.KVH * c.hs if self.qk_proj else c.hs, c.norm_eps)
        if c.sinks:
            self.sinks = nn.Parameter(torch.zeros(c.NH))

    def heads(self, x, cos, sin):
        """q (B,NH,T,hs), k and v (B,KVH,T,hs): the projections, QK-norm, RoPE (the attention's
        inputs before the key/value heads are repeated; bench/gpu/torch_peer.py's SDPA too)."""
        B, T, _ = x.shape
        c = self.cfg
        q, k = self.q_proj(x), self.k_proj(x)
        if self.qk_proj:  # Olmo2Attention: q_norm(q_proj(x)), k_norm(k_proj(x)), then the heads
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = q.view(B, T, c.NH, c.hs), k.view(B, T, c.KVH, c.hs)
        v = self.v_proj(x).view(B, T, c.KVH, c.hs).transpose(1, 2)
        if c.qk_norm and not self.qk_proj:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = q.transpose(1, 2), k.transpose(1, 2)                   # (B,H,T,hs)
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v

    def forward(self, x, cos, sin, allowed):
        """allowed (B,T,T) bool: query i may see key j."""
        B, T, _ = x.shape
        c = self.cfg
        q, k, v = self.heads(x, cos, sin)
        k, v = repeat_kv(k, c.NH // c.KVH), repeat_kv(v, c.NH // c.KVH)
        s = (q @ k.transpose(-2, -1)) * (c.qpas or c.hs) ** -0.5     # (B,NH,T,T)
        if c.attn_softcap:  # Gemma 2: after the scale, before the mask
            s = c.attn_softcap * torch.tanh(s / c.attn_softcap)
        s = s.masked_fill(~allowed[:, None], float("-inf"))
        if c.sinks:  # gpt-oss: one more column per row, the head's sink, dropped after softmax
            sink = self.sinks.reshape(1, -1, 1, 1).expand(B, c.NH, T, 1)
            p = F.softmax(torch.cat([s, sink], dim=-1), dim=-1)[..., :-1]
        else:
            p = F.softmax(s, dim=-1)
        y = p @ v                                                     # (B,NH,T,hs)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, c.NH * c.hs))


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.C, cfg.F, bias=False)
        self.up_proj = nn.Linear(cfg.C, cfg.F, bias=False)
        self.down_proj = nn.Linear(cfg.F, cfg.C, bias=False)
        self.geglu = getattr(cfg, "geglu", False)

    def forward(self, x):
        g = self.gate_proj(x)
        act = F.gelu(g, approximate="tanh") if self.geglu else F.silu(g)  # GemmaMLP / LlamaMLP
        return self.down_proj(act * self.up_proj(x))


class Layer(nn.Module):
    """Pre-norm (Llama: post_attention_layernorm is the MLP's input norm), or with cfg.sandwich
    Gemma 2/3's Gemma2DecoderLayer: input_layernorm -> attention -> post_attention_layernorm,
    residual; pre_feedforward_layernorm -> MLP -> post_feedforward_layernorm, residual (plain
    RMSNorm weights here; Gemma's (1 + w) scaling is another variant), or with cfg.post OLMo 2's
    Olmo2DecoderLayer: attention -> post_attention_layernorm, residual; MLP ->
    post_feedforward_layernorm, residual (no norm before either)."""
    def __init__(self, cfg):
        super().__init__()
        self.post = getattr(cfg, "post", False)
        if not self.post:
            self.input_layernorm = RMSNorm(cfg.C, cfg.norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.C, cfg.norm_eps)
        self.mlp = MLP(cfg)
        self.sandwich = getattr(cfg, "sandwich", False)
        if self.sandwich:
            self.pre_feedforward_layernorm = RMSNorm(cfg.C, cfg.norm_eps)
        if self.sandwich or self.post:
            self.post_feedforward_layernorm = RMSNorm(cfg.C, cfg.norm_eps)

    def forward(self, x, cos, sin, allowed):
        if self.post:
            x = x + self.post_attention_layernorm(self.self_attn(x, cos, sin, allowed))
            return x + self.post_feedforward_layernorm(self.mlp(x))
        if self.sandwich:
            h = self.self_attn(self.input_layernorm(x), cos, sin, allowed)
            x = x + self.post_attention_layernorm(h)
            h = self.mlp(self.pre_feedforward_layernorm(x))
            return x + self.post_feedforward_layernorm(h)
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, allowed)
        return x + self.mlp(self.post_attention_layernorm(x))


def positions_and_mask(idx, eot):
    """(pos (B,T), allowed (B,T,T)): causal with positions 0..T-1, or with an eot id the
    block-diagonal document mask and positions counted from each document's first token."""
    B, T = idx.shape
    causal = torch.ones(T, T, dtype=torch.bool, device=idx.device).tril()
    if eot is None:
        pos = torch.arange(T, device=idx.device).expand(B, T)
        return pos, causal.expand(B, T, T)
    is_eot = (idx == eot).long()
    doc = torch.cumsum(is_eot, dim=1) - is_eot          # eot tokens strictly before t
    allowed = (doc[:, :, None] == doc[:, None, :]) & causal
    return allowed.sum(dim=-1) - 1, allowed


class Llama(TesseraLayout, nn.Module):
    def __init__(self, cfg, eot=None):
        super().__init__()
        self.cfg = cfg
        self.eot = eot
        self.embed_tokens = nn.Embedding(cfg.Vp, cfg.C)
        self.layers = nn.ModuleList(Layer(cfg) for _ in range(cfg.L))
        self.norm = RMSNorm(cfg.C, cfg.norm_eps)
        self.lm_head = None if cfg.tie_embeddings else nn.Linear(cfg.C, cfg.Vp, bias=False)
        inv_freq, self.attention_factor = rope_params(cfg.hs, cfg.rope_theta, cfg.rope_scaling,
                                                      cfg.partial)
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.local_inv_freq = (rope_params(cfg.hs, cfg.rope_local_theta, None, cfg.partial)[0]
                               if cfg.rope_local_theta else None)

    def layer_rope(self, l, pos):
        """Layer l's (cos, sin), or (None, None) on a NoPE layer: the sliding layers' base when
        rope_local_theta is set, else the full layers' (cos and sin times YaRN's factor)."""
        if self.cfg.ropes and not self.cfg.ropes[l]:
            return None, None
        dt = torch.get_default_dtype()
        if self.local_inv_freq is not None and self.cfg.windows and self.cfg.windows[l]:
            return rope_cos_sin(pos, self.local_inv_freq.to(dt))
        cos, sin = rope_cos_sin(pos, self.inv_freq.to(dt))
        return cos * self.attention_factor, sin * self.attention_factor

    def forward(self, idx, targets=None):
        """idx, targets (B,T) int64. Returns logits (B,T,Vp) and, with targets, the SUM of the
        cross-entropy over the targets that are not -1 (the caller divides by the global count)."""
        pos, allowed = positions_and_mask(idx, self.eot)
        x = self.embed_tokens(idx)
        if getattr(self.cfg, "embed_scale", False):  # Gemma: in the model's dtype (float64 here)
            x = x * math.sqrt(self.cfg.C)
        T = idx.shape[1]
        i = torch.arange(T, device=idx.device)
        for l, layer in enumerate(self.layers):
            W = self.cfg.windows[l] if self.cfg.windows else 0
            band = (i[:, None] - i[None, :] < W) if W > 0 else None  # i - W < j
            cos, sin = self.layer_rope(l, pos)
            x = layer(x, cos, sin, allowed if band is None else allowed & band)
        return self.head(x, targets)

    def head(self, x, targets=None):
        """The final norm, the logits (B,T,Vp) and, with targets, the summed loss (as forward)."""
        head = self.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        logits = F.linear(self.norm(x), head)
        if self.cfg.final_softcap:  # Gemma 2's final_logit_softcapping
            logits = self.cfg.final_softcap * torch.tanh(logits / self.cfg.final_softcap)
        return logits, summed_loss(logits, targets, self.cfg.V)

    def tessera_views(self):
        """tessera name -> per layer (or once) the tensors whose rows make tessera's slice."""
        per_layer = {  # layer -> its tensors of that name
            "ln1w": lambda ly: [ly.input_layernorm.weight],
            "qkvw": lambda ly: [ly.self_attn.q_proj.weight, ly.self_attn.k_proj.weight,
                                ly.self_attn.v_proj.weight],
            "qkvb": lambda ly: [ly.self_attn.q_proj.bias, ly.self_attn.k_proj.bias,
                                ly.self_attn.v_proj.bias],
            "qnormw": lambda ly: [ly.self_attn.q_norm.weight],
            "knormw": lambda ly: [ly.self_attn.k_norm.weight],
            "sinks": lambda ly: [ly.self_attn.sinks],
            "attprojw": lambda ly: [ly.self_attn.o_proj.weight],
            "postattnw": lambda ly: [ly.post_attention_layernorm.weight],
            "postmlpw": lambda ly: [ly.post_feedforward_layernorm.weight],
            "ln2w": lambda ly: [(ly.pre_feedforward_layernorm if getattr(ly, "sandwich", False)
                                 else ly.post_attention_layernorm).weight],
            "fcw": lambda ly: [ly.mlp.gate_proj.weight, ly.mlp.up_proj.weight],
            "fcprojw": lambda ly: [ly.mlp.down_proj.weight],
        }
        once = {
            "wte": lambda: [self.embed_tokens.weight],
            "lnfw": lambda: [self.norm.weight],
            "lm_head": lambda: [self.lm_head.weight],
        }
        return {n: [per_layer[n](ly) for ly in self.layers] if n in per_layer else [once[n]()]
                for n in param_names(self.cfg)}
