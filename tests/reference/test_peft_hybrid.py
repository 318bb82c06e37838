#!/usr/bin/env python3
"""PEFT adapters of a hybrid model (Qwen3-Next: Gated DeltaNet and gated attention; docs/lora.md
"PEFT and the hybrid"; issue 68), without peft installed: PEFT's merge rule W + (alpha / r) B A,
with rank_pattern / alpha_pattern as PEFT applies them, done by hand in float64 on the HF-form
tensors.

A tiny hybrid base (4 layers: linear_attention, full_attention, twice; 2 key heads and 4 value
heads, so in_proj_qkvz / in_proj_ba interleave 2 value heads per key head; the output gate) is
trained, then adapters on every target (all-linear: q, k, v, o, gate, up, down, in_proj_qkvz,
in_proj_ba, out_proj, attn_gate; r 4, alpha 8) from it; then
  - `ckpt export --adapter`: the module names per layer kind (linear_attn.in_proj_qkvz / in_proj_ba
    / out_proj on the linear layers, self_attn.* on the full ones, mlp.* on all), q_proj of rank
    2 r holding q's and attn_gate's adapters (rank_pattern {"q_proj": 8}, alpha_pattern
    {"q_proj": 16}: the same scale), A equal to the checkpoint's (stacked per layer kind) bit for
    bit;
  - the adapters applied to the base's own HF export (W + scale B A per module, float64) give
    `ckpt export --merge`'s tensors (tessera's merge, then its HF row order) within fp32
    rounding: so B's rows are in HF's per-head order exactly as the base's rows; every other
    tensor bit for bit;
  - export -> `--init-from` the PEFT directory (one step at lr 1e-30) -> export: byte-identical
    adapter_model.safetensors and adapter_config.json; `tessera eval --ckpt PEFT_DIR` (the base with
    the adapters merged, attn_gate read from q_proj) gives the LoRA checkpoint's loss;
  - PEFT's own form of a gated q_proj (rank r, one A for the query and gate rows, no patterns)
    is read: `ckpt export --merge` of such a directory gives W + (alpha / r) B A on q_proj;
  - refused (exit 1, nothing written): that adapter into a run whose lora.targets lacks
    attn_gate while its gate rows are not zero; the export's q_proj with its rank_pattern but
    not its alpha_pattern (another scale).
Qwen 3.5 (model.hf_model_type = "qwen3_5_text": Qwen3_5ForCausalLM's unfused DeltaNet
projections), the same base and targets trained again, small:
  - `ckpt export --adapter`: in_proj_qkvz's adapter as in_proj_qkv and in_proj_z, in_proj_ba's as
    in_proj_b and in_proj_a (each pair with the checkpoint's A, B's rows split), target_modules
    naming them;
  - those applied by hand (float64) to the base's Qwen 3.5 export = `ckpt export --merge`;
  - export -> `--init-from` the PEFT directory -> export: byte-identical files; a pair whose two
    lora_A differ is refused (exit 1, nothing written).
Run: TESTS=test_peft_hybrid bash tests/run.sh
"""
import json
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_hf_export as X  # noqa: E402  (paths, runs, safetensors by hand)

np = X.np
R, ALPHA, L = 4, 8.0, 4
HYBRID = dict(name="qwen3next", tokenizer="",
              model=dict(n_layer=L, d_model=64, n_head=4, n_kv_head=2, vocab_size=100,
                         vocab_multiple=128, norm='"rmsnorm"', pos='"rope"', mlp='"swiglu"',
                         intermediate_size=96, bias="false", tie_embeddings="false",
                         init_std=0.1, qk_norm="true", attn_output_gate="true",
                         layer_types='"linear_attention,full_attention"',
                         linear_num_key_heads=2, linear_num_value_heads=4,
                         linear_key_head_dim=16, linear_value_head_dim=16,
                         partial_rotary_factor=0.25))
LINEAR = [l for l in range(L) if l % 2 == 0]
MODS = {"linear_attn": ["in_proj_qkvz", "in_proj_ba", "out_proj"],
        "self_attn": ["q_proj", "k_proj", "v_proj", "o_proj"],
        "mlp": ["gate_proj", "up_proj", "down_proj"]}
