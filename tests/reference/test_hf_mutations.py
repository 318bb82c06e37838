#!/usr/bin/env python3
"""test_hf_mutations.py — an impossible value in an imported config.json is a damaged file: exit 2
naming the file, the key and its value, before anything is written (docs/hf.md "Import", issue 79
item 9). Before, 24 of 157 such values (key/value heads that do not divide the heads, value heads
of the linear layers that are no multiple of their key heads, a top-k above the experts, an odd
head size) stopped with exit 1 and a "--set" suggestion, and Gemma 3's query_pre_attn_scalar,
rope_local_base_freq and final_logit_softcapping = 0 were imported as "unset" and a checkpoint
written.

The fixtures: every family's config.json of the script-written directories (hf_fixture.py's
Llama family, mixtures and issue-67 families, hf_fixture_qwen3next.py, hf_fixture_qwen35.py,
hf_fixture_gptoss.py) and a GPT-2 and an MPT directory written here. Each imports as it is
(`tessera ckpt import DIR OUT.h5`, exit 0: the control). Then each mutation of a key tessera reads
(mutations() below: a size of 0 or 2.5; a positive real of 0 or -1; key/value heads
that do not divide the heads; an odd head size; a top-k above the experts; linear value heads that
are no multiple of the key heads; a MoE step past the layers; layer lists of the wrong length or
with a foreign entry; nested RoPE values of 0; a soft cap of 0; a string for a number) is imported
into an empty directory: exit 2, the message names DIR/config.json and the key (and, for a scalar,
its value as "KEY = VALUE"), and the directory is still empty (no OUT.h5, no temporary file). A few
go through `tessera-train --init-from DIR` too (exit 2, no run directory) and `tessera ckpt export
--format hf DIR OUT` (exit 2, no OUT). A layer count of 2e9 (Llama, GPT-2, MPT) is refused as it is
read, within a CPU limit of 20 s (laying out the model took minutes before).

Keys tessera does not read (attention_dropout, initializer_range, the token ids, pretraining_tp,
max_window_layers, experts_per_token, router_jitter_noise) are not mutated: they change nothing
tessera computes (docs/hf.md).

Run: TESTS=hf_mutations bash tests/run.sh   (needs `make`). TAP; exit 1 on failure, 77 without torch.
"""
import copy
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import traceback
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_hf_export as hfe  # noqa: E402  (skips with 77 without torch/h5py or the programs)
import hf_fixture as fxm  # noqa: E402
import hf_fixture_gptoss as fxo  # noqa: E402
import hf_fixture_qwen35 as fx35  # noqa: E402
import hf_fixture_qwen3next as fxn  # noqa: E402
import torch  # noqa: E402
from tap import Tap  # noqa: E402

# sizes and counts tessera reads (when present): 0 and 2.5 are no model's
SIZES = ["vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
         "num_attention_heads", "num_key_value_heads", "head_dim", "max_position_embeddings",
         "num_local_experts", "num_experts", "num_experts_per_tok", "moe_intermediate_size",
         "shared_expert_intermediate_size", "decoder_sparse_step", "linear_conv_kernel_dim",
         "linear_key_head_dim", "linear_value_head_dim", "linear_num_key_heads",
         "linear_num_value_heads", "full_attention_interval",
         "n_layer", "n_embd", "n_head", "n_positions", "n_inner", "n_layers", "d_model", "n_heads",
         "max_seq_len"]
# positive reals tessera reads: 0 and -1 are no model's
POSITIVE = ["rms_norm_eps", "rope_theta", "query_pre_attn_scalar", "rope_local_base_freq",
            "partial_rotary_factor", "swiglu_limit", "expansion_ratio"]
# in a rope_scaling / rope_parameters object
NESTED = ["factor", "original_max_position_embeddings", "beta_fast", "beta_slow", "rope_theta",
          "partial_rotary_factor", "low_freq_factor", "high_freq_factor"]
GEMMA = ("gemma3_text", "gemma2")


