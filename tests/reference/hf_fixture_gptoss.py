#!/usr/bin/env python3
"""hf_fixture_gptoss.py — a tiny gpt-oss (GptOssForCausalLM, model_type gpt_oss) Hugging Face
directory in two forms, written by hand, with the logits of a float64 forward of it.

    python3 tests/reference/hf_fixture_gptoss.py OUT_ROOT   # OUT_ROOT/gptoss_bf16, gptoss_mxfp4

Like hf_fixture.py's (whose helpers this imports: the safetensors writer, RMSNorm, rotate_half, the
token rows), these directories are SCRIPT-WRITTEN from the published formats, not saved by
transformers (not on this machine):
  gptoss_bf16   every tensor BF16 in GptOssForCausalLM's unquantised layout: per layer
                self_attn.sinks, q/k/v/o_proj weight + bias, mlp.router.weight + bias,
                mlp.experts.gate_up_proj (E, C, 2I) with gate and up INTERLEAVED in the last
                dimension, gate_up_proj_bias (E, 2I), down_proj (E, I, C), down_proj_bias (E, C),
                input_layernorm, post_attention_layernorm; model.norm, an untied lm_head;
  gptoss_mxfp4  the same model as the published checkpoints hold it: gate_up_proj and down_proj as
                NAME_blocks (E, R, C/32, 16) uint8 + NAME_scales (E, R, C/32) uint8 of the rows
                (E, 2I, C) and (E, C, I) (the transposes of the tensors above), the rest BF16, and
                config.json's quantization_config {"quant_method": "mxfp4"}.
The expert weights are drawn, quantised to MXFP4 by the quantiser below (written from the OCP
Microscaling Formats spec v1.0: per block of 32 values the shared scale 2^(floor(log2(max |v|)) -
2), E8M0 byte = that exponent + 127, elements v / scale rounded to the nearest E2M1 value (ties to
even, saturating at 6); two elements per byte, the even one in the low nibble as transformers'
convert_moe_packed_tensors reads them), and the bf16 form stores the dequantised values, which
bf16 holds exactly: both directories describe one model, with one logits.npy.

The forward follows transformers' modeling_gpt_oss.py in float64: RMSNorm, q/k/v with biases,
rotate-half RoPE with YaRN's frequencies and attention factor (_compute_yarn_parameters:
torch_llama.yarn_inv_freq; cos and sin times 0.1 ln(factor) + 1), scores q k^T / sqrt(head_dim)
under the causal mask (a sliding_attention layer: i - j < sliding_window), each row's softmax with
the head's sink logit appended and dropped after, o_proj with its bias; GptOssTopKRouter (logits
h W^T + b, top k, softmax over the k chosen); GptOssExperts (gate_up = h @ gate_up_proj[e] + bias,
gate = [..., ::2], up = [..., 1::2], gate clamped above at swiglu_limit, up to +-limit,
(up + 1) * gate * sigmoid(1.702 gate) @ down_proj[e] + down_proj_bias[e], weighted by the
routing weight); model.norm, lm_head.
"""
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import hf_fixture as hf  # noqa: E402  (write_safetensors, rms_norm, rotate_half, B, T, V, tokens)
import torch_llama  # noqa: E402  (yarn_inv_freq: _compute_yarn_parameters in float64)

# gpt-oss-20B's structure at a tiny size: layers alternating sliding (W = 5 of T = 16) and full,
# GQA 4:2 with head_dim 24 (NH head_dim != hidden, as gpt-oss's 64 x 64 != 2880), 4 experts of
# width 32 top 2, YaRN with gpt-oss's numbers, swiglu_limit 1.5 (at 7 no value of a tiny model
# reaches the clamps). hidden and the expert width are multiples of 32 (MXFP4 blocks).
FX = dict(L=4, C=64, NH=4, KVH=2, hs=24, FE=32, E=4, K=2, W=5, eps=1e-5, theta=150000.0,
          yarn=dict(factor=32.0, beta_fast=32.0, beta_slow=1.0, original_max_position_embeddings=4096,
                    truncate=False), limit=1.5, aux=0.9, seed=4242)
