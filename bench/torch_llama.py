#!/usr/bin/python3
"""torch_llama.py — tessera's Llama-style model in PyTorch (CPU, float32), timed like tessera-train.

The peer of bench/cpu_vs_torch.sh's llama-* configs; the training loop, optimizer, schedule, timing
and output are bench/torch_gpt.py's (train()), only the model differs. The model is tessera's
`pos = "rope"`, `norm = "rmsnorm"`, `mlp = "swiglu"`, `bias = false` decoder (src/model/model.h,
docs/models.md) written the usual way for torch 1.13 (Hugging Face's LlamaModel in spirit):

  - RMSNorm x * rsqrt(mean(x^2) + eps) * w (torch 1.13 has no nn.RMSNorm);
  - one fused q/k/v Linear (C -> (NH + 2 KVH) hs, rows [q heads | k heads | v heads] as tessera's
    qkvw), no bias;
  - rotary embeddings with the rotate-half pairing, cos/sin cached for positions 0 .. T-1
    (inv_freq = theta^(-2i/hs));
  - grouped-query attention: the KVH key/value heads repeated to NH with expand + reshape
    (transformers' repeat_kv; query head h reads kv head h // (NH / KVH)), then causal attention
    written out as softmax(mask(q k^T / sqrt(hs))) v (1.13 has no scaled_dot_product_attention);
  - SwiGLU down(silu(gate(x)) * up(x)) with gate and up as one fused Linear (C -> 2F, the gate rows
    then the up rows, as tessera's fcw);
  - tied embeddings (the LM head is wte) or, with --untied, a separate lm_head Linear; the
    vocabulary padded to a multiple of --vocab-multiple, cross entropy over the real V.

Initialisation as tessera's model_init_weights: N(0, init_std) for the embedding and every matrix,
std / sqrt(2L) for the attention output and down projections, RMSNorm weights 1, padded vocabulary
rows 0.

Run with /usr/bin/python3 (Debian's python3-torch). Output: one JSON object per step on stdout,
then one summary object ("summary": true).
"""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_gpt  # noqa: E402  (the shared training loop; it imports torch only when training)


def parser(description):
    """torch_gpt.py's options and the Llama ones (bench/torch_moe.py adds its own to this parser)."""
    p = torch_gpt.training_parser(description)
    p.add_argument("--n-kv-head", type=int, required=True, help="key/value heads (GQA)")
    p.add_argument("--intermediate-size", type=int, required=True, help="SwiGLU width F")
    p.add_argument("--rope-theta", type=float, default=10000.0)
    p.add_argument("--norm-eps", type=float, default=1e-5)
    p.add_argument("--untied", action="store_true", help="a separate lm_head (default: tied to wte)")
    return p


