"""torch_mtp.py — multi-token prediction (DeepSeek-V3's MTP modules) on torch_llama's Llama, in
float64, written from the equations of the V3 paper (section 2.2) and the published checkpoints'
module (model.layers.{L + k - 1}.{enorm, hnorm, eh_proj, shared_head.norm} plus a decoder layer):

  h_0 = the last layer's output (before the final norm)
  depth k = 1..D at position i:  x = eh_proj [RMSNorm_e(Emb(t_{i+k})) | RMSNorm_h(h_{k-1})]
                                 h_k = Layer_k(x)  (the same decoder layer as the model's)
                                 logits = head(RMSNorm_head(h_k))  (the model's head)
  predicting t_{i+k+1} = the main targets at i + k, counted where the main loss counts them and,
  under the document mask, i + k is in i's document.

The model's forward returns the main logits and the main loss sum, as Llama's; mtp_sum holds the
depths' summed losses of the last forward (each step's sum appended to mtp_log), mtp_weight the
objective's factor mtp_loss_weight / D (test_reference.py's global_batch_backward adds
mtp_weight x mtp_sum / counted to what it differentiates). tessera's layout: mtp_enorm,
mtp_hnorm, mtp_head_norm (D, C), mtp_eh_proj (D, C, 2C), and each depth's layer's tensors packed
into the rows of mtp_layer_w / mtp_layer_n where ref_dump's /mtp_layout says.
"""
import torch
import torch.nn.functional as F
from torch import nn

import torch_gpt
import torch_llama

MTP_NAMES = ["mtp_enorm", "mtp_hnorm", "mtp_eh_proj", "mtp_head_norm", "mtp_layer_w",
             "mtp_layer_n"]
for _n, _k in (("mtp_enorm", "norm"), ("mtp_hnorm", "norm"), ("mtp_eh_proj", "weight"),
               ("mtp_head_norm", "norm")):
    torch_gpt.PARAMS[_n] = (_k, True)  # stacked over the depths


class Module(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.enorm = torch_llama.RMSNorm(cfg.C, cfg.norm_eps)
        self.hnorm = torch_llama.RMSNorm(cfg.C, cfg.norm_eps)
        self.eh_proj = nn.Linear(2 * cfg.C, cfg.C, bias=False)
        self.layer = torch_llama.Layer(cfg)
        self.head_norm = torch_llama.RMSNorm(cfg.C, cfg.norm_eps)


def depth_rows(idx, targets, k, doc):
    """depth k's input tokens t_{i+k} (0 past the row) and targets (-1 past the row, where the main
    target at i + k is not counted, or i + k is in another document)"""
    B, T = idx.shape
    tok = torch.zeros_like(idx)
    tg = torch.full_like(targets, -1)
    tok[:, :T - k] = idx[:, k:]
    same = doc[:, k:] == doc[:, :T - k]
    tg[:, :T - k] = torch.where(same, targets[:, k:], torch.full_like(targets[:, k:], -1))
    return tok, tg


class MTPLlama(torch_llama.Llama):
    def __init__(self, cfg, eot=None, D=1, weight=0.3, layout=None):
        super().__init__(cfg, eot)
        self.D, self.mtp_weight = D, weight / D
        self.mtp = nn.ModuleList(Module(cfg) for _ in range(D))
        self.layout = layout or {}  # (d, name) -> (block, offset, numel); "PW", "PN" the rows
        self.mtp_sum, self.mtp_log = None, []

    def forward(self, idx, targets=None):
        pos, allowed = torch_llama.positions_and_mask(idx, self.eot)
        x = self.embed_tokens(idx)
        for l, layer in enumerate(self.layers):
            cos, sin = self.layer_rope(l, pos)
            x = layer(x, cos, sin, allowed)
        logits, loss = self.head(x, targets)
        if targets is not None:
            self.mtp_sum = self.mtp_forward(idx, targets, x, pos, allowed)
            self.mtp_log.append(float(self.mtp_sum))
        return logits, loss

    def mtp_forward(self, idx, targets, h, pos, allowed):
        head = self.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        if self.eot is None:
            doc = torch.zeros_like(idx)
        else:
            is_eot = (idx == self.eot).long()
            doc = torch.cumsum(is_eot, dim=1) - is_eot
        cos, sin = self.layer_rope(0, pos)
        total = 0.0
        for k, mod in enumerate(self.mtp, start=1):
            tok, tg = depth_rows(idx, targets, k, doc)
            x = mod.eh_proj(torch.cat([mod.enorm(self.embed_tokens(tok)), mod.hnorm(h)], -1))
            h = mod.layer(x, cos, sin, allowed)
            lg = F.linear(mod.head_norm(h), head)
            total = total + torch_gpt.summed_loss(lg, tg, self.cfg.V)
        return total

    def tessera_views(self):
        views = super().tessera_views()
        views["mtp_enorm"] = [[m.enorm.weight] for m in self.mtp]
        views["mtp_hnorm"] = [[m.hnorm.weight] for m in self.mtp]
        views["mtp_eh_proj"] = [[m.eh_proj.weight] for m in self.mtp]
        views["mtp_head_norm"] = [[m.head_norm.weight] for m in self.mtp]
        return views

    def layer_parts(self, d):
        """depth d's layer: tessera name -> the tensors of its one-layer slice"""
        one = torch_llama.Llama.__new__(torch_llama.Llama)
        nn.Module.__init__(one)
        one.cfg, one.layers = self.cfg, [self.mtp[d].layer]
        one.embed_tokens, one.norm, one.lm_head = self.embed_tokens, self.norm, self.lm_head
        return {n: e[0] for n, e in torch_llama.Llama.tessera_views(one).items()
                if (d, n) in self.layout}

    @torch.no_grad()
    def load_tessera(self, params):
        super().load_tessera(params)
        for d in range(self.D):
            for n, parts in self.layer_parts(d).items():
                block, off, numel = self.layout[(d, n)]
                row = torch.as_tensor(params["mtp_layer_n" if block else "mtp_layer_w"][d])
                flat = row[off:off + numel]
                for dst, piece in zip(parts, flat.split([t.numel() for t in parts])):
                    dst.copy_(piece.reshape(dst.shape))

    @torch.no_grad()
    def tessera_tensors(self, grads=False):
        out = super().tessera_tensors(grads)
        blocks = [torch.zeros(self.D, self.layout["PW"]), torch.zeros(self.D, self.layout["PN"])]
        for d in range(self.D):
            for n, parts in self.layer_parts(d).items():
                block, off, numel = self.layout[(d, n)]
                vals = [(t.grad if t.grad is not None else torch.zeros_like(t)) if grads else t
                        for t in parts]
                blocks[block][d, off:off + numel] = torch.cat([v.reshape(-1) for v in vals])
        out["mtp_layer_w"], out["mtp_layer_n"] = blocks
        return out

    def param_groups(self, weight_decay, decay_norms_biases=False, decay_embeddings=False):
        groups = super().param_groups(weight_decay, decay_norms_biases, decay_embeddings)
        for d in range(self.D):
            for n, parts in self.layer_parts(d).items():
                kind = torch_gpt.PARAMS[n][0]
                decay = kind == "weight" or (kind in ("norm", "bias") and decay_norms_biases)
                groups[0 if decay else 1]["params"].extend(parts)
        return groups
