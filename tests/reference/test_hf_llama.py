#!/usr/bin/env python3
"""test_hf_llama.py — Hugging Face import and export of the Llama family (LlamaForCausalLM,
MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM) through tessera's programs.

Fixtures: hf_fixture.py writes six tiny HF directories BY SCRIPT from the published formats (not
transformers' save_pretrained, which this machine lacks): Llama GQA 4:2 tied with Llama 3
rope_scaling (fp32); Llama MQA untied in 10 shards + index (fp32); Llama with attention_bias and
mlp_bias (q, k, v, o, gate, up, down biases = tessera's model.bias; fp32); Mistral GQA untied (bf16);
Qwen 2 with q/k/v biases, tied (fp32); Qwen 3 with QK-norm and head_dim 24 at hidden 64, untied
(fp16), each with the logits of a float64 forward written after transformers' modeling code.
For each fixture (2 MPI ranks, the fixture's token rows as the first global batch):
  - `tessera-train --init-from FIXTURE`: step 1's loss = the mean cross-entropy of the fixture's
    logits (rel err <= 1e-5: fp32 vs float64, as in test_reference.py);
  - `tessera ckpt export --format hf` of the checkpoint that run wrote (the MQA one and Qwen 3 with
    TSR_HF_MAX_SHARD so they shard; Mistral with --arch mistral): every safetensors file parsed by
    hand (header rules as in test_hf_export.py), the fixture's names and shapes; config.json keys
    equal to the fixture's; every tensor equal to the checkpoint's bit for bit through a mapping
    written here (qkvw rows -> q/k/v_proj, fcw rows -> gate/up_proj, V of Vp rows);
  - the float64 forward of hf_fixture.py on the export gives tessera's step-1 loss of
    `--init-from CKPT` (<= 1e-5), and `--init-from EXPORT` = `--init-from CKPT` bit for bit (step-1
    loss, grad norm, the weights after step 1).
Refusals through tessera-train, exit status and message: a missing tensor, a tensor of another
shape, an unexpected tensor, rope_scaling of type "dynamic", Mistral's sliding_window 8, a run with
another n_kv_head; accepted: an older checkpoint's rotary_emb.inv_freq buffers (same loss); the
sharded fixture into a parallel.sharding = zero3 run (ddp's loss within 1e-6).
Run: TESTS=hf_llama bash tests/run.sh   (needs `make`). TAP; exit 1 on failure, 77 without torch.
"""
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_hf_export as hfe  # noqa: E402  (skips with 77 without torch/h5py or the programs)
import hf_fixture as fxm  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from tap import Tap  # noqa: E402

# fp32 forward (tessera) vs float64 (the fixture): fp32 roundoff over a few dozen dependent ops
# (test_reference.py's TOL_STEP0); a wrong mapping (q/k swapped, gate/up swapped, a missing
# norm or RoPE detail) moves the loss by >= 1e-3.
TOL_FP32 = 1e-5
SHARD = {"llama_mqa_untied_sharded": 40000, "qwen3_qknorm_f16": 50000}
ARCH = {"mistral_bf16": "mistral"}
CHECKS_PER_FIXTURE = 6
N_REFUSALS = 11
N_TOKENIZER = 2
N_BEFORE = 5
BEFORE = ("llama_gqa_tied", "llama_mqa_untied_sharded")
LLAMA3_TOK = os.path.join(hfe.DATA_DIR, "chat", "llama3")  # ./INSTALL fetches it (npm)


def write_cfg(path, run_dir, data_dir):
    """A recipe with a model of its own (--init-from's config.json replaces it)"""
    fxm.write_recipe(path, "test_hf_llama.py", run_dir, data_dir, "1ba",
                     'lr = 1e-2; warmup = "0ba"; weight_decay = 0.1;',
                     f"n_layer = 1; d_model = 8; n_head = 1; vocab_size = {fxm.V}; init_std = 0.1;")


