#!/usr/bin/env python3
"""hf_fixture_qwen35.py — tiny Qwen 3.5 directories (model_type "qwen3_5_text": Qwen3_5ForCausalLM,
and "qwen3_5_moe": Qwen3_5MoeForConditionalGeneration, the vision-language class the hub ships),
written by script, with the logits of a float64 PyTorch forward of each (logits.npy) and of the
same forward in float32 (logits_fp32.npy: how far fp32 arithmetic itself lands from float64 on it).

    /usr/bin/python3 tests/reference/hf_fixture_qwen35.py OUT_ROOT   # OUT_ROOT/<name>/ each

SCRIPT-WRITTEN, not saved by transformers (not on this machine), in the layout of transformers'
modular_qwen3_5.py / modular_qwen3_5_moe.py:
  Qwen3_5GatedDeltaNet: linear_attn.in_proj_qkv (2 HK dk + HV dv, C) whose output is split
  [all q heads | all k heads | all v heads] (the order the conv1d reads), in_proj_z (HV dv, C),
  in_proj_b, in_proj_a (HV, C); value head h reads key head h // (HV / HK) (repeat_interleave);
  everything else of the layer as Qwen3NextGatedDeltaNet;
  Qwen3_5MoeSparseMoeBlock: Qwen3NextSparseMoeBlock with the experts stacked
  (mlp.experts.gate_up_proj (E, 2 FE, C): expert e's rows [gate | up]; mlp.experts.down_proj
  (E, C, FE)) and Qwen3VLMoeTextTopKRouter (softmax, top k, always renormalised), in every layer;
  the VL class: the decoder under model.language_model., lm_head.weight at the top, the vision
  tower model.visual.* and the multi-token-prediction mtp.* beside it (a few tensors of each here:
  tessera reads neither), config.json's text keys in text_config, RoPE in rope_parameters with
  mrope_section (equal streams for text: ordinary partial RoPE).
The maths is Qwen3-Next's, so the float64 forward is hf_fixture_qwen3next.py's, run on the same
weights re-laid into Qwen3-Next's fused layout (to_next): the re-lay is the part under test, and
it is written here from the modular file's semantics, independently of tessera's tables.
"""
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_fixture as base  # noqa: E402  (write_weights, tokens, B, T, V)
import hf_fixture_qwen3next as nx  # noqa: E402  (the float64 forward, state_dict in Next's layout)

B, T, V = base.B, base.T, base.V

# dense text class: 3 linear + 1 full (full_attention_interval 4), grouped DeltaNet heads 2 : 4;
# the VL MoE class: linear, full, every layer MoE with a gated shared expert, stored in BF16.
FIXTURES = [
    dict(name="qwen35_text", model_type="qwen3_5_text", L=4, C=32, NH=4, KVH=2, hs=16, F=48,
         HK=2, HV=4, dk=8, dv=6, K=4, E=0, topk=0, FE=0, S=0, every=1, norm_topk=True, prf=0.5,
         theta=10000000.0, eps=1e-6, tied=False, types=None, interval=4, dtype="F32"),
    dict(name="qwen35_vl_moe", model_type="qwen3_5_moe", L=2, C=32, NH=2, KVH=1, hs=16, F=40,
         HK=1, HV=2, dk=8, dv=8, K=3, E=4, topk=2, FE=16, S=16, every=1, norm_topk=True,
         prf=0.25, theta=1000000.0, eps=1e-6, tied=False,
         types=["linear_attention", "full_attention"], interval=None, dtype="BF16"),
]
VL = {"qwen3_5": "qwen3_5_text", "qwen3_5_moe": "qwen3_5_moe_text"}
CLASS = {"qwen3_5_text": "Qwen3_5ForCausalLM", "qwen3_5_moe_text": "Qwen3_5MoeForCausalLM",
         "qwen3_5": "Qwen3_5ForConditionalGeneration",
         "qwen3_5_moe": "Qwen3_5MoeForConditionalGeneration"}


def prefix(fx):
    return "model.language_model." if fx["model_type"] in VL else "model."


