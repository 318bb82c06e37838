#!/usr/bin/env python3
"""hybrid_torch.py - the PyTorch peer of bench/gpu/hybrid_step.sh: transformers'
Qwen3NextForCausalLM at the same sizes as tessera's hybrid (layers 1 .. L-1 linear_attention, the
last full_attention, dense MLPs, partial rotary 0.25), bf16 weights on the device, AdamW, one
sequence batch of random tokens; its Gated DeltaNet is the flash-linear-attention kernels where
installed, else transformers' own torch chunked form (reported as fast_path).
Usage: hybrid_torch.py C L T MB V HK HV DK DV NH KVH F STEPS DEVICE
Prints one JSON line {"step_s": the median of steps 3..STEPS (seconds), "torch", "transformers",
"device", "fast_path"}; exit 77 (skip) without transformers' Qwen3Next or the device, 2 on bad
arguments."""
import json
import statistics
import sys
import time


def skip(why):
    print(json.dumps({"skip": why}))
    sys.exit(77)


def model_of(a, dev):
    import torch
    from transformers import Qwen3NextConfig, Qwen3NextForCausalLM
    C, L, T, MB, V, HK, HV, DK, DV, NH, KVH, F = a
    cfg = Qwen3NextConfig(vocab_size=V, hidden_size=C, intermediate_size=F, num_hidden_layers=L,
                          num_attention_heads=NH, num_key_value_heads=KVH, head_dim=C // NH,
                          linear_num_key_heads=HK, linear_num_value_heads=HV,
                          linear_key_head_dim=DK, linear_value_head_dim=DV,
                          linear_conv_kernel_dim=4, mlp_only_layers=list(range(L)),
                          layer_types=["linear_attention"] * (L - 1) + ["full_attention"],
                          partial_rotary_factor=0.25, max_position_embeddings=max(T, 4096))
    dtype = torch.bfloat16 if dev == "cuda" else torch.float32
    return Qwen3NextForCausalLM(cfg).to(device=dev, dtype=dtype)


def main():
    if len(sys.argv) != 15:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    try:
        a, steps, dev = [int(x) for x in sys.argv[1:13]], int(sys.argv[13]), sys.argv[14]
    except ValueError:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    try:
        import torch
        import transformers
        from transformers.models.qwen3_next import modeling_qwen3_next as mq
    except Exception as e:  # noqa: BLE001 - any import failure is a skip
        skip(f"no transformers with Qwen3Next: {e}")
    if dev == "cuda" and not torch.cuda.is_available():
        skip("no CUDA device")
    model = model_of(a, dev)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randint(0, a[4], (a[3], a[2]), device=dev)
    times = []
    for _ in range(steps):
        if dev == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        model(input_ids=x, labels=x).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if dev == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    print(json.dumps({"step_s": statistics.median(times[2:]), "torch": torch.__version__,
                      "transformers": transformers.__version__, "device": dev,
                      "fast_path": bool(getattr(mq, "is_fast_path_available", False))}))


if __name__ == "__main__":
    main()