def gpt2_mpt(root):
    """Tiny GPT-2 and MPT directories in the published layouts (GPT2LMHeadModel: Conv1D (in, out);
    MptForCausalLM: nn.Linear, no biases)."""
    g = torch.Generator().manual_seed(5)
    C, V, L, P = 16, 100, 2, 32

    def w(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64) * 0.1

    out = {}
    for name, cj in (("gpt2", dict(model_type="gpt2", architectures=["GPT2LMHeadModel"], vocab_size=V,
                                   n_positions=P, n_ctx=P, n_embd=C, n_layer=L, n_head=2, n_inner=4 * C,
                                   activation_function="gelu_new", layer_norm_epsilon=1e-5)),
                     ("mpt", dict(model_type="mpt", architectures=["MptForCausalLM"], vocab_size=V,
                                  max_seq_len=P, d_model=C, n_layers=L, n_heads=2, expansion_ratio=4,
                                  no_bias=True, attn_config={"alibi": True, "alibi_bias_max": 8}))):
        sd = {"transformer.wte.weight": w(V, C)}
        for i in range(L):
            if name == "gpt2":
                p = f"transformer.h.{i}."
                for n, shape in (("ln_1.weight", (C,)), ("ln_1.bias", (C,)),
                                 ("attn.c_attn.weight", (C, 3 * C)), ("attn.c_attn.bias", (3 * C,)),
                                 ("attn.c_proj.weight", (C, C)), ("attn.c_proj.bias", (C,)),
                                 ("ln_2.weight", (C,)), ("ln_2.bias", (C,)),
                                 ("mlp.c_fc.weight", (C, 4 * C)), ("mlp.c_fc.bias", (4 * C,)),
                                 ("mlp.c_proj.weight", (4 * C, C)), ("mlp.c_proj.bias", (C,))):
                    sd[p + n] = w(*shape)
            else:
                p = f"transformer.blocks.{i}."
                for n, shape in (("norm_1.weight", (C,)), ("attn.Wqkv.weight", (3 * C, C)),
                                 ("attn.out_proj.weight", (C, C)), ("norm_2.weight", (C,)),
                                 ("ffn.up_proj.weight", (4 * C, C)), ("ffn.down_proj.weight", (C, 4 * C))):
                    sd[p + n] = w(*shape)
        if name == "gpt2":
            sd["transformer.wpe.weight"] = w(P, C)
            sd["transformer.ln_f.weight"], sd["transformer.ln_f.bias"] = w(C), w(C)
        else:
            sd["transformer.norm_f.weight"] = w(C)
        d = os.path.join(root, name)
        os.makedirs(d)
        fxm.write_safetensors(os.path.join(d, "model.safetensors"),
                              [(k, "F32", v.shape, fxm.to_dtype(v, "F32")[0]) for k, v in sd.items()])
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cj, f, indent=2)
        out[name] = d
    return out


def fixtures(root):
    dirs = gpt2_mpt(root)
    dirs.update(fxm.make_all(os.path.join(root, "fx"), fxm.FIXTURES + fxm.MOE_FIXTURES + fxm.FAMILY_FIXTURES))
    dirs.update(fxn.make_all(os.path.join(root, "q3n")))
    dirs.update(fx35.make_all(os.path.join(root, "q35")))
    oss = fxo.make_all(os.path.join(root, "oss"))
    dirs["gptoss_bf16"] = oss["gptoss_bf16"]
    return dirs


def text_of(cj):
    """The object holding the text model's keys (Qwen 3.5's VL nests them in text_config)."""
    return cj["text_config"] if isinstance(cj.get("text_config"), dict) else cj


def sliding(t):
    return any(x == "sliding_attention" for x in t.get("layer_types") or [])


