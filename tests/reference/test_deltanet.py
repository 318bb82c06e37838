"""test_deltanet.py — the Gated DeltaNet core of kernels/cpu/cpu_deltanet.c against the float64
reference of torch_deltanet.py (docs/deltanet.md). For each case (odd lengths: not a multiple of
the chunk; grouped heads; an initial state or none; packed documents, one starting exactly at a
chunk boundary):

  - the reference's chunked form equals its recurrent form, output and final state, <= 1e-10;
  - the C chunked forward's output and final state, and the C recurrent form's (from the same
    initial state), equal the reference <= 1e-5 relative (to the largest magnitude), and the
    chunked pass's final state equals the recurrent one's <= 1e-5;
  - the C backward's gradients of q, k, v, g, beta and the initial state, for the loss
    sum(out * dout) + sum(final state * dstate_out), equal the reference's autograd <= 1e-4;
  - a strong decay (alpha = e^g far below 1: the chunk's cumulative gates underflow double's
    range without harm);
  - the C op's outputs and gradients are the same bits with 1 and with 3 threads;
  - packed: the C op on packed documents equals the C op on each document alone (the first from
    the initial state, the others from zero), output, final state and gradients, <= 1e-6.

The layer around the core (src/model/deltanet_layer.c: projections, the causal convolution with
SiLU over each document, the gates, the gated RMSNorm, the output projection) against the float64
layer of torch_deltanet.py, packed documents (one shorter than the convolution's window) and not:
the output and final state <= 1e-5, dx and every parameter's gradient <= 1e-4, the same bits with
1 and 3 threads; and the decoding path: a prefill of the first half, then one row at a time with
the cache (the core's state, the convolution's last inputs) carried, equals the whole pass <= 1e-5;
and context parallelism's path: two passes (the second of 2 rows, fewer than the convolution's
K - 1), the cache carried forward and its gradient back, equal the whole pass: out <= 1e-6, dx and
every parameter's gradient <= 1e-5 (the C layer against itself).

build/tests/deltanet_dump runs the C op on stdin's inputs; the reference never calls it.
"""
import os
import subprocess
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(__file__))
import torch_deltanet as ref  # noqa: E402
from tap import Tap  # noqa: E402

BUILD = os.environ.get("BUILD", "build")
DUMP = os.path.join(os.environ.get("TSR_ROOT", "."), BUILD, "tests", "deltanet_dump")
GRADS = ("q", "k", "v", "g", "beta", "state0")

CASES = [
    dict(name="grouped heads, initial state, T=45 chunk 16", B=2, T=45, HK=2, HV=4, dk=8, dv=6,
         chunk=16, state0=True, docs=None),
    dict(name="packed documents, T=45 chunk 16", B=2, T=45, HK=1, HV=2, dk=8, dv=8, chunk=16,
         state0=True, docs=[[7, 20, 18], [32, 13]]),
    dict(name="chunk 64, T=70, no initial state", B=1, T=70, HK=2, HV=2, dk=16, dv=12, chunk=64,
         state0=False, docs=None),
    dict(name="strong decay (g down to -40), T=33 chunk 64", B=1, T=33, HK=1, HV=3, dk=4, dv=5,
         chunk=64, state0=True, docs=None, decay=20.0),
]


def inputs(c, gen):
    B, T, HK, HV, dk, dv = (c[x] for x in ("B", "T", "HK", "HV", "dk", "dv"))
    r = lambda *s: torch.randn(*s, generator=gen)  # noqa: E731
    x = dict(q=r(B, T, HK, dk), k=r(B, T, HK, dk), v=r(B, T, HV, dv),
             g=-c.get("decay", 0.5) * F.softplus(r(B, T, HV)), beta=torch.sigmoid(r(B, T, HV)),
             state0=0.5 * r(B, HV, dk, dv) if c["state0"] else torch.zeros(B, HV, dk, dv),
             dout=r(B, T, HV, dv), dstate=r(B, HV, dk, dv))
    x = {k: v.float() for k, v in x.items()}
    x["seq"] = None
    if c["docs"]:
        x["seq"] = torch.tensor([sum([[i] * n for i, n in enumerate(row)], []) for row in c["docs"]],
                                dtype=torch.int32)
    return x


