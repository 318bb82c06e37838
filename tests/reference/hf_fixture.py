#!/usr/bin/env python3
"""hf_fixture.py — tiny Hugging Face directories of the Llama family and its mixtures of experts,
written by hand, with the logits of a float64 PyTorch forward of each.

    python3 tests/reference/hf_fixture.py OUT_ROOT     # writes OUT_ROOT/<name>/ for every fixture
                                                       # (FIXTURES and MOE_FIXTURES)
    python3 tests/reference/hf_fixture.py --fuzz-seeds DIR   # tests/fuzz/corpus/hfdir's seeds
                                                            # (+ the issue 67 families')

Each OUT_ROOT/<name>/ holds what transformers' save_pretrained writes for the class — config.json
and model.safetensors (or model-0000k-of-0000n.safetensors + model.safetensors.index.json) in the
published formats — and, for the test, fixture.json (the tessera --set keys of the same model, the
token rows) and logits.npy (float64 (B, T, V): the forward below on the rows).

These directories are SCRIPT-WRITTEN from the published formats (safetensors: u64 little-endian
header length, JSON header, raw little-endian data; config.json keys of LlamaConfig,
MistralConfig, Qwen2Config, Qwen3Config, MixtralConfig, Qwen3MoeConfig), not saved by transformers,
which this machine does not have. The forward follows transformers' modeling_llama / modeling_mistral / modeling_qwen2 /
modeling_qwen3: RMSNorm x * rsqrt(mean(x^2) + eps) * w, rotate_half RoPE (cos = cat(f, f)) with
the default or Llama 3 inv_freq (_compute_llama3_parameters), Qwen 3's per-head q_norm / k_norm
before RoPE, repeat_kv for grouped-query attention, softmax(q k^T / sqrt(head_dim)) under a causal
mask, SwiGLU down(silu(gate(x)) * up(x)), the head tied to embed_tokens or its own lm_head — all
in float64 on the stored (fp32, bf16 or fp16) weights. MoE layers (modeling_mixtral's
MixtralSparseMoeBlock, modeling_qwen3_moe's Qwen3MoeSparseMoeBlock): router logits h gate^T, softmax,
the top k, divided by their sum (Mixtral always, Qwen3-MoE when norm_topk_prob), the weighted sum of
those experts' SwiGLU outputs; Qwen3-MoE's layer i is MoE when (i + 1) % decoder_sparse_step == 0.
"""
import json
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

B, T = 4, 16          # token rows the logits are stored for (the test's first global batch)
N_TOKENS = 2000       # tokens of the data set the test writes (rows are its first B*T+1)
V, VOCAB_MULTIPLE = 100, 128