def init_run(fx, cfg, run_dir, src, *extra, ranks=2):
    args = [hfe.TRAIN, "--config", cfg, "--set", f"run_dir={run_dir}", "--init-from", src]
    for k, v in fx["sets"].items():
        args += ["--set", f"{k}={v}"]
    for s in extra:
        args += ["--set", s]
    mpirun = [x if x != "2" else str(ranks) for x in hfe.MPIRUN]  # (its "-np", "2")
    rc, out = hfe.run(mpirun + args)
    return rc, out, hfe.step1(run_dir) if rc == 0 else None


def xent_of(logits, toks):
    tgt = torch.as_tensor(np.stack([toks[k * fxm.T + 1:k * fxm.T + fxm.T + 1] for k in range(fxm.B)]))
    return float(F.cross_entropy(torch.as_tensor(logits).reshape(-1, logits.shape[-1]), tgt.reshape(-1)))


def expected_from_ckpt(ck, cj):
    """HF name -> the fp32 array the export must hold, from the checkpoint's model/ tensors."""
    NH, KVH, C = cj["num_attention_heads"], cj["num_key_value_heads"], cj["hidden_size"]
    hs = cj.get("head_dim") or C // NH
    QD, KD, Fw, V = NH * hs, KVH * hs, cj["intermediate_size"], cj["vocab_size"]
    out = {"model.embed_tokens.weight": ck["wte"][:V], "model.norm.weight": ck["lnfw"]}
    if "lm_head" in ck and ck["lm_head"].size:
        out["lm_head.weight"] = ck["lm_head"][:V]
    for i in range(cj["num_hidden_layers"]):
        p = f"model.layers.{i}."
        rows = {"q": (0, QD), "k": (QD, QD + KD), "v": (QD + KD, QD + 2 * KD)}
        for n, (a, b) in rows.items():
            out[f"{p}self_attn.{n}_proj.weight"] = ck["qkvw"][i][a:b]
            if "qkvb" in ck and ck["qkvb"].size:
                out[f"{p}self_attn.{n}_proj.bias"] = ck["qkvb"][i][a:b]
        out[p + "self_attn.o_proj.weight"] = ck["attprojw"][i]
        if "qnormw" in ck and ck["qnormw"].size:
            out[p + "self_attn.q_norm.weight"] = ck["qnormw"][i]
            out[p + "self_attn.k_norm.weight"] = ck["knormw"][i]
        out[p + "mlp.gate_proj.weight"] = ck["fcw"][i][:Fw]
        out[p + "mlp.up_proj.weight"] = ck["fcw"][i][Fw:]
        out[p + "mlp.down_proj.weight"] = ck["fcprojw"][i]
        if "attprojb" in ck and ck["attprojb"].size:  # Llama's attention_bias + mlp_bias
            out[p + "self_attn.o_proj.bias"] = ck["attprojb"][i]
            out[p + "mlp.gate_proj.bias"] = ck["fcb"][i][:Fw]
            out[p + "mlp.up_proj.bias"] = ck["fcb"][i][Fw:]
            out[p + "mlp.down_proj.bias"] = ck["fcprojb"][i]
        out[p + "input_layernorm.weight"] = ck["ln1w"][i]
        out[p + "post_attention_layernorm.weight"] = ck["ln2w"][i]
    return out


def read_export(d):
    """(problems, {name: float32 array}) of an export's model.safetensors or shards."""
    files = sorted(f for f in os.listdir(d) if f.endswith(".safetensors"))
    problems, ents = [], {}
    idx = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(idx):
        wm = json.load(open(idx))["weight_map"]
        want = sorted(set(wm.values()))
        if files != want:
            problems.append(f"shard files {files} vs the index's {want}")
    for f in files:
        pr, _, _, e = hfe.parse_st(os.path.join(d, f))
        problems += [f"{f}: {p}" for p in pr]
        for n, (dt, sh, raw) in e.items():
            if os.path.exists(idx) and wm.get(n) != f:
                problems.append(f"{n} is in {f}, the index says {wm.get(n)}")
            ents[n] = hfe.as_f32(dt, sh, raw)
    return problems, ents