LAST_RUN = {}  # the latest dump's arguments and stdin, for the thread-count check


def dump(args, blob, threads=None):
    """deltanet_dump's stdout for stdin blob, with OMP_NUM_THREADS=threads if given"""
    env = dict(os.environ, **({"OMP_NUM_THREADS": str(threads)} if threads else {}))
    LAST_RUN.update(args=args, blob=blob)
    return subprocess.run([DUMP] + args, input=blob, env=env, capture_output=True, check=True).stdout


def check_threads(tap, what):
    """the latest dump's outputs, with 1 and with 3 threads: the same bits"""
    args, blob = LAST_RUN["args"], LAST_RUN["blob"]
    same = dump(args, blob, threads=1) == dump(args, blob, threads=3)
    tap.ok(same, f"{what}: the same bits with 1 and 3 threads (forward, backward)")


def run_c(c, x, B=None, T=None, sl=(slice(None), slice(None))):
    """the C op on x (or on rows/positions sl of it): dict of its outputs"""
    B, T = B or c["B"], T or c["T"]
    hd = np.array([B, T, c["HK"], c["HV"], c["dk"], c["dv"], c["chunk"], x["seq"] is not None],
                  dtype=np.int32)
    part = lambda n: x[n][sl].contiguous()  # noqa: E731
    blob = [hd.tobytes()] + [part(n).numpy().tobytes() for n in ("q", "k", "v", "g", "beta")]
    blob += [x[n][sl[0]].contiguous().numpy().tobytes() for n in ("state0",)]
    blob += [part("dout").numpy().tobytes(), x["dstate"][sl[0]].contiguous().numpy().tobytes()]
    if x["seq"] is not None:
        blob.append(x["seq"][sl].contiguous().numpy().tobytes())
    flat = torch.from_numpy(np.frombuffer(dump([], b"".join(blob)), dtype=np.float32).copy())
    HK, HV, dk, dv = c["HK"], c["HV"], c["dk"], c["dv"]
    shapes = [("out", (B, T, HV, dv)), ("state", (B, HV, dk, dv)), ("out_r", (B, T, HV, dv)),
              ("state_r", (B, HV, dk, dv)), ("q", (B, T, HK, dk)), ("k", (B, T, HK, dk)),
              ("v", (B, T, HV, dv)), ("g", (B, T, HV)), ("beta", (B, T, HV)),
              ("state0", (B, HV, dk, dv))]
    out, at = {}, 0
    for name, shape in shapes:
        n = int(np.prod(shape))
        out[name] = flat[at: at + n].reshape(shape).double()
        at += n
    assert at == flat.numel(), f"deltanet_dump wrote {flat.numel()} floats, expected {at}"
    return out


def rel(a, b):
    return ((a.double() - b.double()).abs().max() / b.double().abs().max().clamp_min(1e-30)).item()


def reference(c, x):
    """float64: the recurrent and chunked forms, and autograd's gradients of the recurrent one"""
    leaves = {n: x[n].double().requires_grad_(True) for n in GRADS}
    args = [leaves[n] for n in ("q", "k", "v", "g", "beta", "state0")]
    out, S = ref.packed(ref.recurrent, *args, seq=x["seq"])
    ((out * x["dout"].double()).sum() + (S * x["dstate"].double()).sum()).backward()
    with torch.no_grad():
        out_c, S_c = ref.packed(ref.chunked, *args, seq=x["seq"], chunk=c["chunk"])
    return dict(out=out.detach(), state=S.detach(), out_c=out_c, state_c=S_c,
                grads={n: leaves[n].grad for n in GRADS})


