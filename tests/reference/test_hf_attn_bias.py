#!/usr/bin/env python3
"""test_hf_attn_bias.py — Hugging Face's attention_bias without mlp_bias (biases on q, k, v and o,
none on the MLP) as tessera's model.attn_bias (issue 80's proof key: docs/hf.md "Import",
docs/decoder.md "How to add a model key").

Fixtures: hf_fixture.py's ATTN_BIAS_FIXTURES, script-written as the families' are (transformers is
not on this machine), with the logits of the float64 forward of each class on the stored weights:
Llama with attention_bias true and mlp_bias false (modeling_llama), Qwen 3 with attention_bias true
(its q_norm / k_norm after the biased projections, modeling_qwen3) and OLMo 2 with attention_bias
true (QK-norm over the biased projections, modeling_olmo2). For each, test_hf_families.py's five
checks: `tessera ckpt import`; ref_dump --init-from the checkpoint, tessera's fp32 logits against
the float64 ones (<= 1e-5 x max(1, max |logit|)); `tessera-train --init-from` the directory with a
recipe without a model block (step-1 loss, rel <= 1e-5); `ckpt export --format hf` of the
checkpoint: every tensor byte for byte (the q/k/v/o biases among them, no MLP bias) and the
fixture's config.json keys back (attention_bias true, and Llama's mlp_bias false).
Then: a recipe that sets model.attn_bias = false against the Qwen 3 directory disagrees with its
config.json (exit 1, naming both, no run directory); Llama's mlp_bias without attention_bias (MLP
biases alone) is refused (exit 2, nothing written); the export of the attn_bias model as Mistral
or Qwen 2 (classes without attention_bias) is refused naming model.attn_bias (exit 1, nothing
written); an ALiBi (MPT) model with model.attn_bias, whose class has no tensor for those biases,
is refused naming the tensor (exit 1, nothing written: hf_family_for's table check).
Run: TESTS=hf_attn_bias bash tests/run.sh   (needs `make`). TAP; exit 1 on failure, 77 without torch.
"""
import json
import os
import shutil
import sys
import tempfile
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_hf_export as hfe  # noqa: E402  (skips with 77 without torch/h5py or the programs)
import test_hf_families as fam  # noqa: E402
import hf_fixture as fxm  # noqa: E402
from tap import Tap  # noqa: E402

# the model keys of config.json the export gives back (those the fixture has)
KEYS = ["model_type", "architectures", "vocab_size", "hidden_size", "intermediate_size",
        "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
        "hidden_act", "rms_norm_eps", "rope_theta", "rope_scaling", "tie_word_embeddings",
        "attention_bias", "mlp_bias"]
N_MORE = 5


def refused(tap, what, rc, out, want_rc, needles, left):
    missing = [n for n in needles if n not in out]
    if rc != want_rc or missing or left:
        tap.diag(out[-1200:])
    tap.ok(rc == want_rc and not missing and not left,
           f"{what}: exit {rc} (want {want_rc}), names {needles} (missing {missing}), "
           f"{'wrote ' + left if left else 'nothing written'}")


def recipe_disagrees(tap, tmp, qdir):
    data = fam.dataset(tmp, "q_disagree", list(range(fxm.V)) * 8)
    cfg, run_dir = os.path.join(tmp, "q_disagree.cfg"), os.path.join(tmp, "q_disagree_run")
    fam.bare_cfg(cfg, run_dir, data)
    rc, out = hfe.run([hfe.TRAIN, "--config", cfg, "--set", "model.attn_bias=false",
                       "--init-from", qdir])
    refused(tap, "a recipe with model.attn_bias = false --init-from Qwen 3's attention_bias = true",
            rc, out, 1, ["model.attn_bias", "attention_bias = true"],
            run_dir if os.path.exists(run_dir) else "")


def mlp_bias_alone(tap, tmp, ldir):
    d = fam.edited(tmp, ldir, "l_mlp_only", attention_bias=False, mlp_bias=True)
    out_h5 = os.path.join(tmp, "l_mlp_only.h5")
    rc, out = hfe.run([hfe.TESSERA, "ckpt", "import", d, out_h5])
    refused(tap, "Llama's mlp_bias without attention_bias", rc, out, 2,
            ["mlp_bias = true", "this mix has no tessera equivalent"],
            out_h5 if os.path.exists(out_h5) else "")