CONFIG_KEYS = ["model_type", "architectures", "vocab_size", "hidden_size", "intermediate_size",
               "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "rms_norm_eps",
               "rope_theta", "rope_scaling", "tie_word_embeddings", "max_position_embeddings"]


def run_fixture(tap, name, fdir, tmp):
    fx = json.load(open(os.path.join(fdir, "fixture.json")))
    fcj = json.load(open(os.path.join(fdir, "config.json")))
    toks = np.array(fx["tokens"])
    txt, data = os.path.join(tmp, name + ".txt"), os.path.join(tmp, name + "_data")
    with open(txt, "w") as f:
        for i in range(0, len(toks), 16):
            f.write(" ".join(str(t) for t in toks[i:i + 16]) + "\n")
    rc, out = hfe.run([hfe.TESSERA, "shard", "--out", data, "--vocab", str(fxm.V), "--quiet", txt])
    if rc:
        tap.diag(out)
    cfg = os.path.join(tmp, name + ".cfg")
    write_cfg(cfg, os.path.join(tmp, "unused"), data)
    fx["cfg"] = cfg
    ref = xent_of(np.load(os.path.join(fdir, "logits.npy")), toks)

    r0 = os.path.join(tmp, name + "_init")
    rc, out, s = init_run(fx, cfg, r0, fdir)
    e = abs(s["loss"] - ref) / ref if s else math.inf
    if rc or f"checkpoint init-from step 0 | {fdir}" not in out:
        tap.diag(out[-2500:])
    tap.ok(e <= TOL_FP32, f"{name}: --init-from the fixture: step-1 loss {s and s['loss']} vs the "
                          f"float64 forward's {ref:.8f}: rel err {e:.2e} <= {TOL_FP32:g}")

    ckpt = os.path.join(r0, "step-00000001.h5")
    exp = os.path.join(tmp, name + "_export")
    cmd = [hfe.TESSERA, "ckpt", "export", "--format", "hf", "--tokenizer", "none", ckpt, exp]
    if name in ARCH:
        cmd[5:5] = ["--arch", ARCH[name]]
    envx = dict(hfe.env(), TSR_HF_MAX_SHARD=str(SHARD[name])) if name in SHARD else hfe.env()
    r = subprocess.run(cmd, capture_output=True, text=True, env=envx)
    if r.returncode:
        tap.diag(r.stdout + r.stderr)
    problems, ents = read_export(exp) if r.returncode == 0 else (["export failed"], {})
    fnames = set()
    for f in os.listdir(fdir):
        if f.endswith(".safetensors"):
            fnames |= set(hfe.parse_st(os.path.join(fdir, f))[3])
    if set(ents) != fnames:
        problems.append(f"names differ from the fixture's: {sorted(set(ents) ^ fnames)[:4]}")
    sharded = os.path.exists(os.path.join(exp, "model.safetensors.index.json"))
    if sharded != (name in SHARD):
        problems.append(f"sharded = {sharded}, want {name in SHARD}")
    for p in problems[:5]:
        tap.diag(p)
    tap.ok(not problems, f"{name}: export{' (sharded)' if name in SHARD else ''}: the safetensors "
                         f"header rules, the fixture's {len(fnames)} tensor names")

    cj = json.load(open(os.path.join(exp, "config.json"))) if r.returncode == 0 else {}
    bad = [f"{k} = {cj.get(k)!r}, fixture {fcj.get(k)!r}" for k in CONFIG_KEYS if cj.get(k) != fcj.get(k)]
    hs = fcj.get("head_dim") or fcj["hidden_size"] // fcj["num_attention_heads"]
    if cj.get("head_dim") != hs:
        bad.append(f"head_dim = {cj.get('head_dim')}, want {hs}")
    if fcj["model_type"] == "mistral" and cj.get("sliding_window", 0) is not None:
        bad.append("sliding_window is not null")
    for b in bad:
        tap.diag(b)
    tap.ok(not bad, f"{name}: config.json: {', '.join(f'{k}={cj.get(k)}' for k in CONFIG_KEYS[:1] + CONFIG_KEYS[5:])}")

    ck = hfe.model_tensors(ckpt) if os.path.exists(ckpt) else {}
    want = expected_from_ckpt(ck, fcj) if ck else {}
    diff = [n for n in want if n not in ents or ents[n].shape != want[n].shape
            or not np.array_equal(ents[n], want[n])]
    tap.ok(bool(want) and not diff and set(want) == set(ents),
           f"{name}: every exported tensor = the checkpoint's bit for bit (q/k/v and gate/up rows, "
           f"V of Vp rows); different: {diff[:3]}")

    r1 = os.path.join(tmp, name + "_ck")
    rc1, out1, s1 = init_run(fx, cfg, r1, ckpt)
    sd = {n: torch.from_numpy(a.astype(np.float64)) for n, a in ents.items()}
    with torch.no_grad():
        lg = fxm.forward(sd, cj, torch.as_tensor(np.stack([toks[k * fxm.T:k * fxm.T + fxm.T]
                                                           for k in range(fxm.B)]), dtype=torch.long))
    ref2 = xent_of(lg.numpy(), toks)
    e = abs(s1["loss"] - ref2) / ref2 if s1 else math.inf
    if rc1:
        tap.diag(out1[-1500:])
    tap.ok(e <= TOL_FP32, f"{name}: float64 forward on the export {ref2:.8f} vs tessera's step-1 loss "
                          f"from the checkpoint {s1 and s1['loss']}: rel err {e:.2e}")

    r2 = os.path.join(tmp, name + "_exp")
    rc2, out2, s2 = init_run(fx, cfg, r2, exp)
    same_w = False
    if s1 and s2:
        a = hfe.model_tensors(os.path.join(r1, "step-00000001.h5"))
        b = hfe.model_tensors(os.path.join(r2, "step-00000001.h5"))
        same_w = sorted(a) == sorted(b) and all(np.array_equal(a[k], b[k]) for k in a)
    if rc2:
        tap.diag(out2[-1500:])
    tap.ok(bool(s1 and s2 and s1["loss"] == s2["loss"] and s1["grad_norm"] == s2["grad_norm"] and same_w),
           f"{name}: --init-from the export = --init-from the checkpoint bit for bit: step-1 loss "
           f"{s2 and s2['loss']} vs {s1 and s1['loss']}, grad norm, weights after step 1 "
           f"({'equal' if same_w else 'DIFFERENT'})")
    return fx, s