# name, model_type, sizes, options. dtype: how the weights are stored; shard: bytes per shard
# (None: one model.safetensors).
FIXTURES = [
    dict(name="llama_gqa_tied", model_type="llama", L=2, C=64, NH=4, KVH=2, hs=16, F=96,
         tied=True, theta=500000.0, eps=1e-5, llama3=dict(factor=8.0, low_freq_factor=1.0,
         high_freq_factor=4.0, original_max_position_embeddings=64), dtype="F32", shard=None),
    dict(name="llama_mqa_untied_sharded", model_type="llama", L=2, C=64, NH=4, KVH=1, hs=16, F=80,
         tied=False, theta=10000.0, eps=1e-5, llama3=None, dtype="F32", shard=40000),
    dict(name="llama_mha_biases", model_type="llama", L=2, C=48, NH=4, KVH=4, hs=12, F=64,
         tied=False, theta=10000.0, eps=1e-5, llama3=None, dtype="F32", shard=None, bias=True),
    dict(name="mistral_bf16", model_type="mistral", L=2, C=48, NH=4, KVH=2, hs=12, F=64,
         tied=False, theta=10000.0, eps=1e-6, llama3=None, dtype="BF16", shard=None),
    dict(name="qwen2_qkv_bias", model_type="qwen2", L=2, C=64, NH=4, KVH=2, hs=16, F=96,
         tied=True, theta=1000000.0, eps=1e-6, llama3=None, dtype="F32", shard=None),
    dict(name="qwen3_qknorm_f16", model_type="qwen3", L=2, C=64, NH=4, KVH=2, hs=24, F=96,
         tied=False, theta=1000000.0, eps=1e-6, llama3=None, dtype="F16", shard=None),
]
# Mixtures of experts: E experts of width FE, top K; every: decoder_sparse_step (Qwen3-MoE; its
# other layers have the dense MLP of width F); aux: router_aux_loss_coef (= tessera's
# model.moe_aux_loss_coef x MoE layers / K: docs/moe.md). Not in FIXTURES: test_hf_llama.py runs those through the dense model.
MOE_FIXTURES = [
    dict(name="mixtral_gqa", model_type="mixtral", L=2, C=32, NH=4, KVH=2, hs=8, F=24, FE=24, E=4,
         K=2, every=1, norm_topk=True, aux=0.02, tied=False, theta=1000000.0, eps=1e-5, llama3=None,
         dtype="F32", shard=None),
    dict(name="qwen3_moe_sparse2", model_type="qwen3_moe", L=2, C=32, NH=4, KVH=2, hs=16, F=48,
         FE=24, E=4, K=2, every=2, norm_topk=False, aux=0.004, tied=False, theta=1000000.0,
         eps=1e-6, llama3=None, dtype="F32", shard=30000),
]
# The families of issue 67 (test_hf_families.py): OLMo 2 (post norms, QK-norm over the
# projections), OLMo 3 (+ layer_types: 3 sliding layers of window W, then a full one), Gemma 3
# text (sandwich norms of (1 + w), QK-norm per head, the embedding times sqrt(hidden),
# query_pre_attn_scalar qpas != head_dim, GeGLU with the tanh GELU, layer_types, tied head; its
# sliding layers turn with rope_local_base_freq, its full one with rope_theta and linear scaling
# by 8, as Gemma 3 4B-27B), Gemma 2 (no QK-norm, both soft caps at values that bite, one base
# with linear scaling on every layer, every other layer sliding).
FAMILY_FIXTURES = [
    dict(name="olmo2_post", model_type="olmo2", L=2, C=64, NH=4, KVH=2, hs=16, F=96, tied=False,
         theta=500000.0, eps=1e-6, llama3=None, dtype="F32", shard=None),
    dict(name="olmo3_swa", model_type="olmo3", L=4, C=64, NH=4, KVH=2, hs=16, F=96, tied=False,
         theta=500000.0, eps=1e-6, llama3=None, dtype="F32", shard=None, W=5,
         types=["sliding_attention"] * 3 + ["full_attention"]),
    dict(name="gemma3_text", model_type="gemma3_text", L=3, C=48, NH=4, KVH=1, hs=16, F=64,
         tied=True, theta=1000000.0, eps=1e-6, llama3=None, dtype="F32", shard=None, W=6, qpas=24.0,
         types=["sliding_attention", "sliding_attention", "full_attention"], local=10000.0,
         linear=8.0, caps=(None, None)),
    dict(name="gemma2", model_type="gemma2", L=4, C=48, NH=4, KVH=2, hs=16, F=64, tied=True,
         theta=10000.0, eps=1e-6, llama3=None, dtype="F32", shard=None, W=5, qpas=32.0,
         types=["sliding_attention", "full_attention"] * 2, linear=2.0, caps=(0.5, 2.0)),
    dict(name="smollm3", model_type="smollm3", L=4, C=64, NH=4, KVH=2, hs=16, F=96, tied=True,
         theta=2000000.0, eps=1e-6, llama3=None, dtype="F32", shard=None, nope=[1, 1, 1, 0]),
]
# attention_bias without mlp_bias (tessera's model.attn_bias: biases on q, k, v and o only):
# Llama's (mlp_bias false), Qwen 3's (q_norm / k_norm after the biased projections), OLMo 2's
# (QK-norm over the biased projections). test_hf_attn_bias.py.
ATTN_BIAS_FIXTURES = [
    dict(name="llama_attn_bias", model_type="llama", L=2, C=48, NH=4, KVH=2, hs=12, F=64,
         tied=False, theta=10000.0, eps=1e-5, llama3=None, dtype="F32", shard=None, attn_bias=True),
    dict(name="qwen3_attn_bias", model_type="qwen3", L=2, C=64, NH=4, KVH=2, hs=24, F=96,
         tied=True, theta=1000000.0, eps=1e-6, llama3=None, dtype="F32", shard=None,
         attn_bias=True),
    dict(name="olmo2_attn_bias", model_type="olmo2", L=2, C=64, NH=4, KVH=2, hs=16, F=96,
         tied=False, theta=500000.0, eps=1e-6, llama3=None, dtype="F32", shard=None,
         attn_bias=True),
]
CLASS = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM",
         "qwen3": "Qwen3ForCausalLM", "mixtral": "MixtralForCausalLM",
         "qwen3_moe": "Qwen3MoeForCausalLM", "olmo2": "Olmo2ForCausalLM",
         "olmo3": "Olmo3ForCausalLM", "gemma3_text": "Gemma3ForCausalLM",
         "gemma2": "Gemma2ForCausalLM", "smollm3": "SmolLM3ForCausalLM"}
OLMO = ("olmo2", "olmo3")
GEMMA = ("gemma3_text", "gemma2")
PRE = ("smollm3",)  # Llama's pre-norm block (input_layernorm, post_attention_layernorm = ln2w)
QK_NORM = ("qwen3", "qwen3_moe")


def moe_layer(fx, i):
    return fx.get("E", 0) > 0 and (i + 1) % fx.get("every", 1) == 0


def moe_state(fx, p, w):
    """A MoE layer's router and experts, in module order (Mixtral: w1 w2 w3; Qwen3-MoE:
    gate_proj up_proj down_proj)."""
    C, FE, E, sd = fx["C"], fx["FE"], fx["E"], {}
    if fx["model_type"] == "mixtral":
        sd[p + "block_sparse_moe.gate.weight"] = w(E, C, std=0.5)
        for e in range(E):
            q = f"{p}block_sparse_moe.experts.{e}."
            sd.update({q + "w1.weight": w(FE, C), q + "w2.weight": w(C, FE), q + "w3.weight": w(FE, C)})
    else:
        sd[p + "mlp.gate.weight"] = w(E, C, std=0.5)
        for e in range(E):
            q = f"{p}mlp.experts.{e}."
            sd.update({q + "gate_proj.weight": w(FE, C), q + "up_proj.weight": w(FE, C),
                       q + "down_proj.weight": w(C, FE)})
    return sd


# ---- the weights ---------------------------------------------------------------------------------

def final_norm_and_head(sd, fx, V, C, w, norm):
    """The state dict's end: the final norm and, untied, the LM head (V x C); returns sd."""
    sd["model.norm.weight"] = norm(C)
    if not fx["tied"]:
        sd["lm_head.weight"] = w(V, C, std=0.5)
    return sd


