"""hf_fixture_deepseek.py — the float64 forward of a DeepseekV3ForCausalLM directory (config.json and
its weights in transformers' names), for test_hf_clients.py's check of tessera's deepseek_v3 export
(tests/gpu/clients_prep.py; transformers' own class reads the same export on the GPU machine,
tests/gpu/real_clients.py). Composed of the references written from the equations and laid out as
transformers' DeepseekV3 classes: torch_mla.py's decoder (DeepseekV3Attention's tensors, YaRN with
DeepSeek's mscale and mscale_all_dim, interleaved RoPE) with torch_moe.py's MoE in the layers from
first_k_dense_replace on (DeepseekV3TopkRouter: sigmoid scores, e_score_correction_bias for the
choice, n_group groups ranked by their two best, topk_group kept, the weights normalised and times
routed_scaling_factor; DeepseekV3MoE's shared experts beside the routed ones).
"""
import torch

import torch_llama
import torch_mla
import torch_moe


def configs(cj):
    """(MLAConfig, MoEConfig) of config.json cj"""
    rs = cj.get("rope_scaling") or {}
    yarn = None
    if rs.get("rope_type", rs.get("type")) == "yarn":
        yarn = torch_llama.YarnScaling(float(rs["factor"]), float(rs["beta_fast"]), float(rs["beta_slow"]),
                                       int(rs["original_max_position_embeddings"]), bool(rs.get("truncate", True)))
    V, NH = cj["vocab_size"], cj["num_attention_heads"]
    base = dict(V=V, Vp=V, C=cj["hidden_size"], L=cj["num_hidden_layers"], NH=NH, KVH=NH,
                hs=cj["qk_rope_head_dim"], F=cj["intermediate_size"], norm_eps=cj["rms_norm_eps"],
                rope_theta=cj.get("rope_theta", 10000.0), rope_scaling=yarn, qkv_bias=False, qk_norm=False,
                tie_embeddings=bool(cj.get("tie_word_embeddings", False)))
    mla = torch_mla.MLAConfig(**base, qr=cj.get("q_lora_rank") or 0, kvr=cj["kv_lora_rank"],
                              dn=cj["qk_nope_head_dim"], dr=cj["qk_rope_head_dim"], dv=cj["v_head_dim"],
                              interleave=bool(cj.get("rope_interleave", True)), mscale=rs.get("mscale", 0.0),
                              mscale_all_dim=rs.get("mscale_all_dim", 0.0))
    FE = cj["moe_intermediate_size"]
    moe = torch_moe.MoEConfig(**base, E=cj["n_routed_experts"], K=cj["num_experts_per_tok"], FE=FE,
                              S=FE * cj.get("n_shared_experts", 0), moe_every=1,
                              norm_topk=bool(cj.get("norm_topk_prob", True)), aux_coef=0.0, z_coef=0.0,
                              sigmoid=cj.get("scoring_func", "sigmoid") == "sigmoid",
                              method=cj.get("topk_method", "noaux_tc"), n_group=cj.get("n_group", 1),
                              topk_group=cj.get("topk_group", 1), scale=cj.get("routed_scaling_factor", 1.0),
                              dense_layers=cj.get("first_k_dense_replace", 0))
    return mla, moe


def moe_of(sd, p, c):
    """layer prefix p's MoE (transformers' names under p) as torch_moe.MoE"""
    m = torch_moe.MoE(c).double()
    ex = lambda e, s: sd[f"{p}experts.{e}.{s}.weight"]  # noqa: E731
    with torch.no_grad():
        m.router.copy_(sd[p + "gate.weight"])
        if m.corr is not None:
            m.corr.copy_(sd[p + "gate.e_score_correction_bias"])
        m.w1.copy_(torch.stack([torch.cat((ex(e, "gate_proj"), ex(e, "up_proj"))) for e in range(c.E)]))
        m.w2.copy_(torch.stack([ex(e, "down_proj") for e in range(c.E)]))
        if c.S:
            m.shw1.copy_(torch.cat((sd[p + "shared_experts.gate_proj.weight"], sd[p + "shared_experts.up_proj.weight"])))
            m.shw2.copy_(sd[p + "shared_experts.down_proj.weight"])
    return m


def forward(sd, cj, idx):
    """Logits (B, T, V) of DeepseekV3ForCausalLM with the weights sd (float64) on the token rows idx"""
    mla, moe = configs(cj)
    model = torch_mla.DeepSeek(mla).double()
    plain = {}
    for n, t in sd.items():
        name = n[len("model."):] if n.startswith("model.") else n
        if ".mlp." in name and int(name.split(".")[1]) >= moe.dense_layers:
            continue
        plain[name] = t
    for l in range(moe.dense_layers, mla.L):
        model.layers[l].mlp = moe_of(sd, f"model.layers.{l}.mlp.", moe)
    missing, unexpected = model.load_state_dict(plain, strict=False)
    missing = [k for k in missing if ".mlp." not in k or int(k.split(".")[1]) < moe.dense_layers]
    assert not missing and not unexpected, (missing, unexpected)
    return model(idx)[0]
