#!/usr/bin/python3
"""check_moe_peer.py — is bench/torch_moe.py the model tessera trains? (a check, not a timing)

  build/tests/ref_dump CONFIG DUMP.h5 [KEY=VALUE ...]      (tessera: weights, batch, step-0 grads)
  /usr/bin/python3 bench/check_moe_peer.py DUMP.h5 TORCH_MOE_OPTIONS...

bench/check_llama_peer.py's comparison (the same tolerances, float64 torch against tessera's fp32
step 0: mean language-model loss and every parameter gradient, router losses included) for a model
whose layers are all mixtures of experts (model.moe_every = 1): tessera's stacked expert tensors
routerw (L, E, C), expw1 (L, E, 2FE, C) and expw2 (L, E, C, FE) are split into torch_moe.py's
per-layer router and per-expert Linear weights; the other tensors map as for torch_llama.py.
"""
import os
import sys

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


def main(argv):
    return check_llama_peer.compare(argv, torch_moe, tessera_tensors, "check_moe_peer")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
