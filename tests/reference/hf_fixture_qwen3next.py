#!/usr/bin/env python3
"""hf_fixture_qwen3next.py — tiny Qwen3NextForCausalLM directories (model_type "qwen3_next"),
written by script, with the logits of a float64 PyTorch forward of each.

    /usr/bin/python3 tests/reference/hf_fixture_qwen3next.py OUT_ROOT   # OUT_ROOT/<name>/ each

Each OUT_ROOT/<name>/ holds config.json and model.safetensors in the published formats (the keys
of Qwen3NextConfig, the tensor names and shapes of Qwen3NextForCausalLM's state dict as the hub's
checkpoints hold them: experts one by one, the fused in_proj_qkvz / in_proj_ba, q_proj with the
gate, conv1d (CD, 1, K)), and for the test fixture.json (the tessera --set keys of the same model,
the tokens) and logits.npy (float64 (B, T, V)).

SCRIPT-WRITTEN, not saved by transformers (not on this machine). The forward is written from
transformers' modeling_qwen3_next.py, independently of tessera's layout:
  Qwen3NextRMSNorm x rsqrt(mean x^2 + eps) (1 + w) for the layer, final and q/k norms;
  Qwen3NextGatedDeltaNet: in_proj_qkvz viewed (HK, 2 dk + 2 r dv) per key head and split
  [q k v z], in_proj_ba viewed (HK, 2 r) and split [b a] (fix_query_key_value_ordering);
  cat(q, k, v) through the depthwise causal conv1d (padding K - 1, the first T outputs), SiLU;
  beta = sigmoid(b), g = -exp(A_log) softplus(a + dt_bias); q, k repeat_interleave'd to the
  value heads; torch_recurrent_gated_delta_rule (l2norm eps 1e-6, q / sqrt(dk), S = S e^g,
  S += k (beta (v - S^T k))^T, o = S^T q); Qwen3NextRMSNormGated o rsqrt(mean o^2 + eps) w silu(z);
  out_proj;
  Qwen3NextAttention: q_proj viewed (NH, 2 hs) and chunked [query gate] per head; q_norm, k_norm;
  partial RoPE on the first int(hs partial_rotary_factor) dimensions (rotate_half, cos = cat(f, f));
  softmax(q k^T / sqrt(hs)) causal with repeat_kv; times sigmoid(gate); o_proj;
  Qwen3NextSparseMoeBlock (layer i when (i + 1) % decoder_sparse_step == 0): softmax of the router
  logits, top k (divided by their sum with norm_topk_prob), the experts' SwiGLU, plus
  sigmoid(x shared_expert_gate^T) shared_expert(x); the other layers Qwen3NextMLP.
"""
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_fixture as base  # noqa: E402  (write_weights, tokens, B, T, V)

B, T, V = base.B, base.T, base.V

# 4 layers: 3 linear + 1 full (full_attention_interval 4, as the 80B model's 3 : 1), MoE in layers
# 1 and 3 (decoder_sparse_step 2), grouped DeltaNet heads 2 : 4, partial rotary 0.5 of 16.
FIXTURES = [
    dict(name="qwen3next_hybrid", L=4, C=32, NH=4, KVH=2, hs=16, F=48, HK=2, HV=4, dk=8, dv=6,
         K=4, E=4, topk=2, FE=16, S=24, every=2, norm_topk=True, prf=0.5, theta=10000000.0,
         eps=1e-6, tied=False, types=None, interval=4, dtype="F32"),
    # layer_types given, a full layer first, every layer MoE, tied head, stored in BF16
    dict(name="qwen3next_types_bf16", L=3, C=32, NH=2, KVH=1, hs=16, F=40, HK=1, HV=2, dk=8,
         dv=8, K=3, E=4, topk=2, FE=16, S=16, every=1, norm_topk=False, prf=0.25,
         theta=1000000.0, eps=1e-6, tied=True,
         types=["full_attention", "linear_attention", "linear_attention"], interval=None,
         dtype="BF16"),
]


