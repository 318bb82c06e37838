#!/usr/bin/env python3
"""test_qwen3next_plan.py — the Qwen3-Next recipe's `--plan` figures
(configs/qwen3-next-80b-a3b.cfg; issue 68) against a hand count from the recipe's own keys, and
that against the model card.

By hand (docs/deltanet.md "Wiring", docs/moe.md): the embeddings (V x C, twice: untied); per
full-attention layer q, k, v, o (n_kv_head key/value heads of head_dim), the output gate (attngatew,
the gate half of HF's q_proj: n_head x head_dim rows) and the QK-norm weights; per
linear_attention layer the Gated DeltaNet's in_proj_qkv (2 HK dk + HV dv rows), in_proj_z
(HV dv), in_proj_b and in_proj_a (HV each), the depthwise convolution (its channels x K), dt_bias
and A_log (HV), the gated norm (dv) and out_proj; per layer the router (E x C), E SwiGLU experts
and the shared one with its sigmoid gate (model.moe_shared_gate: C per layer), two norms;
the final norm. tessera-train --plan 8 must print that total and active count (K of the E experts),
and the total must be the card's "80B" (79.5 .. 80.5 billion) and, without the embeddings, its
"79B". The Qwen 3.5 recipes (configs/qwen3.5-*.cfg: the same layers, a dense 27B among them) the
same way, each within one unit of its card's total and active billions.
The time plan on 64 H200s (`--plan 64/8 --time`, the recipe's zero3 with no expert parallelism;
docs/planning.md "Mixtures of experts and hybrid layers"), its W = 64 row against the same hand
count: 4 sequences a rank, 4 microbatches; compute = the GEMMs' FLOPs (FLOPs/token less the
attention term, with docs/mfu.md's DeltaNet term D) at the table's printed GEMM rate, attention's
12 (heads head_dim) keys over its 12 full layers at its attention rate, the logits at the
softmax rate, the rest per token x d_model over the L layers plus the MoE's K gathered rows and the
linear layers' CD + HV dv channels, checkpointed (block: every layer's forward again, x 4/3), and
AdamW over N / 64 parameters; the comm column docs/sharding.md's zero3 bytes with G = 64, M = 4;
the step is compute + exposed and tokens/s the step's 1M tokens over it.
Run: TESTS=qwen3next_plan bash tests/run.sh   (needs build/tessera-train). TAP; exit 77 without it.
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
CFG = os.path.join(ROOT, "configs", "qwen3-next-80b-a3b.cfg")
# the Qwen 3.5 recipes (the same layers) -> the card's (total, active) in billions
QWEN35 = {"qwen3.5-27b": (27, 27), "qwen3.5-35b-a3b": (35, 3), "qwen3.5-122b-a10b": (122, 10),
          "qwen3.5-397b-a17b": (397, 17)}
if not os.access(TRAIN, os.X_OK):
    print(f"1..0 # SKIP {TRAIN} is missing (run make first)")
    sys.exit(77)


def keys(path):
    """the recipe's `key = value;` lines (any group), values as strings"""
    out = {}
    for line in open(path, encoding="utf-8"):
        m = re.match(r"^\s*(\w+)\s*=\s*([^;{]*?);", line.split("#", 1)[0])
        if m:
            out[m.group(1)] = m.group(2).strip().strip('"')
    return out


def by_hand(k):
    """(total, active per token) of the recipe's model"""
    i = {n: int(v) for n, v in k.items() if re.fullmatch(r"\d+", v)}
    C, L, hs, NH, KVH = i["d_model"], i["n_layer"], i["head_dim"], i["n_head"], i["n_kv_head"]
    types = [t.strip() for t in k["layer_types"].split(",")]
    LL = sum(types[l % len(types)] == "linear_attention" for l in range(L))
    HK, HV = i["linear_num_key_heads"], i["linear_num_value_heads"]
    dk, dv, K = i["linear_key_head_dim"], i["linear_value_head_dim"], i["linear_conv_kernel_dim"]
    full = C * NH * hs * 2 + 2 * C * KVH * hs + NH * hs * C + 2 * hs  # q, gate, k, v, o, QK-norm
    cd = 2 * HK * dk + HV * dv
    linear = cd * C + HV * dv * C + 2 * HV * C + cd * K + 2 * HV + dv + C * HV * dv
    E, top = i.get("moe_experts", 0), i.get("moe_top_k", 0)
    FE, S = (i["moe_intermediate_size"], i["moe_shared_size"]) if E else (i["intermediate_size"], 0)
    E, top = E or 1, top or 1                  # a dense model: its one SwiGLU, always active
    gate = C if k.get("moe_shared_gate") == "true" else 0
    router = E * C if E > 1 else 0
    shared = router + 3 * C * S + gate + 2 * C  # router, shared expert and gate, two norms
    common = 2 * i["vocab_size"] * C + (L - LL) * full + LL * linear + L * shared + C
    return common + L * E * 3 * C * FE, common + L * top * 3 * C * FE


