"""torch_mla.py — DeepSeek-V2/V3's multi-head latent attention in float64 PyTorch, the reference of
tessera's model.kv_lora_rank > 0 (src/model/mixer_mla.c, docs/models.md "DeepSeek"). Written from
the equations of the DeepSeek-V2 paper (arXiv 2405.04434, section 2.1) and the layer as Hugging
Face transformers' DeepseekV3Attention lays out its tensors (q_a_proj, q_a_layernorm, q_b_proj or
q_proj, kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj; rope_interleave; the softmax scale
with YaRN's mscale_all_dim), not from tessera's C code. The rest of the decoder (RMSNorm, the
SwiGLU MLP, the head, the document mask) is torch_llama.py's.

For the N = B T rows x of a layer (NH heads, dqk = dn + dr):
  q      = x Wq^T, or q_b(RMSNorm_1e-6(q_a(x))) with q_lora_rank (N, NH, [nope dn | rope dr])
  c, kpe = kv_a(x) split [kvr | dr]: the latent and the one RoPE key of every head
  k_nope, v = kv_b(RMSNorm_1e-6(c)) (N, NH, [dn | dv])
  q_rope, kpe = RoPE(q_rope), RoPE(kpe) over dr dimensions: pairs (i, i + dr/2), or with
           interleave (2i, 2i + 1) (transformers' apply_rotary_pos_emb_interleave: de-interleave,
           then rotate_half), cos and sin times YaRN's attention factor
  key_h  = [k_nope_h | kpe], query_h = [q_nope_h | q_rope_h]
  out    = o_proj(softmax(query key^T scale + mask) v), scale = dqk^-0.5, times
           (0.1 mscale_all_dim ln(factor) + 1)^2 under YaRN with mscale_all_dim
YaRN's attention factor on cos and sin: (0.1 mscale ln f + 1) / (0.1 mscale_all_dim ln f + 1)
when both are given, else 0.1 ln f + 1 (transformers' _compute_yarn_parameters).

tessera's layout: the MLA tensors stacked over the layers, mlaqaw .. mlaow in model.h's order,
after the dense MLP's and before lnfw.
"""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_gpt
import torch_llama

MLA_EPS = 1e-6  # DeepseekV3RMSNorm's default, what q_a_layernorm and kv_a_layernorm keep
MLA_PARAMS = {"mlaqaw": ("weight", True), "mlaqanormw": ("norm", True), "mlaqw": ("weight", True),
              "mlakvaw": ("weight", True), "mlakvanormw": ("norm", True),
              "mlakvbw": ("weight", True), "mlaow": ("weight", True)}
torch_gpt.PARAMS.update(MLA_PARAMS)


@dataclass
class MLAConfig(torch_llama.LlamaConfig):
    """LlamaConfig with hs = dr (its RoPE tables are over the rope part) and the MLA sizes."""
    qr: int = 0            # q_lora_rank (0: q_proj)
    kvr: int = 16          # kv_lora_rank
    dn: int = 8            # qk_nope_head_dim
    dr: int = 4            # qk_rope_head_dim
    dv: int = 6            # v_head_dim
    interleave: bool = False
    mscale: float = 0.0    # YaRN's mscale, mscale_all_dim (0: not given)
    mscale_all_dim: float = 0.0


def param_names(cfg):
    """tessera's names present, in tessera's order: the frame's, the dense MLP's, the MLA's."""
    names = [n for n in torch_llama.param_names(cfg) if n not in ("qkvw", "attprojw")]
    mla = [n for n in MLA_PARAMS if cfg.qr or n not in ("mlaqaw", "mlaqanormw")]
    at = names.index("lnfw")
    return names[:at] + mla + names[at:]


def yarn_m(factor, s):
    return 0.1 * s * math.log(factor) + 1.0 if factor > 1 else 1.0


def attention_factor(cfg):
    """cos and sin's factor: YaRN's, with DeepSeek's mscale / mscale_all_dim when both given"""
    y = cfg.rope_scaling
    if not isinstance(y, torch_llama.YarnScaling):
        return 1.0
    if cfg.mscale and cfg.mscale_all_dim:
        return yarn_m(y.factor, cfg.mscale) / yarn_m(y.factor, cfg.mscale_all_dim)
    return yarn_m(y.factor, 1.0)


def softmax_scale(cfg):
    s = (cfg.dn + cfg.dr) ** -0.5
    y = cfg.rope_scaling
    if isinstance(y, torch_llama.YarnScaling) and cfg.mscale_all_dim:
        s *= yarn_m(y.factor, cfg.mscale_all_dim) ** 2
    return s


