#!/usr/bin/python3
"""torch_moe.py — tessera's mixture-of-experts decoder in PyTorch (CPU, float32), timed like tessera-train.

The peer of bench/cpu_vs_torch.sh's moe-* configs: bench/torch_llama.py's model (its blocks, init
and loss) with every layer's SwiGLU MLP replaced by a mixture of experts, trained by
bench/torch_gpt.py's train(). The MoE layer is docs/moe.md's, written the plain PyTorch way (as
Hugging Face's Mixtral and Qwen3-MoE blocks are):

  - router: a Linear C -> E without bias; softmax of its logits; the top K probabilities
    (torch.topk), divided by their sum unless --no-norm-topk;
  - experts: E SwiGLU MLPs, each a fused gate/up Linear (C -> 2 FE, the gate rows then the up rows,
    as tessera's expw1[e]) and a down Linear (FE -> C, expw2[e]);
  - a Python loop over the experts: the rows routed to expert e found with nonzero, gathered with
    index_select, passed through the expert, scaled by their weights and added back with index_add_
    (dropless: every token reaches all K of its experts);
  - the load-balancing loss E * sum_e f_e P_e (f_e = tokens routed to e / (N K), P_e = the mean
    router probability of e over the N rows) and the z-loss mean(logsumexp(logits)^2) of each layer,
    weighted by --aux-coef and --z-coef and by the microbatch's share of the counted targets, added
    to the language-model loss as tessera's trainer does (docs/moe.md).

Run with /usr/bin/python3 (Debian's python3-torch). Output: one JSON object per step on stdout,
then one summary object ("summary": true).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_gpt  # noqa: E402  (the shared training loop)
import torch_llama  # noqa: E402  (the decoder the experts go into)


def parse_args(argv):
    p = torch_llama.parser(__doc__.split("\n")[0])
    p.add_argument("--experts", type=int, required=True, help="E routed experts per layer")
    p.add_argument("--top-k", type=int, required=True, help="K experts per token")
    p.add_argument("--expert-size", type=int, required=True, help="an expert's SwiGLU width FE")
    p.add_argument("--no-norm-topk", action="store_true", help="the K raw probabilities as weights")
    p.add_argument("--aux-coef", type=float, default=0.01, help="load-balancing loss weight")
    p.add_argument("--z-coef", type=float, default=0.0, help="router z-loss weight")
    a = torch_llama.check_args(p, p.parse_args(argv))
    if not 2 <= a.experts or not 1 <= a.top_k <= a.experts:
        p.error("--experts must be >= 2 and --top-k between 1 and --experts")
    if a.expert_size < 1:
        p.error("--expert-size must be >= 1")
    return a


def build(a):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Expert(nn.Module):
        def __init__(self, C, FE):
            super().__init__()
            self.gate_up = nn.Linear(C, 2 * FE, bias=False)
            self.down_proj = nn.Linear(FE, C, bias=False)

        def forward(self, x):
            gate, up = self.gate_up(x).chunk(2, dim=-1)
            return self.down_proj(F.silu(gate) * up)

    class MoE(nn.Module):
        def __init__(self, C):
            super().__init__()
            self.router = nn.Linear(C, a.experts, bias=False)
            self.experts = nn.ModuleList(Expert(C, a.expert_size) for _ in range(a.experts))
            self.terms = []  # the weighted router losses of the forwards since the model's last
            self.record = False  # set by bench/check_moe_peer.py: keep each forward's statistics
            self.stats = []  # (aux, z, tokens per expert) of each forward while record is set

        def forward(self, x):
            B, T, C = x.shape
            x = x.reshape(B * T, C)
            N, E, K = B * T, a.experts, a.top_k
            logits = self.router(x)
            probs = F.softmax(logits, dim=-1)
            wts, idx = torch.topk(probs, K, dim=-1)  # (N, K) each, descending
            if not a.no_norm_topk:
                wts = wts / wts.sum(dim=-1, keepdim=True)
            out = torch.zeros_like(x)
            for e, expert in enumerate(self.experts):
                rows, slot = torch.nonzero(idx == e, as_tuple=True)
                if rows.numel() == 0:
                    continue
                y = expert(x.index_select(0, rows))
                out.index_add_(0, rows, y * wts[rows, slot].unsqueeze(1))
            counts = torch.bincount(idx.reshape(-1), minlength=E)
            # the counts are constants: the aux loss's gradient flows through P_e
            aux = lambda: E * (counts.to(probs.dtype) / (N * K) * probs.mean(dim=0)).sum()  # noqa: E731
            z = lambda: torch.logsumexp(logits, dim=-1).pow(2).mean()  # noqa: E731
            term = 0.0
            if a.aux_coef > 0:
                term = term + a.aux_coef * aux()
            if a.z_coef > 0:
                term = term + a.z_coef * z()
            self.terms.append(term)
            if self.record:
                self.stats.append((float(aux()), float(z()), counts.tolist()))
            return out.view(B, T, C)

    model = torch_llama.build(a, make_ffn=lambda layer: MoE(a.d_model))
    moes = [blk.ffn for blk in model.h]
    lm_forward = model.forward

    def forward(idx, targets, scale):
        """torch_llama's (scaled loss, summed loss) plus the router losses, weighted by this
        microbatch's share of the global batch's counted targets (scale = 1 / those)."""
        for m in moes:
            m.terms.clear()
        loss, raw = lm_forward(idx, targets, scale)
        share = float((targets >= 0).sum()) * scale
        extra = sum(t for m in moes for t in m.terms)
        return loss + share * extra, raw

    model.forward = forward
    type(model).__name__ = "LlamaMoE"  # the summary's "model" (the class is this build's own)
    return model


def main(argv):
    return torch_gpt.train(parse_args(argv), build)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
