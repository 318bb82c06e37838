#!/usr/bin/python3
"""check_moe_peer.py — is bench/torch_moe.py the model tessera trains? (a check, not a timing)

  build/tests/ref_dump CONFIG DUMP.h5 [KEY=VALUE ...]      (tessera: weights, batch, step-0 grads)
  /usr/bin/python3 bench/check_moe_peer.py DUMP.h5 TORCH_MOE_OPTIONS...

bench/check_llama_peer.py's comparison (the same tolerances, float64 torch against tessera's fp32
step 0: mean language-model loss and every parameter gradient, router losses included) for a model
whose layers are all mixtures of experts (model.moe_every = 1): tessera's stacked expert tensors
routerw (L, E, C), expw1 (L, E, 2FE, C) and expw2 (L, E, C, FE) are split into torch_moe.py's
per-layer router and per-expert Linear weights; the other tensors map as for torch_llama.py.
When the dump has /step0/moe (per MoE layer: the aux and z losses weighted by each microbatch's
share of the counted targets and summed, then the tokens each expert received), torch_moe.py's
are compared with it too: the losses within 1e-5 relative, the tokens per expert exactly (the
same routing; every token reaching its K experts).
"""
import os
import sys
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_llama_peer  # noqa: E402
import torch_moe  # noqa: E402

EXPERT = {"expw1": "gate_up.weight", "expw2": "down_proj.weight"}


def tessera_tensors(group):
    """{torch name: array} of one /params-like group, experts split per layer and per expert."""
    out, rest = {}, {}
    for name, ds in group.items():
        if name == "routerw":
            arr = ds[()]
            out.update(("h.%d.ffn.router.weight" % l, arr[l]) for l in range(arr.shape[0]))
        elif name in EXPERT:
            arr = ds[()]
            out.update(("h.%d.ffn.experts.%d.%s" % (l, e, EXPERT[name]), arr[l, e])
                       for l in range(arr.shape[0]) for e in range(arr.shape[1]))
        else:
            rest[name] = ds
    out.update(check_llama_peer.tessera_tensors(rest))
    return out


class RouterStats:
    """torch_moe.py's router statistics of step 0, summed as tessera's trainer sums them."""
    TOL = 1e-5  # relative; fp32 sums over 512 rows against float64

    def __init__(self):
        self.acc = None

    def microbatch(self, model, targets, counted):
        share = float((targets >= 0).sum()) / counted
        rows = []
        for blk in model.h:
            aux, z, counts = blk.ffn.stats[-1]
            rows.append([share * aux, share * z] + counts)
            blk.ffn.stats.clear()
        self.acc = rows if self.acc is None else [
            [x + y for x, y in zip(r, s)] for r, s in zip(self.acc, rows)]

    def check(self, step0):
        if "moe" not in step0:
            print("router statistics: the dump has no /step0/moe, not compared")
            return True
        ref, ok = step0["moe"], True
        for l, (got, want) in enumerate(zip(self.acc, ref)):
            for j, what in ((0, "aux"), (1, "z")):
                if not abs(got[j] - want[j]) <= self.TOL * abs(want[j]):
                    ok = False
                    print("layer %d %s: torch %.8g, tessera %.8g  FAIL" % (l, what, got[j], want[j]))
            if [int(x) for x in want[2:]] != got[2:]:
                ok = False
                print("layer %d tokens per expert: torch %s, tessera %s  FAIL" % (
                    l, got[2:], [int(x) for x in want[2:]]))
        print("router statistics: %d layers, aux %s, z %s, tokens per expert %s%s" % (
            len(ref), " ".join("%.6f" % r[0] for r in ref), " ".join("%.4f" % r[1] for r in ref),
            "equal" if ok else "DIFFER", "" if len(self.acc) == len(ref) else " (layer counts differ)"))
        return ok and len(self.acc) == len(ref)


def main(argv):
    stats = RouterStats()
    build = torch_moe.build

    def build_recording(a):
        model = build(a)
        for blk in model.h:
            blk.ffn.record = True
        return model

    peer = types.SimpleNamespace(parse_args=torch_moe.parse_args, build=build_recording)
    return check_llama_peer.compare(argv, peer, tessera_tensors, "check_moe_peer", stats)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