def mutations(cj):
    """(label, key named in the message, value text or None, function mutating a copy's text
    object) for a config.json."""
    t, out = text_of(cj), []

    def put(key, value, show=True):
        def f(x):
            x[key] = value
        out.append((f"{key} = {json.dumps(value)}", key, json.dumps(value) if show else None, f))

    def nest(obj, key, value):
        def f(x):
            x[obj] = dict(x[obj], **{key: value})
        out.append((f"{obj}.{key} = {json.dumps(value)}", key, json.dumps(value), f))

    for k in SIZES:
        if k in t and (k != "max_seq_len" or t.get("model_type") == "mpt"):
            for v in (0, 2.5):  # (-1 takes 0's path: below 1)
                if not (v == 0 and k == "num_experts" and t.get("model_type") == "qwen3_next"):
                    put(k, v)  # (Qwen3-Next's 0 experts: a dense model)
    if "sliding_window" in t and sliding(t):
        for v in (0, -1):
            put("sliding_window", v)
    for k in POSITIVE:
        if k in t:
            for v in (0, -1):
                put(k, v)
    if t.get("model_type") in GEMMA:  # null is "no cap"; 0 is not (transformers divides by it)
        for k in ("attn_logit_softcapping", "final_logit_softcapping"):
            for v in (0, -1):
                put(k, v)
    for obj in ("rope_scaling", "rope_parameters"):
        if isinstance(t.get(obj), dict):
            for k in NESTED:
                if k in t[obj]:
                    nest(obj, k, 0)
            if t[obj].get("rope_type") == "llama3":
                nest(obj, "high_freq_factor", t[obj]["low_freq_factor"])
    NH = t.get("num_attention_heads")
    if "num_key_value_heads" in t:
        put("num_key_value_heads", NH + 1)  # more than the heads
        bad = [k for k in range(2, NH) if NH % k]
        if bad:
            put("num_key_value_heads", bad[0])  # a count that does not divide them
    if "head_dim" in t:
        put("head_dim", t["head_dim"] + 1)  # odd: RoPE turns pairs
    E = t.get("num_local_experts", t.get("num_experts"))
    if E and "num_experts_per_tok" in t:
        put("num_experts_per_tok", E + 1)
    if t.get("linear_num_key_heads", 1) > 1:
        put("linear_num_value_heads", t["linear_num_value_heads"] + 1)
    if "decoder_sparse_step" in t and E:
        put("decoder_sparse_step", t["num_hidden_layers"] + 1)  # no MoE layer left
    if isinstance(t.get("layer_types"), list):
        put("layer_types", t["layer_types"] + t["layer_types"][:1], show=False)  # one too many
        put("layer_types", ["global"] + t["layer_types"][1:], show=False)
    if isinstance(t.get("no_rope_layers"), list):  # (a longer list is SmolLM3Config's right)
        put("no_rope_layers", t["no_rope_layers"][:-1], show=False)
        put("no_rope_layers", [2] + t["no_rope_layers"][1:], show=False)
    for k in ("hidden_size", "n_embd", "d_model", "rms_norm_eps"):
        if k in t:
            put(k, "8")  # a string, not a number
    return out


def mutated(src, dst, f):
    shutil.copytree(src, dst)
    with open(os.path.join(dst, "config.json")) as fh:
        cj = json.load(fh)
    f(text_of(cj))
    with open(os.path.join(dst, "config.json"), "w") as fh:
        json.dump(cj, fh, indent=2)


def refused(out, d, key, value):
    """exit 2's message names d/config.json, the key and (for a scalar) "KEY = VALUE"."""
    if f"{d}/config.json" not in out or key not in out:
        return False
    if value is None:
        return True
    v = json.loads(value)
    forms = {value, str(v)} | ({f"{v:g}"} if isinstance(v, (int, float)) else set())
    return any(f"{key} = {s}" in out or f"{key} = \"{s}\"" in out for s in forms)


def import_one(tmp, name, d, case):
    """`tessera ckpt import` of d mutated by case into an empty directory: (exit, output, what the
    directory holds afterwards, whether the refusal is as it should be)."""
    label, key, value, f = case
    m = tempfile.mkdtemp(prefix="m_", dir=tmp)
    o = tempfile.mkdtemp(prefix="o_", dir=tmp)
    mutated(d, os.path.join(m, name), f)
    m = os.path.join(m, name)
    rc, out = hfe.run([hfe.TESSERA, "ckpt", "import", m, os.path.join(o, "x.h5")])
    left = os.listdir(o)
    shutil.rmtree(os.path.dirname(m))
    shutil.rmtree(o)
    return rc, out, left, rc == 2 and refused(out, m, key, value) and not left


# A layer count past HF_MAX_LAYERS in the classes whose fill did not bound it (the Llama family
# without layer lists, GPT-2, MPT): refused when config.json is read, before a model of that many
# layers is laid out (which took minutes of CPU at 2e9 layers, exit 2 at the end). The import runs
# under a CPU limit of 20 s, which the refusal takes milliseconds of.
MANY_LAYERS = [("llama_gqa_tied", "num_hidden_layers"), ("gpt2", "n_layer"), ("mpt", "n_layers")]


def many_layers(tap, tmp, dirs):
    for name, key in MANY_LAYERS:
        m, o = os.path.join(tmp, f"many_{name}"), os.path.join(tmp, f"many_{name}.h5")

        def f(x, key=key):
            x[key] = 2000000000
        mutated(dirs[name], m, f)
        r = subprocess.run([hfe.TESSERA, "ckpt", "import", m, o], capture_output=True, text=True,
                           env=hfe.env(), preexec_fn=lambda: resource.setrlimit(
                               resource.RLIMIT_CPU, (20, 20)))
        out = r.stdout + r.stderr
        want = f"{key} = 2000000000: expected 1 to 1024"
        if not tap.ok(r.returncode == 2 and f"{m}/config.json" in out and want in out
                      and not os.path.exists(o),
                      f"{name}: {key} = 2000000000: exit 2 (got {r.returncode}) within 20 s of CPU, "
                      f"\"{want}\", nothing written"):
            tap.diag(out[-600:])


