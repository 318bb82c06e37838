"""torch_hybrid.py — a hybrid linear-attention decoder (Hugging Face Qwen3-Next's layer mix) in
float64 PyTorch, the reference of tessera's model.layer_types = ... "linear_attention" ...
(docs/deltanet.md "Wiring"). Built from the blocks of torch_llama.py (the Llama/Qwen block: RMSNorm,
RoPE, GQA, SwiGLU) and torch_deltanet.py (the Gated DeltaNet layer, HF's Qwen3NextGatedDeltaNet,
written from the paper and HF's code): a linear layer runs the Gated DeltaNet where a full layer
runs attention, the MLP half of the block unchanged. Under the document mask the DeltaNet runs each
document alone (its convolution and state restart at the document's first token), as attention's
block-diagonal mask does.

With gate (model.attn_output_gate), the full layers' attention is Qwen3-Next's gated one
(Qwen3NextAttention): q_proj yields per head [query | gate], the attention output times
sigmoid(gate) before o_proj; tessera keeps the gate's rows as its own tensor, attngatew (LA, NH hs,
C), here gate_proj.

tessera's layout: the attention tensors (qkvw, attprojw, ...) stacked over the full layers only,
the DeltaNet's (dnqkvw .. dnow) over the linear layers only, each in layer order.
"""
from dataclasses import dataclass

import torch
import torch.nn as nn

import torch_deltanet
import torch_gpt
import torch_llama

# tessera name -> (weight-decay kind, per layer), as torch_gpt.PARAMS lists the others
torch_gpt.PARAMS["attngatew"] = ("weight", True)
DN_PARAMS = {"dnqkvw": ("weight", True), "dnzw": ("weight", True), "dnbw": ("weight", True),
             "dnaw": ("weight", True), "dnconv": ("weight", True), "dndtbias": ("norm", True),
             "dnalog": ("norm", True), "dnnormw": ("norm", True), "dnow": ("weight", True)}
torch_gpt.PARAMS.update(DN_PARAMS)
# deltanet_layer.h's names of the same tensors
DN_FIELDS = dict(zip(DN_PARAMS, torch_deltanet.PARAMS))


@dataclass
class HybridConfig(torch_llama.LlamaConfig):
    linear: tuple = ()   # per layer: True for a linear_attention layer
    HKl: int = 1
    HVl: int = 1
    dkl: int = 8
    dvl: int = 8
    Kc: int = 4
    gate: bool = False   # Qwen3-Next's attn_output_gate on the full layers


def param_names(cfg):
    """tessera's names present, in tessera's order (attngatew, then the DeltaNet's, right before
    lnfw)."""
    names = torch_llama.param_names(cfg)
    if all(cfg.linear):  # no attention layer: no attention tensors
        names = [n for n in names if n not in ("qkvw", "qkvb", "qnormw", "knormw", "attprojw")]
    if any(cfg.linear) or cfg.gate:
        i = names.index("lnfw")
        names = names[:i] + (["attngatew"] if cfg.gate and not all(cfg.linear) else []) + \
            (list(DN_PARAMS) if any(cfg.linear) else []) + names[i:]
    return names


def documents_of(allowed):
    """(B, T) segment ids from the (B, T, T) mask: t starts a document when it sees only itself
    among the earlier positions"""
    B, T, _ = allowed.shape
    t = torch.arange(T)
    start = t - allowed.sum(-1) + 1            # the first position of t's document
    return torch.cumsum((start == t).long(), 1) - 1