def one_by_one(c, x):
    """the C op on each document of each row alone: outputs and gradients joined"""
    rows = []
    for b, docs in enumerate(c["docs"]):
        runs, t0 = [], 0
        for i, n in enumerate(docs):
            y = dict(x, seq=None)
            if i > 0:
                y["state0"] = torch.zeros_like(x["state0"])
            if i < len(docs) - 1:
                y["dstate"] = torch.zeros_like(x["dstate"])
            runs.append(run_c(c, y, B=1, T=n, sl=(slice(b, b + 1), slice(t0, t0 + n))))
            t0 += n
        row = {k: torch.cat([r[k] for r in runs], 1) for k in ("out", "q", "k", "v", "g", "beta")}
        row["state"], row["state0"] = runs[-1]["state"], runs[0]["state0"]
        rows.append(row)
    return {k: torch.cat([r[k] for r in rows], 0) for k in rows[0]}


def check_case(tap, c):
    gen = torch.Generator().manual_seed(1000 + CASES.index(c))
    x = inputs(c, gen)
    R, C = reference(c, x), run_c(c, x)
    check_threads(tap, c["name"])
    e = max(rel(R["out_c"], R["out"]), rel(R["state_c"], R["state"]))
    tap.ok(e <= 1e-10, f"{c['name']}: reference chunked == recurrent (out, state) {e:.2e} <= 1e-10")
    for k, rk, what in (("out", "out", "chunked out"), ("state", "state", "chunked final state"),
                        ("out_r", "out", "recurrent out"), ("state_r", "state", "recurrent final state")):
        e = rel(C[k], R[rk])
        tap.ok(e <= 1e-5, f"{c['name']}: C {what} vs float64 {e:.2e} <= 1e-5")
    e = rel(C["state"], C["state_r"])
    tap.ok(e <= 1e-5, f"{c['name']}: C chunked final state == C recurrent state {e:.2e} <= 1e-5")
    for n in GRADS:
        e = rel(C[n], R["grads"][n])
        tap.ok(e <= 1e-4, f"{c['name']}: C d{n} vs float64 autograd {e:.2e} <= 1e-4")
    if not c["docs"]:
        return
    O = one_by_one(c, x)
    e = max(rel(C["out"], O["out"]), rel(C["state"], O["state"]))
    tap.ok(e <= 1e-6, f"{c['name']}: packed == documents one by one (out, final state) {e:.2e}")
    e = max(rel(C[n], O[n]) for n in GRADS)
    tap.ok(e <= 1e-6, f"{c['name']}: packed == documents one by one (every gradient) {e:.2e}")


LAYERS = [
    dict(name="layer, packed documents (2 + 3 + 10 + 6, 10 + 6 + 5), T=21 chunk 8", B=2, T=21, C=12,
         HK=1, HV=2, dk=4, dv=3, K=4, chunk=8, docs=[[2, 3, 10, 6], [10, 6, 5]]),
    dict(name="layer, grouped heads, T=19 chunk 64", B=1, T=19, C=10, HK=2, HV=4, dk=4, dv=5, K=4,
         chunk=64, docs=None),
]


def layer_inputs(c, gen):
    B, T, C, HK, HV, dk, dv, K = (c[x] for x in ("B", "T", "C", "HK", "HV", "dk", "dv", "K"))
    r = lambda *s: torch.randn(*s, generator=gen)  # noqa: E731
    cd, vd = 2 * HK * dk + HV * dv, HV * dv
    P = dict(wqkv=0.4 * r(cd, C), wz=0.4 * r(vd, C), wb=0.4 * r(HV, C), wa=0.4 * r(HV, C),
             conv=0.5 * r(cd, K), dt_bias=0.5 * r(HV),
             a_log=torch.log(1 + 15 * torch.rand(HV, generator=gen)), normw=1 + 0.2 * r(dv),
             wo=0.3 * r(C, vd))
    x = dict(x=r(B, T, C), dout=r(B, T, C))
    x["seq"] = None
    if c["docs"]:
        x["seq"] = torch.tensor([sum([[i] * n for i, n in enumerate(row)], []) for row in c["docs"]],
                                dtype=torch.int32)
    return {k: v.float() for k, v in P.items()}, x