TYPES = ["sliding_attention", "full_attention"] * (FX["L"] // 2)
ALPHA = 1.702  # transformers' fixed GptOssExperts.alpha

# ---- MXFP4 (OCP MX v1.0: E2M1 elements, E8M0 scales, blocks of 32) -------------------------------
E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]  # magnitudes of codes 0-7; bit 3 is the sign


def e2m1_code(x):
    """The E2M1 code of x (already divided by the block scale): nearest value, ties to the even
    code (the one whose mantissa bit is 0), saturating at +-6."""
    mag, sign = min(abs(x), 6.0), 8 if math.copysign(1.0, x) < 0 else 0
    best = min(range(8), key=lambda c: (abs(E2M1[c] - mag), c & 1))
    return sign | best if E2M1[best] != 0.0 else 0  # +0 for zero (no -0 from rounding)


def mxfp4_quantise(rows):
    """rows (..., n) float64, n a multiple of 32 -> (blocks uint8 (..., n/32, 16), scales uint8
    (..., n/32))."""
    lead, n = rows.shape[:-1], rows.shape[-1]
    flat = rows.reshape(-1, n // 32, 32)
    blocks = np.zeros(flat.shape[:2] + (16,), dtype=np.uint8)
    scales = np.zeros(flat.shape[:2], dtype=np.uint8)
    for r in range(flat.shape[0]):
        for g in range(flat.shape[1]):
            v = flat[r, g]
            amax = float(np.abs(v).max())
            e = math.floor(math.log2(amax)) - 2 if amax > 0 else -127  # emax of E2M1 is 2
            scales[r, g] = e + 127
            codes = [e2m1_code(float(x) / 2.0 ** e) for x in v]
            blocks[r, g] = [codes[2 * j] | codes[2 * j + 1] << 4 for j in range(16)]
    return blocks.reshape(lead + (n // 32, 16)), scales.reshape(lead + (n // 32,))


def mxfp4_values(blocks, scales):
    """The float64 values of blocks/scales: (..., G, 16) and (..., G) -> (..., 32 G)."""
    lut = np.array(E2M1 + [-x for x in E2M1])
    lo, hi = lut[blocks & 15], lut[blocks >> 4]
    vals = np.stack([lo, hi], axis=-1).reshape(blocks.shape[:-1] + (32,))
    vals = vals * np.exp2(scales.astype(np.float64) - 127)[..., None]
    return vals.reshape(blocks.shape[:-2] + (blocks.shape[-2] * 32,))


# ---- the model ------------------------------------------------------------------------------------

def bf16(t):
    return t.to(torch.float32).to(torch.bfloat16).to(torch.float64)


def weights(fx=FX):
    """(state dict: HF name -> float64 values of the bf16 form, {name: (blocks, scales)} of the
    MXFP4 form's two expert tensors per layer)."""
    g = torch.Generator().manual_seed(fx["seed"])
    C, NH, KVH, hs, FE, E = fx["C"], fx["NH"], fx["KVH"], fx["hs"], fx["FE"], fx["E"]

    def w(*shape, std=0.1):
        return bf16(torch.randn(*shape, generator=g, dtype=torch.float64) * std)

    sd, packed = {"model.embed_tokens.weight": w(hf.V, C, std=0.5)}, {}
    for i in range(fx["L"]):
        p = f"model.layers.{i}."
        sd[p + "self_attn.sinks"] = w(NH, std=0.5)
        for n, rows in (("q", NH * hs), ("k", KVH * hs), ("v", KVH * hs)):
            sd[f"{p}self_attn.{n}_proj.weight"] = w(rows, C)
            sd[f"{p}self_attn.{n}_proj.bias"] = w(rows, std=0.2)
        sd[p + "self_attn.o_proj.weight"] = w(C, NH * hs)
        sd[p + "self_attn.o_proj.bias"] = w(C, std=0.2)
        sd[p + "mlp.router.weight"] = w(E, C, std=0.5)
        sd[p + "mlp.router.bias"] = w(E, std=0.5)
        for n, shape in (("gate_up_proj", (E, 2 * FE, C)), ("down_proj", (E, C, FE))):
            rows = torch.randn(*shape, generator=g, dtype=torch.float64).numpy() * 0.1
            b, s = mxfp4_quantise(rows)  # the rows the MXFP4 form holds: (E, R, C) / (E, C, I)
            packed[p + "mlp.experts." + n] = (b, s)
            sd[p + "mlp.experts." + n] = torch.from_numpy(mxfp4_values(b, s)).transpose(1, 2)
            sd[p + f"mlp.experts.{n}_bias"] = w(E, shape[1] if n == "gate_up_proj" else C, std=0.2)
        sd[p + "input_layernorm.weight"] = bf16(1.0 + torch.randn(C, generator=g, dtype=torch.float64) * 0.2)
        sd[p + "post_attention_layernorm.weight"] = bf16(1.0 + torch.randn(C, generator=g, dtype=torch.float64) * 0.2)
    sd["model.norm.weight"] = bf16(1.0 + torch.randn(C, generator=g, dtype=torch.float64) * 0.2)
    sd["lm_head.weight"] = w(hf.V, C, std=0.5)
    return sd, packed


def config_json(fx=FX, mxfp4=False):
    """GptOssConfig's keys as the published config.json writes them."""
    cj = {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "vocab_size": hf.V,
          "hidden_size": fx["C"], "intermediate_size": fx["FE"], "num_hidden_layers": fx["L"],
          "num_attention_heads": fx["NH"], "num_key_value_heads": fx["KVH"], "head_dim": fx["hs"],
          "hidden_act": "silu", "max_position_embeddings": int(fx["yarn"]["factor"] *
                                                                fx["yarn"]["original_max_position_embeddings"]),
          "rms_norm_eps": fx["eps"], "rope_theta": fx["theta"],
          "rope_scaling": dict(fx["yarn"], rope_type="yarn"), "attention_dropout": 0.0,
          "attention_bias": True, "sliding_window": fx["W"], "layer_types": list(TYPES),
          "swiglu_limit": fx["limit"], "num_local_experts": fx["E"],
          "num_experts_per_tok": fx["K"], "experts_per_token": fx["K"],
          "router_aux_loss_coef": fx["aux"], "output_router_logits": False,
          "initializer_range": 0.02, "tie_word_embeddings": False, "use_cache": True,
          "eos_token_id": 2, "pad_token_id": 1, "torch_dtype": "bfloat16"}
    if mxfp4:
        cj["quantization_config"] = {"quant_method": "mxfp4", "modules_to_not_convert": [
            "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}
    return cj


def published_config(size):
    """openai/gpt-oss-20b's or -120b's config.json as published (transformers 4.55.0.dev0; read
    through a copy quoted in public test code, 2026-11-28): the recipes' reference."""
    L, E = {"20b": (24, 32), "120b": (36, 128)}[size]
    return {"architectures": ["GptOssForCausalLM"], "attention_bias": True,
            "attention_dropout": 0.0, "eos_token_id": 200002, "experts_per_token": 4,
            "head_dim": 64, "hidden_act": "silu", "hidden_size": 2880,
            "initial_context_length": 4096, "initializer_range": 0.02, "intermediate_size": 2880,
            "layer_types": ["sliding_attention", "full_attention"] * (L // 2),
            "max_position_embeddings": 131072, "model_type": "gpt_oss", "num_attention_heads": 64,
            "num_experts_per_tok": 4, "num_hidden_layers": L, "num_key_value_heads": 8,
            "num_local_experts": E, "output_router_logits": False, "pad_token_id": 199999,
            "quantization_config": {"modules_to_not_convert": [
                "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
                "lm_head"], "quant_method": "mxfp4"},
            "rms_norm_eps": 1e-05,
            "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
                             "original_max_position_embeddings": 4096, "rope_type": "yarn",
                             "truncate": False},
            "rope_theta": 150000, "router_aux_loss_coef": 0.9, "sliding_window": 128,
            "swiglu_limit": 7.0, "tie_word_embeddings": False,
            "transformers_version": "4.55.0.dev0", "use_cache": True, "vocab_size": 201088}


def tessera_sets(fx=FX):
    """The run config of the same model (--set keys; docs/moe.md "gpt-oss's experts")."""
    y = fx["yarn"]
    s = {"model.n_layer": fx["L"], "model.d_model": fx["C"], "model.n_head": fx["NH"],
         "model.n_kv_head": fx["KVH"], "model.head_dim": fx["hs"],
         "model.intermediate_size": fx["FE"], "model.vocab_size": hf.V,
         "model.vocab_multiple": hf.VOCAB_MULTIPLE, "model.pos": "rope", "model.norm": "rmsnorm",
         "model.mlp": "swiglu", "model.bias": "true", "model.qkv_bias": "false",
         "model.qk_norm": "false", "model.tie_embeddings": "false", "model.norm_eps": repr(fx["eps"]),
         "model.rope_theta": repr(fx["theta"]), "model.rope_scaling": "yarn",
         "model.rope_factor": repr(y["factor"]), "model.rope_beta_fast": repr(y["beta_fast"]),
         "model.rope_beta_slow": repr(y["beta_slow"]),
         "model.rope_original_max_pos": y["original_max_position_embeddings"],
         "model.rope_truncate": str(y["truncate"]).lower(), "model.attn_sinks": "true",
         "model.layer_types": "sliding_attention,full_attention", "model.sliding_window": fx["W"],
         "model.moe_experts": fx["E"], "model.moe_top_k": fx["K"],
         "model.moe_intermediate_size": fx["FE"], "model.moe_every": 1,
         "model.moe_norm_topk": "true", "model.moe_router_bias": "true",
         "model.moe_expert_bias": "true", "model.moe_act": "gptoss",
         "model.swiglu_limit": repr(fx["limit"]),
         "model.moe_aux_loss_coef": repr(fx["aux"] * fx["K"] / fx["L"])}
    return {k: str(v) for k, v in s.items()}


def attention(sd, p, h, cos, sin, cj, sliding):
    Bn, Tn, _ = h.shape
    NH, KVH, hs = cj["num_attention_heads"], cj["num_key_value_heads"], cj["head_dim"]

    def lin(x, n):
        return x @ sd[f"{p}self_attn.{n}.weight"].T + sd[f"{p}self_attn.{n}.bias"]
    q = lin(h, "q_proj").view(Bn, Tn, NH, hs).transpose(1, 2)
    k = lin(h, "k_proj").view(Bn, Tn, KVH, hs).transpose(1, 2)
    v = lin(h, "v_proj").view(Bn, Tn, KVH, hs).transpose(1, 2)
    q, k = q * cos + hf.rotate_half(q) * sin, k * cos + hf.rotate_half(k) * sin
    k, v = k.repeat_interleave(NH // KVH, dim=1), v.repeat_interleave(NH // KVH, dim=1)
    pos = torch.arange(Tn)
    mask = pos[None, :] <= pos[:, None]
    if sliding:
        mask = mask & (pos[:, None] - pos[None, :] < cj["sliding_window"])
    s = ((q @ k.transpose(-1, -2)) * hs ** -0.5).masked_fill(~mask, float("-inf"))
    sinks = sd[p + "self_attn.sinks"].reshape(1, -1, 1, 1).expand(Bn, NH, Tn, 1)
    probs = F.softmax(torch.cat([s, sinks], dim=-1), dim=-1)[..., :-1]  # the sink dropped
    return lin((probs @ v).transpose(1, 2).reshape(Bn, Tn, NH * hs), "o_proj")


def experts(sd, p, h, cj):
    logits = h @ sd[p + "mlp.router.weight"].T + sd[p + "mlp.router.bias"]
    top, sel = torch.topk(logits, cj["num_experts_per_tok"], dim=-1)
    top = F.softmax(top, dim=-1)
    lim, out = cj["swiglu_limit"], torch.zeros_like(h)
    for e in range(cj["num_local_experts"]):
        gu = h @ sd[p + "mlp.experts.gate_up_proj"][e] + sd[p + "mlp.experts.gate_up_proj_bias"][e]
        gate, up = gu[..., ::2].clamp(max=lim), gu[..., 1::2].clamp(min=-lim, max=lim)
        y = ((up + 1) * gate * torch.sigmoid(gate * ALPHA)) @ sd[p + "mlp.experts.down_proj"][e]
        y = y + sd[p + "mlp.experts.down_proj_bias"][e]
        out = out + (top * (sel == e)).sum(-1, keepdim=True) * y
    return out


def forward(sd, cj, idx):
    """Logits (B, T, V) of GptOssForCausalLM on the token rows idx (B, T), float64."""
    Tn, hs, eps, y = idx.shape[1], cj["head_dim"], cj["rms_norm_eps"], cj["rope_scaling"]
    scaling = torch_llama.YarnScaling(y["factor"], y["beta_fast"], y["beta_slow"],
                                      y["original_max_position_embeddings"], y["truncate"])
    inv, att = torch_llama.yarn_inv_freq(hs, cj["rope_theta"], scaling)
    ang = torch.arange(Tn, dtype=torch.float64)[:, None] * inv[None, :]
    emb = torch.cat((ang, ang), dim=-1)
    cos, sin = emb.cos() * att, emb.sin() * att
    x = sd["model.embed_tokens.weight"][idx]
    for i in range(cj["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = hf.rms_norm(x, sd[p + "input_layernorm.weight"], eps)
        x = x + attention(sd, p, h, cos, sin, cj, cj["layer_types"][i] == "sliding_attention")
        x = x + experts(sd, p, hf.rms_norm(x, sd[p + "post_attention_layernorm.weight"], eps), cj)
    return hf.rms_norm(x, sd["model.norm.weight"], eps) @ sd["lm_head.weight"].T


def bf16_raw(t):
    return t.to(torch.float32).to(torch.bfloat16).view(torch.int16).numpy().astype("<i2").tobytes()


def write_dir(d, sd, packed, mxfp4):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config_json(mxfp4=mxfp4), f, indent=2)
    entries = []
    for name, t in sd.items():
        if mxfp4 and name in packed:
            b, s = packed[name]
            entries.append((name + "_blocks", "U8", b.shape, b.tobytes()))
            entries.append((name + "_scales", "U8", s.shape, s.tobytes()))
        else:
            entries.append((name, "BF16", tuple(t.shape), bf16_raw(t)))
    hf.write_safetensors(os.path.join(d, "model.safetensors"), entries, {"format": "pt"})


def make_all(root):
    """OUT_ROOT/gptoss_bf16 and OUT_ROOT/gptoss_mxfp4, each with fixture.json and logits.npy."""
    sd, packed = weights()
    toks = hf.tokens(FX["seed"])
    idx = torch.as_tensor(np.stack([toks[k * hf.T:k * hf.T + hf.T] for k in range(hf.B)]),
                          dtype=torch.long)
    with torch.no_grad():
        logits = forward(sd, config_json(), idx)
    dirs = {}
    for name, mx in (("gptoss_bf16", False), ("gptoss_mxfp4", True)):
        d = dirs[name] = os.path.join(root, name)
        write_dir(d, sd, packed, mx)
        np.save(os.path.join(d, "logits.npy"), logits.numpy())
        with open(os.path.join(d, "fixture.json"), "w") as f:
            json.dump({"name": name, "model_type": "gpt_oss", "B": hf.B, "T": hf.T,
                       "tokens": [int(t) for t in toks], "sets": tessera_sets(),
                       "note": "script-written by tests/reference/hf_fixture_gptoss.py, not by "
                               "transformers' save_pretrained"}, f)
    return dirs


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: hf_fixture_gptoss.py OUT_ROOT")
    for n, d in make_all(sys.argv[1]).items():
        print(f"{n}: {d}")