def layer_types(fx):
    if fx["types"]:
        return fx["types"]
    return ["linear_attention" if (i + 1) % fx["interval"] else "full_attention"
            for i in range(fx["L"])]


def is_moe(fx, i):
    return fx["E"] > 0 and (i + 1) % fx["every"] == 0


def state_dict(fx, seed):
    """Qwen3NextForCausalLM's tensors in module order. The (1 + w) norms' w are multiples of
    2^-20 (tessera's 1 + w exact in fp32, the export's w back bit for bit)."""
    g = torch.Generator().manual_seed(seed)
    C, NH, KVH, hs, HK, HV, dk, dv = (fx[k] for k in ("C", "NH", "KVH", "hs", "HK", "HV", "dk", "dv"))
    CD = 2 * HK * dk + HV * dv

    def w(*shape, std=0.1):
        return torch.randn(*shape, generator=g, dtype=torch.float64) * std

    def norm(n):
        return torch.round(w(n, std=0.2) * 2.0 ** 20) / 2.0 ** 20

    sd = {"model.embed_tokens.weight": w(V, C, std=0.5)}
    for i, kind in enumerate(layer_types(fx)):
        p = f"model.layers.{i}."
        if kind == "linear_attention":
            sd[p + "linear_attn.conv1d.weight"] = w(CD, 1, fx["K"], std=0.3)
            sd[p + "linear_attn.in_proj_qkvz.weight"] = w(2 * HK * dk + 2 * HV * dv, C, std=0.2)
            sd[p + "linear_attn.in_proj_ba.weight"] = w(2 * HV, C, std=0.2)
            sd[p + "linear_attn.dt_bias"] = 1.0 + w(HV)
            sd[p + "linear_attn.A_log"] = torch.log(torch.linspace(1.0, 8.0, HV, dtype=torch.float64)) + w(HV)
            sd[p + "linear_attn.norm.weight"] = 1.0 + w(dv, std=0.2)
            sd[p + "linear_attn.out_proj.weight"] = w(C, HV * dv)
        else:
            sd[p + "self_attn.q_proj.weight"] = w(2 * NH * hs, C)
            sd[p + "self_attn.k_proj.weight"] = w(KVH * hs, C)
            sd[p + "self_attn.v_proj.weight"] = w(KVH * hs, C)
            sd[p + "self_attn.o_proj.weight"] = w(C, NH * hs)
            sd[p + "self_attn.q_norm.weight"] = norm(hs)
            sd[p + "self_attn.k_norm.weight"] = norm(hs)
        if is_moe(fx, i):
            sd[p + "mlp.gate.weight"] = w(fx["E"], C, std=0.5)
            for e in range(fx["E"]):
                sd[p + f"mlp.experts.{e}.gate_proj.weight"] = w(fx["FE"], C)
                sd[p + f"mlp.experts.{e}.up_proj.weight"] = w(fx["FE"], C)
                sd[p + f"mlp.experts.{e}.down_proj.weight"] = w(C, fx["FE"])
            sd[p + "mlp.shared_expert.gate_proj.weight"] = w(fx["S"], C)
            sd[p + "mlp.shared_expert.up_proj.weight"] = w(fx["S"], C)
            sd[p + "mlp.shared_expert.down_proj.weight"] = w(C, fx["S"])
            sd[p + "mlp.shared_expert_gate.weight"] = w(1, C, std=0.5)
        else:
            sd[p + "mlp.gate_proj.weight"] = w(fx["F"], C)
            sd[p + "mlp.up_proj.weight"] = w(fx["F"], C)
            sd[p + "mlp.down_proj.weight"] = w(C, fx["F"])
        sd[p + "input_layernorm.weight"] = norm(C)
        sd[p + "post_attention_layernorm.weight"] = norm(C)
    return base.final_norm_and_head(sd, fx, V, C, w, norm)


