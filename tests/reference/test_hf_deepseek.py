#!/usr/bin/env python3
"""test_hf_deepseek.py — Hugging Face import and export of DeepseekV3ForCausalLM (deepseek_v3,
kimi_k2) and DeepseekV2ForCausalLM (deepseek_v2) (issue 84 item 5; docs/hf.md "DeepSeek").

Fixtures written BY SCRIPT here (transformers is not on this machine): tiny random models in the
published layout: a V3-shaped one (the queries' low-rank path, YaRN with mscales, a dense first
layer then sigmoid/noaux_tc MoE with groups and e_score_correction_bias, one MTP layer
model.layers.2 with its copies of the embedding and head), a V2-Lite-shaped one (q_proj, softmax
greedy, two shared experts) and a Kimi K2-shaped one (model_type kimi_k2, one group). For each:
  - `tessera ckpt import DIR OUT.h5` exits 0;
  - `tessera ckpt export --format hf --dtype fp32` gives every tensor back byte for byte.
FP8: the V3 fixture with its 2-D weights as F8_E4M3 + weight_scale_inv (weight_block_size
[16, 16], so most weights have partial edge blocks) imports to the same checkpoint, bit for bit,
as an F32 twin holding numpy's dequantisation (E4M3 decoded from the specification, times
the block's scale in float32).
Then bad input, exit 2 with no checkpoint written, naming the key or tensor: a huge and a
negative rank, n_group not dividing n_routed_experts, an unknown scoring_func, a scale tensor of
the wrong shape, a NaN scale, an MTP embed_tokens unlike the model's.
Run: TESTS=hf_deepseek bash tests/run.sh   (needs `make`). TAP; exit 1 on failure, 77 without
torch.
"""
import json
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_hf_export as hfe  # noqa: E402  (skips with 77 without torch/h5py or the programs)
import test_hf_families as fam  # noqa: E402
import test_hf_qwen3next as t3n  # noqa: E402  (ckpt_params, import_refusals, replace_tensor)
import numpy as np  # noqa: E402
import torch  # noqa: E402
from hf_fixture import write_safetensors  # noqa: E402
from tap import Tap  # noqa: E402

V, C, L, NH, F = 64, 32, 2, 2, 40
DN, DR, DV, KVR = 8, 4, 6, 16
E, K, FE = 4, 2, 12
BLOCK = 16

FIXTURES = [
    dict(name="v3", model_type="deepseek_v3", arch="DeepseekV3ForCausalLM", qr=24, mtp=1,
         shared=1, scoring="sigmoid", topk="noaux_tc", groups=(2, 1), tied=False),
    dict(name="v2lite", model_type="deepseek_v2", arch="DeepseekV2ForCausalLM", qr=None, mtp=0,
         shared=2, scoring="softmax", topk="greedy", groups=(1, 1), tied=False),
    dict(name="k2", model_type="kimi_k2", arch="DeepseekV3ForCausalLM", qr=24, mtp=1, shared=1,
         scoring="sigmoid", topk="noaux_tc", groups=(1, 1), tied=True),
]


def config_json(fx):
    cj = {"architectures": [fx["arch"]], "model_type": fx["model_type"], "vocab_size": V,
          "hidden_size": C, "intermediate_size": F, "num_hidden_layers": L,
          "num_attention_heads": NH, "num_key_value_heads": NH, "q_lora_rank": fx["qr"],
          "kv_lora_rank": KVR, "qk_nope_head_dim": DN, "qk_rope_head_dim": DR, "v_head_dim": DV,
          "hidden_act": "silu", "max_position_embeddings": 128, "rms_norm_eps": 1e-6,
          "rope_theta": 10000.0, "attention_bias": False, "n_routed_experts": E,
          "num_experts_per_tok": K, "moe_intermediate_size": FE, "n_shared_experts": fx["shared"],
          "scoring_func": fx["scoring"], "topk_method": fx["topk"], "n_group": fx["groups"][0],
          "topk_group": fx["groups"][1], "norm_topk_prob": fx["scoring"] == "sigmoid",
          "routed_scaling_factor": 2.5 if fx["scoring"] == "sigmoid" else 1.0,
          "first_k_dense_replace": 1, "moe_layer_freq": 1,
          "tie_word_embeddings": fx["tied"], "torch_dtype": "float32"}
    if fx["model_type"] != "deepseek_v2":
        cj["num_nextn_predict_layers"] = fx["mtp"]
        cj["rope_interleave"] = True
        cj["rope_scaling"] = {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32,
                              "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0,
                              "mscale_all_dim": 1.0}
    return cj