PLAN = 14
N_HYBRID = 10  # the checks of the hybrid model (run); the rest are Qwen 3.5's (run_q35)
EXPORT = [X.TESSERA, "ckpt", "export", "--format", "hf", "--tokenizer", "none"]
Q35 = dict(HYBRID, name="qwen3_5_text", model=dict(HYBRID["model"], hf_model_type='"qwen3_5_text"'))
Q35_MODS = {"linear_attn": ["in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a", "out_proj"],
            "self_attn": MODS["self_attn"], "mlp": MODS["mlp"]}


def modules(l, mods=MODS):
    parents = ["linear_attn" if l in LINEAR else "self_attn", "mlp"]
    return [(p, m) for p in parents for m in mods[p]]


def scale_of(cj, mod):
    r = cj.get("rank_pattern", {}).get(mod, cj["r"])
    return cj.get("alpha_pattern", {}).get(mod, cj["lora_alpha"]) / r


def merged_by_hand(base_w, ad, cj, mods=MODS):
    """base + scale B A for every adapted module (float64), by the PEFT files alone."""
    want = {}
    for l in range(L):
        for p, m in modules(l, mods):
            pre = f"base_model.model.model.layers.{l}.{p}.{m}."
            if pre + "lora_A.weight" not in ad:
                continue
            b, a = (ad[pre + f"lora_{k}.weight"].astype(np.float64) for k in "BA")
            w = f"model.layers.{l}.{p}.{m}.weight"
            want[w] = base_w[w].astype(np.float64) + scale_of(cj, m) * (b @ a)
    return want


def compare_merged(merged_w, base_w, want):
    worst, others = 0.0, True
    for n, w in base_w.items():
        if n in want:
            worst = max(worst, X.rel_err(merged_w[n], want[n]))
        else:
            others &= np.array_equal(merged_w[n], w)
    return worst, others and set(merged_w) == set(base_w)


def main():
    tap = X.Tap(PLAN)
    with tempfile.TemporaryDirectory(prefix="tsr-peft-hybrid-") as tmp:
        tap.section(N_HYBRID, "stopped early", run, tap, tmp)
    with tempfile.TemporaryDirectory(prefix="tsr-peft-q35-") as tmp:
        tap.section(PLAN - N_HYBRID, "the Qwen 3.5 case stopped early", run_q35, tap, tmp)
    return 1 if tap.failed else 0


def lora_step(cfg, base):
    """tessera-train for one LoRA step at lr 1e-30 on the base (a run that changes nothing)."""
    return [X.TRAIN, "--config", cfg, "--set", f"lora.rank={R}", "--set", f"lora.alpha={ALPHA}",
            "--set", f"lora.base={base}", "--set", "max_duration=1ba", "--set",
            "save_interval=1ba", "--set", "optim.lr=1e-30", "--set", "optim.weight_decay=0"]


def check_round_trip(tap, what, cfg, base, peft, tmp):
    """export -> --init-from the PEFT directory -> export: the same files, byte for byte."""
    again, peft2 = os.path.join(tmp, "again"), os.path.join(tmp, "peft2")
    r4, o4 = X.run(lora_step(cfg, base) + ["--init-from", peft, "--set", f"run_dir={again}"])
    r5, o5 = X.run(EXPORT + ["--adapter", again, peft2]) if r4 == 0 else (-1, "")
    same = r5 == 0 and all(open(os.path.join(peft, n), "rb").read() ==
                           open(os.path.join(peft2, n), "rb").read()
                           for n in ("adapter_config.json", "adapter_model.safetensors"))
    tap.ok(same, f"{what}export -> --init-from the PEFT directory (1 step at lr 1e-30) -> export: "
                 f"byte-identical files (exits {r4}, {r5})")
    if not same:
        tap.diag((o4 + o5)[-2000:])