def edit_cfg(key, value):
    """A damage for refusals: sets key to value in the fixture's config.json."""
    def f(d):
        p = os.path.join(d, "config.json")
        cj = json.load(open(p))
        cj[key] = value
        json.dump(cj, open(p, "w"))
    return f


def refusals(tap, tmp, fixtures):
    """Damaged copies of the fixtures: (what, fixture, rc, needles, damage, extra sets)."""
    def edit_st(fn):
        def f(d):
            p = os.path.join(d, "model.safetensors")
            pairs, data = hfe.read_pairs(p)
            pairs, data = fn(pairs, data)
            hfe.write_st(p, pairs, data)
        return f

    def drop(name):
        return lambda pairs, data: hfe.drop_tensor(pairs, data, name)

    def reshape(name):
        def f(pairs, data):
            for k, v in pairs:
                if k == name:
                    v["shape"] = v["shape"][::-1]
            return pairs, data
        return f

    def add(name, shape):
        def f(pairs, data):
            blob = np.ones(shape, dtype="<f4").tobytes()
            at = len(data)
            return pairs + [(name, dict(dtype="F32", shape=list(shape), data_offsets=[at, at + len(blob)]))], data + blob
        return f

    ll, mi = "llama_gqa_tied", "mistral_bf16"
    cases = [
        ("a missing tensor", ll, 2, ["no tensor", "model.layers.1.mlp.up_proj.weight"],
         edit_st(drop("model.layers.1.mlp.up_proj.weight")), []),
        ("k_proj of shape [64, 32]", ll, 2, ["model.layers.0.self_attn.k_proj.weight", "[64, 32]", "needs [32, 64]"],
         edit_st(reshape("model.layers.0.self_attn.k_proj.weight")), []),
        ("an unexpected o_proj.bias", ll, 2, ["unexpected tensor", "model.layers.0.self_attn.o_proj.bias"],
         edit_st(add("model.layers.0.self_attn.o_proj.bias", (64,))), []),
        ("rope_scaling of type dynamic", ll, 2, ["config.json", 'rope_scaling.rope_type = "dynamic"'],
         edit_cfg("rope_scaling", {"rope_type": "dynamic", "factor": 2.0}), []),
        ("Mistral sliding_window 8", mi, 2, ["config.json", "sliding_window = 8"],
         edit_cfg("sliding_window", 8), []),
        ("a run with n_kv_head 4", ll, 1, ["model.n_kv_head = 4, but config.json has num_key_value_heads = 2",
                                           "--set model.n_kv_head=2"],
         lambda d: None, ["model.n_kv_head=4"]),
    ]
    for k, (what, fname, want_rc, needles, damage, extra) in enumerate(cases):
        fx = fixtures[fname]
        d = os.path.join(tmp, f"bad{k}")
        shutil.copytree(fx["dir"], d)
        damage(d)
        rc, out, _ = init_run(fx, fx["cfg"], os.path.join(tmp, f"badrun{k}"), d, *extra)
        err = [line for line in out.splitlines() if "error" in line]
        tap.ok(rc == want_rc and all(n in out for n in needles),
               f"--init-from {fname} with {what}: exit {rc} (want {want_rc}), the message names {needles}")
        tap.diag(err[0] if err else out[-600:])
    model_from_config(tap, tmp, fixtures[ll])
    # an older checkpoint's rotary_emb.inv_freq buffers: ignored, same loss
    fx = fixtures[ll]
    d = os.path.join(tmp, "invfreq")
    shutil.copytree(fx["dir"], d)
    edit_st(add("model.layers.0.self_attn.rotary_emb.inv_freq", (8,)))(d)
    rc, out, s = init_run(fx, fx["cfg"], os.path.join(tmp, "invfreq_run"), d)
    tap.ok(rc == 0 and s and fx["loss"] and s["loss"] == fx["loss"]["loss"],
           f"--init-from with a rotary_emb.inv_freq buffer: exit {rc}, the same step-1 loss")
    if rc:
        tap.diag(out[-800:])
    # a sharded run (zero3: each rank reads its part of the flat buffer from the shards)
    fx = fixtures["llama_mqa_untied_sharded"]
    rc, out, s = init_run(fx, fx["cfg"], os.path.join(tmp, "zero3_run"), fx["dir"], "parallel.sharding=zero3")
    e = abs(s["loss"] - fx["loss"]["loss"]) / fx["loss"]["loss"] if s and fx["loss"] else math.inf
    tap.ok(rc == 0 and e <= 1e-6, f"--init-from the sharded fixture with parallel.sharding = zero3: "
                                  f"step-1 loss {s and s['loss']} vs ddp's: rel err {e:.2e} <= 1e-6")
    if rc:
        tap.diag(out[-800:])
    # hsdp on 4 ranks, 2 groups of 2: the first group's ranks read their parts, the shards are
    # broadcast to the other group (no rank holds the full weights); micro_batch 1: 4 sequences
    rc, out, s = init_run(fx, fx["cfg"], os.path.join(tmp, "hsdp_run"), fx["dir"],
                          "parallel.sharding=hsdp", "parallel.replica_group=2", "micro_batch=1",
                          ranks=4)
    e = abs(s["loss"] - fx["loss"]["loss"]) / fx["loss"]["loss"] if s and fx["loss"] else math.inf
    tap.ok(rc == 0 and e <= 1e-6, f"--init-from the sharded fixture with parallel.sharding = hsdp on "
                                  f"2 x 2 ranks: step-1 loss {s and s['loss']} vs ddp's: rel err "
                                  f"{e:.2e} <= 1e-6")
    if rc:
        tap.diag(out[-800:])


