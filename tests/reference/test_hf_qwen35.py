#!/usr/bin/env python3
"""test_hf_qwen35.py — the Qwen 3.5 releases' Hugging Face directories are refused, for now, with
a message that says where to read why (issue 68; docs/hf.md "Qwen 3.5").

Their layers are Qwen3-Next's and their recipes plan (configs/qwen3.5-*.cfg), but the importer
does not map their tensors yet (the unfused DeltaNet projections, the language_model. prefix,
text_config): a config.json with model_type qwen3_5 (Qwen3_5ForConditionalGeneration, what the hub
ships), qwen3_5_text (Qwen3_5ForCausalLM) or qwen3_5_moe must be refused with exit 2, the list of
the model types tessera imports (the form test_hf_transformers.py reads as "not supported yet")
and docs/hf.md "Qwen 3.5", and nothing written: by `tessera ckpt import DIR OUT.h5` (the fill of
config.json) and by `tessera-train --config configs/qwen3.5-27b.cfg --init-from DIR --dry-run`
(the check of config.json against a recipe). Another unknown model_type gets the list without
the Qwen 3.5 sentence. The config.json is the published 27B text_config's shape, two layers.
Run: TESTS=hf_qwen35 bash tests/run.sh   (needs build/tessera, build/tessera-train). TAP.
"""
import json
import os
import re
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_hf_export as hfe  # noqa: E402  (skips with 77 without torch/h5py or the programs)
from tap import Tap  # noqa: E402

NOT_YET = re.compile(r'model_type = "[^"]*": tessera imports .* only')  # test_hf_transformers.py's
HINT = 'docs/hf.md "Qwen 3.5"'
TEXT = {"model_type": "qwen3_5_text", "vocab_size": 248320, "hidden_size": 5120,
        "intermediate_size": 17408, "num_hidden_layers": 2, "num_attention_heads": 24,
        "num_key_value_heads": 4, "head_dim": 256, "linear_num_key_heads": 16,
        "linear_num_value_heads": 48, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
        "linear_conv_kernel_dim": 4, "layer_types": ["linear_attention", "full_attention"],
        "rope_parameters": {"rope_theta": 10000000, "partial_rotary_factor": 0.25,
                            "mrope_section": [11, 11, 10], "mrope_interleaved": True}}
CASES = [
    ("qwen3_5", {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
                 "text_config": TEXT}),
    ("qwen3_5_text", dict(TEXT, architectures=["Qwen3_5ForCausalLM"])),
    ("qwen3_5_moe", {"architectures": ["Qwen3_5MoeForConditionalGeneration"],
                     "model_type": "qwen3_5_moe",
                     "text_config": dict(TEXT, model_type="qwen3_5_moe_text", num_experts=8)}),
]


def directory(tmp, name, cj):
    d = os.path.join(tmp, name)
    os.makedirs(d)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cj, f)
    return d


def refused(tap, tmp, name, cj, hint):
    d = directory(tmp, name, cj)
    out_h5 = os.path.join(tmp, name + ".h5")
    rc, out = hfe.run([hfe.TESSERA, "ckpt", "import", d, out_h5])
    mt = f'model_type = "{cj["model_type"]}"'
    ok = rc == 2 and mt in out and NOT_YET.search(out) and (HINT in out) == hint
    tap.ok(ok and not os.path.exists(out_h5),
           f"ckpt import {name}: exit {rc} (want 2), names {mt}, the list"
           f"{', ' + HINT if hint else ', no Qwen 3.5 sentence'}; no checkpoint written")
    if not ok:
        tap.diag(out[-800:])
    if not hint:
        return
    run_dir = os.path.join(tmp, name + ".run")
    cfg = os.path.join(hfe.ROOT, "configs", "qwen3.5-27b.cfg")
    rc, out = hfe.run([hfe.TRAIN, "--config", cfg, "--set", f'run_dir="{run_dir}"',
                       "--init-from", d, "--dry-run"])
    ok = rc == 2 and mt in out and HINT in out
    tap.ok(ok and not os.path.exists(run_dir),
           f"tessera-train --init-from {name} with the 27B recipe: exit {rc} (want 2), names "
           f"{mt} and {HINT}; no run directory")
    if not ok:
        tap.diag(out[-800:])


def main():
    tap = Tap(2 * len(CASES) + 1)
    with tempfile.TemporaryDirectory(prefix="tessera-hfq35.") as tmp:
        for name, cj in CASES:
            refused(tap, tmp, name, cj, True)
        refused(tap, tmp, "falcon", {"model_type": "falcon"}, False)
    return 1 if tap.failed else 0


if __name__ == "__main__":
    sys.exit(main())