def run(tap, tmp):
    (rc, rc1, rc2), out, cfg, data, base, lora = X.base_and_lora(
        tmp, "hybrid", HYBRID, f"lora.rank={R}", f"lora.alpha={ALPHA}")
    peft, merged, plain = (os.path.join(tmp, d) for d in ("peft", "merged", "plain"))
    ra, oa = X.run(EXPORT + ["--adapter", lora, peft])
    rm, om = X.run(EXPORT + ["--merge", lora, merged])
    rp, op = X.run(EXPORT + [base, plain])
    if not tap.ok(rc == rc1 == rc2 == ra == rm == rp == 0,
                  f"the hybrid base and its LoRA run train; export --adapter, --merge and the "
                  f"base's export exit 0 ({rc}, {rc1}, {rc2}, {ra}, {rm}, {rp})"):
        tap.diag((out + oa + om + op)[-3000:])
        return

    cj = json.load(open(os.path.join(peft, "adapter_config.json")))
    problems, meta, ad = X.st_arrays(os.path.join(peft, "adapter_model.safetensors"))
    names = {f"base_model.model.model.layers.{l}.{p}.{m}.lora_{k}.weight"
             for l in range(L) for p, m in modules(l) for k in "AB"}
    tap.ok(not problems and meta.get("format") == "pt" and set(ad) == names and
           sorted(cj["target_modules"]) == sorted(m for ms in MODS.values() for m in ms),
           f"the PEFT modules per layer kind: {len(names)} tensors (extra "
           f"{sorted(set(ad) - names)[:2]}, missing {sorted(names - set(ad))[:2]}), "
           f"target_modules {cj['target_modules']}")
    q = "base_model.model.model.layers.1.self_attn.q_proj."
    tap.ok(cj["r"] == R and cj["lora_alpha"] == ALPHA and cj["rank_pattern"] == {"q_proj": 2 * R}
           and cj["alpha_pattern"] == {"q_proj": 2 * ALPHA} and
           ad[q + "lora_A.weight"].shape == (2 * R, 64) and ad[q + "lora_B.weight"].shape == (128, 2 * R),
           f"q_proj holds q's and attn_gate's adapters: rank_pattern {cj['rank_pattern']}, "
           f"alpha_pattern {cj['alpha_pattern']}, A {ad[q + 'lora_A.weight'].shape}, "
           f"B {ad[q + 'lora_B.weight'].shape}")

    last = sorted(f for f in os.listdir(lora) if f.startswith("step-"))[-1]
    with X.h5py.File(os.path.join(lora, last), "r") as f:
        ck = {k: f["lora"][k][()] for k in f["lora"].keys()}
    same = True
    for l in range(L):
        s = l // 2  # the layer's slot in its kind's stack
        pre = f"base_model.model.model.layers.{l}."
        if l in LINEAR:
            for t, m in (("in_proj_qkvz", "in_proj_qkvz"), ("in_proj_ba", "in_proj_ba"),
                         ("out_proj", "out_proj")):
                same &= np.array_equal(ad[f"{pre}linear_attn.{m}.lora_A.weight"], ck[f"{t}_A"][s])
            same &= np.array_equal(ad[f"{pre}linear_attn.out_proj.lora_B.weight"], ck["out_proj_B"][s])
        else:
            same &= np.array_equal(ad[f"{pre}self_attn.q_proj.lora_A.weight"],
                                   np.concatenate([ck["q_A"][s], ck["attn_gate_A"][s]]))
            same &= np.array_equal(ad[f"{pre}self_attn.k_proj.lora_B.weight"], ck["k_B"][s])
        same &= np.array_equal(ad[f"{pre}mlp.down_proj.lora_A.weight"], ck["down_A"][l])
    tap.ok(same, "the adapters are the checkpoint's (stacked per layer kind; q_proj's A = [q_A; "
                 "attn_gate_A]) bit for bit")

    _, _, base_w = X.st_arrays(os.path.join(plain, "model.safetensors"))
    _, _, merged_w = X.st_arrays(os.path.join(merged, "model.safetensors"))
    want = merged_by_hand(base_w, ad, cj)
    worst, others = compare_merged(merged_w, base_w, want)
    moved = max(float(np.abs(want[n] - base_w[n]).max()) for n in want)
    tap.ok(worst <= 1e-6 and moved > 1e-5 and others and len(want) == 2 * 3 + 2 * 4 + 4 * 3,
           f"the PEFT adapters on the base's HF tensors (W + scale B A, float64) = export --merge "
           f"on all {len(want)} adapted modules (in_proj_qkvz, in_proj_ba, q_proj in HF's per-head "
           f"order): worst rel err {worst:.2e} <= 1e-6, moved up to {moved:.2e}; every other "
           f"tensor bit for bit: {others}")

    check_round_trip(tap, "", cfg, base, peft, tmp)

    r6, o6 = X.run([X.TESSERA, "eval", "--ckpt", peft, "--val", data, "-s", "eval_samples=8",
                    "-o", os.path.join(tmp, "evp.json")])
    r7, o7 = X.run([X.TESSERA, "eval", "--ckpt", lora, "--val", data, "-s", "eval_samples=8",
                    "-o", os.path.join(tmp, "ev.json")])
    lp, ll = (json.load(open(os.path.join(tmp, f)))["val"][0]["loss"] if r == 0 else None
              for f, r in (("evp.json", r6), ("ev.json", r7)))
    tap.ok(lp is not None and lp == ll, f"tessera eval --ckpt PEFT_DIR (q_proj read into q and "
                                        f"attn_gate) = the LoRA checkpoint's loss: {lp} vs {ll}")
    if lp is None or lp != ll:
        tap.diag((o6 + o7)[-2000:])

    # PEFT's own q_proj adapter: rank r, one A for the query and the gate rows
    shared = os.path.join(tmp, "shared")
    shutil.copytree(peft, shared)
    cj2 = dict(cj, rank_pattern={}, alpha_pattern={})
    json.dump(cj2, open(os.path.join(shared, "adapter_config.json"), "w"), indent=2)
    rs = np.random.RandomState(5)
    for l in range(1, L, 2):
        pre = f"base_model.model.model.layers.{l}.self_attn.q_proj."
        ad[pre + "lora_A.weight"] = rs.uniform(-0.1, 0.1, (R, 64)).astype(np.float32)
        ad[pre + "lora_B.weight"] = rs.uniform(-0.1, 0.1, (128, R)).astype(np.float32)
    write_adapters(os.path.join(shared, "adapter_model.safetensors"), ad)
    merged2 = os.path.join(tmp, "merged2")
    r8, o8 = X.run(EXPORT + ["--merge", shared, merged2])
    worst = None
    if r8 == 0:
        _, _, m2 = X.st_arrays(os.path.join(merged2, "model.safetensors"))
        worst, _ = compare_merged(m2, base_w, merged_by_hand(base_w, ad, cj2))
    tap.ok(worst is not None and worst <= 1e-6,
           f"PEFT's rank-r q_proj adapter (one A for query and gate rows) is read: export of the "
           f"PEFT directory = W + (alpha / r) B A on every module: worst rel err {worst} (exit {r8})")
    if r8 != 0:
        tap.diag(o8[-2000:])

    bad = os.path.join(tmp, "bad")
    r9, o9 = X.run([X.TRAIN, "--config", cfg, "--init-from", shared, "--set", f"run_dir={bad}",
                    "--set", f"lora.rank={R}", "--set", f"lora.alpha={ALPHA}", "--set",
                    f"lora.base={base}", "--set", "lora.targets=q,k,v,o,gate,up,down,in_proj_qkvz,"
                    "in_proj_ba,out_proj"])
    tap.ok(r9 == 1 and "lora.targets has no attn_gate" in o9 and "q_proj.lora_B.weight" in o9 and
           not os.path.exists(bad),
           f"its gate rows into a run without attn_gate: refused (exit {r9}), nothing written")
    if r9 != 1:
        tap.diag(o9[-1500:])

    # the export's q_proj of rank 2 r with its rank_pattern but not its alpha_pattern: another scale
    halfway = os.path.join(tmp, "halfway")
    shutil.copytree(peft, halfway)
    json.dump(dict(cj, alpha_pattern={}), open(os.path.join(halfway, "adapter_config.json"), "w"))
    r10, o10 = X.run([X.TRAIN, "--config", cfg, "--init-from", halfway, "--set", f"run_dir={bad}",
                      "--set", f"lora.rank={R}", "--set", f"lora.alpha={ALPHA}", "--set",
                      f"lora.base={base}"])
    tap.ok(r10 == 1 and "do not keep the adapters' scale" in o10 and not os.path.exists(bad),
           f"q_proj's rank_pattern 2 r without its alpha_pattern (scale alpha / 2r): refused "
           f"(exit {r10}), nothing written")
    if r10 != 1:
        tap.diag(o10[-1500:])