def rope(x, cos, sin, interleave):
    """x (..., dr) turned: rotate_half's pairs, or after de-interleaving (transformers'
    apply_rotary_pos_emb_interleave: the result in the de-interleaved order, as there)"""
    if interleave:
        *lead, d = x.shape
        x = x.view(*lead, d // 2, 2).transpose(-1, -2).reshape(*lead, d)
    return x * cos + torch_llama.rotate_half(x) * sin


class MLA(nn.Module):
    """DeepseekV3Attention's tensors and forward (above); forward(x, cos, sin, allowed) as
    torch_llama.Attention's"""

    def __init__(self, c):
        super().__init__()
        self.cfg = c
        dqk = c.dn + c.dr
        if c.qr:
            self.q_a_proj = nn.Linear(c.C, c.qr, bias=False)
            self.q_a_layernorm = torch_llama.RMSNorm(c.qr, MLA_EPS)
            self.q_b_proj = nn.Linear(c.qr, c.NH * dqk, bias=False)
        else:
            self.q_proj = nn.Linear(c.C, c.NH * dqk, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(c.C, c.kvr + c.dr, bias=False)
        self.kv_a_layernorm = torch_llama.RMSNorm(c.kvr, MLA_EPS)
        self.kv_b_proj = nn.Linear(c.kvr, c.NH * (c.dn + c.dv), bias=False)
        self.o_proj = nn.Linear(c.NH * c.dv, c.C, bias=False)

    def queries(self, x):
        c = self.cfg
        if c.qr:
            return self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))
        return self.q_proj(x)

    def forward(self, x, cos, sin, allowed):
        B, T, _ = x.shape
        c = self.cfg
        q = self.queries(x).view(B, T, c.NH, c.dn + c.dr).transpose(1, 2)
        q_pass, q_rot = torch.split(q, [c.dn, c.dr], dim=-1)
        k_pass, k_rot = torch.split(self.kv_a_proj_with_mqa(x), [c.kvr, c.dr], dim=-1)
        kv = self.kv_b_proj(self.kv_a_layernorm(k_pass)).view(B, T, c.NH, c.dn + c.dv)
        k_pass, v = torch.split(kv.transpose(1, 2), [c.dn, c.dv], dim=-1)
        k_rot = k_rot.view(B, 1, T, c.dr)
        q_rot, k_rot = rope(q_rot, cos, sin, c.interleave), rope(k_rot, cos, sin, c.interleave)
        query = torch.cat((q_pass, q_rot), dim=-1)
        key = torch.cat((k_pass, k_rot.expand(B, c.NH, T, c.dr)), dim=-1)
        s = (query @ key.transpose(-2, -1)) * softmax_scale(c)
        p = F.softmax(s.masked_fill(~allowed[:, None], float("-inf")), dim=-1)
        return self.o_proj((p @ v).transpose(1, 2).reshape(B, T, c.NH * c.dv))


class DeepSeek(torch_llama.Llama):
    """torch_llama's decoder (RMSNorm, SwiGLU, the head, the document mask) with MLA in every
    layer's attention place; cfg.hs = cfg.dr, so its RoPE tables are the rope part's"""

    def __init__(self, cfg, eot=None):
        assert cfg.hs == cfg.dr, "MLAConfig.hs is the rope part's size"
        super().__init__(cfg, eot)
        self.attention_factor = attention_factor(cfg)
        for ly in self.layers:
            ly.self_attn = MLA(cfg)

    def tessera_views(self):
        """torch_llama's views of the frame and MLP, and the MLA tensors per layer"""
        a = lambda ly: ly.self_attn  # noqa: E731
        own = {"mlaqaw": lambda ly: [a(ly).q_a_proj.weight],
               "mlaqanormw": lambda ly: [a(ly).q_a_layernorm.weight],
               "mlaqw": lambda ly: [(a(ly).q_b_proj if self.cfg.qr else a(ly).q_proj).weight],
               "mlakvaw": lambda ly: [a(ly).kv_a_proj_with_mqa.weight],
               "mlakvanormw": lambda ly: [a(ly).kv_a_layernorm.weight],
               "mlakvbw": lambda ly: [a(ly).kv_b_proj.weight],
               "mlaow": lambda ly: [a(ly).o_proj.weight]}
        views = {}
        per_layer = {
            "ln1w": lambda ly: [ly.input_layernorm.weight],
            "ln2w": lambda ly: [ly.post_attention_layernorm.weight],
            "fcw": lambda ly: [ly.mlp.gate_proj.weight, ly.mlp.up_proj.weight],
            "fcprojw": lambda ly: [ly.mlp.down_proj.weight], **own}
        once = {"wte": [self.embed_tokens.weight], "lnfw": [self.norm.weight]}
        if self.lm_head is not None:
            once["lm_head"] = [self.lm_head.weight]
        for n in param_names(self.cfg):
            views[n] = [per_layer[n](ly) for ly in self.layers] if n in per_layer else [once[n]]
        return views