def layer_tensors(fx, pre, moe, w):
    sd = {}
    if fx["qr"]:
        sd[pre + "self_attn.q_a_proj.weight"] = w(fx["qr"], C)
        sd[pre + "self_attn.q_a_layernorm.weight"] = w(fx["qr"])
        sd[pre + "self_attn.q_b_proj.weight"] = w(NH * (DN + DR), fx["qr"])
    else:
        sd[pre + "self_attn.q_proj.weight"] = w(NH * (DN + DR), C)
    sd[pre + "self_attn.kv_a_proj_with_mqa.weight"] = w(KVR + DR, C)
    sd[pre + "self_attn.kv_a_layernorm.weight"] = w(KVR)
    sd[pre + "self_attn.kv_b_proj.weight"] = w(NH * (DN + DV), KVR)
    sd[pre + "self_attn.o_proj.weight"] = w(C, NH * DV)
    if not moe:
        for n, s in (("gate_proj", (F, C)), ("up_proj", (F, C)), ("down_proj", (C, F))):
            sd[pre + f"mlp.{n}.weight"] = w(*s)
    else:
        sd[pre + "mlp.gate.weight"] = w(E, C)
        if fx["topk"] == "noaux_tc":
            sd[pre + "mlp.gate.e_score_correction_bias"] = w(E)
        for e in range(E):
            for n, s in (("gate_proj", (FE, C)), ("up_proj", (FE, C)), ("down_proj", (C, FE))):
                sd[pre + f"mlp.experts.{e}.{n}.weight"] = w(*s)
        S = fx["shared"] * FE
        for n, s in (("gate_proj", (S, C)), ("up_proj", (S, C)), ("down_proj", (C, S))):
            sd[pre + f"mlp.shared_experts.{n}.weight"] = w(*s)
    sd[pre + "input_layernorm.weight"] = w(C)
    sd[pre + "post_attention_layernorm.weight"] = w(C)
    return sd


def state_dict(fx, seed):
    g = torch.Generator().manual_seed(seed)

    def w(*shape):
        return (torch.randn(*shape, generator=g, dtype=torch.float64) * 0.1).float()
    sd = {"model.embed_tokens.weight": w(V, C)}
    for l in range(L):
        sd.update(layer_tensors(fx, f"model.layers.{l}.", l >= 1, w))
    sd["model.norm.weight"] = w(C)
    if not fx["tied"]:
        sd["lm_head.weight"] = w(V, C)
    head = sd["model.embed_tokens.weight" if fx["tied"] else "lm_head.weight"]
    for d in range(fx["mtp"]):
        pre = f"model.layers.{L + d}."
        sd.update({pre + "enorm.weight": w(C), pre + "hnorm.weight": w(C),
                   pre + "eh_proj.weight": w(C, 2 * C), pre + "shared_head.norm.weight": w(C),
                   pre + "embed_tokens.weight": sd["model.embed_tokens.weight"].clone(),
                   pre + "shared_head.head.weight": head.clone()})
        sd.update(layer_tensors(fx, pre, True, w))
    return sd


def write_dir(d, cj, entries):
    os.makedirs(d, exist_ok=True)
    json.dump(cj, open(os.path.join(d, "config.json"), "w"), indent=1)
    write_safetensors(os.path.join(d, "model.safetensors"), entries)