def time_row(k, out, total, active):
    """the W = 64 row's (compute ms, comm MB) by hand from the printed rates, and the row"""
    i = {n: int(v) for n, v in k.items() if re.fullmatch(r"\d+", v)}
    C, L, V, T = i["d_model"], i["n_layer"], i["vocab_size"], i["seq_len"]
    types = [t.strip() for t in k["layer_types"].split(",")]
    LL = sum(types[l % len(types)] == "linear_attention" for l in range(L))
    HK, HV = i["linear_num_key_heads"], i["linear_num_value_heads"]
    dk, dv = i["linear_key_head_dim"], i["linear_value_head_dim"]
    QD, keys = i["n_head"] * i["head_dim"], (L - LL) * T
    D = 3 * LL * HV * (6 * dk * dv + 2 * min(T, 64) * (3 * dk + 2 * dv))
    fpt = 6 * (active - V * C) + 12 * QD * keys + D
    r = re.search(r"GEMMs ([0-9.]+) TFLOP/s .*attention ([0-9.]+) TFLOP/s .*cross-entropy ([0-9.]+) "
                  r"ps a logit .*the rest ([0-9.]+) ps .*AdamW \+ norm ([0-9.]+) ps", out)
    row = re.search(r"^\s+64\s+8\s+4\s+([0-9.]+)\s+([0-9.]+)\s+[0-9.]+\s+([0-9.]+)\s+([0-9.]+)"
                    r"\s+([0-9]+)", out, re.M)
    if not r or not row:
        return None, None, None
    gemm, att, xent, rest, adam = (float(x) for x in r.groups())
    W, per_rank, M = 64, 256 // 64, 256 // 64   # micro_batch 1
    tok, re_ = per_rank * T, 4 / 3
    units = L * C + L * i["moe_top_k"] * C + LL * (2 * HK * dk + HV * dv + HV * dv)
    ms = ((fpt - 12 * QD * keys) * tok * re_ / (gemm * 1e9) + 12 * QD * keys * tok * re_ / (att * 1e9)
          + tok * V * xent * 1e-9 + tok * units * re_ * rest * 1e-9 + adam * 1e-9 * total / W)
    root = 2 * V * C + C                        # wte, lm_head, the final norm
    Pl, fg = (total - root) / L, (W - 1) / W
    comm = fg * (2 * M * (2 * L - 2) * Pl + 4 * M * L * Pl) + fg * 6 * root
    return ms, comm / 1e6, [float(x) for x in row.groups()]