def mrope_section(fx):
    n = int(fx["hs"] * fx["prf"]) // 2
    return [n - 2 * (n // 3), n // 3, n // 3]  # any split of the n frequencies: text is RoPE


def to35(sd, fx):
    """Qwen3-Next's state dict (hf_fixture_qwen3next.state_dict) in Qwen 3.5's names and layout."""
    HK, HV, dk, dv = fx["HK"], fx["HV"], fx["dk"], fx["dv"]
    r, out, pre = HV // HK, {}, prefix(fx)
    for name, t in sd.items():
        if name == "lm_head.weight":
            out[name] = t
            continue
        rest = name[len("model."):]
        if rest.endswith("in_proj_qkvz.weight"):
            g = t.view(HK, 2 * dk + 2 * r * dv, -1)
            q, k, v, z = torch.split(g, [dk, dk, r * dv, r * dv], dim=1)
            base_ = pre + rest[:-len("in_proj_qkvz.weight")]
            out[base_ + "in_proj_qkv.weight"] = torch.cat([x.reshape(-1, t.shape[1]) for x in (q, k, v)])
            out[base_ + "in_proj_z.weight"] = z.reshape(-1, t.shape[1])
        elif rest.endswith("in_proj_ba.weight"):
            b, a = torch.split(t.view(HK, 2 * r, -1), [r, r], dim=1)
            base_ = pre + rest[:-len("in_proj_ba.weight")]
            out[base_ + "in_proj_b.weight"] = b.reshape(-1, t.shape[1])
            out[base_ + "in_proj_a.weight"] = a.reshape(-1, t.shape[1])
        elif ".mlp.experts." in rest:
            lay = rest.split(".mlp.experts.")[0]
            key = pre + lay + ".mlp.experts."
            if key + "gate_up_proj" not in out:
                src = "model." + lay + ".mlp.experts.%d.%s_proj.weight"
                E = fx["E"]
                out[key + "gate_up_proj"] = torch.stack(
                    [torch.cat([sd[src % (e, "gate")], sd[src % (e, "up")]]) for e in range(E)])
                out[key + "down_proj"] = torch.stack([sd[src % (e, "down")] for e in range(E)])
        else:
            out[pre + rest] = t
    return out


def to_next(sd, fx):
    """Qwen 3.5's state dict back in Qwen3-Next's names and fused layout (for nx.forward)."""
    HK, HV, dk, dv = fx["HK"], fx["HV"], fx["dk"], fx["dv"]
    r, out, pre = HV // HK, {}, prefix(fx)
    for name, t in sd.items():
        if not name.startswith(pre):
            if name == "lm_head.weight":
                out[name] = t
            continue  # model.visual.*, mtp.*
        rest = "model." + name[len(pre):]
        if rest.endswith("in_proj_qkv.weight"):
            st = rest[:-len("in_proj_qkv.weight")]
            q, k, v = torch.split(t, [HK * dk, HK * dk, HV * dv])
            z = sd[name[:-len("qkv.weight")] + "z.weight"]
            parts = [x.reshape(HK, -1, t.shape[1]) for x in (q, k, v, z)]
            out[st + "in_proj_qkvz.weight"] = torch.cat(parts, dim=1).reshape(-1, t.shape[1])
            b = sd[name[:-len("qkv.weight")] + "b.weight"].reshape(HK, r, -1)
            a = sd[name[:-len("qkv.weight")] + "a.weight"].reshape(HK, r, -1)
            out[st + "in_proj_ba.weight"] = torch.cat([b, a], dim=1).reshape(-1, t.shape[1])
        elif rest.endswith(("in_proj_z.weight", "in_proj_b.weight", "in_proj_a.weight")):
            continue
        elif rest.endswith("mlp.experts.gate_up_proj"):
            st = rest[:-len("gate_up_proj")]
            for e in range(t.shape[0]):
                out[st + f"{e}.gate_proj.weight"], out[st + f"{e}.up_proj.weight"] = t[e].chunk(2)
        elif rest.endswith("mlp.experts.down_proj"):
            st = rest[:-len("down_proj")]
            for e in range(t.shape[0]):
                out[st + f"{e}.down_proj.weight"] = t[e]
        else:
            out[rest] = t
    return out


def text_config(fx):
    tc = {"model_type": VL.get(fx["model_type"], fx["model_type"]), "vocab_size": V,
          "hidden_size": fx["C"], "num_hidden_layers": fx["L"],
          "num_attention_heads": fx["NH"], "num_key_value_heads": fx["KVH"], "head_dim": fx["hs"],
          "hidden_act": "silu", "max_position_embeddings": 256, "rms_norm_eps": fx["eps"],
          "rope_parameters": {"rope_type": "default", "rope_theta": fx["theta"],
                              "partial_rotary_factor": fx["prf"],
                              "mrope_section": mrope_section(fx), "mrope_interleaved": True},
          "attention_bias": False, "attention_dropout": 0.0,
          "linear_conv_kernel_dim": fx["K"], "linear_key_head_dim": fx["dk"],
          "linear_value_head_dim": fx["dv"], "linear_num_key_heads": fx["HK"],
          "linear_num_value_heads": fx["HV"], "initializer_range": 0.02,
          "tie_word_embeddings": fx["tied"], "use_cache": True}
    if fx["E"]:
        tc.update(num_experts=fx["E"], num_experts_per_tok=fx["topk"],
                  moe_intermediate_size=fx["FE"], shared_expert_intermediate_size=fx["S"],
                  router_aux_loss_coef=0.001, output_router_logits=False)
    else:
        tc["intermediate_size"] = fx["F"]
    if fx["types"]:
        tc["layer_types"] = fx["types"]
    else:
        tc["full_attention_interval"] = fx["interval"]
    return tc


def config_json(fx):
    mt, dt = fx["model_type"], "float32" if fx["dtype"] == "F32" else "bfloat16"
    if mt not in VL:
        return dict(text_config(fx), architectures=[CLASS[mt]], torch_dtype=dt)
    return {"architectures": [CLASS[mt]], "model_type": mt, "text_config": text_config(fx),
            "vision_config": {"depth": 1, "hidden_size": 16, "out_hidden_size": fx["C"]},
            "image_token_id": 248056, "tie_word_embeddings": fx["tied"], "torch_dtype": dt}


def extras(fx, seed):
    """A few tensors of the vision tower and the multi-token prediction, which tessera skips."""
    if fx["model_type"] not in VL:
        return {}
    g = torch.Generator().manual_seed(seed + 7)
    return {"model.visual.patch_embed.proj.weight": torch.randn(16, 3, 2, 2, generator=g,
                                                                dtype=torch.float64),
            "model.visual.merger.linear_fc2.weight": torch.randn(fx["C"], 16, generator=g,
                                                                 dtype=torch.float64),
            "mtp.fc.weight": torch.randn(fx["C"], 2 * fx["C"], generator=g, dtype=torch.float64)}


def tessera_sets(fx):
    s = nx.tessera_sets(fx)
    if not fx["E"]:  # a dense model: no MoE keys
        s = {k: v for k, v in s.items() if not k.startswith("model.moe_")}
    return s


def fx_of(cj):
    """The fixture dict of a config.json of qwen3_next or a Qwen 3.5 class (nested or flat)."""
    mt = cj["model_type"]
    tc = cj.get("text_config", cj)
    rp = tc.get("rope_parameters") or {}
    E = tc.get("num_experts", 0) if mt != "qwen3_5" and mt != "qwen3_5_text" else 0
    types = tc.get("layer_types")
    return dict(model_type=mt, L=tc["num_hidden_layers"], C=tc["hidden_size"],
                NH=tc["num_attention_heads"], KVH=tc["num_key_value_heads"], hs=tc["head_dim"],
                F=tc.get("intermediate_size", 0), HK=tc["linear_num_key_heads"],
                HV=tc["linear_num_value_heads"], dk=tc["linear_key_head_dim"],
                dv=tc["linear_value_head_dim"], K=tc["linear_conv_kernel_dim"], E=E,
                topk=tc.get("num_experts_per_tok", 0), FE=tc.get("moe_intermediate_size", 0),
                S=tc.get("shared_expert_intermediate_size", 0),
                every=tc.get("decoder_sparse_step", 1), norm_topk=tc.get("norm_topk_prob", True),
                prf=rp.get("partial_rotary_factor", tc.get("partial_rotary_factor", 0.25)),
                theta=rp.get("rope_theta", tc.get("rope_theta", 10000.0)),
                eps=tc["rms_norm_eps"],
                tied=tc.get("tie_word_embeddings", cj.get("tie_word_embeddings", False)),
                types=types, interval=tc.get("full_attention_interval", 4))


def forward_hf(sd, cj, idx):
    """The float64 logits of a qwen3_next or Qwen 3.5 directory's tensors sd (HF names)."""
    fx = fx_of(cj)
    return nx.forward(sd if fx["model_type"] == "qwen3_next" else to_next(sd, fx), fx, idx)


def fp32_logits(sd, fx, idx):
    """The same forward in float32 on the stored values (sd in Next's layout): what fp32
    arithmetic itself gives on this model, the yardstick of tessera's fp32 logits (the text
    fixture has positions where PyTorch's own fp32 forward is 1e-4 off the float64 one)."""
    prev = torch.get_default_dtype()
    torch.set_default_dtype(torch.float32)
    try:
        return nx.forward({k: v.to(torch.float32) for k, v in sd.items()}, fx, idx).to(torch.float64)
    finally:
        torch.set_default_dtype(prev)


def make(root, fx, seed):
    d = os.path.join(root, fx["name"])
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config_json(fx), f, indent=2)
    sd = dict(to35(nx.state_dict(fx, seed), fx), **extras(fx, seed))
    stored = base.write_weights(d, dict(fx, shard=None), sd)
    toks = base.tokens(seed)
    idx = torch.as_tensor(np.stack([toks[k * T:k * T + T] for k in range(B)]), dtype=torch.long)
    with torch.no_grad():
        logits = nx.forward(to_next(stored, fx), fx, idx)
    np.save(os.path.join(d, "logits.npy"), logits.numpy())
    with torch.no_grad():
        np.save(os.path.join(d, "logits_fp32.npy"), fp32_logits(to_next(stored, fx), fx, idx).numpy())
    with open(os.path.join(d, "fixture.json"), "w") as f:
        json.dump({"name": fx["name"], "model_type": fx["model_type"], "dtype": fx["dtype"],
                   "seed": seed, "B": B, "T": T, "tokens": [int(t) for t in toks],
                   "sets": tessera_sets(fx), "skipped": sorted(extras(fx, seed)),
                   "note": "script-written by tests/reference/hf_fixture_qwen35.py, not by "
                           "transformers' save_pretrained"}, f)
    return d


def make_all(root):
    return {fx["name"]: make(root, fx, 3500 + k) for k, fx in enumerate(FIXTURES)}


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: hf_fixture_qwen35.py OUT_ROOT")
    torch.set_default_dtype(torch.float64)
    for name, d in make_all(sys.argv[1]).items():
        print(f"wrote {d}")
