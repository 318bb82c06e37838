#!/usr/bin/env python3
"""hf_generate.py — the GPU peer of tessera's batched decoding in bench/gpu/gen_vs_hf.sh:
transformers' LlamaForCausalLM.generate with its KV cache, bf16, on one GPU.

  hf_generate.py --layers L --d-model D --heads H --kv-heads K --ffn F --vocab V --prompt P \\
      --new N --batch B [--rounds R] [--device cuda]

The model is randomly initialised (speed does not depend on the weights) with the dimensions
tessera's run has (Llama: RoPE, RMSNorm, SwiGLU, grouped-query attention, tied embeddings). B
prompts of P random ids are completed by sampling (temperature 1, no top-k or top-p cut, as
GRPO's rollouts) with exactly N new tokens each (min_new_tokens = N: no stop), once untimed (the
warm-up: CUDA contexts, kernels) and then R times timed, the GPU synchronised before and after.
Prints one JSON object: tokens = B x N, the median seconds and tokens/s, the versions. Exit 77
(printed reason) when transformers cannot be imported.
"""
import argparse
import json
import statistics
import sys
import time


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for k in ("layers", "d-model", "heads", "kv-heads", "ffn", "vocab", "prompt", "new", "batch"):
        p.add_argument("--" + k, type=int, required=True)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--device", default="cuda")
    a = p.parse_args()
    try:
        import torch
        import transformers
    except ImportError as e:
        print(f"hf_generate: SKIP: {e}", file=sys.stderr)
        return 77
    cfg = transformers.LlamaConfig(
        vocab_size=a.vocab, hidden_size=a.d_model, intermediate_size=a.ffn,
        num_hidden_layers=a.layers, num_attention_heads=a.heads, num_key_value_heads=a.kv_heads,
        max_position_embeddings=a.prompt + a.new, tie_word_embeddings=True, rms_norm_eps=1e-5,
        bos_token_id=None, eos_token_id=None, pad_token_id=0)
    dtype = torch.bfloat16 if a.device.startswith("cuda") else torch.float32
    torch.manual_seed(1)
    model = transformers.LlamaForCausalLM(cfg).to(device=a.device, dtype=dtype).eval()
    ids = torch.randint(1, a.vocab, (a.batch, a.prompt), device=a.device)
    mask = torch.ones_like(ids)
    kw = dict(attention_mask=mask, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
              max_new_tokens=a.new, min_new_tokens=a.new, pad_token_id=0, use_cache=True)

    def sync():
        if a.device.startswith("cuda"):
            torch.cuda.synchronize()

    times = []
    with torch.inference_mode():
        for r in range(a.rounds + 1):
            sync()
            t0 = time.perf_counter()
            out = model.generate(ids, **kw)
            sync()
            if r:
                times.append(time.perf_counter() - t0)
    new = out.shape[1] - a.prompt
    if new != a.new:
        print(f"hf_generate: {new} new tokens, not {a.new}", file=sys.stderr)
        return 1
    sec = statistics.median(times)
    print(json.dumps({"tokens": a.batch * a.new, "seconds": sec,
                      "tokens_per_s": a.batch * a.new / sec, "batch": a.batch,
                      "rounds": [round(t, 4) for t in times], "torch": torch.__version__,
                      "transformers": transformers.__version__,
                      "device": torch.cuda.get_device_name() if a.device.startswith("cuda") else "cpu"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
