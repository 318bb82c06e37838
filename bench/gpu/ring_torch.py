#!/usr/bin/env python3
"""ring_torch.py — the PyTorch peer of ring_bench (bench/gpu/ring_bench.c; the device tool's `ring`
stage, tests/gpu/device.sh): PyTorch's fused causal attention (scaled_dot_product_attention, its
flash backend where it has one) on one GPU at the shape ring_bench times, Llama 3.1 8B's heads (32
query heads on 8 key/value heads of 128) over one sequence of TL positions (default 8192), bf16.

    ring_torch.py [TL [REPS [W]]]
        (--cpu: the script's logic on the CPU, tiny TL; times mean nothing)

Prints one row in ring_bench's table: forward and backward ms and TFLOP/s, counted as ring_bench
counts the plain kernel (the TL^2 / 2 pairs a causal mask lets through, 4 hs FLOPs a pair and head
forward, 2.5 times that backward); the backward's time is a forward + backward less a forward.
With W (issue 67; ring_bench's W): a second row, the causal sliding window of W keys, counted as
ring_bench counts its band (W TL - W (W - 1) / 2 pairs): torch's flex_attention with a
sliding-window block mask, compiled (torch >= 2.5: its blocks outside the band skipped, as
tessera's), else scaled_dot_product_attention with an explicit boolean mask (every block
computed), the row naming which.
ATT_HEADS=NH/KVH/HS (issue 67; ring_bench's): other heads, e.g. Gemma 3 4B's 8/4/256; the rows
then name hs, as ring_bench's do.
Exit 77 (SKIP) without a CUDA device or without torch."""
import os
import re
import sys
import time

NH, KVH, HS = 32, 8, 128
HEADS = os.environ.get("ATT_HEADS", "")
if HEADS:
    m = re.fullmatch(r"(\d+)/(\d+)/(\d+)", HEADS)
    if not m or int(m[2]) < 1 or int(m[1]) % int(m[2]) or int(m[3]) not in (32, 64, 128, 256):
        sys.exit(f"ring_torch: ATT_HEADS='{HEADS}': expected NH/KVH/HS, KVH dividing NH, hs 32, "
                 "64, 128 or 256")
    NH, KVH, HS = (int(x) for x in m.groups())
HS_TAG = f", hs {HS}" if HS != 128 else ""  # as ring_bench names its rows


