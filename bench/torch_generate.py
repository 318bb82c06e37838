#!/usr/bin/python3
"""torch_generate.py — greedy batched generation with a KV cache in PyTorch (CPU, float32): the peer
of `tessera generate --prompts` in bench/gen_vs_torch.sh.

  torch_generate.py --ckpt STEP.h5 --prompts P.jsonl --out O.jsonl --batch B --max-tokens N \\
      [--threads T] -- TORCH_LLAMA_OPTIONS...

The model is bench/torch_llama.py's (tessera's pos = "rope", rmsnorm, swiglu, no-bias decoder; the
options after `--` are what `bench_util.py torch-args` prints for the checkpoint's config, less the
script name), its weights a tessera checkpoint's model/ group (mapped as bench/check_llama_peer.py
maps ref_dump's). Every line of P is {"prompt_ids": [...]}, all of the same length; they are
completed B at a time, each batch prefilled in one forward and then decoded one token per forward
over a preallocated key/value cache (B, KVH, P + N, hs) per layer: the usual static-cache decode
(Hugging Face's StaticCache in spirit), under torch.inference_mode. No stop: N tokens each, as
tessera's --no-eos-stop. Writes {"index", "tokens"} per prompt and prints one JSON object: the
tokens generated, the seconds from the first forward to the last (the model built and loaded
before), tokens/s.
"""
import argparse
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_llama_peer  # noqa: E402
import torch_llama  # noqa: E402


def main(argv):
    sep = argv.index("--") if "--" in argv else len(argv)
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ckpt", required=True)
    p.add_argument("--prompts", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--max-tokens", type=int, required=True)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args(argv[:sep])
    m = torch_llama.parse_args(argv[sep + 1:])

    import h5py
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(a.threads)
    prompts = [json.loads(l)["prompt_ids"] for l in open(a.prompts) if l.strip()]
    P, N = len(prompts[0]), a.max_tokens
    if any(len(q) != P for q in prompts):
        sys.exit("torch_generate: the prompts must all have the same length")
    m.seq_len = max(m.seq_len, P + N)  # the rotary cache covers every position
    model = torch_llama.build(m).float().eval()
    with h5py.File(a.ckpt, "r") as f:
        weights = check_llama_peer.tessera_tensors(f["model"])
    params = dict(model.named_parameters())
    if sorted(params) != sorted(weights):
        sys.exit("torch_generate: tensors differ: %s vs %s" % (sorted(params), sorted(weights)))
    with torch.no_grad():
        for k, v in weights.items():
            params[k].copy_(torch.as_tensor(v))

    blocks = list(model.h)
    NH, KVH, hs = blocks[0].nh, blocks[0].kvh, blocks[0].hs
    head = model.wte.weight if model.lm_head is None else model.lm_head.weight

    def forward(idx, caches, pos):
        """idx (B, t) at positions pos..pos+t-1; the caches filled there; the last position's
        logits (B, V)."""
        B, t = idx.shape
        cos, sin = model.cos[:, :, pos:pos + t], model.sin[:, :, pos:pos + t]
        x = model.wte(idx)
        for blk, (ck, cv) in zip(blocks, caches):
            q, k, v = blk.qkv(blk.input_norm(x)).split([NH * hs, KVH * hs, KVH * hs], dim=2)
            q = q.view(B, t, NH, hs).transpose(1, 2)
            k = k.view(B, t, KVH, hs).transpose(1, 2)
            v = v.view(B, t, KVH, hs).transpose(1, 2)
            q = q * cos + torch_rotate_half(q) * sin
            k = k * cos + torch_rotate_half(k) * sin
            ck[:, :, pos:pos + t] = k
            cv[:, :, pos:pos + t] = v
            K, V = ck[:, :, :pos + t], cv[:, :, :pos + t]
            g = NH // KVH
            if g > 1:  # repeat_kv
                K = K[:, :, None].expand(B, KVH, g, pos + t, hs).reshape(B, NH, pos + t, hs)
                V = V[:, :, None].expand(B, KVH, g, pos + t, hs).reshape(B, NH, pos + t, hs)
            att = (q @ K.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
            if t > 1:  # the prefill: causal within the new block
                mask = torch.ones(t, pos + t, dtype=torch.bool).tril(pos)
                att = att.masked_fill(~mask, float("-inf"))
            y = (F.softmax(att, dim=-1) @ V).transpose(1, 2).reshape(B, t, NH * hs)
            x = x + blk.o_proj(y)
            x = x + blk.mlp(blk.post_norm(x))
        return F.linear(model.norm(x[:, -1]), head)[:, :model.V]

    def torch_rotate_half(x):
        h = x.shape[-1] // 2
        return torch.cat((-x[..., h:], x[..., :h]), dim=-1)

    out, tokens = [None] * len(prompts), 0
    t0 = time.perf_counter()
    with torch.inference_mode():
        for s in range(0, len(prompts), a.batch):
            chunk = torch.tensor(prompts[s:s + a.batch], dtype=torch.long)
            B = chunk.shape[0]
            caches = [(torch.empty(B, KVH, P + N, hs), torch.empty(B, KVH, P + N, hs))
                      for _ in blocks]
            nxt = forward(chunk, caches, 0).argmax(-1)
            gen = [nxt]
            for i in range(1, N):
                nxt = forward(nxt[:, None], caches, P + i - 1).argmax(-1)
                gen.append(nxt)
            gen = torch.stack(gen, 1).tolist()
            for j in range(B):
                out[s + j] = gen[j]
            tokens += B * N
    dt = time.perf_counter() - t0
    with open(a.out, "w") as f:
        for i, g in enumerate(out):
            f.write(json.dumps({"index": i, "tokens": g}) + "\n")
    print(json.dumps({"tokens": tokens, "seconds": dt, "tokens_per_s": tokens / dt,
                      "batch": a.batch, "threads": a.threads}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