def export_as(tap, tmp, ck, arch):
    exp = os.path.join(tmp, "as_" + arch)
    rc, out = hfe.run([hfe.TESSERA, "ckpt", "export", "--format", "hf", "--tokenizer", "none",
                       "--arch", arch, ck, exp])
    refused(tap, f"the attn_bias model exported as {arch}", rc, out, 1,
            ["model.attn_bias", "no transformers equivalent"], exp if os.path.exists(exp) else "")


def mpt_untabled(tap, tmp):
    """A one-step ALiBi run with model.attn_bias: MptForCausalLM has no bias tensors."""
    data = fam.dataset(tmp, "mpt", list(range(fxm.V)) * 8)
    run_dir, exp = os.path.join(tmp, "mpt_run"), os.path.join(tmp, "mpt_hf")
    rc, out = hfe.run([hfe.TRAIN, "--config", os.path.join(hfe.ROOT, "configs", "tiny.cfg"),
                       "--set", f"data.train={data}", "--set", "data.val=", "--set", "data.tokenizer=",
                       "--set", f"run_dir={run_dir}", "--set", f"model.vocab_size={fxm.V}",
                       "--set", "model.n_layer=1", "--set", "model.d_model=32", "--set", "model.n_head=2",
                       "--set", "seq_len=16", "--set", "model.max_seq_len=16", "--set", "global_batch=2",
                       "--set", "micro_batch=2", "--set", "max_duration=1ba", "--set", "save_interval=1ba",
                       "--set", "sample.tokens=0", "--set", "eval_interval=0ba", "--set", "threads=1",
                       "--set", "watchdog.window=0", "--set", "model.pos=alibi", "--set", "model.bias=false",
                       "--set", "model.gelu=exact", "--set", "model.attn_bias=true"])
    if rc:
        tap.diag(out[-1200:])
    rc, out = hfe.run([hfe.TESSERA, "ckpt", "export", "--format", "hf", "--tokenizer", "none",
                       os.path.join(run_dir, "latest"), exp])
    refused(tap, "an ALiBi model with model.attn_bias exported (MptForCausalLM)", rc, out, 1,
            ["MptForCausalLM", "has no tensor for this model's"], exp if os.path.exists(exp) else "")


def main():
    tap = Tap(fam.CHECKS_PER_FIXTURE * len(fxm.ATTN_BIAS_FIXTURES) + N_MORE)
    if not os.access(fam.REF_DUMP, os.X_OK):
        hfe.skip(f"{fam.REF_DUMP} is missing (run make first)")
    with tempfile.TemporaryDirectory(prefix="tessera-hfab.") as tmp:
        dirs = fxm.make_all(os.path.join(tmp, "fx"), fxm.ATTN_BIAS_FIXTURES)
        for fx in fxm.ATTN_BIAS_FIXTURES:
            end = tap.n + fam.CHECKS_PER_FIXTURE
            d = dirs[fx["name"]]
            try:
                fcj = json.load(open(os.path.join(d, "config.json")))
                fam.run_fixture(tap, fx, d, tmp, keys=[k for k in KEYS if k in fcj])
            except Exception:
                tap.diag(traceback.format_exc())
            tap.fail_until(end, f"{fx['name']} stopped early")
        end = tap.n + N_MORE
        try:
            recipe_disagrees(tap, tmp, dirs["qwen3_attn_bias"])
            mlp_bias_alone(tap, tmp, dirs["llama_attn_bias"])
            ck = os.path.join(tmp, "llama_attn_bias.h5")  # run_fixture's import
            export_as(tap, tmp, ck, "mistral")
            export_as(tap, tmp, ck, "qwen2")
            mpt_untabled(tap, tmp)
        except Exception:
            tap.diag(traceback.format_exc())
        tap.fail_until(end, "the refusals stopped early")
        shutil.rmtree(os.path.join(tmp, "fx"), ignore_errors=True)
    return 1 if tap.failed else 0


if __name__ == "__main__":
    sys.exit(main())