def model_from_config(tap, tmp, fx):
    """config.json gives the run its model: a recipe without a model block trains what the recipe
    with the fixture's keys trains (bit for bit); a recipe whose model block disagrees on several
    keys is refused with one error listing each, before the plan (nothing allocated, no run_dir)."""
    bare = os.path.join(tmp, "bare.cfg")
    with open(bare, "w") as f:
        f.write("".join(l for l in open(fx["cfg"]).readlines() if not l.startswith("model =")))
    run_dir = os.path.join(tmp, "bare_run")
    rc, out = hfe.run(hfe.MPIRUN + [hfe.TRAIN, "--config", bare, "--set", f"run_dir={run_dir}",
                                    "--init-from", fx["dir"]])
    s = hfe.step1(run_dir) if rc == 0 else None
    if rc:
        tap.diag(out[-1500:])
    tap.ok(bool(s and fx["loss"] and s["loss"] == fx["loss"]["loss"]
                and s["grad_norm"] == fx["loss"]["grad_norm"]),
           f"a recipe without a model block --init-from {fx['name']}: exit {rc}, the step-1 loss and "
           f"grad norm of the recipe that names the model ({s and s['loss']} vs "
           f"{fx['loss'] and fx['loss']['loss']})")
    run_dir = os.path.join(tmp, "disagree_run")  # the recipe's model: 1 layer, d_model 8, 1 head
    rc, out = hfe.run(hfe.MPIRUN + [hfe.TRAIN, "--config", fx["cfg"], "--set", f"run_dir={run_dir}",
                                    "--set", "model.rope_theta=10000", "--init-from", fx["dir"]])
    needles = ["model.n_layer = 1, but config.json has num_hidden_layers = 2", "--set model.n_layer=2",
               "model.d_model = 8, but config.json has hidden_size = 64", "--set model.d_model=64",
               "model.n_head = 1, but config.json has num_attention_heads = 4",
               "model.rope_theta = 10000.0, but config.json has rope_theta = ", "sets 4 keys otherwise"]
    errors = [l for l in out.splitlines() if "error:" in l]
    missing = [n for n in needles if n not in out]
    tap.ok(rc == 1 and not missing and len(errors) == 1 and "memory per rank" not in out
           and not os.path.exists(run_dir),
           f"a recipe disagreeing with config.json on 4 keys: exit {rc} (want 1), one error ({len(errors)}) "
           f"listing each with its --set (missing: {missing}), before the plan, no run_dir")
    tap.diag(out[-900:])