def state_dict(fx, seed):
    """HF name -> float64 tensor, in transformers' state-dict (module) order."""
    if fx["model_type"] in CLASS and fx["model_type"] in OLMO + GEMMA + PRE:
        return family_state_dict(fx, seed)
    g = torch.Generator().manual_seed(seed)
    C, NH, KVH, hs, Fw = fx["C"], fx["NH"], fx["KVH"], fx["hs"], fx["F"]
    qk_norm, bias = fx["model_type"] in QK_NORM, fx.get("bias", False)  # bias: Llama's attention_bias + mlp_bias
    attn = bias or fx.get("attn_bias", False)  # attention_bias alone: q, k, v and o
    qkv_bias = fx["model_type"] == "qwen2" or attn

    def w(*shape, std=0.1):
        return torch.randn(*shape, generator=g, dtype=torch.float64) * std

    def norm(n):
        return 1.0 + w(n, std=0.2)

    Vx = fx.get("V", V)
    sd = {"model.embed_tokens.weight": w(Vx, C, std=0.5)}
    for i in range(fx["L"]):
        p = f"model.layers.{i}."
        for name, rows in (("q", NH * hs), ("k", KVH * hs), ("v", KVH * hs)):
            sd[f"{p}self_attn.{name}_proj.weight"] = w(rows, C)
            if qkv_bias:
                sd[f"{p}self_attn.{name}_proj.bias"] = w(rows, std=0.2)
        sd[p + "self_attn.o_proj.weight"] = w(C, NH * hs)
        if attn:
            sd[p + "self_attn.o_proj.bias"] = w(C, std=0.2)
        if qk_norm:
            sd[p + "self_attn.q_norm.weight"] = norm(hs)
            sd[p + "self_attn.k_norm.weight"] = norm(hs)
        if moe_layer(fx, i):
            sd.update(moe_state(fx, p, w))
        for name, shape in () if moe_layer(fx, i) else (("gate", (Fw, C)), ("up", (Fw, C)), ("down", (C, Fw))):
            sd[f"{p}mlp.{name}_proj.weight"] = w(*shape)
            if bias:
                sd[f"{p}mlp.{name}_proj.bias"] = w(shape[0], std=0.2)
        sd[p + "input_layernorm.weight"] = norm(C)
        sd[p + "post_attention_layernorm.weight"] = norm(C)
    return final_norm_and_head(sd, fx, Vx, C, w, norm)


def to_dtype(t, dtype):
    """(raw little-endian bytes, the float64 values they hold)."""
    if dtype == "F32":
        a = t.numpy().astype("<f4")
        return a.tobytes(), torch.from_numpy(a.astype(np.float64))
    if dtype == "F16":
        a = t.numpy().astype("<f2")
        return a.tobytes(), torch.from_numpy(a.astype(np.float64))
    b = t.to(torch.float32).to(torch.bfloat16)
    raw = b.view(torch.int16).numpy().astype("<i2").tobytes()
    return raw, b.to(torch.float64)


def write_safetensors(path, tensors, meta=None):
    """tensors: [(name, dtype, shape, raw bytes)], written in the given order, the header padded
    with spaces to a multiple of 8 as the reference writer pads it."""
    hdr, at = {}, 0
    if meta:
        hdr["__metadata__"] = meta
    for name, dtype, shape, raw in tensors:
        hdr[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [at, at + len(raw)]}
        at += len(raw)
    text = json.dumps(hdr, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(t[3] for t in tensors))


def write_weights(d, fx, sd):
    """model.safetensors, or shards split as save_pretrained splits (a new shard when the next
    tensor would pass the limit). Returns the stored values as float64."""
    stored, entries = {}, []
    for name, t in sd.items():
        raw, val = to_dtype(t, fx["dtype"])
        stored[name] = val
        entries.append((name, fx["dtype"], tuple(t.shape), raw))
    meta = {"format": "pt"}
    if not fx["shard"]:
        write_safetensors(os.path.join(d, "model.safetensors"), entries, meta)
        return stored
    shards, cur, size = [[]], 0, 0
    for e in entries:
        if cur and cur + len(e[3]) > fx["shard"]:
            shards.append([])
            cur = 0
        shards[-1].append(e)
        cur += len(e[3])
        size += len(e[3])
    n, wmap = len(shards), {}
    for k, part in enumerate(shards):
        fname = f"model-{k + 1:05d}-of-{n:05d}.safetensors"
        write_safetensors(os.path.join(d, fname), part, meta)
        wmap.update({e[0]: fname for e in part})
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": size}, "weight_map": wmap}, f, indent=2, sort_keys=True)
    return stored


def config_json(fx):
    mt = fx["model_type"]
    if mt in OLMO + GEMMA + PRE:
        return family_config_json(fx)
    cj = {"architectures": [CLASS[mt]], "model_type": mt, "vocab_size": fx.get("V", V), "hidden_size": fx["C"],
          "intermediate_size": fx["F"], "num_hidden_layers": fx["L"],
          "num_attention_heads": fx["NH"], "num_key_value_heads": fx["KVH"], "hidden_act": "silu",
          "max_position_embeddings": 2048, "rms_norm_eps": fx["eps"], "rope_theta": fx["theta"],
          "rope_scaling": dict(fx["llama3"], rope_type="llama3") if fx["llama3"] else None,
          "attention_dropout": 0.0, "initializer_range": 0.02, "tie_word_embeddings": fx["tied"],
          "use_cache": True, "bos_token_id": 1, "eos_token_id": 2,
          "torch_dtype": {"F32": "float32", "BF16": "bfloat16", "F16": "float16"}[fx["dtype"]]}
    if fx["hs"] * fx["NH"] != fx["C"] or mt in QK_NORM:
        cj["head_dim"] = fx["hs"]
    if mt == "llama":
        cj.update(attention_bias=fx.get("bias", False) or fx.get("attn_bias", False),
                  mlp_bias=fx.get("bias", False), pretraining_tp=1)
    elif mt in ("mistral", "mixtral"):
        cj["sliding_window"] = None
    else:
        cj.update(use_sliding_window=False, sliding_window=4096, max_window_layers=fx["L"])
        if mt in QK_NORM:
            cj["attention_bias"] = fx.get("attn_bias", False)
    if mt == "mixtral":  # intermediate_size is the experts' width: Mixtral has no dense MLP
        cj.update(intermediate_size=fx["FE"], num_local_experts=fx["E"], num_experts_per_tok=fx["K"],
                  router_jitter_noise=0.0)
    elif mt == "qwen3_moe":
        cj.update(num_experts=fx["E"], num_experts_per_tok=fx["K"], moe_intermediate_size=fx["FE"],
                  norm_topk_prob=fx["norm_topk"], decoder_sparse_step=fx["every"], mlp_only_layers=[])
    if "E" in fx:
        cj.update(router_aux_loss_coef=fx["aux"], output_router_logits=False)
    return cj


