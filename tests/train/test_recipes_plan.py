#!/usr/bin/env python3
"""test_recipes_plan.py — the Llama / Qwen / MoE / OLMo / Gemma 3 / SmolLM3 / gpt-oss recipes'
`--plan` figures against a hand calculation (and the DeepSeek-V3-architecture ones: issue 84).

For each recipe of configs/ named below, `tessera-train --config R --plan 1` (ddp, nothing
allocated, no data opened) prints the parameter count, FLOPs per token and the fp32 weight memory.
The test computes them by hand from the recipe's own model keys (read from the file, not from
tessera) and compares:
  - parameters: embeddings (V x C, twice when untied) + per layer (q, k, v, o projections with
    n_kv_head key/value heads of head_dim, the q/k/v biases with qkv_bias, the QK-norm weights with
    qk_norm, gate/up/down of the SwiGLU MLP, two norm weights) + the final norm; this must also
    equal the published count of the model (the numbers of the models' Hugging Face pages);
  - mixture of experts (docs/moe.md): a MoE layer has, instead of the dense MLP, a router (E x C)
    and E SwiGLU experts of width moe_intermediate_size (and a shared one of moe_shared_size); the
    active parameters of a token count K of the E experts. The MoE models' cards print rounded
    figures (46.7B, 12.9B active): the hand count must be within one unit of their last digit;
  - the families of issue 67 (docs/models.md): post or sandwich norms (2 or 4 norm weights per
    layer), QK-norm over the projections (n_head + n_kv_head) x head_dim weights (OLMo 2/3); their
    cards print the nominal size ("7B"): the hand count must be within one unit of it; gpt-oss
    adds q/k/v/o biases (model.bias), a sink per head, the router's bias and each expert's
    (2 moe_intermediate_size + d_model); tessera counts those biases as active (dense tensors),
    and gpt-oss's card's active figure leaves out the input embedding;
  - DeepSeek-V3's architecture (docs/models.md "DeepSeek", docs/moe.md "DeepSeek's router"): an
    MLA layer's q_a_proj, its norm and q_b_proj (or q_proj), kv_a_proj_with_mqa, its norm,
    kv_b_proj and o_proj; the first moe_dense_layers layers dense; noaux_tc's correction bias
    (E a MoE layer); the total within 1 % of the published one, the active count within one unit
    of the card's figure; attention's FLOPs 6 n_head (dqk + dv) a key instead of 12 n_head hs;
  - FLOPs per token: 6 N + 12 L (n_head head_dim) T, N the active parameters without an untied
    input embedding (docs/mfu.md); a sliding layer counts min(W, T) keys instead of T (OLMo 3);
    a MoE model's plan also prints the active count, checked too;
  - fp32 weights: 4 bytes per parameter (the printed figure to 0.1 of its unit).
Run: TESTS=recipes_plan bash tests/run.sh   (needs build/tessera-train). TAP; exit 77 without it.
"""
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.environ.get("TSR_ROOT") or os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
from tap import Tap  # noqa: E402

TRAIN = os.path.join(ROOT, os.environ.get("BUILD", "build"), "tessera-train")
if not os.access(TRAIN, os.X_OK):
    print(f"1..0 # SKIP {TRAIN} is missing (run make first)")
    sys.exit(77)

# recipe -> the published parameter count (model card / safetensors index total of the HF model)
PUBLISHED = {
    "llama-3.2-1b": 1235814400,
    "llama-3.2-3b": 3212749824,
    "llama-3.1-8b": 8030261248,
    "qwen2.5-0.5b": 494032768,
    "qwen2.5-7b": 7615616512,
    "qwen3-0.6b": 596049920,
    "qwen3-8b": 8190735360,
}
# MoE recipe -> (total, active) as the model card prints them (Mixtral's blog post and model card:
# 46.7B total, 12.9B active; Qwen3-30B-A3B's card: 30.5B, 3.3B; DBRX's card: 132B, 36B)
PUBLISHED_MOE = {
    "mixtral-8x7b": ("46.7B", "12.9B"),
    "qwen3-30b-a3b": ("30.5B", "3.3B"),
    "dbrx-132b": ("132B", "36B"),
    # OpenAI's gpt-oss model card (table 1): 20.91B total, 3.61B active; 116.83B, 5.13B (active
    # without the input embedding: ACTIVE_NO_EMBEDDING)
    "gpt-oss-20b": ("20.9B", "3.6B"),
    "gpt-oss-120b": ("116.8B", "5.1B"),
}
ACTIVE_NO_EMBEDDING = ("gpt-oss-20b", "gpt-oss-120b")
# issue-67 recipe -> the nominal size of the model card (allenai/OLMo-2-0425-1B, OLMo-2-1124-7B,
# OLMo-2-1124-13B, Olmo-3-1025-7B, Olmo-3-1125-32B)
PUBLISHED_CARD = {
    "olmo2-1b": "1B",
    "olmo2-7b": "7B",
    "olmo2-13b": "13B",
    "olmo3-7b": "7B",
    "olmo3-32b": "32B",
    # google/gemma-3-*-pt (the text model's count; gemma-3-1b-pt: 999,885,952), SmolLM3-3B-Base
    "gemma3-1b": "1B",
    "gemma3-4b": "4B",
    "gemma3-12b": "12B",
    "gemma3-27b": "27B",
    "smollm3-3b": "3B",
}
# DeepSeek-V3-architecture recipe (issue 84) -> (total, active, active without the input embedding)
# as published: the total within 1 % (DeepSeek-V3's card: 671B, 37B active; V2-Lite's: 15.7B,
# 2.4B active; Kimi K2's hub page 1.03T (its card's nominal 1T), 32B active; Moonlight's card: 16B,
# 3B active), the active figure within one unit of its last digit
PUBLISHED_DS = {
    "deepseek-v3": (671.0e9, "37B", False),
    "deepseek-v2-lite": (15.7e9, "2.4B", True),
    "kimi-k2": (1.03e12, "32B", True),
    "moonlight-16b-a3b": (16.0e9, "3B", False),
}
# recipes without a published model: the hand count alone
UNPUBLISHED = ["dbrx-tiny"]