def config_json(fx):
    cj = {"architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next",
          "vocab_size": V, "hidden_size": fx["C"], "intermediate_size": fx["F"],
          "num_hidden_layers": fx["L"], "num_attention_heads": fx["NH"],
          "num_key_value_heads": fx["KVH"], "head_dim": fx["hs"], "hidden_act": "silu",
          "max_position_embeddings": 256, "rms_norm_eps": fx["eps"], "rope_theta": fx["theta"],
          "partial_rotary_factor": fx["prf"], "rope_scaling": None, "attention_bias": False,
          "attention_dropout": 0.0, "linear_conv_kernel_dim": fx["K"],
          "linear_key_head_dim": fx["dk"], "linear_value_head_dim": fx["dv"],
          "linear_num_key_heads": fx["HK"], "linear_num_value_heads": fx["HV"],
          "num_experts": fx["E"], "num_experts_per_tok": fx["topk"],
          "moe_intermediate_size": fx["FE"], "shared_expert_intermediate_size": fx["S"],
          "norm_topk_prob": fx["norm_topk"], "decoder_sparse_step": fx["every"],
          "mlp_only_layers": [], "router_aux_loss_coef": 0.001, "output_router_logits": False,
          "initializer_range": 0.02, "tie_word_embeddings": fx["tied"], "use_cache": True,
          "torch_dtype": "float32" if fx["dtype"] == "F32" else "bfloat16"}
    if fx["types"]:
        cj["layer_types"] = fx["types"]
    else:
        cj["full_attention_interval"] = fx["interval"]
    return cj


def tessera_sets(fx):
    """The tessera --set keys of the same model (docs/models.md "Hybrid linear attention")."""
    types = layer_types(fx)
    s = {"model.n_layer": fx["L"], "model.d_model": fx["C"], "model.n_head": fx["NH"],
         "model.n_kv_head": fx["KVH"], "model.head_dim": fx["hs"],
         "model.intermediate_size": fx["F"], "model.vocab_size": V,
         "model.vocab_multiple": base.VOCAB_MULTIPLE, "model.pos": "rope", "model.norm": "rmsnorm",
         "model.mlp": "swiglu", "model.bias": "false", "model.qkv_bias": "false",
         "model.qk_norm": "true", "model.norm_eps": repr(fx["eps"]),
         "model.rope_theta": repr(fx["theta"]), "model.partial_rotary_factor": repr(fx["prf"]),
         "model.tie_embeddings": str(fx["tied"]).lower(), "model.layer_types": ",".join(types),
         "model.attn_output_gate": "true", "model.linear_num_key_heads": fx["HK"],
         "model.linear_num_value_heads": fx["HV"], "model.linear_key_head_dim": fx["dk"],
         "model.linear_value_head_dim": fx["dv"], "model.linear_conv_kernel_dim": fx["K"],
         "model.moe_experts": fx["E"], "model.moe_top_k": fx["topk"],
         "model.moe_intermediate_size": fx["FE"], "model.moe_shared_size": fx["S"],
         "model.moe_shared_gate": "true", "model.moe_every": fx["every"],
         "model.moe_norm_topk": str(fx["norm_topk"]).lower()}
    return {k: str(v) for k, v in s.items()}


# ---- the float64 forward (modeling_qwen3_next.py) -------------------------------------------

def rms1p(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + w)


def l2norm(x, eps=1e-6):
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


def delta_rule(q, k, v, g, beta):
    """torch_recurrent_gated_delta_rule, (B, T, H, d) inputs, q and k L2-normalised inside."""
    q, k = l2norm(q) / math.sqrt(q.shape[-1]), l2norm(k)
    Bn, Tn, H, dk = k.shape
    S = torch.zeros(Bn, H, dk, v.shape[-1], dtype=v.dtype)
    out = torch.zeros_like(v)
    for t in range(Tn):
        S = S * g[:, t].exp()[..., None, None]
        mem = (S * k[:, t, :, :, None]).sum(-2)
        delta = (v[:, t] - mem) * beta[:, t, :, None]
        S = S + k[:, t, :, :, None] * delta[:, :, None, :]
        out[:, t] = (S * q[:, t, :, :, None]).sum(-2)
    return out