def tessera_sets(fx):
    """The run config of the same model (--set keys)."""
    s = {"model.n_layer": fx["L"], "model.d_model": fx["C"], "model.n_head": fx["NH"],
         "model.n_kv_head": fx["KVH"], "model.head_dim": fx["hs"], "model.intermediate_size": fx["F"],
         "model.vocab_size": V, "model.vocab_multiple": VOCAB_MULTIPLE, "model.pos": "rope",
         "model.norm": "rmsnorm", "model.mlp": "swiglu", "model.bias": str(fx.get("bias", False)).lower(),
         "model.norm_eps": repr(fx["eps"]), "model.rope_theta": repr(fx["theta"]),
         "model.qkv_bias": str(fx["model_type"] == "qwen2").lower(),
         "model.attn_bias": str(fx.get("attn_bias", False)).lower(),
         "model.qk_norm": str(fx["model_type"] in QK_NORM).lower(),
         "model.tie_embeddings": str(fx["tied"]).lower()}
    if "E" in fx:
        s.update({"model.moe_experts": fx["E"], "model.moe_top_k": fx["K"],
                  "model.moe_intermediate_size": fx["FE"], "model.moe_every": fx["every"],
                  "model.moe_norm_topk": str(fx["norm_topk"]).lower(),
                  "model.moe_aux_loss_coef": repr(fx["aux"] * fx["K"] / (fx["L"] // fx["every"]))})
    if fx["llama3"]:
        ls = fx["llama3"]
        s.update({"model.rope_scaling": "llama3", "model.rope_factor": ls["factor"],
                  "model.rope_low_freq_factor": ls["low_freq_factor"],
                  "model.rope_high_freq_factor": ls["high_freq_factor"],
                  "model.rope_original_max_pos": ls["original_max_position_embeddings"]})
    return {k: str(v) for k, v in s.items()}


# ---- the forward (transformers' conventions, float64) ---------------------------------------------

def inv_freq(cj, hs):
    f = 1.0 / (cj["rope_theta"] ** (torch.arange(0, hs, 2, dtype=torch.float64) / hs))
    rs = cj.get("rope_scaling")
    if not rs:
        return f
    factor, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
    old = rs["original_max_position_embeddings"]
    wavelen = 2 * math.pi / f
    scaled = torch.where(wavelen > old / lo, f / factor, f)
    smooth = (old / wavelen - lo) / (hi - lo)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < old / hi) & ~(wavelen > old / lo)
    return torch.where(medium, smoothed, scaled)


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def swiglu(h, gate, up, down):
    return (F.silu(h @ gate.T) * (h @ up.T)) @ down.T


def moe_block(h, w, cj):
    """transformers' sparse MoE block (float64): softmax router, top k, optional renormalisation."""
    mix = cj["model_type"] == "mixtral"
    pre = "block_sparse_moe." if mix else "mlp."
    names = ("w1", "w3", "w2") if mix else ("gate_proj", "up_proj", "down_proj")
    probs = F.softmax(h @ w(pre + "gate.weight").T, dim=-1)
    top, sel = torch.topk(probs, cj["num_experts_per_tok"], dim=-1)
    if mix or cj.get("norm_topk_prob", False):
        top = top / top.sum(-1, keepdim=True)
    out = torch.zeros_like(h)
    for e in range(probs.shape[-1]):
        ws = [w(f"{pre}experts.{e}.{n}.weight") for n in names]
        weight = (top * (sel == e)).sum(-1, keepdim=True)  # 0 where e is not among the top k
        out = out + weight * swiglu(h, *ws)
    return out


def forward(sd, cj, idx):
    """Logits (B, T, V) of *ForCausalLM on the token rows idx (B, T)."""
    if cj["model_type"] in OLMO + GEMMA + PRE:
        return family_forward(sd, cj, idx)
    Bn, Tn = idx.shape
    NH, KVH, eps = cj["num_attention_heads"], cj["num_key_value_heads"], cj["rms_norm_eps"]
    hs = cj.get("head_dim") or cj["hidden_size"] // NH
    ang = torch.arange(Tn, dtype=torch.float64)[:, None] * inv_freq(cj, hs)[None, :]
    emb = torch.cat((ang, ang), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    mask = torch.ones(Tn, Tn, dtype=torch.bool).tril()
    x = sd["model.embed_tokens.weight"][idx]
    for i in range(cj["num_hidden_layers"]):
        def w(s):
            return sd.get(f"model.layers.{i}.{s}")

        def lin(h, s):
            b = w(s + ".bias")
            y = h @ w(s + ".weight").T
            return y + b if b is not None else y
        h = rms_norm(x, w("input_layernorm.weight"), eps)
        q = lin(h, "self_attn.q_proj").view(Bn, Tn, NH, hs).transpose(1, 2)
        k = lin(h, "self_attn.k_proj").view(Bn, Tn, KVH, hs).transpose(1, 2)
        v = lin(h, "self_attn.v_proj").view(Bn, Tn, KVH, hs).transpose(1, 2)
        if w("self_attn.q_norm.weight") is not None:
            q = rms_norm(q, w("self_attn.q_norm.weight"), eps)
            k = rms_norm(k, w("self_attn.k_norm.weight"), eps)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(NH // KVH, dim=1)  # repeat_kv
        v = v.repeat_interleave(NH // KVH, dim=1)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(hs)
        a = F.softmax(s.masked_fill(~mask, float("-inf")), dim=-1) @ v
        x = x + lin(a.transpose(1, 2).reshape(Bn, Tn, NH * hs), "self_attn.o_proj")
        h = rms_norm(x, w("post_attention_layernorm.weight"), eps)
        if w("mlp.gate.weight") is not None or w("block_sparse_moe.gate.weight") is not None:
            x = x + moe_block(h, w, cj)
        else:
            x = x + lin(F.silu(lin(h, "mlp.gate_proj")) * lin(h, "mlp.up_proj"), "mlp.down_proj")
    x = rms_norm(x, sd["model.norm.weight"], eps)
    head = sd.get("lm_head.weight", sd["model.embed_tokens.weight"])
    return x @ head.T


# ---- the families of issue 67 (FAMILY_FIXTURES) -----------------------------------------------

def family_state_dict(fx, seed):
    """Olmo2/Olmo3/Gemma3 ForCausalLM's tensors in module order: self_attn (q, k, v, o, q_norm,
    k_norm), mlp (gate, up, down), then the layer's norms. Gemma's norm weights are its w of
    (1 + w), drawn near 0 and rounded to multiples of 2^-20, so that tessera's 1 + w is exact in
    fp32 and the export's w = (1 + w) - 1 gives the same bits back."""
    g = torch.Generator().manual_seed(seed)
    C, NH, KVH, hs, Fw, mt = fx["C"], fx["NH"], fx["KVH"], fx["hs"], fx["F"], fx["model_type"]
    gemma = mt in GEMMA

    def w(*shape, std=0.1):
        return torch.randn(*shape, generator=g, dtype=torch.float64) * std

    def norm(n):
        if gemma:
            return torch.round(w(n, std=0.2) * 2.0 ** 20) / 2.0 ** 20
        return 1.0 + w(n, std=0.2)

    sd = {"model.embed_tokens.weight": w(V, C, std=0.5)}
    qn, kn = (NH * hs, KVH * hs) if mt in OLMO else (hs, hs)  # OLMo: over the projection
    for i in range(fx["L"]):
        p = f"model.layers.{i}."
        for name, rows in (("q", NH * hs), ("k", KVH * hs), ("v", KVH * hs)):
            sd[f"{p}self_attn.{name}_proj.weight"] = w(rows, C)
            if fx.get("attn_bias"):
                sd[f"{p}self_attn.{name}_proj.bias"] = w(rows, std=0.2)
        sd[p + "self_attn.o_proj.weight"] = w(C, NH * hs)
        if fx.get("attn_bias"):
            sd[p + "self_attn.o_proj.bias"] = w(C, std=0.2)
        if mt in OLMO + ("gemma3_text",):  # Gemma 2 and SmolLM3 have no QK-norm
            sd[p + "self_attn.q_norm.weight"] = norm(qn)
            sd[p + "self_attn.k_norm.weight"] = norm(kn)
        sd[p + "mlp.gate_proj.weight"] = w(Fw, C)
        sd[p + "mlp.up_proj.weight"] = w(Fw, C)
        sd[p + "mlp.down_proj.weight"] = w(C, Fw)
        names = (("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                  "post_feedforward_layernorm") if gemma else
                 ("input_layernorm", "post_attention_layernorm") if mt in PRE else
                 ("post_attention_layernorm", "post_feedforward_layernorm"))
        for n in names:
            sd[f"{p}{n}.weight"] = norm(C)
    return final_norm_and_head(sd, fx, V, C, w, norm)


def family_config_json(fx):
    """Olmo2Config / Olmo3Config / Gemma3TextConfig keys as their save_pretrained writes them."""
    mt = fx["model_type"]
    cj = {"architectures": [CLASS[mt]], "model_type": mt, "vocab_size": V, "hidden_size": fx["C"],
          "intermediate_size": fx["F"], "num_hidden_layers": fx["L"],
          "num_attention_heads": fx["NH"], "num_key_value_heads": fx["KVH"],
          "max_position_embeddings": 2048, "rms_norm_eps": fx["eps"], "rope_theta": fx["theta"],
          "rope_scaling": None, "attention_bias": fx.get("attn_bias", False), "attention_dropout": 0.0,
          "initializer_range": 0.02, "tie_word_embeddings": fx["tied"], "use_cache": True,
          "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32"}
    if mt in OLMO + PRE:
        cj["hidden_act"] = "silu"
    if mt in PRE:
        cj.update(mlp_bias=False, use_sliding_window=False, sliding_window=None,
                  no_rope_layers=list(fx["nope"]), no_rope_layer_interval=4)
    if "types" in fx:
        cj.update(sliding_window=fx["W"], layer_types=list(fx["types"]))
    if mt in GEMMA:
        cj.update(head_dim=fx["hs"], hidden_activation="gelu_pytorch_tanh",
                  query_pre_attn_scalar=fx["qpas"], attn_logit_softcapping=fx["caps"][0],
                  final_logit_softcapping=fx["caps"][1])
    if "local" in fx:
        cj["rope_local_base_freq"] = fx["local"]
    if "linear" in fx:
        cj["rope_scaling"] = {"rope_type": "linear", "factor": fx["linear"]}
    return cj


def family_rope(cj, hs, Tn, sliding):
    """cos, sin of a layer: Gemma 3's sliding layers use rope_local_base_freq unscaled
    (modeling_gemma3's rotary_emb_local), every other layer rope_theta with rope_scaling
    (linear: inv_freq / factor, _compute_linear_scaling_rope_parameters)."""
    local = sliding and "rope_local_base_freq" in cj
    theta = cj["rope_local_base_freq"] if local else cj["rope_theta"]
    f = 1.0 / (theta ** (torch.arange(0, hs, 2, dtype=torch.float64) / hs))
    rs = cj.get("rope_scaling")
    if rs and not local:
        assert rs["rope_type"] == "linear"
        f = f / rs["factor"]
    ang = torch.arange(Tn, dtype=torch.float64)[:, None] * f[None, :]
    emb = torch.cat((ang, ang), dim=-1)
    return emb.cos(), emb.sin()


def softcap(x, cap):
    return x if cap is None else torch.tanh(x / cap) * cap


def family_forward(sd, cj, idx):
    """modeling_olmo2 / modeling_olmo3 / modeling_gemma3 in float64: OLMo's q_norm(q_proj(x))
    over the projection, x + post_attention_layernorm(attn(x)), h + post_feedforward_layernorm(
    mlp(h)); Gemma 3's x = embed * sqrt(hidden) (the fp32 factor, as a float32 model casts it),
    norms x * rsqrt(mean(x^2) + eps) * (1 + w), input_layernorm -> attention (per-head q_norm,
    k_norm before RoPE, scores * query_pre_attn_scalar^-0.5) -> post_attention_layernorm, residual,
    pre_feedforward_layernorm -> GeGLU (gelu tanh) -> post_feedforward_layernorm, residual. A
    sliding_attention layer's query i sees keys j with i - W < j <= i."""
    Bn, Tn = idx.shape
    mt, eps = cj["model_type"], cj["rms_norm_eps"]
    gemma = mt in GEMMA
    NH, KVH = cj["num_attention_heads"], cj["num_key_value_heads"]
    hs = cj.get("head_dim") or cj["hidden_size"] // NH
    pos = torch.arange(Tn)
    causal = pos[None, :] <= pos[:, None]
    types = cj.get("layer_types") or ["full_attention"] * cj["num_hidden_layers"]

    def nrm(x, wt):
        return rms_norm(x, 1.0 + wt if gemma else wt, eps)

    x = sd["model.embed_tokens.weight"][idx]
    if gemma:
        x = x * float(np.float32(math.sqrt(cj["hidden_size"])))
    scale = cj["query_pre_attn_scalar"] ** -0.5 if gemma else hs ** -0.5
    for i in range(cj["num_hidden_layers"]):
        def w(s):
            return sd[f"model.layers.{i}.{s}.weight"]

        def lin(h, s):  # attention_bias: the projections' biases, when the file has them
            b, y = sd.get(f"model.layers.{i}.{s}.bias"), h @ w(s).T
            return y + b if b is not None else y
        mask = causal
        cos, sin = family_rope(cj, hs, Tn, types[i] == "sliding_attention")
        if types[i] == "sliding_attention":
            mask = causal & (pos[:, None] - pos[None, :] < cj["sliding_window"])
        pre = mt in PRE
        h = nrm(x, w("input_layernorm")) if gemma or pre else x
        q, k, v = lin(h, "self_attn.q_proj"), lin(h, "self_attn.k_proj"), lin(h, "self_attn.v_proj")
        if mt in OLMO:
            q, k = nrm(q, w("self_attn.q_norm")), nrm(k, w("self_attn.k_norm"))
        q = q.view(Bn, Tn, NH, hs).transpose(1, 2)
        k = k.view(Bn, Tn, KVH, hs).transpose(1, 2)
        v = v.view(Bn, Tn, KVH, hs).transpose(1, 2)
        if mt == "gemma3_text":
            q, k = nrm(q, w("self_attn.q_norm")), nrm(k, w("self_attn.k_norm"))
        if cj.get("no_rope_layers", [1] * (i + 1))[i]:  # SmolLM3's NoPE layers: no rotation
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(NH // KVH, dim=1)
        v = v.repeat_interleave(NH // KVH, dim=1)
        s = softcap((q @ k.transpose(-1, -2)) * scale, cj.get("attn_logit_softcapping"))
        a = F.softmax(s.masked_fill(~mask, float("-inf")), dim=-1) @ v
        a = lin(a.transpose(1, 2).reshape(Bn, Tn, NH * hs), "self_attn.o_proj")
        x = x + (a if pre else nrm(a, w("post_attention_layernorm")))
        h = nrm(x, w("pre_feedforward_layernorm")) if gemma else nrm(x, w("post_attention_layernorm")) if pre else x
        act = F.gelu(h @ w("mlp.gate_proj").T, approximate="tanh") if gemma else F.silu(h @ w("mlp.gate_proj").T)
        m = (act * (h @ w("mlp.up_proj").T)) @ w("mlp.down_proj").T
        x = x + (m if pre else nrm(m, w("post_feedforward_layernorm")))
    x = nrm(x, sd["model.norm.weight"])
    head = sd.get("lm_head.weight", sd["model.embed_tokens.weight"])
    return softcap(x @ head.T, cj.get("final_logit_softcapping"))


def family_sets(fx):
    """The tessera --set keys of a FAMILY_FIXTURES model (docs/models.md)."""
    mt, gemma = fx["model_type"], fx["model_type"] in GEMMA
    s = {"model.n_layer": fx["L"], "model.d_model": fx["C"], "model.n_head": fx["NH"],
         "model.n_kv_head": fx["KVH"], "model.head_dim": fx["hs"], "model.intermediate_size": fx["F"],
         "model.vocab_size": V, "model.vocab_multiple": VOCAB_MULTIPLE, "model.pos": "rope",
         "model.norm": "rmsnorm", "model.mlp": "geglu_tanh" if gemma else "swiglu",
         "model.bias": "false", "model.qkv_bias": "false",
         "model.attn_bias": str(fx.get("attn_bias", False)).lower(), "model.norm_eps": repr(fx["eps"]),
         "model.rope_theta": repr(fx["theta"]),
         "model.qk_norm": str(mt in OLMO + ("gemma3_text",)).lower(),
         "model.qk_norm_scope": "projection" if mt in OLMO else "head",
         "model.norm_placement": "sandwich" if gemma else "pre" if mt in PRE else "post",
         "model.embed_scale": "sqrt_d_model" if gemma else "none",
         "model.tie_embeddings": str(fx["tied"]).lower()}
    if "types" in fx:
        s.update({"model.layer_types": ",".join(fx["types"]), "model.sliding_window": fx["W"]})
    if gemma:
        s["model.query_pre_attn_scalar"] = repr(fx["qpas"])
        s["model.attn_logit_softcapping"] = repr(fx["caps"][0] or 0.0)
        s["model.final_logit_softcapping"] = repr(fx["caps"][1] or 0.0)
    if "local" in fx:
        s["model.rope_local_theta"] = repr(fx["local"])
    if "linear" in fx:
        s.update({"model.rope_scaling": "linear", "model.rope_factor": repr(fx["linear"])})
    if "nope" in fx:
        s["model.no_rope_layers"] = ",".join(str(b) for b in fx["nope"])
    return {k: str(v) for k, v in s.items()}


def tokens(seed):
    return np.random.RandomState(seed).randint(0, V, size=N_TOKENS)


def make(root, fx, seed):
    d = os.path.join(root, fx["name"])
    os.makedirs(d, exist_ok=True)
    cj = config_json(fx)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cj, f, indent=2)
    stored = write_weights(d, fx, state_dict(fx, seed))
    toks = tokens(seed)
    idx = torch.as_tensor(np.stack([toks[k * T:k * T + T] for k in range(B)]), dtype=torch.long)
    with torch.no_grad():
        logits = forward(stored, cj, idx)
    np.save(os.path.join(d, "logits.npy"), logits.numpy())
    with open(os.path.join(d, "fixture.json"), "w") as f:
        json.dump({"name": fx["name"], "model_type": fx["model_type"], "dtype": fx["dtype"],
                   "seed": seed, "B": B, "T": T, "tokens": [int(t) for t in toks],
                   "sets": family_sets(fx) if fx["model_type"] in OLMO + GEMMA + PRE else tessera_sets(fx),
                   "note": "script-written by tests/reference/hf_fixture.py, not by "
                           "transformers' save_pretrained"}, f)
    return d


def write_recipe(path, by, run_dir, data_dir, save_interval, optim, model=None):
    """A one-batch recipe over data_dir (global batch B of T tokens, no samples), written by the
    test named by: the optim group's keys optim, the model group's model (None: no model group,
    config.json gives the model)."""
    model_group = f"model = {{ {model} }};\n" if model else ""
    with open(path, "w") as f:
        f.write(f"""# written by tests/reference/{by}
run_dir = "{run_dir}";
seed = 7;
max_duration = "1ba";
save_interval = "{save_interval}";
global_batch = {B};
micro_batch = 2;
seq_len = {T};
threads = 1;
{model_group}optim = {{ {optim} }};
data = {{ train = "{data_dir}"; shuffle = false; tokenizer = ""; }};
sample = {{ tokens = 0; }};
""")


def make_all(root, fixtures=None):
    return {fx["name"]: make(root, fx, 1000 + k) for k, fx in enumerate(fixtures or FIXTURES)}


FUZZ_SEP = b"\n\x01--8<--\x01\n"  # tests/fuzz/fuzz_common.h


def fuzz_seeds(out):
    """Seeds of tests/fuzz/fuzz_hfdir.c: config.json SEP model.safetensors, or config.json SEP ""
    SEP index SEP shard 1 SEP shard 2, for the harness's tiny models (L 1, d_model 8, 2 heads,
    1 kv head of 4, MLP 8, vocabulary 16, untied)."""
    import tempfile
    os.makedirs(out, exist_ok=True)
    tiny = dict(L=1, C=8, NH=2, KVH=1, hs=4, F=8, V=16, tied=False, theta=10000.0, eps=1e-6,
                llama3=None, shard=None)
    for k, (mt, dtype, sharded) in enumerate((("llama", "F32", False), ("mistral", "BF16", False),
                                              ("qwen2", "F16", True), ("qwen3", "F32", True))):
        fx = dict(tiny, name=mt, model_type=mt, dtype=dtype)
        sd = state_dict(fx, 77 + k)
        if sharded:  # the harness takes 2 shards: a limit of about half the bytes
            size = sum(t.numel() for t in sd.values()) * (4 if dtype == "F32" else 2)
            fx["shard"] = size // 2 + 64
        with tempfile.TemporaryDirectory() as d:
            write_weights(d, fx, sd)
            cj = config_json(fx)
            cj["max_position_embeddings"] = 16
            parts = [json.dumps(cj, indent=2).encode()]
            if sharded:
                idx = json.load(open(os.path.join(d, "model.safetensors.index.json")))
                files = sorted(set(idx["weight_map"].values()))
                if len(files) != 2:
                    sys.exit(f"fuzz seed {mt}: {len(files)} shards, the harness takes 2")
                parts += [b"", open(os.path.join(d, "model.safetensors.index.json"), "rb").read()]
                parts += [open(os.path.join(d, f), "rb").read() for f in files]
            else:
                parts.append(open(os.path.join(d, "model.safetensors"), "rb").read())
        with open(os.path.join(out, f"seed-{mt}"), "wb") as f:
            f.write(FUZZ_SEP.join(parts))


# config.json only (no weights: the harness's import stops at the config check) of the 2026
# families with no fixture here, in the shapes their transformers configs save
GPTOSS_CONFIG = {
    "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "vocab_size": 16,
    "hidden_size": 8, "intermediate_size": 8, "num_hidden_layers": 2, "num_attention_heads": 2,
    "num_key_value_heads": 1, "head_dim": 4, "max_position_embeddings": 16, "rms_norm_eps": 1e-05,
    "rope_theta": 150000.0, "rope_scaling": {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0,
                                             "beta_slow": 1.0, "truncate": False,
                                             "original_max_position_embeddings": 4096},
    "sliding_window": 4, "layer_types": ["sliding_attention", "full_attention"],
    "num_local_experts": 4, "num_experts_per_tok": 2, "router_aux_loss_coef": 0.9,
    "output_router_logits": False, "swiglu_limit": 7.0, "attention_bias": True,
    "attention_dropout": 0.0, "hidden_act": "silu", "initializer_range": 0.02,
    "tie_word_embeddings": False, "use_cache": True, "eos_token_id": 2, "pad_token_id": 1,
    "torch_dtype": "bfloat16", "quantization_config": {"quant_method": "mxfp4",
                                                       "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}}
QWEN3NEXT_CONFIG = {
    "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "vocab_size": 16,
    "hidden_size": 8, "intermediate_size": 8, "num_hidden_layers": 4, "num_attention_heads": 2,
    "num_key_value_heads": 1, "head_dim": 4, "max_position_embeddings": 16, "rms_norm_eps": 1e-06,
    "rope_theta": 10000000.0, "rope_scaling": None, "partial_rotary_factor": 0.25,
    "layer_types": ["linear_attention"] * 3 + ["full_attention"], "full_attention_interval": 4,
    "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 4,
    "linear_value_head_dim": 4, "linear_conv_kernel_dim": 4, "num_experts": 4,
    "num_experts_per_tok": 2, "moe_intermediate_size": 8, "shared_expert_intermediate_size": 8,
    "decoder_sparse_step": 1, "mlp_only_layers": [], "norm_topk_prob": True,
    "router_aux_loss_coef": 0.001, "output_router_logits": False, "attention_bias": False,
    "attention_dropout": 0.0, "hidden_act": "silu", "initializer_range": 0.02,
    "tie_word_embeddings": False, "use_cache": True, "torch_dtype": "bfloat16"}


def fuzz_family_seeds(out):
    """Seeds of fuzz_hfdir for the families of issue 67: FAMILY_FIXTURES' OLMo 2, OLMo 3, Gemma 3
    text, Gemma 2 and SmolLM3 at the harness's sizes (d_model 8, 2 heads, 1 kv head of 4, MLP 8,
    vocabulary 16; their layer patterns, norms, windows and RoPE keys) with their weights, and
    gpt-oss's and Qwen3-Next's config.json alone. The harness builds its model from a config.json
    that hf_config_alone accepts, so the family seeds import whole."""
    import tempfile
    global V
    saved, V = V, 16
    try:
        for k, base in enumerate(FAMILY_FIXTURES):
            fx = dict(base, C=8, NH=2, KVH=1, hs=4, F=8)
            fx["W"] = min(fx.get("W", 4), 4) if "W" in fx else None
            if fx["W"] is None:
                del fx["W"]
            if "qpas" in fx:
                fx["qpas"] = 4.0 if fx["model_type"] == "gemma2" else 8.0
            with tempfile.TemporaryDirectory() as d:
                write_weights(d, fx, family_state_dict(fx, 300 + k))
                cj = config_json(fx)
                cj["max_position_embeddings"] = 16
                parts = [json.dumps(cj, indent=2).encode(),
                         open(os.path.join(d, "model.safetensors"), "rb").read()]
            with open(os.path.join(out, f"seed-{fx['model_type']}"), "wb") as f:
                f.write(FUZZ_SEP.join(parts))
    finally:
        V = saved
    for name, cj in (("gpt_oss", GPTOSS_CONFIG), ("qwen3_next", QWEN3NEXT_CONFIG)):
        with open(os.path.join(out, f"seed-{name}-config"), "wb") as f:
            f.write(FUZZ_SEP.join([json.dumps(cj, indent=2).encode(), b""]))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--fuzz-seeds":
        fuzz_seeds(sys.argv[2])
        fuzz_family_seeds(sys.argv[2])
        sys.exit(0)
    if len(sys.argv) != 2:
        sys.exit("usage: hf_fixture.py OUT_ROOT | --fuzz-seeds DIR")
    for name, d in make_all(sys.argv[1], FIXTURES + MOE_FIXTURES + FAMILY_FIXTURES).items():
        print(f"{name}: {d}")