def run_q35(tap, tmp):
    """Qwen 3.5's names: the unfused pairs, the hand merge, the round trip, a pair refused."""
    (rc, rc1, rc2), out, cfg, data, base, lora = X.base_and_lora(
        tmp, "q35", Q35, f"lora.rank={R}", f"lora.alpha={ALPHA}")
    peft, merged, plain = (os.path.join(tmp, d) for d in ("peft", "merged", "plain"))
    ra, oa = X.run(EXPORT + ["--adapter", lora, peft]) if rc2 == 0 else (-1, "")
    rm, om = X.run(EXPORT + ["--merge", lora, merged]) if rc2 == 0 else (-1, "")
    rp, op = X.run(EXPORT + [base, plain]) if rc1 == 0 else (-1, "")
    cj = json.load(open(os.path.join(peft, "adapter_config.json"))) if ra == 0 else {}
    problems, _, ad = X.st_arrays(os.path.join(peft, "adapter_model.safetensors")) if ra == 0 \
        else (["no export"], {}, {})
    names = {f"base_model.model.model.layers.{l}.{p}.{m}.lora_{k}.weight"
             for l in range(L) for p, m in modules(l, Q35_MODS) for k in "AB"}
    last = sorted(f for f in os.listdir(lora) if f.startswith("step-"))[-1] if rc2 == 0 else None
    ck = {}
    if last:
        with X.h5py.File(os.path.join(lora, last), "r") as f:
            ck = {k: f["lora"][k][()] for k in f["lora"].keys()}
    same = bool(ck) and not problems
    for l in LINEAR if same else []:
        pre, s = f"base_model.model.model.layers.{l}.linear_attn.", l // 2
        for t, pair in (("in_proj_qkvz", ("in_proj_qkv", "in_proj_z")),
                        ("in_proj_ba", ("in_proj_b", "in_proj_a"))):
            b = np.concatenate([ad[f"{pre}{m}.lora_B.weight"] for m in pair])
            same &= all(np.array_equal(ad[f"{pre}{m}.lora_A.weight"], ck[f"{t}_A"][s]) for m in pair)
            same &= np.array_equal(b, ck[f"{t}_B"][s])
    ok = rc == rc1 == rc2 == ra == rm == rp == 0
    tap.ok(ok and set(ad) == names and same and
           sorted(cj["target_modules"]) == sorted(m for ms in Q35_MODS.values() for m in ms),
           f"Qwen 3.5: export --adapter writes the unfused pairs ({len(names)} tensors; extra "
           f"{sorted(set(ad) - names)[:2]}, missing {sorted(names - set(ad))[:2]}), each pair "
           f"with the checkpoint's A and its B's rows split; target_modules {cj.get('target_modules')}")
    if not ok:
        tap.diag((out + oa + om + op)[-3000:])
        return
    _, _, base_w = X.st_arrays(os.path.join(plain, "model.safetensors"))
    _, _, merged_w = X.st_arrays(os.path.join(merged, "model.safetensors"))
    want = merged_by_hand(base_w, ad, cj, Q35_MODS)
    worst, others = compare_merged(merged_w, base_w, want)
    tap.ok(worst <= 1e-6 and others and len(want) == 2 * 5 + 2 * 4 + 4 * 3,
           f"Qwen 3.5: the PEFT pairs on the base's Qwen3_5ForCausalLM tensors (W + scale B A, "
           f"float64) = export --merge on all {len(want)} adapted modules: worst rel err "
           f"{worst:.2e} <= 1e-6; every other tensor bit for bit: {others}")
    check_round_trip(tap, "Qwen 3.5: ", cfg, base, peft, tmp)
    odd = os.path.join(tmp, "odd")
    shutil.copytree(peft, odd)
    z = f"base_model.model.model.layers.{LINEAR[0]}.linear_attn.in_proj_z.lora_A.weight"
    ad[z] = ad[z] + np.float32(0.5)
    write_adapters(os.path.join(odd, "adapter_model.safetensors"), ad)
    bad = os.path.join(tmp, "bad")
    r6, o6 = X.run(lora_step(cfg, base) + ["--init-from", odd, "--set", f"run_dir={bad}"])
    tap.ok(r6 == 1 and z in o6 and "one A for both" in o6 and not os.path.exists(bad),
           f"Qwen 3.5: a pair whose lora_A differ (in_proj_z's moved): refused (exit {r6}), "
           f"naming it, nothing written")
    if r6 != 1:
        tap.diag(o6[-1500:])


def write_adapters(path, arrays):
    """A safetensors file of float32 arrays (names sorted), format pt."""
    pairs, data = [("__metadata__", {"format": "pt"})], b""
    for n in sorted(arrays):
        a = np.ascontiguousarray(arrays[n], dtype="<f4")
        pairs.append((n, {"dtype": "F32", "shape": list(a.shape),
                          "data_offsets": [len(data), len(data) + a.nbytes]}))
        data += a.tobytes()
    X.write_st(path, pairs, data)


if __name__ == "__main__":
    sys.exit(main())