def gated_deltanet(x, sd, p, fx):
    Bn, Tn, _ = x.shape
    HK, HV, dk, dv, K = fx["HK"], fx["HV"], fx["dk"], fx["dv"], fx["K"]
    r = HV // HK
    qkvz = (x @ sd[p + "in_proj_qkvz.weight"].T).view(Bn, Tn, HK, 2 * dk + 2 * r * dv)
    ba = (x @ sd[p + "in_proj_ba.weight"].T).view(Bn, Tn, HK, 2 * r)
    q, k, v, z = torch.split(qkvz, [dk, dk, r * dv, r * dv], dim=3)
    b, a = torch.split(ba, [r, r], dim=3)
    v, z = v.reshape(Bn, Tn, HV, dv), z.reshape(Bn, Tn, HV, dv)
    b, a = b.reshape(Bn, Tn, HV), a.reshape(Bn, Tn, HV)
    mixed = torch.cat([t.reshape(Bn, Tn, -1) for t in (q, k, v)], -1).transpose(1, 2)
    conv = sd[p + "conv1d.weight"]
    mixed = F.silu(F.conv1d(mixed, conv, padding=K - 1, groups=conv.shape[0])[..., :Tn])
    q, k, v = torch.split(mixed.transpose(1, 2), [HK * dk, HK * dk, HV * dv], dim=-1)
    q, k, v = q.reshape(Bn, Tn, HK, dk), k.reshape(Bn, Tn, HK, dk), v.reshape(Bn, Tn, HV, dv)
    beta = torch.sigmoid(b)
    g = -sd[p + "A_log"].exp() * F.softplus(a + sd[p + "dt_bias"])
    q, k = q.repeat_interleave(r, dim=2), k.repeat_interleave(r, dim=2)
    o = delta_rule(q, k, v, g, beta)
    o = o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + fx["eps"]) * sd[p + "norm.weight"] * F.silu(z)
    return o.reshape(Bn, Tn, HV * dv) @ sd[p + "out_proj.weight"].T


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), -1)