def main():
    tap = Tap(8 + len(QWEN35))
    total, active = by_hand(keys(CFG))
    r = subprocess.run([TRAIN, "--config", CFG, "--plan", "8"], capture_output=True, text=True)
    m = re.search(r"params: (\d+) trainable, (\d+) active per token", r.stdout + r.stderr)
    if not tap.ok(r.returncode == 0 and m,
                  f"--plan 8 exits 0 with the figures (rc {r.returncode})"):
        tap.diag((r.stdout + r.stderr)[-2000:])
        tap.fail_until(8 + len(QWEN35), "no figures")
        return tap.status()
    got, got_active = int(m.group(1)), int(m.group(2))
    tap.ok(got == total, f"parameters: {got} printed, {total} by hand")
    tap.ok(got_active == active, f"active per token: {got_active} printed, {active} by hand")
    hf = total
    emb = 2 * int(keys(CFG)["vocab_size"]) * int(keys(CFG)["d_model"])
    tap.ok(79.5e9 <= hf < 80.5e9 and 78.5e9 <= hf - emb < 79.5e9,
           f"{hf} ({hf / 1e9:.2f}B; "
           f"{(hf - emb) / 1e9:.2f}B without the embeddings): the card's 80B and 79B non-embedding")
    r = subprocess.run([TRAIN, "--config", CFG, "--plan", "64/8", "--time"], capture_output=True,
                       text=True)
    ms, mb, row = time_row(keys(CFG), r.stdout, total, active)
    if not tap.ok(r.returncode == 0 and row, f"--plan 64/8 --time exits 0 with a W = 64 row "
                  f"(rc {r.returncode}): {row}"):
        tap.diag((r.stdout + r.stderr)[-2000:])
        tap.fail_until(8 + len(QWEN35), "no row")
        return tap.status()
    comp, comm, exposed, step, tps = row
    tap.ok(abs(comp - ms) <= 5e-3 * ms and abs(comm - mb) <= 1e-4 * mb,
           f"W = 64: compute {comp} ms printed, {ms:.2f} by hand; comm {comm} MB a rank printed, "
           f"{mb:.1f} by hand (zero3, G = 64, M = 4)")
    tap.ok(abs(step - (comp + exposed)) <= 0.02 and abs(tps - 256 * 4096 / (step / 1e3)) <= 1,
           f"W = 64: step {step} ms = compute + exposed {exposed}; {tps:.0f} tokens/s")
    context_row(tap, keys(CFG))
    for name, card in QWEN35.items():
        qwen35_row(tap, name, card)
    return tap.status()


def qwen35_row(tap, name, card):
    """a Qwen 3.5 recipe (the same layers: by_hand) against --plan and its card: the card's total
    also counts the vision tower and the multi-token-prediction layer tessera has not (text only),
    so the text model must be within one unit of the card's figures (billions)"""
    cfg = os.path.join(ROOT, "configs", name + ".cfg")
    total, active = by_hand(keys(cfg))
    r = subprocess.run([TRAIN, "--config", cfg, "--plan", "8"], capture_output=True, text=True)
    m = re.search(r"params: (\d+) trainable(?:, (\d+) active)?", r.stdout)
    got = (int(m.group(1)), int(m.group(2) or m.group(1))) if m else None
    near = abs(total / 1e9 - card[0]) <= 1 and abs(active / 1e9 - card[1]) <= 1
    tap.ok(r.returncode == 0 and got == (total, active) and near,
           f"{name}: --plan 8 prints {got}, by hand ({total}, {active}); the card's {card[0]}B "
           f"total, {card[1]}B active")


def context_row(tap, k):
    """parallel.context = 8: the ring over the full layers only, the linear layers' state messages
    (docs/deltanet.md "Context parallelism") by hand: (2N - 2) / N messages of
    B (HV dk dv + (K - 1) CD) fp32 a rank, layer and pass"""
    r = subprocess.run([TRAIN, "--config", CFG, "--set", "parallel.context=8", "--plan", "64/8", "--time"],
                       capture_output=True, text=True)
    i = {n: int(v) for n, v in k.items() if re.fullmatch(r"\d+", v)}
    types = [t.strip() for t in k["layer_types"].split(",")]
    L = i["n_layer"]
    LL = sum(types[l % len(types)] == "linear_attention" for l in range(L))
    HK, HV = i["linear_num_key_heads"], i["linear_num_value_heads"]
    dk, dv, K = i["linear_key_head_dim"], i["linear_value_head_dim"], i["linear_conv_kernel_dim"]
    N, cd = 8, 2 * HK * dk + HV * dv
    mib = (2 * N - 2) / N * (HV * dk * dv + (K - 1) * cd) * 4 / 2**20
    m = re.search(r"the ring goes round the (\d+) attention layers only; the (\d+) linear layers pass "
                  r"their state and convolution tail along the group instead, ([0-9.]+) MiB", r.stdout)
    got = (int(m.group(1)), int(m.group(2)), float(m.group(3))) if m else None
    tap.ok(r.returncode == 0 and got and got[:2] == (L - LL, LL) and abs(got[2] - mib) <= 0.05,
           f"parallel.context = 8: the ring over the {L - LL} full layers, the {LL} linear layers' state "
           f"{mib:.2f} MiB a rank, layer and pass by hand; printed {got}")


if __name__ == "__main__":
    sys.exit(main())