def eval_loss(tmp, ckpt, name):
    """(exit, output, the val loss of `tessera eval --ckpt CKPT` on the fixture's first B rows)."""
    rc, out = hfe.run([hfe.TESSERA, "eval", "--ckpt", ckpt, "--val", os.path.join(tmp, name + "_data"),
                       "--set", f"seq_len={fxm.T}", "--set", f"eval_samples={fxm.B}"])
    try:
        return rc, out, json.loads(out[out.index("{"):out.rindex("}") + 1])["val"][0]["loss"]
    except (ValueError, KeyError, IndexError):
        return rc, out, None


def use_before_training(tap, tmp, fixtures):
    """A received model used before any training: `tessera eval --ckpt HF_DIR` gives the fixture's
    float64 loss, `tessera generate --ckpt HF_DIR` its greedy next token, and `tessera ckpt import
    HF_DIR OUT.h5` a checkpoint that evaluates as the directory does (bit for bit)."""
    losses = {}
    for name in BEFORE:
        fx = fixtures[name]
        toks = np.array(fx["tokens"])
        ref = xent_of(np.load(os.path.join(fx["dir"], "logits.npy")), toks)
        rc, out, got = eval_loss(tmp, fx["dir"], name)
        losses[name] = got
        e = abs(got - ref) / ref if got is not None else math.inf
        if rc:
            tap.diag(out[-1200:])
        tap.ok(rc == 0 and e <= TOL_FP32, f"tessera eval --ckpt {name} (the HF directory): loss {got} vs "
                                          f"the float64 forward's {ref:.8f}: rel err {e:.2e}")
        logits = np.load(os.path.join(fx["dir"], "logits.npy"))
        want = int(np.argmax(logits[0, fxm.T - 1]))
        r = subprocess.run([hfe.TESSERA, "generate", "--ckpt", fx["dir"], "--prompt-ids",
                            " ".join(str(t) for t in toks[:fxm.T]), "--max-tokens", "1",
                            "--temperature", "0", "--ids", "--no-eos-stop"],
                           capture_output=True, text=True, env=hfe.env())
        tap.ok(r.returncode == 0 and r.stdout.split() == [str(want)],
               f"tessera generate --ckpt {name}: greedy next token {r.stdout.split()} = the fixture "
               f"logits' argmax {want} (exit {r.returncode})")
        if r.returncode:
            tap.diag(r.stderr[-800:])
    name = BEFORE[1]
    out_h5 = os.path.join(tmp, "imported.h5")
    rc, out = hfe.run([hfe.TESSERA, "ckpt", "import", fixtures[name]["dir"], out_h5])
    rc2, out2, got = eval_loss(tmp, out_h5, name) if rc == 0 else (rc, "", None)
    if rc or rc2:
        tap.diag((out + out2)[-1500:])
    tap.ok(got is not None and got == losses[name],
           f"tessera ckpt import {name} OUT.h5 (exit {rc}): tessera eval of OUT.h5 gives the "
           f"directory's loss bit for bit ({got} vs {losses[name]})")