def f32(name, t):
    return (name, "F32", tuple(t.shape), t.contiguous().numpy().astype("<f4").tobytes())


def e4m3_table():
    """The 256 values of OCP E4M3 (fn): sign, exponent bias 7, 3 mantissa bits, S.1111.111 NaN."""
    v = np.zeros(256, np.float64)
    for b in range(256):
        e, m = (b >> 3) & 15, b & 7
        x = m / 8 * 2.0 ** -6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7)
        v[b] = np.nan if (e == 15 and m == 7) else (-x if b & 128 else x)
    return v


E4M3 = e4m3_table()
FINITE = np.where(np.isfinite(E4M3))[0]


def to_e4m3(x):
    """Codes of the nearest E4M3 values (ties to the lower code: any rounding serves the test)."""
    x = np.clip(x, -448, 448)
    d = np.abs(x.reshape(-1, 1) - E4M3[FINITE].reshape(1, -1))
    return FINITE[d.argmin(1)].astype(np.uint8).reshape(x.shape)


def fp8_forms(sd):
    """The 2-D weights of the attention and MLPs as E4M3 codes + per-block scales (the published
    form), and the F32 twin holding torch's dequantisation of those."""
    fp8, twin = [], []
    for n, t in sd.items():
        quant = t.ndim == 2 and "embed_tokens" not in n and "lm_head" not in n and \
            "shared_head.head" not in n and "mlp.gate.weight" not in n
        if not quant:
            fp8.append(f32(n, t))
            twin.append(f32(n, t))
            continue
        R, Cc = t.shape
        br, bc = -(-R // BLOCK), -(-Cc // BLOCK)
        s = torch.rand(br, bc, dtype=torch.float32) * 0.01 + 0.001
        big = s.repeat_interleave(BLOCK, 0).repeat_interleave(BLOCK, 1)[:R, :Cc]
        q = to_e4m3((t / big).double().numpy())
        fp8.append((n, "F8_E4M3", (R, Cc), q.tobytes()))
        fp8.append(f32(n + "_scale_inv", s))
        deq = E4M3[q].astype(np.float32) * big.numpy()  # numpy's product in float32
        twin.append(f32(n, torch.from_numpy(deq)))
    return fp8, twin


def import_dir(tmp, d, name):
    ck = os.path.join(tmp, name + ".h5")
    rc, out = hfe.run([hfe.TESSERA, "ckpt", "import", d, ck])
    return rc, out, ck


def run_fixture(tap, fx, tmp):
    name = fx["name"]
    d = os.path.join(tmp, name)
    sd = state_dict(fx, 84)
    write_dir(d, config_json(fx), [f32(n, t) for n, t in sd.items()])
    rc, out, ck = import_dir(tmp, d, name)
    if rc:
        tap.diag(out[-1500:])
    tap.ok(rc == 0, f"{name}: tessera ckpt import of the {fx['arch']} ({fx['model_type']}) "
                    f"directory: exit {rc}")
    exp = os.path.join(tmp, name + "_export")
    rc, out = hfe.run([hfe.TESSERA, "ckpt", "export", "--format", "hf", "--dtype", "fp32",
                       "--tokenizer", "none", ck, exp]) if rc == 0 else (-1, "")
    if rc:
        tap.diag(out[-1500:])
    a, b = fam.st_of(d), fam.st_of(exp) if rc == 0 else {}
    diff = sorted(n for n in a if n not in b or a[n] != b[n])
    extra = sorted(set(b) - set(a))
    cj = json.load(open(os.path.join(exp, "config.json"))) if rc == 0 else {}
    keys = [k for k in config_json(fx) if k not in ("torch_dtype",)]
    wrong = [k for k in keys if cj.get(k) != config_json(fx)[k]]
    tap.ok(rc == 0 and a and not diff and not extra and not wrong,
           f"{name}: import -> export: the fixture's {len(a)} tensors byte for byte (different: "
           f"{diff[:3]}, extra: {extra[:3]}), config.json's keys the same (different: {wrong[:4]})")


def fp8_check(tap, tmp):
    fx = FIXTURES[0]
    sd = state_dict(fx, 7)
    fp8, twin = fp8_forms(sd)
    cj = dict(config_json(fx), quantization_config={
        "quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
        "weight_block_size": [BLOCK, BLOCK]})
    d8, dt = os.path.join(tmp, "fp8"), os.path.join(tmp, "fp8_twin")
    write_dir(d8, cj, fp8)
    write_dir(dt, config_json(fx), twin)
    rc1, out1, c1 = import_dir(tmp, d8, "fp8")
    rc2, out2, c2 = import_dir(tmp, dt, "fp8_twin")
    p1 = t3n.ckpt_params(c1) if rc1 == 0 else {}
    p2 = t3n.ckpt_params(c2) if rc2 == 0 else {}
    same = p1 and p1.keys() == p2.keys() and all(np.array_equal(p1[k], p2[k]) for k in p1)
    if rc1 or rc2:
        tap.diag((out1 + out2)[-1500:])
    tap.ok(same, f"FP8 (E4M3, [16, 16] blocks, partial edge blocks): the import equals numpy's "
                 f"dequantisation bit for bit over {len(p1)} datasets (exit {rc1}, {rc2})")
    return d8


def edited(tmp, src, name, **changes):
    d = os.path.join(tmp, name)
    shutil.copytree(src, d)
    p = os.path.join(d, "config.json")
    cj = json.load(open(p))
    cj.update(changes)
    json.dump(cj, open(p, "w"))
    return d


def refusals(tap, tmp, d8):
    v3 = os.path.join(tmp, "v3")
    s = "model.layers.0.self_attn.q_a_proj.weight_scale_inv"
    kv = "model.layers.1.self_attn.kv_b_proj.weight_scale_inv"
    emb = "model.layers.2.embed_tokens.weight"

    def nan_first(dt, shp, raw):
        return dt, shp, np.float32(np.nan).tobytes() + raw[4:]
    cases = [
        ("kv_lora_rank = 10^12", edited(tmp, v3, "r_huge", kv_lora_rank=10 ** 12),
         ["kv_lora_rank", "1000000000000"]),
        ("q_lora_rank = -4", edited(tmp, v3, "r_neg", q_lora_rank=-4), ["q_lora_rank", "-4"]),
        ("n_group = 3 with 4 experts", edited(tmp, v3, "r_group", n_group=3),
         ["n_group = 3", "n_routed_experts"]),
        ("scoring_func = relu", edited(tmp, v3, "r_score", scoring_func="relu"),
         ["scoring_func", "relu"]),
        ("a scale tensor of the wrong shape",
         t3n.replace_tensor(tmp, d8, "r_sshape", s, lambda dt, shp, raw: (dt, (1, 1), raw[:4])),
         [s, "[2, 2]"]),
        ("a NaN scale", t3n.replace_tensor(tmp, d8, "r_snan", kv, nan_first), [kv, "nan"]),
        ("an MTP embed_tokens unlike the model's",
         t3n.replace_tensor(tmp, v3, "r_copy", emb, lambda dt, shp, raw: (dt, shp, bytes(len(raw)))),
         [emb, "differs"]),
    ]
    t3n.import_refusals(tap, tmp, cases)
    return len(cases)


N_REFUSALS = 7


def main():
    tap = Tap(2 * len(FIXTURES) + 1 + N_REFUSALS)
    with tempfile.TemporaryDirectory(prefix="tessera-hfds.") as tmp:
        for fx in FIXTURES:
            tap.section(2, f"{fx['name']} stopped early", run_fixture, tap, fx, tmp)
        d8 = fp8_check(tap, tmp)
        tap.section(N_REFUSALS, "refusals stopped early", refusals, tap, tmp, d8)
    return 1 if tap.failed else 0


if __name__ == "__main__":
    sys.exit(main())