# (fixture, mutation label) also run through tessera-train --init-from and ckpt export
TRAINER = [("llama_gqa_tied", "num_key_value_heads = 3"), ("mixtral_gqa", "num_experts_per_tok = 5"),
           ("qwen3next_hybrid", "linear_num_value_heads = 5"), ("gemma3_text", "final_logit_softcapping = 0")]


def recipe(path, run_dir, data):
    with open(path, "w") as f:
        f.write(f"""# written by tests/reference/test_hf_mutations.py
run_dir = "{run_dir}";
max_duration = "1ba";
global_batch = 2;
micro_batch = 1;
seq_len = 8;
optim = {{ lr = 1e-4; }};
data = {{ train = "{data}"; tokenizer = ""; }};
""")


def main():
    tmp = tempfile.mkdtemp(prefix="tsr_hfmut_")
    try:
        dirs = fixtures(tmp)
        cases, seen = {}, set()
        for name, d in dirs.items():  # each mutation once per model_type (3 Llama fixtures...)
            with open(os.path.join(d, "config.json")) as fh:
                cj = json.load(fh)
            mt = cj["model_type"]
            cases[name] = [c for c in mutations(cj) if (mt, c[0]) not in seen]
            seen |= {(mt, c[0]) for c in cases[name]}
        n = sum(len(c) for c in cases.values())
        tap = Tap(len(dirs) + n + 3 * len(TRAINER) + len(MANY_LAYERS))
        tap.diag(f"{len(dirs)} fixtures, {n} mutations")
        for name, d in dirs.items():
            os.makedirs(os.path.join(tmp, "ok", name))
            rc, out = hfe.run([hfe.TESSERA, "ckpt", "import", d, os.path.join(tmp, "ok", name, "x.h5")])
            if not tap.ok(rc == 0, f"{name}: the fixture imports as it is (exit {rc})"):
                tap.diag(out[-600:])
        jobs = [(name, d, c) for name, d in dirs.items() for c in cases[name]]
        with ThreadPoolExecutor(max_workers=2) as pool:  # (each a process: ~0.1 s of start)
            for (name, _, (label, _, _, _)), (rc, out, left, ok) in zip(
                    jobs, pool.map(lambda j: import_one(tmp, j[0], j[1], j[2]), jobs)):
                if not tap.ok(ok, f"{name}: {label}: exit 2 (got {rc}) naming the file and key, "
                                  f"nothing written ({left or 'empty'})"):
                    tap.diag(out[-800:])
        rc, out, data = hfe.shard_tokens(tmp, "data", list(range(100)) * 4, 100)
        for name, label in TRAINER:
            f = next(c[3] for c in cases[name] if c[0] == label)
            m = os.path.join(tmp, f"t_{name}")
            mutated(dirs[name], m, f)
            key = label.split(" = ")[0]
            run_dir, cfg = os.path.join(tmp, f"run_{name}"), os.path.join(tmp, f"{name}.cfg")
            recipe(cfg, run_dir, data)
            rc, out = hfe.run([hfe.TRAIN, "--config", cfg, "--init-from", m])
            if not tap.ok(rc == 2 and refused(out, m, key, None) and not os.path.exists(run_dir),
                          f"{name}: {label}: tessera-train --init-from exits 2 (got {rc}), no run "
                          f"directory"):
                tap.diag(out[-800:])
            exp = os.path.join(tmp, f"exp_{name}")
            rc, out = hfe.run([hfe.TESSERA, "ckpt", "export", "--format", "hf", m, exp])
            if not tap.ok(rc == 2 and refused(out, m, key, None) and not os.path.exists(exp),
                          f"{name}: {label}: ckpt export --format hf of the directory exits 2 "
                          f"(got {rc}), no {exp}"):
                tap.diag(out[-800:])
            o = os.path.join(tmp, f"gen_{name}")
            os.makedirs(o)
            rc, out = hfe.run([hfe.TESSERA, "eval", "--ckpt", m, "--out", os.path.join(o, "r.json")])
            if not tap.ok(rc == 2 and not os.listdir(o),
                          f"{name}: {label}: tessera eval --ckpt of the directory exits 2 (got {rc}), "
                          f"nothing written"):
                tap.diag(out[-800:])
        many_layers(tap, tmp, dirs)
        return tap.status()
    except Exception:
        traceback.print_exc()
        return 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