def check_args(p, a):
    a = torch_gpt.check_args(p, a)
    if a.n_kv_head < 1 or a.n_head % a.n_kv_head:
        p.error("--n-head must be a multiple of --n-kv-head (>= 1)")
    if (a.d_model // a.n_head) % 2:
        p.error("the head size d_model / n_head must be even for RoPE")
    return a


def parse_args(argv):
    p = parser(__doc__.split("\n")[0])
    return check_args(p, p.parse_args(argv))


def build(a, make_ffn=None):
    """The model; make_ffn(layer), when given, makes the MLP module of that layer (bench/torch_moe.py's
    mixture of experts) in place of the dense SwiGLU."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class RMSNorm(nn.Module):
        def __init__(self, C, eps):
            super().__init__()
            self.eps = eps
            self.weight = nn.Parameter(torch.ones(C))

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight

    def rotate_half(x):
        h = x.shape[-1] // 2
        return torch.cat((-x[..., h:], x[..., :h]), dim=-1)

    def repeat_kv(x, groups):
        """(B, KVH, T, hs) -> (B, KVH * groups, T, hs), kv head g serving query heads g*groups.."""
        if groups == 1:
            return x
        B, KVH, T, hs = x.shape
        return x[:, :, None, :, :].expand(B, KVH, groups, T, hs).reshape(B, KVH * groups, T, hs)

    class Block(nn.Module):
        def __init__(self, C, NH, KVH, Fdim, T, eps, ffn):
            super().__init__()
            self.nh, self.kvh, self.hs = NH, KVH, C // NH
            self.input_norm = RMSNorm(C, eps)
            self.qkv = nn.Linear(C, (NH + 2 * KVH) * self.hs, bias=False)
            self.o_proj = nn.Linear(NH * self.hs, C, bias=False)
            self.post_norm = RMSNorm(C, eps)
            self.ffn = ffn
            if ffn is None:
                self.gate_up = nn.Linear(C, 2 * Fdim, bias=False)
                self.down_proj = nn.Linear(Fdim, C, bias=False)
            self.register_buffer("mask", torch.tril(torch.ones(T, T, dtype=torch.bool)).view(1, 1, T, T),
                                 persistent=False)

        def attn(self, x, cos, sin):
            B, T, _ = x.shape
            NH, KVH, hs = self.nh, self.kvh, self.hs
            q, k, v = self.qkv(x).split([NH * hs, KVH * hs, KVH * hs], dim=2)
            q = q.view(B, T, NH, hs).transpose(1, 2)
            k = k.view(B, T, KVH, hs).transpose(1, 2)
            v = v.view(B, T, KVH, hs).transpose(1, 2)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            k, v = repeat_kv(k, NH // KVH), repeat_kv(v, NH // KVH)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
            att = att.masked_fill(~self.mask[:, :, :T, :T], float("-inf"))
            att = F.softmax(att, dim=-1)
            y = (att @ v).transpose(1, 2).contiguous().view(B, T, NH * hs)
            return self.o_proj(y)

        def mlp(self, x):
            if self.ffn is not None:
                return self.ffn(x)
            gate, up = self.gate_up(x).chunk(2, dim=-1)
            return self.down_proj(F.silu(gate) * up)

        def forward(self, x, cos, sin):
            x = x + self.attn(self.input_norm(x), cos, sin)
            return x + self.mlp(self.post_norm(x))

    class Llama(nn.Module):
        def __init__(self):
            super().__init__()
            C, T, hs = a.d_model, a.seq_len, a.d_model // a.n_head
            self.V = a.vocab
            self.Vp = (a.vocab + a.vocab_multiple - 1) // a.vocab_multiple * a.vocab_multiple
            self.padding = (self.Vp - self.V) * C * (2 if a.untied else 1)
            self.wte = nn.Embedding(self.Vp, C)
            self.h = nn.ModuleList(Block(C, a.n_head, a.n_kv_head, a.intermediate_size, T, a.norm_eps,
                                         make_ffn(l) if make_ffn else None)
                                   for l in range(a.n_layer))
            self.norm = RMSNorm(C, a.norm_eps)
            self.lm_head = nn.Linear(C, self.Vp, bias=False) if a.untied else None
            # the rotary cache: angle t * theta^(-2i/hs) for pair i, both halves of a head
            inv_freq = 1.0 / (a.rope_theta ** (torch.arange(0, hs, 2, dtype=torch.float64) / hs))
            ang = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)
            ang = torch.cat((ang, ang), dim=-1)
            self.register_buffer("cos", ang.cos().float().view(1, 1, T, hs), persistent=False)
            self.register_buffer("sin", ang.sin().float().view(1, 1, T, hs), persistent=False)
            self.init_weights()

        def init_weights(self):
            g = torch.Generator().manual_seed(a.seed)
            with torch.no_grad():
                for name, p in self.named_parameters():
                    if name.endswith("norm.weight"):
                        p.fill_(1.0)
                        continue
                    std = a.init_std
                    if name.endswith(("o_proj.weight", "down_proj.weight")):
                        std /= math.sqrt(2 * a.n_layer)
                    p.normal_(0.0, std, generator=g)
                self.wte.weight[self.V:].zero_()
                if self.lm_head is not None:
                    self.lm_head.weight[self.V:].zero_()

        def forward(self, idx, targets, scale):
            T = idx.shape[1]
            cos, sin = self.cos[:, :, :T], self.sin[:, :, :T]
            x = self.wte(idx)
            for blk in self.h:
                x = blk(x, cos, sin)
            head = self.wte.weight if self.lm_head is None else self.lm_head.weight
            return torch_gpt.lm_loss(self.norm(x), head, self.V, targets, scale)

    return Llama()


def main(argv):
    return torch_gpt.train(parse_args(argv), build)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