def skip(tap, what, why):
    tap.n += 1
    print(f"ok {tap.n} - {what} # SKIP {why}", flush=True)


def tokenizer_checks(tap, tmp, fixtures):
    """A Llama-3-vocabulary model exported with Llama 3's tokenizer.json: generation_config.json and
    config.json carry the ids of tokenizer_config.json's bos/eos tokens; a generation_config.json
    beside the tokenizer.json (an instruct model's eos list) is copied byte for byte."""
    what = ["llama3 tokenizer: generation_config.json and config.json bos/eos = the ids of "
            "tokenizer_config.json's bos_token/eos_token, the template's end of turn in "
            "generation_config.json's eos list, tokenizer files copied",
            "a generation_config.json beside the tokenizer.json is copied byte for byte"]
    if not all(os.path.exists(os.path.join(LLAMA3_TOK, f)) for f in ("tokenizer.json", "tokenizer_config.json")):
        for w in what:
            skip(tap, w, f"{LLAMA3_TOK} missing (./INSTALL --ensure)")
        return
    fx = fixtures["llama_gqa_tied"]
    run_dir = os.path.join(tmp, "tok_run")
    args = [hfe.TRAIN, "--config", fx["cfg"], "--set", f"run_dir={run_dir}"]
    for k, v in dict(fx["sets"], **{"model.vocab_size": "128256", "model.d_model": "32",
                                      "model.n_layer": "1", "model.head_dim": "8"}).items():
        args += ["--set", f"{k}={v}"]
    rc, out = hfe.run(hfe.MPIRUN + args)
    if rc:
        tap.diag(out[-1500:])
    tok_cfg = json.load(open(os.path.join(LLAMA3_TOK, "tokenizer_config.json")))
    vocab = {t["content"]: t["id"] for t in json.load(open(os.path.join(LLAMA3_TOK, "tokenizer.json")))["added_tokens"]}
    bos, eos, eot = vocab.get(tok_cfg["bos_token"]), vocab.get(tok_cfg["eos_token"]), vocab.get("<|eot_id|>")
    out_dir = os.path.join(tmp, "tok_export")
    rc, out = hfe.run([hfe.TESSERA, "ckpt", "export", "--format", "hf", "--tokenizer",
                       os.path.join(LLAMA3_TOK, "tokenizer.json"), os.path.join(run_dir, "latest"), out_dir])
    gen = json.load(open(os.path.join(out_dir, "generation_config.json"))) if rc == 0 else {}
    cj = json.load(open(os.path.join(out_dir, "config.json"))) if rc == 0 else {}
    same = rc == 0 and all(open(os.path.join(out_dir, f), "rb").read() == open(os.path.join(LLAMA3_TOK, f), "rb").read()
                           for f in ("tokenizer.json", "tokenizer_config.json"))
    # the chat template ends a turn with <|eot_id|>, not the eos_token <|end_of_text|>: transformers
    # and vLLM stop at every id of generation_config.json's list, as generate --chat does; the
    # context is the one Llama 3's RoPE scaling extends to (64 x 8), not the run's seq_len 16
    ctx = cj.get("max_position_embeddings")
    tap.ok(same and bos is not None and gen.get("bos_token_id") == bos == cj.get("bos_token_id")
           and gen.get("eos_token_id") == [eos, eot] and cj.get("eos_token_id") == eos and ctx == 512,
           f"{what[0]}: bos {gen.get('bos_token_id')} (want {bos} = {tok_cfg['bos_token']}), eos "
           f"{gen.get('eos_token_id')} (want [{eos}, {eot}] = {tok_cfg['eos_token']}, <|eot_id|>), "
           f"max_position_embeddings {ctx} (want 512)")
    if rc:
        tap.diag(out[-1500:])
    tok2 = os.path.join(tmp, "tok_with_gen")
    shutil.copytree(LLAMA3_TOK, tok2)
    text = b'{\n  "bos_token_id": 128000,\n  "eos_token_id": [128001, 128008, 128009],\n  "do_sample": true\n}\n'
    open(os.path.join(tok2, "generation_config.json"), "wb").write(text)
    rc, out = hfe.run([hfe.TESSERA, "ckpt", "export", "--format", "hf", "--tokenizer", tok2,
                       os.path.join(run_dir, "latest"), out_dir + "2"])
    got = open(os.path.join(out_dir + "2", "generation_config.json"), "rb").read() if rc == 0 else b""
    tap.ok(got == text, f"{what[1]} (exit {rc})")