def main(argv):
    cpu = "--cpu" in argv
    args = [a for a in argv if a != "--cpu"]
    tl = int(args[0]) if args else (256 if cpu else 8192)
    reps = int(args[1]) if len(args) > 1 else 5
    win = int(args[2]) if len(args) > 2 else 0
    if tl < 128 or tl % 128 or reps < 1 or (len(args) > 2 and not 1 <= win <= tl):
        print("usage: ring_torch.py [TL (a multiple of 128) [REPS [W (1..TL)]]] [--cpu]",
              file=sys.stderr)
        return 1
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        print("ring_torch: no torch: SKIP")
        return 77
    if not cpu and not torch.cuda.is_available():
        print("ring_torch: no CUDA device: SKIP")
        return 77
    dev, dt = ("cpu", torch.float32) if cpu else ("cuda", torch.bfloat16)
    g = torch.Generator(device=dev).manual_seed(1)
    q = torch.rand(1, NH, tl, HS, device=dev, dtype=dt, generator=g) * 2 - 1
    k = torch.rand(1, KVH, tl, HS, device=dev, dtype=dt, generator=g) * 2 - 1
    v = torch.rand(1, KVH, tl, HS, device=dev, dtype=dt, generator=g) * 2 - 1
    dout = torch.rand(1, NH, tl, HS, device=dev, dtype=dt, generator=g) * 2 - 1
    q, k, v = (x.requires_grad_() for x in (q, k, v))

    sdpa = getattr(F, "scaled_dot_product_attention", None)
    if sdpa is None and not cpu:
        print(f"ring_torch: torch {torch.__version__} has no scaled_dot_product_attention: SKIP")
        return 77

    gqa = [sdpa is not None]  # SDPA's own GQA (enable_gqa, torch >= 2.5) until it is refused

    def attend():
        if gqa[0]:
            try:
                return sdpa(q, k, v, is_causal=True, enable_gqa=True)
            except TypeError:
                gqa[0] = False
        kk, vv = (x.repeat_interleave(NH // KVH, 1) for x in (k, v))  # the key/value heads repeated
        if sdpa is not None:
            return sdpa(q, kk, vv, is_causal=True)
        s = (q @ kk.transpose(-1, -2)) / HS ** 0.5  # --cpu on an old torch: the plain maths
        mask = torch.ones(tl, tl, dtype=torch.bool, device=dev).tril()
        return s.masked_fill(~mask, float("-inf")).softmax(-1) @ vv

    def timed(backward, attend=attend):
        def once():
            out = attend()
            if backward:
                out.backward(dout)
        once()  # warm-up (kernel selection, allocations)
        if not cpu:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(reps):
            once()
        if not cpu:
            torch.cuda.synchronize()
        return (time.perf_counter() - t0) * 1e3 / reps

    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        ctx = sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]) \
            if not cpu else sdpa_kernel([SDPBackend.MATH])
        backend = "flash or memory-efficient" if not cpu else "math (CPU)"
    except ImportError:  # torch < 2.3: its own choice
        import contextlib
        ctx, backend = contextlib.nullcontext(), "torch's choice" if sdpa else "none: plain maths"
    with ctx:
        mf = timed(False)
        mb = max(timed(True) - mf, 1e-9)
    ff = 4.0 * HS * NH * tl * tl / 2.0
    fb = 2.5 * ff
    name = torch.cuda.get_device_name(0) if not cpu else "CPU"
    print(f"ring_torch: {name}, torch {torch.__version__}, scaled_dot_product_attention "
          f"({backend}{', enable_gqa' if gqa[0] else ', key/value heads repeated'}), "
          f"{NH} heads on {KVH}, hs {HS}, {tl} positions, {reps} reps")
    print(f"| PyTorch SDPA, T = {tl}{HS_TAG} | {mf:.2f} | {ff / (mf * 1e9):.1f} | {mb:.2f} | "
          f"{fb / (mb * 1e9):.1f} | (peer) |")
    if win:
        attend_w, how = window_attention(torch, F, sdpa, q, k, v, tl, win, cpu)
        with ctx:
            mf = timed(False, attend_w)
            mb = max(timed(True, attend_w) - mf, 1e-9)
        ff = 4.0 * HS * NH * (win * tl - win * (win - 1) / 2.0)  # the band's pairs
        fb = 2.5 * ff
        print(f"| PyTorch {how}, sliding window W = {win}, T = {tl}{HS_TAG} | {mf:.2f} | "
              f"{ff / (mf * 1e9):.1f} | {mb:.2f} | {fb / (mb * 1e9):.1f} | (peer) |")
    return 0


def window_attention(torch, F, sdpa, q, k, v, tl, win, cpu):
    """The causal sliding window of win keys (query i sees keys i - win + 1 .. i) as torch runs it
    best here: flex_attention with its block mask, compiled (torch >= 2.5, a GPU), else SDPA with
    an explicit boolean mask (or, without SDPA, the plain maths). Returns (attend, its name)."""
    dev = q.device
    if not cpu:
        try:
            from torch.nn.attention.flex_attention import create_block_mask, flex_attention

            def band(b, h, qi, kv):
                return (qi >= kv) & (qi - kv < win)
            bm = create_block_mask(band, None, None, tl, tl, device=dev)
            fa = torch.compile(flex_attention)
            return (lambda: fa(q, k, v, block_mask=bm, enable_gqa=True),
                    "flex_attention (sliding-window block mask, compiled)")
        except (ImportError, TypeError):
            pass
    i = torch.arange(tl, device=dev)
    mask = (i[:, None] >= i[None, :]) & (i[:, None] - i[None, :] < win)

    def attend():
        kk, vv = (x.repeat_interleave(NH // KVH, 1) for x in (k, v))
        if sdpa is not None:
            return sdpa(q, kk, vv, attn_mask=mask)
        s = (q @ kk.transpose(-1, -2)) / HS ** 0.5
        return s.masked_fill(~mask, float("-inf")).softmax(-1) @ vv
    how = "SDPA, explicit boolean mask" if sdpa is not None else "plain maths, boolean mask"
    return attend, how


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