class DeltaNet(nn.Module):
    """The Gated DeltaNet in Attention's place: forward(x, cos, sin, allowed) like it"""

    def __init__(self, c):
        super().__init__()
        CD, VD = 2 * c.HKl * c.dkl + c.HVl * c.dvl, c.HVl * c.dvl
        shapes = {"wqkv": (CD, c.C), "wz": (VD, c.C), "wb": (c.HVl, c.C), "wa": (c.HVl, c.C),
                  "conv": (CD, c.Kc), "dt_bias": (c.HVl,), "a_log": (c.HVl,), "normw": (c.dvl,),
                  "wo": (c.C, VD)}
        self.P = nn.ParameterDict({k: nn.Parameter(torch.zeros(s)) for k, s in shapes.items()})
        self.kw = dict(HK=c.HKl, HV=c.HVl, dk=c.dkl, dv=c.dvl, eps=c.norm_eps,
                       form=torch_deltanet.recurrent)

    def forward(self, x, cos, sin, allowed):
        out, _ = torch_deltanet.layer_packed(x, dict(self.P), documents_of(allowed), **self.kw)
        return out


class GatedAttention(torch_llama.Attention):
    """Qwen3NextAttention's gate: out = o_proj(attention * sigmoid(gate_proj(x))), per head"""

    def __init__(self, c):
        super().__init__(c)
        self.gate_proj = nn.Linear(c.C, c.NH * c.hs, bias=False)

    def forward(self, x, cos, sin, allowed):
        B, T, _ = x.shape
        c = self.cfg
        q, k, v = self.heads(x, cos, sin)
        k, v = torch_llama.repeat_kv(k, c.NH // c.KVH), torch_llama.repeat_kv(v, c.NH // c.KVH)
        s = (q @ k.transpose(-2, -1)) * c.hs ** -0.5
        p = torch.softmax(s.masked_fill(~allowed[:, None], float("-inf")), dim=-1)
        y = (p @ v).transpose(1, 2).reshape(B, T, c.NH * c.hs)
        return self.o_proj(y * torch.sigmoid(self.gate_proj(x)))


class Hybrid(torch_llama.Llama):
    def __init__(self, cfg, eot=None):
        super().__init__(cfg, eot)
        for layer, lin in zip(self.layers, cfg.linear):
            if lin:
                layer.self_attn = DeltaNet(cfg)
            elif cfg.gate:
                layer.self_attn = GatedAttention(cfg)

    def tessera_views(self):
        """tessera name -> per layer (or once) the tensors whose rows make tessera's slice, each
        per-layer tensor over the layers of its kind (Llama's pre-norm block; no biases, sinks or
        other norm placements in a hybrid here)"""
        lin = self.cfg.linear
        full = [ly for ly, k in zip(self.layers, lin) if not k]
        linear = [ly for ly, k in zip(self.layers, lin) if k]
        a = lambda ly: ly.self_attn  # noqa: E731
        per = {
            "ln1w": (self.layers, lambda ly: [ly.input_layernorm.weight]),
            "qkvw": (full, lambda ly: [a(ly).q_proj.weight, a(ly).k_proj.weight,
                                       a(ly).v_proj.weight]),
            "qnormw": (full, lambda ly: [a(ly).q_norm.weight]),
            "knormw": (full, lambda ly: [a(ly).k_norm.weight]),
            "attprojw": (full, lambda ly: [a(ly).o_proj.weight]),
            "attngatew": (full, lambda ly: [a(ly).gate_proj.weight]),
            "ln2w": (self.layers, lambda ly: [ly.post_attention_layernorm.weight]),
            "fcw": (self.layers, lambda ly: [ly.mlp.gate_proj.weight, ly.mlp.up_proj.weight]),
            "fcprojw": (self.layers, lambda ly: [ly.mlp.down_proj.weight]),
        }
        for n in DN_PARAMS:
            per[n] = (linear, lambda ly, n=n: [a(ly).P[DN_FIELDS[n]]])
        once = {"wte": [self.embed_tokens.weight], "lnfw": [self.norm.weight]}
        if self.lm_head is not None:
            once["lm_head"] = [self.lm_head.weight]
        return {n: [f(ly) for ly in layers] if n in per else [once[n]]
                for n in param_names(self.cfg) for layers, f in [per.get(n, (None, None))]}