def run_layer_c(c, P, x):
    B, T, C, HK, HV, dk, dv = (c[k] for k in ("B", "T", "C", "HK", "HV", "dk", "dv"))
    hd = np.array([B, T, C, HK, HV, dk, dv, c["K"], c["chunk"], x["seq"] is not None], dtype=np.int32)
    blob = [hd.tobytes(), x["x"].numpy().tobytes()] + [P[n].numpy().tobytes() for n in ref.PARAMS]
    blob.append(x["dout"].numpy().tobytes())
    if x["seq"] is not None:
        blob.append(x["seq"].numpy().tobytes())
    flat = torch.from_numpy(np.frombuffer(dump(["layer"], b"".join(blob)), dtype=np.float32).copy())
    flat = flat.double()
    shapes = [("out", (B, T, C)), ("state", (B, HV, dk, dv)), ("x", (B, T, C))]
    shapes += [(n, tuple(P[n].shape)) for n in ref.PARAMS]
    shapes += [("out_inc", (B, T, C)), ("state_inc", (B, HV, dk, dv))]
    shapes += [("out_split", (B, T, C)), ("x_split", (B, T, C))]
    shapes += [(n + "_split", tuple(P[n].shape)) for n in ref.PARAMS]
    out, at = {}, 0
    for name, shape in shapes:
        n = int(np.prod(shape))
        out[name] = flat[at: at + n].reshape(shape)
        at += n
    assert at == flat.numel(), f"deltanet_dump layer wrote {flat.numel()} floats, expected {at}"
    return out


def check_layer(tap, c):
    gen = torch.Generator().manual_seed(2000 + LAYERS.index(c))
    P, x = layer_inputs(c, gen)
    leaves = {n: P[n].double().requires_grad_(True) for n in ref.PARAMS}
    leaves["x"] = x["x"].double().requires_grad_(True)
    out, S = ref.layer_packed(leaves["x"], leaves, x["seq"], HK=c["HK"], HV=c["HV"], dk=c["dk"],
                              dv=c["dv"], form=ref.recurrent)
    (out * x["dout"].double()).sum().backward()
    C = run_layer_c(c, P, x)
    check_threads(tap, c["name"])
    e = max(rel(C["out"], out.detach()), rel(C["state"], S.detach()))
    tap.ok(e <= 1e-5, f"{c['name']}: C out and final state vs float64 {e:.2e} <= 1e-5")
    for n in ("x",) + ref.PARAMS:
        e = rel(C[n], leaves[n].grad)
        tap.ok(e <= 1e-4, f"{c['name']}: C d{n} vs float64 autograd {e:.2e} <= 1e-4")
    e = max(rel(C["out_inc"], C["out"]), rel(C["state_inc"], C["state"]))
    tap.ok(e <= 1e-5, f"{c['name']}: C prefill then a row at a time with the cache == the whole "
           f"pass (out, final state) {e:.2e} <= 1e-5")
    # two passes (rows 0..T-3, then the last 2, fewer than the convolution's K - 1), the cache
    # carried forward and its gradient back (context parallelism's way, dn_ring.c)
    e = rel(C["out_split"], C["out"])
    tap.ok(e <= 1e-6, f"{c['name']}: C two passes with the cache carried == the whole pass (out) "
           f"{e:.2e} <= 1e-6")
    e = max(rel(C[n + "_split"], C[n]) for n in ("x",) + ref.PARAMS)
    tap.ok(e <= 1e-5, f"{c['name']}: C two passes with the cache's gradient carried back == the "
           f"whole pass (dx and every parameter's gradient) {e:.2e} <= 1e-5")


def main():
    torch.set_num_threads(1)
    count = lambda c: 13 + (2 if c["docs"] else 0)  # noqa: E731
    tap = Tap(sum(count(c) for c in CASES) + 15 * len(LAYERS))
    if not os.access(DUMP, os.X_OK):
        tap.fail_until(tap.plan, f"{DUMP} not built (make)")
        return tap.status()
    tap.run_cases(CASES, count, lambda c: check_case(tap, c))
    tap.run_cases(LAYERS, lambda c: 15, lambda c: check_layer(tap, c))
    return tap.status()


if __name__ == "__main__":
    sys.exit(main())