def checked_fixture(tap, name, fdir, tmp):
    """run_fixture's checks; its fixture, with its directory and loss."""
    fx, s = run_fixture(tap, name, fdir, tmp)
    fx.update(dir=fdir, loss=s)
    return fx


def fixtures_then_refusals(tap, tmp, specs, run_fixture, checks, refusals_of, n_refusals):
    """hf_fixture.py's fixtures specs written under tmp, each run by run_fixture(tap, name, dir,
    tmp) in a section of checks checks, then refusals_of(tap, tmp, fixtures) (n_refusals checks)
    when every fixture passed (test_hf_moe.py's frame too). The fixtures that passed, by name."""
    dirs = fxm.make_all(os.path.join(tmp, "fixtures"), specs)
    tap.diag("fixtures are script-written by hf_fixture.py (not transformers' save_pretrained)")
    fixtures = {}
    for name, d in dirs.items():
        fx = tap.section(checks, f"{name} stopped early", run_fixture, tap, name, d, tmp)
        if fx is not None:
            fixtures[name] = fx
    tap.section(n_refusals, "refusal checks stopped early", refusals_of, tap, tmp, fixtures,
                when=len(fixtures) == len(dirs))
    return fixtures


def main():
    torch.set_default_dtype(torch.float64)
    plan = CHECKS_PER_FIXTURE * len(fxm.FIXTURES) + N_REFUSALS + N_TOKENIZER + N_BEFORE
    tap = Tap(plan)
    with tempfile.TemporaryDirectory(prefix="tsr-hf-llama-") as tmp:
        fixtures = fixtures_then_refusals(tap, tmp, fxm.FIXTURES, checked_fixture, CHECKS_PER_FIXTURE,
                                          refusals, N_REFUSALS)
        tap.section(N_BEFORE, "checks before training stopped early", use_before_training, tap, tmp, fixtures,
                    when=all(n in fixtures for n in BEFORE))
        tap.section(N_TOKENIZER, "tokenizer checks stopped early", tokenizer_checks, tap, tmp, fixtures,
                    when="llama_gqa_tied" in fixtures)
    return tap.status()


if __name__ == "__main__":
    sys.exit(main())
