"""torch_deltanet_peer.py — the PyTorch peer of bench/deltanet_bench.c: the same chunked (WY/UT)
Gated DeltaNet algorithm (tests/reference/torch_deltanet.py's chunked(), float32, eager: Debian's
torch 1.13 has no torch.compile), its backward by autograd, on the CPU.

    torch_deltanet_peer.py B T HK HV DK DV CHUNK REPS THREADS

Prints one JSON object like deltanet_bench's: the median forward and backward seconds of REPS
runs after one warm-up."""
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference"))
import torch_deltanet as ref  # noqa: E402


def main():
    B, T, HK, HV, dk, dv, chunk, reps, threads = map(int, sys.argv[1:10])
    torch.set_num_threads(threads)
    gen = torch.Generator().manual_seed(1)
    u = lambda lo, hi, *s: lo + (hi - lo) * torch.rand(*s, generator=gen)  # noqa: E731
    x = dict(q=u(-1, 1, B, T, HK, dk), k=u(-1, 1, B, T, HK, dk), v=u(-1, 1, B, T, HV, dv),
             g=u(-1, 0, B, T, HV), beta=u(0, 1, B, T, HV))
    dout = u(-1, 1, B, T, HV, dv)
    tf, tb = [], []
    for r in range(reps + 1):
        leaves = {n: t.clone().requires_grad_(True) for n, t in x.items()}
        t0 = time.perf_counter()
        out, _ = ref.chunked(*leaves.values(), None, chunk=chunk, dtype=torch.float32)
        t1 = time.perf_counter()
        out.backward(dout)
        t2 = time.perf_counter()
        if r:
            tf.append(t1 - t0)
            tb.append(t2 - t1)
    print(json.dumps(dict(B=B, T=T, HK=HK, HV=HV, dk=dk, dv=dv, chunk=chunk, threads=threads,
                          forward_s=statistics.median(tf), backward_s=statistics.median(tb))))


if __name__ == "__main__":
    main()