def gated_attention(x, sd, p, fx):
    Bn, Tn, _ = x.shape
    NH, KVH, hs, eps = fx["NH"], fx["KVH"], fx["hs"], fx["eps"]
    q, gate = torch.chunk((x @ sd[p + "q_proj.weight"].T).view(Bn, Tn, NH, 2 * hs), 2, dim=-1)
    gate = gate.reshape(Bn, Tn, NH * hs)
    q = rms1p(q, sd[p + "q_norm.weight"], eps).transpose(1, 2)
    k = rms1p((x @ sd[p + "k_proj.weight"].T).view(Bn, Tn, KVH, hs), sd[p + "k_norm.weight"], eps).transpose(1, 2)
    v = (x @ sd[p + "v_proj.weight"].T).view(Bn, Tn, KVH, hs).transpose(1, 2)
    rd = int(hs * fx["prf"])
    inv = 1.0 / (fx["theta"] ** (torch.arange(0, rd, 2, dtype=q.dtype) / rd))
    f = torch.arange(Tn, dtype=q.dtype)[:, None] * inv[None, :]
    cos, sin = torch.cat((f, f), -1).cos(), torch.cat((f, f), -1).sin()
    q = torch.cat((q[..., :rd] * cos + rotate_half(q[..., :rd]) * sin, q[..., rd:]), -1)
    k = torch.cat((k[..., :rd] * cos + rotate_half(k[..., :rd]) * sin, k[..., rd:]), -1)
    k, v = k.repeat_interleave(NH // KVH, dim=1), v.repeat_interleave(NH // KVH, dim=1)
    s = q @ k.transpose(-1, -2) / math.sqrt(hs)
    s = s.masked_fill(torch.triu(torch.ones(Tn, Tn, dtype=torch.bool), 1), float("-inf"))
    o = (s.softmax(-1) @ v).transpose(1, 2).reshape(Bn, Tn, NH * hs)
    return (o * torch.sigmoid(gate)) @ sd[p + "o_proj.weight"].T


def swiglu(h, gate, up, down):
    return (F.silu(h @ gate.T) * (h @ up.T)) @ down.T


def moe(x, sd, p, fx):
    h = x.reshape(-1, x.shape[-1])
    probs = (h @ sd[p + "gate.weight"].T).softmax(-1)
    top, idx = torch.topk(probs, fx["topk"], dim=-1)
    if fx["norm_topk"]:
        top = top / top.sum(-1, keepdim=True)
    out = torch.zeros_like(h)
    for e in range(fx["E"]):
        n, j = torch.nonzero(idx == e, as_tuple=True)
        if len(n):
            y = swiglu(h[n], sd[p + f"experts.{e}.gate_proj.weight"],
                       sd[p + f"experts.{e}.up_proj.weight"], sd[p + f"experts.{e}.down_proj.weight"])
            out = out.index_add(0, n, top[n, j, None] * y)
    sh = swiglu(h, sd[p + "shared_expert.gate_proj.weight"], sd[p + "shared_expert.up_proj.weight"],
                sd[p + "shared_expert.down_proj.weight"])
    out = out + torch.sigmoid(h @ sd[p + "shared_expert_gate.weight"].T) * sh
    return out.view_as(x)


def forward(sd, fx, idx):
    eps = fx["eps"]
    h = sd["model.embed_tokens.weight"][idx]
    for i, kind in enumerate(layer_types(fx)):
        p = f"model.layers.{i}."
        x = rms1p(h, sd[p + "input_layernorm.weight"], eps)
        if kind == "linear_attention":
            h = h + gated_deltanet(x, sd, p + "linear_attn.", fx)
        else:
            h = h + gated_attention(x, sd, p + "self_attn.", fx)
        x = rms1p(h, sd[p + "post_attention_layernorm.weight"], eps)
        if is_moe(fx, i):
            h = h + moe(x, sd, p + "mlp.", fx)
        else:
            h = h + swiglu(x, sd[p + "mlp.gate_proj.weight"], sd[p + "mlp.up_proj.weight"],
                           sd[p + "mlp.down_proj.weight"])
    h = rms1p(h, sd["model.norm.weight"], eps)
    return h @ sd["model.embed_tokens.weight" if fx["tied"] else "lm_head.weight"].T


def make(root, fx, seed):
    d = os.path.join(root, fx["name"])
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config_json(fx), f, indent=2)
    stored = base.write_weights(d, dict(fx, shard=None), state_dict(fx, seed))
    toks = base.tokens(seed)
    idx = torch.as_tensor(np.stack([toks[k * T:k * T + T] for k in range(B)]), dtype=torch.long)
    with torch.no_grad():
        logits = forward(stored, fx, idx)
    np.save(os.path.join(d, "logits.npy"), logits.numpy())
    with open(os.path.join(d, "fixture.json"), "w") as f:
        json.dump({"name": fx["name"], "model_type": "qwen3_next", "dtype": fx["dtype"],
                   "seed": seed, "B": B, "T": T, "tokens": [int(t) for t in toks],
                   "sets": tessera_sets(fx),
                   "note": "script-written by tests/reference/hf_fixture_qwen3next.py, not by "
                           "transformers' save_pretrained"}, f)
    return d


def make_all(root):
    return {fx["name"]: make(root, fx, 2000 + k) for k, fx in enumerate(FIXTURES)}


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: hf_fixture_qwen3next.py OUT_ROOT")
    torch.set_default_dtype(torch.float64)
    for name, d in make_all(sys.argv[1]).items():
        print(f"wrote {d}")