def model_keys(path):
    """The `key = value;` lines of the recipe's model group (and seq_len), as strings."""
    keys, group = {}, None
    for line in open(path, encoding="utf-8"):
        line = line.split("#", 1)[0].strip()
        m = re.match(r"^(\w+)\s*=\s*\{", line)
        if m:
            group = m.group(1)
            continue
        if line.startswith("}"):
            group = None
            continue
        m = re.match(r"^(\w+)\s*=\s*(.*?);$", line)
        if m and group in (None, "model"):
            keys[m.group(1)] = m.group(2).strip('"')
    return keys


def mla_layer(k, C, NH):
    """(parameters of one multi-head latent attention layer, its attention width NH (dqk + dv) / 2)
    (docs/models.md "DeepSeek"): q_a_proj, its norm and q_b_proj (or q_proj), kv_a_proj_with_mqa,
    its norm, kv_b_proj, o_proj"""
    qr, kvr = int(k.get("q_lora_rank", 0)), int(k["kv_lora_rank"])
    dn, dr, dv = int(k["qk_nope_head_dim"]), int(k["qk_rope_head_dim"]), int(k["v_head_dim"])
    q = (C * qr + qr + qr * NH * (dn + dr)) if qr else C * NH * (dn + dr)
    return q + C * (kvr + dr) + kvr + kvr * NH * (dn + dv) + NH * dv * C, NH * (dn + dr + dv) / 2


def by_hand(k):
    """(total parameters, active parameters per token, FLOPs per token) from the model keys."""
    L, C, NH = int(k["n_layer"]), int(k["d_model"]), int(k["n_head"])
    KVH = int(k.get("n_kv_head", NH)) or NH
    hs = int(k.get("head_dim", 0)) or C // NH
    F, V = int(k["intermediate_size"]), int(k["vocab_size"])
    tied = k.get("tie_embeddings", "true") == "true"
    E, K = int(k.get("moe_experts", 0)), int(k.get("moe_top_k", 2))
    FE, S = int(k.get("moe_intermediate_size", 0)) or F, int(k.get("moe_shared_size", 0))
    LM = L // int(k.get("moe_every", 1)) if E else 0  # layers l with (l + 1) % moe_every == 0
    LM -= int(k.get("moe_dense_layers", 0))               # the first layers dense (DeepSeek)
    per = C * NH * hs + 2 * C * KVH * hs + NH * hs * C  # q, k, v, o
    width = NH * hs                                       # attention's FLOPs: 12 width a key
    if int(k.get("kv_lora_rank", 0)):
        per, width = mla_layer(k, C, NH)
    per += (4 if k.get("norm_placement") == "sandwich" else 2) * C  # norm weights (no biases)
    bias = k.get("bias") == "true"
    if k.get("qkv_bias") == "true" or bias:
        per += (NH + 2 * KVH) * hs
    if bias:
        per += C                                          # o_proj's bias
    if k.get("attn_sinks") == "true":
        per += NH
    if k.get("qk_norm") == "true":  # per head (shared by the heads), or over the projections
        per += (NH + KVH) * hs if k.get("qk_norm_scope") == "projection" else 2 * hs
    dense = 3 * C * F + ((2 * F + C) if bias else 0)     # gate, up, down (+ their biases)
    moe = E * C + 3 * C * S                               # router, shared expert
    moe += E if k.get("moe_router_bias") == "true" else 0
    moe += E if k.get("moe_topk_method") == "noaux_tc" else 0  # the correction bias (routercorr)
    expert = 3 * C * FE + ((2 * FE + C) if k.get("moe_expert_bias") == "true" else 0)
    n = V * C * (1 if tied else 2) + L * per + C + (L - LM) * dense + LM * (moe + E * expert)
    active = n - LM * (E - K) * 3 * C * FE                # a token passes through K of the E
    lookup = 0 if tied else V * C  # an untied input embedding does no matmul (docs/mfu.md)
    T, W = int(k["seq_len"]), int(k.get("sliding_window", 0))
    types = [t.strip() for t in k.get("layer_types", "").split(",") if t.strip()]
    keys = sum(min(W, T) if types and types[l % len(types)] == "sliding_attention" else T
               for l in range(L))
    flops = 6 * (active - lookup) + 12 * width * keys
    return n, active, flops


