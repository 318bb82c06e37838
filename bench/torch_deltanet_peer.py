"""torch_deltanet_peer.py — the PyTorch peer of the Gated DeltaNet core's benchmarks: the same
chunked (WY/UT) algorithm, its backward by autograd.

    torch_deltanet_peer.py B T HK HV DK DV CHUNK REPS THREADS [DEVICE [FORM]]

DEVICE cpu (default): tests/reference/torch_deltanet.py's chunked(), float32, eager (Debian's
torch 1.13 has no torch.compile), THREADS threads: bench/deltanet_bench.c's peer
(bench/deltanet_vs_torch.sh). DEVICE cuda: bench/gpu/deltanet_gpu.c's peer (bench/gpu/
deltanet_gpu.sh, the device tool's `deltanet` stage): q, k, v bf16, g and beta fp32, the chunk's
products and the state in fp32, in the form PyTorch compiles well (FORM peer, the default on cuda):
every chunk's local part (the L2 norms, K K^T, the triangular solve, Q K^T) at once, then one
chunk step (the state's use and update) per chunk, each part under torch.compile where torch has
it. FORM peer on the cpu runs that same code eager in fp32 (tests/gpu/test_deltanet_bench.sh
checks it against chunked()). Prints one JSON object: the shape, the median forward and backward
seconds of REPS runs after two warm-ups (the compilation in the first), whether compiled."""
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference"))
import torch_deltanet as ref  # noqa: E402


def intra(q, k, v, g, beta, chunk):
    """every chunk's local part, fp32, (B, H, chunks, chunk, .): the decayed queries and keys, the
    UT transform's U and W, the masked Q K^T, each chunk's total decay"""
    q, k, v, g, beta = ref._heads(q, k, v, g, beta, torch.float32)
    T, pad = k.shape[2], (-k.shape[2]) % chunk
    if pad:
        q, k, v = (torch.nn.functional.pad(x, (0, 0, 0, pad)) for x in (q, k, v))
        g, beta = (torch.nn.functional.pad(x, (0, pad)) for x in (g, beta))
    B, H, Tp, dv = v.shape
    q, k, v = (x.reshape(B, H, Tp // chunk, chunk, -1) for x in (q, k, v))
    g, beta = (x.reshape(B, H, Tp // chunk, chunk) for x in (g, beta))
    gam = g.cumsum(-1)
    lower = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).tril()
    decay = torch.where(lower, gam[..., :, None] - gam[..., None, :], float("-inf")).exp()
    A = ((beta[..., None] * k) @ k.transpose(-1, -2) * decay).tril(-1)
    eye = torch.eye(chunk, dtype=q.dtype, device=q.device)
    rhs = torch.cat([beta[..., None] * v, beta[..., None] * k * gam.exp()[..., None]], -1)
    X = torch.linalg.solve_triangular(eye + A, rhs, upper=False, unitriangular=True)
    qk = (q @ k.transpose(-1, -2)) * decay
    kd = k * (gam[..., -1:] - gam).exp()[..., None]
    return q * gam.exp()[..., None], kd, X[..., :dv], X[..., dv:], qk, gam[..., -1].exp()


def step(S, qg, kd, u, w, qk, last):
    """one chunk: its output from the state S entering it, and the state leaving it"""
    vnew = u - w @ S
    out = qg @ S + qk @ vnew
    return out, S * last[..., None, None] + kd.transpose(-1, -2) @ vnew


def peer(q, k, v, g, beta, chunk, fi, fs):
    """the chunked form (one document a row, zero initial state): out (B, T, HV, dv), final state"""
    qg, kd, u, w, qk, last = fi(q, k, v, g, beta, chunk)
    B, H, n = qg.shape[:3]
    S = torch.zeros(B, H, kd.shape[-1], u.shape[-1], dtype=torch.float32, device=qg.device)
    outs = []
    for c in range(n):
        o, S = fs(S, qg[:, :, c], kd[:, :, c], u[:, :, c], w[:, :, c], qk[:, :, c], last[:, :, c])
        outs.append(o)
    out = torch.stack(outs, 2).reshape(B, H, n * chunk, -1)[:, :, : q.shape[1]]
    return out.transpose(1, 2), S


def inputs(B, T, HK, HV, dk, dv, dev, dt):
    gen = torch.Generator().manual_seed(1)
    u = lambda lo, hi, *s: lo + (hi - lo) * torch.rand(*s, generator=gen)  # noqa: E731
    x = dict(q=u(-1, 1, B, T, HK, dk).to(dt), k=u(-1, 1, B, T, HK, dk).to(dt),
             v=u(-1, 1, B, T, HV, dv).to(dt), g=u(-1, 0, B, T, HV), beta=u(0, 1, B, T, HV))
    return {n: t.to(dev) for n, t in x.items()}, u(-1, 1, B, T, HV, dv).to(dev)


def main():
    if len(sys.argv) not in (10, 11, 12):
        sys.exit("usage: torch_deltanet_peer.py B T HK HV DK DV CHUNK REPS THREADS [cpu|cuda [ref|peer]]")
    B, T, HK, HV, dk, dv, chunk, reps, threads = map(int, sys.argv[1:10])
    dev = sys.argv[10] if len(sys.argv) > 10 else "cpu"
    form = sys.argv[11] if len(sys.argv) > 11 else ("peer" if dev == "cuda" else "ref")
    if dev not in ("cpu", "cuda") or form not in ("ref", "peer"):
        sys.exit("torch_deltanet_peer: DEVICE cpu or cuda, FORM ref or peer")
    if dev == "cuda" and not torch.cuda.is_available():
        print("torch_deltanet_peer: no CUDA device: SKIP")
        sys.exit(77)
    torch.set_num_threads(threads)
    compiled = dev == "cuda" and form == "peer" and hasattr(torch, "compile")
    fi, fs = (torch.compile(intra), torch.compile(step)) if compiled else (intra, step)
    x, dout = inputs(B, T, HK, HV, dk, dv, dev, torch.bfloat16 if dev == "cuda" else torch.float32)
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    tf, tb = [], []
    for r in range(reps + 2):
        leaves = {n: t.clone().requires_grad_(True) for n, t in x.items()}
        sync()
        t0 = time.perf_counter()
        if form == "ref":
            out, _ = ref.chunked(*leaves.values(), None, chunk=chunk, dtype=torch.float32)
        else:
            out, _ = peer(*leaves.values(), chunk, fi, fs)
        sync()
        t1 = time.perf_counter()
        out.backward(dout)
        sync()
        t2 = time.perf_counter()
        if r >= 2:
            tf.append(t1 - t0)
            tb.append(t2 - t1)
    print(json.dumps(dict(B=B, T=T, HK=HK, HV=HV, dk=dk, dv=dv, chunk=chunk, threads=threads,
                          device=dev, form=form, compiled=compiled, torch=torch.__version__,
                          forward_s=statistics.median(tf), backward_s=statistics.median(tb))))


if __name__ == "__main__":
    main()