def V_C(cfg):
    """The input embedding's parameters of the recipe cfg."""
    k = model_keys(cfg)
    return int(k["vocab_size"]) * int(k["d_model"])


def near_card(n, figure):
    """n agrees with a model card's "46.7B": within one unit of its last digit (cards round or
    truncate: Qwen3-30B-A3B's 3.35B active parameters are printed 3.3B)."""
    digits = figure[:-1]
    unit = 10 ** -len(digits.split(".")[1]) if "." in digits else 1
    return abs(n / 1e9 - float(digits)) < unit


UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}

RECIPES = (list(PUBLISHED) + list(PUBLISHED_MOE) + list(PUBLISHED_CARD) + list(PUBLISHED_DS)
           + UNPUBLISHED)
tap = Tap(3 * len(RECIPES) + len(PUBLISHED_MOE) + len(PUBLISHED_DS))
for name in RECIPES:
    cfg = os.path.join(ROOT, "configs", f"{name}.cfg")
    n, active, flops = by_hand(model_keys(cfg))
    checks = 3 + (name in PUBLISHED_MOE or name in PUBLISHED_DS)
    r = subprocess.run([TRAIN, "--config", cfg, "--plan", "1", "--set", "data.tokenizer=",
                        "--set", "parallel.sharding=ddp"], capture_output=True, text=True)
    out = r.stdout + r.stderr
    m = re.search(r"params: (\d+) trainable(?:, (\d+) active per token [^;]*)?; FLOPs/token = "
                  r".* = ([0-9.e+]+)", out)
    w = re.search(r"memory per rank \(fp32\): weights ([0-9.]+) (\w+)", out)
    if r.returncode != 0 or not m or not w:
        tap.diag(out[-2000:])
        tap.fail_until(tap.n + checks, f"{name}: --plan exited {r.returncode} without the figures")
        continue
    got_n, got_flops = int(m.group(1)), float(m.group(3))
    got_active = int(m.group(2)) if m.group(2) else got_n  # printed for MoE models only
    if name in PUBLISHED:
        tap.ok(got_n == n == PUBLISHED[name],
               f"{name}: {got_n} parameters printed, {n} by hand, {PUBLISHED[name]} published")
    elif name in PUBLISHED_MOE:
        total, act = PUBLISHED_MOE[name]
        tap.ok(got_n == n and near_card(n, total),
               f"{name}: {got_n} parameters printed, {n} by hand, {total} on the model card")
        card_active = active - (V_C(cfg) if name in ACTIVE_NO_EMBEDDING else 0)
        tap.ok(got_active == active and near_card(card_active, act),
               f"{name}: {got_active} active parameters per token printed, {active} by hand, "
               f"{act} on the model card")
    elif name in PUBLISHED_DS:
        total, act, no_emb = PUBLISHED_DS[name]
        tap.ok(got_n == n and abs(n / total - 1) < 0.01,
               f"{name}: {got_n} parameters printed, {n} by hand, {total:.4g} published (1 %)")
        card_active = active - (V_C(cfg) if no_emb else 0)
        tap.ok(got_active == active and near_card(card_active, act),
               f"{name}: {got_active} active parameters per token printed, {active} by hand, "
               f"{act} on the model card{' (without the input embedding)' if no_emb else ''}")
    elif name in PUBLISHED_CARD:
        tap.ok(got_n == n and near_card(n, PUBLISHED_CARD[name]),
               f"{name}: {got_n} parameters printed, {n} by hand, {PUBLISHED_CARD[name]} on the model card")
    else:
        tap.ok(got_n == n and got_active == active,
               f"{name}: {got_n} parameters ({got_active} active) printed, {n} ({active}) by hand")
    tap.ok(abs(got_flops - flops) <= 5e-4 * flops,
           f"{name}: FLOPs/token {got_flops:.4g} printed, 6N + 12 L H Q T = {flops:.4g} by hand")
    wb = float(w.group(1)) * UNITS[w.group(2)]
    tap.ok(abs(wb - 4 * n) <= 0.06 * UNITS[w.group(2)],  # printed to 0.1 of its unit
           f"{name}: fp32 weights {w.group(1)} {w.group(2)} printed, 4 x {n} bytes by hand")
sys.exit(1 if tap.failed else 0)
